// `kanbench fit --symbolic`: pykan's hellokan sequence, a multiplication node and a Feynman
// equation end in their exact formulas; fit.json records them; bad options are one line.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/data/dataset.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/serialize/checkpoint.h"
#include "kan/symbolic/symbolic_edges.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace {

namespace fs = std::filesystem;

using Cli = kan::test::ScratchDirTest;

kan::test::CliRun kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
}

// The test RMSE of the saved symbolic model on the fit's own test set (test_num 1000, seed 0),
// and how far its formula (every constant unrounded) is from its outputs there.
struct SymbolicModelCheck {
  double test_rmse;
  double formula_vs_model;
};

SymbolicModelCheck check_symbolic_model(const fs::path& dir, const std::string& function) {
  auto model = kan::load_checkpoint((dir / "model.pt").string());
  const auto& f = kan::reference_function(function);
  const auto data = kan::create_dataset(
      f.f, kan::DatasetOptions(f.n_var).ranges(f.ranges).dtype(torch::kFloat64));
  torch::NoGradGuard no_grad;
  const auto y = model->forward(data.test_input);
  const double rmse = (y - data.test_label).square().mean().sqrt().item<double>();
  const auto formula = symbolic_formula(*model).front().evaluate(data.test_input);
  return {rmse, kan::test::max_relative_diff(formula, y.select(1, 0))};
}

