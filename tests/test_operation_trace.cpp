// Operation trace: where every ATen operation ran, attributed to module and phase.
#include "kan/diagnostics/operation_trace.h"

#include "kan/nn/trace_scope.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <optional>

namespace kan::diagnostics {
namespace {

// The meta device stands in for "the model's accelerator" on a machine without one.
const auto meta = torch::TensorOptions().device(torch::kMeta);

// A module with the classic bug: a tensor created inside forward without a device.
struct CreatesOnCpuImpl : torch::nn::Module {
  explicit CreatesOnCpuImpl(bool as_host_work = false) : as_host_work(as_host_work) {
    weight = register_parameter("weight", torch::ones({3, 2}, meta));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    ModuleScope scope("head");
    torch::Tensor offset;
    if (as_host_work) {
      PhaseScope host(Phase::kHostWork);
      offset = torch::ones({2});
    } else {
      offset = torch::ones({2}); // the bug: no device
    }
    return x.matmul(weight) + offset;
  }
  torch::Tensor weight;
  bool as_host_work;
};

// The finding of `problem` (at `operation`, the start of its tensor "aten::ones in MODULE").
const kan::results::AuditFinding* find(const TraceReport& report, TraceProblem problem,
                                       const std::string& operation = "") {
  for (const auto& f : report.findings) {
    const bool at =
        operation.empty() || f.tensor == operation || f.tensor.rfind(operation + " in ", 0) == 0;
    if (f.problem == to_string(problem) && at)
      return &f;
  }
  return nullptr;
}

bool has_operation(const TraceReport& report, const std::string& module, const std::string& phase) {
  return std::any_of(report.operations.begin(), report.operations.end(),
                     [&](const auto& o) { return o.module == module && o.phase == phase; });
}

// One traced fit step (with a grid update) of a correct KAN on the CPU.
TraceReport trace_one_fit_step(torch::Dtype dtype, Optimizer opt) {
  KAN model(KANOptions({2, 3, 1}).dtype(dtype));
  auto data = test::toy_data(dtype);
  OperationTrace trace(model->device());
  auto options = FitOptions().opt(opt).steps(2).lamb(0.01).lr(opt == Optimizer::kAdam ? 0.01 : 1);
  options.on_step_begin([&](int64_t step, torch::optim::Optimizer&) {
    if (step == 0)
      trace.start();
  });
  options.on_step([&](const StepRecord& record, int64_t) {
    if (record.step == 0) {
      trace.stop();
      trace.count_step();
    }
  });
  fit(model, data, options);
  return trace.report();
}

TEST(OperationTrace, CorrectKanFitStepHasNoFinding) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    for (auto opt : {Optimizer::kLBFGS, Optimizer::kAdam}) {
      const auto report = trace_one_fit_step(dtype, opt);
      EXPECT_TRUE(report.clean()) << report.to_text();
      EXPECT_EQ(report.summary.steps, 1);
      EXPECT_GT(report.summary.operations, 50);
      EXPECT_EQ(report.summary.operations_per_device.count("meta"), 0u);
      EXPECT_EQ(report.summary.cpu_share, 0.0); // the model is on the CPU: nothing to flag
      EXPECT_GT(report.summary.overhead_seconds, 0.0);
      EXPECT_LT(report.summary.overhead_seconds, report.summary.traced_seconds);
      // Attribution: each layer's forward, its backward, the grid update, the optimiser.
      EXPECT_TRUE(has_operation(report, "model.layers.0", "forward")) << report.to_json().dump(1);
      EXPECT_TRUE(has_operation(report, "model.layers.1", "forward"));
      EXPECT_TRUE(has_operation(report, "model.layers.0", "backward")) << report.to_text();
      EXPECT_TRUE(has_operation(report, "model.layers.0", "grid_update"));
      // On the CPU the regulariser of all layers is one node.
      EXPECT_TRUE(has_operation(report, "model.layers", "regularization"));
      EXPECT_TRUE(has_operation(report, "", "optimizer_step"));
      EXPECT_TRUE(has_operation(report, "", "evaluation"));
    }
  }
}

