// CUDA kernels of the fused spline backend, on LibTorch's current stream. The spline's forward and
// backward, and the regulariser's per-edge sums and their backward, run the block kernels of
// spline_blocks.h and edge_moments_blocks.h (a tile's bases computed once, in shared memory, for
// all outputs; per-slice copies of the sums over samples, no atomics; the per-edge arrays read
// with consecutive outputs in consecutive threads); KAN_CUDA_KERNELS=threads runs the per-thread
// ones of spline_threads.h and edge_moments_threads.h instead (one thread per output element or
// edge, each computing its own bases), kept to compare the two and to fall back on. The CPU tests
// run all of them (KAN_FUSED_CPU_ISA=cuda-blocks, cuda-threads).
#include "kernels/cuda/edge_moments_blocks.h"
#include "kernels/cuda/edge_moments_threads.h"
#include "kernels/cuda/spline_blocks.h"
#include "kernels/cuda/spline_threads.h"
#include "kernels/edge_moments.h"
#include "kernels/fused_spline.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

namespace kan::detail {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads == blocks::kThreads, "the phases of spline_blocks.h stride by its kThreads");

// The block kernels unless KAN_CUDA_KERNELS=threads.
bool block_kernels() {
  static const bool use_blocks = [] {
    const char* env = std::getenv("KAN_CUDA_KERNELS");
    const std::string kernels = env == nullptr ? "" : env;
    TORCH_CHECK(kernels.empty() || kernels == "blocks" || kernels == "threads",
                "KAN_CUDA_KERNELS=", kernels, ": expected blocks or threads (or unset)");
    return kernels != "threads";
  }();
  return use_blocks;
}

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

// A launch's grid and shared memory, checked: every shape keeps its tile under 48 KiB, the most a
// block gets without opting in.
void check_blocks(int64_t count, int64_t shared_bytes) {
  TORCH_CHECK(count <= INT_MAX, "the fused backend's CUDA kernels need ", count,
              " blocks, more than a grid holds: use fewer samples per batch");
  TORCH_INTERNAL_ASSERT(shared_bytes <= blocks::kSharedLimit, "tile of ", shared_bytes, " bytes");
}

int64_t blocks_for(int64_t work) {
  const int64_t count = std::max<int64_t>(1, (work + kThreads - 1) / kThreads);
  check_blocks(count, 0);
  return count;
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

// ---- The block kernels: the phases of spline_blocks.h, __syncthreads() between them ----

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    forward_blocks_kernel(SplineArgs<T> a, blocks::ForwardShape s, T* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.rows * s.chunk, a.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  T acc = 0;
  for (int64_t i0 = 0; i0 < a.I; i0 += s.chunk) {
    blocks::forward_load(a, s, tile, b, i0, t);
    __syncthreads();
    blocks::forward_add(a, s, tile, b, i0, t, &acc);
    __syncthreads(); // the next chunk overwrites the tile
  }
  blocks::forward_store(a, s, b, t, acc, y);
}

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    edges_blocks_kernel(SplineArgs<T> a, blocks::PairShape s, T* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.pairs, a.k);
  blocks::pairs_load<T, false>(a, s, tile, blockIdx.x, threadIdx.x);
  __syncthreads();
  blocks::edges_store(a, s, tile, blockIdx.x, threadIdx.x, y);
}

// The sum over each group of `lanes` threads (a power of two up to 32, so groups never span two
// warps), in the first thread of the group; every thread of the warp must call it.
template <typename T> __device__ __forceinline__ T group_sum(T v, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset, lanes);
  return v;
}

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    grad_x_blocks_kernel(SplineArgs<T> a, blocks::PairShape s, GradRows rows,
                         const T* __restrict__ gy, T* __restrict__ gx) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.pairs, a.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  blocks::pairs_load<T, true>(a, s, tile, b, t);
  __syncthreads();
  const T sum =
      group_sum(blocks::grad_x_part(a, s, tile, gy, rows, b, t), static_cast<int>(s.lanes));
  blocks::grad_x_store(a, s, tile, b, t, sum, gx);
}

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    grad_w_blocks_kernel(SplineArgs<T> a, blocks::WeightShape s, GradRows rows,
                         const T* __restrict__ gy, T* __restrict__ gw) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.rows * s.chunk, a.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
    blocks::weight_load(a, s, tile, b, c0, t);
    __syncthreads();
    blocks::weight_add(a, s, tile, gy, rows, gw, b, c0, t);
    __syncthreads(); // the next chunk overwrites the tile
  }
}

