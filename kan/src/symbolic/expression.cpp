#include "kan/symbolic/expression.h"

#include "kan/symbolic/symbolic.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace kan {

struct Expression::Node {
  enum class Kind { kConstant, kInput, kSum, kProduct, kFunction };
  Kind kind = Kind::kConstant;
  double value = 0;              // kConstant
  int64_t index = 0;             // kInput
  std::string name;              // kFunction
  std::vector<Expression> terms; // kSum, kProduct: the terms or factors; kFunction: the argument
};

using Kind = Expression::Node::Kind;

namespace {

// The template's first "{}" replaced by `argument`.
std::string fill(const std::string& pattern, const std::string& argument) {
  const auto at = pattern.find("{}");
  return at == std::string::npos ? pattern
                                 : pattern.substr(0, at) + argument + pattern.substr(at + 2);
}

// Whether the parenthesis at `at` groups (as in "({})**2" or "exp(-({})**2)") rather than
// opens a call ("sin({})") or a LaTeX argument ("\\sin{\\left({}\\right)}").
bool is_grouping(const std::string& pattern, size_t at) {
  if (at == 0)
    return true;
  const char before = pattern[at - 1];
  return !std::isalnum(static_cast<unsigned char>(before)) && before != '_' && before != '{';
}

// How tightly SymPy text binds outside its parentheses, by Python's grammar (which sympify
// parses), loosest first: "x1 + 1", "2*x1" or "1/x1", "-x1", "x1**2", then "x1", "2.5", "sin(x1)".
enum class Binding { kSum, kProduct, kNegation, kPower, kAtom };

// Whether the sign at `at` belongs to a number's exponent, as in "1.5e-07".
bool is_exponent_sign(const std::string& text, size_t at) {
  return at >= 2 && (text[at - 1] == 'e' || text[at - 1] == 'E') &&
         (std::isdigit(static_cast<unsigned char>(text[at - 2])) || text[at - 2] == '.');
}

Binding binding(const std::string& text) {
  auto loosest = Binding::kAtom;
  int depth = 0;
  bool after_operand = false; // a sign there is a sum's, else a negation's
  for (size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (c == '(' || c == ')') {
      depth += c == '(' ? 1 : -1;
      after_operand = c == ')';
      continue;
    }
    if (depth > 0 || c == ' ')
      continue;
    auto found = Binding::kAtom;
    if ((c == '+' || c == '-') && !is_exponent_sign(text, at)) {
      found = after_operand ? Binding::kSum : Binding::kNegation;
    } else if (text.compare(at, 2, "**") == 0) {
      found = Binding::kPower;
      ++at;
    } else if (c == '*' || c == '/') {
      found = Binding::kProduct;
    } else {
      after_operand = true;
      continue;
    }
    loosest = std::min(loosest, found);
    after_operand = false;
  }
  return loosest;
}

// Whether the SymPy template's grouping parentheses at `at` ("({})") may be left out around an
// argument that binds as `argument`. A power's base must be an atom: "sin(x1)**2", but
// "(x1**3)**2" (** groups from the right) and "(-x1)**2". A divisor may be a power: "1/x1**2",
// but "1/(1/x1)" and "1/(2*x1)". Elsewhere, only an atom, unless the parentheses are the whole
// template.
bool may_ungroup(const std::string& pattern, size_t at, Binding argument) {
  if (pattern.compare(at + 4, 2, "**") == 0)
    return argument == Binding::kAtom;
  if (at > 0 && pattern[at - 1] == '/')
    return argument >= Binding::kPower;
  return argument == Binding::kAtom || pattern == "({})";
}

double round_to(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

// "%.17g", or `digits` decimals without trailing zeros ("3.14", "2", "-0.5").
std::string number(double value, int digits) {
  char text[64];
  if (digits < 0) {
    std::snprintf(text, sizeof text, "%.17g", value);
    return text;
  }
  std::snprintf(text, sizeof text, "%.*f", digits, round_to(value, digits));
  std::string s = text;
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.')
      s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

} // namespace

Expression Expression::constant(double value) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::kConstant;
  node->value = value;
  return Expression(node);
}

Expression Expression::input(int64_t index) {
  TORCH_CHECK(index >= 0, "Expression::input: index must be >= 0, got ", index);
  auto node = std::make_shared<Node>();
  node->kind = Kind::kInput;
  node->index = index;
  return Expression(node);
}

// Whether e's first factor is a negative constant (of its first term, for a sum): -2*x1, -x1 + 3.
bool Expression::leads_with_minus(const Expression& e) {
  const auto& n = *e.node_;
  if (n.kind == Kind::kSum)
    return leads_with_minus(n.terms.front());
  return n.kind == Kind::kProduct && n.terms.front().is_constant() && n.terms.front().value() < 0;
}

Expression Expression::function(const std::string& name, Expression argument) {
  symbolic_function(name); // an unknown name is an error here, not when printed
  // pykan's "x" is the identity and "0" zero: folded away, so no template needs parentheses.
  if (name == "x")
    return argument;
  if (name == "0")
    return constant(0);
  const auto& f = symbolic_function(name);
  if (argument.is_constant())
    return constant(f.f(torch::tensor(argument.value(), torch::kFloat64)).item<double>());
  // Constants move out where an identity allows, so that pykan's c f(a x + b) + d reads as the
  // function found: (c u)^p = c^p u^p, f(-u) = +-f(u), exp(u + k) = e^k exp(u).
  const auto& a = *argument.node_;
  const double lead =
      a.kind == Kind::kProduct && a.terms.front().is_constant() ? a.terms.front().value() : 1.0;
  if (f.power != 0 && lead != 1) {
    std::vector<Expression> rest(a.terms.begin() + 1, a.terms.end());
    auto unscaled = rest.front();
    for (size_t t = 1; t < rest.size(); ++t)
      unscaled = unscaled * rest[t];
    return constant(std::pow(lead, f.power)) * function(name, unscaled);
  }
  if (f.parity != SymbolicFunction::Parity::kNone && leads_with_minus(argument)) {
    auto flipped = function(name, constant(-1) * argument);
    return f.parity == SymbolicFunction::Parity::kOdd ? constant(-1) * flipped : flipped;
  }
  if (name == "exp" && a.kind == Kind::kSum && a.terms.back().is_constant()) {
    const double k = a.terms.back().value();
    return constant(std::exp(k)) * function(name, argument + constant(-k));
  }
  auto node = std::make_shared<Node>();
  node->kind = Kind::kFunction;
  node->name = name;
  node->terms = {std::move(argument)};
  return Expression(node);
}

Expression operator+(const Expression& a, const Expression& b) {
  std::vector<Expression> terms;
  double sum = 0;
  for (const auto* e : {&a, &b}) {
    const auto& parts = e->node_->kind == Kind::kSum ? e->node_->terms : std::vector{*e};
    for (const auto& part : parts) {
      if (part.is_constant())
        sum += part.value();
      else
        terms.push_back(part);
    }
  }
  if (sum != 0 || terms.empty())
    terms.push_back(Expression::constant(sum)); // the constant last: "f(x) + 1.5"
  if (terms.size() == 1)
    return terms.front();
  auto node = std::make_shared<Expression::Node>();
  node->kind = Kind::kSum;
  node->terms = std::move(terms);
  return Expression(node);
}

Expression operator*(const Expression& a, const Expression& b) {
  // A constant times a sum distributes, so that linear layers fold: 2 * (x1 + 1) = 2*x1 + 2.
  for (const auto& [c, sum] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    if (c->is_constant() && sum->node_->kind == Kind::kSum) {
      auto result = Expression::constant(0);
      for (const auto& term : sum->node_->terms)
        result = result + *c * term;
      return result;
    }
  }
  std::vector<Expression> factors;
  double product = 1;
  for (const auto* e : {&a, &b}) {
    const auto& parts = e->node_->kind == Kind::kProduct ? e->node_->terms : std::vector{*e};
    for (const auto& part : parts) {
      if (part.is_constant())
        product *= part.value();
      else
        factors.push_back(part);
    }
  }
  if (product == 0 || factors.empty())
    return Expression::constant(product);
  if (product != 1)
    factors.insert(factors.begin(), Expression::constant(product)); // first: "2.5*x1"
  if (factors.size() == 1)
    return factors.front();
  auto node = std::make_shared<Expression::Node>();
  node->kind = Kind::kProduct;
  node->terms = std::move(factors);
  return Expression(node);
}

bool Expression::is_constant() const {
  return node_->kind == Kind::kConstant;
}

double Expression::value() const {
  TORCH_CHECK(is_constant(), "Expression::value: not a constant");
  return node_->value;
}

torch::Tensor Expression::evaluate(const torch::Tensor& x) const {
  TORCH_CHECK(x.dim() == 2, "Expression::evaluate: x must be (N, inputs), got ", x.sizes());
  switch (node_->kind) {
  case Kind::kConstant:
    return torch::full({x.size(0)}, node_->value, x.options());
  case Kind::kInput:
    TORCH_CHECK(node_->index < x.size(1), "Expression::evaluate: the formula uses x",
                node_->index + 1, " but x has ", x.size(1), " columns");
    return x.select(1, node_->index);
  case Kind::kSum: {
    auto sum = node_->terms.front().evaluate(x);
    for (size_t t = 1; t < node_->terms.size(); ++t)
      sum = sum + node_->terms[t].evaluate(x);
    return sum;
  }
  case Kind::kProduct: {
    auto product = node_->terms.front().evaluate(x);
    for (size_t t = 1; t < node_->terms.size(); ++t)
      product = product * node_->terms[t].evaluate(x);
    return product;
  }
  case Kind::kFunction:
    return symbolic_function(node_->name).f(node_->terms.front().evaluate(x));
  }
  return {};
}

std::string Expression::print(bool latex, int digits) const {
  const auto& n = *node_;
  switch (n.kind) {
  case Kind::kConstant:
    if (std::isnan(n.value)) // SymPy's names: it reads "inf" as a symbol
      return latex ? "\\text{NaN}" : "nan";
    if (std::isinf(n.value))
      return std::string(n.value < 0 ? "-" : "") + (latex ? "\\infty" : "oo");
    return number(n.value, digits);
  case Kind::kInput:
    return latex ? "x_{" + std::to_string(n.index + 1) + "}" : "x" + std::to_string(n.index + 1);
  case Kind::kSum: {
    std::string text;
    for (const auto& term : n.terms) {
      const auto part = term.print(latex, digits);
      if (text.empty())
        text = part;
      else if (part.front() == '-') // "a - 2*x1", not "a + -2*x1"
        text += " - " + part.substr(1);
      else
        text += " + " + part;
    }
    return text;
  }
  case Kind::kProduct: {
    std::string text;
    for (size_t f = 0; f < n.terms.size(); ++f) {
      auto part = n.terms[f].print(latex, digits);
      if (n.terms[f].node_->kind == Kind::kSum || (f > 0 && part.front() == '-'))
        part = latex ? "\\left(" + part + "\\right)" : "(" + part + ")";
      text += (f == 0 ? "" : latex ? " " : "*") + part;
    }
    return text;
  }
  case Kind::kFunction: {
    const auto& f = symbolic_function(n.name);
    auto pattern = latex ? f.latex : f.sympy;
    const auto& argument = n.terms.front();
    const auto text = argument.print(latex, digits);
    // A template's grouping parentheses stay where precedence needs them: "x1**2" but
    // "(x1**3)**2". In LaTeX they are left out only around an input ("x_{1}^{2}"): a
    // superscript takes the single symbol before it.
    const std::string group = latex ? "\\left({}\\right)" : "({})";
    const auto at = pattern.find(group);
    if (at != std::string::npos && is_grouping(pattern, at) &&
        (latex ? argument.node_->kind == Kind::kInput : may_ungroup(pattern, at, binding(text))))
      pattern.replace(at, group.size(), "{}");
    return fill(pattern, text);
  }
  }
  return {};
}

std::string Expression::sympy(int digits) const {
  return digits < 0 ? print(false, digits) : rounded(digits).print(false, digits);
}

std::string Expression::latex(int digits) const {
  return digits < 0 ? print(true, digits) : rounded(digits).print(true, digits);
}

Expression Expression::rounded(int digits) const {
  // Folding the rounded constants makes new ones ((9.9998 x)^2 -> 99.996 x^2): round until none
  // changes (a pass or two).
  auto result = rounded_once(digits);
  for (int pass = 0; pass < 4; ++pass) {
    auto again = result.rounded_once(digits);
    if (again.print(false, -1) == result.print(false, -1))
      break;
    result = again;
  }
  return result;
}

Expression Expression::rounded_once(int digits) const {
  switch (node_->kind) {
  case Kind::kConstant:
    return constant(round_to(node_->value, digits));
  case Kind::kInput:
    return *this;
  case Kind::kSum:
  case Kind::kProduct: {
    auto result = node_->terms.front().rounded_once(digits);
    for (size_t t = 1; t < node_->terms.size(); ++t)
      result = node_->kind == Kind::kSum ? result + node_->terms[t].rounded_once(digits)
                                         : result * node_->terms[t].rounded_once(digits);
    return result;
  }
  case Kind::kFunction:
    return function(node_->name, node_->terms.front().rounded_once(digits));
  }
  return *this;
}

} // namespace kan
