// The report of a fit.json, checked structurally against the committed fixture
// tests/reference/fit/fit_symbolic.json: the fit.json of `kanbench fit --function toy --width
// 2,1,1 --grid 5 --steps 20 --trace-steps 0 --symbolic --lib sin,x^2,exp` (three fixed edges sin,
// x^2, x^2 with curves, a formula, 20 steps after auto_symbolic). Checked: kan::results' reader
// (its model and its errors), the sections, the chart data, escaping.
#include "reports_test_util.h"

#include "kan/reports/fit_report.h"
#include "kan/reports/html_report.h"
#include "kan/results/fit_record.h"
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

// The fixture's fit without its symbolic stage, as kanbench would have written it.
FitRecord without_symbolic() {
  auto fit = fit_record_from_json(fixture());
  fit.symbolic.reset();
  fit.config.symbolic = nullptr;
  return fit;
}

std::string render(const json& document, FitReportOptions options = {}) {
  return render_fit_report(fit_record_from_json(document, "fit.json"), options);
}

// The text of <section id=ID>.
std::string section(const std::string& html, const std::string& id) {
  const auto start = html.find("<section id=\"" + id + "\"");
  if (start == std::string::npos)
    return "";
  return html.substr(start, html.find("</section>", start) - start);
}

TEST(FitReportTest, ReadsTheFixture) {
  const auto fit = read_fit_record(kFixture);
  const auto j = fixture();
  EXPECT_EQ(fit.schema_version, kFitSchemaVersion);
  EXPECT_EQ(fit.config.function, "toy");
  EXPECT_FALSE(fit.config.data);
  EXPECT_EQ(fit.config.device, "cpu");
  const auto shape = model_shape(fit.config);
  EXPECT_EQ(to_string(shape.width), "[2, 1, 1]");
  EXPECT_EQ(shape.dtype, "float64");
  EXPECT_EQ(shape.grid, 5);
  EXPECT_EQ(shape.k, 3);
  EXPECT_EQ(shape.symbolic_lib, (std::vector<std::string>{"sin", "x^2", "exp"}));
  EXPECT_FALSE(fit.pruned);
  EXPECT_TRUE(fit.refined.empty());
  EXPECT_EQ(fit.trained.history.steps.size(), j["history"]["steps"].size());
  ASSERT_TRUE(fit.symbolic);
  const auto& s = *fit.symbolic;
  EXPECT_EQ(s.retrained.history.steps.size(), j["symbolic"]["history"]["steps"].size());
  EXPECT_EQ(s.retrained.test_rmse, j["symbolic"]["test_rmse"].get<double>());
  EXPECT_DOUBLE_EQ(fit.seconds(), j["seconds"].get<double>());
  ASSERT_EQ(s.edges.size(), 3u);
  EXPECT_EQ(s.edges[0].function, "sin");
  EXPECT_EQ(s.edges[1].function, "x^2");
  EXPECT_EQ(s.edges[2].function, "x^2");
  EXPECT_EQ(s.edges[1].i, 1);
  EXPECT_EQ(s.edges[2].layer, 1);
  for (const auto& edge : s.edges) {
    EXPECT_TRUE(edge.fixed);
    ASSERT_EQ(edge.params.size(), 4u);
    ASSERT_TRUE(edge.curve);
    EXPECT_EQ(edge.curve->x.size(), 48u);
  }
  EXPECT_EQ(s.edges[0].params[0], j["symbolic"]["edges"][0]["params"][0].get<double>());
  ASSERT_TRUE(s.formula);
  ASSERT_EQ(s.formula->size(), 1u);
  EXPECT_EQ((*s.formula)[0].sympy, j["symbolic"]["formula"][0]["sympy"]);
  EXPECT_EQ(s.digits, 4);
  ASSERT_TRUE(fit.parameters);
  EXPECT_EQ(*fit.parameters, j["final"]["parameters"].get<int64_t>());
}

// The one writer and the one reader agree: what is read writes back the same document.
TEST(FitReportTest, ReadAndWrittenBack) {
  const auto j = fixture();
  EXPECT_EQ(to_json(fit_record_from_json(j)), j);
  const auto plain = without_symbolic();
  EXPECT_EQ(to_json(fit_record_from_json(to_json(plain))), to_json(plain));
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
  EXPECT_EQ(chart(charts, "chart-symbolic-0-0-0")["title"], "layer 0: x1 -> 0: sin, R^2 1");
  EXPECT_EQ(chart(charts, "chart-symbolic-0-1-0")["title"], "layer 0: x2 -> 0: x^2, R^2 1");
  EXPECT_EQ(chart(charts, "chart-symbolic-1-0-0")["title"], "layer 1: 0 -> 0: x^2, R^2 0.9912");
}

