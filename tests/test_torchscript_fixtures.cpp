// PyTorch KANs of other libraries, scripted or traced by PyTorch and saved (tests/reference/
// torchscript, made by tools/torchscript-reference/generate.py): kanbench's outputs, loss,
// gradients and one Adam step against PyTorch's own, in the library and through the commands.

#include "cli_runner.h"
#include "test_util.h"

#include "kan/data/data_file.h"
#include "kan/diagnostics/operation_trace.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/torch_file.h"
#include "kan/serialize/torchscript.h"
#include "kan/train/fit.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace kan {
namespace {

const std::string kDir = KAN_TORCHSCRIPT_REFERENCE_DIR;

struct Fixture {
  nlohmann::json entry;
  std::map<std::string, torch::Tensor> expected;

  std::string name() const { return entry["name"]; }
  std::string file() const { return kDir + "/" + entry["file"].get<std::string>(); }
  int64_t inputs() const { return entry["inputs"]; }
  bool float64() const { return entry["dtype"] == "float64"; }
  // PyTorch and LibTorch run the same kernels; what differs is the order of a few reductions.
  double tolerance() const { return float64() ? 1e-12 : 1e-6; }
  const torch::Tensor& at(const std::string& key) const { return expected.at(key); }
};

std::vector<Fixture> fixtures() {
  std::ifstream in(kDir + "/manifest.json");
  std::vector<Fixture> all;
  for (const auto& entry : nlohmann::json::parse(in)) {
    Fixture f{entry, {}};
    for (auto& [key, tensor] :
         read_named_tensors(kDir + "/" + entry["expected"].get<std::string>()))
      f.expected[key] = tensor;
    all.push_back(std::move(f));
  }
  return all;
}

std::shared_ptr<Model> open_fixture(const Fixture& f) {
  return open_model(f.file(), ModelFileOptions().trust_torchscript(true).inputs(f.inputs()));
}

TEST(TorchScriptFixtures, ThereIsOneOfEachStyle) {
  std::set<std::string> styles, hows;
  for (const auto& f : fixtures()) {
    styles.insert(f.entry["style"].get<std::string>());
    hows.insert(f.entry["how"].get<std::string>());
  }
  EXPECT_EQ(styles, (std::set<std::string>{"efficient-kan", "fastkan", "chebyshev", "inkan"}));
  EXPECT_EQ(hows, (std::set<std::string>{"script", "trace"}));
}

TEST(TorchScriptFixtures, OutputsLossAndGradientsArePyTorchs) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.name());
    auto model = open_fixture(f);
    EXPECT_EQ(model->dtype(), f.float64() ? torch::kFloat64 : torch::kFloat32);
    EXPECT_EQ(model->outputs(), f.entry["outputs"].get<int64_t>());
    std::vector<std::string> names;
    for (const auto& p : model->module().named_parameters())
      names.push_back(p.key());
    EXPECT_EQ(names, f.entry["parameters"].get<std::vector<std::string>>());

    const auto y = model->forward(f.at("x"));
    EXPECT_LE(test::max_relative_diff(y, f.at("y")), f.tolerance());
    const auto loss = (y - f.at("targets")).pow(2).mean();
    EXPECT_LE(test::max_relative_diff(loss, f.at("loss")), f.tolerance());
    loss.backward();
    for (const auto& p : model->module().named_parameters()) {
      if (!p.value().requires_grad())
        continue;
      SCOPED_TRACE(p.key());
      EXPECT_LE(test::max_relative_diff(p.value().grad(), f.at("grad." + p.key())),
                10 * f.tolerance());
    }
  }
}

TEST(TorchScriptFixtures, OneAdamStepOfFitIsTorchOptimAdams) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.name());
    auto model = open_fixture(f);
    Dataset data;
    data.train_input = data.test_input = f.at("x");
    data.train_label = data.test_label = f.at("targets");
    fit(*model, data, FitOptions().opt(Optimizer::kAdam).lr(1e-2).steps(1));
    for (const auto& p : model->module().named_parameters()) {
      SCOPED_TRACE(p.key());
      // Adam's first step moves each element by about lr: compared on that scale.
      const auto& after = f.at("adam." + p.key());
      EXPECT_LE(test::max_abs_diff(p.value(), after), 1e-2 * 10 * f.tolerance());
    }
  }
}

TEST(TorchScriptFixtures, TracedOperationsAreAttributedToSubmodules) {
  const auto fixture = fixtures().front(); // efficient_kan: layers.0 and layers.1, KANLinear
  ASSERT_EQ(fixture.name(), "efficient_kan");
  auto model = open_fixture(fixture);
  const auto report = diagnostics::trace_operations(
      torch::kCPU, [&] { model->forward(fixture.at("x")).sum().backward(); });
  std::set<std::string> modules;
  for (const auto& op : report.operations)
    modules.insert(op.module);
  EXPECT_TRUE(modules.count("model.0")) << report.to_text();
  EXPECT_TRUE(modules.count("model.1")) << report.to_text();
  EXPECT_TRUE(modules.count("model.0.base_activation")) << report.to_text();
}

