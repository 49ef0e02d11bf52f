// Shards of a plan: --shard and the schedulers' variables, the split by expected cost, merging,
// and small accuracy, run and sweep plans run as three shard processes whose merge is the plan
// run as one process.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/bench/accuracy.h"
#include "kan/bench/shards.h"
#include "kan/results/merge.h"
#include "kan/results/results_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

namespace {

using kan::bench::parse_shard;
using kan::bench::shard_from_environment;
using kan::results::Shard;

// An environment of the test's own: lookups of anything else are unset.
kan::bench::EnvironmentLookup environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    const auto found = values.find(name);
    return found == values.end() ? nullptr : found->second.c_str();
  };
}

TEST(Shards, ShardIsIndexSlashCount) {
  EXPECT_EQ(parse_shard("2/8"), (Shard{2, 8, "--shard"}));
  EXPECT_EQ(parse_shard("0/1"), (Shard{0, 1, "--shard"}));
  EXPECT_THROW_WITH(parse_shard("8/8"), "--shard 8/8: shard index 8 is not below the count 8");
  EXPECT_THROW_WITH(parse_shard("1/0"), "the shard count must be >= 1");
  for (const char* bad : {"3", "a/b", "-1/2", "1/", "/2", "1/2/3", ""})
    EXPECT_THROW_WITH(parse_shard(bad), "--shard: expected I/N");
}

TEST(Shards, EachShardHasItsOwnFolderAndFiles) {
  EXPECT_EQ(kan::bench::shard_folder("out", Shard{2, 8, ""}), "out/shard-2-of-8");
  EXPECT_EQ(kan::bench::shard_file("out/trace.json", Shard{2, 8, ""}),
            "out/trace.shard-2-of-8.json");
  EXPECT_EQ(kan::bench::shard_file("trace", Shard{0, 3, ""}), "trace.shard-0-of-3");
}

TEST(Shards, SchedulersNameTheShardInTheirVariables) {
  EXPECT_FALSE(shard_from_environment(environment({})));
  EXPECT_EQ(*shard_from_environment(environment({{"SLURM_ARRAY_TASK_ID", "7"},
                                                 {"SLURM_ARRAY_TASK_COUNT", "4"},
                                                 {"SLURM_ARRAY_TASK_MIN", "5"}})),
            (Shard{2, 4, "SLURM_ARRAY_TASK_ID"}));
  // --array=0-6:2: tasks 0, 2, 4, 6.
  EXPECT_EQ(*shard_from_environment(environment({{"SLURM_ARRAY_TASK_ID", "6"},
                                                 {"SLURM_ARRAY_TASK_COUNT", "4"},
                                                 {"SLURM_ARRAY_TASK_MIN", "0"},
                                                 {"SLURM_ARRAY_TASK_STEP", "2"}})),
            (Shard{3, 4, "SLURM_ARRAY_TASK_ID"}));
  EXPECT_EQ(*shard_from_environment(environment({{"JOB_COMPLETION_INDEX", "1"}}), 3),
            (Shard{1, 3, "JOB_COMPLETION_INDEX"}));
  EXPECT_EQ(*shard_from_environment(
                environment({{"GTEST_SHARD_INDEX", "0"}, {"GTEST_TOTAL_SHARDS", "2"}})),
            (Shard{0, 2, "GTEST_SHARD_INDEX"}));
  // Slurm first, where a CI job runs inside an array.
  EXPECT_EQ(shard_from_environment(environment({{"SLURM_ARRAY_TASK_ID", "1"},
                                                {"SLURM_ARRAY_TASK_COUNT", "2"},
                                                {"GTEST_SHARD_INDEX", "0"},
                                                {"GTEST_TOTAL_SHARDS", "3"}}))
                ->source,
            "SLURM_ARRAY_TASK_ID");

  EXPECT_THROW_WITH(shard_from_environment(environment({{"SLURM_ARRAY_TASK_ID", "1"}})),
                    "SLURM_ARRAY_TASK_ID=1 is set but SLURM_ARRAY_TASK_COUNT is not");
  EXPECT_THROW_WITH(shard_from_environment(environment(
                        {{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "2"}})),
                    "SLURM_ARRAY_TASK_ID=x is not a whole number");
  EXPECT_THROW_WITH(shard_from_environment(environment(
                        {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "2"}})),
                    "shard index 5 is not below the count 2");
  EXPECT_THROW_WITH(shard_from_environment(environment({{"JOB_COMPLETION_INDEX", "1"}})),
                    "pass --shard-count N");
  EXPECT_THROW_WITH(shard_from_environment(environment({}), 3),
                    "--shard-count 3 without JOB_COMPLETION_INDEX");
  EXPECT_THROW_WITH(shard_from_environment(environment({{"GTEST_SHARD_INDEX", "0"}})),
                    "GTEST_TOTAL_SHARDS is not");
}

