// KAN network: placement, shapes, grid update, refinement, regularisation.
#include "kan/nn/network.h"

#include "kan/data/dataset.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace kan {
namespace {

using test::max_abs_diff;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

void expect_everything_on(const KAN& model, torch::Device device, torch::Dtype dtype) {
  for (const auto& p : model->named_parameters()) {
    EXPECT_EQ(p.value().device(), device) << p.key();
    EXPECT_EQ(p.value().scalar_type(), dtype) << p.key();
  }
  for (const auto& b : model->named_buffers()) {
    EXPECT_EQ(b.value().device(), device) << b.key();
    EXPECT_EQ(b.value().scalar_type(), dtype) << b.key();
  }
}

double relative_change(const torch::Tensor& before, const torch::Tensor& after) {
  return max_abs_diff(before, after) / before.abs().max().item<double>();
}

TEST(KAN, BuildsLayersFromTheWidthList) {
  KAN model(KANOptions({2, 5, 1}).grid(3).k(3));
  ASSERT_EQ(model->depth(), 2u);
  EXPECT_EQ(model->layer(0)->options().in_dim(), 2);
  EXPECT_EQ(model->layer(0)->options().out_dim(), 5);
  EXPECT_EQ(model->layer(1)->options().in_dim(), 5);
  EXPECT_EQ(model->layer(1)->options().out_dim(), 1);
  // coef, scale_base, scale_sp per layer, and pykan's four affine vectors per layer (frozen).
  EXPECT_EQ(model->named_parameters().size(), 6u + 8u);
  EXPECT_TRUE(model->named_parameters().contains("node_scale_1"));
  EXPECT_FALSE(model->named_parameters()["subnode_bias_0"].requires_grad());
  EXPECT_EQ(model->named_buffers().size(), 4u);
  EXPECT_TRUE(model->named_buffers().contains("layers.1.grid"));
  EXPECT_EQ(model(torch::rand({7, 2})).sizes(), (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(model(torch::empty({0, 2})).sizes(), (std::vector<int64_t>{0, 1}));
  std::ostringstream printed;
  model->pretty_print(printed);
  EXPECT_EQ(printed.str(), "kan::KAN(width=[2, 5, 1], grid=3, k=3, base_fun=silu, backend=fused)");
}

TEST(KAN, HonoursDeviceAndDtypeAtConstruction) {
  KAN model(KANOptions({3, 4, 2}).dtype(torch::kFloat64));
  expect_everything_on(model, torch::kCPU, torch::kFloat64);
  // The meta device stands in for "another device" on a machine without a GPU.
  KAN meta(KANOptions({3, 4, 2}).device(torch::kMeta));
  expect_everything_on(meta, torch::kMeta, torch::kFloat32);
  EXPECT_EQ(meta->device(), torch::Device(torch::kMeta));
}

TEST(KAN, ToMovesEveryParameterAndBuffer) {
  KAN model(KANOptions({3, 4, 2}));
  model->to(torch::kFloat64);
  expect_everything_on(model, torch::kCPU, torch::kFloat64);
  EXPECT_EQ(model->dtype(), torch::kFloat64);
  // LibTorch cannot move a module to the meta device; ForwardOnCudaMatchesCpu_CUDA moves to a GPU.
}

TEST(KAN, SeedMakesModelsIdentical) {
  KAN a(KANOptions({2, 3, 1}).seed(4)), b(KANOptions({2, 3, 1}).seed(4)),
      c(KANOptions({2, 3, 1}).seed(5));
  EXPECT_TRUE(torch::equal(a->layer(1)->coef, b->layer(1)->coef));
  EXPECT_FALSE(torch::equal(a->layer(1)->coef, c->layer(1)->coef));
  // Layers of one network draw differently.
  EXPECT_FALSE(torch::equal(a->layer(0)->scale_base.flatten().narrow(0, 0, 3),
                            a->layer(1)->scale_base.flatten()));
  auto copy = std::dynamic_pointer_cast<KANImpl>(a->clone());
  EXPECT_TRUE(torch::equal(copy->layer(0)->coef, a->layer(0)->coef));
  EXPECT_NE(copy->layer(0)->coef.data_ptr(), a->layer(0)->coef.data_ptr());
}

TEST(KAN, RejectsBadWidthAndInput) {
  KAN_EXPECT_ERROR(KAN(KANOptions({2})), "at least 2 entries", "[2]");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 0, 1})), "width[1] = 0");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 1}).grid(0)), "G = 0");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 1}).k(0)), "k = 0");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 1}).grid_range({0.5, 0.5})), "grid_range");
  KAN model(KANOptions({2, 3, 1}));
  KAN_EXPECT_ERROR(model(torch::rand({5, 3})), "3 columns", "input width is 2");
  KAN_EXPECT_ERROR(model(torch::rand({5, 2, 1})), "2-D");
  KAN_EXPECT_ERROR(model(torch::ones({5, 2}, torch::kInt32)), "floating point");
  KAN_EXPECT_ERROR(model(torch::rand({5, 2}, torch::TensorOptions().device(torch::kMeta))),
                   "is on meta", "model is on cpu");
}

