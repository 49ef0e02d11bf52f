// CUDA kernels of the fused spline backend, on LibTorch's current stream: one thread per output
// element, each running the per-thread code of spline_threads.h (and of edge_moments_threads.h
// for the regulariser's statistics), which the CPU tests run too (KAN_FUSED_CPU_ISA=cuda-threads).
#include "detail/edge_moments.h"
#include "detail/edge_moments_threads.h"
#include "detail/fused_spline.h"
#include "detail/spline_threads.h"

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

// A launch that fails because this build has no code for the GPU's architecture says which GPU
// and which build, instead of CUDA's bare "no kernel image is available for execution".
void check_launch() {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaErrorNoKernelImageForDevice || error == cudaErrorUnsupportedPtxVersion ||
      error == cudaErrorInvalidPtx) {
    const auto* gpu = at::cuda::getCurrentDeviceProperties();
    TORCH_CHECK(false, "the fused backend's CUDA kernels were built for compute capabilities ",
                KAN_CUDA_ARCH_LIST, " but ", gpu->name, " has compute capability ", gpu->major, ".",
                gpu->minor, " (", cudaGetErrorString(error),
                "): rebuild with TORCH_CUDA_ARCH_LIST including ", gpu->major, ".", gpu->minor,
                ", or use the reference backend (KANOptions(...).backend(SplineBackend::"
                "kReference), kanbench --backend reference)");
  }
  C10_CUDA_CHECK(error);
}

int64_t blocks_for(int64_t work) {
  return std::max<int64_t>(1, (work + kThreads - 1) / kThreads);
}

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// Thread (n, o), o fastest.
template <typename T> __global__ void forward_kernel(SplineArgs<T> a, T* __restrict__ y) {
  const int64_t idx = thread_index();
  if (idx < a.N * a.O)
    y[idx] = forward_thread(a, idx / a.O, idx % a.O);
}

// The per-edge splines. Thread (n, i, o), o fastest.
template <typename T> __global__ void edges_forward_kernel(SplineArgs<T> a, T* __restrict__ y) {
  const int64_t idx = thread_index();
  if (idx < a.N * a.I * a.O)
    y[idx] = edges_forward_thread(a, idx / (a.I * a.O), (idx / a.O) % a.I, idx % a.O);
}

// The backward of both, grad_y's rows as `rows`. Thread (n, i), i fastest.
template <typename T>
__global__ void grad_x_kernel(SplineArgs<T> a, GradRows rows, const T* __restrict__ gy,
                              T* __restrict__ gx) {
  const int64_t idx = thread_index();
  if (idx < a.N * a.I)
    gx[idx] = grad_x_thread(a, gy, rows, idx / a.I, idx % a.I);
}

// Thread (s, i, o), o fastest: it owns the column gw[s, i, :, o].
template <typename T>
__global__ void grad_w_kernel(SplineArgs<T> a, GradRows rows, const T* __restrict__ gy,
                              T* __restrict__ gw, int64_t slices) {
  const int64_t idx = thread_index();
  if (idx < slices * a.I * a.O) {
    const int64_t o = idx % a.O;
    grad_w_columns(a, gy, rows, gw, slices, idx / (a.I * a.O), (idx / a.O) % a.I, o, o + 1);
  }
}

// Sample slices of the weight gradient: enough (slice, input, output) threads to fill the GPU,
// at least 64 samples a slice, and at most kMaxSliceBytes of per-slice copies.
int64_t backward_slices(int64_t N, int64_t I, int64_t O, const at::Tensor& weight) {
  const int64_t weight_bytes = std::max<int64_t>(1, weight.numel() * weight.element_size());
  int64_t slices = std::max<int64_t>(1, kTargetThreads / std::max<int64_t>(1, I * O));
  slices = std::min(slices, std::max<int64_t>(1, N / 64));
  return std::min(slices, std::max<int64_t>(1, kMaxSliceBytes / weight_bytes));
}

// The regulariser's statistics. Thread (s, i, o), o fastest: edge (i, o)'s sums over slice s.
template <typename T>
__global__ void moments_kernel(MomentArgs<T> a, int64_t slices, double* __restrict__ s1,
                               double* __restrict__ s2) {
  const int64_t idx = thread_index();
  const int64_t I = a.spline.I, O = a.spline.O;
  if (idx < slices * I * O)
    moments_thread(a, slices, idx / (I * O), (idx / O) % I, idx % O, s1, s2);
}

// Thread (s, i, o): edge (i, o)'s parameter gradients over slice s.
template <typename T>
__global__ void moments_backward_edge_kernel(MomentArgs<T> a, MomentGrads<T> g) {
  const int64_t idx = thread_index();
  const int64_t I = a.spline.I, O = a.spline.O;
  if (idx < g.slices * I * O)
    moments_backward_edge(a, g, idx / (I * O), (idx / O) % I, idx % O);
}

