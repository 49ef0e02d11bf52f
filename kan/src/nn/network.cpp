#include "kan/nn/network.h"

#include "kan/nn/memory.h"
#include "kan/nn/trace_scope.h"

#include "detail/checks.h"
#include "detail/host_list.h"
#include "detail/saturate.h"
#include "kernels/edge_moments.h"
#include "kernels/layer_pass_cpu.h"
#include "nn/detail/network_node.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kan {
namespace {

// splitmix64: independent, reproducible seeds for the layers from one network seed.
uint64_t mix_seed(uint64_t seed, uint64_t layer) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (layer + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string arities_text(const std::vector<std::vector<int64_t>>& arities) {
  std::string text = "[";
  for (size_t l = 0; l < arities.size(); ++l)
    text += (l ? ", " : "") + c10::str(c10::IntArrayRef(arities[l]));
  return text + "]";
}

// layer.forward(x) without gradients, in pieces of samples whose temporaries stay within
// memory_budget (the reference backend's (n, I, G + k) basis); one piece when all fit.
torch::Tensor forward_in_pieces(KANLayerImpl& layer, const torch::Tensor& x,
                                int64_t memory_budget) {
  const auto& o = layer.options();
  const int64_t N = x.size(0), P = o.grid() + 2 * o.k() + 1;
  // Per sample: the Cox-de Boor recursion's few (I, P) tensors, base(x) and a few outputs.
  int64_t per_sample =
      detail::sat_add(detail::sat_mul(4, o.in_dim()), detail::sat_mul(4, o.out_dim()));
  if (o.backend() == SplineBackend::kReference)
    per_sample = detail::sat_add(per_sample, detail::sat_mul(6, o.in_dim(), P));
  per_sample = detail::sat_mul(per_sample, static_cast<int64_t>(x.element_size()));
  const int64_t rows = std::max<int64_t>(1, memory_budget / per_sample);
  if (rows >= N)
    return layer.forward(x);
  auto y = torch::empty({N, o.out_dim()}, x.options());
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int64_t n = std::min(rows, N - n0);
    y.narrow(0, n0, n).copy_(layer.forward(x.narrow(0, n0, n)));
  }
  return y;
}

// A hidden layer's samples are the previous layer's outputs: non-finite ones mean that layer's
// parameters are, not the data.
void check_hidden_finite(const torch::Tensor& h, size_t l, const char* what) {
  detail::check_finite(h,
                       "the input of layer " + std::to_string(l) + " (" + what +
                           " samples: the output of layer " + std::to_string(l - 1) + ")",
                       "the layers before it give non-finite outputs (non-finite parameters or an "
                       "overflow: did training diverge?)");
}

} // namespace

void check_structure(const KANOptions& o) {
  const auto& width = o.width();
  TORCH_CHECK(width.size() >= 2, "width must have at least 2 entries (inputs and outputs), got ",
              c10::IntArrayRef(width));
  for (size_t l = 0; l < width.size(); ++l)
    TORCH_CHECK(width[l] >= 1, "width entries must be >= 1, got width[", l, "] = ", width[l],
                " in ", c10::IntArrayRef(width));
  const auto& mult = o.mult();
  TORCH_CHECK(mult.empty() || mult.size() == width.size(), "mult must be empty or have one entry ",
              "per layer of width ", c10::IntArrayRef(width), ", got ", c10::IntArrayRef(mult));
  for (size_t l = 0; l < mult.size(); ++l)
    TORCH_CHECK(mult[l] >= 0 && mult[l] <= width[l], "mult[", l, "] = ", mult[l],
                " must be from 0 to width[", l, "] = ", width[l], " (mult ", c10::IntArrayRef(mult),
                ")");
  TORCH_CHECK(mult.empty() || mult[0] == 0, "mult[0] = ", mult[0],
              ": the inputs cannot be multiplication nodes");
  TORCH_CHECK(o.mult_arity() >= 2,
              "mult_arity must be >= 2 (a product of at least two "
              "subnodes), got ",
              o.mult_arity());
  const auto& arities = o.node_arity();
  if (arities.empty())
    return;
  TORCH_CHECK(arities.size() == width.size(), "node_arity must have one list per layer (",
              width.size(), "), got ", arities.size(), ": ", arities_text(arities));
  for (size_t l = 0; l < arities.size(); ++l) {
    TORCH_CHECK(static_cast<int64_t>(arities[l].size()) == mult_nodes(o, l), "node_arity[", l,
                "] must list one arity per multiplication node of layer ", l, " (",
                mult_nodes(o, l), "), got ", c10::IntArrayRef(arities[l]));
    for (const int64_t a : arities[l])
      TORCH_CHECK(a >= 2, "node_arity[", l, "] has arity ", a,
                  " < 2: ", c10::IntArrayRef(arities[l]));
  }
}

