// `kanbench scaling`: the suite's workloads trained data-parallel on 1, 2, ... ranks of this
// machine (each rank this program again, started as torchrun starts its workers); writes
// DIR/results.json (its `scaling` entries) and DIR/report.html.
#include "commands.h"
#include "option_checks.h"

#include "kan/bench/scaling.h"
#include "kan/diagnostics/environment.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/distributed/data_parallel.h"
#include "kan/io/atomic_file.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

namespace kanbench {
namespace {

namespace fs = std::filesystem;

struct ScalingArgs {
  std::string suite = "default";
  std::vector<std::string> cases{"toy", "deep"};
  std::vector<int64_t> nproc{1, 2};
  std::string device = "cpu";
  std::string dtype = "float32"; // the suite's
  double time_limit = 1800;      // per rank count and case
  kan::DataParallelOptions data_parallel;
  std::string out = "kanbench-out/scaling";
  // One rank of a measurement (started by the command itself): where rank 0 writes its entry.
  std::string rank_result;
};

kan::bench::Workload find_workload(const std::string& suite, const std::string& name) {
  std::string known;
  for (auto& w : kan::bench::suite_workloads(suite)) {
    if (w.name == name)
      return w;
    known += (known.empty() ? "" : ", ") + w.name;
  }
  TORCH_CHECK(false, "--case: no workload '", name, "' (known: ", known, ")");
}

// A rank: join the launch, train, and (rank 0) write the entry.
int run_rank(const ScalingArgs& a) {
  // Every kan phase, the collectives' "communication" included, is an NVTX range during the run.
  kan::diagnostics::NvtxScopes nvtx_scopes;
  auto group = join_launch(parse_device(a.device), a.data_parallel, "kanbench scaling");
  const auto workload = find_workload(a.suite, a.cases.at(0));
  auto entry = kan::bench::train_data_parallel(workload, *group, kan::dtype_from_string(a.dtype));
  if (group->rank() == 0) {
    kan::results::Results results;
    results.scaling.push_back(entry);
    kan::results::write_results_file(a.rank_result, results);
  }
  return 0;
}

// The first line of the ranks' output that reports an error, else the last line of rank 0's.
std::string rank_error(const std::vector<kan::bench::RankExit>& exits) {
  for (const auto& e : exits) {
    std::istringstream lines(e.output);
    for (std::string line; std::getline(lines, line);)
      if (line.find("error: ") != std::string::npos ||
          line.find("out of memory") != std::string::npos)
        return line;
  }
  std::string last;
  std::istringstream lines(exits.front().output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty())
      last = line;
  return last.empty() ? "no output" : last;
}

kan::results::ScalingResult measure(const ScalingArgs& a, const std::string& name, int64_t ranks,
                                    const fs::path& scratch) {
  kan::results::ScalingResult entry;
  entry.case_name = name;
  entry.device = a.device == "cpu" ? "cpu" : "cuda";
  entry.backend = entry.device == "cpu" ? "gloo" : "nccl";
  entry.ranks = ranks;
  if (entry.device == "cuda" && ranks > static_cast<int64_t>(torch::cuda::device_count())) {
    entry.status = kan::results::CaseStatus::kSkipped;
    entry.reason = std::to_string(ranks) + " ranks need as many GPUs; this machine has " +
                   std::to_string(torch::cuda::device_count());
    return entry;
  }
  const auto result = scratch / (name + "-" + std::to_string(ranks) + ".json");
  kan::bench::LocalLaunch launch;
  launch.argv = {fs::read_symlink("/proc/self/exe").string(),
                 "scaling",
                 "--rank-result",
                 result.string(),
                 "--suite",
                 a.suite,
                 "--case",
                 name,
                 "--device",
                 entry.device,
                 "--dtype",
                 a.dtype,
                 "--distributed-timeout",
                 std::to_string(a.data_parallel.timeout_seconds())};
  launch.world_size = static_cast<int>(ranks);
  launch.limit_seconds = a.time_limit;
  // The machine's cores shared between its CPU ranks, so that every rank count uses them all.
  if (entry.device == "cpu")
    launch.environment["OMP_NUM_THREADS"] =
        std::to_string(std::max<int64_t>(1, at::get_num_threads() / ranks));
  const auto exits = kan::bench::launch_local_ranks(launch);
  const bool ok = std::all_of(exits.begin(), exits.end(),
                              [](const kan::bench::RankExit& e) { return e.exit_code == 0; });
  if (ok && fs::exists(result)) {
    auto measured = kan::results::read_results_file(result.string()).scaling.at(0);
    fs::remove(result);
    return measured;
  }
  const bool killed = std::any_of(exits.begin(), exits.end(),
                                  [](const kan::bench::RankExit& e) { return e.killed; });
  entry.status = killed ? kan::results::CaseStatus::kTimeout : kan::results::CaseStatus::kFailed;
  entry.reason =
      killed ? "past --time-limit " + std::to_string(a.time_limit) + " s" : rank_error(exits);
  return entry;
}

int run_scaling(const ScalingArgs& a) {
  check_can_join_launches("kanbench scaling");
  kan::io::check_output_folder(a.out, "--out");
  const auto device = parse_device(a.device);
  TORCH_CHECK(!device.has_index(), "--device: cpu or cuda (rank r uses cuda:r), got ", a.device);
  for (const auto& name : a.cases)
    find_workload(a.suite, name); // refuses an unknown case before anything runs
  auto nproc = a.nproc;
  std::sort(nproc.begin(), nproc.end());
  nproc.erase(std::unique(nproc.begin(), nproc.end()), nproc.end());

  kan::results::Results results;
  results.environment = kan::diagnostics::collect_environment();
  results.config.suite = a.suite;
  results.config.devices = {a.device};
  results.config.cases = a.cases;
  results.config.out = a.out;
  results.config.extra = {{"command", "scaling"}, {"nproc", nproc}, {"dtype", a.dtype}};
  const auto scratch = fs::path(a.out) / ".ranks";
  fs::create_directories(scratch);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& name : a.cases) {
    for (const int64_t n : nproc) {
      std::fprintf(stderr, "scaling: %s on %lld %s rank(s)...\n", name.c_str(),
                   static_cast<long long>(n), a.device.c_str());
      results.scaling.push_back(measure(a, name, n, scratch));
    }
  }
  fs::remove_all(scratch);
  kan::results::fill_scaling_comparisons(results.scaling);
  results.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::vector<std::string> write_failures;
  const auto [path, report] =
      write_results_and_report(results, a.out, "kanbench data-parallel scaling", write_failures);

