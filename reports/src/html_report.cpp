#include "kan/reports/html_report.h"

#include "detail/accuracy_sections.h"
#include "detail/charts.h"
#include "detail/html_page.h"

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"

#include "kan/results/results_io.h"
#include "kan/results/statistics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

namespace kan::reports {

// The documents this renders.
using namespace kan::results;

using json = nlohmann::json;

namespace {
// The <meta name> of the run id in a report's <head>.
constexpr const char* kRunIdMeta = "kanbench-run-id";
} // namespace

std::string default_chartjs_path() {
  const char* path = std::getenv("KANBENCH_CHARTJS");
  return path && *path ? path : kDefaultChartJsPath;
}

std::string load_chartjs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read Chart.js from " + path + ": " + std::strerror(errno) +
                             " (install the Debian package libjs-chart.js, or point "
                             "KANBENCH_CHARTJS / --chartjs at chart.min.js)");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty())
    throw std::runtime_error("Chart.js file " + path + " is empty (reinstall libjs-chart.js)");
  return text.str();
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string escape_script_json(const std::string& json_text) {
  std::string out;
  out.reserve(json_text.size() + json_text.size() / 16);
  for (size_t i = 0; i < json_text.size(); ++i) {
    const char c = json_text[i];
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else if (c == '\xE2' && i + 2 < json_text.size() && json_text[i + 1] == '\x80' &&
             (json_text[i + 2] == '\xA8' || json_text[i + 2] == '\xA9')) {
      out += json_text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else
      out += c;
  }
  return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Formatting.

using detail::accuracy_line;
using detail::accuracy_section;
using detail::activation_case;
using detail::chart_data;
using detail::figures;
using detail::kAccuracyChartPrefix;
using detail::number;
using detail::status_cell;

std::string fixed2(double value) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

std::string bytes(double value) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.3g %s", value, units[unit]);
  return text;
}

template <typename T, typename F> std::string or_dash(const std::optional<T>& value, F format) {
  return value ? format(*value) : "-";
}

std::string seconds_or_dash(const std::optional<double>& value) {
  return or_dash(value, [](double v) { return io::format_seconds(v); });
}

std::string e(const std::string& text) {
  return html_escape(text);
}

std::string target_label(const CaseResult& c) {
  return c.name + "/" + c.target;
}

// ---------------------------------------------------------------------------------------------
// Sections.

// The verdict: one line per question a reader asks first, each answered by one function.

// Pass or fail, and why: exactly run_problems(), the list a CI gate fails the run on.
std::string outcome_line(const Results& r) {
  const auto problems = run_problems(r);
  if (problems.empty())
    return "<b>Result:</b> <span class=\"status good\">pass</span> (no failed case, parity, edge "
           "case or audit finding)";
  std::string line = "<b>Result:</b> <span class=\"status bad\">fail</span>, " +
                     std::to_string(problems.size()) + " problem" +
                     (problems.size() == 1 ? "" : "s") + ":<ul>";
  for (const auto& problem : problems)
    line += "<li>" + e(problem) + "</li>";
  return line + "</ul>";
}

// Where the cases ran; targets that did not are grouped by (target, status, reason): one line
// says "cuda skipped for toy, deep, wide (no CUDA device: ...)".
std::string devices_line(const Results& r) {
  std::vector<std::string> ran;
  std::vector<std::pair<std::tuple<std::string, CaseStatus, std::string>, std::string>> not_ran;
  for (const auto& c : r.cases) {
    if (c.status == CaseStatus::kOk) {
      if (std::find(ran.begin(), ran.end(), c.device) == ran.end())
        ran.push_back(c.device);
      continue;
    }
    const auto key = std::make_tuple(c.target, c.status, c.reason);
    const auto group =
        std::find_if(not_ran.begin(), not_ran.end(), [&](const auto& g) { return g.first == key; });
    if (group == not_ran.end())
      not_ran.emplace_back(key, c.name);
    else
      group->second += ", " + c.name;
  }
  // A sweep's points and a scaling run's entries ran somewhere too (they have no cases).
  auto add_ran = [&](const std::string& device) {
    if (std::find(ran.begin(), ran.end(), device) == ran.end())
      ran.push_back(device);
  };
  if (r.sweep)
    for (const auto& p : r.sweep->points)
      if (p.status == CaseStatus::kOk)
        add_ran(p.device);
  for (const auto& s : r.scaling)
    if (s.status == CaseStatus::kOk)
      add_ran(s.device);
  if (r.accuracy)
    for (const auto& fit : r.accuracy->fits)
      if (fit.error.empty())
        add_ran(fit.device);
  std::string line = "<b>Devices:</b> ";
  if (ran.empty())
    line += "nothing ran";
  for (size_t i = 0; i < ran.size(); ++i)
    line += (i ? ", " : "ran on ") + e(ran[i]);
  if (!not_ran.empty()) {
    line += "; not measured: ";
    for (size_t i = 0; i < not_ran.size(); ++i) {
      const auto& [target, status, reason] = not_ran[i].first;
      line += (i ? "; " : "") + e(target) + " " + status_cell(to_string(status)) + " for " +
              e(not_ran[i].second) + " (" + e(reason) + ")";
    }
  }
  return line;
}

// What a batch-size sweep found: each crossover, and each target's best batch.
std::string sweep_line(const Results& r) {
  if (!r.sweep)
    return "";
  std::string line = "<b>Batch-size sweep:</b> ";
  for (size_t i = 0; i < r.sweep->crossovers.size(); ++i)
    line += (i ? "; " : "") + e(r.sweep->crossovers[i].case_name) + ": " +
            e(r.sweep->crossovers[i].message);
  for (const auto& t : r.sweep->targets)
    if (t.best_batch)
      line += std::string(line.back() == ' ' ? "" : "; ") + e(t.case_name) + " on " + e(t.target) +
              " peaks at " + number(*t.best_samples_per_second) + " samples/s at batch " +
              std::to_string(*t.best_batch);
  return line;
}

// One item per comparison: how much faster, its spread, and its parity.
std::string speedup_line(const Results& r) {
  if (r.comparisons.empty())
    return "<b>Speedup and parity:</b> no comparisons in this run";
  std::string line = "<b>Speedup:</b><ul>";
  for (const auto& c : r.comparisons) {
    line += "<li>" + e(c.case_name) + ": ";
    if (c.speedup) {
      const bool faster = *c.speedup >= 1;
      const double factor = faster ? *c.speedup : 1 / *c.speedup;
      line += e(c.b) + " <span class=\"figure\">" + fixed2(factor) + "&times;</span> " +
              (faster ? "faster" : "slower") + " than " + e(c.a);
      if (c.speedup_low && c.speedup_high)
        line +=
            " (speedup " + number(*c.speedup_low, 3) + "&ndash;" + number(*c.speedup_high, 3) + ")";
    } else {
      line += "no speedup (" + e(c.a) + " vs " + e(c.b) + " not both measured)";
    }
    if (c.label)
      line += " &middot; " + e(*c.label);
    line += " &middot; parity " + status_cell(to_string(c.parity)) + "</li>";
  }
  return line + "</ul>";
}

// Counts only: which ones failed is the outcome line's business.
std::string parity_line(const Results& r) {
  const auto passed = std::count_if(r.comparisons.begin(), r.comparisons.end(),
                                    [](const Comparison& c) { return c.parity == Parity::kPass; });
  return "<b>Parity:</b> " + std::to_string(passed) + " of " +
         std::to_string(r.comparisons.size()) + " comparisons pass";
}

std::string edge_cases_line(const Results& r) {
  return "<b>Edge cases:</b> " + e(edge_case_summary(r.edge_cases));
}

std::string audit_line(const Results& r) {
  size_t findings = 0;
  for (const auto& c : r.cases)
    findings += c.audit_findings.size();
  if (findings == 0)
    return "<b>Device audit:</b> no findings";
  return "<b>Device audit:</b> <span class=\"status bad\">" + std::to_string(findings) +
         " finding" + (findings == 1 ? "" : "s") + "</span> (see Device audit below)";
}

// How busy CUPTI saw the GPU, per traced case; empty when nothing was traced.
std::string gpu_busy_line(const Results& r) {
  std::string busy;
  for (const auto& c : r.cases) {
    const auto f = figures(c);
    if (f.busy)
      busy += (busy.empty() ? "" : ", ") + e(target_label(c)) + " " + number(*f.busy * 100, 3) +
              "% (" + number(*f.kernels, 4) + " kernels/epoch)";
  }
  return busy.empty() ? "" : "<b>GPU busy (CUPTI):</b> " + busy;
}

std::string baseline_line(const std::optional<BaselineComparison>& baseline,
                          const std::string& source) {
  if (!baseline)
    return "<b>Against a baseline:</b> none given (kanbench report --baseline OLD.json)";
  std::string line = "<b>Against the baseline</b> (" + e(source) +
                     "): " + std::to_string(baseline->count(Verdict::kSlower)) + " slower, " +
                     std::to_string(baseline->count(Verdict::kFaster)) + " faster, " +
                     std::to_string(baseline->count(Verdict::kSame)) + " same";
  for (const auto& c : baseline->regressions())
    line += "; <span class=\"status bad\">" + e(c.name + "/" + c.target) + " " +
            number(c.change_percent(), 3) + "% slower</span>";
  if (!baseline->warnings.empty())
    line += "; " + std::to_string(baseline->warnings.size()) +
            " warning(s): runs differ (see Against the baseline)";
  return line;
}

// Whether the document is about timed cases: a suite run is, and says so when it has none; a
// sweep, a scaling run or an accuracy run holds only its own tables (unless it carries cases
// too), and empty case, parity, edge-case and audit sections would only be noise there.
bool about_cases(const Results& r) {
  return (!r.sweep && r.scaling.empty() && !r.accuracy) || !r.cases.empty() ||
         !r.comparisons.empty() || !r.edge_cases.empty();
}

std::string verdict_section(const Results& r, const std::optional<BaselineComparison>& baseline,
                            const HtmlReportOptions& options) {
  std::string html = "<section id=\"verdict\"><h2>Verdict</h2><ul class=\"verdict\">";
  const bool timed = about_cases(r) || baseline;
  const auto if_timed = [&](std::string line) { return timed ? line : std::string(); };
  for (const auto& item :
       {outcome_line(r), devices_line(r), accuracy_line(r), sweep_line(r),
        if_timed(speedup_line(r)), r.comparisons.empty() ? std::string() : parity_line(r),
        if_timed(edge_cases_line(r)), if_timed(audit_line(r)), gpu_busy_line(r),
        if_timed(baseline_line(baseline, options.baseline_source))})
    if (!item.empty())
      html += "<li>" + item + "</li>";
  return html + "</ul></section>\n";
}

std::string charts_section(const json& charts, const Results& r) {
  const bool any = std::any_of(charts["charts"].begin(), charts["charts"].end(), [](const json& c) {
    return c["id"].get<std::string>().rfind(kAccuracyChartPrefix, 0) != 0;
  });
  if (!any && !about_cases(r))
    return "";
  std::string html = "<section id=\"charts\"><h2>Charts</h2>\n"
                     "<p id=\"chart-status\">The charts need JavaScript; the tables below hold "
                     "every number.</p>\n";
  bool activations_heading = false;
  for (const auto& chart : charts["charts"]) {
    const std::string id = chart["id"];
    if (id.rfind(kAccuracyChartPrefix, 0) == 0)
      continue; // drawn in the accuracy section, beside their table
    if (chart.value("small", false)) {
      if (!activations_heading) {
        const auto* c = activation_case(r);
        html += "<h3>Learned activation functions</h3><p>phi(x) of each edge of the trained "
                "model, case " +
                e(c->name) + " on " + e(c->target) +
                " (layer, input -> output).</p><div class=\"small-multiples\">";
        activations_heading = true;
      }
      html += detail::chart_canvas(id, true);
      continue;
    }
    if (activations_heading) {
      html += "</div>\n";
      activations_heading = false;
    }
    html += detail::chart_canvas(id, false);
  }
  if (activations_heading)
    html += "</div>\n";
  if (!about_cases(r))
    return html + "</section>\n";
  if (!activation_case(r))
    html += "<p>No learned activation functions in this run.</p>\n";
  bool loss = false;
  for (const auto& chart : charts["charts"])
    loss = loss || chart["id"].get<std::string>().rfind("chart-loss-", 0) == 0;
  if (!loss)
    html += "<p>No loss curves of parity pairs in this run.</p>\n";
  return html + "</section>\n";
}

std::string cases_section(const Results& r) {
  if (!about_cases(r))
    return "";
  // A merged run says where each case ran.
  const bool hosts = std::any_of(r.cases.begin(), r.cases.end(),
                                 [](const CaseResult& c) { return c.host.has_value(); });
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r.cases) {
    const auto f = figures(c);
    std::string metric = "-";
    if (c.final_test_rmse)
      metric = "RMSE " + number(*c.final_test_rmse);
    if (c.final_accuracy)
      metric = (metric == "-" ? "" : metric + ", ") + "accuracy " +
               number(*c.final_accuracy * 100, 4) + "%";
    rows.push_back(
        {e(c.name) + (c.model_kind ? " <small>" + e(*c.model_kind) + "</small>" : ""),
         e(c.target),
         e(c.device),
         e(c.dtype) + (c.precision ? " <small title=\"" + e(c.precision_detail.value_or("")) +
                                         "\">" + e(*c.precision) + "</small>"
                                   : ""),
         e(c.backend.value_or("-")),
         status_cell(to_string(c.status)),
         e(c.reason),
         seconds_or_dash(c.median_epoch_seconds),
         seconds_or_dash(c.iqr_epoch_seconds),
         f.times ? io::format_seconds(f.times->min) : "-",
         f.times ? io::format_seconds(f.times->max) : "-",
         std::to_string(c.epoch_seconds.size()),
         or_dash(c.epoch_cv, [](double v) { return number(v * 100, 3) + "%"; }) +
             (c.cv_target ? " <small>target " + number(*c.cv_target * 100, 3) + "%" +
                                (c.cv_target_met.value_or(false) ? " met" : " not met") + "</small>"
                          : ""),
         or_dash(c.steps_per_second, [](double v) { return number(v); }),
         or_dash(c.samples_per_second, [](double v) { return number(v); }),
         or_dash(c.peak_memory_bytes, [](int64_t v) { return bytes(static_cast<double>(v)); }) +
             (c.memory_kind ? " <small>" + e(*c.memory_kind) + "</small>" : "") +
             (c.peak_reserved_bytes
                  ? " <small>reserved " + bytes(static_cast<double>(*c.peak_reserved_bytes)) +
                        "</small>"
                  : ""),
         metric,
         or_dash(c.parameters, [](int64_t v) { return std::to_string(v); }),
         or_dash(c.forward_flops, [](int64_t v) { return std::to_string(v); }),
         or_dash(c.threads, [](int64_t v) { return std::to_string(v); }),
         f.busy ? number(*f.busy * 100, 3) + "%" : "-"});
    if (hosts)
      rows.back().push_back(e(c.host.value_or("-")));
  }
  if (rows.empty())
    return "<section id=\"cases\"><h2>Cases</h2>\n<p>No cases in this run.</p>\n</section>\n";
  std::vector<std::string> header{
      "case",         "target",       "device",    "dtype",       "backend",      "status",
      "reason",       "median epoch", "IQR",       "min",         "max",          "repetitions",
      "CV",           "steps/s",      "samples/s", "peak memory", "final metric", "parameters",
      "FLOPs/sample", "threads",      "GPU busy"};
  if (hosts)
    header.push_back("host");
  return "<section id=\"cases\"><h2>Cases</h2>\n" +
         detail::html_table("cases-table", header, rows) + "</section>\n";
}

