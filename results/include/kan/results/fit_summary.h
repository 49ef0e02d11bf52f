#pragma once
/// The report of one `kanbench fit`: what a page needs from fit.json (docs/formats.md,
/// "fit.json"), read without LibTorch, and the self-contained HTML page made from it.
///
/// The page opens offline like the report of a run (html_report.h: Chart.js and the data
/// inlined, every string from the file HTML-escaped, embedded JSON unable to close its element).
/// It shows the function, width, device and stages; the loss curves of every stage (train and
/// test RMSE per step); and, when the fit ran auto_symbolic (fit.json 1.6 with `--symbolic`),
/// a "Symbolic regression" section: the formula of each output (the sympy text and its LaTeX
/// source, which is not typeset: nothing is fetched), or why there is none; a table of the
/// edges with their functions, R^2 and parameters; and one chart per edge with a curve, the
/// learned activation (points) next to the symbolic fit c f(a x + b) + d (line).
///
/// The reader takes every fit.json 1.x (older files have no symbolic section) and checks the
/// keys the page shows: a missing one, or one of the wrong type, is a kan::io::JsonError
/// "FILE: KEY.PATH: PROBLEM". The keys the page does not show are not read; the strict
/// validator of a whole fit.json is kan::diagnostics::read_fit_record (which needs LibTorch).

#include "kan/results/results_io.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// The version of fit.json kanbench writes (kan::diagnostics::to_json(FitRecord)) and the newest
/// this reader knows; it reads every 1.x and 2.x (2.1: config.model_kind, an MLP's configuration,
/// and the final model's parameters and forward FLOPs; 2.0: a grid schedule, config.refine and
/// refined lists; null RMSE and the accuracies of a classification in every stage; 1.x history in
/// docs/formats.md).
inline constexpr const char* kFitSchemaVersion = "2.1.0";

/// One layer of a width in pykan's form: `sum` addition and `mult` multiplication nodes.
struct FitLayerWidth {
  int64_t sum = 0;
  int64_t mult = 0;
};

/// A width as pykan and `kanbench fit --width` write it: "[2, [2, 1], 1]".
std::string to_string(const std::vector<FitLayerWidth>& width);

/// One optimisation step of a stage; an RMSE that does not apply (no test data) is NaN.
struct FitStep {
  int64_t step = 0;
  double train_rmse = 0;
  double test_rmse = 0;
};

/// One training of a fit, in the order they ran: "trained" (the first one), "pruned" (after
/// pruning), "refined-0", "refined-1", ... (after each grid refinement; "refined" in fit.json
/// 1.x), "symbolic" (after auto_symbolic).
struct FitStageSummary {
  std::string key;   ///< as above ("trained": fit.json's top level)
  std::string title; ///< for people: "first training", "after refinement to grid 10", ...
  std::vector<FitStep> steps;
  double train_rmse = 0; ///< on the whole sets after the stage
  double test_rmse = 0;
  double seconds = 0; ///< its training time
};

/// The learned activation of a symbolic edge and its symbolic fit at the same sample points.
struct SymbolicCurve {
  std::vector<double> x;
  std::vector<double> activation; ///< before auto_symbolic
  std::vector<double> fit;        ///< c f(a x + b) + d with the parameters of the fit
};

/// One edge auto_symbolic considered: layer `layer`'s input `i` -> output `j`.
struct SymbolicEdge {
  int64_t layer = 0;
  int64_t i = 0;
  int64_t j = 0;
  std::string function; ///< the library function chosen; "0" for a pruned edge
  double r2 = 0;
  bool fixed = false; ///< false: R^2 was below the threshold and the edge stayed numeric
  std::optional<std::array<double, 4>> params; ///< a, b, c, d (only when fixed)
  std::optional<SymbolicCurve> curve;          ///< for the first 100 fixed edges
};

/// The formula of one output.
struct SymbolicFormula {
  std::string sympy;       ///< constants rounded to `digits` decimals
  std::string latex;       ///< the same as LaTeX source
  std::string sympy_exact; ///< every constant with 17 significant digits
};

/// The symbolic stage of a fit (fit.json 1.6 `config.symbolic` and `symbolic`).
struct FitSymbolic {
  std::vector<std::string> lib; ///< the library's function names, in the order given
  double r2_threshold = 0;
  double auto_symbolic_seconds = 0;
  std::vector<SymbolicEdge> edges;
  /// One per output; none when an edge stayed numeric (then `formula_error` says why).
  std::optional<std::vector<SymbolicFormula>> formula;
  std::string formula_error;
  int64_t digits = 0;
};

/// What the report of a fit shows.
struct FitSummary {
  std::string schema_version;
  std::string function; ///< the reference function fitted, "toy"; "" with data
  std::string data;     ///< the data file fitted instead of a function; "" without
  /// "kan" or "mlp" (config.model_kind, from fit.json 2.1; "kan" before).
  std::string model_kind = "kan";
  std::vector<FitLayerWidth> width; ///< of the model trained (config.model)
  /// The width after pruning (only when the fit pruned).
  std::optional<std::vector<FitLayerWidth>> pruned_width;
  int64_t grid = 0;       ///< a KAN's; 0 for an MLP
  int64_t k = 0;          ///< a KAN's; 0 for an MLP
  std::string activation; ///< an MLP's ("silu", "tanh", "relu"); "" for a KAN
  /// The final model's trainable scalars and forward FLOPs per sample (fit.json 2.1's final).
  std::optional<int64_t> parameters;
  std::optional<int64_t> forward_flops;
  std::string device; ///< as given, "cuda:0"
  std::string dtype;  ///< "float64"
  std::string libtorch;
  std::vector<FitStageSummary> stages; ///< in the order they ran; the first is "trained"
  std::optional<FitSymbolic> symbolic; ///< when the fit ran auto_symbolic
  double seconds = 0;                  ///< training time of all stages
  nlohmann::json config;               ///< fit.json's `config`, shown as a table
};

/// Whether `document` is a fit.json: an object whose "command" is "fit".
bool is_fit_document(const nlohmann::json& document);

/// Reads what the report shows from a fit.json document. `source` names it in errors. Throws
/// ResultsError (kan::io::JsonError): another major version, a "command" other than "fit", a
/// missing key or one of the wrong type, a curve whose arrays differ in length, a formula
/// without its formula_error.
FitSummary fit_summary_from_json(const nlohmann::json& document, const std::string& source = "");

/// Reads and parses a fit.json. Throws ResultsError naming the file.
///
/// Example:
///   const auto fit = kan::results::read_fit_summary("out/fit.json");
///   kan::reports::write_fit_report("out/report.html", fit);
FitSummary read_fit_summary(const std::string& path);

} // namespace kan::results
