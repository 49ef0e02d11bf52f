#include "kan/results/results.h"

#include "kan/results/statistics.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <tuple>

#include <unistd.h>

namespace kan::results {

std::string to_string(CaseStatus value) {
  return io::name_of(value, kCaseStatusNames);
}

std::string to_string(Parity value) {
  return io::name_of(value, kParityNames);
}

std::string to_string(EdgeStatus value) {
  return io::name_of(value, kEdgeStatusNames);
}

namespace {
auto tie(const AuditFinding& f) {
  return std::tie(f.tensor, f.kind, f.device, f.expected_device, f.message, f.problem, f.fix,
                  f.dtype, f.shape, f.module, f.phase, f.source, f.count, f.stage);
}
auto tie(const RehearsedCase& c) {
  return std::tie(c.case_name, c.findings, c.operations, c.error);
}
auto tie(const Rehearsal& r) {
  return std::tie(r.reason, r.cases);
}
auto tie(const EpochActivity& e) {
  return std::tie(e.kernels, e.busy_seconds, e.wall_seconds, e.busy_fraction, e.h2d_copies,
                  e.h2d_bytes, e.d2h_copies, e.d2h_bytes);
}
auto tie(const GpuActivity& g) {
  return std::tie(g.traced, g.reason, g.epochs);
}
auto tie(const ActivationCurve& c) {
  return std::tie(c.layer, c.input, c.output, c.x, c.y);
}
auto tie(const CaseResult& c) {
  return std::tie(c.name, c.target, c.device, c.dtype, c.status, c.reason, c.epoch_seconds,
                  c.median_epoch_seconds, c.iqr_epoch_seconds, c.peak_memory_bytes,
                  c.final_test_rmse, c.final_accuracy, c.backend, c.threads, c.warmup_epochs,
                  c.min_epoch_seconds, c.max_epoch_seconds, c.steps_per_epoch, c.samples_per_epoch,
                  c.steps_per_second, c.samples_per_second, c.timer, c.memory_kind,
                  c.peak_reserved_bytes, c.epoch_cv, c.cv_target, c.cv_target_met, c.precision,
                  c.precision_detail, c.train_loss_per_epoch, c.test_loss_per_epoch, c.config,
                  c.gpu_activity, c.monitoring, c.audit_findings, c.activations, c.model_kind,
                  c.parameters, c.forward_flops, c.host);
}
auto tie(const Comparison& c) {
  return std::tie(c.case_name, c.a, c.b, c.speedup, c.max_abs_output_diff, c.max_rel_loss_diff,
                  c.final_metric_rel_diff, c.parity, c.label, c.speedup_low, c.speedup_high,
                  c.max_rel_output_diff, c.max_abs_grad_diff, c.max_rel_grad_diff,
                  c.final_accuracy_diff_points, c.tolerances, c.message);
}
auto tie(const EdgeCaseResult& e) {
  return std::tie(e.name, e.device, e.status, e.message, e.samples, e.peak_memory_bytes, e.seconds,
                  e.measurements);
}
auto tie(const ScalingResult& s) {
  return std::tie(s.case_name, s.device, s.backend, s.ranks, s.status, s.reason, s.epoch_seconds,
                  s.median_epoch_seconds, s.speedup, s.efficiency, s.communication_seconds,
                  s.collectives_per_step, s.bytes_per_step, s.train_loss_per_epoch,
                  s.max_rel_loss_diff);
}
auto tie(const SweepPoint& p) {
  return std::tie(p.case_name, p.target, p.device, p.dtype, p.batch, p.status, p.reason,
                  p.epoch_seconds, p.median_epoch_seconds, p.samples_per_second, p.epoch_cv,
                  p.peak_memory_bytes, p.audit_findings, p.host);
}
auto tie(const SweepTarget& t) {
  return std::tie(t.case_name, t.target, t.best_batch, t.best_samples_per_second,
                  t.saturation_batch, t.max_batch, t.max_batch_attempts, t.max_batch_reason);
}
auto tie(const Crossover& c) {
  return std::tie(c.case_name, c.a, c.b, c.batch, c.message);
}
auto tie(const Sweep& s) {
  return std::tie(s.batches, s.points, s.targets, s.crossovers);
}
auto tie(const Shard& s) {
  return std::tie(s.index, s.count, s.source);
}
auto tie(const MergedShard& s) {
  return std::tie(s.shard, s.folder, s.run_id, s.environment, s.wall_seconds);
}
auto tie(const RunConfig& c) {
  return std::tie(c.suite, c.devices, c.repeat, c.warmup, c.cases, c.seed, c.time_limit_seconds,
                  c.cupti, c.trace, c.out, c.shard, c.extra);
}
auto tie(const Results& r) {
  return std::tie(r.schema_version, r.run_id, r.environment, r.config, r.cases, r.comparisons,
                  r.edge_cases, r.scaling, r.sweep, r.accuracy, r.rehearsal, r.shards,
                  r.wall_seconds);
}
auto tie(const CudaDevice& d) {
  return std::tie(d.index, d.name, d.compute_capability, d.multiprocessors, d.total_memory_bytes,
                  d.free_memory_bytes);
}
auto tie(const EnvironmentProblem& p) {
  return std::tie(p.what, p.fix);
}
auto tie(const Environment& e) {
  return std::tie(e.kanbench_version, e.git_commit, e.date, e.hostname, e.libtorch_version,
                  e.cuda_build_version, e.cudnn_build_version, e.cuda_runtime_version,
                  e.cuda_driver_version, e.cuda_available, e.cuda_unavailable_reason,
                  e.cuda_visible_devices, e.cuda_devices, e.cpu_model, e.cpu_cores, e.torch_threads,
                  e.nvtx_available, e.cupti_available, e.cpu_governor, e.load_average, e.problems);
}
} // namespace

bool AuditFinding::operator==(const AuditFinding& o) const {
  return tie(*this) == tie(o);
}
bool RehearsedCase::operator==(const RehearsedCase& o) const {
  return tie(*this) == tie(o);
}
bool Rehearsal::operator==(const Rehearsal& o) const {
  return tie(*this) == tie(o);
}
bool EpochActivity::operator==(const EpochActivity& o) const {
  return tie(*this) == tie(o);
}
bool GpuActivity::operator==(const GpuActivity& o) const {
  return tie(*this) == tie(o);
}
bool ActivationCurve::operator==(const ActivationCurve& o) const {
  return tie(*this) == tie(o);
}
bool CaseResult::operator==(const CaseResult& o) const {
  return tie(*this) == tie(o);
}
bool Comparison::operator==(const Comparison& o) const {
  return tie(*this) == tie(o);
}
bool EdgeCaseResult::operator==(const EdgeCaseResult& o) const {
  return tie(*this) == tie(o);
}
bool ScalingResult::operator==(const ScalingResult& o) const {
  return tie(*this) == tie(o);
}
bool SweepPoint::operator==(const SweepPoint& o) const {
  return tie(*this) == tie(o);
}
bool SweepTarget::operator==(const SweepTarget& o) const {
  return tie(*this) == tie(o);
}
bool Crossover::operator==(const Crossover& o) const {
  return tie(*this) == tie(o);
}
bool Sweep::operator==(const Sweep& o) const {
  return tie(*this) == tie(o);
}
bool RunConfig::operator==(const RunConfig& o) const {
  return tie(*this) == tie(o);
}
std::string Shard::text() const {
  return std::to_string(index) + "/" + std::to_string(count);
}
bool Shard::operator==(const Shard& o) const {
  return tie(*this) == tie(o);
}
bool MergedShard::operator==(const MergedShard& o) const {
  return tie(*this) == tie(o);
}
bool Results::operator==(const Results& o) const {
  return tie(*this) == tie(o);
}
bool operator==(const CudaDevice& a, const CudaDevice& b) {
  return tie(a) == tie(b);
}
bool operator==(const EnvironmentProblem& a, const EnvironmentProblem& b) {
  return tie(a) == tie(b);
}
bool operator==(const Environment& a, const Environment& b) {
  return tie(a) == tie(b);
}

namespace {

// splitmix64's finaliser: spreads the bits of a weak seed over all 64.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t random_bits() {
  try {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {
    // No entropy source: the clock's nanoseconds, the process and a counter still differ
    // between two runs of one machine; the time stamp in the id separates most others.
    static std::atomic<uint64_t> counter{0};
    const auto ticks = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return mix(static_cast<uint64_t>(ticks) ^ mix(static_cast<uint64_t>(::getpid())) ^
               mix(++counter));
  }
}

} // namespace

std::string new_run_id() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  char id[64];
  std::snprintf(id, sizeof id, "%s-%016llx", stamp, static_cast<unsigned long long>(random_bits()));
  return id;
}