TEST(Shards, SharesCoverEveryItemOnceBalancedByCost) {
  // One costly item and many cheap ones: counts differ, costs do not (by more than one item).
  std::vector<double> costs{100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 50, 50, 30, 20, 10};
  for (const int64_t count : {1, 2, 3, 7, 25}) {
    std::vector<int> taken(costs.size(), 0);
    std::vector<double> sums;
    for (int64_t index = 0; index < count; ++index) {
      const auto share = kan::bench::shard_share(costs, {index, count, "--shard"});
      EXPECT_TRUE(std::is_sorted(share.begin(), share.end()));
      EXPECT_EQ(share, kan::bench::shard_share(costs, {index, count, "--shard"}));
      double sum = 0;
      for (const auto item : share) {
        ++taken[item];
        sum += costs[item];
      }
      sums.push_back(sum);
    }
    EXPECT_TRUE(std::all_of(taken.begin(), taken.end(), [](int n) { return n == 1; })) << count;
    EXPECT_LE(*std::max_element(sums.begin(), sums.end()) -
                  *std::min_element(sums.begin(), sums.end()),
              100.0)
        << count;
  }
  // Two shards: the 100 in one, the two 50s together in the other.
  const auto first = kan::bench::shard_share(costs, {0, 2, "--shard"});
  EXPECT_EQ(first.front(), 0u);
  EXPECT_EQ(std::count(first.begin(), first.end(), 15) + std::count(first.begin(), first.end(), 16),
            0);
}

TEST(Shards, AnAccuracyPlanSplitsByExpectedCost) {
  kan::bench::AccuracyOptions options; // the quick special-functions table
  std::vector<kan::bench::AccuracyModel> whole;
  const auto run = kan::bench::plan_accuracy(options, &whole);
  // A wide MLP costs as much as many small KANs.
  const auto cost = [&](const std::vector<int64_t>& width, const char* family) {
    const auto found = std::find_if(whole.begin(), whole.end(), [&](const auto& m) {
      return m.width == width && m.family == family;
    });
    return kan::bench::expected_cost(*found, run);
  };
  EXPECT_GT(cost({2, 100, 100, 1}, "mlp"), 10 * cost({2, 5, 5, 1}, "mlp"));
  EXPECT_GT(cost({2, 100, 100, 1}, "mlp"), 5 * cost({2, 2, 1}, "kan"));

  std::set<std::string> keys;
  std::vector<double> sums;
  double costliest = 0;
  for (const auto& m : whole)
    costliest = std::max(costliest, kan::bench::expected_cost(m, run));
  for (int64_t index = 0; index < 3; ++index) {
    options.shard = Shard{index, 3, "--shard"};
    std::vector<kan::bench::AccuracyModel> share;
    const auto planned = kan::bench::plan_accuracy(options, &share);
    EXPECT_EQ(planned.planned_fits, static_cast<int64_t>(share.size()));
    EXPECT_EQ(planned.summary.size(), run.summary.size()); // every function, whoever fits it
    double sum = 0;
    for (const auto& m : share) {
      EXPECT_TRUE(keys.insert(m.key()).second) << m.key();
      sum += kan::bench::expected_cost(m, run);
    }
    sums.push_back(sum);
  }
  EXPECT_EQ(keys.size(), whole.size());
  EXPECT_LE(*std::max_element(sums.begin(), sums.end()) -
                *std::min_element(sums.begin(), sums.end()),
            costliest);
}

