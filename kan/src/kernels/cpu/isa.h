#pragma once
// What every CPU kernel header shares: the namespace of the instruction set it is compiled for,
// and the small helpers of the kernels' loops.
//
// The kernels are compiled once per instruction set (kernel_set.cpp; kan/CMakeLists.txt gives
// each its flags and its KAN_CPU_ISA), and fused_spline's dispatch (cpu_dispatch.cpp) picks one at
// run time. Each copy lives in its own namespace, and everything below that namespace in an
// anonymous one, so that the linker can never swap one instruction set's body into another's
// kernels. Without a KAN_CPU_ISA from the build (a header compiled alone), the namespace follows
// the compiler's flags.
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#ifndef KAN_CPU_ISA
#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define KAN_CPU_ISA cpu_avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define KAN_CPU_ISA cpu_avx2
#else
#define KAN_CPU_ISA cpu_generic
#endif
#endif

namespace kan::detail::KAN_CPU_ISA {
namespace {

// Samples per block: a block's rows of y or grad_y stay in L1/L2 while every input adds to them.
constexpr int64_t kRowBlock = 64;

inline int64_t min_of(int64_t a, int64_t b) {
  return a < b ? a : b;
}

#if defined(__AVX2__) && defined(__FMA__)
inline float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
#endif

} // namespace
} // namespace kan::detail::KAN_CPU_ISA
