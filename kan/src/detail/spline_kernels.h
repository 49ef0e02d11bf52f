#pragma once
// CPU kernels of the fused spline backend on raw, contiguous arrays. No LibTorch types here:
// spline_kernels_cpu.inc is compiled once per instruction set (generic x86-64, AVX2 + FMA) and
// fused_spline.cpp picks one at run time. The drivers that split the work over threads (ATen's
// parallel_for, which needs OpenMP) live in the generic translation unit only, so that no
// ATen inline function is ever compiled with AVX2 and picked by the linker for other callers.

#include <cstdint>

namespace kan::detail {

/// One fused spline problem: y_nj = sum_i sum_m B_m(x_ni) weight_imj (all arrays contiguous).
template <typename T> struct SplineArgs {
  const T* x;      ///< (N, I) inputs
  const T* grid;   ///< (I, P) knots, non-decreasing per row
  const T* inv;    ///< (I, k, P) reciprocal knot differences (see local_bspline)
  const T* weight; ///< (I, M, O), M = P - k - 1
  int64_t N, I, P, M, O;
  int k;
};

/// The kernels of one instruction set, on a range of the work; the drivers below split the work
/// over threads.
template <typename T> struct SplineKernels {
  /// Rows [n_begin, n_end) of y (N, O) += the spline part.
  void (*forward_rows)(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end);
  /// Tasks [task_begin, task_end) of the backward, task = slice * I + input (see spline_backward).
  void (*backward_tasks)(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                         int64_t task_begin, int64_t task_end);
};

namespace cpu_generic {
template <typename T> SplineKernels<T> kernels();
} // namespace cpu_generic

namespace cpu_avx2 {
template <typename T> SplineKernels<T> kernels();
} // namespace cpu_avx2

/// The CUDA kernels' per-thread code (spline_threads.h) run on the CPU, for tests: slow.
namespace cuda_threads {
template <typename T> SplineKernels<T> kernels();
} // namespace cuda_threads

/// The at::parallel_for grain for items of `work_per_item` multiply-adds each: enough items per
/// thread that waking the thread pays (spline_kernels_generic.cpp).
int64_t parallel_grain(int64_t work_per_item);

/// y (N, O) = the spline part (y must be zero on entry), parallel over samples.
template <typename T>
void spline_forward(const SplineKernels<T>& kernels, const SplineArgs<T>& a, T* y);

/// gx (N, I) = dL/dx of the spline part (overwritten; may be null) and gw (slices, I, M, O), zero
/// on entry, += dL/dweight of each slice of the samples (the caller sums over slices). Parallel
/// over (slice, input) pairs, so no two threads write one element.
template <typename T>
void spline_backward(const SplineKernels<T>& kernels, const SplineArgs<T>& a, const T* gy, T* gx,
                     T* gw, int64_t slices);

} // namespace kan::detail
