#pragma once
// A whole KAN's forward and backward in one autograd node on the CPU: every layer through the
// one-pass kernels (layer_pass_cpu.h), pykan's subnode and node affine maps and multiplication
// nodes as host loops between them, and each layer's regulariser sums. A small model's step is
// made of fixed costs (autograd nodes, tensor operations, allocations) more than of arithmetic;
// one node for the network leaves the arithmetic.

#include "kan/nn/options.h"
#include "kernels/spline_kernels.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kan::detail {

/// The kernels' name for a layer's base function.
BaseKind base_kind(BaseFunction f);

/// The network's shape as the node needs it.
struct NetworkLayout {
  int64_t k = 3;
  BaseKind base = BaseKind::kSiLU;
  /// Whether the affine maps (and multiplication nodes) apply between the layers
  /// (KANImpl::applies_affine).
  bool affine = false;
  /// Per layer l: the addition nodes of layer l + 1, then the arity of each of its
  /// multiplication nodes (pykan's order: the addition nodes first).
  std::vector<int64_t> sum_nodes;
  std::vector<std::vector<int64_t>> arities;
};

/// What the node gives: per layer l its input h_l (h_0 = x), its output y_l (N, subnodes), the
/// regulariser sums (2, I, O) float64 of its numeric part, and the network's output.
struct NetworkPass {
  at::Tensor output;
  std::vector<at::Tensor> inputs, outputs, moments;
};

/// The network for x (N, width[0]) and, per layer, `layers` = {grid, coef, scale_base, scale_sp,
/// mask} and, where layout.affine, `affine` = {subnode_scale, subnode_bias, node_scale,
/// node_bias} (else empty), all of x's dtype on the CPU. Differentiable once in x, every
/// parameter, and through each output, input and sums (the regulariser reads them). For
/// fuses_layer_with_moments(x) only; no symbolic edges (the caller checks).
NetworkPass fused_network(const at::Tensor& x, const std::vector<at::Tensor>& layers,
                          const std::vector<at::Tensor>& affine, const NetworkLayout& layout);

class KeptInput; // layer_pass_cpu.h

/// The regulariser's weights for network_objective: lamb (0: none) times the sample terms
/// lamb_l1 * l1 + lamb_entropy * entropy (regularizer_cpu.h).
struct ObjectiveWeights {
  double lamb = 0, lamb_l1 = 1, lamb_entropy = 2;
};

/// The objective's values (loss rounded to x's dtype, the regulariser's sample terms in double, 0
/// without) and the gradients of the total loss + lamb * reg for fused_network's inputs: [0] (x)
/// undefined, then the layers' tensors, then the affine maps' (grid and mask undefined).
struct ObjectivePass {
  double loss = 0, reg = 0;
  std::vector<at::Tensor> grads;
};

/// A training evaluation without autograd: the network's forward, the MSE against labels (N,
/// outputs), the regulariser where w.lamb != 0, and the backward, as fused_network and
/// regularizer_cpu compute them (the same kernels and host loops) but with no autograd node, no
/// engine and no gradient accumulation around them: a small model's evaluation is then its
/// arithmetic. Arguments as fused_network's; x (N >= 1, width[0]). `kept` (optional): the first
/// layer's values that depend on x and its grid alone, kept for the next call with the same ones.
ObjectivePass network_objective(const at::Tensor& x, const at::Tensor& labels,
                                const std::vector<at::Tensor>& layers,
                                const std::vector<at::Tensor>& affine, const NetworkLayout& layout,
                                const ObjectiveWeights& w, KeptInput* kept = nullptr);

} // namespace kan::detail
