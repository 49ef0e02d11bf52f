// The CUDA block kernels (spline_blocks.h, edge_moments_blocks.h) run on the CPU
// (KAN_FUSED_CPU_ISA=cuda-blocks): each block's threads one after another, phase by phase, where
// fused_spline_cuda.cu puts a __syncthreads() between the phases, and the lanes' tree sums as its
// warp shuffles do them. It lets the numerics tests check the GPU kernels' indexing and arithmetic
// on a machine without a GPU; it is slow and meant for nothing else.
#include "kernels/cuda/edge_moments_blocks.h"
#include "kernels/cuda/spline_blocks.h"
#include "kernels/edge_moments.h"
#include "kernels/spline_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace kan::detail::cuda_blocks {
namespace {

using blocks::kThreads;

// Runs block(b, tile memory) for the blocks [0, count), a few at a time per CPU thread, each CPU
// thread with its own stand-in for shared memory. Every block starts from all-ones bytes (NaN
// values, knot indices of -1), as a GPU's shared memory holds whatever was there: a phase that
// reads an entry no thread loaded fails here instead of reading a zero or the last block's value.
template <typename Block> void for_each_block(int64_t count, int64_t shared_bytes, Block block) {
  at::parallel_for(0, count, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> shared(static_cast<size_t>(shared_bytes / sizeof(double) + 1));
    for (int64_t b = begin; b < end; ++b) {
      std::memset(shared.data(), 0xFF, shared.size() * sizeof(double));
      block(b, static_cast<void*>(shared.data()));
    }
  });
}

// __shfl_down_sync(mask, v, offset, lanes) for offset = lanes / 2, ..., 1, summed: thread t of each
// group of `lanes` adds the value `offset` lanes up, or its own past the group's end.
template <typename T> void group_sums(T* v, int64_t lanes) {
  T old[kThreads];
  for (int64_t offset = lanes / 2; offset > 0; offset /= 2) {
    std::copy(v, v + kThreads, old);
    for (int64_t t = 0; t < kThreads; ++t)
      v[t] = old[t] + (t % lanes + offset < lanes ? old[t + offset] : old[t]);
  }
}

template <typename T> void layer_forward(const SplineArgs<T>& a, T* y) {
  const auto s = blocks::forward_shape(a.N, a.I, a.O, a.k, sizeof(T));
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.rows * s.chunk, a.k);
    T acc[kThreads] = {};
    for (int64_t i0 = 0; i0 < a.I; i0 += s.chunk) {
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::forward_load(a, s, tile, b, i0, t);
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::forward_add(a, s, tile, b, i0, t, &acc[t]);
    }
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::forward_store(a, s, b, t, acc[t], y);
  });
}

template <typename T> void edges_forward(const SplineArgs<T>& a, T* y) {
  const auto s = blocks::pair_shape(a.N, a.I, a.O, a.k, sizeof(T));
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.pairs, a.k);
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::pairs_load<T, false>(a, s, tile, b, t);
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::edges_store(a, s, tile, b, t, y);
  });
}

template <typename T> void grad_x(const SplineArgs<T>& a, GradRows rows, const T* gy, T* gx) {
  const auto s = blocks::pair_shape(a.N, a.I, a.O, a.k, sizeof(T));
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.pairs, a.k);
    T parts[kThreads];
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::pairs_load<T, true>(a, s, tile, b, t);
    for (int64_t t = 0; t < kThreads; ++t)
      parts[t] = blocks::grad_x_part(a, s, tile, gy, rows, b, t);
    group_sums(parts, s.lanes);
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::grad_x_store(a, s, tile, b, t, parts[t], gx);
  });
}

template <typename T>
void grad_weight(const SplineArgs<T>& a, GradRows rows, const T* gy, T* gw, int64_t slices) {
  const auto s = blocks::weight_shape(a.N, a.I, a.O, a.k, sizeof(T), slices);
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.rows * s.chunk, a.k);
    for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::weight_load(a, s, tile, b, c0, t);
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::weight_add(a, s, tile, gy, rows, gw, b, c0, t);
    }
  });
}

} // namespace

