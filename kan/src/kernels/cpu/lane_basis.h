#pragma once
// The B-spline basis at several samples of one input at once, for the CPU kernels
// (spline_rows.h, layer_points.h, layer_lanes.h).
//
// Why: computed point after point, a basis costs its knot span and then the recursion's chain of
// dependent operations, 60 to 100 cycles, which was most of a layer's time at small G. With the
// samples in the lanes of a vector every lane runs the same operations: the whole Cox-de Boor
// recursion over the knot row, all M = P - k - 1 functions (no knot span, which differs between
// lanes), at a cost proportional to P instead of k^2.
#include "kernels/cpu/isa.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kan::detail::KAN_CPU_ISA {
namespace {

#if defined(__AVX2__) && defined(__FMA__)

// lane_basis writes value[0..M) and deriv[0..M), all that is read, which GCC cannot see; zeroing
// the arrays instead costs a third of the lanes kernels' backward.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/// The longest knot row lane_basis takes: its arrays, and the recursion's cost, grow with P.
constexpr int64_t kLaneBasisKnots = 32;
/// The knot rows BlockBasis specialises (with_knots): G <= 10 at k = 3.
constexpr int kBlockBasisKnots = 17;

/// Calls f(std::integral_constant<int, P>) for a knot row of P <= kMaxP knots where the kernels
/// have a specialisation, else f(std::integral_constant<int, -1>) (P read at run time). With P and
/// k known the recursion's loops unroll completely; read at run time, every loop checks its bound
/// at each count (BM_LayerWithSums [5, 1], N 1000, float64, forward and backward: 0.45-0.59 ms
/// with P read at run time, 0.34-0.37 ms specialised). Spline order 3 (pykan's default) only.
template <int K, int kMaxP, int NP = 2 * K + 2, typename F>
inline void with_knots(int64_t P, F&& f) {
  if constexpr (K != 3 || NP > kMaxP)
    f(std::integral_constant<int, -1>{});
  else if (P == NP)
    f(std::integral_constant<int, NP>{});
  else
    with_knots<K, kMaxP, NP + 1>(P, f);
}

/// GCC vector types of one register (AVX2: 32 bytes; AVX-512: 64): V holds the lanes, D the same
/// lanes in double, Mask a comparison's result.
#ifdef __AVX512F__
constexpr int kLaneBytes = 64;
#else
constexpr int kLaneBytes = 32;
#endif
template <typename T> struct Lanes;
template <> struct Lanes<double> {
  static constexpr int kCount = kLaneBytes / 8;
  typedef double V __attribute__((vector_size(kLaneBytes)));
  typedef double D __attribute__((vector_size(kLaneBytes)));
  typedef int64_t Mask __attribute__((vector_size(kLaneBytes)));
};
template <> struct Lanes<float> {
  static constexpr int kCount = kLaneBytes / 4;
  typedef float V __attribute__((vector_size(kLaneBytes)));
  typedef double D __attribute__((vector_size(2 * kLaneBytes)));
  typedef int32_t Mask __attribute__((vector_size(kLaneBytes)));
};

template <typename To, typename From> inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
  To to;
  __builtin_memcpy(&to, &from, sizeof to);
  return to;
}

#ifdef __AVX512F__
/// The lanes' element offsets l * stride in a row-major array of `stride` columns, for AVX-512's
/// gathers and scatters where they pay (lane_gathers: one instruction where the scalar loop takes
/// a load or store and a shuffle per lane). Float's offsets are 32-bit: strides past
/// kFloatGatherStride take the scalar loop.
inline __m512i lane_offsets(double, int64_t stride) {
  return _mm512_set_epi64(7 * stride, 6 * stride, 5 * stride, 4 * stride, 3 * stride, 2 * stride,
                          stride, 0);
}
constexpr int64_t kFloatGatherStride = (int64_t{1} << 31) / 16 - 1;
inline __m512i lane_offsets(float, int64_t stride) {
  const int s = static_cast<int>(stride);
  return _mm512_set_epi32(15 * s, 14 * s, 13 * s, 12 * s, 11 * s, 10 * s, 9 * s, 8 * s, 7 * s,
                          6 * s, 5 * s, 4 * s, 3 * s, 2 * s, s, 0);
}
#endif

