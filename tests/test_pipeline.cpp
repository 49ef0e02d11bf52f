// kan::run_pipeline: the stages run in order, each as the hand-written sequence of kan calls would
// run it, the hooks see every stage and step, and bad options are refused before any training.
#include "test_util.h"

#include "kan/train/pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace kan;

Dataset toy_data() {
  const auto& toy = reference_function("toy");
  return create_dataset(toy.f, DatasetOptions(2).train_num(64).test_num(32).dtype(torch::kFloat64));
}

KANOptions small_model() {
  return KANOptions({2, 3, 1}).grid(3).k(3).seed(0).dtype(torch::kFloat64);
}

// The same training by hand: fit, refine, fit, refine, fit.
TEST(Pipeline, GridScheduleIsTheHandWrittenSequence) {
  const auto data = toy_data();
  const auto fit_options = FitOptions().steps(3);
  KAN by_hand(small_model());
  fit(by_hand, data, fit_options);
  for (const int64_t grid : {5, 8}) {
    by_hand = by_hand->refine(grid, data.train_input);
    fit(by_hand, data, fit_options);
  }

  KAN model(small_model());
  std::vector<std::string> stages;
  int64_t steps_seen = 0;
  const auto result = run_pipeline(
      model, data,
      PipelineOptions()
          .fit(fit_options)
          .grids({5, 8})
          .on_stage([&](const PipelineStage& s) {
            stages.push_back(s.key() + " G=" + std::to_string(s.grid));
          })
          .on_stage_step([&](const PipelineStage&, const StepRecord&) { ++steps_seen; }));
  EXPECT_EQ(stages, (std::vector<std::string>{"trained G=3", "refined G=5", "refined G=8"}));
  EXPECT_EQ(steps_seen, 9);
  EXPECT_EQ(model->options().grid(), 8);
  ASSERT_EQ(result.refined.size(), 2u);
  EXPECT_EQ(result.refined[0].grid, 5);
  EXPECT_EQ(result.refined[1].trained.history.steps.size(), 3u);
  EXPECT_FALSE(result.pruned.has_value());
  EXPECT_FALSE(result.symbolic.has_value());
  const auto x = data.test_input;
  EXPECT_TRUE(torch::equal(model(x), by_hand(x)));
  EXPECT_EQ(result.last().test_rmse, evaluate(by_hand, data).test_rmse);
  EXPECT_EQ(&result.last(), &result.refined.back().trained);
  EXPECT_DOUBLE_EQ(result.seconds(), result.trained.history.seconds +
                                         result.refined[0].trained.history.seconds +
                                         result.refined[1].trained.history.seconds);
}

TEST(Pipeline, PruneRefineSymbolicInOrder) {
  const auto data = toy_data();
  KAN model(small_model());
  std::vector<PipelineStage::Kind> kinds;
  std::vector<std::string> trained_by_hook;
  const auto result = run_pipeline(
      model, data,
      PipelineOptions()
          .fit(FitOptions().steps(2).lamb(1e-3))
          .prune(PruneStage{1e-2, 3e-2, 1})
          .grids({6})
          .symbolic(SymbolicStage{{"x", "x^2", "sin", "exp"}, 0.0, 0.8, 4, "newton"})
          .on_stage([&](const PipelineStage& s) { kinds.push_back(s.kind); })
          .train([&](KAN& m, const Dataset& d, const FitOptions& o, const PipelineStage& s) {
            trained_by_hook.push_back(s.key());
            return fit(m, d, o);
          }));
  using Kind = PipelineStage::Kind;
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::kTrain, Kind::kPrune, Kind::kRefine, Kind::kSymbolic}));
  EXPECT_EQ(trained_by_hook,
            (std::vector<std::string>{"trained", "pruned", "refined", "symbolic"}));
  ASSERT_TRUE(result.pruned.has_value());
  EXPECT_EQ(result.pruned->retrained.history.steps.size(), 1u);
  EXPECT_EQ(result.pruned->width_before[1].sum, 3);
  EXPECT_EQ(result.pruned->node_scores.size(), 3u);
  ASSERT_TRUE(result.symbolic.has_value());
  EXPECT_EQ(result.symbolic->retrained.history.steps.size(), 4u);
  EXPECT_FALSE(result.symbolic->edges.empty());
  for (const auto& edge : result.symbolic->edges)
    if (edge.fixed) {
      EXPECT_EQ(edge.params.size(), 4u);
      if (edge.function != "0") {
        ASSERT_TRUE(edge.curve.has_value());
        EXPECT_EQ(edge.curve->x.size(), static_cast<size_t>(SymbolicResult::kCurvePoints));
      }
    }
  ASSERT_TRUE(result.symbolic->formula.has_value()) << result.symbolic->formula_error;
  EXPECT_EQ(result.symbolic->formula->size(), 1u);
  EXPECT_EQ(model->options().grid(), 6);
  EXPECT_EQ(&result.last(), &result.symbolic->retrained);
}

