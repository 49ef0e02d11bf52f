// kan::LBFGS: pykan's LBFGS step for step (tests/reference/pykan/lbfgs_rosenbrock.json), its
// options and state, and the reference training it exists for.
#include "kan/optim/lbfgs.h"

#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/operation_trace.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>

namespace kan {
namespace {

using torch::optim::LBFGSParamState;

// The objectives of the fixture, built from the same operations in the same order as
// tools/pykan-reference/generate.py's, one statement each, so that autograd accumulates the
// gradient in pykan's order and every number rounds as there.
torch::Tensor rosenbrock(const torch::Tensor& x) {
  const auto head = x.slice(0, 0, -1);
  const auto tail = x.slice(0, 1);
  const auto valley = (tail - head.pow(2)).pow(2).mul(100);
  const auto slope = torch::rsub(head, 1).pow(2);
  return (valley + slope).sum();
}

struct Quadratic {
  torch::Tensor A, rhs;
  torch::Tensor operator()(const torch::Tensor& x) const {
    const auto curvature = x.dot(torch::matmul(A, x)).mul(0.5);
    const auto linear = rhs.dot(x);
    return curvature - linear;
  }
};

LBFGSOptions options_from(const nlohmann::json& j) {
  LBFGSOptions o;
  if (j.contains("lr"))
    o.lr(j["lr"].get<double>());
  if (j.contains("max_iter"))
    o.max_iter(j["max_iter"].get<int64_t>());
  if (j.contains("max_eval"))
    o.max_eval(j["max_eval"].get<int64_t>());
  if (j.contains("history_size"))
    o.history_size(j["history_size"].get<int64_t>());
  if (j.contains("line_search_fn"))
    o.line_search_fn(j["line_search_fn"].get<std::string>());
  if (j.contains("tolerance_grad"))
    o.tolerance_grad(j["tolerance_grad"].get<double>());
  if (j.contains("tolerance_change"))
    o.tolerance_change(j["tolerance_change"].get<double>());
  if (j.contains("tolerance_ys"))
    o.tolerance_ys(j["tolerance_ys"].get<double>());
  return o;
}

// The fixture's parameters: a (2, 3), b (4,) and c (2,), which the objective leaves out.
struct Problem {
  torch::Tensor a, b, c;
  explicit Problem(const nlohmann::json& initial, torch::Device device = torch::kCPU)
      : a(test::to_tensor(initial["a"]).to(device).requires_grad_()),
        b(test::to_tensor(initial["b"]).to(device).requires_grad_()),
        c(test::to_tensor(initial["c"]).to(device).requires_grad_()) {}
  std::vector<torch::Tensor> params() const { return {a, b, c}; }
  torch::Tensor x() const { return torch::cat({a.reshape(-1), b}); }
};

LBFGSParamState& state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& first) {
  return dynamic_cast<LBFGSParamState&>(*optimizer.state().at(first.unsafeGetTensorImpl()));
}

// Largest |got - want| / |want| (|got| where want is 0) seen, and whether all are within `tol`.
struct Relative {
  explicit Relative(double tolerance) : tol(tolerance) {}
  double tol;
  double largest = 0;
  std::string where;
  bool check(double got, double want, const std::string& what) {
    const double d = got == want ? 0.0 : std::abs(got - want) / (want == 0 ? 1.0 : std::abs(want));
    if (!(d <= largest)) {
      largest = d;
      where = what;
    }
    return d <= tol;
  }
  bool check(const torch::Tensor& got, const nlohmann::json& want, const std::string& what) {
    const auto g = got.detach().cpu().reshape(-1);
    const auto w = test::to_tensor(want).reshape(-1);
    if (g.numel() != w.numel())
      return false;
    bool ok = true;
    for (int64_t i = 0; i < g.numel(); ++i)
      ok &= check(g[i].item<double>(), w[i].item<double>(), what + "[" + std::to_string(i) + "]");
    return ok;
  }
};

// Runs one of the fixture's runs and compares every step with pykan's; returns the largest
// relative difference.
double replay(const std::string& name, const nlohmann::json& fixture, torch::Device device,
              double tol, size_t max_steps = SIZE_MAX) {
  const auto& run = fixture["runs"][name];
  Problem p(run["initial"], device);
  const Quadratic quadratic{test::to_tensor(fixture["quadratic"]["A"]).to(device),
                            test::to_tensor(fixture["quadratic"]["rhs"]).to(device)};
  const bool is_rosenbrock = name.rfind("rosenbrock", 0) == 0;
  LBFGS optimizer(p.params(), options_from(run["options"]));
  auto closure = [&] {
    optimizer.zero_grad();
    auto loss = is_rosenbrock ? rosenbrock(p.x()) : quadratic(p.x());
    loss.backward();
    return loss;
  };
  Relative rel(tol), ro_rel(std::max(tol, 1e-10));
  const auto& steps = run["steps"];
  for (size_t i = 0; i < std::min(steps.size(), max_steps); ++i) {
    const auto& want = steps[i];
    const std::string at = name + " step " + std::to_string(i + 1) + ": ";
    const double loss = optimizer.step(closure).item<double>();
    auto& state = state_of(optimizer, p.a);
    // The integers say whether every decision (line search, breaks, history) was pykan's.
    EXPECT_EQ(state.func_evals(), want["func_evals"].get<int64_t>()) << at;
    EXPECT_EQ(state.n_iter(), want["n_iter"].get<int64_t>()) << at;
    EXPECT_EQ(state.ro().size(), want["ro"].size()) << at;
    EXPECT_TRUE(rel.check(loss, want["loss"].get<double>(), at + "loss")) << at;
    EXPECT_TRUE(rel.check(p.a, want["a"], at + "a")) << at;
    EXPECT_TRUE(rel.check(p.b, want["b"], at + "b")) << at;
    EXPECT_TRUE(rel.check(p.c, want["c"], at + "c")) << at;
    EXPECT_TRUE(rel.check(state.t(), want["t"].get<double>(), at + "t")) << at;
    EXPECT_TRUE(rel.check(state.prev_loss(), want["prev_loss"].get<double>(), at + "prev_loss"))
        << at;
    EXPECT_TRUE(
        rel.check(state.H_diag().item<double>(), want["H_diag"].get<double>(), at + "H_diag"))
        << at;
    // ro = 1 / (y . s): y is a difference of gradients and s of parameters, so near the minimum
    // their dot product cancels and carries the rounding of the BLAS that computed it (4.6e-12
    // on an AVX-512 Xeon against pykan's run), which the parameters above do not inherit.
    for (size_t k = 0; k < std::min(state.ro().size(), want["ro"].size()); ++k) {
      EXPECT_TRUE(ro_rel.check(state.ro()[k].item<double>(), want["ro"][k].get<double>(),
                               at + "ro[" + std::to_string(k) + "]"))
          << at;
    }
  }
  EXPECT_LE(rel.largest, tol) << "largest relative difference at " << rel.where;
  std::cout << name << " on " << device << ": largest relative difference from pykan "
            << rel.largest << (rel.where.empty() ? "" : " (" + rel.where + ")") << ", of ro "
            << ro_rel.largest << (ro_rel.where.empty() ? "" : " (" + ro_rel.where + ")") << "\n";
  return rel.largest;
}

TEST(LBFGS, MatchesPykansLbfgsStepForStep) {
  const auto fixture = test::load_reference("lbfgs_rosenbrock.json");
  for (const auto& [name, run] : fixture["runs"].items()) {
    SCOPED_TRACE(name);
    replay(name, fixture, torch::kCPU, 1e-12);
  }
  // The fixture reaches what this optimiser exists for: pairs with y·s below LibTorch's 1e-10,
  // which pykan keeps and LibTorch's LBFGS drops.
  int64_t tiny = 0;
  for (const auto& step : fixture["runs"]["rosenbrock_fit_settings"]["steps"])
    for (const auto& ro : step["ro"])
      tiny += 1.0 / ro.get<double>() <= 1e-10 ? 1 : 0;
  EXPECT_GT(tiny, 0);
}

TEST(LBFGS, MatchesPykanOnTheGpu_CUDA) {
  KAN_REQUIRE_CUDA();
  // The same algorithm with the GPU's reductions, which round otherwise: the first step of each
  // run (later ones amplify rounding, and near convergence a tolerance test may then flip).
  const auto fixture = test::load_reference("lbfgs_rosenbrock.json");
  for (const auto& [name, run] : fixture["runs"].items()) {
    SCOPED_TRACE(name);
    replay(name, fixture, torch::kCUDA, 1e-8, /*max_steps=*/1);
  }
}

TEST(LBFGS, OptionsHavePykansDefaults) {
  const LBFGSOptions o;
  EXPECT_EQ(o.lr(), 1.0);
  EXPECT_EQ(o.max_iter(), 20);
  EXPECT_FALSE(o.max_eval().has_value());
  EXPECT_EQ(o.tolerance_grad(), 1e-7);
  EXPECT_EQ(o.tolerance_change(), 1e-9);
  EXPECT_EQ(o.tolerance_ys(), 1e-32);
  EXPECT_EQ(o.history_size(), 100);
  EXPECT_FALSE(o.line_search_fn().has_value());
  // max_eval defaults to max_iter * 5 / 4, as pykan's max_iter * 5 // 4.
  LBFGS lbfgs({torch::zeros({3}, torch::requires_grad())}, LBFGSOptions().max_iter(7));
  const auto& group = static_cast<const LBFGSOptions&>(lbfgs.param_groups()[0].options());
  EXPECT_EQ(group.max_eval(), 8);
  lbfgs.param_groups()[0].options().set_lr(0.5); // what a scheduler calls
  EXPECT_EQ(group.lr(), 0.5);
}

TEST(LBFGS, RefusesBadOptions) {
  const std::vector<torch::Tensor> params{torch::zeros({3}, torch::requires_grad())};
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions(-1)), "lr must be a positive finite number",
                   "got -1");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().max_iter(0)), "max_iter must be >= 1, got 0");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().max_eval(0)), "max_eval must be >= 1", "got 0");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().tolerance_ys(std::nan(""))), "tolerance_ys",
                   "got nan");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().tolerance_grad(-1)), "tolerance_grad", "got -1");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().history_size(0)),
                   "history_size must be >= 1, got 0");
  KAN_EXPECT_ERROR(LBFGS(params, LBFGSOptions().line_search_fn("backtracking")),
                   "line_search_fn must be \"strong_wolfe\" or unset, got \"backtracking\"");
  KAN_EXPECT_ERROR(LBFGS(std::vector<torch::Tensor>{}), "at least one parameter");
  LBFGS lbfgs(params);
  KAN_EXPECT_ERROR(lbfgs.step(nullptr), "needs a closure");
}

