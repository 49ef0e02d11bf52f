// bench_kan: Google Benchmark families of the KAN library. Each family is a BM_ function plus
// a registration in register_families(); CUDA variants are registered only where a GPU is.
//
// Read the fused / reference ratio off one run, e.g.
//   build/bin/bench_kan --benchmark_filter='BM_LayerForwardBackward/.*/batch:4096/in:100'
#include "bench_util.h"

#include "kan/diagnostics/operation_trace.h"
#include "kan/kan.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/version.h>

#include <vector>

namespace kan::bench {
namespace {

// ---- Layer forward + backward ---------------------------------------------------------------
// Args: backend (0 reference, 1 fused), batch N, in I, out O, grid G, order k. float32.

struct LayerCase {
  KANLayer layer;
  torch::Tensor x, grad_y;
};

LayerCase make_layer_case(const benchmark::State& state, torch::Device device) {
  const int64_t N = state.range(1), I = state.range(2), O = state.range(3), G = state.range(4),
                k = state.range(5);
  KANLayer layer(KANLayerOptions(I, O).grid(G).k(k).seed(0).backend(backend_arg(state.range(0))));
  layer->to(device);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto x = (torch::rand({N, I}, gen) * 2 - 1).to(device).requires_grad_(true);
  auto grad_y = torch::randn({N, O}, gen).to(device);
  return {layer, x, grad_y};
}

void layer_step(LayerCase& c) {
  c.layer->zero_grad();
  c.x.mutable_grad() = torch::Tensor();
  c.layer(c.x).backward(c.grad_y);
}

void set_layer_counters(benchmark::State& state) {
  const double flops = 3 * layer_forward_flops(state.range(1), state.range(2), state.range(3),
                                               state.range(4), state.range(5));
  set_rate_counters(state, state.range(1), flops);
  state.SetLabel(to_string(backend_arg(state.range(0))));
}

void BM_LayerForwardBackward(benchmark::State& state) {
  auto c = make_layer_case(state, torch::kCPU);
  layer_step(c); // warm-up
  for (auto _ : state)
    layer_step(c);
  set_layer_counters(state);
}

void BM_LayerForwardBackward_CUDA(benchmark::State& state) {
  auto c = make_layer_case(state, torch::kCUDA);
  layer_step(c);
  torch::cuda::synchronize();
  time_on_cuda(state, [&] { layer_step(c); });
  set_layer_counters(state);
}

// The dense matrix product of the spline's shape, (N, I * (G + k)) x (I * (G + k), O) forward
// and its two backward products: the yardstick a layer's fused forward + backward is measured
// against (its arithmetic touches k + 1 of the G + k basis functions, about half the GEMM's).
struct DenseGemm {
  torch::Tensor a, w, g;

  DenseGemm(const benchmark::State& state, torch::Device device) {
    const int64_t N = state.range(1), I = state.range(2), O = state.range(3),
                  K = I * (state.range(4) + state.range(5));
    const auto opts = torch::TensorOptions().device(device);
    a = torch::randn({N, K}, opts), w = torch::randn({K, O}, opts), g = torch::randn({N, O}, opts);
  }
  void operator()() const {
    auto y = torch::matmul(a, w);
    auto gw = torch::matmul(a.t(), g);
    auto ga = torch::matmul(g, w.t());
    benchmark::DoNotOptimize(y);
    benchmark::DoNotOptimize(gw);
    benchmark::DoNotOptimize(ga);
  }
};

void BM_DenseEquivalentGemm(benchmark::State& state) {
  const DenseGemm gemm(state, torch::kCPU);
  gemm(); // warm-up
  for (auto _ : state)
    gemm();
  set_layer_counters(state);
  state.SetLabel("dense gemm");
}

void BM_DenseEquivalentGemm_CUDA(benchmark::State& state) {
  const DenseGemm gemm(state, torch::kCUDA);
  time_on_cuda(state, gemm);
  set_layer_counters(state);
  state.SetLabel("dense gemm");
}

// batch, in, out, G, k. G = 3, 5, 10 and 50 at 4096 x 100 -> 100 are the fused backend's
// yardsticks against the dense GEMM (docs/benchmarks.md quotes them); batch 256 is the ctest
// smoke case.
const std::vector<std::vector<int64_t>>& layer_shapes() {
  static const std::vector<std::vector<int64_t>> shapes = {
      {256, 16, 16, 5, 3},     {4096, 100, 100, 3, 3},  {4096, 100, 100, 5, 3},
      {4096, 100, 100, 10, 3}, {4096, 100, 100, 50, 3}, {4096, 100, 100, 10, 1},
      {4096, 100, 100, 10, 5}, {1024, 784, 64, 5, 3}};
  return shapes;
}

// The memory test's shape: fused only, the reference needs a 3.4 GB basis tensor per level.
const std::vector<int64_t> kLargeFusedShape = {65536, 64, 64, 200, 3};

void layer_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"backend", "batch", "in", "out", "G", "k"});
  for (const auto& s : layer_shapes())
    for (const int64_t backend : {0, 1})
      b->Args({backend, s[0], s[1], s[2], s[3], s[4]});
  const auto& s = kLargeFusedShape;
  b->Args({1, s[0], s[1], s[2], s[3], s[4]});
}

