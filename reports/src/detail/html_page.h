#pragma once
// The pieces every kanbench HTML page is made of (report.html of a run, of a fit): number and
// table formatting, the <head> with its no-network policy, and the end of the page with the
// embedded data, Chart.js and the report's script. Internal to kan::reports.

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kan::reports::detail {

/// `value` as compact JSON; invalid UTF-8 is replaced rather than thrown on.
std::string dump_json(const nlohmann::json& value);

/// `value` with `digits` significant digits ("0.0015", "1.2e+09"); "NaN" for NaN.
std::string number(double value, int digits = 4);

/// A <table id=ID> from a header (escaped here) and rows of already-escaped cells.
std::string html_table(const std::string& id, const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows);

/// `status` in a coloured <span>: good ("ok", "pass"), neutral ("skipped", "same", "n/a"), bad.
std::string status_cell(const std::string& status);

/// A JSON value as rows of (dotted key, value text), for a configuration table.
void flatten_json(const nlohmann::json& value, const std::string& prefix,
                  std::vector<std::pair<std::string, std::string>>& rows);

/// The canvas of the chart `id`; `small` for one of a grid of small multiples.
std::string chart_canvas(const std::string& id, bool small);

/// Chart.js ready to inline: `source`, or when empty the file `path` (when empty,
/// kan::reports::default_chartjs_path()), with every "</script" defused; throws
/// std::runtime_error when it cannot be read or holds "<!--".
std::string inline_chartjs(const std::string& source, const std::string& path);

/// The page up to and including <body>: charset, `first_meta` (already-escaped <meta> elements
/// that must come first), viewport, a Content-Security-Policy that forbids every request, the
/// generator, the title and the report's style. `generator` and `title` are escaped here.
std::string page_start(const std::string& title, const std::string& first_meta,
                       const std::string& generator);

/// The end of the page: each (id, value) of `embedded` as <script type="application/json"
/// id=ID> (which its content cannot close), then `chartjs` (from inline_chartjs()) and the
/// report's script, which draws the charts of the block id="kanbench-charts".
std::string page_end(const std::vector<std::pair<std::string, nlohmann::json>>& embedded,
                     const std::string& chartjs);

} // namespace kan::reports::detail
