#include "kan/bench/suite.h"

#include "detail/precision_scope.h"

#include "kan/bench/measure.h"
#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/device_monitor.h"
#include "kan/diagnostics/environment.h"
#include "kan/diagnostics/graph_check.h"
#include "kan/diagnostics/meta_rehearsal.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/io/clock.h"
#include "kan/io/json_reader.h"
#include "kan/io/text.h"
#include "kan/nn/autocast.h"
#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/nn/torchscript_model.h"
#include "kan/results/statistics.h"

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

using detail::PrecisionScope;
using io::Clock;
using io::seconds_since;

// Thrown from fit()'s step callback when a case runs past its limit.
struct CaseTimeout {
  double limit;
  int64_t epoch;
};

// Every edge's learned phi(x), sampled across its layer's grid (as pykan's plot draws them).
std::vector<results::ActivationCurve> activation_curves(KANImpl& model, int64_t points = 41) {
  torch::NoGradGuard no_grad;
  std::vector<results::ActivationCurve> curves;
  for (size_t l = 0; l < model.depth(); ++l) {
    auto layer = model.layer(l);
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
        results::ActivationCurve c;
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

} // namespace

std::string to_string(Precision value) {
  return io::name_of(value, kPrecisionNames);
}

std::vector<Precision> parse_precisions(const std::string& list, const std::string& option) {
  std::vector<Precision> precisions;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    const auto precision = io::value_named(name, kPrecisionNames);
    TORCH_CHECK(precision, option, " must be a list of ", io::names_of(kPrecisionNames), ", got '",
                list, "'");
    TORCH_CHECK(std::find(precisions.begin(), precisions.end(), *precision) == precisions.end(),
                option, " names ", name, " twice: '", list, "'");
    precisions.push_back(*precision);
  }
  TORCH_CHECK(!precisions.empty(), option, " names no precision: '", list, "'");
  return precisions;
}

Precision Target::effective_precision() const {
  if (precision)
    return *precision;
  return dtype == torch::kFloat64 ? Precision::kFloat64 : Precision::kFloat32;
}

std::vector<Target> resolve_targets(const std::string& devices, torch::Dtype dtype,
                                    const std::vector<Precision>& precisions) {
  if (precisions.empty())
    return resolve_targets(devices, dtype);
  const auto own = dtype == torch::kFloat64 ? Precision::kFloat64 : Precision::kFloat32;
  std::vector<Target> targets;
  for (auto device : resolve_targets(devices, dtype)) {
    if (device.name.rfind("cpu-", 0) == 0)
      continue; // resolve_targets' parity partner: the precisions are compared instead
    for (const auto p : precisions) {
      Target t = device;
      t.name = p == own ? device.name : device.name + "-" + to_string(p);
      t.dtype = p == Precision::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      if (p != Precision::kFloat64 && p != Precision::kFloat32)
        t.precision = p;
      if (t.unavailable.empty() && !t.device.is_cuda() && p == Precision::kTF32)
        t.unavailable = "tf32 is a mode of CUDA's tensor cores; the CPU has none";
      if (t.unavailable.empty() && !t.device.is_cuda() && p == Precision::kFP16)
        t.unavailable = "fp16 autocast runs on CUDA only; bf16 is the CPU's half precision";
      targets.push_back(t);
    }
  }
  return targets;
}

size_t reference_target(const std::vector<Target>& targets, size_t i, torch::Dtype dtype) {
  const auto own = dtype == torch::kFloat64 ? Precision::kFloat64 : Precision::kFloat32;
  if (targets[i].effective_precision() != own)
    for (size_t j = 0; j < targets.size(); ++j)
      if (j != i && targets[j].device == targets[i].device &&
          targets[j].effective_precision() == own)
        return j;
  return 0;
}

