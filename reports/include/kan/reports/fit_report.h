#pragma once
/// The HTML page of one `kanbench fit` (kan/results/fit_summary.h reads what it shows).

#include "kan/results/fit_summary.h"

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
///       kan::reports::render_fit_report(kan::results::read_fit_summary("out/fit.json"), options);
std::string render_fit_report(const results::FitSummary& fit, const FitReportOptions& options = {});

/// render_fit_report(), written atomically to `path`.
void write_fit_report(const std::string& path, const results::FitSummary& fit,
                      const FitReportOptions& options = {});

} // namespace kan::reports
