// The HTML report in a real browser: headless Chromium opens report.html from disk, offline.
// The page's own script reads every chart canvas back (getImageData) and records on <body> how
// many drew pixels and which errors it saw; Chromium's log carries every console message.
// Artifacts (report.html, dom.html, chromium.log, report.png; fit-* of the fit report) stay in
// build/test-artifacts/.
#include "reports_test_util.h"

#include "kan/reports/fit_report.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <sys/wait.h>

#include <cstdlib>
#include <regex>

namespace {

namespace fs = std::filesystem;
using namespace kan::reports;
using namespace kan::results;

// $KANBENCH_CHROMIUM, else the first Chromium on PATH; "" when there is none.
std::string find_chromium() {
  if (const char* chosen = std::getenv("KANBENCH_CHROMIUM"); chosen && *chosen)
    return fs::exists(chosen) ? chosen : "";
  const char* path = std::getenv("PATH");
  std::stringstream folders(path ? path : "");
  std::string folder;
  while (std::getline(folders, folder, ':'))
    for (const char* name :
         {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"})
      if (fs::exists(fs::path(folder) / name))
        return (fs::path(folder) / name).string();
  return "";
}

int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string body_attribute(const std::string& dom, const std::string& name) {
  std::smatch match;
  const std::regex attribute("<body[^>]*\\s" + name + "=\"([^\"]*)\"");
  return std::regex_search(dom, match, attribute) ? match[1].str() : "<missing>";
}

// The number of charts a report's embedded chart list holds.
size_t embedded_charts(const std::string& html) {
  const auto start = html.find("id=\"kanbench-charts\">") + 21;
  const auto charts =
      nlohmann::json::parse(html.substr(start, html.find("</script>", start) - start));
  return charts["charts"].size();
}

// Opens `report` (in `artifacts`) in headless Chromium, offline, and checks that it drew every
// one of its `expected` charts without a console message; returns the DOM after the scripts ran.
// A screenshot PREFIXreport.png of it stays in `artifacts`.
std::string open_offline(const std::string& chromium, const fs::path& artifacts,
                         const std::string& prefix, size_t expected) {
  const auto report = artifacts / (prefix + "report.html");
  const auto profile =
      fs::temp_directory_path() / ("kanbench_chromium_" + std::to_string(::getpid()));
  // Every host name resolves to nothing: a request to the network would fail and be logged.
  const std::string flags = " --headless --disable-gpu --no-sandbox --no-first-run "
                            "--disable-extensions --disable-background-networking "
                            "--host-resolver-rules='MAP * ~NOTFOUND' --hide-scrollbars "
                            "--user-data-dir=" +
                            profile.string() +
                            " --virtual-time-budget=10000 --window-size=1280,2600 ";
  const auto dom_file = artifacts / (prefix + "dom.html");
  const auto log_file = artifacts / (prefix + "chromium.log");
  EXPECT_EQ(run_shell("timeout 120 " + chromium + flags + "--enable-logging=stderr --v=0 " +
                      "--dump-dom file://" + report.string() + " > " + dom_file.string() + " 2> " +
                      log_file.string()),
            0)
      << read_file(log_file);
  const auto dom = read_file(dom_file);
  const auto log = read_file(log_file);

  // No console message at all: no error, no exception, no blocked request.
  std::smatch console;
  EXPECT_FALSE(std::regex_search(log, console, std::regex(".*:CONSOLE.*"))) << console.str();
  EXPECT_EQ(body_attribute(dom, "data-report-errors"), "");
  EXPECT_EQ(body_attribute(dom, "data-charts-total"), std::to_string(expected));
  EXPECT_EQ(body_attribute(dom, "data-charts-drawn"), std::to_string(expected));

  const auto screenshot = artifacts / (prefix + "report.png");
  fs::remove(screenshot);
  EXPECT_EQ(run_shell("timeout 120 " + chromium + flags + "--screenshot=" + screenshot.string() +
                      " file://" + report.string() + " > /dev/null 2>&1"),
            0);
  EXPECT_TRUE(fs::exists(screenshot));
  const auto png = read_file(screenshot);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_GT(png.size(), 20000u); // charts and tables, not a blank page
  fs::remove_all(profile);
  return dom;
}

// Skips a test without Chromium; the artifacts folder exists.
class ReportBrowser : public ::testing::Test {
protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty())
      GTEST_SKIP() << "Chromium not found: install the Debian package chromium (tools/setup.sh "
                      "does) or set KANBENCH_CHROMIUM";
    fs::create_directories(artifacts_);
  }

  std::string chromium_;
  const fs::path artifacts_ = KAN_TEST_ARTIFACT_DIR;
};

TEST_F(ReportBrowser, OpensOfflineDrawsEveryChartAndShowsTheVerdict) {
  const auto report = artifacts_ / "report.html";
  // KANBENCH_BROWSER_TEST_RESULTS=run/results.json shows a real run instead (e.g. to make the
  // screenshot in docs/reports.md); the synthetic sample otherwise.
  const char* real = std::getenv("KANBENCH_BROWSER_TEST_RESULTS");
  const bool synthetic = !real || !*real;
  HtmlReportOptions options;
  if (synthetic) {
    options.title = "kanbench report (synthetic test data)";
    options.results_source = "tests/reports_test_util.h sample_results()";
    options.baseline = test::synthetic_run(1, 1.0, 2.0, 10);
    options.baseline_source = "synthetic baseline";
    options.gbench.push_back(
        read_gbench_file(std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json"));
    write_html_report(report.string(), test::sample_results(), options);
  } else {
    options.results_source = real;
    write_html_report(report.string(), read_results_file(real), options);
  }
  const size_t expected = embedded_charts(read_file(report));
  ASSERT_GT(expected, synthetic ? 5u : 0u);

  const auto dom = open_offline(chromium_, artifacts_, "", expected);
  EXPECT_NE(dom.find("<h2>Verdict</h2>"), std::string::npos);
  EXPECT_NE(dom.find("<b>Devices:</b>"), std::string::npos);
  if (synthetic) {
    EXPECT_NE(dom.find("<b>Parity:</b> 1 of 1 comparisons pass"), std::string::npos);
    EXPECT_NE(dom.find("faster than cpu"), std::string::npos);
  }
}

// The report of a `kanbench accuracy` run: a Pareto chart per function (log axes, scatter
// points, step-line fronts, the paper's dashed lines) above the charts section.
TEST_F(ReportBrowser, AccuracyReportOpensOfflineAndDrawsEveryChart) {
  const auto report = artifacts_ / "accuracy-report.html";
  HtmlReportOptions options;
  options.title = "kanbench accuracy (synthetic test data)";
  options.results_source = "tests/reports_test_util.h sample_accuracy_results()";
  write_html_report(report.string(), test::sample_accuracy_results(), options);
  const size_t expected = embedded_charts(read_file(report));
  ASSERT_EQ(expected, 3u); // jv, ellipj, fresnel

  const auto dom = open_offline(chromium_, artifacts_, "accuracy-", expected);
  EXPECT_NE(dom.find("<h2>Accuracy</h2>"), std::string::npos);
  EXPECT_NE(dom.find("Incomplete run: 9 of 10 planned fits"), std::string::npos);
}

// The report of a fit: loss curves and the learned activations beside their symbolic fits.
TEST_F(ReportBrowser, FitReportOpensOfflineAndDrawsEveryChart) {
  const auto report = artifacts_ / "fit-report.html";
  FitReportOptions options;
  options.fit_source = std::string(KAN_FIT_REFERENCE_DIR) + "/fit_symbolic.json";
  write_fit_report(report.string(), read_fit_record(options.fit_source), options);
  const size_t expected = embedded_charts(read_file(report));
  ASSERT_EQ(expected, 5u); // two stages, three edges with curves

  const auto dom = open_offline(chromium_, artifacts_, "fit-", expected);
  EXPECT_NE(dom.find("<h2>Symbolic regression</h2>"), std::string::npos);
}

} // namespace
