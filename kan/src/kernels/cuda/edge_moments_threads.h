#pragma once
// The regulariser's statistics of a layer's edges without the (N, I, O) activations: per edge the
// sums over the samples S1_io = sum_n phi_nio and S2_io = sum_n phi_nio^2 of the numeric part
//   phi_nio = wb_io base_ni + ws_io spline_nio,   wb = mask * scale_base, ws = mask * scale_sp,
// and their backward, recomputing each point's basis instead of storing it. Sums run in double
// (S2 - S1^2 / N is a difference of near-equal sums when an edge's values vary little).
//
// As spline_threads.h, plain host/device functions: the CUDA per-thread kernels run them
// (KAN_CUDA_KERNELS=threads), and so does the CPU under KAN_FUSED_CPU_ISA=cuda-threads; the
// default block kernels are edge_moments_blocks.h's. (The generic and AVX2 CPU sets fuse the sums
// into the layer instead: kernels/cpu/layer_points.h.) All are static: each translation unit keeps
// its own copy (spline_kernels.h).

#include "kernels/cuda/spline_threads.h"

#include <cstdint>

namespace kan::detail {

/// Edge (n, i, o): phi and the spline's value and derivative, from the point's basis.
struct EdgePoint {
  double phi, spline, slope;
};

/// phi_nio for edge (i, o)'s spline value at x_ni.
template <typename T>
static KAN_HOST_DEVICE T edge_phi(const MomentArgs<T>& a, int64_t n, int64_t i, int64_t o,
                                  T spline) {
  const auto& s = a.spline;
  return a.wb[i * s.O + o] * a.base[n * s.I + i] + a.ws[i * s.O + o] * spline;
}

template <typename T>
static KAN_HOST_DEVICE EdgePoint edge_point(const MomentArgs<T>& a, bool inside, T none, int64_t n,
                                            int64_t i, int64_t o, int64_t first, const T* value,
                                            const T* deriv) {
  const auto& s = a.spline;
  const T spline = inside ? edge_value(s, i, o, first, value) : none;
  const T slope = inside ? edge_value(s, i, o, first, deriv) : none;
  const T phi = edge_phi(a, n, i, o, spline);
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
  // In registers until the end: the compiler cannot keep g.gwb[at] there across the stores to c,
  // which may alias it.
  double gwb = 0, gws = 0;
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first = 0;
    const bool inside = point_basis(sa, n, i, &first, value, deriv, &none);
    const auto e = edge_point(a, inside, none, n, i, o, first, value, deriv);
    const double grad = g.g1[io] + 2 * e.phi * g.g2[io];
    gwb += grad * a.base[n * sa.I + i];
    gws += grad * e.spline;
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
  g.gwb[at] = gwb;
  g.gws[at] = gws;
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

} // namespace kan::detail