bool is_valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 128)
    return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok)
      return false;
  }
  return true;
}

void fill_epoch_statistics(CaseResult& result) {
  const auto summary = summarize(result.epoch_seconds);
  if (!summary) {
    result.median_epoch_seconds.reset();
    result.iqr_epoch_seconds.reset();
    result.min_epoch_seconds.reset();
    result.max_epoch_seconds.reset();
    result.steps_per_second.reset();
    result.samples_per_second.reset();
    return;
  }
  result.median_epoch_seconds = summary->median;
  result.iqr_epoch_seconds = summary->iqr;
  result.min_epoch_seconds = summary->min;
  result.max_epoch_seconds = summary->max;
  result.steps_per_second.reset();
  result.samples_per_second.reset();
  if (summary->median > 0) {
    if (result.steps_per_epoch)
      result.steps_per_second = static_cast<double>(*result.steps_per_epoch) / summary->median;
    if (result.samples_per_epoch)
      result.samples_per_second = static_cast<double>(*result.samples_per_epoch) / summary->median;
  }
}

void fill_speedup(Comparison& comparison, const CaseResult& a, const CaseResult& b) {
  comparison.speedup.reset();
  comparison.speedup_low.reset();
  comparison.speedup_high.reset();
  if (a.status != CaseStatus::kOk || b.status != CaseStatus::kOk)
    return;
  const auto sa = summarize(a.epoch_seconds);
  const auto sb = summarize(b.epoch_seconds);
  if (!sa || !sb || sb->median <= 0 || sb->q1 <= 0 || sb->q3 <= 0)
    return;
  comparison.speedup = sa->median / sb->median;
  comparison.speedup_low = sa->q1 / sb->q3;
  comparison.speedup_high = sa->q3 / sb->q1;
}

