#pragma once
// Byte counts that saturate at INT64_MAX instead of wrapping: memory estimates of absurd widths
// (entries near 2^63) must say "too much", never a small or negative number.

#include <cstdint>
#include <limits>

namespace kan::detail {

inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

/// a + b for a, b >= 0, at most kSaturated.
inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

/// a * b for a, b >= 0, at most kSaturated.
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}

template <typename... Rest> int64_t sat_mul(int64_t a, int64_t b, Rest... rest) {
  return sat_mul(sat_mul(a, b), rest...);
}

} // namespace kan::detail