// Two steps, saved and loaded into a new optimiser on copies of the parameters: the next step
// is the same on both, bit for bit.
TEST(LBFGS, StateIsLibTorchsAndSurvivesSaveAndLoad) {
  const auto fixture = test::load_reference("lbfgs_rosenbrock.json");
  const auto& run = fixture["runs"]["rosenbrock_fit_settings"];
  Problem p(run["initial"]);
  LBFGS lbfgs(p.params(), options_from(run["options"]));
  auto closure_for = [](torch::optim::Optimizer& optimizer, const Problem& problem) {
    return [&optimizer, &problem] {
      optimizer.zero_grad();
      auto loss = rosenbrock(problem.x());
      loss.backward();
      return loss;
    };
  };
  lbfgs.step(closure_for(lbfgs, p));
  lbfgs.step(closure_for(lbfgs, p));
  ASSERT_EQ(lbfgs.state().size(), 1u); // one state, under the first parameter
  EXPECT_EQ(state_of(lbfgs, p.a).old_dirs().size(), 10u);

  std::stringstream buffer;
  torch::serialize::OutputArchive out;
  lbfgs.save(out);
  out.save_to(buffer);

  Problem copy(run["initial"]);
  {
    torch::NoGradGuard no_grad;
    copy.a.copy_(p.a);
    copy.b.copy_(p.b);
    copy.c.copy_(p.c);
  }
  LBFGS loaded(copy.params(), LBFGSOptions().max_iter(3)); // the saved options replace these
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  loaded.load(in);
  const auto& options = static_cast<const LBFGSOptions&>(loaded.param_groups()[0].options());
  EXPECT_EQ(options.max_iter(), 20);
  EXPECT_EQ(options.tolerance_ys(), 1e-32);
  EXPECT_EQ(options.line_search_fn(), "strong_wolfe");
  EXPECT_EQ(state_of(loaded, copy.a).n_iter(), state_of(lbfgs, p.a).n_iter());

  lbfgs.step(closure_for(lbfgs, p));
  loaded.step(closure_for(loaded, copy));
  EXPECT_TRUE(torch::equal(p.a, copy.a));
  EXPECT_TRUE(torch::equal(p.b, copy.b));
  EXPECT_EQ(state_of(loaded, copy.a).func_evals(), state_of(lbfgs, p.a).func_evals());
}

