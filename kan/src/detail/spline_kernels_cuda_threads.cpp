// The CUDA kernels' per-thread code (spline_threads.h), run on the CPU as one more set of CPU
// kernels (KAN_FUSED_CPU_ISA=cuda-threads): every (sample, output), (sample, input) and
// (slice, input, output) thread of fused_spline_cuda.cu's three kernels, one after another. It
// lets the numerics tests check the GPU kernels' indexing and arithmetic on a machine without a
// GPU; it is slow and meant for nothing else.
#include "spline_kernels.h"
#include "spline_threads.h"

namespace kan::detail::cuda_threads {
namespace {

template <typename T>
void forward_rows(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t o = 0; o < a.O; ++o)
      y[n * a.O + o] = forward_thread(a, n, o);
}

// Task = slice * I + input, as in the CPU kernels: the grad_x threads of the slice's samples for
// that input, and the grad_weight threads (slice, input, every output).
template <typename T>
void backward_tasks(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                    int64_t task_begin, int64_t task_end) {
  const GradRows rows{a.O, 0}; // grad_y is (N, O)
  for (int64_t task = task_begin; task < task_end; ++task) {
    const int64_t s = task / a.I, i = task % a.I;
    int64_t n_begin, n_end;
    slice_bounds(a.N, slices, s, &n_begin, &n_end);
    if (gx != nullptr)
      for (int64_t n = n_begin; n < n_end; ++n)
        gx[n * a.I + i] = grad_x_thread(a, gy, rows, n, i);
    for (int64_t o = 0; o < a.O; ++o)
      grad_w_columns(a, gy, rows, gw, slices, s, i, o, o + 1);
  }
}

} // namespace

template <typename T> SplineKernels<T> kernels() {
  return {&forward_rows<T>, &backward_tasks<T>};
}

template SplineKernels<float> kernels<float>();
template SplineKernels<double> kernels<double>();

} // namespace kan::detail::cuda_threads
