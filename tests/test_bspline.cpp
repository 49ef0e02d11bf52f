// B-spline basis: pykan's numbers, the textbook properties, hand-computed values.
#include "kan/nn/bspline.h"

#include "test_util.h"

#include <ATen/ATen.h>

namespace kan {
namespace {

using test::max_abs_diff;
using test::to_tensor;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

TEST(BSpline, MatchesPykanForOrders0To3) {
  const auto ref = test::load_reference("bspline_basis.json");
  const auto x = to_tensor(ref["x"]).unsqueeze(1); // (13, 1)
  for (const auto& [order, data] : ref["orders"].items()) {
    const auto grid = to_tensor(data["grid"]).unsqueeze(0); // (1, P)
    const auto expected = to_tensor(data["values"]);        // (13, M)
    const auto basis = bspline_basis(x, grid, std::stoi(order)).squeeze(1);
    ASSERT_EQ(basis.sizes(), expected.sizes()) << "order " << order;
    EXPECT_LT(max_abs_diff(basis, expected), 1e-12) << "order " << order;
  }
}

TEST(BSpline, PartitionOfUnityNonNegativeAndLocal) {
  for (int64_t k : {1, 2, 3, 5}) {
    for (int64_t G : {1, 3, 7}) {
      // Uniform knots and, on a second input, sorted random (non-uniform) knots.
      const auto uniform = uniform_grid(1, G, k, -1, 1, f64);
      auto interior = std::get<0>(torch::rand({1, G + 1}, f64).sort(1)) * 2 - 1;
      interior.select(1, 0).fill_(-1);
      interior.select(1, G).fill_(1);
      const auto grid = torch::cat({uniform, extend_grid(interior, k)}, 0); // (2, G + 2k + 1)
      const auto inside = torch::linspace(-1, 1, 401, f64).narrow(0, 0, 400);
      const auto x = inside.unsqueeze(1).expand({400, 2}).contiguous();
      const auto basis = bspline_basis(x, grid, k); // (400, 2, G + k)
      ASSERT_EQ(basis.size(2), G + k);
      EXPECT_LT(max_abs_diff(basis.sum(2), torch::ones({400, 2}, f64)), 1e-12)
          << "k=" << k << " G=" << G;

      const auto wide = torch::linspace(-4, 4, 801, f64).unsqueeze(1).expand({801, 2}).contiguous();
      const auto wide_basis = bspline_basis(wide, grid, k);
      EXPECT_GE(wide_basis.min().item<double>(), 0.0);
      EXPECT_LE(wide_basis.ne(0).sum(2).max().item<int64_t>(), k + 1);
    }
  }
}

TEST(BSpline, HandComputedValues) {
  // One basis function per order on the integer knots 0..k+1: the hat, the quadratic and the
  // cubic uniform B-splines.
  auto single = [](int64_t k, double x) {
    const auto grid = torch::arange(k + 2, f64).unsqueeze(0);
    return bspline_basis(torch::full({1, 1}, x, f64), grid, k).item<double>();
  };
  EXPECT_NEAR(single(1, 0.25), 0.25, 1e-15);
  EXPECT_NEAR(single(1, 1.5), 0.5, 1e-15);
  EXPECT_NEAR(single(2, 0.5), 0.125, 1e-15); // x^2 / 2
  EXPECT_NEAR(single(2, 1.5), 0.75, 1e-15);  // (-2x^2 + 6x - 3) / 2
  EXPECT_NEAR(single(2, 2.5), 0.125, 1e-15); // (3 - x)^2 / 2
  EXPECT_NEAR(single(3, 1.0), 1.0 / 6, 1e-15);
  EXPECT_NEAR(single(3, 2.0), 2.0 / 3, 1e-15);
  EXPECT_NEAR(single(3, 0.5), 0.125 / 6, 1e-15); // x^3 / 6
}

TEST(BSpline, ZeroOutsideTheExtendedGrid) {
  const auto grid = uniform_grid(1, 5, 3, -1, 1, f64); // extended grid spans [-2.2, 2.2]
  const auto x = torch::tensor({-100.0, -2.21, 2.2, 2.5, 100.0}, f64).unsqueeze(1);
  EXPECT_EQ(bspline_basis(x, grid, 3).abs().max().item<double>(), 0.0);
}

TEST(BSpline, RepeatedKnotsGiveNoNaN) {
  // Clamped knots (multiplicity k + 1 at both ends) make several denominators zero.
  const auto grid = torch::tensor({0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0}, f64).unsqueeze(0);
  const auto x = torch::linspace(-0.5, 2.5, 61, f64).unsqueeze(1).requires_grad_(true);
  const auto basis = bspline_basis(x, grid, 2);
  EXPECT_TRUE(torch::isfinite(basis).all().item<bool>());
  const auto inside = (x.squeeze(1) >= 0) & (x.squeeze(1) < 2);
  EXPECT_LT(max_abs_diff(basis.sum(2).squeeze(1).masked_select(inside),
                         torch::ones({inside.sum().item<int64_t>()}, f64)),
            1e-12);
  basis.sum().backward();
  EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
}

TEST(BSpline, ExtendGridMatchesUniformGrid) {
  const auto grid = uniform_grid(3, 4, 2, -2, 2, f64);
  EXPECT_EQ(grid.sizes(), (std::vector<int64_t>{3, 4 + 2 * 2 + 1}));
  EXPECT_LT(max_abs_diff(grid[0], torch::linspace(-4, 4, 9, f64)), 1e-14);
}

TEST(BSpline, RejectsMismatchedShapes) {
  const auto grid = uniform_grid(2, 3, 3, -1, 1, f64);
  KAN_EXPECT_ERROR(bspline_basis(torch::zeros({4, 3}, f64), grid, 3), "3 columns", "2 inputs");
  KAN_EXPECT_ERROR(bspline_basis(torch::zeros({4}, f64), grid, 3), "2-D");
  KAN_EXPECT_ERROR(bspline_basis(torch::zeros({4, 2}, f64), grid, 9), "k = 9", "k + 2 = 11");
}

} // namespace
} // namespace kan
