// results.json: round trip, and one clear error (file, key path, problem) per malformed input.
#include "reports_test_util.h"

#include "kan/results/results_io.h"
#include "kan/results/statistics.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>
#include <set>

namespace {

namespace fs = std::filesystem;
using namespace kan::results;
using json = nlohmann::json;
using ResultsIo = test::ReportsScratchTest;

using test::expect_results_error;
using test::results_error_of;

TEST(ResultsJson, RoundTripIsIdentical) {
  const auto results = test::sample_results();
  const auto j = to_json(results);
  const auto back = results_from_json(j);
  EXPECT_TRUE(back == results);
  EXPECT_EQ(to_json(back), j);
  // Through text as well: doubles survive the printed form.
  EXPECT_TRUE(results_from_json(json::parse(j.dump(2))) == results);
}

TEST(ResultsJson, ScalingComparesWithOneRank) {
  const auto r = test::sample_results();
  ASSERT_EQ(r.scaling.size(), 3u);
  const auto& one = r.scaling[0];
  const auto& two = r.scaling[1];
  EXPECT_DOUBLE_EQ(*one.speedup, 1.0);
  EXPECT_DOUBLE_EQ(*two.speedup, 0.515 / 0.265);
  EXPECT_DOUBLE_EQ(*two.efficiency, 0.515 / 0.265 / 2);
  EXPECT_NEAR(*two.max_rel_loss_diff, 0.00000001 / 0.125, 1e-15);
  EXPECT_FALSE(r.scaling[2].speedup); // skipped: nothing to compare
  // A 1.2 file has no scaling: the key is refused there, read from 1.3 on.
  auto j = to_json(r);
  j["schema_version"] = "1.2.0";
  EXPECT_THROW(results_from_json(j), ResultsError);
  j = to_json(r);
  j["scaling"][1]["ranks"] = 0;
  try {
    results_from_json(j);
    ADD_FAILURE() << "ranks 0 was accepted";
  } catch (const ResultsError& e) {
    EXPECT_NE(std::string(e.what()).find("scaling[1].ranks"), std::string::npos) << e.what();
  }
  // A failed rank count is a problem for the CI gate; a skipped one is not.
  auto failed = r;
  failed.scaling[1].status = CaseStatus::kFailed;
  failed.scaling[1].reason = "rank 1: connection closed";
  const auto problems = run_problems(failed);
  EXPECT_NE(std::find_if(problems.begin(), problems.end(),
                         [](const std::string& p) {
                           return p.find("deep on 2 cuda rank(s) failed") != std::string::npos;
                         }),
            problems.end());
  EXPECT_EQ(run_problems(r).size(), run_problems(test::sample_results()).size());
}

TEST(ResultsJson, SweepFindsTheCrossoverAndSaturation) {
  const auto s = test::sample_sweep();
  ASSERT_EQ(s.targets.size(), 2u);
  // Targets in the order of their first point; the GPU's max-batch search is kept.
  EXPECT_EQ(s.targets[0].target, "cpu");
  EXPECT_EQ(s.targets[0].best_batch, 1024); // the first of the equal best
  EXPECT_DOUBLE_EQ(*s.targets[0].best_samples_per_second, 1.6e4);
  EXPECT_EQ(s.targets[0].saturation_batch, 256); // 1.5e4 >= 0.9 * 1.6e4
  EXPECT_FALSE(s.targets[0].max_batch.has_value());
  EXPECT_EQ(s.targets[1].target, "cuda");
  EXPECT_EQ(s.targets[1].best_batch, 4096);
  EXPECT_EQ(s.targets[1].saturation_batch, 4096);
  EXPECT_EQ(s.targets[1].max_batch, 1048576);
  EXPECT_EQ(s.targets[1].max_batch_attempts.size(), 3u);
  ASSERT_EQ(s.crossovers.size(), 1u);
  EXPECT_EQ(s.crossovers[0].a, "cpu");
  EXPECT_EQ(s.crossovers[0].b, "cuda");
  EXPECT_EQ(s.crossovers[0].batch, 256);
  EXPECT_EQ(s.crossovers[0].message, "cuda overtakes cpu from batch 256");

  // Faster everywhere, never faster, a dip in between, nothing in common.
  auto with = [](std::vector<double> cpu, std::vector<double> gpu) {
    Sweep s;
    s.batches = {1, 2, 3};
    for (size_t i = 0; i < 3; ++i)
      for (const auto& [target, rates] : {std::pair{"cpu", cpu}, std::pair{"cuda", gpu}}) {
        SweepPoint p;
        p.case_name = "deep";
        p.target = target;
        p.batch = s.batches[i];
        p.samples_per_second = rates[i];
        p.median_epoch_seconds = 1;
        if (rates[i] > 0)
          s.points.push_back(p);
      }
    fill_sweep_summaries(s);
    return s.crossovers.at(0);
  };
  EXPECT_EQ(with({1, 1, 1}, {2, 2, 2}).batch, 1);
  EXPECT_NE(with({1, 1, 1}, {2, 2, 2}).message.find("at every batch size (1 to 3)"),
            std::string::npos);
  EXPECT_FALSE(with({2, 2, 2}, {1, 1, 1}).batch.has_value());
  EXPECT_EQ(with({2, 2, 2}, {1, 1, 1}).message, "cuda does not overtake cpu (up to batch 3)");
  EXPECT_EQ(with({1, 1, 1}, {2, 0.5, 2}).batch, 3); // it must stay ahead
  EXPECT_EQ(with({1, 0, 0}, {0, 2, 2}).message, "no batch size measured on both cpu and cuda");

  // In the file: from 1.4 on, every point's batch one of the sweep's.
  auto j = to_json(test::sample_results());
  ASSERT_TRUE(j.contains("sweep"));
  j["schema_version"] = "1.3.0";
  expect_results_error(j, "sweep", "not part of schema 1.3.0 (from 1.4.0)");
  j = to_json(test::sample_results());
  j["sweep"]["points"][2]["batch"] = 100;
  expect_results_error(j, "sweep.points[2].batch", "100 is not one of the sweep's batches");
  j = to_json(test::sample_results());
  j["sweep"]["points"][0]["batch"] = 0;
  expect_results_error(j, "sweep.points[0].batch", "expected an integer >= 1, got 0");
  j = to_json(test::sample_results());
  j["sweep"]["points"][0]["median_epoch_seconds"] = nullptr;
  expect_results_error(j, "sweep.points[0].median_epoch_seconds", "is null but status is \"ok\"");
  // A failed point and a finding at a point are problems for the CI gate.
  auto failing = test::sample_results();
  failing.sweep->points[3].status = CaseStatus::kFailed;
  failing.sweep->points[3].reason = "boom";
  failing.sweep->points[2].audit_findings = {failing.cases[0].audit_findings[0]};
  const auto problems = run_problems(failing);
  EXPECT_EQ(problems.size(), run_problems(test::sample_results()).size() + 2);
  EXPECT_NE(std::find(problems.begin(), problems.end(), "deep at batch 256 on cuda failed: boom"),
            problems.end());
  EXPECT_TRUE(results_from_json(to_json(failing)) == failing);
  j = to_json(test::sample_results());
  j["sweep"]["points"].back()["reason"] = "";
  expect_results_error(j, "sweep.points[8].reason", "is empty but status is \"timeout\"");
}

TEST(Statistics, CoefficientOfVariation) {
  EXPECT_FALSE(coefficient_of_variation({}).has_value());
  EXPECT_FALSE(coefficient_of_variation({1.0}).has_value());
  EXPECT_FALSE(coefficient_of_variation({0.0, 0.0}).has_value());
  EXPECT_DOUBLE_EQ(*coefficient_of_variation({2.0, 2.0, 2.0}), 0.0);
  // mean 2, sample standard deviation 1.
  EXPECT_DOUBLE_EQ(*coefficient_of_variation({1.0, 2.0, 3.0}), 0.5);
}

TEST(ResultsJson, HasTheContractKeys) {
  const auto j = to_json(test::sample_results());
  for (const char* key :
       {"schema_version", "environment", "config", "cases", "comparisons", "edge_cases"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["schema_version"], kSchemaVersion);
  for (const char* key : {"name", "device", "dtype", "status", "reason", "epoch_seconds",
                          "median_epoch_seconds", "iqr_epoch_seconds", "peak_memory_bytes"})
    for (const auto& c : j["cases"])
      EXPECT_TRUE(c.contains(key)) << key;
  EXPECT_TRUE(j["cases"][0].contains("final_test_rmse"));
  EXPECT_TRUE(j["cases"][2].contains("final_accuracy"));
  for (const char* key : {"case", "a", "b", "speedup", "max_abs_output_diff", "max_rel_loss_diff",
                          "final_metric_rel_diff", "parity"})
    EXPECT_TRUE(j["comparisons"][0].contains(key)) << key;
  for (const char* key : {"name", "device", "status", "message"})
    EXPECT_TRUE(j["edge_cases"][0].contains(key)) << key;
  EXPECT_EQ(j["edge_cases"][1]["samples"], 1 << 20);
  // A skipped case carries no number: null, never a made-up value.
  EXPECT_EQ(j["cases"][3]["status"], "skipped");
  EXPECT_TRUE(j["cases"][3]["median_epoch_seconds"].is_null());
  EXPECT_TRUE(j["cases"][3]["peak_memory_bytes"].is_null());
  EXPECT_FALSE(j["cases"][3].contains("gpu_activity"));
}

TEST(ResultsJson, MinimalRunRoundTrips) {
  Results empty;
  empty.config.devices = {"cpu"};
  EXPECT_TRUE(results_from_json(to_json(empty)) == empty);
}

TEST(ResultsJson, EnvironmentRoundTrips) {
  const auto env = test::sample_results().environment;
  EXPECT_TRUE(environment_from_json(to_json(env)) == env);
  Environment unset = env;
  unset.cuda_visible_devices.reset();
  EXPECT_TRUE(to_json(unset)["cuda_visible_devices"].is_null());
  EXPECT_TRUE(environment_from_json(to_json(unset)) == unset);
}

TEST(ResultsJson, FillEpochStatisticsAndSpeedup) {
  CaseResult cpu;
  cpu.epoch_seconds = {4.0, 1.0, 2.0, 3.0};
  cpu.steps_per_epoch = 10;
  cpu.samples_per_epoch = 1000;
  fill_epoch_statistics(cpu);
  EXPECT_EQ(cpu.median_epoch_seconds, 2.5);
  EXPECT_EQ(cpu.iqr_epoch_seconds, 3.25 - 1.75);
  EXPECT_EQ(cpu.min_epoch_seconds, 1.0);
  EXPECT_EQ(cpu.max_epoch_seconds, 4.0);
  EXPECT_EQ(cpu.steps_per_second, 4.0);
  EXPECT_EQ(cpu.samples_per_second, 400.0);
  CaseResult gpu;
  gpu.epoch_seconds = {0.5, 0.5, 0.25, 0.75};
  fill_epoch_statistics(gpu);
  EXPECT_FALSE(gpu.steps_per_second);
  Comparison comparison;
  fill_speedup(comparison, cpu, gpu);
  EXPECT_EQ(comparison.speedup, 5.0);
  EXPECT_EQ(comparison.speedup_low, 1.75 / 0.5625);
  EXPECT_EQ(comparison.speedup_high, 3.25 / 0.4375);
  gpu.status = CaseStatus::kSkipped;
  fill_speedup(comparison, cpu, gpu);
  EXPECT_FALSE(comparison.speedup);
  EXPECT_FALSE(comparison.speedup_low);
  cpu.epoch_seconds.clear();
  fill_epoch_statistics(cpu);
  EXPECT_FALSE(cpu.median_epoch_seconds);
  EXPECT_FALSE(cpu.samples_per_second);
}

TEST(ResultsJson, RunProblemsAreWhatACiGateFailsOn) {
  auto r = test::sample_results();
  // The sample: an audit finding on toy/cpu and a failed edge case; a skipped target is not one.
  auto problems = run_problems(r);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "toy on cpu: audit finding wrong_dtype: float32 data for a float64 model");
  EXPECT_EQ(problems[1],
            "edge case million_samples on cpu fails: peak extra memory 600 MB > 512 MB");

  r.cases[0].audit_findings.clear();
  r.edge_cases[1].status = EdgeStatus::kPass;
  EXPECT_TRUE(run_problems(r).empty());
  r.cases[2].status = CaseStatus::kTimeout; // a measurement, not a failure
  r.cases[3].status = CaseStatus::kOom;
  EXPECT_TRUE(run_problems(r).empty());

  r.cases[2].status = CaseStatus::kFailed;
  r.cases[2].reason = "Expected all tensors to be on the same device";
  r.comparisons[0].parity = Parity::kFail;
  r.comparisons[0].message = "max_rel_loss_diff 0.1 > 1e-06";
  problems = run_problems(r);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "wide on cpu failed: Expected all tensors to be on the same device");
  EXPECT_EQ(problems[1], "toy cpu vs cuda: parity fails: max_rel_loss_diff 0.1 > 1e-06");
}

