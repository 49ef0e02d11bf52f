#pragma once
// The fused spline backend (SplineBackend::kFused): the spline part of a KAN layer without the
// (N, I, G + k) basis tensor, as one autograd function over CPU and CUDA kernels.
//
// There is no "dense basis + one GEMM" variant for small G: the kernels' work grows with k + 1,
// not G + k, and on the 2-core AVX2 development machine they already beat the reference's GEMM
// formulation 3.3x at G = 5 (layer forward + backward, 4096 x 100 -> 100, k = 3, float32; 55x at
// G = 50; bench_kan on an idle machine), so no rule for switching is needed. Measure with
// bench_kan before adding one.

#include "kernels/spline_kernels.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace kan::detail {

/// y (N, O) = sum_i sum_m B_m(x_ni) weight_imj for x (N, I), grid (I, G + 2k + 1) with
/// non-decreasing rows, weight (I, G + k, O). Differentiable in x and weight (once: a second
/// derivative through it is an error). Same B-spline conventions as kan::bspline_basis.
at::Tensor fused_spline(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& weight,
                        int64_t k);

/// The per-edge splines spline[n, i, o] = sum_m B_m(x_ni) coef_iom, (N, I, O), for coef
/// (I, O, G + k): KANLayer::forward_with_activations without the (N, I, G + k) basis.
/// Differentiable in x and coef (once), like fused_spline.
at::Tensor fused_spline_edges(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
                              int64_t k);

/// The (I, k, P) table local_bspline reads: entry (i, p - 1, j) = 1 / (grid_i,j+p - grid_i,j),
/// 0 where those knots coincide or j + p >= P.
at::Tensor knot_reciprocals(const at::Tensor& grid, int64_t k);

/// kan::bspline_basis's (N, I, P - k - 1) values for x (N, I) on the CPU, each point's k + 1
/// non-zero functions by the local scheme (spline_local.h) instead of the reference's Cox-de Boor
/// recursion over whole (N, I, P) tensors, whose ~40 tensor operations made most of a small
/// model's grid update. The same products in the same order (equal bit for bit where the compiler
/// contracts none into an FMA); a non-finite x gives a row of NaN, as the recursion does for
/// k >= 1. Requires x and grid on the CPU, k <= kFusedMaxOrder.
at::Tensor local_bspline_basis_cpu(const at::Tensor& x, const at::Tensor& grid, int64_t k);

/// How many slices of the samples the GPU's weight gradients and regulariser sums cut x (N, I)
/// into, for weight (I, M, O): each slice sums into its own copy (spline_blocks.h's rule). The
/// CPU's emulations of the CUDA kernels take the same slices.
int64_t gpu_backward_slices(const at::Tensor& x, const at::Tensor& weight);

/// The raw-array view of one fused spline problem that every kernel reads (spline_kernels.h).
template <typename T>
SplineArgs<T> spline_args(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& inv,
                          const at::Tensor& weight, int64_t k) {
  return {x.const_data_ptr<T>(),
          grid.const_data_ptr<T>(),
          inv.const_data_ptr<T>(),
          weight.const_data_ptr<T>(),
          x.size(0),
          x.size(1),
          grid.size(1),
          weight.size(1),
          weight.size(2),
          static_cast<int>(k)};
}

/// The raw-array view of one layer's regulariser statistics (edge_moments.h).
template <typename T>
MomentArgs<T> moment_args(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                          const at::Tensor& inv, const at::Tensor& weight, const at::Tensor& wb,
                          const at::Tensor& ws, int64_t k) {
  return {spline_args<T>(x, grid, inv, weight, k), base.const_data_ptr<T>(), wb.const_data_ptr<T>(),
          ws.const_data_ptr<T>()};
}

/// Where their backward writes, for the sums' gradient g (2, I, O) in float64.
template <typename T>
MomentGrads<T> moment_grads(const at::Tensor& g, at::Tensor& gx, at::Tensor& gbase,
                            at::Tensor& gweight, at::Tensor& gwb, at::Tensor& gws, int64_t slices) {
  return {g.const_data_ptr<double>(),         g.const_data_ptr<double>() + g[0].numel(),
          gx.mutable_data_ptr<T>(),           gbase.mutable_data_ptr<T>(),
          gweight.mutable_data_ptr<double>(), gwb.mutable_data_ptr<double>(),
          gws.mutable_data_ptr<double>(),     slices};
}

#ifdef KAN_HAS_CUDA_KERNELS
/// CUDA kernels (fused_spline_cuda.cu), on the current stream; arguments as in fused_spline,
/// contiguous, weight (I, M, O), inv from knot_reciprocals. The layer's y (N, O), or with `edges`
/// the per-edge splines (N, I, O) of weight = coef transposed to (I, M, O).
at::Tensor fused_spline_forward_cuda(bool edges, const at::Tensor& x, const at::Tensor& grid,
                                     const at::Tensor& inv, const at::Tensor& weight, int64_t k);
/// (grad_x, grad_weight) of fused_spline_forward_cuda for grad_y of its shape; grad_weight in the
/// weight's layout, grad_x undefined unless need_grad_x.
std::pair<at::Tensor, at::Tensor>
fused_spline_backward_cuda(bool edges, const at::Tensor& grad_y, const at::Tensor& x,
                           const at::Tensor& grid, const at::Tensor& inv, const at::Tensor& weight,
                           int64_t k, bool need_grad_x);
/// knot_reciprocals of a contiguous CUDA grid, one kernel.
at::Tensor knot_reciprocals_cuda(const at::Tensor& grid, int64_t k);
#endif

} // namespace kan::detail
