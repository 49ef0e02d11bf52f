// A KAN's symbolic edges: pykan 0.2.8's set_mode, fix_symbolic, unfix_symbolic,
// suggest_symbolic, auto_symbolic and symbolic_formula (MultKAN.py), the fits batched over edges.
#include "kan/symbolic/symbolic_edges.h"

#include "kan/nn/network.h"
#include "kan/symbolic/symbolic.h"

#include "detail/checks.h"
#include "detail/host_list.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kan {
namespace {

// pykan's r2 of an edge without a numeric part (fix_symbolic: `if mask[i,j] == 0: r2 = -1e8`).
constexpr double kNoNumericR2 = -1e8;

// pykan's suggest_symbolic loss, weighing simplicity against fit.
double symbolic_loss(double r2, int64_t complexity, double weight_simple) {
  return weight_simple * static_cast<double>(complexity) +
         (1 - weight_simple) * std::log2(1 + 1e-5 - r2);
}

void check_edge(const KANImpl& model, const char* what, size_t l, int64_t i, int64_t j) {
  TORCH_CHECK(l < model.depth(), what, ": edge (", l, ", ", i, ", ", j, "): layer ", l,
              " does not exist (layers 0..", model.depth() - 1, ")");
  const auto& o = model.layer(l)->options();
  TORCH_CHECK(i >= 0 && i < o.in_dim() && j >= 0 && j < o.out_dim(), what, ": edge (", l, ", ", i,
              ", ", j, ") is out of range: layer ", l, " has inputs i = 0..", o.in_dim() - 1,
              " and outputs j = 0..", o.out_dim() - 1);
}

void check_library(const char* what, const std::vector<std::string>& lib) {
  TORCH_CHECK(!lib.empty(), what, ": the library is empty; name at least one function (",
              "kan::symbolic_function_names() lists them)");
  for (const auto& name : lib)
    symbolic_function(name); // an unknown name is an error listing the library
}

// The inputs (N, I) and whole edge activations (N, I, O) of layers 0..last on samples x, as
// pykan's acts and spline_postacts of a forward.
std::vector<LayerActivations> samples_through(KANImpl& model, const torch::Tensor& x, size_t last,
                                              const char* what) {
  model.check_input(x, what);
  TORCH_CHECK(x.size(0) >= 1, what, ": no samples (x is ", x.sizes(), ")");
  detail::check_finite(x, std::string(what) + " x");
  torch::NoGradGuard no_grad;
  std::vector<LayerActivations> acts;
  auto h = x;
  for (size_t l = 0; l <= last; ++l) {
    acts.push_back(model.layer(l)->forward_with_activations(h));
    h = model.nodes_from_subnodes(l, acts.back().output);
  }
  return acts;
}

double symbolic_mask_at(const KANLayerImpl& layer, int64_t i, int64_t j) {
  return layer.has_symbolic_state() ? layer.symbolic_mask[j][i].item<double>() : 0.0;
}

void check_not_pruned(const char* what, size_t l, int64_t i, int64_t j, double numeric,
                      double symbolic) {
  TORCH_CHECK(numeric != 0 || symbolic != 0, what, ": edge (", l, ", ", i, ", ", j,
              ") is pruned (numeric and symbolic mask 0): it has no activation to fit; fix it "
              "without samples to set a function");
}

// A tensor's values on the host, in float64 (a formula's constants are text).
std::vector<double> host_values(const torch::Tensor& t) {
  const auto cpu = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return {cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel()};
}

// nodes_from_subnodes on expressions: subnode affine, the multiplication nodes' products, node
// affine.
std::vector<Expression> formula_nodes(const KANImpl& model, size_t l,
                                      const std::vector<Expression>& subnodes) {
  const auto sub_scale = host_values(model.subnode_scale[l]);
  const auto sub_bias = host_values(model.subnode_bias[l]);
  const auto node_scale = host_values(model.node_scale[l]);
  const auto node_bias = host_values(model.node_bias[l]);
  std::vector<Expression> subs;
  for (size_t s = 0; s < subnodes.size(); ++s)
    subs.push_back(Expression::constant(sub_scale[s]) * subnodes[s] +
                   Expression::constant(sub_bias[s]));
  const auto& options = model.options();
  const int64_t n_mult = mult_nodes(options, l + 1);
  const int64_t n_sum = options.width()[l + 1] - n_mult;
  std::vector<Expression> nodes(subs.begin(), subs.begin() + n_sum);
  for (int64_t j = 0, at = n_sum; j < n_mult; ++j) {
    auto product = subs[static_cast<size_t>(at)];
    for (int64_t i = 1; i < node_arity(options, l + 1, j); ++i)
      product = product * subs[static_cast<size_t>(at + i)];
    nodes.push_back(product);
    at += node_arity(options, l + 1, j);
  }
  for (size_t n = 0; n < nodes.size(); ++n)
    nodes[n] = Expression::constant(node_scale[n]) * nodes[n] + Expression::constant(node_bias[n]);
  return nodes;
}

// One layer's edges as auto_symbolic sees them: its samples, its numeric mask on the host, and
// pykan's three cases: symbolic only (skipped), pruned (fixed to "0"), the rest (fitted).
struct LayerEdges {
  size_t l;
  const LayerActivations& acts;
  int64_t I, O;
  torch::Device device;
  torch::Tensor numeric_mask;               // (I, O), float64
  std::vector<int64_t> fit_ids, pruned_ids; // i * O + j

