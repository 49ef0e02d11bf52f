#include "kan/reports/audit_report.h"

#include "detail/html_page.h"

#include "kan/io/atomic_file.h"
#include "kan/reports/html_report.h"

namespace kan::reports {
namespace {

std::string e(const std::string& text) {
  return html_escape(text);
}

std::string verdict(const AuditPage& page) {
  const size_t n = page.findings.size();
  std::string html = "<section id=\"verdict\"><h2>Verdict</h2>\n<p>";
  html += n == 0 ? std::string("<span class=\"status ok\">clean</span>")
                 : "<span class=\"status bad\">" + std::to_string(n) + " finding" +
                       (n == 1 ? "" : "s") + "</span>";
  html += " on " + e(page.device) + " (exit code " + std::to_string(page.exit_code) + ")</p>\n";
  if (page.rehearsal)
    html += "<p>A GPU run rehearsed on the meta device (shapes and devices, no data): the "
            "findings are what a GPU run would raise or pay. It proves nothing about kernels, "
            "memory, speed or numerics.</p>\n";
  return html + "</section>\n";
}

std::string findings_section(const AuditPage& page) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : page.findings)
    rows.push_back({e(f.stage), e(f.problem), e(f.tensor), e(f.phase), e(f.source), e(f.device),
                    e(f.message), e(f.fix)});
  return "<section id=\"findings\"><h2>Findings</h2>\n" +
         (rows.empty() ? std::string("<p>No findings.</p>\n")
                       : detail::html_table("findings-table",
                                            {"stage", "problem", "where", "phase", "source",
                                             "device", "message", "fix"},
                                            rows)) +
         "</section>\n";
}

std::string summary_section(const AuditPage& page) {
  std::string html = "<section id=\"summary\"><h2>Summary</h2>\n<ul>\n";
  for (const auto& line : page.summary)
    html += "<li>" + e(line) + "</li>\n";
  return html + "</ul></section>\n";
}

} // namespace

std::string render_audit_report(const AuditPage& page) {
  std::string html = detail::page_start(page.title, "", "kanbench audit");
  html += "<header><h1>" + e(page.title) + "</h1><p>" + e(page.model) + " on " + e(page.device) +
          (page.source.empty() ? "" : " &middot; " + e(page.source)) + "</p></header>\n";
  html += verdict(page) + findings_section(page) + summary_section(page);
  return html + detail::page_end({}, "");
}

void write_audit_report(const std::string& path, const AuditPage& page) {
  io::write_file_atomically(path, render_audit_report(page));
}

} // namespace kan::reports