  for (const auto& s : results.scaling) {
    std::printf("%s on %lld %s rank(s) (%s): %s", s.case_name.c_str(),
                static_cast<long long>(s.ranks), s.device.c_str(), s.backend.c_str(),
                kan::results::to_string(s.status).c_str());
    if (s.status == kan::results::CaseStatus::kOk) {
      std::printf(", epoch %s", s.median_epoch_seconds
                                    ? kan::io::format_seconds(*s.median_epoch_seconds).c_str()
                                    : "-");
      if (s.speedup)
        std::printf(", speedup %.3g, efficiency %.0f%%", *s.speedup, *s.efficiency * 100);
      if (s.communication_seconds)
        std::printf(", waiting for collectives %s/epoch",
                    kan::io::format_seconds(*s.communication_seconds).c_str());
      if (s.bytes_per_step)
        std::printf(", %.0f bytes/step", *s.bytes_per_step);
      if (s.max_rel_loss_diff)
        std::printf(", loss vs 1 rank %.2g", *s.max_rel_loss_diff);
    } else {
      std::printf(" (%s)", s.reason.c_str());
    }
    std::printf("\n");
  }
  std::printf("-> %s, %s\n", path.c_str(), report.c_str());
  return finish_command(kan::results::run_problems(results), write_failures);
}

} // namespace

void add_scaling_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ScalingArgs>();
  auto* cmd = app.add_subcommand(
      "scaling", "Train the suite's workloads data-parallel on 1, 2, ... ranks of this machine "
                 "(c10d: Gloo on cpu, NCCL on cuda) and measure epoch time, speedup, time in "
                 "collectives, bytes per step and parity with 1 rank; writes DIR/results.json and "
                 "report.html. Exit 0 when every rank count ran, 1 otherwise, 2 when it could not "
                 "run (docs/distributed.md)");
  cmd->add_option("--suite", args->suite, "quick, default or full: the workloads' sizes")
      ->check(CLI::IsMember(kan::bench::suite_names()))
      ->capture_default_str();
  cmd->add_option("--case", args->cases, "Workloads (toy, deep, wide, million)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--nproc", args->nproc, "Rank counts, e.g. 1,2,4")
      ->delimiter(',')
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--device", args->device, "cpu (Gloo) or cuda (NCCL, rank r on cuda:r)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "float32 or float64")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  cmd->add_option("--time-limit", args->time_limit,
                  "Seconds one rank count of one case may take before it is a timeout")
      ->check(finite_number(0, true))
      ->capture_default_str();
  cmd->add_option_function<double>(
         "--distributed-timeout",
         [args](double seconds) { args->data_parallel.timeout_seconds(seconds); },
         "Seconds a rank waits for the others before it fails (default 300)")
      ->check(finite_number(0, true));
  cmd->add_option("--out", args->out, "Output folder for results.json and report.html")
      ->capture_default_str();
  cmd->add_option("--rank-result", args->rank_result,
                  "(internal) run as one rank of a measurement; rank 0 writes its entry here")
      ->group("");
  cmd->callback([args, &exit_code] {
    exit_code = args->rank_result.empty() ? run_scaling(*args) : run_rank(*args);
  });
}

} // namespace kanbench
