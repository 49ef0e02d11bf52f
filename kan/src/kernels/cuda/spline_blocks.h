#pragma once
// The CUDA kernels of the fused spline, block by block: each block first computes the bases of a
// tile of (sample, input) pairs, once, into shared memory, then its threads reuse them for every
// output (spline_threads.h's kernels recompute a pair's knot search and k + 1 bases in each of its
// O threads). The phases are plain host/device functions taking the block and thread index:
// fused_spline_cuda.cu runs them with __syncthreads() between, blocks_on_cpu.cpp runs every thread
// of every block on the CPU (KAN_FUSED_CPU_ISA=cuda-blocks), so that a machine without a GPU checks
// their indexing and arithmetic.
//
// edge_moments_blocks.h runs the regulariser's sums and their backward in these same blocks
// (weight_shape's, pairs_of_lanes'), on these same tiles.
//
// No atomics anywhere: the weight gradient's threads own their columns of one sample slice's copy
// of grad_weight (as in spline_threads.h), summed over the slices at the end, so results do not
// depend on the order in which blocks run. Each kernel's shape (threads along the outputs, pairs
// per tile) is computed on the host, by the functions below, for the GPU and its stand-in alike.

#include "kernels/cuda/spline_threads.h"

#include <cstdint>

namespace kan::detail::blocks {

constexpr int kThreads = 256;               ///< threads per block, every kernel
constexpr int kWarp = 32;                   ///< the per-pair kernels' lanes never span two warps
constexpr int64_t kTileBytes = 32768;       ///< shared memory a tile aims at (each fits 48 KiB)
constexpr int64_t kSharedLimit = 48 * 1024; ///< the most a block gets without opting in
constexpr int kOutside = -(1 << 30);        ///< a pair's `first` where there is nothing to sum

/// The bases of a tile's pairs: value[p * (k + 1) + r] is B_{first[p] + r} at pair p's x (or its
/// derivative, in the grad_x kernel); first[p] = kOutside where the point has none, and none[p]
/// is then what every sum over it gives (0 outside the grid, NaN for a non-finite x).
template <typename T> struct BasisTile {
  T* value;
  T* none;
  int* first;
};

/// Sample slices of the weight gradient on the GPU: enough (slice, input, output) threads to fill
/// it (2^18), at least 64 samples a slice, and at most 256 MiB of per-slice copies of the weight.
inline int64_t backward_slices(int64_t N, int64_t I, int64_t O, int64_t weight_bytes) {
  const auto at_least_1 = [](int64_t v) { return v < 1 ? int64_t{1} : v; };
  int64_t slices = at_least_1((int64_t{1} << 18) / at_least_1(I * O));
  slices = slices < at_least_1(N / 64) ? slices : at_least_1(N / 64);
  const int64_t copies = at_least_1((int64_t{256} << 20) / at_least_1(weight_bytes));
  return slices < copies ? slices : copies;
}

constexpr int64_t pair_bytes(int k, int64_t element_size) {
  return (k + 2) * element_size + static_cast<int64_t>(sizeof(int));
}

template <typename T>
static KAN_HOST_DEVICE BasisTile<T> tile_at(void* memory, int64_t pairs, int k) {
  T* values = static_cast<T*>(memory);
  return {values, values + pairs * (k + 1), reinterpret_cast<int*>(values + pairs * (k + 2))};
}

/// The smallest power of two >= n, at most `limit` (a power of two).
inline int64_t lanes_for(int64_t n, int64_t limit) {
  int64_t lanes = 1;
  while (lanes < n && lanes < limit)
    lanes *= 2;
  return lanes;
}

/// Tile pair p := the basis of x[n, i], or its derivatives with kDeriv; and, unless null, the
/// derivatives into slopes[p * (k + 1) + r] too (for kernels that need both, sharing first/none).
template <typename T, bool kDeriv>
static KAN_HOST_DEVICE void load_pair(const SplineArgs<T>& a, const BasisTile<T>& tile, int64_t p,
                                      int64_t n, int64_t i, T* slopes = nullptr) {
  T value[kFusedMaxOrder + 1], deriv[kFusedMaxOrder + 1], none;
  int64_t first = 0;
  const bool inside = point_basis(a, n, i, &first, value, deriv, &none);
  tile.none[p] = none;
  tile.first[p] = inside ? static_cast<int>(first) : kOutside;
  if (inside)
    for (int r = 0; r <= a.k; ++r) {
      tile.value[p * (a.k + 1) + r] = kDeriv ? deriv[r] : value[r];
      if (slopes != nullptr)
        slopes[p * (a.k + 1) + r] = deriv[r];
    }
}

/// Edge (i, o)'s spline at tile pair p: edges_forward_thread's value, from the tile.
template <typename T>
static KAN_HOST_DEVICE T tile_edge(const SplineArgs<T>& a, const BasisTile<T>& tile, int64_t p,
                                   int64_t i, int64_t o) {
  const int first = tile.first[p];
  return first == kOutside ? tile.none[p] : edge_value(a, i, o, first, tile.value + p * (a.k + 1));
}

// ---- The layer's forward, y (N, O) ----
// A block: `rows` samples x `lanes` outputs, one thread each (outputs fastest, so the weight's
// reads are coalesced), over the inputs in chunks of `chunk`: load the chunk's rows x chunk
// bases, then add the chunk's edges. Sums in forward_thread's order, so compiled alike (the same
// FMA contraction) the result is forward_thread's bit for bit.

/// A block of rows x lanes threads, lanes along the outputs (tiles of them where O > kThreads),
/// whose tile holds rows x chunk pairs: the chunk that fits kTileBytes, from 1 to `items`.
struct RowTiles {
  int64_t lanes, rows, chunk, output_tiles, shared_bytes;
};

inline RowTiles row_tiles(int64_t O, int k, int64_t element_size, int64_t items) {
  RowTiles s{};
  s.lanes = lanes_for(O, kThreads);
  s.rows = kThreads / s.lanes;
  const int64_t fit = kTileBytes / (s.rows * pair_bytes(k, element_size));
  s.chunk = fit < 1 ? 1 : (fit < items ? fit : (items < 1 ? 1 : items));
  s.output_tiles = (O + s.lanes - 1) / s.lanes;
  s.shared_bytes = s.rows * s.chunk * pair_bytes(k, element_size);
  return s;
}

struct ForwardShape : RowTiles {
  int64_t blocks;
};

/// Rows are samples; the chunk, inputs.
inline ForwardShape forward_shape(int64_t N, int64_t I, int64_t O, int k, int64_t element_size) {
  ForwardShape s{row_tiles(O, k, element_size, I), 0};
  s.blocks = (N + s.rows - 1) / s.rows * s.output_tiles;
  return s;
}

/// Phase 1 for the inputs [i0, i0 + chunk): thread t loads pairs t, t + kThreads, ...
template <typename T>
static KAN_HOST_DEVICE void forward_load(const SplineArgs<T>& a, const ForwardShape& s,
                                         const BasisTile<T>& tile, int64_t block, int64_t i0,
                                         int64_t t) {
  const int64_t n0 = block / s.output_tiles * s.rows;
  for (int64_t q = t; q < s.rows * s.chunk; q += kThreads) {
    const int64_t n = n0 + q / s.chunk, i = i0 + q % s.chunk;
    if (n < a.N && i < a.I)
      load_pair<T, false>(a, tile, q, n, i);
  }
}

/// Phase 2: thread t adds the chunk's edges of its (sample, output) to *acc.
template <typename T>
static KAN_HOST_DEVICE void forward_add(const SplineArgs<T>& a, const ForwardShape& s,
                                        const BasisTile<T>& tile, int64_t block, int64_t i0,
                                        int64_t t, T* acc) {
  const int64_t row = t / s.lanes, n = block / s.output_tiles * s.rows + row,
                o = block % s.output_tiles * s.lanes + t % s.lanes;
  if (n >= a.N || o >= a.O)
    return;
  for (int64_t c = 0; c < s.chunk && i0 + c < a.I; ++c)
    *acc += tile_edge(a, tile, row * s.chunk + c, i0 + c, o);
}

/// After the last chunk: y[n, o] = the sum.
template <typename T>
static KAN_HOST_DEVICE void forward_store(const SplineArgs<T>& a, const ForwardShape& s,
                                          int64_t block, int64_t t, T acc, T* y) {
  const int64_t n = block / s.output_tiles * s.rows + t / s.lanes,
                o = block % s.output_tiles * s.lanes + t % s.lanes;
  if (n < a.N && o < a.O)
    y[n * a.O + o] = acc;
}

// ---- Per pair: the edges' forward, y (N, I, O), and grad_x (N, I) of both ----
// A block: kThreads / lanes pairs t = n * I + i (consecutive), a group of `lanes` threads each
// (a power of two up to a warp), striding over the outputs. The edges' forward writes each
// output; grad_x sums g[o] sum_r dB_r w[i, first + r, o] over the group's outputs, then over its
// lanes by a tree (warp shuffles on the GPU): rounded differently from grad_x_thread, not more.

struct PairShape {
  int64_t lanes, pairs, blocks, shared_bytes;
};

/// Groups of `lanes` threads, a pair's tile entry of `bytes_per_pair` each.
inline PairShape pairs_of_lanes(int64_t N, int64_t I, int64_t lanes, int64_t bytes_per_pair) {
  PairShape s{};
  s.lanes = lanes;
  s.pairs = kThreads / s.lanes;
  s.blocks = (N * I + s.pairs - 1) / s.pairs;
  s.shared_bytes = s.pairs * bytes_per_pair;
  return s;
}

inline PairShape pair_shape(int64_t N, int64_t I, int64_t O, int k, int64_t element_size) {
  return pairs_of_lanes(N, I, lanes_for(O, kWarp), pair_bytes(k, element_size));
}

/// Phase 1: thread t < pairs loads the block's pair t (derivatives with kDeriv; into `slopes` too
/// unless null, see load_pair).
template <typename T, bool kDeriv>
static KAN_HOST_DEVICE void pairs_load(const SplineArgs<T>& a, const PairShape& s,
                                       const BasisTile<T>& tile, int64_t block, int64_t t,
                                       T* slopes = nullptr) {
  const int64_t pair = block * s.pairs + t;
  if (t < s.pairs && pair < a.N * a.I)
    load_pair<T, kDeriv>(a, tile, t, pair / a.I, pair % a.I, slopes);
}

/// Phase 2 of the edges' forward: y[pair, o] for the group's outputs.
template <typename T>
static KAN_HOST_DEVICE void edges_store(const SplineArgs<T>& a, const PairShape& s,
                                        const BasisTile<T>& tile, int64_t block, int64_t t, T* y) {
  const int64_t group = t / s.lanes, pair = block * s.pairs + group;
  if (pair >= a.N * a.I)
    return;
  for (int64_t o = t % s.lanes; o < a.O; o += s.lanes)
    y[pair * a.O + o] = tile_edge(a, tile, group, pair % a.I, o);
}

/// Phase 2 of grad_x: thread t's share of its pair's sum (0 for a pair past the end, or outside
/// the grid: grad_x_store writes `none` there).
template <typename T>
static KAN_HOST_DEVICE T grad_x_part(const SplineArgs<T>& a, const PairShape& s,
                                     const BasisTile<T>& tile, const T* gy, GradRows rows,
                                     int64_t block, int64_t t) {
  const int64_t group = t / s.lanes, pair = block * s.pairs + group;
  if (pair >= a.N * a.I || tile.first[group] == kOutside)
    return T(0);
  const int64_t n = pair / a.I, i = pair % a.I, first = tile.first[group];
  const T* deriv = tile.value + group * (a.k + 1);
  const T* g = gy + n * rows.per_sample + i * rows.per_input;
  T part = 0;
  for (int64_t o = t % s.lanes; o < a.O; o += s.lanes) {
    T slope = 0; // the edge's derivative at x
    for (int r = 0; r <= a.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < a.M)
        slope += deriv[r] * a.weight[(i * a.M + m) * a.O + o];
    }
    part += slope * g[o];
  }
  return part;
}

