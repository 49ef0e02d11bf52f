#pragma once
/// The self-contained HTML report: one file with Chart.js and the data inlined, no network
/// request of any kind; it opens from disk in a browser offline.

#include "kan/results/baseline.h"
#include "kan/results/gbench.h"
#include "kan/results/results.h"

#include <optional>
#include <string>
#include <vector>

namespace kan::reports {

/// Where Debian's libjs-chart.js installs Chart.js (3.9, UMD build).
inline constexpr const char* kDefaultChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

/// The Chart.js file to inline: $KANBENCH_CHARTJS when set and not empty, else
/// kDefaultChartJsPath.
std::string default_chartjs_path();

/// Reads Chart.js from `path`; throws std::runtime_error naming the path, the Debian package
/// (libjs-chart.js) and the variable that overrides the path when it cannot be read.
std::string load_chartjs(const std::string& path);

/// What goes into a report beside the results.
struct HtmlReportOptions {
  std::string title = "kanbench report";
  std::string results_source; ///< the results.json it was made from, shown in the header
  /// Chart.js to inline. Empty: read from `chartjs_path` (empty: default_chartjs_path()).
  std::string chartjs_source;
  std::string chartjs_path;
  std::optional<results::Results>
      baseline;                ///< adds the "Against the baseline" section and verdict line
  std::string baseline_source; ///< the baseline's file name, shown in that section
  results::BaselineOptions baseline_options;
  std::vector<results::GBenchReport> gbench; ///< one "Google Benchmark" section each
};

/// The report as one HTML document.
///
/// The <head> records the run id (html_report_run_id()) and the results file's name
/// (<meta name="kanbench-results">). Sections (each a <section id=...>): `verdict` (devices,
/// speedups, parity, edge cases, audit findings, regressions), `accuracy` (with an accuracy run:
/// its summary table, failed fits, and per function and device a Pareto chart
/// `chart-accuracy-K` of test RMSE against parameters), `charts` (epoch time per case and
/// target with IQR bars, speedup, loss curves of each parity pair, learned activation functions,
/// memory), `cases`, `comparisons`, `edge-cases`, `audit`, `baseline` (with a baseline), `gbench-N`
/// (per Google Benchmark file), `environment`, `configuration`. The data behind the charts is
/// embedded as JSON in <script type="application/json" id="kanbench-charts">, the whole
/// results.json in id="kanbench-results"; every string from the results is HTML-escaped and the
/// embedded JSON cannot close its element.
///
/// Example:
///   kan::reports::HtmlReportOptions options;
///   options.baseline = kan::results::read_results_file("old/results.json");
///   kan::reports::write_html_report("run/report.html",
///                                   kan::results::read_results_file("run/results.json"),
///                                   options);
std::string render_html_report(const results::Results& results,
                               const HtmlReportOptions& options = {});

/// The run id a report records (<meta name="kanbench-run-id" content="..."> in its <head>),
/// from the report's text or its beginning; std::nullopt when it has none (a report of a
/// schema 1.0 results.json, made by an older kanbench, or not a kanbench report).
std::optional<std::string> html_report_run_id(const std::string& html);

/// Whether the report.html beside `results_path` (as `kanbench run` and `kanbench report`
/// write it) shows `results`, which were read from there: a kill between the two renames of a
/// run can leave a new results.json with an old report. Returns one line saying what is wrong
/// when that report records another run id, none, or cannot be read; std::nullopt when it
/// matches, when there is no report.html there, or when the results have no run id (schema
/// 1.0), which leaves nothing to match.
///
/// Example:
///   if (auto problem = kan::reports::report_pair_problem("run/results.json", results))
///     std::cerr << "warning: " << *problem << "\n";
std::optional<std::string> report_pair_problem(const std::string& results_path,
                                               const results::Results& results);
/// The same, reading the results from `results_path` first (throws results::ResultsError).
std::optional<std::string> report_pair_problem(const std::string& results_path);

/// render_html_report(), written atomically to `path`.
void write_html_report(const std::string& path, const results::Results& results,
                       const HtmlReportOptions& options = {});

/// `text` with & < > " ' replaced by character references: safe in element content and in
/// quoted attribute values.
std::string html_escape(const std::string& text);

/// JSON text made safe inside <script type="application/json">: <, >, & and U+2028/U+2029
/// become \u escapes (valid JSON; the parsed value is unchanged), so no "</script>" or "<!--"
/// can appear.
std::string escape_script_json(const std::string& json_text);

} // namespace kan::reports
