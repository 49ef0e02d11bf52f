#include "nn/detail/edge_moments.h"

#include "nn/detail/fused_spline.h"
#include "nn/detail/spline_local.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
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

// Slices of the samples for the layer's node: one per thread where there is work enough for each
// (each slice sums into its own copy, so results depend on the thread count only through them).
int64_t sample_slices(int64_t N, int64_t work_per_sample, int64_t at_most) {
  const int64_t by_work = N / parallel_grain(work_per_sample);
  return std::max<int64_t>(1, std::min({by_work, at_most, int64_t{at::get_num_threads()}}));
}

// The whole layer y (N, O) = sum_i phi_nio, phi = wb base(x) + ws spline with wb = mask *
// scale_base and ws = mask * scale_sp, and the sums of phi, in one node whose forward and
// backward each visit every point once (layer_moments_cpu.inc). Saves x and the parameters only:
// neither base(x) nor the splines. A small model's step is made of such nodes' fixed costs, so
// everything around the kernels is plain loops over host arrays, not tensor operations: the
// masked scales, the padded weight, the slices' sums and the gradients in their final layout.
class LayerWithMomentsFunction : public torch::autograd::Function<LayerWithMomentsFunction> {
public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx,
                                              const at::Tensor& x, const at::Tensor& grid,
                                              const at::Tensor& coef, const at::Tensor& scale_base,
                                              const at::Tensor& scale_sp, const at::Tensor& mask,
                                              int64_t base, int64_t k) {
    const auto xc = x.contiguous(), gc = grid.contiguous();
    const int64_t N = x.size(0), I = x.size(1), O = coef.size(1), M = coef.size(2);
    // coef (I, O, M) as (I, M + 2k, O), with k zero rows at both ends (layer_moments_cpu.inc).
    auto weight = at::empty({I, M + 2 * k, O}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_with_moments_weight", [&] {
      padded_weight(coef.contiguous().const_data_ptr<scalar_t>(),
                    weight.mutable_data_ptr<scalar_t>(), I, O, M, k);
    });
    const std::vector<at::Tensor> a{xc,
                                    gc,
                                    knot_reciprocals(gc, k),
                                    weight,
                                    scale_base.contiguous(),
                                    scale_sp.contiguous(),
                                    mask.contiguous()};
    ctx->save_for_backward(a);
    ctx->saved_data["base"] = base;
    ctx->saved_data["k"] = k;
    const int64_t slices = sample_slices(N, I * (k + 1) * (O + k + 1), N);
    auto y = at::zeros({N, O}, x.options());
    auto sums = at::empty({2, I, O}, x.options().dtype(at::kDouble));
    std::vector<double> partial(static_cast<size_t>(slices * 2 * I * O), 0.0);
    const auto sigmoid = silu_sigmoid(xc, base);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_with_moments_cpu", [&] {
      const MaskedScales<scalar_t> scales(a);
      const auto args = layer_args<scalar_t>(a, scales, sigmoid, base, k);
      const auto kernel = cpu_spline_kernels<scalar_t>().layer_with_moments;
      auto* out = y.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
        kernel(args, out, partial.data(), slices, begin, end);
      });
    });
    sum_slices(partial.data(), slices, 2 * I * O, sums.mutable_data_ptr<double>());
    return {y, sums};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    check_no_double_backward();
    const auto a = ctx->get_saved_variables();
    const int64_t base = ctx->saved_data["base"].toInt(), k = ctx->saved_data["k"].toInt();
    const auto& x = a[0];
    const int64_t N = x.size(0), I = x.size(1), rows = a[3].size(1), O = a[3].size(2);
    const int64_t M = rows - 2 * k;
    const auto gy = grad_outputs[0].defined() ? grad_outputs[0].contiguous() : at::Tensor();
    const auto gm = grad_outputs[1].defined()
                        ? grad_outputs[1].to(at::kDouble).contiguous()
                        : at::Tensor(); // the sums unused: their gradient is 0
    const std::vector<double> no_gm(gm.defined() ? 0 : static_cast<size_t>(2 * I * O), 0.0);
    const double* g1 = gm.defined() ? gm.const_data_ptr<double>() : no_gm.data();
    // Slices where the inputs alone leave threads idle.
    const int64_t threads = at::get_num_threads();
    const int64_t slices =
        I >= threads ? 1 : sample_slices(N, 2 * (k + 1) * (O + k + 1), (threads + I - 1) / I);
    auto gx = at::empty({N, I}, x.options());
    auto gcoef = at::empty({I, O, M}, x.options());
    auto gscale_base = at::empty({I, O}, x.options()), gscale_sp = at::empty({I, O}, x.options());
    // The slices' sums, in double.
    std::vector<double> gweight(static_cast<size_t>(slices * I * rows * O), 0.0);
    std::vector<double> gwb(static_cast<size_t>(slices * I * O), 0.0), gws(gwb);
    const auto sigmoid = silu_sigmoid(x, base);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_with_moments_backward_cpu", [&] {
      const MaskedScales<scalar_t> scales(a);
      const auto args = layer_args<scalar_t>(a, scales, sigmoid, base, k);
      const LayerGrads<scalar_t> g{gy.defined() ? gy.const_data_ptr<scalar_t>() : nullptr,
                                   g1,
                                   g1 + I * O,
                                   gx.mutable_data_ptr<scalar_t>(),
                                   gweight.data(),
                                   gwb.data(),
                                   gws.data(),
                                   slices};
      const auto kernel = cpu_spline_kernels<scalar_t>().layer_with_moments_backward;
      // Tasks of too little work stay on this thread: waking the OpenMP team for them costs
      // more than it saves, much more where cores are oversubscribed (spline_kernels_generic.cpp).
      const int64_t task_work = (N / slices) * 2 * (k + 1) * (O + k + 1);
      at::parallel_for(0, slices * I, parallel_grain(task_work),
                       [&](int64_t begin, int64_t end) { kernel(args, g, begin, end); });
      coef_gradient(gweight.data(), slices, I, O, M, k, gcoef.mutable_data_ptr<scalar_t>());
      // d/dscale = mask d/dw.
      const scalar_t* mask = a[6].const_data_ptr<scalar_t>();
      auto* gsb = gscale_base.mutable_data_ptr<scalar_t>();
      auto* gsp = gscale_sp.mutable_data_ptr<scalar_t>();
      sum_slices(gwb.data(), slices, I * O, gwb.data());
      sum_slices(gws.data(), slices, I * O, gws.data());
      for (int64_t e = 0; e < I * O; ++e) {
        gsb[e] = mask[e] * static_cast<scalar_t>(gwb[e]);
        gsp[e] = mask[e] * static_cast<scalar_t>(gws[e]);
      }
    });
    return {gx,        at::Tensor(), gcoef,        gscale_base,
            gscale_sp, at::Tensor(), at::Tensor(), at::Tensor()};
  }

