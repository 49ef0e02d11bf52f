// Helpers shared by the kanbench subcommands.
#include "commands.h"
#include "option_checks.h"

#include "kan/bench/shards.h"
#include "kan/diagnostics/environment.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

namespace kanbench {

torch::Device parse_device(const std::string& name, const std::string& option, bool meta_allowed) {
  const std::string choices = meta_allowed ? "cpu, cuda, cuda:N or meta" : "cpu, cuda or cuda:N";
  std::unique_ptr<torch::Device> device;
  try {
    device = std::make_unique<torch::Device>(name);
  } catch (const c10::Error&) {
    TORCH_CHECK(false, option, " must be ", choices, ", got '", name, "'");
  }
  TORCH_CHECK(device->is_cpu() || device->is_cuda() || (meta_allowed && device->is_meta()), option,
              " must be ", choices, ", got '", name, "'");
  if (device->is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), option, " ", name,
                " requested but no CUDA device: ", kan::diagnostics::cuda_unavailable_reason(),
                " (kanbench env shows the whole report)");
    TORCH_CHECK(!device->has_index() ||
                    device->index() < static_cast<int>(torch::cuda::device_count()),
                option, " ", name, " requested but only ", torch::cuda::device_count(),
                " CUDA device(s) are visible");
  }
  return *device;
}

void print_timing_warnings(const kan::results::Environment& e) {
  for (const auto& p : kan::diagnostics::timing_problems(e.cpu_cores, e.torch_threads,
                                                         e.load_average, e.cpu_governor))
    std::cout << "warning: " << p.what << ". Fix: " << p.fix << "\n";
}

void add_noise_options(CLI::App& command, double& cv_target, double& cv_max_time) {
  command
      .add_option("--cv-target", cv_target,
                  "Stop on noise: after --repeat epochs, time more until the epoch times' "
                  "coefficient of variation is below this (0: off, exactly --repeat epochs)")
      ->check(finite_number(0, false, 0.999))
      ->capture_default_str();
  command
      .add_option("--cv-max-time", cv_max_time,
                  "Seconds of timed epochs per case that stop-on-noise may use (0: the suite's "
                  "0.5 s quick, 5 s default, 30 s full)")
      ->check(finite_number(0))
      ->capture_default_str();
}

void add_trust_torchscript_flag(CLI::App& command, bool& trust) {
  command.add_flag(
      "--trust-torchscript", trust,
      "Load --model where it is a TorchScript archive (torch.jit.save): such a file is "
      "a program that LibTorch compiles and runs, and its loader is not hardened "
      "against crafted files, so only files you trust");
}

void add_memory_options(CLI::App& command, double& memory_fraction, bool& empty_cache) {
  command
      .add_option("--memory-fraction", memory_fraction,
                  "Cap every GPU target's caching allocator at this fraction of its memory, so a "
                  "large GPU stands in for a smaller one (0 < F <= 1; 0: no cap)")
      ->check(finite_number(0, false, 1))
      ->capture_default_str();
  command.add_flag("--empty-cache", empty_cache,
                   "Free the caching allocator's cached GPU memory before every case");
}

void check_can_join_launches(const std::string& option) {
#ifndef KAN_HAS_DISTRIBUTED
  TORCH_CHECK(false, option,
              ": this kanbench was built without data-parallel training (kan::distributed, "
              "which needs Gloo's headers: configure with -DKAN_BUILD_DISTRIBUTED=ON)");
#else
  (void)option;
#endif
}

std::shared_ptr<kan::DataParallel> join_launch(torch::Device device,
                                               const kan::DataParallelOptions& options,
                                               const std::string& option) {
  check_can_join_launches(option);
#ifdef KAN_HAS_DISTRIBUTED
  return kan::DataParallel::join(kan::LaunchEnvironment::from_environment(), device, options);
#else
  (void)device;
  (void)options;
  return nullptr;
#endif
}

int finish_command(const std::vector<std::string>& problems,
                   const std::vector<std::string>& not_written) {
  for (const auto& p : problems)
    std::cout << "problem: " << p << "\n";
  for (const auto& f : not_written)
    std::cout << "not written: " << f << "\n";
  if (!not_written.empty())
    return 2;
  return problems.empty() ? 0 : 1;
}

std::pair<std::string, std::string> write_results_and_report(const kan::results::Results& results,
                                                             const std::string& out,
                                                             const std::string& title,
                                                             std::vector<std::string>& failures) {
  const auto path = (std::filesystem::path(out) / "results.json").string();
  const auto report = (std::filesystem::path(out) / "report.html").string();
  auto failed = [&](const std::exception& e) {
    std::cerr << "kanbench: error: " << first_line(e.what()) << "\n";
    failures.push_back(first_line(e.what()));
  };
  try {
    kan::results::write_results_file(path, results);
  } catch (const std::exception& e) {
    failed(e);
  }
  try {
    kan::reports::HtmlReportOptions html;
    html.results_source = "results.json";
    if (!title.empty())
      html.title = title;
    kan::reports::write_html_report(report, results, html);
  } catch (const std::exception& e) {
    failed(e);
  }
  return {path, report};
}

std::string time_left_text(double remaining_seconds) {
  if (remaining_seconds < 0)
    return "?";
  char text[32];
  std::snprintf(text, sizeof text, "~%.0f s", remaining_seconds);
  return text;
}

void add_shard_options(CLI::App& command, ShardArgs& args, const std::string& items) {
  command.add_option("--shard", args.shard,
                     "Run only shard I of N of the plan's " + items +
                         " (I/N, 0 <= I < N), balanced by expected cost, into OUT/shard-I-of-N; "
                         "`kanbench merge` joins the shards. Unset: the index and count of a Slurm "
                         "array, a Kubernetes indexed Job (with --shard-count) or "
                         "GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS where set");
  command
      .add_option("--shard-count", args.shard_count,
                  "The shard count where JOB_COMPLETION_INDEX gives the index (a Kubernetes "
                  "indexed Job's completions)")
      ->check(integer_at_least(1));
}

std::optional<kan::results::Shard> resolve_shard(const ShardArgs& args, std::string& out) {
  std::optional<kan::results::Shard> shard;
  if (!args.shard.empty()) {
    TORCH_CHECK(!args.shard_count, "--shard-count goes with JOB_COMPLETION_INDEX; --shard ",
                args.shard, " names its count already");
    shard = kan::bench::parse_shard(args.shard);
  } else {
    shard = kan::bench::shard_from_environment(args.shard_count);
  }
  if (shard)
    out = kan::bench::shard_folder(out, *shard);
  return shard;
}

} // namespace kanbench
