// The fused spline backend against the reference one: outputs and every gradient, edge cases,
// memory that does not grow with the grid, and the option's plumbing.
#include "kan/bench/measure.h"
#include "kan/nn/layer.h"
#include "kan/nn/network.h"
#include "kan/serialize/checkpoint.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <cmath>
#include <string>

namespace kan {
namespace {

using test::max_abs_diff;

enum class Knots { kUniform, kUpdated };

// max |a - b| / max |b|: the criterion for float32 results.
double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return max_abs_diff(a, b) / std::max(scale, 1e-30);
}

struct Result {
  torch::Tensor y, grad_x, grad_coef, grad_scale_base, grad_scale_sp;
};

Result run(KANLayer& layer, const torch::Tensor& x_in, const torch::Tensor& grad_y) {
  layer->zero_grad();
  auto x = x_in.clone().requires_grad_(true);
  auto y = layer(x);
  y.backward(grad_y);
  return {y.detach(), x.grad(), layer->coef.grad(), layer->scale_base.grad(),
          layer->scale_sp.grad()};
}

// Gives `to` the parameters and buffers of `from`.
void copy_state(const KANLayer& from, KANLayer& to) {
  torch::NoGradGuard no_grad;
  for (const auto& p : from->named_parameters())
    to->named_parameters()[p.key()].copy_(p.value());
  for (const auto& b : from->named_buffers())
    to->named_buffers()[b.key()].copy_(b.value());
}

// A reference layer and a fused layer with the same state.
std::pair<KANLayer, KANLayer> layer_pair(KANLayerOptions options) {
  KANLayer reference(KANLayerOptions(options).backend(SplineBackend::kReference));
  KANLayer fused(KANLayerOptions(options).backend(SplineBackend::kFused));
  copy_state(reference, fused);
  return {reference, fused};
}

torch::Tensor skewed_samples(int64_t in_dim, torch::Dtype dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto u = torch::rand({256, in_dim}, gen, torch::kFloat64);
  return (u.pow(3) * 2 - 1).to(dtype); // crowded towards -1
}

// Moves both layers' knots to skewed, non-uniform positions by the reference's grid update (the
// backends' own updates differ by rounding, which an ill-conditioned refit amplifies).
void update_grids(KANLayer& reference, KANLayer& fused, int64_t in_dim, torch::Dtype dtype) {
  reference->update_grid_from_samples(skewed_samples(in_dim, dtype));
  copy_state(reference, fused);
}

// Points inside every knot span, on every knot, outside the extended grid on both sides (the
// last knot itself is outside: order 0 is half-open), then `random` more in and around the grid.
torch::Tensor probe_points(const torch::Tensor& grid, int64_t random, uint64_t seed) {
  const auto g = grid.to(torch::kFloat64).t(); // (P, I)
  const auto lo = g.narrow(0, 0, 1), hi = g.narrow(0, -1, 1), width = hi - lo;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto u = torch::rand({random, grid.size(0)}, gen, torch::kFloat64).to(grid.device());
  const auto mids = (g.narrow(0, 0, g.size(0) - 1) + g.narrow(0, 1, g.size(0) - 1)) / 2;
  return torch::cat({g, mids, lo - 0.5 * width, lo - 1e-3 * width, hi + 1e-3 * width,
                     hi + 0.5 * width, lo + (1.4 * u - 0.2) * width})
      .to(grid.scalar_type());
}

// N points uniformly inside each input's grid proper, [t_k, t_{P-1-k}) of its P knots.
torch::Tensor interior_points(const torch::Tensor& grid, int64_t k, int64_t N, uint64_t seed) {
  const auto g = grid.to(torch::kFloat64).t(); // (P, I)
  const auto lo = g.narrow(0, k, 1), hi = g.narrow(0, g.size(0) - 1 - k, 1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto u = torch::rand({N, grid.size(0)}, gen, torch::kFloat64) * 0.999;
  return (lo + u * (hi - lo)).to(grid.scalar_type());
}

// Compares every output of the two backends (float64: max abs diff, relative to the largest
// value where that exceeds 1; float32: max rel diff). The knots of an updated grid make large
// coefficients and gradients (a refit of skewed samples at k = 5), whose rounding depends on the
// BLAS path (1.02e-10 absolute in grad x at G 10, k 5 with MKL_CBWR=COMPATIBLE).
void expect_match(KANLayer& reference, KANLayer& fused, const torch::Tensor& x, double tol,
                  const std::string& what) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto grad_y =
      torch::randn({x.size(0), reference->options().out_dim()}, gen, torch::kFloat64)
          .to(x.device(), x.scalar_type());
  const auto r = run(reference, x, grad_y);
  const auto f = run(fused, x, grad_y);
  const bool f64 = x.scalar_type() == torch::kFloat64;
  auto diff = [&](const torch::Tensor& a, const torch::Tensor& b) {
    if (a.numel() == 0)
      return 0.0;
    return f64 ? max_abs_diff(a, b) / std::max(1.0, b.abs().max().item<double>())
               : max_rel_diff(a, b);
  };
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> outputs[] = {
      {"y", {f.y, r.y}},
      {"grad x", {f.grad_x, r.grad_x}},
      {"grad coef", {f.grad_coef, r.grad_coef}},
      {"grad scale_base", {f.grad_scale_base, r.grad_scale_base}},
      {"grad scale_sp", {f.grad_scale_sp, r.grad_scale_sp}}};
  for (const auto& [name, pair] : outputs) {
    ASSERT_TRUE(pair.first.defined() && pair.second.defined()) << what << ": " << name;
    ASSERT_EQ(pair.first.sizes(), pair.second.sizes()) << what << ": " << name;
    EXPECT_LE(diff(pair.first, pair.second), tol) << what << ": " << name;
  }
}

void check_grids_and_orders(torch::Dtype dtype, double tol) {
  for (const int64_t G : {1, 3, 5, 10, 100}) {
    for (const int64_t k : {1, 2, 3, 5}) {
      for (const auto knots : {Knots::kUniform, Knots::kUpdated}) {
        const std::string what = "G=" + std::to_string(G) + " k=" + std::to_string(k) +
                                 (knots == Knots::kUniform ? " uniform" : " updated");
        auto [reference, fused] =
            layer_pair(KANLayerOptions(3, 4).grid(G).k(k).seed(G * 10 + k).dtype(dtype));
        if (knots == Knots::kUpdated)
          update_grids(reference, fused, 3, dtype);
        const auto x = probe_points(reference->grid, 64, G + k);
        expect_match(reference, fused, x, tol, what);
      }
    }
  }
}

TEST(FusedBackend, MatchesReferenceFloat64) {
  check_grids_and_orders(torch::kFloat64, 1e-10);
}

TEST(FusedBackend, MatchesReferenceFloat32) {
  check_grids_and_orders(torch::kFloat32, 1e-5);
}

// A layer's edge splines at x and the gradients of x and coef for `grad` (N, I, O).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>
run_edges(KANLayer& layer, const torch::Tensor& x, const torch::Tensor& grad) {
  layer->zero_grad();
  auto xx = x.clone().requires_grad_(true);
  const auto spline = layer->edge_splines(xx);
  spline.backward(grad);
  return {spline.detach(), xx.grad(), layer->coef.grad()};
}

// The per-edge splines (forward_with_activations, grid updates) of both backends: values and
// the gradients of x and coef, with the tolerances of expect_match.
void expect_edges_match(KANLayer& reference, KANLayer& fused, const torch::Tensor& x, double tol,
                        const std::string& what) {
  const auto& o = reference->options();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
  const auto grad = torch::randn({x.size(0), o.in_dim(), o.out_dim()}, gen, torch::kFloat64)
                        .to(x.device(), x.scalar_type());
  const auto [r_spline, r_gx, r_gc] = run_edges(reference, x, grad);
  const auto [f_spline, f_gx, f_gc] = run_edges(fused, x, grad);
  const bool f64 = x.scalar_type() == torch::kFloat64;
  auto diff = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return a.numel() == 0 ? 0.0 : f64 ? max_abs_diff(a, b) : max_rel_diff(a, b);
  };
  ASSERT_EQ(f_spline.sizes(), r_spline.sizes()) << what;
  EXPECT_LE(diff(f_spline, r_spline), tol) << what << ": spline";
  EXPECT_LE(diff(f_gx, r_gx), tol) << what << ": grad x";
  EXPECT_LE(diff(f_gc, r_gc), tol) << what << ": grad coef";
  // forward_with_activations agrees with forward on the fused layer.
  const auto acts = fused->forward_with_activations(x);
  EXPECT_LE(diff(acts.output, fused->forward(x)), tol) << what << ": activations' output";
}