std::string comparisons_section(const Results& r) {
  if (!about_cases(r))
    return "";
  std::vector<std::vector<std::string>> rows;
  auto num = [](const std::optional<double>& v) {
    return or_dash(v, [](double x) { return number(x); });
  };
  for (const auto& c : r.comparisons) {
    std::string tolerances;
    for (const auto& [key, limit] : c.tolerances)
      tolerances += (tolerances.empty() ? "" : ", ") + e(key) + " &le; " + number(limit);
    rows.push_back(
        {e(c.case_name), e(c.a), e(c.b), e(c.label.value_or("")),
         num(c.speedup) +
             (c.speedup_low && c.speedup_high
                  ? " (" + number(*c.speedup_low) + "&ndash;" + number(*c.speedup_high) + ")"
                  : ""),
         num(c.max_abs_output_diff), num(c.max_rel_output_diff), num(c.max_abs_grad_diff),
         num(c.max_rel_loss_diff), num(c.final_metric_rel_diff), num(c.final_accuracy_diff_points),
         tolerances, status_cell(to_string(c.parity)), e(c.message)});
  }
  return "<section id=\"comparisons\"><h2>Parity and speedup</h2>\n" +
         (rows.empty() ? std::string("<p>No comparisons in this run.</p>\n")
                       : detail::html_table("comparisons-table",
                                            {"case", "a", "b", "what", "speedup (spread)",
                                             "max abs output diff", "max rel output diff",
                                             "max abs grad diff", "max rel loss diff",
                                             "final metric rel diff", "accuracy diff (points)",
                                             "tolerances", "parity", "message"},
                                            rows)) +
         "</section>\n";
}