/// Phase 3: the group's first thread writes the pair's grad_x from the lanes' sum.
template <typename T>
static KAN_HOST_DEVICE void grad_x_store(const SplineArgs<T>& a, const PairShape& s,
                                         const BasisTile<T>& tile, int64_t block, int64_t t, T sum,
                                         T* gx) {
  const int64_t group = t / s.lanes, pair = block * s.pairs + group;
  if (t % s.lanes == 0 && pair < a.N * a.I)
    gx[pair] = tile.first[group] == kOutside ? tile.none[group] : sum;
}

// ---- The weight gradient, gw (slices, I, M, O) ----
// A block: one input, `rows` sample slices x `lanes` outputs; thread (slice, output) owns the
// column gw[slice, i, :, o] as grad_w_columns' thread does, and adds the samples of its slice in
// order, `chunk` at a time after the block has loaded their bases: its sums, in its order.

struct WeightShape : RowTiles {
  int64_t slice_groups, blocks, slices, rows_per_slice;
};

/// Rows are sample slices; the chunk, samples of each.
inline WeightShape weight_shape(int64_t N, int64_t I, int64_t O, int k, int64_t element_size,
                                int64_t slices) {
  const int64_t rows_per_slice = (N + slices - 1) / slices;
  WeightShape s{row_tiles(O, k, element_size, rows_per_slice), 0, 0, slices, rows_per_slice};
  s.slice_groups = (slices + s.rows - 1) / s.rows;
  s.blocks = I * s.slice_groups * s.output_tiles;
  return s;
}

