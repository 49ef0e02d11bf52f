#pragma once
// What the trace and the rehearsal both read of an operation's arguments.

#include <ATen/core/ivalue.h>

#include <functional>

namespace kan::diagnostics::detail {

/// Calls fn on every defined tensor of an argument: a tensor, a tensor list, or a list (of
/// optional tensors, as index takes) at any depth.
inline void for_each_tensor(const c10::IValue& value,
                            const std::function<void(const at::Tensor&)>& fn) {
  if (value.isTensor()) {
    if (value.toTensor().defined())
      fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec())
      if (t.defined())
        fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef())
      for_each_tensor(element, fn);
  }
}

/// A 0-dim CPU tensor is a scalar that LibTorch (and CUDA) accepts beside tensors on any device.
inline bool is_cpu_scalar(const at::Tensor& t) {
  return t.dim() == 0 && t.device().is_cpu();
}

} // namespace kan::diagnostics::detail
