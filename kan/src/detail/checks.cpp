#include "detail/checks.h"

#include "detail/saturate.h"
#include "kan/nn/layer.h"
#include "kan/nn/memory.h"

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>

namespace kan::detail {

void check_model_dtype(torch::Dtype dtype) {
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kFloat64,
              "dtype must be float32 or float64, got ", dtype);
}

void check_points(const torch::Tensor& x, const char* what, int64_t in_dim, torch::Dtype dtype,
                  torch::Device device) {
  TORCH_CHECK(x.defined(), what, " is an undefined tensor");
  TORCH_CHECK(x.dim() == 2, what, " must be 2-D (N, ", in_dim, "), got shape ", x.sizes());
  TORCH_CHECK(x.is_floating_point(), what, " must be floating point (", to_string(dtype),
              "), got dtype ", to_string(x.scalar_type()));
  TORCH_CHECK(x.size(1) == in_dim, what, " has ", x.size(1),
              " columns but the model's input width is ", in_dim);
  TORCH_CHECK(x.scalar_type() == dtype, what, " has dtype ", to_string(x.scalar_type()),
              " but the model is ", to_string(dtype), ": convert one of them");
  TORCH_CHECK(x.device() == device, what, " is on ", x.device(), " but the model is on ", device,
              ": move the data (x.to(", device, ")) or the model (model->to(", x.device(),
              ")); kanbench never moves either silently");
}

namespace {

// Whether every element of a contiguous float or double CPU tensor is finite, by one loop: the
// four tensor operations of the general test cost more than the loop on a small model's
// activations (a tenth of its grid update).
template <typename T> bool all_finite(const T* v, int64_t n) {
  bool finite = true;
  for (int64_t j = 0; j < n; ++j)
    finite &= std::isfinite(v[j]);
  return finite;
}

} // namespace

void check_finite(const torch::Tensor& t, const std::string& what, const char* hint) {
  if (t.is_cpu() && t.is_contiguous() &&
      ((t.scalar_type() == at::kDouble && all_finite(t.const_data_ptr<double>(), t.numel())) ||
       (t.scalar_type() == at::kFloat && all_finite(t.const_data_ptr<float>(), t.numel()))))
    return;
  const auto bad = torch::logical_not(torch::isfinite(t)).sum().item<int64_t>();
  if (bad == 0)
    return;
  const auto nan = torch::isnan(t).sum().item<int64_t>();
  TORCH_CHECK(false, what, " contains ", nan, " NaN and ", bad - nan, " Inf values (shape ",
              t.sizes(), "); ", hint);
}

bool is_out_of_memory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr)
    return true;
  // The CPU allocator's words differ between LibTorch versions.
  for (const char* words :
       {"not enough memory", "can't allocate memory", "Cannot allocate memory"}) {
    if (e.msg().find(words) != std::string::npos)
      return true;
  }
  return false;
}

std::string layer_size(const KANLayerOptions& o) {
  const int64_t M = sat_add(o.grid(), o.k());
  std::ostringstream s;
  s << o.in_dim() << " -> " << o.out_dim() << ", coef " << o.in_dim() << " x " << o.out_dim()
    << " x " << M << " " << kan::to_string(o.dtype()) << " = "
    << format_bytes(
           sat_mul(o.in_dim(), o.out_dim(), M, static_cast<int64_t>(c10::elementSize(o.dtype()))))
    << " on " << o.device();
  return s.str();
}

BuildOutOfMemory::BuildOutOfMemory(const std::string& message, std::string cause)
    : c10::OutOfMemoryError(
          c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message),
      cause_(std::move(cause)) {}

void throw_out_of_memory(const std::string& what, const std::string& cause) {
  throw BuildOutOfMemory("out of memory while building " + what + ": " + cause +
                             "; use a smaller width or grid, float32, or a device with more memory",
                         cause);
}

} // namespace kan::detail
