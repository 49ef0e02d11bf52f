#pragma once
// The regulariser's statistics of a layer's edges without the (N, I, O) activations: per edge the
// sums over the samples S1_io = sum_n phi_nio and S2_io = sum_n phi_nio^2 of the numeric part
//   phi_nio = wb_io base_ni + ws_io spline_nio,   wb = mask * scale_base, ws = mask * scale_sp,
// and their backward, recomputing each point's basis instead of storing it. Sums run in double
// (S2 - S1^2 / N is a difference of near-equal sums when an edge's values vary little).
//
// As spline_threads.h, plain host/device functions: the CPU runs the *_input ones (the basis once
// per (n, i), every output, one thread per input, which owns every row it writes); the CUDA
// kernels run the *_thread ones, and so does the CPU under KAN_FUSED_CPU_ISA=cuda-threads. All are
// static: each instruction set's translation unit keeps its own copy (spline_kernels.h).

#include "spline_threads.h"

#include <cstdint>

namespace kan::detail {

/// Edge (n, i, o): phi and the spline's value and derivative, from the point's basis.
struct EdgePoint {
  double phi, spline, slope;
};

template <typename T>
static KAN_HOST_DEVICE EdgePoint edge_point(const MomentArgs<T>& a, bool inside, T none, int64_t n,
                                            int64_t i, int64_t o, int64_t first, const T* value,
                                            const T* deriv) {
  const auto& s = a.spline;
  const T spline = inside ? edge_value(s, i, o, first, value) : none;
  const T slope = inside ? edge_value(s, i, o, first, deriv) : none;
  const T phi = a.wb[i * s.O + o] * a.base[n * s.I + i] + a.ws[i * s.O + o] * spline;
  return {static_cast<double>(phi), static_cast<double>(spline), static_cast<double>(slope)};
}

/// S1[s, i, o], S2[s, i, o] over the samples of slice s.
template <typename T>
static KAN_HOST_DEVICE void moments_thread(const MomentArgs<T>& a, int64_t slices, int64_t s,
                                           int64_t i, int64_t o, double* s1, double* s2) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t n_begin, n_end;
  slice_bounds(a.spline.N, slices, s, &n_begin, &n_end);
  double sum = 0, squares = 0;
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first = 0;
    const bool inside = point_basis(a.spline, n, i, &first, value, deriv, &none);
    const double phi = edge_point(a, inside, none, n, i, o, first, value, deriv).phi;
    sum += phi;
    squares += phi * phi;
  }
  const int64_t at = (s * a.spline.I + i) * a.spline.O + o;
  s1[at] = sum;
  s2[at] = squares;
}

// The CPU's rows for the backward: spline[o] and slope[o] of a point of input i for every output,
// from its basis (point_basis), the weight's rows read in order (consecutive outputs, consecutive
// addresses) so that the loops vectorise. (The forward needs the splines only: spline_threads.h's
// edges_forward_row.)
template <typename T>
static inline void point_rows(const MomentArgs<T>& a, int64_t i, bool inside, int64_t first,
                              const T* value, const T* deriv, T none, T* spline, T* slope) {
  const auto& sa = a.spline;
  for (int64_t o = 0; o < sa.O; ++o)
    spline[o] = slope[o] = none;
  if (!inside)
    return;
  for (int r = 0; r <= sa.k; ++r) {
    const int64_t m = first + r;
    if (m < 0 || m >= sa.M)
      continue;
    const T* w = sa.weight + (i * sa.M + m) * sa.O;
    for (int64_t o = 0; o < sa.O; ++o) {
      spline[o] += value[r] * w[o];
      slope[o] += deriv[r] * w[o];
    }
  }
}

/// S1[i, :], S2[i, :] over every sample (O each, zero on entry); scratch: O values.
template <typename T>
static inline void moments_input(const MomentArgs<T>& a, int64_t i, double* s1, double* s2,
                                 T* scratch) {
  const int64_t O = a.spline.O;
  T* spline = scratch;
  const T* wb = a.wb + i * O;
  const T* ws = a.ws + i * O;
  for (int64_t n = 0; n < a.spline.N; ++n) {
    edges_forward_row(a.spline, n, i, spline);
    const T b = a.base[n * a.spline.I + i];
    for (int64_t o = 0; o < O; ++o) {
      const double phi = static_cast<double>(wb[o] * b + ws[o] * spline[o]);
      s1[i * O + o] += phi;
      s2[i * O + o] += phi * phi;
    }
  }
}

// The backward. With g_nio = dL/dS1_io + 2 phi_nio dL/dS2_io, the derivative of L by phi_nio
// through the sums:
//   gwb_io += sum_n g base_ni          gws_io += sum_n g spline_nio
//   gcoef_imo += sum_n g ws_io B_m(x_ni)
//   gbase_ni = sum_o g wb_io           gx_ni = sum_o g ws_io spline'_nio (the spline's share)