#ifdef __AVX512F__
/// lane_gathers(), read once when the library loads: a function-local static's guard in the
/// kernels' loops made GCC keep their vectors in memory around it (BM_ToyEvaluation 15 % slower).
const bool kGathersPay = lane_gathers();
#endif

/// The values at rows n0 .. n0 + lanes - 1 of column `at` of a row-major array with `stride`
/// columns.
template <typename T>
inline typename Lanes<T>::V load_lanes(const T* p, int64_t n0, int64_t stride, int64_t at) {
  using V = typename Lanes<T>::V;
  p += n0 * stride + at;
  V v;
  if (stride == 1) {
    __builtin_memcpy(&v, p, sizeof v);
    return v;
  }
#ifdef __AVX512F__
  if (kGathersPay) {
    if constexpr (std::is_same<T, double>::value)
      return bit_cast<V>(
          _mm512_mask_i64gather_pd(_mm512_setzero_pd(), 0xFF, lane_offsets(T{}, stride), p, 8));
    else if (stride <= kFloatGatherStride)
      return bit_cast<V>(
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, lane_offsets(T{}, stride), p, 4));
  }
#endif
  for (int l = 0; l < Lanes<T>::kCount; ++l)
    v[l] = p[l * stride];
  return v;
}

/// Writes v to the rows n0 .. n0 + lanes - 1 of column `at` (load_lanes's).
template <typename T>
inline void store_lanes(T* p, int64_t n0, int64_t stride, int64_t at, typename Lanes<T>::V v) {
  p += n0 * stride + at;
  if (stride == 1) {
    __builtin_memcpy(p, &v, sizeof v);
    return;
  }
#ifdef __AVX512F__
  if (kGathersPay) {
    if constexpr (std::is_same<T, double>::value) {
      _mm512_i64scatter_pd(p, lane_offsets(T{}, stride), bit_cast<__m512d>(v), 8);
      return;
    } else if (stride <= kFloatGatherStride) {
      _mm512_i32scatter_ps(p, lane_offsets(T{}, stride), bit_cast<__m512>(v), 4);
      return;
    }
  }
#endif
  for (int l = 0; l < Lanes<T>::kCount; ++l)
    p[l * stride] = v[l];
}

template <typename Vec> inline double lane_sum(const Vec& v) {
  double sum = 0;
  for (int l = 0; l < static_cast<int>(sizeof(Vec) / sizeof(v[0])); ++l)
    sum += v[l];
  return sum;
}

/// The M = P - k - 1 basis functions of knot row t at the lanes' points x (value[0..M)) and,
/// with kDeriv, their slopes: the recursion of local_bspline over every function of the row.
/// 0 outside [t[0], t[P - 1]); NaN in every function for a non-finite x, as the reference has it.
/// NP > 0 and K >= 0 fix P and k at compile time (with_knots). P <= kLaneBasisKnots.
template <typename T, bool kDeriv, int NP = -1, int K = -1>
inline void lane_basis(const T* t, const T* inv, int64_t P_runtime, int k_runtime,
                       typename Lanes<T>::V x, typename Lanes<T>::V* value,
                       typename Lanes<T>::V* deriv) {
  const int64_t P = NP > 0 ? NP : P_runtime;
  const int k = K >= 0 ? K : k_runtime;
  using V = typename Lanes<T>::V;
  using Mask = typename Lanes<T>::Mask;
  const V zero = {}, one = zero + T(1);
  V d[kLaneBasisKnots], u[kLaneBasisKnots]; // x - t_j; inv_p[j] B_j of the order below
  for (int64_t j = 0; j < P; ++j)
    d[j] = x - t[j];
  const V none = x - x;
  // Order 0: the half-open indicators of [t_j, t_{j+1}). Orders >= 1 turn a non-finite x into
  // NaN by themselves (its d[j] times a zero indicator); order 0 alone needs x - x.
  Mask at_or_above = d[0] >= zero; // x >= t_j: all bits set or none
  for (int64_t j = 0; j + 1 < P; ++j) {
    const Mask next = d[j + 1] >= zero;
    value[j] = bit_cast<V>(at_or_above & ~next & bit_cast<Mask>(one));
    at_or_above = next;
  }
  if (k == 0)
    for (int64_t j = 0; j + 1 < P; ++j)
      value[j] += none;
  for (int p = 1; p <= k; ++p) {
    const T* inv_p = inv + (p - 1) * P;
    for (int64_t j = 0; j < P - p; ++j)
      u[j] = inv_p[j] * value[j];
    // B_j = (x - t_j) inv_p[j] B_j + (t_{j+p+1} - x) inv_p[j+1] B_{j+1}, the order below's
    if (kDeriv && p == k)
      for (int64_t j = 0; j + 1 < P - p; ++j)
        deriv[j] = T(k) * (u[j] - u[j + 1]);
    for (int64_t j = 0; j + 1 < P - p; ++j)
      value[j] = d[j] * u[j] - d[j + p + 1] * u[j + 1];
  }
  if (kDeriv && k == 0)
    for (int64_t j = 0; j + 1 < P; ++j)
      deriv[j] = none;
}

