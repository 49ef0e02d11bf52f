#pragma once
/// Dynamic loss scaling for float16 training: PyTorch's torch.amp.GradScaler, which LibTorch's
/// C++ API lacks. Float16 has 5 exponent bits: small gradients underflow to zero unless the loss
/// is multiplied by a large scale before backward(); the gradients are divided by it again
/// before the optimiser step, a step whose gradients overflowed is skipped, and the scale backs
/// off on overflow and grows after a run of clean steps. The scale and the overflow check stay on
/// the gradients' device (ATen's _amp_* kernels, as PyTorch's GradScaler): one host read per
/// step, to decide whether to step.

#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace kan {

/// GradScaler's settings, with PyTorch's defaults.
struct GradScalerOptions {
  /// The first scale.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// The scale is multiplied by this after growth_interval steps without an overflow.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// ... and by this on a step whose gradients overflowed.
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

/// Example (one float16 step under autocast):
///   kan::GradScaler scaler;
///   auto loss = compute_loss(...);            // under autocast
///   scaler.scale(loss).backward();
///   if (!scaler.unscale_(optimizer)) optimizer.step(); // skipped on inf/NaN gradients
///   scaler.update();
class GradScaler {
public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale, for backward(). The scale moves to the loss's device on first use.
  torch::Tensor scale(const torch::Tensor& loss);
  /// Divides every gradient of the optimiser's parameters by the scale, and whether any of them
  /// is inf or NaN (the step must then be skipped). Once per step, before the step.
  bool unscale_(torch::optim::Optimizer& optimizer);
  /// The same for a list of parameters (their .grad()).
  bool unscale_(const std::vector<torch::Tensor>& parameters);
  /// Adjusts the scale after a step from the last unscale_'s verdict: backs off on overflow,
  /// grows after growth_interval clean steps.
  void update();

  /// The current scale.
  double get_scale() const;
  /// Steps whose gradients overflowed so far (and were to be skipped).
  int64_t overflowed_steps() const { return overflowed_steps_; }
  const GradScalerOptions& options() const { return options_; }

private:
  void to_device(torch::Device device);

  GradScalerOptions options_;
  torch::Tensor scale_;          ///< float32, one element, on the gradients' device
  torch::Tensor growth_tracker_; ///< int32: clean steps since the last change
  torch::Tensor found_inf_;      ///< float32: the last unscale_'s verdict
  int64_t overflowed_steps_ = 0;
};

} // namespace kan