std::vector<Target> resolve_targets(const std::string& devices, torch::Dtype dtype) {
  const int64_t gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  auto cuda_target = [&](const std::string& name, int64_t index) {
    Target t{name, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)), dtype, ""};
    if (gpus == 0)
      t.unavailable =
          name + " requested but no CUDA device: " + diagnostics::cuda_unavailable_reason();
    else if (index >= gpus)
      t.unavailable = name + " requested but " + std::to_string(gpus) +
                      " CUDA device(s) are visible (cuda:0 to cuda:" + std::to_string(gpus - 1) +
                      "; CUDA_VISIBLE_DEVICES decides which)";
    return t;
  };
  std::vector<Target> targets;
  auto add = [&](Target t) {
    if (std::none_of(targets.begin(), targets.end(),
                     [&](const Target& o) { return o.device == t.device; }))
      targets.push_back(std::move(t));
  };
  std::stringstream in(devices == "auto" ? (gpus > 0 ? "cpu,cuda" : "cpu") : devices);
  std::string name;
  while (std::getline(in, name, ',')) {
    const std::string index = name.rfind("cuda:", 0) == 0 ? name.substr(5) : "";
    if (name == "cpu") {
      add({"cpu", torch::kCPU, dtype, ""});
    } else if (name == "cuda") {
      add(cuda_target("cuda", 0));
    } else if (index == "all") {
      if (gpus == 0)
        add(cuda_target(name, 0));
      for (int64_t i = 0; i < gpus; ++i)
        add(cuda_target("cuda:" + std::to_string(i), i));
    } else {
      TORCH_CHECK(!index.empty() && index.size() <= 4 &&
                      std::all_of(index.begin(), index.end(), ::isdigit),
                  "--devices must be auto or a list of cpu, cuda, cuda:N and cuda:all, got '",
                  devices, "'");
      add(cuda_target(name, std::stoll(index)));
    }
  }
  TORCH_CHECK(!targets.empty(), "--devices names no device: '", devices, "'");
  const bool gpu_runs = std::any_of(targets.begin(), targets.end(), [](const Target& t) {
    return t.device.is_cuda() && t.unavailable.empty();
  });
  if (!gpu_runs && targets.front().name == "cpu") {
    const auto other = dtype == torch::kFloat64 ? torch::kFloat32 : torch::kFloat64;
    targets.push_back({"cpu-" + kan::to_string(other), torch::kCPU, other, ""});
  }
  return targets;
}

StopOnNoise StopOnNoise::for_suite(const std::string& suite, double cv_target,
                                   double cv_max_seconds) {
  TORCH_CHECK(cv_target >= 0 && cv_target < 1, "--cv-target must be in [0, 1), got ", cv_target);
  TORCH_CHECK(cv_max_seconds >= 0 && std::isfinite(cv_max_seconds),
              "--cv-max-time must be a number of seconds >= 0, got ", cv_max_seconds);
  const double cap = suite == "quick" ? 0.5 : suite == "full" ? 30.0 : 5.0;
  return {cv_target, cv_max_seconds > 0 ? cv_max_seconds : cap, 200};
}

double suite_time_limit(const std::string& suite) {
  return suite == "quick" ? 60 : suite == "full" ? 900 : 120;
}

void cap_gpu_memory(const std::vector<Target>& targets, double fraction) {
  TORCH_CHECK(fraction == 0 || (fraction > 0 && fraction <= 1),
              "--memory-fraction must be in (0, 1], got ", fraction);
  if (fraction == 0)
    return;
  for (const auto& t : targets)
    if (t.device.is_cuda() && t.unavailable.empty())
      set_memory_fraction(t.device, fraction);
}

namespace {

// What a precision target computes in which precision, for its results.
std::string precision_detail(const Target& t) {
  switch (t.effective_precision()) {
  case Precision::kTF32:
    return "TF32 tensor cores for float32 matmuls (the base branch); the fused spline kernels, "
           "the loss and the optimiser in float32";
  case Precision::kBF16:
  case Precision::kFP16:
    return std::string("autocast to ") +
           (t.effective_precision() == Precision::kBF16 ? "bfloat16" : "float16") +
           ": the matmuls (the base branch) in half precision; the fused spline kernels (no "
           "half-precision kernels yet: float32 inputs, float32 accumulation), the loss and "
           "the optimiser in float32";
  default:
    return "";
  }
}

// A case's result before it runs: what it is, where, and its configuration.
results::CaseResult new_case_result(const Workload& w, const Target& target,
                                    double time_limit_seconds) {
  results::CaseResult r;
  r.name = w.name;
  r.target = target.name;
  r.device = target.device.str();
  r.dtype = kan::to_string(target.dtype);
  if (target.precision) {
    r.precision = to_string(*target.precision);
    r.precision_detail = precision_detail(target);
  }
  r.config = w.to_json();
  r.config["time_limit_seconds"] = time_limit_seconds;
  r.warmup_epochs = w.warmup_epochs;
  r.steps_per_epoch = w.steps_per_epoch();
  r.samples_per_epoch = w.batch <= 0 ? w.train_num : w.steps_per_epoch() * w.batch;
  r.threads = at::get_num_threads();
  return r;
}

// Everything measured around a case's training, driven by fit()'s step callbacks: per epoch a
// Chrome/NVTX range, the device-side timer and (timed GPU epochs) CUPTI; per step an NVTX range.
// Epochs are counted in whole steps: an epoch begins at its first step and ends with its last.
class EpochMeasurement {
public:
  EpochMeasurement(const Workload& w, const Target& target, Instrumentation& instrumentation,
                   results::CaseResult& result)
      : w_(w), target_(target), inst_(instrumentation), result_(result), timer_(target.device),
        memory_(target.device),
        tracer_(diagnostics::CuptiTracerOptions()
                    .enabled(instrumentation.cupti && target.device.is_cuda())
                    .keep_records(instrumentation.keep_trace)) {
    if (inst_.monitor_interval_seconds <= 0)
      return;
    const auto options =
        diagnostics::DeviceMonitorOptions().interval_seconds(inst_.monitor_interval_seconds);
    if (!target.device.is_cuda()) {
      monitor_.emplace(diagnostics::DeviceMonitor::process_cpu(options));
      return;
    }
    // NVML finds the GPU by its PCI bus id: its own indices ignore CUDA_VISIBLE_DEVICES.
    std::string reason;
    nvml_ = diagnostics::load_nvml(&reason);
    bus_id_ = diagnostics::cuda_pci_bus_id(target.device.index());
    monitor_.emplace(diagnostics::DeviceMonitor::gpu(nvml_, bus_id_, options, reason));
  }

