#pragma once
/// Small option types shared by the KAN layer and network.

#include <array>
#include <string>

namespace kan {

/// The base branch b(x) of every edge.
enum class BaseFunction { kSiLU, kIdentity, kZero };

/// "silu", "identity" or "zero".
std::string to_string(BaseFunction f);
/// Parses "silu", "identity" or "zero"; anything else is an error naming the value.
BaseFunction base_function_from_string(const std::string& name);

/// The interval [a, b] that the initial uniform grid covers.
using GridRange = std::array<double, 2>;

} // namespace kan
