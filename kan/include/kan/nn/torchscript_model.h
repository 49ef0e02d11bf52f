#pragma once
/// A TorchScript module as a kan::Model: a KAN (or any network) written in PyTorch with another
/// library, scripted or traced and saved (`torch.jit.save`), trained, timed and audited like
/// kanbench's own models (docs/torchscript.md). Loading one from a file is
/// kan::load_torchscript (kan/serialize/torchscript.h).

#include "kan/nn/model.h"

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace torch::jit {
struct Module;
}

namespace kan {

/// A tensor of a TorchScript module by its dotted path ("layers.0.grid").
struct NamedScriptTensor {
  std::string path;
  torch::Tensor tensor;
};

/// The model behind a TorchScript module. Its parameters and buffers are also registered, as the
/// very same tensors, in a tree of torch::nn::Modules mirroring the script's submodules, so that
/// module() is an ordinary LibTorch module: named_parameters() has the script's dotted names,
/// optimisers update the script's tensors in place, and to() moves them as PyTorch's `.to()`
/// does (tensor attributes that are neither parameters nor buffers stay where they are: see
/// plain_tensor_attributes()).
///
/// The model takes (N, inputs()) and must return one (N, outputs()) tensor; outputs() is found by
/// evaluating one sample when the model is made. Its dtype is its parameters' (float32 or
/// float64).
///
/// Example:
///   auto model = kan::load_torchscript("efficient_kan.pt",
///                                      kan::TorchScriptLoadOptions().trusted(true).inputs(2));
///   auto y = model->forward(x);            // x (N, 2)
///   kan::fit(*model, data, kan::FitOptions().opt(kan::Optimizer::kAdam));
///   kan::save_torchscript(*model, "trained.pt"); // torch.jit.load reads it
class TorchScriptModelImpl : public torch::nn::Module, public Model {
public:
  /// `script` as loaded; `inputs` its input width; `source` where it came from (for messages and
  /// config()); `outputs` where known (a copy's), else found by one sample of zeros in evaluation
  /// mode that leaves every buffer as it was. An error where its parameters are not all float32
  /// or all float64, or where that sample does not give one (1, outputs) tensor. The training
  /// flag is the script's.
  TorchScriptModelImpl(const torch::jit::Module& script, int64_t inputs, std::string source,
                       std::optional<int64_t> outputs = std::nullopt);
  ~TorchScriptModelImpl() override;

  /// x (N, inputs()) -> (N, outputs()), the script's forward. Its errors are c10::Errors (an
  /// out-of-memory one a c10::OutOfMemoryError), whatever the interpreter threw.
  torch::Tensor forward(const torch::Tensor& x) override;

  torch::nn::Module& module() override { return *this; }
  const torch::nn::Module& module() const override { return *this; }
  ModelKind kind() const override { return ModelKind::kTorchScript; }
  void check_input(const torch::Tensor& x, const std::string& name) const override;
  torch::Device device() const override;
  torch::Dtype dtype() const override;
  int64_t inputs() const override { return inputs_; }
  int64_t outputs() const override { return outputs_; }
  /// 0: kanbench does not count the operations of a program it did not write.
  int64_t forward_flops() const override { return 0; }
  /// {"kind": "torchscript", "source", "class", "inputs", "outputs", "width": [inputs, outputs],
  /// "dtype", "parameters": [{"name", "shape"}], "buffers": [...], "plain_tensor_attributes":
  /// [...]}.
  nlohmann::json config() const override;

  /// An independent copy (the script deep-copied), moved to `device` where given.
  std::shared_ptr<torch::nn::Module>
  clone(const std::optional<torch::Device>& device = std::nullopt) const override;
  /// Sets the script's training flag too (its dropout or batch norm see it).
  void train(bool on = true) override;
  /// As PyTorch's `.to(dtype)`: floating-point parameters and buffers only, so that integer
  /// buffers (indices, degrees) keep their type (LibTorch's Module::to converts every tensor).
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  using torch::nn::Module::to;
  void pretty_print(std::ostream& stream) const override;

  /// Tensor attributes of the script and its submodules that are neither parameters nor buffers:
  /// to() does not move them, in PyTorch or here, so a model that keeps one breaks on a GPU.
  std::vector<NamedScriptTensor> plain_tensor_attributes() const;
  /// The TorchScript module itself (its methods, graphs and source).
  const torch::jit::Module& script() const { return *script_; }
  const std::string& source() const { return source_; }

private:
  // Registers the script's parameters and buffers in this module and a mirror of its submodules.
  void mirror();
  // The output width: one sample through the script (the constructor says how).
  int64_t probe_outputs();
  // Moves every parameter and buffer to `device` (where given) and the floating ones to `dtype`.
  void convert(std::optional<torch::Device> device, torch::Dtype dtype, bool non_blocking);

  std::unique_ptr<torch::jit::Module> script_;
  int64_t inputs_ = 0;
  int64_t outputs_ = 0;
  std::string source_;
};

TORCH_MODULE(TorchScriptModel);

} // namespace kan
