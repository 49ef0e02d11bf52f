// `kanbench report RESULTS.json [--baseline OLD.json] [--gbench FILE ...] -o report.html`: the
// self-contained HTML report of a run; `kanbench report fit.json -o report.html`: that of a fit;
// `kanbench report audit.json`: that of an audit.
#include "commands.h"

#include "kan/diagnostics/audit_record.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/reports/audit_report.h"
#include "kan/reports/fit_report.h"
#include "kan/reports/html_report.h"
#include "kan/results/gbench.h"
#include "kan/results/results_io.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kanbench {
namespace {

struct ReportArgs {
  std::string results;
  std::string baseline;
  std::vector<std::string> gbench;
  std::string out; // default: report.html beside the results
  std::string chartjs;
  std::string title = "kanbench report";
};

// Whether `a` and `b` name one existing file (through symlinks, "./", hard links).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  const bool same = std::filesystem::equivalent(a, b, error);
  return !error && same;
}

// The report must not replace what it is made from (`-o results.json` would destroy the run).
void refuse_overwriting_an_input(const ReportArgs& a, const std::string& out) {
  std::vector<std::pair<std::string, std::string>> inputs{{"the results", a.results}};
  if (!a.baseline.empty())
    inputs.emplace_back("the --baseline", a.baseline);
  for (const auto& file : a.gbench)
    inputs.emplace_back("the --gbench input", file);
  inputs.emplace_back("the Chart.js file",
                      a.chartjs.empty() ? kan::reports::default_chartjs_path() : a.chartjs);
  for (const auto& [what, input] : inputs)
    if (same_file(out, input))
      throw std::runtime_error("the report " + out + " would replace " + what + " " + input +
                               ": choose another -o");
}

void warn_if_stale(const std::string& results_path, const kan::results::Results& results) {
  if (const auto problem = kan::reports::report_pair_problem(results_path, results))
    std::cerr << "kanbench: warning: " << *problem << "\n";
}

// The report of a fit.json: it has no baseline and no Google Benchmark sections.
int run_fit_report(const ReportArgs& a, const nlohmann::json& document, const std::string& out) {
  for (const auto& [option, given] :
       {std::pair{"--baseline", !a.baseline.empty()}, {"--gbench", !a.gbench.empty()}})
    if (given)
      throw std::runtime_error(std::string(option) + " applies to a results.json, but " +
                               a.results + " is a fit.json: leave " + option + " out");
  kan::reports::FitReportOptions options;
  options.title = a.title;
  options.fit_source = a.results;
  options.chartjs_path = a.chartjs;
  kan::reports::write_fit_report(
      out, kan::diagnostics::strict_fit_record_from_json(document, a.results), options);
  std::cout << "report -> " << out << std::endl;
  return 0;
}

// The report of an audit.json, read strictly by its owner.
int run_audit_report(const ReportArgs& a, const std::string& out) {
  for (const auto& [option, given] :
       {std::pair{"--baseline", !a.baseline.empty()}, {"--gbench", !a.gbench.empty()}})
    if (given)
      throw std::runtime_error(std::string(option) + " applies to a results.json, but " +
                               a.results + " is an audit.json: leave " + option + " out");
  const auto record = kan::diagnostics::read_audit_record(a.results);
  kan::reports::AuditPage page;
  page.title = a.title == "kanbench report" ? "kanbench audit" : a.title;
  page.source = a.results;
  page.device = record.device;
  page.model = kan::to_string(record.config.model_kind) +
               (record.config.checkpoint.empty() ? "" : " " + record.config.checkpoint);
  page.rehearsal = record.config.rehearsal;
  page.exit_code = record.exit_code;
  page.findings = record.findings;
  const auto& audit = record.static_audit.summary;
  page.summary.push_back("static audit: " + std::to_string(audit.tensors_checked) +
                         " tensors checked");
  if (record.graph_check)
    page.summary.push_back("graph check: " + std::to_string(record.graph_check->methods) +
                           " methods, " + std::to_string(record.graph_check->nodes) +
                           " nodes read without running them");
  if (record.after_training) {
    const auto& t = record.after_training->trace.summary;
    page.summary.push_back("trace: " + std::to_string(t.operations) + " operations in " +
                           std::to_string(t.steps) + " step(s); " +
                           std::to_string(t.transfers.host_to_device) + " host-to-device and " +
                           std::to_string(t.transfers.device_to_host) + " device-to-host copies, " +
                           std::to_string(t.transfers.synchronizations) + " synchronisations");
  }
  kan::reports::write_audit_report(out, page);
  std::cout << "report -> " << out << std::endl;
  return 0;
}

int run_report(const ReportArgs& a) {
  const std::string out =
      a.out.empty() ? (std::filesystem::path(a.results).parent_path() / "report.html").string()
                    : a.out;
  refuse_overwriting_an_input(a, out);
  const auto document = kan::results::read_json_file(a.results, "a results.json or fit.json file");
  if (kan::results::is_fit_document(document))
    return run_fit_report(a, document, out);
  if (document.is_object() && document.value("command", nlohmann::json()) == "audit")
    return run_audit_report(a, out);
  if (document.is_object() && document.contains("command"))
    throw kan::results::ResultsError(
        a.results, "command",
        "expected \"fit\" (a fit.json), \"audit\" (an audit.json) or no command (a "
        "results.json), got " +
            kan::io::elided(document["command"].dump(), kan::io::kQuotedChars,
                            /*say_length=*/true));
  const auto results = kan::results::results_from_json(document, a.results);
  kan::reports::HtmlReportOptions options;
  options.title = a.title;
  options.results_source = a.results;
  options.chartjs_path = a.chartjs;
  if (!a.baseline.empty()) {
    options.baseline = kan::results::read_results_file(a.baseline);
    options.baseline_source = a.baseline;
  }
  for (const auto& file : a.gbench)
    options.gbench.push_back(kan::results::read_gbench_file(file));
  kan::reports::write_html_report(out, results, options);
  std::cout << "report -> " << out << std::endl; // before the warnings on stderr
  // After writing: a report.html beside the results that was just replaced is no longer stale.
  warn_if_stale(a.results, results);
  if (options.baseline)
    warn_if_stale(a.baseline, *options.baseline);
  return 0;
}

} // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand(
      "report", "Write the self-contained HTML report of a results.json (charts, verdict, "
                "tables) or of a fit.json (loss curves, symbolic formula); opens offline");
  cmd->add_option("results", args->results,
                  "results.json of `kanbench run`, fit.json of `kanbench fit` or audit.json of "
                  "`kanbench audit`")
      ->required();
  cmd->add_option("--baseline", args->baseline,
                  "An older results.json to compare against (adds a regression section)");
  cmd->add_option("--gbench", args->gbench,
                  "Google Benchmark --benchmark_out JSON files to add as sections")
      ->expected(1, -1);
  cmd->add_option("-o,--out", args->out,
                  "The HTML file (default: report.html beside RESULTS or fit.json)");
  cmd->add_option("--chartjs", args->chartjs,
                  "Chart.js to inline (default: $KANBENCH_CHARTJS, else " +
                      std::string(kan::reports::kDefaultChartJsPath) + ")");
  cmd->add_option("--title", args->title, "Title of the page")->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_report(*args); });
}

} // namespace kanbench
