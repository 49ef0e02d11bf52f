// A whole-symbolic KAN as a formula (KANImpl::symbolic_formula): against pykan 0.2.8's
// symbolic_formula (tests/reference/pykan/symbolic_formula.json, checkpoints/formula_mult), and
// against the model's own forward for every library function.
#include "kan/nn/network.h"
#include "kan/nn/pruning.h"
#include "kan/serialize/pykan.h"
#include "kan/symbolic/symbolic_edges.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <string>
#include <vector>

namespace kan {
namespace {

using test::to_tensor;

TEST(SymbolicFormula, MatchesPykansFormula) {
  const auto ref = test::load_reference("symbolic_formula.json");
  const auto x = to_tensor(ref["x"]);
  auto model = load_pykan(test::reference_checkpoint("formula_mult"));
  const auto formula = symbolic_formula(*model);
  ASSERT_EQ(formula.size(), 1u);
  EXPECT_LT(test::max_relative_diff(formula[0].evaluate(x), to_tensor(ref["formula_values"])),
            1e-12);
  torch::NoGradGuard no_grad;
  EXPECT_LT(test::max_relative_diff(formula[0].evaluate(x), model(x).select(1, 0)), 1e-12);
  // Every constant printed with 17 digits: the text is the same formula (spot checks of its
  // structure: the multiplication node's product of two sums, the library functions).
  const auto text = formula[0].sympy();
  for (const char* part : {")*(", "exp(", "sin(", "tanh(", "x1", "x2"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " in " << text;
  EXPECT_NE(formula[0].latex().find("\\tanh"), std::string::npos) << formula[0].latex();
}

// A [2, [2, 1], 2] model whose every edge is symbolic with random a, b, c, d, masks and node
// maps: layer 0's edges `first`, layer 1's x, sin and x^2 (defined on any input).
KAN random_symbolic_model(const std::string& first, uint64_t seed, torch::Dtype dtype) {
  KAN model(KANOptions({2, 3, 2}).mult({0, 1, 0}).affine_trainable(true).seed(seed).dtype(dtype));
  torch::manual_seed(seed);
  const std::vector<std::string> later{"x", "sin", "x^2"};
  size_t next = 0;
  for (size_t l = 0; l < model->depth(); ++l) {
    const auto& o = model->layer(l)->options();
    for (int64_t i = 0; i < o.in_dim(); ++i)
      for (int64_t j = 0; j < o.out_dim(); ++j)
        fix_symbolic(*model, l, i, j, l == 0 ? first : later[next++ % later.size()]);
    torch::NoGradGuard no_grad;
    // a in [0.2, 0.7] keeps every argument inside the domains of sqrt, log, arcsin, ... for
    // inputs in [0.1, 1] (b > 0 for the same reason).
    auto& affine = model->layer(l)->symbolic_affine;
    affine.select(2, 0).uniform_(0.2, 0.7);
    affine.select(2, 1).uniform_(0.05, 0.2);
    affine.select(2, 2).uniform_(-1.5, 1.5);
    affine.select(2, 3).uniform_(-0.5, 0.5);
    model->layer(l)->symbolic_mask.select(1, 0).fill_(0.5); // a mask other than 1 counts too
    for (auto* maps : {&model->node_scale, &model->subnode_scale})
      (*maps)[l].uniform_(0.3, 0.6);
    for (auto* maps : {&model->node_bias, &model->subnode_bias})
      (*maps)[l].uniform_(0.05, 0.2);
  }
  return model;
}

TEST(SymbolicFormula, ReproducesTheModelForEveryFunction) {
  // Inputs in [0.1, 1]: the compositions stay inside every function's domain.
  const auto x = torch::rand({50, 2}, torch::kFloat64) * 0.9 + 0.1;
  for (const auto& name : symbolic_function_names()) {
    SCOPED_TRACE(name);
    auto model = random_symbolic_model(name, 3, torch::kFloat64);
    const auto formula = symbolic_formula(*model);
    ASSERT_EQ(formula.size(), 2u);
    torch::NoGradGuard no_grad;
    const auto y = model(x);
    for (int64_t out = 0; out < 2; ++out) {
      const auto values = formula[static_cast<size_t>(out)].evaluate(x);
      ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
      EXPECT_LT(test::max_relative_diff(values, y.select(1, out)), 1e-12)
          << formula[static_cast<size_t>(out)].sympy();
    }
  }
}

TEST(SymbolicFormula, Float32ModelAndRoundedConstants) {
  const auto x = torch::rand({50, 2}, torch::kFloat64) * 0.9 + 0.1;
  auto model = random_symbolic_model("exp", 4, torch::kFloat32);
  const auto formula = symbolic_formula(*model)[0];
  torch::NoGradGuard no_grad;
  const auto y = model(x.to(torch::kFloat32)).select(1, 0).to(torch::kFloat64);
  EXPECT_LT(test::max_relative_diff(formula.evaluate(x), y), 1e-5);
  // Rounded to 4 decimals the formula stays close, and prints no more digits.
  EXPECT_LT(test::max_relative_diff(formula.rounded(4).evaluate(x), y), 1e-2);
  const auto text = formula.sympy(4);
  EXPECT_EQ(text.find("0.00000"), std::string::npos) << text;
  EXPECT_NE(text.find("exp("), std::string::npos) << text;
}

TEST(SymbolicFormula, PrunedEdgesVanishAndNumericEdgesAreRefused) {
  KAN model(KANOptions({2, 2, 1}).dtype(torch::kFloat64));
  const auto error = test::error_of([&] { symbolic_formula(*model); });
  EXPECT_NE(error.find("symbolic_formula: edge (0, 0, 0) has a numeric part (numeric mask 1): "
                       "make it symbolic first"),
            std::string::npos)
      << error;
  fix_symbolic(*model, 0, 0, 0, "sin");
  fix_symbolic(*model, 0, 1, 1, "x^2");
  remove_edge(*model, 0, 0, 1);
  remove_edge(*model, 0, 1, 0);
  fix_symbolic(*model, 1, 0, 0, "x");
  fix_symbolic(*model, 1, 1, 0, "exp");
  // sin(x1) + exp(x2^2): the pruned edges add nothing.
  EXPECT_EQ(symbolic_formula(*model)[0].sympy(4), "sin(x1) + exp(x2**2)");
  const auto x = torch::rand({8, 2}, torch::kFloat64);
  torch::NoGradGuard no_grad;
  EXPECT_LT(test::max_relative_diff(symbolic_formula(*model)[0].evaluate(x), model(x).select(1, 0)),
            1e-12);
}

} // namespace
} // namespace kan
