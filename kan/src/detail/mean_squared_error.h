#pragma once
// The MSE loss mean((pred - labels)^2) as one autograd node on the CPU: on a small model the
// loss's three tensor operations and their backward (eight more) are a tenth of a step.

#include <ATen/core/Tensor.h>

namespace kan::detail {

/// mean((pred - labels)^2) over every element. Differentiable once in pred and labels. One node
/// for contiguous float and double CPU tensors of one shape and dtype (the sum in double);
/// elsewhere ATen's operations (broadcasting, as they do).
at::Tensor mean_squared_error(const at::Tensor& pred, const at::Tensor& labels);

} // namespace kan::detail
