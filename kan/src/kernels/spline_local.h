#pragma once
// The k + 1 B-spline basis functions that can be non-zero at one point, and their derivatives,
// from the knot span (de Boor's triangular scheme). Plain C++ with no LibTorch headers, so that
// the CPU kernels (compiled once per instruction set) and the CUDA kernels share it.

#include <cstdint>

#if defined(__CUDACC__)
#define KAN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KAN_HOST_DEVICE inline __attribute__((always_inline))
#endif

namespace kan::detail {

/// Largest spline order the fused backend supports (its per-point arrays are this long + 1).
constexpr int kFusedMaxOrder = 15;

/// Knot rows up to this long find a point's span by counting, longer ones by bisection.
constexpr int64_t kLinearSpanSearch = 24;

// `static` gives every translation unit (one per instruction set) its own copy, so the linker
// cannot swap an AVX2 body into the generic kernels.
//
// t: the knot row of one input, P non-decreasing knots. inv: (k, P) with
// inv[(p - 1) * P + j] = 1 / (t[j + p] - t[j]), or 0 where the knots coincide (the reference's
// "a zero denominator contributes 0"). Returns false where x lies outside [t[0], t[P - 1]) or is
// NaN: every basis function is 0 there, as in the reference's half-open order-0 indicators.
// Otherwise *first = m - k for the span m with t[m] <= x < t[m + 1], and value[r], deriv[r]
// (r = 0..k) are B_{m-k+r}(x) and its x-derivative; indices outside [0, P - k - 2] get 0.
// x - x is 0 for finite x and NaN for NaN and +-inf. The reference turns a non-finite x into NaN
// in every basis function of its input ((x - t) / d * 0 at every order >= 1), so a non-finite
// input makes its whole output row NaN there; the kernels reproduce that with this value.
template <typename T> static KAN_HOST_DEVICE bool is_finite_value(T x) {
  return x - x == T(0);
}

/// Entry (i, p - 1, j) of knot_reciprocals' (I, k, P) table for the knots (I, P):
/// 1 / (t[i, j + p] - t[i, j]), 0 where those knots coincide or j + p >= P (NaN knots give NaN).
template <typename T>
static KAN_HOST_DEVICE T knot_reciprocal(const T* knots, int64_t P, int64_t i, int64_t p,
                                         int64_t j) {
  const T d = j + p < P ? knots[i * P + j + p] - knots[i * P + j] : T(0);
  return d == T(0) ? T(0) : T(1) / d;
}

/// The samples [*begin, *end) of slice s, when N samples are cut into `slices` slices of
/// ceil(N / slices) (the last ones may be shorter or empty): the backward kernels' unit of work.
static KAN_HOST_DEVICE void slice_bounds(int64_t N, int64_t slices, int64_t s, int64_t* begin,
                                         int64_t* end) {
  const int64_t rows = (N + slices - 1) / slices;
  *begin = s * rows < N ? s * rows : N;
  *end = *begin + rows < N ? *begin + rows : N;
}

//
// K >= 0 fixes the order at compile time (k must equal it), so that the loops unroll; K < 0
// reads k. With kDeriv false, deriv is neither read nor written (may be null).
template <int K, typename T, bool kDeriv = true>
static KAN_HOST_DEVICE bool local_bspline_order(const T* t, const T* inv, int64_t P, int k_runtime,
                                                T x, int64_t* first, T* value, T* deriv) {
  const int k = K >= 0 ? K : k_runtime;
  if (!(x >= t[0] && x < t[P - 1]))
    return false;
  // The span m: the largest index in [0, P - 2] with t[m] <= x.
  int64_t m = 0;
  if (P <= kLinearSpanSearch) {
    // Few knots (small G): count those <= x, independent comparisons the compiler vectorises
    // (the knots are sorted and t[0] <= x).
    for (int64_t j = 1; j <= P - 2; ++j)
      m += t[j] <= x;
  } else {
    // Branch-free binary search (the comparison becomes a conditional move): the answer lies in
    // [m, m + len - 1] and t[m] <= x.
    int64_t len = P - 1;
    while (len > 1) {
      const int64_t half = len / 2;
      m = t[m + half] <= x ? m + half : m;
      len -= half;
    }
  }
  *first = m - k;
  value[0] = T(1);
  if (kDeriv)
    for (int r = 0; r <= k; ++r)
      deriv[r] = T(0);
  for (int p = 1; p <= k; ++p) {
    // value[r] holds B_{m-p+1+r} of order p - 1 (r = 0..p-1); turn it into order p in place,
    // from the top so that value[r - 1] is still of order p - 1 when value[r] is written.
    const T* inv_p = inv + (p - 1) * P;
    for (int r = p; r >= 0; --r) {
      const int64_t j = m - p + r;
      const T left = r >= 1 ? value[r - 1] : T(0); // B_j of order p - 1
      const T right = r < p ? value[r] : T(0);     // B_{j+1} of order p - 1
      if (j < 0 || j > P - p - 2) {
        // Not a basis function of this knot row: no knots to build it from.
        if (kDeriv && p == k)
          deriv[r] = T(0);
        value[r] = T(0);
        continue;
      }
      // dB_j/dx = k (B_j / (t_{j+k} - t_j) - B_{j+1} / (t_{j+k+1} - t_{j+1})), order k - 1
      if (kDeriv && p == k)
        deriv[r] = T(k) * (inv_p[j] * left - inv_p[j + 1] * right);
      value[r] = (x - t[j]) * inv_p[j] * left + (t[j + p + 1] - x) * inv_p[j + 1] * right;
    }
  }
  return true;
}

template <typename T>
static KAN_HOST_DEVICE bool local_bspline(const T* t, const T* inv, int64_t P, int k, T x,
                                          int64_t* first, T* value, T* deriv) {
  return local_bspline_order<-1>(t, inv, P, k, x, first, value, deriv);
}

} // namespace kan::detail
