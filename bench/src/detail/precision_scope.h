#pragma once
// A target's precision as a scope, shared by the runs of a case (suite.cpp) and the parity
// comparison of two targets (parity.cpp). Internal to kan::bench.

#include "kan/bench/suite.h"
#include "kan/nn/autocast.h"

#include <ATen/Context.h>

#include <optional>

namespace kan::bench::detail {

// A target's precision for a piece of work: TF32 matmuls for tf32 (a global mode of the
// context, restored after), autocast for bf16 and fp16 where `autocast` asks for it (fit() places
// its own autocast around forward passes, so a scope around training asks for TF32 alone).
class PrecisionScope {
public:
  PrecisionScope(const Target& t, bool autocast) {
    const auto p = t.effective_precision();
    if (p == Precision::kTF32) {
      previous_ = at::globalContext().allowTF32CuBLAS();
      at::globalContext().setAllowTF32CuBLAS(true);
    }
    if (autocast && (p == Precision::kBF16 || p == Precision::kFP16))
      autocast_.emplace(t.device.type(), autocast_dtype(p));
  }
  ~PrecisionScope() {
    if (previous_)
      at::globalContext().setAllowTF32CuBLAS(*previous_);
  }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

  static torch::Dtype autocast_dtype(Precision p) {
    return p == Precision::kFP16 ? torch::kHalf : torch::kBFloat16;
  }

private:
  std::optional<bool> previous_; ///< cuBLAS's TF32 setting before (tf32 targets)
  std::optional<AutocastGuard> autocast_;
};

} // namespace kan::bench::detail