// pykan's hellokan: toy function, [2, 5, 1], G 3, k 3; 50 LBFGS steps with lamb 0.001, prune,
// 50 steps, refine(10), 50 steps, auto_symbolic with hellokan's library, 50 steps.
TEST_F(Cli, HelloKanEndsInItsFormula) {
  const auto run = kanbench("fit --function toy --width 2,5,1 --grid 3 --k 3 --steps 50 "
                            "--lamb 0.001 --prune 0.01,0.03 --refine 10 --symbolic "
                            "--lib x,x^2,x^3,x^4,exp,log,sqrt,tanh,sin,abs --seed 1 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Rounded to 4 decimals, every constant is the exact one (pi to 3.1416, the others 1 and 0).
  EXPECT_NE(run.output.find("formula: exp(sin(3.1416*x1) + x2**2)\n"), std::string::npos)
      << run.output;
  const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
  ASSERT_TRUE(fit.symbolic.has_value());
  const auto& symbolic = *fit.symbolic;
  ASSERT_TRUE(symbolic.formula.has_value()) << symbolic.formula_error;
  EXPECT_EQ(symbolic.formula->front().sympy, "exp(sin(3.1416*x1) + x2**2)");
  EXPECT_EQ(symbolic.formula->front().latex, "e^{\\sin{\\left(3.1416 x_{1}\\right)} + x_{2}^{2}}");
  EXPECT_LE(symbolic.retrained.test_rmse, 1e-5);
  EXPECT_EQ(kan::diagnostics::read_fit_setup(fit.config).symbolic->lib.size(), 10u);
  EXPECT_EQ(symbolic.retrained.history.steps.size(), 50u);
  std::multiset<std::string> functions;
  for (const auto& edge : symbolic.edges) {
    EXPECT_TRUE(edge.fixed);
    if (edge.function != "0") {
      functions.insert(edge.function);
      ASSERT_TRUE(edge.curve.has_value());
      EXPECT_EQ(edge.curve->x.size(), 48u);
      EXPECT_TRUE(std::is_sorted(edge.curve->x.begin(), edge.curve->x.end()));
      EXPECT_GT(edge.r2, 0.999);
    }
  }
  EXPECT_EQ(functions, (std::multiset<std::string>{"sin", "x^2", "exp"}));
  // The saved model is the symbolic one; its unrounded formula reproduces it.
  const auto check = check_symbolic_model(dir_, "toy");
  EXPECT_LE(check.test_rmse, 1e-5);
  EXPECT_LT(check.formula_vs_model, 1e-12);

  // The HTML report shows the formula and one chart per fitted edge.
  const auto report =
      kanbench("report " + (dir_ / "fit.json").string() + " -o " + (dir_ / "fit.html").string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  std::ifstream in(dir_ / "fit.html");
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("exp(sin(3.1416*x1) + x2**2)"), std::string::npos);
}

// The hellokan sequence on the GPU: the formula comes out there too, from a model that never
// left the device (the saved model and its formula are checked on the CPU).
TEST_F(Cli, HelloKanOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto run = kanbench("fit --device cuda --function toy --width 2,5,1 --grid 3 --k 3 "
                            "--steps 50 --lamb 0.001 --prune 0.01,0.03 --refine 10 --symbolic "
                            "--lib x,x^2,x^3,x^4,exp,log,sqrt,tanh,sin,abs --seed 1 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("formula: "), std::string::npos) << run.output;
  const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
  EXPECT_EQ(fit.config.device, "cuda");
  const auto audit = kan::diagnostics::audited_fit_from_json(fit.device_audit);
  EXPECT_TRUE(audit.clean()) << audit.audit.to_text() << audit.trace.to_text();
  ASSERT_TRUE(fit.symbolic.has_value());
  ASSERT_TRUE(fit.symbolic->formula.has_value()) << fit.symbolic->formula_error;
  EXPECT_LE(fit.symbolic->retrained.test_rmse, 1e-4);
  const auto check = check_symbolic_model(dir_, "toy");
  EXPECT_LT(check.formula_vs_model, 1e-10);
}

// f = x1 * x2 through one multiplication node (pykan's width [2, [0, 1], 1]).
TEST_F(Cli, MultiplicationNodeEndsInTheProduct) {
  const auto run = kanbench("fit --function xy --width '2,[0,1],1' --steps 50 --symbolic "
                            "--lib x,x^2,sin,exp --seed 1 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The product, with a factor of 1 to three of the formula's four digits: the fourth follows
  // rounding in training, which moves with what else the process allocates (one extra
  // allocation in the grid update turned 1.0004 into 0.9999; 1.0001 and none seen too), as the
  // model's own RMSE, 1e-4, allows.
  std::smatch product;
  ASSERT_TRUE(
      std::regex_search(run.output, product, std::regex("formula: (([0-9.]+)\\*)?x2\\*x1\n")))
      << run.output;
  if (product[2].matched) {
    EXPECT_NEAR(std::stod(product[2].str()), 1.0, 1e-3) << run.output;
  }
  const auto check = check_symbolic_model(dir_, "xy");
  EXPECT_LE(check.test_rmse, 1e-5);
  EXPECT_LT(check.formula_vs_model, 1e-12);
}

// The KAN paper's Feynman equation I.6.20a, exp(-theta^2 / 2) / sqrt(2 pi) on [-3, 3], with
// the whole library: the gaussian, with 1 / sqrt(2 pi) = 0.39894 and 1 / sqrt(2) = 0.70711.
TEST_F(Cli, FeynmanEquationEndsInItsFormula) {
  const auto run = kanbench("fit --function feynman_I.6.20a --width 1,1 --grid 5 --refine 20 "
                            "--steps 50 --symbolic --seed 1 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("formula: 0.3989*exp(-(0.7071*x1)**2)\n"), std::string::npos)
      << run.output;
  const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
  const auto& params = fit.symbolic->edges.front().params; // a, b, c, d
  EXPECT_NEAR(std::abs(params[0]), 1 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(params[2], 1 / std::sqrt(2 * M_PI), 1e-6);
  EXPECT_LE(check_symbolic_model(dir_, "feynman_I.6.20a").test_rmse, 1e-5);
}

// An edge whose best R^2 is below --r2-threshold stays numeric: no formula, and why.
TEST_F(Cli, NumericEdgesLeaveNoFormula) {
  const auto run = kanbench("fit --function toy --steps 3 --symbolic --lib x --r2-threshold 0.999 "
                            "--steps-after-symbolic 1 --train-num 100 --test-num 50 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("no formula: symbolic_formula: edge ("), std::string::npos)
      << run.output;
  const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
  EXPECT_FALSE(fit.symbolic->formula.has_value());
  EXPECT_NE(fit.symbolic->formula_error.find("has a numeric part"), std::string::npos);
  EXPECT_EQ(fit.symbolic->retrained.history.steps.size(), 1u);
}

// The faster searches on the command line: recorded in fit.json, and every edge's fit as good as
// pykan's search finds on the same trained model (the training is the same in every run; how good
// the toy's edges are after 20 steps on 200 samples depends on the machine's rounding: some have
// an R^2 below 0.5 on one CPU and not on another).
TEST_F(Cli, SymbolicSearchesAreChosenAndRecorded) {
  std::vector<double> pykan_r2;
  for (const std::string search : {"pykan", "zoom", "newton"}) {
    const auto run = kanbench("fit --function toy --steps 20 --symbolic --lib x,x^2,sin,exp "
                              "--symbolic-search " +
                              search +
                              " --steps-after-symbolic 2 --train-num 200 --test-num 50 "
                              "--out " +
                              dir_.string());
    ASSERT_EQ(run.exit_code, 0) << search << ": " << run.output;
    const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
    EXPECT_EQ(kan::diagnostics::read_fit_setup(fit.config).symbolic->search, search);
    ASSERT_FALSE(fit.symbolic->edges.empty());
    const auto& edges = fit.symbolic->edges;
    if (search == "pykan") {
      for (const auto& edge : edges)
        pykan_r2.push_back(edge.r2);
      fs::remove_all(dir_);
      continue;
    }
    ASSERT_EQ(edges.size(), pykan_r2.size()) << search;
    int64_t good = 0;
    for (size_t e = 0; e < edges.size(); ++e) {
      EXPECT_GE(edges[e].r2, pykan_r2[e] - 0.01)
          << search << ": edge " << edges[e].layer << "," << edges[e].i << "," << edges[e].j << " "
          << edges[e].function;
      good += edges[e].r2 >= 0.9 ? 1 : 0;
    }
    EXPECT_GE(good, static_cast<int64_t>(edges.size()) / 2) << search << ": most edges fit";
    // The reader knows the searches.
    auto j = kan::results::to_json(fit);
    j["config"]["symbolic"]["search"] = "fast";
    try {
      kan::diagnostics::strict_fit_record_from_json(j);
      ADD_FAILURE() << "search \"fast\" was read";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("config.symbolic.search"), std::string::npos)
          << e.what();
    }
    fs::remove_all(dir_);
  }
}

TEST_F(Cli, BadSymbolicOptionsFailWithOneLine) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--symbolic --lib x,sine", "--lib x,sine: unknown symbolic function 'sine'"},
      {"--symbolic --lib ''", "--lib: the library is empty"},
      {"--lib x", "--lib requires --symbolic"},
      {"--r2-threshold 0.9", "--r2-threshold requires --symbolic"},
      {"--symbolic --weight-simple 2", "--weight-simple"},
      {"--symbolic --steps-after-symbolic -1", "--steps-after-symbolic"},
      {"--symbolic --symbolic-search fast", "--symbolic-search: fast not in {pykan,zoom,newton}"},
      {"--symbolic-search newton", "--symbolic-search requires --symbolic"},
  };
  for (const auto& [args, expected] : bad) {
    const auto refused =
        kanbench("fit " + args + " --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
    EXPECT_NE(refused.exit_code, 0) << args << ": " << refused.output;
    EXPECT_NE(refused.output.find(expected), std::string::npos) << args << ": " << refused.output;
    EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1)
        << args << ": " << refused.output;
    EXPECT_FALSE(fs::exists(dir_ / "fit.json")) << args;
  }
}

} // namespace
