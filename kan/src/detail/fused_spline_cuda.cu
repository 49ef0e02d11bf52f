// CUDA kernels of the fused spline backend, on LibTorch's current stream. Written to be simple
// and obviously right rather than tuned: one thread per output element, no atomics, the same
// local_bspline as the CPU kernels (so the same numbers, up to summation order).
#include "detail/fused_spline.h"
#include "detail/spline_local.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

namespace kan::detail {
namespace {

constexpr int kThreads = 256;
// Threads the grad_weight kernel aims for; beyond that it stops cutting the samples into slices.
constexpr int64_t kTargetThreads = int64_t{1} << 18;
// Cap on the per-slice copies of grad_weight.
constexpr int64_t kMaxSliceBytes = int64_t{256} << 20;

int64_t blocks_for(int64_t work) {
  return std::max<int64_t>(1, (work + kThreads - 1) / kThreads);
}

// y[n, o] = sum_i sum_r B_r(x_ni) w[i, first + r, o]. Thread (n, o); consecutive threads share n,
// so the reads of w are coalesced.
template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ grid,
                               const T* __restrict__ inv, const T* __restrict__ w,
                               T* __restrict__ y, int64_t N, int64_t I, int64_t P, int64_t M,
                               int64_t O, int k) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * O)
    return;
  const int64_t n = idx / O, o = idx % O;
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  T acc = 0;
  for (int64_t i = 0; i < I; ++i) {
    int64_t first;
    const T xv = x[n * I + i];
    if (!is_finite_value(xv))
      acc = xv - xv; // NaN in every basis function, as in the reference
    if (!local_bspline(grid + i * P, inv + i * k * P, P, k, xv, &first, value, deriv))
      continue;
    for (int r = 0; r <= k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < M)
        acc += value[r] * w[(i * M + m) * O + o];
    }
  }
  y[idx] = acc;
}

// grad_x[n, i] = sum_r dB_r(x_ni) sum_o w[i, first + r, o] grad_y[n, o]. Thread (n, i).
template <typename T>
__global__ void grad_x_kernel(const T* __restrict__ x, const T* __restrict__ grid,
                              const T* __restrict__ inv, const T* __restrict__ w,
                              const T* __restrict__ gy, T* __restrict__ gx, int64_t N, int64_t I,
                              int64_t P, int64_t M, int64_t O, int k) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * I)
    return;
  const int64_t n = idx / I, i = idx % I;
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  T acc = 0;
  int64_t first;
  if (!is_finite_value(x[idx]))
    acc = x[idx] - x[idx];
  if (local_bspline(grid + i * P, inv + i * k * P, P, k, x[idx], &first, value, deriv)) {
    for (int r = 0; r <= k; ++r) {
      const int64_t m = first + r;
      if (m < 0 || m >= M)
        continue;
      const T* wm = w + (i * M + m) * O;
      const T* g = gy + n * O;
      T dot = 0;
      for (int64_t o = 0; o < O; ++o)
        dot += wm[o] * g[o];
      acc += deriv[r] * dot;
    }
  }
  gx[idx] = acc;
}

// gw[s, i, m, o] = sum over the samples n of slice s of B_m(x_ni) grad_y[n, o]. Thread (s, i, o)
// owns the column gw[s, i, :, o], so no two threads write one element.
template <typename T>
__global__ void grad_w_kernel(const T* __restrict__ x, const T* __restrict__ grid,
                              const T* __restrict__ inv, const T* __restrict__ gy,
                              T* __restrict__ gw, int64_t N, int64_t I, int64_t P, int64_t M,
                              int64_t O, int k, int64_t slices) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= slices * I * O)
    return;
  const int64_t s = idx / (I * O), i = (idx / O) % I, o = idx % O;
  const int64_t rows = (N + slices - 1) / slices;
  const int64_t n_begin = s * rows, n_end = min(N, n_begin + rows);
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1];
  T* column = gw + (s * I + i) * M * O + o;
  for (int64_t n = n_begin; n < n_end; ++n) {
    int64_t first;
    const T xv = x[n * I + i];
    if (!is_finite_value(xv)) {
      for (int64_t m = 0; m < M; ++m)
        column[m * O] = xv - xv;
      continue;
    }
    if (!local_bspline(grid + i * P, inv + i * k * P, P, k, xv, &first, value, deriv))
      continue;
    const T g = gy[n * O + o];
    for (int r = 0; r <= k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < M)
        column[m * O] += value[r] * g;
    }
  }
}

} // namespace

at::Tensor fused_spline_forward_cuda(const at::Tensor& x, const at::Tensor& grid,
                                     const at::Tensor& inv, const at::Tensor& weight, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), P = grid.size(1), M = weight.size(1),
                O = weight.size(2);
  auto y = at::empty({N, O}, x.options());
  if (N == 0)
    return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_forward_cuda", [&] {
    forward_kernel<scalar_t><<<blocks_for(N * O), kThreads, 0, stream>>>(
        x.const_data_ptr<scalar_t>(), grid.const_data_ptr<scalar_t>(),
        inv.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
        y.mutable_data_ptr<scalar_t>(), N, I, P, M, O, static_cast<int>(k));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

std::pair<at::Tensor, at::Tensor>
fused_spline_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& grid,
                           const at::Tensor& inv, const at::Tensor& weight, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), P = grid.size(1), M = weight.size(1),
                O = weight.size(2);
  int64_t slices = std::max<int64_t>(1, kTargetThreads / (I * O));
  slices = std::min(slices, std::max<int64_t>(1, N / 64));
  slices = std::min(
      slices, std::max<int64_t>(1, kMaxSliceBytes / (weight.numel() * weight.element_size())));
  auto grad_x = at::empty_like(x);
  auto grad_w = at::zeros({slices, I, M, O}, weight.options());
  if (N > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_backward_cuda", [&] {
      grad_x_kernel<scalar_t><<<blocks_for(N * I), kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), grid.const_data_ptr<scalar_t>(),
          inv.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
          grad_y.const_data_ptr<scalar_t>(), grad_x.mutable_data_ptr<scalar_t>(), N, I, P, M, O,
          static_cast<int>(k));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      grad_w_kernel<scalar_t><<<blocks_for(slices * I * O), kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), grid.const_data_ptr<scalar_t>(),
          inv.const_data_ptr<scalar_t>(), grad_y.const_data_ptr<scalar_t>(),
          grad_w.mutable_data_ptr<scalar_t>(), N, I, P, M, O, static_cast<int>(k), slices);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return {grad_x, slices == 1 ? grad_w.squeeze(0) : grad_w.sum(0)};
}

} // namespace kan::detail
