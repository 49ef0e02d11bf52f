#pragma once
/// The KAN paper's function tables as reference functions: its 15 special functions (scipy.special
/// ones of two variables) and its 27 dimensionless Feynman equations. docs/functions.md lists
/// them with their domains and the choices made where the paper is silent.
///
/// Each function evaluates in float64 on the CPU, whatever tensor it is given, and returns the
/// result with the input's dtype and device; tests/test_function_catalogue.cpp checks every one
/// against SciPy (special functions) or numpy on pykan's formulas (Feynman equations) to 1e-12.
///
/// Example:
///   for (const auto& f : kan::special_functions())
///     auto data = kan::create_dataset(f.f, kan::DatasetOptions(f.n_var).ranges(f.ranges));

#include "kan/data/dataset.h"

#include <vector>

namespace kan {

/// The paper's special functions (group "special"): ellipj, ellipkinc, ellipeinc, jv, yv, kv,
/// iv, lpmv_0..2 and sph_harm_01, _11, _02, _12, _22, in the paper's table order.
const std::vector<ReferenceFunction>& special_functions();

/// The paper's dimensionless Feynman equations (group "feynman"), named feynman_<equation>
/// (feynman_I.6.2, ..., feynman_III.17.37), in the paper's table order.
const std::vector<ReferenceFunction>& feynman_functions();

/// The arXiv identifier and version of the KAN paper the catalogue follows.
inline constexpr const char kKanPaper[] = "arXiv:2404.19756";

} // namespace kan