private:
  // silu = x sigmoid(x): the sigmoid by ATen's vectorised kernel, once per pass (recomputed in
  // the backward rather than kept: an (N, I) tensor per layer).
  static at::Tensor silu_sigmoid(const at::Tensor& x, int64_t base) {
    return static_cast<BaseKind>(base) == BaseKind::kSiLU ? at::sigmoid(x) : at::Tensor();
  }

  // coef (I, O, M) into weight (I, M + 2k, O): transposed, k zero rows at both ends.
  template <typename T>
  static void padded_weight(const T* coef, T* weight, int64_t I, int64_t O, int64_t M, int64_t k) {
    const int64_t rows = M + 2 * k;
    for (int64_t i = 0; i < I; ++i)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < O; ++o) {
          const int64_t m = r - k;
          weight[(i * rows + r) * O + o] = m >= 0 && m < M ? coef[(i * O + o) * M + m] : T(0);
        }
  }

  // total[e] = sum over the slices s of partial[s * size + e]; total may be partial itself.
  static void sum_slices(const double* partial, int64_t slices, int64_t size, double* total) {
    for (int64_t e = 0; e < size; ++e) {
      double sum = partial[e];
      for (int64_t s = 1; s < slices; ++s)
        sum += partial[s * size + e];
      total[e] = sum;
    }
  }

  // The kernels' (slices, I, M + 2k, O) weight gradient, in double, as coef's (I, O, M) in T:
  // summed over the slices, the padding rows dropped.
  template <typename T>
  static void coef_gradient(const double* gweight, int64_t slices, int64_t I, int64_t O, int64_t M,
                            int64_t k, T* gcoef) {
    const int64_t rows = M + 2 * k, size = I * rows * O;
    for (int64_t i = 0; i < I; ++i)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t m = 0; m < M; ++m) {
          const int64_t at = (i * rows + m + k) * O + o;
          double sum = gweight[at];
          for (int64_t s = 1; s < slices; ++s)
            sum += gweight[s * size + at];
          gcoef[(i * O + o) * M + m] = static_cast<T>(sum);
        }
  }

  // wb = mask * scale_base and ws = mask * scale_sp of the saved {.., scale_base, scale_sp,
  // mask}, as host arrays.
  template <typename T> struct MaskedScales {
    std::vector<T> wb, ws;
    explicit MaskedScales(const std::vector<at::Tensor>& a)
        : wb(static_cast<size_t>(a[6].numel())), ws(wb.size()) {
      const T* sb = a[4].const_data_ptr<T>();
      const T* sp = a[5].const_data_ptr<T>();
      const T* mask = a[6].const_data_ptr<T>();
      for (size_t e = 0; e < wb.size(); ++e) {
        wb[e] = sb[e] * mask[e];
        ws[e] = sp[e] * mask[e];
      }
    }
  };

  // The kernels' view of the saved {x, grid, inv, weight, ...}.
  template <typename T>
  static LayerArgs<T> layer_args(const std::vector<at::Tensor>& a, const MaskedScales<T>& scales,
                                 const at::Tensor& sigmoid, int64_t base, int64_t k) {
    auto spline = spline_args<T>(a[0], a[1], a[2], a[3], k);
    spline.M -= 2 * k; // the weight's padding rows are not basis functions
    return {spline, scales.wb.data(), scales.ws.data(), static_cast<BaseKind>(base),
            sigmoid.defined() ? sigmoid.const_data_ptr<T>() : nullptr};
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