  void step_begins(int64_t step) {
    if (step % w_.steps_per_epoch() == 0) {
      const int64_t epoch = step / w_.steps_per_epoch(); // 0-based
      epoch_range_.emplace(inst_.ranges, result_.name + " on " + result_.target + ": epoch " +
                                             std::to_string(epoch));
      if (timed(epoch) && target_.device.is_cuda())
        tracer_.start();
      if (timed(epoch) && monitor_ && !monitor_->running()) {
        // After the warm-up: a GPU whose clock is still below its maximum is worth a warning.
        if (nvml_)
          clock_warning_ = diagnostics::gpu_clock_warning(*nvml_, bus_id_);
        monitor_->start();
      }
      timer_.start();
    }
    step_range_.emplace("step", step);
  }

  // The 1-based epoch that this step ended, or 0 when the epoch goes on. A timed epoch's
  // seconds go into the result; a traced one that ran no kernel becomes a finding.
  int64_t step_ends(int64_t step) {
    step_range_.reset();
    if ((step + 1) % w_.steps_per_epoch() != 0)
      return 0;
    const int64_t epoch = (step + 1) / w_.steps_per_epoch();
    const double seconds = timer_.stop();
    if (tracer_.tracing()) {
      const auto activity = tracer_.stop();
      if (auto finding = diagnostics::gpu_not_used_finding(activity, result_.device,
                                                           epoch - 1 - w_.warmup_epochs))
        result_.audit_findings.push_back(*finding);
    }
    epoch_range_.reset();
    if (timed(epoch - 1))
      result_.epoch_seconds.push_back(seconds);
    return epoch;
  }

  // After training (which includes one evaluation of the test set, between two epochs): peak
  // memory, GPU activity, and the kept kernel and copy records for --trace.
  void finish() {
    if (monitor_) {
      result_.monitoring = monitor_->stop();
      if (clock_warning_)
        result_.monitoring->findings.push_back(*clock_warning_);
    }
    result_.peak_memory_bytes = memory_.bytes();
    result_.memory_kind = memory_.kind();
    result_.peak_reserved_bytes = memory_.reserved_bytes();
    if (target_.device.is_cuda())
      result_.gpu_activity = tracer_.gpu_activity();
    if (inst_.keep_trace) {
      const auto& kept = tracer_.records();
      auto& records = inst_.records;
      records.kernels.insert(records.kernels.end(), kept.kernels.begin(), kept.kernels.end());
      records.copies.insert(records.copies.end(), kept.copies.begin(), kept.copies.end());
    }
  }

private:
  bool timed(int64_t epoch) const { return epoch >= w_.warmup_epochs; } // 0-based

