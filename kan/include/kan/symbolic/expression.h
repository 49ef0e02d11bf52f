#pragma once
/// Formulas over a network's inputs in the symbolic library's functions (docs/kan.md, "Formulas"):
/// built with constant folding, printed for SymPy and as LaTeX, evaluated with LibTorch.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kan {

/// An immutable expression: constants, the inputs x1, x2, ... (pykan's names), sums, products
/// and library functions (kan/symbolic/symbolic.h). Sums and products fold their constants as they
/// are built: 0 and 1 vanish, a product with 0 is 0, nested sums and products flatten.
///
/// Example:
///   using kan::Expression;
///   auto e = Expression::constant(2.0) *
///            Expression::function("sin", Expression::constant(3.14) * Expression::input(0)) +
///            Expression::constant(1.0);
///   e.sympy(2);   // "2.0*sin(3.14*x1) + 1.0"
///   e.evaluate(x) // x (N, inputs) -> (N)
class Expression {
public:
  static Expression constant(double value);
  /// Input `index` (0-based), printed x{index + 1}.
  static Expression input(int64_t index);
  /// A library function of `argument`; an unknown name is an error listing the library. Constants
  /// move out of it where an identity allows: (c u)^p = c^p u^p for the integer powers,
  /// f(-u) = f(u) or -f(u) for the even and odd functions, exp(u + k) = e^k exp(u).
  static Expression function(const std::string& name, Expression argument);

  friend Expression operator+(const Expression& a, const Expression& b);
  friend Expression operator*(const Expression& a, const Expression& b);

  /// Whether this is a constant, and its value.
  bool is_constant() const;
  double value() const;

  /// The expression's values at x (N, inputs), in x's dtype and on its device: (N).
  torch::Tensor evaluate(const torch::Tensor& x) const;

  /// Text that sympy.sympify parses: rounded(digits) (pykan's ex_round), or every constant with
  /// all 17 significant digits when digits < 0.
  std::string sympy(int digits = -1) const;
  /// The same as LaTeX.
  std::string latex(int digits = 4) const;

  /// The same expression with every constant rounded to `digits` decimal places (and folded
  /// again: a constant that rounds to 0 vanishes).
  Expression rounded(int digits) const;

  struct Node; ///< the tree's node (kan/src/symbolic/expression.cpp); an Expression shares its
               ///< children

private:
  explicit Expression(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  static bool leads_with_minus(const Expression& e);
  Expression rounded_once(int digits) const;
  std::string print(bool latex, int digits) const;
  std::shared_ptr<const Node> node_;
};

} // namespace kan
