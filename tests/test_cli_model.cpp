// The commands on a user's own model: `kanbench predict` and `kanbench run --model`.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/nn/network.h"
#include "kan/serialize/checkpoint.h"
#include "kan/serialize/torch_file.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace {

namespace fs = std::filesystem;

using kan::KAN;
using kan::KANOptions;
using kan::test::CliRun;

CliRun kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

int64_t lines_of(const std::string& text) {
  return std::count(text.begin(), text.end(), '\n');
}

// Samples as CSV at full precision, so that the file holds exactly these doubles.
std::string csv_of(const torch::Tensor& x, const std::string& header = "") {
  std::string text = header.empty() ? "" : header + "\n";
  const auto values = x.to(torch::kFloat64).contiguous();
  char number[32];
  for (int64_t r = 0; r < values.size(0); ++r) {
    for (int64_t c = 0; c < values.size(1); ++c) {
      std::snprintf(number, sizeof number, "%.17g", values[r][c].item<double>());
      text += (c ? "," : "") + std::string(number);
    }
    text += "\n";
  }
  return text;
}

// A CSV of numbers (no header) as a (rows, columns) float64 tensor.
torch::Tensor parse_csv(const std::string& text) {
  std::vector<torch::Tensor> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<double> row;
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, ',');)
      row.push_back(std::stod(field));
    rows.push_back(torch::tensor(row, torch::kFloat64));
  }
  return torch::stack(rows);
}

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs() / b.abs().clamp_min(1e-300)).max().item<double>();
}

// The largest difference relative to the largest |b|: for outputs that are sums of thousands of
// terms, where an output near zero makes the per-element relative difference meaningless.
double normwise_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item<double>();
}

class Predict : public kan::test::ScratchDirTest {
protected:
  // A float64 model with every parameter away from its initial value, saved as model.pt.
  KAN saved_model(std::vector<int64_t> width = {2, 3, 1}) {
    KAN model(KANOptions(std::move(width)).grid(4).seed(3).dtype(torch::kFloat64));
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters())
        p.add_(0.1 * torch::randn_like(p));
    }
    kan::save_checkpoint(model, path("model.pt"));
    return model;
  }

  CliRun predict(const std::string& input_text, const std::string& extra = "") {
    write_text(dir_ / "x.csv", input_text);
    return kanbench("predict --model " + path("model.pt") + " --input " + path("x.csv") +
                    " --out " + path("y.csv") + " " + extra);
  }
};

TEST_F(Predict, OutputsAreTheModelsForwardAtFullPrecision) {
  auto model = saved_model();
  // Inside the grid, on its edges and outside it.
  const auto x = torch::rand({500, 2}, torch::kFloat64) * 3 - 1.5;
  const auto run = predict(csv_of(x));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("predicted 500 samples"), std::string::npos) << run.output;
  const auto y = parse_csv(read_text(dir_ / "y.csv"));
  const auto expected = model->forward(x).detach();
  ASSERT_EQ(y.sizes(), expected.sizes());
  EXPECT_LE(max_relative_difference(y, expected), 1e-15);
}

TEST_F(Predict, ReadsInChunksWhatDoesNotFitInOne) {
  // The widest layer has 3000 nodes: 2^20 / 3000 = 349 samples per chunk, so 1000 take three.
  auto model = saved_model({2, 3000, 1});
  const auto x = torch::rand({1000, 2}, torch::kFloat64) * 2 - 1;
  const auto run = predict(csv_of(x));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto y = parse_csv(read_text(dir_ / "y.csv"));
  // Each output sums 3000 edges, whose order of summation may follow the chunk's size.
  EXPECT_LE(normwise_relative_difference(y, model->forward(x).detach()), 1e-13);
}

TEST_F(Predict, AHeaderLineGivesAHeaderLine) {
  auto model = saved_model({3, 2, 2});
  const auto x = torch::rand({20, 3}, torch::kFloat64);
  // Blanks around values, CRLF line ends and blank lines at the end are accepted too.
  std::string text = csv_of(x, " a , b,c");
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 2))
    text.replace(at, 1, "\r\n");
  const auto run = predict(text + "\n  \n");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto output = read_text(dir_ / "y.csv");
  ASSERT_EQ(output.rfind("y0,y1\n", 0), 0u) << output;
  const auto y = parse_csv(output.substr(6));
  EXPECT_LE(max_relative_difference(y, model->forward(x).detach()), 1e-15);
}