void check_edges(torch::Device device) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    for (const int64_t G : {1, 5, 100}) {
      for (const int64_t k : {1, 3, 5}) {
        auto [reference, fused] =
            layer_pair(KANLayerOptions(3, 4).grid(G).k(k).seed(G + k).dtype(dtype));
        update_grids(reference, fused, 3, dtype);
        reference->to(device);
        fused->to(device);
        const std::string what = device.str() + " G=" + std::to_string(G) +
                                 " k=" + std::to_string(k) + " " +
                                 std::string(c10::toString(dtype));
        expect_edges_match(reference, fused, probe_points(reference->grid, 64, G), tol, what);
        for (const int64_t N : {0, 1, 4096}) {
          auto gen = at::make_generator<at::CPUGeneratorImpl>(N);
          const auto x = (torch::rand({N, 3}, gen, torch::kFloat64) * 2.4 - 1.2).to(device, dtype);
          expect_edges_match(reference, fused, x, tol, what + " N=" + std::to_string(N));
        }
      }
    }
  }
}

TEST(FusedBackend, EdgeSplinesMatchReference) {
  check_edges(torch::kCPU);
}

TEST(FusedBackend, GridUpdatesOfBothBackendsAgree) {
  // The knots come from the samples alone; the refit's splines differ by rounding only, which
  // its least squares may amplify (k = 3 is well posed).
  for (const int64_t G : {5, 50}) {
    auto [reference, fused] = layer_pair(KANLayerOptions(3, 4).grid(G).k(3).dtype(torch::kFloat64));
    const auto samples = skewed_samples(3, torch::kFloat64);
    reference->update_grid_from_samples(samples);
    fused->update_grid_from_samples(samples);
    EXPECT_LE(max_abs_diff(fused->coef, reference->coef), 1e-9) << "G=" << G;
  }
}

