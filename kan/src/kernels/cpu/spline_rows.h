#pragma once
// The fused spline's layer on the CPU, forward and backward, by rows of samples: for each point
// its k + 1 basis functions (a block of samples at once, lane_basis.h), then over the outputs.
// Also the per-edge splines (forward_with_activations) and their backward. The forms spelled out
// in AVX2 or AVX-512 intrinsics serve where the translation unit is compiled for them (isa.h).
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_basis.h"
#include "kernels/cuda/spline_threads.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <new>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kan::detail::KAN_CPU_ISA {
namespace {

template <typename T> inline void axpy(T a, const T* __restrict x, T* __restrict y, int64_t n) {
  for (int64_t o = 0; o < n; ++o)
    y[o] += a * x[o];
}

// Independent partial sums, so that the compiler vectorises without reassociating one sum.
template <typename T> inline T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  constexpr int kLanes = 64 / sizeof(T);
  T acc[kLanes] = {};
  int64_t o = 0;
  for (; o + kLanes <= n; o += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += a[o + l] * b[o + l];
  T sum = 0;
  for (; o < n; ++o)
    sum += a[o] * b[o];
  for (int l = 0; l < kLanes; ++l)
    sum += acc[l];
  return sum;
}

// y += sum_r v[r] * row r of w (rows O apart): the k + 1 consecutive basis functions of one point
// in one pass over y instead of k + 1.
template <int K, typename T>
inline void axpy_rows(const T* v, const T* __restrict w, int64_t O, T* __restrict y) {
  for (int64_t o = 0; o < O; ++o) {
    T acc = y[o];
    for (int r = 0; r <= K; ++r)
      acc += v[r] * w[r * O + o];
    y[o] = acc;
  }
}

// Row r of g += v[r] * gy for r = 0..K, and returns sum_r d[r] (row r of w . gy), in one pass.
template <int K, typename T>
inline T backward_rows(const T* v, const T* d, const T* __restrict w, const T* __restrict gy,
                       T* __restrict g, int64_t O) {
  constexpr int kLanes = 32 / sizeof(T);
  T acc[kLanes] = {};
  int64_t o = 0;
  for (; o + kLanes <= O; o += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const T gl = gy[o + l];
      T u = 0;
      for (int r = 0; r <= K; ++r) {
        u += d[r] * w[r * O + o + l];
        g[r * O + o + l] += v[r] * gl;
      }
      acc[l] += u * gl;
    }
  }
  T sum = 0;
  for (; o < O; ++o) {
    T u = 0;
    for (int r = 0; r <= K; ++r) {
      u += d[r] * w[r * O + o];
      g[r * O + o] += v[r] * gy[o];
    }
    sum += u * gy[o];
  }
  for (int l = 0; l < kLanes; ++l)
    sum += acc[l];
  return sum;
}

#if defined(__AVX2__) && defined(__FMA__)
// float32 with AVX2 + FMA spelled out: the compiler's vectorisation of the templates above spills
// registers and re-checks aliasing on every call.
template <int K>
inline void axpy_rows(const float* v, const float* __restrict w, int64_t O, float* __restrict y) {
  __m256 vv[K + 1];
  for (int r = 0; r <= K; ++r)
    vv[r] = _mm256_set1_ps(v[r]);
  int64_t o = 0;
  for (; o + 8 <= O; o += 8) {
    __m256 acc = _mm256_loadu_ps(y + o);
    for (int r = 0; r <= K; ++r)
      acc = _mm256_fmadd_ps(vv[r], _mm256_loadu_ps(w + r * O + o), acc);
    _mm256_storeu_ps(y + o, acc);
  }
  for (; o < O; ++o) {
    float acc = y[o];
    for (int r = 0; r <= K; ++r)
      acc += v[r] * w[r * O + o];
    y[o] = acc;
  }
}

