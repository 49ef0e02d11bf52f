// The function catalogue (kan/data/function_catalogue.h) against SciPy and numpy: the reference
// values in tests/reference/scipy/functions.csv come from tools/scipy-reference/generate.py.
#include "kan/data/dataset.h"
#include "kan/data/function_catalogue.h"
#include "test_util.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kan::ReferenceFunction;

struct ReferenceRows {
  std::vector<std::vector<double>> inputs;
  std::vector<double> values;
};

// function name -> its rows of `function,value,x0,x1,...`.
std::map<std::string, ReferenceRows> read_reference() {
  const std::string path = std::string(KAN_SCIPY_REFERENCE_DIR) + "/functions.csv";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::map<std::string, ReferenceRows> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("function,", 0) == 0)
      continue;
    std::stringstream cells(line);
    std::string name, cell;
    std::getline(cells, name, ',');
    std::getline(cells, cell, ',');
    auto& r = rows[name];
    r.values.push_back(std::stod(cell));
    r.inputs.emplace_back();
    while (std::getline(cells, cell, ','))
      r.inputs.back().push_back(std::stod(cell));
  }
  return rows;
}

const std::map<std::string, ReferenceRows>& reference() {
  static const auto rows = read_reference();
  return rows;
}

kan::GridRange range_of(const ReferenceFunction& f, size_t i) {
  return f.ranges.size() == 1 ? f.ranges[0] : f.ranges[i];
}

TEST(FunctionCatalogue, MatchesSciPyAndPykanFormulas) {
  ASSERT_FALSE(reference().empty());
  for (const auto& f : kan::reference_functions()) {
    SCOPED_TRACE(f.name);
    const auto found = reference().find(f.name);
    ASSERT_NE(found, reference().end()) << "no reference values for " << f.name;
    const auto& rows = found->second;
    const auto n = static_cast<int64_t>(rows.values.size());
    auto x = torch::empty({n, f.n_var}, torch::kFloat64);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(static_cast<int64_t>(rows.inputs[i].size()), f.n_var);
      for (int64_t j = 0; j < f.n_var; ++j) {
        const double v = rows.inputs[i][j];
        const auto r = range_of(f, j);
        ASSERT_TRUE(v >= r[0] && v <= r[1]) << "reference point " << v << " of input " << j
                                            << " lies outside [" << r[0] << ", " << r[1] << "]";
        x[i][j] = v;
      }
    }
    const auto y = f.f(x);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{n, 1}));
    ASSERT_EQ(y.scalar_type(), torch::kFloat64);
    double scale = 0;
    for (double v : rows.values)
      scale = std::max(scale, std::fabs(v));
    // 1e-12 relative, with a floor for values within 1e-3 of the function's scale (its largest
    // |value| at the reference points) of zero: there (sn(0 | m), J at its roots, 1 + a sin(theta)
    // at a = -1, an exact 0 at a domain's edge) the last bits of both sides come from
    // cancellation, not from the function, so the check is absolute at 1e-15 of the scale, a few
    // units in its last place. Measured: every function agrees to 4e-14 relative with this floor.
    const double floor = 1e-3 * scale;
    double worst = 0;
    int64_t worst_row = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double got = y[i][0].item<double>();
      const double want = rows.values[i];
      const double error = std::fabs(got - want) / std::max(std::fabs(want), floor);
      if (!(error <= worst)) {
        worst = std::isnan(error) ? INFINITY : error;
        worst_row = i;
      }
    }
    std::ostringstream at;
    at.precision(17);
    for (double v : rows.inputs[worst_row])
      at << v << " ";
    EXPECT_LE(worst, 1e-12) << "at inputs " << at.str() << "got " << y[worst_row][0].item<double>()
                            << ", SciPy/numpy " << rows.values[worst_row];
  }
}

// Every corner, every point of a grid (2 or 3 inputs) or many random points (more inputs) of a
// function's domain give a finite value.
TEST(FunctionCatalogue, FiniteOnADenseSampleOfEachDomain) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  for (const auto& f : kan::reference_functions()) {
    SCOPED_TRACE(f.name);
    const int64_t n = f.n_var;
    std::vector<torch::Tensor> parts;
    auto lo = torch::empty({n}, torch::kFloat64);
    auto hi = torch::empty({n}, torch::kFloat64);
    for (int64_t i = 0; i < n; ++i) {
      lo[i] = range_of(f, i)[0];
      hi[i] = range_of(f, i)[1];
    }
    if (n <= 3) {
      const int64_t per_axis = n == 1 ? 10001 : n == 2 ? 201 : 41;
      std::vector<torch::Tensor> axes;
      for (int64_t i = 0; i < n; ++i)
        axes.push_back(
            torch::linspace(range_of(f, i)[0], range_of(f, i)[1], per_axis, torch::kFloat64));
      auto mesh = torch::meshgrid(axes, "ij");
      for (auto& m : mesh)
        m = m.reshape({-1});
      parts.push_back(torch::stack(mesh, 1));
    } else {
      parts.push_back(
          torch::rand({n > 10 ? 1000 : 20000, n}, generator, torch::kFloat64) * (hi - lo) + lo);
      if (n <= 10) { // and every corner
        const int64_t corners = int64_t{1} << n;
        auto bits = torch::arange(corners).unsqueeze(1).bitwise_right_shift(torch::arange(n)) % 2;
        parts.push_back(torch::where(bits.to(torch::kBool), hi, lo));
      }
    }
    const auto x = torch::cat(parts);
    const auto y = f.f(x);
    ASSERT_EQ(y.size(0), x.size(0));
    const auto bad = torch::logical_not(torch::isfinite(y.squeeze(1)));
    if (bad.any().item<bool>()) {
      const auto i = bad.nonzero()[0][0].item<int64_t>();
      ADD_FAILURE() << "not finite (" << y[i][0].item<double>() << ") at " << x[i];
    }
  }
}