int64_t mult_nodes(const KANOptions& o, size_t l) {
  return o.mult().empty() ? 0 : o.mult().at(l);
}

int64_t node_arity(const KANOptions& o, size_t l, int64_t j) {
  return o.node_arity().empty() ? o.mult_arity() : o.node_arity().at(l).at(j);
}

int64_t subnodes(const KANOptions& o, size_t l) {
  const int64_t n_mult = mult_nodes(o, l);
  int64_t count = o.width().at(l) - n_mult;
  // One arity for every node: counted at once (a configuration may claim 10^18 nodes).
  if (o.node_arity().empty())
    return detail::sat_add(count, detail::sat_mul(n_mult, o.mult_arity()));
  for (int64_t j = 0; j < n_mult; ++j)
    count = detail::sat_add(count, node_arity(o, l, j));
  return count;
}

bool has_mult_nodes(const KANOptions& o) {
  return std::any_of(o.mult().begin(), o.mult().end(), [](int64_t m) { return m > 0; });
}

KANLayerOptions layer_options(const KANOptions& o, size_t l) {
  return KANLayerOptions(o.width().at(l), subnodes(o, l + 1))
      .grid(o.grid())
      .k(o.k())
      .noise_scale(o.noise_scale())
      .scale_base_mu(o.scale_base_mu())
      .scale_base_sigma(o.scale_base_sigma())
      .scale_sp(o.scale_sp())
      .base_fun(o.base_fun())
      .grid_eps(o.grid_eps())
      .grid_range(o.grid_range())
      .sp_trainable(o.sp_trainable())
      .sb_trainable(o.sb_trainable())
      .seed(mix_seed(o.seed(), l))
      .device(o.device())
      .dtype(o.dtype())
      .backend(o.backend());
}

KANImpl::KANImpl(KANOptions options) : options_(std::move(options)) {
  reset();
}

void KANImpl::reset() {
  check_structure(options_);
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (size_t l = 0; l + 1 < options_.width().size(); ++l) {
    const auto layer_opts = layer_options(options_, l);
    try {
      layers_->push_back(KANLayer(layer_opts));
    } catch (const detail::BuildOutOfMemory& e) {
      // Which layer of which model, and what the whole model needs, not just "KANLayer".
      detail::throw_out_of_memory(
          "layer " + std::to_string(l) + " (" + detail::layer_size(layer_opts) + "; the model " +
              c10::str(c10::IntArrayRef(options_.width())) + " needs about " +
              format_bytes(estimate_model_memory(options_).total()) +
              " for parameters and buffers)",
          e.cause());
    }
  }
  // pykan's node and subnode affine maps, identity at first.
  node_scale.clear();
  node_bias.clear();
  subnode_scale.clear();
  subnode_bias.clear();
  const auto tensor_options =
      torch::TensorOptions().device(options_.device()).dtype(options_.dtype());
  for (size_t l = 0; l + 1 < options_.width().size(); ++l) {
    const auto suffix = "_" + std::to_string(l);
    const int64_t nodes = options_.width()[l + 1], subs = subnodes(options_, l + 1);
    const bool trainable = options_.affine_trainable();
    node_scale.push_back(
        register_parameter("node_scale" + suffix, torch::ones({nodes}, tensor_options), trainable));
    node_bias.push_back(
        register_parameter("node_bias" + suffix, torch::zeros({nodes}, tensor_options), trainable));
    subnode_scale.push_back(register_parameter("subnode_scale" + suffix,
                                               torch::ones({subs}, tensor_options), trainable));
    subnode_bias.push_back(register_parameter("subnode_bias" + suffix,
                                              torch::zeros({subs}, tensor_options), trainable));
  }
  activations_.clear();
  kept_input_.reset(); // a clone's own, not its original's
}

