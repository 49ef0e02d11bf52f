// `kanbench run`: the benchmark suite; writes DIR/results.json and DIR/report.html.
#include "commands.h"
#include "data_options.h"
#include "option_checks.h"

#include "kan/bench/shards.h"
#include "kan/bench/suite.h"
#include "kan/io/atomic_file.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

namespace kanbench {
namespace {

// The suite's options are filled by the command line directly; the rest says where the results
// go and holds what needs parsing or loading first.
struct RunArgs {
  kan::bench::SuiteOptions suite;
  std::string precisions; ///< parsed into suite.precisions
  DataArgs data;          ///< loaded into suite.data, data_options and loss
  std::string out = "kanbench-out/run";
  ShardArgs shard;
};

// Case i/N, epoch j/M, elapsed and remaining: one rewritten line on a terminal, a line per
// epoch otherwise.
void print_progress(const kan::bench::Progress& p) {
  static const bool tty = isatty(fileno(stderr));
  const auto remaining = time_left_text(p.remaining_seconds);
  std::fprintf(stderr, "%scase %lld/%lld %s on %s: epoch %lld/%lld  %.1f s elapsed, %s left%s",
               tty ? "\r\033[K" : "", static_cast<long long>(p.case_index),
               static_cast<long long>(p.case_count), p.case_name.c_str(), p.target.c_str(),
               static_cast<long long>(p.epoch), static_cast<long long>(p.epochs), p.elapsed_seconds,
               remaining.c_str(), tty ? "" : "\n");
}

int run(RunArgs& a) {
  kan::bench::SuiteOptions options = a.suite;
  options.shard = resolve_shard(a.shard, a.out);
  if (options.shard && !options.trace_file.empty())
    options.trace_file = kan::bench::shard_file(options.trace_file, *options.shard);
  // Every output path is checked before the first case is measured.
  kan::io::check_output_folder(a.out, "--out");
  if (!options.trace_file.empty())
    kan::io::check_output_file(options.trace_file, "--trace");
  if (options.shard)
    std::cerr << "run: shard " << options.shard->text() << " of the plan, by "
              << options.shard->source << "\n";
  std::vector<std::string> write_failures;
  auto report_failure = [&](const std::string& message) {
    std::cerr << "kanbench: error: " << message << "\n";
    write_failures.push_back(message);
  };

  if (!a.precisions.empty())
    options.precisions = kan::bench::parse_precisions(a.precisions);
  options.data = a.data.data;
  // The data file's options only mean something with a file (and --loss with a model).
  a.data.check_needs_data();
  options.model_inputs = a.data.width_without_data();
  TORCH_CHECK(options.model_inputs == 0 || !options.model.empty(), "--inputs ", a.data.inputs,
              " needs --model (the input width of a TorchScript model)");
  TORCH_CHECK(a.data.loss == "mse" || !options.model.empty(), "--loss ", a.data.loss,
              " needs --model (the suite's workloads have their own losses)");
  options.data_options = a.data.load_options();
  options.loss = a.data.loss_kind();
  options.on_progress = print_progress;
  options.on_output_error = report_failure;
  auto results = kan::bench::run_suite(options);
  results.config.out = a.out;
  if (isatty(fileno(stderr)))
    std::fprintf(stderr, "\n");

  // A late write that fails does not stop the others, nor the summary below.
  const auto [path, report] = write_results_and_report(results, a.out, "", write_failures);

  // What was read from --data (format, header, split, columns), once.
  if (!results.cases.empty() && results.cases.front().config.is_object() &&
      results.cases.front().config.contains("data_description"))
    std::cout << "data: " << results.cases.front().config["data_description"].get<std::string>()
              << "\n";

  for (const auto& c : results.cases) {
    std::cout << c.name << " on " << c.target << ": " << kan::results::to_string(c.status);
    if (c.status == kan::results::CaseStatus::kOk)
      std::cout << ", epoch "
                << (c.median_epoch_seconds ? kan::io::format_seconds(*c.median_epoch_seconds) : "-")
                << " (IQR "
                << (c.iqr_epoch_seconds ? kan::io::format_seconds(*c.iqr_epoch_seconds) : "-")
                << ")";
    else
      std::cout << " (" << c.reason << ")";
    std::cout << "\n";
  }
  print_timing_warnings(results.environment);
  for (const auto& c : results.cases)
    if (c.monitoring)
      for (const auto& finding : c.monitoring->findings)
        std::cout << "warning: " << c.name << " on " << c.target << ": " << finding << "\n";
  for (const auto& c : results.comparisons) {
    std::printf("%s %s vs %s: speedup %.3g, parity %s%s\n", c.case_name.c_str(), c.a.c_str(),
                c.b.c_str(), c.speedup.value_or(0), kan::results::to_string(c.parity).c_str(),
                c.message.empty() ? "" : (" (" + c.message + ")").c_str());
  }
  for (const auto& e : results.edge_cases)
    if (e.status == kan::results::EdgeStatus::kFail)
      std::cout << "edge case " << e.name << " on " << e.device << ": FAIL: " << e.message << "\n";
  const bool edge_cases_elsewhere =
      options.shard && options.edge_cases && results.edge_cases.empty();
  std::printf("edge cases: %s; %.1f s in all -> %s, %s\n",
              edge_cases_elsewhere ? "in another shard's share"
                                   : kan::results::edge_case_summary(results.edge_cases).c_str(),
              results.wall_seconds.value_or(0), path.c_str(), report.c_str());
  if (results.rehearsal) {
    size_t findings = 0;
    for (const auto& c : results.rehearsal->cases)
      findings += c.findings.size();
    std::cout << "rehearsal: " << results.rehearsal->reason
              << "; each case's GPU run was rehearsed on the meta device: " << findings
              << (findings == 1 ? " finding" : " findings") << "\n";
  }
  // The CI gate: exit 1 on a failed case, parity, edge case or audit finding; 2 when an output
  // could not be written (the run did not do its job, whatever it measured).
  return finish_command(kan::results::run_problems(results), write_failures);
}

} // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run", "Run the benchmark suite on every device, or the same on your model (--model): "
             "per-epoch time, parity, edge cases; writes DIR/results.json and report.html. Exit 0 "
             "when every case, parity check and edge "
             "case passed with no audit finding, 1 otherwise (the results are written either "
             "way), 2 when it could not run or write its outputs");
  cmd->add_option("--suite", args->suite.suite,
                  "quick (seconds), default (minutes), full (GPU sizes)")
      ->check(CLI::IsMember(kan::bench::suite_names()))
      ->capture_default_str();
  cmd->add_option("--devices", args->suite.devices,
                  "auto, or a list of cpu, cuda, cuda:N and cuda:all (every visible GPU)")
      ->capture_default_str();
  cmd->add_option("--repeat", args->suite.repeat, "Timed epochs per case (0: the suite's own)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--case", args->suite.cases,
                  "Only these workloads, e.g. toy,deep (toy, deep, wide, million; the MLP "
                  "baselines toy-mlp, deep-mlp)")
      ->delimiter(',');
  cmd->add_option("--precision", args->precisions,
                  "Precisions to run every device in, e.g. float64,float32,tf32,bf16,fp16: each a "
                  "target, compared with float32 on its device (tf32 and fp16: CUDA only; bf16 "
                  "and fp16 under autocast, fp16 with loss scaling). Default: float32");
  cmd->add_option("--model", args->suite.model,
                  "Instead of the workloads: time, compare and audit this model (a kanbench "
                  "checkpoint, a pykan saveckpt prefix, or a TorchScript archive with "
                  "--trust-torchscript), trained with LBFGS at full batch");
  add_trust_torchscript_flag(*cmd, args->suite.trust_torchscript);
  add_data_options(cmd, args->data,
                   "The model's data: a CSV file, a NumPy .npy or .npz, or pykan's create_dataset "
                   "dict saved with torch.save (docs/formats.md, \"Data files\"; default: "
                   "synthetic, from the model itself)",
                   "Loss of --model's training: mse, or cross-entropy (--data's target: one "
                   "column of integer class labels below the model's output count; accuracy "
                   "reported)");
  cmd->add_option("--time-limit", args->suite.time_limit_seconds,
                  "Seconds per case before it is recorded as timeout (0: the suite's default)")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_flag_callback(
      "--no-edge-cases", [args] { args->suite.edge_cases = false; }, "Skip the edge cases");
  cmd->add_flag_callback(
      "--no-cupti", [args] { args->suite.cupti = false; },
      "Do not count GPU kernels and copies with CUPTI");
  add_noise_options(*cmd, args->suite.cv_target, args->suite.cv_max_seconds);
  add_memory_options(*cmd, args->suite.memory_fraction, args->suite.empty_cache);
  cmd->add_option("--monitor-interval", args->suite.monitor_interval_seconds,
                  "Seconds between samples of the device during timed epochs: NVML on a GPU "
                  "(utilisation, memory, SM clock, power, temperature, throttling), the process's "
                  "CPU utilisation on the CPU (0: off)")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--trace", args->suite.trace_file,
                  "Write a Chrome trace (kernels, copies, epoch and step ranges) that Perfetto "
                  "opens");
  add_shard_options(*cmd, args->shard,
                    "workloads (each on every target, as parity needs both) and edge cases");
  cmd->add_option("--out", args->out, "Output folder for results.json")->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

} // namespace kanbench
