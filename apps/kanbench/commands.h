#pragma once
// The kanbench subcommands. Each add_*_command registers one subcommand on the app; its
// callback stores the process exit code in `exit_code`.

#include "kan/distributed/data_parallel.h"
#include "kan/io/text.h"
#include "kan/results/results.h"

#include <CLI/CLI.hpp>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kanbench {

/// `kanbench fit`: trains a KAN on a reference function and writes fit.json and a checkpoint.
void add_fit_command(CLI::App& app, int& exit_code);

/// `kanbench accuracy`: KANs and MLPs on the KAN paper's function tables -> results.json with an
/// accuracy section, resumable.
void add_accuracy_command(CLI::App& app, int& exit_code);

/// `kanbench merge`: the shards of one accuracy, run or sweep plan -> one results.json and report;
/// exit 1 when some of the plan is missing or failed, 2 when the shards cannot be merged.
void add_merge_command(CLI::App& app, int& exit_code);

/// `kanbench env`: prints the environment report (versions, CUDA, devices, CPU, threads).
void add_env_command(CLI::App& app, int& exit_code);

/// `kanbench audit`: static audit plus traced training steps of a model on a device; exit 0
/// clean, 1 findings, 2 could not run.
void add_audit_command(CLI::App& app, int& exit_code);

/// `kanbench run`: the benchmark suite (per-epoch timing, parity, edge cases), or the same on a
/// user's model (--model) -> results.json.
void add_run_command(CLI::App& app, int& exit_code);

/// `kanbench scaling`: data-parallel training at 1, 2, ... ranks of this machine -> results.json.
void add_scaling_command(CLI::App& app, int& exit_code);

/// `kanbench sweep`: throughput against batch size per target, the crossover, the max batch.
void add_sweep_command(CLI::App& app, int& exit_code);

/// `kanbench predict`: a model's outputs for the samples of a CSV file, written as CSV.
void add_predict_command(CLI::App& app, int& exit_code);

/// `kanbench compare OLD.json NEW.json`: baseline comparison, a CI gate with --fail-on-regression.
void add_compare_command(CLI::App& app, int& exit_code);

/// `kanbench report RESULTS.json`: the self-contained HTML report.
void add_report_command(CLI::App& app, int& exit_code);

/// `kanbench import-pykan PREFIX --out DIR`: a pykan checkpoint -> DIR/model.pt.
void add_import_pykan_command(CLI::App& app, int& exit_code);

/// `kanbench export-pykan CHECKPOINT PREFIX`: a kanbench checkpoint -> a pykan checkpoint.
void add_export_pykan_command(CLI::App& app, int& exit_code);

/// `kanbench export-torchscript MODEL OUT`: a kanbench KAN or MLP as a TorchScript module.
void add_export_torchscript_command(CLI::App& app, int& exit_code);

/// `kanbench functions`: the reference functions (--table builtin|special|feynman), as a table or
/// --json.
void add_functions_command(CLI::App& app, int& exit_code);

/// --cv-target and --cv-max-time (stop-on-noise timing), shared by `run` and `sweep`.
void add_noise_options(CLI::App& command, double& cv_target, double& cv_max_time);

/// --trust-torchscript, shared by every command that takes --model: loading a TorchScript archive
/// runs its code (kan/serialize/torchscript.h).
void add_trust_torchscript_flag(CLI::App& command, bool& trust);

/// --memory-fraction and --empty-cache, shared by `run` and `sweep`.
void add_memory_options(CLI::App& command, double& memory_fraction, bool& empty_cache);

/// --shard I/N and --shard-count N, shared by `accuracy`, `run` and `sweep`.
struct ShardArgs {
  std::string shard;                  ///< --shard I/N
  std::optional<int64_t> shard_count; ///< --shard-count N, with JOB_COMPLETION_INDEX
};
/// Registers them; `items` says what the plan is split into ("fits").
void add_shard_options(CLI::App& command, ShardArgs& args, const std::string& items);
/// The shard this process runs: --shard's, else the one a scheduler's variables name
/// (kan::bench::shard_from_environment); none: the whole plan. With one, `out` becomes its folder,
/// OUT/shard-I-of-N.
std::optional<kan::results::Shard> resolve_shard(const ShardArgs& args, std::string& out);

/// A progress line's estimate of the time left: "~42 s", or "?" while there is none (< 0).
std::string time_left_text(double remaining_seconds);

/// How every command that measures and writes ends, by the README's exit-code rule: each problem
/// on a "problem:" line and each output that could not be written on a "not written:" line, then
/// 2 when an output is missing (the command did not do its job), 1 when the thing checked failed
/// (`problems`, e.g. kan::results::run_problems), 0 otherwise.
int finish_command(const std::vector<std::string>& problems,
                   const std::vector<std::string>& not_written);

/// Writes DIR/results.json and DIR/report.html (titled `title`; "" = the default) of a run.
/// A write that fails does not stop the other: its message goes to stderr and into `failures`.
/// Returns the two paths.
std::pair<std::string, std::string> write_results_and_report(const kan::results::Results& results,
                                                             const std::string& out,
                                                             const std::string& title,
                                                             std::vector<std::string>& failures);

/// One "warning: ..." line for each thing of the run's environment that may have skewed its CPU
/// timings (a busy machine, a governor other than "performance", fewer threads than CPUs).
void print_timing_warnings(const kan::results::Environment& environment);

using kan::io::first_line; // the first line of an exception's message (no backtrace)

/// Joins the torchrun launch this process is a rank of (kan::DataParallel::join, which
/// kan::distributed holds). A kanbench built without kan::distributed (-DKAN_BUILD_DISTRIBUTED=OFF,
/// where Gloo's headers are missing) refuses in one line naming `option`.
std::shared_ptr<kan::DataParallel> join_launch(torch::Device device,
                                               const kan::DataParallelOptions& options,
                                               const std::string& option);
/// Refuses what needs data-parallel training in a kanbench built without kan::distributed,
/// naming `option`.
void check_can_join_launches(const std::string& option);

/// "cpu", "cuda" or "cuda:N" (and "meta" where the command rehearses a GPU run there) as a
/// device; an unusable CUDA device is an error that says why (from the environment report).
/// `option` names the flag in the message.
torch::Device parse_device(const std::string& name, const std::string& option = "--device",
                           bool meta_allowed = false);

} // namespace kanbench