// The same shapes once each (the backend argument is unused by the dense product).
void gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"backend", "batch", "in", "out", "G", "k"});
  for (const auto& s : layer_shapes())
    b->Args({1, s[0], s[1], s[2], s[3], s[4]});
  const auto& s = kLargeFusedShape;
  b->Args({1, s[0], s[1], s[2], s[3], s[4]});
}

// ---- Layer forward with activations + backward (a regularised training step) ---------------
// forward_with_activations keeps every edge's value (N, I, O) for the regulariser; the backward
// goes through the output and an L1 term of the edges. Args as for the layer families.

void activations_step(LayerCase& c) {
  c.layer->zero_grad();
  c.x.mutable_grad() = torch::Tensor();
  const auto acts = c.layer->forward_with_activations(c.x);
  ((acts.output * c.grad_y).sum() + acts.edges.abs().mean()).backward();
}

void BM_LayerActivations(benchmark::State& state) {
  auto c = make_layer_case(state, torch::kCPU);
  activations_step(c);
  for (auto _ : state)
    activations_step(c);
  set_layer_counters(state);
}

void BM_LayerActivations_CUDA(benchmark::State& state) {
  auto c = make_layer_case(state, torch::kCUDA);
  activations_step(c);
  torch::cuda::synchronize();
  time_on_cuda(state, [&] { activations_step(c); });
  set_layer_counters(state);
}

void activation_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"backend", "batch", "in", "out", "G", "k"});
  for (const auto& s : std::vector<std::vector<int64_t>>{
           {256, 16, 16, 5, 3}, {1024, 100, 100, 5, 3}, {1024, 100, 100, 50, 3}})
    for (const int64_t backend : {0, 1})
      b->Args({backend, s[0], s[1], s[2], s[3], s[4]});
}

// ---- Small models: pykan's toy --------------------------------------------------------------
// KAN [2, 5, 1], G = 3, k = 3, float64 on pykan's toy function exp(sin(pi x1) + x2^2), 1000
// training samples, lamb 0.001: tools/peer-compare.py's toy workload. A small model's time is
// dispatch and bookkeeping, not arithmetic, so these count what a step is made of.

struct ToyCase {
  Dataset data = [] {
    const auto& f = reference_function("toy");
    return create_dataset(
        f.f, DatasetOptions(f.n_var).train_num(1000).test_num(1000).dtype(torch::kFloat64));
  }();
  static KAN model() {
    return KAN(KANOptions({2, 5, 1}).grid(3).k(3).seed(0).dtype(torch::kFloat64));
  }
  static FitOptions options(int64_t steps) { return FitOptions().steps(steps).lamb(0.001); }
};

