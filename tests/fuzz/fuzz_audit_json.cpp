// audit.json, through its strict reader.
#include "fuzz_input.h"

#include "kan/diagnostics/audit_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "audit.json");
  kan::fuzz::read_or_refuse([&] { kan::diagnostics::read_audit_record(path); });
  return 0;
}