TEST(FunctionCatalogue, NamesGroupsAndDescriptions) {
  std::set<std::string> names;
  for (const auto& f : kan::reference_functions()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(names.insert(f.name).second) << "duplicate name";
    EXPECT_EQ(f.name.find_first_of(" \t'\"$(),;"), std::string::npos) << "not shell-friendly";
    EXPECT_FALSE(f.formula.empty());
    EXPECT_FALSE(f.source.empty());
    EXPECT_TRUE(f.ranges.size() == 1 || static_cast<int64_t>(f.ranges.size()) == f.n_var);
    for (const auto& r : f.ranges)
      EXPECT_LT(r[0], r[1]);
    if (f.group != "builtin") {
      EXPECT_EQ(static_cast<int64_t>(f.variables.size()), f.n_var);
      EXPECT_EQ(static_cast<int64_t>(f.ranges.size()), f.n_var);
      EXPECT_FALSE(f.notes.empty());
      EXPECT_NE(f.source.find("arXiv:2404.19756"), std::string::npos);
    }
  }
  EXPECT_EQ(kan::reference_functions("builtin").size(), 5u);
  EXPECT_EQ(kan::reference_functions("special").size(), 15u);
  EXPECT_EQ(kan::reference_functions("feynman").size(), 27u);
  EXPECT_EQ(kan::reference_functions().size(), 47u);
  std::vector<std::string> special;
  for (const auto& f : kan::special_functions())
    special.push_back(f.name);
  EXPECT_EQ(special,
            (std::vector<std::string>{"ellipj", "ellipkinc", "ellipeinc", "jv", "yv", "kv", "iv",
                                      "lpmv_0", "lpmv_1", "lpmv_2", "sph_harm_01", "sph_harm_11",
                                      "sph_harm_02", "sph_harm_12", "sph_harm_22"}));
  for (const auto& f : kan::feynman_functions())
    EXPECT_EQ(f.name.rfind("feynman_", 0), 0u) << f.name;
  EXPECT_EQ(kan::feynman_functions().front().name, "feynman_I.6.2");
  EXPECT_EQ(kan::feynman_functions().back().name, "feynman_III.17.37");
  KAN_EXPECT_ERROR(kan::reference_functions("nope"), "unknown function group 'nope'",
                   "builtin, special, feynman");
}

TEST(FunctionCatalogue, ValuesAtKnownPoints) {
  auto at = [](const std::string& name, std::vector<double> x) {
    return kan::reference_function(name)
        .f(torch::tensor(x, torch::kFloat64).unsqueeze(0))
        .item<double>();
  };
  // sn(u | 0) = sin u, sn(u | 1) = tanh u; F(phi | 0) = E(phi | 0) = phi.
  EXPECT_NEAR(at("ellipj", {0.7, 0.0}), std::sin(0.7), 1e-15);
  EXPECT_NEAR(at("ellipj", {0.7, 1.0}), std::tanh(0.7), 1e-15);
  EXPECT_NEAR(at("ellipkinc", {0.7, 0.0}), 0.7, 1e-15);
  EXPECT_NEAR(at("ellipeinc", {0.7, 0.0}), 0.7, 1e-15);
  // Condon-Shortley phase: P_1^1(x) = -sqrt(1 - x^2), as SciPy's lpmv.
  EXPECT_NEAR(at("lpmv_1", {1.0, 0.6}), -0.8, 1e-15);
  EXPECT_NEAR(at("lpmv_2", {2.0, 0.6}), 3 * (1 - 0.36), 1e-14);
  // Re Y_1^1(theta, phi) = -sqrt(3 / (8 pi)) sin(phi) cos(theta): theta azimuthal, phi polar.
  EXPECT_NEAR(at("sph_harm_11", {0.3, 1.1}),
              -std::sqrt(3 / (8 * M_PI)) * std::sin(1.1) * std::cos(0.3), 1e-15);
  // III.9.52's removable singularity at b = c takes its limit a.
  EXPECT_DOUBLE_EQ(at("feynman_III.9.52", {0.5, 1.0, 1.0}), 0.5);
}

TEST(FunctionCatalogue, KeepsTheInputsDtypeAndChecksTheirShape) {
  const auto& jv = kan::reference_function("jv");
  const auto x = torch::tensor({{0.0f, 1.0f}, {1.0f, 2.0f}});
  const auto y = jv.f(x);
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_NEAR(y[0][0].item<float>(), std::cyl_bessel_j(0.0, 1.0), 1e-7);
  KAN_EXPECT_ERROR(jv.f(torch::zeros({3, 3}, torch::kFloat64)), "'jv' takes (N, 2) inputs",
                   "[3, 3]");
  KAN_EXPECT_ERROR(kan::reference_function("feynman_I.9.18").f(torch::zeros({3, 2})),
                   "'feynman_I.9.18' takes (N, 6) inputs");
  // create_dataset draws from the entry's own ranges.
  const auto& kv = kan::reference_function("kv");
  const auto data = kan::create_dataset(
      kv.f, kan::DatasetOptions(kv.n_var).ranges(kv.ranges).train_num(200).test_num(10));
  EXPECT_GE(data.train_input.select(1, 1).min().item<float>(), 1.0f);
  EXPECT_TRUE(torch::isfinite(data.train_label).all().item<bool>());
}

} // namespace
