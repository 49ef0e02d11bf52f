// KANLayer: pykan's numbers, gradients, the module contract, bad input.
#include "kan/nn/layer.h"

#include "kan/nn/bspline.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

namespace kan {
namespace {

using test::max_abs_diff;
using test::to_tensor;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

KANLayer layer_from_reference(const nlohmann::json& config, const nlohmann::json& state,
                              SplineBackend backend = SplineBackend::kFused) {
  KANLayer layer(KANLayerOptions(config["in_dim"], config["out_dim"])
                     .grid(config["G"])
                     .k(config["k"])
                     .dtype(torch::kFloat64)
                     .backend(backend));
  torch::NoGradGuard no_grad;
  layer->grid.copy_(to_tensor(state["grid"]));
  layer->coef.copy_(to_tensor(state["coef"]));
  layer->scale_base.copy_(to_tensor(state["scale_base"]));
  layer->scale_sp.copy_(to_tensor(state["scale_sp"]));
  layer->mask.copy_(to_tensor(state["mask"]));
  return layer;
}

TEST(KANLayer, ForwardMatchesPykan) {
  const auto ref = test::load_reference("layer_forward.json");
  auto layer = layer_from_reference(ref["config"], ref["state"]);
  const auto x = to_tensor(ref["x"]);
  EXPECT_LT(max_abs_diff(layer(x), to_tensor(ref["y"])), 1e-12);

  // pykan lays edges out as [n][j][i]; this library as [n][i][j].
  const auto acts = layer->forward_with_activations(x);
  EXPECT_LT(max_abs_diff(acts.output, to_tensor(ref["y"])), 1e-12);
  EXPECT_LT(max_abs_diff(acts.edges.permute({0, 2, 1}), to_tensor(ref["postacts"])), 1e-12);
  EXPECT_LT(max_abs_diff(acts.spline.permute({0, 2, 1}), to_tensor(ref["postspline"])), 1e-12);
}

TEST(KANLayer, GridUpdateMatchesPykan) {
  const auto ref = test::load_reference("layer_update_grid.json");
  auto layer = layer_from_reference(ref["config"], ref["state_before"]);
  const auto samples = to_tensor(ref["samples"]);
  EXPECT_LT(max_abs_diff(layer(samples), to_tensor(ref["y_before"])), 1e-12);
  layer->update_grid_from_samples(samples);
  EXPECT_LT(max_abs_diff(layer->grid, to_tensor(ref["grid_after"])), 1e-12);
  // The least squares solved on the basis itself, as pykan's lstsq does: its answer to rounding.
  EXPECT_LT(max_abs_diff(layer->coef, to_tensor(ref["coef_after"])), 1e-11);
  EXPECT_LT(max_abs_diff(layer(samples), to_tensor(ref["y_after"])), 1e-12);
}

// The grid update sorts each input's samples on a copy: a one-input layer's column is laid out
// as the row it sorts, and sorting that in place changed the caller's data (a [1, 1] model's
// training input, which then no longer matched its labels).
TEST(KANLayer, GridUpdateLeavesItsSamplesAsTheyWere) {
  for (const int64_t in : {1, 3})
    for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
      KANLayer layer(KANLayerOptions(in, 2).grid(5).k(3).seed(2).dtype(dtype));
      auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
      const auto samples = torch::randn({300, in}, gen, torch::kFloat64).to(dtype);
      const auto before = samples.clone();
      layer->update_grid_from_samples(samples);
      EXPECT_TRUE(torch::equal(samples, before)) << in << " inputs, " << dtype;
    }
}

// Relative to the reference's largest magnitude.
double max_rel_diff(const torch::Tensor& a, const torch::Tensor& reference) {
  return max_abs_diff(a, reference) / std::max(reference.abs().max().item<double>(), 1e-300);
}

// At every spline order and grids up to 50 the least squares of a grid update solves what pykan
// solves: coefficients to 1e-11, outputs to 1e-12 (pykan's own run-to-run spread is ~1e-14).
TEST(KANLayer, GridUpdateMatchesPykanAtEveryOrder) {
  const auto ref = test::load_reference("layer_update_grid_orders.json");
  for (const auto& c : ref["cases"]) {
    const std::string name = "k=" + c["config"]["k"].dump() + " G=" + c["config"]["G"].dump();
    for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
      auto layer = layer_from_reference(c["config"], c["state_before"], backend);
      const auto samples = to_tensor(c["samples"]);
      layer->update_grid_from_samples(samples);
      EXPECT_LT(max_rel_diff(layer->grid, to_tensor(c["grid_after"])), 1e-12) << name;
      EXPECT_LT(max_rel_diff(layer->coef, to_tensor(c["coef_after"])), 1e-11) << name;
      EXPECT_LT(max_rel_diff(layer(samples), to_tensor(c["y_after"])), 1e-12) << name;
    }
  }
}

