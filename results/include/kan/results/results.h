#pragma once
/// The result model of `kanbench run` (results.json): plain structs, free of LibTorch.
/// results/SCHEMA.md documents every key, its unit and meaning; results_io.h reads and writes
/// them.
///
/// Conventions: a field that the contract requires but that a run may not have measured (a
/// skipped case has no median) is a `std::optional`, written as JSON `null`; an optional field
/// a run may leave out entirely is a `std::optional` (or an empty vector / map) and is not
/// written at all when empty. No number is ever invented: leave it empty.

#include "kan/io/enum_names.h"
#include "kan/io/json_reader.h"
#include "kan/results/accuracy.h"
#include "kan/results/environment.h"
#include "kan/results/monitoring.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// The version of the results.json format this library writes; a file with another major
/// version is refused. Bump on every change (major: incompatible, minor: keys added).
inline constexpr const char* kSchemaVersion = "1.10.0";

/// A fresh id for one run: its start time (UTC, to the second) and 64 random bits,
/// "20261129T183608Z-9f3c0a7d51e2b486". Sortable by time; two runs get the same id with
/// probability 2^-64 even when they start in the same second on different machines.
std::string new_run_id();

/// Whether `id` can be a run id: 1 to 128 ASCII letters, digits, '.', '_' or '-' (so it is
/// safe in a file name, an HTML attribute and a message). new_run_id()'s ids and UUIDs are.
bool is_valid_run_id(const std::string& id);

/// How a case ended.
enum class CaseStatus {
  kOk,      ///< measured
  kSkipped, ///< not attempted (e.g. no CUDA device); `reason` says why
  kFailed,  ///< an error stopped it; `reason` holds the error
  kOom,     ///< out of memory; `reason` names the size that failed
  kTimeout, ///< past the per-case time limit; `reason` names the limit
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<CaseStatus> kCaseStatusNames[] = {{CaseStatus::kOk, "ok"},
                                                                {CaseStatus::kSkipped, "skipped"},
                                                                {CaseStatus::kFailed, "failed"},
                                                                {CaseStatus::kOom, "oom"},
                                                                {CaseStatus::kTimeout, "timeout"}};
std::string to_string(CaseStatus value);

/// The verdict of a parity comparison against its documented tolerances.
enum class Parity { kPass, kFail };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Parity> kParityNames[] = {{Parity::kPass, "pass"},
                                                        {Parity::kFail, "fail"}};
std::string to_string(Parity value);

/// How an edge case ended.
enum class EdgeStatus { kPass, kFail, kSkipped };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<EdgeStatus> kEdgeStatusNames[] = {
    {EdgeStatus::kPass, "pass"}, {EdgeStatus::kFail, "fail"}, {EdgeStatus::kSkipped, "skipped"}};
std::string to_string(EdgeStatus value);

/// One problem a device audit found: the one finding type of every result file (results.json's
/// audit_findings, audit.json's findings, fit.json's device_audit), with one JSON form
/// (results_io.h). Its producers make it directly: kan::diagnostics::DeviceAudit (static audit),
/// OperationTrace and gpu_not_used_finding() (CUPTI).
struct AuditFinding {
  std::string tensor;          ///< full dotted name, "model.layers.0.grid"; for an operation
                               ///< "aten::ones in model.layers.0"
  std::string kind;            ///< "parameter", "buffer", "grad", "optimizer_state", "data",
                               ///< "kernel", "operation", "error"
  std::string device;          ///< where it is, "cpu" (for an operation: "cpu, cuda:0")
  std::string expected_device; ///< where it should be, "cuda:0"
  std::string message;         ///< one sentence: what is wrong
  std::string problem;         ///< "wrong_device", ...; empty when not classified (not written)
  std::string fix;             ///< one sentence: what to do; empty when none (not written)

  // Detail some producers know; empty ones are not written.
  std::string dtype;            ///< the tensor's dtype, "float32" (static audit)
  std::vector<int64_t> shape;   ///< the tensor's shape (static audit)
  std::string module;           ///< the module an operation ran in, "model.layers.0" (trace)
  std::string phase;            ///< "forward", "backward", ... (trace)
  std::string source;           ///< the user's source line, "model.py:53" (TorchScript models)
  std::optional<int64_t> count; ///< how many calls (trace)
  std::string stage;            ///< when it was found: "before_training", "after_training",
                                ///< "trace" (audit.json)

