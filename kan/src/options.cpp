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

} // namespace kan
