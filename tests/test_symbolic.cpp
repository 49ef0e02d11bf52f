// pykan's symbolic library and fit_params (kan/symbolic/symbolic.h) against pykan 0.2.8
// (tests/reference/pykan/symbolic_library.json).
#include "kan/symbolic/symbolic.h"
#include "test_util.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kan {
namespace {

// A JSON list with null for NaN and "inf" / "-inf" for the infinities.
torch::Tensor decode(const nlohmann::json& values) {
  std::vector<double> out;
  for (const auto& v : values)
    out.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN()
                  : v.is_string()
                      ? (v == "inf" ? 1.0 : -1.0) * std::numeric_limits<double>::infinity()
                      : v.get<double>());
  return torch::tensor(out, torch::kFloat64);
}

// Equal where both are finite (to 1e-12, relative above 1), and NaN and Inf in the same places.
void expect_same_values(const torch::Tensor& actual, const torch::Tensor& expected,
                        const std::string& what) {
  EXPECT_TRUE(torch::equal(actual.isnan(), expected.isnan())) << what << ": NaN at other places";
  EXPECT_TRUE(torch::equal(actual.isinf() & (actual > 0), expected.isinf() & (expected > 0)))
      << what;
  EXPECT_TRUE(torch::equal(actual.isinf() & (actual < 0), expected.isinf() & (expected < 0)))
      << what;
  const auto finite = expected.isfinite() & actual.isfinite();
  const auto difference =
      ((actual - expected).abs() / expected.abs().clamp_min(1)).masked_select(finite);
  if (difference.numel() > 0) {
    EXPECT_LE(difference.max().item<double>(), 1e-12) << what;
  }
}

TEST(Symbolic, LibraryIsPykans) {
  const auto ref = test::load_reference("symbolic_library.json");
  const auto x = torch::tensor(ref["x"].get<std::vector<double>>(), torch::kFloat64);
  std::vector<std::string> names;
  for (const auto& [name, expected] : ref["functions"].items()) {
    SCOPED_TRACE(name);
    names.push_back(name);
    const auto& f = symbolic_function(name);
    EXPECT_EQ(f.complexity, expected["complexity"].get<int64_t>());
    expect_same_values(f.f(x), decode(expected["f"]), name + " f");
    expect_same_values(f.f_avoiding(x, 10.0), decode(expected["f_avoiding"]), name + " f_avoiding");
  }
  auto ours = symbolic_function_names();
  std::sort(ours.begin(), ours.end());
  EXPECT_EQ(ours, names); // the JSON object's keys come sorted
  EXPECT_EQ(symbolic_function_names().front(), "x");
}

TEST(Symbolic, FitParamsMatchesPykan) {
  const auto ref = test::load_reference("symbolic_library.json");
  for (const auto& fit : ref["fits"]) {
    const std::string name = fit["function"];
    SCOPED_TRACE(name);
    const auto x = test::to_tensor(fit["x"]).unsqueeze(1);
    const auto y = test::to_tensor(fit["y"]).unsqueeze(1);
    const auto& f = symbolic_function(name);
    const auto ours = fit_symbolic_params(x, y, f);
    const auto pykan = test::to_tensor(fit["params"]);
    const auto curve = [&](const torch::Tensor& p) { return p[2] * f.f(p[0] * x + p[1]) + p[3]; };
    // The same fitted curve. exp's and log's R^2 is (nearly) flat along a line of (a, b)
    // (exp(a x + b) = e^b exp(a x)), so the grid point picked there depends on the last bits of
    // the sums, and the curves agree far below the data's 1e-3 noise; elsewhere a and b are the
    // same grid point and c, d the same least squares.
    const bool flat = name == "exp" || name == "log";
    EXPECT_LE(test::max_abs_diff(curve(ours.params[0]), curve(pykan)), flat ? 1e-5 : 1e-9);
    if (!flat) {
      EXPECT_LE(test::max_abs_diff(ours.params[0].slice(0, 0, 2), pykan.slice(0, 0, 2)), 1e-12)
          << ours.params << pykan;
      EXPECT_LE(test::max_abs_diff(ours.params[0].slice(0, 2, 4), pykan.slice(0, 2, 4)), 1e-9)
          << ours.params << pykan;
    }
    EXPECT_NEAR(ours.r2[0].item<double>(), fit["r2"].get<double>(), flat ? 1e-8 : 1e-12);
  }
}