std::string edge_cases_section(const Results& r) {
  if (!about_cases(r))
    return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& ec : r.edge_cases) {
    std::string measurements;
    for (const auto& [key, value] : ec.measurements)
      measurements += (measurements.empty() ? "" : ", ") + e(key) + " = " + number(value);
    rows.push_back(
        {e(ec.name), e(ec.device), status_cell(to_string(ec.status)), e(ec.message),
         or_dash(ec.samples, [](int64_t v) { return std::to_string(v); }),
         or_dash(ec.peak_memory_bytes, [](int64_t v) { return bytes(static_cast<double>(v)); }),
         seconds_or_dash(ec.seconds), measurements});
  }
  return "<section id=\"edge-cases\"><h2>Edge cases</h2>\n" +
         (rows.empty() ? std::string("<p>No edge cases in this run.</p>\n")
                       : detail::html_table("edge-cases-table",
                                            {"edge case", "device", "status", "message", "samples",
                                             "peak memory", "time", "measurements"},
                                            rows)) +
         "</section>\n";
}

std::string scaling_section(const Results& r) {
  if (r.scaling.empty())
    return "";
  std::vector<std::vector<std::string>> rows;
  auto num = [](const std::optional<double>& v) {
    return or_dash(v, [](double x) { return number(x); });
  };
  for (const auto& s : r.scaling)
    rows.push_back({e(s.case_name), e(s.device), e(s.backend), std::to_string(s.ranks),
                    status_cell(to_string(s.status)), seconds_or_dash(s.median_epoch_seconds),
                    num(s.speedup), num(s.efficiency), seconds_or_dash(s.communication_seconds),
                    num(s.collectives_per_step),
                    or_dash(s.bytes_per_step, [](double v) { return bytes(v); }),
                    num(s.max_rel_loss_diff), e(s.reason)});
  return "<section id=\"scaling\"><h2>Data-parallel scaling</h2>\n"
         "<p>The same training on 1, 2, ... ranks (c10d); times are rank 0's, speedup is against "
         "the 1-rank run, and the loss difference shows that the ranks computed the same "
         "steps.</p>\n" +
         detail::html_table("scaling-table",
                            {"case", "device", "backend", "ranks", "status", "median epoch",
                             "speedup", "efficiency", "waiting for collectives per epoch",
                             "collectives per step", "bytes per step", "max rel loss diff",
                             "reason"},
                            rows) +
         "</section>\n";
}

