// curve2coef: exact recovery of a known spline, finite answers for rank-deficient systems.
#include "kan/nn/bspline.h"

#include "test_util.h"

#include <ATen/ATen.h>

namespace kan {
namespace {

using test::max_abs_diff;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

struct Problem {
  torch::Tensor grid, coef, x, y;
};

Problem known_spline(int64_t n, int64_t G, int64_t k, torch::Device device = torch::kCPU) {
  torch::manual_seed(7);
  Problem p;
  p.grid = uniform_grid(2, G, k, -1, 1, f64);
  p.coef = torch::randn({2, 3, G + k}, f64);
  p.x = torch::rand({n, 2}, f64) * 2 - 1;
  p.y = coef2curve(p.x, p.grid, p.coef, k);
  p.grid = p.grid.to(device);
  p.coef = p.coef.to(device);
  p.x = p.x.to(device);
  p.y = p.y.to(device);
  return p;
}

TEST(Curve2Coef, ReproducesAKnownSplineExactly) {
  for (int64_t G : {1, 5, 20}) {
    const auto p = known_spline(500, G, 3);
    const auto coef = curve2coef(p.x, p.y, p.grid, 3);
    EXPECT_EQ(coef.sizes(), p.coef.sizes());
    EXPECT_LT(max_abs_diff(coef, p.coef), 1e-8) << "G=" << G;
    EXPECT_LT(max_abs_diff(coef2curve(p.x, p.grid, coef, 3), p.y), 1e-10) << "G=" << G;
  }
}

TEST(Curve2Coef, KeepsTheDtypeOfY) {
  const auto p = known_spline(300, 5, 3);
  const auto coef =
      curve2coef(p.x.to(torch::kFloat32), p.y.to(torch::kFloat32), p.grid.to(torch::kFloat32), 3);
  EXPECT_EQ(coef.scalar_type(), torch::kFloat32);
  EXPECT_LT(max_abs_diff(coef, p.coef), 1e-4);
}

TEST(Curve2Coef, RankDeficientSystemsGiveFiniteFits) {
  const auto grid = uniform_grid(2, 5, 3, -1, 1, f64); // G + k = 8 unknowns per edge
  struct Case {
    const char* name;
    torch::Tensor x;
  };
  const std::vector<Case> cases{
      {"one sample", torch::tensor({{0.3, -0.4}}, f64)},
      {"three samples", torch::tensor({{0.1, 0.2}, {-0.5, 0.7}, {0.9, -0.9}}, f64)},
      {"repeated samples", torch::full({50, 2}, 0.25, f64)},
      {"outside the grid", torch::full({10, 2}, 7.0, f64)},
      {"no samples", torch::empty({0, 2}, f64)},
  };
  for (const auto& c : cases) {
    const auto y = torch::randn({c.x.size(0), 2, 3}, f64);
    const auto coef = curve2coef(c.x, y, grid, 3);
    EXPECT_TRUE(torch::isfinite(coef).all().item<bool>()) << c.name;
    EXPECT_EQ(coef.sizes(), (std::vector<int64_t>{2, 3, 8})) << c.name;
    // Where the basis can represent the samples, the fit passes through them.
    const auto inside = bspline_basis(c.x, grid, 3).sum(2).gt(0.5).all().item<bool>();
    const bool distinct = std::string(c.name) != "repeated samples";
    if (c.x.size(0) > 0 && inside && distinct) {
      EXPECT_LT(max_abs_diff(coef2curve(c.x, grid, coef, 3), y), 1e-6) << c.name;
    }
    // No sample inside the grid (an all-zero Gram matrix): nothing to fit, zero coefficients.
    if (bspline_basis(c.x, grid, 3).abs().sum().item<double>() == 0) {
      EXPECT_EQ(coef.abs().max().item<double>(), 0.0) << c.name;
    }
  }
}

TEST(Curve2Coef, OneSampleGivesTheMinimumNormSolution) {
  const auto grid = uniform_grid(1, 4, 2, -1, 1, f64);
  const auto x = torch::tensor({{0.37}}, f64);
  const auto y = torch::tensor({{{1.5}}}, f64);
  const auto b = bspline_basis(x, grid, 2).reshape({-1}); // (M)
  const auto expected = b * 1.5 / b.dot(b);
  EXPECT_LT(max_abs_diff(curve2coef(x, y, grid, 2).reshape({-1}), expected), 1e-9);
}

TEST(Curve2Coef, RejectsMismatchedShapes) {
  const auto grid = uniform_grid(2, 5, 3, -1, 1, f64);
  KAN_EXPECT_ERROR(curve2coef(torch::zeros({4, 2}, f64), torch::zeros({5, 2, 1}, f64), grid, 3),
                   "y must have shape");
}

TEST(Curve2Coef, SameAnswerOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto cpu = known_spline(300, 10, 3);
  const auto gpu = known_spline(300, 10, 3, torch::kCUDA);
  const auto coef_cpu = curve2coef(cpu.x, cpu.y, cpu.grid, 3);
  const auto coef_gpu = curve2coef(gpu.x, gpu.y, gpu.grid, 3);
  EXPECT_TRUE(coef_gpu.is_cuda());
  EXPECT_LT(max_abs_diff(coef_cpu, coef_gpu), 1e-9);
  // Rank-deficient on the GPU: where pykan's lstsq returns NaN.
  const auto one = curve2coef(gpu.x.narrow(0, 0, 1), gpu.y.narrow(0, 0, 1), gpu.grid, 3);
  EXPECT_TRUE(torch::isfinite(one).all().item<bool>());
  // No sample inside the grid: all-zero Gram matrices, which cuSOLVER's eigh must not see.
  const auto outside = curve2coef(torch::full({10, 2}, 7.0, gpu.x.options()),
                                  torch::ones({10, 2, 3}, gpu.y.options()), gpu.grid, 3);
  EXPECT_EQ(outside.abs().max().item<double>(), 0.0);
}

} // namespace
} // namespace kan
