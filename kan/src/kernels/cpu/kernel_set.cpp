// The CPU kernels of one instruction set, as the dispatch (cpu_dispatch.cpp) takes them. This
// file is compiled once per instruction set, each time with its flags and its namespace
// (KAN_CPU_ISA: cpu_generic, cpu_avx2, cpu_avx512; kan/CMakeLists.txt).
#ifdef __AVX512F__
// GCC 12's AVX-512 intrinsics read an "undefined" vector that -Wmaybe-uninitialized reports
// wherever they are inlined: here, where the kernels are instantiated (before the headers,
// whose intrinsics the warning's locations name).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/isa.h"
#include "kernels/cpu/layer_moments.h"
#include "kernels/cpu/spline_rows.h"
#include "kernels/spline_kernels.h"

namespace kan::detail::KAN_CPU_ISA {

template <typename T> SplineKernels<T> kernels() {
  return {&forward_rows<T>,
          &backward_tasks<T>,
          &edges_forward_pairs<T>,
          &edges_backward_tasks<T>,
          nullptr,
          nullptr,
          &layer_with_moments<T>,
          &layer_with_moments_backward<T>};
}

template SplineKernels<float> kernels<float>();
template SplineKernels<double> kernels<double>();

} // namespace kan::detail::KAN_CPU_ISA