TEST(FusedBackend, BatchSizes) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    for (const int64_t G : {5, 100}) {
      auto [reference, fused] = layer_pair(KANLayerOptions(5, 6).grid(G).k(3).dtype(dtype));
      update_grids(reference, fused, 5, dtype);
      for (const int64_t N : {0, 1, 7, 4096}) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(N);
        const auto x = (torch::rand({N, 5}, gen, torch::kFloat64) * 2.4 - 1.2).to(dtype);
        expect_match(reference, fused, x, tol,
                     "G=" + std::to_string(G) + " N=" + std::to_string(N) + " " +
                         std::string(c10::toString(dtype)));
      }
    }
  }
}

TEST(FusedBackend, BackwardInSlicesThatDoNotDivideTheBatch) {
  // With more threads than inputs the CPU backward cuts the samples into slices, each with its own
  // grad_weight; 7 threads and 5 inputs make 3 slices of 4096 samples (1366, 1366, 1364). The
  // CudaThreadsOnCpu run checks the CUDA grad_weight kernel's slices through this too.
  struct Threads { // restores the thread count however the test ends
    int saved = at::get_num_threads();
    ~Threads() { at::set_num_threads(saved); }
  } restore;
  at::set_num_threads(7);
  ASSERT_EQ(at::get_num_threads(), 7);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto [reference, fused] = layer_pair(KANLayerOptions(5, 6).grid(10).k(3).dtype(dtype));
    update_grids(reference, fused, 5, dtype);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const auto x = (torch::rand({4096, 5}, gen, torch::kFloat64) * 2.4 - 1.2).to(dtype);
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    const auto what = "7 threads " + std::string(c10::toString(dtype));
    expect_match(reference, fused, x, tol, what);
    expect_edges_match(reference, fused, x, tol, what + " edges");
  }
}

// Shapes that make the CUDA block kernels (run on the CPU by the CudaBlocksOnCpu test) cut their
// work every way: one output and seven inputs (the inputs in four chunks), 40 outputs (two strides
// of a warp's lanes per pair), 300 outputs (two tiles of 256 outputs, and with 16 sample slices
// one slice a block for grad_weight), an order 5 spline in float32.
void check_every_shape(torch::Device device) {
  struct Shape {
    int64_t in, out, k;
    torch::Dtype dtype;
  };
  for (const auto& shape : {Shape{7, 1, 3, torch::kFloat64}, Shape{3, 40, 3, torch::kFloat64},
                            Shape{2, 300, 3, torch::kFloat64}, Shape{3, 40, 5, torch::kFloat32}}) {
    auto [reference, fused] = layer_pair(
        KANLayerOptions(shape.in, shape.out).grid(6).k(shape.k).seed(shape.out).dtype(shape.dtype));
    reference->to(device);
    fused->to(device);
    const auto x = probe_points(reference->grid, 1000, shape.out);
    const double tol = shape.dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    const auto what = std::to_string(shape.in) + " -> " + std::to_string(shape.out);
    expect_match(reference, fused, x, tol, what);
    expect_edges_match(reference, fused, x, tol, what + " edges");
  }
}

TEST(FusedBackend, LayersOfEveryShapeTileAlike) {
  check_every_shape(torch::kCPU);
}

TEST(FusedBackend, LargeLayersMatchTheReference) {
  // Past the one-node threshold (N I O > 2^20) the spline part runs alone (fused_spline): its
  // forward holds rows of up to 112 outputs in registers across groups of inputs, its backward
  // groups each block's points by knot span, and both take the general path at points outside
  // the grid and near its ends. 130 outputs: a full and a partial group, whose last vector is
  // partial; 9 inputs: a full and a partial input group; N: blocks of samples and a partial last
  // one.
  for (const auto dtype : {torch::kFloat32, torch::kFloat64})
    for (const int64_t k : {1, 2, 3}) {
      auto [reference, fused] =
          layer_pair(KANLayerOptions(9, 130).grid(5).k(k).seed(7).dtype(dtype));
      const auto x = probe_points(reference->grid, 1000, 3);
      ASSERT_GT(x.size(0) * 9 * 130, int64_t{1} << 20);
      const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
      const std::string what = "9 -> 130, k " + std::to_string(k) + ", " + to_string(dtype);
      expect_match(reference, fused, x, tol, what);
    }
  // Where every point of a block lies inside the grid proper, the basis is computed from each
  // point's span alone (lane_local_basis, k = 3), its knots picked from one register (G 5) or
  // two (G 10, float32; float64's 17 knots take the whole-row recursion): on uniform and on
  // grid-updated knots.
  for (const auto dtype : {torch::kFloat32, torch::kFloat64})
    for (const int64_t G : {5, 10}) {
      auto [reference, fused] =
          layer_pair(KANLayerOptions(9, 130).grid(G).k(3).seed(G).dtype(dtype));
      const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
      const std::string what = "9 -> 130, G " + std::to_string(G) + ", " + to_string(dtype);
      expect_match(reference, fused, interior_points(reference->grid, 3, 1000, 5), tol,
                   what + ", inside the grid");
      update_grids(reference, fused, 9, dtype);
      expect_match(reference, fused, interior_points(reference->grid, 3, 1000, 6), tol,
                   what + ", inside an updated grid");
    }
}

