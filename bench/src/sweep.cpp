#include "kan/bench/sweep.h"

#include "kan/bench/measure.h"
#include "kan/diagnostics/environment.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/io/clock.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace kan::bench {

MaxBatchSearch search_max_batch(const std::function<bool(int64_t)>& fits, int64_t start,
                                int64_t limit, double resolution) {
  TORCH_CHECK(start >= 1, "the max-batch search starts at a batch >= 1, got ", start);
  TORCH_CHECK(limit >= start, "the max-batch search's limit ", limit, " is below its start ",
              start);
  TORCH_CHECK(resolution > 0 && resolution < 1,
              "the max-batch search's resolution must be in "
              "(0, 1), got ",
              resolution);
  MaxBatchSearch search;
  auto attempt = [&](int64_t batch) {
    const bool ok = fits(batch);
    search.attempts.emplace_back(batch, ok);
    return ok;
  };
  // Doubling: `good` fit, `bad` did not (0: none found yet).
  int64_t good = 0, bad = 0;
  for (int64_t batch = start;; batch = std::min(limit, batch * 2)) {
    if (!attempt(batch)) {
      bad = batch;
      break;
    }
    good = batch;
    if (batch == limit) {
      search.largest = good;
      search.bound = "limit";
      return search;
    }
  }
  search.bound = "memory";
  if (good == 0)
    return search;
  // Bisection: the answer lies in [good, bad).
  while (bad - good > std::max<int64_t>(1, static_cast<int64_t>(std::floor(
                                               static_cast<double>(good) * resolution)))) {
    const int64_t middle = good + (bad - good) / 2;
    (attempt(middle) ? good : bad) = middle;
  }
  search.largest = good;
  return search;
}

bool trains_one_step(const Workload& w, const Target& target, int64_t batch) {
  try {
    const auto model = w.build_model(target.device, target.dtype);
    // Inputs across the first layer's grid (any other model's: [-1, 1]): one step's memory.
    const auto data = shape_only_data(*model, batch, w.loss);
    fit(*model, data, w.fit_options().batch(-1).steps(1));
    if (target.device.is_cuda())
      torch::cuda::synchronize(target.device.index());
    return true;
  } catch (const c10::OutOfMemoryError&) {
    release_cuda_cache();
    return false;
  }
}

namespace {

// Every point's result, from run_case's.
results::SweepPoint sweep_point(const results::CaseResult& c, int64_t batch) {
  results::SweepPoint p;
  p.case_name = c.name;
  p.target = c.target;
  p.device = c.device;
  p.dtype = c.dtype;
  p.batch = batch;
  p.status = c.status;
  p.reason = c.reason;
  p.epoch_seconds = c.epoch_seconds;
  p.median_epoch_seconds = c.median_epoch_seconds;
  p.samples_per_second = c.samples_per_second;
  p.epoch_cv = c.epoch_cv;
  p.peak_memory_bytes = c.peak_memory_bytes;
  p.audit_findings = c.audit_findings;
  return p;
}

// The workload at one batch size: at least one whole batch of training samples.
Workload at_batch(Workload w, int64_t batch) {
  w.batch = batch;
  w.train_num = std::max(w.train_num, batch);
  w.plot_activations = false;
  return w;
}

std::vector<int64_t> powers_of_two(int64_t from, int64_t up_to) {
  std::vector<int64_t> batches;
  for (int64_t b = from; b <= up_to; b *= 2)
    batches.push_back(b);
  return batches;
}

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n)
    p *= 2;
  return p;
}

// What every point of a sweep shares.
struct SweepRun {
  const SweepOptions& o;
  const std::vector<Target>& targets;
  double limit; // per point
  StopOnNoise noise;
  io::Clock::time_point start;
};

results::Results sweep_results(const SweepRun& run, const std::vector<Workload>& workloads) {
  const auto& o = run.o;
  results::Results results;
  results.environment = diagnostics::collect_environment();
  results.config.suite = o.suite;
  for (const auto& t : run.targets)
    results.config.devices.push_back(t.name);
  results.config.repeat = workloads.front().epochs;
  results.config.cases = o.model.empty() ? o.cases : std::vector<std::string>{};
  results.config.seed = 0;
  results.config.time_limit_seconds = run.limit;
  results.config.shard = o.shard;
  results.config.extra = {
      {"command", "sweep"},
      {"batches", o.batches.empty() ? nlohmann::json("auto") : nlohmann::json(o.batches)},
      {"cv_target", o.cv_target}};
  if (!o.model.empty()) {
    results.config.extra["model"] = o.model;
    results.config.extra["data"] = o.data.empty() ? "synthetic" : o.data;
  }
  if (o.memory_fraction > 0)
    results.config.extra["memory_fraction"] = o.memory_fraction;
  return results;
}

