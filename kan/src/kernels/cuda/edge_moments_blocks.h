#pragma once
// The regulariser's sums (edge_moments_threads.h) and their backward as block kernels, in
// spline_blocks.h's scheme: a block computes the bases of a tile of (sample, input) pairs once,
// into shared memory, and its threads reuse them for every output, reading the per-edge (i, o)
// arrays with consecutive outputs in consecutive threads (edge_moments_threads.h's kernels
// recompute each basis in every one of the O threads of an input, and its point kernel reads the
// (I, O) arrays with a stride of O).
//
// - The sums and the backward's edge part run the weight gradient's blocks (weight_shape,
//   weight_load): one input, `rows` sample slices x `lanes` outputs; thread (slice, o) adds its
//   slice's samples in order into registers, and writes its slice's copy (slices, I, O) at the
//   end; the gcoef column gcoef[slice, i, :, o] is the thread's own. Same sums, same order as
//   moments_thread and moments_backward_edge, so no atomics and the same results bit for bit.
// - The backward's point part (gx and gbase of each (sample, input) pair) runs the per-pair
//   blocks of grad_x (pairs_of_lanes): a group of lanes per pair over the outputs, its basis and
//   its derivatives in the tile, then a tree over the lanes (warp shuffles on the GPU).
//
// fused_spline_cuda.cu runs the phases with __syncthreads() between; blocks_on_cpu.cpp runs every
// thread of every block on the CPU (KAN_FUSED_CPU_ISA=cuda-blocks).

#include "kernels/cuda/edge_moments_threads.h"
#include "kernels/cuda/spline_blocks.h"

#include <cstdint>

namespace kan::detail::blocks {

// ---- The sums S1, S2 (slices, I, O): the weight gradient's blocks ----

/// Thread (slice, o)'s running sums, in double as moments_thread's.
struct EdgeSums {
  double s1, s2;
};

/// Phase 2 (after weight_load of a.spline) for the slices' samples [c0, c0 + chunk).
template <typename T>
static KAN_HOST_DEVICE void moments_add(const MomentArgs<T>& a, const WeightShape& s,
                                        const BasisTile<T>& tile, int64_t block, int64_t c0,
                                        int64_t t, EdgeSums* sums) {
  const auto& sa = a.spline;
  const auto st = slice_thread(s, sa.O, block, t);
  if (!st.active)
    return;
  int64_t n_begin, n_end;
  slice_bounds(sa.N, s.slices, st.slice, &n_begin, &n_end);
  for (int64_t j = 0; j < s.chunk && n_begin + c0 + j < n_end; ++j) {
    const int64_t p = st.row * s.chunk + j;
    const auto phi = static_cast<double>(
        edge_phi(a, n_begin + c0 + j, st.i, st.o, tile_edge(sa, tile, p, st.i, st.o)));
    sums->s1 += phi;
    sums->s2 += phi * phi;
  }
}

/// After the last chunk: s1, s2[slice, i, o] = the sums.
static KAN_HOST_DEVICE void moments_store(const WeightShape& s, int64_t I, int64_t O, int64_t block,
                                          int64_t t, EdgeSums sums, double* s1, double* s2) {
  const auto st = slice_thread(s, O, block, t);
  if (!st.active)
    return;
  const int64_t at = (st.slice * I + st.i) * O + st.o;
  s1[at] = sums.s1;
  s2[at] = sums.s2;
}

// ---- The backward's edge part: gwb, gws (slices, I, O), gcoef (slices, I, M, O) ----

/// Thread (slice, o)'s running gradients of its edge's scales.
struct ScaleGrads {
  double gwb, gws;
};

/// Phase 2 (after weight_load of a.spline): moments_backward_edge's loop over the chunk.
template <typename T>
static KAN_HOST_DEVICE void
moments_edge_add(const MomentArgs<T>& a, const MomentGrads<T>& g, const WeightShape& s,
                 const BasisTile<T>& tile, int64_t block, int64_t c0, int64_t t, ScaleGrads* acc) {
  const auto& sa = a.spline;
  const auto st = slice_thread(s, sa.O, block, t);
  if (!st.active)
    return;
  const int64_t i = st.i, o = st.o, io = i * sa.O + o;
  int64_t n_begin, n_end;
  slice_bounds(sa.N, s.slices, st.slice, &n_begin, &n_end);
  double* c = g.gcoef + (st.slice * sa.I + i) * sa.M * sa.O;
  const double ws = a.ws[io];
  for (int64_t j = 0; j < s.chunk && n_begin + c0 + j < n_end; ++j) {
    const int64_t n = n_begin + c0 + j, p = st.row * s.chunk + j, first = tile.first[p];
    const T spline = tile_edge(sa, tile, p, i, o);
    const double phi = static_cast<double>(edge_phi(a, n, i, o, spline));
    const double grad = g.g1[io] + 2 * phi * g.g2[io];
    acc->gwb += grad * a.base[n * sa.I + i];
    acc->gws += grad * static_cast<double>(spline);
    if (first == kOutside) {
      if (!is_finite_value(tile.none[p])) // NaN in every basis function reaches every coefficient
        for (int64_t m = 0; m < sa.M; ++m)
          c[m * sa.O + o] = static_cast<double>(tile.none[p]);
      continue;
    }
    const T* value = tile.value + p * (sa.k + 1);
    for (int r = 0; r <= sa.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < sa.M)
        c[m * sa.O + o] += grad * ws * value[r];
    }
  }
}

