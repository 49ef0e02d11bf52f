#pragma once
// The CPU's layer-with-sums kernels of one instruction set, by spline order: a short knot row's
// layers by layer_lanes.h (the samples in a vector's lanes) where the instruction set has them,
// the others by layer_points.h (point after point).
#include "kernels/cpu/isa.h"
#include "kernels/cpu/layer_lanes.h"
#include "kernels/cpu/layer_points.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <cstdint>

namespace kan::detail::KAN_CPU_ISA {
namespace {

template <int K, typename T>
void layer_slices(const LayerArgs<T>& a, T* y, double* sums, int64_t slices, int64_t begin,
                  int64_t end) {
  const int64_t IO = a.spline.I * a.spline.O;
  for (int64_t s = begin; s < end; ++s) {
    int64_t n_begin, n_end;
    slice_bounds(a.spline.N, slices, s, &n_begin, &n_end);
    double* s1 = sums + s * 2 * IO;
#if defined(__AVX2__) && defined(__FMA__)
    if (uses_lanes(a.spline)) {
      with_knots<K, kLaneKnots>(a.spline.P, [&](auto knots) {
        layer_slice_lanes<K, decltype(knots)::value>(a, y, s1, s1 + IO, n_begin, n_end);
      });
      continue;
    }
#endif
    layer_slice<K>(a, y, s1, s1 + IO, n_begin, n_end);
  }
}

template <int K, typename T>
void layer_backward_tasks(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t begin,
                          int64_t end) {
  const int k = K >= 0 ? K : a.spline.k;
  const int64_t O = a.spline.O, rows = a.spline.M + 2 * k;
  T* scratch = new T[3 * O + rows * O];
  LayerRows<T> r{nullptr, nullptr, scratch, scratch + O, scratch + 2 * O, scratch + 3 * O};
  for (int64_t o = 0; o < O; ++o)
    r.zero[o] = T(0);
#if defined(__AVX2__) && defined(__FMA__)
  using V = typename Lanes<T>::V;
  const bool lanes = uses_lanes(a.spline);
  V* lane_sums = lanes ? new V[(2 + a.spline.M) * O] : nullptr;
  const LaneBlockSums<T> acc{lane_sums, lane_sums + O, lane_sums + 2 * O};
#endif
  for (int64_t task = begin; task < end; ++task) {
    const int64_t s = task / a.spline.I, i = task % a.spline.I;
    r.g1 = g.g1 + i * O;
    r.g2 = g.g2 + i * O;
#if defined(__AVX2__) && defined(__FMA__)
    if (lanes) {
      with_knots<K, kLaneKnots>(a.spline.P, [&](auto knots) {
        if (g.gx != nullptr)
          layer_backward_task_lanes<K, decltype(knots)::value, true>(a, g, s, i, r, acc);
        else
          layer_backward_task_lanes<K, decltype(knots)::value, false>(a, g, s, i, r, acc);
      });
      continue;
    }
#endif
    int64_t n_begin, n_end;
    slice_bounds(a.spline.N, g.slices, s, &n_begin, &n_end);
    layer_backward_points<K>(a, g, s, i, r, n_begin, n_end);
  }
#if defined(__AVX2__) && defined(__FMA__)
  delete[] lane_sums;
#endif
  delete[] scratch;
}

// The spline orders with unrolled code; others read k at run time.
template <typename T>
void layer_with_moments(const LayerArgs<T>& a, T* y, double* sums, int64_t slices, int64_t begin,
                        int64_t end) {
  switch (a.spline.k) {
  case 1:
    return layer_slices<1>(a, y, sums, slices, begin, end);
  case 2:
    return layer_slices<2>(a, y, sums, slices, begin, end);
  case 3:
    return layer_slices<3>(a, y, sums, slices, begin, end);
  default:
    return layer_slices<-1>(a, y, sums, slices, begin, end);
  }
}

template <typename T>
void layer_with_moments_backward(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t begin,
                                 int64_t end) {
  switch (a.spline.k) {
  case 1:
    return layer_backward_tasks<1>(a, g, begin, end);
  case 2:
    return layer_backward_tasks<2>(a, g, begin, end);
  case 3:
    return layer_backward_tasks<3>(a, g, begin, end);
  default:
    return layer_backward_tasks<-1>(a, g, begin, end);
  }
}

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
