// The fused spline CPU kernels for any CPU, and the drivers that split the work over ATen's
// threads. Compiled with OpenMP: ATen's inline parallel_for runs serially without it.
#define KAN_CPU_KERNEL_NS cpu_generic
#include "spline_kernels_cpu.inc"

#include <ATen/Parallel.h>

namespace kan::detail {
namespace {
// Samples per parallel chunk of the forward.
constexpr int64_t kForwardGrain = 64;
} // namespace

template <typename T>
void spline_forward(const SplineKernels<T>& kernels, const SplineArgs<T>& a, T* y) {
  at::parallel_for(0, a.N, kForwardGrain,
                   [&](int64_t begin, int64_t end) { kernels.forward_rows(a, y, begin, end); });
}

template <typename T>
void spline_backward(const SplineKernels<T>& kernels, const SplineArgs<T>& a, const T* gy, T* gx,
                     T* gw, int64_t slices) {
  if (a.N == 0)
    return;
  at::parallel_for(0, slices * a.I, 1, [&](int64_t begin, int64_t end) {
    kernels.backward_tasks(a, gy, gx, gw, slices, begin, end);
  });
}

template void spline_forward<float>(const SplineKernels<float>&, const SplineArgs<float>&, float*);
template void spline_forward<double>(const SplineKernels<double>&, const SplineArgs<double>&,
                                     double*);
template void spline_backward<float>(const SplineKernels<float>&, const SplineArgs<float>&,
                                     const float*, float*, float*, int64_t);
template void spline_backward<double>(const SplineKernels<double>&, const SplineArgs<double>&,
                                      const double*, double*, double*, int64_t);

} // namespace kan::detail
