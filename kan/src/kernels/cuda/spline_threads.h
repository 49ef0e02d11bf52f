#pragma once
// The work of one thread of each CUDA kernel of the fused backend, as plain host/device
// functions. fused_spline_cuda.cu launches them one thread per element; threads_on_cpu.cpp
// runs the very same code on the CPU (KAN_FUSED_CPU_ISA=cuda-threads), so that the
// numerics tests check the GPU kernels' indexing and arithmetic on a machine without a GPU.
// Simple and obviously right rather than tuned: no atomics, no shared memory.

#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <cstdint>

namespace kan::detail {

// The per-edge splines (KANLayer::forward_with_activations, and summed, the layer): spline[n, i, o]
// = sum_r B_r(x_ni) coef[i, o, first + r], with a.weight = coef transposed to (I, M, O) like the
// layer's weight (so that consecutive outputs read consecutive addresses). The CPU runs
// the *_row functions (the basis once per (n, i)); the CUDA kernels, and the CPU under
// KAN_FUSED_CPU_ISA=cuda-threads, the *_thread ones.

/// sum_r value[r] coef[i, o, first + r]: one edge's spline from the point's basis.
template <typename T>
static KAN_HOST_DEVICE T edge_value(const SplineArgs<T>& a, int64_t i, int64_t o, int64_t first,
                                    const T* value) {
  T acc = 0;
  for (int r = 0; r <= a.k; ++r) {
    const int64_t m = first + r;
    if (m >= 0 && m < a.M)
      acc += value[r] * a.weight[(i * a.M + m) * a.O + o];
  }
  return acc;
}

/// The basis of x_ni (local_bspline). Where there is nothing to sum, returns false with
/// *none = what every sum over it gives: 0 outside the grid, NaN for a non-finite x.
template <typename T>
static KAN_HOST_DEVICE bool point_basis(const SplineArgs<T>& a, int64_t n, int64_t i,
                                        int64_t* first, T* value, T* deriv, T* none) {
  const T xv = a.x[n * a.I + i];
  *none = is_finite_value(xv) ? T(0) : xv - xv;
  return is_finite_value(xv) &&
         local_bspline(a.grid + i * a.P, a.inv + i * a.k * a.P, a.P, a.k, xv, first, value, deriv);
}

/// spline[n, i, :] (O values from y).
template <typename T>
static KAN_HOST_DEVICE void edges_forward_row(const SplineArgs<T>& a, int64_t n, int64_t i, T* y) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t first = 0;
  const bool inside = point_basis(a, n, i, &first, value, deriv, &none);
  for (int64_t o = 0; o < a.O; ++o)
    y[o] = none;
  if (!inside)
    return;
  for (int r = 0; r <= a.k; ++r) { // rows of the weight, each contiguous over the outputs
    const int64_t m = first + r;
    if (m < 0 || m >= a.M)
      continue;
    const T* w = a.weight + (i * a.M + m) * a.O;
    for (int64_t o = 0; o < a.O; ++o)
      y[o] += value[r] * w[o];
  }
}

/// spline[n, i, o].
template <typename T>
static KAN_HOST_DEVICE T edges_forward_thread(const SplineArgs<T>& a, int64_t n, int64_t i,
                                              int64_t o) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t first = 0;
  return point_basis(a, n, i, &first, value, deriv, &none) ? edge_value(a, i, o, first, value)
                                                           : none;
}

/// y[n, o] = sum_i spline[n, i, o]: the layer's output is the sum of its edges. On the GPU
/// consecutive threads share n and step o, so the reads of w are coalesced.
template <typename T>
static KAN_HOST_DEVICE T forward_thread(const SplineArgs<T>& a, int64_t n, int64_t o) {
  T acc = 0;
  for (int64_t i = 0; i < a.I; ++i)
    acc += edges_forward_thread(a, n, i, o);
  return acc;
}

// The backward of both: the layer's grad_y row is (O) per sample, the edges' (O) per (sample,
// input); GradRows says where row (n, i) starts.

/// Where grad_y's row for (n, i) starts: gy + n * per_sample + i * per_input.
struct GradRows {
  int64_t per_sample; ///< the layer: O; the edges: I * O
  int64_t per_input;  ///< the layer: 0; the edges: O
};

/// grad_x[n, i] = sum_r dB_r(x_ni) sum_o w[i, first + r, o] g[o], g = grad_y's row (n, i).
template <typename T>
static KAN_HOST_DEVICE T grad_x_thread(const SplineArgs<T>& a, const T* gy, GradRows rows,
                                       int64_t n, int64_t i) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t first = 0;
  if (!point_basis(a, n, i, &first, value, deriv, &none))
    return none;
  const T* g = gy + n * rows.per_sample + i * rows.per_input;
  T acc = 0;
  for (int r = 0; r <= a.k; ++r) {
    const int64_t m = first + r;
    if (m < 0 || m >= a.M)
      continue;
    const T* w = a.weight + (i * a.M + m) * a.O;
    T dot = 0;
    for (int64_t o = 0; o < a.O; ++o)
      dot += w[o] * g[o];
    acc += deriv[r] * dot;
  }
  return acc;
}

/// gw[s, i, m, o] (gw: slices copies of the weight's (I, M, O)) += sum over the samples n of
/// slice s (slice_bounds) of B_m(x_ni) g[o], g = grad_y's row (n, i), for every m and the outputs
/// [o_begin, o_end): a CUDA thread takes one output and owns the column gw[s, i, :, o], so no two
/// threads write one element; the CPU takes them all, the basis once per sample.
template <typename T>
static KAN_HOST_DEVICE void grad_w_columns(const SplineArgs<T>& a, const T* gy, GradRows rows,
                                           T* gw, int64_t slices, int64_t s, int64_t i,
                                           int64_t o_begin, int64_t o_end) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t n_begin, n_end;
  slice_bounds(a.N, slices, s, &n_begin, &n_end);
  T* c = gw + (s * a.I + i) * a.M * a.O;
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first = 0;
    if (!point_basis(a, n, i, &first, value, deriv, &none)) {
      if (!is_finite_value(none)) // NaN in every basis function reaches every weight row
        for (int64_t m = 0; m < a.M; ++m)
          for (int64_t o = o_begin; o < o_end; ++o)
            c[m * a.O + o] = none;
      continue;
    }
    const T* g = gy + n * rows.per_sample + i * rows.per_input;
    for (int r = 0; r <= a.k; ++r) {
      const int64_t m = first + r;
      if (m < 0 || m >= a.M)
        continue;
      for (int64_t o = o_begin; o < o_end; ++o)
        c[m * a.O + o] += value[r] * g[o];
    }
  }
}

} // namespace kan::detail
