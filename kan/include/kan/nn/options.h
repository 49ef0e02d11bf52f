#pragma once
/// Small option types shared by the KAN layer and network.

#include "kan/io/enum_names.h"
#include <c10/core/ScalarType.h>

#include <array>
#include <string>

namespace kan {

/// A dtype as kanbench spells it everywhere (checkpoints, fit.json, results.json, the command
/// line): "float32", "float64", "float16", "bfloat16"; other types as LibTorch names them.
std::string to_string(c10::ScalarType dtype);
/// Parses "float32", "float64", "float16" or "bfloat16"; anything else is an error naming it.
c10::ScalarType dtype_from_string(const std::string& name);

/// The base branch b(x) of every edge.
enum class BaseFunction { kSiLU, kIdentity, kZero };

/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<BaseFunction> kBaseFunctionNames[] = {
    {BaseFunction::kSiLU, "silu"},
    {BaseFunction::kIdentity, "identity"},
    {BaseFunction::kZero, "zero"}};
std::string to_string(BaseFunction value);
/// Parses "silu", "identity" or "zero"; anything else is an error naming the value.
BaseFunction base_function_from_string(const std::string& name);

/// How a KAN layer evaluates its splines (docs/kan.md, "One KAN layer").
///  - kReference: the Cox-de Boor recursion as whole-tensor ATen ops and one matrix product over
///    I * (G + k) columns; materialises (N, I, G + k) tensors. The correctness oracle.
///  - kFused: per (sample, input), the knot span and its k + 1 non-zero basis functions only,
///    in custom kernels with their own backward; memory does not grow with G.
enum class SplineBackend { kReference, kFused };

/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<SplineBackend> kSplineBackendNames[] = {
    {SplineBackend::kReference, "reference"}, {SplineBackend::kFused, "fused"}};
std::string to_string(SplineBackend value);
/// Parses "reference" or "fused"; anything else is an error naming the value.
SplineBackend spline_backend_from_string(const std::string& name);

/// The interval [a, b] that the initial uniform grid covers.
using GridRange = std::array<double, 2>;

} // namespace kan
