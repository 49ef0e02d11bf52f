// The drivers that split a kernel set's work over ATen's threads. Compiled with OpenMP: ATen's
// inline parallel_for runs serially without it. Compiled for the baseline instruction set only,
// so that no ATen inline function is ever compiled with AVX2 and picked by the linker for others.
#include "kernels/spline_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>

namespace kan::detail {
namespace {

// Least work per thread, in multiply-adds (~50-100 us on one core): smaller problems run on the
// calling thread. Waking the OpenMP team costs microseconds on an idle machine but can cost a
// scheduler time slice per parallel region where cores are oversubscribed (ctest -j2 on two cores,
// each test with two threads): at ATen's own grain (32768) the toy fits of the test suite ran
// 10x slower there, spinning at the barriers.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 18;

// Multiply-adds of one (sample, input) pair: k + 1 rows of O, plus the basis (~(k + 1)^2).
template <typename T> int64_t work_per_point(const SplineArgs<T>& a) {
  return (a.k + 1) * (a.O + a.k + 1);
}

} // namespace

int64_t parallel_grain(int64_t work_per_item) {
  return std::max<int64_t>(1, kMinWorkPerThread / std::max<int64_t>(1, work_per_item));
}

template <typename T>
void spline_forward(const SplineKernels<T>& kernels, bool edges, const SplineArgs<T>& a, T* y) {
  const auto kernel = edges ? kernels.edges_forward_pairs : kernels.forward_rows;
  const int64_t items = edges ? a.N * a.I : a.N, inputs_per_item = edges ? 1 : a.I;
  at::parallel_for(0, items, parallel_grain(inputs_per_item * work_per_point(a)),
                   [&](int64_t begin, int64_t end) { kernel(a, y, begin, end); });
}

template <typename T>
void spline_backward(const SplineKernels<T>& kernels, bool edges, const SplineArgs<T>& a,
                     const T* gy, T* gx, T* gw, int64_t slices) {
  if (a.N == 0)
    return;
  const auto kernel = edges ? kernels.edges_backward_tasks : kernels.backward_tasks;
  const int64_t rows_per_slice = (a.N + slices - 1) / slices;
  at::parallel_for(0, slices * a.I, parallel_grain(rows_per_slice * 2 * work_per_point(a)),
                   [&](int64_t begin, int64_t end) { kernel(a, gy, gx, gw, slices, begin, end); });
}

template void spline_forward<float>(const SplineKernels<float>&, bool, const SplineArgs<float>&,
                                    float*);
template void spline_forward<double>(const SplineKernels<double>&, bool, const SplineArgs<double>&,
                                     double*);
template void spline_backward<float>(const SplineKernels<float>&, bool, const SplineArgs<float>&,
                                     const float*, float*, float*, int64_t);
template void spline_backward<double>(const SplineKernels<double>&, bool, const SplineArgs<double>&,
                                      const double*, double*, double*, int64_t);

} // namespace kan::detail
