#include "kan/diagnostics/meta_rehearsal.h"

#include "detail/operation_arguments.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

namespace kan::diagnostics {
namespace {

// LibTorch's dispatch modes (TorchDispatchMode) exist only in Python. In C++ the way to see every
// operation before autograd, and to change what it does, is a boxed fallback on a mode key above
// Autograd that a thread-local guard switches on. This key has no fallback in LibTorch itself,
// and nothing else in a kanbench process uses it.
constexpr auto kRehearsalKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

std::atomic<int64_t> g_shape_fallbacks{0};

using Stack = torch::jit::Stack;

// The same argument with every tensor replaced by fn(tensor).
c10::IValue map_tensors(const c10::IValue& value,
                        const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (value.isTensor())
    return value.toTensor().defined() ? c10::IValue(fn(value.toTensor())) : value;
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList().vec())
      out.push_back(t.defined() ? fn(t) : t);
    return out;
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& element : list)
      out.push_back(map_tensors(element, fn));
    return out;
  }
  return value;
}

bool is_host_tensor(const at::Tensor& t) {
  return t.device().is_cpu() && !detail::is_cpu_scalar(t);
}

// Moves t to meta keeping its TensorImpl, as set_data does between CPU and CUDA.
void move_to_meta_in_place(const at::Tensor& t) {
  at::Tensor moved;
  {
    // The rehearsal's own work is not the model's: neither intercepted nor traced.
    c10::impl::ExcludeDispatchKeyGuard outside(kRehearsalKey);
    at::DisableRecordFunctionGuard untraced;
    at::NoGradGuard no_grad;
    moved = t.detach().to(at::kMeta);
  }
  t.unsafeGetTensorImpl()->shallow_copy_from(moved.getIntrusivePtr());
}

// The argument named `name` of the call on the stack, or nullptr.
c10::Scalar substituted_scalar(const at::Tensor& t) {
  if (t.scalar_type() == at::kBool)
    return c10::Scalar(true);
  if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/false))
    return c10::Scalar(static_cast<int64_t>(kSubstitutedValue));
  return c10::Scalar(kSubstitutedValue);
}

// Registered as the meta kernel of an operator that has none: runs the CPU kernel on zeros of
// the inputs' shapes and returns meta tensors of the outputs' shapes. An output that aliases an
// input (in-place, out=) returns that input, resized to the output's shape.
void shapes_from_cpu(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard outside(kRehearsalKey);
  at::DisableRecordFunctionGuard untraced;
  const auto& schema = op.schema();
  const auto n = schema.arguments().size();
  const std::vector<c10::IValue> originals(stack->end() - static_cast<std::ptrdiff_t>(n),
                                           stack->end());
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(n); it != stack->end(); ++it) {
    *it = map_tensors(*it, [](const at::Tensor& t) {
      return t.is_meta() ? at::zeros(t.sizes(), t.options().device(at::kCPU)) : t;
    });
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  const auto& returns = schema.returns();
  for (size_t r = 0; r < returns.size(); ++r) {
    auto& out = (*stack)[stack->size() - returns.size() + r];
    const auto* alias = returns[r].alias_info();
    bool aliased = false;
    for (size_t a = 0; alias != nullptr && a < n && !aliased; ++a) {
      const auto* arg_alias = schema.arguments()[a].alias_info();
      if (arg_alias != nullptr && arg_alias->beforeSets() == alias->beforeSets()) {
        // An out= tensor takes the result's shape, as the CPU kernel resized its copy.
        if (out.isTensor() && originals[a].isTensor() &&
            originals[a].toTensor().sizes() != out.toTensor().sizes())
          originals[a].toTensor().resize_(out.toTensor().sizes());
        out = originals[a];
        aliased = true;
      }
    }
    if (!aliased) {
      out = map_tensors(out, [](const at::Tensor& t) {
        return t.device().is_cpu()
                   ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta))
                   : t;
      });
    }
  }
}

// Meta kernels added by the rehearsal, kept for the process: each replaces only the error that
// LibTorch raises for an operator without one.
std::mutex g_library_mutex;
std::unordered_set<c10::OperatorName> g_given_shapes;

bool give_meta_kernel(const c10::OperatorName& name) {
  std::lock_guard<std::mutex> lock(g_library_mutex);
  if (!g_given_shapes.insert(name).second)
    return false;
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
  const std::string qualified =
      name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&shapes_from_cpu>());
  ++g_shape_fallbacks;
  return true;
}

