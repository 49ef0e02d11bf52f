// `kanbench compare` and `kanbench report` as a user or a CI job runs them: exit codes, output.
#include "reports_test_util.h"

#include "kan/reports/results_io.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace {

using namespace kan::reports;

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

size_t lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

class CompareCli : public test::ReportsScratchTest {
protected:
  void SetUp() override {
    ReportsScratchTest::SetUp();
    write_results_file(path("old.json"), test::synthetic_run(1, 1.0, 2.0, 10));
    write_results_file(path("slower.json"), test::synthetic_run(2, 1.3, 2.0, 10));
    write_results_file(path("same.json"), test::synthetic_run(3, 1.0, 2.0, 10));
  }
};

TEST_F(CompareCli, RegressionAboveTheLimitExitsOne) {
  const auto run =
      kanbench("compare " + path("old.json") + " " + path("slower.json") +
               " --fail-on-regression 10");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("slower"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("kanbench: regression: toy on cpu is"), std::string::npos)
      << run.output;
}

TEST_F(CompareCli, RegressionBelowTheLimitOrNoGateExitsZero) {
  auto run = kanbench("compare " + path("old.json") + " " + path("slower.json") +
                      " --fail-on-regression 50");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = kanbench("compare " + path("old.json") + " " + path("slower.json"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("1 slower"), std::string::npos) << run.output;
}

TEST_F(CompareCli, SameDistributionExitsZero) {
  const auto run = kanbench("compare " + path("old.json") + " " + path("same.json") +
                            " --fail-on-regression 0");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("0 slower, 0 faster, 2 same"), std::string::npos) << run.output;
}

TEST_F(CompareCli, BadFilesFailWithOneLineNamingFileAndKey) {
  auto j = to_json(test::synthetic_run(1, 1.0, 2.0, 3));
  j["cases"][1]["median_epoch_seconds"] = "fast";
  write("bad.json", j.dump());
  auto run = kanbench("compare " + path("old.json") + " " + path("bad.json"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1u) << run.output;
  EXPECT_EQ(run.output, "kanbench: error: " + path("bad.json") +
                            ": cases[1].median_epoch_seconds: expected a number, got a string "
                            "(\"fast\")\n");
  run = kanbench("compare " + path("old.json") + " " + path("missing.json"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(lines(run.output), 1u) << run.output;
  EXPECT_NE(run.output.find("missing.json: cannot open"), std::string::npos) << run.output;
}

TEST_F(CompareCli, BadCommandLinesExitTwo) {
  for (const std::string& args : std::vector<std::string>{"compare", "compare " + path("old.json"),
                                 "compare a b --fail-on-regression lots",
                                 "compare a b --fail-on-regression -5", "compare a b --nope"}) {
    const auto run = kanbench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(lines(run.output), 1u) << args << ": " << run.output;
  }
}

} // namespace