TEST(LBFGS, SmallCpuProblemsDoTheVectorArithmeticOnTheHost) {
  // The two-loop recursion's dot products and updates, the line search's directional derivatives,
  // the stopping tests' maxima and the parameters' updates run as host loops with ATen's arithmetic
  // (lbfgs.cpp): the step-for-step match with pykan above holds through them; here, that they do
  // run. Without them a step of the fixture's 20 iterations with a history of 10 makes hundreds of
  // dots.
  const auto fixture = test::load_reference("lbfgs_rosenbrock.json");
  const auto& run = fixture["runs"]["rosenbrock_fit_settings"];
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    Problem p(run["initial"]);
    for (auto* t : {&p.a, &p.b, &p.c})
      *t = t->detach().to(dtype).requires_grad_();
    LBFGS lbfgs(p.params(), options_from(run["options"]));
    auto closure = [&] {
      lbfgs.zero_grad();
      auto loss = rosenbrock(p.x());
      loss.backward();
      return loss;
    };
    lbfgs.step(closure);
    const int64_t before = state_of(lbfgs, p.a).n_iter();
    const auto report = diagnostics::trace_operations(torch::kCPU, [&] { lbfgs.step(closure); });
    int64_t dots = 0, maxima = 0;
    for (const auto& op : report.operations) {
      dots += op.operation == "aten::dot" ? op.calls : 0;
      maxima += op.operation == "aten::max" ? op.calls : 0;
    }
    EXPECT_EQ(maxima, 0) << dtype << ": the tests on the largest |g| and |t d|";
    const int64_t iterations = state_of(lbfgs, p.a).n_iter() - before;
    EXPECT_GT(iterations, 5) << dtype;
    EXPECT_LE(dots, 2 * iterations) << dtype << ": y.dot(s) and y.dot(y) per iteration, no more";
  }
}

