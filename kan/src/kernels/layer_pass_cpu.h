#pragma once
// One KAN layer and its regulariser sums through the CPU's one-pass kernels
// (cpu/layer_moments.h), with no autograd around them: the layer's node
// (fused_layer_with_moments) and the whole network's (network_node.h) both drive the kernels
// through these. Everything around the kernels is plain loops over host arrays, not tensor
// operations: a small model's step is made of such fixed costs.

#include "kernels/spline_kernels.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kan::detail {

/// What a layer computes from its input x and its grid alone (x contiguous, the knot
/// reciprocals, sigmoid(x) and the lanes backward's basis, KeptBasis), kept from one pass to the
/// next while both stay the same: a fit evaluates its first layer at the same training input, with
/// the same grid between grid updates, hundreds of times. x and the grid are compared by value
/// (their bytes against copies), so no change, in place or not, goes unseen. Not for inputs that
/// would take more than kMaxBytes: the basis is M + 1 values a sample and input.
class KeptInput {
public:
  static constexpr int64_t kMaxBytes = int64_t{4} << 20;

  /// Brings the values up to date for x (N, I) and grid (I, P) (one dtype, on the CPU); false,
  /// and nothing kept, where they would take more than kMaxBytes.
  bool refresh(const at::Tensor& x, const at::Tensor& grid, int64_t k, BaseKind base);

  const at::Tensor& x() const { return x_; }
  const at::Tensor& grid() const { return grid_; }
  const at::Tensor& inv() const { return inv_; }
  const at::Tensor& sigmoid() const { return sigmoid_; }

  /// The basis's storage for a backward with these slices, kernel and outputs: ready where the
  /// last backward with the same ones wrote it (basis_written) since the last change of x or grid.
  template <typename T> KeptBasis<T> basis(int64_t slices, const void* kernel, int64_t outputs);
  /// The backward that basis() served has written it.
  void basis_written() { basis_ready_ = true; }

private:
  at::Tensor x_, grid_, inv_, sigmoid_, basis_;
  int64_t k_ = -1;
  BaseKind base_ = BaseKind::kSiLU;
  bool basis_ready_ = false;
  int64_t slices_ = 0, outputs_ = 0;
  const void* kernel_ = nullptr;
};

/// What a layer's forward reads and its backward needs again: x and the parameters made
/// contiguous, coef (I, O, M) as the kernels' padded weight (I, M + 2k, O), the knot reciprocals,
/// and sigmoid(x) for the SiLU base (undefined otherwise), kept so that the backward does not
/// compute it again.
struct LayerPass {
  at::Tensor x, grid, inv, weight, scale_base, scale_sp, mask, sigmoid;
  BaseKind base = BaseKind::kSiLU;
  int64_t k = 0;
  /// Where x's values come from a KeptInput: the backward's basis may come from it too.
  KeptInput* kept = nullptr;

  /// For x (N, I), grid (I, G + 2k + 1), coef (I, O, G + k), scale_base, scale_sp, mask (I, O),
  /// all of x's dtype on the CPU (the caller checks); with `kept`, what depends on x and the grid
  /// alone from there (where it serves them: KeptInput::refresh).
  LayerPass(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
            const at::Tensor& scale_base, const at::Tensor& scale_sp, const at::Tensor& mask,
            BaseKind base, int64_t k, KeptInput* kept = nullptr);
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