TEST(FusedBackend, InputsWithoutGradientSkipIt) {
  // A first layer's data needs no gradient: the backward leaves grad_x out and must still give
  // coef the reference's gradient, in the layer and in the per-edge splines.
  auto [reference, fused] = layer_pair(KANLayerOptions(4, 3).grid(7).k(3).dtype(torch::kFloat64));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto x = torch::rand({600, 4}, gen, torch::kFloat64) * 2 - 1; // no requires_grad
  for (auto* layer : {&reference, &fused}) {
    (*layer)->zero_grad();
    ((*layer)(x).square().sum() + (*layer)->edge_splines(x).sin().sum()).backward();
  }
  EXPECT_FALSE(x.grad().defined());
  EXPECT_LE(max_abs_diff(fused->coef.grad(), reference->coef.grad()), 1e-10);
}

// Coinciding knots make zero denominators (knot_reciprocals' zeros), which must contribute 0
// (never NaN) in both backends.
void check_repeated_knots(torch::Device device) {
  auto [reference, fused] = layer_pair(KANLayerOptions(2, 3).grid(6).k(3).dtype(torch::kFloat64));
  const auto row = torch::tensor(
      {-2.0, -1.5, -1.0, -1.0, -0.5, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0}, torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    reference->grid.copy_(row.expand({2, -1}));
    fused->grid.copy_(row.expand({2, -1}));
  }
  const auto x = probe_points(reference->grid, 64, 3).to(device);
  reference->to(device);
  fused->to(device);
  expect_match(reference, fused, x, 1e-10, "repeated knots");
  EXPECT_FALSE(
      run(fused, x, torch::ones({x.size(0), 3}, x.options())).y.isnan().any().item<bool>());
}

TEST(FusedBackend, RepeatedKnots) {
  check_repeated_knots(torch::kCPU);
}

TEST(FusedBackend, NonFiniteInputsGiveNaNLikeTheReference) {
  // The reference's recursion turns NaN and +-inf into NaN ((x - t) / d * 0); the fused path
  // must not hide them as "outside the grid".
  for (const double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    auto [reference, fused] = layer_pair(
        KANLayerOptions(3, 2).grid(5).k(3).base_fun(BaseFunction::kZero).dtype(torch::kFloat64));
    auto x = torch::rand({4, 3}, torch::kFloat64) * 2 - 1;
    x[1][2] = bad;
    const auto grad_y = torch::ones({4, 2}, torch::kFloat64);
    const auto r = run(reference, x, grad_y), f = run(fused, x, grad_y);
    EXPECT_TRUE(torch::equal(f.y.isnan(), r.y.isnan())) << bad << "\n" << f.y << r.y;
    EXPECT_TRUE(torch::equal(f.grad_x.isnan(), r.grad_x.isnan())) << bad;
    EXPECT_TRUE(torch::equal(f.grad_coef.isnan(), r.grad_coef.isnan())) << bad;
    EXPECT_TRUE(f.y[0].isfinite().all().item<bool>());
    const auto grad = torch::ones({4, 3, 2}, torch::kFloat64);
    const auto [r_spline, r_gx, r_gc] = run_edges(reference, x, grad);
    const auto [f_spline, f_gx, f_gc] = run_edges(fused, x, grad);
    EXPECT_TRUE(torch::equal(f_spline.isnan(), r_spline.isnan())) << bad;
    EXPECT_TRUE(torch::equal(f_gx.isnan(), r_gx.isnan())) << bad;
    EXPECT_TRUE(torch::equal(f_gc.isnan(), r_gc.isnan())) << bad;
  }
}

