#pragma once
/// A KAN network: a stack of KANLayers built from a width list (docs/kan.md, "Network").

#include "kan/nn/layer.h"
#include "kan/nn/model.h"
#include "kan/nn/options.h"
#include "kan/symbolic/expression.h"
#include "kan/symbolic/symbolic.h"

#include <nlohmann/json_fwd.hpp>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kan {

/// Options of a KAN network, with pykan 0.2.8's MultKAN defaults.
struct KANOptions {
  /// width = {d0, d1, ..., dL}: L layers, layer l maps d_l -> d_{l+1}.
  explicit KANOptions(std::vector<int64_t> width) : width_(std::move(width)) {}

  TORCH_ARG(std::vector<int64_t>, width);
  /// Number of grid intervals G of every layer.
  TORCH_ARG(int64_t, grid) = 3;
  /// Spline order k of every layer.
  TORCH_ARG(int64_t, k) = 3;
  /// Seed of all initial draws (layer l uses a seed derived from this one and l).
  TORCH_ARG(uint64_t, seed) = 1;
  TORCH_ARG(double, noise_scale) = 0.3;
  TORCH_ARG(double, scale_base_mu) = 0.0;
  TORCH_ARG(double, scale_base_sigma) = 1.0;
  TORCH_ARG(double, scale_sp) = 1.0;
  TORCH_ARG(BaseFunction, base_fun) = BaseFunction::kSiLU;
  TORCH_ARG(double, grid_eps) = 0.02;
  TORCH_ARG(GridRange, grid_range) = GridRange{-1.0, 1.0};
  TORCH_ARG(bool, sp_trainable) = true;
  TORCH_ARG(bool, sb_trainable) = true;
  /// Where every parameter and buffer is created. `KANImpl::device()` says where they are now.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  /// float32 or float64.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// Spline backend of every layer: kFused (default) or kReference.
  TORCH_ARG(SplineBackend, backend) = SplineBackend::kFused;
  /// Multiplication nodes, as pykan's MultKAN (docs/kan.md, "Multiplication nodes"): mult[l] of
  /// layer l's width[l] nodes are multiplication nodes, the last ones; empty = none. pykan's
  /// width [2, [2, 1], 1] is width {2, 3, 1} with mult {0, 1, 0}. The inputs have none.
  TORCH_ARG(std::vector<int64_t>, mult) = {};
  /// How many subnodes every multiplication node multiplies (>= 2), unless node_arity says.
  TORCH_ARG(int64_t, mult_arity) = 2;
  /// pykan's per-node form: node_arity[l][j] is the arity of layer l's multiplication node j
  /// (one list per layer, as long as mult[l]); empty = mult_arity everywhere.
  TORCH_ARG(std::vector<std::vector<int64_t>>, node_arity) = {};
  /// Whether the node and subnode affine parameters (node_scale, node_bias, subnode_scale,
  /// subnode_bias) train.
  TORCH_ARG(bool, affine_trainable) = false;
};

/// Checks width, mult and the arities together; an error names the entry and its value.
void check_structure(const KANOptions& options);
/// How many of layer l's nodes are multiplication nodes (0 without any).
int64_t mult_nodes(const KANOptions& options, size_t l);
/// The arity of layer l's multiplication node j.
int64_t node_arity(const KANOptions& options, size_t l, int64_t j);
/// The subnodes of layer l: its addition nodes plus, per multiplication node, its arity. Layer
/// l - 1's KANLayer has this many outputs.
int64_t subnodes(const KANOptions& options, size_t l);
/// Whether the network has multiplication nodes.
bool has_mult_nodes(const KANOptions& options);

/// Every KANOptions field as JSON (the device is left out: a model is loaded where asked);
/// docs/formats.md, "KAN configuration".
nlohmann::json to_json(const KANOptions& options);
/// The inverse of to_json, strict: a missing, mistyped or unknown key is a kan::io::JsonError
/// naming its key path below `path` ("model.k: expected an integer, got a string (\"3\")").
KANOptions kan_options_from_json(const nlohmann::json& json, const std::string& path = "");

/// The options of layer l of a network built from `options`.
KANLayerOptions layer_options(const KANOptions& options, size_t l);