std::string monitoring_section(const Results& r) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> warnings;
  for (const auto& c : r.cases) {
    if (!c.monitoring)
      continue;
    const auto& m = *c.monitoring;
    auto figure = [&](const char* metric, double scale, const char* unit) {
      const auto it = m.summary.find(metric);
      if (it == m.summary.end())
        return std::string("-");
      return number(it->second.mean * scale, 3) + " / " + number(it->second.max * scale, 3) + unit;
    };
    std::string throttling;
    for (const auto& reason : m.throttle_reasons)
      throttling += (throttling.empty() ? "" : ", ") + e(reason);
    rows.push_back(
        {e(c.name), e(c.target), e(m.source), m.available ? std::to_string(m.samples.size()) : "-",
         figure("gpu_utilization_percent", 1, " %"), figure("memory_utilization_percent", 1, " %"),
         figure("memory_used_bytes", 1.0 / (1 << 20), " MiB"), figure("sm_clock_mhz", 1, " MHz"),
         figure("power_watts", 1, " W"), figure("temperature_celsius", 1, " &deg;C"),
         figure("cpu_utilization_percent", 1, " %"), throttling.empty() ? "-" : throttling,
         m.available ? "" : e(m.reason)});
    for (const auto& finding : m.findings)
      warnings.push_back(e(c.name) + " on " + e(c.target) + ": " + e(finding));
  }
  if (rows.empty())
    return "";
  std::string html = "<section id=\"monitoring\"><h2>What the devices did</h2>\n"
                     "<p>Sampled during the timed epochs (mean / max): NVML on a GPU, the "
                     "process's CPU time on the CPU. A figure the device could not report is "
                     "&ldquo;-&rdquo;, never 0. These findings are warnings, not failures.</p>\n";
  if (!warnings.empty()) {
    html += "<ul class=\"warnings\">";
    for (const auto& w : warnings)
      html += "<li>warning: " + w + "</li>";
    html += "</ul>\n";
  }
  return html +
         detail::html_table("monitoring-table",
                            {"case", "target", "source", "samples", "GPU busy", "memory busy",
                             "memory used", "SM clock", "power", "temperature", "CPU",
                             "throttled by", "not monitored because"},
                            rows) +
         "</section>\n";
}

