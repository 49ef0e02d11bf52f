#pragma once
/// The one way to open a model file, whatever it holds: a kanbench checkpoint (a KAN's or an
/// MLP's), a pykan checkpoint prefix, or a TorchScript archive. Every command that takes --model
/// opens it here (docs/formats.md, "Model files").

#include "kan/nn/model.h"

#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kan {

/// What kind of file a model comes from.
enum class ModelFileKind { kCheckpoint, kPykan, kTorchScript };
/// "kanbench checkpoint", "pykan checkpoint", "TorchScript archive".
std::string to_string(ModelFileKind kind);

struct ModelFileOptions {
  /// Where the model's tensors go.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  /// Loads TorchScript archives, which are programs (kan/serialize/torchscript.h says why this is
  /// asked for); without it such a file is an error naming --trust-torchscript.
  TORCH_ARG(bool, trust_torchscript) = false;
  /// A TorchScript model's input width (the other files record theirs).
  TORCH_ARG(int64_t, inputs) = 0;
};

/// The kind of model file at `path`, told by content (a pykan prefix by its `_config.yml`);
/// neither a file nor a pykan prefix is an error naming both.
ModelFileKind model_file_kind(const std::string& path);

/// Opens the model at `path`: a kanbench checkpoint (load_any_checkpoint), a pykan checkpoint
/// prefix (load_pykan) or a TorchScript archive (load_torchscript), with their errors.
///
/// Example:
///   auto model = kan::open_model("results/fit/model.pt");
///   auto theirs = kan::open_model("efficient_kan.pt",
///                                 kan::ModelFileOptions().trust_torchscript(true).inputs(2));
std::shared_ptr<Model> open_model(const std::string& path,
                                  const ModelFileOptions& options = ModelFileOptions());

/// Writes `model` in the format it came in: a TorchScript module as a TorchScript archive
/// (save_torchscript), kanbench's own models as checkpoints (save_checkpoint); open_model reads
/// either back.
void save_model(const Model& model, const std::function<void(const void*, size_t)>& write);

/// An independent copy of `model` (its parameters, buffers and state) on `device` in `dtype`,
/// whatever kind it is.
std::shared_ptr<Model> copy_model(const Model& model, torch::Device device, torch::Dtype dtype);

} // namespace kan