TEST(LBFGS, LongVectorsKeepTheTwoLoopsCoefficientsOnTheDevice) {
  // 70,000 parameters, past the host loops' 65536: the path a GPU's vectors take, where the two
  // loops' coefficients stay 0-dim tensors instead of being read back once per history entry. A
  // diagonal quadratic with curvatures from 1 to e^6, whose minimum is known.
  const int64_t n = 70000;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto target = torch::linspace(-1, 1, n, f64);
  const auto curvature = torch::linspace(0, 6, n, f64).exp();
  auto x = torch::zeros({n}, f64).requires_grad_();
  LBFGS lbfgs({x}, LBFGSOptions(1).max_iter(15).history_size(10).line_search_fn("strong_wolfe"));
  const auto objective = [&] { return (curvature * (x - target).square()).sum(); };
  auto closure = [&] {
    lbfgs.zero_grad();
    auto loss = objective();
    loss.backward();
    return loss;
  };
  const double initial = objective().item<double>();
  lbfgs.step(closure); // fills the history
  ASSERT_EQ(state_of(lbfgs, x).old_dirs().size(), 10u);
  const int64_t before = state_of(lbfgs, x).n_iter();
  const auto report = diagnostics::trace_operations(torch::kCPU, [&] { lbfgs.step(closure); });
  const int64_t iterations = state_of(lbfgs, x).n_iter() - before;
  int64_t reads = 0, dots = 0;
  for (const auto& op : report.operations) {
    reads += op.operation == "aten::item" ? op.calls : 0;
    dots += op.operation == "aten::dot" ? op.calls : 0;
  }
  ASSERT_GT(iterations, 0);
  // Each iteration's two loops make 2 dots per history entry; the reads per iteration are the
  // line search's and the stopping tests' few (6 here), not 2 more per entry (26 with the
  // coefficients read back to the host).
  EXPECT_GE(dots, 2 * 10 * iterations);
  EXPECT_LT(reads, 10 * iterations) << reads << " reads in " << iterations << " iterations";
  EXPECT_LT(objective().item<double>(), 1e-3 * initial);
}