TEST(OperationTrace, TensorCreatedWithoutDeviceInForwardIsNamed) {
  auto module = std::make_shared<CreatesOnCpuImpl>();
  const auto x = torch::ones({4, 3}, meta);
  OperationTrace trace(torch::kMeta);
  trace.start();
  try {
    module->forward(x);
  } catch (const c10::Error&) {
    // LibTorch may refuse meta + cpu; the trace has seen the operations before that.
  }
  trace.stop();
  const auto report = trace.report();
  const auto* created = find(report, TraceProblem::kCreatedOnWrongDevice, "aten::ones");
  ASSERT_NE(created, nullptr) << report.to_text();
  EXPECT_EQ(created->module, "model.head");
  EXPECT_EQ(created->device, "cpu");
  EXPECT_EQ(created->count, 1);
  EXPECT_NE(created->message.find("aten::ones in model.head created a tensor on cpu but the "
                                  "model is on meta"),
            std::string::npos)
      << created->message;
  const auto* mixed = find(report, TraceProblem::kMixedDevices);
  ASSERT_NE(mixed, nullptr) << report.to_text();
  EXPECT_EQ(mixed->tensor, "aten::add in model.head");
  EXPECT_EQ(mixed->module, "model.head");
  EXPECT_EQ(mixed->device, "cpu, meta");
  EXPECT_EQ(report.findings.size(), 2u) << report.to_text();
}

TEST(OperationTrace, DeliberateHostWorkIsNotAFinding) {
  auto module = std::make_shared<CreatesOnCpuImpl>(/*as_host_work=*/true);
  const auto report = trace_operations(torch::kMeta, [&] {
    try {
      module->forward(torch::ones({4, 3}, meta));
    } catch (const c10::Error&) {
    }
  });
  EXPECT_EQ(find(report, TraceProblem::kCreatedOnWrongDevice), nullptr) << report.to_text();
  EXPECT_TRUE(std::any_of(report.operations.begin(), report.operations.end(), [](const auto& o) {
    return o.operation == "aten::ones" && o.phase == "host_work" && o.device == "cpu";
  }));
}

TEST(OperationTrace, CpuScalarsBesideDeviceTensorsAreNotCpuWork) {
  // LibTorch's own LBFGS starts with H_diag = torch::tensor(1), a CPU scalar, and multiplies the
  // device's direction by it: neither is work that should have run on the device.
  const auto report = trace_operations(torch::kMeta, [&] {
    const auto d = torch::ones({4}, meta);
    const auto h_diag = torch::tensor(1);
    (void)d.mul(h_diag);
  });
  EXPECT_TRUE(report.clean()) << report.to_text();
  EXPECT_EQ(report.summary.cpu_operations, 0) << report.to_text();
  EXPECT_EQ(report.summary.cpu_share, 0.0);
  // A vector is still work on the wrong device.
  const auto vector = trace_operations(torch::kMeta, [&] {
    (void)torch::ones({4}, meta).mul(torch::tensor({1.0, 2.0, 3.0, 4.0}).to(torch::kMeta));
  });
  EXPECT_NE(find(vector, TraceProblem::kCreatedOnWrongDevice), nullptr) << vector.to_text();
  // So is a scalar reduced from a CPU vector, and a 0-dim parameter left on the CPU.
  const auto cpu_vector = torch::rand({8});
  const auto reduced = trace_operations(torch::kMeta, [&] { (void)cpu_vector.sum(); });
  EXPECT_NE(find(reduced, TraceProblem::kRanOnCpu, "aten::sum"), nullptr) << reduced.to_text();
  const auto temperature = torch::ones({}, torch::requires_grad());
  const auto trained =
      trace_operations(torch::kMeta, [&] { (void)torch::ones({4}, meta).mul(temperature * 2); });
  EXPECT_NE(find(trained, TraceProblem::kRanOnCpu, "aten::mul"), nullptr) << trained.to_text();
}

