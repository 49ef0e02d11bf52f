#pragma once
/// pykan 0.2.8's symbolic library and its fit of c * f(a * x + b) + d to an edge's activation
/// (docs/kan.md, "Symbolic functions"), on any device, for many edges at once.

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kan {

/// One library function f.
struct SymbolicFunction {
  std::string name;   ///< pykan's name: "sin", "x^2", "1/sqrt(x)", ...
  int64_t complexity; ///< pykan's c: what suggest_symbolic weighs against R^2
  /// f itself, elementwise (NaN where f is undefined, as pykan's torch function).
  std::function<torch::Tensor(const torch::Tensor&)> f;
  /// pykan's singularity-avoiding f: near a pole or outside the domain, a finite continuation
  /// that reaches y_th (used in training with singularity avoidance).
  std::function<torch::Tensor(const torch::Tensor&, double y_th)> f_avoiding;
  /// f applied to the text of its argument, as SymPy reads it and as LaTeX: "sin({})".
  std::string sympy;
  std::string latex;
  /// What a formula's simplification may use (kan/symbolic/expression.h): f(-u) = f(u) (kEven) or
  /// -f(u) (kOdd); and for f(u) = u^power with an integer power != 0 (x^2; 1/x^3: -3),
  /// f(c u) = c^power f(u).
  enum class Parity { kNone, kEven, kOdd };
  Parity parity = Parity::kNone;
  int power = 0;
};

/// The library function `name`; an unknown name is an error listing the known ones.
const SymbolicFunction& symbolic_function(const std::string& name);
/// Every library name, pykan's order first, then added ones.
std::vector<std::string> symbolic_function_names();
/// Adds (or replaces) a function. An empty name, a negative complexity or a missing f is an
/// error. f_avoiding defaults to f; sympy and latex default to "name({})".
void add_symbolic_function(SymbolicFunction function);

/// How fit_symbolic_params searches (pykan's fit_params arguments).
struct SymbolicFitOptions {
  std::array<double, 2> a_range{-10.0, 10.0};
  std::array<double, 2> b_range{-10.0, 10.0};
  int64_t grid_number = 101; ///< grid points along a and along b
  int64_t iterations = 3;    ///< searches: the first on the whole ranges, then zoom-ins
  /// Grid points along a and b of the zoomed searches; 0: grid_number, as pykan. The zoomed
  /// searches are per edge, and where a deep model's time goes: a smaller grid with more
  /// iterations (21 and 5 reach a finer final step than pykan's 101 and 3, in a ninth of the
  /// work) trades pykan's exact grid points for speed.
  int64_t zoom_grid_number = 0;
  /// Safeguarded Newton steps on (a, b) after the searches; 0: none, as pykan. Each maximises
  /// R^2's quadratic model (derivatives by autograd) within a box that starts at the last grid's
  /// step and is kept only where R^2 grows, so the fit is never worse than the searches'. With
  /// iterations = 1 they replace the per-edge zoomed searches by a few passes over (N, E) and
  /// reach R^2's maximum to rounding.
  int64_t newton_steps = 0;
  /// Bound on the search's working memory: edges are searched in groups that fit.
  int64_t memory_budget = int64_t{512} << 20;
};

/// The named searches of `kanbench fit --symbolic-search`: "pykan" (pykan's: 101 x 101 points, 3
/// searches), "zoom" (101 points first, then 21 per zoomed search, 5 searches: a finer final step
/// in a ninth of the per-edge work) and "newton" (the first search, then 10 safeguarded Newton
/// steps: R^2's maximum to rounding, several times faster on deep models). An unknown name is an
/// error listing them.
SymbolicFitOptions symbolic_search(const std::string& name);
/// "pykan", "zoom", "newton".
const std::vector<std::string>& symbolic_search_names();

/// The fit of c * f(a * x + b) + d to y, per edge.
struct SymbolicFit {
  torch::Tensor params; ///< (E, 4): a, b, c, d
  torch::Tensor r2;     ///< (E): pykan's R^2 of f(a x + b) against y
};

/// pykan's fit_params for E edges at once: x and y (N, E), column e one edge's inputs and
/// activations. (a, b) by a grid search over a_range x b_range, zoomed in `iterations` times
/// around the best point (pykan's R^2 = cov^2 / (var * var + 1e-4), NaN counted as 0; at the
/// border of the grid only that dimension zooms); (c, d) by least squares of y on f(a x + b)
/// (c = 0 where f(a x + b) is constant). On x's device and dtype; N >= 1.
SymbolicFit fit_symbolic_params(const torch::Tensor& x, const torch::Tensor& y,
                                const SymbolicFunction& function,
                                const SymbolicFitOptions& options = {});
/// The same for edges that share inputs, as a layer's edges (i, 0..O-1) share input i: x is
/// (N, C), y (N, E) and column[e] is edge e's column of x. The first, widest search computes
/// f(a x + b) once per column, for all of its edges at once.
SymbolicFit fit_symbolic_params(const torch::Tensor& x, const std::vector<int64_t>& column,
                                const torch::Tensor& y, const SymbolicFunction& function,
                                const SymbolicFitOptions& options = {});

} // namespace kan