TEST(ResultsJson, MissingKeyNamesItsPath) {
  auto j = to_json(test::sample_results());
  j["cases"][1].erase("median_epoch_seconds");
  expect_results_error(j, "cases[1].median_epoch_seconds", "missing");
  j = to_json(test::sample_results());
  j.erase("edge_cases");
  expect_results_error(j, "edge_cases", "missing");
  j = to_json(test::sample_results());
  j["environment"]["cuda_devices"][0].erase("name");
  expect_results_error(j, "environment.cuda_devices[0].name", "missing");
}

TEST(ResultsJson, WrongTypeNamesItsPath) {
  auto j = to_json(test::sample_results());
  j["cases"][2]["median_epoch_seconds"] = "fast";
  expect_results_error(j, "cases[2].median_epoch_seconds",
                       "expected a number, got a string (\"fast\")");
  j = to_json(test::sample_results());
  j["cases"][0]["epoch_seconds"][3] = nullptr;
  expect_results_error(j, "cases[0].epoch_seconds[3]", "expected a number, got null");
  j = to_json(test::sample_results());
  j["cases"][0]["peak_memory_bytes"] = 1.5;
  expect_results_error(j, "cases[0].peak_memory_bytes", "expected an integer");
  j = to_json(test::sample_results());
  j["comparisons"] = json::object();
  expect_results_error(j, "comparisons", "expected an array, got an object");
  j = to_json(test::sample_results());
  j["environment"]["cuda_available"] = "yes";
  expect_results_error(j, "environment.cuda_available", "expected true or false");
  j = to_json(test::sample_results());
  j["cases"][1]["gpu_activity"]["epochs"][1]["kernels"] = -1.5;
  expect_results_error(j, "cases[1].gpu_activity.epochs[1].kernels", "expected an integer");
  j = to_json(test::sample_results());
  j["edge_cases"][1]["measurements"]["limit_bytes"] = "512 MB";
  expect_results_error(j, "edge_cases[1].measurements.limit_bytes", "expected a number");
}