TEST(FusedBackend, PrunedEdgesAndFrozenScales) {
  auto [reference, fused] =
      layer_pair(KANLayerOptions(4, 3).grid(7).k(2).sb_trainable(false).dtype(torch::kFloat64));
  {
    torch::NoGradGuard no_grad;
    reference->mask[1][2] = 0;
    fused->mask[1][2] = 0;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto x = torch::rand({33, 4}, gen, torch::kFloat64) * 2 - 1;
  const auto grad_y = torch::ones({33, 3}, torch::kFloat64);
  const auto r = run(reference, x, grad_y), f = run(fused, x, grad_y);
  EXPECT_LE(max_abs_diff(f.y, r.y), 1e-12);
  EXPECT_LE(max_abs_diff(f.grad_coef, r.grad_coef), 1e-12);
  EXPECT_FALSE(f.grad_scale_base.defined());
}

TEST(FusedBackend, DoubleBackwardIsAClearError) {
  KANLayer layer(KANLayerOptions(2, 2).dtype(torch::kFloat64));
  auto x = torch::rand({5, 2}, torch::kFloat64).requires_grad_(true);
  auto y = layer(x).sum();
  KAN_EXPECT_ERROR(torch::autograd::grad({y}, {x}, {}, true, /*create_graph=*/true),
                   "double backward", "backend reference");
}

TEST(FusedBackend, DefaultAndPlumbing) {
  EXPECT_EQ(KANLayerOptions(2, 3).backend(), SplineBackend::kFused);
  EXPECT_EQ(KANOptions({2, 3}).backend(), SplineBackend::kFused);
  EXPECT_EQ(spline_backend_from_string("reference"), SplineBackend::kReference);
  EXPECT_EQ(to_string(SplineBackend::kFused), "fused");
  KAN_EXPECT_ERROR(spline_backend_from_string("fast"), "backend", "fast");

  const auto options = KANOptions({2, 3, 1}).backend(SplineBackend::kReference);
  KAN model(options);
  EXPECT_EQ(model->layer(1)->options().backend(), SplineBackend::kReference);
  const auto json = to_json(options);
  EXPECT_EQ(json.at("backend"), "reference");
  EXPECT_EQ(kan_options_from_json(json).backend(), SplineBackend::kReference);
  // A configuration written before the option existed reads as the default.
  auto old = json;
  old.erase("backend");
  EXPECT_EQ(kan_options_from_json(old).backend(), SplineBackend::kFused);
}

TEST(FusedBackend, NetworkTrainsLikeReference) {
  // A network's loss and every parameter's gradient agree between the backends.
  auto options = KANOptions({2, 5, 1}).grid(5).seed(3).dtype(torch::kFloat64);
  KAN reference(KANOptions(options).backend(SplineBackend::kReference));
  KAN fused(KANOptions(options).backend(SplineBackend::kFused));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto x = torch::rand({200, 2}, gen, torch::kFloat64) * 2 - 1;
  const auto lr = reference(x).pow(2).mean(), lf = fused(x).pow(2).mean();
  lr.backward();
  lf.backward();
  EXPECT_LE(std::abs(lr.item<double>() - lf.item<double>()), 1e-12);
  const auto pr = reference->parameters(), pf = fused->parameters();
  ASSERT_EQ(pr.size(), pf.size());
  for (size_t i = 0; i < pr.size(); ++i) {
    if (pr[i].requires_grad()) {
      EXPECT_LE(max_abs_diff(pf[i].grad(), pr[i].grad()), 1e-12) << "parameter " << i;
    }
  }
}

TEST(FusedBackend, MemoryDoesNotGrowWithTheGrid) {
  // The reference basis tensor alone would be 65536 * 64 * 203 * 4 B = 3.4 GB at every level of
  // the recursion; the fused path must stay within 512 MB of extra peak resident memory.
  constexpr int64_t N = 65536, width = 64, G = 200;
  KANLayer layer(KANLayerOptions(width, width).grid(G).k(3).dtype(torch::kFloat32));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto x = (torch::rand({N, width}, gen, torch::kFloat32) * 2 - 1).requires_grad_(true);
  const auto grad_y = torch::ones({N, width}, torch::kFloat32);
  const kan::bench::PeakMemory memory(torch::kCPU);
  layer(x).backward(grad_y);
  const auto measured = memory.bytes();
  if (!measured)
    GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  const int64_t growth = *measured;
  RecordProperty("peak_rss_growth_bytes", std::to_string(growth));
  EXPECT_LT(growth, int64_t{512} << 20)
      << "peak resident memory grew by " << (growth >> 20) << " MiB";
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(layer->coef.grad().isfinite().all().item<bool>());
}

// ---- The regulariser from per-edge sums (save_statistics) against the activations ----

struct RegularisedStep {
  double loss;
  torch::Tensor grad_x;
  std::vector<torch::Tensor> grads;
};

// MSE + 0.1 * the regulariser, and its gradients; the fused model keeps statistics only.
RegularisedStep regularised_step(KAN& model, const torch::Tensor& x_in) {
  const bool fused = model->options().backend() == SplineBackend::kFused;
  model->zero_grad();
  model->set_save_activations(!fused);
  model->set_save_statistics(fused);
  auto x = x_in.clone().requires_grad_(true);
  const auto fit = model(x).pow(2).mean(); // before the regulariser, which reads its sums
  const auto loss = fit + 0.1 * model->regularization(RegularizationOptions().lamb_entropy(2));
  loss.backward();
  RegularisedStep step{loss.item<double>(), x.grad(), {}};
  for (const auto& p : model->parameters())
    step.grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return step;
}

void check_regularised(torch::Device device, torch::Dtype dtype, double tol,
                       KANOptions options = KANOptions({3, 4, 2}),
                       const std::vector<int64_t>& sizes = {1, 2, 97}) {
  options.grid(5).seed(7).dtype(dtype);
  const int64_t in = options.width()[0];
  KAN reference(KANOptions(options).backend(SplineBackend::kReference));
  KAN fused(KANOptions(options).backend(SplineBackend::kFused));
  {
    // A pruned edge and unequal scales, so that every edge has its own wb and ws.
    torch::NoGradGuard no_grad;
    reference->layer(0)->mask.view(-1)[1] = 0;
    auto& scale_sp = reference->layer(1)->scale_sp;
    scale_sp.mul_(torch::linspace(0.5, 1.5, scale_sp.numel(), dtype).view_as(scale_sp));
    for (size_t l = 0; l < reference->depth(); ++l)
      for (const auto& p : reference->layer(l)->named_parameters())
        fused->layer(l)->named_parameters()[p.key()].copy_(p.value());
    for (size_t l = 0; l < reference->depth(); ++l)
      for (const auto& b : reference->layer(l)->named_buffers())
        fused->layer(l)->named_buffers()[b.key()].copy_(b.value());
  }
  reference->to(device);
  fused->to(device);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  // Some samples outside the grid, where the splines are zero.
  for (const int64_t N : sizes) {
    const auto x = (torch::rand({N, in}, gen, torch::kFloat64) * 2.4 - 1.2).to(device, dtype);
    const auto r = regularised_step(reference, x), f = regularised_step(fused, x);
    const std::string what = "N=" + std::to_string(N);
    EXPECT_LE(std::abs(f.loss - r.loss), tol * std::abs(r.loss)) << what;
    EXPECT_LE(max_rel_diff(f.grad_x, r.grad_x), tol) << what;
    ASSERT_EQ(f.grads.size(), r.grads.size());
    for (size_t i = 0; i < r.grads.size(); ++i)
      EXPECT_LE(max_rel_diff(f.grads[i], r.grads[i]), tol) << what << ", parameter " << i;
  }
  // The fused forward kept the sums, not the (N, I, O) activations.
  const auto& kept = fused->activations();
  ASSERT_EQ(kept.size(), fused->depth());
  EXPECT_FALSE(kept[0].numeric.defined());
  EXPECT_EQ(kept[0].moments.sizes(),
            (std::vector<int64_t>{2, in, fused->layer(0)->options().out_dim()}));
}

TEST(FusedBackend, RegularisedLossMatchesReference) {
  check_regularised(torch::kCPU, torch::kFloat64, 1e-10);
  check_regularised(torch::kCPU, torch::kFloat32, 1e-5);
  // Wider layers: the AVX2 kernels' eight outputs at a time and the rest one by one.
  check_regularised(torch::kCPU, torch::kFloat64, 1e-10, KANOptions({3, 19, 11}));
  check_regularised(torch::kCPU, torch::kFloat32, 1e-5, KANOptions({3, 19, 11}));
}

TEST(FusedBackend, RegularisedLossWithOtherBaseFunctionsAndSplineOrders) {
  for (const auto base : {BaseFunction::kIdentity, BaseFunction::kZero}) {
    check_regularised(torch::kCPU, torch::kFloat64, 1e-10, KANOptions({3, 4, 2}).base_fun(base));
    check_regularised(torch::kCPU, torch::kFloat32, 1e-5, KANOptions({3, 4, 2}).base_fun(base));
  }
  for (const int64_t k : {1, 2, 4})
    check_regularised(torch::kCPU, torch::kFloat64, 1e-10, KANOptions({3, 4, 2}).k(k));
}

TEST(FusedBackend, RegularisedLossInSlicesMatchesReference) {
  // Enough samples and threads that the CPU's layer node cuts them into slices, each summing into
  // its own copy (fewer inputs than threads: the backward's slices too).
  const int threads = at::get_num_threads();
  at::set_num_threads(4);
  check_regularised(torch::kCPU, torch::kFloat64, 1e-10, KANOptions({2, 5, 2}), {30000});
  check_regularised(torch::kCPU, torch::kFloat32, 1e-5, KANOptions({2, 5, 2}), {30000});
  at::set_num_threads(threads);
}

// One layer's output and regulariser sums, and the gradients of <y, gy> + <sums, gm>: the fused
// backend's node against the sums of the reference's activations.
struct LayerSums {
  torch::Tensor y, sums, grad_x, grad_coef, grad_scale_base, grad_scale_sp;
};

LayerSums run_with_sums(KANLayer& layer, const torch::Tensor& x, const torch::Tensor& gy,
                        const torch::Tensor& gm) {
  layer->zero_grad();
  const auto xg = x.detach().clone().requires_grad_(true);
  const auto acts = layer->forward_with_statistics(xg);
  const auto sums =
      acts.moments.defined()
          ? acts.moments
          : torch::stack({acts.numeric.sum(0), acts.numeric.square().sum(0)}).to(torch::kFloat64);
  ((acts.output * gy).sum() + (sums * gm).sum()).backward();
  return {acts.output.detach(),     sums.detach(),         xg.grad(), layer->coef.grad(),
          layer->scale_base.grad(), layer->scale_sp.grad()};
}

TEST(FusedBackend, RegularisedLayerOnKnotsOutsideAndRepeatedKnots) {
  // Points on every knot, between knots and outside the grid, for the kernels with the points
  // of an input in vector lanes (short knot rows: float64, or float32 with few outputs), the
  // per-point ones (long rows; float32 with eight or more outputs), and a row with repeated
  // knots. N is no multiple of the lanes: the per-point kernels finish each slice. Float64 rows of
  // 8 to 16 knots (G 1 to 9) also take the forward's span polynomials (one or two vectors of
  // spans), on uniform knots and on spans from 1e-4 to 1 wide.
  enum class Row { kUniform, kRepeated, kNarrow };
  struct Case {
    int64_t out, grid;
    torch::Dtype dtype;
    Row row;
  };
  const auto f64 = torch::kFloat64, f32 = torch::kFloat32;
  for (const auto& c : {Case{3, 3, f64, Row::kUniform}, Case{3, 20, f64, Row::kUniform},
                        Case{3, 1, f64, Row::kUniform}, Case{3, 9, f64, Row::kUniform},
                        Case{3, 9, f64, Row::kNarrow}, Case{3, 6, f64, Row::kRepeated},
                        Case{3, 4, f32, Row::kUniform}, Case{9, 4, f32, Row::kUniform},
                        Case{3, 6, f32, Row::kRepeated}}) {
    auto [reference, fused] =
        layer_pair(KANLayerOptions(2, c.out).grid(c.grid).k(3).seed(c.grid).dtype(c.dtype));
    if (c.row != Row::kUniform) {
      const auto row =
          c.row == Row::kRepeated
              ? torch::tensor(
                    {-2.0, -1.5, -1.0, -1.0, -0.5, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0}, c.dtype)
              : torch::tensor({-3.0, -2.0, -1.0, -0.5, -0.4999, -0.499, -0.49, -0.4, 0.0, 0.0001,
                               0.001, 0.01, 0.5, 1.0, 2.0, 3.0},
                              c.dtype);
      torch::NoGradGuard no_grad;
      reference->grid.copy_(row.expand({2, -1}));
      fused->grid.copy_(row.expand({2, -1}));
    }
    const auto x = probe_points(reference->grid, 37, 5);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
    const auto gy = torch::randn({x.size(0), c.out}, gen, torch::kFloat64).to(c.dtype);
    const auto gm = torch::randn({2, 2, c.out}, gen, torch::kFloat64) * 1e-2;
    const auto r = run_with_sums(reference, x, gy, gm), f = run_with_sums(fused, x, gy, gm);
    const double tol = c.dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    const std::string what = "out " + std::to_string(c.out) + ", G " + std::to_string(c.grid) +
                             (c.row == Row::kRepeated ? ", repeated knots, "
                              : c.row == Row::kNarrow ? ", narrow spans, "
                                                      : ", ") +
                             to_string(c.dtype);
    EXPECT_LE(max_rel_diff(f.y, r.y), tol) << what;
    EXPECT_LE(max_rel_diff(f.sums, r.sums), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_x, r.grad_x), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_coef, r.grad_coef), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_scale_base, r.grad_scale_base), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_scale_sp, r.grad_scale_sp), tol) << what;
  }
}