template <typename T> void moments(const MomentArgs<T>& a, int64_t slices, double* s1, double* s2) {
  const auto& sa = a.spline;
  const auto s = blocks::weight_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T), slices);
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.rows * s.chunk, sa.k);
    blocks::EdgeSums sums[kThreads] = {};
    for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::weight_load(sa, s, tile, b, c0, t);
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::moments_add(a, s, tile, b, c0, t, &sums[t]);
    }
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::moments_store(s, sa.I, sa.O, b, t, sums[t], s1, s2);
  });
}

template <typename T> void moments_backward(const MomentArgs<T>& a, const MomentGrads<T>& g) {
  const auto& sa = a.spline;
  const auto s = blocks::weight_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T), g.slices);
  for_each_block(s.blocks, s.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::tile_at<T>(shared, s.rows * s.chunk, sa.k);
    blocks::ScaleGrads acc[kThreads] = {};
    for (int64_t c0 = 0; c0 < s.rows_per_slice; c0 += s.chunk) {
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::weight_load(sa, s, tile, b, c0, t);
      for (int64_t t = 0; t < kThreads; ++t)
        blocks::moments_edge_add(a, g, s, tile, b, c0, t, &acc[t]);
    }
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::moments_edge_store(a, g, s, b, t, acc[t]);
  });
  const auto p = blocks::point_shape(sa.N, sa.I, sa.O, sa.k, sizeof(T));
  for_each_block(p.blocks, p.shared_bytes, [&](int64_t b, void* shared) {
    const auto tile = blocks::point_tile_at<T>(shared, p.pairs, sa.k);
    double gx[kThreads], gbase[kThreads];
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::point_load(a, p, tile, b, t);
    for (int64_t t = 0; t < kThreads; ++t) {
      const auto part = blocks::point_part(a, g, p, tile, b, t);
      gx[t] = part.gx;
      gbase[t] = part.gbase;
    }
    group_sums(gx, p.lanes);
    group_sums(gbase, p.lanes);
    for (int64_t t = 0; t < kThreads; ++t)
      blocks::point_store(a, g, p, b, t, {gx[t], gbase[t]});
  });
}

template <typename T> void forward(bool edges, const SplineArgs<T>& a, T* y) {
  if (edges)
    edges_forward(a, y);
  else
    layer_forward(a, y);
}

template <typename T>
void backward(bool edges, const SplineArgs<T>& a, const T* gy, T* gx, T* gw, int64_t slices) {
  if (a.N == 0)
    return;
  const GradRows rows = edges ? GradRows{a.I * a.O, a.O} : GradRows{a.O, 0};
  if (gx != nullptr)
    grad_x(a, rows, gy, gx);
  grad_weight(a, rows, gy, gw, slices);
}

int64_t backward_slices(int64_t N, int64_t I, int64_t O, int64_t weight_bytes) {
  return blocks::backward_slices(N, I, O, weight_bytes);
}

template void moments<float>(const MomentArgs<float>&, int64_t, double*, double*);
template void moments<double>(const MomentArgs<double>&, int64_t, double*, double*);
template void moments_backward<float>(const MomentArgs<float>&, const MomentGrads<float>&);
template void moments_backward<double>(const MomentArgs<double>&, const MomentGrads<double>&);
template void forward<float>(bool, const SplineArgs<float>&, float*);
template void forward<double>(bool, const SplineArgs<double>&, double*);
template void backward<float>(bool, const SplineArgs<float>&, const float*, float*, float*,
                              int64_t);
template void backward<double>(bool, const SplineArgs<double>&, const double*, double*, double*,
                               int64_t);

} // namespace kan::detail::cuda_blocks
