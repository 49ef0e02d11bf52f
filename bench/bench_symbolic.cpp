// bench_kan families of symbolic regression: one layer's fits of a library function (the batched
// grid search of fit_symbolic_params) and auto_symbolic on a whole deep KAN, e.g.
//   build/bin/bench_kan --benchmark_filter='BM_AutoSymbolicDeep/functions:2/'
// The deep family runs once per case, on a new model, without a warm-up: auto_symbolic changes
// the model, and a whole library on it takes minutes on a CPU.
#include "bench_util.h"

#include "kan/kan.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <torch/cuda.h>

#include <chrono>
#include <string>
#include <vector>

namespace kan::bench {
namespace {

torch::Tensor inputs(int64_t n, int64_t columns, torch::Device device) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1);
  return (torch::rand({n, columns}, generator, torch::kFloat64) * 2 - 1)
      .to(device, torch::kFloat32);
}

// The search as the benchmark's arguments: zoom grid 0 and newton 0 is pykan's (101 points, 3
// searches); another zoom grid is that grid with enough searches to reach a step at least as
// fine as pykan's; newton > 0 is the first search and that many Newton steps.
SymbolicFitOptions search_arg(int64_t zoom_grid, int64_t newton) {
  SymbolicFitOptions options;
  if (newton > 0) {
    options.iterations = 1;
    options.newton_steps = newton;
    return options;
  }
  if (zoom_grid == 0)
    return options;
  options.zoom_grid_number = zoom_grid;
  // pykan's final step: 20 / 100 * (2 / 100)^2. Each zoom divides the step by (zoom_grid - 1) / 2.
  double step = 0.2;
  options.iterations = 1;
  while (step > 0.2 * 4e-4 * (1 + 1e-9)) {
    step /= (zoom_grid - 1) / 2.0;
    ++options.iterations;
  }
  return options;
}

std::string search_label(const SymbolicFitOptions& options) {
  if (options.newton_steps > 0)
    return "first search, " + std::to_string(options.newton_steps) + " Newton steps";
  return "zoom grid " +
         std::to_string(options.zoom_grid_number > 0 ? options.zoom_grid_number
                                                     : options.grid_number) +
         ", " + std::to_string(options.iterations) + " searches";
}

// ---- One layer's fits of sin: Args in I, out O, samples N, zoom grid,
// newton----------------------
void layer_fits(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const int64_t I = state.range(0), O = state.range(1), N = state.range(2);
  const auto options = search_arg(state.range(3), state.range(4));
  KANLayer layer(KANLayerOptions(I, O).seed(0));
  layer->to(device);
  const auto x = inputs(N, I, device);
  torch::Tensor activations;
  {
    torch::NoGradGuard no_grad;
    activations = layer->forward_with_activations(x).edges.reshape({N, I * O});
  }
  std::vector<int64_t> column(static_cast<size_t>(I * O));
  for (int64_t e = 0; e < I * O; ++e)
    column[static_cast<size_t>(e)] = e / O;
  run_timed(state, device, [&] {
    benchmark::DoNotOptimize(
        fit_symbolic_params(x, column, activations, symbolic_function("sin"), options).params);
  });
  state.counters["edges/s"] =
      benchmark::Counter(static_cast<double>(I * O), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(search_label(options));
}
void BM_FitSymbolicLayer(benchmark::State& state) {
  layer_fits(state, torch::kCPU);
}
void BM_FitSymbolicLayer_CUDA(benchmark::State& state) {
  layer_fits(state, torch::kCUDA);
}

// ---- auto_symbolic on [4, 100, 100, 100, 1], N = 100: Args functions F, zoom grid, newton -----
// The library is pykan's first F functions (x, x^2, ..., in symbolic_function_names' order).
void auto_symbolic_deep(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const auto names = symbolic_function_names();
  const auto count = std::min<size_t>(names.size(), static_cast<size_t>(state.range(0)));
  const std::vector<std::string> lib(names.begin(), names.begin() + static_cast<int64_t>(count));
  const auto options = search_arg(state.range(1), state.range(2));
  const auto x = inputs(100, 4, device);
  int64_t edges = 0;
  for (auto _ : state) {
    KAN model(KANOptions({4, 100, 100, 100, 1}).seed(0).device(device));
    // Manual time on both devices: the model's making is not timed, and auto_symbolic reads its
    // choices on the host, so a synchronised wall clock is the GPU's time too.
    if (device.is_cuda())
      torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    edges = static_cast<int64_t>(auto_symbolic(*model, x, lib, 0.8, 0.0, options).size());
    if (device.is_cuda())
      torch::cuda::synchronize();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.counters["edges"] = static_cast<double>(edges);
  state.SetLabel(std::to_string(count) + " functions, " + search_label(options));
}
void BM_AutoSymbolicDeep(benchmark::State& state) {
  auto_symbolic_deep(state, torch::kCPU);
}
void BM_AutoSymbolicDeep_CUDA(benchmark::State& state) {
  auto_symbolic_deep(state, torch::kCUDA);
}

} // namespace

void register_symbolic_families() {
  const bool gpu = cuda_benchmarks_available();
  for (const bool cuda : {false, true}) {
    if (cuda && !gpu)
      continue;
    register_on(cuda, cuda ? "BM_FitSymbolicLayer_CUDA" : "BM_FitSymbolicLayer",
                cuda ? BM_FitSymbolicLayer_CUDA : BM_FitSymbolicLayer,
                {"in", "out", "batch", "zoom_grid", "newton"},
                {{2, 5, 100, 0, 0},
                 {2, 5, 100, 21, 0},
                 {2, 5, 100, 0, 10},
                 {100, 100, 100, 0, 0},
                 {100, 100, 100, 21, 0},
                 {100, 100, 100, 0, 10}});
  }
  for (const bool cuda : {false, true}) {
    if (cuda && !gpu)
      continue;
    auto* b =
        benchmark::RegisterBenchmark(cuda ? "BM_AutoSymbolicDeep_CUDA" : "BM_AutoSymbolicDeep",
                                     cuda ? BM_AutoSymbolicDeep_CUDA : BM_AutoSymbolicDeep)
            ->ArgNames({"functions", "zoom_grid", "newton"})
            ->Unit(benchmark::kSecond)
            ->Iterations(1)
            ->UseManualTime();
    for (const auto& a : std::vector<std::vector<int64_t>>{
             {2, 0, 0}, {2, 21, 0}, {2, 0, 10}, {29, 0, 10}, {29, 21, 0}, {29, 0, 0}})
      b->Args(a);
  }
}

} // namespace kan::bench