template <typename T>
void forward_blocks(bool edges, const SplineArgs<T>& a, T* y, cudaStream_t stream) {
  if (edges) {
    const auto s = blocks::pair_shape(a.N, a.I, a.O, a.k, sizeof(T));
    check_blocks(s.blocks, s.shared_bytes);
    edges_blocks_kernel<T><<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, s, y);
  } else {
    const auto s = blocks::forward_shape(a.N, a.I, a.O, a.k, sizeof(T));
    check_blocks(s.blocks, s.shared_bytes);
    forward_blocks_kernel<T><<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, s, y);
  }
  check_launch();
}

template <typename T>
void backward_blocks(const SplineArgs<T>& a, GradRows rows, const T* gy, T* gx, T* gw,
                     int64_t slices, cudaStream_t stream) {
  if (gx != nullptr && a.I > 0) {
    const auto s = blocks::pair_shape(a.N, a.I, a.O, a.k, sizeof(T));
    check_blocks(s.blocks, s.shared_bytes);
    grad_x_blocks_kernel<T>
        <<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, s, rows, gy, gx);
    check_launch();
  }
  const auto s = blocks::weight_shape(a.N, a.I, a.O, a.k, sizeof(T), slices);
  if (s.blocks == 0) // no inputs or no outputs
    return;
  check_blocks(s.blocks, s.shared_bytes);
  grad_w_blocks_kernel<T>
      <<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, s, rows, gy, gw);
  check_launch();
}

// ---- The regulariser's statistics, per thread (KAN_CUDA_KERNELS=threads) ----

// Thread (s, i, o), o fastest: edge (i, o)'s sums over slice s.
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

// ---- And in blocks: the phases of edge_moments_blocks.h ----

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    moments_blocks_kernel(MomentArgs<T> a, blocks::WeightShape s, double* __restrict__ s1,
                          double* __restrict__ s2) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.rows * s.chunk, a.spline.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  blocks::EdgeSums sums{0, 0};
  for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
    blocks::weight_load(a.spline, s, tile, b, c0, t);
    __syncthreads();
    blocks::moments_add(a, s, tile, b, c0, t, &sums);
    __syncthreads(); // the next chunk overwrites the tile
  }
  blocks::moments_store(s, a.spline.I, a.spline.O, b, t, sums, s1, s2);
}

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    moments_edge_blocks_kernel(MomentArgs<T> a, MomentGrads<T> g, blocks::WeightShape s) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::tile_at<T>(memory, s.rows * s.chunk, a.spline.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  blocks::ScaleGrads acc{0, 0};
  for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
    blocks::weight_load(a.spline, s, tile, b, c0, t);
    __syncthreads();
    blocks::moments_edge_add(a, g, s, tile, b, c0, t, &acc);
    __syncthreads(); // the next chunk overwrites the tile
  }
  blocks::moments_edge_store(a, g, s, b, t, acc);
}

template <typename T>
__global__ void __launch_bounds__(blocks::kThreads)
    moments_point_blocks_kernel(MomentArgs<T> a, MomentGrads<T> g, blocks::PairShape s) {
  extern __shared__ __align__(16) unsigned char memory[];
  const auto tile = blocks::point_tile_at<T>(memory, s.pairs, a.spline.k);
  const int64_t b = blockIdx.x, t = threadIdx.x;
  blocks::point_load(a, s, tile, b, t);
  __syncthreads();
  const auto part = blocks::point_part(a, g, s, tile, b, t);
  const int lanes = static_cast<int>(s.lanes);
  blocks::point_store(a, g, s, b, t, {group_sum(part.gx, lanes), group_sum(part.gbase, lanes)});
}

template <typename T>
void moments_blocks(const MomentArgs<T>& a, int64_t slices, double* s1, double* s2,
                    cudaStream_t stream) {
  const auto& sa = a.spline;
  const auto s = blocks::weight_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T), slices);
  check_blocks(s.blocks, s.shared_bytes);
  moments_blocks_kernel<T><<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, s, s1, s2);
  check_launch();
}

// Every point's gx and gbase are written, outputs or not (N * I > 0); the edges' gradients where
// there are outputs.
template <typename T>
void moments_backward_blocks(const MomentArgs<T>& a, const MomentGrads<T>& g, cudaStream_t stream) {
  const auto& sa = a.spline;
  const auto s = blocks::weight_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T), g.slices);
  if (s.blocks > 0) {
    check_blocks(s.blocks, s.shared_bytes);
    moments_edge_blocks_kernel<T><<<s.blocks, blocks::kThreads, s.shared_bytes, stream>>>(a, g, s);
    check_launch();
  }
  const auto p = blocks::point_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T));
  check_blocks(p.blocks, p.shared_bytes);
  moments_point_blocks_kernel<T><<<p.blocks, blocks::kThreads, p.shared_bytes, stream>>>(a, g, p);
  check_launch();
}

