// pykan checkpoints on the command line: import-pykan, export-pykan, fit --pykan, audit --pykan.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/serialize/checkpoint.h"
#include "kan/serialize/pykan.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;

using CliPykan = kan::test::ScratchDirTest;

kan::test::CliRun kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
}

nlohmann::json reference_case(const std::string& name) {
  const auto reference = kan::test::load_reference("pykan_checkpoints.json");
  for (const auto& c : reference["cases"])
    if (c["name"] == name)
      return c;
  throw std::runtime_error("no case " + name);
}

bool one_line_error(const kan::test::CliRun& run) {
  return run.exit_code == 2 && run.output.rfind("kanbench: error: ", 0) == 0 &&
         run.output.find('\n') == run.output.size() - 1;
}

TEST_F(CliPykan, ImportWritesACheckpointWithPykansOutputs) {
  const auto run =
      kanbench("import-pykan " + kan::test::reference_checkpoint("mult") + " --out " + path("imp"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("width 3,[2,2],[1,1],1, grid 4, k 3"), std::string::npos) << run.output;
  auto model = kan::load_checkpoint(path("imp/model.pt"));
  const auto c = reference_case("mult");
  const auto y = kan::test::to_tensor(c["y"]);
  const auto diff = kan::test::max_abs_diff(model(kan::test::to_tensor(c["x"])), y);
  EXPECT_LE(diff, 1e-12 * y.abs().max().item<double>());
}

TEST_F(CliPykan, ExportedCheckpointLoadsAsTheSameModel) {
  ASSERT_EQ(kanbench("fit --width 2,[2,1],1 --mult-arity 3 --affine-trainable --steps 2 "
                     "--train-num 50 --test-num 10 --trace-steps 0 --out " +
                     dir_.string())
                .exit_code,
            0);
  const auto run = kanbench("export-pykan " + path("model.pt") + " " + path("exported"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("KAN.loadckpt('" + path("exported") + "')"), std::string::npos)
      << run.output;
  auto original = kan::load_checkpoint(path("model.pt"));
  auto exported = kan::load_pykan(path("exported"));
  auto parameters = exported->named_parameters();
  for (const auto& p : original->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), parameters[p.key()])) << p.key();
  EXPECT_EQ(exported->options().node_arity(), original->options().node_arity());
  EXPECT_EQ(exported->options().mult_arity(), 3);
  EXPECT_TRUE(exported->options().affine_trainable());
}

TEST_F(CliPykan, FitStartsFromAPykanCheckpoint) {
  const auto run = kanbench("fit --pykan " + kan::test::reference_checkpoint("plain") +
                            " --steps 2 --no-update-grid --train-num 50 --test-num 10 "
                            "--trace-steps 0 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("float64"), std::string::npos) << run.output;
  std::ifstream in(path("fit.json"));
  const auto fit = nlohmann::json::parse(in);
  EXPECT_EQ(fit["config"]["initial_model"], kan::test::reference_checkpoint("plain"));
  EXPECT_EQ(fit["config"]["model"]["grid"], 5);
  EXPECT_EQ(fit["config"]["model"]["dtype"], "float64");
  // Without grid updates the grid stays pykan's (updated from samples there), not a new one.
  auto pykan = kan::load_pykan(kan::test::reference_checkpoint("plain"));
  auto trained = kan::load_checkpoint(path("model.pt"));
  EXPECT_TRUE(torch::equal(trained->layer(0)->grid, pykan->layer(0)->grid));
  EXPECT_FALSE(torch::equal(trained->layer(0)->coef, pykan->layer(0)->coef));

  const auto as_float32 = kanbench("fit --pykan " + kan::test::reference_checkpoint("plain") +
                                   " --dtype float32 --steps 1 --train-num 20 --test-num 10 "
                                   "--trace-steps 0 --out " +
                                   path("f32"));
  ASSERT_EQ(as_float32.exit_code, 0) << as_float32.output;
  EXPECT_EQ(kan::load_checkpoint(path("f32/model.pt"))->dtype(), torch::kFloat32);
}

TEST_F(CliPykan, AuditOfAPykanCheckpoint) {
  const auto run = kanbench("audit --pykan " + kan::test::reference_checkpoint("mult") +
                            " --trace-steps 1 --samples 32 --opt adam");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("audit: clean on cpu"), std::string::npos) << run.output;
}

TEST_F(CliPykan, BadInputFailsWithOneLine) {
  auto run = kanbench("import-pykan " + path("absent") + " --out " + path("o"));
  EXPECT_TRUE(one_line_error(run)) << run.output;
  EXPECT_NE(run.output.find("absent_config.yml"), std::string::npos) << run.output;

  // A symbolic edge imports (its function kept); an unknown function name: test_pykan.cpp.
  run = kanbench("import-pykan " + kan::test::reference_checkpoint("symbolic") + " --out " +
                 path("s"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(kan::load_checkpoint(path("s/model.pt"))->layer(0)->symbolic_name(1, 2), "sin");

  run = kanbench("export-pykan " + path("absent.pt") + " " + path("x"));
  EXPECT_TRUE(one_line_error(run)) << run.output;
  EXPECT_NE(run.output.find("absent.pt"), std::string::npos) << run.output;

  run = kanbench("fit --pykan " + kan::test::reference_checkpoint("mult") + " --steps 1 --out " +
                 path("o"));
  EXPECT_TRUE(one_line_error(run)) << run.output;
  EXPECT_NE(run.output.find("the --pykan model starts with 3 inputs"), std::string::npos)
      << run.output;

  run = kanbench("fit --pykan " + kan::test::reference_checkpoint("plain") +
                 " --width 2,3,1 --out " + path("o"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("excludes --width"), std::string::npos) << run.output;

  run =
      kanbench("audit --pykan " + kan::test::reference_checkpoint("plain") + " --checkpoint x.pt");
  EXPECT_EQ(run.exit_code, 2) << run.output;
}

} // namespace