// The operator named at the start of LibTorch's "no meta kernel" message, if it is that error.
std::optional<c10::OperatorName> operator_without_meta_kernel(const std::string& message) {
  const auto end = message.find(": attempted to run this operator with Meta tensors");
  if (end == std::string::npos)
    return std::nullopt;
  const std::string full = message.substr(0, end);
  const auto dot = full.find('.', full.find("::"));
  if (dot == std::string::npos)
    return c10::OperatorName(full, "");
  return c10::OperatorName(full.substr(0, dot), full.substr(dot + 1));
}

void redispatch(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const auto below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kRehearsalKey);
  const auto n = op.schema().arguments().size();
  const auto base = stack->size() - n;
  const std::vector<c10::IValue> arguments(stack->end() - static_cast<std::ptrdiff_t>(n),
                                           stack->end());
  try {
    op.redispatchBoxed(below, stack);
  } catch (const c10::NotImplementedError& e) {
    const auto missing = operator_without_meta_kernel(e.what_without_backtrace());
    if (!missing || !give_meta_kernel(*missing))
      throw;
    stack->resize(base);
    stack->insert(stack->end(), arguments.begin(), arguments.end());
    op.redispatchBoxed(below, stack);
  }
}

void intercept(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const auto& schema = op.schema();
  const std::string& name = schema.name();
  const auto n = schema.arguments().size();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);

  if (name == "aten::_has_compatible_shallow_copy_type") {
    // set_data asks this before it moves a tensor's data in place. CPU and CUDA tensors are
    // compatible; meta stands for CUDA here, so .to() and set_data move in place as on a GPU.
    const at::Tensor& self = first[0].toTensor();
    const at::Tensor& from = first[1].toTensor();
    if (self.device() != from.device() && (self.is_meta() || from.is_meta()) &&
        (self.is_cpu() || from.is_cpu()) && self.layout() == at::kStrided &&
        from.layout() == at::kStrided) {
      torch::jit::drop(*stack, n);
      stack->emplace_back(true);
      return;
    }
  } else if (name == "aten::_local_scalar_dense" || name == "aten::item") {
    const at::Tensor& self = first[0].toTensor();
    if (self.is_meta()) {
      const auto value = substituted_scalar(self);
      torch::jit::drop(*stack, n);
      stack->emplace_back(value);
      return;
    }
  } else if (name == "aten::copy_") {
    // A copy to the host of a meta tensor (what .cpu() and .to("cpu") end in): the destination
    // stays a CPU tensor, of zeros, since the GPU's values are not there to copy. Autograd has
    // recorded the copy above, so the backward's copy back to the device happens too.
    const at::Tensor& destination = first[0].toTensor();
    const c10::IValue& source = first[1];
    if (destination.device().is_cpu() && source.isTensor() && source.toTensor().is_meta()) {
      {
        c10::impl::ExcludeDispatchKeyGuard outside(kRehearsalKey);
        destination.zero_();
      }
      c10::IValue result = first[0];
      torch::jit::drop(*stack, n);
      stack->push_back(std::move(result));
      return;
    }
  } else if (name != "aten::to" && name != "aten::_to_copy") {
    bool on_meta = false;
    std::vector<at::Tensor> on_host;
    for (auto it = first; it != stack->end(); ++it) {
      detail::for_each_tensor(*it, [&](const at::Tensor& t) {
        on_meta = on_meta || t.is_meta();
        if (is_host_tensor(t))
          on_host.push_back(t);
      });
    }
    // The trace has named this operation already (its callbacks run before any kernel).
    if (on_meta) {
      for (const auto& t : on_host)
        move_to_meta_in_place(t);
    }
  }
  redispatch(op, keys, stack);
}

std::once_flag g_registered;

void register_interception() {
  static auto* library =
      new torch::Library(torch::Library::IMPL, "_", kRehearsalKey, __FILE__, __LINE__);
  library->fallback(torch::CppFunction::makeFromBoxedFunction<&intercept>());
}

thread_local bool t_rehearsing = false;

} // namespace

MetaRehearsal::MetaRehearsal() {
  TORCH_CHECK(!t_rehearsing, "MetaRehearsal: this thread is already in a rehearsal");
  std::call_once(g_registered, register_interception);
  c10::impl::tls_set_dispatch_key_included(kRehearsalKey, true);
  t_rehearsing = true;
}

MetaRehearsal::~MetaRehearsal() {
  c10::impl::tls_set_dispatch_key_included(kRehearsalKey, false);
  t_rehearsing = false;
}

bool MetaRehearsal::active() {
  return c10::impl::tls_is_dispatch_key_included(kRehearsalKey);
}

int64_t MetaRehearsal::shape_fallbacks() {
  return g_shape_fallbacks.load();
}

} // namespace kan::diagnostics
