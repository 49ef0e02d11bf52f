#include "kernels/edge_moments.h"

#include "kernels/cpu_dispatch.h"
#include "kernels/fused_spline.h"
#include "kernels/layer_pass_cpu.h"
#include "kernels/spline_local.h"

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

// The sums apart from the layer run on the CPU only as the GPU's code (cuda-threads, cuda-blocks);
// the other CPU kernel sets fuse them into the layer (fused_layer_with_moments).
void check_kernel(bool present) {
  TORCH_CHECK(present, "fused_edge_moments: the CPU kernel set fuses the sums into the layer; use "
                       "fused_layer_with_moments (or KAN_FUSED_CPU_ISA=cuda-threads or "
                       "cuda-blocks)");
}

at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                       const at::Tensor& inv, const at::Tensor& weight, const at::Tensor& wb,
                       const at::Tensor& ws, int64_t k) {
  const int64_t I = x.size(1), O = weight.size(2), slices = gpu_backward_slices(x, weight);
  auto sums = at::zeros({2, slices, I, O}, x.options().dtype(at::kDouble));
  double* s1 = sums.mutable_data_ptr<double>();
  double* s2 = s1 + slices * I * O;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_edge_moments_cpu", [&] {
    const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
    if (cpu_runs_cuda_blocks())
      return cuda_blocks::moments(a, slices, s1, s2);
    const auto kernel = cpu_spline_kernels<scalar_t>().moments_inputs;
    check_kernel(kernel != nullptr);
    at::parallel_for(0, I, input_grain(x, weight),
                     [&](int64_t begin, int64_t end) { kernel(a, slices, s1, s2, begin, end); });
  });
  return sums.sum(1);
}

std::vector<at::Tensor> backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                     const at::Tensor& base, const at::Tensor& grid,
                                     const at::Tensor& inv, const at::Tensor& weight,
                                     const at::Tensor& wb, const at::Tensor& ws, int64_t k) {
  const int64_t N = x.size(0), I = x.size(1), M = weight.size(1), O = weight.size(2),
                slices = gpu_backward_slices(x, weight);
  const auto f64 = x.options().dtype(at::kDouble);
  auto gx = at::empty({N, I}, x.options()), gbase = at::empty({N, I}, x.options());
  auto gweight = at::zeros({slices, I, M, O}, f64), gwb = at::zeros({slices, I, O}, f64),
       gws = at::zeros({slices, I, O}, f64);
  const auto g = grad.to(at::kDouble).contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_edge_moments_backward_cpu", [&] {
    const auto a = moment_args<scalar_t>(x, base, grid, inv, weight, wb, ws, k);
    const auto grads = moment_grads<scalar_t>(g, gx, gbase, gweight, gwb, gws, slices);
    if (cpu_runs_cuda_blocks())
      return cuda_blocks::moments_backward(a, grads);
    const auto kernel = cpu_spline_kernels<scalar_t>().moments_backward_inputs;
    check_kernel(kernel != nullptr);
    at::parallel_for(0, I, input_grain(x, weight),
                     [&](int64_t begin, int64_t end) { kernel(a, grads, begin, end); });
  });
  return {gx, gbase, gweight.sum(0), gwb.sum(0), gws.sum(0)};
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
    // On meta (a GPU run rehearsed without one) a kernel is its outputs' shapes.
    if (x.is_meta())
      return at::empty({2, x.size(1), a[4].size(2)}, x.options().dtype(at::kDouble));
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
    if (s[0].is_meta()) { // shapes only, as in forward
      const auto f64 = s[0].options().dtype(at::kDouble);
      g = {at::empty_like(s[0]), at::empty_like(s[1]), at::empty(s[4].sizes(), f64),
           at::empty(s[5].sizes(), f64), at::empty(s[6].sizes(), f64)};
    }
