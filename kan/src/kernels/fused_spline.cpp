#include "kernels/fused_spline.h"

#include "kernels/cpu_dispatch.h"
#include "kernels/spline_kernels.h"
#include "kernels/spline_local.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kan::detail {
namespace {

// Cap on the per-slice copies of grad_weight that let the backward run many threads over a layer
// with few inputs (see spline_backward_cpu).
constexpr int64_t kMaxSliceBytes = 64 << 20;
// Rows below which a slice is not worth its own copy of grad_weight.
constexpr int64_t kMinSliceRows = 256;

// `edges`: the per-edge splines (N, I, O), else the layer's sum over inputs (N, O); weight is
// (I, M, O) for both.
at::Tensor forward_cpu(bool edges, const at::Tensor& x, const at::Tensor& grid,
                       const at::Tensor& inv, const at::Tensor& weight, int64_t k) {
  auto y = edges ? at::empty({x.size(0), x.size(1), weight.size(2)}, x.options())
                 : at::zeros({x.size(0), weight.size(2)}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_forward_cpu", [&] {
    const auto args = spline_args<scalar_t>(x, grid, inv, weight, k);
    if (cpu_runs_cuda_blocks())
      cuda_blocks::forward(edges, args, y.mutable_data_ptr<scalar_t>());
    else
      spline_forward(cpu_spline_kernels<scalar_t>(), edges, args, y.mutable_data_ptr<scalar_t>());
  });
  return y;
}

// grad_weight sums over samples. Threads split the inputs; where there are fewer inputs than
// twice the threads, the samples are cut into slices too, each with its own copy of grad_weight,
// summed at the end (no atomics, deterministic for a fixed thread count).
int64_t cpu_backward_slices(const at::Tensor& x, const at::Tensor& weight) {
  const int64_t N = x.size(0), I = std::max<int64_t>(1, x.size(1));
  const int64_t threads = at::get_num_threads();
  int64_t slices = std::max<int64_t>(1, (2 * threads + I - 1) / I);
  slices = std::min(slices, std::max<int64_t>(1, N / kMinSliceRows));
  return std::min(slices,
                  std::max<int64_t>(
                      1, kMaxSliceBytes / std::max<int64_t>(1, weight.numel() * x.element_size())));
}

// (grad_x, grad_weight) of forward_cpu for grad_y; grad_x undefined unless need_grad_x.
std::pair<at::Tensor, at::Tensor> backward_cpu(bool edges, const at::Tensor& grad_y,
                                               const at::Tensor& x, const at::Tensor& grid,
                                               const at::Tensor& inv, const at::Tensor& weight,
                                               int64_t k, bool need_grad_x) {
  const bool blocks = cpu_runs_cuda_blocks();
  const int64_t slices = blocks ? gpu_backward_slices(x, weight) : cpu_backward_slices(x, weight);
  auto grad_x = need_grad_x ? at::empty_like(x) : at::Tensor();
  auto grad_w_slices =
      at::zeros({slices, weight.size(0), weight.size(1), weight.size(2)}, weight.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_backward_cpu", [&] {
    const auto args = spline_args<scalar_t>(x, grid, inv, weight, k);
    const scalar_t* gy = grad_y.const_data_ptr<scalar_t>();
    scalar_t* gx = need_grad_x ? grad_x.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* gw = grad_w_slices.mutable_data_ptr<scalar_t>();
    if (blocks)
      cuda_blocks::backward(edges, args, gy, gx, gw, slices);
    else
      spline_backward(cpu_spline_kernels<scalar_t>(), edges, args, gy, gx, gw, slices);
  });
  return {grad_x, slices == 1 ? grad_w_slices.squeeze(0) : grad_w_slices.sum(0)};
}

at::Tensor forward_any(bool edges, const at::Tensor& x, const at::Tensor& grid,
                       const at::Tensor& inv, const at::Tensor& weight, int64_t k) {
  if (x.is_cuda()) {
#ifdef KAN_HAS_CUDA_KERNELS
    return fused_spline_forward_cuda(edges, x, grid, inv, weight, k);
#else
    // An explicit error rather than a quiet fallback to the reference formulation.
    TORCH_CHECK(false,
                "backend fused: this build has no CUDA kernels (the CUDA toolkit was not "
                "found at configure time); use backend reference on ",
                x.device(), " or rebuild with nvcc");
#endif
  }
  // On meta (a GPU run rehearsed without one) a kernel is its outputs' shapes.
  if (x.is_meta())
    return edges ? at::empty({x.size(0), x.size(1), weight.size(2)}, x.options())
                 : at::empty({x.size(0), weight.size(2)}, x.options());
  TORCH_CHECK(x.is_cpu(), "backend fused runs on CPU and CUDA tensors, got x on ", x.device());
  return forward_cpu(edges, x, grid, inv, weight, k);
}