// The fits of a results.json by key, timings and host aside: what a merge must keep.
std::map<std::string, kan::results::AccuracyFit> fits_by_key(const kan::results::AccuracyRun& r) {
  std::map<std::string, kan::results::AccuracyFit> fits;
  for (auto fit : r.fits) {
    fit.seconds = 0;
    fit.host.reset();
    for (auto& point : fit.points)
      point.seconds = 0;
    fits[fit.key()] = fit;
  }
  return fits;
}

// A summary entry as its points say it (references differ with the order of the fits).
std::string summary_text(const kan::results::AccuracyRun& run,
                         const kan::results::AccuracyFunction& f) {
  const auto point = [&](const std::optional<kan::results::AccuracyPointRef>& ref) {
    if (!ref)
      return std::string("-");
    const auto& fit = run.fits.at(ref->fit);
    return fit.key() + "@" + std::to_string(ref->point);
  };
  std::string text = f.function + " " + f.device + " " + std::to_string(f.fits) + " " +
                     point(f.best_kan) + " " + point(f.best_mlp) + " " +
                     (f.kan_beats_mlp ? (*f.kan_beats_mlp ? "kan" : "mlp") : "-");
  for (const auto& ref : f.pareto)
    text += " " + point(ref);
  return text;
}

class ShardsCli : public kan::test::ScratchDirTest {};

