#include "nn/detail/mean_squared_error.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

namespace kan::detail {
namespace {

class MeanSquaredErrorFunction : public torch::autograd::Function<MeanSquaredErrorFunction> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& pred,
                            const at::Tensor& labels) {
    ctx->save_for_backward({pred, labels});
    auto loss = at::empty({}, pred.options());
    AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "mean_squared_error", [&] {
      const scalar_t* p = pred.const_data_ptr<scalar_t>();
      const scalar_t* y = labels.const_data_ptr<scalar_t>();
      double sum = 0;
      for (int64_t e = 0; e < pred.numel(); ++e) {
        const double d = static_cast<double>(p[e] - y[e]);
        sum += d * d;
      }
      *loss.mutable_data_ptr<scalar_t>() =
          static_cast<scalar_t>(sum / static_cast<double>(pred.numel()));
    });
    return loss;
  }

  // d/dpred = 2 (pred - labels) / n times the loss's gradient; d/dlabels its negative.
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "the fused MSE loss does not support double backward (create_graph=true)");
    const auto saved = ctx->get_saved_variables();
    const auto& pred = saved[0];
    const auto& labels = saved[1];
    const bool to_pred = ctx->needs_input_grad(0), to_labels = ctx->needs_input_grad(1);
    at::Tensor grad_pred = to_pred ? at::empty_like(pred) : at::Tensor();
    at::Tensor grad_labels = to_labels ? at::empty_like(labels) : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "mean_squared_error_backward", [&] {
      const scalar_t* p = pred.const_data_ptr<scalar_t>();
      const scalar_t* y = labels.const_data_ptr<scalar_t>();
      const double grad_loss = grad_outputs[0].to(pred.scalar_type()).const_data_ptr<scalar_t>()[0];
      const auto scale = static_cast<scalar_t>(2 * grad_loss / static_cast<double>(pred.numel()));
      scalar_t* gp = to_pred ? grad_pred.mutable_data_ptr<scalar_t>() : nullptr;
      scalar_t* gl = to_labels ? grad_labels.mutable_data_ptr<scalar_t>() : nullptr;
      for (int64_t e = 0; e < pred.numel(); ++e) {
        const scalar_t g = scale * (p[e] - y[e]);
        if (gp != nullptr)
          gp[e] = g;
        if (gl != nullptr)
          gl[e] = -g;
      }
    });
    return {grad_pred, grad_labels};
  }
};

} // namespace

at::Tensor mean_squared_error(const at::Tensor& pred, const at::Tensor& labels) {
  const bool fused =
      pred.sizes() == labels.sizes() && pred.is_cpu() && labels.is_cpu() && pred.is_contiguous() &&
      labels.is_contiguous() && pred.scalar_type() == labels.scalar_type() &&
      (pred.scalar_type() == at::kDouble || pred.scalar_type() == at::kFloat) && pred.numel() > 0;
  if (!fused)
    return (pred - labels).square().mean();
  return MeanSquaredErrorFunction::apply(pred, labels);
}

} // namespace kan::detail