TEST(Pipeline, ClassificationReportsAccuracy) {
  torch::manual_seed(0);
  const auto x = torch::rand({96, 2}, torch::kFloat64) * 2 - 1;
  const auto labels = (x.select(1, 0) > 0).to(torch::kLong);
  const Dataset data{x.narrow(0, 0, 64), labels.narrow(0, 0, 64), x.narrow(0, 64, 32),
                     labels.narrow(0, 64, 32)};
  KAN model(KANOptions({2, 2}).grid(3).seed(0).dtype(torch::kFloat64));
  const auto result = run_pipeline(
      model, data, PipelineOptions().fit(FitOptions().steps(3).loss(Loss::kCrossEntropy)));
  EXPECT_TRUE(std::isnan(result.trained.test_rmse));
  EXPECT_GE(result.trained.test_accuracy, 0.0);
  EXPECT_LE(result.trained.test_accuracy, 1.0);
  EXPECT_FALSE(std::isnan(result.trained.train_accuracy));
}

TEST(Pipeline, BadOptionsAreRefusedBeforeTraining) {
  const auto data = toy_data();
  int trained = 0;
  const auto count = [&](KAN& m, const Dataset& d, const FitOptions& o, const PipelineStage&) {
    ++trained;
    return fit(m, d, o);
  };
  KAN model(small_model());
  const auto base = PipelineOptions().fit(FitOptions().steps(1)).train(count);
  EXPECT_THROW_WITH(run_pipeline(model, data, PipelineOptions(base).grids({5, 5})),
                    "the grid schedule must grow: grid 5 after grid 5");
  EXPECT_THROW_WITH(run_pipeline(model, data, PipelineOptions(base).grids({2})),
                    "grid 2 after grid 3");
  EXPECT_THROW_WITH(run_pipeline(model, data,
                                 PipelineOptions(base).symbolic(
                                     SymbolicStage{{"x", "nosuch"}, 0, 0.8, {}, "pykan"})),
                    "nosuch");
  EXPECT_THROW_WITH(
      run_pipeline(model, data,
                   PipelineOptions(base).symbolic(SymbolicStage{{"x"}, 0, 0.8, {}, "fastest"})),
      "fastest");
  EXPECT_THROW_WITH(run_pipeline(model, data, PipelineOptions(base).prune(PruneStage{-1, 0, {}})),
                    "node_th -1");
  EXPECT_EQ(trained, 0);
  EXPECT_EQ(model->options().grid(), 3);
}

TEST(Pipeline, WidthTextIsPykansForm) {
  const auto width = pykan_width(KANOptions({2, 3, 1}).mult({0, 1, 0}));
  EXPECT_EQ(width_text(width), "2,[2,1],1");
  EXPECT_EQ(width_text(pykan_width(KANOptions({4, 5, 1}))), "4,5,1");
}

} // namespace
