#pragma once
/// `kanbench run`: every workload of a suite on every target, timed per epoch, compared for
/// result parity, plus the edge cases; everything lands in a results::Results.

#include "kan/bench/shards.h"
#include "kan/bench/workloads.h"
#include "kan/diagnostics/chrome_trace.h"
#include "kan/diagnostics/cupti_tracer.h"
#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kan::bench {

/// The numeric precision a target trains in (`kanbench run --precision`): float64 and float32
/// are the parameters' dtype; tf32 is float32 with TF32 tensor-core matmuls (CUDA); bf16 and
/// fp16 are float32 parameters with forward passes under autocast (bf16 on the CPU or CUDA,
/// fp16 on CUDA with dynamic loss scaling, kan::GradScaler).
enum class Precision { kFloat64, kFloat32, kTF32, kBF16, kFP16 };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Precision> kPrecisionNames[] = {{Precision::kFloat64, "float64"},
                                                              {Precision::kFloat32, "float32"},
                                                              {Precision::kTF32, "tf32"},
                                                              {Precision::kBF16, "bf16"},
                                                              {Precision::kFP16, "fp16"}};
std::string to_string(Precision value);
/// The precisions of a comma-separated list ("float32,bf16"); an unknown or repeated name is an
/// error naming `option`.
std::vector<Precision> parse_precisions(const std::string& list,
                                        const std::string& option = "--precision");

/// Where a case runs: a device and a dtype, under a name that is unique per workload.
struct Target {
  std::string name; ///< "cpu", "cuda", "cuda:1", "cpu-float64", "cuda-bf16"
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  std::string unavailable; ///< why it cannot run here; "" when it can
  /// tf32, bf16 or fp16 (dtype float32); empty: plainly `dtype`.
  std::optional<Precision> precision = std::nullopt;

  /// The precision the target trains in (`precision`, or the dtype's).
  Precision effective_precision() const;
};

/// The targets for the devices asked for: "auto" (the CPU, and cuda:0 where there is one) or a
/// comma-separated list of "cpu", "cuda" (cuda:0, named "cuda"), "cuda:N" and "cuda:all" (every
/// visible GPU, named "cuda:0", "cuda:1", ...), in `dtype` (the suite's float32, or a user's
/// model's own). A CUDA device that is not there stays in the list, `unavailable` saying why, so
/// its cases are reported as skipped. With one CPU target and no GPU, a CPU target in the other
/// precision is added so that parity is still measured, labelled as what it is ("cpu-float64",
/// or "cpu-float32" beside a float64 "cpu").
std::vector<Target> resolve_targets(const std::string& devices,
                                    torch::Dtype dtype = torch::kFloat32);

/// The targets for the devices asked for in each precision of `precisions` (device-major:
/// cpu in every precision, then cuda ...). A target in `dtype`'s own precision keeps the
/// device's name ("cpu"); the others are suffixed ("cpu-bf16", "cuda-tf32"). A precision a
/// device cannot run (tf32 and fp16 on the CPU) is a target with `unavailable` saying why. No
/// parity partner is added: the precisions are compared with each other. Empty `precisions`:
/// resolve_targets(devices, dtype).
std::vector<Target> resolve_targets(const std::string& devices, torch::Dtype dtype,
                                    const std::vector<Precision>& precisions);

/// The target a target is compared with in a run: the one in the run's own precision on the same
/// device where this one is in another precision (cpu-bf16 against cpu), else the first.
/// Returns the index into `targets`; `i` > 0.
size_t reference_target(const std::vector<Target>& targets, size_t i, torch::Dtype dtype);

/// Stop-on-noise timing (as nvbench's): after a workload's own timed epochs, more while the
/// coefficient of variation of the epoch times is above `cv_target`, until `max_seconds` of
/// timed epochs, `max_epochs` timed epochs or the case's time limit.
struct StopOnNoise {
  double cv_target = 0; ///< e.g. 0.02; 0: off, exactly the workload's epochs
  double max_seconds = 0;
  int64_t max_epochs = 200;

