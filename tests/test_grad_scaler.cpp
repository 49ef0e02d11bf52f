// Mixed precision: GradScaler (PyTorch's dynamic loss scaling, which LibTorch lacks), autocast
// scopes, and fit() under both.
#include "kan/optim/grad_scaler.h"

#include "kan/nn/autocast.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/autocast_mode.h>
#include <torch/optim/adam.h>

#include <cmath>
#include <limits>

namespace kan {
namespace {

TEST(GradScaler, ScalesTheLossAndUnscalesTheGradientsExactly) {
  GradScaler scaler(GradScalerOptions().init_scale(1024));
  auto w = torch::tensor({1.5, -2.0}, torch::kFloat64).requires_grad_();
  const auto loss = (w * w).sum();
  const auto scaled = scaler.scale(loss);
  EXPECT_DOUBLE_EQ(scaled.item<double>(), 1024 * loss.item<double>());
  scaled.backward();
  EXPECT_DOUBLE_EQ(w.grad()[0].item<double>(), 1024 * 3.0);
  EXPECT_FALSE(scaler.unscale_({w}));
  // A power of two: the division is exact.
  EXPECT_DOUBLE_EQ(w.grad()[0].item<double>(), 3.0);
  EXPECT_DOUBLE_EQ(w.grad()[1].item<double>(), -4.0);
  EXPECT_EQ(scaler.overflowed_steps(), 0);
}

TEST(GradScaler, BacksOffOnOverflowAndGrowsAfterCleanSteps) {
  GradScaler scaler(GradScalerOptions().init_scale(8).growth_interval(3));
  auto w = torch::ones({3}).requires_grad_();
  auto step = [&](float value) {
    w.mutable_grad() = torch::full({3}, value);
    const bool overflow = scaler.unscale_({w});
    scaler.update();
    return overflow;
  };
  EXPECT_TRUE(step(std::numeric_limits<float>::infinity()));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 4.0); // backoff 0.5
  EXPECT_TRUE(step(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 2.0);
  EXPECT_EQ(scaler.overflowed_steps(), 2);
  EXPECT_FALSE(step(1));
  EXPECT_FALSE(step(1));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 2.0);
  EXPECT_FALSE(step(1)); // the third clean step in a row
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 4.0);
}

TEST(GradScaler, TrainingSkipsOverflowingStepsAndRecovers) {
  // A scale so large that the scaled gradients overflow float32: the first steps are skipped
  // (the parameters do not move) until the scale has backed off, then Adam trains.
  KAN model(KANOptions({2, 3, 1}).grid(3).seed(1));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-2));
  GradScaler scaler(GradScalerOptions().init_scale(std::ldexp(1.0, 126)));
  const auto x = torch::rand({64, 2}) * 2 - 1;
  const auto y = torch::sin(x.sum(1, true));
  const auto before = model->layer(0)->coef.clone();
  int64_t skipped = 0;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    adam.zero_grad();
    // Weighted so that the scaled gradients overflow float32 at the first scale.
    const auto loss = 1e4 * (model->forward(x) - y).pow(2).mean();
    (step == 0 ? first : last) = loss.item<double>();
    scaler.scale(loss).backward();
    if (scaler.unscale_(adam)) {
      ++skipped;
      if (skipped == 1) {
        EXPECT_TRUE(torch::equal(model->layer(0)->coef, before));
      }
    } else {
      adam.step();
    }
    scaler.update();
  }
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(skipped, scaler.overflowed_steps());
  EXPECT_LT(scaler.get_scale(), std::ldexp(1.0, 126));
  EXPECT_LT(last, first);
}

TEST(GradScaler, BadOptionsAreRefusedByName) {
  KAN_EXPECT_ERROR(GradScaler(GradScalerOptions().init_scale(0)), "init_scale", "got 0");
  KAN_EXPECT_ERROR(GradScaler(GradScalerOptions().growth_factor(1)), "growth_factor");
  KAN_EXPECT_ERROR(GradScaler(GradScalerOptions().backoff_factor(1)), "backoff_factor");
  KAN_EXPECT_ERROR(GradScaler(GradScalerOptions().growth_interval(0)), "growth_interval");
}