TEST(ResultsJson, BadValuesNameTheirPath) {
  auto j = to_json(test::sample_results());
  j["cases"][0]["status"] = "done";
  expect_results_error(j, "cases[0].status", "expected one of ok, skipped, failed, oom, timeout");
  j = to_json(test::sample_results());
  j["comparisons"][0]["parity"] = "maybe";
  expect_results_error(j, "comparisons[0].parity", "expected one of pass, fail");
  j = to_json(test::sample_results());
  j["edge_cases"][0]["status"] = "ok";
  expect_results_error(j, "edge_cases[0].status", "expected one of pass, fail, skipped");
  j = to_json(test::sample_results());
  j["cases"][0]["activations"][1]["y"] = {1.0};
  expect_results_error(j, "cases[0].activations[1].y", "has 1 values but x has 3");
}

TEST(ResultsJson, StatusPromisesAreChecked) {
  auto j = to_json(test::sample_results());
  j["cases"][0]["median_epoch_seconds"] = nullptr;
  expect_results_error(j, "cases[0].median_epoch_seconds", "is null but status is \"ok\"");
  j = to_json(test::sample_results());
  j["cases"][2].erase("final_accuracy");
  expect_results_error(j, "cases[2]", "neither final_test_rmse nor final_accuracy");
  j = to_json(test::sample_results());
  j["cases"][3]["median_epoch_seconds"] = 0.5;
  expect_results_error(j, "cases[3]", "a skipped case has no numbers");
  j = to_json(test::sample_results());
  j["cases"][3]["reason"] = "";
  expect_results_error(j, "cases[3].reason", "is empty but status is \"skipped\"");
}

