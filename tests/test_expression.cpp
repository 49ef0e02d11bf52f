// Formulas (kan/expression.h): folding, SymPy and LaTeX text, evaluation.
#include "kan/expression.h"
#include "test_util.h"

#include <ATen/ATen.h>

#include <cmath>

namespace kan {
namespace {

using E = Expression;

TEST(Expression, FoldsConstants) {
  EXPECT_EQ((E::constant(2) * E::constant(3)).value(), 6.0);
  EXPECT_EQ((E::input(0) * E::constant(0)).value(), 0.0);
  EXPECT_EQ((E::input(0) * E::constant(1)).sympy(), "x1");
  EXPECT_EQ((E::input(0) + E::constant(0)).sympy(), "x1");
  EXPECT_EQ((E::constant(1) + E::input(0) + E::constant(2)).sympy(), "x1 + 3");
  EXPECT_EQ((E::constant(2) * (E::input(1) * E::constant(0.5))).sympy(), "x2");
  EXPECT_EQ(E::function("x", E::input(0) + E::constant(1)).sympy(), "x1 + 1");
  EXPECT_EQ(E::function("0", E::input(0)).value(), 0.0);
  EXPECT_NEAR(E::function("sin", E::constant(M_PI / 2)).value(), 1.0, 1e-15);
}

TEST(Expression, PrintsForSympyAndLatex) {
  // pykan's toy formula, as hellokan finds it.
  const auto toy = E::function("exp", E::function("sin", E::constant(M_PI) * E::input(0)) +
                                          E::function("x^2", E::input(1)));
  EXPECT_EQ(toy.sympy(4), "exp(sin(3.1416*x1) + x2**2)");
  EXPECT_EQ(toy.sympy(), "exp(sin(3.1415926535897931*x1) + x2**2)");
  EXPECT_EQ(toy.latex(2), "e^{\\sin{\\left(3.14 x_{1}\\right)} + x_{2}^{2}}");

  const auto affine =
      E::constant(-0.5) * E::function("tanh", E::constant(2) * E::input(0) + E::constant(-1)) +
      E::constant(0.25);
  EXPECT_EQ(affine.sympy(), "-0.5*tanh(2*x1 - 1) + 0.25");
  EXPECT_EQ((E::constant(1) + affine * E::constant(-1)).sympy(), "0.5*tanh(2*x1 - 1) + 0.75");
  EXPECT_EQ((E::input(0) * (E::input(1) + E::constant(1))).sympy(), "x1*(x2 + 1)");
  EXPECT_EQ((E::input(0) * (E::input(1) + E::constant(1))).latex(),
            "x_{1} \\left(x_{2} + 1\\right)");
  EXPECT_EQ((E::input(0) + E::input(1) * E::constant(-3)).sympy(), "x1 - 3*x2");
  EXPECT_EQ(E::function("1/x", E::input(0) + E::constant(2)).sympy(), "1/(x1 + 2)");
}

TEST(Expression, RoundingFoldsAgain) {
  const auto e = E::constant(1.23456) * E::input(0) + E::constant(0.0004);
  EXPECT_EQ(e.rounded(2).sympy(), "1.23*x1");
  EXPECT_EQ(e.sympy(3), "1.235*x1"); // printed as rounded(3): the constant 0.0004 vanishes
  EXPECT_EQ((E::constant(0.004) * E::input(0)).rounded(2).value(), 0.0);
}

TEST(Expression, EvaluatesWithLibTorch) {
  torch::manual_seed(0);
  const auto x = torch::rand({50, 2}, torch::kFloat64) * 2 - 1;
  const auto e =
      E::constant(1.5) * E::function("exp", E::function("sin", E::constant(M_PI) * E::input(0)) +
                                                E::function("x^2", E::input(1))) +
      E::constant(-0.25) * E::input(0) * E::input(1);
  const auto expected =
      1.5 * torch::exp(torch::sin(M_PI * x.select(1, 0)) + x.select(1, 1).square()) -
      0.25 * x.select(1, 0) * x.select(1, 1);
  EXPECT_LE(test::max_abs_diff(e.evaluate(x), expected), 1e-14);
  EXPECT_EQ(e.evaluate(x.to(torch::kFloat32)).scalar_type(), torch::kFloat32);
  KAN_EXPECT_ERROR(E::input(2).evaluate(x), "uses x3 but x has 2 columns");
  KAN_EXPECT_ERROR(E::function("bessel", E::input(0)), "unknown symbolic function 'bessel'");
}

} // namespace
} // namespace kan