  bool operator==(const AuditFinding&) const;
};

/// Its keys (kan/io/json_fields.h): results.json, audit.json and fit.json write findings so.
template <typename Fields> void fields(Fields& f, AuditFinding& x) {
  f.required("tensor", x.tensor);
  f.required("kind", x.kind);
  f.required("device", x.device);
  f.required("expected_device", x.expected_device);
  f.required("message", x.message);
  f.optional("problem", x.problem);
  f.optional("fix", x.fix);
  f.optional("dtype", x.dtype);
  f.optional("shape", x.shape, io::Bound::kNonNegative);
  f.optional("module", x.module);
  f.optional("phase", x.phase);
  f.optional("source", x.source);
  f.optional("count", x.count, io::Bound::kNonNegative);
  f.optional("stage", x.stage);
}

/// GPU activity of one timed epoch, from the CUPTI activity tracer.
struct EpochActivity {
  int64_t kernels = 0;      ///< kernel launches that ran
  double busy_seconds = 0;  ///< union of the kernels' intervals
  double wall_seconds = 0;  ///< the epoch's wall time the busy time is measured against
  double busy_fraction = 0; ///< busy_seconds / wall_seconds, 0..1
  int64_t h2d_copies = 0;   ///< host-to-device memory copies
  int64_t h2d_bytes = 0;
  int64_t d2h_copies = 0; ///< device-to-host memory copies
  int64_t d2h_bytes = 0;

  bool operator==(const EpochActivity&) const;
};

/// What the CUPTI tracer saw while a GPU case was timed.
struct GpuActivity {
  bool traced = false; ///< false: CUPTI was off or could not start
  std::string reason;  ///< why not traced ("--no-cupti", "no CUDA driver"); "" if traced
  std::vector<EpochActivity> epochs; ///< one per timed epoch, in order

  bool operator==(const GpuActivity&) const;
};

/// One learned activation function phi(x) of a trained model, sampled for plotting.
struct ActivationCurve {
  int64_t layer = 0;     ///< layer index, 0 = the input layer
  int64_t input = 0;     ///< input neuron index i of the edge (i -> j)
  int64_t output = 0;    ///< output neuron index j of the edge
  std::vector<double> x; ///< sample points, ascending
  std::vector<double> y; ///< phi(x) at each sample point; same length as x

  bool operator==(const ActivationCurve&) const;
};

/// One measured target of one workload: a case on one device (and dtype / backend / threads).
struct CaseResult {
  std::string name;   ///< the workload: "toy", "deep", "wide", "million"
  std::string target; ///< unique per name; comparisons refer to it: "cpu", "cuda", "cpu-float32"
  std::string device; ///< "cpu", "cuda:0"
  std::string dtype;  ///< "float64", "float32": the parameters'
  CaseStatus status = CaseStatus::kOk;
  std::string reason; ///< why not ok; "" when ok

  std::vector<double> epoch_seconds;          ///< timed epochs (warm-up excluded), seconds
  std::optional<double> median_epoch_seconds; ///< null unless measured
  std::optional<double> iqr_epoch_seconds;    ///< q3 - q1, seconds; null unless measured
  std::optional<int64_t> peak_memory_bytes;   ///< see memory_kind; null unless measured
  /// A precision beyond the dtype: "tf32", "bf16", "fp16" (`kanbench run --precision`), and
  /// what it computes in which precision (what falls back to float32, and why).
  std::optional<std::string> precision;
  std::optional<std::string> precision_detail;
  /// The metric after the workload's own (warm-up and --repeat) epochs, so that targets compare
  /// however many epochs stop-on-noise added: test RMSE (regression cases) or accuracy (0..1).
  std::optional<double> final_test_rmse;
  std::optional<double> final_accuracy;