TEST(Symbolic, FitParamsIsBatchedOverEdges) {
  torch::manual_seed(0);
  const auto x = torch::rand({80, 5}, torch::kFloat64) * 2 - 1;
  const auto truth = torch::tensor({{1.5, 0.3, 2.0, -1.0},
                                    {-2.0, 1.0, 0.5, 0.2},
                                    {3.0, -0.5, -1.0, 0.0},
                                    {0.7, 0.0, 1.0, 1.0},
                                    {2.2, 2.0, 0.3, -0.3}},
                                   torch::kFloat64);
  const auto y = truth.select(1, 2) * torch::sin(truth.select(1, 0) * x + truth.select(1, 1)) +
                 truth.select(1, 3);
  // A budget small enough that the edges go in groups of one.
  SymbolicFitOptions small;
  small.memory_budget = 1;
  const auto together = fit_symbolic_params(x, y, symbolic_function("sin"));
  const auto grouped = fit_symbolic_params(x, y, symbolic_function("sin"), small);
  EXPECT_TRUE(torch::allclose(together.params, grouped.params, 0, 1e-14));
  for (int64_t e = 0; e < 5; ++e) {
    const auto one =
        fit_symbolic_params(x.narrow(1, e, 1), y.narrow(1, e, 1), symbolic_function("sin"));
    EXPECT_TRUE(torch::allclose(together.params[e], one.params[0], 0, 1e-14)) << e;
    // The fit reproduces the edge (sin's a and b only up to its symmetries).
    const auto p = together.params[e];
    const auto fitted = p[2] * torch::sin(p[0] * x.select(1, e) + p[1]) + p[3];
    EXPECT_LE(test::max_abs_diff(fitted, y.select(1, e)), 1e-3) << e;
    EXPECT_GT(together.r2[e].item<double>(), 0.999) << e;
  }
}

TEST(Symbolic, EdgesOnOneInputShareTheFirstSearch) {
  // A layer's edges (i, 0..O-1) read one input column: fitted from the shared columns, each edge
  // gets what it gets from a column of its own.
  torch::manual_seed(1);
  const auto x = torch::rand({60, 3}, torch::kFloat64) * 2 - 1;
  const std::vector<int64_t> column{0, 0, 1, 2, 2, 2, 1};
  const auto own = x.index_select(1, torch::tensor(column));
  const auto truth = torch::rand({4, 7}, torch::kFloat64) * 4 - 2;
  const auto y = truth[2] * torch::sin(truth[0] * own + truth[1]) + truth[3] +
                 1e-3 * torch::randn({60, 7}, torch::kFloat64);
  const auto shared = fit_symbolic_params(x, column, y, symbolic_function("sin"));
  const auto separate = fit_symbolic_params(own, y, symbolic_function("sin"));
  EXPECT_LE(test::max_abs_diff(shared.params, separate.params), 1e-12);
  EXPECT_LE(test::max_abs_diff(shared.r2, separate.r2), 1e-12);
  // So do the edges of a column split into groups of one column.
  SymbolicFitOptions small;
  small.memory_budget = 1;
  const auto grouped = fit_symbolic_params(x, column, y, symbolic_function("sin"), small);
  EXPECT_LE(test::max_abs_diff(grouped.params, shared.params), 1e-12);
  KAN_EXPECT_ERROR(fit_symbolic_params(x, {0, 3}, y.narrow(1, 0, 2), symbolic_function("sin")),
                   "edge 1's column 3 is out of range (x has 3 columns)");
  KAN_EXPECT_ERROR(fit_symbolic_params(x, {0}, y, symbolic_function("sin")), "one column per edge");
}

TEST(Symbolic, SmallerZoomGridsReachFinerSteps) {
  // (a, b) off every grid point: pykan's search (101 points, 3 searches) ends on a step of 8e-5;
  // a 21-point zoom grid with 8 searches ends on 2e-8, in less work, within a few of its steps of
  // the truth (the R^2 surface is a slanted valley). c is large so that the 1e-4
  // in pykan's R^2 moves its maximum by less than that step.
  const auto x = torch::linspace(-1, 1, 200, torch::kFloat64).unsqueeze(1);
  const double a = 1.23456789, b = -0.43210987, c = 150, d = 0.25;
  const auto y = c * torch::tanh(a * x + b) + d;
  const auto pykan = fit_symbolic_params(x, y, symbolic_function("tanh"));
  SymbolicFitOptions fine;
  fine.zoom_grid_number = 21;
  fine.iterations = 8;
  const auto zoomed = fit_symbolic_params(x, y, symbolic_function("tanh"), fine);
  // tanh is odd: (-a, -b, -c, d) is the same curve.
  const auto sign = [](const SymbolicFit& fit) {
    return fit.params[0][2].item<double>() < 0 ? -1 : 1;
  };
  const auto error = [&](const SymbolicFit& fit) {
    return std::max(std::abs(sign(fit) * fit.params[0][0].item<double>() - a),
                    std::abs(sign(fit) * fit.params[0][1].item<double>() - b));
  };
  EXPECT_LE(error(pykan), 8e-5);
  EXPECT_GT(error(pykan), 1e-6); // so the finer search has something to show
  EXPECT_LE(error(zoomed), 1e-7);
  EXPECT_NEAR(sign(zoomed) * zoomed.params[0][2].item<double>(), c, 1e-4);
  EXPECT_NEAR(zoomed.params[0][3].item<double>(), d, 1e-4);
  SymbolicFitOptions bad;
  bad.zoom_grid_number = 2;
  KAN_EXPECT_ERROR(fit_symbolic_params(x, y, symbolic_function("tanh"), bad),
                   "zoom_grid_number must be 0 (grid_number) or >= 3, got 2");
}

