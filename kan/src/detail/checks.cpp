#include "detail/checks.h"

#include <ATen/ATen.h>

namespace kan::detail {

void check_model_dtype(torch::Dtype dtype) {
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kFloat64,
              "dtype must be float32 or float64, got ", dtype);
}

void check_points(const torch::Tensor& x, const char* what, int64_t in_dim, torch::Dtype dtype,
                  torch::Device device) {
  TORCH_CHECK(x.defined(), what, " is an undefined tensor");
  TORCH_CHECK(x.dim() == 2, what, " must be 2-D (N, ", in_dim, "), got shape ", x.sizes());
  TORCH_CHECK(x.is_floating_point(), what, " must be floating point (", dtype, "), got dtype ",
              x.scalar_type());
  TORCH_CHECK(x.size(1) == in_dim, what, " has ", x.size(1),
              " columns but the model's input width is ", in_dim);
  TORCH_CHECK(x.scalar_type() == dtype, what, " has dtype ", x.scalar_type(), " but the model is ",
              dtype, ": convert one of them (x.to(", dtype, "))");
  TORCH_CHECK(x.device() == device, what, " is on ", x.device(), " but the model is on ", device,
              ": move the data (x.to(", device, ")) or the model (model->to(", x.device(),
              ")); kanbench never moves either silently");
}

void check_finite(const torch::Tensor& t, const std::string& what, const char* hint) {
  const auto bad = torch::logical_not(torch::isfinite(t)).sum().item<int64_t>();
  if (bad == 0)
    return;
  const auto nan = torch::isnan(t).sum().item<int64_t>();
  TORCH_CHECK(false, what, " contains ", nan, " NaN and ", bad - nan, " Inf values (shape ",
              t.sizes(), "); ", hint);
}

std::string dtype_name(torch::Dtype dtype) {
  if (dtype == torch::kFloat64)
    return "float64";
  if (dtype == torch::kFloat32)
    return "float32";
  return c10::toString(dtype);
}

} // namespace kan::detail
