// `kanbench fit --model mlp` and the MLP cases of `kanbench run`: what they write, what the strict
// readers read back, and the KAN-only options refused.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/diagnostics/fit_setup.h"
#include "kan/results/fit_record.h"
#include "kan/results/results_io.h"
#include "kan/serialize/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using kan::test::run_kanbench;

using CliMlp = kan::test::ScratchDirTest;

TEST_F(CliMlp, FitWritesAFitJsonTheStrictReaderReadsBack) {
  const auto run = run_kanbench("fit --model mlp --width 2,16,1 --activation tanh --steps 3 "
                                "--train-num 100 --test-num 50 --out " +
                                dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("toy MLP [2, 16, 1] tanh: test RMSE"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("device audit: clean"), std::string::npos) << run.output;

  const auto record = kan::diagnostics::read_fit_record_strict(path("fit.json"));
  EXPECT_EQ(record.schema_version, kan::results::kFitSchemaVersion);
  const auto setup = kan::diagnostics::read_fit_setup(record.config);
  EXPECT_EQ(setup.model_kind, kan::ModelKind::kMLP);
  EXPECT_EQ(setup.mlp.width(), (std::vector<int64_t>{2, 16, 1}));
  EXPECT_EQ(setup.mlp.activation(), kan::Activation::kTanh);
  EXPECT_EQ(setup.mlp.dtype(), torch::kFloat64);
  // (2 + 1) 16 + (16 + 1) 1 parameters; 2 2 16 + 16, 16 tanh, 2 16 + 1 FLOPs.
  ASSERT_TRUE(record.parameters && record.forward_flops);
  EXPECT_EQ(*record.parameters, 65);
  EXPECT_EQ(*record.forward_flops, 80 + 16 * kan::kTanhFlops + 33);
  EXPECT_EQ(record.trained.history.steps.size(), 3u);
  EXPECT_LT(record.trained.test_rmse, 10.0);
  EXPECT_TRUE(record.refined.empty());
  EXPECT_FALSE(record.pruned || record.symbolic);
  EXPECT_EQ(kan::diagnostics::audited_fit_from_json(record.device_audit).trace.summary.steps, 1);
  // An MLP's size follows from its configuration: a file that says otherwise is refused.
  std::ifstream in(path("fit.json"));
  auto json = nlohmann::json::parse(in);
  json["final"]["parameters"] = 64;
  KAN_EXPECT_ERROR(kan::diagnostics::strict_fit_record_from_json(json), "final.parameters", "64",
                   "65");

  // model.pt is the MLP fit.json describes.
  auto model = kan::load_mlp_checkpoint(path("model.pt"));
  EXPECT_EQ(model->parameter_count(), 65);
  EXPECT_EQ(kan::to_json(model->options()), kan::to_json(setup.mlp));

  // kanbench predict evaluates it as it evaluates a KAN.
  std::ofstream(path("samples.csv")) << "0.1,0.2\n-0.5,0.75\n";
  const auto predicted = run_kanbench("predict --model " + path("model.pt") + " --input " +
                                      path("samples.csv") + " --out " + path("predicted.csv"));
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  std::ifstream csv(path("predicted.csv"));
  std::vector<double> values;
  for (double value; csv >> value;)
    values.push_back(value);
  const auto expected = model(torch::tensor({{0.1, 0.2}, {-0.5, 0.75}}, torch::kFloat64)).flatten();
  ASSERT_EQ(values.size(), 2u);
  for (int64_t i = 0; i < 2; ++i)
    EXPECT_EQ(values[static_cast<size_t>(i)], expected[i].item<double>());

  // The fit report reads it too.
  const auto read = kan::results::read_fit_record(path("fit.json"));
  EXPECT_EQ(read.config.model_kind, "mlp");
  EXPECT_EQ(kan::results::model_shape(read.config).activation, "tanh");
  EXPECT_EQ(read.parameters, 65);
  const auto report = run_kanbench("report " + path("fit.json") + " -o " + path("fit.html"));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  std::ifstream html(path("fit.html"));
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("MLP, tanh"), std::string::npos);
  EXPECT_NE(page.find("65 parameters"), std::string::npos);
}

