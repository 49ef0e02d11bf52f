#pragma once
// Input validation shared by the layer, the network and fit(): every message names the
// tensor or option and its value.

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace kan {
struct KANLayerOptions;
}

namespace kan::detail {

/// A model dtype must be float32 or float64.
void check_model_dtype(torch::Dtype dtype);

/// x must be a defined (N, in_dim) tensor of `dtype` on `device`; `what` names it.
void check_points(const torch::Tensor& x, const char* what, int64_t in_dim, torch::Dtype dtype,
                  torch::Device device);

/// Fails when t holds NaN or Inf, naming `what` and how many; `hint` says what to do.
void check_finite(const torch::Tensor& t, const std::string& what,
                  const char* hint = "clean the data before training");

/// Whether e is an allocation failure: c10::OutOfMemoryError (CUDA's caching allocator) or the
/// CPU allocator's "can't allocate memory" ("not enough memory" in older LibTorch).
bool is_out_of_memory(const c10::Error& e);

/// An allocation failure while building part of a model: the message names the part, cause()
/// keeps the allocator's own first line, so that an enclosing part can name itself instead.
class BuildOutOfMemory : public c10::OutOfMemoryError {
public:
  BuildOutOfMemory(const std::string& message, std::string cause);
  const std::string& cause() const noexcept { return cause_; }

private:
  std::string cause_;
};

/// A layer's size for messages: "2 -> 100000000, coef 2 x 100000000 x 8 float64 = 12.8 GB on cpu".
std::string layer_size(const KANLayerOptions& options);

/// Throws BuildOutOfMemory (a c10::OutOfMemoryError on every device, so that callers such as the
/// benchmark suite record a CPU allocation failure as "oom" like CUDA's): "out of memory while
/// building <what>: <cause>; <what to do>".
[[noreturn]] void throw_out_of_memory(const std::string& what, const std::string& cause);

} // namespace kan::detail
