// kanbench accuracy: the plan of each preset, one fit of each family, a whole (tiny) run with
// several jobs, resuming a killed run, and the command line around it.
#include "cli_runner.h"
#include "fault_injection.h"
#include "test_util.h"

#include "kan/bench/accuracy.h"
#include "kan/data/paper_results.h"
#include "kan/results/results_io.h"

#include <algorithm>
#include <filesystem>
#include <set>

namespace {

using kan::bench::AccuracyModel;
using kan::bench::AccuracyOptions;

// A run small enough for a test: two grids of two steps on 60 samples.
AccuracyOptions tiny(std::vector<std::string> functions) {
  AccuracyOptions options;
  options.functions = std::move(functions);
  options.grids = {3, 4};
  options.steps = 2;
  options.train_num = 60;
  options.test_num = 30;
  options.jobs = 2;
  return options;
}

std::vector<AccuracyModel> plan(const AccuracyOptions& options) {
  std::vector<AccuracyModel> models;
  kan::bench::plan_accuracy(options, &models);
  return models;
}

TEST(AccuracyPlan, QuickIsThePapersShapesTwoWidth5KansAndTwoMlps) {
  AccuracyOptions options;
  const auto run = kan::bench::plan_accuracy(options);
  EXPECT_EQ(run.functions.size(), 15u);
  EXPECT_EQ(run.seeds, (std::vector<uint64_t>{0}));
  EXPECT_EQ(run.grids, (std::vector<int64_t>{3, 5, 10, 20}));
  options.functions = {"jv"};
  const auto models = plan(options);
  const auto& jv =
      *std::find_if(kan::paper_special_functions().begin(), kan::paper_special_functions().end(),
                    [](const auto& row) { return row.function == "jv"; });
  ASSERT_EQ(models.size(), 6u);
  std::vector<std::string> roles;
  for (const auto& m : models)
    roles.push_back(m.family + " " + m.role);
  EXPECT_EQ(roles, (std::vector<std::string>{"kan minimal", "kan best", "kan width5", "kan width5",
                                             "mlp width5", "mlp width100"}));
  EXPECT_EQ(models[0].width, jv.minimal_kan_shape);
  EXPECT_EQ(models[1].width, jv.best_kan_shape);
  EXPECT_EQ(models[2].width, (std::vector<int64_t>{2, 5, 1}));
  EXPECT_EQ(models[3].width, (std::vector<int64_t>{2, 5, 5, 1}));
  EXPECT_EQ(models[4].width, (std::vector<int64_t>{2, 5, 5, 1}));
  EXPECT_EQ(models[5].width, (std::vector<int64_t>{2, 100, 100, 1}));
  // A shape named twice is trained once, under its first role: ellipeinc's minimal shape is its
  // best.
  options.functions = {"ellipeinc"};
  roles.clear();
  for (const auto& m : plan(options))
    roles.push_back(m.family + " " + m.role);
  EXPECT_EQ(roles, (std::vector<std::string>{"kan minimal", "kan width5", "kan width5",
                                             "mlp width5", "mlp width100"}));
}

TEST(AccuracyPlan, PaperIsTheProtocolOfTheTables) {
  AccuracyOptions options;
  options.preset = "paper";
  options.functions = {"ellipkinc"};
  auto models = plan(options);
  std::set<std::string> keys;
  int64_t kans = 0, mlps = 0;
  for (const auto& m : models) {
    keys.insert(m.key());
    (m.family == "kan" ? kans : mlps) += 1;
  }
  EXPECT_EQ(keys.size(), models.size()) << "every fit has its own key";
  // 3 seeds x (5 width-5 KANs + the published shapes not among them); 3 x 10 MLPs of SiLU.
  EXPECT_GE(kans, 15);
  EXPECT_LE(kans, 21);
  EXPECT_EQ(mlps, 30);
  // The Feynman table's MLPs have three activations, and --prune adds the pruned KANs.
  options.table = "feynman";
  options.functions = {"feynman_I.6.2"};
  options.seeds = {0};
  options.prune = true;
  models = plan(options);
  std::set<std::string> activations;
  int64_t pruned = 0;
  for (const auto& m : models) {
    if (m.family == "mlp")
      activations.insert(m.activation);
    pruned += m.prune_lamb.has_value();
  }
  EXPECT_EQ(activations, (std::set<std::string>{"relu", "silu", "tanh"}));
  EXPECT_EQ(pruned, 10);
}

TEST(AccuracyPlan, BadOptionsNameTheOption) {
  auto options = tiny({"no_such_function"});
  EXPECT_THROW_WITH(kan::bench::plan_accuracy(options), "--functions: \"no_such_function\"");
  options = tiny({"jv"});
  options.grids = {5, 3};
  EXPECT_THROW_WITH(kan::bench::plan_accuracy(options), "--grids must grow");
  options = tiny({"jv"});
  options.prune = true;
  EXPECT_THROW_WITH(kan::bench::plan_accuracy(options), "--prune needs --preset paper");
  options = tiny({"feynman_I.6.2"}); // another table's
  EXPECT_THROW_WITH(kan::bench::plan_accuracy(options), "not in the special table");
}

TEST(AccuracyFit, EachStageIsAPointOfParametersAndTestRmse) {
  const auto options = tiny({"jv"});
  std::vector<AccuracyModel> models;
  const auto run = kan::bench::plan_accuracy(options, &models);
  const auto kan_fit = kan::bench::run_accuracy_fit(models[0], run);
  ASSERT_EQ(kan_fit.error, "");
  ASSERT_EQ(kan_fit.points.size(), 2u);
  EXPECT_EQ(kan_fit.points[0].grid, 3);
  EXPECT_EQ(kan_fit.points[1].grid, 4);
  // A finer grid: more coefficients, but (fused backend: only the k + 1 non-zero basis
  // functions are built) the same work per sample.
  EXPECT_GT(kan_fit.points[1].parameters, kan_fit.points[0].parameters);
  EXPECT_EQ(kan_fit.points[1].forward_flops, kan_fit.points[0].forward_flops);
  EXPECT_GT(kan_fit.points[0].forward_flops, 0);
  EXPECT_TRUE(std::isfinite(kan_fit.points[1].test_rmse));

  const auto first_mlp = std::find_if(models.begin(), models.end(),
                                      [](const AccuracyModel& m) { return m.family == "mlp"; });
  ASSERT_NE(first_mlp, models.end());
  const auto mlp_fit = kan::bench::run_accuracy_fit(*first_mlp, run);
  ASSERT_EQ(mlp_fit.error, "");
  ASSERT_EQ(mlp_fit.points.size(), 1u);
  EXPECT_EQ(mlp_fit.points[0].parameters, 2 * 5 + 5 + 5 * 5 + 5 + 5 + 1); // [2,5,5,1]
  EXPECT_GT(mlp_fit.seconds, 0);
}

TEST(Accuracy, ARunIsSummarisedAndAKilledRunContinues) {
  auto options = tiny({"jv", "iv"});
  std::vector<size_t> seen;
  options.on_fit = [&](const kan::results::AccuracyRun& run, const kan::results::AccuracyFit*) {
    seen.push_back(run.fits.size());
  };
  const auto whole = kan::bench::run_accuracy(options);
  // jv: its minimal and best shapes, [2,5,1] and [2,5,5,1], two MLPs; iv: its one shape, the
  // two width-5 KANs, two MLPs.
  EXPECT_EQ(whole.fits.size(), 11u);
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  ASSERT_EQ(whole.summary.size(), 2u);
  for (const auto& f : whole.summary) {
    EXPECT_TRUE(f.best_kan && f.best_mlp) << f.function;
    EXPECT_TRUE(f.published) << f.function;
    EXPECT_FALSE(f.pareto.empty());
  }

  // Killed after two fits: the rerun trains the other nine only.
  auto killed = whole;
  killed.fits.resize(2);
  kan::results::summarize_accuracy(killed);
  options.resume = killed;
  seen.clear();
  const auto resumed = kan::bench::run_accuracy(options);
  EXPECT_EQ(seen, (std::vector<size_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  std::set<std::string> keys;
  for (const auto& fit : resumed.fits)
    keys.insert(fit.key());
  EXPECT_EQ(keys.size(), 11u);
  EXPECT_EQ(resumed.fits[0], whole.fits[0]);

  // Another plan is not continued.
  options.steps = 3;
  EXPECT_THROW_WITH(kan::bench::run_accuracy(options), "--steps 2, now 3");
}

class AccuracyCli : public kan::test::ScratchDirTest {};

TEST_F(AccuracyCli, WritesResultsAfterEveryFitAndResumes) {
  const std::string args = "accuracy --functions jv --grids 3,4 --steps 2 --train-num 60 "
                           "--test-num 30 --jobs 1 --out " +
                           path("out");
  const auto first = kan::test::run_kanbench(args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("[6/6]"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("[function 1/1] jv: best KAN"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("paper: best KAN"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("holds for"), std::string::npos) << first.output;
  const auto results = kan::results::read_results_file(path("out/results.json"));
  ASSERT_TRUE(results.accuracy);
  EXPECT_EQ(results.accuracy->fits.size(), 6u);
  EXPECT_TRUE(std::filesystem::exists(path("out/report.html")));

  const auto again = kan::test::run_kanbench(args);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("6 of 6 fits done; skipping them"), std::string::npos)
      << again.output;
  EXPECT_EQ(kan::results::read_results_file(path("out/results.json")).accuracy->fits,
            results.accuracy->fits);

  const auto other = kan::test::run_kanbench(
      "accuracy --functions jv --preset paper --steps 1 --out " + path("out"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("another plan (--preset quick, now paper)"), std::string::npos)
      << other.output;
}

// The README's exit-code rule: a report that cannot be written (a disk that fills up between
// the small results.json and the report with its Chart.js) is exit 2, on a "not written:" line.
TEST_F(AccuracyCli, AnUnwritableReportIsExitTwo) {
  const auto run = kan::test::run_kanbench("accuracy --functions jv --grids 3 --steps 1 "
                                           "--train-num 40 --test-num 20 --jobs 1 --out " +
                                               path("out"),
                                           kan::test::full_disk_after_kib(64));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("not written: " + path("out/report.html")), std::string::npos)
      << run.output;
  EXPECT_TRUE(std::filesystem::exists(path("out/results.json")));
}

} // namespace
