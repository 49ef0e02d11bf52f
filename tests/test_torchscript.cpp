// TorchScript modules as kan::Models: loading (checked, trusted), forward, training in place,
// moving, copying, writing back, and the device audit's view of their state. The modules here are
// defined in C++ (TorchScript source compiled by LibTorch), so these tests need no Python; the
// PyTorch-written fixtures are in test_torchscript_fixtures.cpp.

#include "test_util.h"

#include "kan/diagnostics/device_audit.h"
#include "kan/serialize/checkpoint.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/pykan.h"
#include "kan/serialize/torchscript.h"
#include "kan/train/fit.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <fstream>

namespace kan {
namespace {

using test::ScratchDirTest;

// A two-layer network with a buffer, a submodule and, where asked, a plain tensor attribute
// (neither parameter nor buffer): 3 inputs -> 2 outputs, in float64.
torch::jit::Module two_layer_script(bool plain_attribute = false) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::jit::Module inner("__torch__.tests.Inner");
  // Parameters want a gradient, as nn.Parameter's do.
  inner.register_parameter("weight",
                           torch::linspace(-1, 1, 12, f64).reshape({3, 4}).requires_grad_(), false);
  inner.register_buffer("shift", torch::full({4}, 0.25, f64));
  inner.register_buffer("order", torch::arange(4)); // an integer buffer: dtype changes skip it
  inner.define(R"JIT(
def forward(self, x):
    return torch.tanh(torch.matmul(x, self.weight) + self.shift)
)JIT");
  torch::jit::Module outer("__torch__.tests.Outer");
  outer.register_module("inner", inner);
  outer.register_parameter(
      "head", torch::linspace(0.5, -0.5, 8, f64).reshape({4, 2}).requires_grad_(), false);
  if (plain_attribute) {
    outer.register_attribute("scale", c10::TensorType::get(), torch::full({2}, 2.0, f64));
    outer.define(R"JIT(
def forward(self, x):
    return torch.matmul(self.inner.forward(x), self.head) * self.scale
)JIT");
  } else {
    outer.define(R"JIT(
def forward(self, x):
    return torch.matmul(self.inner.forward(x), self.head)
)JIT");
  }
  return outer;
}

torch::Tensor inputs(int64_t n) {
  return torch::linspace(-1, 1, n * 3, torch::kFloat64).reshape({n, 3});
}

using TorchScript = ScratchDirTest;

TEST_F(TorchScript, IsToldFromCheckpointsAndOtherFilesByContent) {
  two_layer_script().save(path("script.pt"));
  save_checkpoint(KAN(KANOptions({2, 3, 1})), path("kan.pt"));
  std::ofstream(path("data.csv")) << "x,y\n1,2\n";
  EXPECT_TRUE(is_torchscript_archive(path("script.pt")));
  EXPECT_FALSE(is_torchscript_archive(path("kan.pt")));
  EXPECT_FALSE(is_torchscript_archive(path("data.csv")));
  EXPECT_EQ(model_file_kind(path("script.pt")), ModelFileKind::kTorchScript);
  EXPECT_EQ(model_file_kind(path("kan.pt")), ModelFileKind::kCheckpoint);
  KAN_EXPECT_ERROR(load_model(path("script.pt")), "is a TorchScript archive, not a KAN",
                   "kan::open_model");
}

TEST_F(TorchScript, IsLoadedOnlyWhenTrustedAndGivenItsWidth) {
  two_layer_script().save(path("script.pt"));
  KAN_EXPECT_ERROR(open_model(path("script.pt")), "is a TorchScript archive: a program",
                   "--trust-torchscript");
  KAN_EXPECT_ERROR(open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true)),
                   "its input width is not recorded", "--inputs");
  KAN_EXPECT_ERROR(
      open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true).inputs(5)),
      "forward on one sample of 5 inputs failed");
  // A kanbench model's width is recorded: a different one is an error naming both.
  save_checkpoint(KAN(KANOptions({2, 3, 1})), path("kan.pt"));
  KAN_EXPECT_ERROR(open_model(path("kan.pt"), ModelFileOptions().inputs(3)), "takes 2 inputs",
                   "not 3");
}