template <int K>
inline float backward_rows(const float* v, const float* d, const float* __restrict w,
                           const float* __restrict gy, float* __restrict g, int64_t O) {
  __m256 vv[K + 1], dd[K + 1];
  for (int r = 0; r <= K; ++r) {
    vv[r] = _mm256_set1_ps(v[r]);
    dd[r] = _mm256_set1_ps(d[r]);
  }
  __m256 acc = _mm256_setzero_ps();
  int64_t o = 0;
  for (; o + 8 <= O; o += 8) {
    const __m256 gl = _mm256_loadu_ps(gy + o);
    __m256 u = _mm256_setzero_ps();
    for (int r = 0; r <= K; ++r) {
      u = _mm256_fmadd_ps(dd[r], _mm256_loadu_ps(w + r * O + o), u);
      _mm256_storeu_ps(g + r * O + o, _mm256_fmadd_ps(vv[r], gl, _mm256_loadu_ps(g + r * O + o)));
    }
    acc = _mm256_fmadd_ps(u, gl, acc);
  }
  float sum = horizontal_sum(acc);
  for (; o < O; ++o) {
    float u = 0;
    for (int r = 0; r <= K; ++r) {
      u += d[r] * w[r * O + o];
      g[r * O + o] += v[r] * gy[o];
    }
    sum += u * gy[o];
  }
  return sum;
}
#endif