/// Phase 1 for the slices' samples [c0, c0 + chunk) (counted from each slice's first).
template <typename T>
static KAN_HOST_DEVICE void weight_load(const SplineArgs<T>& a, const WeightShape& s,
                                        const BasisTile<T>& tile, int64_t block, int64_t c0,
                                        int64_t t) {
  const int64_t i = block / (s.slice_groups * s.output_tiles),
                s0 = block / s.output_tiles % s.slice_groups * s.rows;
  for (int64_t q = t; q < s.rows * s.chunk; q += kThreads) {
    const int64_t slice = s0 + q / s.chunk;
    int64_t n_begin, n_end;
    slice_bounds(a.N, s.slices, slice < s.slices ? slice : 0, &n_begin, &n_end);
    const int64_t n = n_begin + c0 + q % s.chunk;
    if (slice < s.slices && n < n_end)
      load_pair<T, false>(a, tile, q, n, i);
  }
}

/// Thread t of a block: its input, its row of the tile (its slice's), slice and output; `active`
/// unless past the last slice or output.
struct SliceThread {
  int64_t i, row, slice, o;
  bool active;
};

static KAN_HOST_DEVICE SliceThread slice_thread(const WeightShape& s, int64_t O, int64_t block,
                                                int64_t t) {
  SliceThread st{};
  st.i = block / (s.slice_groups * s.output_tiles);
  st.row = t / s.lanes;
  st.slice = block / s.output_tiles % s.slice_groups * s.rows + st.row;
  st.o = block % s.output_tiles * s.lanes + t % s.lanes;
  st.active = st.slice < s.slices && st.o < O;
  return st;
}