TEST(Symbolic, NewtonStepsReachTheMaximum) {
  // From the first search alone (a step of 0.2), Newton steps land on (a, b) to rounding, where
  // pykan's three searches stop at their grid's step (see above).
  const auto x = torch::linspace(-1, 1, 200, torch::kFloat64).unsqueeze(1);
  const double a = 1.23456789, b = -0.43210987, c = 150, d = 0.25;
  const auto y = c * torch::sin(a * x + b) + d;
  SymbolicFitOptions newton;
  newton.iterations = 1;
  newton.newton_steps = 10;
  const auto fit = fit_symbolic_params(x, y, symbolic_function("sin"), newton);
  // sin(-a x + pi - b) is the same curve; the fit is one of the two.
  const auto p = fit.params[0];
  const auto curve = p[2] * torch::sin(p[0] * x + p[1]) + p[3];
  EXPECT_LE(test::max_abs_diff(curve, y), 1e-9 * c);
  EXPECT_NEAR(std::abs(p[0].item<double>()), a, 1e-10);
  EXPECT_NEAR(p[2].item<double>(), c, 1e-8 * c);
  // Never worse than the search it starts from, for every library function on noisy curves.
  torch::manual_seed(3);
  const auto xs = torch::rand({50, 6}, torch::kFloat64) * 4 - 2;
  const auto ys = torch::sin(3 * xs) * xs + 0.3 * torch::randn({50, 6}, torch::kFloat64);
  // (On a coarse grid, for time: Newton then starts a step of 1 away.)
  SymbolicFitOptions search_only;
  search_only.iterations = 1;
  search_only.grid_number = 21;
  auto coarse_newton = search_only;
  coarse_newton.newton_steps = 10;
  for (const auto& name : symbolic_function_names()) {
    const auto& f = symbolic_function(name);
    const auto searched = fit_symbolic_params(xs, ys, f, search_only);
    const auto refined = fit_symbolic_params(xs, ys, f, coarse_newton);
    EXPECT_TRUE(refined.params.isfinite().all().item<bool>()) << name;
    // (The searched R^2 is summed in another order: equal to rounding where no step was taken.)
    EXPECT_TRUE((refined.r2 >= searched.r2 - 1e-12).all().item<bool>())
        << name << ": " << searched.r2 << " then " << refined.r2;
  }
  SymbolicFitOptions bad;
  bad.newton_steps = -1;
  KAN_EXPECT_ERROR(fit_symbolic_params(x, y, symbolic_function("sin"), bad),
                   "newton_steps must be >= 0, got -1");
}

TEST(Symbolic, BadInputIsAnError) {
  KAN_EXPECT_ERROR(symbolic_function("bessel"), "unknown symbolic function 'bessel'", "sin, cos");
  const auto x = torch::zeros({4, 2}, torch::kFloat64);
  KAN_EXPECT_ERROR(
      fit_symbolic_params(x, torch::zeros({4, 3}, torch::kFloat64), symbolic_function("sin")),
      "x and y must both be (N, edges)");
  SymbolicFitOptions backwards;
  backwards.a_range = {1.0, -1.0};
  KAN_EXPECT_ERROR(fit_symbolic_params(x, x, symbolic_function("sin"), backwards),
                   "a_range and b_range must be increasing");
  KAN_EXPECT_ERROR(add_symbolic_function({"", 1, nullptr, nullptr, "", ""}), "the name is empty");
}

TEST(Symbolic, AddedFunctionJoinsTheLibrary) {
  add_symbolic_function({"cube_root", 3,
                         [](const torch::Tensor& x) { return x.sign() * x.abs().pow(1.0 / 3); },
                         nullptr, "", ""});
  const auto& f = symbolic_function("cube_root");
  EXPECT_EQ(f.sympy, "cube_root({})");
  const auto x = torch::tensor({-8.0, 27.0}, torch::kFloat64);
  EXPECT_TRUE(torch::allclose(f.f_avoiding(x, 10.0), torch::tensor({-2.0, 3.0}, torch::kFloat64)));
  EXPECT_EQ(symbolic_function_names().back(), "cube_root");
}

TEST(Symbolic, FitParamsOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto ref = test::load_reference("symbolic_library.json");
  const auto& fit = ref["fits"][0];
  const auto x = test::to_tensor(fit["x"]).unsqueeze(1);
  const auto y = test::to_tensor(fit["y"]).unsqueeze(1);
  const auto& f = symbolic_function(fit["function"]);
  const auto cpu = fit_symbolic_params(x, y, f);
  const auto cuda = fit_symbolic_params(x.cuda(), y.cuda(), f);
  EXPECT_TRUE(cuda.params.is_cuda());
  EXPECT_LE(test::max_abs_diff(cuda.params, cpu.params), 1e-9);
}

} // namespace
} // namespace kan