// What the device audit reads of it: the direction, H_diag, the previous gradient and the
// history, all on the parameters' device.
TEST(LBFGS, StateIsVisibleToTheDeviceAudit) {
  KAN model(KANOptions({2, 3, 1}).dtype(torch::kFloat64));
  auto data = test::toy_data(torch::kFloat64);
  LBFGS lbfgs(model->parameters(), LBFGSOptions().max_iter(4).history_size(10));
  lbfgs.step([&] {
    lbfgs.zero_grad();
    auto loss = compute_loss(Loss::kMSE, model(data.train_input), data.train_label);
    loss.backward();
    return loss;
  });
  const auto& state = dynamic_cast<const LBFGSParamState&>(*lbfgs.state().begin()->second);
  const auto pairs = static_cast<int64_t>(state.old_dirs().size());
  ASSERT_GE(pairs, 1);
  const auto report = diagnostics::DeviceAudit(torch::kCPU).optimizer(lbfgs, *model).report();
  EXPECT_TRUE(report.clean()) << report.to_text();
  // d, H_diag, prev_flat_grad, and per pair old_dirs, old_stps and ro (the two-loop's
  // coefficients, pykan's al, are host numbers here).
  EXPECT_EQ(report.summary.tensors_checked, 3 + 3 * pairs);
  EXPECT_EQ(state.H_diag().device(), model->device());
  EXPECT_EQ(state.H_diag().scalar_type(), torch::kFloat64);
}

// pykan 0.2.8's reference training (docs/kan.md, "Reference results"): toy function, KAN
// [2,5,1], G 3, k 3, float64, 1000 + 1000 samples, 50 LBFGS steps, refine(10), 50 more, for
// seeds 0, 1, 2, 3 and 42. One run is chaotic in rounding: the thread count alone moves a refined
// test RMSE by a third (pykan's seed 7: 9.7e-4 on one thread, 6.6e-4 on two), in pykan as here. So
// the seeds are held to pykan's distribution: a geometric mean of at most 6e-4 (pykan over ten
// seeds: 4.3e-4, from 2.2e-4 to 9.7e-4) and every run below 2e-3, under the coarse model's 3e-3.
void expect_pykans_refined_accuracy(SplineBackend backend) {
  double log_sum = 0;
  const std::vector<uint64_t> seeds{0, 1, 2, 3, 42};
  for (const uint64_t seed : seeds) {
    const auto data = create_dataset(
        reference_function("toy").f,
        DatasetOptions(2).train_num(1000).test_num(1000).seed(seed).dtype(torch::kFloat64));
    KAN model(
        KANOptions({2, 5, 1}).grid(3).k(3).seed(seed).dtype(torch::kFloat64).backend(backend));
    fit(model, data, FitOptions().steps(50));
    const double coarse = evaluate(model, data).test_rmse;
    model = model->refine(10, data.train_input);
    fit(model, data, FitOptions().steps(50));
    const double refined = evaluate(model, data).test_rmse;
    std::cout << to_string(backend) << " seed " << seed << ": test RMSE " << coarse << " (G=3), "
              << refined << " (G=10)\n";
    EXPECT_LE(coarse, 1e-2) << "seed " << seed;
    EXPECT_LE(refined, 2e-3) << "seed " << seed;
    log_sum += std::log(refined);
  }
  const double geometric_mean = std::exp(log_sum / static_cast<double>(seeds.size()));
  std::cout << to_string(backend) << ": geometric mean of the refined test RMSEs " << geometric_mean
            << "\n";
  EXPECT_LE(geometric_mean, 6e-4);
}

TEST(LBFGS, ReferenceTrainingReachesPykansAccuracyFused) {
  expect_pykans_refined_accuracy(SplineBackend::kFused);
}

TEST(LBFGS, ReferenceTrainingReachesPykansAccuracyReferenceBackend) {
  expect_pykans_refined_accuracy(SplineBackend::kReference);
}

} // namespace
} // namespace kan
