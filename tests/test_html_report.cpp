// The HTML report, checked structurally: sections, numbers against the JSON, no external URL,
// inert hostile strings.
#include "reports_test_util.h"

#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <cstdlib>
#include <functional>
#include <optional>

namespace {

using namespace kan::reports;
using namespace kan::results;
using json = nlohmann::json;
using HtmlReport = test::ReportsScratchTest;

using test::chart;
using test::count;
using test::embedded;
using test::kHostile;
using test::scripts;

// The HTML without the embedded JSON data.
std::string markup(const std::string& html) {
  std::string text = html;
  for (const char* id : {"kanbench-results", "kanbench-charts"}) {
    const auto start = text.find("<script type=\"application/json\" id=\"" + std::string(id));
    const auto end = text.find("</script>", start);
    text.erase(start, end - start);
  }
  return text;
}

// The HTML without the inlined Chart.js (whose licence comment names its web site).
std::string without_chartjs(const std::string& html) {
  const std::string chartjs = load_chartjs(default_chartjs_path());
  const auto at = html.find(chartjs);
  if (at == std::string::npos)
    return html;
  return html.substr(0, at) + html.substr(at + chartjs.size());
}

HtmlReportOptions full_options() {
  HtmlReportOptions options;
  options.results_source = "run/results.json";
  options.baseline = test::synthetic_run(1, 1.0, 2.0, 10);
  options.baseline_source = "old/results.json";
  options.gbench.push_back(
      read_gbench_file(std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json"));
  return options;
}

TEST(HtmlReportTest, HasEverySectionWithTheVerdictFirst) {
  const auto html = render_html_report(test::sample_results(), full_options());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  size_t previous = 0;
  for (const char* id :
       {"verdict", "charts", "cases", "comparisons", "edge-cases", "monitoring", "scaling", "sweep",
        "audit", "baseline", "gbench-0", "environment", "configuration"}) {
    const auto at = html.find("<section id=\"" + std::string(id) + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    EXPECT_GT(at, previous) << id << " out of order";
    previous = at;
  }
  EXPECT_EQ(html.find("<section"), html.find("<section id=\"verdict\""));
  for (const char* table :
       {"cases-table", "comparisons-table", "edge-cases-table", "scaling-table", "monitoring-table",
        "sweep-table", "sweep-targets-table", "audit-table", "baseline-table", "gbench-table-0",
        "environment-table", "configuration-table", "case-configuration-table"})
    EXPECT_NE(html.find("<table id=\"" + std::string(table) + "\""), std::string::npos) << table;
  // One canvas per chart, and the chart list names each.
  const auto charts = embedded(html, "kanbench-charts");
  EXPECT_EQ(count(html, "<canvas"), charts["charts"].size());
  for (const auto& c : charts["charts"])
    EXPECT_NE(html.find("<canvas id=\"" + c["id"].get<std::string>() + "\">"), std::string::npos);
  for (const char* id :
       {"chart-epoch-time", "chart-speedup", "chart-loss-0", "chart-activation-0-0-0",
        "chart-activation-0-1-0", "chart-activation-1-0-0", "chart-scaling", "chart-sweep",
        "chart-monitor-gpu", "chart-memory"})
    EXPECT_NO_THROW(chart(charts, id)) << id;
  // The scaling chart: speedup per rank count, null where not measured, and the ideal line.
  const auto& scaling = chart(charts, "chart-scaling");
  EXPECT_EQ(scaling["labels"], json({1, 2, 4}));
  EXPECT_EQ(scaling["datasets"][0]["label"], "deep on cuda");
  EXPECT_TRUE(scaling["datasets"][0]["data"][2].is_null());
  EXPECT_EQ(scaling["datasets"][1]["label"], "ideal");
  // The sweep chart: log axes, one line per target with [batch, samples/s] points, and the
  // crossover as a dashed vertical line.
  const auto& sweep = chart(charts, "chart-sweep");
  EXPECT_EQ(sweep["kind"], "xy");
  EXPECT_TRUE(sweep["log_x"].get<bool>() && sweep["log_y"].get<bool>());
  ASSERT_EQ(sweep["datasets"].size(), 3u);
  EXPECT_EQ(sweep["datasets"][0]["label"], "cpu");
  EXPECT_EQ(sweep["datasets"][0]["points"][0], json({64, 1e4}));
  EXPECT_EQ(sweep["datasets"][0]["points"].size(), 4u); // the timed-out point has no throughput
  EXPECT_EQ(sweep["datasets"][2]["label"], "deep: cuda overtakes cpu");
  EXPECT_EQ(sweep["datasets"][2]["points"], json({{256, 5e3}, {256, 3e5}}));
  EXPECT_TRUE(sweep["datasets"][2]["dashed"].get<bool>());
  EXPECT_NE(html.find("<li>deep: cuda overtakes cpu from batch 256</li>"), std::string::npos);
  EXPECT_NE(html.find("<b>Batch-size sweep:</b> deep: cuda overtakes cpu from batch 256; deep on "
                      "cpu peaks at"),
            std::string::npos);
  // Monitoring: the GPU's utilisation over time, its throttling a warning; a CPU case with one
  // CPU figure has no line of its own.
  const auto& gpu = chart(charts, "chart-monitor-gpu");
  ASSERT_EQ(gpu["datasets"].size(), 1u);
  EXPECT_EQ(gpu["datasets"][0]["label"], "toy on cuda");
  EXPECT_EQ(gpu["datasets"][0]["points"][2], json({0.2, 80.0}));
  EXPECT_THROW(chart(charts, "chart-monitor-cpu"), std::exception);
  // And NVML's other figures, each over time.
  EXPECT_EQ(chart(charts, "chart-monitor-power")["datasets"][0]["points"][1], json({0.1, 300.5}));
  EXPECT_EQ(chart(charts, "chart-monitor-clock")["datasets"][0]["points"][0], json({0.0, 1980.0}));
  EXPECT_EQ(chart(charts, "chart-monitor-temperature")["datasets"][0]["points"].size(), 3u);
  EXPECT_DOUBLE_EQ(
      chart(charts, "chart-monitor-gpu-memory")["datasets"][0]["points"][2][1].get<double>(),
      1e9 / (1 << 20));
  EXPECT_NE(html.find("warning: toy on cuda: GPU throttled in 1 of 3"), std::string::npos);
}

TEST(HtmlReportTest, ASweepAloneSaysWhereItRan) {
  Results r;
  r.config.devices = {"cpu", "cuda"};
  r.sweep = test::sample_sweep();
  auto html = render_html_report(r, full_options());
  EXPECT_NE(html.find("<b>Devices:</b> ran on cpu, cuda:0"), std::string::npos);
  EXPECT_NE(html.find("<section id=\"sweep\">"), std::string::npos);
  EXPECT_EQ(html.find("<section id=\"scaling\">"), std::string::npos);
  // The sweep's points are its table; a sweep has no cases, parity pairs or edge cases to show.
  auto options = full_options();
  options.baseline.reset();
  html = render_html_report(r, options);
  EXPECT_NE(html.find("id=\"sweep-table\""), std::string::npos);
  EXPECT_NE(html.find("chart-sweep"), std::string::npos);
  for (const char* section : {"cases", "comparisons", "edge-cases", "audit"})
    EXPECT_EQ(html.find("<section id=\"" + std::string(section) + "\">"), std::string::npos)
        << section;
  EXPECT_EQ(html.find("Edge cases:"), std::string::npos);
  EXPECT_EQ(html.find("No learned activation functions"), std::string::npos);
}

TEST(HtmlReportTest, VerdictSaysWhatRanAndHowItWent) {
  const auto html = render_html_report(test::sample_results(), full_options());
  const auto verdict =
      html.substr(html.find("<section id=\"verdict\""),
                  html.find("<section id=\"charts\"") - html.find("<section id=\"verdict\""));
  EXPECT_NE(verdict.find("ran on cpu, cuda:0"), std::string::npos) << verdict;
  EXPECT_NE(
      verdict.find("cuda <span class=\"status neutral\">skipped</span> for wide (no CUDA device"),
      std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find("toy: cuda <span class=\"figure\">5.10&times;</span> faster than cpu"),
            std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find("<b>Parity:</b> 1 of 1 comparisons pass"), std::string::npos);
  EXPECT_NE(verdict.find("<b>Edge cases:</b> 1 passed, 1 failed, 1 skipped (out_of_memory on "
                         "cuda: needs a GPU)"),
            std::string::npos)
      << verdict;
  // Pass or fail is run_problems()'s decision, listed line for line (the CLI prints the same).
  const auto problems = run_problems(test::sample_results());
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(verdict.find("<b>Result:</b> <span class=\"status bad\">fail</span>, " +
                         std::to_string(problems.size()) + " problem"),
            std::string::npos)
      << verdict;
  for (const auto& problem : problems)
    EXPECT_NE(verdict.find("<li>" + html_escape(problem) + "</li>"), std::string::npos) << problem;
  EXPECT_NE(verdict.find("edge case million_samples on cpu fails"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("1 finding"), std::string::npos);
  EXPECT_NE(verdict.find("toy/cuda 78.5% (119 kernels/epoch)"), std::string::npos) << verdict;
  // Against the synthetic baseline: toy/cpu is 0.51 s against ~1 s -> faster.
  EXPECT_NE(verdict.find("<b>Against the baseline</b> (old/results.json): 0 slower, 1 faster"),
            std::string::npos)
      << verdict;
  const auto without = render_html_report(test::sample_results());
  EXPECT_NE(without.find("<b>Against a baseline:</b> none given"), std::string::npos);
  EXPECT_EQ(without.find("<section id=\"baseline\""), std::string::npos);
  EXPECT_EQ(without.find("<section id=\"gbench-0\""), std::string::npos);
}

TEST(HtmlReportTest, VerdictGroupsTargetsThatDidNotRun) {
  auto results = test::sample_results();
  results.cases[1].status = CaseStatus::kSkipped;
  results.cases[1].reason = results.cases[3].reason;
  results.cases[1].epoch_seconds.clear();
  results.cases[1].median_epoch_seconds.reset();
  results.comparisons[0].speedup = 0.999;
  const auto html = render_html_report(results);
  EXPECT_NE(html.find("not measured: cuda <span class=\"status neutral\">skipped</span> for toy, "
                      "wide (no CUDA device: CUDA is not usable: no NVIDIA driver)</li>"),
            std::string::npos);
  EXPECT_EQ(count(html, "no NVIDIA driver)</li>"), 1u);
  EXPECT_NE(html.find("<span class=\"figure\">1.00&times;</span> slower than cpu"),
            std::string::npos);
}

TEST(HtmlReportTest, NumbersMatchTheJson) {
  const auto results = test::sample_results();
  const auto html = render_html_report(results, full_options());
  // The whole results.json travels with the report.
  EXPECT_EQ(embedded(html, "kanbench-results"), to_json(results));

  const auto charts = embedded(html, "kanbench-charts");
  const auto& epoch = chart(charts, "chart-epoch-time");
  EXPECT_EQ(epoch["labels"], json({"toy", "wide"}));
  ASSERT_EQ(epoch["datasets"].size(), 2u);
  EXPECT_EQ(epoch["datasets"][0]["label"], "cpu");
  EXPECT_EQ(epoch["datasets"][0]["data"][0].get<double>(), *results.cases[0].median_epoch_seconds);
  EXPECT_EQ(epoch["datasets"][0]["data"][1].get<double>(), *results.cases[2].median_epoch_seconds);
  EXPECT_EQ(epoch["datasets"][1]["data"][0].get<double>(), *results.cases[1].median_epoch_seconds);
  EXPECT_TRUE(epoch["datasets"][1]["data"][1].is_null()); // wide/cuda skipped: no bar
  const auto s = summarize(results.cases[0].epoch_seconds);
  EXPECT_EQ(epoch["datasets"][0]["errors"][0], json({s->q1, s->q3}));
  EXPECT_FALSE(epoch.contains("log_y")); // within 30x of each other: a linear axis
  // A sub-millisecond case beside the others: a log axis, where each stays readable.
  auto wide_apart = results;
  wide_apart.cases[0].median_epoch_seconds = 2e-4;
  const auto apart = embedded(render_html_report(wide_apart, full_options()), "kanbench-charts");
  EXPECT_TRUE(chart(apart, "chart-epoch-time")["log_y"].get<bool>());

  const auto& speedup = chart(charts, "chart-speedup");
  EXPECT_EQ(speedup["datasets"][0]["data"][0].get<double>(), 5.1);
  EXPECT_EQ(speedup["datasets"][0]["errors"][0], json({4.2, 5.5}));

  const auto& loss = chart(charts, "chart-loss-0");
  EXPECT_EQ(loss["datasets"][0]["data"], json(results.cases[0].train_loss_per_epoch));
  EXPECT_EQ(loss["datasets"][1]["data"], json(results.cases[1].train_loss_per_epoch));
  EXPECT_TRUE(loss["log_y"].get<bool>());

  const auto& phi = chart(charts, "chart-activation-1-0-0");
  EXPECT_EQ(phi["x"], json(results.cases[0].activations[2].x));
  EXPECT_EQ(phi["y"], json(results.cases[0].activations[2].y));

  const auto& memory = chart(charts, "chart-memory");
  EXPECT_DOUBLE_EQ(memory["datasets"][0]["data"][0].get<double>(), 12345678.0 / (1024 * 1024));

  // The tables show the same figures, rounded.
  const auto cases = html.substr(html.find("<table id=\"cases-table\""));
  EXPECT_NE(cases.find("<td>510 ms</td><td>20 ms</td><td>490 ms</td><td>550 ms</td><td>5</td>"),
            std::string::npos);
  EXPECT_NE(cases.find("11.8 MiB"), std::string::npos);
  EXPECT_NE(cases.find("accuracy 91%"), std::string::npos);
  EXPECT_NE(html.find("<td>5.1 (4.2&ndash;5.5)</td>"), std::string::npos);
  EXPECT_NE(html.find("unchunked_bytes_estimate = 3.2e+09"), std::string::npos);
  EXPECT_NE(html.find("<td>BM_Sum/64_mean</td><td>mean</td><td>2</td><td>0.1323 us</td>"),
            std::string::npos);
}

TEST(HtmlReportTest, NoExternalUrls) {
  const auto html = without_chartjs(render_html_report(test::sample_results(), full_options()));
  test::expect_fetches_nothing(html);
  // Chart.js is inlined, not referenced.
  EXPECT_NE(html.find("<script>\n"), std::string::npos);
  EXPECT_NE(render_html_report(test::sample_results()).find("Chart.js v3"), std::string::npos);
}

TEST(HtmlReportTest, HostileStringsAreInert) {
  auto results = test::sample_results();
  results.cases[0].name = kHostile;
  results.cases[0].target = kHostile;
  results.cases[0].reason = kHostile;
  results.cases[0].audit_findings[0].message = kHostile;
  results.cases[0].config["opt"] = kHostile;
  results.comparisons[0].case_name = kHostile;
  results.comparisons[0].a = kHostile;
  results.comparisons[0].label = kHostile + "\xE2\x80\xA8<!--";
  results.edge_cases[0].message = kHostile;
  results.edge_cases[0].measurements[kHostile] = 1;
  results.environment.hostname = kHostile;
  results.environment.cpu_model = "\"onmouseover=\"alert(1)";
  results.config.extra = {{kHostile, kHostile}};
  auto options = full_options();
  options.title = kHostile;
  options.results_source = kHostile;
  options.baseline_source = kHostile;
  options.gbench[0].benchmarks[0].name = kHostile;
  options.gbench[0].source = kHostile;
  const auto html = render_html_report(results, options);

  EXPECT_EQ(html.find(kHostile), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(markup(html).find("\"onmouseover"), std::string::npos);
  EXPECT_NE(html.find("&quot;onmouseover=&quot;alert(1)"), std::string::npos);
  EXPECT_EQ(scripts(html).find("\xE2\x80\xA8"), std::string::npos); // ends a JS line
  EXPECT_EQ(html.find("<!--"), std::string::npos);
  // Four script elements (results, charts, Chart.js, report), each closed once.
  EXPECT_EQ(count(html, "<script"), 4u);
  EXPECT_EQ(count(html, "</script>"), 4u);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  // The embedded data still holds the exact strings.
  const auto data = embedded(html, "kanbench-results");
  EXPECT_EQ(data["cases"][0]["name"], kHostile);
  EXPECT_EQ(data["environment"]["hostname"], kHostile);
  EXPECT_EQ(data["comparisons"][0]["label"], kHostile + "\xE2\x80\xA8<!--");
}

TEST(HtmlReportTest, EscapingFunctions) {
  EXPECT_EQ(html_escape("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(escape_script_json(json("</script>&\xE2\x80\xA9").dump()),
            "\"\\u003c/script\\u003e\\u0026\\u2029\"");
  EXPECT_EQ(json::parse(escape_script_json(json(kHostile).dump())), kHostile);
}

TEST(HtmlReportTest, ChartJsIsRequiredAndInlinedSafely) {
  HtmlReportOptions options;
  options.chartjs_path = "/nonexistent/chart.min.js";
  try {
    render_html_report(test::sample_results(), options);
    ADD_FAILURE() << "rendered without Chart.js";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/chart.min.js"), std::string::npos) << what;
    EXPECT_NE(what.find("libjs-chart.js"), std::string::npos) << what;
  }
  options.chartjs_source = "var Chart = '</SCRIPT>';";
  const auto html = render_html_report(test::sample_results(), options);
  EXPECT_NE(html.find("var Chart = '<\\/SCRIPT>';"), std::string::npos);
  EXPECT_EQ(count(html, "</script>"), 4u);
  options.chartjs_source = "<!-- x";
  EXPECT_THROW(render_html_report(test::sample_results(), options), std::runtime_error);
}

TEST(HtmlReportTest, ChartJsPathFromTheEnvironment) {
  ::setenv("KANBENCH_CHARTJS", "/somewhere/chart.js", 1);
  EXPECT_EQ(default_chartjs_path(), "/somewhere/chart.js");
  ::setenv("KANBENCH_CHARTJS", "", 1);
  EXPECT_EQ(default_chartjs_path(), kDefaultChartJsPath);
  ::unsetenv("KANBENCH_CHARTJS");
  EXPECT_EQ(default_chartjs_path(), kDefaultChartJsPath);
}

TEST(HtmlReportTest, EmptyRunRendersWithoutCharts) {
  Results empty;
  empty.config.devices = {"cpu"};
  const auto html = render_html_report(empty);
  EXPECT_NE(html.find("<b>Devices:</b> nothing ran"), std::string::npos);
  EXPECT_EQ(embedded(html, "kanbench-charts")["charts"].size(), 0u);
  EXPECT_EQ(count(html, "<canvas"), 0u);
  EXPECT_NE(html.find("No comparisons in this run."), std::string::npos);
}

TEST(HtmlReportTest, RecordsTheRunIdFirstInTheHead) {
  const auto results = test::sample_results();
  const auto html = render_html_report(results, full_options());
  EXPECT_EQ(html_report_run_id(html), results.run_id);
  // Before the title and the style: report_pair_problem() reads only the beginning.
  EXPECT_EQ(html.find("<meta name=\"kanbench-run-id\" content=\"" + results.run_id + "\">"),
            html.find("<meta charset=\"utf-8\">\n") + 23);
  EXPECT_NE(html.find("<meta name=\"kanbench-results\" content=\"results.json\">"),
            std::string::npos);
  EXPECT_NE(html.find("&middot; run " + results.run_id + "</p></header>"), std::string::npos);

  // A results.json of schema 1.0 has no run id, and its report records none.
  auto old = results;
  old.schema_version = "1.0.0";
  old.run_id.clear();
  const auto old_html = render_html_report(old, full_options());
  EXPECT_EQ(html_report_run_id(old_html), std::nullopt);
  EXPECT_EQ(old_html.find("kanbench-run-id"), std::string::npos);

  for (const auto& [text, id] : std::vector<std::pair<std::string, std::optional<std::string>>>{
           {"<head><meta name=\"kanbench-run-id\" content=\"r-1\"></head>", "r-1"},
           {"<head><meta name=\"kanbench-run-id\" content=\"r-1\">", "r-1"}, // a beginning
           {"<head></head><meta name=\"kanbench-run-id\" content=\"r-1\">", std::nullopt},
           {"<head><meta name=\"kanbench-run-id\" content=\"a b\"></head>", std::nullopt},
           {"<head><meta name=\"kanbench-run-id\" content=\"r-1", std::nullopt},
           {"", std::nullopt}})
    EXPECT_EQ(html_report_run_id(text), id) << text;
}

TEST_F(HtmlReport, ReportPairProblemFindsAStaleReport) {
  HtmlReportOptions options;
  options.chartjs_source = "/* Chart.js */";
  auto results = test::sample_results();
  results.run_id = "run-new";
  auto other = results;
  other.run_id = "run-old";
  auto old = results;
  old.schema_version = "1.0.0";
  old.run_id.clear();
  const std::string report = path("report.html");
  const std::string fix = " (kanbench report " + path("results.json") + " writes a matching one)";
  struct Row {
    std::string what;
    std::function<void()> make_report; // what lies beside results.json
    const Results* results;
    std::optional<std::string> problem;
  };
  const std::vector<Row> rows{
      {"no report", [] {}, &results, std::nullopt},
      {"its own report", [&] { write_html_report(report, results, options); }, &results,
       std::nullopt},
      {"another run's report", [&] { write_html_report(report, other, options); }, &results,
       report + " is stale: it shows run run-old, but " + path("results.json") + " is run run-new" +
           fix},
      {"a report without a run id", [&] { write_html_report(report, old, options); }, &results,
       report + " records no run id (an older kanbench wrote it), so it may not show " +
           path("results.json") + " (run run-new)" + fix},
      {"not a report", [&] { write("report.html", "<p>hello</p>"); }, &results,
       report + " records no run id (an older kanbench wrote it), so it may not show " +
           path("results.json") + " (run run-new)" + fix},
      {"results of schema 1.0", [&] { write_html_report(report, other, options); }, &old,
       std::nullopt},
      {"a folder named report.html", [&] { std::filesystem::create_directory(report); }, &results,
       std::nullopt},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.what);
    std::filesystem::remove_all(report);
    row.make_report();
    EXPECT_EQ(report_pair_problem(path("results.json"), *row.results), row.problem);
  }
  // Reading the results from the file: the same answer.
  std::filesystem::remove_all(report);
  write_results_file(path("results.json"), results);
  write_html_report(report, other, options);
  EXPECT_EQ(report_pair_problem(path("results.json")),
            report + " is stale: it shows run run-old, but " + path("results.json") +
                " is run run-new" + fix);
  EXPECT_THROW(report_pair_problem(path("missing.json")), ResultsError);
}

TEST_F(HtmlReport, WrittenAtomically) {
  write_html_report(path("report.html"), test::sample_results());
  EXPECT_EQ(read("report.html"), render_html_report(test::sample_results()));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator{}),
            1);
}

} // namespace
