// The MLP baseline and the kan::Model interface: shapes, seeded initialisation, parameter and
// FLOP counts against hand counts, training, evaluation and checkpoints.
#include "kan/io/json_reader.h"
#include "kan/nn/mlp.h"
#include "kan/serialize/checkpoint.h"
#include "kan/symbolic/symbolic_edges.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"
#include "test_util.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

namespace kan {
namespace {

MLPOptions small_mlp(torch::Dtype dtype = torch::kFloat64) {
  return MLPOptions({2, 16, 1}).activation(Activation::kTanh).seed(3).dtype(dtype);
}

TEST(Mlp, ForwardGivesOneRowPerSample) {
  MLP model(MLPOptions({2, 7, 3, 4}).dtype(torch::kFloat64));
  EXPECT_EQ(model->depth(), 3u);
  EXPECT_EQ(model(torch::rand({5, 2}, torch::kFloat64)).sizes(), (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(model(torch::rand({0, 2}, torch::kFloat64)).sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(model->inputs(), 2);
  EXPECT_EQ(model->outputs(), 4);
  EXPECT_EQ(model->dtype(), torch::kFloat64);
  EXPECT_EQ(model->device(), torch::Device(torch::kCPU));
  KAN_EXPECT_ERROR(model(torch::rand({5, 3}, torch::kFloat64)), "3 columns", "input width is 2");
  KAN_EXPECT_ERROR(model(torch::rand({5, 2})), "float32", "float64");
}

TEST(Mlp, ForwardIsTheLayersWithTheActivationBetweenThem) {
  for (const auto activation : {Activation::kSiLU, Activation::kTanh, Activation::kReLU}) {
    MLP model(MLPOptions({3, 5, 2}).activation(activation).dtype(torch::kFloat64));
    const auto x = torch::randn({8, 3}, torch::kFloat64);
    auto h = torch::addmm(model->layer(0)->bias, x, model->layer(0)->weight.t());
    h = activation == Activation::kSiLU   ? torch::silu(h)
        : activation == Activation::kTanh ? torch::tanh(h)
                                          : torch::relu(h);
    const auto expected = torch::addmm(model->layer(1)->bias, h, model->layer(1)->weight.t());
    EXPECT_TRUE(torch::allclose(model(x), expected, 1e-12, 1e-12)) << to_string(activation);
  }
}

TEST(Mlp, OneSeedGivesOneModelAndLeavesTheGlobalGeneratorAlone) {
  torch::manual_seed(11);
  const auto before = torch::rand({4});
  torch::manual_seed(11);
  MLP a(small_mlp()), b(small_mlp());
  EXPECT_TRUE(torch::equal(torch::rand({4}), before)); // the models drew from their own generator
  MLP c(small_mlp().seed(4));
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  ASSERT_EQ(pa.size(), 4u); // two layers' weights and biases
  bool differs = false;
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    differs = differs || !torch::equal(p.value(), pc[p.key()]);
  }
  EXPECT_TRUE(differs) << "another seed drew the same model";
  // The same draws in float32 (made in float64, then converted), and within LibTorch's default
  // bounds +-1/sqrt(fan_in).
  MLP f32(small_mlp(torch::kFloat32));
  EXPECT_TRUE(
      torch::allclose(f32->layer(0)->weight.to(torch::kFloat64), a->layer(0)->weight, 1e-7, 1e-7));
  EXPECT_LE(a->layer(1)->weight.abs().max().item<double>(), 1 / std::sqrt(16.0));
  EXPECT_LE(a->layer(0)->bias.abs().max().item<double>(), 1 / std::sqrt(2.0));
  // A clone computes what the original does.
  auto copy = std::dynamic_pointer_cast<MLPImpl>(a->clone());
  const auto x = torch::rand({6, 2}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(copy->forward(x), a(x)));
}

TEST(Mlp, BadOptionsNameTheOptionAndItsValue) {
  KAN_EXPECT_ERROR(MLP(MLPOptions({2})), "MLPOptions::width", "at least 2");
  KAN_EXPECT_ERROR(MLP(MLPOptions({2, 0, 1})), "width[1] = 0");
  KAN_EXPECT_ERROR(MLP(MLPOptions({2, 1}).dtype(torch::kLong)), "MLPOptions::dtype", "got Long");
  KAN_EXPECT_ERROR(activation_from_string("gelu"), "gelu", "silu, tanh, relu");
  KAN_EXPECT_ERROR(model_kind_from_string("cnn"), "cnn", "kan, mlp");
}

TEST(Mlp, OptionsJsonRoundTripsAndIsStrict) {
  const auto options =
      MLPOptions({4, 8, 8, 2}).activation(Activation::kReLU).seed(123456789012345ULL);
  EXPECT_EQ(to_json(mlp_options_from_json(to_json(options))), to_json(options));
  EXPECT_EQ(to_json(options), nlohmann::json({{"width", {4, 8, 8, 2}},
                                              {"activation", "relu"},
                                              {"seed", 123456789012345ULL},
                                              {"dtype", "float32"}}));
  auto bad = to_json(options);
  bad["activation"] = "swish";
  KAN_EXPECT_ERROR(mlp_options_from_json(bad, "model"), "model.activation", "swish");
  bad = to_json(options);
  bad["grid"] = 5;
  KAN_EXPECT_ERROR(mlp_options_from_json(bad, "model"), "model.grid");
  bad = to_json(options);
  bad.erase("seed");
  KAN_EXPECT_ERROR(mlp_options_from_json(bad, "model"), "model.seed", "missing");
  bad = to_json(options);
  bad["width"] = {3};
  KAN_EXPECT_ERROR(mlp_options_from_json(bad, "model"), "model", "at least 2");
}

// Trainable scalars counted by hand: an MLP's layer has (in + 1) out; a KAN layer's edges each
// have G + k coefficients, a scale_base and a scale_sp.
TEST(ModelSize, ParameterCountsEqualHandCounts) {
  MLP mlp(MLPOptions({2, 100, 100, 1}));
  const int64_t mlp_hand = (2 + 1) * 100 + (100 + 1) * 100 + (100 + 1) * 1;
  EXPECT_EQ(mlp_hand, 10501);
  EXPECT_EQ(mlp->parameter_count(), mlp_hand);
  EXPECT_EQ(mlp_parameter_count({2, 100, 100, 1}), mlp_hand);

  const int64_t G = 5, k = 3;
  KAN kan(KANOptions({2, 5, 1}).grid(G).k(k));
  const int64_t kan_hand = 2 * 5 * (G + k + 2) + 5 * 1 * (G + k + 2);
  EXPECT_EQ(kan_hand, 150);
  EXPECT_EQ(kan->parameter_count(), kan_hand);
  EXPECT_EQ(kan_parameter_count(kan->options()), kan_hand);
  // Frozen scales do not count; trainable node and subnode affine parameters do.
  KAN frozen(KANOptions({2, 5, 1}).grid(G).k(k).sb_trainable(false));
  EXPECT_EQ(frozen->parameter_count(), kan_hand - (2 * 5 + 5 * 1));
  EXPECT_EQ(kan_parameter_count(frozen->options()), kan_hand - 15);
  KAN affine(KANOptions({2, 5, 1}).grid(G).k(k).affine_trainable(true));
  EXPECT_EQ(affine->parameter_count(), kan_hand + 2 * (5 + 5) + 2 * (1 + 1));
  EXPECT_EQ(kan_parameter_count(affine->options()), affine->parameter_count());
}

TEST(ModelSize, MlpFlopsAreTheProductsBiasesAndActivations) {
  // Per layer 2 in out + out; per hidden unit the activation.
  const int64_t products = (2 * 2 * 100 + 100) + (2 * 100 * 100 + 100) + (2 * 100 * 1 + 1);
  for (const auto& [activation, flops] : {std::pair{Activation::kSiLU, kSiLUFlops},
                                          {Activation::kTanh, kTanhFlops},
                                          {Activation::kReLU, kReLUFlops}}) {
    MLP model(MLPOptions({2, 100, 100, 1}).activation(activation));
    EXPECT_EQ(model->forward_flops(), products + 200 * flops) << to_string(activation);
  }
  EXPECT_EQ(MLP(MLPOptions({2, 100, 100, 1}))->forward_flops(), 21601);
}

TEST(ModelSize, KanFlopsGrowLinearlyWithTheGridOnTheReferenceBackendOnly) {
  auto flops = [](SplineBackend backend, int64_t G) {
    return KAN(KANOptions({2, 5, 1}).grid(G).k(3).backend(backend))->forward_flops();
  };
  // Fused, by hand: per input the k + 1 = 4 basis functions of its span, 7 k (k + 3) / 2 = 63;
  // per edge 4 multiply-adds; the base branch's SiLU per input, product and addition.
  const int64_t layer0 = 2 * 63 + 2 * 2 * 5 * 4 + (2 * kSiLUFlops + 2 * 2 * 5 + 5);
  const int64_t layer1 = 5 * 63 + 2 * 5 * 1 * 4 + (5 * kSiLUFlops + 2 * 5 * 1 + 1);
  EXPECT_EQ(flops(SplineBackend::kFused, 5), layer0 + layer1);
  EXPECT_EQ(flops(SplineBackend::kFused, 5), 625);
  EXPECT_EQ(flops(SplineBackend::kFused, 50), 625); // the span's functions only: G does not count
  // Reference: every one of the G + k functions, so each grid interval adds per input 7 k
  // (one more function of each order) and per edge 2 (one more term of the dense product).
  const int64_t slope = (2 * 7 * 3 + 2 * 2 * 5) + (5 * 7 * 3 + 2 * 5 * 1);
  EXPECT_EQ(slope, 177);
  const int64_t base = flops(SplineBackend::kReference, 5);
  EXPECT_EQ(base, 1627);
  for (const int64_t G : {1, 3, 10, 20, 100})
    EXPECT_EQ(flops(SplineBackend::kReference, G), base + slope * (G - 5)) << "G = " << G;
  EXPECT_EQ(kan_forward_flops(KANOptions({2, 5, 1}).grid(5)), 625);
}

TEST(ModelSize, SymbolicEdgesAndMultiplicationNodesAddTheirTerms) {
  KAN model(KANOptions({2, 1}).grid(5).k(3).dtype(torch::kFloat64));
  const int64_t numeric = model->forward_flops();
  fix_symbolic(*model, 0, 0, 0, "sin");
  EXPECT_EQ(model->forward_flops(), numeric + 6 + kSymbolicFunctionFlops + 1);
  // One multiplication node of two subnodes: the subnode affine maps (2 each), the product and
  // the node affine maps (2 each).
  const auto mult = KANOptions({2, 2, 1}).mult({0, 1, 0}).grid(5);
  const auto plain = KANOptions({2, 3, 1}).grid(5);
  // Its first layer maps 2 inputs to 3 subnodes as {2, 3, 1}'s does; its second has 2 inputs
  // instead of 3.
  const auto second_layer = [](int64_t I) {
    return I * 63 + 2 * I * 4 + (I * kSiLUFlops + 2 * I + 1);
  };
  const int64_t affine = (2 * 3 + 1 + 2 * 2) + (2 * 1 + 2 * 1);
  EXPECT_EQ(kan_forward_flops(mult),
            kan_forward_flops(plain) - second_layer(3) + second_layer(2) + affine);
}

TEST(ModelInterface, KansAndMlpsAreOneKindOfThing) {
  std::vector<std::shared_ptr<Model>> models{
      KAN(KANOptions({2, 3, 1}).dtype(torch::kFloat64)).ptr(),
      MLP(MLPOptions({2, 3, 1}).dtype(torch::kFloat64)).ptr()};
  const auto x = torch::rand({4, 2}, torch::kFloat64);
  for (const auto& model : models) {
    EXPECT_EQ(model->forward(x).sizes(), (std::vector<int64_t>{4, 1}));
    EXPECT_EQ(model->inputs(), 2);
    EXPECT_EQ(model->outputs(), 1);
    EXPECT_EQ(model->config()["width"], nlohmann::json({2, 3, 1}));
    EXPECT_EQ(model->config()["dtype"], "float64");
    EXPECT_EQ(model->module().parameters().empty(), false);
    KAN_EXPECT_ERROR(model->check_input(torch::rand({4, 3}, torch::kFloat64), "my_x"), "my_x");
  }
  EXPECT_EQ(models[0]->kind(), ModelKind::kKAN);
  EXPECT_TRUE(models[0]->has_grid());
  EXPECT_EQ(models[1]->kind(), ModelKind::kMLP);
  EXPECT_FALSE(models[1]->has_grid());
  // What only a KAN has.
  const auto reg = models[1]->regularization(RegularizationOptions());
  EXPECT_EQ(reg.item<double>(), 0.0);
  EXPECT_EQ(reg.scalar_type(), torch::kFloat64);
  KAN_EXPECT_ERROR(models[1]->update_grid_from_samples(x, 1 << 20), "mlp", "no grid");
  // The dtype the config records is the model's now.
  models[1]->module().to(torch::kFloat32);
  EXPECT_EQ(models[1]->config()["dtype"], "float32");
}

TEST(MlpTraining, LbfgsLowersTheTestRmseAndEvaluateAgrees) {
  const auto data = test::toy_data(torch::kFloat64);
  MLP model(small_mlp());
  const auto before = evaluate(model, data);
  const auto history = fit(model, data, FitOptions().steps(20));
  const auto after = evaluate(model, data);
  EXPECT_EQ(history.steps.size(), 20u);
  EXPECT_EQ(history.grid_updates, 0); // update_grid is on by default: an MLP has no grid
  EXPECT_LT(after.test_rmse, 0.5 * before.test_rmse);
  EXPECT_NEAR(history.steps.back().test_rmse, after.test_rmse, 1e-12);
  EXPECT_TRUE(std::isnan(after.test_accuracy));
  // Adam, minibatches, and evaluation in chunks agree with the whole.
  MLP adam(small_mlp());
  fit(adam, data, FitOptions().opt(Optimizer::kAdam).lr(1e-2).batch(16).steps(8));
  const auto whole = evaluate(adam, data), chunked = evaluate(adam, data, Loss::kMSE, 5);
  EXPECT_NEAR(whole.train_rmse, chunked.train_rmse, 1e-12);
  // train_stage is the same training and the same evaluation.
  MLP staged(small_mlp());
  const auto stage = train_stage(*staged, data, FitOptions().steps(20));
  EXPECT_DOUBLE_EQ(stage.test_rmse, after.test_rmse);
  EXPECT_EQ(stage.history.steps.size(), 20u);
}

// MLPImpl::mse_objective, the path fit takes on the CPU, against autograd's forward, loss and
// backward: every activation, both dtypes, depths 1 to 4, narrow and wide layers.
TEST(MlpObjective, EqualsAutogradsLossAndGradients) {
  const std::vector<std::vector<int64_t>> widths = {
      {2, 100, 100, 1}, {3, 7, 2}, {1, 4, 5, 6, 3}, {4, 2}};
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
    for (const auto activation : {Activation::kSiLU, Activation::kTanh, Activation::kReLU})
      for (const auto& width : widths) {
        SCOPED_TRACE(to_string(activation) + " " + to_string(dtype) + " " +
                     std::to_string(width.size()) + " widths from " + std::to_string(width[0]));
        MLP model(MLPOptions(width).activation(activation).seed(1).dtype(dtype));
        torch::manual_seed(2);
        const auto x = torch::randn({37, width.front()}, dtype);
        const auto labels = torch::randn({37, width.back()}, dtype);
        const auto loss = (model->forward(x) - labels).square().mean();
        loss.backward();
        std::vector<torch::Tensor> expected;
        for (auto& p : model->parameters()) {
          expected.push_back(p.grad().clone());
          p.mutable_grad() = torch::Tensor();
        }
        const auto values = model->mse_objective(x, labels, 0.0, {});
        ASSERT_TRUE(values.has_value());
        const double tolerance = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
        EXPECT_NEAR(values->loss.item<double>(), loss.item<double>(),
                    tolerance * loss.item<double>());
        EXPECT_EQ(values->total.item<double>(), values->loss.item<double>());
        EXPECT_EQ(values->loss.scalar_type(), dtype);
        const auto params = model->parameters();
        for (size_t t = 0; t < params.size(); ++t) {
          ASSERT_TRUE(params[t].grad().defined()) << t;
          EXPECT_EQ(params[t].grad().sizes(), expected[t].sizes()) << t;
          EXPECT_LE(test::max_relative_diff(params[t].grad(), expected[t]), tolerance) << t;
        }
      }
}

TEST(MlpObjective, AccumulatesAsAutogradAndLeavesFrozenParametersAlone) {
  MLP model(MLPOptions({2, 8, 1}).dtype(torch::kFloat64));
  const auto x = torch::rand({10, 2}, torch::kFloat64), y = torch::rand({10, 1}, torch::kFloat64);
  model->layer(0)->bias.requires_grad_(false);
  ASSERT_TRUE(model->mse_objective(x, y, 0.0, {}).has_value());
  const auto once = model->layer(0)->weight.grad().clone();
  ASSERT_TRUE(model->mse_objective(x, y, 0.0, {}).has_value());
  EXPECT_TRUE(torch::allclose(model->layer(0)->weight.grad(), 2 * once, 1e-14, 0));
  EXPECT_FALSE(model->layer(0)->bias.grad().defined());
  // Where it does not apply, it does nothing and says so: the caller runs autograd.
  model->zero_grad();
  EXPECT_FALSE(model->mse_objective(x, y, 0.1, {}).has_value());                // a regulariser
  EXPECT_FALSE(model->mse_objective(x, y.repeat({1, 2}), 0.0, {}).has_value()); // labels' shape
  EXPECT_FALSE(model->mse_objective(x.narrow(0, 0, 0), y.narrow(0, 0, 0), 0.0, {}).has_value());
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(model->mse_objective(x, y, 0.0, {}).has_value());
  }
  EXPECT_FALSE(model->layer(0)->weight.grad().defined());
  KAN_EXPECT_ERROR(model->mse_objective(x.to(torch::kFloat32), y.to(torch::kFloat32), 0.0, {}),
                   "input", "float32");
}

// The evaluation keeps its large tensors from one call to the next: another batch size and
// another dtype still get autograd's numbers.
TEST(MlpObjective, KeptBuffersFollowTheBatchAndTheDtype) {
  MLP model(MLPOptions({3, 6, 6, 2}).seed(4).dtype(torch::kFloat64));
  const auto autograd_grad = [](MLP& m, const torch::Tensor& x, const torch::Tensor& y) {
    m->zero_grad();
    (m->forward(x) - y).square().mean().backward();
    auto g = m->layer(1)->weight.grad().clone();
    m->zero_grad();
    return g;
  };
  const auto objective_grad = [](MLP& m, const torch::Tensor& x, const torch::Tensor& y) {
    m->zero_grad();
    EXPECT_TRUE(m->mse_objective(x, y, 0.0, {}).has_value());
    return m->layer(1)->weight.grad().clone();
  };
  torch::manual_seed(5);
  for (const int64_t rows : {40, 7, 40}) {
    const auto x = torch::randn({rows, 3}, torch::kFloat64),
               y = torch::randn({rows, 2}, torch::kFloat64);
    EXPECT_LE(test::max_relative_diff(objective_grad(model, x, y), autograd_grad(model, x, y)),
              1e-12)
        << rows;
  }
  const auto x = torch::randn({9, 3}, torch::kFloat64), y = torch::randn({9, 2}, torch::kFloat64);
  const auto before = objective_grad(model, x, y);
  model->to(torch::kFloat32);
  EXPECT_LE(test::max_relative_diff(
                objective_grad(model, x.to(torch::kFloat32), y.to(torch::kFloat32)), before),
            1e-5);
}

TEST(MlpTraining, TheRegulariserIsAKansAndIsRefused) {
  MLP model(small_mlp());
  KAN_EXPECT_ERROR(fit(model, test::toy_data(torch::kFloat64), FitOptions().lamb(0.01).steps(1)),
                   "FitOptions::lamb = 0.01", "mlp");
  KAN_EXPECT_ERROR(fit(model, test::toy_data(torch::kFloat32), FitOptions().steps(1)),
                   "train_input", "float32");
}

TEST(MlpTraining, ClassificationWithCrossEntropy) {
  torch::manual_seed(0);
  Dataset data;
  data.train_input = torch::randn({64, 2}, torch::kFloat64);
  data.train_label = (data.train_input.select(1, 0) > 0).to(torch::kLong);
  data.test_input = torch::randn({32, 2}, torch::kFloat64);
  data.test_label = (data.test_input.select(1, 0) > 0).to(torch::kLong);
  MLP model(MLPOptions({2, 8, 2}).dtype(torch::kFloat64));
  fit(model, data, FitOptions().loss(Loss::kCrossEntropy).steps(10));
  EXPECT_GT(evaluate(model, data, Loss::kCrossEntropy).test_accuracy, 0.8);
}

class MlpCheckpoint : public test::ScratchDirTest {};

TEST_F(MlpCheckpoint, RoundTripIsExact) {
  MLP model(small_mlp());
  fit(model, test::toy_data(torch::kFloat64), FitOptions().steps(2));
  save_checkpoint(model, path("mlp.pt"));
  EXPECT_EQ(checkpoint_model_kind(path("mlp.pt")), ModelKind::kMLP);
  auto loaded = load_mlp_checkpoint(path("mlp.pt"));
  EXPECT_EQ(to_json(loaded->options()), to_json(model->options()));
  const auto original = model->named_parameters(), restored = loaded->named_parameters();
  ASSERT_EQ(original.size(), restored.size());
  for (const auto& p : original)
    EXPECT_TRUE(torch::equal(p.value(), restored[p.key()])) << p.key();
  const auto x = torch::rand({9, 2}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(model(x), loaded(x)));
  // Whichever kind the file holds, through the interface.
  const auto any = load_any_checkpoint(path("mlp.pt"));
  EXPECT_EQ(any->kind(), ModelKind::kMLP);
  EXPECT_TRUE(torch::equal(any->forward(x), model(x)));
  // Saved through the interface, the same file.
  save_checkpoint(static_cast<const Model&>(*model), path("via_model.pt"));
  EXPECT_TRUE(torch::equal(load_mlp_checkpoint(path("via_model.pt"))(x), model(x)));
}

TEST_F(MlpCheckpoint, TheOtherKindsLoaderIsRefusedNamingTheKind) {
  save_checkpoint(MLP(small_mlp()), path("mlp.pt"));
  KAN kan(KANOptions({2, 3, 1}).dtype(torch::kFloat64));
  save_checkpoint(kan, path("kan.pt"));
  KAN_EXPECT_ERROR(load_checkpoint(path("mlp.pt")), "mlp.pt", "kind mlp, not kan",
                   "kan::load_mlp_checkpoint");
  KAN_EXPECT_ERROR(load_model(path("mlp.pt")), "kind mlp, not kan");
  KAN_EXPECT_ERROR(load_mlp_checkpoint(path("kan.pt")), "kan.pt", "kind kan, not mlp",
                   "kan::load_checkpoint");
  EXPECT_EQ(checkpoint_model_kind(path("kan.pt")), ModelKind::kKAN);
  const auto any = load_any_checkpoint(path("kan.pt"));
  EXPECT_EQ(any->kind(), ModelKind::kKAN);
  const auto x = torch::rand({3, 2}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(any->forward(x), kan(x)));
}

TEST_F(MlpCheckpoint, NonFiniteWeightsAreNotSaved) {
  MLP model(small_mlp());
  {
    torch::NoGradGuard no_grad;
    model->layer(1)->bias.fill_(std::nan(""));
  }
  KAN_EXPECT_ERROR(save_checkpoint(model, path("nan.pt")), "layers.1.bias", "NaN");
}

} // namespace
} // namespace kan
