// `kanbench fit --data`: the pipeline on a user's data file (kan::load_dataset), for new models
// and pykan's, regression and classification, and the errors that stop it before any training.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/data/dataset.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/nn/network.h"
#include "kan/serialize/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

namespace {

namespace fs = std::filesystem;

using kan::test::CliRun;

CliRun kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
}

// Inputs and targets side by side as CSV at full precision: the file holds exactly these doubles.
std::string csv_of(const torch::Tensor& inputs, const torch::Tensor& targets,
                   const std::string& header) {
  const auto rows = torch::cat({inputs, targets}, 1).to(torch::kFloat64).contiguous();
  std::string text = header + "\n";
  char number[32];
  for (int64_t r = 0; r < rows.size(0); ++r) {
    for (int64_t c = 0; c < rows.size(1); ++c) {
      std::snprintf(number, sizeof number, "%.17g", rows[r][c].item<double>());
      text += (c ? "," : "") + std::string(number);
    }
    text += "\n";
  }
  return text;
}

class FitData : public kan::test::ScratchDirTest {
protected:
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }
  bool wrote_outputs() const {
    return fs::exists(dir_ / "out" / "fit.json") || fs::exists(dir_ / "out" / "model.pt");
  }
  CliRun fit(const std::string& args) const {
    return kanbench("fit " + args + " --seed 0 --trace-steps 0 --out " + path("out"));
  }
};

// The function's own samples written to CSV train exactly as --function does: the file is the
// data, nothing else changes.
TEST_F(FitData, ACsvOfTheFunctionsSamplesTrainsAsTheFunction) {
  const auto& toy = kan::reference_function("toy");
  const auto data = kan::create_dataset(toy.f, kan::DatasetOptions(toy.n_var)
                                                   .ranges(toy.ranges)
                                                   .train_num(120)
                                                   .test_num(40)
                                                   .seed(0)
                                                   .dtype(torch::kFloat64));
  write("train.csv", csv_of(data.train_input, data.train_label, "x1,x2,y"));
  write("test.csv", csv_of(data.test_input, data.test_label, "x1,x2,y"));
  const std::string common = " --width 2,3,1 --grid 3 --steps 4 --refine 5 --seed 0 "
                             "--trace-steps 0 --out ";

  const auto by_function =
      kanbench("fit --function toy --train-num 120 --test-num 40" + common + path("function"));
  ASSERT_EQ(by_function.exit_code, 0) << by_function.output;
  const auto by_file = kanbench("fit --data " + path("train.csv") + " --test-data " +
                                path("test.csv") + common + path("file"));
  ASSERT_EQ(by_file.exit_code, 0) << by_file.output;
  EXPECT_NE(by_file.output.find("data: " + path("train.csv") + ": CSV"), std::string::npos)
      << by_file.output;

  const auto function = kan::diagnostics::read_fit_record_strict(path("function/fit.json"));
  const auto file = kan::diagnostics::read_fit_record_strict(path("file/fit.json"));
  EXPECT_EQ(file.last().test_rmse, function.last().test_rmse);
  EXPECT_EQ(file.trained.history.steps.back().train_loss,
            function.trained.history.steps.back().train_loss);
  EXPECT_TRUE(function.config.function == "toy" && !function.config.data);
  ASSERT_TRUE(file.config.data);
  EXPECT_EQ(file.config.function, "");
  EXPECT_EQ(file.config.data->format, "csv");
  EXPECT_EQ(file.config.data->inputs, (std::vector<std::string>{"x1", "x2"}));
  EXPECT_EQ(file.config.data->targets, (std::vector<std::string>{"y"}));
  EXPECT_EQ(file.config.data->test_data, std::optional(path("test.csv")));
  EXPECT_EQ(file.config.train_num, 120);
  EXPECT_EQ(file.config.test_num, 40);
}

