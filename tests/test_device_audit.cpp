// Static device audit: no finding on a correct KAN, exactly one per planted fault.
#include "kan/diagnostics/device_audit.h"

#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/lbfgs.h>

namespace kan::diagnostics {
namespace {

const auto meta = torch::TensorOptions().device(torch::kMeta);

// A deliberately broken module: the meta device stands in for "another device".
struct BrokenImpl : torch::nn::Module {
  explicit BrokenImpl(bool buffer_elsewhere = false) {
    weight = register_parameter("weight", torch::rand({3, 2}));
    // The bug: a buffer created on a fixed device, ignoring where the module lives.
    table = register_buffer("table", torch::zeros({4}, buffer_elsewhere ? meta : torch::kCPU));
  }
  void replace_weight_by_an_operation() { parameters_["weight"] = weight * 2; }
  torch::Tensor forward(const torch::Tensor& x) { return x.matmul(weight) + table.narrow(0, 0, 2); }
  torch::Tensor weight, table;
};

std::vector<std::string> names(const AuditReport& report) {
  std::vector<std::string> out;
  for (const auto& f : report.findings)
    out.push_back(f.tensor);
  return out;
}

TEST(DeviceAudit, CorrectKanHasNoFinding) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    KAN model(KANOptions({2, 5, 1}).dtype(dtype));
    auto data = test::toy_data(dtype);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
    compute_loss(Loss::kMSE, model(data.train_input), data.train_label).backward();
    adam.step();
    const auto report =
        DeviceAudit(torch::kCPU).module(*model).optimizer(adam, *model).dataset(data).report();
    EXPECT_TRUE(report.clean()) << report.to_text();
    // 6 spline parameters, 8 affine ones, 6 + 8 gradients (the frozen affine parameters' are
    // undefined, so Adam keeps no moments for them), 4 buffers, 2 x 6 Adam moments, 4 data.
    EXPECT_EQ(report.summary.tensors_checked, 14 + 6 + 4 + 12 + 4);
    EXPECT_GT(report.summary.bytes_per_device.at("cpu"), 0);
    EXPECT_EQ(report.expected_dtype, dtype == torch::kFloat32 ? "float32" : "float64");
  }
}

TEST(DeviceAudit, LbfgsHistoryIsAudited) {
  KAN model(KANOptions({2, 3, 1}).dtype(torch::kFloat64));
  auto data = test::toy_data(torch::kFloat64);
  torch::optim::LBFGS lbfgs(model->parameters(), torch::optim::LBFGSOptions(1).max_iter(3));
  lbfgs.step([&] {
    lbfgs.zero_grad();
    auto loss = compute_loss(Loss::kMSE, model(data.train_input), data.train_label);
    loss.backward();
    return loss;
  });
  const auto report = DeviceAudit(torch::kCPU).optimizer(lbfgs, *model).report();
  EXPECT_TRUE(report.clean());
  EXPECT_GE(report.summary.tensors_checked, 3); // d, H_diag, prev_flat_grad, history
}

TEST(DeviceAudit, BufferLeftOnAnotherDevice) {
  auto broken = std::make_shared<BrokenImpl>(/*buffer_elsewhere=*/true);
  const auto report = audit(*broken, torch::kCPU);
  ASSERT_EQ(names(report), std::vector<std::string>{"model.table"});
  const auto& f = report.findings[0];
  EXPECT_EQ(f.kind, to_string(TensorKind::kBuffer));
  EXPECT_EQ(f.problem, to_string(Problem::kWrongDevice));
  EXPECT_EQ(f.device, "meta");
  EXPECT_EQ(f.expected_device, "cpu");
  EXPECT_EQ(f.shape, std::vector<int64_t>{4});
  EXPECT_NE(f.message.find("buffer model.table is on meta, expected cpu"), std::string::npos);
  EXPECT_NE(f.fix.find("model->to(cpu)"), std::string::npos);
}

TEST(DeviceAudit, ParameterReplacedByANonLeafTensor) {
  auto broken = std::make_shared<BrokenImpl>();
  broken->replace_weight_by_an_operation();
  const auto report = audit(*broken, torch::kCPU);
  ASSERT_EQ(names(report), std::vector<std::string>{"model.weight"});
  EXPECT_EQ(report.findings[0].problem, to_string(Problem::kNonLeafParameter));
  EXPECT_NE(report.findings[0].message.find("output of MulBackward"), std::string::npos)
      << report.findings[0].message;
}

TEST(DeviceAudit, KanBufferOfAnotherDtype) {
  KAN model(KANOptions({2, 3, 1}));
  model->layer(1)->grid.set_data(model->layer(1)->grid.to(torch::kFloat64));
  const auto report = audit(*model, torch::kCPU);
  ASSERT_EQ(names(report), std::vector<std::string>{"model.layers.1.grid"});
  EXPECT_EQ(report.findings[0].problem, to_string(Problem::kWrongDtype));
  EXPECT_EQ(report.findings[0].dtype, "float64");
}

TEST(DeviceAudit, GradientOnAnotherDevice) {
  KAN model(KANOptions({2, 3, 1}));
  auto coef = model->layer(0)->coef;
  coef.mutable_grad() = torch::zeros(coef.sizes(), meta);
  const auto report = audit(*model, torch::kCPU);
  ASSERT_EQ(names(report), std::vector<std::string>{"model.layers.0.coef.grad"});
  EXPECT_EQ(report.findings[0].kind, to_string(TensorKind::kGradient));
}

