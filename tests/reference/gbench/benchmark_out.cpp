#include <benchmark/benchmark.h>
#include <cmath>
static void BM_Sum(benchmark::State& s) {
  double x = 0;
  for (auto _ : s) { for (int i = 0; i < s.range(0); ++i) x += std::sqrt(i); benchmark::DoNotOptimize(x); }
  s.counters["samples/s"] = benchmark::Counter(double(s.range(0)), benchmark::Counter::kIsIterationInvariantRate);
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.range(0), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::OneK::kIs1000);
  s.counters["zero_div"] = benchmark::Counter(0.0/0.0);
  s.SetItemsProcessed(s.iterations() * s.range(0));
  s.SetLabel("cpu/float64");
}
BENCHMARK(BM_Sum)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);
static void BM_Fails(benchmark::State& s) { for (auto _ : s) {} s.SkipWithError("no CUDA device"); }
BENCHMARK(BM_Fails);
BENCHMARK_MAIN();