  // Optional extras; absent from the JSON when empty.
  /// What the case trained: "kan", "mlp" (the MLP baseline beside the KAN cases) or
  /// "torchscript" (a user's PyTorch model; forward_flops 0: not counted), its
  /// trainable scalars and the FLOPs of one sample's forward pass (kan::Model).
  std::optional<std::string> model_kind;
  std::optional<int64_t> parameters;
  std::optional<int64_t> forward_flops;
  std::optional<std::string> backend;   ///< "reference", "fused"
  std::optional<int64_t> threads;       ///< CPU threads used (at::get_num_threads())
  std::optional<int64_t> warmup_epochs; ///< epochs run before timing
  std::optional<double> min_epoch_seconds;
  std::optional<double> max_epoch_seconds;
  std::optional<int64_t> steps_per_epoch;   ///< optimiser steps per epoch
  std::optional<int64_t> samples_per_epoch; ///< training samples seen per epoch
  std::optional<double> steps_per_second;   ///< steps_per_epoch / median_epoch_seconds
  std::optional<double> samples_per_second; ///< samples_per_epoch / median_epoch_seconds
  std::optional<std::string> timer;       ///< how epochs were timed: "cuda_events", "steady_clock"
  std::optional<std::string> memory_kind; ///< "cpu_rss_growth", "cuda_peak_allocated"
  /// The caching allocator's peak reserved bytes (allocated plus cached) while the case
  /// trained, above the level at its start (GPU cases).
  std::optional<int64_t> peak_reserved_bytes;
  /// Stop-on-noise timing: the epoch times' coefficient of variation (std / mean), the target
  /// it was driven towards, and whether it got there before the time cap.
  std::optional<double> epoch_cv;
  std::optional<double> cv_target;
  std::optional<bool> cv_target_met;
  std::vector<double> train_loss_per_epoch; ///< loss after each epoch (warm-up included)
  std::vector<double> test_loss_per_epoch;
  nlohmann::json config;                   ///< the case's configuration (object); null = none
  std::optional<GpuActivity> gpu_activity; ///< GPU cases only
  /// What the device did during the timed epochs: NVML's view of a GPU, the process's CPU
  /// utilisation on a CPU target. Its findings (throttling, low utilisation, a clock below its
  /// maximum at start) are warnings, not CI failures.
  std::optional<DeviceMonitoring> monitoring;
  std::vector<AuditFinding> audit_findings; ///< pre-flight audit and "GPU not used" findings
  std::vector<ActivationCurve> activations; ///< learned phi(x) per edge (toy case)
  /// The machine that ran it, in a document `kanbench merge` put together from shards (its
  /// shard's hostname); absent otherwise (the environment's hostname). From 1.10.
  std::optional<std::string> host;

  bool operator==(const CaseResult&) const;
};

/// Result parity and speed of one case on two targets (a: the reference, usually "cpu").
struct Comparison {
  std::string case_name;                     ///< JSON key `case`: CaseResult::name
  std::string a;                             ///< CaseResult::target of the reference side
  std::string b;                             ///< CaseResult::target of the other side
  std::optional<double> speedup;             ///< median(a) / median(b): b is this many times faster
  std::optional<double> max_abs_output_diff; ///< forward outputs at initialisation
  std::optional<double> max_rel_loss_diff;   ///< over the per-epoch loss curves
  std::optional<double> final_metric_rel_diff; ///< final test RMSE or accuracy, relative
  Parity parity = Parity::kPass;

  // Optional extras.
  std::optional<std::string> label;   ///< what is compared: "float64 vs float32 on cpu"
  std::optional<double> speedup_low;  ///< spread of the speedup (e.g. q1(a)/q3(b))
  std::optional<double> speedup_high; ///< (e.g. q3(a)/q1(b))
  std::optional<double> max_rel_output_diff;
  std::optional<double> max_abs_grad_diff; ///< gradients at initialisation
  std::optional<double> max_rel_grad_diff;
  std::optional<double> final_accuracy_diff_points; ///< |acc(a) - acc(b)| in percentage points
  std::map<std::string, double> tolerances;         ///< key of a difference above -> its limit
  std::string message;                              ///< why it failed; "" when none (not written)

  bool operator==(const Comparison&) const;
};

/// One edge case (empty input, one sample, 2^20 samples, out of memory, time limit).
struct EdgeCaseResult {
  std::string name;   ///< "empty_input", "single_sample", ...
  std::string device; ///< "cpu", "cuda:0"
  EdgeStatus status = EdgeStatus::kPass;
  std::string message; ///< what happened, one sentence

  std::optional<int64_t> samples;             ///< input rows used
  std::optional<int64_t> peak_memory_bytes;   ///< extra peak memory while it ran
  std::optional<double> seconds;              ///< wall time it took
  std::map<std::string, double> measurements; ///< any further figures, name -> value

  bool operator==(const EdgeCaseResult&) const;
};

/// One case's GPU run rehearsed on the meta device (kan/diagnostics/meta_rehearsal.h).
struct RehearsedCase {
  std::string case_name;              ///< JSON `case`: the workload
  std::vector<AuditFinding> findings; ///< what a GPU run would raise or pay
  int64_t operations = 0;             ///< operations traced
  std::string error;                  ///< why the rehearsal could not finish; "" when it did

  bool operator==(const RehearsedCase&) const;
};

/// Where the machine has no GPU, `run` rehearses the GPU run of every case on the meta device.
struct Rehearsal {
  std::string reason; ///< why there was no GPU run: "no CUDA device: ..."
  std::vector<RehearsedCase> cases;

