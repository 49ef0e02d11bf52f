#pragma once
// The work of one thread of each CUDA kernel of the fused backend, as plain host/device
// functions. fused_spline_cuda.cu launches them one thread per element; spline_kernels_cuda_
// threads.cpp runs the very same code on the CPU (KAN_FUSED_CPU_ISA=cuda-threads), so that the
// numerics tests check the GPU kernels' indexing and arithmetic on a machine without a GPU.
// Simple and obviously right rather than tuned: no atomics, no shared memory.

#include "spline_kernels.h"
#include "spline_local.h"

#include <cstdint>

namespace kan::detail {

/// y[n, o] = sum_i sum_r B_r(x_ni) w[i, first + r, o]. On the GPU consecutive threads share n and
/// step o, so the reads of w are coalesced.
template <typename T>
static KAN_HOST_DEVICE T forward_thread(const SplineArgs<T>& a, int64_t n, int64_t o) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  T acc = 0;
  for (int64_t i = 0; i < a.I; ++i) {
    int64_t first;
    const T xv = a.x[n * a.I + i];
    if (!is_finite_value(xv))
      acc = xv - xv; // NaN in every basis function, as in the reference
    if (!local_bspline(a.grid + i * a.P, a.inv + i * a.k * a.P, a.P, a.k, xv, &first, value, deriv))
      continue;
    for (int r = 0; r <= a.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < a.M)
        acc += value[r] * a.weight[(i * a.M + m) * a.O + o];
    }
  }
  return acc;
}

/// grad_x[n, i] = sum_r dB_r(x_ni) sum_o w[i, first + r, o] grad_y[n, o].
template <typename T>
static KAN_HOST_DEVICE T grad_x_thread(const SplineArgs<T>& a, const T* gy, int64_t n, int64_t i) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  const T xv = a.x[n * a.I + i];
  T acc = is_finite_value(xv) ? T(0) : xv - xv;
  int64_t first;
  if (!local_bspline(a.grid + i * a.P, a.inv + i * a.k * a.P, a.P, a.k, xv, &first, value, deriv))
    return acc;
  const T* g = gy + n * a.O;
  for (int r = 0; r <= a.k; ++r) {
    const int64_t m = first + r;
    if (m < 0 || m >= a.M)
      continue;
    const T* wm = a.weight + (i * a.M + m) * a.O;
    T dot = 0;
    for (int64_t o = 0; o < a.O; ++o)
      dot += wm[o] * g[o];
    acc += deriv[r] * dot;
  }
  return acc;
}

/// gw[s, i, m, o] += sum over the samples n of slice s of B_m(x_ni) grad_y[n, o], for every m:
/// the thread (s, i, o) owns the column gw[s, i, :, o], so no two threads write one element.
/// Slice s holds the samples [s * rows, (s + 1) * rows), rows = ceil(N / slices).
template <typename T>
static KAN_HOST_DEVICE void grad_w_thread(const SplineArgs<T>& a, const T* gy, T* gw,
                                          int64_t slices, int64_t s, int64_t i, int64_t o) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  const int64_t rows = (a.N + slices - 1) / slices;
  const int64_t n_begin = s * rows, n_end = n_begin + rows < a.N ? n_begin + rows : a.N;
  T* column = gw + (s * a.I + i) * a.M * a.O + o;
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first;
    const T xv = a.x[n * a.I + i];
    if (!is_finite_value(xv)) {
      for (int64_t m = 0; m < a.M; ++m)
        column[m * a.O] = xv - xv;
      continue;
    }
    if (!local_bspline(a.grid + i * a.P, a.inv + i * a.k * a.P, a.P, a.k, xv, &first, value, deriv))
      continue;
    const T g = gy[n * a.O + o];
    for (int r = 0; r <= a.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < a.M)
        column[m * a.O] += value[r] * g;
    }
  }
}

} // namespace kan::detail
