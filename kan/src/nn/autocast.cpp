#include "kan/nn/autocast.h"

#include <c10/util/Exception.h>

namespace kan {

void check_autocast(c10::DeviceType device_type, c10::ScalarType dtype, const char* option) {
  TORCH_CHECK(dtype == c10::kBFloat16 || dtype == c10::kHalf, option,
              " must be bfloat16 or float16, got ", dtype);
  TORCH_CHECK(device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA, option,
              " runs on the CPU or CUDA, got ", device_type);
  TORCH_CHECK(dtype != c10::kHalf || device_type == c10::DeviceType::CUDA, option,
              " float16 runs on CUDA only; use bfloat16 on the CPU");
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype)
    : device_type_(device_type), was_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  check_autocast(device_type, dtype);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // The outermost scope clears the cache of cast weights, as torch.autocast's __exit__ does.
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

} // namespace kan