// One evaluation of LBFGS's objective as kan::fit makes it: forward on the training set, MSE plus
// 0.001 times the regulariser, backward (what each of an LBFGS step's many closure calls does).
// Arg `path`: 0 layer by layer through autograd, 1 the whole-network node through autograd, 2
// without autograd (KANImpl::mse_objective, what kan::fit runs; the default).
struct ToyObjective {
  const ToyCase& toy;
  int64_t path;
  KAN model = ToyCase::model();

  ToyObjective(const ToyCase& c, int64_t p) : toy(c), path(p) {
    model->set_save_statistics(true);
    model->set_whole_network_node(path != 0);
  }
  torch::Tensor operator()() {
    model->zero_grad();
    if (path == 2)
      return model->mse_objective(toy.data.train_input, toy.data.train_label, 0.001, {})->total;
    const auto out = model(toy.data.train_input);
    const auto loss =
        compute_loss(Loss::kMSE, out, toy.data.train_label) + 0.001 * model->regularization();
    loss.backward();
    return loss;
  }
};

void set_path_label(benchmark::State& state) {
  const char* paths[] = {"layer by layer", "whole-network node", "without autograd"};
  state.SetLabel(paths[state.range(0)]);
}

void BM_ToyEvaluation(benchmark::State& state) {
  const ToyCase toy;
  ToyObjective evaluate(toy, state.range(0));
  evaluate();
  {
    diagnostics::OperationTrace trace(torch::kCPU);
    trace.start();
    evaluate();
    trace.stop();
    state.counters["ops_per_evaluation"] = static_cast<double>(trace.report().summary.operations);
  }
  for (auto _ : state)
    evaluate();
  state.counters["evaluations/s"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  set_path_label(state);
}

// One step of pykan's LBFGS (history 10, strong Wolfe, up to 20 iterations) on the toy from its
// initial parameters each time: the optimiser's own work around its evaluations. Arg `path` as
// above.
void BM_ToyLbfgsStep(benchmark::State& state) {
  const ToyCase toy;
  ToyObjective evaluate(toy, state.range(0));
  const auto initial = ToyCase::model();
  int64_t evaluations = 0;
  for (auto _ : state) {
    state.PauseTiming();
    {
      torch::NoGradGuard no_grad;
      const auto from = initial->parameters();
      auto to = evaluate.model->parameters();
      for (size_t p = 0; p < to.size(); ++p)
        to[p].copy_(from[p]);
    }
    LBFGS lbfgs(evaluate.model->parameters(),
                LBFGSOptions(1).history_size(10).line_search_fn("strong_wolfe"));
    state.ResumeTiming();
    lbfgs.step([&] {
      ++evaluations;
      return evaluate();
    });
  }
  state.counters["evaluations/s"] =
      benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
  set_path_label(state);
}

// pykan's toy training loop: 50 LBFGS steps of kan::fit from a new model, grid updates at fit's
// defaults. evaluations/s counts the objective evaluations the steps took.
void BM_ToyFit(benchmark::State& state) {
  const ToyCase toy;
  const int64_t steps = state.range(0);
  int64_t evaluations = 0;
  auto warm_up = ToyCase::model();
  fit(warm_up, toy.data, ToyCase::options(1));
  for (auto _ : state) {
    state.PauseTiming();
    auto model = ToyCase::model();
    state.ResumeTiming();
    for (const auto& step : fit(model, toy.data, ToyCase::options(steps)).steps)
      evaluations += step.evaluations;
  }
  state.counters["evaluations/s"] =
      benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsIterationInvariantRate);
}

// One grid update of the toy from its 1000 training samples, as kan::fit makes every tenth step
// of the first 50: each layer's new knots from its inputs' quantiles and its splines refitted.
void BM_ToyGridUpdate(benchmark::State& state) {
  const ToyCase toy;
  auto model = ToyCase::model();
  model->update_grid_from_samples(toy.data.train_input);
  for (auto _ : state)
    model->update_grid_from_samples(toy.data.train_input);
}

