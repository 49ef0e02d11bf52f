#include "kan/nn/pruning.h"

#include "kan/nn/trace_scope.h"

#include "detail/host_list.h"

#include <ATen/ATen.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kan {

Attribution attribute(KANImpl& model, const torch::Tensor& x) {
  model.check_input(x, "attribution samples");
  TORCH_CHECK(x.size(0) >= 2,
              "attribute needs at least 2 samples (the scores come from the "
              "activations' spread over the samples), got ",
              x.size(0));
  PhaseScope phase(Phase::kEvaluation);
  torch::NoGradGuard no_grad;
  // The spread of every edge's activation (I, O) and of every subnode (O), per layer.
  std::vector<torch::Tensor> edge_spread, subnode_spread;
  auto h = x;
  for (size_t l = 0; l < model.depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    const auto acts = model.layer(l)->forward_with_activations(h);
    edge_spread.push_back(acts.edges.std(0));
    subnode_spread.push_back(acts.output.std(0));
    h = model.nodes_from_subnodes(l, acts.output);
  }
  // Scores of every node for each output k (rows), from the outputs back to the inputs.
  const int64_t outputs = model.options().width().back();
  std::vector<torch::Tensor> node_scores{torch::eye(outputs, x.options())};
  std::vector<torch::Tensor> edge_scores, subnode_scores;
  for (size_t l = model.depth(); l >= 1; --l) {
    // A multiplication node's score goes to each of its subnodes, an addition node's to itself.
    const auto& node_score = node_scores.back(); // (K, width[l])
    const int64_t n_mult = mult_nodes(model.options(), l),
                  n_sum = model.options().width()[l] - n_mult;
    std::vector<torch::Tensor> columns{node_score.narrow(1, 0, n_sum)};
    for (int64_t j = 0; j < n_mult; ++j)
      columns.push_back(
          node_score.narrow(1, n_sum + j, 1).expand({outputs, node_arity(model.options(), l, j)}));
    const auto subnode_score = torch::cat(columns, 1); // (K, subnodes(l))
    // Edge (i, j) carries subnode j's score in proportion to its share of j's spread.
    const auto edge_score = edge_spread[l - 1].unsqueeze(0) *
                            (subnode_score / (subnode_spread[l - 1] + 1e-4)).unsqueeze(1);
    subnode_scores.push_back(subnode_score);
    edge_scores.push_back(edge_score); // (K, I, O)
    node_scores.push_back(edge_score.sum(2));
  }
  Attribution a;
  for (auto it = node_scores.rbegin(); it != node_scores.rend(); ++it)
    a.node_scores.push_back(it->mean(0));
  for (auto it = edge_scores.rbegin(); it != edge_scores.rend(); ++it)
    a.edge_scores.push_back(it->mean(0));
  for (auto it = subnode_scores.rbegin(); it != subnode_scores.rend(); ++it)
    a.subnode_scores.push_back(it->mean(0));
  return a;
}

namespace {

// The subnodes (layer l - 1's outputs) of layer l's nodes `nodes`, in order.
std::vector<int64_t> subnodes_of(const KANOptions& o, size_t l, const std::vector<int64_t>& nodes) {
  const int64_t n_mult = mult_nodes(o, l), n_sum = o.width()[l] - n_mult;
  std::vector<int64_t> first(static_cast<size_t>(o.width()[l]) + 1, 0); // first subnode of node i
  for (int64_t i = 0; i < o.width()[l]; ++i)
    first[i + 1] = first[i] + (i < n_sum ? 1 : node_arity(o, l, i - n_sum));
  std::vector<int64_t> ids;
  for (const int64_t i : nodes)
    for (int64_t s = first[i]; s < first[i + 1]; ++s)
      ids.push_back(s);
  return ids;
}

torch::Tensor index_tensor(const std::vector<int64_t>& ids, torch::Device device) {
  return detail::host_list(ids, torch::kLong, device);
}

std::vector<int64_t> all_nodes(int64_t count) {
  std::vector<int64_t> nodes(static_cast<size_t>(count));
  std::iota(nodes.begin(), nodes.end(), 0);
  return nodes;
}

} // namespace

void remove_edge(KANImpl& model, size_t l, int64_t i, int64_t j) {
  TORCH_CHECK(l < model.depth(), "remove_edge: layer ", l, " does not exist (", model.depth(),
              " layers)");
  const auto& o = model.layer(l)->options();
  TORCH_CHECK(i >= 0 && i < o.in_dim() && j >= 0 && j < o.out_dim(), "remove_edge: layer ", l,
              " has edges 0..", o.in_dim() - 1, " -> 0..", o.out_dim() - 1, ", got ", i, " -> ", j);
  torch::NoGradGuard no_grad;
  model.layer(l)->mask[i][j] = 0;
}

