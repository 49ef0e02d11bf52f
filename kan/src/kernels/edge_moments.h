#pragma once
// The regulariser's per-edge statistics on the fused backend: sums over the samples instead of
// the (N, I, O) activations, so a regularised step needs O(I * O) extra memory
// (edge_moments_threads.h has the arithmetic; docs/kan.md, "Regularisation").

#include "kernels/spline_kernels.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kan::detail {

/// (2, I, O), float64: [0] = sum_n phi_nio and [1] = sum_n phi_nio^2 of the edges' numeric part
/// phi_nio = wb_io base_ni + ws_io spline_nio, for x (N, I), base (N, I) (the base function at
/// x), grid (I, G + 2k + 1), coef (I, O, G + k), wb and ws (I, O) (mask * scale_base, mask *
/// scale_sp), all of x's dtype and device. Differentiable once in x (through the splines), base,
/// coef, wb and ws: the backward recomputes each point's basis. On CUDA, and on the CPU under the
/// cuda-threads and cuda-blocks kernel sets; the other CPU sets fuse the sums into the layer
/// (fused_layer_with_moments).
at::Tensor fused_edge_moments(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                              const at::Tensor& coef, const at::Tensor& wb, const at::Tensor& ws,
                              int64_t k);

/// Whether fused_layer_with_moments has kernels for x: on the CPU, but for the cuda-threads kernel
/// set (KAN_FUSED_CPU_ISA), whose steps keep the layer and its sums apart as the GPU's do.
bool fuses_layer_with_moments(const at::Tensor& x);

/// Unregularised forwards of layers up to this many edge evaluations (N * I * O) run as that one
/// node too, outside autocast: it wins where the layer's arithmetic is small next to the ten or so
/// tensor operations it replaces (the toy's [2, 5, 1] at N = 1000: 2.3 to 3.8 times the LBFGS
/// steps per second); on wide layers the separate kernels are as fast or faster, as the node
/// computes the regulariser's sums too (a float64 100 -> 100 forward at N = 4096: 55 ms against
/// 22).
constexpr int64_t kOneNodeEdgeEvaluations = int64_t{1} << 20;

/// A whole layer's numeric part y (N, O) = sum_i phi_nio, phi_nio = wb_io base(x_ni) + ws_io
/// spline_nio with wb = mask * scale_base and ws = mask * scale_sp (the layer's forward without
/// its symbolic edges), and fused_edge_moments's sums of phi, in one autograd node: its forward
/// and its backward each visit every point once and it saves x, sigmoid(x) and the parameters
/// only (layer_pass_cpu.h). For x
/// (N, I), grid and coef as fused_edge_moments's, scale_base, scale_sp and mask (I, O);
/// differentiable once in x, coef and the scales. The CPU only (fuses_layer_with_moments).
std::pair<at::Tensor, at::Tensor>
fused_layer_with_moments(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
                         const at::Tensor& scale_base, const at::Tensor& scale_sp,
                         const at::Tensor& mask, BaseKind base, int64_t k);

/// The CUDA block kernels of the sums and their backward (edge_moments_blocks.h) run on the CPU,
/// every thread of every block, for tests (KAN_FUSED_CPU_ISA=cuda-blocks): the sums s1, s2
/// (slices, I, O each) and the gradients g, as the cuda-threads set's kernels write them but over
/// all inputs at once.
namespace cuda_blocks {
template <typename T> void moments(const MomentArgs<T>& a, int64_t slices, double* s1, double* s2);
template <typename T> void moments_backward(const MomentArgs<T>& a, const MomentGrads<T>& g);
} // namespace cuda_blocks

#ifdef KAN_HAS_CUDA_KERNELS
/// CUDA kernels (fused_spline_cuda.cu), on the current stream; contiguous arguments, weight = coef
/// transposed to (I, M, O), inv from knot_reciprocals. The sums (2, I, O), float64.
at::Tensor edge_moments_forward_cuda(const at::Tensor& x, const at::Tensor& base,
                                     const at::Tensor& grid, const at::Tensor& inv,
                                     const at::Tensor& weight, const at::Tensor& wb,
                                     const at::Tensor& ws, int64_t k);
/// {gx, gbase, gweight (I, M, O), gwb, gws}, float64, for the sums' gradient grad (2, I, O).
std::vector<at::Tensor> edge_moments_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                   const at::Tensor& base, const at::Tensor& grid,
                                                   const at::Tensor& inv, const at::Tensor& weight,
                                                   const at::Tensor& wb, const at::Tensor& ws,
                                                   int64_t k);
#endif

} // namespace kan::detail