// ---- The `deep` workload's training epoch ---------------------------------------------------
// KAN [4, 100, 100, 100, 1] on exp_sin4, Adam (lr 1e-3), batch 100 over 1000 training samples:
// one epoch = 10 steps of kan::fit (each step also evaluates the 1000 test samples). Arg: backend.

void BM_DeepEpoch(benchmark::State& state) {
  const auto& f = reference_function("exp_sin4");
  const auto data = create_dataset(f.f, DatasetOptions(f.n_var).train_num(1000).test_num(1000));
  KAN model(
      KANOptions({4, 100, 100, 100, 1}).grid(3).k(3).seed(0).backend(backend_arg(state.range(0))));
  const auto options =
      FitOptions().opt(Optimizer::kAdam).lr(1e-3).batch(100).steps(10).update_grid(false);
  fit(model, data, FitOptions(options).steps(1)); // warm-up
  for (auto _ : state)
    fit(model, data, options);
  state.counters["epochs/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(to_string(backend_arg(state.range(0))));
}

// One evaluation of the objective of the accuracy preset's MLPs ([2, w, w, 1], SiLU, float64)
// on the toy's 1000 samples: forward, MSE, backward. Arg `path`: 0 through autograd, 1 without
// (MLPImpl::mse_objective, what kan::fit runs on the CPU); arg `width`: w.
void BM_MlpEvaluation(benchmark::State& state) {
  const ToyCase toy;
  const bool without_autograd = state.range(0) == 1;
  const int64_t w = state.range(1);
  MLP model(MLPOptions({2, w, w, 1}).seed(0).dtype(torch::kFloat64));
  const auto evaluate = [&] {
    model->zero_grad();
    if (without_autograd)
      return model->mse_objective(toy.data.train_input, toy.data.train_label, 0.0, {})->total;
    const auto loss = compute_loss(Loss::kMSE, model(toy.data.train_input), toy.data.train_label);
    loss.backward();
    return loss;
  };
  evaluate();
  for (auto _ : state)
    evaluate();
  state.counters["evaluations/s"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(without_autograd ? "without autograd" : "autograd");
}

void register_families() {
  // The ctest smoke run filters on "/batch:256/" and BM_DeepEpoch with a tiny
  // --benchmark_min_time, so every family runs. CPU families use wall time: the work runs on
  // ATen's threads, which the main thread's CPU time misses.
  benchmark::RegisterBenchmark("BM_LayerForwardBackward", BM_LayerForwardBackward)
      ->Apply(layer_args)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_DenseEquivalentGemm", BM_DenseEquivalentGemm)
      ->Apply(gemm_args)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_LayerActivations", BM_LayerActivations)
      ->Apply(activation_args)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_ToyEvaluation", BM_ToyEvaluation)
      ->ArgName("path")
      ->DenseRange(0, 2)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_ToyLbfgsStep", BM_ToyLbfgsStep)
      ->ArgName("path")
      ->DenseRange(0, 2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_ToyFit", BM_ToyFit)
      ->ArgName("steps")
      ->Arg(1)
      ->Arg(50)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_ToyGridUpdate", BM_ToyGridUpdate)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_MlpEvaluation", BM_MlpEvaluation)
      ->ArgNames({"path", "width"})
      ->ArgsProduct({{0, 1}, {5, 100}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_DeepEpoch", BM_DeepEpoch)
      ->ArgName("backend")
      ->DenseRange(0, 1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  if (cuda_benchmarks_available()) {
    benchmark::RegisterBenchmark("BM_LayerForwardBackward_CUDA", BM_LayerForwardBackward_CUDA)
        ->Apply(layer_args)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_LayerActivations_CUDA", BM_LayerActivations_CUDA)
        ->Apply(activation_args)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_DenseEquivalentGemm_CUDA", BM_DenseEquivalentGemm_CUDA)
        ->Apply(gemm_args)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

} // namespace
} // namespace kan::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("cuda", kan::bench::cuda_benchmarks_available() ? "yes" : "no");
  kan::bench::register_families();
  kan::bench::register_training_families();
  kan::bench::register_symbolic_families();
  kan::bench::register_data_families();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