/// Trainable scalars of a new network built from `options`: per layer coef, scale_base and
/// scale_sp as they train (sp_trainable, sb_trainable), I O (G + k) + I O + I O, plus the node
/// and subnode affine parameters when affine_trainable. Equals KANImpl::parameter_count() until
/// symbolic edges add their parameters.
int64_t kan_parameter_count(const KANOptions& options);
/// FLOPs of one sample's forward pass through a network built from `options` (no symbolic
/// edges), as its spline backend computes it (docs/kan.md, "What counts as a FLOP"). Per layer of
/// I inputs and O outputs (subnodes): the B-spline basis per input, 7 per basis function and
/// order of the Cox-de Boor recursion (two subtractions, four multiplications, an addition):
/// kFused evaluates the k + 1 functions that can be non-zero, 7 k (k + 3) / 2, independent of G;
/// kReference all of them, 7 (k (G + 2k) - k (k + 1) / 2). The spline sums, 2 I O (k + 1) (kFused)
/// or 2 I O (G + k) (kReference, a dense product). The base branch (unless base_fun is zero):
/// I activations (kSiLUFlops each for SiLU, 0 for the identity), 2 I O for the product with
/// scale_base and O to add it. Between layers, where forward applies the affine maps: 2 per
/// subnode, arity - 1 per multiplication node, 2 per node.
int64_t kan_forward_flops(const KANOptions& options);

/// Weights of the regulariser (docs/kan.md, "Regularisation"; pykan's defaults).
struct RegularizationOptions {
  TORCH_ARG(double, lamb_l1) = 1.0;
  TORCH_ARG(double, lamb_entropy) = 2.0;
  TORCH_ARG(double, lamb_coef) = 0.0;
  TORCH_ARG(double, lamb_coefdiff) = 0.0;
  /// Data-parallel training (kan::DataParallel::sum_differentiable): sums a tensor of per-edge
  /// and per-input sample statistics over the ranks, so that every rank scores the edges on the
  /// whole global batch. Empty: this process's batch is the whole batch.
  TORCH_ARG(std::function<torch::Tensor(const torch::Tensor&)>, sum_over_ranks) = nullptr;
  /// Whether the gradient flows through the coefficient terms (lamb_coef, lamb_coefdiff), which
  /// depend on no sample: data-parallel ranks other than 0 keep their value but not their
  /// gradient, so that the gradients summed over the ranks count them once.
  TORCH_ARG(bool, differentiate_coefficient_terms) = true;
};

class KAN;

namespace detail {
class KeptInput;
} // namespace detail

/// A KAN: y = layer_{L-1}( ... layer_0(x)).
///
/// Example:
///   kan::KAN model(kan::KANOptions({2, 5, 1}).grid(3).k(3).seed(0).dtype(torch::kFloat64));
///   auto y = model(x);                          // x (N, 2) -> y (N, 1)
///   model->update_grid_from_samples(x);
///   kan::KAN finer = model->refine(10, x);      // G = 3 -> 10
class KANImpl : public torch::nn::Cloneable<KANImpl>, public Model {
public:
  explicit KANImpl(KANOptions options);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  /// x (N, width[0]) -> (N, width.back()). An empty batch gives a (0, width.back()) tensor.
  torch::Tensor forward(const torch::Tensor& x) override;

  // kan::Model (kan/nn/model.h).
  torch::nn::Module& module() override { return *this; }
  const torch::nn::Module& module() const override { return *this; }
  ModelKind kind() const override { return ModelKind::kKAN; }
  int64_t inputs() const override { return options_.width().front(); }
  int64_t outputs() const override { return options_.width().back(); }
  /// kan_forward_flops(options()) plus the symbolic branch of every symbolic edge (docs/kan.md,
  /// "What counts as a FLOP").
  int64_t forward_flops() const override;
  /// to_json(options()) in the model's current dtype.
  nlohmann::json config() const override;
  bool has_grid() const override { return true; }

  /// Layer l+1's nodes from layer l's outputs (its subnodes y, (N, subnodes(l + 1))), as
  /// pykan: subnode affine, products of the multiplication nodes' groups, node affine. The
  /// identity (y itself) for a network without multiplication nodes or trainable affine
  /// parameters, whose affine parameters stay 1 and 0.
  torch::Tensor nodes_from_subnodes(size_t l, const torch::Tensor& y) const;
  /// Whether forward applies the affine parameters (affine_trainable or multiplication nodes).
  bool applies_affine() const;

