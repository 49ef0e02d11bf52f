// The command line as a hostile or careless user drives it: every bad value refused with one line
// naming the option, one exit-code rule (0 success, 1 the thing checked failed, 2 the command
// could not do its job), and nothing lost when a write fails.
#include "cli_runner.h"
#include "fault_injection.h"
#include "reports_test_util.h"
#include "test_util.h"

#include "kan/results/results_io.h"

#include <filesystem>
#include <fstream>
#include <regex>

namespace {

namespace fs = std::filesystem;
using kan::test::run_kanbench;

class HostileCli : public kan::test::ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    kan::results::write_results_file(path("results.json"), kan::results::test::sample_results());
    std::ofstream(path("file")) << "a file, not a folder";
    fs::create_directories(path("folders/fit.json")); // an output name taken by a folder
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  size_t temporaries() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    return n;
  }
};

struct Case {
  std::string args; // "@" stands for the scratch folder
  int exit_code;
  std::string word; // the message must contain it
};

std::string expand(std::string text, const std::string& dir) {
  for (size_t at; (at = text.find('@')) != std::string::npos;)
    text.replace(at, 1, dir);
  return text;
}

TEST_F(HostileCli, BadValuesAreRefusedWithOneLineNamingTheOption) {
  const std::string fit = "fit --steps 1 --train-num 20 --test-num 10 --out @/fit ";
  const std::string compare = "compare @/results.json @/results.json ";
  const std::vector<Case> cases = {
      // Floating options: NaN, Inf and out-of-range values of every subcommand.
      {compare + "--fail-on-regression nan", 2, "--fail-on-regression"},
      {compare + "--fail-on-regression inf", 2, "--fail-on-regression"},
      {compare + "--fail-on-regression -5", 2, "--fail-on-regression"},
      {compare + "--fail-on-regression 1e999", 2, "--fail-on-regression"},
      {compare + "--alpha nan", 2, "--alpha"},
      {compare + "--alpha 0", 2, "--alpha"},
      {compare + "--alpha 1.5", 2, "--alpha"},
      {compare + "--min-change nan", 2, "--min-change"},
      {compare + "--min-change -1", 2, "--min-change"},
      {compare + "--min-change 1" + std::string(400, '0'), 2, "--min-change"},
      {fit + "--lr nan", 2, "--lr"},
      {fit + "--lr 0", 2, "--lr"},
      {fit + "--lr -1e-3", 2, "--lr"},
      {fit + "--lamb nan", 2, "--lamb"},
      {fit + "--lamb-entropy nan", 2, "--lamb-entropy"},
      {fit + "--lamb-l1 inf", 2, "--lamb-l1"},
      {fit + "--lamb-coef -1", 2, "--lamb-coef"},
      {fit + "--lamb-coefdiff -inf", 2, "--lamb-coefdiff"},
      {"run --time-limit -1 --out @/run", 2, "--time-limit"},
      {"run --time-limit nan --out @/run", 2, "--time-limit"},
      {"run --time-limit inf --out @/run", 2, "--time-limit"},
      // Integers: no wrap-around, no silent repair.
      {fit + "--seed -1", 2, "--seed"},
      {fit + "--seed 18446744073709551616", 2, "--seed"},
      {fit + "--seed 99999999999999999999999", 2, "--seed"},
      {fit + "--seed 1.5", 2, "--seed"},
      {"audit --width 2,3,1 --seed -1", 2, "--seed"},
      {fit + "--grid 0", 2, "--grid"},
      {fit + "--k -1", 2, "--k"},
      {fit + "--steps -1", 2, "--steps"},
      {fit + "--batch -2", 2, "--batch"},
      {fit + "--train-num 0", 2, "--train-num"},
      {fit + "--refine -1", 2, "--refine"},
      {fit + "--trace-steps -1", 2, "--trace-steps"},
      {"run --repeat -2 --out @/run", 2, "--repeat"},
      {"run --cv-target 1 --out @/run", 2, "--cv-target"},
      {"run --cv-target nan --out @/run", 2, "--cv-target"},
      {"run --cv-max-time -1 --out @/run", 2, "--cv-max-time"},
      {"run --memory-fraction 1.5 --out @/run", 2, "--memory-fraction"},
      {"run --memory-fraction -0.1 --out @/run", 2, "--memory-fraction"},
      {"run --devices cuda:x --out @/run", 2, "--devices"},
      {"run --precision half --out @/run", 2, "--precision"},
      {"run --precision bf16,bf16 --out @/run", 2, "--precision"},
      {"sweep --max-batch-limit 8 --out @/run", 2, "--max-batch-limit"},
      {"sweep --batch 0 --out @/run", 2, "--batch"},
      {"audit --width 2,3,1 --samples 0", 2, "--samples"},
      // Lists.
      {fit + "--width 2,,1", 2, "--width"},
      {fit + "--width 2,5,", 2, "--width"},
      {fit + "--width ,2,1", 2, "--width"},
      {fit + "--width 2,0,1", 2, "--width"},
      {fit + "--width 2,x,1", 2, "--width"},
      {fit + "--width 2", 2, "--width"},
      {fit + "--width 2,5,1 --width 2,1", 2, "--width"},
      // Sizes past the machine's memory: refused before anything is allocated.
      {fit + "--width 2,100000000,1", 2, "does not fit"},
      {fit + "--width 2,9223372036854775807,1", 2, "more than"},
      {fit + "--width 2,1000,1 --grid 100000000", 2, "does not fit"},
      {fit + "--steps 1 --steps 2", 2, "--steps"},
      {"audit --width 2,,1", 2, "--width"},
      // Commands, devices and paths.
      {"nosuchcmd", 2, "nosuchcmd"},
      {"fit --device tpu --out @/fit", 2, "--device"},
      {"audit --checkpoint @ --device cpu", 2, "is a folder"},
      {"audit --checkpoint @/missing.pt --device cpu", 2, "no such file"},
      {"env --json @", 2, "is a folder"},
      {"env --json @/file/env.json", 2, "--json"},
      {"audit --width 2,3,1 --json @/file/audit.json", 2, "--json"},
      {fit + "--out @/file/sub", 2, "--out"},
      {"fit --steps 1 --out @/folders", 2, "fit.json is a folder"},
      {"run --suite quick --out @/file/sub", 2, "--out"},
      {"run --suite quick --out @/run --trace @/file/trace.json", 2, "--trace"},
      {"run --suite quick --out @/run --trace @", 2, "--trace"},
      {"compare @/results.json @/missing.json", 2, "missing.json"},
      {"report @/missing.json", 2, "missing.json"},
  };
  const std::regex long_number("[0-9]{25}");
  for (const auto& c : cases) {
    const auto args = expand(c.args, dir_.string());
    const auto run = run_kanbench(args);
    EXPECT_EQ(run.exit_code, c.exit_code) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.word), std::string::npos) << args << "\n" << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << args << "\n"
                                                                         << run.output;
    EXPECT_LT(run.output.size(), 1000u) << args << "\n" << run.output;
    EXPECT_FALSE(std::regex_search(run.output, long_number)) << args << "\n" << run.output;
    // Refused before any work: nothing was trained or measured.
    EXPECT_FALSE(fs::exists(path("fit/model.pt"))) << args;
    EXPECT_FALSE(fs::exists(path("run/results.json"))) << args;
  }
}