TEST(FitReportTest, EdgeTable) {
  const auto j = fixture();
  const auto html = render(j);
  const auto symbolic = section(html, "symbolic");
  // layer, i, j, function, R^2, fixed, a, b, c, d
  EXPECT_NE(symbolic.find("<tr><td>0</td><td>1</td><td>0</td><td>x^2</td><td>1</td><td>yes</td>"
                          "<td>-10</td><td>0.01205</td><td>-0.0003683</td><td>0.08883</td></tr>"),
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

TEST(FitReportTest, WithoutSymbolicStageNoSymbolicSection) {
  const auto html = render_fit_report(without_symbolic());
  EXPECT_EQ(html.find("<section id=\"symbolic\""), std::string::npos);
  EXPECT_EQ(html.find("Symbolic regression"), std::string::npos);
  EXPECT_EQ(html.find("chart-symbolic-"), std::string::npos);
  const auto charts = embedded(html, "kanbench-charts");
  ASSERT_EQ(charts["charts"].size(), 1u);
  EXPECT_EQ(charts["charts"][0]["id"], "chart-loss-trained");
}

TEST(FitReportTest, PrunedAndRefinedStagesInOrder) {
  auto fit = without_symbolic();
  fit.config.prune = {{"node_th", 0.01}, {"edge_th", 0.03}, {"steps", 20}};
  const std::vector<LayerWidth> width{{2, 0}, {1, 0}, {1, 0}};
  fit.pruned = PruneResult{
      width, width, {{0.5, 0.5}, {0.25}, {1.0}}, {{{0.1}, {0.2}}, {{0.3}}}, fit.trained};
  fit.config.refine = {5, 10};
  fit.refined = {{5, fit.trained}, {10, fit.trained}};
  // Written and read back: what kanbench would write for such a fit.
  const auto read = fit_record_from_json(to_json(fit));
  ASSERT_TRUE(read.pruned);
  EXPECT_EQ(read.pruned->edge_scores, fit.pruned->edge_scores);
  const auto html = render_fit_report(read);
  EXPECT_NE(html.find("(pruned to [2, 1, 1])"), std::string::npos);
  const auto stages = section(html, "stages");
  size_t previous = 0;
  for (const char* title : {"first training", "after pruning", "after refinement to grid 5",
                            "after refinement to grid 10"}) {
    const auto at = stages.find("<td>" + std::string(title) + "</td>");
    ASSERT_NE(at, std::string::npos) << title;
    EXPECT_GT(at, previous) << title << " out of order";
    previous = at;
  }
  for (const char* id :
       {"chart-loss-trained", "chart-loss-pruned", "chart-loss-refined-0", "chart-loss-refined-1"})
    EXPECT_NO_THROW(chart(embedded(html, "kanbench-charts"), id)) << id;
  // A schedule that is not the one configured.
  auto j = to_json(fit);
  j["refined"][0]["grid"] = 7;
  EXPECT_THROW(fit_record_from_json(j), ResultsError);
  // Multiplication nodes: pykan's [sum, mult] form.
  fit.config.model["width"] = {2, 3, 1};
  fit.config.model["mult"] = {0, 1, 0};
  EXPECT_EQ(to_string(model_shape(fit.config).width), "[2, [2, 1], 1]");
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
       "fit.json: symbolic.edges[0].curve: x, activation and fit must have one value per point, "
       "got 48, 48 and 47"},
      {[](json& j) {
         j["symbolic"]["edges"][0]["params"] = {1, 2};
       },
       "fit.json: symbolic.edges[0].params: expected a, b, c, d (4 numbers), got 2"},
      {[](json& j) { j["symbolic"]["formula"] = nullptr; },
       "fit.json: symbolic.formula_error: missing (a required key)"},
      {[](json& j) { j["symbolic"]["formula"].push_back(j["symbolic"]["formula"][0]); },
       "fit.json: symbolic.formula: expected one formula per output (1), got 2"},
      {[](json& j) { j["config"]["symbolic"] = nullptr; },
       "fit.json: symbolic: present, but config.symbolic is null"},
      {[](json& j) { j.erase("symbolic"); },
       "fit.json: symbolic: missing, but config.symbolic is set"},
      {[](json& j) { j["command"] = "audit"; },
       "fit.json: command: expected \"fit\", got \"audit\""},
      {[](json& j) { j["schema_version"] = "3.0.0"; }, "fit.json: schema_version: "},
      {[](json& j) { j["schema_version"] = "1.6.0"; }, "fit.json: schema_version: "},
      {[](json& j) { j["seconds"] = 1e6; }, "fit.json: seconds: 1000000.0 is not the stages'"},
      {[](json& j) { j["final"]["test_rmse"] = 0; }, "fit.json: final: is "},
      {[](json& j) { j["config"]["model"] = 3; },
       "fit.json: config.model: expected an object, got "},
      {[](json& j) { j["environment"]["device"] = "cuda"; },
       "fit.json: environment.device: is \"cuda\" but config.device is \"cpu\""},
      {[](json& j) { j["config"]["model"]["width"][1] = -1; },
       "fit.json: config.model.width[1]: "}};
  for (const auto& [mutate, message] : cases) {
    auto j = fixture();
    mutate(j);
    try {
      fit_record_from_json(j, "fit.json");
      ADD_FAILURE() << "read: " << message;
    } catch (const ResultsError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST_F(FitReport, FileErrorsNameTheFile) {
  write("fit.json", "{\"schema_version\": \"2.1.0\", ");
  try {
    read_fit_record(path("fit.json"));
    ADD_FAILURE() << "read a truncated file";
  } catch (const ResultsError& e) {
    EXPECT_EQ(e.file(), path("fit.json"));
  }
  EXPECT_THROW(read_fit_record(path("missing.json")), ResultsError);
  EXPECT_FALSE(is_fit_document(json::parse("{\"schema_version\": \"1.2.0\"}")));
  EXPECT_FALSE(is_fit_document(json::array()));
  EXPECT_TRUE(is_fit_document(fixture()));
}

TEST(FitReportTest, HostileStringsAreInert) {
  auto j = fixture();
  j["config"]["function"] = kHostile;
  j["config"]["device"] = kHostile;
  j["environment"]["device"] = kHostile;
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
            "layer 0: x1 -> 0: " + kHostile + ", R^2 1");
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
  const auto fit = read_fit_record(kFixture);
  write_fit_report(path("report.html"), fit);
  EXPECT_EQ(read("report.html"), render_fit_report(fit));
  FitReportOptions options;
  options.chartjs_path = "/nonexistent/chart.min.js";
  EXPECT_THROW(write_fit_report(path("other.html"), fit, options), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(path("other.html")));
}

} // namespace
