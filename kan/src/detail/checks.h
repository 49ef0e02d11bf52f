#pragma once
// Input validation shared by the layer, the network and fit(): every message names the
// tensor or option and its value.

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace kan::detail {

/// A model dtype must be float32 or float64.
void check_model_dtype(torch::Dtype dtype);

/// x must be a defined (N, in_dim) tensor of `dtype` on `device`; `what` names it.
void check_points(const torch::Tensor& x, const char* what, int64_t in_dim, torch::Dtype dtype,
                  torch::Device device);

/// Fails when t holds NaN or Inf, naming `what` and how many; `hint` says what to do.
void check_finite(const torch::Tensor& t, const std::string& what,
                  const char* hint = "clean the data before training");

/// "float32", "float64" (the names the command line uses), else LibTorch's name.
std::string dtype_name(torch::Dtype dtype);

} // namespace kan::detail