TEST_F(Predict, AnotherDtypeOnRequest) {
  auto model = saved_model();
  const auto x = torch::rand({50, 2}, torch::kFloat64);
  const auto run = predict(csv_of(x), "--dtype float32");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("(float32 on cpu)"), std::string::npos) << run.output;
  const auto y = parse_csv(read_text(dir_ / "y.csv"));
  const auto expected = model->forward(x).detach();
  EXPECT_LE((y - expected).abs().max().item<double>(), 1e-5);
  EXPECT_GT((y - expected).abs().max().item<double>(), 0.0); // really evaluated in float32
}

// Every bad input: exit 2, one line naming the file, the line, the column and the value; the
// previous output stays.
TEST_F(Predict, BadInputIsOneLineNamingLineColumnAndValue) {
  saved_model();
  const std::vector<std::pair<std::string, std::string>> bad{
      {"0.1,0.2\n0.3,abc\n", "x.csv:2:2: not a number (value 'abc')"},
      {"0.1,0.2\n0.3,0.4,0.5\n", "x.csv:2:3: one cell too many: line 1 has 2 cells (value '0.5')"},
      {"0.1,0.2\n0.3\n", "x.csv:2:2: missing cell: the row has 1 cell, line 1 has 2 (row '0.3')"},
      {"0.1,0.2\n0.3,\n", "x.csv:2:2: empty cell (value '')"},
      {"0.1,nan\n", "x.csv:1:2: not a finite number (NaN and Inf are refused) (value 'nan')"},
      {"x,y\n0.1,0.2\n-inf,0\n", "x.csv:3:1 (column 'x'): not a finite number"},
      {"0.1,0.2\n1e999,0\n", "x.csv:2:1: out of the range of a double (value '1e999')"},
      {"0.1,0.2,0.3\n", "x.csv:1: 3 values per row, but the model takes 2 inputs"},
      {"x,y,z\n0.1,0.2\n", "x.csv:1: the header names 3 columns, but the model takes 2 inputs"},
      {"0.1,0.2\n\n0.3,0.4\n", "x.csv:2: blank line between rows"},
      {"", "x.csv holds no samples"},
      {"x,y\n", "x.csv holds no samples (only a header)"},
  };
  for (const auto& [input, expected] : bad) {
    write_text(dir_ / "y.csv", "previous\n");
    const auto run = predict(input);
    EXPECT_EQ(run.exit_code, 2) << input << ": " << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << input << ": " << run.output;
    EXPECT_EQ(lines_of(run.output), 1) << input << ": " << run.output;
    EXPECT_EQ(read_text(dir_ / "y.csv"), "previous\n") << input;
  }
}

TEST_F(Predict, MissingFilesAndDevicesAreOneLine) {
  saved_model();
  write_text(dir_ / "x.csv", "0.1,0.2\n");
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--model " + path("model.pt") + " --input " + path("none.csv") + " --out " + path("y.csv"),
       "cannot read --input " + path("none.csv") + ": No such file or directory"},
      {"--model " + path("none.pt") + " --input " + path("x.csv") + " --out " + path("y.csv"),
       "no model at '" + path("none.pt") + "'"},
      {"--model " + path("model.pt") + " --input " + dir_.string() + " --out " + path("y.csv"),
       "it is a folder"},
      {"--model " + path("model.pt") + " --input " + path("x.csv") + " --out " + path("y.csv") +
           " --device cuda:9",
       "--device cuda:9 requested but"},
      {"--model " + path("model.pt") + " --input " + path("x.csv") + " --out " + dir_.string(),
       "--out"},
      {"--input " + path("x.csv") + " --out " + path("y.csv"), "--model is required"},
  };
  for (const auto& [args, expected] : bad) {
    const auto run = kanbench("predict " + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << args << ": " << run.output;
    EXPECT_EQ(lines_of(run.output), 1) << args << ": " << run.output;
  }
}

// A pykan checkpoint prefix: predict gives pykan's own outputs (pykan_checkpoints.json).
TEST_F(Predict, APykanCheckpointGivesPykansOutputs) {
  const auto reference = kan::test::load_reference("pykan_checkpoints.json");
  for (const auto& c : reference["cases"]) {
    const std::string name = c["name"];
    if (name != "plain" && name != "mult")
      continue;
    const auto x = kan::test::to_tensor(c["x"]), expected = kan::test::to_tensor(c["y"]);
    write_text(dir_ / "x.csv", csv_of(x));
    const auto run = kanbench("predict --model " + std::string(KAN_REFERENCE_DIR) + "/" +
                              c["prefix"].get<std::string>() + " --input " + path("x.csv") +
                              " --out " + path("y.csv"));
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.output;
    const auto y = parse_csv(read_text(dir_ / "y.csv"));
    ASSERT_EQ(y.sizes(), expected.sizes()) << name;
    EXPECT_LE((y - expected).abs().max().item<double>(), 1e-12) << name;
  }
}

