// The report of a fit.json, checked structurally against the committed fixture
// tests/reference/fit/fit_symbolic.json: the fit.json 1.5 of `kanbench fit --function toy --width
// 2,1,1 --grid 5 --steps 20 --trace-steps 0`, with the keys of 1.6 added by hand after
// docs/formats.md (config.symbolic; symbolic: three fixed edges sin, x^2, exp with curves, a
// formula, 5 steps after auto_symbolic). Checked: the reader's model and errors, the sections,
// the chart data, escaping.
#include "reports_test_util.h"

#include "kan/reports/fit_report.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <functional>

namespace {

using namespace kan::reports;
using namespace kan::results;
using json = nlohmann::json;
using test::chart;
using test::count;
using test::embedded;
using test::kHostile;
using FitReport = test::ReportsScratchTest;

const std::string kFixture = std::string(KAN_FIT_REFERENCE_DIR) + "/fit_symbolic.json";

json fixture() {
  return read_json_file(kFixture);
}

// The fixture as fit.json 1.5 wrote it: no symbolic stage.
json without_symbolic() {
  auto j = fixture();
  j["schema_version"] = "1.5.0";
  j["config"].erase("symbolic");
  j["seconds"] = j["history"]["seconds"];
  j.erase("symbolic");
  return j;
}

std::string render(const json& document, FitReportOptions options = {}) {
  return render_fit_report(fit_summary_from_json(document, "fit.json"), options);
}

// The text of <section id=ID>.
std::string section(const std::string& html, const std::string& id) {
  const auto start = html.find("<section id=\"" + id + "\"");
  if (start == std::string::npos)
    return "";
  return html.substr(start, html.find("</section>", start) - start);
}

TEST(FitReportTest, ReadsTheFixture) {
  const auto fit = read_fit_summary(kFixture);
  EXPECT_EQ(fit.schema_version, "1.6.0");
  EXPECT_EQ(fit.function, "toy");
  EXPECT_EQ(to_string(fit.width), "[2, 1, 1]");
  EXPECT_FALSE(fit.pruned_width);
  EXPECT_EQ(fit.device, "cpu");
  EXPECT_EQ(fit.dtype, "float64");
  EXPECT_EQ(fit.grid, 5);
  EXPECT_EQ(fit.k, 3);
  const auto j = fixture();
  ASSERT_EQ(fit.stages.size(), 2u);
  EXPECT_EQ(fit.stages[0].key, "trained");
  EXPECT_EQ(fit.stages[1].key, "symbolic");
  EXPECT_EQ(fit.stages[0].steps.size(), j["history"]["steps"].size());
  EXPECT_EQ(fit.stages[1].steps.size(), j["symbolic"]["history"]["steps"].size());
  EXPECT_EQ(fit.stages[1].test_rmse, j["symbolic"]["test_rmse"].get<double>());
  EXPECT_EQ(fit.seconds, j["seconds"].get<double>());

  ASSERT_TRUE(fit.symbolic);
  const auto& s = *fit.symbolic;
  EXPECT_EQ(s.lib, (std::vector<std::string>{"x", "x^2", "exp", "sin"}));
  ASSERT_EQ(s.edges.size(), 3u);
  EXPECT_EQ(s.edges[0].function, "sin");
  EXPECT_EQ(s.edges[1].function, "x^2");
  EXPECT_EQ(s.edges[2].function, "exp");
  EXPECT_EQ(s.edges[1].i, 1);
  EXPECT_EQ(s.edges[2].layer, 1);
  for (const auto& edge : s.edges) {
    EXPECT_TRUE(edge.fixed);
    ASSERT_TRUE(edge.params);
    ASSERT_TRUE(edge.curve);
    EXPECT_EQ(edge.curve->x.size(), 48u);
  }
  EXPECT_EQ((*s.edges[0].params)[0], j["symbolic"]["edges"][0]["params"][0].get<double>());
  ASSERT_TRUE(s.formula);
  ASSERT_EQ(s.formula->size(), 1u);
  EXPECT_EQ((*s.formula)[0].sympy, j["symbolic"]["formula"][0]["sympy"]);
  EXPECT_EQ(s.digits, 4);
}

TEST(FitReportTest, HasEverySectionInOrder) {
  const auto html = render(fixture());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  size_t previous = 0;
  for (const char* id : {"stages", "loss", "symbolic", "configuration"}) {
    const auto at = html.find("<section id=\"" + std::string(id) + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    EXPECT_GT(at, previous) << id << " out of order";
    previous = at;
  }
  for (const char* table : {"stages-table", "symbolic-edges-table", "configuration-table"})
    EXPECT_NE(html.find("<table id=\"" + std::string(table) + "\""), std::string::npos) << table;
  // The header: function, width, device, stages.
  const auto header =
      html.substr(html.find("<header>"), html.find("</header>") - html.find("<header>"));
  for (const char* part : {"function toy", "width [2, 1, 1]", "cpu, float64",
                           "stages: first training, after auto_symbolic"})
    EXPECT_NE(header.find(part), std::string::npos) << part << " in " << header;
  // One canvas per chart, and the chart list names each.
  const auto charts = embedded(html, "kanbench-charts");
  EXPECT_EQ(charts["charts"].size(), 5u);
  EXPECT_EQ(count(html, "<canvas"), charts["charts"].size());
  for (const auto& c : charts["charts"])
    EXPECT_NE(html.find("<canvas id=\"" + c["id"].get<std::string>() + "\">"), std::string::npos);
}

TEST(FitReportTest, LossCurvesOfEveryStage) {
  const auto j = fixture();
  const auto charts = embedded(render(j), "kanbench-charts");
  for (const auto& [id, history] : {std::pair{"chart-loss-trained", j["history"]},
                                    {"chart-loss-symbolic", j["symbolic"]["history"]}}) {
    const auto& c = chart(charts, id);
    EXPECT_EQ(c["kind"], "line");
    ASSERT_EQ(c["labels"].size(), history["steps"].size()) << id;
    ASSERT_EQ(c["datasets"].size(), 2u) << id;
    EXPECT_EQ(c["datasets"][0]["label"], "train RMSE");
    EXPECT_EQ(c["datasets"][1]["label"], "test RMSE");
    for (size_t k = 0; k < history["steps"].size(); ++k) {
      EXPECT_EQ(c["labels"][k], history["steps"][k]["step"]) << id << " " << k;
      EXPECT_EQ(c["datasets"][0]["data"][k], history["steps"][k]["train_rmse"]) << id << " " << k;
      EXPECT_EQ(c["datasets"][1]["data"][k], history["steps"][k]["test_rmse"]) << id << " " << k;
    }
    EXPECT_TRUE(c["log_y"].get<bool>());
  }
  // The stages table holds the final numbers.
  const auto stages = section(render(j), "stages");
  EXPECT_NE(stages.find("<td>after auto_symbolic</td><td>" +
                        std::to_string(j["symbolic"]["history"]["steps"].size()) + "</td>"),
            std::string::npos)
      << stages;
}

TEST(FitReportTest, EachEdgeCurveIsCharted) {
  const auto j = fixture();
  const auto charts = embedded(render(j), "kanbench-charts");
  for (const auto& edge : j["symbolic"]["edges"]) {
    const std::string id =
        "chart-symbolic-" + edge["layer"].dump() + "-" + edge["i"].dump() + "-" + edge["j"].dump();
    const auto& c = chart(charts, id);
    EXPECT_EQ(c["kind"], "curve");
    EXPECT_TRUE(c["small"].get<bool>());
    EXPECT_EQ(c["x"], edge["curve"]["x"]) << id;
    EXPECT_EQ(c["y"], edge["curve"]["activation"]) << id;
    EXPECT_EQ(c["fit"], edge["curve"]["fit"]) << id;
  }
  EXPECT_EQ(chart(charts, "chart-symbolic-0-0-0")["title"], "layer 0: x1 -> 0: sin, R^2 0.9999");
  EXPECT_EQ(chart(charts, "chart-symbolic-0-1-0")["title"], "layer 0: x2 -> 0: x^2, R^2 1");
  EXPECT_EQ(chart(charts, "chart-symbolic-1-0-0")["title"], "layer 1: 0 -> 0: exp, R^2 0.9998");
}

TEST(FitReportTest, EdgeTable) {
  const auto j = fixture();
  const auto html = render(j);
  const auto symbolic = section(html, "symbolic");
  // layer, i, j, function, R^2, fixed, a, b, c, d
  EXPECT_NE(symbolic.find("<tr><td>0</td><td>1</td><td>0</td><td>x^2</td><td>1</td><td>yes</td>"
                          "<td>1.001</td><td>-0.0003</td><td>0.9987</td><td>0.0011</td></tr>"),
            std::string::npos)
      << symbolic;
  EXPECT_EQ(count(symbolic, "<td>yes</td>"), 3u);
}

TEST(FitReportTest, FormulaIsShownEscaped) {
  auto j = fixture();
  const auto& formula = j["symbolic"]["formula"][0];
  auto html = render(j);
  const auto symbolic = section(html, "symbolic");
  EXPECT_NE(symbolic.find("<code class=\"sympy\">" + html_escape(formula["sympy"]) + "</code>"),
            std::string::npos)
      << symbolic;
  EXPECT_NE(symbolic.find("<pre><code class=\"latex\">" + html_escape(formula["latex"]) +
                          "</code></pre>"),
            std::string::npos)
      << symbolic;
  EXPECT_NE(symbolic.find(html_escape(formula["sympy_exact"])), std::string::npos) << symbolic;
  // Text a formula could hold that HTML would read as markup.
  j["symbolic"]["formula"][0]["sympy"] = "x1 < 2 && x2 > 1";
  j["symbolic"]["formula"][0]["latex"] = "\\frac{x_{1}}{2} <b>";
  html = render(j);
  EXPECT_NE(html.find("x1 &lt; 2 &amp;&amp; x2 &gt; 1"), std::string::npos);
  EXPECT_NE(html.find("\\frac{x_{1}}{2} &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
}

TEST(FitReportTest, NoFormulaShowsWhy) {
  auto j = fixture();
  j["symbolic"]["formula"] = nullptr;
  j["symbolic"]["formula_error"] = "edge (1, 0, 0) stayed numeric: R^2 0.5 < 0.9";
  const auto symbolic = section(render(j), "symbolic");
  EXPECT_NE(symbolic.find("edge (1, 0, 0) stayed numeric: R^2 0.5 &lt; 0.9"), std::string::npos)
      << symbolic;
  EXPECT_EQ(symbolic.find("<code class=\"sympy\">"), std::string::npos);
  // An edge that stayed numeric has no parameters and no curve.
  j["symbolic"]["edges"][2]["fixed"] = false;
  j["symbolic"]["edges"][2].erase("params");
  j["symbolic"]["edges"][2].erase("curve");
  const auto html = render(j);
  EXPECT_NE(section(html, "symbolic").find("<td>no</td><td>-</td><td>-</td><td>-</td><td>-</td>"),
            std::string::npos);
  EXPECT_THROW(chart(embedded(html, "kanbench-charts"), "chart-symbolic-1-0-0"),
               std::runtime_error);
  EXPECT_EQ(count(html, "<canvas"), 4u);
}

TEST(FitReportTest, OlderFilesHaveNoSymbolicSection) {
  const auto html = render(without_symbolic());
  EXPECT_EQ(html.find("<section id=\"symbolic\""), std::string::npos);
  EXPECT_EQ(html.find("Symbolic regression"), std::string::npos);
  EXPECT_EQ(html.find("chart-symbolic-"), std::string::npos);
  const auto charts = embedded(html, "kanbench-charts");
  ASSERT_EQ(charts["charts"].size(), 1u);
  EXPECT_EQ(charts["charts"][0]["id"], "chart-loss-trained");
  // fit.json 1.0 had neither config.prune nor config.symbolic.
  auto old = without_symbolic();
  old["schema_version"] = "1.0.0";
  old["config"].erase("prune");
  EXPECT_NO_THROW(render(old));
}

TEST(FitReportTest, PrunedAndRefinedStagesInOrder) {
  auto j = without_symbolic();
  j["pruned"] = {{"width_before", {2, 1, 1}}, {"width_after", {2, json::array({1, 0}), 1}},
                 {"history", j["history"]},   {"train_rmse", 0.5},
                 {"test_rmse", 0.25},         {"seconds", j["history"]["seconds"]}};
  j["refined"] = {{"grid", 10},
                  {"history", j["history"]},
                  {"train_rmse", 0.1},
                  {"test_rmse", 0.2},
                  {"seconds", j["history"]["seconds"]}};
  const auto fit = fit_summary_from_json(j);
  ASSERT_EQ(fit.stages.size(), 3u);
  EXPECT_EQ(fit.stages[1].title, "after pruning");
  EXPECT_EQ(fit.stages[2].title, "after refinement to grid 10");
  EXPECT_EQ(to_string(*fit.pruned_width), "[2, 1, 1]");
  const auto html = render_fit_report(fit);
  EXPECT_NE(html.find("(pruned to [2, 1, 1])"), std::string::npos);
  for (const char* id : {"chart-loss-trained", "chart-loss-pruned", "chart-loss-refined"})
    EXPECT_NO_THROW(chart(embedded(html, "kanbench-charts"), id)) << id;
  // fit.json 2.x: a grid schedule, one stage per grid.
  auto schedule = j;
  schedule["schema_version"] = "2.0.0";
  auto coarse = j["refined"], fine = j["refined"];
  coarse["grid"] = 5;
  schedule["refined"] = json::array({coarse, fine});
  const auto scheduled = fit_summary_from_json(schedule);
  ASSERT_EQ(scheduled.stages.size(), 4u);
  EXPECT_EQ(scheduled.stages[2].title, "after refinement to grid 5");
  EXPECT_EQ(scheduled.stages[3].title, "after refinement to grid 10");
  const auto scheduled_html = render_fit_report(scheduled);
  for (const char* id : {"chart-loss-refined-0", "chart-loss-refined-1"})
    EXPECT_NO_THROW(chart(embedded(scheduled_html, "kanbench-charts"), id)) << id;
  schedule["refined"] = coarse; // an object is 1.x's form
  EXPECT_THROW(fit_summary_from_json(schedule), kan::results::ResultsError);
  // Multiplication nodes: pykan's [sum, mult] form.
  j["config"]["model"]["width"] = {2, 3, 1};
  j["config"]["model"]["mult"] = {0, 1, 0};
  EXPECT_EQ(to_string(fit_summary_from_json(j).width), "[2, [2, 1], 1]");
}

// Malformed input: one error naming the file, the key path and the problem.
TEST(FitReportTest, MalformedInputNamesTheKey) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases{
      {[](json& j) { j["config"].erase("function"); },
       "fit.json: config.function: missing (a required key)"},
      {[](json& j) { j["symbolic"]["edges"][1]["r2"] = "high"; },
       "fit.json: symbolic.edges[1].r2: expected a number, got a string (\"high\")"},
      {[](json& j) { j["history"]["steps"][2].erase("train_rmse"); },
       "fit.json: history.steps[2].train_rmse: missing (a required key)"},
      {[](json& j) { j["symbolic"]["edges"][0]["curve"]["fit"].erase(0); },
       "fit.json: symbolic.edges[0].curve.fit: expected 48 numbers, one per x, got 47"},
      {[](json& j) {
         j["symbolic"]["edges"][0]["params"] = {1, 2};
       },
       "fit.json: symbolic.edges[0].params: expected 4 numbers (a, b, c, d), got 2"},
      {[](json& j) { j["symbolic"]["formula"] = nullptr; },
       "fit.json: symbolic.formula_error: missing (a required key)"},
      {[](json& j) { j["symbolic"]["formula"].push_back(j["symbolic"]["formula"][0]); },
       "fit.json: symbolic.formula: expected one formula per output (1), got 2"},
      {[](json& j) { j["config"]["symbolic"] = nullptr; },
       "fit.json: symbolic: present, but config.symbolic is null or missing"},
      {[](json& j) { j.erase("symbolic"); },
       "fit.json: symbolic: missing, but config.symbolic is set"},
      {[](json& j) { j["command"] = "audit"; },
       "fit.json: command: expected \"fit\", got \"audit\""},
      {[](json& j) { j["schema_version"] = "3.0.0"; }, "fit.json: schema_version: "},
      {[](json& j) { j["config"]["model"]["width"][1] = -1; },
       "fit.json: config.model.width[1]: "}};
  for (const auto& [mutate, message] : cases) {
    auto j = fixture();
    mutate(j);
    try {
      fit_summary_from_json(j, "fit.json");
      ADD_FAILURE() << "read: " << message;
    } catch (const ResultsError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST_F(FitReport, FileErrorsNameTheFile) {
  write("fit.json", "{\"schema_version\": \"1.6.0\", ");
  try {
    read_fit_summary(path("fit.json"));
    ADD_FAILURE() << "read a truncated file";
  } catch (const ResultsError& e) {
    EXPECT_EQ(e.file(), path("fit.json"));
  }
  EXPECT_THROW(read_fit_summary(path("missing.json")), ResultsError);
  EXPECT_FALSE(is_fit_document(json::parse("{\"schema_version\": \"1.2.0\"}")));
  EXPECT_FALSE(is_fit_document(json::array()));
  EXPECT_TRUE(is_fit_document(fixture()));
}

TEST(FitReportTest, HostileStringsAreInert) {
  auto j = fixture();
  j["config"]["function"] = kHostile;
  j["config"]["device"] = kHostile;
  j["symbolic"]["edges"][0]["function"] = kHostile;
  j["symbolic"]["formula"][0]["sympy"] = kHostile;
  j["symbolic"]["formula"][0]["latex"] = kHostile + "\xE2\x80\xA8<!--";
  j["symbolic"]["formula"][0]["sympy_exact"] = kHostile;
  j["config"]["symbolic"]["lib"][0] = kHostile;
  FitReportOptions options;
  options.title = kHostile;
  options.fit_source = kHostile;
  const auto html = render(j, options);
  EXPECT_EQ(html.find(kHostile), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<!--"), std::string::npos);
  EXPECT_EQ(test::scripts(html).find("\xE2\x80\xA8"), std::string::npos);
  // Three script elements (charts, Chart.js, report), each closed once.
  EXPECT_EQ(count(html, "<script"), 3u);
  EXPECT_EQ(count(html, "</script>"), 3u);
  // The chart titles still hold the exact strings.
  EXPECT_EQ(chart(embedded(html, "kanbench-charts"), "chart-symbolic-0-0-0")["title"],
            "layer 0: x1 -> 0: " + kHostile + ", R^2 0.9999");
  // And with no formula, the error.
  j["symbolic"]["formula"] = nullptr;
  j["symbolic"]["formula_error"] = kHostile;
  EXPECT_EQ(render(j).find(kHostile), std::string::npos);
}

TEST(FitReportTest, NoExternalUrls) {
  FitReportOptions options;
  options.chartjs_source = "var Chart = 1;";
  test::expect_fetches_nothing(render(fixture(), options));
}

TEST_F(FitReport, WrittenAtomically) {
  const auto fit = read_fit_summary(kFixture);
  write_fit_report(path("report.html"), fit);
  EXPECT_EQ(read("report.html"), render_fit_report(fit));
  FitReportOptions options;
  options.chartjs_path = "/nonexistent/chart.min.js";
  EXPECT_THROW(write_fit_report(path("other.html"), fit, options), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(path("other.html")));
}

} // namespace
