// `kanbench merge DIR... --out DIR`: the shards of one `kanbench accuracy`, `run` or `sweep`
// plan (kan::results::merge_shards) into one results.json and its report. Exit 0 when they cover
// the plan and it passed, 1 when a shard or some of its fits are missing (what is there is
// written, and what is missing said) or the merged run has a problem `run` would fail on, 2 when
// they cannot be merged (an unreadable shard, shards of different plans, an item twice with
// different results) or the output cannot be written.
#include "commands.h"

#include "kan/io/atomic_file.h"
#include "kan/results/merge.h"
#include "kan/results/results_io.h"

#include <filesystem>
#include <iostream>
#include <memory>

namespace kanbench {
namespace {

struct MergeArgs {
  std::vector<std::string> shards;
  std::string out = "kanbench-out/merge";
};

// A shard's results.json: DIR/results.json, or the file itself.
kan::results::ShardDocument read_shard(const std::string& where) {
  namespace fs = std::filesystem;
  const auto path = fs::is_directory(where) ? (fs::path(where) / "results.json").string() : where;
  try {
    return {where, kan::results::read_results_file(path)};
  } catch (const std::exception& e) {
    throw kan::results::MergeError("merge: " + where + ": " + first_line(e.what()));
  }
}

int run_merge_command(const MergeArgs& a) {
  kan::io::check_output_folder(a.out, "--out");
  std::vector<kan::results::ShardDocument> shards;
  for (const auto& where : a.shards)
    shards.push_back(read_shard(where));
  auto merged = kan::results::merge_shards(shards);
  auto& results = merged.results;
  results.config.out = a.out;

  std::vector<std::string> failures;
  const auto count = shards.front().results.config.shard.value_or(kan::results::Shard{}).count;
  std::string title = "kanbench merge: ", what;
  if (results.accuracy) {
    title += results.accuracy->table + " table, " + results.accuracy->preset + " preset";
    what = std::to_string(results.accuracy->fits.size()) + " fits of the " +
           std::to_string(results.accuracy->planned_fits) + " their shares plan; " +
           kan::results::finding_text(*results.accuracy);
  } else if (results.sweep) {
    title += "batch-size sweep, " + results.config.suite + " suite";
    what = std::to_string(results.sweep->points.size()) + " points at " +
           std::to_string(results.sweep->batches.size()) + " batch sizes, " +
           std::to_string(results.sweep->crossovers.size()) + " crossover(s)";
  } else {
    title += results.config.suite + " suite";
    what = std::to_string(results.cases.size()) + " cases, " +
           std::to_string(results.comparisons.size()) + " comparisons, edge cases " +
           kan::results::edge_case_summary(results.edge_cases);
  }
  const auto [path, report] = write_results_and_report(results, a.out, title, failures);
  std::cout << "merged " << results.shards.size() << " of " << count << " shard(s): " << what
            << " -> " << path << ", " << report << "\n";
  auto problems = kan::results::run_problems(results);
  for (const auto& missing : merged.missing)
    problems.push_back("missing: " + missing);
  return finish_command(problems, failures);
}

} // namespace

void add_merge_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MergeArgs>();
  auto* cmd = app.add_subcommand(
      "merge", "Merge the shards of one `kanbench accuracy`, `run` or `sweep` plan (run with "
               "--shard or a scheduler's task index) into one results.json and report "
               "(docs/accuracy.md, \"Shards\"). Exit 0 when they cover the plan and it passed, "
               "1 when some of it is missing or failed, 2 when they cannot be merged");
  cmd->add_option("shards", args->shards,
                  "The shards' folders (or their results.json files), e.g. OUT/shard-*")
      ->required();
  cmd->add_option("--out", args->out, "Output folder for the merged results.json and report.html")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_merge_command(*args); });
}

} // namespace kanbench