  const Workload& w_;
  const Target& target_;
  Instrumentation& inst_;
  results::CaseResult& result_;
  EpochTimer timer_;
  PeakMemory memory_;
  diagnostics::CuptiTracer tracer_;
  std::shared_ptr<diagnostics::NvmlApi> nvml_;
  std::string bus_id_;
  std::optional<diagnostics::DeviceMonitor> monitor_;
  std::optional<std::string> clock_warning_;
  std::optional<diagnostics::TraceRangeScope> epoch_range_;
  std::optional<diagnostics::NvtxRange> step_range_;
};

// The case's status and reason for what escaped its training: a timeout, an out-of-memory (the
// allocator's cache is released), or any other error. `current` is std::current_exception().
void classify_failure(results::CaseResult& r, const Workload& w, std::exception_ptr current,
                      double elapsed_seconds) {
  try {
    std::rethrow_exception(current);
  } catch (const CaseTimeout& t) {
    r.status = results::CaseStatus::kTimeout;
    std::ostringstream reason;
    reason << "timed out after " << elapsed_seconds << " s (limit " << t.limit << " s) at epoch "
           << t.epoch << " of " << w.warmup_epochs + w.epochs;
    r.reason = reason.str();
  } catch (const c10::OutOfMemoryError& e) {
    release_cuda_cache();
    r.status = results::CaseStatus::kOom;
    r.reason = "out of memory at batch " + std::to_string(w.batch <= 0 ? w.train_num : w.batch) +
               " of " + std::to_string(w.train_num) +
               " samples: " + io::first_line(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    r.status = results::CaseStatus::kFailed;
    r.reason = io::first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    r.status = results::CaseStatus::kFailed;
    r.reason = io::first_line(e.what());
  }
}

// Partial timings of a case that did not finish are not results.
void clear_measurements(results::CaseResult& r) {
  r.epoch_seconds.clear();
  r.train_loss_per_epoch.clear();
  r.test_loss_per_epoch.clear();
  r.final_test_rmse.reset();
  r.final_accuracy.reset();
  r.peak_memory_bytes.reset();
  r.memory_kind.reset();
  r.peak_reserved_bytes.reset();
  r.epoch_cv.reset();
  r.cv_target.reset();
  r.cv_target_met.reset();
  r.monitoring.reset();
}

// The model's metric on the test set (and, where the workload asks, its activations) after the
// workload's own epochs: the figures parity compares, whatever stop-on-noise adds afterwards.
void record_final_metric(results::CaseResult& r, const Workload& w, Model& model,
                         const Dataset& data) {
  const auto final = evaluate(model, data, w.loss);
  if (auto* kan = dynamic_cast<KANImpl*>(&model); kan != nullptr && w.plot_activations)
    r.activations = activation_curves(*kan);
  if (w.loss == Loss::kMSE)
    r.final_test_rmse = final.test_rmse;
  else
    r.final_accuracy = final.test_accuracy;
}

// The loss curves of every epoch trained, and the epoch statistics.
void record_training(results::CaseResult& r, const FitHistory& history) {
  for (const auto& e : history.epochs) {
    r.train_loss_per_epoch.push_back(e.train_loss);
    r.test_loss_per_epoch.push_back(e.test_loss);
  }
  results::fill_epoch_statistics(r);
}

// What the case's model is: its backend (a KAN's), kind, size and cost.
void describe_model(results::CaseResult& r, const Model& model) {
  if (const auto* kan = dynamic_cast<const KANImpl*>(&model))
    r.backend = to_string(kan->options().backend());
  r.model_kind = to_string(model.kind());
  r.parameters = model.parameter_count();
  r.forward_flops = model.forward_flops();
}

// Whether stop-on-noise is satisfied: the epoch times' coefficient of variation at its target,
// or its timed seconds spent.
bool noise_settled(const results::CaseResult& r, const StopOnNoise& noise) {
  const auto cv = results::coefficient_of_variation(r.epoch_seconds);
  double timed = 0;
  for (double seconds : r.epoch_seconds)
    timed += seconds;
  return (cv && *cv <= noise.cv_target) || timed >= noise.max_seconds;
}

// Autocast for bf16 and fp16, and dynamic loss scaling for fp16.
void set_precision(FitOptions& options, const Target& target) {
  const auto precision = target.effective_precision();
  if (precision == Precision::kBF16 || precision == Precision::kFP16)
    options.autocast(PrecisionScope::autocast_dtype(precision));
  if (precision == Precision::kFP16)
    options.grad_scaler(std::make_shared<GradScaler>());
}

// A case's training and its measurements into r (run_case's, which classifies what it throws).
void measure_case(results::CaseResult& r, const Workload& w, const Target& target,
                  double time_limit_seconds, const std::function<void(int64_t, int64_t)>& on_epoch,
                  Instrumentation& instrumentation, const StopOnNoise& noise,
                  Clock::time_point start) {
  const auto data = w.dataset(target.device, target.dtype);
  const auto built = w.build_model(target.device, target.dtype);
  auto& model = *built;
  describe_model(r, model);
  auto audit = [&] {
    return diagnostics::DeviceAudit(target.device).module(model.module()).dataset(data).report();
  };
  r.audit_findings = audit().findings;

  EpochMeasurement measurement(w, target, instrumentation, r);
  // The workload's epochs always run; stop-on-noise may add more, up to its caps.
  const bool on_noise = noise.cv_target > 0;
  const int64_t least = w.warmup_epochs + w.epochs;
  const int64_t most = on_noise ? w.warmup_epochs + std::max(w.epochs, noise.max_epochs) : least;
  auto options = w.fit_options().steps(most * w.steps_per_epoch());
  options.on_step_begin(
      [&](int64_t step, torch::optim::Optimizer&) { measurement.step_begins(step); });
  // Timers and the stop rule need no loss: after_step lets fit() read the losses per epoch.
  options.after_step([&](int64_t step, int64_t) {
    const int64_t epoch = measurement.step_ends(step);
    if (epoch == 0)
      return false;
    if (on_epoch) // the least epochs until stop-on-noise adds one
      on_epoch(epoch, std::max(least, epoch));
    const bool past_limit = seconds_since(start) > time_limit_seconds;
    if (epoch < least) {
      if (past_limit)
        throw CaseTimeout{time_limit_seconds, epoch};
      return false;
    }
    if (epoch == least) { // between timed epochs: evaluation is not timed
      PrecisionScope precision(target, /*autocast=*/true);
      record_final_metric(r, w, model, data);
    }
    return !on_noise || noise_settled(r, noise) || past_limit;
  });
  set_precision(options, target);
  PrecisionScope tf32(target, /*autocast=*/false);
  // A device-mismatch error names the misplaced tensors instead of LibTorch's bare message.
  FitHistory history;
  diagnostics::diagnose_device_errors([&] { history = fit(model, data, options); }, audit);
  if (options.grad_scaler())
    r.precision_detail = *r.precision_detail + "; dynamic loss scaling: " +
                         std::to_string(options.grad_scaler()->overflowed_steps()) +
                         " overflowing evaluation(s) skipped or repeated, final scale " +
                         io::format_number(options.grad_scaler()->get_scale());
  measurement.finish();
  record_training(r, history);
  r.epoch_cv = results::coefficient_of_variation(r.epoch_seconds);
  if (on_noise) {
    r.cv_target = noise.cv_target;
    r.cv_target_met = r.epoch_cv && *r.epoch_cv <= noise.cv_target;
  }
  if (!r.median_epoch_seconds) {
    r.status = results::CaseStatus::kFailed;
    r.reason = "no timed epoch";
  }
}

} // namespace

double expected_cost(const Workload& w, const StopOnNoise& noise) {
  const auto flops =
      static_cast<double>(w.model ? w.model->forward_flops()
                          : w.model_kind == ModelKind::kMLP
                              ? mlp_forward_flops(w.width, w.activation)
                              : kan_forward_flops(w.model_options(torch::kCPU, torch::kFloat32)));
  const auto samples =
      static_cast<double>(w.batch <= 0 ? w.train_num : std::min(w.batch, w.train_num));
  const auto steps = static_cast<double>((w.warmup_epochs + w.epochs) * w.steps_per_epoch());
  return steps * expected_step_cost(samples, flops) +
         (noise.cv_target > 0 ? noise.max_seconds * kExpectedCostPerSecond : 0.0);
}

results::CaseResult run_case(const Workload& w, const Target& target, double time_limit_seconds,
                             const std::function<void(int64_t, int64_t)>& on_epoch,
                             Instrumentation* instrumentation, const StopOnNoise& noise) {
  auto r = new_case_result(w, target, time_limit_seconds);
  if (!target.unavailable.empty()) {
    r.status = results::CaseStatus::kSkipped;
    r.reason = target.unavailable;
    return r;
  }
  const auto start = Clock::now();
  try {
    Instrumentation local;
    measure_case(r, w, target, time_limit_seconds, on_epoch,
                 instrumentation ? *instrumentation : local, noise, start);
  } catch (...) {
    classify_failure(r, w, std::current_exception(), seconds_since(start));
  }
  if (r.status != results::CaseStatus::kOk)
    clear_measurements(r);
  return r;
}

namespace {

// The suite's workloads narrowed to --case, or the user's model; with --repeat's epoch count.
std::vector<Workload> selected_workloads(const SuiteOptions& o) {
  TORCH_CHECK(o.model.empty() || o.cases.empty(),
              "--model and --case are alternatives: run your model or the suite's workloads");
  TORCH_CHECK(o.data.empty() || !o.model.empty(), "--data needs --model (the data's model)");
  auto workloads =
      o.model.empty()
          ? suite_workloads(o.suite)
          : std::vector<Workload>{model_workload(
                o.model,
                ModelFileOptions().trust_torchscript(o.trust_torchscript).inputs(o.model_inputs),
                o.data, o.suite, o.data_options, o.loss)};
  for (const auto& name : o.cases)
    suite_workload(o.suite, name); // refuses a name the suite does not have
  if (!o.cases.empty())
    workloads.erase(std::remove_if(workloads.begin(), workloads.end(),
                                   [&](const Workload& w) {
                                     return std::find(o.cases.begin(), o.cases.end(), w.name) ==
                                            o.cases.end();
                                   }),
                    workloads.end());
  TORCH_CHECK(o.repeat >= 0, "--repeat must be >= 1, got ", o.repeat);
  for (auto& w : workloads)
    if (o.repeat > 0)
      w.epochs = o.repeat;
  return workloads;
}

results::RunConfig run_config(const SuiteOptions& o, const std::vector<Target>& targets,
                              const std::vector<Workload>& workloads, double limit) {
  results::RunConfig config;
  config.suite = o.suite;
  for (const auto& t : targets)
    config.devices.push_back(t.name);
  config.repeat = o.repeat > 0 ? o.repeat : workloads.empty() ? 0 : workloads.front().epochs;
  config.cases = o.cases;
  config.shard = o.shard;
  if (o.shard) { // the whole plan, which every shard names alike, in the order it runs
    config.cases.clear();
    for (const auto& w : workloads)
      config.cases.push_back(w.name);
  }
  config.time_limit_seconds = limit;
  config.seed = 0;
  config.cupti = o.cupti;
  if (!o.trace_file.empty())
    config.trace = o.trace_file;
  if (!o.model.empty())
    config.extra = {{"model", o.model}, {"data", o.data.empty() ? "synthetic" : o.data}};
  config.extra["cv_target"] = o.cv_target;
  if (o.cv_max_seconds > 0)
    config.extra["cv_max_seconds"] = o.cv_max_seconds;
  if (o.memory_fraction > 0)
    config.extra["memory_fraction"] = o.memory_fraction;
  if (o.empty_cache)
    config.extra["empty_cache"] = true;
  config.extra["monitor_interval_seconds"] = o.monitor_interval_seconds;
  if (o.shard) // shards with and without the edge cases are parts of different plans
    config.extra["edge_cases"] = o.edge_cases;
  if (!o.precisions.empty()) {
    config.extra["precisions"] = nlohmann::json::array();
    for (const auto p : o.precisions)
      config.extra["precisions"].push_back(to_string(p));
  }
  return config;
}

// Progress lines with an estimate of the time left (TimeLeft: the pace of the finished cases in
// expected cost a second, applied to the cost still to run).
class ProgressReporter {
public:
  ProgressReporter(const SuiteOptions& o, const std::vector<Workload>& workloads,
                   const std::vector<Target>& targets, const StopOnNoise& noise)
      : on_progress_(o.on_progress), noise_(noise),
        case_count_(static_cast<int64_t>(workloads.size() * targets.size())) {
    for (const auto& w : workloads)
      for (const auto& t : targets)
        time_left_.add(cost_of(w, t));
  }

