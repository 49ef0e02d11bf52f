// The KAN paper's published results (kan/data/paper_results.h, from data/kan-paper/*.csv compiled
// in) against the function catalogue they describe.
#include "kan/data/function_catalogue.h"
#include "kan/data/paper_results.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

// Empty (not verified), or n_var inputs ... 1 output, every layer at least one node.
void expect_shape_of(const std::vector<int64_t>& shape, int64_t n_var, const char* column) {
  SCOPED_TRACE(column);
  if (shape.empty())
    return;
  ASSERT_GE(shape.size(), 2u);
  EXPECT_EQ(shape.front(), n_var);
  EXPECT_EQ(shape.back(), 1);
  for (int64_t n : shape)
    EXPECT_GE(n, 1);
}

// NaN (not verified) or a test RMSE as the paper prints them, in (1e-8, 1).
void expect_rmse(double v, const char* column) {
  if (!std::isnan(v)) {
    EXPECT_GT(v, 1e-8) << column;
    EXPECT_LT(v, 1.0) << column;
  }
}

TEST(PaperResults, OneRowPerSpecialFunctionOfTheCatalogue) {
  const auto& rows = kan::paper_special_functions();
  const auto& catalogue = kan::special_functions();
  ASSERT_EQ(rows.size(), catalogue.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    SCOPED_TRACE(row.function);
    EXPECT_EQ(row.function, catalogue[i].name);
    EXPECT_FALSE(row.name.empty());
    EXPECT_FALSE(row.scipy_api.empty());
    expect_shape_of(row.minimal_kan_shape, catalogue[i].n_var, "minimal_kan_shape");
    expect_shape_of(row.best_kan_shape, catalogue[i].n_var, "best_kan_shape");
    expect_rmse(row.minimal_kan_test_rmse, "minimal_kan_test_rmse");
    expect_rmse(row.best_kan_test_rmse, "best_kan_test_rmse");
    expect_rmse(row.mlp_test_rmse, "mlp_test_rmse");
  }
  // Spot checks of the file as read: lpmv(0, x, y), and ellipj's unverified best shape.
  EXPECT_EQ(rows[7].function, "lpmv_0");
  EXPECT_EQ(rows[7].best_kan_shape, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_DOUBLE_EQ(rows[7].best_kan_test_rmse, 5.25e-5);
  EXPECT_DOUBLE_EQ(rows[7].mlp_test_rmse, 1.74e-2);
  EXPECT_EQ(rows[6].minimal_kan_shape, (std::vector<int64_t>{2, 4, 3, 2, 1, 1}));
  EXPECT_TRUE(rows[0].best_kan_shape.empty());
  EXPECT_DOUBLE_EQ(rows[0].best_kan_test_rmse, 1.33e-4);
}

TEST(PaperResults, OneRowPerFeynmanEquationOfTheCatalogue) {
  const auto& rows = kan::paper_feynman();
  const auto& catalogue = kan::feynman_functions();
  ASSERT_EQ(rows.size(), catalogue.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const auto& f = catalogue[i];
    SCOPED_TRACE(row.equation);
    EXPECT_EQ(row.function, f.name);
    EXPECT_EQ("feynman_" + row.equation, f.name);
    EXPECT_EQ(row.dimensionless_formula, f.formula);
    EXPECT_EQ(row.variables, f.variables);
    expect_shape_of(row.human_kan_shape, f.n_var, "human_kan_shape");
    expect_shape_of(row.pruned_kan_shape_minimal, f.n_var, "pruned_kan_shape_minimal");
    expect_shape_of(row.pruned_kan_shape_best, f.n_var, "pruned_kan_shape_best");
    expect_rmse(row.human_kan_test_rmse, "human_kan_test_rmse");
    expect_rmse(row.pruned_kan_test_rmse, "pruned_kan_test_rmse");
    expect_rmse(row.unpruned_kan_test_rmse, "unpruned_kan_test_rmse");
    expect_rmse(row.mlp_test_rmse, "mlp_test_rmse");
  }
  EXPECT_EQ(rows[6].equation, "I.16.6");
  EXPECT_EQ(rows[6].human_kan_shape, (std::vector<int64_t>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(rows[6].pruned_kan_shape_best, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_DOUBLE_EQ(rows[6].mlp_test_rmse, 6.20e-4);
  EXPECT_TRUE(std::isnan(rows[26].mlp_test_rmse)); // III.17.37: one transcription only
}

TEST(PaperResults, ParsesShapesStrictly) {
  EXPECT_EQ(kan::parse_paper_shape("[2, 3,1]"), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_TRUE(kan::parse_paper_shape("").empty());
  KAN_EXPECT_ERROR(kan::parse_paper_shape("2,3,1"), "[n0,n1,...]", "'2,3,1'");
  KAN_EXPECT_ERROR(kan::parse_paper_shape("[2,x,1]"), "positive integers", "'[2,x,1]'");
  KAN_EXPECT_ERROR(kan::parse_paper_shape("[2,0,1]"), "positive integers");
  KAN_EXPECT_ERROR(kan::parse_paper_shape("[2,3.5,1]"), "positive integers");
}

} // namespace