// A model trained briefly on the toy problem, with non-trivial splines.
struct Trained {
  KAN model;
  Dataset data;
};

Trained trained_toy() {
  const auto& toy = reference_function("toy");
  auto data =
      create_dataset(toy.f, DatasetOptions(2).train_num(300).test_num(100).dtype(torch::kFloat64));
  KAN model(KANOptions({2, 5, 1}).grid(3).k(3).seed(0).dtype(torch::kFloat64));
  fit(model, data, FitOptions().steps(5).stop_grid_update_step(5).grid_update_num(5));
  return {model, data};
}

TEST(KAN, RefineReproducesTheSplinesInsideTheGrid) {
  auto [model, data] = trained_toy();
  model->update_grid_from_samples(data.train_input); // every layer's inputs inside its grid
  const auto before = model(data.train_input);
  KAN refined = model->refine(10, data.train_input);
  EXPECT_EQ(refined->options().grid(), 10);
  EXPECT_EQ(refined->layer(0)->coef.size(2), 13);
  expect_everything_on(refined, torch::kCPU, torch::kFloat64);
  // 3 -> 10 splits the parent's intervals 3 + 3 + 4: its knots stay knots, so its splines are
  // reproduced to rounding.
  EXPECT_LT(relative_change(before, refined(data.train_input)), 1e-10);
  EXPECT_NEAR(refined->layer(0)->grid[0][3].item<double>(),
              model->layer(0)->grid[0][3].item<double>(), 1e-14);
  EXPECT_NEAR(refined->layer(0)->grid[0][6].item<double>(),
              model->layer(0)->grid[0][4].item<double>(), 1e-14);
  EXPECT_NEAR(refined->layer(0)->grid[0][13].item<double>(),
              model->layer(0)->grid[0][6].item<double>(), 1e-14);
  // Without samples: fitted on a dense uniform sample of each layer's grid range.
  EXPECT_LT(relative_change(before, model->refine(10)(data.train_input)), 1e-10);
  EXPECT_LT(relative_change(before, model->refine(10, torch::empty({0, 2}, f64))(data.train_input)),
            1e-10);
  // Coarsening interpolates the knots and fits approximately.
  EXPECT_LT(relative_change(before, model->refine(2, data.train_input)(data.train_input)), 0.2);
}

TEST(KAN, RefineKeepsTheOutputsRightAfterTraining) {
  // After the last optimiser step some hidden activations have left the grid they were last
  // updated on; there the finer splines can only approximate the coarse ones.
  auto [model, data] = trained_toy();
  const auto before = model(data.train_input);
  EXPECT_LT(relative_change(before, model->refine(10, data.train_input)(data.train_input)), 1e-3);
}

TEST(KAN, GridUpdateChangesOutputsLittle) {
  auto [model, data] = trained_toy();
  const auto before = model(data.train_input);
  model->update_grid_from_samples(data.train_input);
  EXPECT_LT(relative_change(before, model(data.train_input)), 0.02);
}

