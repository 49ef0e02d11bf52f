// `kanbench compare` and `kanbench report` as a user or a CI job runs them: exit codes, output.
#include "cli_runner.h"
#include "reports_test_util.h"

#include "kan/results/results_io.h"

#include <algorithm>
#include <filesystem>

namespace {

using namespace kan::results;

using Run = kan::test::CliRun;

Run kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
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
  const auto run = kanbench("compare " + path("old.json") + " " + path("slower.json") +
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
  const auto run =
      kanbench("compare " + path("old.json") + " " + path("same.json") + " --fail-on-regression 0");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("0 slower, 0 faster, 2 same"), std::string::npos) << run.output;
}

TEST_F(CompareCli, BadFilesFailWithOneLineNamingFileAndKey) {
  auto j = to_json(test::synthetic_run(1, 1.0, 2.0, 3));
  j["cases"][1]["median_epoch_seconds"] = "fast";
  write("bad.json", j.dump());
  auto run = kanbench("compare " + path("old.json") + " " + path("bad.json"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(lines(run.output), 1u) << run.output;
  EXPECT_EQ(run.output, "kanbench: error: " + path("bad.json") +
                            ": cases[1].median_epoch_seconds: expected a number, got a string "
                            "(\"fast\")\n");
  run = kanbench("compare " + path("old.json") + " " + path("missing.json"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(lines(run.output), 1u) << run.output;
  EXPECT_NE(run.output.find("missing.json: cannot open"), std::string::npos) << run.output;
}

TEST_F(CompareCli, LongCaseNamesKeepTheOutputLinear) {
  const std::string long_name(1 << 20, 'n');
  auto old_run = test::synthetic_run(1, 1.0, 2.0, 5);
  auto new_run = test::synthetic_run(2, 1.0, 2.0, 5);
  old_run.cases[1].name = new_run.cases[1].name = long_name;
  write_results_file(path("long-old.json"), old_run);
  write_results_file(path("long-new.json"), new_run);
  const auto run = kanbench("compare " + path("long-old.json") + " " + path("long-new.json"));
  EXPECT_EQ(run.exit_code, 0) << run.output.substr(0, 500);
  EXPECT_LT(run.output.size(), long_name.size() + 4096);
  EXPECT_NE(run.output.find(long_name), std::string::npos);
}

TEST_F(CompareCli, BadCommandLinesExitTwo) {
  for (const std::string& args : std::vector<std::string>{
           "compare", "compare " + path("old.json"), "compare a b --fail-on-regression lots",
           "compare a b --fail-on-regression -5", "compare a b --nope"}) {
    const auto run = kanbench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(lines(run.output), 1u) << args << ": " << run.output;
  }
}

} // namespace

namespace {

using ReportCli = kan::results::test::ReportsScratchTest;

TEST_F(ReportCli, WritesTheReport) {
  write_results_file(path("results.json"), test::sample_results());
  write_results_file(path("old.json"), test::synthetic_run(1, 1.0, 2.0, 5));
  const std::string gbench = std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json";
  auto run = kanbench("report " + path("results.json") + " --baseline " + path("old.json") +
                      " --gbench " + gbench + " " + gbench + " -o " + path("out.html"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "report -> " + path("out.html") + "\n");
  const auto html = read("out.html");
  EXPECT_NE(html.find("<section id=\"baseline\""), std::string::npos);
  EXPECT_NE(html.find("<section id=\"gbench-1\""), std::string::npos);
  // Without -o: report.html beside the results.
  run = kanbench("report " + path("results.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(std::filesystem::exists(path("report.html")));
}

TEST_F(ReportCli, RefusesToWriteOverAnInput) {
  write_results_file(path("results.json"), test::sample_results());
  write_results_file(path("old.json"), test::synthetic_run(1, 1.0, 2.0, 5));
  std::filesystem::copy_file(std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json",
                             path("bench.json"));
  std::filesystem::create_symlink(path("results.json"), path("link.json"));
  const auto before = read("results.json");
  const std::string dot = (dir_ / "." / "results.json").string();
  const std::string results = path("results.json");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"report " + results + " -o " + results,
            "the report " + results + " would replace the results " + results},
           {"report " + results + " -o " + dot,
            "the report " + dot + " would replace the results " + results},
           {"report " + results + " -o " + path("link.json"),
            "the report " + path("link.json") + " would replace the results " + results},
           {"report " + path("link.json") + " -o " + results,
            "the report " + results + " would replace the results " + path("link.json")},
           {"report " + results + " --baseline " + path("old.json") + " -o " + path("old.json"),
            "the report " + path("old.json") + " would replace the --baseline " + path("old.json")},
           {"report " + results + " --gbench " + path("bench.json") + " -o " + path("bench.json"),
            "the report " + path("bench.json") + " would replace the --gbench input " +
                path("bench.json")},
           // The default output, report.html beside the results, is an input too.
           {"report " + results + " --gbench " + path("report.html"),
            "the report " + path("report.html") + " would replace the --gbench input " +
                path("report.html")}}) {
    if (args.find("--gbench " + path("report.html")) != std::string::npos)
      std::filesystem::copy_file(path("bench.json"), path("report.html"),
                                 std::filesystem::copy_options::overwrite_existing);
    const auto run = kanbench(args);
    // The command could not do its job.
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(lines(run.output), 1u) << args << ": " << run.output;
    EXPECT_EQ(run.output, "kanbench: error: " + message + ": choose another -o\n") << args;
  }
  EXPECT_EQ(read("results.json"), before);
  EXPECT_EQ(read("report.html"), read("bench.json"));
  EXPECT_TRUE(std::filesystem::is_symlink(path("link.json")));
}

TEST_F(ReportCli, WarnsWhenTheReportBesideTheResultsShowsAnotherRun) {
  auto first = test::sample_results();
  first.run_id = new_run_id();
  write_results_file(path("results.json"), first);
  auto run = kanbench("report " + path("results.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "report -> " + path("report.html") + "\n");

  // A kill between the renames of `kanbench run`: a new results.json, the old report.html.
  auto second = test::sample_results();
  second.run_id = new_run_id();
  write_results_file(path("results.json"), second);
  const std::string warning =
      "kanbench: warning: " + path("report.html") + " is stale: it shows run " + first.run_id +
      ", but " + path("results.json") + " is run " + second.run_id + " (kanbench report " +
      path("results.json") + " writes a matching one)\n";
  run = kanbench("report " + path("results.json") + " -o " + path("elsewhere.html"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "report -> " + path("elsewhere.html") + "\n" + warning);
  // As a --baseline, too.
  std::filesystem::create_directory(path("new"));
  write_results_file(path("new/results.json"), test::synthetic_run(1, 1.0, 2.0, 5));
  run = kanbench("report " + path("new/results.json") + " --baseline " + path("results.json"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(warning), std::string::npos) << run.output;
  run = kanbench("compare " + path("results.json") + " " + path("new/results.json"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.rfind(warning, 0), 0u) << run.output;

  // Writing the report beside the results makes the pair match again: no warning.
  run = kanbench("report " + path("results.json"));
  EXPECT_EQ(run.output, "report -> " + path("report.html") + "\n");
  run = kanbench("compare " + path("results.json") + " " + path("new/results.json"));
  EXPECT_EQ(run.output.find("warning: " + path("report.html")), std::string::npos) << run.output;
}

TEST_F(ReportCli, ErrorsAreOneLine) {
  write_results_file(path("results.json"), test::sample_results());
  write("bad.json", "{\"benchmarks\": 3}");
  for (const auto& [args, part] : std::vector<std::pair<std::string, std::string>>{
           {"report " + path("missing.json"), "missing.json: cannot open"},
           {"report " + path("results.json") + " --gbench " + path("bad.json"),
            "bad.json: benchmarks: expected an array, got an integer (3)"},
           {"report " + path("results.json") + " --chartjs /nonexistent.js -o " + path("r.html"),
            "cannot read Chart.js from /nonexistent.js"},
           {"report " + path("results.json") + " -o " + path("no/folder/r.html"),
            "no/folder/r.html"}}) {
    const auto run = kanbench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(lines(run.output), 1u) << args << ": " << run.output;
    EXPECT_EQ(run.output.rfind("kanbench: error: ", 0), 0u) << run.output;
    EXPECT_NE(run.output.find(part), std::string::npos) << run.output;
  }
  EXPECT_FALSE(std::filesystem::exists(path("r.html")));
  for (const std::string args : {"report", "report a.json --gbench", "report a.json b.json"}) {
    const auto run = kanbench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(lines(run.output), 1u) << args << ": " << run.output;
  }
}

// A fit.json: its own report; the options that belong to a results.json are refused.
TEST_F(ReportCli, WritesTheReportOfAFit) {
  std::filesystem::copy_file(std::string(KAN_FIT_REFERENCE_DIR) + "/fit_symbolic.json",
                             path("fit.json"));
  auto run = kanbench("report " + path("fit.json") + " -o " + path("out.html"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "report -> " + path("out.html") + "\n");
  const auto html = read("out.html");
  EXPECT_NE(html.find("<section id=\"symbolic\""), std::string::npos);
  EXPECT_NE(html.find("<canvas id=\"chart-loss-trained\">"), std::string::npos);
  // Without -o: report.html beside the fit.json.
  run = kanbench("report " + path("fit.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read("report.html"), html);

  write_results_file(path("old.json"), test::synthetic_run(1, 1.0, 2.0, 5));
  const std::string gbench = std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json";
  for (const auto& [option, value] :
       {std::pair<std::string, std::string>{"--baseline", path("old.json")},
        {"--gbench", gbench}}) {
    run = kanbench("report " + path("fit.json") + " " + option + " " + value + " -o " +
                   path("refused.html"));
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_EQ(run.output, "kanbench: error: " + option + " applies to a results.json, but " +
                              path("fit.json") + " is a fit.json: leave " + option + " out\n");
  }
  EXPECT_FALSE(std::filesystem::exists(path("refused.html")));
  // The fit.json is an input like a results.json.
  run = kanbench("report " + path("fit.json") + " -o " + path("fit.json"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("would replace the results " + path("fit.json")), std::string::npos)
      << run.output;
  // An audit.json is read strictly by its own reader; another command's document is refused.
  write("audit.json", "{\"schema_version\": \"1.1.0\", \"command\": \"audit\"}");
  run = kanbench("report " + path("audit.json"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output.rfind("kanbench: error: " + path("audit.json") + ": ", 0), 0u) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  write("other.json", "{\"schema_version\": \"1.1.0\", \"command\": \"predict\"}");
  run = kanbench("report " + path("other.json"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output, "kanbench: error: " + path("other.json") +
                            ": command: expected \"fit\" (a fit.json), \"audit\" (an "
                            "audit.json) or no command (a results.json), got \"predict\"\n");
}

} // namespace
