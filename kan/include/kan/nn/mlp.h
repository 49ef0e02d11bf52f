#pragma once
/// The MLP baseline beside every KAN: LibTorch's nn::Linear layers with an activation between
/// them (docs/kan.md, "MLP baseline").

#include "kan/io/enum_names.h"
#include "kan/nn/model.h"

#include <nlohmann/json_fwd.hpp>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kan {

/// The activation between an MLP's layers.
enum class Activation { kSiLU, kTanh, kReLU };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Activation> kActivationNames[] = {
    {Activation::kSiLU, "silu"}, {Activation::kTanh, "tanh"}, {Activation::kReLU, "relu"}};
std::string to_string(Activation value);
/// Parses "silu", "tanh" or "relu"; anything else is an error naming the value and the choices.
Activation activation_from_string(const std::string& name);
/// FLOPs of one evaluation of `activation` (kSiLUFlops, kTanhFlops, kReLUFlops).
int64_t activation_flops(Activation activation);

/// Options of an MLP.
struct MLPOptions {
  /// width = {d0, d1, ..., dL}: L nn::Linear layers, layer l maps d_l -> d_{l+1}.
  explicit MLPOptions(std::vector<int64_t> width) : width_(std::move(width)) {}

  TORCH_ARG(std::vector<int64_t>, width);
  /// Applied after every layer but the last.
  TORCH_ARG(Activation, activation) = Activation::kSiLU;
  /// Seed of the initial weights and biases (MLPImpl says how they are drawn).
  TORCH_ARG(uint64_t, seed) = 0;
  /// float32 or float64.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// Where the parameters are created. `MLPImpl::device()` says where they are now.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Checks the options: at least 2 widths (inputs and outputs), each >= 1, a float32 or float64
/// dtype; an error names the option and its value.
void check_mlp_options(const MLPOptions& options);

/// The options as JSON, {"width", "activation", "seed", "dtype"} (the device is left out: a
/// model is loaded where asked); docs/formats.md, "MLP configuration".
nlohmann::json to_json(const MLPOptions& options);
/// The inverse of to_json, strict: a missing, mistyped or unknown key is a kan::io::JsonError
/// naming its key path below `path` ("model.activation: ...").
MLPOptions mlp_options_from_json(const nlohmann::json& json, const std::string& path = "");

/// Trainable scalars of an MLP of this width: sum over layers of (d_l + 1) d_{l+1}.
int64_t mlp_parameter_count(const std::vector<int64_t>& width);
/// FLOPs of one sample's forward pass: per layer 2 d_l d_{l+1} (the product's multiply-adds)
/// plus d_{l+1} (the bias), plus activation_flops per hidden unit.
int64_t mlp_forward_flops(const std::vector<int64_t>& width, Activation activation);

/// An MLP: y = L_{L-1}(act(... act(L_0(x)))), L_l = torch::nn::Linear(d_l, d_{l+1}) with bias.
///
/// Initialisation: LibTorch's default for nn::Linear (weights and biases uniform in
/// +-1/sqrt(d_l), as PyTorch's), drawn on the CPU in float64 from a generator seeded with
/// options().seed(), layer after layer, then converted and moved: one seed gives the same model on
/// every device and in every dtype, and never touches LibTorch's global generator.
///
/// Example:
///   kan::MLP model(kan::MLPOptions({2, 100, 100, 1}).activation(kan::Activation::kTanh).seed(1));
///   auto y = model(x);                     // x (N, 2) -> y (N, 1)
///   model->parameter_count();              // 10501
class MLPImpl : public torch::nn::Cloneable<MLPImpl>, public Model {
public:
  explicit MLPImpl(MLPOptions options);

  void reset() override;
  /// Draws every weight and bias again from options().seed().
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// x (N, width[0]) -> (N, width.back()). An empty batch gives a (0, width.back()) tensor.
  torch::Tensor forward(const torch::Tensor& x) override;

  torch::nn::Module& module() override { return *this; }
  const torch::nn::Module& module() const override { return *this; }
  ModelKind kind() const override { return ModelKind::kMLP; }
  void check_input(const torch::Tensor& x, const std::string& name) const override;
  torch::Device device() const override;
  torch::Dtype dtype() const override;
  int64_t inputs() const override { return options_.width().front(); }
  int64_t outputs() const override { return options_.width().back(); }
  int64_t forward_flops() const override;
  nlohmann::json config() const override;
  /// On the CPU without the regulariser (lamb 0): the forward keeps each hidden layer's output
  /// (and SiLU's sigmoid) for a hand-written backward, with no autograd; the same numbers within
  /// rounding as forward, the loss and backward. Elsewhere nullopt.
  std::optional<ObjectiveValues> mse_objective(const torch::Tensor& x, const torch::Tensor& labels,
                                               double lamb,
                                               const RegularizationOptions& weights) override;

  const MLPOptions& options() const noexcept { return options_; }
  size_t depth() const { return layers_->size(); }
  /// Layer l, l < depth().
  torch::nn::Linear layer(size_t l) const;

private:
  MLPOptions options_;
  torch::nn::ModuleList layers_;
  // mse_objective's large tensors, kept from one evaluation to the next; not model state.
  std::vector<torch::Tensor> objective_buffers_;
};

TORCH_MODULE(MLP);

} // namespace kan
