#include "kan/optim/grad_scaler.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace kan {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  TORCH_CHECK(std::isfinite(options_.init_scale()) && options_.init_scale() > 0,
              "GradScaler: init_scale must be finite and > 0, got ", options_.init_scale());
  TORCH_CHECK(std::isfinite(options_.growth_factor()) && options_.growth_factor() > 1,
              "GradScaler: growth_factor must be > 1, got ", options_.growth_factor());
  TORCH_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1,
              "GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor());
  TORCH_CHECK(options_.growth_interval() >= 1, "GradScaler: growth_interval must be >= 1, got ",
              options_.growth_interval());
  to_device(torch::kCPU);
}

void GradScaler::to_device(torch::Device device) {
  if (scale_.defined() && scale_.device() == device)
    return;
  if (!scale_.defined()) {
    scale_ = torch::full({1}, options_.init_scale(), torch::kFloat32);
    growth_tracker_ = torch::zeros({1}, torch::kInt32);
    found_inf_ = torch::zeros({1}, torch::kFloat32);
  }
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  found_inf_ = found_inf_.to(device);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  to_device(loss.device());
  return loss * scale_.to(loss.scalar_type());
}

bool GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      parameters.push_back(p);
  return unscale_(parameters);
}

bool GradScaler::unscale_(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined())
      grads.push_back(p.grad());
  found_inf_.zero_();
  if (!grads.empty()) {
    to_device(grads.front().device());
    // One kernel per dtype and device (ATen's requirement), as PyTorch's GradScaler groups them.
    const auto inv_scale = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
    std::vector<torch::Tensor> group;
    for (size_t i = 0; i < grads.size(); ++i) {
      group.push_back(grads[i]);
      const bool last = i + 1 == grads.size() ||
                        grads[i + 1].scalar_type() != grads[i].scalar_type() ||
                        grads[i + 1].device() != grads[i].device();
      if (last) {
        TORCH_CHECK(group.front().device() == scale_.device(),
                    "GradScaler: gradients on several devices (", group.front().device(), " and ",
                    scale_.device(), "); use one scaler per device");
        at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf_, inv_scale);
        group.clear();
      }
    }
  }
  const bool overflow = found_inf_.item<float>() > 0;
  overflowed_steps_ += overflow ? 1 : 0;
  return overflow;
}

void GradScaler::update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
  found_inf_.zero_();
}

double GradScaler::get_scale() const {
  return scale_.item<double>();
}

} // namespace kan
