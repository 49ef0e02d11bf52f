#pragma once
/// Honest measurements (docs/measuring.md): device-side epoch timing
/// and peak memory per case. Statistics of repeated timings: kan/results/statistics.h.

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kan::bench {

/// Times intervals of work on one device: CUDA events on the current stream for a GPU (the
/// host synchronises before reading them), the steady clock for the CPU.
class EpochTimer {
public:
  explicit EpochTimer(torch::Device device);
  ~EpochTimer();
  void start();
  /// Seconds since start(), after the device finished the work.
  double stop();

private:
  struct CudaEvents;
  torch::Device device_;
  std::chrono::steady_clock::time_point wall_start_;
  std::unique_ptr<CudaEvents> events_;
};

/// Peak extra memory of a piece of work: on the CPU the growth of the resident set's high-water
/// mark (reset through /proc/self/clear_refs, after malloc_trim hands freed heap memory back), on
/// a GPU the caching allocator's peak allocated bytes (its statistics reset at start).
class PeakMemory {
public:
  explicit PeakMemory(torch::Device device);
  /// Peak bytes above the level at construction; nullopt where the CPU high-water mark cannot
  /// be reset (a container that forbids /proc/self/clear_refs), rather than a wrong number.
  std::optional<int64_t> bytes() const;
  /// "cpu_rss_growth" or "cuda_peak_allocated".
  std::string kind() const;
  /// The caching allocator's peak reserved bytes (allocated plus cached) above the level at
  /// construction; nullopt on the CPU.
  std::optional<int64_t> reserved_bytes() const;

private:
  torch::Device device_;
  int64_t baseline_ = 0;
  int64_t reserved_baseline_ = 0;
  bool reset_ = true;
};

/// Frees what the CUDA caching allocator holds (after an out-of-memory error).
void release_cuda_cache();

/// Caps the CUDA caching allocator of `device` at `fraction` of its memory (PyTorch's
/// torch.cuda.set_per_process_memory_fraction): an allocation past it fails with an
/// out-of-memory error. `fraction` must be in (0, 1]; `option` names it in the error.
void set_memory_fraction(torch::Device device, double fraction,
                         const std::string& option = "--memory-fraction");

} // namespace kan::bench
