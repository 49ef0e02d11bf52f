#pragma once
/// One KAN layer: in_dim x out_dim learnable B-spline edges (docs/kan.md, "One KAN layer").

#include "kan/nn/bspline.h"
#include "kan/nn/options.h"

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace kan {

/// Options of a KANLayer, with pykan 0.2.8's KANLayer defaults.
struct KANLayerOptions {
  KANLayerOptions(int64_t in_dim, int64_t out_dim) : in_dim_(in_dim), out_dim_(out_dim) {}

  /// Number of inputs I.
  TORCH_ARG(int64_t, in_dim);
  /// Number of outputs O.
  TORCH_ARG(int64_t, out_dim);
  /// Number of grid intervals G (pykan's `num`).
  TORCH_ARG(int64_t, grid) = 5;
  /// Spline order k.
  TORCH_ARG(int64_t, k) = 3;
  /// Amplitude of the random initial splines: U(-1/2, 1/2) * noise_scale / G at the knots.
  TORCH_ARG(double, noise_scale) = 0.5;
  /// scale_base = scale_base_mu / sqrt(I) + scale_base_sigma * U(-1, 1) / sqrt(I).
  TORCH_ARG(double, scale_base_mu) = 0.0;
  TORCH_ARG(double, scale_base_sigma) = 1.0;
  /// scale_sp = scale_sp / sqrt(I).
  TORCH_ARG(double, scale_sp) = 1.0;
  TORCH_ARG(BaseFunction, base_fun) = BaseFunction::kSiLU;
  /// Mix of uniform (1) and sample-adaptive (0) knots in a grid update.
  TORCH_ARG(double, grid_eps) = 0.02;
  TORCH_ARG(GridRange, grid_range) = GridRange{-1.0, 1.0};
  TORCH_ARG(bool, sp_trainable) = true;
  TORCH_ARG(bool, sb_trainable) = true;
  /// Seed of the initial draws; they are made on the CPU in float64, then converted and moved,
  /// so layers with one seed start identical on every device.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Where parameters and buffers are created.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  /// float32 or float64.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// How the splines are evaluated (forward, forward_with_activations, grid updates): kFused
  /// (default; knot rows must be non-decreasing, as every grid this library builds is; no double
  /// backward) or kReference (the ATen oracle).
  TORCH_ARG(SplineBackend, backend) = SplineBackend::kFused;
};

/// Everything one forward computes, for regularisation, pruning and plots.
struct LayerActivations {
  torch::Tensor input; ///< x, (N, I)
  torch::Tensor edges; ///< phi_ij(x_ni), numeric plus symbolic part, (N, I, O)
  /// The numeric part of edges (base + spline, masked): what the regulariser scores. The same
  /// tensor as edges when no edge of the layer is symbolic.
  torch::Tensor numeric;
  torch::Tensor spline; ///< sum_m coef_ijm B_m(x_ni), unscaled, (N, I, O)
  torch::Tensor output; ///< y = sum_i phi_ij, (N, O)
  /// forward_with_statistics on the fused backend: instead of edges, numeric and spline, the
  /// regulariser's per-edge sums over the samples of the numeric part, (2, I, O) float64:
  /// [0] sum_n phi_nij, [1] sum_n phi_nij^2.
  torch::Tensor moments;
};

/// A KAN layer: y_j = sum_i mask_ij (scale_base_ij b(x_i) + scale_sp_ij spline_ij(x_i)), plus
/// pykan's symbolic branch sum_i symbolic_mask_ji (c f(a x_i + b) + d) once an edge is symbolic
/// (docs/kan.md, "Symbolic edges").
///
/// Parameters: `coef` (I, O, G + k), `scale_base` (I, O), `scale_sp` (I, O), and
/// `symbolic_affine` (O, I, 4) once the layer has symbolic state.
/// Buffers: `grid` (I, G + 2k + 1), `mask` (I, O), and `symbolic_mask` (O, I) likewise.
///
/// Example:
///   kan::KANLayer layer(kan::KANLayerOptions(2, 3).grid(5).k(3).dtype(torch::kFloat64));
///   auto y = layer(torch::rand({10, 2}, torch::kFloat64));   // (10, 3)
class KANLayerImpl : public torch::nn::Cloneable<KANLayerImpl> {
public:
  KANLayerImpl(int64_t in_dim, int64_t out_dim) : KANLayerImpl(KANLayerOptions(in_dim, out_dim)) {}
  explicit KANLayerImpl(KANLayerOptions options);

  void reset() override;
  /// Draws the initial coef, scale_base and scale_sp again from options().seed().
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// x (N, I) -> y (N, O). An empty batch gives a (0, O) tensor.
  torch::Tensor forward(const torch::Tensor& x);
  /// Like forward, and also returns every edge's value, numeric and spline part.
  LayerActivations forward_with_activations(const torch::Tensor& x);
  /// Like forward, and also returns what the regulariser needs: on the fused backend input,
  /// output and moments only (O(I * O) memory, differentiable like the activations); on the
  /// reference backend forward_with_activations.
  LayerActivations forward_with_statistics(const torch::Tensor& x);
  /// Every edge's spline, sum_m coef_ijm B_m(x_ni), unscaled and unmasked: (N, I, O).
  torch::Tensor edge_splines(const torch::Tensor& x) const;

  /// Moves the knots to the distribution of the samples x (N, I) (grid_eps mixes uniform and
  /// quantile knots) and refits coef so the splines keep their values at the samples. Refuses
  /// NaN or Inf in x. Works through the inputs (and where one input alone is too big, its
  /// outputs and samples) in pieces, so its extra memory beyond x stays near `memory_budget`
  /// bytes whatever N, I, O and G are (curve2coef_chunks); the result does not depend on it.
  void update_grid_from_samples(const torch::Tensor& x,
                                int64_t memory_budget = kDefaultGridUpdateMemoryBytes);
  /// Takes parent's scales and mask, places this layer's G knots by piecewise-linear
  /// interpolation of parent's knots (keeping every parent knot when G >= parent's G, so the
  /// parent's splines are reproduced exactly inside its grid), and fits coef to parent's splines
  /// at x (N, I); with an undefined or empty x, at a dense uniform sample of parent's grid range.
  /// Refuses NaN or Inf in x; extra memory bounded like update_grid_from_samples.
  void initialize_from_parent(const KANLayerImpl& parent, const torch::Tensor& x = {},
                              int64_t memory_budget = kDefaultGridUpdateMemoryBytes);

  /// Checks that x is a (N, in_dim) floating tensor of this layer's dtype and device; the
  /// message names `what` and both devices or dtypes.
  void check_input(const torch::Tensor& x, const char* what = "input") const;

  const KANLayerOptions& options() const noexcept { return options_; }
  torch::Device device() const { return grid.device(); }
  torch::Dtype dtype() const { return coef.scalar_type(); }

  torch::Tensor grid;       ///< buffer (I, G + 2k + 1)
  torch::Tensor mask;       ///< buffer (I, O): 1 = alive, 0 = pruned
  torch::Tensor coef;       ///< parameter (I, O, G + k)
  torch::Tensor scale_base; ///< parameter (I, O)
  torch::Tensor scale_sp;   ///< parameter (I, O)

  // The symbolic branch (pykan's Symbolic_KANLayer). Registered by the first symbolic edge
  // (enable_symbolic) and kept from then on; undefined before, so a layer that never had one
  // costs nothing (docs/kan.md, "Symbolic edges", says why).
  torch::Tensor symbolic_mask;   ///< buffer (O, I): 1 = edge j <- i is symbolic (pykan's layout)
  torch::Tensor symbolic_affine; ///< parameter (O, I, 4): a, b, c, d of c f(a x + b) + d

  /// Whether symbolic_mask and symbolic_affine are registered.
  bool has_symbolic_state() const noexcept { return !symbolic_names_.empty(); }
  /// Registers symbolic_mask (zeros) and symbolic_affine (zeros), every function "0"; a no-op
  /// when they are registered already. Parameters lists taken before do not hold the new one.
  void enable_symbolic();
  /// How many edges have a non-zero symbolic mask (a host-side record: no device sync).
  int64_t symbolic_edge_count() const noexcept { return symbolic_count_; }
  /// The symbolic function of edge i -> j ("0" when none was set).
  const std::string& symbolic_name(int64_t i, int64_t j) const;
  /// Sets edges in[e] -> out[e]'s symbolic function names[e] (names must be in the library),
  /// symbolic mask symbolic_mask[e], and, where `affine` (E, 4) is defined, their a, b, c, d.
  /// Registers the symbolic state first if needed. Whole-tensor writes, one per tensor.
  void set_symbolic_edges(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                          const std::vector<std::string>& names,
                          const std::vector<double>& symbolic_mask,
                          const torch::Tensor& affine = {});
  /// Re-reads the host-side record of symbolic edges from symbolic_mask (one device sync), after
  /// symbolic_mask was written directly (e.g. loaded).
  void sync_symbolic_mask();
  /// Copies every symbolic name, mask and affine value of `other` at inputs `in_ids` and outputs
  /// `out_ids` (of `other`) into this layer, which must be in_ids.size() x out_ids.size().
  void copy_symbolic_from(const KANLayerImpl& other, const std::vector<int64_t>& in_ids,
                          const std::vector<int64_t>& out_ids);

private:
  /// The symbolic branch's value of every active edge added into y (N, O) and, when given,
  /// edges (N, I, O); both returned.
  std::pair<torch::Tensor, torch::Tensor> add_symbolic(const torch::Tensor& x, torch::Tensor y,
                                                       torch::Tensor edges) const;
  /// Registers the symbolic tensors (zero) under their names.
  void register_symbolic();

  torch::Tensor base(const torch::Tensor& x) const;
  /// The spline weight as one (I * (G + k), O) matrix: mask * scale_sp * coef.
  torch::Tensor spline_weight() const;
  /// The fused backend's one-node layer on the CPU (detail::fused_layer_with_moments): the output
  /// with the symbolic branch, and the regulariser's sums.
  std::pair<torch::Tensor, torch::Tensor> forward_as_one_node(const torch::Tensor& x);
  /// forward's tail: the spline part y plus the base part (base_x = base(x)) and the symbolic
  /// branch.
  torch::Tensor add_base_and_symbolic(const torch::Tensor& x, const torch::Tensor& base_x,
                                      torch::Tensor y);

  KANLayerOptions options_;
  // Host-side record of the symbolic branch, so that forward knows without a device sync
  // whether and where to compute it: names (O * I, row j * I + i) and which masks are non-zero.
  std::vector<std::string> symbolic_names_;
  std::vector<uint8_t> symbolic_on_;
  int64_t symbolic_count_ = 0;
  // Per distinct function: the device indices of its active edges, rebuilt when the record or
  // the device changes (a cache, not state: .to() needs nothing of it).
  struct SymbolicGroup {
    std::string name;
    torch::Tensor in, out, flat, edge; // input i, output j, j * I + i, i * O + j
  };
  mutable std::vector<SymbolicGroup> symbolic_groups_;
  mutable bool symbolic_groups_valid_ = false;
  mutable torch::Device symbolic_groups_device_ = torch::kCPU;
};

TORCH_MODULE(KANLayer);

} // namespace kan