  /// Keep every layer's activations from each forward (for plots and pruning, and
  /// regularization(); off by default, which is the fast path).
  void set_save_activations(bool save) { save_activations_ = save; }
  bool save_activations() const noexcept { return save_activations_; }
  /// Keep what regularization() needs and no more (KANLayerImpl::forward_with_statistics: on the
  /// fused backend per-edge sums, not the (N, I, O) activations). save_activations wins.
  void set_save_statistics(bool save) { save_statistics_ = save; }
  bool save_statistics() const noexcept { return save_statistics_; }
  /// Whether forward may run the whole network as one autograd node (on by default): on the
  /// CPU with the fused backend, outside autocast, without symbolic edges or save_activations,
  /// and where the layers would each run as one node (docs/library.md, "The whole-network
  /// node"). The same results within rounding; off runs layer by layer, for comparisons.
  void set_whole_network_node(bool allow) { whole_network_node_ = allow; }
  bool whole_network_node() const noexcept { return whole_network_node_; }
  /// What the last forward kept, one entry per layer (empty when it kept nothing). From the
  /// whole-network node: each layer's input, output and sums.
  const std::vector<LayerActivations>& activations() const noexcept { return activations_; }

  /// Updates every layer's grid from the samples x (N, width[0]), layer by layer: layer l's
  /// samples are the outputs of the already updated layers before it. Refuses NaN or Inf in x
  /// (and in a hidden layer's samples, naming the layer). Its extra memory beyond the samples
  /// and each layer's outputs stays near `memory_budget` bytes, as the layer's does.
  void update_grid_from_samples(const torch::Tensor& x,
                                int64_t memory_budget = kDefaultGridUpdateMemoryBytes) override;

  /// A new model with G = new_grid whose splines are fitted to this one's at the samples x
  /// (N, width[0]) (pass the training inputs), or at a dense uniform sample of each layer's
  /// grid range when x is undefined. Same device and dtype as this model. Refuses NaN or Inf in
  /// x; extra memory beyond the new model bounded like update_grid_from_samples.
  KAN refine(int64_t new_grid, const torch::Tensor& x = {},
             int64_t memory_budget = kDefaultGridUpdateMemoryBytes) const;

  /// Whether any edge is symbolic (host-side record; no device sync).
  bool has_symbolic_edges() const;
  /// The regulariser of the last forward's activations (save_activations or save_statistics
  /// must be on).
  torch::Tensor regularization(const RegularizationOptions& weights = {}) const override;
  /// Without autograd where forward runs as one node (whole_network_node) and the regulariser is
  /// its sample terms only (no lamb_coef, lamb_coefdiff or sum over ranks); the same numbers
  /// within rounding as forward, the loss, regularization and backward.
  std::optional<ObjectiveValues> mse_objective(const torch::Tensor& x, const torch::Tensor& labels,
                                               double lamb,
                                               const RegularizationOptions& weights) override;

  /// Checks that x fits this model: (N, width[0]), its dtype, its device.
  void check_input(const torch::Tensor& x, const char* what = "input") const;
  void check_input(const torch::Tensor& x, const std::string& what) const override {
    check_input(x, what.c_str());
  }

  const KANOptions& options() const noexcept { return options_; }
  /// Where the model's tensors are now (after any `.to()`).
  torch::Device device() const override;
  torch::Dtype dtype() const override;
  size_t depth() const { return layers_->size(); }
  KANLayer layer(size_t l) const { return KANLayer(layers_->ptr<KANLayerImpl>(l)); }

  /// Per layer l: the affine maps of layer l+1's nodes (width[l + 1]) and of layer l's outputs,
  /// its subnodes (subnodes(l + 1)). Registered as node_scale_0, node_bias_0, subnode_scale_0,
  /// subnode_bias_0, ... (pykan's names); trainable when affine_trainable.
  std::vector<torch::Tensor> node_scale, node_bias, subnode_scale, subnode_bias;

private:
  bool runs_as_one_node(const torch::Tensor& x, bool statistics) const;
  torch::Tensor forward_as_one_node(const torch::Tensor& x);

  KANOptions options_;
  torch::nn::ModuleList layers_;
  bool save_activations_ = false;
  bool save_statistics_ = false;
  bool whole_network_node_ = true;
  // Transient outputs of the last forward, recomputed each time; not model state.
  std::vector<LayerActivations> activations_;
  // mse_objective's first-layer values that depend on x and the grid alone, kept for the next
  // evaluation at the same ones; not model state.
  std::shared_ptr<detail::KeptInput> kept_input_;
};

TORCH_MODULE(KAN);

} // namespace kan
