#pragma once
// An MLP's MSE objective and its gradients on the CPU without autograd. Autograd's backward of
// SiLU computes the sigmoid again, sums each bias gradient through its own node and accumulates
// every gradient through the engine; here the forward keeps what the backward needs (each hidden
// layer's output and, for SiLU, its sigmoid), the activation's derivative is one host pass
// without transcendental functions, and the products are MKL's as they are on autograd's path.

#include "kan/nn/mlp.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace kan::detail {

/// The loss, rounded to x's dtype, and the gradients of every layer's weight and bias, in that
/// order (weight (d_{l+1}, d_l), bias (d_{l+1}), contiguous, x's dtype).
struct MlpObjective {
  double loss = 0;
  std::vector<at::Tensor> grads;
};

/// mean((mlp(x) - labels)^2) for the MLP of `weights` (d_{l+1}, d_l) and `biases` (d_{l+1}) with
/// `activation` after every layer but the last; x (N, d_0) with N >= 1 and labels (N, d_L), all
/// float32 or float64 tensors of one dtype on the CPU (the caller checks). `buffers` holds the
/// evaluation's large tensors from one call to the next (empty at first; any shape or dtype).
MlpObjective mlp_objective(const at::Tensor& x, const at::Tensor& labels,
                           const std::vector<at::Tensor>& weights,
                           const std::vector<at::Tensor>& biases, Activation activation,
                           std::vector<at::Tensor>& buffers);

} // namespace kan::detail