bool KANImpl::applies_affine() const {
  return options_.affine_trainable() || has_mult_nodes(options_);
}

torch::Tensor KANImpl::nodes_from_subnodes(size_t l, const torch::Tensor& y) const {
  if (!applies_affine())
    return y;
  const auto subs = torch::addcmul(subnode_bias[l], y, subnode_scale[l]);
  const int64_t n_mult = mult_nodes(options_, l + 1);
  auto nodes = subs;
  if (n_mult > 0) {
    // Multiplication node j multiplies the next arity_j subnodes after the addition nodes, left
    // to right, as pykan does.
    const int64_t n_sum = options_.width()[l + 1] - n_mult;
    std::vector<torch::Tensor> columns{subs.narrow(1, 0, n_sum)};
    for (int64_t j = 0, at = n_sum; j < n_mult; ++j) {
      const int64_t arity = node_arity(options_, l + 1, j);
      auto product = subs.narrow(1, at, 1) * subs.narrow(1, at + 1, 1);
      for (int64_t i = 2; i < arity; ++i)
        product = product * subs.narrow(1, at + i, 1);
      columns.push_back(product);
      at += arity;
    }
    nodes = torch::cat(columns, 1);
  }
  return torch::addcmul(node_bias[l], nodes, node_scale[l]);
}

void KANImpl::pretty_print(std::ostream& stream) const {
  stream << "kan::KAN(width=" << c10::IntArrayRef(options_.width());
  if (has_mult_nodes(options_))
    stream << ", mult=" << c10::IntArrayRef(options_.mult());
  stream << ", grid=" << options_.grid() << ", k=" << options_.k()
         << ", base_fun=" << to_string(options_.base_fun())
         << ", backend=" << to_string(options_.backend()) << ")";
}

torch::Device KANImpl::device() const {
  return layer(0)->device();
}

torch::Dtype KANImpl::dtype() const {
  return layer(0)->dtype();
}

int64_t kan_parameter_count(const KANOptions& o) {
  check_structure(o);
  using detail::sat_add;
  using detail::sat_mul;
  int64_t count = 0;
  for (size_t l = 0; l + 1 < o.width().size(); ++l) {
    const int64_t I = o.width()[l], O = subnodes(o, l + 1);
    const int64_t scales = (o.sb_trainable() ? 1 : 0) + (o.sp_trainable() ? 1 : 0);
    count = sat_add(count, sat_mul(I, O, sat_add(sat_add(o.grid(), o.k()), scales)));
    if (o.affine_trainable()) // node_scale, node_bias, subnode_scale, subnode_bias
      count = sat_add(count, sat_mul(2, sat_add(o.width()[l + 1], O)));
  }
  return count;
}

int64_t kan_forward_flops(const KANOptions& o) {
  check_structure(o);
  using detail::sat_add;
  using detail::sat_mul;
  const int64_t G = o.grid(), k = o.k();
  const bool fused = o.backend() == SplineBackend::kFused;
  // Per input: the Cox-de Boor recursion, 7 FLOPs per basis function of each order p = 1..k.
  // The fused kernels build the k + 1 functions of the point's knot span (p + 1 at order p); the
  // reference builds all P - p - 1 of each order from the P = G + 2k + 1 knots. Order 0 is
  // comparisons against the knots, not counted.
  const int64_t basis = fused ? 7 * k * (k + 3) / 2 : 7 * (k * (G + 2 * k) - k * (k + 1) / 2);
  const int64_t terms = fused ? k + 1 : G + k; // basis functions each edge's spline sums
  const bool affine = o.affine_trainable() || has_mult_nodes(o);
  int64_t flops = 0;
  for (size_t l = 0; l + 1 < o.width().size(); ++l) {
    const int64_t I = o.width()[l], O = subnodes(o, l + 1);
    flops = sat_add(flops, sat_add(sat_mul(I, basis), sat_mul(2, I, O, terms)));
    if (o.base_fun() != BaseFunction::kZero) {
      const int64_t activation = o.base_fun() == BaseFunction::kSiLU ? kSiLUFlops : 0;
      flops = sat_add(flops, sat_add(sat_mul(I, activation), sat_add(sat_mul(2, I, O), O)));
    }
    if (affine) {
      // Subnode affine (an addcmul each), the products, node affine (an addcmul each).
      flops = sat_add(flops, sat_add(sat_mul(2, O), sat_mul(2, o.width()[l + 1])));
      for (int64_t j = 0; j < mult_nodes(o, l + 1); ++j)
        flops = sat_add(flops, node_arity(o, l + 1, j) - 1);
    }
  }
  return flops;
}