  /// `cv_target` (0 <= it < 1; 0: off) with the time cap `cv_max_seconds`, or where that is 0
  /// the suite's: 0.5 s (quick), 5 s (default), 30 s (full) of timed epochs per case. A value out
  /// of range is an error naming --cv-target or --cv-max-time.
  static StopOnNoise for_suite(const std::string& suite, double cv_target = 0.02,
                               double cv_max_seconds = 0);
};

/// A case's time limit in a suite when none is given: 60 s (quick), 120 s (default), 900 s (full).
double suite_time_limit(const std::string& suite);

/// Caps the caching allocator of every GPU target that can run at `fraction` of its memory
/// (set_memory_fraction); 0 caps nothing. A fraction outside (0, 1] is an error naming
/// --memory-fraction.
void cap_gpu_memory(const std::vector<Target>& targets, double fraction);

/// Parity tolerances per dtype (the less precise side of a comparison decides) and optimiser;
/// documented in docs/commands.md ("Precision") and written into every comparison.
struct ParityTolerances {
  double output_rel;       ///< forward outputs at initialisation, max |a-b| / max |a|
  double grad_rel;         ///< gradients at initialisation, max |a-b| / max |a| per tensor
  double loss_curve_rel;   ///< per-epoch losses, max |a-b| / |a|
  double final_metric_rel; ///< final test RMSE, |a-b| / a
  double accuracy_points;  ///< final accuracy, |a-b| in percentage points
};
ParityTolerances parity_tolerances(torch::Dtype less_precise, Optimizer opt);
/// The same per precision: tf32, fp16 and bf16 have 10, 10 and 7 mantissa bits where float32 has
/// 23, so their limits are wider (docs/commands.md, "Precision").
ParityTolerances parity_tolerances(Precision less_precise, Optimizer opt);

/// What a run records beside the timings: CUPTI activity of GPU epochs, and (for --trace) the
/// kernel and copy records with the epoch and step ranges, for a Chrome trace.
struct Instrumentation {
  bool cupti = true;       ///< trace GPU epochs with CUPTI (off: --no-cupti)
  bool keep_trace = false; ///< keep records and ranges for write_chrome_trace
  /// Sample the device during the timed epochs (NVML on a GPU, the process's CPU utilisation on
  /// the CPU) at this interval, seconds; 0: off.
  double monitor_interval_seconds = 0.1;
  diagnostics::ActivityRecords records;
  std::vector<diagnostics::TraceRange> ranges;
};

/// Progress of a run, for a terminal.
struct Progress {
  int64_t case_index = 0, case_count = 0; ///< 1-based
  std::string case_name, target;
  int64_t epoch = 0, epochs = 0; ///< 1-based, warm-up included
  double elapsed_seconds = 0;    ///< since the run started
  double remaining_seconds = -1; ///< estimate; < 0 when unknown
};

