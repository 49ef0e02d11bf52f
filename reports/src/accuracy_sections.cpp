#include "detail/accuracy_sections.h"

#include "detail/charts.h"
#include "detail/html_page.h"

#include "kan/io/text.h"
#include "kan/reports/html_report.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace kan::reports::detail {

using namespace kan::results;

namespace {

std::string e(const std::string& text) {
  return html_escape(text);
}

// How many functions reproduce the paper's finding, counted over the summary entries that have
// both a KAN and an MLP to compare.
std::string accuracy_reproduced(const AccuracyRun& run) {
  const auto [reproduced, compared] = finding_count(run);
  const bool per_device = run.devices.size() > 1;
  std::string text = "the paper's finding (the best KAN's test RMSE at most the best MLP's) "
                     "reproduces for <span class=\"figure\">" +
                     std::to_string(reproduced) + " of " + std::to_string(compared) + "</span> " +
                     (per_device ? "functions and devices" : "functions");
  const auto missing = static_cast<int64_t>(run.summary.size()) - compared;
  if (missing > 0)
    text += " (" + std::to_string(missing) + " more without both a KAN and an MLP result)";
  if (has_other_kans(run, "minimal")) {
    const auto minimal = finding_count(run, "minimal");
    text += "; with the paper's minimal KAN shapes alone, <span class=\"figure\">" +
            std::to_string(minimal.holds) + " of " + std::to_string(minimal.compared) + "</span>";
  }
  return text;
}

// A best point in the summary table: its RMSE, then what reached it.
std::string best_cell(const AccuracyRun& run, const std::optional<AccuracyPointRef>& ref) {
  if (!ref)
    return "-";
  const auto& fit = run.fits[static_cast<size_t>(ref->fit)];
  const auto& p = point_at(run, *ref);
  std::string what = width_text(fit.width);
  if (fit.family == "kan")
    what += ", G=" + std::to_string(p.grid);
  else if (!fit.activation.empty())
    what += ", " + fit.activation;
  return rmse_text(p.test_rmse) + " <small>" + e(what) + ", " + std::to_string(p.parameters) +
         " parameters</small>";
}

// One of the paper's numbers; blank where it published none.
std::string paper_cell(const std::optional<double>& rmse, const std::vector<int64_t>& width) {
  if (!rmse)
    return "";
  return rmse_text(*rmse) + (width.empty() ? "" : " <small>" + e(width_text(width)) + "</small>");
}

// The run's settings, and whether it is complete (`merged`: of a kanbench merge, whose missing
// part is its shards').
std::string run_description(const AccuracyRun& a, bool merged) {
  std::string html;
  if (static_cast<int64_t>(a.fits.size()) < a.planned_fits)
    html += "<p class=\"warnings\" id=\"accuracy-incomplete\">Incomplete run: " +
            std::to_string(a.fits.size()) + " of " + std::to_string(a.planned_fits) +
            " planned fits finished. " +
            (merged ? std::string("Each unfinished shard's <code>kanbench accuracy</code>, run "
                                  "again with its options, continues it; then merge again.")
                    : std::string("<code>kanbench accuracy</code> with the same "
                                  "<code>--out</code> continues it (finished fits are kept).")) +
            "</p>\n";
  std::string seeds, grids;
  for (const auto seed : a.seeds)
    seeds += (seeds.empty() ? "" : ", ") + std::to_string(seed);
  for (const auto grid : a.grids)
    grids += (grids.empty() ? "" : ", ") + std::to_string(grid);
  html += "<p>The KAN paper's accuracy table <b>" + e(a.table) + "</b> re-measured, preset " +
          e(a.preset) + ": " + std::to_string(a.functions.size()) + " function(s) on " +
          std::to_string(a.devices.size()) + " device(s), seed(s) " + seeds +
          ", KAN grid schedule " + grids + " (" + std::to_string(a.steps) +
          " LBFGS steps per grid), " + std::to_string(a.train_num) + " training and " +
          std::to_string(a.test_num) + " test samples; " + std::to_string(a.jobs) +
          " fit(s) at a time, " + std::to_string(a.threads_per_fit) +
          " thread(s) each; wall time " + duration_text(a.wall_seconds) +
          ". Each KAN grid is a point (its parameters, its test RMSE after training at that "
          "grid); an MLP is one point.</p>\n";
  return html;
}

// One row per function and device: the best KAN and MLP against the paper's numbers.
std::string summary_table(const AccuracyRun& a) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : a.summary) {
    const auto& paper = s.published;
    std::string reproduces = "-";
    if (s.kan_beats_mlp)
      reproduces = *s.kan_beats_mlp ? "<span class=\"status good\">yes</span>"
                                    : "<span class=\"status bad\">no</span>";
    rows.push_back(
        {e(s.function), e(s.device), e(s.formula), best_cell(a, s.best_kan),
         best_cell(a, s.best_mlp),
         paper ? paper_cell(paper->best_kan_test_rmse, paper->best_kan_width) : "",
         paper ? paper_cell(paper->minimal_kan_test_rmse, paper->minimal_kan_width) : "",
         paper ? paper_cell(paper->mlp_test_rmse, {}) : "", reproduces,
         std::to_string(s.fits) + (s.failed ? " <span class=\"status bad\">" +
                                                  std::to_string(s.failed) + " failed</span>"
                                            : ""),
         duration_text(s.seconds)});
  }
  return html_table("accuracy-table",
                    {"function", "device", "formula", "best KAN test RMSE", "best MLP test RMSE",
                     "paper: best KAN", "paper: minimal KAN", "paper: MLP", "best KAN <= best MLP",
                     "fits", "time"},
                    rows);
}

