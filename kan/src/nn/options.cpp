#include "kan/nn/options.h"

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

std::string to_string(BaseFunction f) {
  switch (f) {
  case BaseFunction::kSiLU:
    return "silu";
  case BaseFunction::kIdentity:
    return "identity";
  case BaseFunction::kZero:
    return "zero";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown BaseFunction ", static_cast<int>(f));
}

BaseFunction base_function_from_string(const std::string& name) {
  if (name == "silu")
    return BaseFunction::kSiLU;
  if (name == "identity")
    return BaseFunction::kIdentity;
  if (name == "zero")
    return BaseFunction::kZero;
  TORCH_CHECK(false, "base_fun must be one of silu, identity, zero; got '", name, "'");
}

std::string to_string(SplineBackend b) {
  switch (b) {
  case SplineBackend::kReference:
    return "reference";
  case SplineBackend::kFused:
    return "fused";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown SplineBackend ", static_cast<int>(b));
}

SplineBackend spline_backend_from_string(const std::string& name) {
  if (name == "reference")
    return SplineBackend::kReference;
  if (name == "fused")
    return SplineBackend::kFused;
  TORCH_CHECK(false, "backend must be one of reference, fused; got '", name, "'");
}

} // namespace kan
