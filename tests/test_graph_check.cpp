// Static graph check: device problems read from TorchScript graphs without running them.
#include "kan/diagnostics/graph_check.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/types.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

namespace kan::diagnostics {
namespace {

const std::string kDir = KAN_TORCHSCRIPT_REFERENCE_DIR;

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

const results::AuditFinding* find(const GraphCheckReport& report, GraphProblem problem,
                                  const std::string& tensor) {
  for (const auto& f : report.findings)
    if (f.problem == to_string(problem) && f.tensor == tensor)
      return &f;
  return nullptr;
}

// What the static check must report for each planted bug (tools/torchscript-reference).
const std::map<std::string, GraphProblem> kExpected = {
    {"factory_no_device", GraphProblem::kFactoryWithoutDevice},
    {"plain_tensor_attribute", GraphProblem::kPlainTensorAttribute},
    {"cpu_call", GraphProblem::kHostCopy},
    {"item_call", GraphProblem::kHostSynchronization},
    {"cpu_index", GraphProblem::kFactoryWithoutDevice}};

TEST(GraphCheck, FindsEachPlantedBugOnItsLineAndNothingElse) {
  std::ifstream in(kDir + "/bugs/manifest.json");
  ASSERT_TRUE(in) << kDir;
  const auto manifest = nlohmann::json::parse(in);
  ASSERT_EQ(manifest.size(), 7u);
  for (const auto& entry : manifest) {
    const auto name = entry.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const auto report =
        check_graph(torch::jit::load(kDir + "/bugs/" + entry.at("file").get<std::string>()));
    EXPECT_GE(report.methods, 4); // forward, rbf or spline, base, F.silu
    EXPECT_GT(report.nodes, 30);
    if (!entry.at("is_bug").get<bool>()) {
      EXPECT_TRUE(report.clean()) << report.to_text();
      continue;
    }
    const auto line = "bug_models.py:" + std::to_string(entry.at("line").get<int>());
    ASSERT_EQ(report.findings.size(), 1u) << report.to_text();
    const auto& f = report.findings.front();
    EXPECT_TRUE(ends_with(f.source, line)) << f.source;
    EXPECT_EQ(f.problem, to_string(kExpected.at(entry.at("kind").get<std::string>())));
    EXPECT_EQ(f.kind, "graph");
    EXPECT_EQ(f.module, "model");
    EXPECT_EQ(f.phase, "forward");
    EXPECT_EQ(f.count, 1);
    EXPECT_NE(f.message.find(line), std::string::npos) << f.message;
    EXPECT_FALSE(f.fix.empty());
  }
  // The names a user reads.
  const auto attribute = check_graph(torch::jit::load(kDir + "/bugs/plain_tensor_attribute.pt"));
  const auto* f = find(attribute, GraphProblem::kPlainTensorAttribute, "model.out_scale");
  ASSERT_NE(f, nullptr) << attribute.to_text();
  EXPECT_EQ(f->device, "cpu");
  const auto factory = check_graph(torch::jit::load(kDir + "/bugs/factory_no_device.pt"), "net");
  EXPECT_NE(find(factory, GraphProblem::kFactoryWithoutDevice, "aten::zeros in net"), nullptr)
      << factory.to_text();
}

TEST(GraphCheck, LibraryModels) {
  for (const char* name : {"efficient_kan", "fastkan", "chebykan", "inkan_script"}) {
    const auto report = check_graph(torch::jit::load(kDir + "/" + name + ".pt"));
    EXPECT_TRUE(report.clean()) << name << "\n" << report.to_text();
  }
  // Tracing inkan bakes arange(4, device=x.device) into arange(4, device=cpu) in both layers.
  const auto traced = check_graph(torch::jit::load(kDir + "/inkan_trace.pt"));
  ASSERT_EQ(traced.findings.size(), 1u) << traced.to_text();
  const auto& f = traced.findings.front();
  EXPECT_EQ(f.problem, "fixed_device");
  EXPECT_EQ(f.tensor, "aten::arange in model.layers.0");
  EXPECT_EQ(f.device, "cpu");
  EXPECT_EQ(f.count, 2);
  EXPECT_TRUE(ends_with(f.source, "inkan/basis.py:105")) << f.source;
}

// Each rule on code defined in C++ (no source file: findings have no source line).
TEST(GraphCheck, RulesOnDefinedCode) {
  torch::jit::Module child("__torch__.check.Child");
  child.register_parameter("weight", torch::ones({3}), false);
  child.register_buffer("offset", torch::zeros({3}));
  child.register_attribute("scale", c10::TensorType::get(), torch::ones({3}));
  child.define(R"(
def forward(self, x):
    y = x * self.weight + self.offset
    return y * self.scale
)");
  torch::jit::Module m("__torch__.check.Top");
  m.register_module("inner", child);
  m.define(R"(
def forward(self, x):
    y = self.inner.forward(x)
    fine = torch.ones(3, device=x.device) + torch.arange(3, device=y.device) + y.to(x.device)
    n = int(x.size(0))
    if bool(y.sum() > 0):
        y = y + 1
    moved = y.to(torch.device("cuda:0"))
    host = y.to(torch.device("cpu"))
    values: List[float] = y.tolist()
    return fine + moved + host + float(n) + len(values) + torch.tensor(1.0) + torch.empty(3)
)");
  const auto report = check_graph(m);
  EXPECT_EQ(report.methods, 2);
  EXPECT_NE(find(report, GraphProblem::kPlainTensorAttribute, "model.inner.scale"), nullptr);
  const auto* branch = find(report, GraphProblem::kHostSynchronization, "aten::Bool in model");
  ASSERT_NE(branch, nullptr) << report.to_text();
  EXPECT_NE(branch->message.find("branch"), std::string::npos);
  EXPECT_NE(find(report, GraphProblem::kHostSynchronization, "prim::tolist in model"), nullptr);
  const auto* moved = find(report, GraphProblem::kFixedDevice, "aten::to in model");
  ASSERT_NE(moved, nullptr) << report.to_text();
  EXPECT_EQ(moved->device, "cuda:0");
  EXPECT_NE(find(report, GraphProblem::kHostCopy, "aten::to in model"), nullptr);
  EXPECT_NE(find(report, GraphProblem::kFactoryWithoutDevice, "aten::empty in model"), nullptr);
  // Only those six: no finding for ones/arange/to(x.device), int of a size, tensor(1.0).
  EXPECT_EQ(report.findings.size(), 6u) << report.to_text();
}

TEST(GraphCheck, TensorConstantOfTheGraph) {
  torch::jit::Module m("__torch__.check.Constant");
  m.define("def forward(self, x):\n    return x + 1\n");
  auto graph = torch::jit::toGraphFunction(m.get_method("forward").function()).graph();
  {
    // What tracing leaves of `x + torch.tensor([1., 2., 3.])`: a constant of the graph.
    torch::jit::WithInsertPoint here(graph->return_node());
    auto* constant = graph->insertConstant(torch::ones({3}));
    auto* sum = graph->insert(torch::jit::aten::add, {torch::jit::NamedValue(graph->outputs()[0]),
                                                      torch::jit::NamedValue(constant)});
    graph->return_node()->replaceInput(0, sum);
  }
  const auto report = check_graph(m);
  ASSERT_EQ(report.findings.size(), 1u) << report.to_text();
  EXPECT_EQ(report.findings[0].problem, "fixed_device");
  EXPECT_EQ(report.findings[0].tensor, "prim::Constant in model");
}

TEST(GraphCheck, HundredLayersTakeWellUnderASecond) {
  torch::jit::Module m("__torch__.check.Deep");
  std::string code = "def forward(self, x):\n";
  for (int l = 0; l < 100; ++l) {
    torch::jit::Module layer("__torch__.check.Layer" + std::to_string(l));
    layer.register_parameter("weight", torch::ones({4, 4}), false);
    layer.register_buffer("bias", torch::zeros({4}));
    layer.register_attribute("scale", c10::TensorType::get(), torch::ones({4}));
    layer.define(R"(
def forward(self, x):
    h = torch.matmul(x, self.weight) + self.bias
    h = torch.silu(h) * self.scale
    for i in range(2):
        h = h + torch.zeros(4, device=h.device)
    return torch.tanh(h).clamp(-1.0, 1.0)
)");
    m.register_module("layer_" + std::to_string(l), layer);
    code += "    x = self.layer_" + std::to_string(l) + ".forward(x)\n";
  }
  m.define(code + "    return x\n");
  const auto start = std::chrono::steady_clock::now();
  const auto report = check_graph(m);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_LE(report.seconds, seconds);
  EXPECT_GE(report.methods, 101);
  EXPECT_GT(report.nodes, 100 * 15);
  // One place in code shared by every layer: one finding counting the hundred.
  ASSERT_EQ(report.findings.size(), 1u) << report.to_text();
  EXPECT_EQ(report.findings[0].tensor, "model.layer_0.scale");
  EXPECT_EQ(report.findings[0].count, 100);
  std::cout << "check_graph of 100 layers: " << seconds << " s, " << report.nodes << " nodes in "
            << report.methods << " methods\n";
}

TEST(GraphCheck, JsonAndText) {
  const auto report = check_graph(torch::jit::load(kDir + "/bugs/item_call.pt"));
  const auto json = report.to_json();
  ASSERT_EQ(json.at("findings").size(), 1u);
  const auto& f = json.at("findings")[0];
  for (const char* key : {"tensor", "kind", "device", "expected_device", "message", "problem",
                          "fix", "module", "phase", "source", "count"})
    EXPECT_TRUE(f.contains(key)) << key;
  EXPECT_EQ(f.at("problem"), "host_synchronization");
  const auto& summary = json.at("summary");
  EXPECT_EQ(summary.at("findings"), 1);
  EXPECT_EQ(summary.at("methods"), report.methods);
  EXPECT_EQ(summary.at("nodes"), report.nodes);
  EXPECT_TRUE(summary.at("seconds").is_number());
  const auto text = report.to_text();
  EXPECT_EQ(text.rfind("static: host_synchronization: aten::item in model at ", 0), 0u) << text;
  EXPECT_NE(text.find("static: 1 finding in "), std::string::npos) << text;
  EXPECT_EQ(to_string(GraphProblem::kPlainTensorAttribute), "plain_tensor_attribute");
}

} // namespace
} // namespace kan::diagnostics