/// Edge (i, o)'s parameter gradients over the samples of slice s (the CUDA thread (s, i, o) owns
/// the column gcoef[s, i, :, o]).
template <typename T>
static KAN_HOST_DEVICE void moments_backward_edge(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                                  int64_t s, int64_t i, int64_t o) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  const auto& sa = a.spline;
  int64_t n_begin, n_end;
  slice_bounds(sa.N, g.slices, s, &n_begin, &n_end);
  const int64_t io = i * sa.O + o, at = s * sa.I * sa.O + io;
  double* c = g.gcoef + (s * sa.I + i) * sa.M * sa.O;
  const double ws = a.ws[io];
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first = 0;
    const bool inside = point_basis(sa, n, i, &first, value, deriv, &none);
    const auto e = edge_point(a, inside, none, n, i, o, first, value, deriv);
    const double grad = g.g1[io] + 2 * e.phi * g.g2[io];
    g.gwb[at] += grad * a.base[n * sa.I + i];
    g.gws[at] += grad * e.spline;
    if (!inside) {
      if (!is_finite_value(none)) // NaN in every basis function reaches every coefficient
        for (int64_t m = 0; m < sa.M; ++m)
          c[m * sa.O + o] = static_cast<double>(none);
      continue;
    }
    for (int r = 0; r <= sa.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < sa.M)
        c[m * sa.O + o] += grad * ws * value[r];
    }
  }
}

/// gx[n, i] and gbase[n, i] (the CUDA thread (n, i)).
template <typename T>
static KAN_HOST_DEVICE void moments_backward_point(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                                   int64_t n, int64_t i) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  const auto& sa = a.spline;
  int64_t first = 0;
  const bool inside = point_basis(sa, n, i, &first, value, deriv, &none);
  double gx = 0, gbase = 0;
  for (int64_t o = 0; o < sa.O; ++o) {
    const int64_t io = i * sa.O + o;
    const auto e = edge_point(a, inside, none, n, i, o, first, value, deriv);
    const double grad = g.g1[io] + 2 * e.phi * g.g2[io];
    gbase += grad * a.wb[io];
    gx += grad * a.ws[io] * e.slope;
  }
  g.gx[n * sa.I + i] = static_cast<T>(gx);
  g.gbase[n * sa.I + i] = static_cast<T>(gbase);
}

/// Everything of input i (one slice): the CPU's backward, the basis once per sample; scratch:
/// 3 O values.
template <typename T>
static inline void moments_backward_input(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                          int64_t i, T* scratch) {
  const auto& sa = a.spline;
  const int64_t O = sa.O;
  T* spline = scratch;
  T* slope = scratch + O;
  T* scaled = scratch + 2 * O; // g ws: the coefficients' share
  const T* wb = a.wb + i * O;
  const T* ws = a.ws + i * O;
  const double* g1 = g.g1 + i * O;
  const double* g2 = g.g2 + i * O;
  double* gwb = g.gwb + i * O;
  double* gws = g.gws + i * O;
  double* c = g.gcoef + i * sa.M * O;
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  for (int64_t n = 0; n < sa.N; ++n) {
    int64_t first = 0;
    const bool inside = point_basis(sa, n, i, &first, value, deriv, &none);
    point_rows(a, i, inside, first, value, deriv, none, spline, slope);
    const T b = a.base[n * sa.I + i];
    double gx = 0, gbase = 0;
    for (int64_t o = 0; o < O; ++o) {
      const double phi = static_cast<double>(wb[o] * b + ws[o] * spline[o]);
      const double grad = g1[o] + 2 * phi * g2[o];
      gwb[o] += grad * b;
      gws[o] += grad * spline[o];
      gbase += grad * wb[o];
      gx += grad * ws[o] * slope[o];
      scaled[o] = static_cast<T>(grad * ws[o]);
    }
    g.gx[n * sa.I + i] = static_cast<T>(gx);
    g.gbase[n * sa.I + i] = static_cast<T>(gbase);
    if (!inside) {
      if (!is_finite_value(none)) // NaN in every basis function reaches every coefficient
        for (int64_t j = 0; j < sa.M * O; ++j)
          c[j] = static_cast<double>(none);
      continue;
    }
    for (int r = 0; r <= sa.k; ++r) {
      const int64_t m = first + r;
      if (m < 0 || m >= sa.M)
        continue;
      for (int64_t o = 0; o < O; ++o)
        c[m * O + o] += value[r] * scaled[o];
    }
  }
}

} // namespace kan::detail