// A .npy array (C or Fortran order, any dtype kanbench reads) is predicted as its rows.
TEST_F(Predict, ReadsNpyArrays) {
  auto model = saved_model({4, 3, 2});
  const std::string dir = KAN_DATA_REFERENCE_DIR;
  // table.npy: (12, 4), table[i, j] = (4 i + j) / 8 - 3.
  const auto x =
      ((4 * torch::arange(12, torch::kFloat64).unsqueeze(1) + torch::arange(4, torch::kFloat64)) /
           8 -
       3);
  for (const auto* name : {"table.npy", "table_fortran.npy", "table_float32.npy"}) {
    const auto run = kanbench("predict --model " + path("model.pt") + " --input " + dir + "/" +
                              name + " --out " + path("y.csv"));
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.output;
    EXPECT_NE(run.output.find("predicted 12 samples"), std::string::npos) << run.output;
    const auto y = parse_csv(read_text(dir_ / "y.csv"));
    EXPECT_LE(max_relative_difference(y, model->forward(x).detach()), 1e-15) << name;
  }
  const auto run = kanbench("predict --model " + path("model.pt") + " --input " + dir +
                            "/xy.npz --out " + path("y.csv"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("is an .npz archive; rows are read from a CSV file or a .npy array"),
            std::string::npos)
      << run.output;
}

TEST_F(Predict, OnCudaEqualsTheCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  auto model = saved_model();
  const auto x = torch::rand({300, 2}, torch::kFloat64) * 2 - 1;
  const auto run = predict(csv_of(x), "--device cuda");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto y = parse_csv(read_text(dir_ / "y.csv"));
  EXPECT_LE(max_relative_difference(y, model->forward(x).detach()), 1e-12);
}

class RunModel : public kan::test::ScratchDirTest {
protected:
  void save_model(std::vector<int64_t> width, torch::Dtype dtype) {
    kan::save_checkpoint(KAN(KANOptions(std::move(width)).grid(3).seed(1).dtype(dtype)),
                         path("tiny.pt"));
  }
  CliRun run(const std::string& extra) {
    return kanbench("run --suite quick --no-edge-cases --model " + path("tiny.pt") + " --out " +
                    path("out") + " " + extra);
  }
};

TEST_F(RunModel, TimesComparesAndAuditsTheModel) {
  save_model({2, 3, 1}, torch::kFloat32);
  const auto result = run("");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto results = read_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["config"]["extra"]["model"], path("tiny.pt"));
  EXPECT_EQ(results["config"]["extra"]["data"], "synthetic");
  ASSERT_EQ(results["cases"].size(), 2u); // cpu and cuda, or cpu and cpu-float64
  for (const auto& c : results["cases"]) {
    EXPECT_EQ(c["name"], "tiny.pt");
    EXPECT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_EQ(c["config"]["width"], (std::vector<int64_t>{2, 3, 1}));
    EXPECT_EQ(c["config"]["opt"], "lbfgs");
    EXPECT_EQ(c["config"]["train_num"], 200); // the quick suite's toy size
    EXPECT_FALSE(c.contains("audit_findings")) << c["audit_findings"].dump(); // only when some
  }
  EXPECT_EQ(results["cases"][0]["dtype"], "float32");
  ASSERT_EQ(results["comparisons"].size(), 1u);
  EXPECT_EQ(results["comparisons"][0]["parity"], "pass");
  EXPECT_TRUE(fs::exists(dir_ / "out" / "report.html"));
}

// A float64 model runs in float64; without a GPU its parity partner is float32.
TEST_F(RunModel, TheModelsDtypeIsTheFirstTargets) {
  save_model({2, 3, 1}, torch::kFloat64);
  const auto result = run("--repeat 1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto results = read_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["cases"][0]["target"], "cpu");
  EXPECT_EQ(results["cases"][0]["dtype"], "float64");
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(results["cases"][1]["target"], "cpu-float32");
    EXPECT_EQ(results["cases"][1]["dtype"], "float32");
  }
}