/// The span of each lane's point in knot row t, as local_bspline finds it (the largest m in
/// [0, P - 2] with t[m] <= x, by counting), and whether the point lies in [t[0], t[P - 1]).
template <typename T>
inline typename Lanes<T>::Mask lane_span(const T* t, int64_t P, typename Lanes<T>::V x,
                                         typename Lanes<T>::Mask* inside) {
  using Mask = typename Lanes<T>::Mask;
  Mask m = {};
  for (int64_t j = 1; j <= P - 2; ++j)
    m -= t[j] <= x; // a true comparison is all bits set: -1
  *inside = (x >= t[0]) & (x < t[P - 1]);
  return m;
}
#endif

#ifdef __AVX512F__
/// A row of up to kEntries values (knots, their reciprocals, a spline's coefficient on each span)
/// held in two registers, read at a per-lane index by one permute.
template <typename T> struct LaneTable;
template <> struct LaneTable<float> {
  static constexpr int64_t kEntries = 32;
  __m512 low, high;
  LaneTable(const float* row, int64_t n)
      : low(_mm512_maskz_loadu_ps(__mmask16((1u << min_of(n, 16)) - 1), row)),
        high(_mm512_maskz_loadu_ps(__mmask16((1u << (n > 16 ? n - 16 : 0)) - 1), row + 16)) {}
  Lanes<float>::V at(Lanes<float>::Mask j) const {
    return bit_cast<Lanes<float>::V>(_mm512_permutex2var_ps(low, bit_cast<__m512i>(j), high));
  }
};
template <> struct LaneTable<double> {
  static constexpr int64_t kEntries = 16;
  __m512d low, high;
  LaneTable(const double* row, int64_t n)
      : low(_mm512_maskz_loadu_pd(__mmask8((1u << min_of(n, 8)) - 1), row)),
        high(_mm512_maskz_loadu_pd(__mmask8((1u << (n > 8 ? n - 8 : 0)) - 1), row + 8)) {}
  __m512d at(__m512i j) const { return _mm512_permutex2var_pd(low, j, high); }
  /// Entry j in the lanes of `keep`, 0 in the others.
  __m512d at(__m512i j, __mmask8 keep) const {
    return _mm512_maskz_permutex2var_pd(keep, low, j, high);
  }
  Lanes<double>::V at(Lanes<double>::Mask j) const {
    return bit_cast<Lanes<double>::V>(at(bit_cast<__m512i>(j)));
  }
};

inline bool all_lanes(Lanes<float>::Mask m) {
  return _mm512_test_epi32_mask(bit_cast<__m512i>(m), bit_cast<__m512i>(m)) == 0xFFFF;
}
inline bool all_lanes(Lanes<double>::Mask m) {
  return _mm512_test_epi64_mask(bit_cast<__m512i>(m), bit_cast<__m512i>(m)) == 0xFF;
}

