#pragma once
/// What a device did while a case ran, sampled at a fixed interval: the "nvidia-smi view" of a
/// GPU (utilisation, memory, SM clock, power, temperature, throttling) from NVML, or the
/// process's CPU utilisation on a CPU target. Plain data, free of LibTorch;
/// kan::diagnostics::DeviceMonitor produces it.
///
/// Conventions as in results.h: a figure that was not measured (NVML could not report it) is an
/// empty std::optional, never 0, and is left out of the summary.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// One sample of a device's state. Every figure is empty when the device could not report it.
struct MonitorSample {
  double seconds = 0; ///< when it was taken, seconds since monitoring started
  std::optional<double> gpu_utilization_percent;    ///< time a kernel ran, 0..100 (NVML)
  std::optional<double> memory_utilization_percent; ///< time device memory was read or written
  std::optional<int64_t> memory_used_bytes;         ///< device memory in use, all processes
  std::optional<double> sm_clock_mhz;               ///< current SM clock
  std::optional<double> power_watts;                ///< board power draw
  std::optional<double> temperature_celsius;        ///< GPU core temperature
  std::optional<uint64_t> throttle_reasons;         ///< NVML's clocks-throttle-reason bit mask
  /// Process CPU time / wall time over the interval before this sample, * 100: 100 is one core
  /// busy, 200 two. Empty for the first sample of an interval (nothing to measure against).
  std::optional<double> cpu_utilization_percent;

  bool operator==(const MonitorSample&) const;
};

/// Mean and maximum of one metric over the samples that have it.
struct MetricSummary {
  double mean = 0;
  double max = 0;

  bool operator==(const MetricSummary&) const;
};

/// A device's samples over one monitored interval (one start() to stop() of a DeviceMonitor),
/// with their summary and what they show.
struct DeviceMonitoring {
  std::string source;     ///< "nvml" (a GPU), "process_cpu" (a CPU target)
  bool available = false; ///< false: nothing was sampled; `reason` says why
  /// Why not available ("NVML not loaded: libnvidia-ml.so.1: cannot open shared object file");
  /// "" when available.
  std::string reason;
  double interval_seconds = 0;        ///< the requested sampling interval
  std::vector<MonitorSample> samples; ///< in time order
  /// Metric name ("gpu_utilization_percent", "memory_utilization_percent", "memory_used_bytes",
  /// "sm_clock_mhz", "power_watts", "temperature_celsius", "cpu_utilization_percent") -> mean and
  /// max over the samples that have it. A metric no sample had is absent (never zeros).
  std::map<std::string, MetricSummary> summary;
  /// Every throttle reason seen in any sample ("sw_power_cap", "hw_slowdown",
  /// "sw_thermal_slowdown", ...), in NVML's bit order. "gpu_idle" and
  /// "applications_clocks_setting" are not throttling and are left out.
  std::vector<std::string> throttle_reasons;
  /// One sentence each: the GPU throttled (naming the reasons), or its mean utilisation stayed
  /// below the threshold.
  std::vector<std::string> findings;

  bool operator==(const DeviceMonitoring&) const;
};

/// Fills m.summary, m.throttle_reasons and m.findings from m.samples, replacing what they held
/// (so calling it twice gives the same result). A low-utilisation finding is made when the mean
/// GPU utilisation of the samples that have one is below `low_utilization_percent`.
///
/// Example:
///   kan::results::DeviceMonitoring m;
///   for (double gpu : {2.0, 4.0}) {
///     kan::results::MonitorSample s;
///     s.gpu_utilization_percent = gpu;
///     m.samples.push_back(s);
///   }
///   kan::results::summarize_monitoring(m);
///   // m.summary["gpu_utilization_percent"] == {3, 4}; m.findings[0] starts
///   // "GPU utilisation stayed low: mean 3 % over 2 samples"
void summarize_monitoring(DeviceMonitoring& m, double low_utilization_percent = 20);

/// Names of the throttle bits set in `mask` (NVML's nvmlClocksThrottleReason* values), in bit
/// order: "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
/// "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
/// "display_clock_setting"; a bit NVML does not define is "bit_N" (N from 0).
std::vector<std::string> throttle_reason_names(uint64_t mask);

} // namespace kan::results