void remove_node(KANImpl& model, size_t l, int64_t i) {
  TORCH_CHECK(l >= 1 && l < model.depth(), "remove_node: layer ", l, " is not a hidden layer (1..",
              model.depth() - 1, ")");
  TORCH_CHECK(i >= 0 && i < model.options().width()[l], "remove_node: layer ", l, " has nodes 0..",
              model.options().width()[l] - 1, ", got ", i);
  torch::NoGradGuard no_grad;
  const auto into = subnodes_of(model.options(), l, {i});
  for (const int64_t s : into)
    model.layer(l - 1)->mask.select(1, s).zero_();
  model.layer(l)->mask.select(0, i).zero_();
  // pykan zeroes the symbolic masks of the same edges; names stay.
  const auto unmask = [](KANLayerImpl& layer, const std::vector<int64_t>& ins,
                         const std::vector<int64_t>& outs) {
    if (!layer.has_symbolic_state())
      return;
    std::vector<int64_t> in, out;
    std::vector<std::string> names;
    for (const int64_t j : outs)
      for (const int64_t from : ins) {
        in.push_back(from);
        out.push_back(j);
        names.push_back(layer.symbolic_name(from, j));
      }
    layer.set_symbolic_edges(in, out, names, std::vector<double>(in.size(), 0.0));
  };
  unmask(*model.layer(l - 1), all_nodes(model.layer(l - 1)->options().in_dim()), into);
  unmask(*model.layer(l), {i}, all_nodes(model.layer(l)->options().out_dim()));
}

namespace {

// The indices where `keep` (a bool tensor on any device) is true, ascending.
std::vector<int64_t> true_indices(const torch::Tensor& keep) {
  const auto ids = keep.nonzero().view(-1).to(torch::kCPU);
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

// `nodes` sorted without repeats, each checked to be one of the `count` nodes of `what`, and at
// least one of them.
std::vector<int64_t> kept_nodes(std::vector<int64_t> nodes, int64_t count, const std::string& what,
                                const std::vector<int64_t>& width) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  TORCH_CHECK(!nodes.empty(), "pruning would remove every node of ", what, " (width ",
              c10::IntArrayRef(width), "): lower the threshold; the model is unchanged");
  TORCH_CHECK(nodes.front() >= 0 && nodes.back() < count, what, " has nodes 0..", count - 1,
              ", got ", nodes.front() < 0 ? nodes.front() : nodes.back());
  return nodes;
}

// A copy of `model` with only layer l's nodes nodes[l] (l = 0..L, sorted): multiplication nodes
// keep their arities, every edge between two kept nodes its grid, coefficients, scales and mask.
KAN with_nodes(const KANImpl& model, const std::vector<std::vector<int64_t>>& nodes) {
  const auto& from = model.options();
  std::vector<int64_t> width, mult;
  std::vector<std::vector<int64_t>> arities;
  for (size_t l = 0; l < nodes.size(); ++l) {
    const int64_t n_sum = from.width()[l] - mult_nodes(from, l);
    std::vector<int64_t> layer_arities;
    for (const int64_t i : nodes[l])
      if (i >= n_sum)
        layer_arities.push_back(node_arity(from, l, i - n_sum));
    width.push_back(static_cast<int64_t>(nodes[l].size()));
    mult.push_back(static_cast<int64_t>(layer_arities.size()));
    arities.push_back(layer_arities);
  }
  const bool any_mult = std::any_of(mult.begin(), mult.end(), [](int64_t m) { return m > 0; });
  auto options = from;
  options.width(width)
      .mult(any_mult ? mult : std::vector<int64_t>{})
      .node_arity(any_mult ? arities : std::vector<std::vector<int64_t>>{})
      .device(model.device())
      .dtype(model.dtype());
  KAN pruned(options);

  torch::NoGradGuard no_grad;
  const auto device = model.device();
  for (size_t l = 0; l < model.depth(); ++l) {
    // Layer l's inputs are layer l's kept nodes; its outputs the subnodes of layer l + 1's.
    const auto in_ids = index_tensor(nodes[l], device);
    const auto out_ids = index_tensor(subnodes_of(from, l + 1, nodes[l + 1]), device);
    const auto node_ids = index_tensor(nodes[l + 1], device);
    auto source = model.layer(l), target = pruned->layer(l);
    target->grid.copy_(source->grid.index_select(0, in_ids));
    for (auto [to, of] :
         {std::pair(target->coef, source->coef), std::pair(target->scale_base, source->scale_base),
          std::pair(target->scale_sp, source->scale_sp), std::pair(target->mask, source->mask)})
      to.copy_(of.index_select(0, in_ids).index_select(1, out_ids));
    target->copy_symbolic_from(*source, nodes[l], subnodes_of(from, l + 1, nodes[l + 1]));
    pruned->node_scale[l].copy_(model.node_scale[l].index_select(0, node_ids));
    pruned->node_bias[l].copy_(model.node_bias[l].index_select(0, node_ids));
    pruned->subnode_scale[l].copy_(model.subnode_scale[l].index_select(0, out_ids));
    pruned->subnode_bias[l].copy_(model.subnode_bias[l].index_select(0, out_ids));
  }
  return pruned;
}

// Scores computed on another model (or before it was pruned) would prune the wrong nodes.
void check_scores(const KANImpl& model, const Attribution& scores, const char* what) {
  const auto& width = model.options().width();
  bool fits =
      scores.node_scores.size() == width.size() && scores.edge_scores.size() == model.depth();
  for (size_t l = 0; fits && l < model.depth(); ++l)
    fits = scores.node_scores[l].sizes() == c10::IntArrayRef{width[l]} &&
           scores.edge_scores[l].sizes() == model.layer(l)->mask.sizes();
  TORCH_CHECK(fits, what, ": the scores are not this model's attribute() (width ",
              c10::IntArrayRef(width), "): compute them on this model");
}

} // namespace