  bool operator==(const Rehearsal&) const;
};

/// One workload trained data-parallel at one rank count (`kanbench scaling`): rank 0's view.
struct ScalingResult {
  std::string case_name; ///< JSON `case`: the workload, "toy", "deep"
  std::string device;    ///< where every rank trained: "cpu", "cuda" (rank r on cuda:r)
  std::string backend;   ///< c10d's: "gloo", "nccl"
  int64_t ranks = 1;
  CaseStatus status = CaseStatus::kOk;
  std::string reason; ///< why not ok; "" when ok

  std::vector<double> epoch_seconds;          ///< rank 0's timed epochs (warm-up excluded)
  std::optional<double> median_epoch_seconds; ///< null unless measured
  /// The 1-rank run's median / this median (null without a measured 1-rank run).
  std::optional<double> speedup;
  std::optional<double> efficiency; ///< speedup / ranks
  /// Rank 0's time waiting for collectives per timed epoch (median of the epochs), seconds.
  std::optional<double> communication_seconds;
  std::optional<double> collectives_per_step; ///< all-reduces, broadcasts, all-gathers per step
  std::optional<double> bytes_per_step;       ///< payload bytes rank 0 contributed per step
  std::vector<double> train_loss_per_epoch;   ///< warm-up included
  /// Largest relative difference of train_loss_per_epoch from the 1-rank run's (null without
  /// one): data-parallel training computes the same steps, up to the order of its sums.
  std::optional<double> max_rel_loss_diff;

  bool operator==(const ScalingResult&) const;
};

/// One workload at one batch size on one target (`kanbench sweep`).
struct SweepPoint {
  std::string case_name; ///< JSON `case`: the workload
  std::string target;    ///< "cpu", "cuda", "cpu-float64"
  std::string device;    ///< "cpu", "cuda:0"
  std::string dtype;     ///< "float32"
  int64_t batch = 0;     ///< samples per step
  CaseStatus status = CaseStatus::kOk;
  std::string reason; ///< why not ok; "" when ok

  std::vector<double> epoch_seconds;          ///< timed epochs
  std::optional<double> median_epoch_seconds; ///< null unless measured
  std::optional<double> samples_per_second;   ///< samples per epoch / median; null unless measured
  std::optional<double> epoch_cv;             ///< coefficient of variation of epoch_seconds
  std::optional<int64_t> peak_memory_bytes;   ///< as CaseResult's
  std::vector<AuditFinding> audit_findings;   ///< as CaseResult's (a GPU epoch without a kernel)
  std::optional<std::string> host;            ///< as CaseResult's (from 1.10)

  bool operator==(const SweepPoint&) const;
};

/// What a sweep found for one target of one workload.
struct SweepTarget {
  std::string case_name; ///< JSON `case`
  std::string target;
  std::optional<int64_t> best_batch;             ///< the batch with the highest throughput
  std::optional<double> best_samples_per_second; ///< that throughput
  /// Where throughput stops growing: the smallest batch within 10 % of the best throughput.
  std::optional<int64_t> saturation_batch;
  /// The largest batch that trains one step within the memory cap (max-batch search), and the
  /// batches it tried in order, each with whether it fit; null where not searched (`reason`).
  std::optional<int64_t> max_batch;
  std::vector<std::pair<int64_t, bool>> max_batch_attempts;
  std::string max_batch_reason; ///< why no search ran, or what bounded it; "" when none

  bool operator==(const SweepTarget&) const;
};

/// Where target `b` overtakes target `a` (the first target) as the batch grows.
struct Crossover {
  std::string case_name; ///< JSON `case`
  std::string a, b;
  /// The smallest batch from which b's throughput is at least a's at every measured batch;
  /// null when b is slower at the largest batch both measured.
  std::optional<int64_t> batch;
  std::string message; ///< "cuda overtakes cpu from batch 1024"

  bool operator==(const Crossover&) const;
};

/// A batch-size sweep: throughput per batch size per target, and what it shows.
struct Sweep {
  std::vector<int64_t> batches; ///< the batch sizes swept, ascending
  std::vector<SweepPoint> points;
  std::vector<SweepTarget> targets;
  std::vector<Crossover> crossovers;

  bool operator==(const Sweep&) const;
};

/// Sets every target's best and saturation batch (keeping its max-batch search) and the
/// crossovers of every target against the first one of its case, from the measured points. A
/// target with a search but no points (a shard's share) is kept, after the others.
void fill_sweep_summaries(Sweep& sweep);

/// One share of a plan that several processes run apart (`--shard I/N`, or the index and count a
/// scheduler sets) and `kanbench merge` puts together.
struct Shard {
  int64_t index = 0; ///< 0 .. count - 1
  int64_t count = 1;
  /// Where the index came from: "--shard", or the environment variable that gave it
  /// ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "GTEST_SHARD_INDEX").
  std::string source;