TEST(KANLayer, RegistersParametersAndBuffers) {
  KANLayer layer(KANLayerOptions(3, 2).grid(4).k(2).sb_trainable(false));
  std::vector<std::string> params, buffers;
  for (const auto& p : layer->named_parameters())
    params.push_back(p.key());
  for (const auto& b : layer->named_buffers())
    buffers.push_back(b.key());
  EXPECT_EQ(params, (std::vector<std::string>{"coef", "scale_base", "scale_sp"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"grid", "mask"}));
  EXPECT_EQ(layer->coef.sizes(), (std::vector<int64_t>{3, 2, 6}));
  EXPECT_EQ(layer->grid.sizes(), (std::vector<int64_t>{3, 4 + 2 * 2 + 1}));
  EXPECT_FALSE(layer->scale_base.requires_grad());
  EXPECT_TRUE(layer->scale_sp.requires_grad());
  EXPECT_EQ(layer->scale_sp.min().item<float>(), static_cast<float>(1 / std::sqrt(3.0)));
  std::ostringstream printed;
  layer->pretty_print(printed);
  EXPECT_EQ(printed.str(),
            "kan::KANLayer(in_dim=3, out_dim=2, grid=4, k=2, base_fun=silu, backend=fused)");
}

TEST(KANLayer, SeedDeterminesInitialisationInEveryDtype) {
  KANLayer a(KANLayerOptions(4, 3).seed(11).dtype(torch::kFloat64));
  KANLayer b(KANLayerOptions(4, 3).seed(11).dtype(torch::kFloat64));
  KANLayer c(KANLayerOptions(4, 3).seed(12).dtype(torch::kFloat64));
  KANLayer d(KANLayerOptions(4, 3).seed(11).dtype(torch::kFloat32));
  EXPECT_TRUE(torch::equal(a->coef, b->coef));
  EXPECT_TRUE(torch::equal(a->scale_base, b->scale_base));
  EXPECT_FALSE(torch::equal(a->coef, c->coef));
  EXPECT_TRUE(torch::equal(a->coef.to(torch::kFloat32), d->coef));
  // Initial splines are small noise: |spline| <= noise_scale / G at the knots.
  EXPECT_LT(a->coef.abs().max().item<double>(), 1.0);
}

TEST(KANLayer, EmptyBatchGivesEmptyOutput) {
  KANLayer layer(KANLayerOptions(3, 2));
  const auto y = layer(torch::empty({0, 3}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(layer->forward_with_activations(torch::empty({0, 3})).output.sizes(), y.sizes());
}

TEST(KANLayer, BaseFunctions) {
  const auto x = torch::rand({16, 2}, f64) * 2 - 1;
  for (auto base : {BaseFunction::kSiLU, BaseFunction::kIdentity, BaseFunction::kZero}) {
    KANLayer layer(KANLayerOptions(2, 3).base_fun(base).dtype(torch::kFloat64));
    torch::NoGradGuard no_grad;
    layer->scale_sp.zero_(); // only the base branch remains
    const auto expected = base == BaseFunction::kSiLU ? torch::silu(x).matmul(layer->scale_base)
                          : base == BaseFunction::kIdentity ? x.matmul(layer->scale_base)
                                                            : torch::zeros({16, 3}, f64);
    EXPECT_LT(max_abs_diff(layer(x), expected), 1e-14) << to_string(base);
  }
}

TEST(KANLayer, MaskRemovesAnEdge) {
  KANLayer layer(KANLayerOptions(2, 2).dtype(torch::kFloat64));
  const auto x = torch::rand({8, 2}, f64);
  const auto before = layer->forward_with_activations(x);
  {
    torch::NoGradGuard no_grad;
    layer->mask[0][1] = 0.0;
  }
  const auto after = layer->forward_with_activations(x);
  EXPECT_EQ(after.edges.select(1, 0).select(1, 1).abs().max().item<double>(), 0.0);
  EXPECT_LT(max_abs_diff(after.output.select(1, 0), before.output.select(1, 0)), 1e-15);
  EXPECT_LT(max_abs_diff(layer(x), after.output), 1e-14);
}

// Central finite differences of L = sum(w * layer(x)) against autograd, in float64.
TEST(KANLayer, GradientsMatchFiniteDifferences) {
  KANLayer layer(KANLayerOptions(2, 3).grid(4).k(3).dtype(torch::kFloat64).seed(3));
  torch::manual_seed(5);
  {
    torch::NoGradGuard no_grad;
    layer->coef.normal_();
  }
  const auto x = (torch::rand({6, 2}, f64) * 2.4 - 1.2).requires_grad_(true);
  const auto w = torch::randn({6, 3}, f64);
  auto loss = [&] { return (layer(x) * w).sum(); };
  layer->zero_grad();
  loss().backward();

  std::vector<std::pair<std::string, torch::Tensor>> inputs{{"x", x},
                                                            {"coef", layer->coef},
                                                            {"scale_base", layer->scale_base},
                                                            {"scale_sp", layer->scale_sp}};
  const double eps = 1e-6;
  for (auto& [name, t] : inputs) {
    const auto analytic = t.grad().clone();
    auto flat = t.detach().view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double original = flat[i].item<double>();
      flat[i] = original + eps;
      const double plus = loss().item<double>();
      flat[i] = original - eps;
      const double minus = loss().item<double>();
      flat[i] = original;
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic.view({-1})[i].item<double>(), numeric, 1e-6 * (1 + std::abs(numeric)))
          << name << "[" << i << "]";
    }
  }
}