  void case_begins(const Workload& w, const Target& t) {
    ++case_index_;
    case_start_ = Clock::now();
    workload_ = &w;
    target_ = &t;
    case_cost_ = cost_of(w, t);
    epoch_ends(0, w.warmup_epochs + w.epochs);
  }
  void epoch_ends(int64_t epoch, int64_t epochs) const {
    if (on_progress_)
      on_progress_({case_index_, case_count_, workload_->name, target_->name, epoch, epochs,
                    seconds_since(run_start_),
                    time_left_.seconds_left(case_cost_, seconds_since(case_start_))});
  }
  void case_ends() { time_left_.finished(case_cost_, seconds_since(run_start_)); }
  double elapsed_seconds() const { return seconds_since(run_start_); }

private:
  double cost_of(const Workload& w, const Target& t) const {
    return t.unavailable.empty() ? expected_cost(w, noise_) : 0.0;
  }

  std::function<void(const Progress&)> on_progress_;
  StopOnNoise noise_;
  int64_t case_count_;
  int64_t case_index_ = 0;
  const Workload* workload_ = nullptr;
  const Target* target_ = nullptr;
  Clock::time_point run_start_ = Clock::now(), case_start_ = Clock::now();
  double case_cost_ = 0;
  TimeLeft time_left_;
};

// Parity of every further target against the first, where both ran. A comparison that cannot
// be made is a failed one, with the reason; the run goes on.
std::vector<results::Comparison>
compare_with_references(const Workload& w, const std::vector<Target>& targets, torch::Dtype dtype,
                        const std::vector<results::CaseResult>& results) {
  std::vector<results::Comparison> comparisons;
  for (size_t i = 1; i < targets.size(); ++i) {
    const size_t ref = reference_target(targets, i, dtype);
    if (results[ref].status != results::CaseStatus::kOk ||
        results[i].status != results::CaseStatus::kOk)
      continue;
    try {
      comparisons.push_back(compare_targets(w, targets[ref], targets[i], results[ref], results[i]));
    } catch (const std::exception& e) {
      results::Comparison failed;
      failed.case_name = w.name;
      failed.a = targets[ref].name;
      failed.b = targets[i].name;
      failed.parity = results::Parity::kFail;
      failed.message = "comparison could not run: " + io::first_line(e.what());
      comparisons.push_back(failed);
    }
  }
  return comparisons;
}

// The edge cases on each device once, skipped where the device is not: kanbench's own in float32,
// or those of the user's model where `model_workload` is one, in the model's dtype.
std::vector<results::EdgeCaseResult> edge_cases_on(const std::vector<Target>& targets,
                                                   const std::string& suite,
                                                   const Workload* model_workload) {
  std::vector<results::EdgeCaseResult> results;
  std::vector<torch::Device> done;
  for (const auto& first : targets) {
    if (std::find(done.begin(), done.end(), first.device) != done.end())
      continue;
    done.push_back(first.device);
    // The device's first target that can run (tf32 on the CPU cannot; the CPU still can).
    auto t = first;
    for (const auto& other : targets)
      if (other.device == first.device && other.unavailable.empty()) {
        t = other;
        break;
      }
    t.dtype = model_workload != nullptr ? model_workload->model->dtype() : torch::kFloat32;
    t.precision.reset();
    if (!t.unavailable.empty()) {
      for (const auto& name :
           model_workload != nullptr ? model_edge_case_names() : edge_case_names())
        results.push_back(skipped_edge_case(name, t.device.str(), t.unavailable));
      continue;
    }
    for (auto& e : model_workload != nullptr ? run_model_edge_cases(*model_workload, t, suite)
                                             : run_edge_cases(t, suite))
      results.push_back(std::move(e));
  }
  return results;
}

// The Chrome trace of --trace; a failed write goes to on_output_error when there is one.
// Where the machine has no GPU, each workload's GPU run rehearsed on the meta device: one traced
// step of the workload's training with the model and the data there
// (kan/diagnostics/meta_rehearsal.h). None where a GPU exists.
std::optional<results::Rehearsal> rehearse_without_gpu(const std::vector<Workload>& workloads,
                                                       torch::Dtype dtype) {
  if (torch::cuda::is_available())
    return std::nullopt;
  results::Rehearsal rehearsal;
  rehearsal.reason = "no CUDA device: " + diagnostics::cuda_unavailable_reason();
  for (const auto& w : workloads) {
    results::RehearsedCase c;
    c.case_name = w.name;
    try {
      diagnostics::MetaRehearsal on_meta;
      const auto data = w.dataset(torch::kMeta, dtype);
      const auto model = w.build_model(torch::kMeta, dtype);
      const auto fitted = diagnostics::audited_fit(*model, data, w.fit_options().steps(1), 1);
      for (const auto* findings : {&fitted.trace.findings, &fitted.audit.findings})
        c.findings.insert(c.findings.end(), findings->begin(), findings->end());
      c.operations = fitted.trace.summary.operations;
    } catch (const std::exception& e) {
      c.error = io::first_line(e.what());
    }
    rehearsal.cases.push_back(std::move(c));
  }
  return rehearsal;
}

// A TorchScript model's graphs, read statically: findings of the model, reported once, with
// the first target's case.
void check_script_graphs(const Workload& w, results::CaseResult& first) {
  const auto* script = dynamic_cast<const TorchScriptModelImpl*>(w.model.get());
  if (script == nullptr)
    return;
  for (auto f : diagnostics::check_graph(script->script()).findings) {
    f.stage = "graph";
    first.audit_findings.push_back(std::move(f));
  }
}

// The part of the plan a process runs: with a shard, the workloads and (where the edge cases
// are an item of the plan) the edge cases of its share; else all of them.
struct SuiteShare {
  std::vector<Workload> workloads;
  bool edge_cases = false;
};

SuiteShare share_of(const SuiteOptions& o, const std::vector<Workload>& workloads,
                    const std::vector<Target>& targets, const StopOnNoise& noise) {
  if (!o.shard)
    return {workloads, o.edge_cases};
  const auto runnable = static_cast<double>(std::count_if(
      targets.begin(), targets.end(), [](const Target& t) { return t.unavailable.empty(); }));
  std::vector<double> costs;
  for (const auto& w : workloads)
    costs.push_back(runnable * expected_cost(w, noise));
  if (o.edge_cases) { // about 1 s (quick), 10 s (default), 30 s (full) per device
    const double seconds = o.suite == "quick" ? 1 : o.suite == "full" ? 30 : 10;
    costs.push_back(runnable * seconds * kExpectedCostPerSecond);
  }
  SuiteShare share;
  for (const size_t item : shard_share(costs, *o.shard)) {
    if (item < workloads.size())
      share.workloads.push_back(workloads[item]);
    else
      share.edge_cases = true;
  }
  return share;
}

void write_trace(const SuiteOptions& o, const Instrumentation& instrumentation) {
  try {
    diagnostics::write_chrome_trace(o.trace_file, instrumentation.records, instrumentation.ranges);
  } catch (const std::exception& e) {
    if (!o.on_output_error)
      throw;
    o.on_output_error(io::first_line(e.what()));
  }
}

} // namespace

results::Results run_suite(const SuiteOptions& o) {
  const auto workloads = selected_workloads(o);
  const auto dtype = o.model.empty() ? torch::kFloat32 : workloads.front().model->dtype();
  const auto targets = resolve_targets(o.devices, dtype, o.precisions);
  const double limit = o.time_limit_seconds > 0 ? o.time_limit_seconds : suite_time_limit(o.suite);
  // Every kan phase (forward, backward, optimizer step, ...) is an NVTX range during the run.
  diagnostics::NvtxScopes nvtx_scopes;
  Instrumentation instrumentation;
  instrumentation.cupti = o.cupti;
  instrumentation.keep_trace = !o.trace_file.empty();
  TORCH_CHECK(o.monitor_interval_seconds >= 0 && std::isfinite(o.monitor_interval_seconds),
              "--monitor-interval must be a number of seconds >= 0, got ",
              o.monitor_interval_seconds);
  instrumentation.monitor_interval_seconds = o.monitor_interval_seconds;
  const auto noise = StopOnNoise::for_suite(o.suite, o.cv_target, o.cv_max_seconds);
  const auto share = share_of(o, workloads, targets, noise);
  ProgressReporter progress(o, share.workloads, targets, noise);
  cap_gpu_memory(targets, o.memory_fraction);

  results::Results results;
  results.environment = diagnostics::collect_environment();
  results.config = run_config(o, targets, workloads, limit);
  for (const auto& w : share.workloads) {
    std::vector<results::CaseResult> per_target;
    for (const auto& t : targets) {
      progress.case_begins(w, t);
      if (o.empty_cache)
        release_cuda_cache();
      per_target.push_back(run_case(
          w, t, limit, [&](int64_t epoch, int64_t epochs) { progress.epoch_ends(epoch, epochs); },
          &instrumentation, noise));
      progress.case_ends();
      if (per_target.size() == 1)
        check_script_graphs(w, per_target.back());
      results.cases.push_back(per_target.back());
    }
    for (auto& c : compare_with_references(w, targets, dtype, per_target))
      results.comparisons.push_back(std::move(c));
  }
  if (share.edge_cases)
    results.edge_cases =
        edge_cases_on(targets, o.suite, o.model.empty() ? nullptr : &workloads.front());
  if (!o.trace_file.empty())
    write_trace(o, instrumentation);
  results.rehearsal = rehearse_without_gpu(share.workloads, dtype);
  results.wall_seconds = progress.elapsed_seconds();
  return results;
}

} // namespace kan::bench