// Times, counts, sizes, rates and differences cannot be negative; fractions are 0..1.
TEST(ResultsJson, ImpossibleValuesNameTheirPath) {
  struct Row {
    const char* pointer;
    json value;
    const char* key_path;
    const char* problem;
  };
  const std::string negative = "expected a number >= 0, got ";
  const std::string fraction = "expected a fraction from 0 to 1, got ";
  const Row rows[] = {
      {"/cases/0/epoch_seconds/2", -0.5, "cases[0].epoch_seconds[2]", "-0.5"},
      {"/cases/0/median_epoch_seconds", -0.51, "cases[0].median_epoch_seconds", "-0.51"},
      {"/cases/0/iqr_epoch_seconds", -0.02, "cases[0].iqr_epoch_seconds", "-0.02"},
      {"/cases/0/min_epoch_seconds", -1, "cases[0].min_epoch_seconds", "-1"},
      {"/cases/0/max_epoch_seconds", -1, "cases[0].max_epoch_seconds", "-1"},
      {"/cases/0/peak_memory_bytes", -1, "cases[0].peak_memory_bytes", "-1"},
      {"/cases/0/final_test_rmse", -1e-3, "cases[0].final_test_rmse", "-0.001"},
      {"/cases/0/threads", -16, "cases[0].threads", "-16"},
      {"/cases/0/warmup_epochs", -1, "cases[0].warmup_epochs", "-1"},
      {"/cases/0/steps_per_epoch", -20, "cases[0].steps_per_epoch", "-20"},
      {"/cases/0/samples_per_epoch", -1000, "cases[0].samples_per_epoch", "-1000"},
      {"/cases/0/steps_per_second", -1, "cases[0].steps_per_second", "-1"},
      {"/cases/0/samples_per_second", -1, "cases[0].samples_per_second", "-1"},
      {"/cases/0/activations/1/layer", -1, "cases[0].activations[1].layer", "-1"},
      {"/cases/0/activations/1/input", -1, "cases[0].activations[1].input", "-1"},
      {"/cases/0/activations/1/output", -1, "cases[0].activations[1].output", "-1"},
      {"/cases/1/gpu_activity/epochs/0/kernels", -120, "cases[1].gpu_activity.epochs[0].kernels",
       "-120"},
      {"/cases/1/gpu_activity/epochs/0/busy_seconds", -0.08,
       "cases[1].gpu_activity.epochs[0].busy_seconds", "-0.08"},
      {"/cases/1/gpu_activity/epochs/0/wall_seconds", -0.1,
       "cases[1].gpu_activity.epochs[0].wall_seconds", "-0.1"},
      {"/cases/1/gpu_activity/epochs/1/h2d_copies", -1,
       "cases[1].gpu_activity.epochs[1].h2d_copies", "-1"},
      {"/cases/1/gpu_activity/epochs/1/h2d_bytes", -1, "cases[1].gpu_activity.epochs[1].h2d_bytes",
       "-1"},
      {"/cases/1/gpu_activity/epochs/1/d2h_copies", -1,
       "cases[1].gpu_activity.epochs[1].d2h_copies", "-1"},
      {"/cases/1/gpu_activity/epochs/1/d2h_bytes", -8, "cases[1].gpu_activity.epochs[1].d2h_bytes",
       "-8"},
      {"/comparisons/0/speedup", -5.1, "comparisons[0].speedup", "-5.1"},
      {"/comparisons/0/speedup_low", -4.2, "comparisons[0].speedup_low", "-4.2"},
      {"/comparisons/0/speedup_high", -5.5, "comparisons[0].speedup_high", "-5.5"},
      {"/comparisons/0/max_abs_output_diff", -1e-12, "comparisons[0].max_abs_output_diff",
       "-1e-12"},
      {"/comparisons/0/max_rel_output_diff", -1, "comparisons[0].max_rel_output_diff", "-1"},
      {"/comparisons/0/max_rel_loss_diff", -1, "comparisons[0].max_rel_loss_diff", "-1"},
      {"/comparisons/0/final_metric_rel_diff", -1, "comparisons[0].final_metric_rel_diff", "-1"},
      {"/comparisons/0/max_abs_grad_diff", -1, "comparisons[0].max_abs_grad_diff", "-1"},
      {"/comparisons/0/max_rel_grad_diff", -1, "comparisons[0].max_rel_grad_diff", "-1"},
      {"/comparisons/0/final_accuracy_diff_points", -1, "comparisons[0].final_accuracy_diff_points",
       "-1"},
      {"/comparisons/0/tolerances/max_rel_loss_diff", -1e-6,
       "comparisons[0].tolerances.max_rel_loss_diff", "-1e-06"},
      {"/edge_cases/1/samples", -1, "edge_cases[1].samples", "-1"},
      {"/edge_cases/1/peak_memory_bytes", -600000000, "edge_cases[1].peak_memory_bytes",
       "-600000000"},
      {"/edge_cases/1/seconds", -12.5, "edge_cases[1].seconds", "-12.5"},
      {"/config/repeat", -5, "config.repeat", "-5"},
      {"/config/warmup", -1, "config.warmup", "-1"},
      {"/config/time_limit_seconds", -60, "config.time_limit_seconds", "-60"},
      {"/environment/cpu_cores", -16, "environment.cpu_cores", "-16"},
      {"/environment/torch_threads", -1, "environment.torch_threads", "-1"},
      {"/environment/cuda_devices/0/index", -1, "environment.cuda_devices[0].index", "-1"},
      {"/environment/cuda_devices/0/multiprocessors", -132,
       "environment.cuda_devices[0].multiprocessors", "-132"},
      {"/environment/cuda_devices/0/total_memory_bytes", -1,
       "environment.cuda_devices[0].total_memory_bytes", "-1"},
      {"/environment/cuda_devices/0/free_memory_bytes", -1,
       "environment.cuda_devices[0].free_memory_bytes", "-1"},
      {"/wall_seconds", -42.0, "wall_seconds", "-42.0"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.pointer);
    auto j = to_json(test::sample_results());
    j[json::json_pointer(row.pointer)] = row.value;
    expect_results_error(j, row.key_path, negative + row.problem);
  }
  const Row fractions[] = {
      {"/cases/2/final_accuracy", 1.5, "cases[2].final_accuracy", "1.5"},
      {"/cases/2/final_accuracy", -0.1, "cases[2].final_accuracy", "-0.1"},
      {"/cases/1/gpu_activity/epochs/0/busy_fraction", 1.2,
       "cases[1].gpu_activity.epochs[0].busy_fraction", "1.2"},
  };
  for (const auto& row : fractions) {
    SCOPED_TRACE(row.pointer);
    auto j = to_json(test::sample_results());
    j[json::json_pointer(row.pointer)] = row.value;
    expect_results_error(j, row.key_path, fraction + row.problem);
  }
  // Zero is a value, not an error (a run can take no memory; an accuracy can be 0 or 1).
  auto j = to_json(test::sample_results());
  j["cases"][0]["peak_memory_bytes"] = 0;
  j["cases"][2]["final_accuracy"] = 1;
  j["wall_seconds"] = 0;
  EXPECT_NO_THROW(results_from_json(j));
}