// Columns by header name, a seeded split of the rest, a schedule of grids: the record says which
// columns and which split, and the model reads the chosen inputs.
TEST_F(FitData, ChosenColumnsAndASplitAreRecorded) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::string text = "noise,b,a,target\n";
  for (int i = 0; i < 200; ++i) {
    const double a = uniform(random), b = uniform(random);
    char row[128];
    std::snprintf(row, sizeof row, "%.17g,%.17g,%.17g,%.17g\n", uniform(random), b, a,
                  std::sin(2 * a) + b * b);
    text += row;
  }
  write("data.csv", text);
  const auto run = fit("--data " + path("data.csv") +
                       " --inputs a,b --targets target --test-fraction 0.25 --width 2,4,1 "
                       "--grid 3 --steps 10 --refine 5,8");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("data.csv G=8: test RMSE"), std::string::npos) << run.output;
  const auto record = kan::diagnostics::read_fit_record_strict(path("out/fit.json"));
  ASSERT_TRUE(record.config.data);
  EXPECT_EQ(record.config.data->inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(record.config.data->targets, (std::vector<std::string>{"target"}));
  EXPECT_EQ(record.config.data->test_fraction, 0.25);
  EXPECT_EQ(record.config.train_num, 150);
  EXPECT_EQ(record.config.test_num, 50);
  ASSERT_EQ(record.refined.size(), 2u);
  // A smooth function of the two chosen columns: the finest grid fits it well.
  EXPECT_LT(record.last().test_rmse, 0.05);
  EXPECT_EQ(kan::load_checkpoint(path("out/model.pt"))->options().grid(), 8);
}

TEST_F(FitData, ClassifiesWithCrossEntropy) {
  write("classes.csv", kan::test::separable_classes_csv(';'));
  const auto run =
      fit("--data " + path("classes.csv") + " --loss cross-entropy --width 2,2,2 --steps 5");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("classes.csv G=3: test accuracy"), std::string::npos) << run.output;
  const auto record = kan::diagnostics::read_fit_record_strict(path("out/fit.json"));
  EXPECT_EQ(kan::diagnostics::read_fit_setup(record.config).fit.loss(), kan::Loss::kCrossEntropy);
  EXPECT_EQ(record.config.data->classes, 2);
  EXPECT_TRUE(std::isnan(record.last().test_rmse));
  EXPECT_GT(record.last().test_accuracy, 0.9); // two linearly separable classes
}

// pykan's model, the user's data: trained from pykan's parameters on the file's rows.
TEST_F(FitData, APykanModelTrainsOnTheUsersData) {
  std::string text = "x,y,z\n";
  for (int i = 0; i < 50; ++i)
    text += std::to_string(i / 50.0 - 0.5) + "," + std::to_string(0.3 - i / 100.0) + "," +
            std::to_string(i / 25.0) + "\n";
  write("data.csv", text);
  const auto run = fit("--pykan " + kan::test::reference_checkpoint("plain") + " --data " +
                       path("data.csv") + " --steps 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto record = kan::diagnostics::read_fit_record_strict(path("out/fit.json"));
  EXPECT_EQ(record.config.initial_model, kan::test::reference_checkpoint("plain"));
  ASSERT_TRUE(record.config.data);
  EXPECT_EQ(record.config.train_num, 40);
}

TEST_F(FitData, BadDataOrOptionsStopBeforeTraining) {
  write("xyz.csv", "x,y,z\n0.1,0.2,0.3\n0.4,0.5,0.6\n0.7,0.8,0.9\n1,2,3\n4,5,6\n");
  write("labels.csv", "0.1,0.2,0\n0.4,0.5,1\n0.7,0.8,2\n0.1,0.5,1\n0.3,0.3,0\n");
  write("ragged.csv", "1,2,3\n4,5\n");
  const std::string xyz = "--data " + path("xyz.csv");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {xyz + " --width 3,2,1", "--width 3,2,1: " + path("xyz.csv") +
                                   ": the model takes 3 inputs and gives 1 output, but "
                                   "the data has 2 input columns"},
      {"--data " + path("labels.csv") + " --loss cross-entropy --width 2,2,2",
       "gives 2 outputs, but the data has 2 input columns and 3 classes"},
      {"--data " + path("ragged.csv"), "ragged.csv:2"},
      {xyz + " --inputs w", "has no column 'w' (its header, line 1, names x, y, z)"},
      {xyz + " --test-fraction 1.5", "test fraction"},
      {"--function toy --loss cross-entropy", "--loss cross-entropy needs --data"},
      {"--inputs 0", "--inputs needs --data"},
      {xyz + " --function toy", "--function excludes --data"},
      {xyz + " --train-num 10", "--data excludes --train-num"},
  };
  for (const auto& [args, expected] : cases) {
    const auto run = fit(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << args << "\n" << run.output;
    EXPECT_FALSE(wrote_outputs()) << args;
  }
}

} // namespace