  /// "2/8", as --shard takes it.
  std::string text() const;
  bool operator==(const Shard&) const;
};

/// One shard of a merged results.json: where it was read from and where it ran.
struct MergedShard {
  Shard shard;
  std::string folder; ///< the folder `kanbench merge` read it from
  std::string run_id; ///< the shard's own run id
  Environment environment;
  std::optional<double> wall_seconds;

  bool operator==(const MergedShard&) const;
};

/// The configuration of a run, as given on the command line (written back for reproduction).
struct RunConfig {
  std::string suite = "default";    ///< "quick", "default", "full"
  std::vector<std::string> devices; ///< devices asked for, after "auto" was resolved
  int64_t repeat = 0;               ///< timed epochs per case (R)

  std::optional<int64_t> warmup;  ///< warm-up epochs per case
  std::vector<std::string> cases; ///< --case filter; empty = all
  std::optional<uint64_t> seed;
  std::optional<double> time_limit_seconds; ///< per case
  std::optional<bool> cupti;                ///< false with --no-cupti
  std::optional<std::string> trace;         ///< --trace FILE
  std::optional<std::string> out;           ///< --out DIR
  std::optional<Shard> shard;               ///< the share of the plan this run ran (from 1.9)
  nlohmann::json extra;                     ///< any further settings (object); null = none

  bool operator==(const RunConfig&) const;
};

/// A whole results.json.
struct Results {
  std::string schema_version = kSchemaVersion;
  /// Which run this is; the HTML report records it, so a report.html beside a results.json of
  /// another run is detected (report_pair_problem()). Every new Results has a fresh one; the
  /// reader sets the file's, "" for files of schema 1.0 (before run ids). A copy is the same
  /// run: set a new_run_id() when a copy becomes a run of its own.
  std::string run_id = new_run_id();
  Environment environment;
  RunConfig config;
  std::vector<CaseResult> cases;
  std::vector<Comparison> comparisons;
  std::vector<EdgeCaseResult> edge_cases;
  std::vector<ScalingResult> scaling; ///< `kanbench scaling`; not written when empty (from 1.3)
  std::optional<Sweep> sweep;         ///< `kanbench sweep`; not written when empty (from 1.4)
  /// `kanbench accuracy`; not written when absent (from 1.5). Such a run has no cases.
  std::optional<AccuracyRun> accuracy;
  /// `run` on a machine without a GPU; not written when absent (from 1.8).
  std::optional<Rehearsal> rehearsal;
  /// `kanbench merge`: the shards this document was merged from, in shard order; not written when
  /// empty (from 1.9).
  std::vector<MergedShard> shards;
  std::optional<double> wall_seconds; ///< the whole run

  bool operator==(const Results&) const;

  /// The case with this name and target, or nullptr.
  const CaseResult* find_case(const std::string& name, const std::string& target) const;
};

/// Sets speedup, efficiency and max_rel_loss_diff of every scaling entry from the 1-rank entry of
/// its case and device (left empty where that entry is missing or not measured).
void fill_scaling_comparisons(std::vector<ScalingResult>& scaling);

/// Sets median, IQR, min and max of `result.epoch_seconds` (quantiles as kan::results::quantile,
/// so every file agrees on them), and steps_per_second / samples_per_second from
/// steps_per_epoch / samples_per_epoch and the median. Clears them when there are no epochs.
void fill_epoch_statistics(CaseResult& result);

/// Sets `comparison.speedup` = median(a) / median(b) with its spread speedup_low = q1(a) / q3(b)
/// and speedup_high = q3(a) / q1(b), from the epoch times; clears them unless both are `ok`
/// with epoch times.
void fill_speedup(Comparison& comparison, const CaseResult& a, const CaseResult& b);

/// What a CI gate fails a run on, one line each: a case (or sweep point, or accuracy fit) that
/// failed, a comparison whose parity failed, an edge case that failed, an audit finding (GPU not
/// used included), a finding of the GPU rehearsal. Skipped targets, timeouts and out-of-memory
/// cases are measurements, not failures. Empty: the run passed.
std::vector<std::string> run_problems(const Results& results);

/// The edge cases in one line: "4 passed, 1 skipped (out_of_memory on cpu: needs a GPU)", with
/// the failed ones counted; "none ran" for none.
std::string edge_case_summary(const std::vector<EdgeCaseResult>& edge_cases);

bool operator==(const CudaDevice& a, const CudaDevice& b);
bool operator==(const EnvironmentProblem& a, const EnvironmentProblem& b);
bool operator==(const Environment& a, const Environment& b);

} // namespace kan::results