  bool has_numeric(int64_t e) const { return numeric_mask.data_ptr<double>()[e] != 0; }

  // The inputs and activations (N, E) of the edges ids, in their order.
  std::pair<torch::Tensor, torch::Tensor> samples_of(const std::vector<int64_t>& ids) const {
    const auto index = detail::host_list(ids, torch::kLong, device);
    const int64_t N = acts.input.size(0);
    return std::pair(acts.input.index_select(1, torch::div(index, O, "floor")),
                     acts.edges.reshape({N, I * O}).index_select(1, index));
  }
};

LayerEdges layer_edges(const KANLayerImpl& layer, size_t l, const LayerActivations& acts,
                       torch::Device device) {
  const int64_t I = layer.options().in_dim(), O = layer.options().out_dim();
  LayerEdges edges{l,  acts, I, O, device, layer.mask.to(torch::kCPU, torch::kFloat64).contiguous(),
                   {}, {}};
  const auto symbolic_mask =
      layer.has_symbolic_state()
          ? layer.symbolic_mask.t().to(torch::kCPU, torch::kFloat64).contiguous()
          : torch::zeros_like(edges.numeric_mask);
  const auto* numeric = edges.numeric_mask.data_ptr<double>();
  const auto* symbolic = symbolic_mask.data_ptr<double>();
  for (int64_t e = 0; e < I * O; ++e) {
    if (symbolic[e] > 0 && numeric[e] == 0)
      continue;
    (symbolic[e] == 0 && numeric[e] == 0 ? edges.pruned_ids : edges.fit_ids).push_back(e);
  }
  return edges;
}

// The edges auto_symbolic fixes in a layer: i -> j, the function, and the a, b, c, d of each
// (the rows of affine's tensors, in order).
struct FixedEdges {
  std::vector<int64_t> in, out;
  std::vector<std::string> names;
  std::vector<torch::Tensor> affine;

