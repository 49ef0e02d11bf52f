#pragma once
// The MSE loss mean((pred - labels)^2) as one autograd node on the CPU: the loss's three tensor
// operations and their backward's eight would be 11 of the 81 operations of an evaluation of the
// toy model's LBFGS step, where a small model's time goes to such fixed costs.

#include <ATen/core/Tensor.h>

namespace kan::detail {

/// mean((pred - labels)^2) over every element. Differentiable once in pred and labels. One node
/// for contiguous float and double CPU tensors of one shape and dtype (the sum in double);
/// elsewhere ATen's operations (broadcasting, as they do).
at::Tensor mean_squared_error(const at::Tensor& pred, const at::Tensor& labels);

} // namespace kan::detail