torch::Tensor unbiased_std(const torch::Tensor& t) {
  return ((t - t.mean(0, true)).square().sum(0) / (t.size(0) - 1)).sqrt();
}

// pykan's reg(), written out in its own (out, in) layout, as an independent check.
double pykan_regularization(const std::vector<LayerActivations>& acts, const KAN& model,
                            const RegularizationOptions& w) {
  double reg = 0;
  for (const auto& a : acts) {
    const auto input_range = unbiased_std(a.input) + 0.1;     // (I)
    const auto output_range = unbiased_std(a.edges).t();      // (O, I)
    const auto vec = output_range / input_range.unsqueeze(0); // (O, I)
    const auto p_row = vec / (vec.sum(1, true) + 1);
    const auto p_col = vec / (vec.sum(0, true) + 1);
    const auto entropy_row = -(p_row * torch::log2(p_row + 1e-4)).sum(1).mean();
    const auto entropy_col = -(p_col * torch::log2(p_col + 1e-4)).sum(0).mean();
    reg +=
        (w.lamb_l1() * vec.sum() + w.lamb_entropy() * (entropy_row + entropy_col)).item<double>();
  }
  for (size_t l = 0; l < model->depth(); ++l) {
    const auto coef = model->layer(l)->coef;
    reg += w.lamb_coef() * coef.abs().mean(1).sum().item<double>() +
           w.lamb_coefdiff() * torch::diff(coef, 1, 2).abs().mean(1).sum().item<double>();
  }
  return reg;
}

TEST(KAN, RegularizationMatchesPykansFormula) {
  KAN model(KANOptions({3, 4, 2}).dtype(torch::kFloat64).seed(3));
  const auto x = torch::rand({50, 3}, f64) * 2 - 1;
  KAN_EXPECT_ERROR(model->regularization(), "set_save_activations(true)");
  model->set_save_activations(true);
  const auto y = model(x);
  ASSERT_EQ(model->activations().size(), 2u);
  EXPECT_EQ(model->activations()[1].edges.sizes(), (std::vector<int64_t>{50, 4, 2}));
  EXPECT_LT(max_abs_diff(model->activations()[1].output, y), 1e-15);
  const auto weights =
      RegularizationOptions().lamb_l1(0.7).lamb_entropy(1.3).lamb_coef(0.2).lamb_coefdiff(0.4);
  const auto reg = model->regularization(weights);
  EXPECT_NEAR(reg.item<double>(), pykan_regularization(model->activations(), model, weights),
              1e-10);
  reg.backward();
  for (const auto& p : model->parameters()) {
    if (!p.requires_grad())
      continue; // the frozen affine parameters
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
  // One sample: no spread, finite regulariser and gradients.
  model->zero_grad();
  model(x.narrow(0, 0, 1));
  const auto single = model->regularization(weights);
  single.backward();
  EXPECT_TRUE(std::isfinite(single.item<double>()));
  for (const auto& p : model->parameters()) {
    if (p.requires_grad()) {
      EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
    }
  }
}

TEST(KAN, ForwardOnCudaMatchesCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  KAN cpu(KANOptions({4, 6, 2}).dtype(torch::kFloat64).seed(9));
  KAN gpu(KANOptions({4, 6, 2}).dtype(torch::kFloat64).seed(9).device(torch::kCUDA));
  expect_everything_on(gpu, torch::Device(torch::kCUDA, 0), torch::kFloat64);
  const auto x = torch::rand({1000, 4}, f64) * 2 - 1;
  EXPECT_LT(max_abs_diff(cpu(x), gpu(x.cuda())), 1e-12);
  cpu->to(torch::kCUDA);
  expect_everything_on(cpu, torch::Device(torch::kCUDA, 0), torch::kFloat64);
  KAN refined = gpu->refine(7, x.cuda());
  expect_everything_on(refined, torch::Device(torch::kCUDA, 0), torch::kFloat64);
}

} // namespace
} // namespace kan