KAN keep_nodes(const KANImpl& model, const std::vector<std::vector<int64_t>>& active) {
  TORCH_CHECK(active.size() + 1 == model.depth(), "keep_nodes needs one list per hidden layer (",
              model.depth() - 1, "), got ", active.size());
  const auto& width = model.options().width();
  std::vector<std::vector<int64_t>> nodes{all_nodes(width.front())};
  for (size_t l = 1; l < model.depth(); ++l)
    nodes.push_back(kept_nodes(active[l - 1], width[l], "layer " + std::to_string(l), width));
  nodes.push_back(all_nodes(width.back()));
  return with_nodes(model, nodes);
}

KAN keep_inputs(const KANImpl& model, const std::vector<int64_t>& inputs) {
  const auto& width = model.options().width();
  std::vector<std::vector<int64_t>> nodes{
      kept_nodes(inputs, width.front(), "layer 0 (the inputs)", width)};
  for (size_t l = 1; l < width.size(); ++l)
    nodes.push_back(all_nodes(width[l]));
  return with_nodes(model, nodes);
}

KAN prune_node(const KANImpl& model, const torch::Tensor& x, double threshold) {
  return prune_node(model, attribute(const_cast<KANImpl&>(model), x), threshold);
}

KAN prune_node(const KANImpl& model, const Attribution& scores, double threshold) {
  TORCH_CHECK(std::isfinite(threshold) && threshold >= 0,
              "prune_node: threshold must be finite and >= 0, got ", threshold);
  check_scores(model, scores, "prune_node");
  std::vector<std::vector<int64_t>> active;
  for (size_t l = 1; l < model.depth(); ++l)
    active.push_back(true_indices(scores.node_scores[l] > threshold));
  return keep_nodes(model, active);
}

void prune_edge(KANImpl& model, const torch::Tensor& x, double threshold) {
  prune_edge(model, attribute(model, x), threshold);
}

void prune_edge(KANImpl& model, const Attribution& scores, double threshold) {
  TORCH_CHECK(std::isfinite(threshold) && threshold >= 0,
              "prune_edge: threshold must be finite and >= 0, got ", threshold);
  check_scores(model, scores, "prune_edge");
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < model.depth(); ++l)
    model.layer(l)->mask.mul_(
        (scores.edge_scores[l] > threshold).to(model.layer(l)->mask.scalar_type()));
}

KAN prune(const KANImpl& model, const torch::Tensor& x, double node_threshold,
          double edge_threshold) {
  auto pruned = prune_node(model, x, node_threshold);
  prune_edge(*pruned, x, edge_threshold);
  return pruned;
}

InputPruning prune_input(const KANImpl& model, const torch::Tensor& x, double threshold) {
  TORCH_CHECK(std::isfinite(threshold) && threshold >= 0,
              "prune_input: threshold must be finite and >= 0, got ", threshold);
  const auto score = attribute(const_cast<KANImpl&>(model), x).feature_score();
  auto input_id = true_indices(score > threshold);
  TORCH_CHECK(!input_id.empty(), "prune_input: every input's score is at most the threshold ",
              threshold, " (the largest is ", score.max().item<double>(),
              "): lower the threshold; the model is unchanged");
  return {keep_inputs(model, input_id), std::move(input_id)};
}

torch::Tensor InputPruning::select_inputs(const torch::Tensor& x) const {
  TORCH_CHECK(!input_id.empty(), "select_inputs: input_id is empty");
  TORCH_CHECK(x.dim() == 2 && x.size(1) > input_id.back(), "select_inputs: x must be (N, ",
              input_id.back() + 1, " or more inputs), got ", x.sizes());
  return x.index_select(1, index_tensor(input_id, x.device()));
}

} // namespace kan