// Thread (i, p - 1, j), j fastest: one entry of knot_reciprocals' table.
template <typename T>
__global__ void knot_reciprocals_kernel(const T* __restrict__ knots, int64_t I, int64_t k,
                                        int64_t P, T* __restrict__ inv) {
  const int64_t idx = thread_index();
  if (idx < I * k * P)
    inv[idx] = knot_reciprocal(knots, P, idx / (k * P), (idx / P) % k + 1, idx % P);
}

} // namespace

at::Tensor edge_moments_forward_cuda(const at::Tensor& x, const at::Tensor& base,
                                     const at::Tensor& grid, const at::Tensor& inv,
                                     const at::Tensor& weight, const at::Tensor& wb,
                                     const at::Tensor& ws, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), I = x.size(1), O = weight.size(2);
  // Slices of the samples as for the weight gradient: enough threads to fill the GPU.
  const int64_t slices = gpu_backward_slices(x, weight);
  auto sums = at::zeros({2, slices, I, O}, x.options().dtype(at::kDouble));
  if (N > 0 && I * O > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "edge_moments_forward_cuda", [&] {
      const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
      double* s1 = sums.mutable_data_ptr<double>();
      double* s2 = s1 + slices * I * O;
      if (block_kernels())
        return moments_blocks(a, slices, s1, s2, stream);
      moments_kernel<scalar_t>
          <<<blocks_for(slices * I * O), kThreads, 0, stream>>>(a, slices, s1, s2);
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
  const int64_t slices = gpu_backward_slices(x, weight);
  const auto f64 = x.options().dtype(at::kDouble);
  auto gx = at::empty({N, I}, x.options()), gbase = at::empty({N, I}, x.options());
  auto gweight = at::zeros({slices, I, M, O}, f64), gwb = at::zeros({slices, I, O}, f64),
       gws = at::zeros({slices, I, O}, f64);
  const auto g = grad.to(at::kDouble).contiguous();
  if (N * I > 0) { // every point's gx and gbase are written (zero without outputs: defensive, as
                   // KANLayer has at least one)
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "edge_moments_backward_cuda", [&] {
      const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
      const auto grads = moment_grads<scalar_t>(g, gx, gbase, gweight, gwb, gws, slices);
      if (block_kernels())
        return moments_backward_blocks(a, grads, stream);
      if (O > 0) {
        moments_backward_edge_kernel<scalar_t>
            <<<blocks_for(slices * I * O), kThreads, 0, stream>>>(a, grads);
        check_launch();
      }
      moments_backward_point_kernel<scalar_t><<<blocks_for(N * I), kThreads, 0, stream>>>(a, grads);
      check_launch();
    });
  }
  return {gx, gbase, gweight.sum(0), gwb.sum(0), gws.sum(0)};
}

at::Tensor knot_reciprocals_cuda(const at::Tensor& grid, int64_t k) {
  const c10::cuda::CUDAGuard guard(grid.device());
  const int64_t I = grid.size(0), P = grid.size(1);
  auto inv = at::empty({I, k, P}, grid.options());
  if (inv.numel() == 0)
    return inv;
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), "knot_reciprocals_cuda", [&] {
    knot_reciprocals_kernel<scalar_t>
        <<<blocks_for(inv.numel()), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            grid.const_data_ptr<scalar_t>(), I, k, P, inv.mutable_data_ptr<scalar_t>());
    check_launch();
  });
  return inv;
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
    if (block_kernels())
      return forward_blocks(edges, args, out, stream);
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
  const int64_t slices = gpu_backward_slices(x, weight);
  const GradRows rows = edges ? GradRows{I * O, O} : GradRows{O, 0}; // grad_y (N, I, O) or (N, O)
  auto grad_x = need_grad_x ? at::empty_like(x) : at::Tensor();
  auto grad_w = at::zeros({slices, I, M, O}, weight.options());
  if (N > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_backward_cuda", [&] {
      const auto args = spline_args<scalar_t>(x, grid, inv, weight, k);
      if (block_kernels())
        return backward_blocks(args, rows, grad_y.const_data_ptr<scalar_t>(),
                               need_grad_x ? grad_x.mutable_data_ptr<scalar_t>() : nullptr,
                               grad_w.mutable_data_ptr<scalar_t>(), slices, stream);
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