TEST_F(HostileCli, TheLargestSeedIsAccepted) {
  const auto run = run_kanbench("fit --steps 0 --train-num 20 --test-num 10 --trace-steps 0 "
                                "--seed 18446744073709551615 --out " +
                                path("fit"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(path("fit/fit.json"));
  EXPECT_EQ(nlohmann::json::parse(in)["config"]["seed"].get<uint64_t>(), 18446744073709551615ULL);
}

TEST_F(HostileCli, AFullDiskDuringFitLosesNothing) {
  const std::string fit =
      "fit --steps 1 --train-num 40 --test-num 10 --trace-steps 0 --out " + path("fit");
  ASSERT_EQ(run_kanbench(fit).exit_code, 0);
  const auto model = read("fit/model.pt"), json = read("fit/fit.json");
  const auto run = run_kanbench(fit + " --seed 3", kan::test::full_disk_after_kib(1));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("File too large"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("model.pt"), std::string::npos) << run.output;
  // Both outputs of the previous run are intact, and no temporary is left behind.
  EXPECT_EQ(read("fit/model.pt"), model);
  EXPECT_EQ(read("fit/fit.json"), json);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(path("fit"))) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(entries, 2u);
}

TEST_F(HostileCli, FitReplacesASymlinkedCheckpointInsteadOfItsTarget) {
  fs::create_directories(path("fit"));
  std::ofstream(path("precious")) << "keep me";
  fs::create_symlink(path("precious"), path("fit/model.pt"));
  const auto run = run_kanbench("fit --steps 1 --train-num 40 --test-num 10 --trace-steps 0 "
                                "--out " +
                                path("fit"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read("precious"), "keep me");
  EXPECT_FALSE(fs::is_symlink(path("fit/model.pt")));
}

TEST_F(HostileCli, ARunWhoseOutputsCannotBeWrittenStillPrintsItsSummary) {
  // The folder and the trace pass the checks before the run (nothing is written yet), then the
  // disk is full when the run is done: each output fails on its own, the summary is printed.
  const auto run = run_kanbench("run --suite quick --repeat 1 --case toy --devices cpu "
                                "--no-edge-cases --out " +
                                    path("run") + " --trace " + path("run/trace.json"),
                                kan::test::full_disk_after_kib(0));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("toy on cpu: ok"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("edge cases:"), std::string::npos) << run.output;
  for (const char* file : {"trace.json", "results.json", "report.html"}) {
    EXPECT_NE(run.output.find(std::string("not written: ") + path("run/" + std::string(file))),
              std::string::npos)
        << file << "\n"
        << run.output;
    EXPECT_FALSE(fs::exists(path("run/" + std::string(file))));
  }
  EXPECT_EQ(fs::is_directory(path("run"))
                ? std::distance(fs::directory_iterator(path("run")), fs::directory_iterator{})
                : 0,
            0);
}

} // namespace