TEST_F(TorchScript, TruncatedOrCorruptArchivesAreRefusedBeforeLibTorchSeesThem) {
  two_layer_script().save(path("script.pt"));
  std::ifstream in(path("script.pt"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const size_t keep : {bytes.size() / 2, bytes.size() - 30, size_t{100}}) {
    std::ofstream(path("cut.pt"), std::ios::binary) << bytes.substr(0, keep);
    KAN_EXPECT_ERROR(
        open_model(path("cut.pt"), ModelFileOptions().trust_torchscript(true).inputs(3)), "cut.pt");
  }
}

TEST_F(TorchScript, ForwardIsTheScriptsWithItsStateUnderDottedNames) {
  auto script = two_layer_script();
  script.save(path("script.pt"));
  auto model = open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_EQ(model->kind(), ModelKind::kTorchScript);
  EXPECT_EQ(model->inputs(), 3);
  EXPECT_EQ(model->outputs(), 2);
  EXPECT_EQ(model->dtype(), torch::kFloat64);
  EXPECT_EQ(model->parameter_count(), 12 + 8);
  const auto x = inputs(7);
  EXPECT_TRUE(torch::equal(model->forward(x), script.forward({x}).toTensor()));
  const auto parameters = model->module().named_parameters();
  EXPECT_TRUE(parameters.contains("inner.weight"));
  EXPECT_TRUE(parameters.contains("head"));
  EXPECT_TRUE(model->module().named_buffers().contains("inner.shift"));
  const auto config = model->config();
  EXPECT_EQ(config["kind"], "torchscript");
  EXPECT_EQ(config["class"], "tests.Outer");
  EXPECT_EQ(config["width"], nlohmann::json({3, 2}));
  KAN_EXPECT_ERROR(model->forward(inputs(2).narrow(1, 0, 2)), "input");
}

TEST_F(TorchScript, TrainingUpdatesTheScriptsOwnTensorsAndTheyAreWrittenBack) {
  two_layer_script().save(path("script.pt"));
  auto model = open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  auto* script = dynamic_cast<TorchScriptModelImpl*>(model.get());
  ASSERT_NE(script, nullptr);
  Dataset data;
  data.train_input = data.test_input = inputs(16);
  data.train_label = data.test_label = torch::sin(inputs(16).narrow(1, 0, 2));
  const auto before = model->forward(data.test_input).detach().clone();
  const auto history = fit(*model, data, FitOptions().opt(Optimizer::kAdam).lr(0.05).steps(20));
  EXPECT_LT(history.steps.back().train_loss, history.steps.front().train_loss);
  // The optimiser's parameters are the script's tensors: its own forward sees the training.
  auto handle = script->script(); // a handle: the same module object
  const auto y = handle.forward({data.test_input}).toTensor();
  EXPECT_FALSE(torch::allclose(y, before));
  EXPECT_TRUE(torch::equal(y, model->forward(data.test_input)));
  save_torchscript(*script, path("trained.pt"));
  auto reloaded =
      open_model(path("trained.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_TRUE(torch::equal(reloaded->forward(data.test_input), y));
}

TEST_F(TorchScript, CopiesAreIndependentAndConvertLikeModules) {
  two_layer_script().save(path("script.pt"));
  auto model = open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  auto copy = copy_model(*model, torch::kCPU, torch::kFloat32);
  EXPECT_EQ(copy->dtype(), torch::kFloat32);
  EXPECT_EQ(model->dtype(), torch::kFloat64);
  EXPECT_EQ(copy->module().named_buffers()["inner.order"].scalar_type(), torch::kLong);
  EXPECT_EQ(copy->module().named_buffers()["inner.shift"].scalar_type(), torch::kFloat32);
  for (const auto& p : copy->module().parameters()) {
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
  const auto x = inputs(5);
  EXPECT_LT(test::max_abs_diff(copy->forward(x.to(torch::kFloat32)), model->forward(x)), 1e-6);
  {
    torch::NoGradGuard no_grad;
    copy->module().named_parameters()["head"].zero_();
  }
  EXPECT_EQ(copy->forward(x.to(torch::kFloat32)).abs().max().item<double>(), 0.0);
  EXPECT_GT(model->forward(x).abs().max().item<double>(), 0.0);
}

TEST_F(TorchScript, OpeningAndCopyingLeaveTheStateAndModeAsSaved) {
  // A forward that counts its calls in a buffer, saved in evaluation mode.
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::jit::Module counting("__torch__.tests.Counting");
  counting.register_parameter("w", torch::ones({3, 1}, f64).requires_grad_(), false);
  counting.register_buffer("calls", torch::zeros({1}, f64));
  // The flag PyTorch's scripted modules carry (a module made in C++ has none of its own).
  counting.register_attribute("training", c10::BoolType::get(), true);
  counting.define(R"JIT(
def forward(self, x):
    self.calls.add_(1.0)
    return torch.matmul(x, self.w)
)JIT");
  counting.eval();
  counting.save(path("counting.pt"));
  auto model =
      open_model(path("counting.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_EQ(model->outputs(), 1);
  EXPECT_EQ(model->module().named_buffers()["calls"].item<double>(), 0.0);
  EXPECT_FALSE(model->module().is_training());
  auto copy = copy_model(*model, torch::kCPU, torch::kFloat64);
  EXPECT_FALSE(copy->module().is_training());
  EXPECT_EQ(copy->module().named_buffers()["calls"].item<double>(), 0.0);
  model->forward(inputs(2));
  EXPECT_EQ(model->module().named_buffers()["calls"].item<double>(), 1.0);
}

TEST_F(TorchScript, ATiedParameterIsOneParameter) {
  const auto shared = torch::linspace(-1, 1, 6, torch::kFloat64).reshape({3, 2}).requires_grad_();
  torch::jit::Module first("__torch__.tests.First"), second("__torch__.tests.Second");
  first.register_parameter("w", shared, false);
  second.register_parameter("w", shared, false);
  for (auto* m : {&first, &second})
    m->define("def forward(self, x):\n    return torch.matmul(x, self.w)\n");
  torch::jit::Module outer("__torch__.tests.Tied");
  outer.register_module("a", first);
  outer.register_module("b", second);
  outer.define(R"JIT(
def forward(self, x):
    return self.a.forward(x) + self.b.forward(x)
)JIT");
  outer.save(path("tied.pt"));
  auto model = open_model(path("tied.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_EQ(model->parameter_count(), 6);
  EXPECT_EQ(model->module().parameters().size(), 1u);
}

TEST_F(TorchScript, APlainTensorAttributeIsAFindingOfItsOwnAndIsNotMovedByTo) {
  two_layer_script(/*plain_attribute=*/true).save(path("plain.pt"));
  auto model = open_model(path("plain.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  const auto* script = dynamic_cast<const TorchScriptModelImpl*>(model.get());
  ASSERT_NE(script, nullptr);
  const auto plain = script->plain_tensor_attributes();
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].path, "scale");
  // As in PyTorch, .to() leaves it behind.
  model->module().to(torch::kFloat32);
  EXPECT_EQ(plain[0].tensor.scalar_type(), torch::kFloat64);
  const auto report = diagnostics::DeviceAudit(torch::kCPU).module(model->module()).report();
  bool found = false;
  for (const auto& f : report.findings)
    found = found ||
            (f.tensor == "model.scale" && f.kind == "plain_attribute" &&
             f.problem == "not_module_state" && f.fix.find("register_buffer") != std::string::npos);
  EXPECT_TRUE(found) << report.to_text();
  // The clean model has none.
  two_layer_script().save(path("clean.pt"));
  auto clean = open_model(path("clean.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_TRUE(diagnostics::DeviceAudit(torch::kCPU).module(clean->module()).report().clean());
}

// kanbench's models exported: the module's outputs against the model's, in memory and after a
// round trip through the file that PyTorch would read (LibTorch's own torch::jit::load).
void expect_exported_equal(const Model& model, const torch::Tensor& x, const std::string& file) {
  auto exported = export_torchscript(model);
  const auto y = const_cast<Model&>(model).forward(x).detach();
  const double tolerance = model.dtype() == torch::kFloat64 ? 1e-12 : 1e-6;
  EXPECT_LE(test::max_relative_diff(exported->forward(x), y), tolerance);
  const auto empty = exported->forward(x.narrow(0, 0, 0)); // an empty batch is one
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, model.outputs()}));
  save_torchscript(*exported, file);
  auto loaded = torch::jit::load(file);
  EXPECT_LE(test::max_relative_diff(loaded.forward({x}).toTensor(), y), tolerance);
  // Its coefficients train in PyTorch: they are parameters that want a gradient.
  int64_t trainable = 0;
  for (const auto& p : loaded.parameters())
    trainable += p.requires_grad() ? p.numel() : 0;
  EXPECT_EQ(trainable, model.parameter_count());
}

TEST_F(TorchScript, ExportedKansAndMlpsComputeWhatKanbenchComputes) {
  torch::manual_seed(3);
  KAN plain(KANOptions({3, 4, 2}).grid(5).dtype(torch::kFloat64).seed(4));
  {
    torch::NoGradGuard no_grad;
    plain->update_grid_from_samples(torch::rand({64, 3}, torch::kFloat64) * 2.5 - 1.2);
  }
  const auto x = torch::rand({50, 3}, torch::kFloat64) * 3 - 1.5; // inside and outside the grid
  expect_exported_equal(*plain, x, path("plain.pt"));

  KAN mult(KANOptions({3, 4, 1})
               .mult({0, 2, 0})
               .mult_arity(3)
               .affine_trainable(true)
               .seed(5)
               .dtype(torch::kFloat64)
               .base_fun(BaseFunction::kIdentity));
  expect_exported_equal(*mult, x, path("mult.pt"));

  KAN symbolic(KANOptions({3, 2, 1}).dtype(torch::kFloat64).seed(6));
  symbolic->layer(0)->set_symbolic_edges(
      {0, 2, 1}, {0, 1, 1}, {"sin", "x^2", "gaussian"}, {1.0, 1.0, 0.5},
      torch::tensor({{1.5, 0.1, 2.0, -0.3}, {0.7, -0.2, 1.0, 0.0}, {1.0, 0.0, 0.5, 0.25}},
                    torch::kFloat64));
  expect_exported_equal(*symbolic, x, path("symbolic.pt"));

  MLP mlp(MLPOptions({3, 8, 8, 2}).activation(Activation::kTanh).dtype(torch::kFloat64));
  expect_exported_equal(*mlp, x, path("mlp.pt"));
  KAN f32(KANOptions({3, 3, 1}).seed(7));
  expect_exported_equal(*f32, x.to(torch::kFloat32), path("f32.pt"));

  // The archive comes back as a TorchScript model of kanbench's.
  auto back = open_model(path("mlp.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_EQ(back->kind(), ModelKind::kTorchScript);
  EXPECT_EQ(back->outputs(), 2);
}

TEST_F(TorchScript, ExportedPykanCheckpointsComputeWhatKanbenchComputes) {
  for (const auto* name : {"plain", "plain_float32", "mult", "mult_arity3", "options", "pruned",
                           "symbolic", "symbolic_fitted", "formula_mult", "zero_base"}) {
    SCOPED_TRACE(name);
    const auto model = load_pykan(test::reference_checkpoint(name));
    const auto x = (torch::rand({40, model->inputs()}, torch::kFloat64) * 2 - 1).to(model->dtype());
    expect_exported_equal(*model, x, path(std::string(name) + ".pt"));
  }
}

TEST_F(TorchScript, MovesToTheGpuWithItsState_CUDA) {
  KAN_REQUIRE_CUDA();
  two_layer_script().save(path("script.pt"));
  auto model = open_model(
      path("script.pt"),
      ModelFileOptions().trust_torchscript(true).inputs(3).device(torch::Device("cuda")));
  EXPECT_TRUE(model->device().is_cuda());
  const auto x = inputs(9);
  auto cpu = open_model(path("script.pt"), ModelFileOptions().trust_torchscript(true).inputs(3));
  EXPECT_LT(test::max_abs_diff(model->forward(x.cuda()).cpu(), cpu->forward(x)), 1e-12);
  EXPECT_TRUE(diagnostics::DeviceAudit(model->device()).module(model->module()).report().clean());
}

} // namespace
} // namespace kan
