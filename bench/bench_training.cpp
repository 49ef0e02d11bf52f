// bench_kan families of the training path: B-spline basis, layer forward, one optimiser step
// (LBFGS and Adam) of a whole KAN, and a grid update. CUDA variants time with CUDA events.
#include "bench_util.h"

#include "kan/bench/measure.h"
#include "kan/diagnostics/operation_trace.h"
#include "kan/kan.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <torch/optim/adam.h>
#include <torch/optim/lbfgs.h>

#include <memory>

namespace kan::bench {
namespace {

torch::Tensor uniform_inputs(int64_t n, int64_t inputs, torch::Device device,
                             torch::Dtype dtype = torch::kFloat32) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1);
  return (torch::rand({n, inputs}, generator, torch::kFloat64) * 2 - 1).to(device, dtype);
}

// samples/s only: these families do no dense-equivalent matrix work to count.
void set_sample_rate(benchmark::State& state, int64_t samples) {
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

// ---- B-spline basis: Args dtype (bits), N, I, G, k -----------------------------------------
void basis(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const auto dtype = dtype_arg(state.range(0));
  const int64_t N = state.range(1), I = state.range(2), G = state.range(3), k = state.range(4);
  const auto grid =
      uniform_grid(I, G, k, -1, 1, torch::TensorOptions().device(device).dtype(dtype));
  const auto x = uniform_inputs(N, I, device, dtype);
  run_timed(state, device, [&] { benchmark::DoNotOptimize(bspline_basis(x, grid, k)); });
  set_sample_rate(state, N);
}
void BM_BsplineBasis(benchmark::State& state) {
  basis(state, torch::kCPU);
}
void BM_BsplineBasis_CUDA(benchmark::State& state) {
  basis(state, torch::kCUDA);
}

// A layer family's arguments: dtype (bits) first, then N, I, O, G, k from range(first).
struct LayerShape {
  torch::Dtype dtype;
  int64_t N, I, O, G, k;
  KANLayerOptions options() const { return KANLayerOptions(I, O).grid(G).k(k).dtype(dtype); }
};

LayerShape layer_shape(const benchmark::State& state, int first) {
  return {dtype_arg(state.range(0)), state.range(first),     state.range(first + 1),
          state.range(first + 2),    state.range(first + 3), state.range(first + 4)};
}

// ---- Layer forward: Args dtype (bits), backend, N, I, O, G, k ------------------------------
void layer_forward(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const auto shape = layer_shape(state, 2);
  KANLayer layer(shape.options().backend(backend_arg(state.range(1))));
  layer->to(device);
  const auto x = uniform_inputs(shape.N, shape.I, device, shape.dtype);
  torch::NoGradGuard no_grad;
  run_timed(state, device, [&] { benchmark::DoNotOptimize(layer(x)); });
  set_rate_counters(state, shape.N,
                    layer_forward_flops(shape.N, shape.I, shape.O, shape.G, shape.k));
  state.SetLabel(to_string(backend_arg(state.range(1))));
}
void BM_LayerForward(benchmark::State& state) {
  layer_forward(state, torch::kCPU);
}
void BM_LayerForward_CUDA(benchmark::State& state) {
  layer_forward(state, torch::kCUDA);
}

// ---- A regularised layer's forward and backward, through its output and the regulariser's
// per-edge sums (kan::detail::fused_layer_with_moments on the CPU): Args dtype (bits), N, I, O,
// G, k ---------------------------------------------------------------------------------------
void layer_with_sums(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const auto shape = layer_shape(state, 1);
  KANLayer layer(shape.options());
  layer->to(device);
  const auto x = uniform_inputs(shape.N, shape.I, device, shape.dtype).requires_grad_(true);
  run_timed(state, device, [&] {
    const auto acts = layer->forward_with_statistics(x);
    (acts.output.sum() + acts.moments.sum()).backward();
  });
  set_sample_rate(state, shape.N);
}
void BM_LayerWithSums(benchmark::State& state) {
  layer_with_sums(state, torch::kCPU);
}
void BM_LayerWithSums_CUDA(benchmark::State& state) {
  layer_with_sums(state, torch::kCUDA);
}

// ---- One optimiser step of KAN [2,5,1] on the toy function: Args optimizer (0 LBFGS, 1 Adam),
// backend, N -----------------------------------------------------------------------------------
void train_step(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const bool adam = state.range(0) == 1;
  const int64_t N = state.range(2);
  KAN model(KANOptions({2, 5, 1}).backend(backend_arg(state.range(1))).device(device));
  const auto data = create_dataset(reference_function("toy").f,
                                   DatasetOptions(2).train_num(N).test_num(1).device(device));
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (adam)
    optimizer =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  else
    optimizer = std::make_unique<torch::optim::LBFGS>(
        model->parameters(),
        torch::optim::LBFGSOptions(1).history_size(10).line_search_fn("strong_wolfe"));
  auto closure = [&] {
    optimizer->zero_grad();
    auto loss = compute_loss(Loss::kMSE, model(data.train_input), data.train_label);
    loss.backward();
    return loss;
  };
  run_timed(state, device, [&] {
    if (adam) {
      closure();
      optimizer->step();
    } else {
      optimizer->step(closure);
    }
  });
  set_sample_rate(state, N);
  state.SetLabel(kan::to_string(adam ? kan::Optimizer::kAdam : kan::Optimizer::kLBFGS) + " " +
                 to_string(backend_arg(state.range(1))));
}
void BM_TrainStep(benchmark::State& state) {
  train_step(state, torch::kCPU);
}
void BM_TrainStep_CUDA(benchmark::State& state) {
  train_step(state, torch::kCUDA);
}

// ---- A regularised Adam step of pykan's device-tutorial model [4, 100, 100, 100, 1]: Args
// backend, regularised (lamb 0.001, entropy weight 5, or none), N ------------------------------
// What fit does each step: the fused backend keeps the regulariser's per-edge sums, the
// reference one every activation.
void regularised_step(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const auto backend = backend_arg(state.range(0));
  const bool regularised = state.range(1) == 1;
  const int64_t N = state.range(2);
  KAN model(KANOptions({4, 100, 100, 100, 1}).backend(backend).device(device));
  const auto data = create_dataset(reference_function("exp_sin4").f,
                                   DatasetOptions(4).train_num(N).test_num(1).device(device));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  model->set_save_activations(regularised && backend == SplineBackend::kReference);
  model->set_save_statistics(regularised && backend == SplineBackend::kFused);
  const auto weights = RegularizationOptions().lamb_entropy(5);
  const auto step = [&] {
    optimizer.zero_grad();
    auto loss = compute_loss(Loss::kMSE, model(data.train_input), data.train_label);
    if (regularised)
      loss = loss + 0.001 * model->regularization(weights);
    loss.backward();
    optimizer.step();
  };
  {
    // The first step's peak memory above the model and data (Adam's state included).
    const PeakMemory memory(device);
    step();
    if (const auto bytes = memory.bytes())
      state.counters["peak_extra_MiB"] = static_cast<double>(*bytes) / (1 << 20);
  }
  run_timed(state, device, step);
  set_sample_rate(state, N);
  state.SetLabel(to_string(backend) + (regularised ? " regularised" : " unregularised"));
}
void BM_RegularisedStep(benchmark::State& state) {
  regularised_step(state, torch::kCPU);
}
void BM_RegularisedStep_CUDA(benchmark::State& state) {
  regularised_step(state, torch::kCUDA);
}

// ---- Steps of kan::fit, as the peer comparison (tools/peer-compare.py) trains: Args case (0:
// the toy fit, [2, 5, 1] G 3, LBFGS, float64; 1: the device tutorial's [4, 100, 100, 100, 1],
// Adam, float32), regularised (lamb 0.001, pykan's entropy weight 2 for the toy and 5 for the
// tutorial, or none); 1000 samples, full batch, no grid updates. Counters: steps/s, and the ATen
// operations of one step (from the operation trace of two steps): for small models their
// per-operation cost, not arithmetic, is the time.
void fit_steps(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const bool deep = state.range(0) == 1, regularised = state.range(1) == 1;
  const auto dtype = deep ? torch::kFloat32 : torch::kFloat64;
  KAN model(deep ? KANOptions({4, 100, 100, 100, 1}).dtype(dtype).device(device)
                 : KANOptions({2, 5, 1}).grid(3).dtype(dtype).device(device));
  const auto& f = reference_function(deep ? "exp_sin4" : "toy");
  const auto data = create_dataset(
      f.f, DatasetOptions(f.n_var).train_num(1000).test_num(1000).dtype(dtype).device(device));
  auto options = FitOptions()
                     .opt(deep ? Optimizer::kAdam : Optimizer::kLBFGS)
                     .lr(deep ? 1e-3 : 1.0)
                     .lamb(regularised ? 0.001 : 0.0)
                     .lamb_entropy(deep ? 5.0 : 2.0)
                     .update_grid(false);
  fit(model, data, options.steps(2)); // warm up
  {
    diagnostics::OperationTrace trace(device);
    trace.start();
    fit(model, data, options.steps(2));
    trace.stop();
    state.counters["ops_per_step"] = static_cast<double>(trace.report().summary.operations) / 2;
  }
  constexpr int64_t kSteps = 5;
  run_timed(state, device, [&] { fit(model, data, options.steps(kSteps)); });
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(kSteps),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(deep ? "deep adam" : "toy lbfgs") +
                 (regularised ? " regularised" : " unregularised"));
}
void BM_FitSteps(benchmark::State& state) {
  fit_steps(state, torch::kCPU);
}
void BM_FitSteps_CUDA(benchmark::State& state) {
  fit_steps(state, torch::kCUDA);
}