std::string sweep_section(const Results& r) {
  if (!r.sweep)
    return "";
  const auto& s = *r.sweep;
  auto count = [](const std::optional<int64_t>& v) {
    return or_dash(v, [](int64_t x) { return std::to_string(x); });
  };
  std::string html = "<section id=\"sweep\"><h2>Batch-size sweep</h2>\n"
                     "<p>Throughput (training samples per second, from the median epoch) of each "
                     "workload at each batch size on each target. A target saturates where its "
                     "throughput comes within 10 % of its best.</p>\n";
  if (!s.crossovers.empty()) {
    html += "<ul class=\"crossovers\">";
    for (const auto& c : s.crossovers)
      html += "<li>" + e(c.case_name) + ": " + e(c.message) + "</li>";
    html += "</ul>\n";
  }
  std::vector<std::vector<std::string>> targets;
  for (const auto& t : s.targets)
    targets.push_back(
        {e(t.case_name), e(t.target), count(t.best_batch),
         or_dash(t.best_samples_per_second, [](double v) { return number(v); }),
         count(t.saturation_batch), count(t.max_batch),
         t.max_batch_attempts.empty() ? "-" : std::to_string(t.max_batch_attempts.size()),
         e(t.max_batch_reason)});
  html += detail::html_table("sweep-targets-table",
                             {"case", "target", "best batch", "best samples/s", "saturation batch",
                              "max batch", "search attempts", "note"},
                             targets);
  const bool hosts = std::any_of(s.points.begin(), s.points.end(),
                                 [](const SweepPoint& p) { return p.host.has_value(); });
  std::vector<std::vector<std::string>> points;
  for (const auto& p : s.points) {
    points.push_back(
        {e(p.case_name), e(p.target), std::to_string(p.batch), status_cell(to_string(p.status)),
         seconds_or_dash(p.median_epoch_seconds),
         or_dash(p.samples_per_second, [](double v) { return number(v); }),
         or_dash(p.epoch_cv, [](double v) { return number(v * 100, 3) + "%"; }),
         or_dash(p.peak_memory_bytes, [](int64_t v) { return bytes(static_cast<double>(v)); }),
         e(p.reason)});
    if (hosts)
      points.back().push_back(e(p.host.value_or("-")));
  }
  std::vector<std::string> header{"case",      "target", "batch",       "status", "median epoch",
                                  "samples/s", "CV",     "peak memory", "reason"};
  if (hosts)
    header.push_back("host");
  return html + detail::html_table("sweep-table", header, points) + "</section>\n";
}