TEST_F(ShardsCli, ThreeShardProcessesMergeToTheRunOfOne) {
  const std::string plan = "accuracy --functions jv,iv --grids 3,4 --steps 2 --train-num 40 "
                           "--test-num 20 --jobs 1 ";
  const std::string shards = path("shards");
  // Each shard's index from another scheduler's variables.
  const std::vector<std::pair<std::string, std::string>> tasks{
      {"SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=3 ", ""},
      {"JOB_COMPLETION_INDEX=1 ", "--shard-count 3 "},
      {"GTEST_SHARD_INDEX=2 GTEST_TOTAL_SHARDS=3 ", ""}};
  const std::vector<std::string> sources{"SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX",
                                         "GTEST_SHARD_INDEX"};
  std::vector<size_t> sizes;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto run =
        kan::test::run_kanbench(plan + tasks[i].second + "--out " + shards, tasks[i].first);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("(shard " + std::to_string(i) + "/3 of the plan, by " + sources[i]),
              std::string::npos)
        << run.output;
    const auto share = kan::results::read_results_file(shards + "/shard-" + std::to_string(i) +
                                                       "-of-3/results.json");
    ASSERT_TRUE(share.config.shard);
    EXPECT_EQ(*share.config.shard, (Shard{static_cast<int64_t>(i), 3, sources[i]}));
    EXPECT_EQ(share.accuracy->fits.size(), static_cast<size_t>(share.accuracy->planned_fits));
    sizes.push_back(share.accuracy->fits.size());
  }
  // Balanced by cost, not count: a wide MLP is a shard's whole share.
  EXPECT_EQ(sizes[0] + sizes[1] + sizes[2], 11u);
  const auto one = kan::test::run_kanbench(plan + "--out " + path("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;

  const auto merge =
      kan::test::run_kanbench("merge " + shards + "/shard-0-of-3 " + shards + "/shard-1-of-3 " +
                              shards + "/shard-2-of-3 --out " + path("merged"));
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_NE(merge.output.find("merged 3 of 3 shard(s): 11 fits of the 11 their shares plan"),
            std::string::npos)
      << merge.output;
  const auto merged = kan::results::read_results_file(path("merged/results.json"));
  const auto single = kan::results::read_results_file(path("one/results.json"));
  EXPECT_TRUE(std::filesystem::exists(path("merged/report.html")));
  ASSERT_TRUE(merged.accuracy && single.accuracy);
  EXPECT_EQ(fits_by_key(*merged.accuracy), fits_by_key(*single.accuracy));
  EXPECT_EQ(merged.accuracy->planned_fits, single.accuracy->planned_fits);
  ASSERT_EQ(merged.accuracy->summary.size(), single.accuracy->summary.size());
  for (size_t i = 0; i < merged.accuracy->summary.size(); ++i)
    EXPECT_EQ(summary_text(*merged.accuracy, merged.accuracy->summary[i]),
              summary_text(*single.accuracy, single.accuracy->summary[i]));
  EXPECT_FALSE(merged.config.shard);
  ASSERT_EQ(merged.shards.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(merged.shards[i].shard.source, sources[i]);
  for (const auto& fit : merged.accuracy->fits)
    EXPECT_TRUE(fit.host && !fit.host->empty()) << fit.key();

  // Two of three: written, and what is missing said, exit 1.
  const auto partial = kan::test::run_kanbench("merge " + shards + "/shard-0-of-3 " + shards +
                                               "/shard-2-of-3 --out " + path("partial"));
  EXPECT_EQ(partial.exit_code, 1) << partial.output;
  EXPECT_NE(partial.output.find("missing: shard 1/3: no folder holds it"), std::string::npos)
      << partial.output;
  EXPECT_EQ(kan::results::read_results_file(path("partial/results.json")).accuracy->fits.size(),
            sizes[0] + sizes[2]);
}

TEST_F(ShardsCli, AKilledShardResumesItsShareOnly) {
  const std::string args = "accuracy --functions jv,iv --grids 3 --steps 1 --train-num 30 "
                           "--test-num 20 --jobs 1 --shard 1/2 --out " +
                           path("out");
  ASSERT_EQ(kan::test::run_kanbench(args).exit_code, 0);
  const auto file = path("out/shard-1-of-2/results.json");
  auto results = kan::results::read_results_file(file);
  const auto whole = results.accuracy->fits;
  ASSERT_GE(whole.size(), 2u);
  // Killed after its first fit.
  results.accuracy->fits.resize(1);
  kan::results::summarize_accuracy(*results.accuracy);
  kan::results::write_results_file(file, results);
  const auto again = kan::test::run_kanbench(args);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("1 of " + std::to_string(whole.size()) + " fits done"),
            std::string::npos)
      << again.output;
  const auto resumed = kan::results::read_results_file(file).accuracy->fits;
  EXPECT_EQ(resumed.size(), whole.size());
  EXPECT_EQ(resumed.front(), whole.front());
  // Nothing of the other shard's was read or written.
  EXPECT_FALSE(std::filesystem::exists(path("out/shard-0-of-2")));
  EXPECT_FALSE(std::filesystem::exists(path("out/results.json")));

  // Another shard's folder is not continued as this one.
  std::filesystem::rename(path("out/shard-1-of-2"), path("out/shard-0-of-2"));
  const auto other =
      kan::test::run_kanbench("accuracy --functions jv,iv --grids 3 --steps 1 --train-num 30 "
                              "--test-num 20 --jobs 1 --shard 0/2 --out " +
                              path("out"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("holds shard 1/2, not shard 0/2"), std::string::npos) << other.output;
}

TEST_F(ShardsCli, MergeRefusesWhatIsNotOnePlanInOneLine) {
  const std::string plan = "accuracy --functions jv --grids 3 --train-num 30 --test-num 20 "
                           "--jobs 1 ";
  for (const auto& [steps, shard, out] :
       {std::tuple{"1", "0/2", "a"}, std::tuple{"1", "1/2", "a"}, std::tuple{"2", "1/2", "b"}})
    ASSERT_EQ(kan::test::run_kanbench(plan + "--steps " + steps + " --shard " + shard + " --out " +
                                      path(out))
                  .exit_code,
              0);
  const auto a0 = path("a/shard-0-of-2"), a1 = path("a/shard-1-of-2"), b1 = path("b/shard-1-of-2");

  const auto one_line = [](const kan::test::CliRun& run) {
    return std::count(run.output.begin(), run.output.end(), '\n') == 1;
  };
  const auto plans = kan::test::run_kanbench("merge " + a0 + " " + b1 + " --out " + path("m"));
  EXPECT_EQ(plans.exit_code, 2) << plans.output;
  EXPECT_TRUE(one_line(plans)) << plans.output;
  EXPECT_NE(plans.output.find(a0 + " and " + b1 +
                              " are shards of different plans (--steps 1 "
                              "against 2)"),
            std::string::npos)
      << plans.output;

  // The same fit twice with different results.
  std::filesystem::create_directories(path("c"));
  auto copy = kan::results::read_results_file(a1 + "/results.json");
  copy.accuracy->fits.front().points.back().test_rmse *= 2;
  kan::results::summarize_accuracy(*copy.accuracy);
  kan::results::write_results_file(path("c/results.json"), copy);
  const auto twice =
      kan::test::run_kanbench("merge " + a0 + " " + a1 + " " + path("c") + " --out " + path("m"));
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_TRUE(one_line(twice)) << twice.output;
  EXPECT_NE(twice.output.find("is in " + a1 + " and in " + path("c") + " with different results"),
            std::string::npos)
      << twice.output;
  // The same results twice (a folder given twice) count once.
  const auto same =
      kan::test::run_kanbench("merge " + a0 + " " + a1 + " " + a1 + " --out " + path("m"));
  EXPECT_EQ(same.exit_code, 0) << same.output;

  // An unreadable shard.
  std::filesystem::create_directories(path("bad"));
  std::ofstream(path("bad/results.json")) << "{\"schema_version\": ";
  const auto bad =
      kan::test::run_kanbench("merge " + a0 + " " + path("bad") + " --out " + path("m2"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(one_line(bad)) << bad.output;
  EXPECT_NE(bad.output.find("merge: " + path("bad") + ":"), std::string::npos) << bad.output;
}

// What a run's merge must keep of the run of one process: every case's outcome, every
// comparison's verdict, every edge case and rehearsed case; timings aside.
std::set<std::string> run_outcomes(const kan::results::Results& r) {
  std::set<std::string> outcomes;
  char metric[64];
  for (const auto& c : r.cases) {
    std::snprintf(metric, sizeof metric, "%.9g", c.final_test_rmse.value_or(-1));
    outcomes.insert("case " + c.name + " " + c.target + " " + to_string(c.status) + " " + metric);
  }
  for (const auto& c : r.comparisons)
    outcomes.insert("comparison " + c.case_name + " " + c.a + " " + c.b + " " +
                    to_string(c.parity));
  for (const auto& e : r.edge_cases)
    outcomes.insert("edge case " + e.name + " " + e.device + " " + to_string(e.status));
  if (r.rehearsal)
    for (const auto& c : r.rehearsal->cases)
      outcomes.insert("rehearsed " + c.case_name + " " + std::to_string(c.findings.size()));
  return outcomes;
}

TEST_F(ShardsCli, RunShardsSplitByWorkloadAndMergeToTheRunOfOne) {
  const std::string plan = "run --suite quick --case toy,deep,toy-mlp --repeat 2 --cv-target 0 "
                           "--monitor-interval 0 --no-cupti ";
  const std::string shards = path("shards");
  std::vector<std::string> names;
  size_t cases = 0, edge_runs = 0;
  for (int i = 0; i < 3; ++i) {
    const auto run = kan::test::run_kanbench(plan + "--shard " + std::to_string(i) + "/3 --trace " +
                                             path("trace.json") + " --out " + shards);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("run: shard " + std::to_string(i) + "/3 of the plan, by --shard"),
              std::string::npos)
        << run.output;
    const auto folder = kan::bench::shard_folder(shards, Shard{i, 3, ""});
    names.push_back(folder);
    const auto share = kan::results::read_results_file(folder + "/results.json");
    EXPECT_EQ(share.config.shard, (Shard{i, 3, "--shard"}));
    // Every shard names the whole plan, and runs each of its workloads on both targets.
    EXPECT_EQ(share.config.cases, (std::vector<std::string>{"toy", "deep", "toy-mlp"}));
    EXPECT_EQ(share.cases.size() % 2, 0u);
    cases += share.cases.size();
    edge_runs += !share.edge_cases.empty();
    EXPECT_TRUE(
        std::filesystem::exists(kan::bench::shard_file(path("trace.json"), Shard{i, 3, ""})));
  }
  EXPECT_EQ(cases, 6u);
  EXPECT_EQ(edge_runs, 1u); // the edge cases are one item of the plan
  EXPECT_FALSE(std::filesystem::exists(path("trace.json")));
  const auto one = kan::test::run_kanbench(plan + "--out " + path("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;

  const auto merge = kan::test::run_kanbench("merge " + names[2] + " " + names[0] + " " + names[1] +
                                             " --out " + path("merged"));
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_NE(merge.output.find("merged 3 of 3 shard(s): 6 cases, 3 comparisons"), std::string::npos)
      << merge.output;
  const auto merged = kan::results::read_results_file(path("merged/results.json"));
  const auto single = kan::results::read_results_file(path("one/results.json"));
  EXPECT_EQ(run_outcomes(merged), run_outcomes(single));
  // In plan order: each workload on each target.
  ASSERT_EQ(merged.cases.size(), single.cases.size());
  for (size_t i = 0; i < merged.cases.size(); ++i)
    EXPECT_EQ(merged.cases[i].name + " " + merged.cases[i].target,
              single.cases[i].name + " " + single.cases[i].target);
  EXPECT_FALSE(merged.config.shard);
  EXPECT_EQ(merged.shards.size(), 3u);
  // Where each case ran, in the file and the report.
  for (const auto& c : merged.cases)
    EXPECT_EQ(c.host, merged.shards.front().environment.hostname) << c.name << " " << c.target;
  EXPECT_FALSE(single.cases.front().host);
  std::ifstream in(path("merged/report.html"));
  const std::string report(std::istreambuf_iterator<char>(in), {});
  EXPECT_NE(report.find("<section id=\"shards\">"), std::string::npos);
  const auto cases_table = report.find("<table id=\"cases-table\">");
  ASSERT_NE(cases_table, std::string::npos);
  const auto header =
      report.substr(cases_table, report.find("</thead>", cases_table) - cases_table);
  EXPECT_NE(header.find("<th>host</th>"), std::string::npos) << header;

  // A shard of another command's plan is refused.
  ASSERT_EQ(kan::test::run_kanbench("sweep --suite quick --case toy --batch 16 --repeat 1 "
                                    "--cv-target 0 --shard 1/3 --out " +
                                    path("sweep"))
                .exit_code,
            0);
  const auto mixed = kan::test::run_kanbench(
      "merge " + names[0] + " " + path("sweep/shard-1-of-3") + " --out " + path("mixed"));
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("are shards of different plans (command run against sweep)"),
            std::string::npos)
      << mixed.output;
  // And so is one with a setting of its own.
  ASSERT_EQ(kan::test::run_kanbench(plan + "--no-edge-cases --shard 1/3 --out " + path("other"))
                .exit_code,
            0);
  const auto other = kan::test::run_kanbench("merge " + names[0] + " " +
                                             path("other/shard-1-of-3") + " --out " + path("m"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("(edge_cases true against false)"), std::string::npos)
      << other.output;
}

TEST_F(ShardsCli, SweepShardsSplitByPointAndMergeToTheSweepOfOne) {
  // "auto" batches: every shard plans the same powers of two (on the CPU, as one process does).
  const std::string plan = "sweep --suite quick --case toy --batch auto --devices cpu --repeat 1 "
                           "--cv-target 0 ";
  const std::string shards = path("shards");
  const std::vector<std::string> tasks{"SLURM_ARRAY_TASK_ID=10 SLURM_ARRAY_TASK_COUNT=3 "
                                       "SLURM_ARRAY_TASK_MIN=10 ",
                                       "SLURM_ARRAY_TASK_ID=11 SLURM_ARRAY_TASK_COUNT=3 "
                                       "SLURM_ARRAY_TASK_MIN=10 ",
                                       "SLURM_ARRAY_TASK_ID=12 SLURM_ARRAY_TASK_COUNT=3 "
                                       "SLURM_ARRAY_TASK_MIN=10 "};
  size_t points = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto run = kan::test::run_kanbench(plan + "--out " + shards, tasks[i]);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto share = kan::results::read_results_file(shards + "/shard-" + std::to_string(i) +
                                                       "-of-3/results.json");
    ASSERT_TRUE(share.sweep);
    points += share.sweep->points.size();
    EXPECT_EQ(share.config.shard->source, "SLURM_ARRAY_TASK_ID");
  }
  const auto one = kan::test::run_kanbench(plan + "--out " + path("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto single = kan::results::read_results_file(path("one/results.json"));
  EXPECT_EQ(points, single.sweep->points.size());

  const auto merge =
      kan::test::run_kanbench("merge " + shards + "/shard-0-of-3 " + shards + "/shard-1-of-3 " +
                              shards + "/shard-2-of-3 --out " + path("merged"));
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  const auto merged = kan::results::read_results_file(path("merged/results.json"));
  ASSERT_TRUE(merged.sweep);
  const auto& m = *merged.sweep;
  const auto& s = *single.sweep;
  EXPECT_EQ(m.batches, s.batches);
  ASSERT_EQ(m.points.size(), s.points.size());
  for (size_t i = 0; i < m.points.size(); ++i) {
    EXPECT_EQ(m.points[i].case_name + " " + m.points[i].target + " " +
                  std::to_string(m.points[i].batch) + " " + to_string(m.points[i].status),
              s.points[i].case_name + " " + s.points[i].target + " " +
                  std::to_string(s.points[i].batch) + " " + to_string(s.points[i].status));
  }
  for (const auto& p : m.points)
    EXPECT_TRUE(p.host && !p.host->empty()) << p.batch;
  // The summaries are derived again from all points: every target's best batch and the
  // crossover of the second target against the first, as one process finds them.
  ASSERT_EQ(m.targets.size(), s.targets.size());
  for (size_t i = 0; i < m.targets.size(); ++i) {
    EXPECT_EQ(m.targets[i].target, s.targets[i].target);
    EXPECT_TRUE(m.targets[i].best_batch);
    EXPECT_EQ(m.targets[i].max_batch_reason, s.targets[i].max_batch_reason);
  }
  ASSERT_EQ(m.crossovers.size(), s.crossovers.size());
  EXPECT_EQ(m.crossovers.front().b, s.crossovers.front().b);

  // Two of three: written, the rest said, exit 1.
  const auto partial = kan::test::run_kanbench("merge " + shards + "/shard-0-of-3 " + shards +
                                               "/shard-2-of-3 --out " + path("partial"));
  EXPECT_EQ(partial.exit_code, 1) << partial.output;
  EXPECT_NE(partial.output.find("missing: shard 1/3: no folder holds it"), std::string::npos)
      << partial.output;
}

} // namespace