std::string failed_fits(const AccuracyRun& a) {
  std::vector<std::vector<std::string>> failed;
  for (const auto& fit : a.fits)
    if (!fit.error.empty())
      failed.push_back({e(fit.key()), e(fit.role), io::format_seconds(fit.seconds), e(fit.error)});
  return "<h3>Failed fits</h3>\n" +
         (failed.empty()
              ? std::string("<p>No fit failed.</p>\n")
              : html_table("accuracy-failed-table", {"fit", "role", "time", "error"}, failed));
}

// Every point of the fits of one function on one device, with the best and the Pareto ones
// marked.
std::vector<std::vector<std::string>> point_rows(const AccuracyRun& a, const AccuracyFunction& s) {
  std::vector<std::vector<std::string>> points;
  for (size_t i = 0; i < a.fits.size(); ++i) {
    const auto& fit = a.fits[i];
    if (fit.function != s.function || fit.device != s.device)
      continue;
    for (size_t j = 0; j < fit.points.size(); ++j) {
      const auto& p = fit.points[j];
      const AccuracyPointRef ref{static_cast<int64_t>(i), static_cast<int64_t>(j)};
      std::string marks;
      if (s.best_kan == ref || s.best_mlp == ref)
        marks = "best";
      if (std::find(s.pareto.begin(), s.pareto.end(), ref) != s.pareto.end())
        marks += (marks.empty() ? "" : ", ") + std::string("Pareto");
      points.push_back(
          {e(fit.family), e(width_text(fit.width)), e(fit.activation), e(fit.role),
           std::to_string(fit.seed), e(p.stage), fit.family == "kan" ? std::to_string(p.grid) : "-",
           std::to_string(p.parameters), std::to_string(p.forward_flops), rmse_text(p.train_rmse),
           rmse_text(p.test_rmse), io::format_seconds(p.seconds), e(fit.host.value_or("")), marks});
    }
  }
  return points;
}

// The summary entry k's function on its device: its chart and its points.
std::string function_section(const AccuracyRun& a, size_t k) {
  const auto& s = a.summary[k];
  std::string html = "<h3>" + e(s.function) + " on " + e(s.device) + "</h3>\n<p>" + e(s.formula) +
                     (s.published && !s.published->source.empty()
                          ? " &middot; the paper's numbers: " + e(s.published->source)
                          : " &middot; not in the paper's tables") +
                     "</p>\n";
  const auto points = point_rows(a, s);
  if (!accuracy_chart(a, k).is_null())
    html += chart_canvas(kAccuracyChartPrefix + std::to_string(k), false);
  else
    html += "<p>Nothing to draw: no finished fit with a test RMSE, and no number from the "
            "paper.</p>\n";
  if (!points.empty())
    html +=
        "<details><summary>Every point (" + std::to_string(points.size()) + ")</summary>\n" +
        html_table("accuracy-points-" + std::to_string(k),
                   {"family", "width", "activation", "role", "seed", "stage", "grid", "parameters",
                    "forward FLOPs", "train RMSE", "test RMSE", "time", "host", ""},
                   points) +
        "</details>\n";
  return html;
}

} // namespace

std::string shards_table(const Results& r, bool as_section) {
  if (r.shards.empty())
    return "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : r.shards)
    rows.push_back({e(s.shard.text()), e(s.shard.source), e(s.folder), e(s.environment.hostname),
                    e(s.environment.cpu_model), e(s.environment.kanbench_version),
                    e(s.environment.date),
                    s.wall_seconds ? duration_text(*s.wall_seconds) : std::string("-")});
  const std::string table =
      "<p>Merged by <code>kanbench merge</code> from " + std::to_string(r.shards.size()) +
      " shard(s); the run's wall time is the longest shard's.</p>\n" +
      html_table(as_section ? "shards-table" : "accuracy-shards",
                 {"shard", "index from", "folder", "host", "CPU", "kanbench", "date", "wall time"},
                 rows);
  return as_section ? "<section id=\"shards\"><h2>Shards</h2>\n" + table + "</section>\n"
                    : "<h3>Shards</h3>\n" + table;
}

std::string accuracy_line(const Results& r) {
  if (!r.accuracy)
    return "";
  const auto& a = *r.accuracy;
  const auto failed = std::count_if(a.fits.begin(), a.fits.end(),
                                    [](const AccuracyFit& f) { return !f.error.empty(); });
  return "<b>Accuracy:</b> " + accuracy_reproduced(a) + "; " + std::to_string(a.fits.size()) +
         " of " + std::to_string(a.planned_fits) + " planned fits finished" +
         (failed ? ", " + std::to_string(failed) + " failed" : "");
}

std::string accuracy_section(const Results& r) {
  if (!r.accuracy)
    return "";
  const auto& a = *r.accuracy;
  std::string html =
      "<section id=\"accuracy\"><h2>Accuracy</h2>\n" + run_description(a, !r.shards.empty());
  html += "<p id=\"accuracy-verdict\"><b>Reproduced?</b> " + accuracy_reproduced(a) + ".</p>\n";
  html += summary_table(a) + shards_table(r) + failed_fits(a);
  for (size_t k = 0; k < a.summary.size(); ++k)
    html += function_section(a, k);
  return html + "</section>\n";
}

} // namespace kan::reports::detail
