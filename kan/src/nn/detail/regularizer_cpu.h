#pragma once
// The regulariser's sample terms of a network's layers (regularization.cpp) from the fused
// backend's per-edge sums, as one autograd node computed in float64 loops on the CPU. The tensor
// formulation costs about 85 ATen operations forward and 150 backward per layer, which on small
// models take far longer than the arithmetic.

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace kan::detail {

/// The sum over layers of lamb_l1 * sum(score) + lamb_entropy * (entropy over inputs + entropy
/// over outputs), with score_io = std_n(phi_io) / (std_n(x_i) + 0.1): per layer moments (2, I, O)
/// float64 as LayerActivations::moments and input (N, I), on the CPU. A 0-dim tensor of the
/// inputs' dtype, differentiable in the moments and the inputs.
at::Tensor regularizer_cpu(const std::vector<at::Tensor>& moments,
                           const std::vector<at::Tensor>& inputs, double lamb_l1,
                           double lamb_entropy);

/// regularizer_cpu's value, without autograd, for contiguous moments and inputs; `kept` receives
/// what regularizer_gradients reads again (the inputs' means and variances).
double regularizer_value(const std::vector<at::Tensor>& moments,
                         const std::vector<at::Tensor>& inputs, double lamb_l1, double lamb_entropy,
                         std::vector<double>& kept);

/// Its gradients {per layer d/dmoments, per layer d/dinput (undefined unless to_inputs[l])} times
/// `upstream`, the value's own gradient.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>
regularizer_gradients(const std::vector<at::Tensor>& moments, const std::vector<at::Tensor>& inputs,
                      const std::vector<double>& kept, double lamb_l1, double lamb_entropy,
                      double upstream, const std::vector<bool>& to_inputs);

} // namespace kan::detail
