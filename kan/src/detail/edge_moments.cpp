#include "detail/edge_moments.h"

#include "detail/fused_spline.h"
#include "detail/spline_local.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace kan::detail {
namespace {

// One input per task (every row a task writes is its input's): N * O edge points of about eight
// multiply-adds each.
int64_t input_grain(const at::Tensor& x, const at::Tensor& weight) {
  return parallel_grain(x.size(0) * weight.size(2) * 8);
}

at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                       const at::Tensor& inv, const at::Tensor& weight, const at::Tensor& wb,
                       const at::Tensor& ws, int64_t k) {
  const int64_t I = x.size(1), O = weight.size(2);
  auto sums = at::zeros({2, I, O}, x.options().dtype(at::kDouble));
  double* s1 = sums.mutable_data_ptr<double>();
  double* s2 = s1 + I * O;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_edge_moments_cpu", [&] {
    const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
    const auto kernel = cpu_spline_kernels<scalar_t>().moments_inputs;
    at::parallel_for(0, I, input_grain(x, weight),
                     [&](int64_t begin, int64_t end) { kernel(a, s1, s2, begin, end); });
  });
  return sums;
}

// gy: dL/dy of the layer's spline part when it is in the same node (undefined: the sums alone).
std::vector<at::Tensor> backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                     const at::Tensor& base, const at::Tensor& grid,
                                     const at::Tensor& inv, const at::Tensor& weight,
                                     const at::Tensor& wb, const at::Tensor& ws, int64_t k,
                                     const at::Tensor& gy = {}) {
  const int64_t N = x.size(0), I = x.size(1), M = weight.size(1), O = weight.size(2);
  const auto f64 = x.options().dtype(at::kDouble);
  auto gx = at::empty({N, I}, x.options()), gbase = at::empty({N, I}, x.options());
  auto gweight = at::zeros({I, M, O}, f64), gwb = at::zeros({I, O}, f64),
       gws = at::zeros({I, O}, f64);
  const auto g = grad.to(at::kDouble).contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_edge_moments_backward_cpu", [&] {
    const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
    auto grads = moment_grads<scalar_t>(g, gx, gbase, gweight, gwb, gws, 1);
    if (gy.defined())
      grads.gy = gy.const_data_ptr<scalar_t>();
    const auto kernel = cpu_spline_kernels<scalar_t>().moments_backward_inputs;
    at::parallel_for(0, I, input_grain(x, weight),
                     [&](int64_t begin, int64_t end) { kernel(a, grads, begin, end); });
  });
  return {gx, gbase, gweight, gwb, gws};
}

// What both nodes save: the arguments made contiguous, coef transposed to the kernels' weight
// (I, M, O), and the knot reciprocals; in the order {x, base, grid, inv, weight, wb, ws}.
std::vector<at::Tensor> save_arguments(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                       const at::Tensor& base, const at::Tensor& grid,
                                       const at::Tensor& coef, const at::Tensor& wb,
                                       const at::Tensor& ws, int64_t k) {
  const auto gc = grid.contiguous();
  std::vector<at::Tensor> saved{x.contiguous(),
                                base.contiguous(),
                                gc,
                                knot_reciprocals(gc, k),
                                coef.transpose(1, 2).contiguous(),
                                wb.contiguous(),
                                ws.contiguous()};
  ctx->save_for_backward(saved);
  ctx->saved_data["k"] = k;
  return saved;
}

// The kernels' gradients {gx, gbase, gweight, gwb, gws} as the nodes' input gradients (x, base,
// grid, coef, wb, ws, k), in x's dtype, where autograd wants them.
torch::autograd::tensor_list input_gradients(torch::autograd::AutogradContext* ctx,
                                             const std::vector<at::Tensor>& g,
                                             at::ScalarType dtype) {
  const auto wanted = [&](size_t input, const at::Tensor& t) {
    return ctx->needs_input_grad(input) ? t.to(dtype) : at::Tensor(); // (a no-op for gx, gbase)
  };
  return {wanted(0, g[0]), wanted(1, g[1]),
          at::Tensor(),    wanted(3, g[2].transpose(1, 2)), // back to coef's (I, O, M)
          wanted(4, g[3]), wanted(5, g[4]),
          at::Tensor()};
}

void check_no_double_backward() {
  TORCH_CHECK(!at::GradMode::is_enabled(),
              "backend fused does not support double backward (create_graph=true through the "
              "regulariser); use backend reference for higher-order derivatives");
}

