// results.json's `accuracy` section (`kanbench accuracy`): the fit keys, what
// summarize_accuracy() derives, the JSON form and its strict reader, and the report's section.
#include "reports_test_util.h"

#include "kan/reports/html_report.h"
#include "kan/results/baseline.h"
#include "kan/results/merge.h"
#include "kan/results/results_io.h"

#include <cmath>
#include <limits>

namespace {

using namespace kan::reports;
using namespace kan::results;
using json = nlohmann::json;
using AccuracyIo = test::ReportsScratchTest;
using test::accuracy_fit;

using Ref = AccuracyPointRef;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

using test::expect_results_error;
using test::results_error_of;

// A run of one function ("f" on cpu) with these fits, summarised.
AccuracyRun run_of(std::vector<AccuracyFit> fits) {
  AccuracyRun run;
  run.functions = {"f"};
  run.devices = {"cpu"};
  run.fits = std::move(fits);
  run.planned_fits = static_cast<int64_t>(run.fits.size());
  run.summary = {test::accuracy_function("f", "cpu", "x")};
  summarize_accuracy(run);
  return run;
}

TEST(AccuracyFit, KeyNamesFunctionDeviceFamilyWidthActivationAndSeed) {
  auto kan = accuracy_fit("jv", "kan", {2, 5, 1}, "", {{100, 1e-3}});
  EXPECT_EQ(kan.key(), "jv/cpu/kan/[2,5,1]/seed0");
  auto mlp = accuracy_fit("jv", "mlp", {2, 100, 100, 1}, "tanh", {{10501, 1e-3}});
  mlp.seed = 2;
  EXPECT_EQ(mlp.key(), "jv/cpu/mlp/[2,100,100,1]/tanh/seed2");
  mlp.device = "cuda:0";
  mlp.seed = 18446744073709551615ULL;
  EXPECT_EQ(mlp.key(), "jv/cuda:0/mlp/[2,100,100,1]/tanh/seed18446744073709551615");
  // The role is why a model was chosen, not which model it is.
  kan.role = "minimal";
  EXPECT_EQ(kan.key(), "jv/cpu/kan/[2,5,1]/seed0");
  // Except a pruned KAN's: trained otherwise than the unpruned KAN of its width.
  kan.role = "pruned-lamb0.01";
  EXPECT_EQ(kan.key(), "jv/cpu/kan/[2,5,1]/pruned-lamb0.01/seed0");
}

TEST(SummarizeAccuracy, BestsParetoFrontVerdictAndCounts) {
  const auto run = test::sample_accuracy_run();
  ASSERT_EQ(run.summary.size(), 3u);

  const auto& jv = run.summary[0];
  EXPECT_EQ(jv.fits, 5);
  EXPECT_EQ(jv.failed, 1);
  EXPECT_DOUBLE_EQ(jv.seconds, 3.0 + 4.0 + 2.0 + 5.0 + 0.5);
  // 2e-3 twice: [2,1,1] at 48 parameters beats [2,5,1] at 140; the NaN point is no best.
  EXPECT_EQ(jv.best_kan, (Ref{0, 2}));
  EXPECT_EQ(jv.best_mlp, (Ref{3, 0}));
  EXPECT_EQ(jv.kan_beats_mlp, false);
  // (51, 4e-3), (100, 3e-3) and (140, 2e-3) are dominated; the NaN point is left out.
  EXPECT_EQ(jv.pareto, (std::vector<Ref>{{0, 0}, {0, 1}, {0, 2}, {3, 0}}));
  // What it keeps.
  EXPECT_EQ(jv.formula, "J_v(x)");
  ASSERT_TRUE(jv.published);
  EXPECT_EQ(jv.published->best_kan_width, (std::vector<int64_t>{2, 3, 2, 1, 1, 1}));

  const auto& ellipj = run.summary[1];
  EXPECT_EQ(ellipj.fits, 3);
  EXPECT_EQ(ellipj.failed, 0);
  EXPECT_EQ(ellipj.best_kan, (Ref{5, 1}));
  EXPECT_EQ(ellipj.best_mlp, (Ref{6, 0}));
  EXPECT_EQ(ellipj.kan_beats_mlp, true);
  // fits[7]'s (30, 1e-4) equals fits[5]'s first point: the first stays, once.
  EXPECT_EQ(ellipj.pareto, (std::vector<Ref>{{5, 0}, {5, 1}}));
  EXPECT_DOUBLE_EQ(ellipj.seconds, 4.75);

  const auto& fresnel = run.summary[2];
  EXPECT_EQ(fresnel.fits, 1);
  EXPECT_EQ(fresnel.best_kan, (Ref{8, 1}));
  EXPECT_FALSE(fresnel.best_mlp);
  EXPECT_FALSE(fresnel.kan_beats_mlp); // nothing to compare with
  EXPECT_FALSE(fresnel.published);
}

TEST(SummarizeAccuracy, TiesGoToFewerParametersThenTheEarlierFit) {
  // Equal RMSE: fewer parameters, even in a later fit.
  auto run = run_of({accuracy_fit("f", "kan", {2, 5, 1}, "", {{200, 1e-3}}),
                     accuracy_fit("f", "kan", {2, 3, 1}, "", {{100, 1e-3}})});
  EXPECT_EQ(run.summary[0].best_kan, (Ref{1, 0}));
  EXPECT_EQ(run.summary[0].pareto, (std::vector<Ref>{{1, 0}}));
  // Equal RMSE and parameters: the earlier fit, and within a fit the earlier point.
  run = run_of({accuracy_fit("f", "mlp", {2, 5, 1}, "silu", {{100, 1e-3}}),
                accuracy_fit("f", "mlp", {2, 5, 1}, "relu", {{100, 1e-3}})});
  EXPECT_EQ(run.summary[0].best_mlp, (Ref{0, 0}));
  EXPECT_EQ(run.summary[0].pareto, (std::vector<Ref>{{0, 0}}));
  run = run_of({accuracy_fit("f", "kan", {2, 5, 1}, "", {{100, 1e-3}, {100, 1e-3}})});
  EXPECT_EQ(run.summary[0].best_kan, (Ref{0, 0}));
  // A tie between the families is the KAN's: the paper's finding is best KAN <= best MLP.
  run = run_of({accuracy_fit("f", "mlp", {2, 5, 1}, "silu", {{50, 1e-3}}),
                accuracy_fit("f", "kan", {2, 5, 1}, "", {{100, 1e-3}})});
  EXPECT_EQ(run.summary[0].kan_beats_mlp, true);
  // Equal parameters, different RMSE: only the lower one is on the front.
  EXPECT_EQ(run.summary[0].pareto, (std::vector<Ref>{{0, 0}}));
}

TEST(SummarizeAccuracy, NonFiniteRmseIsNeverABestOrOnTheFront) {
  auto run = run_of({accuracy_fit("f", "kan", {2, 5, 1}, "", {{10, kNaN}, {20, kInf}}),
                     accuracy_fit("f", "mlp", {2, 5, 1}, "silu", {{5, kNaN}})});
  const auto& s = run.summary[0];
  EXPECT_EQ(s.fits, 2);
  EXPECT_FALSE(s.best_kan);
  EXPECT_FALSE(s.best_mlp);
  EXPECT_FALSE(s.kan_beats_mlp);
  EXPECT_TRUE(s.pareto.empty());
  // A cheap NaN point does not hide a dearer measured one from the front.
  run = run_of({accuracy_fit("f", "kan", {2, 5, 1}, "", {{10, kNaN}, {20, 1e-2}, {40, 1e-3}})});
  EXPECT_EQ(run.summary[0].best_kan, (Ref{0, 2}));
  EXPECT_EQ(run.summary[0].pareto, (std::vector<Ref>{{0, 1}, {0, 2}}));
  EXPECT_EQ(pareto_front(run, "f", "cpu", "mlp"), std::vector<Ref>{});
}

TEST(SummarizeAccuracy, RecomputesEverythingAndCountsOnlyItsFunctionAndDevice) {
  auto run = test::sample_accuracy_run();
  const auto expected = run.summary;
  for (auto& s : run.summary) {
    s.fits = s.failed = 99;
    s.best_kan = s.best_mlp = Ref{7, 7};
    s.pareto = {{1, 1}};
    s.kan_beats_mlp = true;
    s.seconds = -1;
  }
  summarize_accuracy(run);
  EXPECT_EQ(run.summary, expected);
  // Another device's fits are another entry's.
  run.devices.push_back("cuda:0");
  run.fits[3].device = "cuda:0";
  run.summary.push_back(test::accuracy_function("jv", "cuda:0", "J_v(x)"));
  summarize_accuracy(run);
  EXPECT_EQ(run.summary[0].fits, 4);
  EXPECT_EQ(run.summary[0].best_mlp, (Ref{2, 0}));
  EXPECT_EQ(run.summary[0].kan_beats_mlp, true); // 2e-3 <= 4e-3
  EXPECT_EQ(run.summary[3].fits, 1);
  EXPECT_EQ(run.summary[3].best_mlp, (Ref{3, 0}));
  EXPECT_FALSE(run.summary[3].best_kan);
  // An entry with no fits yet.
  run.fits.clear();
  summarize_accuracy(run);
  EXPECT_EQ(run.summary[0].fits, 0);
  EXPECT_FALSE(run.summary[0].best_kan);
  EXPECT_TRUE(run.summary[0].pareto.empty());
  EXPECT_EQ(run.summary[0].seconds, 0);
}

TEST(AccuracyJson, RoundTripIsIdenticalAndNaNIsNull) {
  const auto results = test::sample_accuracy_results();
  const auto j = to_json(results);
  EXPECT_EQ(j["schema_version"], kan::results::kSchemaVersion);
  EXPECT_EQ(j["cases"], json::array());
  // The diverged stage: null in the file, NaN again when read.
  const auto& diverged = j["accuracy"]["fits"][1]["points"][2];
  EXPECT_TRUE(diverged["test_rmse"].is_null());
  EXPECT_TRUE(diverged["train_rmse"].is_null());
  EXPECT_EQ(j["accuracy"]["summary"][0]["best_kan"], (json{{"fit", 0}, {"point", 2}}));
  EXPECT_TRUE(j["accuracy"]["summary"][2]["best_mlp"].is_null());
  EXPECT_TRUE(j["accuracy"]["summary"][2]["kan_beats_mlp"].is_null());
  EXPECT_TRUE(j["accuracy"]["summary"][2]["published"].is_null());
  EXPECT_TRUE(j["accuracy"]["summary"][1]["published"]["best_kan_test_rmse"].is_null());
  EXPECT_EQ(j["accuracy"]["fits"][0]["activation"], "");
  EXPECT_EQ(j["accuracy"]["fits"][4]["points"], json::array());

  const auto back = results_from_json(j);
  EXPECT_TRUE(std::isnan(back.accuracy->fits[1].points[2].test_rmse));
  EXPECT_TRUE(back == results);
  EXPECT_EQ(to_json(back), j);
  EXPECT_TRUE(results_from_json(json::parse(j.dump(2))) == results);
  // The section is part of equality.
  auto other = results;
  other.accuracy->fits[0].points[0].seconds += 1;
  EXPECT_FALSE(other == results);
  other.accuracy.reset();
  EXPECT_FALSE(other == results);
  // No section, no key.
  EXPECT_FALSE(to_json(other).contains("accuracy"));
  EXPECT_FALSE(to_json(test::sample_results()).contains("accuracy"));
}

TEST_F(AccuracyIo, WriteThenReadIsIdentical) {
  const auto results = test::sample_accuracy_results();
  write_results_file(path("results.json"), results);
  EXPECT_TRUE(read_results_file(path("results.json")) == results);
  // Fits that contradict their summary are not written.
  auto contradicting = results;
  contradicting.accuracy->fits[2].points[0].test_rmse = 1e-6; // now the best MLP
  EXPECT_THROW(write_results_file(path("other.json"), contradicting), ResultsError);
  EXPECT_FALSE(std::filesystem::exists(path("other.json")));
}

TEST(AccuracyJson, ASummaryThatContradictsItsFitsIsRefused) {
  const auto good = to_json(test::sample_accuracy_results());
  auto j = good;
  j["accuracy"]["summary"][0]["best_kan"] = {{"fit", 1}, {"point", 1}};
  expect_results_error(
      j, "accuracy.summary[0].best_kan",
      "is accuracy.fits[1].points[1] (test RMSE 0.002, 140 parameters) but the KAN point "
      "of lowest test RMSE of \"jv\" on \"cpu\" is accuracy.fits[0].points[2] (test RMSE "
      "0.002, 48 parameters)");
  j = good;
  j["accuracy"]["summary"][2]["best_mlp"] = {{"fit", 8}, {"point", 0}};
  expect_results_error(j, "accuracy.summary[2].best_mlp",
                       "but the MLP point of lowest test RMSE of "
                       "\"fresnel\" on \"cpu\" is null");
  j = good;
  j["accuracy"]["summary"][0]["best_kan"] = nullptr;
  expect_results_error(j, "accuracy.summary[0].best_kan", "is null but");
  // A point's RMSE changed under its summary.
  j = good;
  j["accuracy"]["fits"][1]["points"][0]["test_rmse"] = 1e-4;
  expect_results_error(j, "accuracy.summary[0].best_kan", "is accuracy.fits[0].points[2]");
  j = good;
  j["accuracy"]["summary"][0]["fits"] = 4;
  expect_results_error(j, "accuracy.summary[0].fits",
                       "is 4 but accuracy.fits has 5 fits of \"jv\"");
  j = good;
  j["accuracy"]["summary"][0]["failed"] = 0;
  expect_results_error(j, "accuracy.summary[0].failed",
                       "is 0 but 1 of the fits of \"jv\" on \"cpu\"");
  j = good;
  j["accuracy"]["summary"][0]["pareto"].erase(3);
  expect_results_error(j, "accuracy.summary[0].pareto",
                       "but the Pareto front of the points of \"jv\"");
  j = good;
  j["accuracy"]["summary"][0]["pareto"].push_back({{"fit", 1}, {"point", 1}});
  expect_results_error(j, "accuracy.summary[0].pareto", "accuracy.fits[1].points[1]");
  j = good;
  j["accuracy"]["summary"][0]["kan_beats_mlp"] = true;
  expect_results_error(j, "accuracy.summary[0].kan_beats_mlp",
                       "is true but the best KAN and MLP points");
  j = good;
  j["accuracy"]["summary"][2]["kan_beats_mlp"] = false;
  expect_results_error(j, "accuracy.summary[2].kan_beats_mlp", "make it null");
  j = good;
  j["accuracy"]["summary"][1]["seconds"] = 5.0;
  expect_results_error(j, "accuracy.summary[1].seconds",
                       "is 5.0 but the seconds of the fits of "
                       "\"ellipj\" on \"cpu\" sum to 4.75");
  // Rounding of another producer's sum is not a contradiction.
  j = good;
  j["accuracy"]["summary"][1]["seconds"] = 4.75 * (1 + 1e-12);
  EXPECT_NO_THROW(results_from_json(j));
  // A reference to nothing.
  j = good;
  j["accuracy"]["summary"][0]["best_mlp"] = {{"fit", 99}, {"point", 0}};
  expect_results_error(j, "accuracy.summary[0].best_mlp.fit",
                       "99 is not a fit (accuracy.fits has 9)");
  j = good;
  j["accuracy"]["summary"][0]["pareto"][0] = {{"fit", 0}, {"point", 3}};
  expect_results_error(j, "accuracy.summary[0].pareto[0].point",
                       "3 is not a point of accuracy.fits[0] (it has 3)");
  j = good;
  j["accuracy"]["planned_fits"] = 8;
  expect_results_error(j, "accuracy.planned_fits", "is 8 but accuracy.fits has 9 fits");
}

TEST(AccuracyJson, TheSectionIsPartOfSchema15) {
  auto j = to_json(test::sample_accuracy_results());
  j["schema_version"] = "1.4.0";
  expect_results_error(j, "accuracy", "not part of schema 1.4.0 (from 1.5.0)");
  // An older file without it still reads.
  j.erase("accuracy");
  EXPECT_NO_THROW(results_from_json(j));
}

// A shard's and a merged document's parts: config.shard, shards, and each fit's host.
TEST(AccuracyJson, ShardsAndHostsRoundTripFromSchema19) {
  auto shard = test::sample_accuracy_results();
  shard.config.shard = Shard{1, 3, "SLURM_ARRAY_TASK_ID"};
  shard.accuracy->fits[0].host = "node-7";
  auto j = to_json(shard);
  EXPECT_EQ(j["config"]["shard"],
            (json{{"index", 1}, {"count", 3}, {"source", "SLURM_ARRAY_TASK_ID"}}));
  EXPECT_EQ(j["accuracy"]["fits"][0]["host"], "node-7");
  EXPECT_FALSE(j["accuracy"]["fits"][1].contains("host"));
  EXPECT_TRUE(results_from_json(j) == shard);
  j["config"]["shard"]["index"] = 3;
  expect_results_error(j, "config.shard.index", "3 is not below count 3");

  auto merged = test::sample_accuracy_results();
  merged.shards.push_back(
      {Shard{0, 2, "--shard"}, "out/shard-0-of-2", "r0", test::sample_results().environment, 12.5});
  j = to_json(merged);
  EXPECT_EQ(j["shards"][0]["folder"], "out/shard-0-of-2");
  EXPECT_TRUE(results_from_json(j) == merged);
  j["schema_version"] = "1.8.0";
  expect_results_error(j, "shards", "not part of schema 1.8.0 (from 1.9.0)");
  EXPECT_FALSE(to_json(test::sample_accuracy_results()).contains("shards"));
}

// The message of what `call` throws; "(no error)" when it returns.
template <typename F> std::string error_of(F&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Merging in the library: shares of one plan become the whole run; what is missing is said;
// what cannot be one plan is refused naming both documents.
TEST(MergeShards, SharesBecomeTheWholeRun) {
  const auto whole = test::sample_accuracy_results();
  const auto& fits = whole.accuracy->fits;
  const auto share = [&](int64_t index, std::vector<size_t> taken) {
    auto d = whole;
    d.config.shard = Shard{index, 2, "--shard"};
    d.accuracy->fits.clear();
    for (const auto i : taken)
      d.accuracy->fits.push_back(fits[i]);
    d.accuracy->planned_fits = static_cast<int64_t>(taken.size());
    summarize_accuracy(*d.accuracy);
    return ShardDocument{"s" + std::to_string(index), d};
  };
  std::vector<size_t> first, second;
  for (size_t i = 0; i < fits.size(); ++i)
    (i % 2 ? second : first).push_back(i);
  const auto merged = merge_shards({share(1, second), share(0, first)});
  EXPECT_TRUE(merged.missing.empty());
  EXPECT_EQ(merged.results.accuracy->fits.size(), fits.size());
  EXPECT_EQ(merged.results.accuracy->planned_fits, static_cast<int64_t>(fits.size()));
  ASSERT_EQ(merged.results.shards.size(), 2u);
  EXPECT_EQ(merged.results.shards[0].folder, "s0"); // in shard order
  EXPECT_FALSE(merged.results.config.shard);
  EXPECT_NE(merged.results.run_id, whole.run_id);
  EXPECT_NO_THROW(results_from_json(to_json(merged.results))); // its summary agrees

  const auto partial = merge_shards({share(0, first)});
  ASSERT_EQ(partial.missing.size(), 1u);
  EXPECT_EQ(partial.missing[0], "shard 1/2: no folder holds it");
  auto unfinished = share(1, second);
  unfinished.results.accuracy->planned_fits += 2;
  EXPECT_NE(merge_shards({share(0, first), unfinished}).missing.at(0).find("shard 1/2 (s1): 2 of "),
            std::string::npos);

  auto other = share(1, second);
  other.results.accuracy->grids = {3, 7};
  EXPECT_NE(error_of([&] {
              merge_shards({share(0, first), other});
            }).find("s0 and s1 are shards of different plans (--grids"),
            std::string::npos);
  other = share(1, second);
  other.results.environment.kanbench_version = "9.9.9";
  EXPECT_NE(error_of([&] {
              merge_shards({share(0, first), other});
            }).find("(kanbench version"),
            std::string::npos);
  auto clash = share(1, {first[0]});
  clash.results.accuracy->fits[0].points[0].test_rmse += 1;
  summarize_accuracy(*clash.results.accuracy);
  EXPECT_NE(error_of([&] {
              merge_shards({share(0, first), clash});
            }).find("with different results"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_shards({}); }).find("no shards"), std::string::npos);
  // A run's shard is not an accuracy plan's; a scaling run is no shard at all.
  auto run = share(1, second);
  run.results.accuracy.reset();
  EXPECT_NE(error_of([&] {
              merge_shards({share(0, first), run});
            }).find("s0 and s1 are shards of different plans (command accuracy against run)"),
            std::string::npos);
  auto scaling = run;
  scaling.results.scaling.push_back(ScalingResult{});
  EXPECT_NE(error_of([&] { merge_shards({scaling}); }).find("s1 holds a kanbench scaling run"),
            std::string::npos);
}

TEST(AccuracyJson, UnknownKeysAreRefusedUnlessTheMinorVersionIsNewer) {
  auto j = to_json(test::sample_accuracy_results());
  j["accuracy"]["fits"][0]["points"][0]["test_mse"] = 1e-4;
  expect_results_error(j, "accuracy.fits[0].points[0].test_mse", "unknown key");
  j["schema_version"] = "1.99.0";
  EXPECT_NO_THROW(results_from_json(j));
  for (const char* where : {"/accuracy", "/accuracy/summary/0", "/accuracy/summary/0/published",
                            "/accuracy/summary/0/best_kan", "/accuracy/fits/2"}) {
    auto k = to_json(test::sample_accuracy_results());
    k[json::json_pointer(where)]["later"] = true;
    const auto e = results_error_of(k);
    EXPECT_NE(e.problem().find("unknown key"), std::string::npos) << where << ": " << e.what();
    k["schema_version"] = "1.99.0";
    EXPECT_NO_THROW(results_from_json(k)) << where;
  }
}

TEST(AccuracyJson, FitKeysAreUnique) {
  auto j = to_json(test::sample_accuracy_results());
  auto again = j["accuracy"]["fits"][2];
  again["role"] = "another role"; // not part of the key
  j["accuracy"]["fits"].push_back(again);
  j["accuracy"]["planned_fits"] = 10;
  expect_results_error(j, "accuracy.fits[9]",
                       "same key \"jv/cpu/mlp/[2,5,5,1]/silu/seed0\" as accuracy.fits[2]");
}

TEST(AccuracyJson, SummaryEntriesBelongToTheRun) {
  const auto good = to_json(test::sample_accuracy_results());
  auto j = good;
  j["accuracy"]["summary"][2]["function"] = "sph_harm";
  expect_results_error(j, "accuracy.summary[2].function",
                       "\"sph_harm\" is not one of accuracy.functions");
  j = good;
  j["accuracy"]["summary"][1]["device"] = "cuda:0";
  expect_results_error(j, "accuracy.summary[1].device",
                       "\"cuda:0\" is not one of accuracy.devices");
  j = good;
  j["accuracy"]["summary"][2] = j["accuracy"]["summary"][1];
  expect_results_error(j, "accuracy.summary[2]",
                       "same function \"ellipj\" and device \"cpu\" as accuracy.summary[1]");
  // A fit that no entry summarises.
  j = good;
  j["accuracy"]["summary"].erase(2);
  expect_results_error(j, "accuracy.fits[8]",
                       "no entry of accuracy.summary is for its function \"fresnel\" on \"cpu\"");
}

TEST(AccuracyJson, FieldsAreTypeCheckedWithTheirKeyPath) {
  const auto good = to_json(test::sample_accuracy_results());
  struct Case {
    const char* pointer;
    json value;
    const char* path;
    const char* problem;
  };
  for (const auto& c : std::vector<Case>{
           {"/accuracy/fits/0/points/0/parameters", -5, "accuracy.fits[0].points[0].parameters",
            "expected a number >= 0, got -5"},
           {"/accuracy/fits/0/points/0/parameters", 1.5, "accuracy.fits[0].points[0].parameters",
            "expected an integer"},
           {"/accuracy/fits/0/points/1/test_rmse", "small", "accuracy.fits[0].points[1].test_rmse",
            "expected a number"},
           {"/accuracy/fits/0/points/1/test_rmse", -1e-3, "accuracy.fits[0].points[1].test_rmse",
            "expected a number >= 0"},
           {"/accuracy/fits/0/points/1/forward_flops", -1,
            "accuracy.fits[0].points[1].forward_flops", ">= 0"},
           {"/accuracy/fits/0/points/1/stage", "", "accuracy.fits[0].points[1].stage",
            "must not be empty"},
           {"/accuracy/fits/0/family", "cnn", "accuracy.fits[0].family",
            "expected one of kan, mlp"},
           {"/accuracy/fits/0/width/1", 1.5, "accuracy.fits[0].width[1]", "expected an integer"},
           {"/accuracy/fits/0/seed", -1, "accuracy.fits[0].seed", ""},
           {"/accuracy/fits/0/seconds", -2.0, "accuracy.fits[0].seconds", ">= 0"},
           {"/accuracy/fits/0/error", nullptr, "accuracy.fits[0].error", "expected a string"},
           {"/accuracy/fits/0/points", json::array(), "accuracy.fits[0].points",
            "is empty but error is empty"},
           {"/accuracy/grids/0", 0, "accuracy.grids[0]", "expected an integer >= 1, got 0"},
           {"/accuracy/seeds/0", "zero", "accuracy.seeds[0]", ""},
           {"/accuracy/functions", "jv", "accuracy.functions", "expected an array"},
           {"/accuracy/wall_seconds", nullptr, "accuracy.wall_seconds", "expected a number"},
           {"/accuracy/summary/0/published/mlp_test_rmse", "1e-3",
            "accuracy.summary[0].published.mlp_test_rmse", "expected a number"},
           {"/accuracy/summary/0/published/best_kan_width", json::array({2, -1}),
            "accuracy.summary[0].published.best_kan_width[1]", ">= 0"},
           {"/accuracy/summary/0/kan_beats_mlp", "no", "accuracy.summary[0].kan_beats_mlp",
            "expected true or false"},
           {"/accuracy/summary/0/pareto/0", nullptr, "accuracy.summary[0].pareto[0]",
            "expected an object"},
           {"/accuracy/summary/0/best_kan/point", -1, "accuracy.summary[0].best_kan.point", ">= 0"},
           {"/accuracy", json::array(), "accuracy", "expected an object"},
       }) {
    auto j = good;
    j[json::json_pointer(c.pointer)] = c.value;
    expect_results_error(j, c.path, c.problem);
  }
  for (const char* key : {"table", "planned_fits", "fits", "summary", "grids"}) {
    auto j = good;
    j["accuracy"].erase(key);
    expect_results_error(j, std::string("accuracy.") + key, "missing");
  }
  auto j = good;
  j["accuracy"]["fits"][3].erase("activation");
  expect_results_error(j, "accuracy.fits[3].activation", "missing");
}

TEST(AccuracyResults, FailedFitsAreProblemsAndTheOtherReadersCope) {
  const auto results = test::sample_accuracy_results();
  EXPECT_EQ(run_problems(results),
            std::vector<std::string>{"accuracy fit jv/cpu/mlp/[2,100,100,1]/tanh/seed0 failed: "
                                     "LBFGS diverged: the loss is NaN at step 12"});
  // Two runs without cases compare to nothing, without an error.
  const auto comparison = compare_with_baseline(results, results);
  EXPECT_TRUE(comparison.changes.empty());
  EXPECT_TRUE(comparison.regressions().empty());
  EXPECT_NE(format_baseline_table(comparison).find("0 slower, 0 faster, 0 same"),
            std::string::npos);
  // And against an ordinary run: its cases are missing from this one, not an error.
  EXPECT_NO_THROW(compare_with_baseline(test::sample_results(), results));
}

// ---------------------------------------------------------------------------------------------
// The report's section.

std::string accuracy_html(const Results& results) {
  HtmlReportOptions options;
  options.results_source = "kanbench-out/accuracy/results.json";
  return render_html_report(results, options);
}

// The rows of the table `id`: each row's cells' HTML.
std::vector<std::vector<std::string>> table_rows(const std::string& html, const std::string& id) {
  const auto start = html.find("<table id=\"" + id + "\">");
  const auto body = html.find("<tbody>", start);
  const auto end = html.find("</tbody>", body);
  std::vector<std::vector<std::string>> rows;
  for (auto row = html.find("<tr>", body); row != std::string::npos && row < end;
       row = html.find("<tr>", row + 1)) {
    rows.emplace_back();
    const auto row_end = html.find("</tr>", row);
    for (auto cell = html.find("<td>", row); cell != std::string::npos && cell < row_end;
         cell = html.find("<td>", cell + 1))
      rows.back().push_back(html.substr(cell + 4, html.find("</td>", cell) - cell - 4));
  }
  return rows;
}

// A merged run: the shards and where each ran, each fit's host beside its points, and what an
// incomplete merge should do.
TEST(AccuracyReport, AMergedRunShowsItsShardsAndHosts) {
  auto results = test::sample_accuracy_results();
  results.accuracy->fits[0].host = "node-<7>";
  auto environment = results.environment;
  environment.hostname = "node-<7>";
  results.shards = {
      {Shard{0, 2, "SLURM_ARRAY_TASK_ID"}, "runs/shard-0-of-2", "r0", environment, 61},
      {Shard{1, 2, "SLURM_ARRAY_TASK_ID"}, "runs/shard-1-of-2", "r1", results.environment, 59}};
  const auto html = accuracy_html(results);
  EXPECT_NE(html.find("id=\"accuracy-shards\""), std::string::npos);
  EXPECT_NE(html.find("runs/shard-1-of-2"), std::string::npos);
  EXPECT_NE(html.find("node-&lt;7&gt;"), std::string::npos); // escaped, in both tables
  EXPECT_EQ(html.find("node-<7>"), std::string::npos);
  EXPECT_NE(html.find("Each unfinished shard's"), std::string::npos); // 9 of 10 fits
  EXPECT_EQ(accuracy_html(test::sample_accuracy_results()).find("accuracy-shards"),
            std::string::npos);
}

TEST(AccuracyResults, TheFindingIsCountedForAllKansAndForTheMinimalShapesAlone) {
  const auto run = test::sample_accuracy_run();
  // jv: the MLP wins (1e-3 against 2e-3); ellipj: the KAN; fresnel has no MLP.
  const auto all = finding_count(run);
  EXPECT_EQ(all.holds, 1);
  EXPECT_EQ(all.compared, 2);
  // Only jv has a KAN of the minimal shape ([2,1,1], best 2e-3), and it is above the MLP.
  const auto minimal = finding_count(run, "minimal");
  EXPECT_EQ(minimal.holds, 0);
  EXPECT_EQ(minimal.compared, 1);
  EXPECT_EQ(finding_text(run), "the paper's finding (best KAN <= best MLP) holds for 1 of 2 "
                               "functions (with the paper's minimal KAN shapes alone: 0 of 1)");
  auto one_role = run;
  for (auto& fit : one_role.fits)
    fit.role = fit.family == "kan" ? "minimal" : fit.role;
  EXPECT_FALSE(has_other_kans(one_role, "minimal"));
  EXPECT_EQ(finding_text(one_role),
            "the paper's finding (best KAN <= best MLP) holds for 1 of 2 functions");
}

TEST(AccuracyReport, SectionTableAndOneChartPerFunction) {
  const auto results = test::sample_accuracy_results();
  const auto html = accuracy_html(results);
  const auto section = html.find("<section id=\"accuracy\"><h2>Accuracy</h2>");
  ASSERT_NE(section, std::string::npos);
  // Right after the verdict, which counts the fits and what reproduces.
  EXPECT_LT(html.find("<section id=\"verdict\""), section);
  EXPECT_LT(section, html.find("<section id=\"charts\""));
  EXPECT_NE(html.find("<b>Accuracy:</b> the paper's finding"), std::string::npos);
  EXPECT_NE(html.find("reproduces for <span class=\"figure\">1 of 2</span> functions (1 more "
                      "without both a KAN and an MLP result); with the paper's minimal KAN shapes "
                      "alone, <span class=\"figure\">0 of 1</span>; 9 of 10 planned fits "
                      "finished, 1 failed"),
            std::string::npos);
  EXPECT_NE(html.find("<b>Devices:</b> ran on cpu"), std::string::npos);
  // It timed nothing, so the verdict says nothing of speed or edge cases.
  EXPECT_EQ(html.find("<b>Speedup"), std::string::npos);
  EXPECT_EQ(html.find("<b>Edge cases:</b>"), std::string::npos);
  // The failed fit is the run's one problem.
  EXPECT_NE(html.find("<b>Result:</b> <span class=\"status bad\">fail</span>, 1 problem"),
            std::string::npos);
  EXPECT_NE(html.find("id=\"accuracy-incomplete\">Incomplete run: 9 of 10 planned fits"),
            std::string::npos);

  const auto rows = table_rows(html, "accuracy-table");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0],
            (std::vector<std::string>{
                "jv", "cpu", "J_v(x)", "2.00e-03 <small>[2,1,1], G=10, 48 parameters</small>",
                "1.00e-03 <small>[2,100,100,1], silu, 10501 parameters</small>",
                "1.67e-05 <small>[2,3,2,1,1,1]</small>", "7.64e-03 <small>[2,1,1]</small>",
                "1.43e-03", "<span class=\"status bad\">no</span>",
                "5 <span class=\"status bad\">1 failed</span>", "14.5 s"}));
  // The paper has no best-KAN number for ellipj: blank.
  EXPECT_EQ(rows[1][3], "5.00e-05 <small>[2,2,1], G=5, 50 parameters</small>");
  EXPECT_EQ(rows[1][5], "");
  EXPECT_EQ(rows[1][8], "<span class=\"status good\">yes</span>");
  EXPECT_EQ(rows[1][9], "3");
  // fresnel: no MLP yet, not in the paper.
  EXPECT_EQ(rows[2][4], "-");
  EXPECT_EQ(rows[2][5] + rows[2][6] + rows[2][7], "");
  EXPECT_EQ(rows[2][8], "-");
  const auto failed = table_rows(html, "accuracy-failed-table");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0][0], "jv/cpu/mlp/[2,100,100,1]/tanh/seed0");
  EXPECT_EQ(failed[0][3], "LBFGS diverged: the loss is NaN at step 12");
  // Every point of a function, marked.
  const auto points = table_rows(html, "accuracy-points-0");
  ASSERT_EQ(points.size(), 8u); // the failed fit has none
  EXPECT_EQ(points[2].back(), "best, Pareto");
  EXPECT_EQ(points[7].back(), "best, Pareto");
  EXPECT_EQ(points[4].back(), "");
  EXPECT_EQ(points[5][10], "-"); // the diverged stage

  // One chart per function, its canvas in the section; none in the charts section.
  const auto charts = test::embedded(html, "kanbench-charts");
  ASSERT_EQ(charts["charts"].size(), 3u);
  EXPECT_EQ(test::count(html, "<canvas"), 3u);
  for (int k = 0; k < 3; ++k) {
    const auto id = "chart-accuracy-" + std::to_string(k);
    const auto canvas = html.find("<canvas id=\"" + id + "\">");
    EXPECT_GT(canvas, section) << id;
    EXPECT_LT(canvas, html.find("<section id=\"charts\"")) << id;
  }
  const auto& jv = test::chart(charts, "chart-accuracy-0");
  EXPECT_EQ(jv["kind"], "xy");
  EXPECT_TRUE(jv["log_x"].get<bool>() && jv["log_y"].get<bool>());
  std::vector<std::string> labels;
  for (const auto& d : jv["datasets"])
    labels.push_back(d["label"]);
  EXPECT_EQ(labels, (std::vector<std::string>{"KAN fits", "MLP fits", "KAN Pareto front",
                                              "MLP Pareto front", "paper: best KAN [2,3,2,1,1,1]",
                                              "paper: minimal KAN [2,1,1]", "paper: MLP"}));
  const auto& kan = jv["datasets"][0];
  EXPECT_FALSE(kan["line"].get<bool>());
  EXPECT_EQ(kan["points"].size(), 5u); // the NaN point is not drawn
  EXPECT_EQ(kan["points"][2], json({48, 2e-3, "KAN [2,1,1] G=10 (refined), seed 0"}));
  EXPECT_EQ(jv["datasets"][1]["color"], jv["datasets"][3]["color"]);
  EXPECT_NE(kan["color"], jv["datasets"][1]["color"]);
  // Each family's own front, as a step line.
  const auto& kan_front = jv["datasets"][2];
  EXPECT_TRUE(kan_front["stepped"].get<bool>());
  ASSERT_EQ(kan_front["points"].size(), 3u);
  EXPECT_EQ(kan_front["points"][2][0], 48);
  EXPECT_EQ(jv["datasets"][3]["points"].size(), 2u); // 51 and 10501 parameters
  // The paper's numbers across the chart: the measured parameters (20 to 10501) and a little
  // more, to round numbers.
  const auto& paper = jv["datasets"][4];
  EXPECT_TRUE(paper["dashed"].get<bool>());
  EXPECT_EQ(paper["points"], json({{10.0, 1.67e-5}, {20000.0, 1.67e-5}}));
  EXPECT_EQ(jv["x_min"], 10.0);
  EXPECT_EQ(jv["x_max"], 20000.0);
  EXPECT_DOUBLE_EQ(jv["y_min"].get<double>(), 1e-5); // 1.67e-5 / 1.5 rounded down
  EXPECT_DOUBLE_EQ(jv["y_max"].get<double>(), 2e-2); // 1e-2 * 1.5 rounded up
  // ellipj has no best-KAN number, fresnel no paper line at all.
  std::vector<std::string> ellipj;
  for (const auto& d : test::chart(charts, "chart-accuracy-1")["datasets"])
    ellipj.push_back(d["label"]);
  EXPECT_EQ(ellipj, (std::vector<std::string>{"KAN fits", "MLP fits", "KAN Pareto front",
                                              "MLP Pareto front", "paper: minimal KAN [2,2,1]",
                                              "paper: MLP"}));
  EXPECT_EQ(test::chart(charts, "chart-accuracy-2")["datasets"].size(), 2u);

  // The results embedded in the page read back as the run.
  EXPECT_TRUE(results_from_json(test::embedded(html, "kanbench-results")) == results);
  // An accuracy run times no cases: the report has no empty sections for them.
  for (const char* section : {"cases", "comparisons", "edge-cases", "audit", "charts"})
    EXPECT_EQ(html.find("<section id=\"" + std::string(section) + "\">"), std::string::npos)
        << section;
  EXPECT_EQ(html.find("Edge cases:"), std::string::npos);
}