void fill_scaling_comparisons(std::vector<ScalingResult>& scaling) {
  for (auto& s : scaling) {
    s.speedup = s.efficiency = s.max_rel_loss_diff = std::nullopt;
    const ScalingResult* one = nullptr;
    for (const auto& o : scaling)
      if (o.ranks == 1 && o.case_name == s.case_name && o.device == s.device &&
          o.status == CaseStatus::kOk)
        one = &o;
    if (one == nullptr || s.status != CaseStatus::kOk)
      continue;
    if (one->median_epoch_seconds && s.median_epoch_seconds && *s.median_epoch_seconds > 0) {
      s.speedup = *one->median_epoch_seconds / *s.median_epoch_seconds;
      s.efficiency = *s.speedup / static_cast<double>(s.ranks);
    }
    if (one->train_loss_per_epoch.size() == s.train_loss_per_epoch.size() &&
        !s.train_loss_per_epoch.empty()) {
      double worst = 0;
      for (size_t k = 0; k < s.train_loss_per_epoch.size(); ++k) {
        const double a = one->train_loss_per_epoch[k], b = s.train_loss_per_epoch[k];
        worst = std::max(worst, std::abs(b - a) / std::max(std::abs(a), 1e-300));
      }
      s.max_rel_loss_diff = worst;
    }
  }
}