// Thread (n, i), i fastest: grad x and grad base of the point.
template <typename T>
__global__ void moments_backward_point_kernel(MomentArgs<T> a, MomentGrads<T> g) {
  const int64_t idx = thread_index();
  if (idx < a.spline.N * a.spline.I)
    moments_backward_point(a, g, idx / a.spline.I, idx % a.spline.I);
}

} // namespace

at::Tensor edge_moments_forward_cuda(const at::Tensor& x, const at::Tensor& base,
                                     const at::Tensor& grid, const at::Tensor& inv,
                                     const at::Tensor& weight, const at::Tensor& wb,
                                     const at::Tensor& ws, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), O = weight.size(2);
  // Slices of the samples as for the weight gradient: enough threads to fill the GPU.
  const int64_t slices = backward_slices(N, I, O, weight);
  auto sums = at::zeros({2, slices, I, O}, x.options().dtype(at::kDouble));
  if (N > 0 && I * O > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "edge_moments_forward_cuda", [&] {
      double* s1 = sums.mutable_data_ptr<double>();
      moments_kernel<scalar_t><<<blocks_for(slices * I * O), kThreads, 0, stream>>>(
          moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k), slices, s1,
          s1 + slices * I * O);
      check_launch();
    });
  }
  return sums.sum(1);
}

std::vector<at::Tensor> edge_moments_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                   const at::Tensor& base, const at::Tensor& grid,
                                                   const at::Tensor& inv, const at::Tensor& weight,
                                                   const at::Tensor& wb, const at::Tensor& ws,
                                                   int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), M = weight.size(1), O = weight.size(2);
  const int64_t slices = backward_slices(N, I, O, weight);
  const auto f64 = x.options().dtype(at::kDouble);
  auto gx = at::empty({N, I}, x.options()), gbase = at::empty({N, I}, x.options());
  auto gweight = at::zeros({slices, I, M, O}, f64), gwb = at::zeros({slices, I, O}, f64),
       gws = at::zeros({slices, I, O}, f64);
  const auto g = grad.to(at::kDouble).contiguous();
  if (N > 0 && I * O > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "edge_moments_backward_cuda", [&] {
      const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
      const auto grads = moment_grads<scalar_t>(g, gx, gbase, gweight, gwb, gws, slices);
      moments_backward_edge_kernel<scalar_t>
          <<<blocks_for(slices * I * O), kThreads, 0, stream>>>(a, grads);
      check_launch();
      moments_backward_point_kernel<scalar_t><<<blocks_for(N * I), kThreads, 0, stream>>>(a, grads);
      check_launch();
    });
  }
  return {gx, gbase, gweight.sum(0), gwb.sum(0), gws.sum(0)};
}

at::Tensor fused_spline_forward_cuda(bool edges, const at::Tensor& x, const at::Tensor& grid,
                                     const at::Tensor& inv, const at::Tensor& weight, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), O = weight.size(2);
  auto y = edges ? at::empty({N, I, O}, x.options()) : at::empty({N, O}, x.options());
  if (y.numel() == 0)
    return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_forward_cuda", [&] {
    const auto args = spline_args<scalar_t>(x, grid, inv, weight, k);
    auto* out = y.mutable_data_ptr<scalar_t>();
    if (edges)
      edges_forward_kernel<scalar_t><<<blocks_for(y.numel()), kThreads, 0, stream>>>(args, out);
    else
      forward_kernel<scalar_t><<<blocks_for(y.numel()), kThreads, 0, stream>>>(args, out);
    check_launch();
  });
  return y;
}

std::pair<at::Tensor, at::Tensor>
fused_spline_backward_cuda(bool edges, const at::Tensor& grad_y, const at::Tensor& x,
                           const at::Tensor& grid, const at::Tensor& inv, const at::Tensor& weight,
                           int64_t k, bool need_grad_x) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), M = weight.size(1), O = weight.size(2);
  const int64_t slices = backward_slices(N, I, O, weight);
  const GradRows rows = edges ? GradRows{I * O, O} : GradRows{O, 0}; // grad_y (N, I, O) or (N, O)
  auto grad_x = need_grad_x ? at::empty_like(x) : at::Tensor();
  auto grad_w = at::zeros({slices, I, M, O}, weight.options());
  if (N > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_backward_cuda", [&] {
      const auto args = spline_args<scalar_t>(x, grid, inv, weight, k);
      if (need_grad_x) {
        grad_x_kernel<scalar_t><<<blocks_for(N * I), kThreads, 0, stream>>>(
            args, rows, grad_y.const_data_ptr<scalar_t>(), grad_x.mutable_data_ptr<scalar_t>());
        check_launch();
      }
      grad_w_kernel<scalar_t><<<blocks_for(slices * I * O), kThreads, 0, stream>>>(
          args, rows, grad_y.const_data_ptr<scalar_t>(), grad_w.mutable_data_ptr<scalar_t>(),
          slices);
      check_launch();
    });
  }
  return {grad_x, slices == 1 ? grad_w.squeeze(0) : grad_w.sum(0)};
}

} // namespace kan::detail