int64_t KANImpl::forward_flops() const {
  int64_t flops = kan_forward_flops(options_);
  for (size_t l = 0; l < depth(); ++l) {
    const auto symbolic = layer(l)->symbolic_edge_count();
    if (symbolic == 0)
      continue;
    // Per symbolic edge a x + b, f, c f + d, the mask and the sum over inputs (6 + f); then the
    // branch is added to the numeric one, which every edge still computes.
    flops = detail::sat_add(flops,
                            detail::sat_add(detail::sat_mul(symbolic, 6 + kSymbolicFunctionFlops),
                                            layer(l)->options().out_dim()));
  }
  return flops;
}

nlohmann::json KANImpl::config() const {
  auto options = options_;
  return to_json(options.dtype(dtype()));
}

void KANImpl::check_input(const torch::Tensor& x, const char* what) const {
  detail::check_points(x, what, options_.width().front(), dtype(), device());
}

torch::Tensor KANImpl::forward(const torch::Tensor& x) {
  check_input(x);
  activations_.clear();
  if (runs_as_one_node(x, save_statistics_))
    return forward_as_one_node(x);
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    if (save_activations_ || save_statistics_) {
      activations_.push_back(save_activations_ ? layer(l)->forward_with_activations(h)
                                               : layer(l)->forward_with_statistics(h));
      h = activations_.back().output;
    } else {
      h = layer(l)->forward(h);
    }
    h = nodes_from_subnodes(l, h);
  }
  return h;
}

bool KANImpl::runs_as_one_node(const torch::Tensor& x, bool statistics) const {
  // The layers' own rule (KANLayerImpl::forward): the one-pass kernels compute the regulariser's
  // sums too, which an unregularised forward of wide layers does not repay.
  if (!whole_network_node_ || save_activations_ || options_.backend() != SplineBackend::kFused ||
      !detail::fuses_layer_with_moments(x) || at::autocast::is_autocast_enabled(at::kCPU))
    return false;
  for (size_t l = 0; l < depth(); ++l) {
    const auto& o = layer(l)->options();
    if (layer(l)->symbolic_edge_count() > 0 ||
        (!statistics && x.size(0) * o.in_dim() * o.out_dim() > detail::kOneNodeEdgeEvaluations))
      return false;
  }
  return true;
}

namespace {

// The whole-network node's arguments: the layout, the layers' tensors, the affine maps'.
struct OneNodeArguments {
  detail::NetworkLayout layout;
  std::vector<torch::Tensor> layers, affine;
};

OneNodeArguments one_node_arguments(const KANImpl& model) {
  const auto& options = model.options();
  OneNodeArguments a;
  a.layout.k = model.layer(0)->options().k();
  a.layout.base = detail::base_kind(options.base_fun());
  a.layout.affine = model.applies_affine();
  for (size_t l = 0; l < model.depth(); ++l) {
    const auto& lay = *model.layer(l);
    a.layers.insert(a.layers.end(), {lay.grid, lay.coef, lay.scale_base, lay.scale_sp, lay.mask});
    const int64_t n_mult = mult_nodes(options, l + 1);
    a.layout.sum_nodes.push_back(options.width()[l + 1] - n_mult);
    auto& arities = a.layout.arities.emplace_back();
    for (int64_t j = 0; j < n_mult; ++j)
      arities.push_back(node_arity(options, l + 1, j));
    if (a.layout.affine)
      a.affine.insert(a.affine.end(), {model.subnode_scale[l], model.subnode_bias[l],
                                       model.node_scale[l], model.node_bias[l]});
  }
  return a;
}

} // namespace