TEST_F(CliMlp, FitsAUsersDataFileAsAKanDoes) {
  std::ofstream(path("classes.csv")) << kan::test::separable_classes_csv(',');
  const auto run =
      run_kanbench("fit --model mlp --width 2,8,2 --data " + path("classes.csv") +
                   " --loss cross-entropy --steps 10 --trace-steps 0 --out " + path("out"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("classes.csv MLP [2, 8, 2] silu: test accuracy"), std::string::npos)
      << run.output;
  const auto record = kan::diagnostics::read_fit_record_strict(path("out/fit.json"));
  EXPECT_EQ(record.config.model_kind, "mlp");
  ASSERT_TRUE(record.config.data);
  EXPECT_EQ(record.config.data->classes, 2);
  EXPECT_GT(record.last().test_accuracy, 0.9); // two linearly separable classes
}

TEST_F(CliMlp, AKansFitJsonRecordsItsSizeToo) {
  const auto run = run_kanbench(
      "fit --width 2,5,1 --grid 3 --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto record = kan::diagnostics::read_fit_record_strict(path("fit.json"));
  EXPECT_EQ(record.config.model_kind, "kan");
  EXPECT_EQ(record.parameters, 2 * 5 * (3 + 3 + 2) + 5 * (3 + 3 + 2));
  EXPECT_EQ(record.forward_flops,
            kan::kan_forward_flops(kan::diagnostics::read_fit_setup(record.config).model));
}

TEST_F(CliMlp, AFitJson20StillReadsAsAKan) {
  const auto run = run_kanbench("fit --width 2,3,1 --steps 1 --train-num 50 --test-num 20 --out " +
                                dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(path("fit.json"));
  auto json = nlohmann::json::parse(in);
  json["schema_version"] = "2.0.0";
  json["config"].erase("model_kind");
  json["final"].erase("parameters");
  json["final"].erase("forward_flops");
  const auto record = kan::diagnostics::strict_fit_record_from_json(json);
  EXPECT_EQ(record.config.model_kind, "kan");
  EXPECT_FALSE(record.parameters);
  // ... and a 2.1 file must say what it holds.
  json["schema_version"] = kan::results::kFitSchemaVersion;
  KAN_EXPECT_ERROR(kan::diagnostics::strict_fit_record_from_json(json), "config.model_kind",
                   "missing");
  json["config"]["model_kind"] = "mlp";
  KAN_EXPECT_ERROR(kan::diagnostics::strict_fit_record_from_json(json), "config.model");
}

TEST_F(CliMlp, KanOnlyOptionsAreRefusedWithOneLineNamingTheOption) {
  const std::string base = "fit --model mlp --steps 1 --train-num 20 --test-num 10 "
                           "--trace-steps 0 --out " +
                           dir_.string() + " ";
  const std::string fit = base + "--width 2,8,1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fit + "--grid 5", "--grid"},
      {fit + "--k 2", "--k"},
      {fit + "--backend reference", "--backend"},
      {fit + "--prune 0.01,0.03", "--prune"},
      {fit + "--refine 5", "--refine"},
      {fit + "--symbolic", "--symbolic"},
      {fit + "--lamb 0.01", "--lamb"},
      {fit + "--lamb-entropy 1", "--lamb-entropy"},
      {fit + "--no-update-grid", "--no-update-grid"},
      {fit + "--affine-trainable", "--affine-trainable"},
      {fit + "--pykan " + path("nothing"), "--pykan"},
      {base + "--width '2,[2,1],1'", "no multiplication nodes"},
      {base + "--width 3,8,1", "function 'toy' has 2 variables"},
      {fit + "--activation gelu", "--activation"},
      {fit + "--model cnn", "--model"},
      {"fit --activation relu --steps 1 --out " + dir_.string(), "--activation"},
  };
  for (const auto& [args, option] : cases) {
    const auto run = run_kanbench(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(option), std::string::npos) << args << "\n" << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << args << "\n"
                                                                         << run.output;
    EXPECT_FALSE(fs::exists(path("model.pt"))) << args;
  }
  // --lamb 0 asks for no regulariser, which an MLP has.
  const auto run = run_kanbench(fit + "--lamb 0");
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(CliMlp, RunHasMlpCasesBesideTheKanOnes) {
  const auto run = run_kanbench("run --suite quick --case toy --case toy-mlp --repeat 1 "
                                "--cv-target 0 --devices cpu --no-edge-cases --out " +
                                dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = kan::results::read_results_file(path("results.json"));
  bool kan = false, mlp = false;
  for (const auto& c : results.cases) {
    ASSERT_TRUE(c.model_kind && c.parameters && c.forward_flops) << c.name;
    EXPECT_EQ(c.status, kan::results::CaseStatus::kOk) << c.name << ": " << c.reason;
    if (c.name == "toy") {
      kan = true;
      EXPECT_EQ(*c.model_kind, "kan");
      EXPECT_EQ(*c.parameters, 150);
      EXPECT_EQ(*c.forward_flops, 625);
    }
    if (c.name == "toy-mlp") {
      mlp = true;
      EXPECT_EQ(*c.model_kind, "mlp");
      // The MLP of the KAN's depth with the parameter count nearest to the KAN's 150.
      EXPECT_EQ(c.config["width"], nlohmann::json({2, 37, 1}));
      EXPECT_EQ(*c.parameters, 149);
      EXPECT_FALSE(c.backend);
      EXPECT_TRUE(c.final_test_rmse);
    }
  }
  EXPECT_TRUE(kan && mlp);
  ASSERT_EQ(results.comparisons.size(), 2u);
  for (const auto& c : results.comparisons)
    EXPECT_EQ(c.parity, kan::results::Parity::kPass) << c.case_name << ": " << c.message;
}

TEST_F(CliMlp, RunRefusesAnUnknownCaseListingTheMlpOnes) {
  const auto run = run_kanbench("run --suite quick --case cnn --out " + dir_.string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("toy-mlp, deep-mlp"), std::string::npos) << run.output;
}

} // namespace
