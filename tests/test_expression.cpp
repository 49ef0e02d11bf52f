// Formulas (kan/symbolic/expression.h): folding, SymPy and LaTeX text, evaluation; every
// composition of two library functions read back by SymPy (where the torch virtual environment's
// Python is).
#include "kan/symbolic/expression.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <sys/wait.h>
#include <torch/version.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  // Constants beyond the finite numbers by SymPy's names (it reads "inf" as a symbol).
  EXPECT_EQ((E::function("1/x", E::constant(0)) * E::input(0)).sympy(), "oo*x1");
  EXPECT_EQ((E::function("1/x", E::constant(0)) * E::input(0)).latex(), "\\infty x_{1}");
  EXPECT_EQ(E::constant(-INFINITY).sympy(), "-oo");
  EXPECT_EQ(E::function("log", E::constant(-1)).sympy(), "nan");
}

TEST(Expression, ComposedFunctionsKeepTheirParentheses) {
  const auto x1 = E::input(0);
  const auto of = [](const char* g, const char* f, const E& u) {
    return E::function(g, E::function(f, u));
  };
  // ** groups from the right: x1**3**2 is x1**9.
  EXPECT_EQ(of("x^2", "x^3", x1).sympy(), "(x1**3)**2");
  EXPECT_EQ(of("x^2", "x^3", x1).latex(), "\\left(x_{1}^{3}\\right)^{2}");
  EXPECT_EQ(of("1/x", "1/x", x1).sympy(), "1/(1/x1)");
  EXPECT_EQ(of("gaussian", "x^3", x1).sympy(), "exp(-(x1**3)**2)");
  EXPECT_EQ(of("x^2", "x^1.5", x1).sympy(), "(sqrt(x1)**3)**2");
  EXPECT_EQ(of("x^2", "1/x", x1).sympy(), "(1/x1)**2");
  EXPECT_EQ(of("1/x^2", "exp", x1).sympy(), "exp(x1)**(-2)");
  // Where precedence allows, none: a call as a base, a power as a divisor, anything in a call.
  EXPECT_EQ(of("x^2", "sin", x1).sympy(), "sin(x1)**2");
  EXPECT_EQ(of("1/x", "x^2", x1).sympy(), "1/x1**2");
  EXPECT_EQ(of("1/sqrt(x)", "x^3", x1).sympy(), "1/sqrt(x1**3)");
  EXPECT_EQ(of("x^1.5", "1/x", x1).sympy(), "sqrt(1/x1)**3");
  // Sums, products and negations as arguments.
  EXPECT_EQ(E::function("x^2", x1 + E::constant(1)).sympy(), "(x1 + 1)**2");
  EXPECT_EQ(E::function("x^2", x1 * E::input(1)).sympy(), "(x1*x2)**2");
  EXPECT_EQ(E::function("1/x", x1 * E::input(1)).sympy(), "1/(x1*x2)");
  EXPECT_EQ(E::function("gaussian", E::constant(-1) * x1 + E::constant(2)).sympy(),
            "exp(-(x1 - 2)**2)");
  EXPECT_EQ(E::function("x^1.5", E::constant(-2) * x1).sympy(), "sqrt(-2*x1)**3");
  EXPECT_EQ(E::function("x^2", E::constant(1.5e-7) * x1 + E::constant(-1)).sympy(),
            "(1.4999999999999999e-07*x1 - 1)**2");
}

// 1.3 g(c f(0.9 x1 + 0.2)) - 0.4, as a two-layer model's formula composes its edges.
E composition(const std::string& f, const std::string& g, double c) {
  const auto inner = E::constant(0.9) * E::input(0) + E::constant(0.2);
  return E::constant(1.3) * E::function(g, E::constant(c) * E::function(f, inner)) +
         E::constant(-0.4);
}

struct Composition {
  std::string label; // "g(f)"
  E formula;
};

// Every composition of two of pykan's library functions, the scale c of the inner one 0.7 and
// -0.7 in turn (so that each function meets both signs).
std::vector<Composition> every_composition() {
  const auto library = test::load_reference("symbolic_library.json")["functions"];
  std::vector<std::string> names;
  for (const auto& [name, unused] : library.items())
    names.push_back(name);
  std::vector<Composition> all;
  for (const auto& f : names)
    for (const auto& g : names)
      all.push_back({g + "(" + f + ")", composition(f, g, all.size() % 2 ? -0.7 : 0.7)});
  return all;
}

// The torch virtual environment's Python (tools/setup.sh makes it, with SymPy): $KANBENCH_VENV,
// else ~/.cache/kanbench/venv-torch-<LibTorch's version>; "" where there is none.
std::string venv_python() {
  namespace fs = std::filesystem;
  const char* venv = std::getenv("KANBENCH_VENV");
  const char* home = std::getenv("HOME");
  const fs::path root = venv && *venv ? fs::path(venv)
                                      : fs::path(home && *home ? home : "/root") / ".cache" /
                                            "kanbench" / ("venv-torch-" TORCH_VERSION);
  const auto python = root / "bin" / "python";
  return fs::exists(python) ? python.string() : "";
}

// Reads the first line of `path` (points), then one SymPy text per line; writes per text its
// values at the points ("nan" outside the real domain), one line each. Exit status 77: no SymPy.
constexpr const char* kSympyEvaluator = R"(import sys
try:
    import mpmath, sympy
except ImportError:
    sys.exit(77)