torch::Tensor KANImpl::forward_as_one_node(const torch::Tensor& x) {
  const auto a = one_node_arguments(*this);
  auto pass = detail::fused_network(x, a.layers, a.affine, a.layout);
  record_autograd_node(pass.output); // its backward is this network's work in the trace
  if (save_statistics_)
    for (size_t l = 0; l < depth(); ++l) {
      LayerActivations& acts = activations_.emplace_back();
      acts.input = pass.inputs[l];
      acts.output = pass.outputs[l];
      acts.moments = pass.moments[l];
    }
  return pass.output;
}

std::optional<ObjectiveValues> KANImpl::mse_objective(const torch::Tensor& x,
                                                      const torch::Tensor& labels, double lamb,
                                                      const RegularizationOptions& w) {
  const bool regularised = lamb != 0;
  if (x.dim() != 2 || !at::GradMode::is_enabled() || !runs_as_one_node(x, regularised) ||
      x.size(0) < 1 || labels.sizes() != c10::IntArrayRef({x.size(0), options_.width().back()}) ||
      labels.scalar_type() != x.scalar_type() || !labels.is_cpu() ||
      (regularised && (w.sum_over_ranks() || w.lamb_coef() != 0 || w.lamb_coefdiff() != 0)))
    return std::nullopt;
  check_input(x);
  activations_.clear();
  const auto a = one_node_arguments(*this);
  if (!kept_input_)
    kept_input_ = std::make_shared<detail::KeptInput>();
  const auto o =
      detail::network_objective(x, labels, a.layers, a.affine, a.layout,
                                {lamb, w.lamb_l1(), w.lamb_entropy()}, kept_input_.get());
  for (size_t t = 0; t < a.layers.size(); ++t)
    accumulate_grad(a.layers[t], o.grads[1 + t]);
  for (size_t t = 0; t < a.affine.size(); ++t)
    accumulate_grad(a.affine[t], o.grads[1 + a.layers.size() + t]);
  const auto scalar = torch::TensorOptions().dtype(dtype());
  ObjectiveValues values;
  values.loss = torch::scalar_tensor(o.loss, scalar);
  values.total = values.loss;
  if (regularised) {
    // Rounded as loss + lamb * reg rounds in the model's dtype.
    values.reg = torch::scalar_tensor(o.reg, scalar);
    values.total = values.loss + lamb * values.reg;
  }
  return values;
}

void KANImpl::update_grid_from_samples(const torch::Tensor& x, int64_t memory_budget) {
  check_input(x, "grid-update samples");
  detail::check_finite(x, "the network's input x (grid-update samples)");
  PhaseScope phase(Phase::kGridUpdate);
  torch::NoGradGuard no_grad;
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    if (l > 0)
      check_hidden_finite(h, l, "grid-update");
    layer(l)->update_grid_from_samples(h, memory_budget);
    if (l + 1 < depth())
      h = nodes_from_subnodes(l, forward_in_pieces(*layer(l), h, memory_budget));
  }
}

KAN KANImpl::refine(int64_t new_grid, const torch::Tensor& x, int64_t memory_budget) const {
  TORCH_CHECK(new_grid >= 1, "refine: new grid (number of intervals G) must be >= 1, got ",
              new_grid);
  if (x.defined()) {
    check_input(x, "refinement samples");
    detail::check_finite(x, "the network's input x (refinement samples)");
  }
  auto options = options_;
  options.grid(new_grid).device(device()).dtype(dtype());
  KAN refined(options);
  torch::NoGradGuard no_grad;
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    if (l > 0 && h.defined())
      check_hidden_finite(h, l, "refinement");
    refined->layer(l)->initialize_from_parent(*layer(l), h, memory_budget);
    for (auto [to, from] : {std::pair(refined->node_scale[l], node_scale[l]),
                            std::pair(refined->node_bias[l], node_bias[l]),
                            std::pair(refined->subnode_scale[l], subnode_scale[l]),
                            std::pair(refined->subnode_bias[l], subnode_bias[l])})
      to.copy_(from);
    if (h.defined() && l + 1 < depth())
      h = nodes_from_subnodes(l, forward_in_pieces(*layer(l), h, memory_budget));
  }
  return refined;
}

} // namespace kan
