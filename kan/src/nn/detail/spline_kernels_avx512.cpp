// The fused spline CPU kernels compiled with -mavx512f as well as AVX2 + FMA (see
// kan/CMakeLists.txt); only called where the CPU reports all three. The lanes kernels
// (layer_lanes_cpu.inc) hold eight doubles or sixteen floats per vector here, twice the AVX2
// set's, and the per-point products run sixteen floats or eight doubles at a time.
//
// GCC 12's AVX-512 intrinsics read an "undefined" vector that -Wmaybe-uninitialized reports
// wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KAN_CPU_KERNEL_NS cpu_avx512
#include "spline_kernels_cpu.inc"
