#pragma once
// The fused spline backend's kernels on raw, contiguous arrays: what a kernel set is and what its
// kernels take. No LibTorch types here.
//
// kan/src/kernels/ holds the kernels and their dispatch:
// - cpu/: the CPU kernels, one self-contained header per part, compiled once per instruction set
//   (cpu/kernel_set.cpp: generic x86-64, AVX2 + FMA, AVX-512), and the drivers that split their
//   work over ATen's threads (cpu/drivers.cpp, the baseline instruction set only, so that no ATen
//   inline function is ever compiled with AVX2 and picked by the linker for other callers).
// - cuda/: the CUDA kernels (fused_spline_cuda.cu), their per-thread and per-block code as
//   host/device headers, and those run on the CPU for tests (threads_on_cpu.cpp,
//   blocks_on_cpu.cpp).
// - cpu_dispatch.*: which CPU code runs (the kernel set, LBFGS's host vector arithmetic).
// - fused_spline.*, edge_moments.*, layer_pass_cpu.*: the kernels as tensor operations and
//   autograd nodes.

#include <cstdint>

namespace kan::detail {

/// Whether the AVX-512 kernels read and write a vector of samples' strided values (a column of
/// x or y) by one gather or scatter, or by a scalar load or store a lane: KAN_LANE_GATHERS=on|off,
/// unset on for Intel's cores and off for others (a value other than these is an error where the
/// kernels are chosen). Read when the library loads. Gathers took 7 % off a small model's
/// evaluation on a Xeon and added 11 % on AMD's Zen 4 (BM_ToyEvaluation, docs/library.md).
bool lane_gathers();

/// One fused spline problem: y_nj = sum_i sum_m B_m(x_ni) weight_imj (all arrays contiguous).
template <typename T> struct SplineArgs {
  const T* x;      ///< (N, I) inputs
  const T* grid;   ///< (I, P) knots, non-decreasing per row
  const T* inv;    ///< (I, k, P) reciprocal knot differences (see local_bspline)
  const T* weight; ///< (I, M, O), M = P - k - 1
  int64_t N, I, P, M, O;
  int k;
};

/// One layer's regulariser statistics (edge_moments_threads.h): spline.weight is coef
/// transposed to (I, M, O).
template <typename T> struct MomentArgs {
  SplineArgs<T> spline;
  const T* base; ///< (N, I): the base function at x
  const T* wb;   ///< (I, O): mask * scale_base
  const T* ws;   ///< (I, O): mask * scale_sp
};

/// The sums' gradients, (I, O) each, and where the backward writes: gx, gbase (N, I), in T,
/// overwritten; gcoef (slices, I, M, O), gwb, gws (slices, I, O), in double, zero on entry. Each
/// slice of the samples sums into its own copy (slice_bounds).
template <typename T> struct MomentGrads {
  const double* g1;
  const double* g2;
  T* gx;
  T* gbase;
  double* gcoef;
  double* gwb;
  double* gws;
  int64_t slices;
};

/// A layer's base function, as the kernels compute it (kan::BaseFunction).
enum class BaseKind : int { kSiLU, kIdentity, kZero };

/// A whole layer and its regulariser sums in one pass on the CPU (kernels/cpu/layer_points.h):
/// y_no = sum_i phi_nio, phi_nio = wb_io base(x_ni) + ws_io spline_nio, with spline.weight = coef
/// transposed to (I, M, O) and padded with k zero rows at both ends, (I, M + 2k, O).
template <typename T> struct LayerArgs {
  SplineArgs<T> spline;
  const T* wb; ///< (I, O): mask * scale_base
  const T* ws; ///< (I, O): mask * scale_sp
  BaseKind base;
  const T* sigmoid; ///< (N, I): sigmoid(x) for kSiLU (silu = x sigmoid(x)), else null
};

/// What the lanes backward computes from x and the grid alone where x's gradient is not wanted:
/// each block of samples' basis functions and base function, M + 1 vectors of lanes. A caller
/// whose x and grid stay the same from one call to the next (a fit's training input between grid
/// updates) keeps them: `values` (at least kept_basis_size elements) is written where `ready` is
/// false and read where it is true, with the same slices and kernels. Null: computed each call.
template <typename T> struct KeptBasis {
  T* values = nullptr;
  bool ready = false;
};

/// KeptBasis::values' size for x (N, I) and M basis functions, whatever the kernels' lanes.
inline int64_t kept_basis_size(int64_t N, int64_t I, int64_t M) {
  constexpr int64_t kMostLanes = 16; // AVX-512's floats
  return I * (N + kMostLanes) * (M + 1);
}

/// Where the layer's backward writes, for dL/dy and the sums' gradients: gx (N, I) in T,
/// overwritten; gcoef (slices, I, M, O), gwb and gws (slices, I, O) in double, zero on entry, each
/// slice of the samples (slice_bounds) summing into its own copy.
template <typename T> struct LayerGrads {
  const T* gy;      ///< (N, O), or null where y is not used
  const double* g1; ///< (I, O): dL/dS1
  const double* g2; ///< (I, O): dL/dS2
  T* gx;            ///< (N, I), or null where x's gradient is not wanted
  double* gcoef;
  double* gwb;
  double* gws;
  int64_t slices;
  KeptBasis<T> kept; ///< read or written only where gx is null
};

/// A forward kernel on the items [begin, end) of y.
template <typename T>
using ForwardKernel = void (*)(const SplineArgs<T>& a, T* y, int64_t begin, int64_t end);
/// A backward kernel on the tasks [task_begin, task_end), task = slice * I + input (see
/// spline_backward).
template <typename T>
using BackwardKernel = void (*)(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                                int64_t task_begin, int64_t task_end);

/// The regulariser's sums S1, S2 (slices, I, O each, double, zero on entry) of the inputs
/// [begin, end), each slice of the samples (slice_bounds) into its own copy, as on the GPU.
template <typename T>
using MomentsKernel = void (*)(const MomentArgs<T>& a, int64_t slices, double* s1, double* s2,
                               int64_t begin, int64_t end);
/// Their backward for the inputs [begin, end), g.slices copies of the parameter gradients (every
/// row written is an input's own).
template <typename T>
using MomentsBackwardKernel = void (*)(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                       int64_t begin, int64_t end);

/// The layer's y (N, O) (zero on entry) and sums (slices, 2, I, O) (zero on entry) over the
/// samples of the slices [begin, end): slice s writes y's rows of its samples and sums[s].
template <typename T>
using LayerKernel = void (*)(const LayerArgs<T>& a, T* y, double* sums, int64_t slices,
                             int64_t begin, int64_t end);
/// Its backward on the tasks [begin, end), task = slice * I + input.
template <typename T>
using LayerBackwardKernel = void (*)(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t begin,
                                     int64_t end);

/// The kernels of one instruction set, on a range of the work; the drivers below split the work
/// over threads. The layer sums over its inputs; the per-edge splines (forward_with_activations)
/// keep every (sample, input, output).
template <typename T> struct SplineKernels {
  ForwardKernel<T> forward_rows;          ///< rows n of y (N, O) += the layer's spline part
  BackwardKernel<T> backward_tasks;       ///< the layer's backward, gy (N, O)
  ForwardKernel<T> edges_forward_pairs;   ///< pairs t = n * I + i of y (N, I, O) (overwritten)
  BackwardKernel<T> edges_backward_tasks; ///< the per-edge splines' backward, gy (N, I, O)
  /// The regulariser's per-edge sums apart from the layer (fused_edge_moments): the cuda-threads
  /// set only (the GPU's per-thread code); null in the generic and AVX2 sets, which fuse them.
  MomentsKernel<T> moments_inputs;
  MomentsBackwardKernel<T> moments_backward_inputs;
  /// The layer and its sums in one pass (the CPU's regularised steps); null in the cuda-threads
  /// set, whose regularised steps keep the layer and the sums apart as the GPU does.
  LayerKernel<T> layer_with_moments;
  LayerBackwardKernel<T> layer_with_moments_backward;
};

namespace cpu_generic {
template <typename T> SplineKernels<T> kernels();
} // namespace cpu_generic

namespace cpu_avx2 {
template <typename T> SplineKernels<T> kernels();
} // namespace cpu_avx2

namespace cpu_avx512 {
template <typename T> SplineKernels<T> kernels();
} // namespace cpu_avx512

/// The CUDA kernels' per-thread code (spline_threads.h) run on the CPU, for tests: slow.
namespace cuda_threads {
template <typename T> SplineKernels<T> kernels();
} // namespace cuda_threads

/// The CUDA block kernels (spline_blocks.h) run on the CPU, every thread of every block, for
/// tests: the layer's or the edges' forward into y, and their backward into gx (unless null) and
/// gw (slices copies of the weight, zero on entry; slices from backward_slices).
namespace cuda_blocks {
template <typename T> void forward(bool edges, const SplineArgs<T>& a, T* y);
template <typename T>
void backward(bool edges, const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices);
int64_t backward_slices(int64_t N, int64_t I, int64_t O, int64_t weight_bytes);
} // namespace cuda_blocks

/// The at::parallel_for grain for items of `work_per_item` multiply-adds each: enough items per
/// thread that waking the thread pays (kernels/cpu/drivers.cpp).
int64_t parallel_grain(int64_t work_per_item);

/// The layer's y (N, O) = the spline part (y must be zero on entry), parallel over samples; with
/// `edges`, the per-edge splines y (N, I, O), parallel over (sample, input) pairs.
template <typename T>
void spline_forward(const SplineKernels<T>& kernels, bool edges, const SplineArgs<T>& a, T* y);

/// gx (N, I) = dL/dx of the spline part (overwritten; may be null) and gw (slices, I, M, O), zero
/// on entry, += dL/dweight of each slice of the samples (the caller sums over slices), for gy of
/// the layer (N, O) or, with `edges`, of the per-edge splines (N, I, O). Parallel over (slice,
/// input) pairs, so no two threads write one element.
template <typename T>
void spline_backward(const SplineKernels<T>& kernels, bool edges, const SplineArgs<T>& a,
                     const T* gy, T* gx, T* gw, int64_t slices);

} // namespace kan::detail
