#include "kan/bspline.h"

#include <ATen/ATen.h>

#include <deque>

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

torch::Tensor curve2coef(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& grid,
                         int64_t k) {
  check_grid(grid, k);
  check_points(x, grid, "x");
  TORCH_CHECK(y.dim() == 3 && y.size(0) == x.size(0) && y.size(1) == x.size(1),
              "y must have shape (N, in_dim, out_dim) = (", x.size(0), ", ", x.size(1),
              ", out_dim), got ", y.sizes());
  TORCH_CHECK(y.device() == x.device(), "y is on ", y.device(), " but x is on ", x.device());

  const auto f64 = torch::kFloat64;
  const auto basis = bspline_basis(x.to(f64), grid.to(f64), k).permute({1, 0, 2}); // (I, N, M)
  const auto basis_t = basis.transpose(1, 2);                                      // (I, M, N)
  const auto gram = torch::matmul(basis_t, basis);                                 // (I, M, M)
  const auto rhs = torch::matmul(basis_t, y.to(f64).permute({1, 0, 2}));           // (I, M, O)

  // Minimum-norm least squares through the pseudo-inverse of the normal equations: eigenvalues
  // below kRelativeCutoff of the largest are rank deficiency (one sample, fewer samples than
  // G + k, no sample in a span) and are dropped rather than inverted.
  constexpr double kRelativeCutoff = 1e-12;
  // An input with no sample inside its grid (one sample's collapsed knots) has an all-zero Gram
  // matrix, on which cuSOLVER's eigh may fail to converge. Its right-hand side is zero too, so
  // the identity in its place gives the same answer, zero coefficients, on every device.
  const auto empty = gram.abs().amax({1, 2}, /*keepdim=*/true) == 0;
  const auto [eigenvalues, eigenvectors] =
      torch::linalg_eigh(torch::where(empty, torch::eye(gram.size(1), gram.options()), gram));
  const auto cutoff = eigenvalues.narrow(1, -1, 1).clamp_min(0) * kRelativeCutoff;
  const auto keep = eigenvalues > cutoff;
  const auto inverse = torch::where(keep, eigenvalues.reciprocal(), torch::zeros_like(eigenvalues));
  const auto coef = torch::matmul(
      eigenvectors, inverse.unsqueeze(2) * torch::matmul(eigenvectors.transpose(1, 2), rhs));
  return coef.permute({0, 2, 1}).to(y.scalar_type()).contiguous(); // (I, O, M)
}

} // namespace kan
