#include "kan/results/results_io.h"

#include "kan/io/atomic_file.h"
#include "kan/io/json_fields.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

namespace kan::results {

using json = nlohmann::json;
using io::Bound;
using io::ObjectReader;

// Each struct's keys, for both directions (kan/io/json_fields.h); the checks only a reader makes
// follow the keys they check. They are static: this file is their one user, and
// argument-dependent lookup finds them here, beside their structs.

constexpr Bound kCount = Bound::kNonNegative; // counts, sizes, times and rates

// A number of a list that must be at least `min` (a batch, a grid).
static void check_at_least(int64_t value, int64_t min, const std::string& path) {
  if (value < min)
    io::fail(path,
             "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(value));
}
static void check_at_least(const std::vector<int64_t>& values, int64_t min,
                           const std::string& path) {
  for (size_t i = 0; i < values.size(); ++i)
    check_at_least(values[i], min, io::index_path(path, i));
}

// A status other than ok says why.
template <typename Reader>
static void check_reason(Reader& f, CaseStatus status, const std::string& reason) {
  if (status != CaseStatus::kOk && reason.empty())
    io::fail(f.path_of("reason"), "is empty but status is \"" + to_string(status) + "\" (say why)");
}

template <typename Fields> static void fields(Fields& f, EpochActivity& x) {
  f.required("kernels", x.kernels, kCount);
  f.required("busy_seconds", x.busy_seconds, kCount);
  f.required("wall_seconds", x.wall_seconds, kCount);
  f.required("busy_fraction", x.busy_fraction, Bound::kFraction);
  f.required("h2d_copies", x.h2d_copies, kCount);
  f.required("h2d_bytes", x.h2d_bytes, kCount);
  f.required("d2h_copies", x.d2h_copies, kCount);
  f.required("d2h_bytes", x.d2h_bytes, kCount);
}

template <typename Fields> static void fields(Fields& f, GpuActivity& x) {
  f.required("traced", x.traced);
  f.required("reason", x.reason);
  f.required("epochs", x.epochs);
}

template <typename Fields> static void fields(Fields& f, MonitorSample& x) {
  f.required("seconds", x.seconds, kCount);
  f.optional("gpu_utilization_percent", x.gpu_utilization_percent, kCount);
  f.optional("memory_utilization_percent", x.memory_utilization_percent, kCount);
  f.optional("memory_used_bytes", x.memory_used_bytes, kCount);
  f.optional("sm_clock_mhz", x.sm_clock_mhz, kCount);
  f.optional("power_watts", x.power_watts, kCount);
  f.optional("temperature_celsius", x.temperature_celsius);
  f.optional("throttle_reasons", x.throttle_reasons);
  f.optional("cpu_utilization_percent", x.cpu_utilization_percent, kCount);
}

template <typename Fields> static void fields(Fields& f, MetricSummary& x) {
  f.required("mean", x.mean);
  f.required("max", x.max);
}

template <typename Fields> static void fields(Fields& f, DeviceMonitoring& x) {
  f.required("source", x.source);
  f.required("available", x.available);
  f.optional("reason", x.reason);
  f.required("interval_seconds", x.interval_seconds, kCount);
  f.required("samples", x.samples);
  f.required("summary", x.summary);
  f.optional("throttle_reasons", x.throttle_reasons);
  f.optional("findings", x.findings);
  if constexpr (Fields::reading())
    if (!x.available && x.reason.empty())
      io::fail(f.path_of("reason"), "is empty but available is false (say why)");
}

template <typename Fields> static void fields(Fields& f, ActivationCurve& x) {
  f.required("layer", x.layer, kCount);
  f.required("input", x.input, kCount);
  f.required("output", x.output, kCount);
  f.required("x", x.x);
  f.required("y", x.y);
  if constexpr (Fields::reading())
    if (x.x.size() != x.y.size())
      io::fail(f.path_of("y"), "has " + std::to_string(x.y.size()) + " values but x has " +
                                   std::to_string(x.x.size()));
}

// The statistics a case states must be those of its epoch times, as fill_epoch_statistics()
// defines them: a file that contradicts itself is refused rather than shown. The tolerance is
// relative, 1e-9 of the larger value; for the IQR, a difference of two quantiles, of the
// quantiles' size (another producer's quantiles may differ in their last bits).
static void check_epoch_statistics(const CaseResult& c, const ObjectReader& r) {
  CaseResult expected;
  expected.epoch_seconds = c.epoch_seconds;
  expected.steps_per_epoch = c.steps_per_epoch;
  expected.samples_per_epoch = c.samples_per_epoch;
  fill_epoch_statistics(expected);
  const auto check = [&](const char* key, const std::optional<double>& stated,
                         const std::optional<double>& computed, const std::string& what,
                         double scale) {
    if (!stated)
      return;
    if (!computed) {
      if (c.epoch_seconds.empty())
        io::fail(r.path_of(key), "is " + io::format_number(*stated) +
                                     " but epoch_seconds is empty (it is " + what + ")");
      return; // a rate without steps_per_epoch, or with a median of 0: nothing to compare
    }
    const double tolerance = 1e-9 * std::max({std::fabs(*stated), std::fabs(*computed), scale});
    if (!(std::fabs(*stated - *computed) <= tolerance))
      io::fail(r.path_of(key), "is " + io::format_number(*stated) + " but " + what + " is " +
                                   io::format_number(*computed));
  };
  // q3 <= median + IQR: the size of the quantiles the IQR is the difference of.
  const double quantiles = expected.median_epoch_seconds
                               ? *expected.median_epoch_seconds + *expected.iqr_epoch_seconds
                               : 0;
  check("median_epoch_seconds", c.median_epoch_seconds, expected.median_epoch_seconds,
        "the median of epoch_seconds", 0);
  check("iqr_epoch_seconds", c.iqr_epoch_seconds, expected.iqr_epoch_seconds,
        "the interquartile range of epoch_seconds", quantiles);
  check("min_epoch_seconds", c.min_epoch_seconds, expected.min_epoch_seconds,
        "the minimum of epoch_seconds", 0);
  check("max_epoch_seconds", c.max_epoch_seconds, expected.max_epoch_seconds,
        "the maximum of epoch_seconds", 0);
  check("steps_per_second", c.steps_per_second, expected.steps_per_second,
        "steps_per_epoch / the median of epoch_seconds", 0);
  check("samples_per_second", c.samples_per_second, expected.samples_per_second,
        "samples_per_epoch / the median of epoch_seconds", 0);
}

// What a case's status promises.
static void check_case(const CaseResult& c, io::JsonReader& f) {
  if (c.name.empty())
    io::fail(f.path_of("name"), "must not be empty");
  if (c.target.empty())
    io::fail(f.path_of("target"), "must not be empty");
  if (c.model_kind && *c.model_kind != "kan" && *c.model_kind != "mlp" &&
      *c.model_kind != "torchscript")
    io::fail(f.path_of("model_kind"),
             "expected \"kan\", \"mlp\" or \"torchscript\", got " + io::quoted(*c.model_kind));
  if (c.precision && *c.precision != "tf32" && *c.precision != "bf16" && *c.precision != "fp16")
    io::fail(f.path_of("precision"),
             "expected \"tf32\", \"bf16\" or \"fp16\", got " + io::quoted(*c.precision));
  const auto& path = f.object().path();
  if (c.status == CaseStatus::kOk) {
    if (c.epoch_seconds.empty())
      io::fail(f.path_of("epoch_seconds"), "is empty but status is \"ok\"");
    if (!c.median_epoch_seconds)
      io::fail(f.path_of("median_epoch_seconds"), "is null but status is \"ok\"");
    if (!c.iqr_epoch_seconds)
      io::fail(f.path_of("iqr_epoch_seconds"), "is null but status is \"ok\"");
    if (!c.final_test_rmse && !c.final_accuracy)
      io::fail(path, "status is \"ok\" but neither final_test_rmse nor final_accuracy is "
                     "given");
  } else {
    check_reason(f, c.status, c.reason);
    if (c.status == CaseStatus::kSkipped && (!c.epoch_seconds.empty() || c.median_epoch_seconds))
      io::fail(path, "status is \"skipped\" but it has epoch times (a skipped case has no "
                     "numbers)");
  }
  check_epoch_statistics(c, f.object());
}

template <typename Fields> static void fields(Fields& f, CaseResult& c) {
  f.required("name", c.name);
  f.required("target", c.target);
  f.required("device", c.device);
  f.required("dtype", c.dtype);
  f.enumeration("status", c.status, kCaseStatusNames);
  f.required("reason", c.reason);
  f.required("epoch_seconds", c.epoch_seconds, kCount);
  f.nullable("median_epoch_seconds", c.median_epoch_seconds, kCount);
  f.nullable("iqr_epoch_seconds", c.iqr_epoch_seconds, kCount);
  f.nullable("peak_memory_bytes", c.peak_memory_bytes, kCount);
  // The contract: final_test_rmse or final_accuracy; whichever is known (both may be).
  f.optional("final_test_rmse", c.final_test_rmse, kCount);
  f.optional("final_accuracy", c.final_accuracy, Bound::kFraction);
  f.optional("model_kind", c.model_kind);
  f.optional("parameters", c.parameters, kCount);
  f.optional("forward_flops", c.forward_flops, kCount);
  f.optional("backend", c.backend);
  f.optional("threads", c.threads, kCount);
  f.optional("warmup_epochs", c.warmup_epochs, kCount);
  f.optional("min_epoch_seconds", c.min_epoch_seconds, kCount);
  f.optional("max_epoch_seconds", c.max_epoch_seconds, kCount);
  f.optional("steps_per_epoch", c.steps_per_epoch, kCount);
  f.optional("samples_per_epoch", c.samples_per_epoch, kCount);
  f.optional("steps_per_second", c.steps_per_second, kCount);
  f.optional("samples_per_second", c.samples_per_second, kCount);
  f.optional("timer", c.timer);
  f.optional("memory_kind", c.memory_kind);
  f.optional("peak_reserved_bytes", c.peak_reserved_bytes, kCount);
  f.optional("epoch_cv", c.epoch_cv, kCount);
  f.optional("cv_target", c.cv_target, kCount);
  f.optional("cv_target_met", c.cv_target_met);
  f.optional("precision", c.precision);
  f.optional("precision_detail", c.precision_detail);
  f.optional("train_loss_per_epoch", c.train_loss_per_epoch);
  f.optional("test_loss_per_epoch", c.test_loss_per_epoch);
  f.optional("config", c.config);
  f.optional("gpu_activity", c.gpu_activity);
  f.optional("monitoring", c.monitoring);
  f.optional("audit_findings", c.audit_findings);
  f.optional("activations", c.activations);
  f.optional("host", c.host);
  if constexpr (Fields::reading())
    check_case(c, f);
}

template <typename Fields> static void fields(Fields& f, Comparison& c) {
  f.required("case", c.case_name);
  f.required("a", c.a);
  f.required("b", c.b);
  // Ratios of times and sizes of differences: none can be negative.
  f.nullable("speedup", c.speedup, kCount);
  f.nullable("max_abs_output_diff", c.max_abs_output_diff, kCount);
  f.nullable("max_rel_loss_diff", c.max_rel_loss_diff, kCount);
  f.nullable("final_metric_rel_diff", c.final_metric_rel_diff, kCount);
  f.enumeration("parity", c.parity, kParityNames);
  f.optional("label", c.label);
  f.optional("speedup_low", c.speedup_low, kCount);
  f.optional("speedup_high", c.speedup_high, kCount);
  f.optional("max_rel_output_diff", c.max_rel_output_diff, kCount);
  f.optional("max_abs_grad_diff", c.max_abs_grad_diff, kCount);
  f.optional("max_rel_grad_diff", c.max_rel_grad_diff, kCount);
  f.optional("final_accuracy_diff_points", c.final_accuracy_diff_points, kCount);
  f.optional("tolerances", c.tolerances, kCount);
  f.optional("message", c.message);
}

template <typename Fields> static void fields(Fields& f, RehearsedCase& c) {
  f.required("case", c.case_name);
  f.required("findings", c.findings);
  f.required("operations", c.operations, kCount);
  f.optional("error", c.error);
}

template <typename Fields> static void fields(Fields& f, Rehearsal& r) {
  f.required("reason", r.reason);
  f.required("cases", r.cases);
}

template <typename Fields> static void fields(Fields& f, EdgeCaseResult& e) {
  f.required("name", e.name);
  f.required("device", e.device);
  f.enumeration("status", e.status, kEdgeStatusNames);
  f.required("message", e.message);
  f.optional("samples", e.samples, kCount);
  f.optional("peak_memory_bytes", e.peak_memory_bytes, kCount);
  f.optional("seconds", e.seconds, kCount);
  f.optional("measurements", e.measurements);
}

template <typename Fields> static void fields(Fields& f, ScalingResult& s) {
  f.required("case", s.case_name);
  f.required("device", s.device);
  f.required("backend", s.backend);
  f.required("ranks", s.ranks, kCount);
  f.enumeration("status", s.status, kCaseStatusNames);
  f.optional("reason", s.reason);
  f.required("epoch_seconds", s.epoch_seconds, kCount);
  f.nullable("median_epoch_seconds", s.median_epoch_seconds, kCount);
  f.nullable("speedup", s.speedup, kCount);
  f.nullable("efficiency", s.efficiency, kCount);
  f.nullable("max_rel_loss_diff", s.max_rel_loss_diff, kCount);
  f.optional("communication_seconds", s.communication_seconds, kCount);
  f.optional("collectives_per_step", s.collectives_per_step, kCount);
  f.optional("bytes_per_step", s.bytes_per_step, kCount);
  f.optional("train_loss_per_epoch", s.train_loss_per_epoch);
  if constexpr (Fields::reading())
    check_at_least(s.ranks, 1, f.path_of("ranks"));
}

template <typename Fields> static void fields(Fields& f, SweepPoint& p) {
  f.required("case", p.case_name);
  f.required("target", p.target);
  f.required("device", p.device);
  f.required("dtype", p.dtype);
  f.required("batch", p.batch, kCount);
  f.enumeration("status", p.status, kCaseStatusNames);
  f.optional("reason", p.reason);
  f.required("epoch_seconds", p.epoch_seconds, kCount);
  f.nullable("median_epoch_seconds", p.median_epoch_seconds, kCount);
  f.nullable("samples_per_second", p.samples_per_second, kCount);
  f.optional("epoch_cv", p.epoch_cv, kCount);
  f.optional("peak_memory_bytes", p.peak_memory_bytes, kCount);
  f.optional("audit_findings", p.audit_findings);
  f.optional("host", p.host);
  if constexpr (Fields::reading()) {
    check_at_least(p.batch, 1, f.path_of("batch"));
    if (p.status == CaseStatus::kOk && !p.median_epoch_seconds)
      io::fail(f.path_of("median_epoch_seconds"), "is null but status is \"ok\"");
    check_reason(f, p.status, p.reason);
  }
}

// One try of the largest batch's search.
struct BatchAttempt {
  int64_t batch = 0;
  bool fits = false;
};
template <typename Fields> static void fields(Fields& f, BatchAttempt& a) {
  f.required("batch", a.batch, kCount);
  f.required("fits", a.fits);
}

template <typename Fields> static void fields(Fields& f, SweepTarget& t) {
  f.required("case", t.case_name);
  f.required("target", t.target);
  f.nullable("best_batch", t.best_batch, kCount);
  f.nullable("best_samples_per_second", t.best_samples_per_second, kCount);
  f.nullable("saturation_batch", t.saturation_batch, kCount);
  f.nullable("max_batch", t.max_batch, kCount);
  std::vector<BatchAttempt> attempts;
  for (const auto& [batch, fits] : t.max_batch_attempts)
    attempts.push_back({batch, fits});
  f.optional("max_batch_attempts", attempts);
  if constexpr (Fields::reading())
    for (const auto& a : attempts)
      t.max_batch_attempts.emplace_back(a.batch, a.fits);
  f.optional("max_batch_reason", t.max_batch_reason);
}

template <typename Fields> static void fields(Fields& f, Crossover& c) {
  f.required("case", c.case_name);
  f.required("a", c.a);
  f.required("b", c.b);
  f.nullable("batch", c.batch, kCount);
  f.required("message", c.message);
}

template <typename Fields> static void fields(Fields& f, Sweep& s) {
  f.required("batches", s.batches, kCount);
  f.required("points", s.points);
  f.required("targets", s.targets);
  f.required("crossovers", s.crossovers);
  if constexpr (Fields::reading()) {
    check_at_least(s.batches, 1, f.path_of("batches"));
    for (size_t i = 0; i < s.points.size(); ++i)
      if (std::find(s.batches.begin(), s.batches.end(), s.points[i].batch) == s.batches.end())
        io::fail(io::child_path(io::index_path(f.path_of("points"), i), "batch"),
                 std::to_string(s.points[i].batch) + " is not one of the sweep's batches");
  }
}

template <typename Fields> static void fields(Fields& f, AccuracyPointRef& ref) {
  f.required("fit", ref.fit, kCount);
  f.required("point", ref.point, kCount);
}

template <typename Fields> static void fields(Fields& f, AccuracyPoint& p) {
  f.required("stage", p.stage);
  f.required("grid", p.grid, kCount);
  f.required("parameters", p.parameters, kCount);
  f.required("forward_flops", p.forward_flops, kCount);
  // A diverged or unmeasured stage's RMSE (NaN or infinite) has no JSON number: null.
  f.metric("train_rmse", p.train_rmse);
  f.metric("test_rmse", p.test_rmse);
  f.required("seconds", p.seconds, kCount);
  if constexpr (Fields::reading())
    if (p.stage.empty())
      io::fail(f.path_of("stage"), "must not be empty");
}

template <typename Fields> static void fields(Fields& f, AccuracyFit& x) {
  f.required("function", x.function);
  f.required("device", x.device);
  f.required("family", x.family);
  f.required("role", x.role);
  f.required("width", x.width, kCount);
  f.required("activation", x.activation);
  f.required("seed", x.seed);
  f.required("points", x.points);
  f.required("seconds", x.seconds, kCount);
  f.required("error", x.error);
  f.optional("host", x.host);
  if constexpr (Fields::reading()) {
    if (x.family != "kan" && x.family != "mlp")
      io::fail(f.path_of("family"), "expected one of kan, mlp; got " + io::quoted(x.family));
    if (x.function.empty())
      io::fail(f.path_of("function"), "must not be empty");
    if (x.device.empty())
      io::fail(f.path_of("device"), "must not be empty");
    if (x.error.empty() && x.points.empty())
      io::fail(f.path_of("points"), "is empty but error is empty (a fit that did not fail has "
                                    "its stages' points)");
  }
}

template <typename Fields> static void fields(Fields& f, PublishedAccuracy& p) {
  f.required("source", p.source);
  f.required("minimal_kan_width", p.minimal_kan_width, kCount);
  f.nullable("minimal_kan_test_rmse", p.minimal_kan_test_rmse, kCount);
  f.required("best_kan_width", p.best_kan_width, kCount);
  f.nullable("best_kan_test_rmse", p.best_kan_test_rmse, kCount);
  f.nullable("mlp_test_rmse", p.mlp_test_rmse, kCount);
}

template <typename Fields> static void fields(Fields& f, AccuracyFunction& x) {
  f.required("function", x.function);
  f.required("device", x.device);
  f.required("formula", x.formula);
  f.nullable("published", x.published);
  f.required("fits", x.fits, kCount);
  f.required("failed", x.failed, kCount);
  f.nullable("best_kan", x.best_kan);
  f.nullable("best_mlp", x.best_mlp);
  f.required("pareto", x.pareto);
  f.nullable("kan_beats_mlp", x.kan_beats_mlp);
  f.required("seconds", x.seconds, kCount);
}

// A point reference as the messages show it: "accuracy.fits[0].points[3] (test RMSE 0.002)".
static std::string describe_ref(const AccuracyRun& run, const std::optional<AccuracyPointRef>& ref,
                                const std::string& fits_path) {
  if (!ref)
    return "null";
  const auto& point =
      run.fits[static_cast<size_t>(ref->fit)].points[static_cast<size_t>(ref->point)];
  return io::index_path(
             io::child_path(io::index_path(fits_path, static_cast<size_t>(ref->fit)), "points"),
             static_cast<size_t>(ref->point)) +
         " (test RMSE " + io::format_number(point.test_rmse) + ", " +
         std::to_string(point.parameters) + " parameters)";
}

// Where a reference points must exist: a fit of the run and a point of that fit.
static void check_ref(const AccuracyRun& run, const AccuracyPointRef& ref, const std::string& path,
                      const std::string& fits_path) {
  if (static_cast<size_t>(ref.fit) >= run.fits.size())
    io::fail(io::child_path(path, "fit"), std::to_string(ref.fit) + " is not a fit (" + fits_path +
                                              " has " + std::to_string(run.fits.size()) + ")");
  const auto& fit = run.fits[static_cast<size_t>(ref.fit)];
  if (static_cast<size_t>(ref.point) >= fit.points.size())
    io::fail(io::child_path(path, "point"),
             std::to_string(ref.point) + " is not a point of " +
                 io::index_path(fits_path, static_cast<size_t>(ref.fit)) + " (it has " +
                 std::to_string(fit.points.size()) + ")");
}

// The derived fields of each summary entry must be what summarize_accuracy() makes of the fits:
// a file whose summary contradicts what it summarises is refused rather than shown.
static void check_accuracy_summary(const AccuracyRun& run, const std::string& path) {
  const auto fits_path = io::child_path(path, "fits");
  const auto summary_path = io::child_path(path, "summary");
  AccuracyRun expected = run;
  summarize_accuracy(expected);
  for (size_t k = 0; k < run.summary.size(); ++k) {
    const auto& s = run.summary[k];
    const auto& e = expected.summary[k];
    const auto entry = io::index_path(summary_path, k);
    const auto key = [&](const char* name) { return io::child_path(entry, name); };
    const std::string of = io::quoted(s.function) + " on " + io::quoted(s.device);
    for (const auto& [name, ref] :
         {std::pair{"best_kan", s.best_kan}, std::pair{"best_mlp", s.best_mlp}})
      if (ref)
        check_ref(run, *ref, key(name), fits_path);
    for (size_t i = 0; i < s.pareto.size(); ++i)
      check_ref(run, s.pareto[i], io::index_path(key("pareto"), i), fits_path);

    if (s.fits != e.fits)
      io::fail(key("fits"), "is " + std::to_string(s.fits) + " but " + fits_path + " has " +
                                std::to_string(e.fits) + " fits of " + of);
    if (s.failed != e.failed)
      io::fail(key("failed"), "is " + std::to_string(s.failed) + " but " +
                                  std::to_string(e.failed) + " of the fits of " + of + " failed");
    for (const auto& [name, family, stated, computed] :
         {std::tuple{"best_kan", "KAN", s.best_kan, e.best_kan},
          std::tuple{"best_mlp", "MLP", s.best_mlp, e.best_mlp}})
      if (!(stated == computed))
        io::fail(key(name), "is " + describe_ref(run, stated, fits_path) + " but the " + family +
                                " point of lowest test RMSE of " + of + " is " +
                                describe_ref(run, computed, fits_path));
    if (s.pareto != e.pareto) {
      const auto list = [&](const std::vector<AccuracyPointRef>& refs) {
        std::string text = "[";
        for (size_t i = 0; i < refs.size(); ++i)
          text += (i ? ", " : "") + describe_ref(run, refs[i], fits_path);
        return io::elided(text + "]", 400, /*say_length=*/true);
      };
      io::fail(key("pareto"), "is " + list(s.pareto) + " but the Pareto front of the points of " +
                                  of + " is " + list(e.pareto));
    }
    if (s.kan_beats_mlp != e.kan_beats_mlp) {
      const auto text = [](const std::optional<bool>& b) {
        return b ? std::string(*b ? "true" : "false") : std::string("null");
      };
      io::fail(key("kan_beats_mlp"),
               "is " + text(s.kan_beats_mlp) + " but the best KAN and MLP points of " + of + " (" +
                   describe_ref(run, e.best_kan, fits_path) + ", " +
                   describe_ref(run, e.best_mlp, fits_path) + ") make it " + text(e.kan_beats_mlp));
    }
    if (!(std::fabs(s.seconds - e.seconds) <= 1e-9 * std::max({1.0, s.seconds, e.seconds})))
      io::fail(key("seconds"), "is " + io::format_number(s.seconds) +
                                   " but the seconds of the fits of " + of + " sum to " +
                                   io::format_number(e.seconds));
  }
}

// The fits are unique, and the summary has one entry per function and device: those of the run,
// and every fit's.
static void check_accuracy_run(const AccuracyRun& a, const ObjectReader& r) {
  if (static_cast<int64_t>(a.fits.size()) > a.planned_fits)
    io::fail(r.path_of("planned_fits"), "is " + std::to_string(a.planned_fits) + " but " +
                                            r.path_of("fits") + " has " +
                                            std::to_string(a.fits.size()) + " fits");
  // Fits are unique by key (a resumed run skips a fit by it).
  std::map<std::string, size_t> keys;
  for (size_t i = 0; i < a.fits.size(); ++i) {
    const auto [first, added] = keys.emplace(a.fits[i].key(), i);
    if (!added)
      io::fail(io::index_path(r.path_of("fits"), i),
               "same key " + io::quoted(first->first) + " as " +
                   io::index_path(r.path_of("fits"), first->second) +
                   " (function, device, family, width, activation and seed)");
  }
  // One summary entry per function and device of the run, and one for every fit's.
  const auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (size_t k = 0; k < a.summary.size(); ++k) {
    const auto& s = a.summary[k];
    const auto entry = io::index_path(r.path_of("summary"), k);
    if (!listed(a.functions, s.function))
      io::fail(io::child_path(entry, "function"),
               io::quoted(s.function) + " is not one of " + r.path_of("functions"));
    if (!listed(a.devices, s.device))
      io::fail(io::child_path(entry, "device"),
               io::quoted(s.device) + " is not one of " + r.path_of("devices"));
    for (size_t j = 0; j < k; ++j)
      if (a.summary[j].function == s.function && a.summary[j].device == s.device)
        io::fail(entry, "same function " + io::quoted(s.function) + " and device " +
                            io::quoted(s.device) + " as " +
                            io::index_path(r.path_of("summary"), j));
  }
  for (size_t i = 0; i < a.fits.size(); ++i) {
    const auto& f = a.fits[i];
    if (std::none_of(a.summary.begin(), a.summary.end(), [&](const AccuracyFunction& s) {
          return s.function == f.function && s.device == f.device;
        }))
      io::fail(io::index_path(r.path_of("fits"), i),
               "no entry of " + r.path_of("summary") + " is for its function " +
                   io::quoted(f.function) + " on " + io::quoted(f.device));
  }
  check_accuracy_summary(a, r.path());
}

template <typename Fields> static void fields(Fields& f, AccuracyRun& x) {
  f.required("table", x.table);
  f.required("preset", x.preset);
  f.required("functions", x.functions);
  f.required("devices", x.devices);
  f.required("seeds", x.seeds);
  f.required("train_num", x.train_num, kCount);
  f.required("test_num", x.test_num, kCount);
  f.required("grids", x.grids, kCount);
  f.required("steps", x.steps, kCount);
  f.required("jobs", x.jobs, kCount);
  f.required("threads_per_fit", x.threads_per_fit, kCount);
  f.required("planned_fits", x.planned_fits, kCount);
  f.required("wall_seconds", x.wall_seconds, kCount);
  f.required("fits", x.fits);
  f.required("summary", x.summary);
  if constexpr (Fields::reading()) {
    check_at_least(x.grids, 1, f.path_of("grids"));
    check_accuracy_run(x, f.object());
  }
}

template <typename Fields> static void fields(Fields& f, Shard& s) {
  f.required("index", s.index, kCount);
  f.required("count", s.count, kCount);
  f.required("source", s.source);
  if constexpr (Fields::reading()) {
    if (s.count < 1)
      io::fail(f.path_of("count"), "must be >= 1, got " + std::to_string(s.count));
    if (s.index >= s.count)
      io::fail(f.path_of("index"),
               std::to_string(s.index) + " is not below count " + std::to_string(s.count));
  }
}

template <typename Fields> static void fields(Fields& f, RunConfig& c) {
  f.required("suite", c.suite);
  f.required("devices", c.devices);
  f.required("repeat", c.repeat, kCount);
  f.optional("warmup", c.warmup, kCount);
  f.optional("cases", c.cases);
  f.optional("seed", c.seed);
  f.optional("time_limit_seconds", c.time_limit_seconds, kCount);
  f.optional("cupti", c.cupti);
  f.optional("trace", c.trace);
  f.optional("out", c.out);
  f.optional("shard", c.shard);
  f.optional("extra", c.extra);
}

template <typename Fields> static void fields(Fields& f, CudaDevice& d) {
  f.required("index", d.index, kCount);
  f.required("name", d.name);
  f.required("compute_capability", d.compute_capability);
  f.required("multiprocessors", d.multiprocessors, kCount);
  f.required("total_memory_bytes", d.total_memory_bytes, kCount);
  f.required("free_memory_bytes", d.free_memory_bytes, kCount);
}

template <typename Fields> static void fields(Fields& f, EnvironmentProblem& p) {
  f.required("what", p.what);
  f.required("fix", p.fix);
}

template <typename Fields> static void fields(Fields& f, Environment& e) {
  f.required("kanbench_version", e.kanbench_version);
  f.required("git_commit", e.git_commit);
  f.required("date", e.date);
  f.required("hostname", e.hostname);
  f.required("libtorch_version", e.libtorch_version);
  f.required("cuda_build_version", e.cuda_build_version);
  f.required("cudnn_build_version", e.cudnn_build_version);
  f.required("cuda_runtime_version", e.cuda_runtime_version);
  f.required("cuda_driver_version", e.cuda_driver_version);
  f.required("cuda_available", e.cuda_available);
  f.required("cuda_unavailable_reason", e.cuda_unavailable_reason);
  f.nullable("cuda_visible_devices", e.cuda_visible_devices);
  f.required("cuda_devices", e.cuda_devices);
  f.required("cpu_model", e.cpu_model);
  f.required("cpu_cores", e.cpu_cores, kCount);
  f.required("torch_threads", e.torch_threads, kCount);
  f.required("nvtx_available", e.nvtx_available);
  f.required("cupti_available", e.cupti_available);
  f.optional("cpu_governor", e.cpu_governor);
  f.optional("load_average", e.load_average, kCount);
  f.required("problems", e.problems);
}

template <typename Fields> static void fields(Fields& f, MergedShard& s) {
  f.required("shard", s.shard);
  f.required("folder", s.folder);
  f.required("run_id", s.run_id);
  f.required("environment", s.environment);
  f.optional("wall_seconds", s.wall_seconds, kCount);
}

// Cross references: cases are unique by (name, target); comparisons name existing cases.
static void check_references(const Results& results) {
  for (size_t i = 0; i < results.cases.size(); ++i) {
    const auto& c = results.cases[i];
    for (size_t k = 0; k < i; ++k)
      if (results.cases[k].name == c.name && results.cases[k].target == c.target)
        io::fail(io::index_path("cases", i),
                 "same name " + io::quoted(c.name) + " and target " + io::quoted(c.target) +
                     " as " + io::index_path("cases", k) + " (give each target its own label)");
  }
  for (size_t i = 0; i < results.comparisons.size(); ++i) {
    const auto& c = results.comparisons[i];
    const auto path = io::index_path("comparisons", i);
    for (const auto& [key, target] : {std::pair{"a", &c.a}, std::pair{"b", &c.b}})
      if (!results.find_case(c.case_name, *target))
        io::fail(io::child_path(path, key), "no case with name " + io::quoted(c.case_name) +
                                                " and target " + io::quoted(*target) + " in cases");
  }
}

// A part that came with schema 1.`since`: refused in an older file.
static void check_since(ObjectReader& r, const char* key, int since, int minor,
                        const std::string& version) {
  if (minor < since && r.optional(key))
    io::fail(key, "not part of schema " + version + " (from 1." + std::to_string(since) + ".0)");
}

template <typename Fields> static void fields(Fields& f, Results& x) {
  f.required("schema_version", x.schema_version);
  // run_id came with 1.1.0: required from then on, unknown (refused) in 1.0 files, whose
  // Results have none.
  if constexpr (Fields::reading()) {
    const int minor = io::minor_version(x.schema_version.c_str());
    x.run_id.clear();
    if (minor >= 1) {
      f.required("run_id", x.run_id);
      if (!is_valid_run_id(x.run_id))
        io::fail("run_id",
                 "expected 1 to 128 letters, digits, '.', '_' or '-', got " + io::quoted(x.run_id));
    }
    // Each from its version on; absent when the run measured none.
    check_since(f.object(), "scaling", 3, minor, x.schema_version);
    check_since(f.object(), "sweep", 4, minor, x.schema_version);
    check_since(f.object(), "accuracy", 5, minor, x.schema_version);
    check_since(f.object(), "rehearsal", 8, minor, x.schema_version);
    check_since(f.object(), "shards", 9, minor, x.schema_version);
  } else {
    f.optional("run_id", x.run_id);
  }
  f.required("environment", x.environment);
  f.required("config", x.config);
  f.required("cases", x.cases);
  f.required("comparisons", x.comparisons);
  f.required("edge_cases", x.edge_cases);
  f.optional("scaling", x.scaling);
  f.optional("sweep", x.sweep);
  f.optional("accuracy", x.accuracy);
  f.optional("rehearsal", x.rehearsal);
  f.optional("shards", x.shards);
  f.optional("wall_seconds", x.wall_seconds, kCount);
  if constexpr (Fields::reading())
    check_references(x);
}

json to_json(const Environment& e) {
  return io::write_object(e);
}

json to_json(const AuditFinding& f) {
  return io::write_object(f);
}

AuditFinding audit_finding_from_json(const json& value, const std::string& source) {
  try {
    return io::read_object<AuditFinding>(value, "", false);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

Environment environment_from_json(const json& value, const std::string& source) {
  try {
    return io::read_object<Environment>(value, "environment", false);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

json to_json(const Results& results) {
  return io::write_object(results);
}

Results results_from_json(const json& value, const std::string& source) {
  try {
    const int minor = io::check_document(value, kSchemaVersion, "results.json");
    return io::read_object<Results>(value, "", minor > io::minor_version(kSchemaVersion));
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  return text.str();
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  if (std::filesystem::is_directory(path))
    throw ResultsError(path, "", "is a folder, expected " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ResultsError(path, "", std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return io::parse_json(buffer.str());
  } catch (const ResultsError& e) {
    throw e.in_file(path);
  }
}

Results read_results_file(const std::string& path) {
  return results_from_json(read_json_file(path, "a results.json file"), path);
}

void write_results_file(const std::string& path, const Results& results) {
  const json j = to_json(results);
  // The writer refuses what the reader would refuse: every file written can be read back.
  const std::string text = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  try {
    results_from_json(io::parse_json(text), path);
  } catch (const ResultsError& e) {
    throw ResultsError(path, e.key_path(), e.problem() + " (not written)");
  }
  io::write_file_atomically(path, text);
}

} // namespace kan::results