// Why the max-batch search does not run on `t`; "" where it does. The CPU is bounded by the
// host's memory, which a search would exhaust (and swap) rather than measure.
std::string why_not_searched(const SweepOptions& o, const Target& t) {
  if (!t.unavailable.empty())
    return t.unavailable;
  if (!t.device.is_cuda())
    return "not searched on the CPU: host memory, not a device's, bounds it";
  if (!(o.max_batch || o.batches.empty()))
    return "not searched (ask with --max-batch)";
  return "";
}

// The max-batch search of w on t, or why it does not run there.
results::SweepTarget search_target(const SweepRun& run, const Workload& w, const Target& t) {
  results::SweepTarget st;
  st.case_name = w.name;
  st.target = t.name;
  st.max_batch_reason = why_not_searched(run.o, t);
  if (!st.max_batch_reason.empty())
    return st;
  if (run.o.on_progress)
    run.o.on_progress(
        {0, 0, w.name + " max-batch search", t.name, 0, 0, io::seconds_since(run.start), -1});
  const auto search = search_max_batch([&](int64_t batch) { return trains_one_step(w, t, batch); },
                                       16, run.o.max_batch_limit);
  st.max_batch = search.largest;
  st.max_batch_attempts = search.attempts;
  st.max_batch_reason = search.bound == "limit" ? "reached --max-batch-limit" : "";
  return st;
}

// The max-batch search on every target, each target's outcome in sweep. Returns the largest
// batch that fits on every searched target (at most --max-batch-limit), or none when nothing was
// searched.
std::optional<int64_t> search_max_batches(const SweepRun& run, const Workload& w,
                                          results::Sweep& sweep) {
  std::optional<int64_t> largest_fitting;
  for (const auto& t : run.targets) {
    sweep.targets.push_back(search_target(run, w, t));
    if (why_not_searched(run.o, t).empty())
      largest_fitting = std::min(largest_fitting.value_or(run.o.max_batch_limit),
                                 sweep.targets.back().max_batch.value_or(run.o.max_batch_limit));
  }
  return largest_fitting;
}

// A data file's training rows bound the batch: a larger one could not be drawn from them.
void check_batches(const SweepOptions& o, const Workload& w) {
  for (const int64_t b : o.batches)
    TORCH_CHECK(!w.data || b <= w.train_num, "--batch ", b, " is larger than --data's ",
                w.train_num, " training rows");
}

// w's batch sizes: the ones asked for, or "auto": the powers of two from 16 up to the training
// set (a data file's rows bound them), and past it up to `largest_fitting` where a GPU search
// found one.
std::vector<int64_t> planned_batches(const SweepOptions& o, const Workload& w,
                                     std::optional<int64_t> largest_fitting) {
  if (!o.batches.empty())
    return o.batches;
  if (w.data)
    return powers_of_two(16, std::min(w.train_num, largest_fitting.value_or(w.train_num)));
  return powers_of_two(16, largest_fitting.value_or(next_power_of_two(w.train_num)));
}

void add_batches(results::Sweep& sweep, const std::vector<int64_t>& batches) {
  for (const int64_t b : batches)
    if (std::find(sweep.batches.begin(), sweep.batches.end(), b) == sweep.batches.end())
      sweep.batches.push_back(b);
}

// The expected cost of w at batch b on t (kan::bench::expected_cost), 0 where t cannot run.
double point_cost(const SweepRun& run, const Workload& w, int64_t b, const Target& t) {
  return t.unavailable.empty() ? expected_cost(at_batch(w, b), run.noise) : 0.0;
}

// w at batch b on t: point `index` of `count`, its expected cost finished in `time_left`.
results::SweepPoint measure_point(const SweepRun& run, const Workload& w, int64_t b,
                                  const Target& t, int64_t index, int64_t count,
                                  TimeLeft& time_left) {
  if (run.o.empty_cache)
    release_cuda_cache();
  const double cost = point_cost(run, w, b, t);
  const auto begun = io::Clock::now();
  auto on_epoch = [&](int64_t epoch, int64_t epochs) {
    if (run.o.on_progress)
      run.o.on_progress({index, count, w.name + " batch " + std::to_string(b), t.name, epoch,
                         epochs, io::seconds_since(run.start),
                         time_left.seconds_left(cost, io::seconds_since(begun))});
  };
  Instrumentation instrumentation; // CUPTI's "GPU not used" check; no monitor
  instrumentation.monitor_interval_seconds = 0;
  auto point =
      sweep_point(run_case(at_batch(w, b), t, run.limit, on_epoch, &instrumentation, run.noise), b);
  time_left.finished(cost, io::seconds_since(run.start));
  return point;
}

