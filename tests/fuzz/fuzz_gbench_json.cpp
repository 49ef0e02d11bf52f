// Google Benchmark's JSON output (`report` of bench_kan's results).
#include "fuzz_input.h"

#include "kan/results/gbench.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "benchmark.json");
  kan::fuzz::read_or_refuse([&] { kan::results::read_gbench_file(path); });
  return 0;
}
