#include "kan/reports/fit_report.h"

#include "detail/html_page.h"

#include "kan/io/atomic_file.h"
#include "kan/io/json_reader.h"
#include "kan/io/text.h"

#include "kan/reports/html_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

namespace kan::reports {

// The documents this renders.
using namespace kan::results;

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// The page.

using detail::number;

std::string e(const std::string& text) {
  return html_escape(text);
}

json nan_as_null(double value) {
  return std::isnan(value) ? json(nullptr) : json(value);
}

// One training of the fit, as the page names it.
struct Stage {
  std::string key;   ///< in chart ids: "trained", "pruned", "refined-0", ..., "symbolic"
  std::string title; ///< "first training", "after refinement to grid 10", ...
  const StageResult* result;
};

std::vector<Stage> stages_of(const FitRecord& fit) {
  std::vector<Stage> stages{{"trained", "first training", &fit.trained}};
  if (fit.pruned)
    stages.push_back({"pruned", "after pruning", &fit.pruned->retrained});
  for (size_t i = 0; i < fit.refined.size(); ++i)
    stages.push_back({"refined-" + std::to_string(i),
                      "after refinement to grid " + std::to_string(fit.refined[i].grid),
                      &fit.refined[i].trained});
  if (fit.symbolic)
    stages.push_back({"symbolic", "after auto_symbolic", &fit.symbolic->retrained});
  return stages;
}

// "layer 0: x1 -> 0: sin, R^2 0.9999": the inputs of layer 0 by their names in the formula.
std::string edge_title(const SymbolicEdgeResult& edge) {
  const std::string input =
      edge.layer == 0 ? "x" + std::to_string(edge.i + 1) : std::to_string(edge.i);
  return "layer " + std::to_string(edge.layer) + ": " + input + " -> " + std::to_string(edge.j) +
         ": " + edge.function + ", R^2 " + number(edge.r2);
}

std::string edge_chart_id(const SymbolicEdgeResult& edge) {
  return "chart-symbolic-" + std::to_string(edge.layer) + "-" + std::to_string(edge.i) + "-" +
         std::to_string(edge.j);
}

json loss_chart(const Stage& stage) {
  json steps = json::array(), train = json::array(), test = json::array();
  bool positive = true, tested = false;
  for (const auto& s : stage.result->history.steps) {
    steps.push_back(s.step);
    train.push_back(nan_as_null(s.train_rmse));
    test.push_back(nan_as_null(s.test_rmse));
    for (const double v : {s.train_rmse, s.test_rmse})
      positive = positive && (std::isnan(v) || v > 0);
    tested = tested || !std::isnan(s.test_rmse);
  }
  json datasets = json::array({{{"label", "train RMSE"}, {"data", train}}});
  if (tested)
    datasets.push_back({{"label", "test RMSE"}, {"data", test}});
  return {{"id", "chart-loss-" + stage.key},
          {"kind", "line"},
          {"title", "RMSE per step, " + stage.title},
          {"x_label", "step"},
          {"y_label", "RMSE"},
          {"log_y", positive},
          {"labels", steps},
          {"datasets", datasets}};
}

json chart_data(const FitRecord& fit) {
  json charts = json::array();
  for (const auto& stage : stages_of(fit))
    if (!stage.result->history.steps.empty())
      charts.push_back(loss_chart(stage));
  if (fit.symbolic)
    for (const auto& edge : fit.symbolic->edges)
      if (edge.curve)
        charts.push_back({{"id", edge_chart_id(edge)},
                          {"kind", "curve"},
                          {"small", true},
                          {"title", edge_title(edge)},
                          {"x", edge.curve->x},
                          {"y", edge.curve->activation},
                          {"fit", edge.curve->fit}});
  return {{"charts", charts}};
}

std::string header(const FitRecord& fit, const FitModelShape& shape,
                   const FitReportOptions& options) {
  std::string stages;
  for (const auto& stage : stages_of(fit))
    stages += (stages.empty() ? "" : ", ") + e(stage.title);
  const auto& config = fit.config;
  return "<header><h1>" + e(options.title) + "</h1><p>" +
         (options.fit_source.empty() ? "" : e(options.fit_source) + " &middot; ") +
         (config.data ? "data " + e(config.data->path) : "function " + e(config.function)) +
         " &middot; width " + e(to_string(shape.width)) +
         (fit.pruned ? " (pruned to " + e(to_string(fit.pruned->width_after)) + ")" : "") +
         (config.model_kind == "mlp" ? " &middot; MLP, " + e(shape.activation)
          : config.model_kind == "torchscript"
              ? " &middot; TorchScript " + e(shape.script_class)
              : " &middot; G " + std::to_string(shape.grid) + ", k " + std::to_string(shape.k)) +
         (fit.parameters ? " &middot; " + std::to_string(*fit.parameters) + " parameters" : "") +
         (fit.forward_flops ? ", " + std::to_string(*fit.forward_flops) + " FLOPs per sample"
                            : "") +
         " &middot; " + e(config.device) + ", " + e(shape.dtype) + " &middot; stages: " + stages +
         " &middot; trained in " + io::format_seconds(fit.seconds()) + " &middot; LibTorch " +
         e(fit.libtorch) + " &middot; fit.json " + e(fit.schema_version) + "</p></header>\n";
}

std::string stages_section(const FitRecord& fit) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& stage : stages_of(fit))
    rows.push_back({e(stage.title), std::to_string(stage.result->history.steps.size()),
                    number(stage.result->train_rmse), number(stage.result->test_rmse),
                    io::format_seconds(stage.result->history.seconds)});
  return "<section id=\"stages\"><h2>Stages</h2>\n" +
         detail::html_table("stages-table",
                            {"stage", "steps", "train RMSE", "test RMSE", "training time"}, rows) +
         "</section>\n";
}

