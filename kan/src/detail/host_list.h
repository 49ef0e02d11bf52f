#pragma once
// Host-side lists (index lists, masks, ranges) as tensors on the model's device.

#include "kan/nn/trace_scope.h"

#include <ATen/ATen.h>

#include <vector>

namespace kan::detail {

/// `values` as a tensor of `dtype` on `device`. It is made on the host, marked as host work for
/// the device audit's operation trace (bookkeeping, not computation meant for the device), then
/// copied.
template <typename T>
at::Tensor host_list(const std::vector<T>& values, at::ScalarType dtype, at::Device device) {
  at::Tensor host;
  {
    PhaseScope scope(Phase::kHostWork);
    host = at::tensor(values, at::TensorOptions().dtype(dtype));
  }
  return host.to(device);
}

} // namespace kan::detail