/// After the last chunk: gwb, gws[slice, i, o].
template <typename T>
static KAN_HOST_DEVICE void moments_edge_store(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                               const WeightShape& s, int64_t block, int64_t t,
                                               ScaleGrads acc) {
  const auto st = slice_thread(s, a.spline.O, block, t);
  if (!st.active)
    return;
  const int64_t at = (st.slice * a.spline.I + st.i) * a.spline.O + st.o;
  g.gwb[at] = acc.gwb;
  g.gws[at] = acc.gws;
}

// ---- The backward's point part: gx, gbase (N, I), grad_x's per-pair blocks ----

/// A pair's basis and its derivatives: (k + 1) more values than grad_x's tile entry.
constexpr int64_t point_pair_bytes(int k, int64_t element_size) {
  return pair_bytes(k, element_size) + (k + 1) * element_size;
}

// Even a warp per pair (the fewest pairs) at the highest order fits the tile.
static_assert(kThreads / kWarp * point_pair_bytes(kFusedMaxOrder, sizeof(double)) <= kTileBytes,
              "point_shape must find a tile that fits");

/// grad_x's groups, widened (fewer pairs a block) where a block's pairs would not fit kTileBytes
/// (high orders with few outputs).
inline PairShape point_shape(int64_t N, int64_t I, int64_t O, int k, int64_t element_size) {
  const int64_t bytes = point_pair_bytes(k, element_size);
  int64_t lanes = lanes_for(O, kWarp);
  while (kThreads / lanes * bytes > kTileBytes && lanes < kWarp)
    lanes *= 2;
  return pairs_of_lanes(N, I, lanes, bytes);
}

/// The point tile in a block's shared memory: the derivatives first (so both arrays of T stay
/// aligned), then the values' BasisTile, whose first and none they share.
template <typename T> struct PointTile { BasisTile<T> values, slopes; };

template <typename T>
static KAN_HOST_DEVICE PointTile<T> point_tile_at(void* memory, int64_t pairs, int k) {
  T* slopes = static_cast<T*>(memory);
  const auto values = tile_at<T>(slopes + pairs * (k + 1), pairs, k);
  return {values, {slopes, values.none, values.first}};
}

/// Phase 1: thread t < pairs loads the block's pair t.
template <typename T>
static KAN_HOST_DEVICE void point_load(const MomentArgs<T>& a, const PairShape& s,
                                       const PointTile<T>& tile, int64_t block, int64_t t) {
  pairs_load<T, false>(a.spline, s, tile.values, block, t, tile.slopes.value);
}

/// Thread t's shares of its pair's gbase and gx (the spline's share), over its outputs.
struct PointGrads {
  double gx, gbase;
};

/// Phase 2: moments_backward_point's sums over the thread's outputs (zero past the last pair).
template <typename T>
static KAN_HOST_DEVICE PointGrads point_part(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                             const PairShape& s, const PointTile<T>& tile,
                                             int64_t block, int64_t t) {
  const auto& sa = a.spline;
  const int64_t group = t / s.lanes, pair = block * s.pairs + group;
  PointGrads part{0, 0};
  if (pair >= sa.N * sa.I)
    return part;
  const int64_t n = pair / sa.I, i = pair % sa.I;
  for (int64_t o = t % s.lanes; o < sa.O; o += s.lanes) {
    const int64_t io = i * sa.O + o;
    const T spline = tile_edge(sa, tile.values, group, i, o);
    const double phi = static_cast<double>(edge_phi(a, n, i, o, spline));
    const double grad = g.g1[io] + 2 * phi * g.g2[io];
    part.gbase += grad * a.wb[io];
    part.gx += grad * a.ws[io] * static_cast<double>(tile_edge(sa, tile.slopes, group, i, o));
  }
  return part;
}

/// Phase 3: the group's first thread writes the pair's gradients from the lanes' sums.
template <typename T>
static KAN_HOST_DEVICE void point_store(const MomentArgs<T>& a, const MomentGrads<T>& g,
                                        const PairShape& s, int64_t block, int64_t t,
                                        PointGrads sum) {
  const int64_t pair = block * s.pairs + t / s.lanes;
  if (t % s.lanes == 0 && pair < a.spline.N * a.spline.I) {
    g.gx[pair] = static_cast<T>(sum.gx);
    g.gbase[pair] = static_cast<T>(sum.gbase);
  }
}

} // namespace kan::detail::blocks
