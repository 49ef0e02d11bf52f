#pragma once
/// Pruning a KAN, as pykan (docs/kan.md, "Pruning" and "Attribution"): operations over a KAN, as
/// torch::nn::utils holds operations over a module, each a free function of the model.
///
/// Example:
///   const auto scores = kan::attribute(*model, x);
///   kan::KAN smaller = kan::prune_node(*model, scores);   // hidden nodes scoring <= 1e-2 go
///   kan::prune_edge(*smaller, x);                         // edges scoring <= 3e-2 are masked

#include "kan/nn/network.h"

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kan {

/// How much each node, edge and subnode contributes to the outputs: pykan's attribute(), from
/// the spread (standard deviation over the samples) of every edge's and subnode's activation,
/// back-propagated from the outputs (docs/kan.md, "Attribution"). Means over the outputs.
struct Attribution {
  /// Per layer l = 0..L: (width[l]). node_scores[0] is pykan's feature_score.
  std::vector<torch::Tensor> node_scores;
  /// Per layer l = 0..L-1: (width[l], subnodes(l + 1)), edge (i, j) as coef and mask index it
  /// (pykan's edge_scores are the transpose, (out, in)).
  std::vector<torch::Tensor> edge_scores;
  /// Per layer l = 0..L-1: (subnodes(l + 1)), the outputs of layer l's KANLayer.
  std::vector<torch::Tensor> subnode_scores;

  /// The inputs' scores (pykan's feature_score).
  const torch::Tensor& feature_score() const { return node_scores.front(); }
};

/// What prune_input returns: a model of the inputs that stay, and which inputs those are.
struct InputPruning {
  /// The pruned model; its width[0] is input_id.size().
  KAN model;
  /// The inputs that stay, ascending, as columns of the original model's x (pykan's input_id).
  /// pykan's pruned model selects them from the full x itself; this one takes them selected,
  /// model(select_inputs(x)), so its checkpoint and every x-taking method stay as they are.
  std::vector<int64_t> input_id;

  /// x (N, original width[0]) -> its columns input_id, (N, input_id.size()), on x's device.
  torch::Tensor select_inputs(const torch::Tensor& x) const;
};

/// pykan's attribute() on the activations of the samples x (N, width[0]); N >= 2 (a spread
/// needs two samples). Without gradients; the model is unchanged.
Attribution attribute(KANImpl& model, const torch::Tensor& x);

/// Pruning, as pykan (docs/kan.md, "Pruning"). prune_node keeps the hidden nodes whose
/// attribution score on the samples x exceeds `threshold` and returns a smaller model (new
/// width, multiplication nodes and arities kept for the nodes that stay) whose outputs equal
/// `model`'s with the other nodes removed. A threshold that would remove every node of a
/// hidden layer is an error naming the layer; `model` is never changed.
KAN prune_node(const KANImpl& model, const torch::Tensor& x, double threshold = 1e-2);
/// The same from scores already computed (attribute(model, x)).
KAN prune_node(const KANImpl& model, const Attribution& scores, double threshold = 1e-2);
/// The same with the nodes to keep given per hidden layer (active[l - 1] for layer l).
KAN keep_nodes(const KANImpl& model, const std::vector<std::vector<int64_t>>& active);
/// Masks the edges whose attribution score on x is at most `threshold` (pykan's prune_edge).
void prune_edge(KANImpl& model, const torch::Tensor& x, double threshold = 3e-2);
/// The same from scores already computed (attribute(model, x)).
void prune_edge(KANImpl& model, const Attribution& scores, double threshold = 3e-2);
/// prune_node, then prune_edge on the pruned model (pykan's prune).
KAN prune(const KANImpl& model, const torch::Tensor& x, double node_threshold = 1e-2,
          double edge_threshold = 3e-2);
/// pykan's prune_input: keeps the inputs whose attribution score (feature_score) on x exceeds
/// `threshold`, in a smaller model that takes just them (InputPruning says how to feed it). A
/// threshold that would remove every input is an error; `model` is never changed.
InputPruning prune_input(const KANImpl& model, const torch::Tensor& x, double threshold = 1e-2);
/// The same with the inputs to keep given (pykan's active_inputs), as columns of x.
KAN keep_inputs(const KANImpl& model, const std::vector<int64_t>& inputs);
/// Masks edge i -> j of layer l.
void remove_edge(KANImpl& model, size_t l, int64_t i, int64_t j);
/// Masks every edge into node i of layer l (its subnodes) and out of it, numeric and symbolic
/// (as pykan's remove_node).
void remove_node(KANImpl& model, size_t l, int64_t i);

} // namespace kan