TEST(DeviceAudit, OptimizerStateOnAnotherDevice) {
  KAN model(KANOptions({2, 3, 1}));
  auto data = test::toy_data();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  compute_loss(Loss::kMSE, model(data.train_input), data.train_label).backward();
  adam.step();
  auto* state = static_cast<torch::optim::AdamParamState*>(
      adam.state().at(model->layer(1)->scale_sp.unsafeGetTensorImpl()).get());
  state->exp_avg_sq(torch::zeros({3, 1}, meta));
  const auto report = DeviceAudit(torch::kCPU).optimizer(adam, *model).report();
  ASSERT_EQ(names(report),
            std::vector<std::string>{"optimizer.state[model.layers.1.scale_sp].exp_avg_sq"});
  EXPECT_EQ(report.findings[0].kind, to_string(TensorKind::kOptimizerState));
  EXPECT_NE(report.findings[0].fix.find("create the optimizer after moving the model"),
            std::string::npos);
}

TEST(DeviceAudit, DatasetOnAnotherDevice) {
  KAN model(KANOptions({2, 3, 1}));
  const auto report = DeviceAudit(torch::kCPU)
                          .module(*model)
                          .dataset(test::toy_data(torch::kFloat32, torch::kMeta))
                          .report();
  EXPECT_EQ(names(report), (std::vector<std::string>{"data.train_input", "data.train_label",
                                                     "data.test_input", "data.test_label"}));
  for (const auto& f : report.findings)
    EXPECT_EQ(f.kind, to_string(TensorKind::kData));
}

TEST(DeviceAudit, NonContiguousAndNonDenseData) {
  KAN model(KANOptions({2, 3, 1}));
  const auto x = torch::rand({2, 10}).t(); // (10, 2), transposed strides
  const auto report = DeviceAudit(torch::kCPU)
                          .module(*model)
                          .data("x", x)
                          .data("sparse", torch::eye(3).to_sparse())
                          .report();
  ASSERT_EQ(report.findings.size(), 2u);
  EXPECT_EQ(report.findings[0].problem, to_string(Problem::kNonContiguous));
  EXPECT_EQ(report.findings[1].problem, to_string(Problem::kNonDense));
}

TEST(DeviceAudit, JsonHasFindingsAndSummary) {
  auto broken = std::make_shared<BrokenImpl>(/*buffer_elsewhere=*/true);
  const auto json = audit(*broken, torch::kCPU).to_json();
  ASSERT_TRUE(json["findings"].is_array());
  ASSERT_EQ(json["findings"].size(), 1u);
  for (const char* key : {"tensor", "kind", "device", "expected_device", "message"}) {
    EXPECT_TRUE(json["findings"][0][key].is_string()) << key;
  }
  EXPECT_EQ(json["findings"][0]["kind"], "buffer");
  EXPECT_EQ(json["summary"]["tensors_checked"], 2);
  EXPECT_EQ(json["summary"]["findings"], 1);
  EXPECT_EQ(json["summary"]["bytes_per_device"]["meta"], 16);
}

TEST(DeviceAudit, LibTorchsDeviceErrorIsExplained) {
  auto broken = std::make_shared<BrokenImpl>(/*buffer_elsewhere=*/true);
  const auto x = torch::rand({5, 3});
  auto report = [&] { return audit(*broken, torch::kCPU); };
  try {
    diagnose_device_errors([&] { broken->forward(x); }, report);
    ADD_FAILURE() << "expected a device-mismatch error";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("buffer model.table is on meta, expected cpu"), std::string::npos)
        << message;
    EXPECT_NE(message.find("Fix: "), std::string::npos) << message;
    EXPECT_NE(message.find("(LibTorch: "), std::string::npos) << message;
  }
  // Other errors pass through unchanged.
  KAN_EXPECT_ERROR(diagnose_device_errors([] { TORCH_CHECK(false, "unrelated"); }, report),
                   "unrelated");
  auto healthy = std::make_shared<BrokenImpl>();
  diagnose_device_errors([&] { healthy->forward(x); }, report); // no error, no audit
}

TEST(DeviceAudit, KanOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  KAN model(KANOptions({2, 5, 1}).device(torch::kCUDA));
  auto data = test::toy_data(torch::kFloat32, torch::kCUDA);
  fit(model, data, FitOptions().steps(2));
  EXPECT_TRUE(DeviceAudit(torch::kCUDA).module(*model).dataset(data).report().clean());
  // Everything is flagged against the CPU; CPU data is flagged against the GPU.
  EXPECT_EQ(audit(*model, torch::kCPU).findings.size(),
            model->parameters().size() + model->buffers().size() + 6);
  EXPECT_EQ(DeviceAudit(torch::kCUDA).dataset(test::toy_data()).report().findings.size(), 4u);
  // A buffer left behind on the CPU by hand.
  model->layer(0)->mask.set_data(model->layer(0)->mask.cpu());
  EXPECT_EQ(names(audit(*model, torch::kCUDA)), std::vector<std::string>{"model.layers.0.mask"});
}

} // namespace
} // namespace kan::diagnostics
