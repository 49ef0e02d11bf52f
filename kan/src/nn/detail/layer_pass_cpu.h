#pragma once
// One KAN layer and its regulariser sums through the CPU's one-pass kernels
// (layer_moments_cpu.inc), with no autograd around them: the layer's node
// (fused_layer_with_moments) and the whole network's (network_node.h) both drive the kernels
// through these. Everything around the kernels is plain loops over host arrays, not tensor
// operations: a small model's step is made of such fixed costs.

#include "nn/detail/spline_kernels.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kan::detail {

/// What a layer's forward reads and its backward needs again: x and the parameters made
/// contiguous, coef (I, O, M) as the kernels' padded weight (I, M + 2k, O), the knot reciprocals,
/// and sigmoid(x) for the SiLU base (undefined otherwise), kept so that the backward does not
/// compute it again.
struct LayerPass {
  at::Tensor x, grid, inv, weight, scale_base, scale_sp, mask, sigmoid;
  BaseKind base = BaseKind::kSiLU;
  int64_t k = 0;

  /// For x (N, I), grid (I, G + 2k + 1), coef (I, O, G + k), scale_base, scale_sp, mask (I, O),
  /// all of x's dtype on the CPU (the caller checks).
  LayerPass(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
            const at::Tensor& scale_base, const at::Tensor& scale_sp, const at::Tensor& mask,
            BaseKind base, int64_t k);
  /// From tensors() and the base and k.
  LayerPass(const std::vector<at::Tensor>& tensors, BaseKind base, int64_t k);

  /// {x, grid, inv, weight, scale_base, scale_sp, mask, sigmoid}: what a node saves.
  std::vector<at::Tensor> tensors() const;
  static constexpr size_t kTensors = 8;
};

/// The layer's y (N, O) and the sums (2, I, O), float64, of its numeric part phi_nio: [0] sum_n
/// phi, [1] sum_n phi^2.
std::pair<at::Tensor, at::Tensor> layer_pass_forward(const LayerPass& p);

/// The layer's gradients, in x's dtype.
struct LayerPassGrads {
  at::Tensor x, coef, scale_base, scale_sp;
};

/// The gradients for dL/dy gy (N, O) and dL/dsums gm (2, I, O); either may be undefined (zero).
/// Without `x_gradient` the gradient of x is left undefined and not computed.
LayerPassGrads layer_pass_backward(const LayerPass& p, const at::Tensor& gy, const at::Tensor& gm,
                                   bool x_gradient = true);

} // namespace kan::detail