  void add(int64_t i, int64_t j, const std::string& name) {
    in.push_back(i);
    out.push_back(j);
    names.push_back(name);
  }
};

// The function of lib with the least symbolic_loss on one edge (the first minimum, in lib's
// order), and its r2; r2[f * stride] is function f's.
std::pair<int64_t, double> best_function(const double* r2, int64_t stride, bool has_numeric,
                                         const std::vector<std::string>& lib,
                                         double weight_simple) {
  int64_t best = 0;
  double best_loss = INFINITY, best_r2 = 0;
  for (size_t f = 0; f < lib.size(); ++f) {
    const double value = has_numeric ? r2[f * stride] : kNoNumericR2;
    const double loss = symbolic_loss(value, symbolic_function(lib[f]).complexity, weight_simple);
    if (loss < best_loss) {
      best_loss = loss;
      best = static_cast<int64_t>(f);
      best_r2 = value;
    }
  }
  return {best, best_r2};
}

// Every function of lib fitted to the layer's edges with a numeric part, all edges at once; each
// edge's best function is its choice, fixed where its r2 reaches r2_threshold.
void choose_functions(const LayerEdges& edges, const std::vector<std::string>& lib,
                      double weight_simple, double r2_threshold, const SymbolicFitOptions& options,
                      std::vector<SymbolicChoice>& choices, FixedEdges& fixed) {
  const auto& ids = edges.fit_ids;
  const auto ys = edges.samples_of(ids).second;
  std::vector<int64_t> column;
  for (const int64_t e : ids)
    column.push_back(e / edges.O);
  std::vector<torch::Tensor> params, r2s;
  for (const auto& name : lib) {
    auto fit = fit_symbolic_params(edges.acts.input, column, ys, symbolic_function(name), options);
    params.push_back(fit.params);
    r2s.push_back(fit.r2);
  }
  const auto r2 = torch::stack(r2s).to(torch::kCPU, torch::kFloat64).contiguous(); // (F, E)
  const auto E = static_cast<int64_t>(ids.size());
  std::vector<int64_t> rows; // of the fixed edges' choices in params' (F * E, 4)
  for (int64_t e = 0; e < E; ++e) {
    const auto [best, best_r2] =
        best_function(r2.data_ptr<double>() + e, E, edges.has_numeric(ids[e]), lib, weight_simple);
    const int64_t i = ids[e] / edges.O, j = ids[e] % edges.O;
    const bool is_fixed = best_r2 >= r2_threshold;
    choices.push_back({edges.l, i, j, lib[best], best_r2, is_fixed});
    if (is_fixed) {
      fixed.add(i, j, lib[best]);
      rows.push_back(best * E + e);
    }
  }
  // The chosen function's a, b, c, d of every fixed edge: one gather.
  fixed.affine.push_back(
      torch::cat(params).index_select(0, detail::host_list(rows, torch::kLong, edges.device)));
}

// pykan fixes pruned edges to "0" through a fit, whose c and d are 0 on a zero activation.
void fix_pruned(const LayerEdges& edges, const SymbolicFitOptions& options,
                std::vector<SymbolicChoice>& choices, FixedEdges& fixed) {
  const auto [xs, ys] = edges.samples_of(edges.pruned_ids);
  fixed.affine.push_back(fit_symbolic_params(xs, ys, symbolic_function("0"), options).params);
  for (const int64_t e : edges.pruned_ids) {
    fixed.add(e / edges.O, e % edges.O, "0");
    choices.push_back({edges.l, e / edges.O, e % edges.O, "0", kNoNumericR2, true});
  }
}

} // namespace

bool KANImpl::has_symbolic_edges() const {
  for (size_t l = 0; l < depth(); ++l)
    if (layer(l)->symbolic_edge_count() > 0)
      return true;
  return false;
}

void set_mode(KANImpl& model, size_t l, int64_t i, int64_t j, const std::string& mode,
              std::optional<double> numeric_mask) {
  check_edge(model, "set_mode", l, i, j);
  double numeric = 0, symbolic = 0;
  if (mode == "s") {
    symbolic = 1;
  } else if (mode == "n") {
    numeric = 1;
  } else if (mode == "sn" || mode == "ns") {
    numeric = numeric_mask.value_or(1.0);
    symbolic = 1;
  } else {
    TORCH_CHECK(false, "set_mode: mode must be \"n\", \"s\", \"sn\" or \"ns\", got \"", mode, "\"");
  }
  auto target = model.layer(l);
  {
    torch::NoGradGuard no_grad;
    target->mask[i][j] = numeric;
  }
  // A layer without symbolic state stays without while nothing is symbolic.
  if (symbolic != 0 || target->has_symbolic_state())
    target->set_symbolic_edges({i}, {j}, {target->symbolic_name(i, j)}, {symbolic});
}