struct SuiteOptions {
  std::string suite = "default";
  std::string devices = "auto";
  /// Timed epochs per case; 0 = the suite's own count.
  int64_t repeat = 0;
  /// Workload names to run; empty = all.
  std::vector<std::string> cases;
  /// Precisions to run each device in (resolve_targets); empty: the suite's float32 (or the
  /// user's model's dtype), with a parity partner in the other precision on a CPU-only machine.
  std::vector<Precision> precisions;
  /// A user's model to run instead of the suite's workloads (model_workload); "" = none. Its
  /// dtype is the targets' (resolve_targets). Excludes `cases`.
  std::string model;
  /// Loads `model` where it is a TorchScript archive (kan::ModelFileOptions::trust_torchscript).
  bool trust_torchscript = false;
  /// A TorchScript model's input width without `data` (its synthetic regression's); 0: the data's.
  int64_t model_inputs = 0;
  /// The user's model's data, any file kan::load_dataset reads; "" = synthetic (needs `model`).
  std::string data;
  /// How `data` is read: columns, test set (kan::load_dataset; model_workload sets the dtype,
  /// the device and classification).
  LoadDatasetOptions data_options;
  /// The loss the user's model trains with: MSE, or cross-entropy on class labels.
  Loss loss = Loss::kMSE;
  /// Per-case limit; 0 = the suite's default (quick 60 s, default 120 s, full 900 s).
  double time_limit_seconds = 0;
  bool edge_cases = true;
  /// Count kernels and copies of GPU epochs with CUPTI.
  bool cupti = true;
  /// Seconds between device-monitor samples during timed epochs (Instrumentation); 0: off.
  double monitor_interval_seconds = 0.1;
  /// Stop-on-noise target for the epoch times' coefficient of variation (0: off, exactly
  /// `repeat` epochs), and the timed seconds per case it may use (0: the suite's default).
  double cv_target = 0.02;
  double cv_max_seconds = 0;
  /// Caps the CUDA caching allocator of every GPU target at this fraction of the device's
  /// memory (0 < F <= 1), so a large GPU stands in for a smaller one; 0: no cap.
  double memory_fraction = 0;
  /// Frees the caching allocator's cached blocks before every case.
  bool empty_cache = false;
  /// Write a Chrome trace (kernels, copies, epoch and step ranges) here; "" = none.
  std::string trace_file;
  /// Only this share of the plan (kan/bench/shards.h), balanced by expected_cost: whole
  /// workloads, each on every target (a parity comparison needs both sides in one process), and
  /// the edge cases as one item. The configuration then names every workload of the plan
  /// (RunConfig::cases), so that `kanbench merge` can check and order the shards. None: all.
  std::optional<results::Shard> shard;
  std::function<void(const Progress&)> on_progress;
  /// Called with the message when an output written during the run (the trace) cannot be
  /// written; the run goes on and its results are still returned. Unset: the error is thrown.
  std::function<void(const std::string&)> on_output_error;
};

/// The expected cost of a workload on one target (kan::bench::expected_step_cost's unit): its
/// warm-up and timed epochs' steps, and the timed seconds stop-on-noise may add.
double expected_cost(const Workload& workload, const StopOnNoise& noise);

/// Runs the suite. Never throws for a case that fails: it is recorded with its status and
/// reason (failed, oom, timeout, skipped), and the run goes on.
///
/// Example:
///   auto results = kan::bench::run_suite(kan::bench::SuiteOptions{.suite = "quick"});
///   kan::results::write_results_file("results.json", results);
results::Results run_suite(const SuiteOptions& options);

/// One workload on one target (the building block of run_suite). Each epoch is an NVTX range
/// (steps too); on a GPU each timed epoch is traced by CUPTI unless instrumentation says not.
/// `on_epoch` gets the epoch and the most epochs the case may run.
results::CaseResult
run_case(const Workload& workload, const Target& target, double time_limit_seconds,
         const std::function<void(int64_t epoch, int64_t epochs)>& on_epoch = {},
         Instrumentation* instrumentation = nullptr, const StopOnNoise& noise = {});

/// Result parity and speed of a workload on two targets that both ran.
results::Comparison compare_targets(const Workload& workload, const Target& a, const Target& b,
                                    const results::CaseResult& result_a,
                                    const results::CaseResult& result_b);

/// The edge cases' names, in the order run_edge_cases reports them.
const std::vector<std::string>& edge_case_names();
/// The names of a user's model's edge cases, in the order run_model_edge_cases reports them.
const std::vector<std::string>& model_edge_case_names();

/// An edge case that did not run, with the reason.
results::EdgeCaseResult skipped_edge_case(const std::string& name, const std::string& device,
                                          const std::string& reason);

/// The edge cases on one device, in float32 whatever the target's dtype: empty input, one sample,
/// 2^20 samples through a 100-input model in bounded memory, out of memory (GPU), a case past its
/// time limit.
std::vector<results::EdgeCaseResult> run_edge_cases(const Target& target, const std::string& suite);

/// The edge cases of a user's model (Workload::model) on one device, in the target's dtype: empty
/// input (a (0, outputs) forward; fit refuses the empty set), one sample (forward, backward and an
/// Adam step finite), and 2^20 samples (2^16 in quick) streamed in chunks of 16384 through an
/// evaluation and an epoch of minibatches within 512 MiB of extra memory.
std::vector<results::EdgeCaseResult>
run_model_edge_cases(const Workload& workload, const Target& target, const std::string& suite);

} // namespace kan::bench
