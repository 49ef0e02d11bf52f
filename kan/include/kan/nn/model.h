#pragma once
/// What training, evaluation, checkpoints and the benchmarks need of a model, whatever it is: a
/// KAN (kan/nn/network.h) or its MLP baseline (kan/nn/mlp.h). docs/kan.md, "MLP baseline".

#include "kan/io/enum_names.h"
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace kan {

struct RegularizationOptions;

/// The kinds of model the library trains: its own KAN and MLP, and a TorchScript module
/// (kan/nn/torchscript_model.h).
enum class ModelKind { kKAN, kMLP, kTorchScript };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<ModelKind> kModelKindNames[] = {
    {ModelKind::kKAN, "kan"}, {ModelKind::kMLP, "mlp"}, {ModelKind::kTorchScript, "torchscript"}};
std::string to_string(ModelKind value);
/// Parses "kan", "mlp" or "torchscript"; anything else is an error naming the value and the
/// choices.
ModelKind model_kind_from_string(const std::string& name);

/// FLOPs counted per evaluation of an activation function (forward_flops): every elementary
/// operation is one, and so is a transcendental function (exp, tanh, sin, ...), as FLOP counts
/// usually take them. SiLU x / (1 + exp(-x)) is a negation, an exp, an addition and a division.
inline constexpr int64_t kSiLUFlops = 4;
/// tanh: one transcendental function.
inline constexpr int64_t kTanhFlops = 1;
/// ReLU max(x, 0): one comparison, counted like an arithmetic operation.
inline constexpr int64_t kReLUFlops = 1;
/// A symbolic edge's library function f in c f(a x + b) + d, whichever it is.
inline constexpr int64_t kSymbolicFunctionFlops = 1;

/// A model kan::fit trains: a LibTorch module (module()) with a forward pass and the few facts
/// about itself that training, checkpoints and reports read. KANImpl and MLPImpl implement it
/// beside torch::nn::Cloneable, so `kan::KAN` and `kan::MLP` stay ordinary module holders:
///
///   kan::MLP mlp(kan::MLPOptions({2, 100, 100, 1}));
///   kan::Model& model = *mlp;           // or *kan_model
///   model.parameter_count();            // 10501
///   kan::fit(model, data, kan::FitOptions().steps(100));
///
/// What only KANs do (a regulariser, grids) has defaults here that say the model has none.
/// A training evaluation's values, 0-dim tensors of the model's dtype: the total the optimiser
/// minimises (loss + lamb * reg), the loss, and the regulariser (undefined without one).
struct ObjectiveValues {
  torch::Tensor total, loss, reg;
};

class Model {
public:
  virtual ~Model() = default;

  /// x (N, inputs()) -> (N, outputs()).
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  /// The model as a LibTorch module: its parameters, buffers, to(), train() and eval().
  virtual torch::nn::Module& module() = 0;
  virtual const torch::nn::Module& module() const = 0;

  virtual ModelKind kind() const = 0;
  /// Checks that x fits this model, (N, inputs()) of its dtype on its device; an error names
  /// `name` ("train_input") and what differs.
  virtual void check_input(const torch::Tensor& x, const std::string& name) const = 0;
  /// Where the model's tensors are now (after any `.to()`).
  virtual torch::Device device() const = 0;
  virtual torch::Dtype dtype() const = 0;
  virtual int64_t inputs() const = 0;
  virtual int64_t outputs() const = 0;
  /// Trainable scalars: the summed numel of the parameters that require a gradient.
  int64_t parameter_count() const;
  /// Floating-point operations of one sample's forward pass, counted from the operations the
  /// forward runs (a multiply-add is 2; docs/kan.md, "What counts as a FLOP"). Work done once
  /// per batch whatever its size (a KAN's coefficients scaled by scale_sp) is not per sample
  /// and is left out.
  virtual int64_t forward_flops() const = 0;
  /// The model's options as JSON, in its current dtype (to_json(KANOptions), to_json(MLPOptions):
  /// docs/formats.md); the device is left out.
  virtual nlohmann::json config() const = 0;

  /// The regulariser of the last forward (a KAN's: kan/nn/network.h). Default: no regulariser, a
  /// zero scalar on the model's device in its dtype.
  virtual torch::Tensor regularization(const RegularizationOptions& weights) const;
  /// The MSE of forward(x) against labels plus lamb * regularization(weights) (the loss alone
  /// where lamb is 0), with its gradients written into the parameters' .grad, where the model
  /// computes them without autograd (a small KAN or an MLP on the CPU: docs/library.md, "The
  /// whole-network node"); nullopt, having done nothing, elsewhere (the caller then runs
  /// forward, the loss and backward).
  virtual std::optional<ObjectiveValues> mse_objective(const torch::Tensor& x,
                                                       const torch::Tensor& labels, double lamb,
                                                       const RegularizationOptions& weights);
  /// Whether the model has grids that update_grid_from_samples moves (a KAN's splines).
  virtual bool has_grid() const { return false; }
  /// Moves the grids to the samples x (a KAN's: kan/nn/network.h). Default: an error, the model has
  /// no grid.
  virtual void update_grid_from_samples(const torch::Tensor& x, int64_t memory_budget);

protected:
  /// parameter.grad += grad, as autograd accumulates: for mse_objective's gradients (grad
  /// undefined, or a parameter that requires none: nothing).
  static void accumulate_grad(const torch::Tensor& parameter, const torch::Tensor& grad);

  Model() = default;
  Model(const Model&) = default;
  Model& operator=(const Model&) = default;
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
};

} // namespace kan