std::string audit_section(const Results& r) {
  if (!about_cases(r))
    return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r.cases)
    for (const auto& f : c.audit_findings)
      rows.push_back({e(c.name), e(c.target), e(f.tensor), e(f.kind), e(f.problem), e(f.device),
                      e(f.expected_device), e(f.message), e(f.fix)});
  return "<section id=\"audit\"><h2>Device audit</h2>\n" +
         (rows.empty() ? std::string("<p>No findings: every audited tensor was where it "
                                     "belonged.</p>\n")
                       : detail::html_table("audit-table",
                                            {"case", "target", "tensor", "kind", "problem",
                                             "device", "expected device", "message", "fix"},
                                            rows)) +
         "</section>\n";
}

// Where the machine had no GPU: each case's GPU run rehearsed on the meta device.
std::string rehearsal_section(const Results& r) {
  if (!r.rehearsal)
    return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r.rehearsal->cases) {
    for (const auto& f : c.findings)
      rows.push_back({e(c.case_name), e(f.problem), e(f.tensor), e(f.phase), e(f.source),
                      e(f.message), e(f.fix)});
    if (!c.error.empty())
      rows.push_back({e(c.case_name), "could not finish", "", "", "", e(c.error), ""});
  }
  return "<section id=\"rehearsal\"><h2>GPU run rehearsed without a GPU</h2>\n<p>" +
         e(r.rehearsal->reason) +
         ". Each case's training step ran on the meta device instead (shapes and devices, no "
         "data): what follows is what a GPU run would raise or pay. It proves nothing about "
         "kernels, memory, speed or numerics.</p>\n" +
         (rows.empty()
              ? std::string("<p>No findings: nothing would stop or slow a GPU run.</p>\n")
              : detail::html_table(
                    "rehearsal-table",
                    {"case", "problem", "where", "phase", "source", "message", "fix"}, rows)) +
         "</section>\n";
}

std::string baseline_section(const BaselineComparison& b, const std::string& source) {
  std::string html =
      "<section id=\"baseline\"><h2>Against the baseline</h2>\n<p>Baseline: " + e(source) +
      ". Verdicts use both runs' repetitions (Mann-Whitney U test at "
      "alpha " +
      number(b.options.alpha) + ", minimum relevant change " + number(b.options.min_change * 100) +
      "%).</p>\n";
  if (!b.warnings.empty()) {
    html += "<ul class=\"warnings\">";
    for (const auto& w : b.warnings)
      html += "<li>warning: " + e(w) + "</li>";
    html += "</ul>\n";
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : b.changes)
    rows.push_back({e(c.name), e(c.target), e(c.dtype), seconds_or_dash(c.old_median),
                    seconds_or_dash(c.new_median),
                    or_dash(c.ratio, [](double v) { return number(v); }),
                    or_dash(c.p_value, [](double v) { return number(v, 3); }),
                    status_cell(to_string(c.verdict)), e(c.note)});
  return html +
         detail::html_table("baseline-table",
                            {"case", "target", "dtype", "old median", "new median", "new/old", "p",
                             "verdict", "note"},
                            rows) +
         "</section>\n";
}

