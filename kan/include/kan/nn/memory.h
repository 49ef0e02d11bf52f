#pragma once
/// How much memory a KAN and its training need, how much a device has, and a check that refuses
/// a run which cannot fit before anything is allocated (a CPU run past the memory is killed by
/// the kernel without a message; a GPU run fails deep inside a step).

#include "kan/nn/network.h"
#include "kan/train/fit.h"

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kan {

/// Bytes for people: "512 B", "1.50 KB", "23.8 GB" (powers of 1000, 3 significant digits, up
/// to EB). INT64_MAX, where every estimate here saturates, reads "more than 9.22 EB".
std::string format_bytes(int64_t bytes);

/// One part of a memory estimate.
struct MemoryPart {
  std::string name;  ///< e.g. "parameters", "optimizer state (LBFGS, history 10)"
  int64_t bytes = 0; ///< saturates at INT64_MAX
  /// Transient parts never exist at the same time (a training step's activations, a grid
  /// update): the total counts the largest of them on top of every persistent part.
  bool transient = false;
};

/// What a model (and its training) needs, part by part.
struct MemoryEstimate {
  /// What was estimated, e.g. "the model [2, 5, 1] (G 5, k 3, float64) and one LBFGS step".
  std::string what;
  torch::Device device = torch::kCPU;
  std::vector<MemoryPart> parts;

  /// Every persistent part plus the largest transient one; saturates at INT64_MAX.
  int64_t total() const;
  /// The parts with human sizes: "parameters 24 GB, gradients 19.2 GB, ...".
  std::string breakdown() const;
};

/// The parameters and buffers of the model `options` describes, without building it.
MemoryEstimate estimate_model_memory(const KANOptions& options);

/// The memory of fit(model, data, fit) for a model built from `model` and a dataset of
/// train_num + test_num samples, without allocating anything: parameters, buffers, gradients,
/// optimizer state (Adam's two moments; LBFGS's 2 x history_size directions, its current
/// direction and gradients, and its line search's copies), the dataset, one step's
/// forward/backward activations for a batch (the (N, I, O) edge activations where fit.lamb() > 0,
/// the reference backend's (N, I, G + k) basis and its recursion) and, where fit.update_grid(),
/// a grid update within fit.grid_update_memory(). Good to about a factor of 2 (allocator
/// rounding, LibTorch's own buffers and the CUDA context are not counted). Arithmetic saturates:
/// absurd widths give INT64_MAX, never a wrapped number.
///
/// Example:
///   auto e = kan::estimate_training_memory(kan::KANOptions({2, 5, 1}), kan::FitOptions(), 1000,
///   1000); std::cout << kan::format_bytes(e.total()) << " (" << e.breakdown() << ")\n";
MemoryEstimate estimate_training_memory(const KANOptions& model, const FitOptions& fit,
                                        int64_t train_num, int64_t test_num);

/// Bytes that `device` can still allocate. CPU: MemAvailable of /proc/meminfo, or where lower the
/// room left under the process's cgroup memory limit (v2 memory.max, v1
/// memory.limit_in_bytes, of its cgroup and every ancestor; reclaimable page cache counts as
/// free). CUDA: the device's free memory (cudaMemGetInfo) plus what LibTorch's caching allocator
/// holds unused. A CUDA device without a usable GPU is an error saying so; other device types are
/// an error too.
int64_t available_memory(torch::Device device);

/// Throws c10::OutOfMemoryError (a c10::Error) when estimate.total() exceeds available_bytes, with
/// a message naming what needs how much, its parts, and what the device has, e.g. "the model
/// [2, 100000000, 1] (G 5, k 3, float64) and one LBFGS step need about 105 GB (parameters 24 GB,
/// ...) but cpu has 20.1 GB available; ...".
void check_fits_in_memory(const MemoryEstimate& estimate, int64_t available_bytes);

/// estimate_training_memory checked against available_memory(model.device()); returns the
/// estimate when it fits. Call it before building the model or the dataset.
MemoryEstimate check_fits_in_memory(const KANOptions& model, const FitOptions& fit,
                                    int64_t train_num, int64_t test_num);

} // namespace kan
