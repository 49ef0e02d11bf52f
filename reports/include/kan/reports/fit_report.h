#pragma once
/// The HTML page of one `kanbench fit`: its fit.json (kan/results/fit_record.h) as a page that
/// opens offline like the report of a run (html_report.h: Chart.js and the data inlined, every
/// string from the file HTML-escaped, embedded JSON unable to close its element). It shows the
/// function or data file, width, device and stages; the loss curves of every stage (train and test
/// RMSE per step); with a symbolic stage, the formula of each output (the sympy text and its LaTeX
/// source, which is not typeset: nothing is fetched) or why there is none, a table of the edges
/// with their functions, R^2 and parameters, and one chart per edge with a curve (the learned
/// activation beside its fit c f(a x + b) + d); and the configuration.

#include "kan/results/fit_record.h"

#include <string>

namespace kan::reports {

/// What goes into a fit report beside the fit.
struct FitReportOptions {
  std::string title = "kanbench fit report";
  std::string fit_source; ///< the fit.json it was made from, shown in the header
  /// Chart.js to inline. Empty: read from `chartjs_path` (empty: default_chartjs_path()).
  std::string chartjs_source;
  std::string chartjs_path;
};

/// The report of a fit as one HTML document. Sections (each a <section id=...>): `stages` (a
/// table of the stages), `loss` (one chart per stage with steps, id chart-loss-KEY), `symbolic`
/// (only with a symbolic stage: `formula`, the table symbolic-edges-table, and charts
/// chart-symbolic-LAYER-I-J), `configuration`. The chart data is embedded as JSON in <script
/// type="application/json" id="kanbench-charts">.
///
/// Example:
///   kan::reports::FitReportOptions options;
///   options.fit_source = "out/fit.json";
///   const std::string html =
///       kan::reports::render_fit_report(kan::results::read_fit_record("out/fit.json"), options);
std::string render_fit_report(const results::FitRecord& fit, const FitReportOptions& options = {});

/// render_fit_report(), written atomically to `path`.
void write_fit_report(const std::string& path, const results::FitRecord& fit,
                      const FitReportOptions& options = {});

} // namespace kan::reports
