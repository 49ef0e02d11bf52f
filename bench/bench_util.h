#pragma once
// Helpers shared by the benchmark families of bench_kan: backends as benchmark arguments,
// dense-equivalent work counters, and CUDA-event timing.

#include "kan/nn/options.h"

#include <benchmark/benchmark.h>
#include <torch/cuda.h>
#include <torch/types.h>

#if __has_include(<ATen/cuda/CUDAEvent.h>) && __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#define KAN_BENCH_HAS_CUDA_EVENTS 1
#endif

#include <cstdint>
#include <string>
#include <vector>

namespace kan::bench {

/// Backends in argument order: benchmark argument 0 = reference, 1 = fused.
inline SplineBackend backend_arg(int64_t arg) {
  return arg == 0 ? SplineBackend::kReference : SplineBackend::kFused;
}

/// Floating types as benchmark arguments by their bits: 32 = float32, 64 = float64.
inline torch::Dtype dtype_arg(int64_t bits) {
  return bits == 64 ? torch::kFloat64 : torch::kFloat32;
}

/// Dense-equivalent floating-point operations of one KAN layer forward: the spline GEMM over
/// I * (G + k) columns plus the base GEMM, whatever a backend really executes.
inline double layer_forward_flops(int64_t N, int64_t I, int64_t O, int64_t G, int64_t k) {
  return 2.0 * N * I * (G + k) * O + 2.0 * N * I * O;
}

/// Sets samples/s and GFLOP/s (dense-equivalent work per iteration, as a rate).
inline void set_rate_counters(benchmark::State& state, int64_t samples, double flops) {
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples),
                                                   benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// True where CUDA benchmarks can run (a GPU and event timing compiled in).
inline bool cuda_benchmarks_available() {
#ifdef KAN_BENCH_HAS_CUDA_EVENTS
  return torch::cuda::is_available();
#else
  return false;
#endif
}

/// Runs body once per iteration on the current CUDA stream and reports the time between CUDA
/// events around it (manual time; register the benchmark with UseManualTime()).
template <typename Body> void time_on_cuda(benchmark::State& state, Body&& body) {
#ifdef KAN_BENCH_HAS_CUDA_EVENTS
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  for (auto _ : state) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    start.record(stream);
    body();
    stop.record(stream);
    stop.synchronize();
    state.SetIterationTime(start.elapsed_time(stop) * 1e-3);
  }
#else
  (void)body;
  state.SkipWithError("built without CUDA event support");
#endif
}

/// Runs body under the right clock: wall time on the CPU (ATen's threads do the work), CUDA
/// events on a GPU (register with UseManualTime()). One warm-up call first.
template <typename Body>
void run_timed(benchmark::State& state, torch::Device device, Body&& body) {
  body(); // warm-up
  if (device.is_cuda()) {
    time_on_cuda(state, body);
    return;
  }
  for (auto _ : state)
    body();
}

/// Skips a CUDA family where no GPU is, with that reason.
inline bool skip_without_gpu(benchmark::State& state, torch::Device device) {
  if (device.is_cuda() && !cuda_benchmarks_available()) {
    state.SkipWithError("no CUDA device");
    return true;
  }
  return false;
}

/// Registers a family in milliseconds, on the right clock (manual CUDA time or real time), with
/// one run per argument list.
inline void register_on(bool cuda, const char* name, void (*fn)(benchmark::State&),
                        const std::vector<std::string>& arg_names,
                        const std::vector<std::vector<int64_t>>& args) {
  auto* b =
      benchmark::RegisterBenchmark(name, fn)->ArgNames(arg_names)->Unit(benchmark::kMillisecond);
  if (cuda)
    b->UseManualTime();
  else
    b->UseRealTime();
  for (const auto& a : args)
    b->Args(a);
}

/// Registers the training-path families of bench_training.cpp (basis, layer forward, optimiser
/// step, grid update), their _CUDA variants where a GPU is.
void register_training_families();
/// Registers the symbolic-regression families of bench_symbolic.cpp (a layer's fits, auto_symbolic
/// on a deep KAN), their _CUDA variants where a GPU is.
void register_symbolic_families();
/// Registers the data-file families of bench_data.cpp (kan::load_dataset on a generated CSV).
void register_data_families();

} // namespace kan::bench
