#include "kan/nn/bspline.h"

#include "detail/saturate.h"
#include "kernels/fused_spline.h"
#include "kernels/spline_local.h"
#include "nn/detail/curve2coef.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

namespace kan {
namespace {

void check_grid(const torch::Tensor& grid, int64_t k) {
  TORCH_CHECK(k >= 0, "spline order k must be >= 0, got k = ", k);
  TORCH_CHECK(grid.dim() == 2, "grid must be 2-D (in_dim, G + 2k + 1), got shape ", grid.sizes());
  TORCH_CHECK(grid.size(1) >= k + 2, "grid has ", grid.size(1), " knots per input; k = ", k,
              " needs at least k + 2 = ", k + 2);
}

void check_points(const torch::Tensor& x, const torch::Tensor& grid, const char* name) {
  TORCH_CHECK(x.dim() == 2, name, " must be 2-D (N, in_dim), got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == grid.size(0), name, " has ", x.size(1), " columns but the grid has ",
              grid.size(0), " inputs");
  TORCH_CHECK(x.device() == grid.device(), name, " is on ", x.device(), " but the grid is on ",
              grid.device());
}

// 1 / d where d != 0, else 0: repeated knots make a term vanish instead of producing NaN.
torch::Tensor safe_reciprocal(const torch::Tensor& d) {
  return torch::where(d == 0, torch::zeros_like(d), d.reciprocal());
}

} // namespace

torch::Tensor extend_grid(const torch::Tensor& knots, int64_t k) {
  TORCH_CHECK(knots.dim() == 2 && knots.size(1) >= 2,
              "knots must be 2-D with at least 2 per row, got shape ", knots.sizes());
  // Repeated subtraction and addition, as pykan does, so extended knots match it bit for bit.
  const auto h = (knots.narrow(1, -1, 1) - knots.narrow(1, 0, 1)) / (knots.size(1) - 1);
  auto lo = knots.narrow(1, 0, 1);
  auto hi = knots.narrow(1, -1, 1);
  std::deque<torch::Tensor> parts{knots};
  for (int64_t i = 0; i < k; ++i) {
    lo = lo - h;
    hi = hi + h;
    parts.push_front(lo);
    parts.push_back(hi);
  }
  return torch::cat(std::vector<torch::Tensor>(parts.begin(), parts.end()), 1);
}

torch::Tensor uniform_grid(int64_t in_dim, int64_t G, int64_t k, double lo, double hi,
                           const torch::TensorOptions& options) {
  TORCH_CHECK(G >= 1, "grid (number of intervals G) must be >= 1, got G = ", G);
  TORCH_CHECK(lo < hi, "grid_range must satisfy a < b, got [", lo, ", ", hi, "]");
  auto knots = torch::linspace(lo, hi, G + 1, options).unsqueeze(0).expand({in_dim, G + 1});
  return extend_grid(knots.contiguous(), k);
}

torch::Tensor bspline_basis(const torch::Tensor& x, const torch::Tensor& grid, int64_t k) {
  check_grid(grid, k);
  check_points(x, grid, "x");
  const auto xe = x.unsqueeze(2);   // (N, I, 1)
  const auto t = grid.unsqueeze(0); // (1, I, P)
  const int64_t P = grid.size(1);
  auto knots = [&](int64_t begin, int64_t end) { return t.slice(2, begin, P + end); };

  // Order 0: indicator of [t_m, t_{m+1}).
  auto value = torch::logical_and(xe >= knots(0, -1), xe < knots(1, 0)).to(x.scalar_type());
  for (int64_t p = 1; p <= k; ++p) {
    // value holds P - p functions of order p - 1; order p has P - p - 1.
    const auto left_inv = safe_reciprocal(knots(p, -1) - knots(0, -(p + 1)));
    const auto right_inv = safe_reciprocal(knots(p + 1, 0) - knots(1, -p));
    value = (xe - knots(0, -(p + 1))) * left_inv * value.slice(2, 0, -1) +
            (knots(p + 1, 0) - xe) * right_inv * value.slice(2, 1);
  }
  return value;
}

torch::Tensor coef2curve(const torch::Tensor& x, const torch::Tensor& grid,
                         const torch::Tensor& coef, int64_t k) {
  const auto basis = bspline_basis(x, grid, k); // (N, I, M)
  TORCH_CHECK(coef.dim() == 3 && coef.size(0) == grid.size(0) && coef.size(2) == basis.size(2),
              "coef must have shape (in_dim, out_dim, G + k) = (", grid.size(0), ", out_dim, ",
              basis.size(2), "), got ", coef.sizes());
  return torch::einsum("nim,iom->nio", {basis, coef});
}

namespace {

// Bytes of one input's piece of n samples and o outputs, from PeakMemory measurements of grid
// updates of float64 layers on both backends (G 5 to 200, N 200 to 20000, O 1 to 2000), with room.
// Everything runs in float64 (8 bytes) whatever the targets' dtype. The peak is the larger of
//   the basis: off the CPU the Cox-de Boor recursion's tensors of n x P (8 to 9 measured, counted
//               10); on the CPU the local scheme's basis alone (n x M),
//   the solve:  the basis kept, its QR (a stacked copy, Q and LAPACK's Householder workspace:
//               5 x n x M) and the triangular factor, its SVD and their copies (6 x M x M),
// plus what the output pieces add: the targets (float32 ones and their float64 copy, 12 bytes),
// the right-hand side and its projections (6 x M x o), and the samples' column, sorted, with its
// sort indices (4 x n).
constexpr int64_t kBasisCopies = 10, kKeptBasisCopies = 5, kNormalCopies = 6, kRhsCopies = 6,
                  kSampleCopies = 4, kTargetBytes = 12;

// Whether curve2coef on `device` computes the basis point by point (local_bspline_basis_cpu)
// rather than by the recursion over whole tensors.
bool uses_local_basis(const torch::Device& device, int64_t k) {
  return device.is_cpu() && k <= detail::kFusedMaxOrder;
}

int64_t piece_bytes(int64_t n, int64_t o, int64_t P, int64_t M, bool local_basis) {
  using detail::sat_add;
  using detail::sat_mul;
  const int64_t basis = local_basis ? sat_mul(n, M) : sat_mul(kBasisCopies, n, P);
  const int64_t solve = sat_add(sat_mul(kKeptBasisCopies, n, M), sat_mul(kNormalCopies, M, M));
  const int64_t elements = sat_add(std::max(basis, solve),
                                   sat_add(sat_mul(kRhsCopies, M, o), sat_mul(kSampleCopies, n)));
  return sat_add(sat_mul(elements, int64_t{8}), sat_mul(kTargetBytes, n, o));
}

// The largest v in [1, hi] with fits(v), or 1 when none does; fits must be monotone.
template <typename F> int64_t largest_fitting(int64_t hi, F&& fits) {
  int64_t lo = 1;
  if (!fits(lo))
    return 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Least squares on the basis matrix itself, never on its normal equations (whose condition
// number is the square of the basis's: at k = 5, G = 9 they lost four digits against pykan's
// lstsq). A batch of problems min |B c - y| with B (batch, n, M) is reduced to its triangular
// factor by QR, piece by piece when the samples come in pieces: stacking the previous factor on
// the next rows and factoring again gives the factor of all rows, and Q^T y accumulates alike.
class TriangularLeastSquares {
public:
  // Adds the rows b (batch, rows, M) with their targets y (batch, rows, outputs).
  void add(const torch::Tensor& b, const torch::Tensor& y) {
    const auto rows = r_.defined() ? torch::cat({r_, b}, 1) : b;
    const auto targets = z_.defined() ? torch::cat({z_, y}, 1) : y;
    auto [q, r] = torch::linalg_qr(rows, "reduced");
    z_ = torch::matmul(q.transpose(1, 2), targets);
    r_ = std::move(r);
  }

  // The minimum-norm solution (batch, M, outputs) through the SVD of the triangular factor
  // (the basis's own singular values): those below eps * max(rows, M) of the largest are rank
  // deficiency (one sample, fewer samples than G + k, no sample in a span) and are dropped, as
  // LAPACK's lstsq drivers do by default. No rows, or no sample inside the grid: zeros.
  torch::Tensor solve(int64_t rows, int64_t M, const torch::TensorOptions& options) const {
    const int64_t outputs = z_.defined() ? z_.size(2) : 0;
    if (!r_.defined())
      return torch::zeros({0, M, outputs}, options);
    // cuSOLVER's SVD may not converge on an all-zero matrix; its answer is zero anyway.
    const auto empty = r_.abs().amax({1, 2}, /*keepdim=*/true) == 0;
    const auto safe = torch::where(empty, torch::ones_like(r_), r_);
    auto [u, singular, vh] = torch::linalg_svd(safe, /*full_matrices=*/false);
    const double rcond =
        std::numeric_limits<double>::epsilon() * static_cast<double>(std::max(rows, M));
    const auto keep = singular > singular.narrow(1, 0, 1) * rcond;
    const auto inverse = torch::where(keep, singular.reciprocal(), torch::zeros_like(singular));
    const auto coef = torch::matmul(vh.transpose(1, 2),
                                    inverse.unsqueeze(2) * torch::matmul(u.transpose(1, 2), z_));
    return torch::where(empty, torch::zeros_like(coef), coef);
  }

private:
  torch::Tensor r_, z_;
};

} // namespace

Curve2coefChunks curve2coef_chunks(int64_t N, int64_t I, int64_t O, int64_t G, int64_t k,
                                   int64_t memory_budget, const torch::Device& device) {
  TORCH_CHECK(N >= 0 && I >= 0 && O >= 0, "curve2coef_chunks: N, I and O must be >= 0, got N = ", N,
              ", I = ", I, ", O = ", O);
  TORCH_CHECK(G >= 1 && k >= 0, "curve2coef_chunks: G must be >= 1 and k >= 0, got G = ", G,
              ", k = ", k);
  TORCH_CHECK(memory_budget >= 1,
              "the memory budget of a spline fit (grid update, refinement) must be >= 1 byte, "
              "got ",
              memory_budget, "; the default is kan::kDefaultGridUpdateMemoryBytes = ",
              kDefaultGridUpdateMemoryBytes);
  using detail::sat_add;
  using detail::sat_mul;
  const int64_t M = sat_add(G, k), P = sat_add(M, sat_add(k, 1));
  N = std::max<int64_t>(N, 1);
  O = std::max<int64_t>(O, 1);
  Curve2coefChunks c;
  const bool local_basis = uses_local_basis(device, k);
  const int64_t one_input = piece_bytes(N, O, P, M, local_basis);
  if (one_input <= memory_budget) {
    c.inputs = std::clamp<int64_t>(memory_budget / one_input, 1, std::max<int64_t>(I, 1));
    c.outputs = O;
    c.samples = N;
    c.bytes = sat_mul(c.inputs, one_input);
    return c;
  }
  // One input at a time. With every sample, as many outputs as fit: the basis and its normal
  // equations are computed once and serve every output piece.
  auto bytes = [&](int64_t n, int64_t o) { return piece_bytes(n, o, P, M, local_basis); };
  if (bytes(N, 1) <= memory_budget) {
    c.outputs = largest_fitting(O, [&](int64_t o) { return bytes(N, o) <= memory_budget; });
    c.samples = N;
    c.bytes = bytes(N, c.outputs);
    return c;
  }
  // Samples too: the normal equations are sums over sample pieces, and each output piece
  // computes the basis again, so output pieces of about 2P keep that repeated work below the
  // targets' own.
  c.outputs = std::min(O, sat_mul(P, 2));
  while (c.outputs > 1 && bytes(1, c.outputs) > memory_budget)
    c.outputs /= 2;
  c.samples = largest_fitting(N, [&](int64_t n) { return bytes(n, c.outputs) <= memory_budget; });
  c.bytes = bytes(c.samples, c.outputs);
  return c;
}

namespace detail {

void curve2coef_pieces(const torch::Tensor& x, const torch::Tensor& grid, int64_t k,
                       int64_t out_dim, const Curve2coefChunks& chunks,
                       const Curve2coefTargets& targets, const Curve2coefSink& sink) {
  const auto f64 = torch::kFloat64;
  const int64_t N = x.size(0), M = grid.size(1) - k - 1;
  const auto x64 = x.to(f64), grid64 = grid.to(f64);
  // On the CPU each point's k + 1 functions alone: the same values, a fraction of the time.
  const bool local = uses_local_basis(x64.device(), k);
  auto basis_of = [&](int64_t n0, int64_t nc) { // (inputs, nc, M)
    const auto xs = x64.narrow(0, n0, nc);
    return (local ? detail::local_bspline_basis_cpu(xs, grid64, k) : bspline_basis(xs, grid64, k))
        .permute({1, 0, 2});
  };
  auto targets_of = [&](int64_t o0, int64_t oc, int64_t n0, int64_t nc) { // (inputs, nc, oc)
    return targets(o0, oc, n0, nc).to(f64).permute({1, 0, 2});
  };
  const auto options = x64.options();

  // Every sample at once: one QR of the basis serves every output piece.
  if (chunks.samples >= N && N > 0) {
    const auto [q, r] = torch::linalg_qr(basis_of(0, N), "reduced");
    for (int64_t o0 = 0; o0 < out_dim; o0 += chunks.outputs) {
      const int64_t oc = std::min(chunks.outputs, out_dim - o0);
      TriangularLeastSquares problem;
      // Q^T y against R is the whole problem in M rows instead of N.
      problem.add(r, torch::matmul(q.transpose(1, 2), targets_of(o0, oc, 0, N)));
      sink(o0, problem.solve(N, M, options).permute({0, 2, 1})); // (inputs, oc, M)
    }
    return;
  }
  // Samples in pieces: each output piece factors the basis again, piece by piece.
  for (int64_t o0 = 0; o0 < out_dim; o0 += chunks.outputs) {
    const int64_t oc = std::min(chunks.outputs, out_dim - o0);
    TriangularLeastSquares problem;
    for (int64_t n0 = 0; n0 < N; n0 += chunks.samples) {
      const int64_t nc = std::min(chunks.samples, N - n0);
      problem.add(basis_of(n0, nc), targets_of(o0, oc, n0, nc));
    }
    auto coef = problem.solve(N, M, options);
    if (coef.size(0) == 0) // no samples at all: nothing to fit
      coef = torch::zeros({x.size(1), M, oc}, options);
    sink(o0, coef.permute({0, 2, 1}));
  }
}

} // namespace detail

torch::Tensor curve2coef(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& grid,
                         int64_t k, int64_t memory_budget) {
  check_grid(grid, k);
  check_points(x, grid, "x");
  TORCH_CHECK(y.dim() == 3 && y.size(0) == x.size(0) && y.size(1) == x.size(1),
              "y must have shape (N, in_dim, out_dim) = (", x.size(0), ", ", x.size(1),
              ", out_dim), got ", y.sizes());
  TORCH_CHECK(y.device() == x.device(), "y is on ", y.device(), " but x is on ", x.device());

  const int64_t N = x.size(0), I = x.size(1), O = y.size(2), M = grid.size(1) - k - 1;
  const auto chunks =
      curve2coef_chunks(N, I, O, std::max<int64_t>(M - k, 1), k, memory_budget, x.device());
  auto coef = torch::empty({I, O, M}, y.options());
  for (int64_t i0 = 0; i0 < I; i0 += chunks.inputs) {
    const int64_t ic = std::min(chunks.inputs, I - i0);
    const auto coef_rows = coef.narrow(0, i0, ic);
    detail::curve2coef_pieces(
        x.narrow(1, i0, ic), grid.narrow(0, i0, ic), k, O, chunks,
        [&](int64_t o0, int64_t oc, int64_t n0, int64_t nc) {
          return y.narrow(0, n0, nc).narrow(1, i0, ic).narrow(2, o0, oc);
        },
        [&](int64_t o0, const torch::Tensor& c) { coef_rows.narrow(1, o0, c.size(1)).copy_(c); });
  }
  return coef;
}

} // namespace kan
