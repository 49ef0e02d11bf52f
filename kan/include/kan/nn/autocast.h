#pragma once
/// LibTorch's autocast (automatic mixed precision) as a scope: while an AutocastGuard lives,
/// the operations autocast knows (matmuls among them) run in a lower precision on one device
/// type, as `with torch.autocast(device_type, dtype)` does in Python. kan's fused spline
/// kernels are not among them: they take float32 inputs and run in float32 (a layer's output,
/// the sum of a bfloat16 matmul and the float32 spline, is float32 again).

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace kan {

/// Checks that autocast to `dtype` can run on `device_type` (bfloat16 on the CPU or CUDA, float16
/// on CUDA); a c10::Error naming `option` and the value otherwise.
void check_autocast(c10::DeviceType device_type, c10::ScalarType dtype,
                    const char* option = "autocast");

/// Autocast to `dtype` on `device_type` for the guard's lifetime; the previous state comes back
/// (and autocast's cast cache is cleared) when it ends. Wrap forward passes and losses, not
/// backward().
///
/// Example:
///   {
///     kan::AutocastGuard autocast(torch::kCUDA, torch::kBFloat16);
///     loss = compute_loss(Loss::kMSE, model->forward(x), y);
///   }
///   loss.backward();
class AutocastGuard {
public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

private:
  c10::DeviceType device_type_;
  bool was_enabled_;
  c10::ScalarType previous_dtype_;
};

} // namespace kan
