// audited_fit: kan::fit under the device audit (trace of the first steps, static audit at the end).
#include "kan/diagnostics/audited_fit.h"

#include "test_util.h"

#include <cmath>

namespace kan::diagnostics {
namespace {

TEST(AuditedFit, CorrectKanIsCleanAndTracesTheFirstSteps) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    KAN model(KANOptions({2, 3, 1}).dtype(dtype));
    int64_t user_steps = 0;
    auto options = FitOptions()
                       .opt(Optimizer::kAdam)
                       .lr(0.01)
                       .steps(5)
                       .on_step([&](const StepRecord&, int64_t) { ++user_steps; });
    const auto result = audited_fit(model, test::toy_data(dtype), options, /*trace_steps=*/2);
    EXPECT_TRUE(result.clean()) << result.audit.to_text() << result.trace.to_text();
    EXPECT_EQ(user_steps, 5); // the caller's callbacks still run
    EXPECT_EQ(result.history.steps.size(), 5u);
    EXPECT_EQ(result.trace.summary.steps, 2);
    EXPECT_GT(result.trace.summary.operations, 100);
    // Parameters (6 spline, 8 frozen affine), gradients of the 6, buffers, Adam's moments of
    // the 6 and the data, after the last step.
    EXPECT_EQ(result.audit.summary.tensors_checked, 14 + 6 + 4 + 12 + 4);
    EXPECT_GT(result.traced_step_seconds, 0.0);
    EXPECT_TRUE(std::isfinite(result.untraced_step_seconds));
    const auto json = result.to_json();
    EXPECT_TRUE(json["audit"]["findings"].empty());
    EXPECT_EQ(json["trace"]["summary"]["steps"], 2);
  }
}

TEST(AuditedFit, TraceCanBeOff) {
  KAN model(KANOptions({2, 3, 1}));
  const auto result =
      audited_fit(model, test::toy_data(), FitOptions().opt(Optimizer::kAdam).steps(2),
                  /*trace_steps=*/0);
  EXPECT_EQ(result.trace.summary.operations, 0);
  EXPECT_TRUE(result.clean());
  KAN_EXPECT_ERROR(audited_fit(model, test::toy_data(), FitOptions().steps(1), -1),
                   "trace_steps must be >= 0, got -1");
}

TEST(AuditedFit, ZeroStepsStillAuditsTheModelAndData) {
  KAN model(KANOptions({2, 3, 1}));
  const auto result = audited_fit(model, test::toy_data(), FitOptions().steps(0));
  EXPECT_EQ(result.audit.summary.tensors_checked, 14 + 4 + 4);
  EXPECT_TRUE(std::isnan(result.untraced_step_seconds));
}

TEST(AuditedFit, MisplacedBufferIsNamed_CUDA) {
  KAN_REQUIRE_CUDA();
  KAN model(KANOptions({2, 3, 1}).device(torch::kCUDA));
  model->layer(0)->mask.set_data(model->layer(0)->mask.cpu()); // left behind by hand
  KAN_EXPECT_ERROR(
      audited_fit(model, test::toy_data(torch::kFloat32, torch::kCUDA), FitOptions().steps(1)),
      "model.layers.0.mask is on cpu, expected cuda");
}

TEST(AuditedFit, CleanOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  KAN model(KANOptions({2, 3, 1}).device(torch::kCUDA));
  const auto result =
      audited_fit(model, test::toy_data(torch::kFloat32, torch::kCUDA), FitOptions().steps(3));
  EXPECT_TRUE(result.clean()) << result.audit.to_text() << result.trace.to_text();
  EXPECT_EQ(result.trace.summary.cpu_share, 0.0) << result.trace.to_text();
}

} // namespace
} // namespace kan::diagnostics
