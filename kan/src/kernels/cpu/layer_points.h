#pragma once
// A whole layer and its regulariser sums in one pass over the points: the CPU's regularised
// steps (layer_moments.h chooses between these and layer_lanes.h's). For each point (n, i) the
// basis once, then, over the outputs (AVX2 intrinsics for float32, eight at a time; plain loops
// otherwise), the edges' values
//   phi_nio = wb_io base(x_ni) + ws_io spline_nio,   y_no = sum_i phi_nio,
//   S1_io = sum_n phi_nio,   S2_io = sum_n phi_nio^2   (in double: S2 - S1^2 / N cancels),
// and in the backward, with h_nio = dL/dphi_nio = dL/dy_no + dL/dS1_io + 2 phi_nio dL/dS2_io,
//   gwb_io = sum_n h base_ni,   gws_io = sum_n h spline_nio,   gcoef_imo = sum_n h ws_io B_m(x_ni),
//   gx_ni = base'(x_ni) sum_o h wb_io + sum_o h ws_io spline'_nio.
// The backward sums in T over blocks of kRowBlock samples, then in double.
//
// The weight (LayerArgs::spline.weight) is coef transposed to (I, M, O) with k zero rows added at
// both ends, (I, M + 2k, O), and the backward's gcoef has the same rows: every point's k + 1 rows
// start at row first + k, so the functions a knot span lacks (value 0) read and write padding
// instead of needing a bounds check.
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_basis.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kan::detail::KAN_CPU_ISA {
namespace {

/// The base function at point (n, i) and its derivative: silu = x sigmoid(x) from
/// LayerArgs::sigmoid (ATen's vectorised sigmoid, not one exp per point here), the identity or
/// zero.
template <typename T>
inline void base_and_slope(const LayerArgs<T>& a, int64_t at, T x, T* b, T* db) {
  switch (a.base) {
  case BaseKind::kSiLU: {
    const T s = a.sigmoid[at];
    *b = x * s;
    *db = s * (T(1) + x * (T(1) - s));
    return;
  }
  case BaseKind::kIdentity:
    *b = x;
    *db = T(1);
    return;
  case BaseKind::kZero:
    break;
  }
  *b = *db = T(0);
}

/// One point's edges: y += phi, s1 += phi, s2 += phi^2 over the outputs, for the k + 1 weight rows
/// w (O apart) and basis v; v null: every spline is `spline` (0 outside the grid, NaN for a
/// non-finite x).
template <int K, typename T>
inline void layer_point_scalar(int k, const T* v, const T* __restrict w, T spline, T b,
                               const T* __restrict wb, const T* __restrict ws, int64_t O,
                               T* __restrict y, double* __restrict s1, double* __restrict s2,
                               int64_t o_begin = 0) {
  const int kk = K >= 0 ? K : k;
  for (int64_t o = o_begin; o < O; ++o) {
    T sp = spline;
    if (v != nullptr)
      for (int r = 0; r <= kk; ++r)
        sp += v[r] * w[r * O + o];
    const T phi = wb[o] * b + ws[o] * sp;
    y[o] += phi;
    s1[o] += static_cast<double>(phi);
    s2[o] += static_cast<double>(phi) * static_cast<double>(phi);
  }
}

template <int K, typename T>
inline void layer_point(int k, const T* v, const T* w, T spline, T b, const T* wb, const T* ws,
                        int64_t O, T* y, double* s1, double* s2) {
  layer_point_scalar<K>(k, v, w, spline, b, wb, ws, O, y, s1, s2);
}

#if defined(__AVX2__) && defined(__FMA__)
// float32 with AVX2 + FMA spelled out (the compiler leaves the loops above scalar): eight outputs
// at a time, the sums of phi and phi^2 in two halves of four doubles.
inline __m256d low_doubles(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
inline __m256d high_doubles(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

template <int K>
inline void layer_point(int k, const float* v, const float* w, float spline, float b,
                        const float* wb, const float* ws, int64_t O, float* y, double* s1,
                        double* s2) {
  const int kk = K >= 0 ? K : k;
  if (v == nullptr || O < 8)
    return layer_point_scalar<K>(k, v, w, spline, b, wb, ws, O, y, s1, s2);
  __m256 vv[kFusedMaxOrder + 1];
  for (int r = 0; r <= kk; ++r)
    vv[r] = _mm256_set1_ps(v[r]);
  const __m256 bb = _mm256_set1_ps(b);
  int64_t o = 0;
  for (; o + 8 <= O; o += 8) {
    __m256 sp = _mm256_mul_ps(vv[0], _mm256_loadu_ps(w + o));
    for (int r = 1; r <= kk; ++r)
      sp = _mm256_fmadd_ps(vv[r], _mm256_loadu_ps(w + r * O + o), sp);
    const __m256 phi =
        _mm256_fmadd_ps(_mm256_loadu_ps(wb + o), bb, _mm256_mul_ps(_mm256_loadu_ps(ws + o), sp));
    _mm256_storeu_ps(y + o, _mm256_add_ps(_mm256_loadu_ps(y + o), phi));
    const __m256d lo = low_doubles(phi), hi = high_doubles(phi);
    _mm256_storeu_pd(s1 + o, _mm256_add_pd(_mm256_loadu_pd(s1 + o), lo));
    _mm256_storeu_pd(s1 + o + 4, _mm256_add_pd(_mm256_loadu_pd(s1 + o + 4), hi));
    _mm256_storeu_pd(s2 + o, _mm256_fmadd_pd(lo, lo, _mm256_loadu_pd(s2 + o)));
    _mm256_storeu_pd(s2 + o + 4, _mm256_fmadd_pd(hi, hi, _mm256_loadu_pd(s2 + o + 4)));
  }
  layer_point_scalar<K>(k, v, w, 0.0f, b, wb, ws, O, y, s1, s2, o); // the last O % 8
}
#endif

/// y's rows [n_begin, n_end) and their sums s1, s2 (I, O each).
template <int K, typename T>
void layer_slice(const LayerArgs<T>& a, T* y, double* s1, double* s2, int64_t n_begin,
                 int64_t n_end) {
  const auto& sa = a.spline;
  const int k = K >= 0 ? K : sa.k;
  const int64_t I = sa.I, O = sa.O, rows = sa.M + 2 * k;
  BlockBasis<T, K, false> basis;
  for (int64_t b0 = n_begin; b0 < n_end; b0 += kRowBlock) {
    const int64_t b1 = min_of(n_end, b0 + kRowBlock);
    for (int64_t i = 0; i < I; ++i) {
      const T* w = sa.weight + i * rows * O;
      basis.fill(sa.x, I, i, sa.grid + i * sa.P, sa.inv + i * k * sa.P, sa.P, k, b0, b1);
      for (int64_t n = b0; n < b1; ++n) {
        const T xv = sa.x[n * I + i];
        T b, db;
        base_and_slope(a, n * I + i, xv, &b, &db);
        const bool inside = basis.inside[n - b0];
        layer_point<K>(k, inside ? basis.values(n - b0) : nullptr,
                       inside ? w + (basis.first[n - b0] + k) * O : w,
                       is_finite_value(xv) ? T(0) : xv - xv, b, a.wb + i * O, a.ws + i * O, O,
                       y + n * O, s1 + i * O, s2 + i * O);
      }
    }
  }
}

/// The backward's per-input arrays over the outputs, in T but for dL/dS1 and dL/dS2: dL/dphi
/// through the sums, g1 + 2 phi g2, is computed in double, as for a standard deviation its terms
/// nearly cancel where phi is close to the edge's mean.
template <typename T> struct LayerRows {
  const double* g1; ///< dL/dS1
  const double* g2; ///< dL/dS2
  T* zero;          ///< dL/dy where y is not used
  T* gwb;           ///< the block's sums
  T* gws;
  T* gcoef; ///< (M + 2k, O)
};

/// One point's share of the backward over the outputs [o_begin, O): adds to the block sums and
/// the gcoef rows c (O apart; v null: every spline is `spline`, no rows) and returns
/// db sum_o h wb + sum_o h ws spline', its share of gx.
template <int K, typename T>
inline T layer_point_backward_scalar(int k, const T* v, const T* d, const T* __restrict w, T spline,
                                     T b, T db, const T* __restrict wb, const T* __restrict ws,
                                     const T* __restrict gy, const LayerRows<T>& r, T* __restrict c,
                                     int64_t O, int64_t o_begin = 0) {
  const int kk = K >= 0 ? K : k;
  const double* __restrict g1 = r.g1;
  const double* __restrict g2 = r.g2;
  T* __restrict gwb = r.gwb;
  T* __restrict gws = r.gws;
  T to_base = 0, to_slope = 0;
  for (int64_t o = o_begin; o < O; ++o) {
    T sp = spline, sl = 0;
    if (v != nullptr)
      for (int j = 0; j <= kk; ++j) {
        sp += v[j] * w[j * O + o];
        sl += d[j] * w[j * O + o];
      }
    const T phi = wb[o] * b + ws[o] * sp;
    const T h = gy[o] + static_cast<T>(g1[o] + 2 * g2[o] * static_cast<double>(phi));
    const T hw = h * ws[o];
    to_base += h * wb[o];
    to_slope += hw * sl;
    gwb[o] += h * b;
    gws[o] += h * sp;
    if (v != nullptr)
      for (int j = 0; j <= kk; ++j)
        c[j * O + o] += v[j] * hw;
  }
  // The spline's slope is 0 outside the grid and NaN for a non-finite x (spline).
  return db * to_base + (v != nullptr ? to_slope : spline);
}

template <int K, typename T>
inline T layer_point_backward(int k, const T* v, const T* d, const T* w, T spline, T b, T db,
                              const T* wb, const T* ws, const T* gy, const LayerRows<T>& r, T* c,
                              int64_t O) {
  return layer_point_backward_scalar<K>(k, v, d, w, spline, b, db, wb, ws, gy, r, c, O);
}

#if defined(__AVX2__) && defined(__FMA__)
template <int K>
inline float layer_point_backward(int k, const float* v, const float* d, const float* w,
                                  float spline, float b, float db, const float* wb, const float* ws,
                                  const float* gy, const LayerRows<float>& r, float* c, int64_t O) {
  const int kk = K >= 0 ? K : k;
  if (v == nullptr || O < 8)
    return layer_point_backward_scalar<K>(k, v, d, w, spline, b, db, wb, ws, gy, r, c, O);
  __m256 vv[kFusedMaxOrder + 1], dd[kFusedMaxOrder + 1];
  for (int j = 0; j <= kk; ++j) {
    vv[j] = _mm256_set1_ps(v[j]);
    dd[j] = _mm256_set1_ps(d[j]);
  }
  const __m256 bb = _mm256_set1_ps(b);
  __m256 to_base = _mm256_setzero_ps(), to_slope = _mm256_setzero_ps();
  int64_t o = 0;
  for (; o + 8 <= O; o += 8) {
    __m256 wj = _mm256_loadu_ps(w + o);
    __m256 sp = _mm256_mul_ps(vv[0], wj), sl = _mm256_mul_ps(dd[0], wj);
    for (int j = 1; j <= kk; ++j) {
      wj = _mm256_loadu_ps(w + j * O + o);
      sp = _mm256_fmadd_ps(vv[j], wj, sp);
      sl = _mm256_fmadd_ps(dd[j], wj, sl);
    }
    const __m256 wbo = _mm256_loadu_ps(wb + o), wso = _mm256_loadu_ps(ws + o);
    const __m256 phi = _mm256_fmadd_ps(wbo, bb, _mm256_mul_ps(wso, sp));
    // g1 + 2 phi g2 in double (LayerRows), then in float.
    const __m256d lo = low_doubles(phi), hi = high_doubles(phi);
    const __m256d through_lo = _mm256_fmadd_pd(_mm256_add_pd(lo, lo), _mm256_loadu_pd(r.g2 + o),
                                               _mm256_loadu_pd(r.g1 + o));
    const __m256d through_hi = _mm256_fmadd_pd(_mm256_add_pd(hi, hi), _mm256_loadu_pd(r.g2 + o + 4),
                                               _mm256_loadu_pd(r.g1 + o + 4));
    const __m256 through =
        _mm256_set_m128(_mm256_cvtpd_ps(through_hi), _mm256_cvtpd_ps(through_lo));
    const __m256 h = _mm256_add_ps(_mm256_loadu_ps(gy + o), through);
    const __m256 hw = _mm256_mul_ps(h, wso);
    to_base = _mm256_fmadd_ps(h, wbo, to_base);
    to_slope = _mm256_fmadd_ps(hw, sl, to_slope);
    _mm256_storeu_ps(r.gwb + o, _mm256_fmadd_ps(h, bb, _mm256_loadu_ps(r.gwb + o)));
    _mm256_storeu_ps(r.gws + o, _mm256_fmadd_ps(h, sp, _mm256_loadu_ps(r.gws + o)));
    for (int j = 0; j <= kk; ++j)
      _mm256_storeu_ps(c + j * O + o, _mm256_fmadd_ps(vv[j], hw, _mm256_loadu_ps(c + j * O + o)));
  }
  const float rest = // the last O % 8
      layer_point_backward_scalar<K>(k, v, d, w, 0.0f, b, db, wb, ws, gy, r, c, O, o);
  return db * horizontal_sum(to_base) + horizontal_sum(to_slope) + rest;
}
#endif

/// Input i over the samples [n_begin, n_end) of slice s (r.g1 and r.g2 are input i's).
template <int K, typename T>
void layer_backward_points(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t s, int64_t i,
                           const LayerRows<T>& r, int64_t n_begin, int64_t n_end) {
  const auto& sa = a.spline;
  const int k = K >= 0 ? K : sa.k;
  const int64_t I = sa.I, O = sa.O, rows = sa.M + 2 * k;
  const T* t = sa.grid + i * sa.P;
  const T* inv = sa.inv + i * k * sa.P;
  const T* w = sa.weight + i * rows * O;
  const T* wb = a.wb + i * O;
  const T* ws = a.ws + i * O;
  double* gcoef = g.gcoef + (s * I + i) * rows * O;
  double* gwb = g.gwb + (s * I + i) * O;
  double* gws = g.gws + (s * I + i) * O;
  for (int64_t o = 0; o < O; ++o)
    r.gwb[o] = r.gws[o] = T(0);
  for (int64_t e = 0; e < rows * O; ++e)
    r.gcoef[e] = T(0);
  const auto flush = [&] {
    for (int64_t o = 0; o < O; ++o) {
      gwb[o] += static_cast<double>(r.gwb[o]);
      gws[o] += static_cast<double>(r.gws[o]);
      r.gwb[o] = r.gws[o] = T(0);
    }
    for (int64_t e = 0; e < rows * O; ++e) {
      gcoef[e] += static_cast<double>(r.gcoef[e]);
      r.gcoef[e] = T(0);
    }
  };
  BlockBasis<T, K, true> basis;
  for (int64_t b0 = n_begin; b0 < n_end; b0 += kRowBlock) {
    const int64_t b1 = min_of(n_end, b0 + kRowBlock);
    basis.fill(sa.x, I, i, t, inv, sa.P, k, b0, b1);
    for (int64_t n = b0; n < b1; ++n) {
      const T xv = sa.x[n * I + i];
      T b, db;
      base_and_slope(a, n * I + i, xv, &b, &db);
      const bool inside = basis.inside[n - b0];
      const int64_t first = inside ? basis.first[n - b0] : 0;
      const T none = is_finite_value(xv) ? T(0) : xv - xv;
      const T gx = layer_point_backward<K>(k, inside ? basis.values(n - b0) : nullptr,
                                           basis.derivs(n - b0), w + (first + k) * O, none, b, db,
                                           wb, ws, g.gy != nullptr ? g.gy + n * O : r.zero, r,
                                           r.gcoef + (first + k) * O, O);
      if (g.gx != nullptr)
        g.gx[n * I + i] = gx;
      if (!is_finite_value(xv)) // NaN in every basis function reaches every coefficient
        for (int64_t e = 0; e < rows * O; ++e)
          r.gcoef[e] = none;
    }
    flush();
  }
}

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