// pykan's whole story: a model saved with saveckpt, trained on create_dataset's dict.
TEST_F(RunModel, TrainsAPykanModelOnAPykanDataset) {
  const std::string model = std::string(KAN_REFERENCE_DIR) + "/checkpoints/plain";
  const std::string data = std::string(KAN_REFERENCE_DIR) + "/create_dataset.pt";
  const auto result = kanbench("run --suite quick --no-edge-cases --model " + model + " --data " +
                               data + " --out " + path("out"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto results = read_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["config"]["extra"]["data"], data);
  EXPECT_EQ(results["cases"][0]["dtype"], "float64"); // the pykan model's own
  for (const auto& c : results["cases"]) {
    EXPECT_EQ(c["name"], "plain");
    EXPECT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_EQ(c["config"]["train_num"], 64);
    EXPECT_EQ(c["config"]["test_num"], 32);
    EXPECT_EQ(c["samples_per_epoch"], 64);
  }
}

// A CSV file with a header, columns chosen by name, a held-out fraction.
TEST_F(RunModel, TrainsOnTheChosenColumnsOfACsvFile) {
  save_model({2, 3, 1}, torch::kFloat64);
  std::string text = "id;a;b;y\n";
  for (int i = 0; i < 50; ++i) {
    const double a = i / 50.0, b = 1 - i / 25.0;
    text += "row" + std::to_string(i) + ";" + std::to_string(a) + ";" + std::to_string(b) + ";" +
            std::to_string(a * b) + "\n";
  }
  write_text(dir_ / "data.csv", text);
  const auto result = run("--data " + path("data.csv") +
                          " --inputs a,b --targets y --test-fraction 0.3 --repeat 1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("data: " + path("data.csv") +
                               ": CSV, ';'-separated, header on line 1 taken as column names; 50 "
                               "rows: 35 train, 15 test"),
            std::string::npos)
      << result.output;
  const auto results = read_json(dir_ / "out" / "results.json");
  EXPECT_EQ(results["config"]["extra"]["data"], path("data.csv"));
  for (const auto& c : results["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_EQ(c["config"]["train_num"], 35);
    EXPECT_EQ(c["config"]["test_num"], 15);
    EXPECT_NE(c["config"]["data_description"].get<std::string>().find("inputs a, b; targets y"),
              std::string::npos);
  }
}

// Class labels in one column: cross-entropy, accuracy reported; a test set from another file.
TEST_F(RunModel, ClassifiesWithCrossEntropy) {
  save_model({3, 4, 3}, torch::kFloat32);
  // Three classes along the first input, a fifth of the labels drawn at random: a task that
  // training improves but cannot solve, so the losses of the two targets stay comparable.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  auto labelled = [&](int64_t n) {
    const auto x = torch::rand({n, 3}, generator, torch::kFloat64) * 2 - 1;
    auto label = ((x.select(1, 0) + 1) * 1.5).floor().clamp_max(2);
    const auto noise = torch::rand({n}, generator, torch::kFloat64) < 0.2;
    label = torch::where(noise, torch::randint(3, {n}, generator, torch::kFloat64), label);
    return torch::cat({x, label.unsqueeze(1)}, 1);
  };
  write_text(dir_ / "train.csv", csv_of(labelled(300), "u,v,w,class"));
  write_text(dir_ / "test.csv", csv_of(labelled(100), "u,v,w,class"));
  const auto result = run("--data " + path("train.csv") + " --test-data " + path("test.csv") +
                          " --loss cross-entropy --repeat 1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto results = read_json(dir_ / "out" / "results.json");
  for (const auto& c : results["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_EQ(c["config"]["loss"], "cross_entropy");
    EXPECT_EQ(c["config"]["train_num"], 300);
    EXPECT_EQ(c["config"]["test_num"], 100);
    EXPECT_TRUE(c.contains("final_accuracy")) << c.dump();
  }
  EXPECT_NE(result.output.find("class labels class (3 classes)"), std::string::npos)
      << result.output;
}

TEST_F(RunModel, BadDataFilesAndTheirOptionsAreOneLine) {
  save_model({2, 3, 3}, torch::kFloat32);
  write_text(dir_ / "three.csv", "a,b,c,y\n1,2,3,0\n4,5,6,1\n7,8,9,2\n");
  write_text(dir_ / "bad.csv", "a,b,y\n1,2,0\n4,oops,1\n7,8,2\n");
  write_text(dir_ / "classes.csv", "a,b,y\n1,2,0\n4,5,1\n7,8,3\n");
  const std::string three = "--data " + path("three.csv");
  const std::vector<std::pair<std::string, std::string>> bad{
      {three, path("three.csv") + ": the model takes 2 inputs and gives 3 outputs, but the data "
                                  "has 3 input columns (a, b, c) and 1 target column (y)"},
      {three + " --inputs a,b", "the model takes 2 inputs and gives 3 outputs, but the data has "
                                "2 input columns (a, b) and 1 target column (y)"},
      {three + " --inputs a,q", "inputs 'a,q': " + path("three.csv") +
                                    " has no column 'q' (its header, line 1, names a, b, c, y)"},
      {three + " --inputs 0-1 --test-fraction 1.5", "test fraction must lie in (0, 1), got 1.5"},
      {"--data " + path("bad.csv"), "bad.csv:3:2 (column 'b'): not a number (value 'oops')"},
      {"--data " + path("classes.csv") + " --loss cross-entropy",
       "classes.csv:4:3 (column 'y'): class label out of range: there are 3 classes, 0 to 2 "
       "(value '3')"},
      {"--inputs 0-1", "--inputs needs --data (the file it reads)"},
      {"--test-fraction 0.5", "--test-fraction needs --data"},
      {"--loss mae", "--loss: mae not in {mse,cross-entropy,cross_entropy}"},
  };
  for (const auto& [args, expected] : bad) {
    const auto result = run(args);
    EXPECT_EQ(result.exit_code, 2) << args << ": " << result.output;
    EXPECT_NE(result.output.find(expected), std::string::npos) << args << ": " << result.output;
    EXPECT_EQ(lines_of(result.output), 1) << args << ": " << result.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out" / "results.json"));
  const auto no_model = kanbench("run --loss cross-entropy --out " + path("out"));
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_NE(no_model.output.find("--loss cross-entropy needs --model"), std::string::npos)
      << no_model.output;
}

TEST_F(RunModel, BadDataAndOptionsAreOneLine) {
  const auto x = torch::rand({10, 2}), y = torch::rand({10, 1});
  const auto x3 = torch::rand({10, 3}), y2 = torch::rand({10, 2}), y9 = torch::rand({9, 1});
  auto data_file = [&](const std::string& name, const kan::NamedTensors& tensors) {
    kan::write_named_tensors(path(name), tensors);
    return "--data " + path(name);
  };
  save_model({2, 3, 1}, torch::kFloat32);
  const std::vector<std::pair<std::string, std::string>> bad{
      {data_file("missing.pt", {{"train_input", x}, {"train_label", y}, {"test_input", x}}),
       "missing.pt': no tensor 'test_label' (the file holds train_input, train_label, test_input)"},
      {data_file("inputs.pt",
                 {{"train_input", x3}, {"train_label", y}, {"test_input", x3}, {"test_label", y}}),
       "inputs.pt: the model takes 2 inputs and gives 1 output, but the data has 3 input columns "
       "(x0, x1, x2) and 1 target column (y0)"},
      {data_file("labels.pt",
                 {{"train_input", x}, {"train_label", y}, {"test_input", x}, {"test_label", y2}}),
       "labels.pt['test_label']: 2 and 2 columns, but"},
      {data_file("samples.pt",
                 {{"train_input", x}, {"train_label", y9}, {"test_input", x}, {"test_label", y}}),
       "samples.pt['train_label']: 9 rows, but " + path("samples.pt") +
           "['train_input'] has 10 (one target row per input row)"},
      {data_file("nan.pt",
                 {{"train_input", x},
                  {"train_label", y},
                  {"test_input", x.clone().fill_(std::numeric_limits<double>::quiet_NaN())},
                  {"test_label", y}}),
       "nan.pt['test_input'][0, 0]: not a finite number (NaN and Inf are refused) (value 'nan')"},
      {"--case toy", "--model and --case are alternatives"},
      {"--data " + path("none.pt"), path("none.pt")},
  };
  for (const auto& [args, expected] : bad) {
    const auto result = run(args);
    EXPECT_EQ(result.exit_code, 2) << args << ": " << result.output;
    EXPECT_NE(result.output.find(expected), std::string::npos) << args << ": " << result.output;
    EXPECT_EQ(lines_of(result.output), 1) << args << ": " << result.output;
  }
  const auto no_model = kanbench("run --data " + path("nan.pt") + " --out " + path("out"));
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_NE(no_model.output.find("--data needs --model"), std::string::npos) << no_model.output;
}

} // namespace
