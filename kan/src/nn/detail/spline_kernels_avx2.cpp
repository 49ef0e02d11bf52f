// The fused spline CPU kernels compiled with -mavx2 -mfma (see kan/CMakeLists.txt); only called
// where the CPU reports both.
#define KAN_CPU_KERNEL_NS cpu_avx2
#include "spline_kernels_cpu.inc"