class TorchScriptCommands : public test::ScratchDirTest {
protected:
  // The fixture's inputs (and targets) as a CSV file with a header.
  std::string write_csv(const Fixture& f, bool with_targets) {
    const auto x = f.at("x").to(torch::kFloat64), t = f.at("targets").to(torch::kFloat64);
    const auto file = path(f.name() + (with_targets ? "_data.csv" : "_x.csv"));
    std::ofstream out(file);
    for (int64_t j = 0; j < x.size(1); ++j)
      out << (j ? "," : "") << "x" << j;
    if (with_targets)
      for (int64_t j = 0; j < t.size(1); ++j)
        out << ",t" << j;
    out << "\n";
    char number[32];
    for (int64_t i = 0; i < x.size(0); ++i) {
      for (int64_t j = 0; j < x.size(1); ++j) {
        std::snprintf(number, sizeof number, "%.17g", x[i][j].item<double>());
        out << (j ? "," : "") << number;
      }
      if (with_targets)
        for (int64_t j = 0; j < t.size(1); ++j) {
          std::snprintf(number, sizeof number, "%.17g", t[i][j].item<double>());
          out << "," << number;
        }
      out << "\n";
    }
    return file;
  }
};

TEST_F(TorchScriptCommands, PredictGivesPyTorchsOutputs) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.name());
    const auto x = write_csv(f, false);
    const auto refused = test::run_kanbench("predict --model " + f.file() + " --input " + x +
                                            " --out " + path("y.csv"));
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("--trust-torchscript"), std::string::npos) << refused.output;
    const auto run = test::run_kanbench("predict --trust-torchscript --model " + f.file() +
                                        " --input " + x + " --out " + path("y.csv"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    RowReader rows(path("y.csv"));
    const auto y = rows.next(1 << 20);
    // The CSV's inputs are the fixture's to 17 digits: float32 models see the same values.
    EXPECT_LE(test::max_relative_diff(y, f.at("y")), f.tolerance());
  }
}

TEST_F(TorchScriptCommands, FitTrainsAndWritesBackWhatTorchJitLoadReads) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.name());
    const auto data = write_csv(f, true);
    const auto out = path(f.name() + "_fit");
    const auto targets = f.at("targets").size(1) == 1 ? std::string("t0") : std::string("t0,t1");
    const auto run = test::run_kanbench(
        "fit --trust-torchscript --model " + f.file() + " --data " + data + " --targets " +
        targets + " --test-fraction 0.25 --opt adam --lr 0.01 --steps 1 --out " + out);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto fit_json = nlohmann::json::parse(std::ifstream(out + "/fit.json"));
    EXPECT_EQ(fit_json["config"]["model_kind"], "torchscript");
    auto trained = open_model(out + "/model.pt",
                              ModelFileOptions().trust_torchscript(true).inputs(f.inputs()));
    EXPECT_EQ(trained->kind(), ModelKind::kTorchScript);
    // Trained on three quarters of the samples: the step moved every trainable parameter.
    auto initial = open_fixture(f);
    const auto before = initial->module().named_parameters();
    for (const auto& p : trained->module().named_parameters()) {
      if (p.value().requires_grad()) {
        EXPECT_FALSE(torch::equal(p.value(), before[p.key()])) << p.key();
      }
    }
  }
}

TEST_F(TorchScriptCommands, RunAndSweepTimeEveryFixture) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.name());
    const auto run = test::run_kanbench("run --suite quick --devices cpu --trust-torchscript "
                                        "--model " +
                                        f.file() + " --inputs " + std::to_string(f.inputs()) +
                                        " --out " + path("run"));
    const auto results = nlohmann::json::parse(std::ifstream(path("run/results.json")));
    ASSERT_FALSE(results["cases"].empty()) << run.output;
    for (const auto& c : results["cases"]) {
      EXPECT_EQ(c["status"], "ok") << c.dump();
      EXPECT_EQ(c["model_kind"], "torchscript");
      EXPECT_FALSE(c["epoch_seconds"].empty());
    }
    for (const auto& c : results["comparisons"])
      EXPECT_EQ(c["parity"], "pass") << c.dump();
    // The model's own edge cases. An empty batch is the model's to handle: efficient-kan's
    // reshape(-1) cannot, and the run says so (exit 1); one sample and 2^16 samples must run.
    ASSERT_EQ(results["edge_cases"].size(), 3u);
    bool all_pass = true;
    for (const auto& e : results["edge_cases"]) {
      all_pass = all_pass && e["status"] == "pass";
      if (e["name"] != "empty_input") {
        EXPECT_EQ(e["status"], "pass") << e.dump();
      } else if (e["status"] != "pass") {
        EXPECT_NE(e["message"].get<std::string>().find("forward failed"), std::string::npos);
      }
    }
    EXPECT_EQ(run.exit_code, all_pass ? 0 : 1) << run.output;

    const auto sweep = test::run_kanbench("sweep --suite quick --devices cpu --batch 16,64 "
                                          "--repeat 2 --trust-torchscript --model " +
                                          f.file() + " --inputs " + std::to_string(f.inputs()) +
                                          " --out " + path("sweep"));
    EXPECT_EQ(sweep.exit_code, 0) << sweep.output;
    EXPECT_NE(sweep.output.find("samples/s"), std::string::npos) << sweep.output;
  }
}

TEST_F(TorchScriptCommands, AuditNamesAPlainTensorAttribute) {
  const auto clean =
      test::run_kanbench("audit --trust-torchscript --model " + kDir +
                         "/efficient_kan.pt --inputs 3 --json " + path("clean.json"));
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  const auto planted = test::run_kanbench("audit --trust-torchscript --model " + kDir +
                                          "/bugs/plain_tensor_attribute.pt --inputs 2 --json " +
                                          path("planted.json"));
  EXPECT_EQ(planted.exit_code, 1) << planted.output;
  EXPECT_NE(planted.output.find("not_module_state"), std::string::npos) << planted.output;
  const auto record = nlohmann::json::parse(std::ifstream(path("planted.json")));
  EXPECT_EQ(record["config"]["model_kind"], "torchscript");
}

} // namespace
} // namespace kan
