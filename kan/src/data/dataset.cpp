#include "kan/data/dataset.h"

#include "kan/data/function_catalogue.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kan {
namespace {

torch::Tensor draw_inputs(int64_t n, const std::vector<GridRange>& ranges, int64_t n_var,
                          at::Generator& generator) {
  const auto u = torch::rand({n, n_var}, generator, torch::kFloat64);
  std::vector<double> lo(n_var), width(n_var);
  for (int64_t i = 0; i < n_var; ++i) {
    const auto& r = ranges.size() == 1 ? ranges[0] : ranges[i];
    lo[i] = r[0];
    width[i] = r[1] - r[0];
  }
  return u * torch::tensor(width, torch::kFloat64) + torch::tensor(lo, torch::kFloat64);
}

torch::Tensor label(const TargetFunction& f, const torch::Tensor& x) {
  auto y = f(x);
  TORCH_CHECK(y.defined() && y.is_floating_point(),
              "the dataset function must return a floating tensor");
  if (y.dim() == 1)
    y = y.unsqueeze(1);
  TORCH_CHECK(y.dim() == 2 && y.size(0) == x.size(0), "the dataset function must map ", x.sizes(),
              " inputs to (", x.size(0), ", n_out) labels, got shape ", y.sizes());
  return y.to(torch::kFloat64);
}

} // namespace

Dataset Dataset::to(torch::Device device) const {
  auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {move(train_input), move(train_label), move(test_input), move(test_label)};
}

Dataset Dataset::to(torch::Dtype dtype) const {
  auto convert = [&](const torch::Tensor& t) {
    return t.defined() && t.is_floating_point() ? t.to(dtype) : t;
  };
  return {convert(train_input), convert(train_label), convert(test_input), convert(test_label)};
}

Dataset create_dataset(const TargetFunction& f, const DatasetOptions& o) {
  TORCH_CHECK(f, "create_dataset needs a function, got an empty one");
  TORCH_CHECK(o.n_var() >= 1, "n_var must be >= 1, got ", o.n_var());
  TORCH_CHECK(o.train_num() >= 0, "train_num must be >= 0, got ", o.train_num());
  TORCH_CHECK(o.test_num() >= 0, "test_num must be >= 0, got ", o.test_num());
  TORCH_CHECK(o.ranges().size() == 1 || static_cast<int64_t>(o.ranges().size()) == o.n_var(),
              "ranges must hold one range or n_var = ", o.n_var(), " ranges, got ",
              o.ranges().size());
  for (const auto& r : o.ranges()) {
    TORCH_CHECK(r[0] < r[1], "each range must satisfy a < b, got [", r[0], ", ", r[1], "]");
  }
  TORCH_CHECK(o.dtype() == torch::kFloat32 || o.dtype() == torch::kFloat64,
              "dtype must be float32 or float64, got ", o.dtype());

  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed());
  const auto train_x = draw_inputs(o.train_num(), o.ranges(), o.n_var(), generator);
  const auto test_x = draw_inputs(o.test_num(), o.ranges(), o.n_var(), generator);
  const auto target = torch::TensorOptions().dtype(o.dtype()).device(o.device());
  return Dataset{train_x.to(target), label(f, train_x).to(target), test_x.to(target),
                 label(f, test_x).to(target)};
}

namespace {

const char* const kToySource = "KAN paper (arXiv:2404.19756), Section 3.1: toy datasets";

std::vector<ReferenceFunction> builtin_functions() {
  const GridRange unit{-1.0, 1.0};
  return {
      {"toy",
       2,
       "exp(sin(pi x0) + x1^2)",
       [](const torch::Tensor& x) {
         return torch::exp(torch::sin(M_PI * x.select(1, 0)) + x.select(1, 1).square())
             .unsqueeze(1);
       },
       {unit},
       "builtin",
       kToySource,
       "",
       {}},
      {"xy",
       2,
       "x0 * x1",
       [](const torch::Tensor& x) { return (x.select(1, 0) * x.select(1, 1)).unsqueeze(1); },
       {unit},
       "builtin",
       kToySource,
       "",
       {}},
      {"exp_sin4",
       4,
       "exp((sin(pi (x0^2 + x1^2)) + sin(pi (x2^2 + x3^2))) / 2)",
       [](const torch::Tensor& x) {
         const auto sq = x.square();
         const auto a = torch::sin(M_PI * (sq.select(1, 0) + sq.select(1, 1)));
         const auto b = torch::sin(M_PI * (sq.select(1, 2) + sq.select(1, 3)));
         return torch::exp((a + b) / 2).unsqueeze(1);
       },
       {unit},
       "builtin",
       kToySource,
       "",
       {}},
      {"highdim100",
       100,
       "exp(mean_i sin^2(pi x_i / 2)), i = 0..99",
       [](const torch::Tensor& x) {
         return torch::exp(torch::sin(M_PI / 2 * x).square().mean(1, /*keepdim=*/true));
       },
       {unit},
       "builtin",
       kToySource,
       "",
       {}},
      // pykan's feynman.py, 'I.6.20a': the standard normal density, theta in [-3, 3].
      {"feynman_I.6.20a",
       1,
       "exp(-x0^2 / 2) / sqrt(2 pi)",
       [](const torch::Tensor& x) { return torch::exp(-x.square() / 2) / std::sqrt(2 * M_PI); },
       {{-3.0, 3.0}},
       "builtin",
       "pykan 0.2.8 kan/feynman.py 'I.6.20a'",
       "The one-variable Feynman equation, outside the paper's table (which keeps those with two "
       "or more variables).",
       {}},
  };
}

const std::vector<std::string> kGroups{"builtin", "special", "feynman"};

} // namespace

const std::vector<ReferenceFunction>& reference_functions() {
  static const std::vector<ReferenceFunction> functions = [] {
    auto all = builtin_functions();
    for (const auto* group : {&special_functions(), &feynman_functions()})
      all.insert(all.end(), group->begin(), group->end());
    return all;
  }();
  return functions;
}

std::vector<ReferenceFunction> reference_functions(const std::string& group) {
  TORCH_CHECK(std::find(kGroups.begin(), kGroups.end(), group) != kGroups.end(),
              "unknown function group '", group, "'; the groups are builtin, special, feynman");
  std::vector<ReferenceFunction> functions;
  for (const auto& f : reference_functions()) {
    if (f.group == group)
      functions.push_back(f);
  }
  return functions;
}

const ReferenceFunction& reference_function(const std::string& name) {
  std::ostringstream known;
  for (const auto& f : reference_functions()) {
    if (f.name == name)
      return f;
    known << (known.tellp() > 0 ? ", " : "") << f.name;
  }
  TORCH_CHECK(false, "unknown function '", name, "'; known functions: ", known.str());
}

} // namespace kan