TEST_F(AccuracyIo, AReportBesideItIsCheckedForTheRun) {
  const auto results = test::sample_accuracy_results();
  write_results_file(path("results.json"), results);
  HtmlReportOptions options;
  options.chartjs_source = "/* Chart.js */";
  write_html_report(path("report.html"), results, options);
  EXPECT_EQ(report_pair_problem(path("results.json")), std::nullopt);
  auto other = results;
  other.run_id = new_run_id();
  write_html_report(path("report.html"), other, options);
  const auto problem = report_pair_problem(path("results.json"));
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("is stale"), std::string::npos) << *problem;
}

TEST(AccuracyReport, ACompleteRunSaysNothingOfResumingAndAnEmptyOneStillRenders) {
  auto results = test::sample_accuracy_results();
  results.accuracy->planned_fits = static_cast<int64_t>(results.accuracy->fits.size());
  auto html = accuracy_html(results);
  EXPECT_EQ(html.find("accuracy-incomplete"), std::string::npos);
  // Before the first fit finished: no chart without a point or a paper number.
  results.accuracy->fits.clear();
  summarize_accuracy(*results.accuracy);
  html = accuracy_html(results);
  EXPECT_NE(html.find("Incomplete run: 0 of 9 planned fits"), std::string::npos);
  EXPECT_NE(html.find("<p>No fit failed.</p>"), std::string::npos);
  EXPECT_EQ(test::embedded(html, "kanbench-charts")["charts"].size(), 2u);
  EXPECT_NE(html.find("Nothing to draw"), std::string::npos);
  EXPECT_NE(html.find("reproduces for <span class=\"figure\">0 of 0</span> functions"),
            std::string::npos);
  // Without a section, nothing of it.
  results.accuracy.reset();
  html = accuracy_html(results);
  EXPECT_EQ(html.find("id=\"accuracy\""), std::string::npos);
  EXPECT_EQ(html.find("<b>Accuracy:</b>"), std::string::npos);
}

TEST(AccuracyReport, HostileStringsAreInert) {
  auto results = test::sample_accuracy_results();
  auto& a = *results.accuracy;
  a.functions[0] = a.summary[0].function = test::kHostile;
  for (auto& fit : a.fits)
    if (fit.function == "jv")
      fit.function = test::kHostile;
  a.summary[0].formula = test::kHostile;
  a.fits[4].error = test::kHostile;
  const auto html = accuracy_html(results);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  EXPECT_EQ(test::count(html, "</script>"), 4u); // results, charts, Chart.js, report
}

} // namespace