std::optional<double> fix_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j,
                                   const std::string& name, const torch::Tensor& x,
                                   const SymbolicFitOptions& options) {
  check_edge(model, "fix_symbolic", l, i, j);
  const auto& function = symbolic_function(name);
  auto target = model.layer(l);
  std::optional<double> r2;
  torch::Tensor affine;
  if (x.defined()) {
    const double numeric = target->mask[i][j].item<double>();
    check_not_pruned("fix_symbolic", l, i, j, numeric, symbolic_mask_at(*target, i, j));
    const auto acts = samples_through(model, x, l, "fix_symbolic samples");
    const auto& a = acts.back();
    const auto fit = fit_symbolic_params(a.input.narrow(1, i, 1),
                                         a.edges.select(2, j).narrow(1, i, 1), function, options);
    affine = fit.params;
    r2 = numeric == 0 ? kNoNumericR2 : fit.r2.item<double>();
  } else {
    affine =
        detail::host_list(std::vector<double>{1.0, 0.0, 1.0, 0.0}, torch::kFloat64, torch::kCPU)
            .view({1, 4});
  }
  target->set_symbolic_edges({i}, {j}, {name}, {1.0}, affine);
  torch::NoGradGuard no_grad;
  target->mask[i][j] = 0;
  return r2;
}

void unfix_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j) {
  check_edge(model, "unfix_symbolic", l, i, j);
  set_mode(model, l, i, j, "n");
  if (model.layer(l)->has_symbolic_state())
    model.layer(l)->set_symbolic_edges({i}, {j}, {"0"}, {0.0});
}

std::vector<SymbolicSuggestion> suggest_symbolic(KANImpl& model, size_t l, int64_t i, int64_t j,
                                                 const torch::Tensor& x,
                                                 const std::vector<std::string>& lib, int64_t topk,
                                                 double weight_simple,
                                                 const SymbolicFitOptions& options) {
  check_edge(model, "suggest_symbolic", l, i, j);
  check_library("suggest_symbolic", lib);
  TORCH_CHECK(topk >= 1, "suggest_symbolic: topk must be >= 1, got ", topk);
  TORCH_CHECK(std::isfinite(weight_simple), "suggest_symbolic: weight_simple must be finite, got ",
              weight_simple);
  auto target = model.layer(l);
  const double numeric = target->mask[i][j].item<double>();
  check_not_pruned("suggest_symbolic", l, i, j, numeric, symbolic_mask_at(*target, i, j));
  const auto acts = samples_through(model, x, l, "suggest_symbolic samples");
  const auto xs = acts.back().input.narrow(1, i, 1);
  const auto ys = acts.back().edges.select(2, j).narrow(1, i, 1);
  std::vector<SymbolicSuggestion> ranked;
  for (const auto& name : lib) {
    const auto& function = symbolic_function(name);
    const double r2 = numeric == 0
                          ? kNoNumericR2
                          : fit_symbolic_params(xs, ys, function, options).r2.item<double>();
    ranked.push_back(
        {name, r2, function.complexity, symbolic_loss(r2, function.complexity, weight_simple)});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.loss < b.loss; });
  ranked.resize(std::min(ranked.size(), static_cast<size_t>(topk)));
  return ranked;
}

