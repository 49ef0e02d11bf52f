#pragma once
/// pykan 0.2.8 checkpoints, both ways (docs/kan.md, "pykan checkpoints"): what MultKAN.saveckpt(
/// prefix) writes, prefix_config.yml (the configuration, YAML), prefix_state (the state_dict,
/// torch.save) and prefix_cache_data (the inputs of the model's last forward, or None).

#include "kan/nn/network.h"

#include <torch/types.h>

#include <string>

namespace kan {

/// Whether `prefix` names a pykan checkpoint (prefix_config.yml exists).
bool is_pykan_checkpoint(const std::string& prefix);

/// Rebuilds the pykan model saved with saveckpt(prefix) on `device`, in the dtype of its state.
/// Every config field that affects the numbers is read (width, grid, k, mult_arity,
/// base_fun_name, grid_eps, grid_range, sp_trainable, sb_trainable, affine_trainable), and every
/// tensor of the state. A missing file, a YAML syntax error, an unknown base function, a
/// truncated or foreign state, a state whose tensors contradict the configuration, or a model
/// kanbench cannot represent (an edge in symbolic mode) is an error naming the file, the field
/// or tensor, and the value; nothing is loaded half.
///
/// Example (Python: model.saveckpt('./mark'); C++:)
///   kan::KAN model = kan::load_pykan("./mark");
KAN load_pykan(const std::string& prefix, torch::Device device = torch::kCPU);

/// pykan's cache_data of the checkpoint at `prefix`: the inputs of its last forward; undefined
/// when prefix_cache_data is absent or holds None.
torch::Tensor load_pykan_cache_data(const std::string& prefix);

/// Writes `model` as saveckpt(prefix) does, so that pykan 0.2.8's KAN.loadckpt(prefix) loads it
/// and gives the same outputs; `cache_data` (may be undefined) goes to prefix_cache_data. Each
/// file is written atomically. A symbolic edge whose function is not in pykan 0.2.8's
/// SYMBOLIC_LIB (one added with add_symbolic_function) is refused, naming the edge, before any
/// file is written: pykan's loadckpt could not read it.
void save_pykan(const KAN& model, const std::string& prefix, const torch::Tensor& cache_data = {});

} // namespace kan