// Every workload: its searches (which bound "auto" batches on a GPU), then each batch on every
// target.
void measure_all(const SweepRun& run, const std::vector<Workload>& workloads,
                 results::Sweep& sweep) {
  TimeLeft time_left; // of the points planned so far: a search may add a workload's
  for (const auto& w : workloads) {
    check_batches(run.o, w);
    const auto batches = planned_batches(run.o, w, search_max_batches(run, w, sweep));
    add_batches(sweep, batches);
    for (const int64_t b : batches)
      for (const auto& t : run.targets)
        time_left.add(point_cost(run, w, b, t));
    const auto count = static_cast<int64_t>(batches.size() * run.targets.size());
    int64_t index = 0;
    for (const int64_t b : batches)
      for (const auto& t : run.targets)
        sweep.points.push_back(measure_point(run, w, b, t, ++index, count, time_left));
  }
}

// A shard's share of the plan's items (each target's max-batch search, each point), balanced by
// expected cost. The batches are planned without the searches, so that every shard plans the
// same points whatever its GPU: "auto" is the powers of two up to the training set, and a point
// that does not fit is recorded as out of memory.
void measure_share(const SweepRun& run, const std::vector<Workload>& workloads,
                   results::Sweep& sweep) {
  constexpr double kSearchSeconds = 30; // about 20 one-step trainings up to the memory's limit
  struct Item {
    const Workload* workload;
    const Target* target;
    int64_t batch; // 0: the max-batch search
  };
  std::vector<Item> items;
  std::vector<double> costs;
  for (const auto& w : workloads) {
    check_batches(run.o, w);
    for (const auto& t : run.targets) {
      items.push_back({&w, &t, 0});
      costs.push_back(why_not_searched(run.o, t).empty() ? kSearchSeconds * kExpectedCostPerSecond
                                                         : 0);
    }
    for (const int64_t b : planned_batches(run.o, w, std::nullopt))
      for (const auto& t : run.targets) {
        items.push_back({&w, &t, b});
        costs.push_back(point_cost(run, w, b, t));
      }
  }
  const auto share = shard_share(costs, *run.o.shard);
  TimeLeft time_left;
  for (const size_t i : share)
    time_left.add(items[i].batch > 0 ? costs[i] : 0.0);
  const auto count =
      std::count_if(share.begin(), share.end(), [&](size_t i) { return items[i].batch > 0; });
  int64_t index = 0;
  for (const size_t i : share) {
    const auto& [w, t, batch] = items[i];
    if (batch == 0) {
      sweep.targets.push_back(search_target(run, *w, *t));
      continue;
    }
    add_batches(sweep, {batch});
    sweep.points.push_back(measure_point(run, *w, batch, *t, ++index, count, time_left));
  }
}

} // namespace

results::Results run_sweep(const SweepOptions& o) {
  for (const int64_t b : o.batches)
    TORCH_CHECK(b >= 1, "--batch sizes must be >= 1, got ", b);
  TORCH_CHECK(!o.cases.empty() || !o.model.empty(), "--case names no workload");
  TORCH_CHECK(o.max_batch_limit >= 16, "--max-batch-limit must be >= 16, got ", o.max_batch_limit);
  const auto noise = StopOnNoise::for_suite(o.suite, o.cv_target, o.cv_max_seconds);
  TORCH_CHECK(o.repeat >= 0, "--repeat must be >= 1, got ", o.repeat);
  TORCH_CHECK(o.data.empty() || !o.model.empty(), "--data needs --model (the data's model)");
  std::vector<Workload> workloads;
  if (!o.model.empty()) {
    workloads.push_back(model_workload(
        o.model, ModelFileOptions().trust_torchscript(o.trust_torchscript).inputs(o.model_inputs),
        o.data, o.suite, o.data_options, o.loss));
  } else {
    for (const auto& name : o.cases)
      workloads.push_back(suite_workload(o.suite, name));
  }
  for (auto& w : workloads)
    if (o.repeat > 0)
      w.epochs = o.repeat;
  const auto targets = resolve_targets(
      o.devices, o.model.empty() ? torch::kFloat32 : workloads.front().model->dtype());
  const double limit = o.time_limit_seconds > 0 ? o.time_limit_seconds : suite_time_limit(o.suite);
  cap_gpu_memory(targets, o.memory_fraction);
  diagnostics::NvtxScopes nvtx_scopes;
  const SweepRun run{o, targets, limit, noise, io::Clock::now()};
  auto results = sweep_results(run, workloads);

  results::Sweep sweep;
  if (o.shard)
    measure_share(run, workloads, sweep);
  else
    measure_all(run, workloads, sweep);
  std::sort(sweep.batches.begin(), sweep.batches.end());
  results::fill_sweep_summaries(sweep);
  results.sweep = std::move(sweep);
  results.wall_seconds = io::seconds_since(run.start);
  return results;
}

} // namespace kan::bench