// The median, IQR, min, max and rates a case states are recomputed from its epoch times.
TEST(ResultsJson, StatisticsThatContradictTheEpochTimesAreRefused) {
  struct Row {
    const char* pointer;
    json value;
    const char* key_path; // "" = must be accepted
    const char* problem;
  };
  const Row rows[] = {
      {"/cases/0/median_epoch_seconds", 0.6, "cases[0].median_epoch_seconds",
       "is 0.6 but the median of epoch_seconds is 0.51"},
      {"/cases/0/iqr_epoch_seconds", 0.5, "cases[0].iqr_epoch_seconds",
       "is 0.5 but the interquartile range of epoch_seconds is 0.02"},
      {"/cases/0/min_epoch_seconds", 0.3, "cases[0].min_epoch_seconds",
       "is 0.3 but the minimum of epoch_seconds is 0.49"},
      {"/cases/0/max_epoch_seconds", 0.9, "cases[0].max_epoch_seconds",
       "is 0.9 but the maximum of epoch_seconds is 0.55"},
      {"/cases/0/epoch_seconds/4", 5.5, "cases[0].max_epoch_seconds",
       "is 0.55 but the maximum of epoch_seconds is 5.5"},
      {"/cases/0/epoch_seconds/1", 0.1, "cases[0].median_epoch_seconds",
       "is 0.51 but the median of epoch_seconds is 0.5"},
      {"/cases/0/steps_per_second", 1.0, "cases[0].steps_per_second",
       "is 1.0 but steps_per_epoch / the median of epoch_seconds is 39.2"},
      {"/cases/0/samples_per_second", 1, "cases[0].samples_per_second",
       "is 1.0 but samples_per_epoch / the median of epoch_seconds is 1960.7"},
      {"/cases/1/median_epoch_seconds", 0.1000001, "cases[1].median_epoch_seconds",
       "is 0.1000001 but the median of epoch_seconds is 0.1"},
      // Within the relative tolerance of 1e-9: rounding by another producer.
      {"/cases/0/median_epoch_seconds", 0.51 * (1 + 1e-12), "", ""},
      {"/cases/0/steps_per_second", 20 / 0.51 * (1 - 1e-12), "", ""},
      // A rate without its per-epoch count cannot be checked, and is not refused.
      {"/cases/2/steps_per_second", 7.0, "", ""},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.pointer);
    auto j = to_json(test::sample_results());
    j[json::json_pointer(row.pointer)] = row.value;
    if (*row.key_path)
      expect_results_error(j, row.key_path, row.problem);
    else
      EXPECT_NO_THROW(results_from_json(j));
  }

  // The IQR of nearly equal times is a difference of two close numbers: the tolerance is
  // relative to the quantiles, not to the (tiny) IQR.
  auto j = to_json(test::sample_results());
  j["cases"][2]["epoch_seconds"] = {2.0, 2.0, 2.0};
  j["cases"][2]["median_epoch_seconds"] = 2.0;
  j["cases"][2]["iqr_epoch_seconds"] = 1e-15;
  EXPECT_NO_THROW(results_from_json(j));
  j["cases"][2]["iqr_epoch_seconds"] = 1e-6;
  expect_results_error(j, "cases[2].iqr_epoch_seconds",
                       "is 1e-06 but the interquartile range of epoch_seconds is 0.0");

  // A statistic without epoch times to be one of: a timeout with a median.
  j = to_json(test::sample_results());
  j["cases"][2]["status"] = "timeout";
  j["cases"][2]["reason"] = "timed out after 60 s";
  j["cases"][2]["epoch_seconds"] = json::array();
  expect_results_error(j, "cases[2].median_epoch_seconds",
                       "is 2.0 but epoch_seconds is empty (it is the median of epoch_seconds)");
  j["cases"][2]["median_epoch_seconds"] = nullptr;
  expect_results_error(j, "cases[2].iqr_epoch_seconds", "but epoch_seconds is empty");
  j["cases"][2]["iqr_epoch_seconds"] = nullptr;
  EXPECT_NO_THROW(results_from_json(j));
}