std::vector<SymbolicChoice> auto_symbolic(KANImpl& model, const torch::Tensor& x,
                                          const std::vector<std::string>& lib, double weight_simple,
                                          double r2_threshold, const SymbolicFitOptions& options) {
  check_library("auto_symbolic", lib);
  TORCH_CHECK(std::isfinite(weight_simple), "auto_symbolic: weight_simple must be finite, got ",
              weight_simple);
  // Every layer's samples from one forward before any edge changes, as pykan's (which reads the
  // last forward's activations throughout).
  const auto acts = samples_through(model, x, model.depth() - 1, "auto_symbolic samples");
  std::vector<SymbolicChoice> choices;
  for (size_t l = 0; l < model.depth(); ++l) {
    auto target = model.layer(l);
    const auto edges = layer_edges(*target, l, acts[l], x.device());
    FixedEdges fixed;
    if (!edges.fit_ids.empty())
      choose_functions(edges, lib, weight_simple, r2_threshold, options, choices, fixed);
    if (!edges.pruned_ids.empty()) {
      fix_pruned(edges, options, choices, fixed);
      // the layer's choices in edge order, as pykan makes them
      const auto layer_choices = edges.pruned_ids.size() + edges.fit_ids.size();
      std::sort(
          choices.end() - static_cast<int64_t>(layer_choices), choices.end(),
          [](const auto& a, const auto& b) { return std::pair(a.i, a.j) < std::pair(b.i, b.j); });
    }
    if (fixed.in.empty())
      continue;
    target->set_symbolic_edges(fixed.in, fixed.out, fixed.names,
                               std::vector<double>(fixed.in.size(), 1.0), torch::cat(fixed.affine));
    torch::NoGradGuard no_grad;
    std::vector<int64_t> flat(fixed.in.size());
    for (size_t e = 0; e < fixed.in.size(); ++e)
      flat[e] = fixed.in[e] * edges.O + fixed.out[e];
    target->mask.view({-1}).index_fill_(0, detail::host_list(flat, torch::kLong, x.device()), 0.0);
  }
  return choices;
}

std::vector<Expression> symbolic_formula(const KANImpl& model) {
  const auto constant = [](double value) { return Expression::constant(value); };
  std::vector<Expression> nodes;
  for (int64_t i = 0; i < model.options().width().front(); ++i)
    nodes.push_back(Expression::input(i));
  for (size_t l = 0; l < model.depth(); ++l) {
    const auto& target = *model.layer(l);
    const int64_t I = target.options().in_dim(), O = target.options().out_dim();
    const auto numeric = host_values(target.mask); // (I, O)
    for (int64_t e = 0; e < I * O; ++e)
      TORCH_CHECK(numeric[static_cast<size_t>(e)] == 0, "symbolic_formula: edge (", l, ", ", e / O,
                  ", ", e % O, ") has a numeric part (numeric mask ",
                  numeric[static_cast<size_t>(e)],
                  "): make it symbolic first (fix_symbolic or auto_symbolic)");
    std::vector<Expression> subnodes(static_cast<size_t>(O), constant(0));
    if (target.has_symbolic_state()) {
      const auto mask = host_values(target.symbolic_mask);     // (O, I)
      const auto affine = host_values(target.symbolic_affine); // (O, I, 4)
      for (int64_t j = 0; j < O; ++j)
        for (int64_t i = 0; i < I; ++i) {
          const auto edge = static_cast<size_t>(j * I + i);
          const double m = mask[edge];
          if (m == 0)
            continue;
          const double* p = affine.data() + edge * 4; // a, b, c, d
          const auto inner = constant(p[0]) * nodes[static_cast<size_t>(i)] + constant(p[1]);
          subnodes[static_cast<size_t>(j)] =
              subnodes[static_cast<size_t>(j)] +
              constant(m) *
                  (constant(p[2]) * Expression::function(target.symbolic_name(i, j), inner) +
                   constant(p[3]));
        }
    }
    nodes = model.applies_affine() ? formula_nodes(model, l, subnodes) : subnodes;
  }
  return nodes;
}

} // namespace kan
