#include "kan/results/monitoring.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

namespace kan::results {
namespace {

auto tie(const MonitorSample& s) {
  return std::tie(s.seconds, s.gpu_utilization_percent, s.memory_utilization_percent,
                  s.memory_used_bytes, s.sm_clock_mhz, s.power_watts, s.temperature_celsius,
                  s.throttle_reasons, s.cpu_utilization_percent);
}
auto tie(const MetricSummary& s) {
  return std::tie(s.mean, s.max);
}
auto tie(const DeviceMonitoring& m) {
  return std::tie(m.source, m.available, m.reason, m.interval_seconds, m.samples, m.summary,
                  m.throttle_reasons, m.findings);
}

// NVML's nvmlClocksThrottleReason* bits, by bit position.
constexpr const char* kThrottleBitNames[] = {
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
};
constexpr int kNamedThrottleBits = sizeof(kThrottleBitNames) / sizeof(kThrottleBitNames[0]);

// The bits that say why clocks are low without the GPU being held back: an idle GPU lowers its
// clocks by itself, and application clocks are a setting, not a limit that was hit.
constexpr uint64_t kNotThrottling = 0x1 | 0x2;

// A percentage for people: "87", "3", "0.4" (one decimal below 10, none from 10 up).
std::string format_percent(double percent) {
  char text[32];
  if (std::fabs(percent) >= 10)
    std::snprintf(text, sizeof text, "%.0f", percent);
  else
    std::snprintf(text, sizeof text, "%.1f", percent);
  std::string s = text;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0)
    s.resize(s.size() - 2);
  return s;
}

// Accumulates one metric over the samples that have it.
struct Accumulator {
  double sum = 0;
  double max = 0;
  int64_t count = 0;

  void add(double value) {
    max = count == 0 ? value : std::max(max, value);
    sum += value;
    ++count;
  }
};

template <typename T>
void add_if(std::map<std::string, Accumulator>& metrics, const char* name,
            const std::optional<T>& value) {
  if (value)
    metrics[name].add(static_cast<double>(*value));
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

} // namespace

bool MonitorSample::operator==(const MonitorSample& o) const {
  return tie(*this) == tie(o);
}
bool MetricSummary::operator==(const MetricSummary& o) const {
  return tie(*this) == tie(o);
}
bool DeviceMonitoring::operator==(const DeviceMonitoring& o) const {
  return tie(*this) == tie(o);
}

std::vector<std::string> throttle_reason_names(uint64_t mask) {
  std::vector<std::string> names;
  for (int bit = 0; bit < 64; ++bit) {
    if (((mask >> bit) & 1u) == 0)
      continue;
    names.push_back(bit < kNamedThrottleBits ? kThrottleBitNames[bit]
                                             : "bit_" + std::to_string(bit));
  }
  return names;
}

void summarize_monitoring(DeviceMonitoring& m, double low_utilization_percent) {
  std::map<std::string, Accumulator> metrics;
  uint64_t throttle_seen = 0;
  int64_t throttled_samples = 0;
  for (const auto& s : m.samples) {
    add_if(metrics, "gpu_utilization_percent", s.gpu_utilization_percent);
    add_if(metrics, "memory_utilization_percent", s.memory_utilization_percent);
    add_if(metrics, "memory_used_bytes", s.memory_used_bytes);
    add_if(metrics, "sm_clock_mhz", s.sm_clock_mhz);
    add_if(metrics, "power_watts", s.power_watts);
    add_if(metrics, "temperature_celsius", s.temperature_celsius);
    add_if(metrics, "cpu_utilization_percent", s.cpu_utilization_percent);
    const uint64_t throttling = s.throttle_reasons.value_or(0) & ~kNotThrottling;
    throttle_seen |= throttling;
    throttled_samples += throttling != 0 ? 1 : 0;
  }

  m.summary.clear();
  for (const auto& [name, a] : metrics)
    m.summary[name] = MetricSummary{a.sum / static_cast<double>(a.count), a.max};
  m.throttle_reasons = throttle_reason_names(throttle_seen);

  m.findings.clear();
  if (!m.throttle_reasons.empty()) {
    m.findings.push_back(
        "GPU throttled in " + std::to_string(throttled_samples) + " of " +
        std::to_string(m.samples.size()) + " samples (" + join(m.throttle_reasons) +
        "): its clocks were held below what it can run, so timings are slower than the GPU's "
        "best; check its power limit, cooling and clock settings (nvidia-smi -q -d PERFORMANCE)");
  }
  const auto gpu = metrics.find("gpu_utilization_percent");
  if (gpu != metrics.end()) {
    const double mean = gpu->second.sum / static_cast<double>(gpu->second.count);
    if (mean < low_utilization_percent) {
      m.findings.push_back("GPU utilisation stayed low: mean " + format_percent(mean) + " % over " +
                           std::to_string(gpu->second.count) +
                           " samples; the training may not be using the GPU, or the batch is "
                           "too small to fill it");
    }
  }
}

} // namespace kan::results