std::string gbench_section(const GBenchReport& g, size_t index) {
  const auto& c = g.context;
  std::string html = "<section id=\"gbench-" + std::to_string(index) +
                     "\" class=\"gbench\"><h2>Google Benchmark: " + e(g.source) + "</h2>\n<p>" +
                     e(c.executable) + " on " + e(c.host_name) + ", " + e(c.date) +
                     (c.num_cpus ? ", " + std::to_string(*c.num_cpus) + " CPUs" : "") +
                     (c.library_build_type.empty() ? "" : ", library " + e(c.library_build_type)) +
                     (c.cpu_scaling_enabled.value_or(false) ? ", CPU scaling on (noisy)" : "") +
                     "</p>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& b : g.benchmarks) {
    std::string counters;
    for (const auto& [key, value] : b.counters)
      counters += (counters.empty() ? "" : ", ") + e(key) + " = " + number(value);
    auto time = [&](const std::optional<double>& t) {
      if (!t)
        return std::string("-");
      return number(*t) + (b.aggregate_unit == "percentage" ? " %" : " " + e(b.time_unit));
    };
    rows.push_back({e(b.name), e(b.run_type == "aggregate" ? b.aggregate_name : b.run_type),
                    or_dash(b.iterations, [](int64_t v) { return std::to_string(v); }),
                    time(b.real_time), time(b.cpu_time), counters, e(b.label),
                    b.error_occurred ? status_cell("error") + " " + e(b.error_message) : ""});
  }
  return html +
         detail::html_table("gbench-table-" + std::to_string(index),
                            {"benchmark", "run", "iterations", "real time", "CPU time", "counters",
                             "label", "error"},
                            rows) +
         "</section>\n";
}

std::string environment_section(const Environment& env) {
  const auto text = [](const std::string& v) { return v.empty() ? std::string("-") : e(v); };
  std::vector<std::vector<std::string>> rows{
      {"kanbench", text(env.kanbench_version)},
      {"git commit", text(env.git_commit)},
      {"date", text(env.date)},
      {"host", text(env.hostname)},
      {"LibTorch", text(env.libtorch_version)},
      {"CUDA (LibTorch build)", text(env.cuda_build_version)},
      {"cuDNN (LibTorch build)", text(env.cudnn_build_version)},
      {"CUDA runtime", text(env.cuda_runtime_version)},
      {"CUDA driver", text(env.cuda_driver_version)},
      {"CUDA available",
       env.cuda_available ? "yes" : "no (" + e(env.cuda_unavailable_reason) + ")"},
      {"CUDA_VISIBLE_DEVICES", env.cuda_visible_devices ? e(*env.cuda_visible_devices) : "unset"},
      {"CPU", text(env.cpu_model)},
      {"CPU cores", std::to_string(env.cpu_cores)},
      {"LibTorch threads", std::to_string(env.torch_threads)},
      {"CPU governor", env.cpu_governor ? e(*env.cpu_governor) : "not exposed"},
      {"load average", env.load_average ? number(*env.load_average) : "-"},
      {"NVTX", env.nvtx_available ? "built in" : "not built in"},
      {"CUPTI", env.cupti_available ? "built in" : "not built in"}};
  for (const auto& d : env.cuda_devices)
    rows.push_back({"GPU " + std::to_string(d.index),
                    e(d.name) + ", compute capability " + e(d.compute_capability) + ", " +
                        std::to_string(d.multiprocessors) + " SMs, " +
                        bytes(static_cast<double>(d.total_memory_bytes)) + " (" +
                        bytes(static_cast<double>(d.free_memory_bytes)) + " free)"});
  for (const auto& p : env.problems)
    rows.push_back({"problem", e(p.what) + " &rarr; " + e(p.fix)});
  return "<section id=\"environment\"><h2>Environment</h2>\n" +
         detail::html_table("environment-table", {"what", "value"}, rows) + "</section>\n";
}

std::string configuration_section(const Results& r) {
  std::vector<std::pair<std::string, std::string>> flat;
  detail::flatten_json(to_json(r)["config"], "", flat);
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : flat)
    rows.push_back({e(key), e(value)});
  std::string html = "<section id=\"configuration\"><h2>Configuration</h2>\n" +
                     detail::html_table("configuration-table", {"setting", "value"}, rows);
  std::vector<std::vector<std::string>> case_rows;
  for (const auto& c : r.cases) {
    if (c.config.is_null())
      continue;
    std::vector<std::pair<std::string, std::string>> settings;
    detail::flatten_json(c.config, "", settings);
    std::string text;
    for (const auto& [key, value] : settings)
      text += (text.empty() ? "" : ", ") + e(key) + " = " + e(value);
    case_rows.push_back({e(c.name), e(c.target), text});
  }
  if (!case_rows.empty())
    html +=
        "<h3>Per case</h3>\n" + detail::html_table("case-configuration-table",
                                                   {"case", "target", "configuration"}, case_rows);
  return html + "</section>\n";
}

} // namespace