// grad_x is left undefined (and not computed) unless need_grad_x.
std::pair<at::Tensor, at::Tensor> backward_any(bool edges, const at::Tensor& grad_y,
                                               const at::Tensor& x, const at::Tensor& grid,
                                               const at::Tensor& inv, const at::Tensor& weight,
                                               int64_t k, bool need_grad_x) {
#ifdef KAN_HAS_CUDA_KERNELS
  if (x.is_cuda())
    return fused_spline_backward_cuda(edges, grad_y, x, grid, inv, weight, k, need_grad_x);
#endif
  if (x.is_meta())
    return {need_grad_x ? at::empty_like(x) : at::Tensor(), at::empty_like(weight)};
  return backward_cpu(edges, grad_y, x, grid, inv, weight, k, need_grad_x);
}

class FusedSplineFunction : public torch::autograd::Function<FusedSplineFunction> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& grid, const at::Tensor& weight, int64_t k,
                            bool edges) {
    // The per-edge splines read coef (I, O, M) transposed, like the layer's weight (I, M, O).
    const auto xc = x.contiguous(), gc = grid.contiguous(),
               wc = edges ? weight.transpose(1, 2).contiguous() : weight.contiguous();
    const auto inv = knot_reciprocals(gc, k);
    ctx->save_for_backward({xc, gc, inv, wc});
    ctx->saved_data["k"] = k;
    ctx->saved_data["edges"] = edges;
    return forward_any(edges, xc, gc, inv, wc, k);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    // The kernels' backward is not itself differentiable: refuse rather than return a graph that
    // silently lacks the second-order terms.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "backend fused does not support double backward (create_graph=true through a "
                "KAN layer); use backend reference for higher-order derivatives");
    const auto saved = ctx->get_saved_variables();
    const int64_t k = ctx->saved_data["k"].toInt();
    const bool edges = ctx->saved_data["edges"].toBool();
    const auto grad_y = grad_outputs[0].contiguous();
    auto [grad_x, grad_w] = backward_any(edges, grad_y, saved[0], saved[1], saved[2], saved[3], k,
                                         ctx->needs_input_grad(0));
    if (edges)
      grad_w = grad_w.transpose(1, 2); // back to coef's (I, O, M)
    return {ctx->needs_input_grad(0) ? grad_x : at::Tensor(), at::Tensor(),
            ctx->needs_input_grad(2) ? grad_w : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

} // namespace

int64_t gpu_backward_slices(const at::Tensor& x, const at::Tensor& weight) {
  return cuda_blocks::backward_slices(x.size(0), x.size(1), weight.size(2),
                                      weight.numel() * weight.element_size());
}

at::Tensor knot_reciprocals(const at::Tensor& grid, int64_t k) {
  at::NoGradGuard no_grad;
  const int64_t I = grid.size(0), P = grid.size(1);
  // One pass (a loop, or one kernel): on small models the ~30 tensor operations below cost more
  // than the forward itself, and every forward (and the regulariser's sums) needs these.
  if (grid.is_cpu()) {
    const auto g = grid.contiguous();
    auto inv = at::empty({I, k, P}, grid.options());
    AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), "knot_reciprocals", [&] {
      const scalar_t* knots = g.data_ptr<scalar_t>();
      scalar_t* out = inv.data_ptr<scalar_t>();
      for (int64_t i = 0; i < I; ++i)
        for (int64_t p = 1; p <= k; ++p)
          for (int64_t j = 0; j < P; ++j)
            out[(i * k + p - 1) * P + j] = knot_reciprocal(knots, P, i, p, j);
    });
    return inv;
  }
#ifdef KAN_HAS_CUDA_KERNELS
  if (grid.is_cuda())
    return knot_reciprocals_cuda(grid.contiguous(), k);
#endif
  auto inv = at::zeros({I, k, P}, grid.options());
  for (int64_t p = 1; p <= k && p < P; ++p) {
    const auto d = grid.narrow(1, p, P - p) - grid.narrow(1, 0, P - p);
    inv.select(1, p - 1)
        .narrow(1, 0, P - p)
        .copy_(at::where(d == 0, at::zeros_like(d), d.reciprocal()));
  }
  return inv;
}

