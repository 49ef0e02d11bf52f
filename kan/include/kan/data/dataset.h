#pragma once
/// Seeded synthetic regression datasets (pykan's create_dataset) and named reference functions.

#include "kan/nn/options.h"

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kan {

/// Inputs (N, n_var) and labels (N, n_out), split into train and test.
struct Dataset {
  torch::Tensor train_input;
  torch::Tensor train_label;
  torch::Tensor test_input;
  torch::Tensor test_label;

  /// The same data on `device` (every tensor; labels keep their dtype). Example:
  ///   data = data.to(model->device());
  Dataset to(torch::Device device) const;
  /// The same data with floating inputs and labels converted to `dtype` (class labels stay long).
  Dataset to(torch::Dtype dtype) const;
};

/// f maps inputs (N, n_var) to labels (N, n_out) or (N).
using TargetFunction = std::function<torch::Tensor(const torch::Tensor&)>;

/// Options of create_dataset.
struct DatasetOptions {
  explicit DatasetOptions(int64_t n_var) : n_var_(n_var) {}

  /// Number of input variables.
  TORCH_ARG(int64_t, n_var);
  /// One range for every variable, or one per variable.
  TORCH_ARG(std::vector<GridRange>, ranges) = std::vector<GridRange>{{-1.0, 1.0}};
  TORCH_ARG(int64_t, train_num) = 1000;
  TORCH_ARG(int64_t, test_num) = 1000;
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
};

/// Draws inputs uniformly from the ranges and labels them with f. The draws and f run on the
/// CPU in float64 from a generator seeded by options.seed(); the result is then converted to
/// options.dtype() and moved to options.device(), so one seed gives the same data everywhere.
///
/// Example:
///   const auto& toy = kan::reference_function("toy");
///   auto data = kan::create_dataset(toy.f, kan::DatasetOptions(toy.n_var).dtype(torch::kFloat64));
Dataset create_dataset(const TargetFunction& f, const DatasetOptions& options);

/// A named function of the KAN literature, for benchmarks and tests.
struct ReferenceFunction {
  std::string name;    ///< e.g. "toy", "jv", "feynman_I.6.2"
  int64_t n_var;       ///< number of inputs
  std::string formula; ///< human-readable definition, in the inputs' names (x0, x1, ... or a, b)
  TargetFunction f;    ///< (N, n_var) -> (N, 1)
  /// Where its inputs are drawn (DatasetOptions::ranges): one for all, or one per variable.
  std::vector<GridRange> ranges{{-1.0, 1.0}};
  /// The catalogue table it belongs to: "builtin", "special" (the KAN paper's special
  /// functions) or "feynman" (the paper's dimensionless Feynman equations).
  std::string group = "builtin";
  /// Where it comes from: the paper and table, or pykan.
  std::string source;
  /// The choices made where the source is silent (which output, which convention, why the
  /// domain stops where it does); empty when there was none.
  std::string notes;
  /// The inputs' names in order (e.g. {"nu", "x"}); empty means x0, x1, ...
  std::vector<std::string> variables;
};

/// Every reference function: the five built-in ones (toy, xy, exp_sin4, highdim100 and
/// feynman_I.6.20a, the KAN paper's Feynman equation I.6.20a on pykan's range), then the
/// paper's 15 special functions and 27 Feynman equations (kan/data/function_catalogue.h).
const std::vector<ReferenceFunction>& reference_functions();
/// The reference functions of one group ("builtin", "special" or "feynman"), in catalogue
/// order; another group is an error listing the groups.
std::vector<ReferenceFunction> reference_functions(const std::string& group);
/// The reference function called `name`; an unknown name is an error listing the known ones.
const ReferenceFunction& reference_function(const std::string& name);

} // namespace kan