x1 = sympy.Symbol('x1')
lines = open(sys.argv[1]).read().splitlines()
points = [mpmath.mpf(float(p)) for p in lines[0].split()]
def value(f, p):
    try:
        v = complex(f(p))
    except (ZeroDivisionError, ValueError, OverflowError):
        return 'nan'
    return repr(v.real) if v.imag == 0 else 'nan'
for text in lines[1:]:
    try:
        f = sympy.lambdify(x1, sympy.sympify(text), 'mpmath', docstring_limit=0)
        print(' '.join(value(f, p) for p in points))
    except Exception as e:
        sys.exit(f'{text}: {type(e).__name__}: {e}')
)";

TEST(Expression, EveryCompositionReadsTheSameInSympy) {
  const auto python = venv_python();
  if (python.empty())
    GTEST_SKIP() << "no torch virtual environment's Python (tools/setup.sh; $KANBENCH_VENV) to "
                    "read the formulas with SymPy";
  const std::vector<double> points{-2.3, -1.1, -0.45, -0.05, 0.15, 0.6, 1.3, 2.7};
  const auto all = every_composition();
  test::TempDir dir("kan_expression_sympy");
  {
    std::ofstream script(dir / "evaluate.py");
    script << kSympyEvaluator;
    std::ofstream formulas(dir / "formulas.txt");
    formulas.precision(17);
    for (const double p : points)
      formulas << p << ' ';
    formulas << '\n';
    for (const auto& c : all)
      formulas << c.formula.sympy() << '\n';
  }
  const auto quoted = [&](const std::string& file) { return "'" + (dir / file) + "'"; };
  const auto command = "'" + python + "' " + quoted("evaluate.py") + " " + quoted("formulas.txt") +
                       " > " + quoted("values.txt") + " 2> " + quoted("errors.txt");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  if (WEXITSTATUS(status) == 77)
    GTEST_SKIP() << python << " has no SymPy";
  std::ifstream errors(dir / "errors.txt");
  ASSERT_EQ(WEXITSTATUS(status), 0) << command << "\n" << errors.rdbuf();

  const auto x = torch::tensor(points, torch::kFloat64).unsqueeze(1);
  std::ifstream values(dir / "values.txt");
  int64_t compared = 0;
  for (const auto& c : all) {
    std::string line;
    ASSERT_TRUE(std::getline(values, line)) << "SymPy gave no values for " << c.label;
    std::istringstream read(line);
    const auto ours = c.formula.evaluate(x);
    std::string mismatches;
    for (size_t p = 0; p < points.size(); ++p) {
      std::string word;
      read >> word;
      const double theirs = std::strtod(word.c_str(), nullptr);
      const double mine = ours[static_cast<int64_t>(p)].item<double>();
      if (!std::isfinite(theirs) || !std::isfinite(mine))
        continue; // outside the functions' domains, or beyond float64
      ++compared;
      if (std::abs(mine - theirs) > 1e-9 * std::max(1.0, std::abs(theirs)))
        mismatches += " x1 = " + std::to_string(points[p]) + ": " + std::to_string(mine) +
                      " but SymPy " + std::to_string(theirs) + ";";
    }
    EXPECT_EQ(mismatches, "") << c.label << ": " << c.formula.sympy();
  }
  // Most points are inside every domain: the comparison is not vacuous.
  EXPECT_GT(compared, static_cast<int64_t>(all.size() * points.size() / 2));
}

// What makes `latex` ill-formed: unbalanced braces or \left ... \right, a ^ or _ without braces,
// or a second superscript on one base (x_{1}^{3}^{2}); "" when none.
std::string latex_problem(const std::string& latex) {
  int braces = 0, delimiters = 0;
  for (size_t at = 0; at < latex.size(); ++at) {
    const char c = latex[at];
    if (c == '{' || c == '}') {
      braces += c == '{' ? 1 : -1;
      if (braces < 0)
        return "a } closes nothing at " + std::to_string(at);
    } else if ((c == '^' || c == '_') && (at + 1 == latex.size() || latex[at + 1] != '{')) {
      return std::string(1, c) + " without braces at " + std::to_string(at);
    } else if (latex.compare(at, 6, "\\left(") == 0 || latex.compare(at, 6, "\\left|") == 0) {
      ++delimiters;
    } else if (latex.compare(at, 7, "\\right)") == 0 || latex.compare(at, 7, "\\right|") == 0) {
      if (--delimiters < 0)
        return "a \\right closes nothing at " + std::to_string(at);
    }
    if (c == '^') { // the superscript's group may not be followed by another superscript
      int depth = 0;
      size_t end = at + 1;
      do
        depth += latex[end] == '{' ? 1 : latex[end] == '}' ? -1 : 0;
      while (depth > 0 && ++end < latex.size());
      if (end + 1 < latex.size() && latex[end + 1] == '^')
        return "a double superscript at " + std::to_string(end + 1);
    }
  }
  if (braces != 0 || delimiters != 0)
    return "unbalanced braces or delimiters";
  return "";
}

TEST(Expression, EveryCompositionIsWellFormedLatex) {
  EXPECT_NE(latex_problem("x_{1}^{3}^{2}"), "");
  EXPECT_NE(latex_problem("\\left(x_{1}"), "");
  EXPECT_NE(latex_problem("e^{x_{1}}}"), "");
  for (const auto& c : every_composition())
    for (const int digits : {4, -1})
      EXPECT_EQ(latex_problem(c.formula.latex(digits)), "")
          << c.label << ": " << c.formula.latex(digits);
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
