// The edge cases of `kanbench run`: each ends pass / fail / skipped with a message and its
// measurements, and none may take the run down.
#include "kan/bench/measure.h"
#include "kan/bench/suite.h"
#include "kan/io/clock.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <sstream>

namespace kan::bench {
namespace {

using results::EdgeCaseResult;
using results::EdgeStatus;

bool all_finite(const torch::Tensor& t) {
  return !t.defined() || t.numel() == 0 || torch::isfinite(t).all().item<bool>();
}

// Runs one edge case; an escaping error is a failure with its message, never a crash.
EdgeCaseResult attempt(const std::string& name, const Target& t,
                       const std::function<void(EdgeCaseResult&)>& body) {
  EdgeCaseResult r;
  r.name = name;
  r.device = t.device.str();
  const auto start = io::Clock::now();
  try {
    body(r);
  } catch (const c10::Error& e) {
    r.status = EdgeStatus::kFail;
    r.message = "unexpected error: " + std::string(e.what_without_backtrace()).substr(0, 300);
  } catch (const std::exception& e) {
    r.status = EdgeStatus::kFail;
    r.message = std::string("unexpected error: ") + e.what();
  }
  r.seconds = io::seconds_since(start);
  return r;
}

// Whether fn throws a c10::Error whose message contains `expected`.
bool refuses(const std::function<void()>& fn, const std::string& expected, std::string& message) {
  try {
    fn();
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
    message = message.substr(0, message.find('\n'));
    return message.find(expected) != std::string::npos;
  }
  message = "no error";
  return false;
}

KAN small_model(const Target& t) {
  return KAN(KANOptions({2, 5, 1}).device(t.device).dtype(t.dtype));
}

Dataset toy_data(const Target& t, int64_t train, int64_t test) {
  return create_dataset(
      reference_function("toy").f,
      DatasetOptions(2).train_num(train).test_num(test).device(t.device).dtype(t.dtype));
}

EdgeCaseResult empty_input(const Target& t) {
  return attempt("empty_input", t, [&](EdgeCaseResult& r) {
    auto model = small_model(t);
    r.samples = 0;
    const auto y = model->forward(
        torch::empty({0, 2}, torch::TensorOptions().dtype(t.dtype).device(t.device)));
    std::string fit_message, grid_message;
    auto data = toy_data(t, 0, 0);
    const bool fit_refuses = refuses([&] { fit(model, data, FitOptions().steps(1)); },
                                     "non-empty training set", fit_message);
    const bool grid_refuses = refuses([&] { model->update_grid_from_samples(data.train_input); },
                                      "at least one sample", grid_message);
    const bool shape_ok = y.dim() == 2 && y.size(0) == 0 && y.size(1) == 1;
    r.status = shape_ok && fit_refuses && grid_refuses ? EdgeStatus::kPass : EdgeStatus::kFail;
    std::ostringstream m;
    m << "forward gave (" << y.size(0) << ", " << (y.dim() == 2 ? y.size(1) : -1) << ")"
      << "; fit refused: " << fit_message << "; grid update refused: " << grid_message;
    r.message = m.str();
  });
}

EdgeCaseResult single_sample(const Target& t) {
  return attempt("single_sample", t, [&](EdgeCaseResult& r) {
    auto model = small_model(t);
    auto data = toy_data(t, 1, 1);
    r.samples = 1;
    const auto y = model->forward(data.train_input);
    compute_loss(Loss::kMSE, y, data.train_label).backward();
    bool grads_finite = true;
    for (const auto& p : model->parameters())
      grads_finite = grads_finite && all_finite(p.grad());
    model->update_grid_from_samples(data.train_input);
    const auto history =
        fit(model, data, FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(1).lamb(0.01));
    bool params_finite = true;
    for (const auto& p : model->parameters())
      params_finite = params_finite && all_finite(p);
    const bool ok = all_finite(y) && grads_finite && params_finite &&
                    std::isfinite(history.steps.back().train_loss);
    r.status = ok ? EdgeStatus::kPass : EdgeStatus::kFail;
    r.message =
        ok ? "forward, backward, grid update and a regularised fit step from one sample are "
             "finite"
           : "a non-finite value: forward " + std::string(all_finite(y) ? "ok" : "NaN/Inf") +
                 ", gradients " + (grads_finite ? "ok" : "NaN/Inf") +
                 ", parameters after "
                 "the step " +
                 (params_finite ? "ok" : "NaN/Inf");
  });
}

// 2^20 samples through a model with 100 inputs: the reference basis alone would be
// N x I x (G + k) = 2^20 x 100 x 8 floats = 3.4 GB; chunked evaluation keeps the extra memory
// bounded (limit 512 MB beyond the data).
EdgeCaseResult million_samples(const Target& t, const std::string& suite) {
  return attempt("million_samples_bounded_memory", t, [&](EdgeCaseResult& r) {
    const int64_t n = suite == "quick" ? (1 << 16) : (1 << 20);
    const int64_t inputs = 100, M = 5 + 3;
    const auto& f = reference_function("highdim100");
    auto data = create_dataset(
        f.f, DatasetOptions(inputs).train_num(n).test_num(1).device(t.device).dtype(t.dtype));
    KAN model(KANOptions({inputs, 1}).grid(5).k(3).device(t.device).dtype(t.dtype));
    const int64_t limit = int64_t(512) << 20;
    const double unchunked_basis_bytes = static_cast<double>(n) * inputs * M * 4;
    PeakMemory memory(t.device);
    const auto metrics = evaluate(model, data, Loss::kMSE, /*chunk=*/16384);
    const auto measured = memory.bytes();
    TORCH_CHECK(measured.has_value(), "cannot measure peak memory here: /proc/self/clear_refs is "
                                      "not writable");
    const int64_t peak = *measured;
    // One training epoch over every sample: minibatches of at most 2^16, one permutation.
    const int64_t batch = std::min<int64_t>(n, 1 << 16);
    const auto history = fit(model, data,
                             FitOptions()
                                 .opt(Optimizer::kAdam)
                                 .lr(1e-3)
                                 .batch(batch)
                                 .batch_draw(BatchDraw::kPerEpoch)
                                 .steps((n + batch - 1) / batch)
                                 .update_grid(false));
    const bool trained =
        history.epochs.size() == 1 && std::isfinite(history.epochs.front().train_loss);
    r.samples = n;
    r.peak_memory_bytes = peak;
    r.measurements["inputs"] = static_cast<double>(inputs);
    r.measurements["unchunked_basis_bytes"] = unchunked_basis_bytes;
    r.measurements["limit_bytes"] = static_cast<double>(limit);
    r.measurements["training_epoch_seconds"] = history.seconds;
    const bool ok = peak <= limit && std::isfinite(metrics.train_rmse) && trained;
    r.status = ok ? EdgeStatus::kPass : EdgeStatus::kFail;
    std::ostringstream m;
    m << "evaluated " << n << " samples x " << inputs << " inputs in chunks of 16384 with "
      << peak / (1 << 20) << " MiB extra peak memory (limit 512 MiB; unchunked reference basis "
      << unchunked_basis_bytes / (1 << 30) << " GiB), train RMSE " << metrics.train_rmse << "; "
      << (trained ? "one training epoch" : "the training epoch did not complete") << " in "
      << history.seconds << " s";
    r.message = m.str();
  });
}

EdgeCaseResult out_of_memory(const Target& t) {
  if (!t.device.is_cuda()) {
    return skipped_edge_case("out_of_memory", t.device.str(),
                             "on the CPU an allocation past the memory kills the process; tested "
                             "on GPUs");
  }
  return attempt("out_of_memory", t, [&](EdgeCaseResult& r) {
    // A batch whose reference-backend basis needs more than the card holds.
    KAN model(KANOptions({784, 64, 10}).backend(SplineBackend::kReference).device(t.device));
    const int64_t n = int64_t(1) << 23; // basis 2^23 x 784 x 8 floats = 200 GiB
    r.samples = n;
    try {
      auto x = torch::zeros({n, 784}, torch::TensorOptions().device(t.device));
      (void)model->forward(x);
      r.status = EdgeStatus::kFail;
      r.message = "no out-of-memory error for a batch of " + std::to_string(n);
    } catch (const c10::OutOfMemoryError&) {
      release_cuda_cache();
      // The suite must go on: a small forward still works after the cache was released.
      const auto y =
          model->forward(torch::zeros({8, 784}, torch::TensorOptions().device(t.device)));
      r.status = y.size(0) == 8 ? EdgeStatus::kPass : EdgeStatus::kFail;
      r.message = "batch " + std::to_string(n) +
                  " recorded as oom, cache released, a batch of 8 "
                  "ran afterwards";
    }
  });
}

EdgeCaseResult time_limit(const Target& t) {
  return attempt("time_limit", t, [&](EdgeCaseResult& r) {
    Workload w = suite_workloads("quick").front(); // toy
    w.epochs = 50;
    const auto result = run_case(w, t, /*time_limit_seconds=*/1e-3);
    r.status =
        result.status == results::CaseStatus::kTimeout ? EdgeStatus::kPass : EdgeStatus::kFail;
    r.message = "a case with a 1 ms limit ended as '" + results::to_string(result.status) +
                "': " + result.reason;
  });
}

// A user's model (Workload::model) on empty input: one forward gives (0, outputs), and fit
// refuses the empty training set by name.
EdgeCaseResult model_empty_input(const Workload& w, const Target& t) {
  return attempt("empty_input", t, [&](EdgeCaseResult& r) {
    const auto model = w.build_model(t.device, t.dtype);
    r.samples = 0;
    const auto options = torch::TensorOptions().dtype(t.dtype).device(t.device);
    std::string forward_message = "forward gave ";
    bool shape_ok = false;
    try {
      const auto y = model->forward(torch::empty({0, model->inputs()}, options));
      shape_ok = y.dim() == 2 && y.size(0) == 0 && y.size(1) == model->outputs();
      forward_message += "(" + std::to_string(y.size(0)) + ", " +
                         std::to_string(y.dim() == 2 ? y.size(1) : -1) + ")";
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      forward_message = "forward failed: " + what.substr(0, what.find('\n'));
    }
    Dataset data;
    data.train_input = data.test_input = torch::empty({0, model->inputs()}, options);
    data.train_label = data.test_label = torch::empty({0, model->outputs()}, options);
    std::string fit_message;
    const bool fit_refuses = refuses([&] { fit(*model, data, FitOptions().steps(1)); },
                                     "non-empty training set", fit_message);
    r.status = shape_ok && fit_refuses ? EdgeStatus::kPass : EdgeStatus::kFail;
    r.message = forward_message + "; fit refused: " + fit_message;
  });
}

// One sample through a user's model: forward, backward and one Adam step stay finite.
EdgeCaseResult model_single_sample(const Workload& w, const Target& t) {
  return attempt("single_sample", t, [&](EdgeCaseResult& r) {
    const auto model = w.build_model(t.device, t.dtype);
    auto data = synthetic_model_data(*model, 1, 1, w.seed, w.loss).to(t.dtype).to(t.device);
    r.samples = 1;
    const auto y = model->forward(data.train_input);
    compute_loss(w.loss, y, data.train_label).backward();
    bool grads_finite = true;
    for (const auto& p : model->module().parameters())
      grads_finite = grads_finite && all_finite(p.grad());
    const auto history =
        fit(*model, data, FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(1).loss(w.loss));
    bool params_finite = true;
    for (const auto& p : model->module().parameters())
      params_finite = params_finite && all_finite(p);
    const bool ok = all_finite(y) && grads_finite && params_finite &&
                    std::isfinite(history.steps.back().train_loss);
    r.status = ok ? EdgeStatus::kPass : EdgeStatus::kFail;
    r.message = ok ? "forward, backward and an Adam step from one sample are finite"
                   : "a non-finite value: forward " +
                         std::string(all_finite(y) ? "ok" : "NaN/Inf") + ", gradients " +
                         (grads_finite ? "ok" : "NaN/Inf") + ", parameters after the step " +
                         (params_finite ? "ok" : "NaN/Inf");
  });
}

// 2^20 samples (2^16 in quick) streamed through a user's model in chunks of 16384, evaluated and
// trained for one epoch of minibatches: the peak memory beyond the data, against 512 MiB.
EdgeCaseResult model_million_samples(const Workload& w, const Target& t, const std::string& suite) {
  return attempt("million_samples_bounded_memory", t, [&](EdgeCaseResult& r) {
    const int64_t n = suite == "quick" ? (1 << 16) : (1 << 20);
    const auto model = w.build_model(t.device, t.dtype);
    const auto data = shape_only_data(*model, n, w.loss);
    const int64_t limit = int64_t(512) << 20;
    PeakMemory memory(t.device);
    const auto metrics = evaluate(*model, data, w.loss, /*chunk=*/16384);
    const int64_t batch = std::min<int64_t>(n, 16384);
    const auto history = fit(*model, data,
                             FitOptions()
                                 .opt(Optimizer::kAdam)
                                 .lr(1e-3)
                                 .loss(w.loss)
                                 .batch(batch)
                                 .batch_draw(BatchDraw::kPerEpoch)
                                 .steps((n + batch - 1) / batch)
                                 .update_grid(false));
    const auto measured = memory.bytes();
    TORCH_CHECK(measured.has_value(), "cannot measure peak memory here: /proc/self/clear_refs is "
                                      "not writable");
    const bool trained =
        history.epochs.size() == 1 && std::isfinite(history.epochs.front().train_loss);
    r.samples = n;
    r.peak_memory_bytes = *measured;
    r.measurements["inputs"] = static_cast<double>(model->inputs());
    r.measurements["limit_bytes"] = static_cast<double>(limit);
    r.measurements["training_epoch_seconds"] = history.seconds;
    const bool ok = *measured <= limit && std::isfinite(metrics.train_rmse) && trained;
    r.status = ok ? EdgeStatus::kPass : EdgeStatus::kFail;
    std::ostringstream m;
    m << "evaluated " << n << " samples x " << model->inputs() << " inputs in chunks of 16384 and "
      << (trained ? "trained one epoch" : "did not complete a training epoch") << " in batches of "
      << batch << " with " << *measured / (1 << 20)
      << " MiB extra peak memory (limit 512 MiB), train RMSE " << metrics.train_rmse;
    r.message = m.str();
  });
}

} // namespace

results::EdgeCaseResult skipped_edge_case(const std::string& name, const std::string& device,
                                          const std::string& reason) {
  EdgeCaseResult r;
  r.name = name;
  r.device = device;
  r.status = EdgeStatus::kSkipped;
  r.message = reason;
  return r;
}

const std::vector<std::string>& edge_case_names() {
  static const std::vector<std::string> names = {"empty_input", "single_sample",
                                                 "million_samples_bounded_memory", "out_of_memory",
                                                 "time_limit"};
  return names;
}

const std::vector<std::string>& model_edge_case_names() {
  static const std::vector<std::string> names = {"empty_input", "single_sample",
                                                 "million_samples_bounded_memory"};
  return names;
}

std::vector<results::EdgeCaseResult> run_edge_cases(const Target& target,
                                                    const std::string& suite) {
  return {empty_input(target), single_sample(target), million_samples(target, suite),
          out_of_memory(target), time_limit(target)};
}

std::vector<results::EdgeCaseResult>
run_model_edge_cases(const Workload& workload, const Target& target, const std::string& suite) {
  return {model_empty_input(workload, target), model_single_sample(workload, target),
          model_million_samples(workload, target, suite)};
}

} // namespace kan::bench