TEST(GradScaler, Float16UnderAutocastTrains_CUDA) {
  KAN_REQUIRE_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  KAN model(KANOptions({2, 5, 1}).grid(5).seed(0).device(gpu));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-2));
  GradScaler scaler;
  const auto x = (torch::rand({256, 2}) * 2 - 1).to(gpu);
  const auto y = torch::sin(x.sum(1, true));
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    adam.zero_grad();
    torch::Tensor loss;
    {
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, at::kHalf);
      at::autocast::increment_nesting();
      loss = (model->forward(x).to(torch::kFloat32) - y).pow(2).mean();
      at::autocast::decrement_nesting();
      at::autocast::clear_cache();
      at::autocast::set_autocast_enabled(at::kCUDA, false);
    }
    (step == 0 ? first : last) = loss.item<double>();
    scaler.scale(loss).backward();
    if (!scaler.unscale_(adam))
      adam.step();
    scaler.update();
  }
  EXPECT_LT(last, first);
  EXPECT_EQ(scaler.options().init_scale(), 65536.0);
}

} // namespace
} // namespace kan

namespace kan {
namespace {

Dataset toy_data(int64_t n = 200) {
  const auto& f = reference_function("toy");
  return create_dataset(f.f, DatasetOptions(f.n_var).ranges(f.ranges).train_num(n).test_num(n));
}

TEST(MixedPrecision, Bf16AutocastTrainsOnTheCpuCloseToFloat32) {
  const auto data = toy_data();
  KAN ref(KANOptions({2, 5, 1}).grid(5).seed(0)), bf16(KANOptions({2, 5, 1}).grid(5).seed(0));
  // The forward under autocast: the base branch's matmul in bfloat16, the rest float32.
  torch::Tensor y32, y16;
  {
    torch::NoGradGuard no_grad;
    y32 = ref->forward(data.test_input);
    AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    y16 = bf16->forward(data.test_input);
  }
  EXPECT_EQ(y16.scalar_type(), torch::kFloat32);
  const double rel = ((y16 - y32).abs().max() / y32.abs().max()).item<double>();
  EXPECT_GT(rel, 0.0);                                          // bfloat16 did run
  EXPECT_LT(rel, 5e-2);                                         // and only the base branch's matmul
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU)); // the guard restored it

  const auto opts = FitOptions().opt(Optimizer::kAdam).lr(1e-2).steps(40).update_grid(false);
  const auto h32 = fit(ref, data, opts);
  const auto h16 = fit(bf16, data, FitOptions(opts).autocast(torch::kBFloat16));
  EXPECT_LT(h16.steps.back().train_loss, h16.steps.front().train_loss);
  EXPECT_NEAR(h16.steps.back().train_loss, h32.steps.back().train_loss,
              0.25 * h32.steps.back().train_loss);
  EXPECT_EQ(bf16->dtype(), torch::kFloat32); // parameters stay float32
}

TEST(MixedPrecision, LbfgsReevaluatesAfterAnOverflow) {
  // LBFGS with a scale that overflows float32: the closure backs off and evaluates again, so
  // the line search sees only finite gradients, and training matches unscaled LBFGS (the
  // scales are powers of two: scaling and unscaling are exact).
  const auto data = toy_data();
  KAN plain(KANOptions({2, 3, 1}).grid(3).seed(2)), scaled(KANOptions({2, 3, 1}).grid(3).seed(2));
  const auto opts = FitOptions().steps(5).update_grid(false);
  const auto h = fit(plain, data, opts);
  auto scaler = std::make_shared<GradScaler>(GradScalerOptions().init_scale(std::ldexp(1.0, 127)));
  const auto hs = fit(scaled, data, FitOptions(opts).grad_scaler(scaler));
  EXPECT_GT(scaler->overflowed_steps(), 0);
  EXPECT_LT(scaler->get_scale(), std::ldexp(1.0, 127));
  for (size_t i = 0; i < h.steps.size(); ++i)
    EXPECT_NEAR(hs.steps[i].train_loss, h.steps[i].train_loss, 1e-6 * h.steps[i].train_loss)
        << "step " << i;
}

TEST(MixedPrecision, BadSettingsAreRefusedByName) {
  const auto data = toy_data(20);
  KAN model(KANOptions({2, 3, 1}).grid(3));
  KAN_EXPECT_ERROR(fit(model, data, FitOptions().steps(1).autocast(torch::kHalf)),
                   "FitOptions::autocast float16 runs on CUDA only");
  KAN_EXPECT_ERROR(fit(model, data, FitOptions().steps(1).autocast(torch::kFloat64)),
                   "FitOptions::autocast must be bfloat16 or float16");
  KAN wide(KANOptions({2, 3, 1}).grid(3).dtype(torch::kFloat64));
  KAN_EXPECT_ERROR(
      fit(wide, data.to(torch::kFloat64), FitOptions().steps(1).autocast(torch::kBFloat16)),
      "needs a float32 model", "Double");
}

} // namespace
} // namespace kan
