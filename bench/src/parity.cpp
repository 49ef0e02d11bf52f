// The parity of a workload on two targets: the tolerances per precision and optimiser, and the
// comparison of the two models at initialisation and after training.
#include "kan/bench/suite.h"

#include "detail/precision_scope.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kan::bench {

ParityTolerances parity_tolerances(Precision less_precise, Optimizer opt) {
  const bool lbfgs = opt == Optimizer::kLBFGS;
  switch (less_precise) {
  case Precision::kFloat64:
    return parity_tolerances(torch::kFloat64, opt);
  case Precision::kFloat32:
    return parity_tolerances(torch::kFloat32, opt);
  // Beyond the rounding floor (compare_targets): the excess of a loss-curve or metric difference
  // over what the precision's own rounding of the outputs explains.
  case Precision::kTF32: // 10 mantissa bits in the matmuls; the spline kernels stay float32
    return {5e-3, 5e-3, lbfgs ? 0.25 : 0.1, 0.1, 0.5};
  case Precision::kFP16: // 10 mantissa bits in autocast's operations
    return {5e-3, 1e-2, lbfgs ? 0.25 : 0.1, 0.1, 1.0};
  case Precision::kBF16: // 7 mantissa bits in autocast's operations (measured: 7e-3, 5e-3)
    return {2e-2, 2e-2, lbfgs ? 0.25 : 0.1, 0.1, 1.0};
  }
  TORCH_INTERNAL_ASSERT(false, "unknown precision");
}

ParityTolerances parity_tolerances(torch::Dtype less_precise, Optimizer opt) {
  if (less_precise == torch::kFloat64)
    return {1e-10, 1e-8, 1e-6, 1e-4, 0.5};
  // float32 against anything: rounding at initialisation, then training amplifies it. LBFGS's
  // line searches amplify it most: on the toy case float32 and float64 on one CPU already differ
  // by 0.07 in the loss curve (1e-6 for the Adam cases), so its curve gets a wider limit, and so
  // does the final metric, the curve's end (the toy MLP's test RMSE: 0.111 apart, its curve 0.17).
  const double trained = opt == Optimizer::kLBFGS ? 0.25 : 0.1;
  return {1e-4, 1e-3, trained, trained, 0.5};
}

namespace {

using detail::PrecisionScope;

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.detach().to(torch::kCPU, torch::kFloat64);
  const auto b64 = b.detach().to(torch::kCPU, torch::kFloat64);
  const double scale = std::max(a64.abs().max().item<double>(), 1e-30);
  return (a64 - b64).abs().max().item<double>() / scale;
}