class EdgeMomentsFunction : public torch::autograd::Function<EdgeMomentsFunction> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& base, const at::Tensor& grid, const at::Tensor& coef,
                            const at::Tensor& wb, const at::Tensor& ws, int64_t k) {
    const auto a = save_arguments(ctx, x, base, grid, coef, wb, ws, k);
#ifdef KAN_HAS_CUDA_KERNELS
    if (x.is_cuda())
      return edge_moments_forward_cuda(a[0], a[1], a[2], a[3], a[4], a[5], a[6], k);
#endif
    TORCH_CHECK(x.is_cpu(),
                "backend fused: no CUDA kernels in this build for the regulariser's "
                "statistics on ",
                x.device());
    return forward_cpu(a[0], a[1], a[2], a[3], a[4], a[5], a[6], k);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    check_no_double_backward();
    const auto s = ctx->get_saved_variables();
    const int64_t k = ctx->saved_data["k"].toInt();
    const auto grad = grad_outputs[0].contiguous();
    std::vector<at::Tensor> g;
#ifdef KAN_HAS_CUDA_KERNELS
    if (s[0].is_cuda())
      g = edge_moments_backward_cuda(grad, s[0], s[1], s[2], s[3], s[4], s[5], s[6], k);
    else
#endif
      g = backward_cpu(grad, s[0], s[1], s[2], s[3], s[4], s[5], s[6], k);
    return input_gradients(ctx, g, s[0].scalar_type());
  }
};

// The layer's spline part y (N, O) = sum_i ws_io spline_nio and the sums, in one node: the
// backward visits each point once for both (CPU).
class SplineWithMomentsFunction : public torch::autograd::Function<SplineWithMomentsFunction> {
public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx,
                                              const at::Tensor& x, const at::Tensor& base,
                                              const at::Tensor& grid, const at::Tensor& coef,
                                              const at::Tensor& wb, const at::Tensor& ws,
                                              int64_t k) {
    const auto a = save_arguments(ctx, x, base, grid, coef, wb, ws, k);
    // The layer's weight, as KANLayerImpl::spline_weight: coef scaled by ws, (I, M, O).
    const auto scaled = (a[4] * a[6].unsqueeze(1)).contiguous();
    auto y = at::zeros({x.size(0), a[4].size(2)}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_spline_with_moments_cpu", [&] {
      spline_forward(cpu_spline_kernels<scalar_t>(), false,
                     spline_args<scalar_t>(a[0], a[2], a[3], scaled, k),
                     y.mutable_data_ptr<scalar_t>());
    });
    return {y, forward_cpu(a[0], a[1], a[2], a[3], a[4], a[5], a[6], k)};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    check_no_double_backward();
    const auto s = ctx->get_saved_variables();
    const int64_t k = ctx->saved_data["k"].toInt();
    const auto gy = grad_outputs[0].defined() ? grad_outputs[0].contiguous() : at::Tensor();
    const auto gm = grad_outputs[1].defined() ? grad_outputs[1].contiguous()
                                              : at::zeros({2, s[0].size(1), s[4].size(2)},
                                                          s[0].options().dtype(at::kDouble));
    const auto g = backward_cpu(gm, s[0], s[1], s[2], s[3], s[4], s[5], s[6], k, gy);
    return input_gradients(ctx, g, s[0].scalar_type());
  }
};

void check_moment_arguments(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                            const at::Tensor& coef, const at::Tensor& wb, const at::Tensor& ws,
                            int64_t k) {
  TORCH_CHECK(k >= 0 && k <= kFusedMaxOrder, "backend fused supports spline orders k = 0..",
              kFusedMaxOrder, ", got k = ", k);
  TORCH_CHECK(x.dim() == 2 && base.sizes() == x.sizes() && grid.dim() == 2 &&
                  grid.size(0) == x.size(1) && coef.dim() == 3 && coef.size(0) == x.size(1) &&
                  coef.size(2) == grid.size(1) - k - 1 && wb.dim() == 2 &&
                  wb.size(0) == x.size(1) && wb.size(1) == coef.size(1) && ws.sizes() == wb.sizes(),
              "fused_edge_moments: x ", x.sizes(), ", base ", base.sizes(), ", grid ", grid.sizes(),
              ", coef ", coef.sizes(), ", wb ", wb.sizes(), " and ws ", ws.sizes(),
              " do not fit together for k = ", k);
  for (const auto* t : {&base, &grid, &coef, &wb, &ws})
    TORCH_CHECK(t->scalar_type() == x.scalar_type() && t->device() == x.device(),
                "fused_edge_moments: every argument must be ", x.scalar_type(), " on ", x.device(),
                ", got ", t->scalar_type(), " on ", t->device());
}

} // namespace

std::pair<at::Tensor, at::Tensor>
fused_spline_with_moments(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                          const at::Tensor& coef, const at::Tensor& wb, const at::Tensor& ws,
                          int64_t k) {
  check_moment_arguments(x, base, grid, coef, wb, ws, k);
  TORCH_CHECK(x.is_cpu(), "fused_spline_with_moments runs on the CPU, got x on ", x.device());
  auto outputs = SplineWithMomentsFunction::apply(x, base, grid, coef, wb, ws, k);
  return {outputs[0], outputs[1]};
}

at::Tensor fused_edge_moments(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                              const at::Tensor& coef, const at::Tensor& wb, const at::Tensor& ws,
                              int64_t k) {
  check_moment_arguments(x, base, grid, coef, wb, ws, k);
  return EdgeMomentsFunction::apply(x, base, grid, coef, wb, ws, k);
}

} // namespace kan::detail
