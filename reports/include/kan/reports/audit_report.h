#pragma once
/// The HTML page of one `kanbench audit`: its verdict, every finding (stage, problem, where,
/// phase, the user's source line, message and fix) and its summary lines, as a page that opens
/// offline like the other reports (every string from the file HTML-escaped). audit.json is read
/// by its owner, kan::diagnostics::read_audit_record, which needs LibTorch; the page takes the
/// LibTorch-free view below.

#include "kan/results/results.h"

#include <string>
#include <vector>

namespace kan::reports {

/// What the page shows of an audit.json.
struct AuditPage {
  std::string title = "kanbench audit";
  std::string source;     ///< the audit.json it was made from
  std::string device;     ///< audited against, "cuda:0", "meta"
  std::string model;      ///< what was audited: "torchscript model.pt", "kan 2,5,1"
  bool rehearsal = false; ///< a GPU run rehearsed on the meta device
  int exit_code = 0;      ///< what `kanbench audit` returned
  std::vector<results::AuditFinding> findings;
  std::vector<std::string> summary; ///< one line each: tensors checked, operations traced, ...
};

/// The page as one HTML document. Sections: `verdict`, `findings` (table findings-table),
/// `summary`.
std::string render_audit_report(const AuditPage& page);

/// render_audit_report(), written atomically to `path`.
void write_audit_report(const std::string& path, const AuditPage& page);

} // namespace kan::reports