namespace {

// Rows [begin, end) of local_bspline_basis_cpu's (N, I, M) basis, zero on entry.
template <typename T>
void local_basis_rows(const T* x, const T* knots, const T* reciprocals, int64_t I, int64_t P, int k,
                      int64_t begin, int64_t end, T* basis) {
  const int64_t M = P - k - 1;
  T value[kFusedMaxOrder + 1];
  for (int64_t n = begin; n < end; ++n)
    for (int64_t i = 0; i < I; ++i) {
      const T v = x[n * I + i];
      T* row = basis + (n * I + i) * M;
      int64_t first = 0;
      if (!is_finite_value(v)) {
        std::fill(row, row + M, v - v); // NaN, as the recursion gives
      } else if (local_bspline_order<-1, T, false>(knots + i * P, reciprocals + i * k * P, P, k, v,
                                                   &first, value, nullptr)) {
        for (int r = 0; r <= k; ++r)
          if (first + r >= 0 && first + r < M)
            row[first + r] = value[r];
      }
    }
}

} // namespace

at::Tensor local_bspline_basis_cpu(const at::Tensor& x, const at::Tensor& grid, int64_t k) {
  TORCH_CHECK(x.is_cpu() && grid.is_cpu() && x.dim() == 2 && grid.dim() == 2 &&
                  grid.size(0) == x.size(1) && k >= 0 && k <= kFusedMaxOrder &&
                  grid.size(1) >= k + 2 && x.scalar_type() == grid.scalar_type(),
              "local_bspline_basis_cpu: x ", x.sizes(), " ", x.scalar_type(), " on ", x.device(),
              " and grid ", grid.sizes(), " ", grid.scalar_type(), " on ", grid.device(),
              " do not fit together for k = ", k);
  const auto xc = x.contiguous(), gc = grid.contiguous();
  const auto inv = knot_reciprocals(gc, k);
  const int64_t N = x.size(0), I = x.size(1), P = grid.size(1);
  auto basis = at::zeros({N, I, P - k - 1}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "local_bspline_basis_cpu", [&] {
    at::parallel_for(0, N, std::max<int64_t>(1, 4096 / std::max<int64_t>(I, 1)),
                     [&](int64_t begin, int64_t end) {
                       local_basis_rows(xc.const_data_ptr<scalar_t>(),
                                        gc.const_data_ptr<scalar_t>(),
                                        inv.const_data_ptr<scalar_t>(), I, P, static_cast<int>(k),
                                        begin, end, basis.mutable_data_ptr<scalar_t>());
                     });
  });
  return basis;
}

namespace {

// The checks both entry points share; M is the weight's spline dimension.
void check_arguments(const char* what, const at::Tensor& x, const at::Tensor& grid,
                     const at::Tensor& weight, int64_t M, int64_t k) {
  TORCH_CHECK(k >= 0 && k <= kFusedMaxOrder, "backend fused supports spline orders k = 0..",
              kFusedMaxOrder, ", got k = ", k, "; use backend reference");
  TORCH_CHECK(x.dim() == 2 && grid.dim() == 2 && weight.dim() == 3, what,
              " expects x (N, I), grid (I, P) and a 3-dimensional weight; got x ", x.sizes(),
              ", grid ", grid.sizes(), ", weight ", weight.sizes());
  TORCH_CHECK(grid.size(0) == x.size(1) && weight.size(0) == x.size(1) && M == grid.size(1) - k - 1,
              what, ": x ", x.sizes(), ", grid ", grid.sizes(), " and weight ", weight.sizes(),
              " do not fit together for k = ", k);
  TORCH_CHECK(x.scalar_type() == grid.scalar_type() && x.scalar_type() == weight.scalar_type(),
              what, ": x is ", x.scalar_type(), ", grid ", grid.scalar_type(), ", weight ",
              weight.scalar_type(), "; all must have one dtype");
  TORCH_CHECK(x.device() == grid.device() && x.device() == weight.device(), what, ": x is on ",
              x.device(), ", grid on ", grid.device(), ", weight on ", weight.device());
}

} // namespace

at::Tensor fused_spline(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& weight,
                        int64_t k) {
  check_arguments("fused_spline", x, grid, weight, weight.dim() == 3 ? weight.size(1) : -1, k);
  return FusedSplineFunction::apply(x, grid, weight, k, false);
}

at::Tensor fused_spline_edges(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
                              int64_t k) {
  check_arguments("fused_spline_edges", x, grid, coef, coef.dim() == 3 ? coef.size(2) : -1, k);
  return FusedSplineFunction::apply(x, grid, coef, k, true);
}

} // namespace kan::detail