// Shapes that make the block kernels of the regulariser's sums (run on the CPU by the
// CudaBlocksOnCpu test) cut their work every way: 300 outputs (two tiles of 256 outputs), order 15
// with one output (the point blocks widen their groups to fit the tile; the slices' tiles hold one
// sample each), 40 outputs of an order 5 spline in float32; 1000 samples, in 15 or more slices on
// the GPU. A second run must give the same bits (no order of blocks matters).
void check_regularised_block_shapes(torch::Device device) {
  struct Shape {
    int64_t in, out, k;
    torch::Dtype dtype;
  };
  for (const auto& shape : {Shape{2, 300, 3, torch::kFloat64}, Shape{3, 1, 15, torch::kFloat64},
                            Shape{3, 1, 15, torch::kFloat32}, Shape{5, 40, 5, torch::kFloat32}}) {
    auto [reference, fused] = layer_pair(
        KANLayerOptions(shape.in, shape.out).grid(6).k(shape.k).seed(shape.out).dtype(shape.dtype));
    const auto x = probe_points(reference->grid, 1000, shape.k).to(device);
    reference->to(device);
    fused->to(device);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(19);
    const auto gy =
        torch::randn({x.size(0), shape.out}, gen, torch::kFloat64).to(device, shape.dtype);
    const auto gm =
        (torch::randn({2, shape.in, shape.out}, gen, torch::kFloat64) * 1e-2).to(device);
    const auto r = run_with_sums(reference, x, gy, gm), f = run_with_sums(fused, x, gy, gm);
    const double tol = shape.dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    const std::string what = std::to_string(shape.in) + " -> " + std::to_string(shape.out) +
                             ", k " + std::to_string(shape.k) + ", " + to_string(shape.dtype);
    EXPECT_LE(max_rel_diff(f.sums, r.sums), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_x, r.grad_x), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_coef, r.grad_coef), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_scale_base, r.grad_scale_base), tol) << what;
    EXPECT_LE(max_rel_diff(f.grad_scale_sp, r.grad_scale_sp), tol) << what;
    const auto again = run_with_sums(fused, x, gy, gm);
    EXPECT_TRUE(torch::equal(again.sums, f.sums) && torch::equal(again.grad_x, f.grad_x) &&
                torch::equal(again.grad_coef, f.grad_coef) &&
                torch::equal(again.grad_scale_base, f.grad_scale_base) &&
                torch::equal(again.grad_scale_sp, f.grad_scale_sp))
        << what;
  }
}