namespace {

// Throughput per batch of one target of one case, from its measured points.
std::map<int64_t, double> throughput_by_batch(const Sweep& sweep, const std::string& case_name,
                                              const std::string& target) {
  std::map<int64_t, double> by_batch;
  for (const auto& p : sweep.points)
    if (p.case_name == case_name && p.target == target && p.status == CaseStatus::kOk &&
        p.samples_per_second)
      by_batch[p.batch] = *p.samples_per_second;
  return by_batch;
}

Crossover crossover_of(const Sweep& sweep, const std::string& case_name, const std::string& a,
                       const std::string& b) {
  Crossover c{case_name, a, b, std::nullopt, ""};
  const auto ta = throughput_by_batch(sweep, case_name, a);
  const auto tb = throughput_by_batch(sweep, case_name, b);
  std::vector<int64_t> both;
  for (const auto& [batch, rate] : tb)
    if (ta.count(batch))
      both.push_back(batch);
  if (both.empty()) {
    c.message = "no batch size measured on both " + a + " and " + b;
    return c;
  }
  // Walk down from the largest common batch while b stays at least as fast.
  for (auto it = both.rbegin(); it != both.rend() && tb.at(*it) >= ta.at(*it); ++it)
    c.batch = *it;
  const auto largest = std::to_string(both.back());
  if (!c.batch)
    c.message = b + " does not overtake " + a + " (up to batch " + largest + ")";
  else if (*c.batch == both.front())
    c.message = b + " is at least as fast as " + a + " at every batch size (" +
                std::to_string(both.front()) + " to " + largest + ")";
  else
    c.message = b + " overtakes " + a + " from batch " + std::to_string(*c.batch);
  return c;
}

} // namespace

void fill_sweep_summaries(Sweep& sweep) {
  // Targets in the order their cases' points first appear.
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& p : sweep.points)
    if (std::find(order.begin(), order.end(), std::pair{p.case_name, p.target}) == order.end())
      order.emplace_back(p.case_name, p.target);
  std::vector<SweepTarget> targets;
  for (const auto& [case_name, target] : order) {
    SweepTarget t;
    for (const auto& old : sweep.targets)
      if (old.case_name == case_name && old.target == target)
        t = old; // keeps the max-batch search
    t.case_name = case_name;
    t.target = target;
    t.best_batch = t.saturation_batch = std::nullopt;
    t.best_samples_per_second = std::nullopt;
    const auto rates = throughput_by_batch(sweep, case_name, target);
    for (const auto& [batch, rate] : rates)
      if (!t.best_samples_per_second || rate > *t.best_samples_per_second) {
        t.best_batch = batch;
        t.best_samples_per_second = rate;
      }
    for (const auto& [batch, rate] : rates)
      if (rate >= 0.9 * *t.best_samples_per_second) {
        t.saturation_batch = batch;
        break;
      }
    targets.push_back(std::move(t));
  }
  // A target searched but with no points (a shard's share) keeps its search.
  for (const auto& old : sweep.targets)
    if (std::find(order.begin(), order.end(), std::pair{old.case_name, old.target}) == order.end())
      targets.push_back(old);
  sweep.targets = std::move(targets);
  sweep.crossovers.clear();
  const size_t measured = order.size(); // the targets with points come first
  for (size_t i = 0; i < measured; ++i) {
    const auto& first = sweep.targets[i];
    const bool is_first =
        std::none_of(sweep.targets.begin(), sweep.targets.begin() + i,
                     [&](const SweepTarget& t) { return t.case_name == first.case_name; });
    if (!is_first)
      continue;
    for (size_t j = i + 1; j < measured; ++j)
      if (sweep.targets[j].case_name == first.case_name)
        sweep.crossovers.push_back(
            crossover_of(sweep, first.case_name, first.target, sweep.targets[j].target));
  }
}

