#pragma once
/// Where a run happened: software versions, devices, CPU (results.json `environment`).
/// Plain data, free of LibTorch: diagnostics fills it on the measuring machine, reports reads
/// it anywhere.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// One CUDA device as the runtime sees it.
struct CudaDevice {
  int64_t index = 0;
  std::string name;
  std::string compute_capability; ///< "9.0"
  int64_t multiprocessors = 0;
  int64_t total_memory_bytes = 0;
  int64_t free_memory_bytes = 0;
};

/// Something in the environment that stops or degrades a measurement, with what to do.
struct EnvironmentProblem {
  std::string what; ///< "CUDA is not usable: no NVIDIA driver (libcuda.so.1 not found)"
  std::string fix;  ///< "Install the NVIDIA driver, or run with --devices cpu."
};

/// The machine and software a run used.
struct Environment {
  std::string kanbench_version;
  std::string git_commit; ///< empty when unknown
  std::string date;       ///< ISO 8601 UTC, "2026-11-29T18:36:08Z"
  std::string hostname;

  std::string libtorch_version;     ///< "2.11.0"
  std::string cuda_build_version;   ///< CUDA LibTorch was built with, "13.0"; empty for CPU builds
  std::string cudnn_build_version;  ///< "9.10.2"; empty when LibTorch has no cuDNN
  std::string cuda_runtime_version; ///< empty when CUDA is not usable
  std::string cuda_driver_version;  ///< highest CUDA version the driver supports; empty if none

  bool cuda_available = false;
  std::string cuda_unavailable_reason;             ///< empty when cuda_available
  std::optional<std::string> cuda_visible_devices; ///< the variable's value; nullopt when unset
  std::vector<CudaDevice> cuda_devices;

  std::string cpu_model;
  int64_t cpu_cores = 0;     ///< logical CPUs this process may run on
  int64_t torch_threads = 0; ///< at::get_num_threads()

  /// The CPU frequency scaling governor ("performance", "powersave", ...); nullopt where the
  /// machine does not expose one (a VM without cpufreq).
  std::optional<std::string> cpu_governor;
  /// The 1-minute load average when the run started; nullopt where unreadable.
  std::optional<double> load_average;

  bool nvtx_available = false;  ///< built with NVTX3 ranges
  bool cupti_available = false; ///< built with CUPTI (whether it can start is a run-time matter)

  std::vector<EnvironmentProblem> problems;
};

} // namespace kan::results