#ifdef __AVX512F__
// float32 and float64 with AVX-512: a vector of outputs holds sixteen floats or eight doubles, and
// the last outputs are a masked vector, not a scalar loop: the per-point products issue half the
// instructions of the AVX2 ones, which bound them.
struct AllLanes {}; // a whole vector: plain loads and stores
template <typename T> struct Wide;
template <> struct Wide<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(__mmask16 m, float* p, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V load(AllLanes, const float* p) { return _mm512_loadu_ps(p); }
  static void store(AllLanes, float* p, V v) { _mm512_storeu_ps(p, v); }
  static AllLanes all() { return {}; }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float sum(V v) { // GCC 12's _mm512_reduce_add_ps warns under -Werror
    V t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m128 s = _mm512_castps512_ps128(t);
    const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
  static __mmask16 mask(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  }
};
template <> struct Wide<double> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V set1(double v) { return _mm512_set1_pd(v); }
  static V zero() { return _mm512_setzero_pd(); }
  static V load(__mmask8 m, const double* p) { return _mm512_maskz_loadu_pd(m, p); }
  static void store(__mmask8 m, double* p, V v) { _mm512_mask_storeu_pd(p, m, v); }
  static V load(AllLanes, const double* p) { return _mm512_loadu_pd(p); }
  static void store(AllLanes, double* p, V v) { _mm512_storeu_pd(p, v); }
  static AllLanes all() { return {}; }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V sub(V a, V b) { return _mm512_sub_pd(a, b); }
  static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static double sum(V v) {
    V t = _mm512_add_pd(v, _mm512_shuffle_f64x2(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_add_pd(t, _mm512_shuffle_f64x2(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m128d s = _mm512_castpd512_pd128(t);
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static __mmask8 mask(int64_t n) { return n >= 8 ? __mmask8(0xFF) : __mmask8((1u << n) - 1); }
};

// Masked loads and stores only in the last, partial vector: a masked store does not forward to
// the next load.
template <int K, typename T, typename Mask>
inline void backward_rows_at(const typename Wide<T>::V* vv, const typename Wide<T>::V* dd,
                             const T* __restrict w, const T* __restrict gy, T* __restrict g,
                             int64_t O, int64_t o, Mask m, typename Wide<T>::V* acc) {
  using W = Wide<T>;
  const auto gl = W::load(m, gy + o);
  auto u = W::zero();
  for (int r = 0; r <= K; ++r) {
    u = W::fma(dd[r], W::load(m, w + r * O + o), u);
    W::store(m, g + r * O + o, W::fma(vv[r], gl, W::load(m, g + r * O + o)));
  }
  *acc = W::fma(u, gl, *acc);
}

template <int K, typename T>
inline T backward_rows_wide(const T* v, const T* d, const T* __restrict w, const T* __restrict gy,
                            T* __restrict g, int64_t O) {
  using W = Wide<T>;
  typename W::V vv[K + 1], dd[K + 1];
  for (int r = 0; r <= K; ++r) {
    vv[r] = W::set1(v[r]);
    dd[r] = W::set1(d[r]);
  }
  auto acc = W::zero();
  int64_t o = 0;
  for (; o + W::kLanes <= O; o += W::kLanes)
    backward_rows_at<K>(vv, dd, w, gy, g, O, o, W::all(), &acc);
  if (o < O)
    backward_rows_at<K>(vv, dd, w, gy, g, O, o, W::mask(O - o), &acc);
  return W::sum(acc);
}
#endif

/// Point (n, i)'s share of y's outputs [o_begin, o_end), by the general path: any point, any k.
template <int K, typename T>
inline void forward_point(const SplineArgs<T>& a, const BlockBasis<T, K, false>& basis, int64_t b,
                          int64_t n, int64_t i, T* y, int64_t o_begin, int64_t o_end) {
  const int k = K >= 0 ? K : a.k;
  T* yn = y + n * a.O;
  if (!basis.inside[b]) {
    const T xv = a.x[n * a.I + i];
    if (!is_finite_value(xv)) // NaN in every basis function, as in the reference
      for (int64_t o = o_begin; o < o_end; ++o)
        yn[o] = xv - xv;
    return;
  }
  const T* value = basis.values(b);
  const T* w = a.weight + i * a.M * a.O;
  for (int r = 0; r <= k; ++r) {
    const int64_t m = basis.first[b] + r;
    if (m >= 0 && m < a.M)
      axpy(value[r], w + m * a.O + o_begin, yn + o_begin, o_end - o_begin);
  }
}

template <int K, typename T>
void forward_rows_order(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
  const int k = K >= 0 ? K : a.k;
  BlockBasis<T, K, false> basis;
  for (int64_t b0 = n_begin; b0 < n_end; b0 += kRowBlock) {
    const int64_t b1 = min_of(n_end, b0 + kRowBlock);
    for (int64_t i = 0; i < a.I; ++i) {
      const T* w = a.weight + i * a.M * a.O;
      basis.fill(a.x, a.I, i, a.grid + i * a.P, a.inv + i * k * a.P, a.P, k, b0, b1);
      for (int64_t n = b0; n < b1; ++n) {
        const int64_t b = n - b0, first = basis.first[b];
        // All k + 1 functions exist (x away from the ends of the extended grid): one pass.
        if constexpr (K >= 1)
          if (basis.whole(b, a.M, K)) {
            axpy_rows<K>(basis.values(b), w + first * a.O, a.O, y + n * a.O);
            continue;
          }
        forward_point(a, basis, b, n, i, y, 0, a.O);
      }
    }
  }
}

#ifdef __AVX512F__
// The layer's forward with each sample's row of y in registers (NV vectors of outputs from o0)
// across a group of kInputGroup inputs: one load and store of y per group instead of per input,
// the group's weight rows staying in L1 for the block's samples. Points outside the grid or at
// its ends take the general path, y leaving the registers around them.
constexpr int64_t kInputGroup = 8;

template <int K, int NV, typename T>
void forward_group_rows(const SplineArgs<T>& a, const T* weight, int64_t stride,
                        const BlockBasis<T, K, false>* basis, int64_t i0, int64_t i1, int64_t b0,
                        int64_t b1, int64_t o0, T* y) {
  using W = Wide<T>;
  const int64_t O = a.O;
  const auto last = W::mask(O - o0 - (NV - 1) * W::kLanes); // the last vector's lanes
  for (int64_t n = b0; n < b1; ++n) {
    T* yn = y + n * O + o0;
    typename W::V acc[NV];
    const auto load = [&] {
      for (int c = 0; c + 1 < NV; ++c)
        acc[c] = W::load(W::all(), yn + c * W::kLanes);
      acc[NV - 1] = W::load(last, yn + (NV - 1) * W::kLanes);
    };
    const auto store = [&] {
      for (int c = 0; c + 1 < NV; ++c)
        W::store(W::all(), yn + c * W::kLanes, acc[c]);
      W::store(last, yn + (NV - 1) * W::kLanes, acc[NV - 1]);
    };
    load();
    for (int64_t i = i0; i < i1; ++i) {
      const auto& bb = basis[i - i0];
      const int64_t b = n - b0, first = bb.first[b];
      if (!bb.whole(b, a.M, K)) {
        store();
        forward_point(a, bb, b, n, i, y, o0, min_of(O, o0 + NV * W::kLanes));
        load();
        continue;
      }
      const T* v = bb.values(b);
      const T* w = weight + (i * a.M + first) * stride + o0;
      for (int r = 0; r <= K; ++r) {
        const auto vr = W::set1(v[r]);
        for (int c = 0; c + 1 < NV; ++c)
          acc[c] = W::fma(vr, W::load(W::all(), w + r * stride + c * W::kLanes), acc[c]);
        acc[NV - 1] = W::fma(vr, W::load(last, w + r * stride + (NV - 1) * W::kLanes), acc[NV - 1]);
      }
    }
    store();
  }
}

template <int K, typename T>
void forward_rows_grouped(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
  using W = Wide<T>;
  constexpr int kMaxVectors = 7;
  BlockBasis<T, K, false> basis[kInputGroup];
  // The weight's rows padded to whole vectors, each starting a cache line: a row of O = 100 floats
  // would otherwise split most of its loads across two lines (BM_LayerForwardBackward, G 5).
  const int64_t stride = (a.O + W::kLanes - 1) / W::kLanes * W::kLanes;
  T* padded = nullptr;
  const T* weight = a.weight;
  if (stride != a.O) {
    padded = new (std::align_val_t(64)) T[a.I * a.M * stride]();
    for (int64_t row = 0; row < a.I * a.M; ++row)
      for (int64_t o = 0; o < a.O; ++o)
        padded[row * stride + o] = a.weight[row * a.O + o];
    weight = padded;
  }
  BlockColumns<T> columns(a.I);
  for (int64_t b0 = n_begin; b0 < n_end; b0 += kRowBlock) {
    const int64_t b1 = min_of(n_end, b0 + kRowBlock);
    columns.fill(a.x, a.I, 0, a.I, b0, b1);
    for (int64_t i0 = 0; i0 < a.I; i0 += kInputGroup) {
      const int64_t i1 = min_of(a.I, i0 + kInputGroup);
      for (int64_t i = i0; i < i1; ++i)
        basis[i - i0].fill_from(columns.column(i), 1, b1 - b0, a.grid + i * a.P,
                                a.inv + i * K * a.P, a.P, K);
      for (int64_t o0 = 0; o0 < a.O; o0 += kMaxVectors * W::kLanes) {
        const int64_t vectors = min_of(kMaxVectors, (a.O - o0 + W::kLanes - 1) / W::kLanes);
        switch (vectors) {
        case 1:
          forward_group_rows<K, 1>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        case 2:
          forward_group_rows<K, 2>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        case 3:
          forward_group_rows<K, 3>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        case 4:
          forward_group_rows<K, 4>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        case 5:
          forward_group_rows<K, 5>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        case 6:
          forward_group_rows<K, 6>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
          break;
        default:
          forward_group_rows<K, kMaxVectors>(a, weight, stride, basis, i0, i1, b0, b1, o0, y);
        }
      }
    }
  }
  operator delete[](padded, std::align_val_t(64));
}
#endif

#ifdef __AVX512F__
// The backward of the points of one input and block whose k + 1 functions all exist, grouped by
// their knot span: a group shares the weight's rows and the gradient's, so these stay in
// registers while its samples add to them, one vector of outputs at a time, where point after
// point each sample loaded and stored the gradient's rows. Worth it where groups are large: few
// spans (kMaxGroupedSpans) for a block of kRowBlock samples.
constexpr int64_t kMaxGroupedSpans = 32;

/// The span group's samples order[0 .. count) at the outputs [o, o + lanes) (m: the lanes): the
/// rows wrow, grow of the weight and its gradient, and each sample's share of grad_x into gxacc.
template <int K, typename T, typename Mask>
inline void backward_span_vector(const BlockBasis<T, K, true>& basis, const T* const* wrow,
                                 T* const* grow, const T* gy, int64_t O, const int* order,
                                 int64_t count, int64_t b0, bool with_gx,
                                 typename Wide<T>::V* gxacc, int64_t o, Mask m) {
  using W = Wide<T>;
  typename W::V wr[K + 1], acc[K + 1], wd[K];
  for (int r = 0; r <= K; ++r) {
    wr[r] = W::load(m, wrow[r] + o);
    acc[r] = W::zero();
  }
  // A point's K + 1 slopes sum to zero (k (u_r - u_{r+1}) telescopes between two functions that
  // vanish on its span), so sum_r d_r w_r = sum_{r<K} d_r (w_r - w_K): one multiply-add less a
  // vector, a ninth of the backward's (BM_LayerForwardBackward, G 5).
  for (int r = 0; r < K; ++r)
    wd[r] = W::sub(wr[r], wr[K]);
  for (int64_t q = 0; q < count; ++q) {
    const int64_t b = order[q];
    const T* v = basis.values(b);
    const auto gl = W::load(m, gy + (b0 + b) * O + o);
    for (int r = 0; r <= K; ++r)
      acc[r] = W::fma(W::set1(v[r]), gl, acc[r]);
    if (with_gx) {
      const T* d = basis.derivs(b);
      auto u = W::mul(W::set1(d[0]), wd[0]);
      for (int r = 1; r < K; ++r)
        u = W::fma(W::set1(d[r]), wd[r], u);
      gxacc[q] = W::fma(u, gl, gxacc[q]);
    }
  }
  for (int r = 0; r <= K; ++r)
    W::store(m, grow[r] + o, W::add(W::load(m, grow[r] + o), acc[r]));
}

/// Input i's points of the block [b0, b1) that take the grouped path: those inside the grid with
/// all k + 1 functions (grouped[b] says which). g: input i's (M, O) rows of grad_weight.
template <int K, typename T>
void backward_spans(const SplineArgs<T>& a, const BlockBasis<T, K, true>& basis, int64_t i,
                    int64_t b0, int64_t b1, const T* gy, T* gx, T* g, const bool* grouped) {
  using W = Wide<T>;
  const int64_t spans = a.M - K, O = a.O;
  int start[kMaxGroupedSpans + 1] = {}, order[kRowBlock];
  for (int64_t b = 0; b < b1 - b0; ++b)
    if (grouped[b])
      ++start[basis.first[b] + 1];
  for (int64_t f = 0; f < spans; ++f)
    start[f + 1] += start[f];
  int next[kMaxGroupedSpans];
  for (int64_t f = 0; f < spans; ++f)
    next[f] = start[f];
  for (int64_t b = 0; b < b1 - b0; ++b)
    if (grouped[b])
      order[next[basis.first[b]]++] = static_cast<int>(b);
  typename W::V gxacc[kRowBlock];
  const T* w = a.weight + i * a.M * O;
  for (int64_t f = 0; f < spans; ++f) {
    const int64_t count = start[f + 1] - start[f];
    if (count == 0)
      continue;
    const int* group = order + start[f];
    const T* wrow[K + 1];
    T* grow[K + 1];
    for (int r = 0; r <= K; ++r) {
      wrow[r] = w + (f + r) * O;
      grow[r] = g + (f + r) * O;
    }
    for (int64_t q = 0; q < count; ++q)
      gxacc[q] = W::zero();
    int64_t o = 0;
    for (; o + W::kLanes <= O; o += W::kLanes)
      backward_span_vector(basis, wrow, grow, gy, O, group, count, b0, gx != nullptr, gxacc, o,
                           W::all());
    if (o < O)
      backward_span_vector(basis, wrow, grow, gy, O, group, count, b0, gx != nullptr, gxacc, o,
                           W::mask(O - o));
    if (gx != nullptr)
      for (int64_t q = 0; q < count; ++q)
        gx[(b0 + group[q]) * a.I + i] = W::sum(gxacc[q]);
  }
}
#endif

template <int K, typename T>
void backward_tasks_order(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                          int64_t task_begin, int64_t task_end) {
  const int k = K >= 0 ? K : a.k;
  BlockBasis<T, K, true> basis;
  BlockColumns<T> columns(a.I);
  // Tasks are (slice, input) pairs, slice-major; walk each slice's run of inputs block by block
  // so that a block of grad_y rows is reused by all of this range's inputs.
  for (int64_t task = task_begin; task < task_end;) {
    const int64_t s = task / a.I, i0 = task % a.I;
    const int64_t i1 = min_of(a.I, i0 + (task_end - task));
    int64_t n_begin, n_end;
    slice_bounds(a.N, slices, s, &n_begin, &n_end);
    for (int64_t b0 = n_begin; b0 < n_end; b0 += kRowBlock) {
      const int64_t b1 = min_of(n_end, b0 + kRowBlock);
      columns.fill(a.x, a.I, i0, i1, b0, b1);
      for (int64_t i = i0; i < i1; ++i) {
        const T* w = a.weight + i * a.M * a.O;
        T* g = gw + (s * a.I + i) * a.M * a.O;
        basis.fill_from(columns.column(i), 1, b1 - b0, a.grid + i * a.P, a.inv + i * k * a.P, a.P,
                        k);
        bool grouped[kRowBlock] = {};
#ifdef __AVX512F__
        if constexpr (K >= 1)
          if (a.M - K <= kMaxGroupedSpans) {
            for (int64_t b = 0; b < b1 - b0; ++b)
              grouped[b] = basis.whole(b, a.M, K);
            backward_spans(a, basis, i, b0, b1, gy, gx, g, grouped);
          }
#endif
        for (int64_t n = b0; n < b1; ++n) {
          const int64_t b = n - b0, first = basis.first[b];
          if (grouped[b])
            continue;
          const T* value = basis.values(b);
          const T* deriv = basis.derivs(b);
          const T* gyn = gy + n * a.O;
          T grad_x = 0;
          const T xv = a.x[n * a.I + i];
          if (!is_finite_value(xv)) {
            // NaN in every basis function (as in the reference) reaches every weight row.
            grad_x = xv - xv;
            for (int64_t e = 0; e < a.M * a.O; ++e)
              g[e] = grad_x;
          } else if (!basis.inside[b]) {
            // Outside the grid every function is 0: nothing reaches the weight or x.
          } else if (gx == nullptr) { // grad_weight only: half the work of backward_rows
            for (int r = 0; r <= k; ++r) {
              const int64_t m = first + r;
              if (m >= 0 && m < a.M)
                axpy(value[r], gyn, g + m * a.O, a.O);
            }
          } else if (K >= 1 && basis.whole(b, a.M, k)) {
            if constexpr (K >= 1)
#ifdef __AVX512F__
              grad_x =
                  backward_rows_wide<K>(value, deriv, w + first * a.O, gyn, g + first * a.O, a.O);
#else
              grad_x = backward_rows<K>(value, deriv, w + first * a.O, gyn, g + first * a.O, a.O);
#endif
          } else {
            for (int r = 0; r <= k; ++r) {
              const int64_t m = first + r;
              if (m < 0 || m >= a.M)
                continue;
              grad_x += deriv[r] * dot(w + m * a.O, gyn, a.O);
              axpy(value[r], gyn, g + m * a.O, a.O);
            }
          }
          if (gx != nullptr)
            gx[n * a.I + i] = grad_x;
        }
      }
    }
    task += i1 - i0;
  }
}

// The spline orders with unrolled code; others read k at run time.
// The forward of an order known at compile time: AVX-512's grouped rows where built.
template <int K, typename T>
void forward_rows_unrolled(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
#ifdef __AVX512F__
  forward_rows_grouped<K>(a, y, n_begin, n_end);
#else
  forward_rows_order<K>(a, y, n_begin, n_end);
#endif
}

template <typename T>
void forward_rows(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
  switch (a.k) {
  case 1:
    return forward_rows_unrolled<1>(a, y, n_begin, n_end);
  case 2:
    return forward_rows_unrolled<2>(a, y, n_begin, n_end);
  case 3:
    return forward_rows_unrolled<3>(a, y, n_begin, n_end);
  default:
    return forward_rows_order<-1>(a, y, n_begin, n_end);
  }
}

template <typename T>
void backward_tasks(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                    int64_t task_begin, int64_t task_end) {
  switch (a.k) {
  case 1:
    return backward_tasks_order<1>(a, gy, gx, gw, slices, task_begin, task_end);
  case 2:
    return backward_tasks_order<2>(a, gy, gx, gw, slices, task_begin, task_end);
  case 3:
    return backward_tasks_order<3>(a, gy, gx, gw, slices, task_begin, task_end);
  default:
    return backward_tasks_order<-1>(a, gy, gx, gw, slices, task_begin, task_end);
  }
}

// The per-edge splines: each (sample, input) pair's basis once, then its row of outputs.
template <typename T>
void edges_forward_pairs(const SplineArgs<T>& a, T* y, int64_t t_begin, int64_t t_end) {
  for (int64_t t = t_begin; t < t_end; ++t)
    edges_forward_row(a, t / a.I, t % a.I, y + t * a.O);
}

template <typename T>
void edges_backward_tasks(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                          int64_t task_begin, int64_t task_end) {
  const GradRows rows{a.I * a.O, a.O}; // gy is (N, I, O)
  for (int64_t task = task_begin; task < task_end; ++task) {
    const int64_t s = task / a.I, i = task % a.I;
    int64_t n_begin, n_end;
    slice_bounds(a.N, slices, s, &n_begin, &n_end);
    for (int64_t n = n_begin; gx != nullptr && n < n_end; ++n)
      gx[n * a.I + i] = grad_x_thread(a, gy, rows, n, i);
    grad_w_columns(a, gy, rows, gw, slices, s, i, 0, a.O);
  }
}

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
