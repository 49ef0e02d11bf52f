#pragma once
// Which CPU code runs, chosen at run time from the CPU's instruction sets: the fused spline's
// kernel set and the host vector arithmetic of LBFGS (cpu_dispatch.cpp).
#include "kernels/spline_kernels.h"

#include <cstdint>

namespace kan::detail {

/// Whether the CPU has AVX2 and FMA (x86 only; false elsewhere).
bool cpu_has_avx2_fma();

/// The CPU kernels this process uses: KAN_FUSED_CPU_ISA's (generic, avx2, avx512, or
/// cuda-threads, the CUDA kernels' per-thread code), or by default the widest of avx512 and avx2
/// that this build has and the CPU runs. Chosen once; a bad KAN_FUSED_CPU_ISA or KAN_LANE_GATHERS
/// is an error naming it.
template <typename T> const SplineKernels<T>& cpu_spline_kernels();

/// Whether the CPU runs the CUDA block kernels (KAN_FUSED_CPU_ISA=cuda-blocks); cpu_spline_kernels
/// is then the cuda-threads set.
bool cpu_runs_cuda_blocks();

/// BLAS's ?dot_ (sdot_ for float, ddot_ for double) as LibTorch exports it and at::dot calls it,
/// looked up once and checked against at::dot; null where it is missing or disagrees (another
/// LibTorch build), so that callers fall back to the tensor operation.
template <typename T>
using HostDot = T (*)(const int* n, const T* x, const int* incx, const T* y, const int* incy);
template <typename T> HostDot<T> host_dot();

/// s[j] = fma(o[j], a, s[j]) for j < n: ATen's add_ with alpha on a CPU vector, one rounding per
/// element, vectorised where the CPU has FMA.
template <typename T> void host_add_scaled(T* s, const T* o, T a, int64_t n);

} // namespace kan::detail
