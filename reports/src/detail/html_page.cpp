#include "detail/html_page.h"

#include "report_assets.h" // kReportScript, kReportStyle: generated from report.js, report.css

#include "kan/reports/html_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace kan::reports::detail {

using json = nlohmann::json;
using reports::html_escape;

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string number(double value, int digits) {
  if (std::isnan(value))
    return "NaN";
  char text[48];
  std::snprintf(text, sizeof text, "%.*g", digits, value);
  return text;
}

std::string html_table(const std::string& id, const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  std::string html = "<table id=\"" + id + "\"><thead><tr>";
  for (const auto& h : header)
    html += "<th>" + html_escape(h) + "</th>";
  html += "</tr></thead><tbody>";
  for (const auto& row : rows) {
    html += "<tr>";
    for (const auto& cell : row)
      html += "<td>" + cell + "</td>";
    html += "</tr>";
  }
  return html + "</tbody></table>\n";
}

std::string status_cell(const std::string& status) {
  const bool good = status == "ok" || status == "pass";
  const bool neutral = status == "skipped" || status == "same" || status == "n/a";
  return "<span class=\"status " +
         std::string(good      ? "good"
                     : neutral ? "neutral"
                               : "bad") +
         "\">" + html_escape(status) + "</span>";
}

void flatten_json(const json& value, const std::string& prefix,
                  std::vector<std::pair<std::string, std::string>>& rows) {
  if (value.is_object() && !value.empty()) {
    for (const auto& item : value.items())
      flatten_json(item.value(), prefix.empty() ? item.key() : prefix + "." + item.key(), rows);
  } else if (value.is_array() && std::any_of(value.begin(), value.end(), [](const json& v) {
               return v.is_object() || v.is_array();
             })) {
    for (size_t i = 0; i < value.size(); ++i)
      flatten_json(value[i], prefix + "[" + std::to_string(i) + "]", rows);
  } else {
    rows.emplace_back(prefix, value.is_string() ? value.get<std::string>() : dump_json(value));
  }
}

std::string chart_canvas(const std::string& id, bool small) {
  return std::string(small ? "<div class=\"chart small\">" : "<div class=\"chart\">") +
         "<canvas id=\"" + html_escape(id) + "\"></canvas></div>" + (small ? "" : "\n");
}

std::string inline_chartjs(const std::string& source, const std::string& path) {
  std::string script =
      source.empty() ? reports::load_chartjs(path.empty() ? reports::default_chartjs_path() : path)
                     : source;
  if (script.find("<!--") != std::string::npos)
    throw std::runtime_error("Chart.js contains \"<!--\" and cannot be inlined safely");
  for (size_t at = 0; (at = script.find("</", at)) != std::string::npos; at += 3) {
    std::string next = script.substr(at + 2, 6);
    std::transform(next.begin(), next.end(), next.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (next == "script")
      script.replace(at, 2, "<\\/");
  }
  return script;
}

std::string page_start(const std::string& title, const std::string& first_meta,
                       const std::string& generator) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" + first_meta +
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         // No network request of any kind: everything is inline.
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
         "<meta name=\"generator\" content=\"" +
         html_escape(generator) + "\">\n<title>" + html_escape(title) + "</title>\n<style>" +
         kReportStyle + "</style>\n</head>\n<body>\n";
}

std::string page_end(const std::vector<std::pair<std::string, json>>& embedded,
                     const std::string& chartjs) {
  std::string html;
  for (const auto& [id, value] : embedded)
    html += "<script type=\"application/json\" id=\"" + html_escape(id) + "\">" +
            reports::escape_script_json(dump_json(value)) + "</script>\n";
  html += "<script>\n" + chartjs + "\n</script>\n";
  return html + "<script>" + std::string(kReportScript) + "</script>\n</body>\n</html>\n";
}

} // namespace kan::reports::detail