TEST(OperationTrace, GpuRequestedButForwardRanOnCpu) {
  // The model was meant for cuda:0, but forward and backward ran on the CPU: the trace logic
  // only compares devices, so this machine's CPU can show it.
  KAN model(KANOptions({2, 3, 1}));
  const auto x = torch::rand({8, 2});
  const auto report =
      trace_operations(torch::Device("cuda:0"), [&] { model->forward(x).sum().backward(); });
  ASSERT_FALSE(report.clean());
  EXPECT_EQ(report.findings.front().problem, to_string(TraceProblem::kDeviceNotUsed));
  EXPECT_NE(report.findings.front().message.find("ran on cpu"), std::string::npos);
  // Every operation but CPU scalars made from scalars (backward's seed, ones_like of the loss).
  EXPECT_GT(report.summary.cpu_share, 0.95);
  EXPECT_GT(report.summary.cpu_operations, 10);
  const auto* cpu = find(report, TraceProblem::kRanOnCpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_NE(cpu->message.find("ran on the CPU"), std::string::npos) << cpu->message;
  bool layer_named = false;
  for (const auto& f : report.findings)
    layer_named = layer_named || f.module == "model.layers.1";
  EXPECT_TRUE(layer_named) << report.to_text();
}

TEST(OperationTrace, CopiesAreCountedWithBytes) {
  const auto x = torch::rand({10, 4}); // 160 bytes
  const auto report = trace_operations(torch::kMeta, [&] { (void)x.to(torch::kMeta); });
  EXPECT_EQ(report.summary.transfers.host_to_device, 1);
  EXPECT_EQ(report.summary.transfers.host_to_device_bytes, 160);
  EXPECT_TRUE(report.clean()) << report.to_text(); // a copy to the model's device is no fault
  const auto json = report.to_json();
  EXPECT_EQ(json["summary"]["transfers"]["host_to_device_bytes"], 160);
  EXPECT_TRUE(json["findings"].is_array());
}

TEST(OperationTrace, OneTraceAtATime) {
  OperationTrace first(torch::kCPU), second(torch::kCPU);
  first.start();
  KAN_EXPECT_ERROR(second.start(), "another operation trace is running");
  KAN_EXPECT_ERROR(first.report(), "stop() the trace first");
  first.stop();
  first.stop(); // harmless
  second.start();
  second.stop();
}

TEST(OperationTrace, AScopeOpenAcrossTracesLeavesTheNextTraceAlone) {
  std::optional<ModuleScope> outer;
  OperationTrace first(torch::kCPU);
  first.start();
  outer.emplace("outer"); // opened under the first trace
  first.stop();
  const auto report = trace_operations(torch::kCPU, [&] {
    ModuleScope inner("inner");
    outer.reset(); // the first trace's scope ends inside the second one's
    (void)(torch::ones({2}) + 1);
  });
  EXPECT_TRUE(std::any_of(report.operations.begin(), report.operations.end(), [](const auto& o) {
    return o.operation == "aten::add" && o.module == "model.inner";
  })) << report.to_json()["operations"].dump();
}

TEST(OperationTrace, KanFitStepOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  KAN model(KANOptions({2, 3, 1}).device(torch::kCUDA));
  auto data = test::toy_data(torch::kFloat32, torch::kCUDA);
  OperationTrace trace(model->device());
  auto options = FitOptions().steps(1).batch(16); // minibatch indices are drawn on the CPU
  options.on_step_begin([&](int64_t, torch::optim::Optimizer&) { trace.start(); });
  options.on_step([&](const StepRecord&, int64_t) {
    trace.stop();
    trace.count_step();
  });
  fit(model, data, options);
  const auto report = trace.report();
  EXPECT_TRUE(report.clean()) << report.to_text();
  EXPECT_GT(report.summary.operations_per_device.at("cuda:0"), 0);
  EXPECT_GT(report.summary.transfers.synchronizations, 0); // item() of the losses
  EXPECT_GT(report.summary.transfers.host_to_device, 0);   // the seeded minibatch draws
  EXPECT_TRUE(has_operation(report, "model.layers.0", "backward"));
}

TEST(OperationTrace, CpuTensorInCudaForward_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto weight = torch::rand({3, 2}, torch::kCUDA);
  const auto report = trace_operations(torch::kCUDA, [&] {
    ModuleScope scope("head");
    try {
      (void)(torch::rand({4, 3}, torch::kCUDA).matmul(weight) + torch::ones({2}));
    } catch (const c10::Error&) {
    }
  });
  EXPECT_NE(find(report, TraceProblem::kCreatedOnWrongDevice, "aten::ones"), nullptr)
      << report.to_text();
  EXPECT_NE(find(report, TraceProblem::kMixedDevices, "aten::add"), nullptr) << report.to_text();
}

} // namespace
} // namespace kan::diagnostics