TEST(FusedBackend, RegularisedLayerOfEveryBlockShape) {
  check_regularised_block_shapes(torch::kCPU);
}

TEST(FusedBackend, RegularisedLayerGivesNaNForNonFiniteInputsLikeTheReference) {
  // NaN and +-inf at a point in the lanes and at one the per-point kernels finish (the last).
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
    for (const double bad : {std::nan(""), double(INFINITY), -double(INFINITY)})
      for (const int64_t at : {int64_t{2}, int64_t{10}}) {
        auto [reference, fused] = layer_pair(KANLayerOptions(3, 2).grid(5).k(3).dtype(dtype));
        auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
        auto x = (torch::rand({11, 3}, gen, torch::kFloat64) * 2 - 1).to(dtype);
        x[at][1] = bad;
        const auto gy = torch::ones({11, 2}, dtype);
        const auto gm = torch::ones({2, 3, 2}, torch::kFloat64);
        const auto r = run_with_sums(reference, x, gy, gm), f = run_with_sums(fused, x, gy, gm);
        const std::string what = std::to_string(bad) + " at row " + std::to_string(at);
        EXPECT_TRUE(torch::equal(f.y.isnan(), r.y.isnan())) << what << "\n" << f.y << r.y;
        EXPECT_TRUE(torch::equal(f.sums.isnan(), r.sums.isnan())) << what;
        EXPECT_TRUE(torch::equal(f.grad_x.isnan(), r.grad_x.isnan())) << what;
        EXPECT_TRUE(torch::equal(f.grad_coef.isnan(), r.grad_coef.isnan())) << what;
        EXPECT_TRUE(f.y[0].isfinite().all().item<bool>()) << what;
      }
}

