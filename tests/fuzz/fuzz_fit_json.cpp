// fit.json (`report` of a fit), through both of its readers: the fit record and the report's
// summary.
#include "fuzz_input.h"

#include "kan/diagnostics/records.h"
#include "kan/results/fit_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "fit.json");
  kan::fuzz::read_or_refuse([&] { kan::diagnostics::read_fit_record(path); });
  kan::fuzz::read_or_refuse([&] { kan::results::read_fit_summary(path); });
  return 0;
}
