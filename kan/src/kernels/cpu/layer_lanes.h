#pragma once
// The layer-with-sums kernels for short knot rows, with the points of one input in the lanes of a
// vector (AVX2: four doubles or eight floats) instead of the outputs. layer_points.h's per-point
// kernels finish each slice's last samples (fewer than a vector's lanes). Empty where the
// instruction set lacks AVX2 and FMA.
//
// Why: where a layer has few outputs (a small model's, or any float64 layer: the per-point kernels
// run float64 scalar), the per-point kernels' products are short and the basis is the time. Here
// the products, too, run lanes at a time, over every function of the knot row (lane_basis, in
// lane_basis.h), which pays for short rows only: P <= kLaneKnots. The arithmetic is the
// per-point kernels' (layer_points.h's comment), the sums in double; the backward sums
// each lane in T over kRowBlock samples, then in double.
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_basis.h"
#include "kernels/cpu/layer_points.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kan::detail::KAN_CPU_ISA {
namespace {

#if defined(__AVX2__) && defined(__FMA__)

// lane_basis writes value[0..M) and deriv[0..M), all that is read, which GCC cannot see; zeroing
// the arrays instead costs a third of the backward.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/// Knot rows up to this long: the recursion's P functions stay in registers and L1.
constexpr int64_t kLaneKnots = 16;

/// Whether the lanes kernels serve a layer: a short knot row, and (float32) fewer outputs than
/// the per-point kernels' eight-wide vectors fill.
template <typename T> inline bool uses_lanes(const SplineArgs<T>& a) {
  return a.P <= kLaneKnots && (sizeof(T) == 8 || a.O < 8);
}

/// The base function and its slope at the lanes' points (base_and_slope).
template <typename T>
inline void lane_base(const LayerArgs<T>& a, int64_t n0, int64_t i, typename Lanes<T>::V x,
                      typename Lanes<T>::V* b, typename Lanes<T>::V* db) {
  using V = typename Lanes<T>::V;
  const V zero = {}, one = zero + T(1);
  switch (a.base) {
  case BaseKind::kSiLU: {
    const V s = load_lanes(a.sigmoid, n0, a.spline.I, i);
    *b = x * s;
    *db = s * (one + x * (one - s));
    return;
  }
  case BaseKind::kIdentity:
    *b = x;
    *db = one;
    return;
  case BaseKind::kZero:
    break;
  }
  *b = *db = zero;
}

#ifdef __AVX512F__
/// The most outputs for which layer_slice_pieces serves: its table loads and permutes per edge
/// cost more than the recursion's products over the row, which it saves once per input
/// (BM_LayerWithSums float64, G 5: [8, 8] 0.28 -> 0.25 ms, [16, 16] even).
constexpr int64_t kPiecesOutputs = 16;

/// The splines of a layer as polynomials on each knot span, for a forward that needs no basis:
/// on span m (t_m <= x < t_m+1) edge (i, o)'s spline is sum_q c_q (x - t_m)^q, q <= k, and a
/// lane reads its span's c_q with one permute from a table of the P - 1 <= 16 spans (a
/// LaneTable). Float64 only (a float32 c_q grows as the span's width to the -q and may
/// overflow); the basis values it replaces are the recursion's at every point, these the same
/// functions in another rounding.
template <int K> struct SplinePieces {
  static constexpr int kSpans = 16;
  /// (I, O, K + 1, kSpans): c_q of edge (i, o) on span m; 0 on spans past the row's.
  std::vector<double> table;
  /// (I, kSpans): t_m of input i's span m.
  std::vector<double> knots;

  static bool serves(const SplineArgs<double>& a) { return a.P <= kSpans; }

  explicit SplinePieces(const SplineArgs<double>& a)
      : table(static_cast<size_t>(a.I * a.O * (K + 1) * kSpans), 0.0),
        knots(static_cast<size_t>(a.I * kSpans), 0.0) {
    using V = Lanes<double>::V;
    constexpr int L = Lanes<double>::kCount;
    // The knots and reciprocals padded with zeros on both sides, so that a span's neighbours
    // load without bounds: index kPad + j is knot j.
    constexpr int64_t kPad = K + 1, kPadded = kPad + kSpans + K + 2;
    const int64_t P = a.P, O = a.O, rows = a.M + 2 * K;
    V lane = {};
    for (int l = 0; l < L; ++l)
      lane[l] = l;
    const auto load = [](const double* p) {
      V v;
      __builtin_memcpy(&v, p, sizeof v);
      return v;
    };
    for (int64_t i = 0; i < a.I; ++i) {
      double t[kPadded] = {}, inv[K][kPadded] = {};
      for (int64_t j = 0; j < P; ++j) {
        t[kPad + j] = a.grid[i * P + j];
        for (int p = 1; p <= K; ++p)
          inv[p - 1][kPad + j] = a.inv[(i * K + p - 1) * P + j];
      }
      for (int64_t m = 0; m + 1 < P; ++m)
        knots[i * kSpans + m] = t[kPad + m];
      // The spans in the lanes: m = m0 + l.
      for (int64_t m0 = 0; m0 + 1 < P; m0 += L) {
        const V m = static_cast<double>(m0) + lane, tm = load(t + kPad + m0);
        // B_j (j = m - K .. m, at j - m + K) as polynomials in s = x - t_m, by the recursion
        // of lane_basis: B_j = (x - t_j) inv_p[j] B_j + (t_j+p+1 - x) inv_p[j+1] B_j+1; lanes
        // past the row's spans and functions lane_basis does not compute are zero.
        V b[K + 2][K + 1] = {};
        b[K][0] = m <= static_cast<double>(P - 2) ? V{} + 1 : V{};
        for (int p = 1; p <= K; ++p) {
          V next[K + 2][K + 1] = {};
          for (int at = K - p; at <= K; ++at) {
            const int64_t j0 = kPad + m0 + at - K; // j's index in the padded arrays, lane 0
            const V tj = load(t + j0), tjp = load(t + j0 + p + 1), lo = load(inv[p - 1] + j0);
            const V hi = at < K ? load(inv[p - 1] + j0 + 1) : V{}; // B_m+1 below: 0
            for (int q = 0; q < p; ++q) {
              next[at][q] += (tm - tj) * lo * b[at][q] + (tjp - tm) * hi * b[at + 1][q];
              next[at][q + 1] += lo * b[at][q] - hi * b[at + 1][q];
            }
            // j >= 0 and j + p + 1 <= P - 1: a function lane_basis computes at this order.
            const auto exists = (m >= static_cast<double>(K - at)) &
                                (m <= static_cast<double>(P - 2 - (at - K) - p));
            for (int q = 0; q <= p; ++q)
              next[at][q] = exists ? next[at][q] : V{};
          }
          for (int r = 0; r < K + 2; ++r)
            for (int q = 0; q <= K; ++q)
              b[r][q] = next[r][q];
        }
        const auto spans = static_cast<__mmask8>((1u << min_of(int64_t{L}, P - 1 - m0)) - 1);
        for (int64_t o = 0; o < O; ++o) {
          V c[K + 1] = {};               // K + 1 sums side by side: one would wait on each addition
          for (int r = 0; r <= K; ++r) { // function m - K + r's weight row is m + r
            const V w = bit_cast<V>(
                _mm512_mask_i64gather_pd(_mm512_setzero_pd(), spans, lane_offsets(double{}, O),
                                         a.weight + (i * rows + m0 + r) * O + o, 8));
            for (int q = 0; q <= K; ++q)
              c[q] += w * b[r][q];
          }
          for (int q = 0; q <= K; ++q)
            __builtin_memcpy(&table[((i * O + o) * (K + 1) + q) * kSpans + m0], &c[q], sizeof(V));
        }
      }
    }
  }
};
#endif

#ifdef __AVX512F__
/// layer_slice_lanes through SplinePieces: per point its span by counting and one Horner
/// polynomial per edge instead of the recursion over every function of the row.
template <int K>
void layer_slice_pieces(const LayerArgs<double>& a, double* y, double* s1, double* s2,
                        int64_t n_begin, int64_t n_end) {
  using V = Lanes<double>::V;
  constexpr int L = Lanes<double>::kCount, S = SplinePieces<K>::kSpans;
  const auto& sa = a.spline;
  const int64_t I = sa.I, O = sa.O, P = sa.P;
  const SplinePieces<K> pieces(sa);
  V* out = new V[O];
  V* lane_s1 = new V[2 * I * O](); // as layer_slice_lanes's
  V* lane_s2 = lane_s1 + I * O;
  int64_t n0 = n_begin;
  for (; n0 + L <= n_end; n0 += L) {
    for (int64_t o = 0; o < O; ++o)
      out[o] = V{};
    for (int64_t i = 0; i < I; ++i) {
      const V x = load_lanes(sa.x, n0, I, i);
      V b, db;
      lane_base(a, n0, i, x, &b, &db);
      const __m512d xv = bit_cast<__m512d>(x);
      Lanes<double>::Mask in;
      const __m512i span = bit_cast<__m512i>(lane_span(sa.grid + i * P, P, x, &in));
      const __mmask8 inside = _mm512_test_epi64_mask(bit_cast<__m512i>(in), bit_cast<__m512i>(in));
      const __m512d s =
          _mm512_sub_pd(xv, LaneTable<double>(pieces.knots.data() + i * S, S).at(span));
      const V none = x - x; // NaN for a non-finite x, as the recursion gives it
      const double* wb = a.wb + i * O;
      const double* ws = a.ws + i * O;
      for (int64_t o = 0; o < O; ++o) {
        const double* c = pieces.table.data() + (i * O + o) * (K + 1) * S;
        __m512d sp = LaneTable<double>(c + K * S, S).at(span, inside);
        for (int q = K - 1; q >= 0; --q)
          sp = _mm512_fmadd_pd(sp, s, LaneTable<double>(c + q * S, S).at(span, inside));
        const V phi = wb[o] * b + ws[o] * (bit_cast<V>(sp) + none);
        out[o] += phi;
        lane_s1[i * O + o] += phi;
        lane_s2[i * O + o] += phi * phi;
      }
    }
    for (int64_t o = 0; o < O; ++o)
      store_lanes(y, n0, O, o, load_lanes(y, n0, O, o) + out[o]);
  }
  for (int64_t e = 0; e < I * O; ++e) {
    s1[e] += lane_sum(lane_s1[e]);
    s2[e] += lane_sum(lane_s2[e]);
  }
  delete[] lane_s1;
  delete[] out;
  layer_slice<K>(a, y, s1, s2, n0, n_end); // the last samples, fewer than L
}
#endif

/// y's rows [n_begin, n_end) and their sums s1, s2 (I, O each), lanes at a time: layer_slice.
/// NP > 0: P knots per row, with K >= 0 (with_knots).
template <int K, int NP, typename T>
void layer_slice_lanes(const LayerArgs<T>& a, T* y, double* s1, double* s2, int64_t n_begin,
                       int64_t n_end) {
  using V = typename Lanes<T>::V;
  using D = typename Lanes<T>::D;
  constexpr int L = Lanes<T>::kCount;
  const auto& sa = a.spline;
  const int k = K >= 0 ? K : sa.k;
  const int64_t I = sa.I, O = sa.O, M = NP > 0 ? NP - k - 1 : sa.M, rows = M + 2 * k;
#ifdef __AVX512F__
  if constexpr (std::is_same<T, double>::value && K >= 0)
    if (SplinePieces<K>::serves(sa) && O <= kPiecesOutputs)
      return layer_slice_pieces<K>(a, y, s1, s2, n_begin, n_end);
#endif
  V* out = new V[O]; // y's lanes, summed over the inputs
  // The sums' lanes (in double), added across the lanes once at the end: one horizontal sum per
  // edge and block cost as much as the block's splines on small layers.
  D* lane_s1 = new D[2 * I * O]();
  D* lane_s2 = lane_s1 + I * O;
  int64_t n0 = n_begin;
  for (; n0 + L <= n_end; n0 += L) {
    for (int64_t o = 0; o < O; ++o)
      out[o] = V{};
    for (int64_t i = 0; i < I; ++i) {
      const V x = load_lanes(sa.x, n0, I, i);
      V b, db, value[kLaneKnots];
      lane_base(a, n0, i, x, &b, &db);
      lane_basis<T, false, NP, K>(sa.grid + i * sa.P, sa.inv + i * k * sa.P, sa.P, k, x, value,
                                  nullptr);
      const T* w = sa.weight + (i * rows + k) * O; // function j's row is j + k
      const T* wb = a.wb + i * O;
      const T* ws = a.ws + i * O;
      for (int64_t o = 0; o < O; ++o) {
        V sp = {};
        for (int64_t j = 0; j < M; ++j)
          sp += value[j] * w[j * O + o];
        const V phi = wb[o] * b + ws[o] * sp;
        out[o] += phi;
        const D phi_d = __builtin_convertvector(phi, D);
        lane_s1[i * O + o] += phi_d;
        lane_s2[i * O + o] += phi_d * phi_d;
      }
    }
    for (int64_t o = 0; o < O; ++o)
      store_lanes(y, n0, O, o, load_lanes(y, n0, O, o) + out[o]);
  }
  for (int64_t e = 0; e < I * O; ++e) {
    s1[e] += lane_sum(lane_s1[e]);
    s2[e] += lane_sum(lane_s2[e]);
  }
  delete[] lane_s1;
  delete[] out;
  layer_slice<K>(a, y, s1, s2, n0, n_end); // the last samples, fewer than L
}

/// The lanes' sums of a block of samples (in T), before they go to the double totals.
template <typename T> struct LaneBlockSums {
  using V = typename Lanes<T>::V;
  V* gwb;   ///< (O)
  V* gws;   ///< (O)
  V* gcoef; ///< (M, O)
};

/// Input i over the samples of slice s, lanes at a time (layer_backward_points); r is the scratch
/// of the per-point kernels that finish the slice. NP as for layer_slice_lanes. Without kGradX
/// (g.gx null: the network's input, whose gradient nobody wants) neither the slopes nor the
/// splines' derivatives are computed: 2M + 9 vector operations an output instead of 3M + 11; and
/// the blocks' basis and base, which then depend on x and the grid alone, may be kept from one
/// call to the next (g.kept: block n0 / L of input i, M + 1 vectors), which takes the recursion
/// off a small model's first layer (BM_ToyEvaluation, Zen 4: 111 us kept, 122 us computed).
template <int K, int NP, bool kGradX, typename T>
void layer_backward_task_lanes(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t s, int64_t i,
                               const LayerRows<T>& r, const LaneBlockSums<T>& acc) {
  using V = typename Lanes<T>::V;
  using D = typename Lanes<T>::D;
  constexpr int L = Lanes<T>::kCount;
  const auto& sa = a.spline;
  const int k = K >= 0 ? K : sa.k;
  const int64_t I = sa.I, O = sa.O, M = NP > 0 ? NP - k - 1 : sa.M, rows = M + 2 * k;
  const T* t = sa.grid + i * sa.P;
  const T* inv = sa.inv + i * k * sa.P;
  const T* w = sa.weight + (i * rows + k) * O; // function j's row is j + k
  const T* wb = a.wb + i * O;
  const T* ws = a.ws + i * O;
  double* gcoef = g.gcoef + ((s * I + i) * rows + k) * O;
  double* gwb = g.gwb + (s * I + i) * O;
  double* gws = g.gws + (s * I + i) * O;
  const auto clear = [&] {
    for (int64_t o = 0; o < O; ++o)
      acc.gwb[o] = acc.gws[o] = V{};
    for (int64_t e = 0; e < M * O; ++e)
      acc.gcoef[e] = V{};
  };
  const auto flush = [&] {
    for (int64_t o = 0; o < O; ++o) {
      gwb[o] += lane_sum(__builtin_convertvector(acc.gwb[o], D));
      gws[o] += lane_sum(__builtin_convertvector(acc.gws[o], D));
    }
    for (int64_t e = 0; e < M * O; ++e)
      gcoef[e] += lane_sum(__builtin_convertvector(acc.gcoef[e], D));
    clear();
  };
  clear();
  T* kept = !kGradX && g.kept.values != nullptr ? g.kept.values + i * (sa.N / L + 1) * (M + 1) * L
                                                : nullptr;
  int64_t n_begin, n_end;
  slice_bounds(sa.N, g.slices, s, &n_begin, &n_end);
  int64_t n0 = n_begin;
  for (; n0 + L <= n_end; n0 += L) {
    V b, db, value[kLaneKnots], deriv[kLaneKnots];
    T* block = kept != nullptr ? kept + (n0 / L) * (M + 1) * L : nullptr; // unaligned
    if (block != nullptr && g.kept.ready) {
      for (int64_t j = 0; j < M; ++j)
        __builtin_memcpy(&value[j], block + j * L, sizeof(V));
      __builtin_memcpy(&b, block + M * L, sizeof(V));
    } else {
      const V x = load_lanes(sa.x, n0, I, i);
      lane_base(a, n0, i, x, &b, &db);
      lane_basis<T, kGradX, NP, K>(t, inv, sa.P, k, x, value, deriv);
      if (block != nullptr) {
        for (int64_t j = 0; j < M; ++j)
          __builtin_memcpy(block + j * L, &value[j], sizeof(V));
        __builtin_memcpy(block + M * L, &b, sizeof(V));
      }
    }
    V to_base = {}, to_slope = {};
    for (int64_t o = 0; o < O; ++o) {
      V sp = {}, sl = {};
      for (int64_t j = 0; j < M; ++j) {
        sp += value[j] * w[j * O + o];
        if constexpr (kGradX)
          sl += deriv[j] * w[j * O + o];
      }
      const V phi = wb[o] * b + ws[o] * sp;
      // dL/dphi through the sums, g1 + 2 phi g2, in double (LayerRows).
      const D through = g.g1[i * O + o] + 2 * g.g2[i * O + o] * __builtin_convertvector(phi, D);
      V h = __builtin_convertvector(through, V);
      if (g.gy != nullptr)
        h += load_lanes(g.gy, n0, O, o);
      const V hw = h * ws[o];
      if constexpr (kGradX) {
        to_base += h * wb[o];
        to_slope += hw * sl;
      }
      acc.gwb[o] += h * b;
      acc.gws[o] += h * sp;
      for (int64_t j = 0; j < M; ++j)
        acc.gcoef[j * O + o] += value[j] * hw;
    }
    if constexpr (kGradX)
      store_lanes(g.gx, n0, I, i, db * to_base + to_slope);
    if ((n0 + L - n_begin) % kRowBlock == 0)
      flush();
  }
  flush();
  layer_backward_points<K>(a, g, s, i, r, n0, n_end); // the last samples, fewer than L
}

#pragma GCC diagnostic pop
#endif

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