template <typename T> struct NativeLanes; // the intrinsics' vector type of Lanes<T>
template <> struct NativeLanes<float> { using V = __m512; };
template <> struct NativeLanes<double> { using V = __m512d; };

/// The lanes' first functions as BlockBasis::first's int64 rows.
inline void store_first(int64_t* out, Lanes<float>::Mask first) {
  const __m512i f = bit_cast<__m512i>(first);
  _mm512_storeu_si512(out, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(f)));
  _mm512_storeu_si512(out + 8, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(f, 1)));
}
inline void store_first(int64_t* out, Lanes<double>::Mask first) {
  _mm512_storeu_si512(out, bit_cast<__m512i>(first));
}

inline __m512 permute2(__m512 a, __m512i index, __m512 b) {
  return _mm512_permutex2var_ps(a, index, b);
}
inline __m512d permute2(__m512d a, __m512i index, __m512d b) {
  return _mm512_permutex2var_pd(a, index, b);
}

/// The permute indices of lane_transpose4's two stages: (a[l], b[l]) pairs of the low and high
/// halves' lanes, then those pairs' pairs (an index past the lane count reads b).
template <typename T> struct TransposeIndex;
template <> struct TransposeIndex<float> {
  alignas(64) static constexpr int32_t kPairs[2][16] = {
      {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
      {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
  alignas(64) static constexpr int32_t kQuads[2][16] = {
      {0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23},
      {8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31}};
};
template <> struct TransposeIndex<double> {
  alignas(64) static constexpr int64_t kPairs[2][8] = {{0, 8, 1, 9, 2, 10, 3, 11},
                                                       {4, 12, 5, 13, 6, 14, 7, 15}};
  alignas(64) static constexpr int64_t kQuads[2][8] = {{0, 1, 8, 9, 2, 3, 10, 11},
                                                       {4, 5, 12, 13, 6, 7, 14, 15}};
};

/// Writes four vectors v[0..3] of L lanes as L rows of four (row l: v[0][l], .., v[3][l]) to out:
/// a block basis's rows, from functions computed with the samples in lanes.
template <typename T>
__attribute__((always_inline)) inline void lane_transpose4(const typename Lanes<T>::V* v, T* out) {
  using Native = typename NativeLanes<T>::V;
  constexpr int L = Lanes<T>::kCount;
  using Index = TransposeIndex<T>;
  const __m512i pair_low = _mm512_load_si512(Index::kPairs[0]);
  const __m512i pair_high = _mm512_load_si512(Index::kPairs[1]);
  const __m512i quad_low = _mm512_load_si512(Index::kQuads[0]);
  const __m512i quad_high = _mm512_load_si512(Index::kQuads[1]);
  const Native v0 = bit_cast<Native>(v[0]), v1 = bit_cast<Native>(v[1]);
  const Native v2 = bit_cast<Native>(v[2]), v3 = bit_cast<Native>(v[3]);
  const Native rows[2][2] = {{permute2(v0, pair_low, v1), permute2(v2, pair_low, v3)},
                             {permute2(v0, pair_high, v1), permute2(v2, pair_high, v3)}};
  for (int h = 0; h < 2; ++h) {
    const Native low = permute2(rows[h][0], quad_low, rows[h][1]);
    const Native high = permute2(rows[h][0], quad_high, rows[h][1]);
    __builtin_memcpy(out + (2 * h) * L, &low, sizeof low);
    __builtin_memcpy(out + (2 * h + 1) * L, &high, sizeof high);
  }
}

/// The K + 1 functions B_{m-K} .. B_m that can be non-zero at each lane's point, m its span, and
/// their slopes with kDeriv: local_bspline's recursion with the samples in lanes, each lane's
/// knots and reciprocals picked from registers by its span. For lanes whose K + 1 functions all
/// exist (m - K >= 0 and m < M), where the knots it reads, t[m - K .. m + K], are all on the row.
/// The expressions are lane_basis's, on the functions a span can reach.
template <typename T, int K, bool kDeriv>
__attribute__((always_inline)) inline void
lane_local_basis(const T* t, const T* inv, int64_t P, typename Lanes<T>::V x,
                 typename Lanes<T>::Mask span, typename Lanes<T>::V* value,
                 typename Lanes<T>::V* deriv) {
  using V = typename Lanes<T>::V;
  const V zero = {};
  const typename Lanes<T>::Mask low = span - K; // the row of knot t[m - K]
  const LaneTable<T> knots(t, P);
  // value[c] is B_{m-K+c} of the order reached; those below m - p + 1 are 0 at order p - 1.
  V d[2 * K + 1]; // x - t[m - K + c]; t[m + K + 1] would multiply B_{m+1} = 0 only
#pragma GCC unroll 16
  for (int c = 0; c < 2 * K + 1; ++c)
    d[c] = x - knots.at(low + c);
#pragma GCC unroll 16
  for (int c = 0; c < K; ++c)
    value[c] = zero;
  value[K] = zero + T(1);
#pragma GCC unroll 16
  for (int p = 1; p <= K; ++p) {
    const LaneTable<T> inv_p(inv + (p - 1) * P, P);
    V u[K + 2]; // inv_p[j] B_j of order p - 1, j = m - K + c
#pragma GCC unroll 16
    for (int c = 0; c <= K - p; ++c)
      u[c] = zero;
#pragma GCC unroll 16
    for (int c = K - p + 1; c <= K; ++c)
      u[c] = inv_p.at(low + c) * value[c];
    u[K + 1] = zero;
    if (kDeriv && p == K)
#pragma GCC unroll 16
      for (int c = 0; c <= K; ++c)
        deriv[c] = T(K) * (u[c] - u[c + 1]);
#pragma GCC unroll 16
    for (int c = K - p; c < K; ++c)
      value[c] = d[c] * u[c] - d[c + p + 1] * u[c + 1];
    value[K] = d[K] * u[K];
  }
}
#endif

/// The k + 1 basis functions (and slopes, with kDeriv) that can be non-zero at each sample of a
/// block of one input, as local_bspline gives them: the per-point kernels' basis, computed lanes
/// at a time where the instruction set and the knot row allow. Row b is sample b0 + b.
template <typename T, int K, bool kDeriv> struct BlockBasis {
  static constexpr int kStride = K >= 0 ? K + 1 : kFusedMaxOrder + 1;
  bool inside[kRowBlock];
  int64_t first[kRowBlock];
  T value[kRowBlock * kStride];
  T deriv[kDeriv ? kRowBlock * kStride : 1];

  const T* values(int64_t b) const { return value + b * kStride; }
  const T* derivs(int64_t b) const { return kDeriv ? deriv + b * kStride : nullptr; }
  /// Whether all k + 1 functions of row b exist (a point inside the grid, away from the ends of
  /// the extended grid): the kernels' fast paths need no bounds there. M: functions per row.
  bool whole(int64_t b, int64_t M, int k) const {
    return inside[b] && first[b] >= 0 && first[b] + k < M;
  }

#if defined(__AVX2__) && defined(__FMA__)
  /// Rows row .. row + L - 1 from the samples n0 .. n0 + L - 1, lanes at a time.
  template <int NP>
  void fill_lanes(const T* xs, int64_t stride, const T* t, const T* inv, int64_t P, int k,
                  int64_t row) {
    using V = typename Lanes<T>::V;
    using Mask = typename Lanes<T>::Mask;
    constexpr int L = Lanes<T>::kCount;
    const int64_t M = (NP > 0 ? NP : P) - k - 1;
    const V xv = load_lanes(xs, 0, stride, 0);
    Mask in;
    const Mask span = lane_span(t, NP > 0 ? NP : P, xv, &in);
#ifdef __AVX512F__
    if constexpr (K == 3)
      if (P <= LaneTable<T>::kEntries &&
          all_lanes(in & (span >= K) & (span < static_cast<int>(M)))) {
        V local[K + 1], local_deriv[K + 1];
        lane_local_basis<T, K, kDeriv>(t, inv, P, xv, span, local, local_deriv);
        lane_transpose4<T>(local, value + row * kStride);
        if (kDeriv)
          lane_transpose4<T>(local_deriv, deriv + row * kStride);
        for (int l = 0; l < L; ++l)
          inside[row + l] = true;
        store_first(first + row, span - K);
        return;
      }
#endif
    // Every function of the row, with k rows of zeros at both ends: a point's k + 1 rows start at
    // its first function + k, whatever its span, with no bounds to check.
    constexpr int kPad = K >= 0 ? K : kFusedMaxOrder;
    V dense[kLaneBasisKnots + 2 * kPad], dense_deriv[kDeriv ? kLaneBasisKnots + 2 * kPad : 1];
    lane_basis<T, kDeriv, NP, K>(t, inv, P, k, xv, dense + k, dense_deriv + k);
    for (int r = 0; r < k; ++r) { // lane_basis's scratch reaches the last k rows
      dense[r] = dense[k + M + r] = V{};
      if (kDeriv)
        dense_deriv[r] = dense_deriv[k + M + r] = V{};
    }
    for (int l = 0; l < L; ++l, ++row) {
      const int64_t first_l = static_cast<int64_t>(span[l]) - k;
      inside[row] = in[l] != 0;
      first[row] = first_l;
      for (int r = 0; r <= k; ++r) {
        value[row * kStride + r] = dense[first_l + k + r][l];
        if (kDeriv)
          deriv[row * kStride + r] = dense_deriv[first_l + k + r][l];
      }
    }
  }
#endif

  /// Input i's samples [b0, b1), b1 - b0 <= kRowBlock, of x (N, I), knot row t (P knots) and its
  /// reciprocals inv (k, P).
  void fill(const T* x, int64_t I, int64_t i, const T* t, const T* inv, int64_t P, int k_runtime,
            int64_t b0, int64_t b1) {
    fill_from(x + b0 * I + i, I, b1 - b0, t, inv, P, k_runtime);
  }

  /// Rows 0 .. count - 1 from the values xs[0], xs[stride], .. (count <= kRowBlock): a column
  /// of x, or a block's row of BlockColumns (stride 1: one load a vector instead of a gather).
  void fill_from(const T* xs, int64_t stride, int64_t count, const T* t, const T* inv, int64_t P,
                 int k_runtime) {
    const int k = K >= 0 ? K : k_runtime;
    int64_t b = 0;
#if defined(__AVX2__) && defined(__FMA__)
    constexpr int L = Lanes<T>::kCount;
    if (P <= kLaneBasisKnots)
      with_knots<K, kBlockBasisKnots>(P, [&](auto knots) {
        for (; b + L <= count; b += L)
          fill_lanes<decltype(knots)::value>(xs + b * stride, stride, t, inv, P, k, b);
      });
#endif
    for (; b < count; ++b) {
      first[b] = 0; // local_bspline leaves it unset outside the grid
      inside[b] = local_bspline_order<K, T, kDeriv>(t, inv, P, k, xs[b * stride], &first[b],
                                                    value + b * kStride,
                                                    kDeriv ? deriv + b * kStride : nullptr);
    }
  }
};

/// A block of samples of x (N, I), input by input: row i holds x[b0 .. b1, i], read by
/// BlockBasis::fill_from with plain loads. Gathering a vector of samples from x's rows, I apart,
/// costs a third of a block basis at 100 inputs (AMD Zen 4).
template <typename T> class BlockColumns {
public:
  explicit BlockColumns(int64_t I) : data_(I * kRowBlock) {}
  /// Inputs [i0, i1) of the samples [b0, b1), b1 - b0 <= kRowBlock.
  void fill(const T* x, int64_t I, int64_t i0, int64_t i1, int64_t b0, int64_t b1) {
    for (int64_t b = 0; b < b1 - b0; ++b)
      for (int64_t i = i0; i < i1; ++i)
        data_[i * kRowBlock + b] = x[(b0 + b) * I + i];
  }
  const T* column(int64_t i) const { return data_.data() + i * kRowBlock; }

private:
  std::vector<T> data_;
};

#if defined(__AVX2__) && defined(__FMA__)
#pragma GCC diagnostic pop
#endif

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
