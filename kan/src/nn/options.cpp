#include "kan/nn/options.h"

#include "detail/parse_name.h"

#include <c10/util/Exception.h>

namespace kan {

std::string to_string(c10::ScalarType dtype) {
  switch (dtype) {
  case c10::kFloat:
    return "float32";
  case c10::kDouble:
    return "float64";
  case c10::kHalf:
    return "float16";
  case c10::kBFloat16:
    return "bfloat16";
  default:
    return c10::toString(dtype);
  }
}

c10::ScalarType dtype_from_string(const std::string& name) {
  for (const auto dtype : {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16}) {
    if (name == to_string(dtype))
      return dtype;
  }
  TORCH_CHECK(false, "dtype must be one of float32, float64, float16, bfloat16; got '", name, "'");
}

std::string to_string(BaseFunction value) {
  return io::name_of(value, kBaseFunctionNames);
}

BaseFunction base_function_from_string(const std::string& name) {
  return detail::parse_name(name, kBaseFunctionNames, "base_fun");
}

std::string to_string(SplineBackend value) {
  return io::name_of(value, kSplineBackendNames);
}

SplineBackend spline_backend_from_string(const std::string& name) {
  return detail::parse_name(name, kSplineBackendNames, "backend");
}

} // namespace kan