#ifdef KAN_HAS_CUDA_KERNELS
    else if (s[0].is_cuda())
      g = edge_moments_backward_cuda(grad, s[0], s[1], s[2], s[3], s[4], s[5], s[6], k);
#endif
    else
      g = backward_cpu(grad, s[0], s[1], s[2], s[3], s[4], s[5], s[6], k);
    return input_gradients(ctx, g, s[0].scalar_type());
  }
};

// The whole layer y (N, O) = sum_i phi_nio, phi = wb base(x) + ws spline with wb = mask *
// scale_base and ws = mask * scale_sp, and the sums of phi, in one node whose forward and
// backward each visit every point once (layer_pass_cpu.h). Saves x, sigmoid(x) and the
// parameters: neither base(x) nor the splines.
class LayerWithMomentsFunction : public torch::autograd::Function<LayerWithMomentsFunction> {
public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx,
                                              const at::Tensor& x, const at::Tensor& grid,
                                              const at::Tensor& coef, const at::Tensor& scale_base,
                                              const at::Tensor& scale_sp, const at::Tensor& mask,
                                              int64_t base, int64_t k) {
    const LayerPass pass(x, grid, coef, scale_base, scale_sp, mask, static_cast<BaseKind>(base), k);
    ctx->save_for_backward(pass.tensors());
    ctx->saved_data["base"] = base;
    ctx->saved_data["k"] = k;
    auto [y, sums] = layer_pass_forward(pass);
    return {y, sums};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    check_no_double_backward();
    const LayerPass pass(ctx->get_saved_variables(),
                         static_cast<BaseKind>(ctx->saved_data["base"].toInt()),
                         ctx->saved_data["k"].toInt());
    const auto g = layer_pass_backward(pass, grad_outputs[0], grad_outputs[1]);
    return {g.x,        at::Tensor(), g.coef,       g.scale_base,
            g.scale_sp, at::Tensor(), at::Tensor(), at::Tensor()};
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

bool fuses_layer_with_moments(const at::Tensor& x) {
  if (!x.is_cpu())
    return false;
  if (x.scalar_type() == at::kDouble)
    return cpu_spline_kernels<double>().layer_with_moments != nullptr;
  return cpu_spline_kernels<float>().layer_with_moments != nullptr;
}

std::pair<at::Tensor, at::Tensor>
fused_layer_with_moments(const at::Tensor& x, const at::Tensor& grid, const at::Tensor& coef,
                         const at::Tensor& scale_base, const at::Tensor& scale_sp,
                         const at::Tensor& mask, BaseKind base, int64_t k) {
  // No base tensor: the node computes it (x stands in for it in the check).
  check_moment_arguments(x, x, grid, coef, scale_base, scale_sp, k);
  TORCH_CHECK(mask.sizes() == scale_base.sizes() && mask.scalar_type() == x.scalar_type() &&
                  mask.device() == x.device(),
              "fused_layer_with_moments: mask must be ", x.scalar_type(), " ", scale_base.sizes(),
              " on ", x.device(), ", got ", mask.scalar_type(), " ", mask.sizes(), " on ",
              mask.device());
  TORCH_CHECK(fuses_layer_with_moments(x), "fused_layer_with_moments: no kernels for x on ",
              x.device(), " with this CPU kernel set (KAN_FUSED_CPU_ISA)");
  auto outputs = LayerWithMomentsFunction::apply(x, grid, coef, scale_base, scale_sp, mask,
                                                 static_cast<int64_t>(base), k);
  return {outputs[0], outputs[1]};
}

at::Tensor fused_edge_moments(const at::Tensor& x, const at::Tensor& base, const at::Tensor& grid,
                              const at::Tensor& coef, const at::Tensor& wb, const at::Tensor& ws,
                              int64_t k) {
  check_moment_arguments(x, base, grid, coef, wb, ws, k);
  return EdgeMomentsFunction::apply(x, base, grid, coef, wb, ws, k);
}

} // namespace kan::detail
