#pragma once
/// Checkpoints: a model's kind, its configuration (JSON) and its state (LibTorch serialisation)
/// in one file; a KAN's or its MLP baseline's (docs/formats.md, "Checkpoints").

#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

namespace kan {

/// Version of the checkpoint layout; bumped whenever it changes. 2: a checksum per tensor;
/// 3: the node and subnode affine parameters (files before hold none: they load as the identity);
/// 4: symbolic edges (a record of each layer's function names, and its symbolic_mask and
/// symbolic_affine where it has them; files before have no symbolic edge); 5: the model's kind
/// ("kan" or "mlp"; files before hold a KAN). Files of every earlier version still load.
constexpr int64_t kCheckpointFormatVersion = 5;

/// Writes model's kind, configuration and every parameter and buffer, each with a checksum, to
/// `path`, atomically: through a temporary file in the same folder that is synced and renamed, so
/// a full disk or a kill leaves the previous file intact, and a symbolic link at `path` is
/// replaced, not followed. A model with NaN or Inf in its state is refused (it could not be
/// loaded again).
void save_checkpoint(const KAN& model, const std::string& path);
void save_checkpoint(const MLP& model, const std::string& path);
/// Either kind, by the model it is (a KANImpl or an MLPImpl).
void save_checkpoint(const Model& model, const std::string& path);

/// The same checkpoint, handed to `write` piece by piece (for a caller that writes several files
/// as one unit, e.g. through kan::io::AtomicFile). An exception from `write` is rethrown once
/// LibTorch's archive writer is done.
void save_checkpoint(const KAN& model, const std::function<void(const void*, size_t)>& write);
void save_checkpoint(const MLP& model, const std::function<void(const void*, size_t)>& write);
void save_checkpoint(const Model& model, const std::function<void(const void*, size_t)>& write);

/// Rebuilds the model saved at `path` on `device`. A missing, empty, truncated, corrupt (a
/// checksum that does not match, NaN or Inf in a tensor) or foreign file, a tensor whose dtype or
/// shape contradicts the configuration, or a CUDA device that is not there, is an error that
/// names the file, the tensor and the problem. A checkpoint of another kind of model (an MLP's) is
/// an error naming its kind and the loader to use.
///
/// Example:
///   kan::save_checkpoint(model, "model.pt");
///   kan::KAN copy = kan::load_checkpoint("model.pt", torch::kCUDA);
KAN load_checkpoint(const std::string& path, torch::Device device = torch::kCPU);

/// The same for an MLP's checkpoint; a KAN's is an error naming its kind.
MLP load_mlp_checkpoint(const std::string& path, torch::Device device = torch::kCPU);

/// Whichever model the checkpoint holds (a KANImpl or an MLPImpl; Model::kind() says which).
///
/// Example:
///   auto model = kan::load_any_checkpoint("results/fit/model.pt");
///   auto y = model->forward(x);
std::shared_ptr<Model> load_any_checkpoint(const std::string& path,
                                           torch::Device device = torch::kCPU);

/// The kind of model the checkpoint at `path` holds (kan for files before format version 5),
/// read without building it; a file that is not a checkpoint is an error as load_checkpoint's.
ModelKind checkpoint_model_kind(const std::string& path);

/// A KAN as a user names it (any model: open_model, kan/serialize/model_file.h): a kanbench
/// checkpoint file (load_checkpoint), or the prefix that pykan's saveckpt(prefix) was called with
/// (load_pykan, kan/serialize/pykan.h; prefix_config.yml exists). A file at `path` wins over a
/// pykan checkpoint of that prefix. Neither is an error naming both.
///
/// Example:
///   kan::KAN a = kan::load_model("results/reference-fit/model.pt");
///   kan::KAN b = kan::load_model("./mark", torch::kCUDA); // pykan: model.saveckpt('./mark')
KAN load_model(const std::string& path, torch::Device device = torch::kCPU);

} // namespace kan