TEST(ResultsJson, RunIds) {
  const std::regex format("[0-9]{8}T[0-9]{6}Z-[0-9a-f]{16}");
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const auto id = new_run_id();
    EXPECT_TRUE(std::regex_match(id, format)) << id;
    EXPECT_TRUE(is_valid_run_id(id)) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
  // Every new Results is a run of its own; a copy is the same run.
  const Results a, b;
  EXPECT_TRUE(is_valid_run_id(a.run_id));
  EXPECT_NE(a.run_id, b.run_id);
  EXPECT_FALSE(a == b);
  const Results copy = a;
  EXPECT_TRUE(copy == a);

  for (const auto& [id, valid] :
       std::vector<std::pair<std::string, bool>>{{"550e8400-e29b-41d4-a716-446655440000", true},
                                                 {"run_1.2", true},
                                                 {std::string(128, 'a'), true},
                                                 {"", false},
                                                 {std::string(129, 'a'), false},
                                                 {"a b", false},
                                                 {"a\"b", false},
                                                 {"a/b", false},
                                                 {"caf\xc3\xa9", false}})
    EXPECT_EQ(is_valid_run_id(id), valid) << id;
}

TEST(ResultsJson, RunIdIsWrittenAndChecked) {
  const auto results = test::sample_results();
  auto j = to_json(results);
  EXPECT_EQ(j["run_id"], results.run_id);
  EXPECT_EQ(results_from_json(j).run_id, results.run_id);
  for (const auto& [value, problem] : std::vector<std::pair<json, std::string>>{
           {"", "expected 1 to 128 letters, digits, '.', '_' or '-', got \"\""},
           {"a b", "got \"a b\""},
           {std::string(100000, 'x'), "(100000 characters)"},
           {42, "expected a string, got an integer (42)"}}) {
    j["run_id"] = value;
    expect_results_error(j, "run_id", problem);
    EXPECT_LT(std::string(results_error_of(j).what()).size(), 300u);
  }
  j.erase("run_id");
  expect_results_error(j, "run_id", "missing (a required key)");
}