TEST(KANLayer, GridUpdateKeepsTheFunction) {
  KANLayer layer(KANLayerOptions(2, 2).grid(5).dtype(torch::kFloat64).seed(1));
  const auto x = torch::randn({400, 2}, f64) * 0.4;
  const auto before = layer(x);
  layer->update_grid_from_samples(x);
  const auto after = layer(x);
  EXPECT_LT(max_abs_diff(before, after) / before.abs().max().item<double>(), 0.05);
  // The new knots follow the samples: the interior spans their range.
  EXPECT_NEAR(layer->grid[0][3].item<double>(), x.select(1, 0).min().item<double>(), 1e-12);
}

TEST(KANLayer, GridUpdateFromOneSampleIsFiniteAndKeepsTheSplines) {
  KANLayer layer(KANLayerOptions(2, 2).dtype(torch::kFloat64));
  const auto grid = layer->grid.clone();
  const auto probe = torch::rand({32, 2}, f64) * 2 - 1;
  const auto before = layer(probe);
  layer->update_grid_from_samples(torch::tensor({{0.2, -0.3}}, f64));
  EXPECT_TRUE(torch::equal(layer->grid, grid));
  EXPECT_LT(max_abs_diff(layer(probe), before), 1e-15);
  KAN_EXPECT_ERROR(layer->update_grid_from_samples(torch::empty({0, 2}, f64)),
                   "at least one sample");
}

TEST(KANLayer, RejectsBadOptions) {
  KAN_EXPECT_ERROR(KANLayer(KANLayerOptions(2, 2).grid(0)), "G = 0");
  KAN_EXPECT_ERROR(KANLayer(KANLayerOptions(2, 2).k(0)), "k = 0");
  KAN_EXPECT_ERROR(KANLayer(KANLayerOptions(2, 2).grid_range({1, -1})), "grid_range", "[1, -1]");
  KAN_EXPECT_ERROR(KANLayer(KANLayerOptions(0, 2)), "in_dim", "0");
  KAN_EXPECT_ERROR(KANLayer(KANLayerOptions(2, 2).dtype(torch::kInt32)), "dtype", "Int");
}

TEST(KANLayer, RejectsBadInput) {
  KANLayer layer(KANLayerOptions(3, 2));
  KAN_EXPECT_ERROR(layer(torch::zeros({4})), "input must be 2-D", "[4]");
  KAN_EXPECT_ERROR(layer(torch::zeros({4, 2})), "2 columns", "input width is 3");
  KAN_EXPECT_ERROR(layer(torch::zeros({4, 3}, torch::kInt64)), "floating point", "Long");
  KAN_EXPECT_ERROR(layer(torch::zeros({4, 3}, f64)), "float64", "float32");
  KAN_EXPECT_ERROR(layer(torch::zeros({4, 3}, torch::TensorOptions().device(torch::kMeta))),
                   "is on meta", "model is on cpu");
}

TEST(KANLayer, ForwardOnCudaMatchesCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  KANLayer cpu(KANLayerOptions(3, 4).grid(7).dtype(torch::kFloat64).seed(2));
  KANLayer gpu(KANLayerOptions(3, 4).grid(7).dtype(torch::kFloat64).seed(2).device(torch::kCUDA));
  for (const auto& t : gpu->parameters())
    EXPECT_TRUE(t.is_cuda());
  for (const auto& t : gpu->buffers())
    EXPECT_TRUE(t.is_cuda());
  EXPECT_TRUE(torch::equal(cpu->coef, gpu->coef.cpu())); // bit-identical initialisation
  const auto x = torch::rand({257, 3}, f64) * 3 - 1.5;
  EXPECT_LT(max_abs_diff(cpu(x), gpu(x.cuda())), 1e-12);
  const auto samples = torch::randn({300, 3}, f64) * 0.5;
  cpu->update_grid_from_samples(samples);
  gpu->update_grid_from_samples(samples.cuda());
  EXPECT_LT(max_abs_diff(cpu->grid, gpu->grid), 1e-12);
  EXPECT_LT(max_abs_diff(cpu(x), gpu(x.cuda())), 1e-9);
  KAN_EXPECT_ERROR(gpu(x), "is on cpu", "model is on cuda");
}

} // namespace
} // namespace kan