TEST(FusedBackend, RegularisedStepMemoryIsPerEdge) {
  // Kept activations would be (N, I, O) tensors of 65536 * 32 * 32 * 4 B = 256 MiB each; the
  // regularised step on sums must stay below one of them (its own (N, I) tensors, x and the
  // layer outputs, take tens of MiB).
  constexpr int64_t N = 65536, width = 32;
  KAN model(KANOptions({width, width, 1}).grid(5).dtype(torch::kFloat32));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  const auto x = torch::rand({N, width}, gen, torch::kFloat32) * 2 - 1;
  model->set_save_statistics(true);
  const kan::bench::PeakMemory memory(torch::kCPU);
  const auto fit = model(x).pow(2).mean();
  (fit + model->regularization({})).backward();
  const auto measured = memory.bytes();
  if (!measured)
    GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  RecordProperty("peak_rss_growth_bytes", std::to_string(*measured));
  EXPECT_LT(*measured, int64_t{192} << 20)
      << "peak resident memory grew by " << (*measured >> 20) << " MiB";
  EXPECT_TRUE(model->layer(0)->coef.grad().isfinite().all().item<bool>());
}

// ---- CUDA variants (skipped without a GPU) ----

void check_cuda_against_cpu_reference(torch::Dtype dtype, double tol) {
  for (const int64_t G : {1, 3, 5, 10, 100}) {
    for (const int64_t k : {1, 2, 3, 5}) {
      for (const auto knots : {Knots::kUniform, Knots::kUpdated}) {
        const std::string what = "CUDA G=" + std::to_string(G) + " k=" + std::to_string(k) +
                                 (knots == Knots::kUniform ? " uniform" : " updated");
        auto [reference, fused] =
            layer_pair(KANLayerOptions(3, 4).grid(G).k(k).seed(G * 10 + k).dtype(dtype));
        if (knots == Knots::kUpdated)
          update_grids(reference, fused, 3, dtype);
        reference->to(torch::kCUDA);
        fused->to(torch::kCUDA);
        const auto x = probe_points(reference->grid, 64, G + k);
        expect_match(reference, fused, x, tol, what);
      }
    }
  }
}

TEST(FusedBackend, MatchesReferenceFloat64_CUDA) {
  KAN_REQUIRE_CUDA();
  check_cuda_against_cpu_reference(torch::kFloat64, 1e-10);
}

TEST(FusedBackend, MatchesReferenceFloat32_CUDA) {
  KAN_REQUIRE_CUDA();
  check_cuda_against_cpu_reference(torch::kFloat32, 1e-5);
}

TEST(FusedBackend, BatchSizes_CUDA) {
  KAN_REQUIRE_CUDA();
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
    auto [reference, fused] = layer_pair(KANLayerOptions(5, 6).grid(100).k(3).dtype(dtype));
    update_grids(reference, fused, 5, dtype);
    reference->to(torch::kCUDA);
    fused->to(torch::kCUDA);
    for (const int64_t N : {0, 1, 7, 4096}) {
      const auto x = (torch::rand({N, 5}, torch::kFloat64) * 2.4 - 1.2).to(dtype).to(torch::kCUDA);
      expect_match(reference, fused, x, tol, "CUDA N=" + std::to_string(N));
    }
  }
}

TEST(FusedBackend, EdgeSplinesMatchReference_CUDA) {
  KAN_REQUIRE_CUDA();
  check_edges(torch::kCUDA);
}

TEST(FusedBackend, RegularisedLossMatchesReference_CUDA) {
  KAN_REQUIRE_CUDA();
  check_regularised(torch::kCUDA, torch::kFloat64, 1e-10);
  check_regularised(torch::kCUDA, torch::kFloat32, 1e-5);
}

TEST(FusedBackend, RegularisedLossInSlicesMatchesReference_CUDA) {
  // Enough samples that the GPU's sums and their backward run in many slices (one per 64 samples).
  KAN_REQUIRE_CUDA();
  check_regularised(torch::kCUDA, torch::kFloat64, 1e-10, KANOptions({2, 5, 2}), {30000});
  check_regularised(torch::kCUDA, torch::kFloat32, 1e-5, KANOptions({2, 5, 2}), {30000});
}

TEST(FusedBackend, RegularisedLayerOfEveryBlockShape_CUDA) {
  KAN_REQUIRE_CUDA();
  check_regularised_block_shapes(torch::kCUDA);
}

TEST(FusedBackend, RepeatedKnots_CUDA) {
  KAN_REQUIRE_CUDA();
  check_repeated_knots(torch::kCUDA);
}

TEST(FusedBackend, LayersOfEveryShapeTileAlike_CUDA) {
  KAN_REQUIRE_CUDA();
  check_every_shape(torch::kCUDA);
}

TEST(FusedBackend, MatchesCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  auto [cpu, gpu] = layer_pair(KANLayerOptions(8, 8).grid(20).k(3).dtype(torch::kFloat64));
  gpu->to(torch::kCUDA);
  const auto x = probe_points(cpu->grid, 512, 1);
  const auto grad_y = torch::randn({x.size(0), 8}, torch::kFloat64);
  const auto c = run(cpu, x, grad_y);
  const auto g = run(gpu, x.to(torch::kCUDA), grad_y.to(torch::kCUDA));
  EXPECT_LE(max_abs_diff(g.y, c.y), 1e-10);
  EXPECT_LE(max_abs_diff(g.grad_x, c.grad_x), 1e-10);
  EXPECT_LE(max_abs_diff(g.grad_coef, c.grad_coef), 1e-10);
}

} // namespace
} // namespace kan
