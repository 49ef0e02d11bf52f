#pragma once
/// The KAN paper's published results (arXiv:2404.19756, Table 1 "Special functions" and Table 2
/// "Feynman dataset"), from data/kan-paper/*.csv, compiled into the library: no file is read at
/// run time. A number the data files leave empty (data/kan-paper/README.md says why) is NaN, an
/// empty shape an empty vector.
///
/// Example:
///   for (const auto& row : kan::paper_special_functions())
///     std::cout << row.function << " best KAN RMSE " << row.best_kan_test_rmse << "\n";

#include <cstdint>
#include <string>
#include <vector>

namespace kan {

/// One row of the paper's Table 1 (special functions).
struct PaperSpecialFunctionResult {
  std::string function;  ///< the catalogue's name, e.g. "lpmv_0"
  std::string name;      ///< the paper's, e.g. "Associated Legendre function (m=0)"
  std::string scipy_api; ///< e.g. "lpmv(0,x,y)"
  std::vector<int64_t> minimal_kan_shape; ///< smallest pruned KAN with test RMSE < 1e-2
  double minimal_kan_test_rmse;
  std::vector<int64_t> best_kan_shape; ///< the KAN of lowest test RMSE
  double best_kan_test_rmse;
  double mlp_test_rmse; ///< the best MLP's
};

/// One row of the paper's Table 2 (Feynman dataset); losses are lowest test RMSEs.
struct PaperFeynmanResult {
  std::string equation;              ///< the paper's label, e.g. "I.6.2"
  std::string function;              ///< the catalogue's name, e.g. "feynman_I.6.2"
  std::string dimensionless_formula; ///< in the variables' names
  std::vector<std::string> variables;
  std::vector<int64_t> human_kan_shape;          ///< constructed by hand from the formula
  std::vector<int64_t> pruned_kan_shape_minimal; ///< smallest pruned KAN with RMSE < 1e-2
  std::vector<int64_t> pruned_kan_shape_best;    ///< the pruned KAN of lowest loss
  double human_kan_test_rmse;
  double pruned_kan_test_rmse;
  double unpruned_kan_test_rmse;
  double mlp_test_rmse;
};

/// Table 1's 15 rows, in the paper's order.
const std::vector<PaperSpecialFunctionResult>& paper_special_functions();
/// Table 2's 27 rows, in the paper's order.
const std::vector<PaperFeynmanResult>& paper_feynman();

/// Parses "[2,3,1]" (spaces allowed); "" gives an empty shape. Anything else is an error naming
/// the text.
std::vector<int64_t> parse_paper_shape(const std::string& text);

} // namespace kan