/// Phase 2: thread t adds those samples to its column.
template <typename T>
static KAN_HOST_DEVICE void weight_add(const SplineArgs<T>& a, const WeightShape& s,
                                       const BasisTile<T>& tile, const T* gy, GradRows rows, T* gw,
                                       int64_t block, int64_t c0, int64_t t) {
  const auto st = slice_thread(s, a.O, block, t);
  if (!st.active)
    return;
  const int64_t i = st.i, o = st.o;
  int64_t n_begin, n_end;
  slice_bounds(a.N, s.slices, st.slice, &n_begin, &n_end);
  T* c = gw + (st.slice * a.I + i) * a.M * a.O;
  for (int64_t j = 0; j < s.chunk && n_begin + c0 + j < n_end; ++j) {
    const int64_t n = n_begin + c0 + j, p = st.row * s.chunk + j, first = tile.first[p];
    if (first == kOutside) {
      if (!is_finite_value(tile.none[p])) // NaN in every basis function reaches every weight row
        for (int64_t m = 0; m < a.M; ++m)
          c[m * a.O + o] = tile.none[p];
      continue;
    }
    const T g = gy[n * rows.per_sample + i * rows.per_input + o];
    const T* value = tile.value + p * (a.k + 1);
    for (int r = 0; r <= a.k; ++r) {
      const int64_t m = first + r;
      if (m >= 0 && m < a.M)
        c[m * a.O + o] += value[r] * g;
    }
  }
}

} // namespace kan::detail::blocks