// ---- Grid update of a [I, 5, 1] KAN from N samples: Args N, I, G ----------------------------
void grid_update(benchmark::State& state, torch::Device device) {
  if (skip_without_gpu(state, device))
    return;
  const int64_t N = state.range(0), I = state.range(1), G = state.range(2);
  KAN model(KANOptions({I, 5, 1}).grid(G).device(device));
  const auto x = uniform_inputs(N, I, device);
  run_timed(state, device, [&] { model->update_grid_from_samples(x); });
  set_sample_rate(state, N);
}
void BM_GridUpdate(benchmark::State& state) {
  grid_update(state, torch::kCPU);
}
void BM_GridUpdate_CUDA(benchmark::State& state) {
  grid_update(state, torch::kCUDA);
}

} // namespace

void register_training_families() {
  const bool gpu = cuda_benchmarks_available();
  for (const bool cuda : {false, true}) {
    if (cuda && !gpu)
      continue;
    register_on(cuda, cuda ? "BM_BsplineBasis_CUDA" : "BM_BsplineBasis",
                cuda ? BM_BsplineBasis_CUDA : BM_BsplineBasis, {"dtype", "batch", "in", "G", "k"},
                {{32, 256, 2, 5, 3},
                 {64, 256, 2, 5, 3},
                 {32, 4096, 100, 5, 3},
                 {64, 4096, 100, 5, 3},
                 {32, 4096, 100, 50, 3}});
    register_on(cuda, cuda ? "BM_LayerForward_CUDA" : "BM_LayerForward",
                cuda ? BM_LayerForward_CUDA : BM_LayerForward,
                {"dtype", "backend", "batch", "in", "out", "G", "k"},
                {{32, 0, 256, 2, 5, 5, 3},
                 {32, 1, 256, 2, 5, 5, 3},
                 {64, 0, 256, 2, 5, 5, 3},
                 {64, 1, 256, 2, 5, 5, 3},
                 {32, 0, 4096, 100, 100, 5, 3},
                 {32, 1, 4096, 100, 100, 5, 3},
                 {64, 1, 4096, 100, 100, 5, 3},
                 {32, 0, 4096, 100, 100, 50, 3},
                 {32, 1, 4096, 100, 100, 50, 3}});
    register_on(cuda, cuda ? "BM_LayerWithSums_CUDA" : "BM_LayerWithSums",
                cuda ? BM_LayerWithSums_CUDA : BM_LayerWithSums,
                {"dtype", "batch", "in", "out", "G", "k"},
                {{64, 1000, 2, 5, 3, 3},
                 {64, 1000, 5, 1, 3, 3},
                 {32, 1000, 2, 5, 3, 3},
                 {64, 1000, 8, 8, 5, 3},
                 {64, 1000, 16, 16, 5, 3},
                 {64, 1000, 32, 32, 5, 3},
                 {64, 1000, 100, 100, 5, 3},
                 {32, 1000, 100, 100, 5, 3}});
    register_on(cuda, cuda ? "BM_TrainStep_CUDA" : "BM_TrainStep",
                cuda ? BM_TrainStep_CUDA : BM_TrainStep, {"opt", "backend", "batch"},
                {{0, 0, 256}, {0, 1, 256}, {1, 0, 256}, {1, 1, 256}, {0, 1, 1000}, {1, 1, 1000}});
    register_on(cuda, cuda ? "BM_RegularisedStep_CUDA" : "BM_RegularisedStep",
                cuda ? BM_RegularisedStep_CUDA : BM_RegularisedStep,
                {"backend", "regularised", "batch"},
                {{1, 0, 1000}, {1, 1, 1000}, {0, 1, 1000}, {1, 0, 65536}, {1, 1, 65536}});
    register_on(cuda, cuda ? "BM_FitSteps_CUDA" : "BM_FitSteps",
                cuda ? BM_FitSteps_CUDA : BM_FitSteps, {"case", "regularised"},
                {{0, 0}, {0, 1}, {1, 0}, {1, 1}});
    register_on(cuda, cuda ? "BM_GridUpdate_CUDA" : "BM_GridUpdate",
                cuda ? BM_GridUpdate_CUDA : BM_GridUpdate, {"batch", "in", "G"},
                {{256, 2, 5}, {1000, 2, 5}, {4096, 100, 5}});
  }
}

} // namespace kan::bench
