#pragma once
/// B-spline primitives of a KAN layer (docs/kan.md, "Grid", "B-spline basis", "curve2coef").
///
/// Shapes: N samples, I inputs, O outputs, G grid intervals, k spline order,
/// M = G + k basis functions per input, grid rows of G + 2k + 1 knots.

#include <torch/types.h>

#include <cstdint>

namespace kan {

/// Extends every row of knots by `k` points on each side, spaced by the row's mean step
/// (pykan's `extend_grid`): (I, P) -> (I, P + 2k).
torch::Tensor extend_grid(const torch::Tensor& knots, int64_t k);

/// Uniform extended grid: G + 1 evenly spaced knots over [lo, hi] for each of `in_dim`
/// inputs, extended by k -> (in_dim, G + 2k + 1). Computed on the device of `options`.
torch::Tensor uniform_grid(int64_t in_dim, int64_t G, int64_t k, double lo, double hi,
                           const torch::TensorOptions& options);

/// B-spline basis by the Cox-de Boor recursion: x (N, I), grid (I, G + 2k + 1) -> (N, I, G + k).
/// Order 0 is half-open [t_m, t_{m+1}); a zero denominator (repeated knots) contributes 0.
/// Differentiable in x.
torch::Tensor bspline_basis(const torch::Tensor& x, const torch::Tensor& grid, int64_t k);

/// Spline values sum_m coef_ijm B_m(x_ni): x (N, I), coef (I, O, G + k) -> (N, I, O).
torch::Tensor coef2curve(const torch::Tensor& x, const torch::Tensor& grid,
                         const torch::Tensor& coef, int64_t k);

/// Default bound on the extra memory of a least-squares spline fit (curve2coef), a grid update
/// (update_grid_from_samples) or a refinement (refine): 512 MiB, whatever N, I, O and G are.
inline constexpr int64_t kDefaultGridUpdateMemoryBytes = int64_t{512} << 20;

/// How curve2coef cuts a fit into pieces that each stay within a memory budget. Every input's
/// least-squares problem is independent, so inputs are split first; outputs and samples only
/// where one input alone exceeds the budget.
struct Curve2coefChunks {
  int64_t inputs = 1;  ///< inputs per piece
  int64_t outputs = 1; ///< outputs per piece (< O only when one input alone is too big)
  /// Samples per piece of the QR factorisation (< N only when one input and `outputs` outputs
  /// are too big; the stacked factorisations then round differently, by about 1e-16).
  int64_t samples = 1;
  int64_t bytes = 0; ///< estimated peak extra memory of one piece (saturates at INT64_MAX)
};

/// The pieces curve2coef uses for N samples, I inputs, O outputs, G intervals and order k within
/// `memory_budget` bytes, for a fit on `device` (the CPU needs less: it computes the basis point
/// by point). The budget is a target with a floor: one input's (G + k)^2 triangular factor and
/// its SVD, one output and one sample are the smallest piece.
Curve2coefChunks curve2coef_chunks(int64_t N, int64_t I, int64_t O, int64_t G, int64_t k,
                                   int64_t memory_budget = kDefaultGridUpdateMemoryBytes,
                                   const torch::Device& device = torch::kCPU);

/// Least-squares spline coefficients for every edge: x (N, I), y (N, I, O) -> coef (I, O, G + k)
/// minimising sum_n (sum_m coef_ijm B_m(x_ni) - y_nij)^2, in y's dtype.
///
/// Never NaN, on every device, also when the system is rank-deficient (one sample, fewer
/// samples than G + k, samples outside the grid): it returns the minimum-norm least-squares
/// solution, in float64, from a QR factorisation of the basis and the SVD of its triangular factor
/// (singular values below eps * max(N, G + k) of the largest treated as zero; docs/kan.md).
///
/// Its extra memory (the float64 basis and its factorisation) stays near `memory_budget` bytes:
/// the fit runs in pieces of inputs (and where one input is too big, of outputs and samples), see
/// curve2coef_chunks. Splitting inputs or outputs gives the same coefficients.
///
/// Example:
///   auto grid = kan::uniform_grid(2, 5, 3, -1, 1, torch::kFloat64);
///   auto coef = kan::curve2coef(x, y, grid, 3);   // x (N, 2), y (N, 2, O)
torch::Tensor curve2coef(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& grid,
                         int64_t k, int64_t memory_budget = kDefaultGridUpdateMemoryBytes);

} // namespace kan
