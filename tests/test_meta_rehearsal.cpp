// The GPU run rehearsed on the meta device: every planted device bug of the TorchScript fixtures
// (tests/reference/torchscript/bugs, made by tools/torchscript-reference/bug_models.py) named
// with its source line, nothing in the clean models, and kanbench's own models rehearse clean.

#include "cli_runner.h"
#include "test_util.h"

#include "kan/diagnostics/audit_record.h"
#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/meta_rehearsal.h"
#include "kan/diagnostics/operation_trace.h"
#include "kan/nn/trace_scope.h"
#include "kan/results/results_io.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/pykan.h"
#include "kan/train/fit.h"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

namespace kan::diagnostics {
namespace {

const std::string kBugs = std::string(KAN_TORCHSCRIPT_REFERENCE_DIR) + "/bugs";

std::vector<nlohmann::json> bug_fixtures() {
  std::ifstream in(kBugs + "/manifest.json");
  return nlohmann::json::parse(in).get<std::vector<nlohmann::json>>();
}

// The trace problems that name each kind of planted bug at its line.
const std::map<std::string, std::set<std::string>> kExpectedProblems = {
    {"factory_no_device", {"created_on_wrong_device"}},
    {"plain_tensor_attribute", {"mixed_devices"}},
    {"cpu_call", {"host_device_copy"}},
    {"item_call", {"host_synchronization"}},
    // TorchScript's torch.tensor([...]) makes its tensor below the dispatcher: the index_select
    // that mixes it in is what a GPU run refuses, on the same line.
    {"cpu_index", {"mixed_devices"}},
};

Dataset meta_data(const Model& model) {
  const auto meta = torch::TensorOptions().dtype(model.dtype()).device(torch::kMeta);
  Dataset data;
  data.train_input = torch::rand({16, model.inputs()}, meta);
  data.test_input = torch::rand({4, model.inputs()}, meta);
  data.train_label = torch::rand({16, model.outputs()}, meta);
  data.test_label = torch::rand({4, model.outputs()}, meta);
  return data;
}

// One Adam step of kan::fit, traced, inside a rehearsal; the model is opened (on the CPU, then
// moved) inside it as the audit does.
TraceReport rehearse_fixture(const nlohmann::json& entry) {
  MetaRehearsal rehearsal;
  auto model = open_model(kBugs + "/" + entry["file"].get<std::string>(),
                          ModelFileOptions()
                              .device(torch::kMeta)
                              .trust_torchscript(true)
                              .inputs(entry["inputs"].get<int64_t>()));
  EXPECT_EQ(model->device(), torch::Device(torch::kMeta));
  const auto data = meta_data(*model);
  return audited_fit(*model, data, FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(1)).trace;
}

TEST(MetaRehearsal, NamesEveryPlantedBugAtItsLineAndNothingInTheCleanModels) {
  for (const auto& entry : bug_fixtures()) {
    const std::string kind = entry["kind"];
    SCOPED_TRACE(kind);
    const auto report = rehearse_fixture(entry);
    if (!entry["is_bug"].get<bool>()) {
      EXPECT_TRUE(report.clean()) << report.to_text();
      continue;
    }
    const std::string line = "bug_models.py:" + std::to_string(entry["line"].get<int>());
    std::set<std::string> problems_at_line;
    for (const auto& f : report.findings) {
      if (f.source.size() >= line.size() &&
          f.source.compare(f.source.size() - line.size(), line.size(), line) == 0)
        problems_at_line.insert(f.problem);
    }
    for (const auto& problem : kExpectedProblems.at(kind))
      EXPECT_TRUE(problems_at_line.count(problem)) << problem << "\n" << report.to_text();
  }
}

TEST(MetaRehearsal, FindingsNameModulePhaseOperationAndFix) {
  for (const auto& entry : bug_fixtures()) {
    if (entry["kind"] != "item_call")
      continue;
    const auto report = rehearse_fixture(entry);
    ASSERT_FALSE(report.findings.empty());
    const auto& f = report.findings.front();
    EXPECT_EQ(f.problem, "host_synchronization") << report.to_text();
    EXPECT_EQ(f.module, "model");
    EXPECT_EQ(f.phase, "forward");
    EXPECT_EQ(f.tensor, "aten::item in model");
    EXPECT_FALSE(f.fix.empty());
    EXPECT_NE(f.message.find("went on with 0"), std::string::npos) << f.message;
  }
}

// A module that keeps its own reference to its parameter sees it moved, as on a GPU: the
// rehearsal's move is in place, not a replacement.
TEST(MetaRehearsal, MovesModuleTensorsInPlaceLikeCuda) {
  MetaRehearsal rehearsal;
  torch::nn::Linear linear(3, 2);
  const auto kept = linear->weight;
  linear->to(torch::kMeta);
  EXPECT_TRUE(kept.is_meta());
  EXPECT_TRUE(linear->weight.is_meta());
  EXPECT_TRUE(linear->weight.is_same(kept));
}

TEST(MetaRehearsal, GoesOnPastMetaLimits) {
  MetaRehearsal rehearsal;
  const auto x = torch::ones({4, 3}).to(torch::kMeta);
  // index_select has no meta kernel in LibTorch: its shape comes from the CPU kernel.
  const auto picked = x.index_select(1, torch::arange(2).to(torch::kMeta));
  EXPECT_TRUE(picked.is_meta());
  EXPECT_EQ(picked.sizes(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(x.sum().item<double>(), kSubstitutedValue);
  EXPECT_TRUE(x.sum().gt(0).item<bool>());
  const auto host = x.cpu();
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_EQ(host.sum().item<double>(), 0.0);
  // A host tensor meeting a meta one is moved, so the rehearsal goes on.
  const auto offset = torch::ones({3});
  EXPECT_TRUE((x + offset).is_meta());
  EXPECT_TRUE(offset.is_meta());
  EXPECT_TRUE(MetaRehearsal::active());
}

TEST(MetaRehearsal, EndsWithItsScope) {
  { MetaRehearsal rehearsal; }
  EXPECT_FALSE(MetaRehearsal::active());
  const auto x = torch::ones({2}).to(torch::kMeta);
  EXPECT_THROW((void)x.sum().item<double>(), c10::Error);
}

// kanbench's own models, trained as the audit trains them (LBFGS with a grid update, Adam),
// rehearse clean.
TEST(MetaRehearsal, KanbenchModelsRehearseClean) {
  for (auto opt : {Optimizer::kLBFGS, Optimizer::kAdam}) {
    for (int which = 0; which < 2; ++which) {
      SCOPED_TRACE(to_string(opt) + (which == 0 ? " kan" : " mlp"));
      MetaRehearsal rehearsal;
      std::shared_ptr<Model> model;
      if (which == 0)
        model = KAN(KANOptions({2, 3, 1}).device(torch::kMeta)).ptr();
      else
        model = MLP(MLPOptions({2, 8, 1}).device(torch::kMeta)).ptr();
      const auto data = meta_data(*model);
      const auto result = audited_fit(*model, data, FitOptions().opt(opt).steps(2), 2);
      EXPECT_TRUE(result.trace.clean()) << result.trace.to_text();
      EXPECT_TRUE(result.audit.clean()) << result.audit.to_text();
      EXPECT_GT(result.trace.summary.operations, 20);
    }
  }
}

TEST(MetaRehearsal, PykanCheckpointsRehearseClean) {
  for (const std::string name : {"plain", "mult", "formula_mult"}) {
    SCOPED_TRACE(name);
    MetaRehearsal rehearsal;
    auto model = load_pykan(test::reference_checkpoint(name), torch::kMeta);
    const auto data = meta_data(*model);
    const auto result =
        audited_fit(*model, data, FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(1));
    EXPECT_TRUE(result.trace.clean()) << result.trace.to_text();
  }
}

// A kanbench KAN whose second layer's grid a .to() missed, rehearsed as `audit --device meta`
// does: the static audit names the tensor, and the layer's own check stops the step with the
// error a GPU run would raise, naming both devices.
TEST(MetaRehearsal, FindsAKanLayerThatStayedBehind) {
  MetaRehearsal rehearsal;
  KAN model(KANOptions({2, 3, 1}).device(torch::kMeta));
  auto grid = model->layer(1)->grid;
  grid.set_data(torch::zeros(grid.sizes(), grid.options().device(torch::kCPU)));
  ASSERT_TRUE(model->layer(1)->grid.device().is_cpu());
  const auto data = meta_data(*model);
  const auto audit = DeviceAudit(torch::kMeta).module(model->module()).dataset(data).report();
  ASSERT_EQ(audit.findings.size(), 1u) << audit.to_text();
  EXPECT_EQ(audit.findings.front().tensor, "model.layers.1.grid");
  try {
    audited_fit(*model, data, FitOptions().opt(Optimizer::kAdam).update_grid(false).steps(1));
    ADD_FAILURE() << "a layer on another device than its input trained";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("meta"), std::string::npos) << message;
    EXPECT_NE(message.find("cpu"), std::string::npos) << message;
  }
}

// A kanbench module with the classic bug, found on the product path with its submodule.
struct MakesOffsetOnHostImpl : torch::nn::Module {
  MakesOffsetOnHostImpl() { inner = register_module("inner", torch::nn::Linear(2, 1)); }
  torch::Tensor forward(const torch::Tensor& x) {
    ModuleScope scope("inner");
    return inner(x) + torch::ones({x.size(0), 1}); // the bug: no device
  }
  torch::nn::Linear inner{nullptr};
};

TEST(MetaRehearsal, FindsABrokenModuleWithItsPath) {
  MetaRehearsal rehearsal;
  auto module = std::make_shared<MakesOffsetOnHostImpl>();
  module->to(torch::kMeta);
  const auto x = torch::rand({8, 2}).to(torch::kMeta);
  const auto report = trace_operations(torch::kMeta, [&] {
    PhaseScope phase(Phase::kForward);
    module->forward(x).sum().backward();
  });
  std::set<std::string> problems;
  for (const auto& f : report.findings) {
    if (f.module == "model.inner")
      problems.insert(f.problem);
  }
  EXPECT_TRUE(problems.count("created_on_wrong_device")) << report.to_text();
  EXPECT_TRUE(problems.count("mixed_devices")) << report.to_text();
  for (const auto& p : module->parameters())
    EXPECT_TRUE(p.grad().is_meta()); // the backward ran to the end
}

} // namespace
} // namespace kan::diagnostics

namespace kan::diagnostics {
namespace {

std::string bug_file(const std::string& name) {
  return kBugs + "/" + name + ".pt";
}

bool has_finding(const nlohmann::json& findings, const std::string& stage,
                 const std::string& line) {
  for (const auto& f : findings) {
    const std::string source = f.value("source", "");
    if (f.value("stage", "") == stage && source.size() >= line.size() &&
        source.compare(source.size() - line.size(), line.size(), line) == 0)
      return true;
  }
  return false;
}

// The README's CI gate: exit 1 on a planted bug, named by both the rehearsal and the static check,
// in audit.json, which the strict reader reads back; exit 0 on the clean model.
TEST(MetaRehearsalCommands, AuditOnMetaIsACiGate) {
  test::TempDir dir("kan_meta_audit");
  const auto json = dir / "audit.json";
  const auto buggy =
      test::run_kanbench("audit --device meta --model " + bug_file("factory_no_device") +
                         " --trust-torchscript --inputs 2 --json " + json);
  EXPECT_EQ(buggy.exit_code, 1) << buggy.output;
  EXPECT_NE(buggy.output.find("rehearsal:"), std::string::npos);
  const auto doc = nlohmann::json::parse(std::ifstream(json));
  EXPECT_TRUE(has_finding(doc["findings"], "trace", "bug_models.py:53")) << doc["findings"].dump(1);
  EXPECT_TRUE(has_finding(doc["findings"], "graph", "bug_models.py:53"));
  EXPECT_EQ(doc["config"]["rehearsal"], true);
  const auto record = read_audit_record(json);
  ASSERT_TRUE(record.graph_check.has_value());
  EXPECT_EQ(record.graph_check->findings.size(), 1u);

  // Its page: the findings with their source lines.
  const auto report = test::run_kanbench("report " + json + " -o " + dir / "audit.html");
  EXPECT_EQ(report.exit_code, 0) << report.output;
  std::ifstream html(dir / "audit.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("findings-table"), std::string::npos);
  EXPECT_NE(page.find("bug_models.py:53"), std::string::npos);
  EXPECT_NE(page.find("rehearsed on the meta device"), std::string::npos);

  const auto clean = test::run_kanbench("audit --device meta --model " + bug_file("clean") +
                                        " --trust-torchscript --inputs 2");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  const auto kan = test::run_kanbench("audit --device meta --width 2,3,1");
  EXPECT_EQ(kan.exit_code, 0) << kan.output;
}

TEST(MetaRehearsalCommands, StaticAuditRunsNoStep) {
  test::TempDir dir("kan_static_audit");
  const auto json = dir / "audit.json";
  const auto run = test::run_kanbench("audit --static --model " + bug_file("item_call") +
                                      " --trust-torchscript --inputs 2 --json " + json);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const auto doc = nlohmann::json::parse(std::ifstream(json));
  EXPECT_TRUE(has_finding(doc["findings"], "graph", "bug_models.py:79")) << run.output;
  EXPECT_FALSE(doc.contains("after_training"));
  EXPECT_EQ(doc["config"]["trace_steps"], 0);
}

// On a machine without a GPU, `run` rehearses each case's GPU run and fails on its findings.
TEST(MetaRehearsalCommands, RunWithoutAGpuRehearsesOnMeta) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "the run rehearses only where there is no GPU";
  test::TempDir dir("kan_run_rehearsal");
  const auto run = test::run_kanbench(
      "run --suite quick --devices cpu --no-edge-cases --trust-torchscript --inputs 2 --model " +
      bug_file("plain_tensor_attribute") + " --out " + dir / "run");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("rehearsed on the meta device"), std::string::npos) << run.output;
  const auto results = results::read_results_file(dir / "run/results.json");
  ASSERT_TRUE(results.rehearsal.has_value());
  ASSERT_EQ(results.rehearsal->cases.size(), 1u);
  bool at_line = false;
  for (const auto& f : results.rehearsal->cases.front().findings)
    at_line = at_line || f.source.find("bug_models.py:66") != std::string::npos;
  EXPECT_TRUE(at_line) << run.output;
  // The static check's finding comes with the case, stage "graph".
  ASSERT_FALSE(results.cases.empty());
  EXPECT_TRUE(std::any_of(results.cases.front().audit_findings.begin(),
                          results.cases.front().audit_findings.end(),
                          [](const auto& f) { return f.stage == "graph"; }));
  std::ifstream html(dir / "run/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("id=\"rehearsal\""), std::string::npos);
}

} // namespace
} // namespace kan::diagnostics
