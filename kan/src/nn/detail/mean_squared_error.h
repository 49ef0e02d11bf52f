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

/// The node's arithmetic, for callers without autograd (network_node.h); contiguous float or
/// double CPU tensors of one shape and dtype. The mean, summed in double, rounded to pred's dtype.
double squared_error_mean(const at::Tensor& pred, const at::Tensor& labels);
/// Its gradient in pred times grad_loss: 2 grad_loss (pred - labels) / n, in pred's dtype.
at::Tensor squared_error_gradient(const at::Tensor& pred, const at::Tensor& labels,
                                  double grad_loss);

} // namespace kan::detail
