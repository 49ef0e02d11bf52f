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
    return at::scalar_tensor(squared_error_mean(pred, labels), pred.options());
  }

  // d/dpred = 2 (pred - labels) / n times the loss's gradient; d/dlabels its negative.
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "the fused MSE loss does not support double backward (create_graph=true)");
    const auto saved = ctx->get_saved_variables();
    const bool to_pred = ctx->needs_input_grad(0), to_labels = ctx->needs_input_grad(1);
    if (!to_pred && !to_labels)
      return {at::Tensor(), at::Tensor()};
    const auto grad_pred = squared_error_gradient(
        saved[0], saved[1], grad_outputs[0].to(saved[0].scalar_type()).item<double>());
    return {to_pred ? grad_pred : at::Tensor(), to_labels ? grad_pred.neg() : at::Tensor()};
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

double squared_error_mean(const at::Tensor& pred, const at::Tensor& labels) {
  double mean = 0;
  AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "squared_error_mean", [&] {
    const scalar_t* p = pred.const_data_ptr<scalar_t>();
    const scalar_t* y = labels.const_data_ptr<scalar_t>();
    double sum = 0;
    for (int64_t e = 0; e < pred.numel(); ++e) {
      const double d = static_cast<double>(p[e] - y[e]);
      sum += d * d;
    }
    mean = static_cast<double>(static_cast<scalar_t>(sum / static_cast<double>(pred.numel())));
  });
  return mean;
}

at::Tensor squared_error_gradient(const at::Tensor& pred, const at::Tensor& labels,
                                  double grad_loss) {
  auto grad = at::empty_like(pred);
  AT_DISPATCH_FLOATING_TYPES(pred.scalar_type(), "squared_error_gradient", [&] {
    const scalar_t* p = pred.const_data_ptr<scalar_t>();
    const scalar_t* y = labels.const_data_ptr<scalar_t>();
    scalar_t* g = grad.mutable_data_ptr<scalar_t>();
    const auto scale = static_cast<scalar_t>(2 * grad_loss / static_cast<double>(pred.numel()));
    for (int64_t e = 0; e < pred.numel(); ++e)
      g[e] = scale * (p[e] - y[e]);
  });
  return grad;
}

} // namespace kan::detail
