// The CUDA kernels' per-thread code (spline_threads.h), run on the CPU as one more set of CPU
// kernels (KAN_FUSED_CPU_ISA=cuda-threads): every thread of fused_spline_cuda.cu's kernels, one
// after another. It lets the numerics tests check the GPU kernels' indexing and arithmetic on a
// machine without a GPU; it is slow and meant for nothing else.
#include "kernels/cuda/edge_moments_threads.h"
#include "kernels/cuda/spline_threads.h"
#include "kernels/spline_kernels.h"

namespace kan::detail::cuda_threads {
namespace {

// Threads (n, o) of the layer's forward kernel.
template <typename T>
void forward_rows(const SplineArgs<T>& a, T* y, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t o = 0; o < a.O; ++o)
      y[n * a.O + o] = forward_thread(a, n, o);
}

// Threads (n, i, o) of the per-edge splines' forward kernel, pairs t = n * I + i.
template <typename T>
void edges_forward_pairs(const SplineArgs<T>& a, T* y, int64_t t_begin, int64_t t_end) {
  for (int64_t t = t_begin; t < t_end; ++t)
    for (int64_t o = 0; o < a.O; ++o)
      y[t * a.O + o] = edges_forward_thread(a, t / a.I, t % a.I, o);
}

// Task = slice * I + input, as in the CPU kernels: the grad_x threads of the slice's samples for
// that input, and the grad_weight threads (slice, input, every output); gy's rows as `rows`.
template <typename T>
void backward(const SplineArgs<T>& a, GradRows rows, const T* gy, T* gx, T* gw, int64_t slices,
              int64_t task_begin, int64_t task_end) {
  for (int64_t task = task_begin; task < task_end; ++task) {
    const int64_t s = task / a.I, i = task % a.I;
    int64_t n_begin, n_end;
    slice_bounds(a.N, slices, s, &n_begin, &n_end);
    for (int64_t n = n_begin; gx != nullptr && n < n_end; ++n)
      gx[n * a.I + i] = grad_x_thread(a, gy, rows, n, i);
    for (int64_t o = 0; o < a.O; ++o)
      grad_w_columns(a, gy, rows, gw, slices, s, i, o, o + 1);
  }
}

template <typename T>
void backward_tasks(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                    int64_t task_begin, int64_t task_end) {
  backward(a, GradRows{a.O, 0}, gy, gx, gw, slices, task_begin, task_end);
}

template <typename T>
void edges_backward_tasks(const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices,
                          int64_t task_begin, int64_t task_end) {
  backward(a, GradRows{a.I * a.O, a.O}, gy, gx, gw, slices, task_begin, task_end);
}

// Threads (s, i, o) of the regulariser's sums kernel, for inputs i.
template <typename T>
void moments_inputs(const MomentArgs<T>& a, int64_t slices, double* s1, double* s2, int64_t begin,
                    int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t o = 0; o < a.spline.O; ++o)
        moments_thread(a, slices, s, i, o, s1, s2);
}

// Threads (s, i, o) of the edge kernel, then (n, i) of the point kernel, for inputs i.
template <typename T>
void moments_backward_inputs(const MomentArgs<T>& a, const MomentGrads<T>& g, int64_t begin,
                             int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t s = 0; s < g.slices; ++s)
      for (int64_t o = 0; o < a.spline.O; ++o)
        moments_backward_edge(a, g, s, i, o);
    for (int64_t n = 0; n < a.spline.N; ++n)
      moments_backward_point(a, g, n, i);
  }
}

} // namespace

// No layer_with_moments: regularised steps keep the layer and its sums apart, as on the GPU.
template <typename T> SplineKernels<T> kernels() {
  return {&forward_rows<T>,
          &backward_tasks<T>,
          &edges_forward_pairs<T>,
          &edges_backward_tasks<T>,
          &moments_inputs<T>,
          &moments_backward_inputs<T>,
          nullptr,
          nullptr};
}

template SplineKernels<float> kernels<float>();
template SplineKernels<double> kernels<double>();

} // namespace kan::detail::cuda_threads
