// The kanbench command line as a user runs it: outputs, exit codes, one-line errors.
#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;

struct Run {
  int exit_code;
  std::string output; // stdout and stderr together
};

Run kanbench(const std::string& args) {
  const std::string command = std::string(KANBENCH_EXECUTABLE) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe)
    throw std::runtime_error("cannot run " + command);
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe))
    output += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

using Cli = kan::test::ScratchDirTest;

TEST_F(Cli, FitWritesResultsAndCheckpoint) {
  const auto run = kanbench("fit --function toy --width 2,5,1 --grid 3 --k 3 --opt lbfgs --steps 3 "
                            "--seed 0 --dtype float64 --device cpu --refine 5 --train-num 200 "
                            "--test-num 100 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("test RMSE"), std::string::npos) << run.output;
  std::ifstream in(dir_ / "fit.json");
  ASSERT_TRUE(in.good());
  const auto result = nlohmann::json::parse(in);
  for (const char* key : {"schema_version", "config", "history", "test_rmse", "train_rmse",
                          "refined", "refined_test_rmse", "seconds", "checkpoint"}) {
    EXPECT_TRUE(result.contains(key)) << key;
  }
  EXPECT_EQ(result["config"]["model"]["width"], (std::vector<int64_t>{2, 5, 1}));
  EXPECT_EQ(result["config"]["fit"]["opt"], "lbfgs");
  EXPECT_EQ(result["config"]["model"]["backend"], "fused");
  EXPECT_EQ(result["history"]["steps"].size(), 3u);
  EXPECT_GT(result["test_rmse"].get<double>(), 0.0);
  EXPECT_LT(result["refined_test_rmse"].get<double>(), 1.0);
  EXPECT_TRUE(fs::exists(dir_ / "model.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "fit.json.tmp"));
}

TEST_F(Cli, FitRecordsTheBackend) {
  const auto run = kanbench(
      "fit --backend reference --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(dir_ / "fit.json");
  EXPECT_EQ(nlohmann::json::parse(in)["config"]["model"]["backend"], "reference");
}

TEST_F(Cli, HelpExitsZero) {
  const auto run = kanbench("fit --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("--refine"), std::string::npos) << run.output;
  EXPECT_EQ(kanbench("--help").exit_code, 0);
}

TEST_F(Cli, BadCommandLinesFailWithOneLine) {
  for (const std::string args : {"fit --no-such-flag", "fit --dtype float16", "fit --steps many",
                                 "fit --function nope", "fit --backend fast", "frobnicate"}) {
    const auto run = kanbench(args + " --out " + dir_.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
        << args << ": " << run.output;
  }
}

TEST_F(Cli, BadValuesFailWithOneLine) {
  for (const std::string args : {"fit --grid 0 --steps 1", "fit --steps -1",
                                 "fit --width 3,1 --steps 1", "fit --batch 5000 --steps 1",
                                 "fit --device tpu --steps 1", "fit --device meta --steps 1"}) {
    const auto run = kanbench(args + " --out " + dir_.string());
    EXPECT_EQ(run.exit_code, 1) << args << ": " << run.output;
    EXPECT_EQ(run.output.rfind("kanbench: error: ", 0), 0u) << args << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
        << args << ": " << run.output;
  }
}

TEST_F(Cli, CudaWithoutGpuSaysSo) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "a GPU is present";
  const auto run = kanbench("fit --device cuda --steps 1 --out " + dir_.string());
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("no CUDA device"), std::string::npos) << run.output;
}

TEST_F(Cli, FitOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto run = kanbench("fit --device cuda --steps 5 --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(dir_ / "fit.json");
  EXPECT_EQ(nlohmann::json::parse(in)["config"]["device"], "cuda");
}

} // namespace
