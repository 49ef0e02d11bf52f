#pragma once
/// Symbolic edges of a KAN (pykan's symbolic branch; docs/kan.md, "Symbolic edges" and
/// "Formulas"): operations over a KAN, each a free function of the model, as pruning's
/// (kan/nn/pruning.h). The model keeps each edge's symbolic state (KANLayer); these choose,
/// fit and read it.

#include "kan/nn/network.h"
#include "kan/symbolic/expression.h"
#include "kan/symbolic/symbolic.h"

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan {

/// One library function fitted to one edge (suggest_symbolic's ranking, best first).
struct SymbolicSuggestion {
  std::string name;
  double r2;          ///< pykan's R^2 of the fit (-1e8 for an edge with no numeric part)
  int64_t complexity; ///< the function's complexity
  /// pykan's loss: weight_simple * complexity + (1 - weight_simple) * log2(1 + 1e-5 - r2).
  double loss;
};

/// What auto_symbolic chose for one edge i -> j of layer `layer`.
struct SymbolicChoice {
  size_t layer;
  int64_t i, j;
  std::string name; ///< the best function ("0" for a pruned edge)
  double r2;        ///< its R^2 (-1e8 for a pruned edge, as pykan)
  bool fixed;       ///< false when r2 was below the threshold: the edge stays numeric
};

// Symbolic edges (pykan's symbolic branch; docs/kan.md, "Symbolic edges"). Edges are (l, i, j):
// layer l's input i -> output (subnode) j. Samples x are the network's inputs (N, width[0]):
// a fit uses edge i -> j's input and its whole activation (numeric + symbolic) on them, as
// pykan's uses the last forward's.

/// pykan's set_mode: "n" numeric (numeric mask 1, symbolic 0), "s" symbolic (0, 1), "sn" or
/// "ns" both (numeric mask `numeric_mask`, default 1; symbolic 1). Another mode is an error.
void set_mode(KANImpl& model, size_t l, int64_t i, int64_t j, const std::string& mode,
              std::optional<double> numeric_mask = std::nullopt);
/// Makes edge (l, i, j) symbolic with library function `name` (set_mode "s"). With samples x,
/// its a, b, c, d are fitted (fit_symbolic_params) and pykan's R^2 is returned (-1e8 for an
/// edge that was symbolic only, as pykan); without, they are 1, 0, 1, 0 and nothing is
/// returned. A pruned edge (both masks 0) cannot be fitted: an error.
std::optional<double> fix_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j,
                                   const std::string& name, const torch::Tensor& x = {},
                                   const SymbolicFitOptions& options = {});
/// Makes edge (l, i, j) numeric again (set_mode "n", function "0"), as pykan.
void unfix_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j);
/// Fits every function of `lib` to edge (l, i, j) on samples x and ranks them by pykan's loss
/// (ties keep lib's order); the best `topk`. `model` is not changed.
///
/// Example:
///   auto ranked = kan::suggest_symbolic(*model, 0, 1, 0, x);   // ranked[0].name == "sin", ...
std::vector<SymbolicSuggestion>
suggest_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j, const torch::Tensor& x,
                 const std::vector<std::string>& lib = symbolic_function_names(), int64_t topk = 5,
                 double weight_simple = 0.8, const SymbolicFitOptions& options = {});
/// pykan's auto_symbolic: every edge with a numeric part gets the best function of `lib` (as
/// suggest_symbolic) when its R^2 >= r2_threshold; pruned edges get "0"; symbolic-only edges
/// stay. One fit_symbolic_params call per function and layer for all of its edges. Returns the
/// choice for every edge it considered.
std::vector<SymbolicChoice>
auto_symbolic(KANImpl& model, const torch::Tensor& x,
              const std::vector<std::string>& lib = symbolic_function_names(),
              double weight_simple = 0.8, double r2_threshold = 0.0,
              const SymbolicFitOptions& options = {});
/// pykan's symbolic_formula: the network as one expression per output in the inputs x1, x2,
/// ... (docs/kan.md, "Formulas"). Each edge with a symbolic mask contributes mask *
/// (c f(a x + b) + d); then the subnode affine maps, the multiplication nodes and the node
/// affine maps. An edge with a numeric part (numeric mask != 0) is an error naming it: no
/// formula could reproduce it. Evaluating the result (Expression::evaluate, or its sympy text
/// with digits < 0) reproduces forward() up to rounding. Reads the symbolic state on the host.
///
/// Example:
///   kan::auto_symbolic(*model, x, {"x", "x^2", "sin", "exp"});
///   kan::symbolic_formula(*model)[0].sympy(4);   // "1.0*exp(1.0*x2^2 + 1.0*sin(3.1416*x1))"
std::vector<Expression> symbolic_formula(const KANImpl& model);

} // namespace kan