TEST(ResultsJson, FilesOfSchema10WithoutRunIdStillRead) {
  auto j = to_json(test::sample_results());
  j["schema_version"] = "1.0.0";
  j.erase("run_id");
  j.erase("scaling"); // from 1.3
  j.erase("sweep");   // from 1.4
  const auto old = results_from_json(j);
  EXPECT_EQ(old.run_id, "");
  EXPECT_EQ(old.schema_version, "1.0.0");
  // It is written back as it was (a 1.0 file has no run id to write).
  EXPECT_EQ(to_json(old), j);
  // 1.0 had no run_id: there it is an unknown key.
  j["run_id"] = new_run_id();
  expect_results_error(j, "run_id", "unknown key");
  // Results of 1.1 without a run id do not read (and so are not written).
  auto nameless = test::sample_results();
  nameless.run_id.clear();
  EXPECT_THROW(results_from_json(to_json(nameless)), ResultsError);
}

// Errors found while parsing the text (before any key is looked at) name the key path too, and
// echo no megabyte of input.
TEST_F(ResultsIo, TextErrorsNameTheKeyPathAndStayShort) {
  // The document with the value at `pointer` replaced by the text `raw`.
  const auto with_raw = [](const std::string& pointer, const std::string& raw) {
    auto j = to_json(test::sample_results());
    j[json::json_pointer(pointer)] = "@@RAW@@";
    auto text = j.dump(2);
    text.replace(text.find("\"@@RAW@@\""), 9, raw);
    return text;
  };
  struct Row {
    std::string text;
    std::string key_path;
    std::string problem; // the start of the problem
  };
  const std::string digits400 = "1" + std::string(400, '0');
  const std::vector<Row> rows{
      {with_raw("/cases/0/epoch_seconds/2", "1e999"), "cases[0].epoch_seconds[2]",
       "number out of range (1e999)"},
      {with_raw("/cases/0/epoch_seconds/2", "-1e999"), "cases[0].epoch_seconds[2]",
       "number out of range (-1e999)"},
      {with_raw("/wall_seconds", digits400), "wall_seconds",
       "number out of range (" + digits400.substr(0, 26) + "..." + digits400.substr(387) +
           " (401 characters))"},
      {with_raw("/cases/1/median_epoch_seconds", "NaN"), "cases[1].median_epoch_seconds",
       "not valid JSON: parse error at line"},
      {with_raw("/cases/1/median_epoch_seconds", "Infinity"), "cases[1].median_epoch_seconds",
       "not valid JSON: parse error at line"},
      {with_raw("/config/extra/note", std::string(100000, '7') + "e+x"), "config.extra.note",
       "not valid JSON: parse error at line"},
      {"{\"schema_version\": \"1.1.0\", \"run_id\": \"" + std::string(100000, 'a'), "run_id",
       "not valid JSON: parse error at line 1, column 100040: syntax error while parsing value - "
       "invalid string: missing closing quote; last read: '\"aaaaaaaa"},
      {"{\"schema_version\": \"1.1.0\", \"schema_version\": \"1.1.0\"}", "schema_version",
       "key given twice in one object"},
      {to_json(test::sample_results()).dump() + " x", "", "not valid JSON: parse error at line"},
      // Numbers that parse are echoed in their short form.
      {with_raw("/cases/0/peak_memory_bytes", "1" + std::string(300, '0')),
       "cases[0].peak_memory_bytes", "expected an integer, got a number (1e+300)"},
      {with_raw("/cases/0/epoch_seconds/2", "1" + std::string(300, '0')),
       "cases[0].median_epoch_seconds", "is 0.51 but the median of epoch_seconds is 0.52"},
      {with_raw("/cases/0/epoch_seconds/4", "1" + std::string(300, '0')),
       "cases[0].max_epoch_seconds", "is 0.55 but the maximum of epoch_seconds is 1e+300"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.key_path + ": " + row.problem);
    write("bad.json", row.text);
    try {
      read_results_file(path("bad.json"));
      ADD_FAILURE() << "no error";
    } catch (const ResultsError& e) {
      EXPECT_EQ(e.file(), path("bad.json"));
      EXPECT_EQ(e.key_path(), row.key_path) << e.what();
      EXPECT_EQ(e.problem().rfind(row.problem, 0), 0u) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    }
  }
  // The example of the documentation, whole.
  write("bad.json", with_raw("/cases/0/epoch_seconds/2", "1e999"));
  try {
    read_results_file(path("bad.json"));
    ADD_FAILURE() << "no error";
  } catch (const ResultsError& e) {
    EXPECT_EQ(std::string(e.what()),
              path("bad.json") + ": cases[0].epoch_seconds[2]: number out of range (1e999)");
  }
  // Nesting deep enough to overflow a recursive reader is refused, with a short path.
  write("deep.json",
        with_raw("/config/extra", std::string(100000, '[') + std::string(100000, ']')));
  try {
    read_results_file(path("deep.json"));
    ADD_FAILURE() << "no error";
  } catch (const ResultsError& e) {
    EXPECT_EQ(e.key_path().rfind("config.extra[0][0]", 0), 0u) << e.what();
    EXPECT_EQ(e.problem(), "nested deeper than 512 levels") << e.what();
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
  }
}

