#pragma once
/// Checkpoints: a network's configuration (JSON) and its state (LibTorch serialisation) in
/// one file.

#include "kan/network.h"

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <string>

namespace kan {

/// Version of the checkpoint layout; bumped whenever it changes.
constexpr int64_t kCheckpointFormatVersion = 1;

/// Every KANOptions field as JSON (the device is left out: a checkpoint is loaded where asked).
nlohmann::json to_json(const KANOptions& options);
/// The inverse of to_json; a missing or mistyped key is an error naming it.
KANOptions kan_options_from_json(const nlohmann::json& json);

/// Writes model's configuration and every parameter and buffer to `path`.
void save_checkpoint(const KAN& model, const std::string& path);

/// Rebuilds the model saved at `path` on `device`. A missing, empty, truncated or foreign file
/// is an error that names the file and the problem.
///
/// Example:
///   kan::save_checkpoint(model, "model.pt");
///   kan::KAN copy = kan::load_checkpoint("model.pt", torch::kCUDA);
KAN load_checkpoint(const std::string& path, torch::Device device = torch::kCPU);

} // namespace kan
