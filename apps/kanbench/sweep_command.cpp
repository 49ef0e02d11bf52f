// `kanbench sweep`: throughput against batch size per target; writes DIR/results.json and
// DIR/report.html.
#include "commands.h"
#include "data_options.h"
#include "option_checks.h"

#include "kan/bench/sweep.h"
#include "kan/io/atomic_file.h"
#include "kan/nn/memory.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

namespace kanbench {
namespace {

struct SweepArgs {
  kan::bench::SweepOptions options;
  std::string batches = "auto";
  DataArgs data; ///< loaded into options.data, data_options and loss
  std::string out = "kanbench-out/sweep";
  ShardArgs shard;
};

// "auto", or a comma-separated list of batch sizes >= 1.
std::vector<int64_t> parse_batches(const std::string& text) {
  if (text == "auto")
    return {};
  std::vector<int64_t> batches;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t b = 0;
    try {
      b = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TORCH_CHECK(used == item.size() && !item.empty() && b >= 1,
                "--batch must be auto or a list of integers >= 1, got '", shown(text), "'");
    batches.push_back(b);
  }
  TORCH_CHECK(!batches.empty(), "--batch names no batch size");
  return batches;
}

int run(SweepArgs& a) {
  auto& o = a.options;
  o.shard = resolve_shard(a.shard, a.out);
  kan::io::check_output_folder(a.out, "--out");
  if (o.shard)
    std::cerr << "sweep: shard " << o.shard->text() << " of the plan, by " << o.shard->source
              << "\n";
  o.batches = parse_batches(a.batches);
  a.data.check_needs_data();
  o.model_inputs = a.data.width_without_data();
  TORCH_CHECK((o.model_inputs == 0 && a.data.loss == "mse") || !o.model.empty(),
              "--inputs and "
              "--loss need --model (the suite's workloads have their own)");
  o.data = a.data.data;
  o.data_options = a.data.load_options();
  o.loss = a.data.loss_kind();
  o.on_progress = [](const kan::bench::Progress& p) {
    static const bool tty = isatty(fileno(stderr));
    if (p.case_count == 0)
      std::fprintf(stderr, "%s%s on %s...%s", tty ? "\r\033[K" : "", p.case_name.c_str(),
                   p.target.c_str(), tty ? "" : "\n");
    else
      std::fprintf(stderr, "%spoint %lld/%lld %s on %s: epoch %lld/%lld  %.1f s elapsed, %s left%s",
                   tty ? "\r\033[K" : "", static_cast<long long>(p.case_index),
                   static_cast<long long>(p.case_count), p.case_name.c_str(), p.target.c_str(),
                   static_cast<long long>(p.epoch), static_cast<long long>(p.epochs),
                   p.elapsed_seconds, time_left_text(p.remaining_seconds).c_str(), tty ? "" : "\n");
  };
  auto results = kan::bench::run_sweep(o);
  results.config.out = a.out;
  if (isatty(fileno(stderr)))
    std::fprintf(stderr, "\n");
  std::vector<std::string> write_failures;
  const auto [path, report] =
      write_results_and_report(results, a.out, "kanbench batch-size sweep", write_failures);

  const auto& sweep = *results.sweep;
  for (const auto& p : sweep.points) {
    std::printf("%s batch %lld on %s: %s", p.case_name.c_str(), static_cast<long long>(p.batch),
                p.target.c_str(), kan::results::to_string(p.status).c_str());
    if (p.samples_per_second)
      std::printf(", %.4g samples/s (epoch %s, CV %.1f%%)", *p.samples_per_second,
                  kan::io::format_seconds(*p.median_epoch_seconds).c_str(),
                  100 * p.epoch_cv.value_or(0));
    if (p.samples_per_second && p.peak_memory_bytes && p.batch > 0)
      std::printf(", peak memory %s (%s a sample)", kan::format_bytes(*p.peak_memory_bytes).c_str(),
                  kan::format_bytes(*p.peak_memory_bytes / p.batch).c_str());
    if (!p.samples_per_second)
      std::printf(" (%s)", p.reason.c_str());
    std::printf("\n");
  }
  for (const auto& t : sweep.targets) {
    std::printf("%s on %s:", t.case_name.c_str(), t.target.c_str());
    if (t.best_batch)
      std::printf(" best %.4g samples/s at batch %lld, saturates at batch %lld",
                  *t.best_samples_per_second, static_cast<long long>(*t.best_batch),
                  static_cast<long long>(*t.saturation_batch));
    if (t.max_batch)
      std::printf("; max batch %lld", static_cast<long long>(*t.max_batch));
    if (!t.max_batch_reason.empty())
      std::printf("; max batch: %s", t.max_batch_reason.c_str());
    std::printf("\n");
  }
  for (const auto& c : sweep.crossovers)
    std::printf("%s: %s\n", c.case_name.c_str(), c.message.c_str());
  print_timing_warnings(results.environment);
  std::printf("%.1f s in all -> %s, %s\n", results.wall_seconds.value_or(0), path.c_str(),
              report.c_str());
  // The CI gate of `run`: a failed point or an audit finding (a GPU epoch without a kernel).
  return finish_command(kan::results::run_problems(results), write_failures);
}

} // namespace

void add_sweep_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SweepArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand(
      "sweep", "Throughput (samples/s) of a workload against the batch size on every target: "
               "where one target overtakes another (the CPU/GPU crossover), where throughput "
               "stops growing, and the largest batch that fits on a GPU; writes "
               "DIR/results.json and report.html. Exit 0 when every point ran (out of memory "
               "and timeouts are measurements) with no audit finding, 1 otherwise, 2 when it "
               "could not run");
  cmd->add_option("--suite", o.suite, "quick, default or full: the workloads' sizes")
      ->check(CLI::IsMember(kan::bench::suite_names()))
      ->capture_default_str();
  auto* cases = cmd->add_option("--case", o.cases, "Workloads (toy, deep, wide, million)")
                    ->delimiter(',')
                    ->capture_default_str();
  cmd->add_option("--model", o.model,
                  "Instead of --case: sweep this model (a kanbench checkpoint, a pykan saveckpt "
                  "prefix, or a TorchScript archive with --trust-torchscript)")
      ->excludes(cases);
  add_trust_torchscript_flag(*cmd, o.trust_torchscript);
  add_data_options(cmd, args->data,
                   "--model's data, any file `run --data` reads (default: synthetic, from the "
                   "model itself, enlarged to each batch)",
                   "Loss of --model's training: mse or cross-entropy");
  cmd->add_option("--batch", args->batches,
                  "Batch sizes, e.g. 64,256,1024, or auto: powers of two from 16 up to the "
                  "training set, and on a GPU up to the largest batch that fits")
      ->capture_default_str();
  cmd->add_option("--devices", o.devices,
                  "auto, or a list of cpu, cuda, cuda:N and cuda:all (every visible GPU)")
      ->capture_default_str();
  cmd->add_option("--repeat", o.repeat, "Timed epochs per point (0: the suite's own)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--time-limit", o.time_limit_seconds,
                  "Seconds per point before it is recorded as timeout (0: the suite's default)")
      ->check(finite_number(0))
      ->capture_default_str();
  add_noise_options(*cmd, o.cv_target, o.cv_max_seconds);
  add_memory_options(*cmd, o.memory_fraction, o.empty_cache);
  cmd->add_flag("--max-batch", o.max_batch,
                "Search the largest batch that trains one step on every GPU target (doubling, "
                "then bisection; always done for --batch auto)");
  cmd->add_option("--max-batch-limit", o.max_batch_limit,
                  "The max-batch search's upper bound, in samples")
      ->check(integer_at_least(16))
      ->capture_default_str();
  add_shard_options(*cmd, args->shard, "points (a batch on a target) and max-batch searches");
  cmd->add_option("--out", args->out, "Output folder for results.json and report.html")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

} // namespace kanbench