std::string render_html_report(const Results& results, const HtmlReportOptions& options) {
  const std::string chartjs = detail::inline_chartjs(options.chartjs_source, options.chartjs_path);
  std::optional<BaselineComparison> baseline;
  if (options.baseline)
    baseline = compare_with_baseline(*options.baseline, results, options.baseline_options);
  const json charts = chart_data(results);

  const auto& env = results.environment;
  // Which run this shows, first in the file: report_pair_problem() reads only the beginning.
  std::string first_meta;
  if (!results.run_id.empty())
    first_meta +=
        "<meta name=\"" + std::string(kRunIdMeta) + "\" content=\"" + e(results.run_id) + "\">\n";
  if (!options.results_source.empty())
    first_meta += "<meta name=\"kanbench-results\" content=\"" +
                  e(std::filesystem::path(options.results_source).filename().string()) + "\">\n";
  std::string html = detail::page_start(options.title, first_meta,
                                        "kanbench " + env.kanbench_version + ", results schema " +
                                            results.schema_version);
  html += "<header><h1>" + e(options.title) + "</h1><p>" +
          (options.results_source.empty() ? "" : e(options.results_source) + " &middot; ") +
          "suite " + e(results.config.suite) + " &middot; " + e(env.date) + " &middot; " +
          e(env.hostname) + " &middot; kanbench " + e(env.kanbench_version) +
          (env.git_commit.empty() ? "" : " (" + e(env.git_commit) + ")") +
          (results.wall_seconds ? " &middot; run took " + io::format_seconds(*results.wall_seconds)
                                : "") +
          (results.run_id.empty() ? "" : " &middot; run " + e(results.run_id)) + "</p></header>\n";
  html += verdict_section(results, baseline, options);
  html += accuracy_section(results);
  html += charts_section(charts, results);
  html += cases_section(results);
  html += comparisons_section(results);
  html += edge_cases_section(results);
  html += monitoring_section(results);
  html += scaling_section(results);
  html += sweep_section(results);
  if (!results.accuracy)
    html += detail::shards_table(results, /*as_section=*/true);
  html += audit_section(results);
  html += rehearsal_section(results);
  if (baseline)
    html += baseline_section(*baseline, options.baseline_source);
  for (size_t i = 0; i < options.gbench.size(); ++i)
    html += gbench_section(options.gbench[i], i);
  html += environment_section(env);
  html += configuration_section(results);
  return html + detail::page_end(
                    {{"kanbench-results", to_json(results)}, {"kanbench-charts", charts}}, chartjs);
}

std::optional<std::string> html_report_run_id(const std::string& html) {
  // Only the <head>: everything after it comes from the results, escaped, but still not ours.
  const std::string head = html.substr(0, html.find("</head>"));
  const std::string start = "<meta name=\"" + std::string(kRunIdMeta) + "\" content=\"";
  const auto at = head.find(start);
  if (at == std::string::npos)
    return std::nullopt;
  const auto from = at + start.size();
  const auto end = head.find('"', from);
  if (end == std::string::npos)
    return std::nullopt;
  std::string id = head.substr(from, end - from);
  if (!is_valid_run_id(id))
    return std::nullopt;
  return id;
}

std::optional<std::string> report_pair_problem(const std::string& results_path,
                                               const Results& results) {
  namespace fs = std::filesystem;
  if (results.run_id.empty())
    return std::nullopt;
  const std::string report = (fs::path(results_path).parent_path() / "report.html").string();
  std::error_code error;
  if (!fs::is_regular_file(report, error))
    return std::nullopt;
  const std::string redo = " (kanbench report " + results_path + " writes a matching one)";
  std::ifstream in(report, std::ios::binary);
  if (!in)
    return "cannot read " + report + " to check that it shows " + results_path + ": " +
           std::strerror(errno);
  // The run id is in the first lines; the rest (Chart.js, the data) can be megabytes.
  std::string beginning(size_t{64} * 1024, '\0');
  in.read(beginning.data(), static_cast<std::streamsize>(beginning.size()));
  beginning.resize(static_cast<size_t>(in.gcount()));
  const auto id = html_report_run_id(beginning);
  if (!id)
    return report + " records no run id (an older kanbench wrote it), so it may not show " +
           results_path + " (run " + results.run_id + ")" + redo;
  if (*id != results.run_id)
    return report + " is stale: it shows run " + *id + ", but " + results_path + " is run " +
           results.run_id + redo;
  return std::nullopt;
}

std::optional<std::string> report_pair_problem(const std::string& results_path) {
  return report_pair_problem(results_path, read_results_file(results_path));
}

void write_html_report(const std::string& path, const Results& results,
                       const HtmlReportOptions& options) {
  io::write_file_atomically(path, render_html_report(results, options));
}

} // namespace kan::reports