TEST(ResultsJson, CrossReferencesAreChecked) {
  auto j = to_json(test::sample_results());
  j["comparisons"][0]["b"] = "tpu";
  expect_results_error(j, "comparisons[0].b", "no case with name \"toy\" and target \"tpu\"");
  j = to_json(test::sample_results());
  j["cases"][1]["target"] = "cpu";
  expect_results_error(j, "cases[1]", "same name \"toy\" and target \"cpu\" as cases[0]");
}

TEST(ResultsJson, SchemaVersions) {
  auto j = to_json(test::sample_results());
  j["schema_version"] = "2.0.0";
  expect_results_error(j, "schema_version", "version 2.0.0 is not supported");
  j["schema_version"] = "1.0";
  expect_results_error(j, "schema_version", "expected \"MAJOR.MINOR.PATCH\"");
  j["schema_version"] = 1;
  expect_results_error(j, "schema_version", "expected a string");
  j.erase("schema_version");
  expect_results_error(j, "schema_version", "missing");
  // A newer major is refused before anything else is looked at.
  expect_results_error(json{{"schema_version", "7.1.0"}}, "schema_version", "not supported");
}

TEST(ResultsJson, UnknownKeysAreRefusedUnlessTheMinorVersionIsNewer) {
  auto j = to_json(test::sample_results());
  j["cases"][0]["median_epoch_secs"] = 1.0; // a typo
  expect_results_error(j, "cases[0].median_epoch_secs", "unknown key");
  j["schema_version"] = "1.99.0"; // a newer writer may add keys
  EXPECT_NO_THROW(results_from_json(j));
  j["schema_version"] = "1.0.7"; // a patch never adds keys
  EXPECT_THROW(results_from_json(j), ResultsError);
}

TEST(ResultsJson, TopLevelMustBeAnObject) {
  const auto e = results_error_of(json::array());
  EXPECT_EQ(e.key_path(), "");
  EXPECT_NE(e.problem().find("expected a JSON object at the top level, got an array"),
            std::string::npos);
}

TEST_F(ResultsIo, WriteThenReadIsIdentical) {
  const auto results = test::sample_results();
  write_results_file(path("results.json"), results);
  EXPECT_TRUE(read_results_file(path("results.json")) == results);
  const auto text = read("results.json");
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(json::parse(text), to_json(results));
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename(), "results.json") << "left behind: " << entry.path();
}

TEST_F(ResultsIo, FileErrorsNameTheFile) {
  const auto expect_file_error = [&](const std::string& file, const std::string& part) {
    try {
      read_results_file(path(file));
      ADD_FAILURE() << file << " was read";
    } catch (const ResultsError& e) {
      EXPECT_EQ(e.file(), path(file));
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path(file) + ": ", 0), 0u) << e.what();
    }
  };
  expect_file_error("missing.json", "cannot open: No such file or directory");
  write("empty.json", "");
  expect_file_error("empty.json", "not valid JSON");
  write("truncated.json", to_json(test::sample_results()).dump(2).substr(0, 300));
  expect_file_error("truncated.json", "not valid JSON");
  write("garbage.json", "{\"schema_version\": \"1.0.0\",\n  \"cases\": [1, 2,, 3]}");
  expect_file_error("garbage.json", "line 2");
  fs::create_directories(path("folder.json"));
  expect_file_error("folder.json", "is a folder");
  auto j = to_json(test::sample_results());
  j["cases"][3]["epoch_seconds"] = "[]";
  write("wrong.json", j.dump());
  expect_file_error("wrong.json", "cases[3].epoch_seconds: expected an array, got a string");
}

TEST_F(ResultsIo, WriterRefusesWhatTheReaderWouldRefuseAndLeavesTheOldFile) {
  write_results_file(path("results.json"), test::sample_results());
  const auto before = read("results.json");
  auto bad = test::sample_results();
  bad.cases[0].epoch_seconds[2] = std::numeric_limits<double>::quiet_NaN();
  try {
    write_results_file(path("results.json"), bad);
    ADD_FAILURE() << "a NaN epoch time was written";
  } catch (const ResultsError& e) {
    EXPECT_EQ(e.key_path(), "cases[0].epoch_seconds[2]") << e.what();
    EXPECT_NE(std::string(e.what()).find("not written"), std::string::npos) << e.what();
  }
  auto unlabelled = test::sample_results();
  unlabelled.cases[1].target = "cpu";
  EXPECT_THROW(write_results_file(path("results.json"), unlabelled), ResultsError);
  // No run id: refused, not invented (the report written from the same Results would not match).
  auto nameless = test::sample_results();
  nameless.run_id.clear();
  try {
    write_results_file(path("results.json"), nameless);
    ADD_FAILURE() << "results without a run id were written";
  } catch (const ResultsError& e) {
    EXPECT_EQ(e.key_path(), "run_id") << e.what();
  }
  // Statistics that contradict the epoch times are refused too.
  auto contradicting = test::sample_results();
  contradicting.cases[0].median_epoch_seconds = 0.6;
  EXPECT_THROW(write_results_file(path("results.json"), contradicting), ResultsError);
  EXPECT_EQ(read("results.json"), before);
}

} // namespace
