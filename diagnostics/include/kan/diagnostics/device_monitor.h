#pragma once
/// The "nvidia-smi view" of a run: a device's utilisation, memory, SM clock, power, temperature
/// and throttling, sampled on a background thread while a case runs, from NVML for a GPU or
/// from the process's CPU time for a CPU target. Where NVML is missing (no driver, a container
/// without it) or there is no GPU, the monitor says why and samples nothing; it never fails the
/// run.
///
/// NVML is loaded at run time (dlopen of libnvidia-ml.so.1), never linked, through a table of
/// its entry points (NvmlApi) that a test can fill with a fake.

#include "kan/results/monitoring.h"

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace kan::diagnostics {
namespace detail {
struct MonitorState;
} // namespace detail

// NVML's types, declared here because the CUDA toolkit does not always ship nvml.h; the layouts
// and values are those of nvml.h, which has kept them stable since NVML's first release.

/// nvmlReturn_t: 0 (NVML_SUCCESS) is success, anything else an error.
using NvmlReturn = int;
/// NVML_SUCCESS.
inline constexpr NvmlReturn kNvmlSuccess = 0;
/// nvmlDevice_t: an opaque handle.
using NvmlDevice = void*;
/// nvmlUtilization_t: percent of the last sample period a kernel ran (gpu) and device memory was
/// read or written (memory).
struct NvmlUtilization {
  unsigned int gpu = 0;
  unsigned int memory = 0;
};
/// nvmlMemory_t, bytes.
struct NvmlMemory {
  unsigned long long total = 0;
  unsigned long long free = 0;
  unsigned long long used = 0;
};
/// NVML_CLOCK_SM of nvmlClockType_t.
inline constexpr unsigned int kNvmlClockSm = 1;
/// NVML_TEMPERATURE_GPU of nvmlTemperatureSensors_t.
inline constexpr unsigned int kNvmlTemperatureGpu = 0;

/// The NVML entry points a DeviceMonitor uses, each with nvml.h's signature. load_nvml() fills
/// it from the driver's library; a test fills it with a fake. An empty function stands for a
/// query the device does not support: the figure is left empty.
struct NvmlApi {
  /// nvmlErrorString: the name of an error code.
  std::function<const char*(NvmlReturn)> error_string;
  /// nvmlDeviceGetHandleByPciBusId_v2: the device at "domain:bus:device.function".
  std::function<NvmlReturn(const char* pci_bus_id, NvmlDevice* device)> device_by_pci_bus_id;
  /// nvmlDeviceGetUtilizationRates.
  std::function<NvmlReturn(NvmlDevice, NvmlUtilization*)> utilization_rates;
  /// nvmlDeviceGetMemoryInfo.
  std::function<NvmlReturn(NvmlDevice, NvmlMemory*)> memory_info;
  /// nvmlDeviceGetClockInfo: the current clock of a domain (kNvmlClockSm), MHz.
  std::function<NvmlReturn(NvmlDevice, unsigned int clock_type, unsigned int* mhz)> clock_info;
  /// nvmlDeviceGetMaxClockInfo: the highest clock of a domain, MHz.
  std::function<NvmlReturn(NvmlDevice, unsigned int clock_type, unsigned int* mhz)> max_clock_info;
  /// nvmlDeviceGetPowerUsage: board power draw, milliwatts.
  std::function<NvmlReturn(NvmlDevice, unsigned int* milliwatts)> power_usage;
  /// nvmlDeviceGetTemperature: a sensor's (kNvmlTemperatureGpu) temperature, degrees Celsius.
  std::function<NvmlReturn(NvmlDevice, unsigned int sensor, unsigned int* celsius)> temperature;
  /// nvmlDeviceGetCurrentClocksThrottleReasons: a bit mask (results::throttle_reason_names).
  std::function<NvmlReturn(NvmlDevice, unsigned long long* reasons)> clocks_throttle_reasons;
  /// Where the library was loaded from ("" for a fake).
  std::string library;
};

/// Loads NVML from `library` with dlopen and initialises it (nvmlInit_v2). Returns nullptr, and
/// why in *reason ("NVML not loaded: libnvidia-ml.so.1: cannot open shared object file: ..."),
/// when the library or one of its entry points is missing or nvmlInit_v2 fails. NVML is shut
/// down (nvmlShutdown) when the last owner of the returned table lets it go. Never throws for
/// NVML being unavailable.
std::shared_ptr<NvmlApi> load_nvml(const std::string& library, std::string* reason);
/// load_nvml("libnvidia-ml.so.1", reason): the driver's NVML.
std::shared_ptr<NvmlApi> load_nvml(std::string* reason);

/// The PCI bus id of CUDA device `cuda_index`, "00000000:3b:00.0" (domain:bus:device.0), by
/// which NVML finds the same GPU: NVML's own device index ignores CUDA_VISIBLE_DEVICES. Throws
/// c10::Error when no CUDA device is available or the index is out of range.
std::string cuda_pci_bus_id(int64_t cuda_index);

/// A sentence when the GPU's current SM clock is below 90 % of its maximum now ("GPU SM clock
/// 1200 MHz is below its maximum 1980 MHz at start: ..."), naming the throttle reasons NVML
/// gives; nullopt when the clock is near its maximum or NVML cannot tell. An idle GPU lowers its
/// clocks by itself, so call it after warm-up work.
std::optional<std::string> gpu_clock_warning(NvmlApi& api, const std::string& pci_bus_id);

/// Settings of a DeviceMonitor.
struct DeviceMonitorOptions {
  /// Seconds between samples; finite, > 0 and at most 86400. NVML's utilisation figures are
  /// averages over its own sample period (1/6 s to 1 s, by GPU), so shorter intervals repeat them.
  TORCH_ARG(double, interval_seconds) = 0.1;
  /// A mean GPU utilisation below this, percent, is a finding (results::summarize_monitoring).
  TORCH_ARG(double, low_utilization_percent) = 20;
};

/// Samples a device on a background thread between start() and stop(): a first sample at once,
/// then one per interval, and a last one at stop(). One result per interval
/// (results::DeviceMonitoring), with its summary and findings filled. A query that fails leaves
/// its figure empty in that sample; the monitor being unavailable (no NVML, no GPU) is no error:
/// start() returns false and stop() returns a result with available == false and the reason.
///
/// Example:
///   auto monitor = kan::diagnostics::DeviceMonitor::gpu_for_cuda_device(0);
///   monitor.start(); // false (and nothing sampled) where NVML or the GPU is missing
///   run_epochs();
///   kan::results::DeviceMonitoring m = monitor.stop();
///   for (const auto& finding : m.findings) std::cout << finding << "\n";
class DeviceMonitor {
public:
  /// A GPU through `api`, found by its PCI bus id (cuda_pci_bus_id). A null `api` makes a
  /// monitor that is not available, with `reason` (load_nvml's) as the reason; so does a bus id
  /// NVML does not know. Throws c10::Error for bad options.
  static DeviceMonitor gpu(std::shared_ptr<NvmlApi> api, const std::string& pci_bus_id,
                           DeviceMonitorOptions options = {}, const std::string& reason = "");
  /// CUDA device `cuda_index` through the driver's NVML. Not available, with the reason, where
  /// there is no CUDA device or NVML does not load. Throws c10::Error for a negative index, an
  /// index past the devices present, or bad options.
  static DeviceMonitor gpu_for_cuda_device(int64_t cuda_index, DeviceMonitorOptions options = {});
  /// This process's CPU utilisation (getrusage: user + system time of all its threads, over wall
  /// time). Always available. Throws c10::Error for bad options.
  static DeviceMonitor process_cpu(DeviceMonitorOptions options = {});

  /// Stops the sampler thread if it runs; never throws.
  ~DeviceMonitor();
  /// A moved-from monitor may only be destroyed or assigned to.
  DeviceMonitor(DeviceMonitor&&) noexcept;
  /// Stops this monitor's sampler thread (if it runs) before taking the other's state.
  DeviceMonitor& operator=(DeviceMonitor&&) noexcept;
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

  /// Starts an interval: the sampler thread takes a sample at once, then one per interval.
  /// Returns whether it samples (false where the monitor is not available). Throws c10::Error if
  /// already started.
  bool start();
  /// Ends the interval: the sampler takes a last sample and is joined; the samples are
  /// summarised (results::summarize_monitoring). Without a running start() (never started,
  /// already stopped, or not available) it returns a result without samples, available false and
  /// the reason ("not started: ..." or why the monitor is not available). Never throws for the
  /// device; start() may be called again for another interval.
  results::DeviceMonitoring stop();

  /// Between a successful start() and stop().
  bool running() const;
  /// Whether start() will sample.
  bool available() const;
  /// Why the monitor is not available; "" when it is.
  const std::string& reason() const;
  /// "nvml" or "process_cpu".
  const std::string& source() const;
  const DeviceMonitorOptions& options() const;

private:
  explicit DeviceMonitor(std::unique_ptr<detail::MonitorState> state);
  std::unique_ptr<detail::MonitorState> state_;
};

} // namespace kan::diagnostics
