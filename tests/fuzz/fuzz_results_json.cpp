// results.json (`report`, `compare`, a resumed `accuracy` run), through the strict reader.
#include "fuzz_input.h"

#include "kan/results/results_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "results.json");
  kan::fuzz::read_or_refuse([&] { kan::results::read_results_file(path); });
  return 0;
}