double max_absolute_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().to(torch::kCPU, torch::kFloat64) - b.detach().to(torch::kCPU, torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

// A comparison's parity checks: each records its tolerance and, where the difference is above
// it, a failure.
struct ParityChecks {
  results::Comparison& c;
  std::vector<std::string> failures;

  void check(const char* key, std::optional<double> value, double limit, const char* note = "") {
    c.tolerances[key] = limit;
    if (value && !(*value <= limit)) {
      std::ostringstream m;
      m << key << " " << *value << note << " > " << limit;
      failures.push_back(m.str());
    }
  }
};

// Initialisation: same seed, so the models must agree up to rounding, outputs and gradients.
void compare_initialisation(results::Comparison& c, const Workload& w, const Target& a,
                            const Target& b) {
  const auto data = w.dataset(torch::kCPU, torch::kFloat64);
  const auto x = data.train_input.narrow(0, 0, std::min<int64_t>(256, data.train_input.size(0)));
  const auto y = data.train_label.narrow(0, 0, x.size(0));
  const auto ma = w.build_model(a.device, a.dtype), mb = w.build_model(b.device, b.dtype);
  auto loss_of = [&](Model& m, const Target& t) {
    torch::Tensor out, loss;
    {
      PrecisionScope precision(t, /*autocast=*/true);
      out = m.forward(x.to(t.device, t.dtype));
      const auto labels = w.loss == Loss::kMSE ? y.to(t.device, t.dtype) : y.to(t.device);
      loss = compute_loss(w.loss, out, labels);
    }
    PrecisionScope tf32(t, /*autocast=*/false);
    loss.backward();
    return out;
  };
  const auto out_a = loss_of(*ma, a), out_b = loss_of(*mb, b);
  c.max_abs_output_diff = max_absolute_difference(out_a, out_b);
  c.max_rel_output_diff = max_relative_difference(out_a, out_b);
  double grad_abs = 0, grad_rel = 0;
  const auto pa = ma->module().named_parameters(), pb = mb->module().named_parameters();
  for (const auto& item : pa) {
    const auto& ga = item.value().grad();
    const auto& gb = pb[item.key()].grad();
    if (!ga.defined() || !gb.defined())
      continue;
    grad_abs = std::max(grad_abs, max_absolute_difference(ga, gb));
    grad_rel = std::max(grad_rel, max_relative_difference(ga, gb));
  }
  c.max_abs_grad_diff = grad_abs;
  c.max_rel_grad_diff = grad_rel;
}

// The per-epoch training losses, over the workload's own epochs, as the final metric:
// stop-on-noise's further epochs time the training but do not widen the comparison (each one
// amplifies rounding, and the tolerances are for the workload's epochs). Only the excess over the
// rounding floor counts: for an MSE, 2d sqrt(mse) + d^2 where floor = 2d.
void compare_loss_curves(ParityChecks& checks, const Workload& w, const results::CaseResult& ra,
                         const results::CaseResult& rb, double tolerance, double floor,
                         bool reduced) {
  const size_t common = std::min({ra.train_loss_per_epoch.size(), rb.train_loss_per_epoch.size(),
                                  static_cast<size_t>(w.warmup_epochs + w.epochs)});
  if (common == 0)
    return;
  double worst = 0, worst_beyond_floor = 0;
  for (size_t i = 0; i < common; ++i) {
    const double la = ra.train_loss_per_epoch[i], lb = rb.train_loss_per_epoch[i];
    const double scale = std::max(std::abs(la), 1e-30);
    const double mse_floor = floor * std::sqrt(std::abs(la)) + floor * floor / 4;
    worst = std::max(worst, std::abs(la - lb) / scale);
    worst_beyond_floor =
        std::max(worst_beyond_floor, std::max(0.0, std::abs(la - lb) - mse_floor) / scale);
  }
  checks.c.max_rel_loss_diff = worst;
  checks.check("max_rel_loss_diff", worst_beyond_floor, tolerance,
               reduced ? " (beyond the rounding floor)" : "");
}

// The final test RMSE beyond `floor`, or the final accuracy.
void compare_final_metric(ParityChecks& checks, const results::CaseResult& ra,
                          const results::CaseResult& rb, const ParityTolerances& tol, double floor,
                          bool reduced) {
  auto& c = checks.c;
  if (ra.final_test_rmse && rb.final_test_rmse) {
    const double diff = std::abs(*ra.final_test_rmse - *rb.final_test_rmse);
    const double scale = std::max(*ra.final_test_rmse, 1e-30);
    c.final_metric_rel_diff = diff / scale;
    checks.check("final_metric_rel_diff", std::max(0.0, diff - floor) / scale, tol.final_metric_rel,
                 reduced ? " (beyond the rounding floor)" : "");
  } else if (ra.final_accuracy && rb.final_accuracy) {
    c.final_metric_rel_diff =
        std::abs(*ra.final_accuracy - *rb.final_accuracy) / std::max(*ra.final_accuracy, 1e-30);
    c.final_accuracy_diff_points = 100 * std::abs(*ra.final_accuracy - *rb.final_accuracy);
    checks.check("final_accuracy_diff_points", c.final_accuracy_diff_points, tol.accuracy_points);
  }
}

} // namespace

results::Comparison compare_targets(const Workload& w, const Target& a, const Target& b,
                                    const results::CaseResult& ra, const results::CaseResult& rb) {
  results::Comparison c;
  c.case_name = w.name;
  c.a = a.name;
  c.b = b.name;
  const auto precision_a = a.effective_precision(), precision_b = b.effective_precision();
  c.label = a.device == b.device
                ? to_string(precision_a) + " vs " + to_string(precision_b) + " on " + a.device.str()
                : a.device.str() + " vs " + b.device.str() + " (" + to_string(precision_b) + ")";
  results::fill_speedup(c, ra, rb);
  // The less precise side decides (the enum runs from the most precise to the least).
  const auto tol = parity_tolerances(std::max(precision_a, precision_b), w.opt);
  ParityChecks checks{c, {}};

  compare_initialisation(c, w, a, b);
  checks.check("max_rel_output_diff", c.max_rel_output_diff, tol.output_rel);
  checks.check("max_rel_grad_diff", c.max_rel_grad_diff, tol.grad_rel);

  // Training: the per-epoch loss curves and the final metric.
  // A reduced precision (tf32, bf16, fp16) rounds every output by about the difference it made
  // at initialisation, d: a trained metric cannot be told apart from float32's below that floor
  // (an RMSE within 2d, an MSE within 2d sqrt(mse) + d^2), and only the excess over it counts.
  const bool reduced = std::max(precision_a, precision_b) > Precision::kFloat32;
  const double floor = reduced ? 2 * *c.max_abs_output_diff : 0.0;
  if (reduced)
    c.tolerances["rounding_floor"] = floor;
  compare_loss_curves(checks, w, ra, rb, tol.loss_curve_rel, floor, reduced);
  compare_final_metric(checks, ra, rb, tol, floor, reduced);
  c.parity = checks.failures.empty() ? results::Parity::kPass : results::Parity::kFail;
  for (const auto& f : checks.failures)
    c.message += (c.message.empty() ? "" : "; ") + f;
  return c;
}

} // namespace kan::bench
