// fit.json (`report` of a fit): the reader with every part checked, and the page made from what
// kan::results reads of it.
#include "fuzz_input.h"

#include "kan/diagnostics/fit_setup.h"
#include "kan/reports/fit_report.h"
#include "kan/results/fit_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "fit.json");
  kan::fuzz::read_or_refuse([&] { kan::diagnostics::read_fit_record_strict(path); });
  kan::fuzz::read_or_refuse([&] {
    kan::reports::FitReportOptions options;
    options.chartjs_source = "/* Chart.js */";
    kan::reports::render_fit_report(kan::results::read_fit_record(path), options);
  });
  return 0;
}