std::vector<std::string> run_problems(const Results& results) {
  std::vector<std::string> problems;
  for (const auto& c : results.cases) {
    const std::string where = c.name + " on " + c.target;
    if (c.status == CaseStatus::kFailed)
      problems.push_back(where + " failed: " + c.reason);
    for (const auto& f : c.audit_findings)
      problems.push_back(where + ": audit finding " + (f.problem.empty() ? "" : f.problem + ": ") +
                         f.message);
  }
  if (results.sweep)
    for (const auto& p : results.sweep->points) {
      const std::string where =
          p.case_name + " at batch " + std::to_string(p.batch) + " on " + p.target;
      if (p.status == CaseStatus::kFailed)
        problems.push_back(where + " failed: " + p.reason);
      for (const auto& f : p.audit_findings)
        problems.push_back(where + ": audit finding " +
                           (f.problem.empty() ? "" : f.problem + ": ") + f.message);
    }
  if (results.accuracy)
    for (const auto& fit : results.accuracy->fits)
      if (!fit.error.empty())
        problems.push_back("accuracy fit " + fit.key() + " failed: " + fit.error);
  for (const auto& c : results.comparisons)
    if (c.parity == Parity::kFail)
      problems.push_back(c.case_name + " " + c.a + " vs " + c.b + ": parity fails" +
                         (c.message.empty() ? "" : ": " + c.message));
  for (const auto& e : results.edge_cases)
    if (e.status == EdgeStatus::kFail)
      problems.push_back("edge case " + e.name + " on " + e.device + " fails: " + e.message);
  if (results.rehearsal)
    for (const auto& c : results.rehearsal->cases) {
      for (const auto& f : c.findings)
        problems.push_back(c.case_name + " rehearsed on meta: " +
                           (f.problem.empty() ? "" : f.problem + ": ") + f.message);
      if (!c.error.empty())
        problems.push_back(c.case_name + " rehearsed on meta could not finish: " + c.error);
    }
  for (const auto& s : results.scaling)
    if (s.status != CaseStatus::kOk && s.status != CaseStatus::kSkipped)
      problems.push_back(s.case_name + " on " + std::to_string(s.ranks) + " " + s.device +
                         " rank(s) " + to_string(s.status) + ": " + s.reason);
  return problems;
}

// "4 passed, 1 skipped (out_of_memory on cpu: needs a GPU)": what passed, failed and why some
// did not run.
std::string edge_case_summary(const std::vector<EdgeCaseResult>& edge_cases) {
  int passed = 0, failed = 0;
  std::string skipped;
  int skips = 0;
  for (const auto& e : edge_cases) {
    passed += e.status == EdgeStatus::kPass;
    failed += e.status == EdgeStatus::kFail;
    if (e.status == EdgeStatus::kSkipped) {
      const bool gpu =
          e.message.find("GPU") != std::string::npos || e.message.find("CUDA") != std::string::npos;
      skipped += std::string(skips++ > 0 ? ", " : "") + e.name + " on " + e.device + ": " +
                 (gpu ? std::string("needs a GPU") : e.message);
    }
  }
  if (edge_cases.empty())
    return "none ran";
  std::string text = std::to_string(passed) + " passed";
  if (failed > 0)
    text += ", " + std::to_string(failed) + " failed";
  if (skips > 0)
    text += ", " + std::to_string(skips) + " skipped (" + skipped + ")";
  return text;
}

const CaseResult* Results::find_case(const std::string& name, const std::string& target) const {
  for (const auto& c : cases)
    if (c.name == name && c.target == target)
      return &c;
  return nullptr;
}

} // namespace kan::results