std::string loss_section(const FitRecord& fit) {
  std::string html = "<section id=\"loss\"><h2>Loss curves</h2>\n"
                     "<p id=\"chart-status\">The charts need JavaScript; the tables hold the "
                     "final numbers.</p>\n";
  for (const auto& stage : stages_of(fit))
    html += stage.result->history.steps.empty()
                ? "<p>No training steps " + e(stage.title) + ".</p>\n"
                : detail::chart_canvas("chart-loss-" + stage.key, false);
  return html + "</section>\n";
}

std::string formula_html(const SymbolicResult& s) {
  if (!s.formula)
    return "<p class=\"formula-error\"><span class=\"status bad\">no formula</span> " +
           e(s.formula_error) + "</p>\n";
  std::string html;
  for (size_t k = 0; k < s.formula->size(); ++k) {
    const auto& f = (*s.formula)[k];
    html += "<div class=\"formula\" id=\"formula-" + std::to_string(k) + "\"><h3>Output " +
            std::to_string(k) + "</h3><p><code class=\"sympy\">" + e(f.sympy) +
            "</code></p><p>LaTeX:</p><pre><code class=\"latex\">" + e(f.latex) +
            "</code></pre><details><summary>Every constant to 17 digits</summary><pre><code "
            "class=\"sympy-exact\">" +
            e(f.sympy_exact) + "</code></pre></details></div>\n";
  }
  return html;
}

std::string edges_table(const SymbolicResult& s) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& edge : s.edges) {
    std::vector<std::string> row{
        std::to_string(edge.layer), std::to_string(edge.i), std::to_string(edge.j),
        e(edge.function),           number(edge.r2),        edge.fixed ? "yes" : "no"};
    for (size_t p = 0; p < 4; ++p)
      row.push_back(p < edge.params.size() ? number(edge.params[p]) : "-");
    rows.push_back(row);
  }
  return detail::html_table("symbolic-edges-table",
                            {"layer", "i", "j", "function", "R^2", "fixed", "a", "b", "c", "d"},
                            rows);
}

std::string symbolic_section(const SymbolicResult& s, const FitModelShape& shape) {
  const auto fixed = std::count_if(s.edges.begin(), s.edges.end(),
                                   [](const SymbolicEdgeResult& x) { return x.fixed; });
  std::string lib;
  for (const auto& name : shape.symbolic_lib)
    lib += (lib.empty() ? "" : ", ") + e(name);
  std::string html =
      "<section id=\"symbolic\"><h2>Symbolic regression</h2>\n<p>auto_symbolic chose from " + lib +
      " at R^2 threshold " + number(shape.r2_threshold) + " in " +
      io::format_seconds(s.auto_symbolic_seconds) + ": " + std::to_string(fixed) + " of " +
      std::to_string(s.edges.size()) +
      " edges fixed to c f(a x + b) + d. Constants of the formula rounded to " +
      std::to_string(s.digits) + " decimals.</p>\n<div id=\"formula\">" + formula_html(s) +
      "</div>\n<h3>Edges</h3>\n" + edges_table(s);
  std::string charts;
  for (const auto& edge : s.edges)
    if (edge.curve)
      charts += detail::chart_canvas(edge_chart_id(edge), true);
  if (charts.empty())
    return html + "<p>No edge has a curve of its fit.</p>\n</section>\n";
  return html +
         "<h3>Learned activations and their symbolic fits</h3><p>Points: the learned activation "
         "before auto_symbolic; line: the fit c f(a x + b) + d. Edges are layer l: input -> "
         "output from 0, the inputs of layer 0 named as in the formula (x1 is input 0).</p>"
         "<div class=\"small-multiples\">" +
         charts + "</div>\n</section>\n";
}

std::string configuration_section(const FitRecord& fit) {
  std::vector<std::pair<std::string, std::string>> flat;
  detail::flatten_json(to_json(fit.config), "", flat);
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : flat)
    rows.push_back({e(key), e(value)});
  return "<section id=\"configuration\"><h2>Configuration</h2>\n" +
         detail::html_table("configuration-table", {"setting", "value"}, rows) + "</section>\n";
}

} // namespace

std::string render_fit_report(const FitRecord& fit, const FitReportOptions& options) {
  const auto shape = model_shape(fit.config);
  const std::string chartjs = detail::inline_chartjs(options.chartjs_source, options.chartjs_path);
  const std::string first_meta =
      options.fit_source.empty()
          ? ""
          : "<meta name=\"kanbench-fit\" content=\"" +
                e(std::filesystem::path(options.fit_source).filename().string()) + "\">\n";
  std::string html = detail::page_start(options.title, first_meta,
                                        "kanbench, fit.json schema " + fit.schema_version);
  html += header(fit, shape, options);
  html += stages_section(fit);
  html += loss_section(fit);
  if (fit.symbolic)
    html += symbolic_section(*fit.symbolic, shape);
  html += configuration_section(fit);
  return html + detail::page_end({{"kanbench-charts", chart_data(fit)}}, chartjs);
}

void write_fit_report(const std::string& path, const FitRecord& fit,
                      const FitReportOptions& options) {
  io::write_file_atomically(path, render_fit_report(fit, options));
}

} // namespace kan::reports
