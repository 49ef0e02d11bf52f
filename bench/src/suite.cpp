#include "kan/bench/suite.h"

#include "kan/bench/measure.h"
#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/environment.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/io/clock.h"
#include "kan/io/text.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

namespace kan::bench {
namespace {

using io::Clock;
using io::seconds_since;

// Thrown from fit()'s step callback when a case runs past its limit.
struct CaseTimeout {
  double limit;
  int64_t epoch;
};

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

// Every edge's learned phi(x), sampled across its layer's grid (as pykan's plot draws them).
std::vector<reports::ActivationCurve> activation_curves(KAN& model, int64_t points = 41) {
  torch::NoGradGuard no_grad;
  std::vector<reports::ActivationCurve> curves;
  for (size_t l = 0; l < model->depth(); ++l) {
    auto layer = model->layer(l);
    const int64_t k = layer->options().k();
    const auto knots = layer->grid.slice(1, k, layer->grid.size(1) - k); // (I, G + 1)
    const auto lo = knots.narrow(1, 0, 1).t(), hi = knots.narrow(1, knots.size(1) - 1, 1).t();
    const auto u = torch::linspace(0, 1, points, layer->grid.options()).unsqueeze(1);
    const auto x = lo + u * (hi - lo); // (P, I)
    const auto phi =
        layer->forward_with_activations(x).edges.to(torch::kCPU, torch::kFloat64); // (P, I, O)
    const auto xs = x.to(torch::kCPU, torch::kFloat64);
    for (int64_t i = 0; i < phi.size(1); ++i) {
      for (int64_t j = 0; j < phi.size(2); ++j) {
        reports::ActivationCurve c;
        c.layer = static_cast<int64_t>(l);
        c.input = i;
        c.output = j;
        const auto column = xs.select(1, i).contiguous(),
                   values = phi.select(1, i).select(1, j).contiguous();
        c.x.assign(column.data_ptr<double>(), column.data_ptr<double>() + points);
        c.y.assign(values.data_ptr<double>(), values.data_ptr<double>() + points);
        curves.push_back(std::move(c));
      }
    }
  }
  return curves;
}

double default_time_limit(const std::string& suite) {
  return suite == "quick" ? 60 : suite == "full" ? 900 : 120;
}

} // namespace

std::vector<Target> resolve_targets(const std::string& devices) {
  std::vector<std::string> names;
  if (devices == "auto") {
    names = {"cpu"};
    if (torch::cuda::is_available())
      names.push_back("cuda");
  } else {
    std::stringstream in(devices);
    std::string name;
    while (std::getline(in, name, ',')) {
      TORCH_CHECK(name == "cpu" || name == "cuda",
                  "--devices must be auto or a list of cpu and "
                  "cuda, got '",
                  devices, "'");
      if (std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
    TORCH_CHECK(!names.empty(), "--devices names no device: '", devices, "'");
  }
  std::vector<Target> targets;
  bool gpu_runs = false;
  for (const auto& name : names) {
    Target t{name, name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU),
             torch::kFloat32, ""};
    if (name == "cuda" && !torch::cuda::is_available())
      t.unavailable =
          "cuda requested but no CUDA device: " + diagnostics::cuda_unavailable_reason();
    gpu_runs = gpu_runs || (name == "cuda" && t.unavailable.empty());
    targets.push_back(t);
  }
  if (!gpu_runs && names.front() == "cpu")
    targets.push_back({"cpu-float64", torch::kCPU, torch::kFloat64, ""});
  return targets;
}

ParityTolerances parity_tolerances(torch::Dtype less_precise, Optimizer opt) {
  if (less_precise == torch::kFloat64)
    return {1e-10, 1e-8, 1e-6, 1e-4, 0.5};
  // float32 against anything: rounding at initialisation, then training amplifies it. LBFGS's
  // line searches amplify it most: on the toy case float32 and float64 on one CPU already differ
  // by 0.07 in the loss curve (1e-6 for the Adam cases), so its curve gets a wider limit.
  return {1e-4, 1e-3, opt == Optimizer::kLBFGS ? 0.25 : 0.1, 1e-1, 0.5};
}

reports::CaseResult run_case(const Workload& w, const Target& target, double time_limit_seconds,
                             const std::function<void(int64_t, int64_t)>& on_epoch,
                             Instrumentation* instrumentation) {
  reports::CaseResult r;
  r.name = w.name;
  r.target = target.name;
  r.device = target.device.str();
  r.dtype = kan::to_string(target.dtype);
  r.config = w.to_json();
  r.config["time_limit_seconds"] = time_limit_seconds;
  r.warmup_epochs = w.warmup_epochs;
  r.steps_per_epoch = w.steps_per_epoch();
  r.samples_per_epoch = w.batch <= 0 ? w.train_num : w.steps_per_epoch() * w.batch;
  r.threads = at::get_num_threads();
  if (!target.unavailable.empty()) {
    r.status = reports::CaseStatus::kSkipped;
    r.reason = target.unavailable;
    return r;
  }
  const auto start = Clock::now();
  try {
    const auto data = w.dataset(target.device, target.dtype);
    KAN model(w.model_options(target.device, target.dtype));
    r.backend = to_string(model->options().backend());
    for (const auto& f :
         diagnostics::DeviceAudit(target.device).module(*model).dataset(data).report().findings)
      r.audit_findings.push_back({f.tensor, diagnostics::to_string(f.kind), f.device,
                                  f.expected_device, f.message, diagnostics::to_string(f.problem),
                                  f.fix});

    const int64_t steps_per_epoch = w.steps_per_epoch();
    const int64_t epochs = w.warmup_epochs + w.epochs;
    EpochTimer timer(target.device);
    PeakMemory memory(target.device);
    Instrumentation local;
    Instrumentation& inst = instrumentation != nullptr ? *instrumentation : local;
    diagnostics::CuptiTracer tracer(diagnostics::CuptiTracerOptions()
                                        .enabled(inst.cupti && target.device.is_cuda())
                                        .keep_records(inst.keep_trace));
    std::optional<diagnostics::TraceRangeScope> epoch_range;
    std::optional<diagnostics::NvtxRange> step_range;
    auto options = w.fit_options();
    options.on_step_begin([&](int64_t step, torch::optim::Optimizer&) {
      if (step % steps_per_epoch == 0) {
        const int64_t epoch = step / steps_per_epoch; // 0-based
        epoch_range.emplace(inst.ranges,
                            r.name + " on " + r.target + ": epoch " + std::to_string(epoch));
        if (epoch >= w.warmup_epochs && target.device.is_cuda())
          tracer.start();
        timer.start();
      }
      step_range.emplace("step", step);
    });
    options.on_step([&](const StepRecord& record, int64_t) {
      step_range.reset();
      if ((record.step + 1) % steps_per_epoch != 0)
        return;
      const int64_t epoch = (record.step + 1) / steps_per_epoch; // 1-based
      const double seconds = timer.stop();
      if (tracer.tracing()) {
        const auto activity = tracer.stop();
        if (auto finding =
                diagnostics::gpu_not_used_finding(activity, r.device, epoch - 1 - w.warmup_epochs))
          r.audit_findings.push_back(*finding);
      }
      epoch_range.reset();
      if (epoch > w.warmup_epochs)
        r.epoch_seconds.push_back(seconds);
      if (on_epoch)
        on_epoch(epoch, epochs);
      if (seconds_since(start) > time_limit_seconds && epoch < epochs)
        throw CaseTimeout{time_limit_seconds, epoch};
    });
    // A device-mismatch error names the misplaced tensors instead of LibTorch's bare message.
    FitHistory history;
    diagnostics::diagnose_device_errors(
        [&] { history = fit(model, data, options); },
        [&] {
          return diagnostics::DeviceAudit(target.device).module(*model).dataset(data).report();
        });
    // Training's peak, before evaluation's chunks add their own.
    r.peak_memory_bytes = memory.bytes();
    r.memory_kind = memory.kind();
    if (target.device.is_cuda())
      r.gpu_activity = tracer.gpu_activity();
    if (inst.keep_trace) {
      const auto& kept = tracer.records();
      inst.records.kernels.insert(inst.records.kernels.end(), kept.kernels.begin(),
                                  kept.kernels.end());
      inst.records.copies.insert(inst.records.copies.end(), kept.copies.begin(), kept.copies.end());
    }
    for (const auto& e : history.epochs) {
      r.train_loss_per_epoch.push_back(e.train_loss);
      r.test_loss_per_epoch.push_back(e.test_loss);
    }
    const auto final = evaluate(model, data, w.loss);
    if (w.name == "toy")
      r.activations = activation_curves(model);
    if (w.loss == Loss::kMSE)
      r.final_test_rmse = final.test_rmse;
    else
      r.final_accuracy = final.test_accuracy;
    reports::fill_epoch_statistics(r);
    if (!r.median_epoch_seconds) {
      r.status = reports::CaseStatus::kFailed;
      r.reason = "no timed epoch";
      return r;
    }
  } catch (const CaseTimeout& t) {
    r.status = reports::CaseStatus::kTimeout;
    std::ostringstream reason;
    reason << "timed out after " << seconds_since(start) << " s (limit " << t.limit
           << " s) at epoch " << t.epoch << " of " << w.warmup_epochs + w.epochs;
    r.reason = reason.str();
  } catch (const c10::OutOfMemoryError& e) {
    release_cuda_cache();
    r.status = reports::CaseStatus::kOom;
    r.reason = "out of memory at batch " + std::to_string(w.batch <= 0 ? w.train_num : w.batch) +
               " of " + std::to_string(w.train_num) +
               " samples: " + io::first_line(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    r.status = reports::CaseStatus::kFailed;
    r.reason = io::first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    r.status = reports::CaseStatus::kFailed;
    r.reason = io::first_line(e.what());
  }
  if (r.status != reports::CaseStatus::kOk) {
    // Partial timings of a case that did not finish are not results.
    r.epoch_seconds.clear();
    r.train_loss_per_epoch.clear();
    r.test_loss_per_epoch.clear();
    r.final_test_rmse.reset();
    r.final_accuracy.reset();
    r.peak_memory_bytes.reset();
    r.memory_kind.reset();
  }
  return r;
}

reports::Comparison compare_targets(const Workload& w, const Target& a, const Target& b,
                                    const reports::CaseResult& ra, const reports::CaseResult& rb) {
  reports::Comparison c;
  c.case_name = w.name;
  c.a = a.name;
  c.b = b.name;
  c.label =
      a.device == b.device
          ? kan::to_string(a.dtype) + " vs " + kan::to_string(b.dtype) + " on " + a.device.str()
          : a.device.str() + " vs " + b.device.str() + " (" + kan::to_string(b.dtype) + ")";
  reports::fill_speedup(c, ra, rb);
  const bool any_float32 = a.dtype == torch::kFloat32 || b.dtype == torch::kFloat32;
  const auto tol = parity_tolerances(any_float32 ? torch::kFloat32 : torch::kFloat64, w.opt);
  std::vector<std::string> failures;
  auto check = [&](const char* key, std::optional<double> value, double limit) {
    c.tolerances[key] = limit;
    if (value && !(*value <= limit)) {
      std::ostringstream m;
      m << key << " " << *value << " > " << limit;
      failures.push_back(m.str());
    }
  };

  // Initialisation: same seed, so the models must agree up to rounding, outputs and gradients.
  const auto data = w.dataset(torch::kCPU, torch::kFloat64);
  const auto x = data.train_input.narrow(0, 0, std::min<int64_t>(256, data.train_input.size(0)));
  const auto y = data.train_label.narrow(0, 0, x.size(0));
  KAN ma(w.model_options(a.device, a.dtype)), mb(w.model_options(b.device, b.dtype));
  auto loss_of = [&](KAN& m, const Target& t) {
    const auto out = m->forward(x.to(t.device, t.dtype));
    const auto labels = w.loss == Loss::kMSE ? y.to(t.device, t.dtype) : y.to(t.device);
    compute_loss(w.loss, out, labels).backward();
    return out;
  };
  const auto out_a = loss_of(ma, a), out_b = loss_of(mb, b);
  c.max_abs_output_diff = max_absolute_difference(out_a, out_b);
  c.max_rel_output_diff = max_relative_difference(out_a, out_b);
  double grad_abs = 0, grad_rel = 0;
  const auto pa = ma->named_parameters(), pb = mb->named_parameters();
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
  check("max_rel_output_diff", c.max_rel_output_diff, tol.output_rel);
  check("max_rel_grad_diff", c.max_rel_grad_diff, tol.grad_rel);

  // Training: the per-epoch loss curves and the final metric.
  if (!ra.train_loss_per_epoch.empty() &&
      ra.train_loss_per_epoch.size() == rb.train_loss_per_epoch.size()) {
    double worst = 0;
    for (size_t i = 0; i < ra.train_loss_per_epoch.size(); ++i) {
      const double la = ra.train_loss_per_epoch[i], lb = rb.train_loss_per_epoch[i];
      worst = std::max(worst, std::abs(la - lb) / std::max(std::abs(la), 1e-30));
    }
    c.max_rel_loss_diff = worst;
    check("max_rel_loss_diff", c.max_rel_loss_diff, tol.loss_curve_rel);
  }
  if (ra.final_test_rmse && rb.final_test_rmse) {
    c.final_metric_rel_diff =
        std::abs(*ra.final_test_rmse - *rb.final_test_rmse) / std::max(*ra.final_test_rmse, 1e-30);
    check("final_metric_rel_diff", c.final_metric_rel_diff, tol.final_metric_rel);
  } else if (ra.final_accuracy && rb.final_accuracy) {
    c.final_metric_rel_diff =
        std::abs(*ra.final_accuracy - *rb.final_accuracy) / std::max(*ra.final_accuracy, 1e-30);
    c.final_accuracy_diff_points = 100 * std::abs(*ra.final_accuracy - *rb.final_accuracy);
    check("final_accuracy_diff_points", c.final_accuracy_diff_points, tol.accuracy_points);
  }
  c.parity = failures.empty() ? reports::Parity::kPass : reports::Parity::kFail;
  for (const auto& f : failures)
    c.message += (c.message.empty() ? "" : "; ") + f;
  return c;
}

reports::Results run_suite(const SuiteOptions& o) {
  const auto run_start = Clock::now();
  auto workloads = suite_workloads(o.suite);
  if (!o.cases.empty()) {
    for (const auto& name : o.cases) {
      TORCH_CHECK(std::any_of(workloads.begin(), workloads.end(),
                              [&](const Workload& w) { return w.name == name; }),
                  "--case ", name, " is not a workload of the ", o.suite,
                  " suite (toy, deep, wide, million)");
    }
    workloads.erase(std::remove_if(workloads.begin(), workloads.end(),
                                   [&](const Workload& w) {
                                     return std::find(o.cases.begin(), o.cases.end(), w.name) ==
                                            o.cases.end();
                                   }),
                    workloads.end());
  }
  TORCH_CHECK(o.repeat >= 0, "--repeat must be >= 1, got ", o.repeat);
  for (auto& w : workloads) {
    if (o.repeat > 0)
      w.epochs = o.repeat;
  }
  const auto targets = resolve_targets(o.devices);
  // Every kan phase (forward, backward, optimizer step, ...) is an NVTX range during the run.
  diagnostics::NvtxScopes nvtx_scopes;
  Instrumentation instrumentation;
  instrumentation.cupti = o.cupti;
  instrumentation.keep_trace = !o.trace_file.empty();
  const double limit =
      o.time_limit_seconds > 0 ? o.time_limit_seconds : default_time_limit(o.suite);

  reports::Results results;
  results.environment = diagnostics::collect_environment();
  results.config.suite = o.suite;
  for (const auto& t : targets)
    results.config.devices.push_back(t.name);
  results.config.repeat = o.repeat > 0        ? o.repeat
                          : workloads.empty() ? 0
                                              : workloads.front().epochs;
  results.config.cases = o.cases;
  results.config.time_limit_seconds = limit;
  results.config.seed = 0;
  results.config.cupti = o.cupti;
  if (!o.trace_file.empty())
    results.config.trace = o.trace_file;

  const int64_t case_count = static_cast<int64_t>(workloads.size() * targets.size());
  int64_t case_index = 0;
  std::vector<double> finished_case_seconds;
  for (const auto& w : workloads) {
    std::vector<reports::CaseResult> per_target;
    for (const auto& t : targets) {
      ++case_index;
      const auto case_start = Clock::now();
      auto report_epoch = [&](int64_t epoch, int64_t epochs) {
        if (!o.on_progress)
          return;
        Progress p{case_index, case_count, w.name, t.name, epoch, epochs, seconds_since(run_start),
                   -1};
        if (!finished_case_seconds.empty()) {
          double mean = 0;
          for (double s : finished_case_seconds)
            mean += s / static_cast<double>(finished_case_seconds.size());
          p.remaining_seconds = mean * static_cast<double>(case_count - case_index) +
                                std::max(0.0, mean - seconds_since(case_start));
        }
        o.on_progress(p);
      };
      report_epoch(0, w.warmup_epochs + w.epochs);
      per_target.push_back(run_case(w, t, limit, report_epoch, &instrumentation));
      finished_case_seconds.push_back(seconds_since(case_start));
      results.cases.push_back(per_target.back());
    }
    // Parity of every further target against the first one.
    for (size_t i = 1; i < targets.size(); ++i) {
      if (per_target[0].status != reports::CaseStatus::kOk ||
          per_target[i].status != reports::CaseStatus::kOk)
        continue;
      try {
        results.comparisons.push_back(
            compare_targets(w, targets[0], targets[i], per_target[0], per_target[i]));
      } catch (const std::exception& e) {
        // A comparison that cannot be made is a failed one, with the reason; the run goes on.
        reports::Comparison failed;
        failed.case_name = w.name;
        failed.a = targets[0].name;
        failed.b = targets[i].name;
        failed.parity = reports::Parity::kFail;
        failed.message = "comparison could not run: " + io::first_line(e.what());
        results.comparisons.push_back(failed);
      }
    }
  }
  if (o.edge_cases) {
    for (const auto& t : targets) {
      if (t.dtype != torch::kFloat32)
        continue; // one set per device
      if (!t.unavailable.empty()) {
        for (const auto& name : edge_case_names())
          results.edge_cases.push_back(skipped_edge_case(name, t.device.str(), t.unavailable));
        continue;
      }
      for (auto& e : run_edge_cases(t, o.suite))
        results.edge_cases.push_back(std::move(e));
    }
  }
  if (!o.trace_file.empty()) {
    try {
      diagnostics::write_chrome_trace(o.trace_file, instrumentation.records,
                                      instrumentation.ranges);
    } catch (const std::exception& e) {
      if (!o.on_output_error)
        throw;
      o.on_output_error(io::first_line(e.what()));
    }
  }
  results.wall_seconds = seconds_since(run_start);
  return results;
}

} // namespace kan::bench
