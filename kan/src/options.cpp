#include "kan/options.h"

#include <c10/util/Exception.h>

namespace kan {

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
