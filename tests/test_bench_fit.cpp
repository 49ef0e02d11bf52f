// kan::bench::run_fit, the library call behind `kanbench fit`, without the command line: what it
// writes, what it tells its caller while it runs, and what it refuses before training.
#include "test_util.h"

#include "kan/bench/fit.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/nn/mlp.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace {

using kan::test::ScratchDirTest;
using BenchFit = ScratchDirTest;

kan::bench::FitRequest toy_request(const std::string& out) {
  kan::bench::FitRequest request;
  request.config.function = "toy";
  request.config.train_num = 40;
  request.config.test_num = 20;
  request.config.seed = 3;
  request.setup.model = kan::KANOptions({2, 3, 1}).grid(3);
  request.setup.fit.steps(2);
  request.out = out;
  return request;
}

TEST_F(BenchFit, WritesWhatItReturnsAndReportsEveryStep) {
  auto request = toy_request(path("out"));
  request.config.refine = {5};
  std::vector<std::string> events;
  kan::bench::FitProgress progress;
  progress.on_start = [&](const std::string& subject, kan::ModelKind kind) {
    events.push_back("start " + subject + " " + kan::to_string(kind));
  };
  progress.on_step = [&](const kan::PipelineStage& stage, const kan::StepRecord& step) {
    events.push_back(stage.key() + " G=" + std::to_string(stage.grid) + " step " +
                     std::to_string(step.step));
  };
  progress.on_audit = [&](const kan::diagnostics::AuditedFit&) { events.push_back("audit"); };
  const auto outcome = kan::bench::run_fit(request, progress);

  EXPECT_EQ(events,
            (std::vector<std::string>{"start toy kan", "trained G=3 step 0", "trained G=3 step 1",
                                      "audit", "refined G=5 step 0", "refined G=5 step 1"}));
  EXPECT_EQ(outcome.subject, "toy");
  EXPECT_EQ(outcome.dtype, torch::kFloat64); // a new model's default
  ASSERT_EQ(outcome.fit_json, path("out/fit.json"));
  EXPECT_TRUE(std::filesystem::exists(path("out/model.pt")));
  // What it returned is what it wrote, read back by the strict reader.
  const auto written = kan::diagnostics::read_fit_record_strict(outcome.fit_json);
  EXPECT_EQ(kan::results::to_json(written), kan::results::to_json(outcome.record));
  ASSERT_EQ(written.refined.size(), 1u);
  EXPECT_EQ(written.refined[0].grid, 5);
  EXPECT_EQ(written.config.seed, 3u);
  EXPECT_EQ(*written.parameters, outcome.record.parameters.value());
}

TEST_F(BenchFit, TrainsAnMlpOnceAndRecordsItsSize) {
  auto request = toy_request(path("mlp"));
  request.setup.model_kind = kan::ModelKind::kMLP;
  request.setup.mlp.width({2, 4, 1});
  const auto outcome = kan::bench::run_fit(request);
  const auto written = kan::diagnostics::read_fit_record_strict(outcome.fit_json);
  EXPECT_EQ(written.config.model_kind, "mlp");
  EXPECT_EQ(*written.parameters, kan::mlp_parameter_count({2, 4, 1}));
  EXPECT_EQ(written.trained.history.steps.size(), 2u);
}

TEST_F(BenchFit, RefusesBeforeTrainingNamingTheOption) {
  auto schedule = toy_request(path("refine"));
  schedule.config.refine = {5, 4};
  KAN_EXPECT_ERROR(kan::bench::run_fit(schedule), "--refine", "after 5");
  auto width = toy_request(path("width"));
  width.setup.model = kan::KANOptions({3, 3, 1});
  KAN_EXPECT_ERROR(kan::bench::run_fit(width), "--width", "3 inputs", "'toy' has 2");
  // Nothing was written by either.
  EXPECT_FALSE(std::filesystem::exists(path("refine/fit.json")));
  EXPECT_FALSE(std::filesystem::exists(path("width/fit.json")));
}

} // namespace
