// Device monitor: the sample-to-summary logic with hand-made samples, the monitor driven by a
// fake NVML, NVML that does not load, the process CPU monitor, and (with a GPU) the real NVML.
#include "kan/diagnostics/device_monitor.h"

#include "test_util.h"

#include <torch/cuda.h>
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <regex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kan::diagnostics {
namespace {

using results::DeviceMonitoring;
using results::MetricSummary;
using results::MonitorSample;
using results::summarize_monitoring;
using results::throttle_reason_names;
using namespace std::chrono_literals;

constexpr const char* kBusId = "00000000:3b:00.0";
constexpr NvmlReturn kNvmlErrorNotFound = 6;
constexpr NvmlReturn kNvmlErrorUnknown = 999;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- summarize_monitoring and throttle_reason_names ---------------------------------------

MonitorSample gpu_sample(double seconds, double gpu, std::optional<uint64_t> throttle = 0) {
  MonitorSample s;
  s.seconds = seconds;
  s.gpu_utilization_percent = gpu;
  s.throttle_reasons = throttle;
  return s;
}

TEST(Monitoring, ThrottleReasonNames) {
  EXPECT_TRUE(throttle_reason_names(0).empty());
  EXPECT_EQ(throttle_reason_names(0x1FF),
            (std::vector<std::string>{"gpu_idle", "applications_clocks_setting", "sw_power_cap",
                                      "hw_slowdown", "sync_boost", "sw_thermal_slowdown",
                                      "hw_thermal_slowdown", "hw_power_brake_slowdown",
                                      "display_clock_setting"}));
  EXPECT_EQ(throttle_reason_names(0x4 | 0x40),
            (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(throttle_reason_names((1ull << 9) | (1ull << 63) | 0x8),
            (std::vector<std::string>{"hw_slowdown", "bit_9", "bit_63"}));
}

TEST(Monitoring, SummaryIsMeanAndMaxOverTheSamplesThatHaveTheMetric) {
  DeviceMonitoring m;
  MonitorSample a = gpu_sample(0.0, 10);
  a.power_watts = 100;
  a.memory_used_bytes = 1000;
  MonitorSample b = gpu_sample(0.1, 50);
  b.memory_used_bytes = 3000; // no power in this one
  MonitorSample c = gpu_sample(0.2, 30);
  c.power_watts = 200;
  c.gpu_utilization_percent.reset();
  m.samples = {a, b, c};
  summarize_monitoring(m);
  ASSERT_EQ(m.summary.size(), 3u);
  EXPECT_EQ(m.summary.at("gpu_utilization_percent"), (MetricSummary{30, 50}));
  EXPECT_EQ(m.summary.at("power_watts"), (MetricSummary{150, 200}));
  EXPECT_EQ(m.summary.at("memory_used_bytes"), (MetricSummary{2000, 3000}));
  for (const char* absent : {"memory_utilization_percent", "sm_clock_mhz", "temperature_celsius",
                             "cpu_utilization_percent"})
    EXPECT_EQ(m.summary.count(absent), 0u) << absent << ": no sample had it, so no zeros either";
  EXPECT_TRUE(m.throttle_reasons.empty());
  EXPECT_TRUE(m.findings.empty()) << m.findings[0];
}

TEST(Monitoring, NegativeValuesKeepTheirMaximum) {
  DeviceMonitoring m;
  MonitorSample a, b;
  a.temperature_celsius = -5;
  b.temperature_celsius = -3;
  m.samples = {a, b};
  summarize_monitoring(m);
  EXPECT_EQ(m.summary.at("temperature_celsius"), (MetricSummary{-4, -3}));
}

TEST(Monitoring, ThrottlingIsNamedAndAFindingButIdleIsNot) {
  DeviceMonitoring m;
  m.samples = {gpu_sample(0, 90, 0x1), gpu_sample(0.1, 90, 0x40 | 0x4),
               gpu_sample(0.2, 90, 0x2 | 0x8), gpu_sample(0.3, 90, std::nullopt)};
  summarize_monitoring(m);
  EXPECT_EQ(m.throttle_reasons,
            (std::vector<std::string>{"sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"}))
      << "bit order, without gpu_idle and applications_clocks_setting";
  ASSERT_EQ(m.findings.size(), 1u);
  const auto& f = m.findings[0];
  EXPECT_EQ(f.rfind("GPU throttled in 2 of 4 samples (sw_power_cap, hw_slowdown, "
                    "hw_thermal_slowdown)",
                    0),
            0u)
      << f;
  EXPECT_FALSE(contains(f, "gpu_idle")) << f;

  DeviceMonitoring idle;
  idle.samples = {gpu_sample(0, 90, 0x1), gpu_sample(0.1, 90, 0x2)};
  summarize_monitoring(idle);
  EXPECT_TRUE(idle.throttle_reasons.empty());
  EXPECT_TRUE(idle.findings.empty()) << idle.findings[0];
}

TEST(Monitoring, LowUtilisationIsAFinding) {
  DeviceMonitoring m;
  m.samples = {gpu_sample(0, 2), gpu_sample(0.1, 4), gpu_sample(0.2, 3)};
  summarize_monitoring(m);
  ASSERT_EQ(m.findings.size(), 1u);
  EXPECT_EQ(m.findings[0], "GPU utilisation stayed low: mean 3 % over 3 samples; the training may "
                           "not be using the GPU, or the batch is too small to fill it");

  // The threshold is strict and can be set; fractions keep a decimal.
  m.samples = {gpu_sample(0, 20), gpu_sample(0.1, 20)};
  summarize_monitoring(m);
  EXPECT_TRUE(m.findings.empty()) << "20 % is not below 20 %";
  summarize_monitoring(m, 50);
  ASSERT_EQ(m.findings.size(), 1u);
  EXPECT_TRUE(contains(m.findings[0], "mean 20 % over 2 samples")) << m.findings[0];
  m.samples = {gpu_sample(0, 0), gpu_sample(0.1, 0.4)};
  summarize_monitoring(m);
  ASSERT_EQ(m.findings.size(), 1u);
  EXPECT_TRUE(contains(m.findings[0], "mean 0.2 %")) << m.findings[0];
}

TEST(Monitoring, NoGpuFiguresNoGpuFinding) {
  DeviceMonitoring m;
  MonitorSample a, b;
  b.cpu_utilization_percent = 1;
  m.samples = {a, b};
  summarize_monitoring(m);
  EXPECT_TRUE(m.findings.empty()) << "a CPU target's low CPU use is no GPU finding";
  EXPECT_EQ(m.summary.size(), 1u);
  EXPECT_EQ(m.summary.at("cpu_utilization_percent"), (MetricSummary{1, 1}));

  DeviceMonitoring empty;
  summarize_monitoring(empty);
  EXPECT_TRUE(empty.summary.empty());
  EXPECT_TRUE(empty.findings.empty());
}

TEST(Monitoring, SummarizingAgainReplacesWhatWasThere) {
  DeviceMonitoring m;
  m.samples = {gpu_sample(0, 1, 0x4)};
  m.summary["stale"] = {1, 1};
  m.findings = {"stale"};
  m.throttle_reasons = {"stale"};
  summarize_monitoring(m);
  const auto once = m;
  summarize_monitoring(m);
  EXPECT_EQ(m, once);
  EXPECT_EQ(m.summary.count("stale"), 0u);
  EXPECT_EQ(m.findings.size(), 2u) << "throttling and low utilisation";
  EXPECT_EQ(m.throttle_reasons, std::vector<std::string>{"sw_power_cap"});
}

TEST(Monitoring, Equality) {
  DeviceMonitoring a;
  a.source = "nvml";
  a.samples = {gpu_sample(0, 1)};
  DeviceMonitoring b = a;
  EXPECT_EQ(a, b);
  b.samples[0].power_watts = 1;
  EXPECT_FALSE(a == b);
  b = a;
  b.reason = "x";
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(MonitorSample{} == gpu_sample(0, 0));
  EXPECT_FALSE((MetricSummary{1, 2}) == (MetricSummary{1, 3}));
}

// ---- a fake NVML ----------------------------------------------------------------------------

// The scripted answers of a fake NVML. Set before start(); the sampler thread only reads them
// (thread creation orders the writes before) and counts its calls.
struct FakeNvml {
  std::vector<unsigned int> gpu_utilization = {40, 50, 60}; // one per call, cycling
  unsigned int memory_utilization = 25;
  unsigned long long memory_used = 2ull << 30;
  unsigned int sm_clock_mhz = 1500;
  unsigned int max_sm_clock_mhz = 1980;
  unsigned int milliwatts = 150'000;
  unsigned long long throttle_reasons = 0;
  int throw_on_call = -1; // utilization_rates throws on this call (from 0); -1: never
  std::atomic<int> utilization_calls{0};
};

NvmlDevice fake_device() {
  static int device = 0;
  return &device;
}

// A table that answers from `fake`; the temperature query always fails, and only kBusId exists.
std::shared_ptr<NvmlApi> fake_nvml(const std::shared_ptr<FakeNvml>& fake) {
  auto api = std::make_shared<NvmlApi>();
  api->error_string = [](NvmlReturn r) -> const char* {
    return r == kNvmlErrorNotFound ? "Not Found" : "Unknown Error";
  };
  api->device_by_pci_bus_id = [](const char* id, NvmlDevice* device) {
    if (std::string(id) != kBusId)
      return kNvmlErrorNotFound;
    *device = fake_device();
    return kNvmlSuccess;
  };
  api->utilization_rates = [fake](NvmlDevice device, NvmlUtilization* u) {
    if (device != fake_device())
      return kNvmlErrorUnknown;
    const int call = fake->utilization_calls++;
    if (call == fake->throw_on_call)
      throw std::runtime_error("the fake NVML fell over");
    u->gpu = fake->gpu_utilization[static_cast<size_t>(call) % fake->gpu_utilization.size()];
    u->memory = fake->memory_utilization;
    return kNvmlSuccess;
  };
  api->memory_info = [fake](NvmlDevice, NvmlMemory* m) {
    m->total = 80ull << 30;
    m->used = fake->memory_used;
    m->free = m->total - m->used;
    return kNvmlSuccess;
  };
  api->clock_info = [fake](NvmlDevice, unsigned int type, unsigned int* mhz) {
    if (type != kNvmlClockSm)
      return kNvmlErrorUnknown;
    *mhz = fake->sm_clock_mhz;
    return kNvmlSuccess;
  };
  api->max_clock_info = [fake](NvmlDevice, unsigned int type, unsigned int* mhz) {
    if (type != kNvmlClockSm)
      return kNvmlErrorUnknown;
    *mhz = fake->max_sm_clock_mhz;
    return kNvmlSuccess;
  };
  api->power_usage = [fake](NvmlDevice, unsigned int* mw) {
    *mw = fake->milliwatts;
    return kNvmlSuccess;
  };
  api->temperature = [](NvmlDevice, unsigned int, unsigned int* celsius) {
    *celsius = 0; // written and still failed: the monitor must not take it
    return kNvmlErrorUnknown;
  };
  api->clocks_throttle_reasons = [fake](NvmlDevice, unsigned long long* reasons) {
    *reasons = fake->throttle_reasons;
    return kNvmlSuccess;
  };
  return api;
}

DeviceMonitorOptions fast() {
  return DeviceMonitorOptions().interval_seconds(0.02);
}

// Monitors `fake` for about `seconds`.
DeviceMonitoring monitor_fake(const std::shared_ptr<FakeNvml>& fake, double seconds = 0.3) {
  auto monitor = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
  EXPECT_TRUE(monitor.available()) << monitor.reason();
  EXPECT_TRUE(monitor.start());
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return monitor.stop();
}

TEST(DeviceMonitor, FakeNvmlSamplesAndSummary) {
  auto fake = std::make_shared<FakeNvml>();
  auto monitor = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
  ASSERT_TRUE(monitor.available()) << monitor.reason();
  EXPECT_EQ(monitor.source(), "nvml");
  EXPECT_TRUE(monitor.reason().empty());
  EXPECT_FALSE(monitor.running());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(monitor.start());
  EXPECT_TRUE(monitor.running());
  std::this_thread::sleep_for(300ms);
  const auto m = monitor.stop();
  const double elapsed = seconds_since(start);
  EXPECT_FALSE(monitor.running());

  EXPECT_TRUE(m.available);
  EXPECT_EQ(m.reason, "");
  EXPECT_EQ(m.source, "nvml");
  EXPECT_EQ(m.interval_seconds, 0.02);
  // ~15 samples plus the last; a loaded machine may run the sampler late, never in a burst.
  ASSERT_GE(m.samples.size(), 5u);
  EXPECT_LE(static_cast<double>(m.samples.size()), elapsed / 0.02 + 3);
  EXPECT_EQ(static_cast<size_t>(fake->utilization_calls.load()), m.samples.size());
  EXPECT_LT(m.samples.front().seconds, 0.1) << "the first sample is taken at once";
  EXPECT_GE(m.samples.back().seconds, 0.25) << "the last one at stop()";

  double gpu_sum = 0, gpu_max = 0;
  for (size_t i = 0; i < m.samples.size(); ++i) {
    const auto& s = m.samples[i];
    if (i > 0) {
      EXPECT_GE(s.seconds, m.samples[i - 1].seconds);
    }
    ASSERT_TRUE(s.gpu_utilization_percent);
    EXPECT_EQ(*s.gpu_utilization_percent, fake->gpu_utilization[i % 3]) << "sample " << i;
    gpu_sum += *s.gpu_utilization_percent;
    gpu_max = std::max(gpu_max, *s.gpu_utilization_percent);
    EXPECT_EQ(s.memory_utilization_percent, 25.0);
    EXPECT_EQ(s.memory_used_bytes, int64_t{2} << 30);
    EXPECT_EQ(s.sm_clock_mhz, 1500.0);
    EXPECT_EQ(s.power_watts, 150.0) << "milliwatts to watts";
    EXPECT_EQ(s.throttle_reasons, 0u);
    EXPECT_FALSE(s.temperature_celsius) << "a failing query leaves the figure empty, not 0";
    EXPECT_FALSE(s.cpu_utilization_percent);
  }
  EXPECT_EQ(m.summary.count("temperature_celsius"), 0u);
  EXPECT_EQ(m.summary.count("cpu_utilization_percent"), 0u);
  EXPECT_EQ(m.summary.size(), 5u);
  EXPECT_DOUBLE_EQ(m.summary.at("gpu_utilization_percent").mean,
                   gpu_sum / static_cast<double>(m.samples.size()));
  EXPECT_EQ(m.summary.at("gpu_utilization_percent").max, gpu_max);
  EXPECT_EQ(gpu_max, 60.0);
  EXPECT_EQ(m.summary.at("memory_utilization_percent"), (MetricSummary{25, 25}));
  EXPECT_EQ(m.summary.at("memory_used_bytes"), (MetricSummary{2147483648.0, 2147483648.0}));
  EXPECT_EQ(m.summary.at("sm_clock_mhz"), (MetricSummary{1500, 1500}));
  EXPECT_EQ(m.summary.at("power_watts"), (MetricSummary{150, 150}));
  EXPECT_TRUE(m.throttle_reasons.empty());
  EXPECT_TRUE(m.findings.empty()) << m.findings[0];
}

TEST(DeviceMonitor, FakeNvmlThrottleBecomesNamesAndAFinding) {
  auto fake = std::make_shared<FakeNvml>();
  fake->throttle_reasons = 0x1 | 0x4 | 0x40;
  const auto m = monitor_fake(fake);
  ASSERT_GE(m.samples.size(), 2u);
  for (const auto& s : m.samples)
    EXPECT_EQ(s.throttle_reasons, 0x45u);
  EXPECT_EQ(m.throttle_reasons, (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  ASSERT_EQ(m.findings.size(), 1u);
  EXPECT_TRUE(contains(m.findings[0], "GPU throttled")) << m.findings[0];
  EXPECT_TRUE(contains(m.findings[0], "sw_power_cap, hw_thermal_slowdown")) << m.findings[0];
  EXPECT_TRUE(contains(m.findings[0], "in " + std::to_string(m.samples.size()) + " of " +
                                          std::to_string(m.samples.size()) + " samples"))
      << m.findings[0];
}

TEST(DeviceMonitor, FakeNvmlLowUtilisationIsAFinding) {
  auto fake = std::make_shared<FakeNvml>();
  fake->gpu_utilization = {3};
  const auto m = monitor_fake(fake);
  EXPECT_EQ(m.summary.at("gpu_utilization_percent"), (MetricSummary{3, 3}));
  ASSERT_EQ(m.findings.size(), 1u);
  EXPECT_EQ(m.findings[0].rfind("GPU utilisation stayed low: mean 3 % over " +
                                    std::to_string(m.samples.size()) + " samples",
                                0),
            0u)
      << m.findings[0];
}

TEST(DeviceMonitor, FakeNvmlBusyAndUnthrottledHasNoFinding) {
  auto fake = std::make_shared<FakeNvml>();
  fake->gpu_utilization = {95, 99};
  fake->throttle_reasons = 0x1 | 0x2; // idle and application clocks: not throttling
  const auto m = monitor_fake(fake, 0.1);
  EXPECT_TRUE(m.available);
  EXPECT_TRUE(m.throttle_reasons.empty());
  EXPECT_TRUE(m.findings.empty()) << m.findings[0];
}

TEST(DeviceMonitor, UnsupportedQueriesAreEmptyFigures) {
  auto api = fake_nvml(std::make_shared<FakeNvml>());
  api->power_usage = nullptr;
  api->clocks_throttle_reasons = nullptr;
  auto monitor = DeviceMonitor::gpu(api, kBusId, fast());
  ASSERT_TRUE(monitor.start());
  const auto m = monitor.stop();
  ASSERT_GE(m.samples.size(), 2u);
  for (const auto& s : m.samples) {
    EXPECT_FALSE(s.power_watts);
    EXPECT_FALSE(s.throttle_reasons);
    EXPECT_TRUE(s.sm_clock_mhz);
  }
  EXPECT_EQ(m.summary.count("power_watts"), 0u);
}

TEST(DeviceMonitor, StartStopAgainIsAnotherInterval) {
  auto fake = std::make_shared<FakeNvml>();
  auto monitor = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
  const auto never_started = monitor.stop();
  EXPECT_FALSE(never_started.available);
  EXPECT_TRUE(never_started.samples.empty());
  EXPECT_EQ(never_started.reason.rfind("not started", 0), 0u) << never_started.reason;
  EXPECT_EQ(never_started.source, "nvml");

  ASSERT_TRUE(monitor.start());
  KAN_EXPECT_ERROR(monitor.start(), "already monitoring");
  std::this_thread::sleep_for(200ms);
  const auto first = monitor.stop();
  EXPECT_FALSE(monitor.stop().available) << "a second stop() has no interval";

  fake->gpu_utilization = {3};
  ASSERT_TRUE(monitor.start());
  std::this_thread::sleep_for(50ms);
  const auto second = monitor.stop();
  EXPECT_TRUE(first.available);
  EXPECT_TRUE(second.available);
  ASSERT_GE(second.samples.size(), 2u);
  EXPECT_LT(second.samples.front().seconds, 0.1) << "times count from this interval's start";
  EXPECT_LT(second.samples.back().seconds, first.samples.back().seconds);
  for (const auto& s : second.samples)
    EXPECT_EQ(s.gpu_utilization_percent, 3.0);
  EXPECT_TRUE(first.findings.empty());
  EXPECT_EQ(second.findings.size(), 1u) << "each interval has its own findings";
}

TEST(DeviceMonitor, SamplerFailureKeepsTheSamplesAndSaysSo) {
  auto fake = std::make_shared<FakeNvml>();
  fake->throw_on_call = 2;
  const auto m = monitor_fake(fake, 0.15);
  EXPECT_TRUE(m.available);
  EXPECT_EQ(m.samples.size(), 2u) << "the samples before the failure";
  ASSERT_FALSE(m.findings.empty());
  EXPECT_TRUE(contains(m.findings.back(), "stopped early")) << m.findings.back();
  EXPECT_TRUE(contains(m.findings.back(), "the fake NVML fell over")) << m.findings.back();
}

TEST(DeviceMonitor, DestructorAndMoveStopTheSampler) {
  auto fake = std::make_shared<FakeNvml>();
  {
    auto monitor = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
    ASSERT_TRUE(monitor.start());
    std::this_thread::sleep_for(30ms);
  } // joins the sampler: nothing left running on a dead monitor
  const int calls = fake->utilization_calls.load();
  EXPECT_GE(calls, 1);
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(fake->utilization_calls.load(), calls);

  auto a = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
  ASSERT_TRUE(a.start());
  DeviceMonitor b = std::move(a);
  EXPECT_TRUE(b.running());
  std::this_thread::sleep_for(50ms);
  const auto m = b.stop();
  EXPECT_TRUE(m.available);
  EXPECT_GE(m.samples.size(), 2u);

  auto c = DeviceMonitor::gpu(fake_nvml(fake), kBusId, fast());
  ASSERT_TRUE(c.start());
  c = DeviceMonitor::process_cpu(); // the running sampler is stopped first
  EXPECT_FALSE(c.running());
  EXPECT_EQ(c.source(), "process_cpu");
}

// ---- where there is nothing to monitor ------------------------------------------------------

TEST(DeviceMonitor, UnknownBusIdIsNotAvailable) {
  auto monitor = DeviceMonitor::gpu(fake_nvml(std::make_shared<FakeNvml>()), "00000000:99:00.0");
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.reason(), "00000000:99:00.0")) << monitor.reason();
  EXPECT_TRUE(contains(monitor.reason(), "Not Found")) << monitor.reason();
  EXPECT_FALSE(monitor.start());
  EXPECT_FALSE(monitor.running());
  const auto m = monitor.stop();
  EXPECT_FALSE(m.available);
  EXPECT_EQ(m.reason, monitor.reason());
}

TEST(DeviceMonitor, NullNvmlIsNotAvailableWithTheReasonKept) {
  const std::string why = "NVML not loaded: libnvidia-ml.so.1: cannot open shared object file";
  auto monitor = DeviceMonitor::gpu(nullptr, kBusId, DeviceMonitorOptions(), why);
  EXPECT_FALSE(monitor.available());
  EXPECT_EQ(monitor.reason(), why);
  EXPECT_EQ(monitor.source(), "nvml");
  EXPECT_FALSE(monitor.start());
  const auto m = monitor.stop();
  EXPECT_EQ(m.source, "nvml");
  EXPECT_FALSE(m.available);
  EXPECT_EQ(m.reason, why);
  EXPECT_EQ(m.interval_seconds, 0.1);
  EXPECT_TRUE(m.samples.empty());
  EXPECT_TRUE(m.summary.empty());
  EXPECT_TRUE(m.findings.empty());

  EXPECT_FALSE(DeviceMonitor::gpu(nullptr, kBusId).reason().empty()) << "never without a reason";
}

TEST(DeviceMonitor, LoadNvmlFromAMissingPathSaysWhy) {
  const std::string path = "/nonexistent/kanbench/libnvidia-ml.so.1";
  std::string reason;
  EXPECT_EQ(load_nvml(path, &reason), nullptr);
  EXPECT_EQ(reason.rfind("NVML not loaded: ", 0), 0u) << reason;
  EXPECT_TRUE(contains(reason, path)) << reason;
  EXPECT_EQ(load_nvml(path, nullptr), nullptr) << "the reason is optional";
}

TEST(DeviceMonitor, LoadNvmlFromALibraryWithoutNvmlNamesTheSymbol) {
  std::string reason;
  EXPECT_EQ(load_nvml("libc.so.6", &reason), nullptr);
  EXPECT_TRUE(contains(reason, "libc.so.6 lacks nvmlInit_v2")) << reason;
}

TEST(DeviceMonitor, LoadTheDriversNvmlOrSayWhy) {
  std::string reason;
  const auto api = load_nvml(&reason);
  if (api) {
    EXPECT_EQ(api->library, "libnvidia-ml.so.1");
    EXPECT_TRUE(api->utilization_rates);
  } else {
    EXPECT_EQ(reason.rfind("NVML not loaded: ", 0), 0u) << reason;
  }
  std::cout << "NVML: " << (api ? "loaded" : reason) << "\n";
}

TEST(DeviceMonitor, NoCudaDeviceIsNotAvailable) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "a CUDA device is available; this test is for machines without one";
  auto monitor = DeviceMonitor::gpu_for_cuda_device(0);
  EXPECT_FALSE(monitor.available());
  EXPECT_TRUE(contains(monitor.reason(), "torch::cuda::is_available() is false"))
      << monitor.reason();
  EXPECT_FALSE(monitor.start());
  EXPECT_FALSE(monitor.stop().available);
  KAN_EXPECT_ERROR(cuda_pci_bus_id(0), "no CUDA device");
}

TEST(DeviceMonitor, BadOptionsAreRejected) {
  KAN_EXPECT_ERROR(DeviceMonitor::process_cpu(DeviceMonitorOptions().interval_seconds(0)),
                   "interval_seconds", "got 0");
  KAN_EXPECT_ERROR(DeviceMonitor::process_cpu(DeviceMonitorOptions().interval_seconds(-1)),
                   "interval_seconds", "got -1");
  KAN_EXPECT_ERROR(
      DeviceMonitor::gpu(nullptr, kBusId, DeviceMonitorOptions().interval_seconds(std::nan(""))),
      "interval_seconds", "nan");
  KAN_EXPECT_ERROR(
      DeviceMonitor::gpu_for_cuda_device(0, DeviceMonitorOptions().interval_seconds(INFINITY)),
      "interval_seconds", "inf");
  KAN_EXPECT_ERROR(DeviceMonitor::process_cpu(DeviceMonitorOptions().interval_seconds(1e6)),
                   "interval_seconds", "at most 86400");
  KAN_EXPECT_ERROR(
      DeviceMonitor::process_cpu(DeviceMonitorOptions().low_utilization_percent(std::nan(""))),
      "low_utilization_percent");
  KAN_EXPECT_ERROR(DeviceMonitor::gpu_for_cuda_device(-1), "cuda_index", "-1");
}

// ---- gpu_clock_warning ----------------------------------------------------------------------

TEST(DeviceMonitor, ClockWarning) {
  auto fake = std::make_shared<FakeNvml>();
  auto api = fake_nvml(fake);
  fake->sm_clock_mhz = 1200;
  auto warning = gpu_clock_warning(*api, kBusId);
  ASSERT_TRUE(warning);
  EXPECT_EQ(warning->rfind("GPU SM clock 1200 MHz is below its maximum 1980 MHz at start: ", 0), 0u)
      << *warning;
  EXPECT_TRUE(contains(*warning, "locked or capped")) << *warning;

  fake->throttle_reasons = 0x1 | 0x4;
  warning = gpu_clock_warning(*api, kBusId);
  ASSERT_TRUE(warning);
  EXPECT_TRUE(contains(*warning, "throttled (sw_power_cap)")) << *warning;

  fake->throttle_reasons = 0x1;
  warning = gpu_clock_warning(*api, kBusId);
  ASSERT_TRUE(warning);
  EXPECT_TRUE(contains(*warning, "idle")) << *warning;

  fake->sm_clock_mhz = 1800; // 91 % of the maximum
  EXPECT_FALSE(gpu_clock_warning(*api, kBusId));
  fake->sm_clock_mhz = 1200;
  EXPECT_FALSE(gpu_clock_warning(*api, "00000000:99:00.0")) << "unknown device: unknown clock";
  api->max_clock_info = [](NvmlDevice, unsigned int, unsigned int*) { return kNvmlErrorUnknown; };
  EXPECT_FALSE(gpu_clock_warning(*api, kBusId)) << "unknown maximum: no warning";
}

// ---- the process CPU monitor ----------------------------------------------------------------

TEST(DeviceMonitor, ProcessCpuSeesABusyThread) {
  auto monitor = DeviceMonitor::process_cpu(DeviceMonitorOptions().interval_seconds(0.05));
  EXPECT_TRUE(monitor.available());
  EXPECT_EQ(monitor.source(), "process_cpu");
  std::atomic<bool> done{false};
  ASSERT_TRUE(monitor.start());
  std::thread burner([&] {
    volatile double x = 0;
    while (!done.load(std::memory_order_relaxed))
      x = x + std::sqrt(x + 1.0);
  });
  std::this_thread::sleep_for(500ms);
  const auto m = monitor.stop();
  done = true;
  burner.join();

  EXPECT_TRUE(m.available);
  EXPECT_EQ(m.source, "process_cpu");
  ASSERT_GE(m.samples.size(), 3u);
  EXPECT_FALSE(m.samples.front().cpu_utilization_percent)
      << "the first sample has no interval before it";
  for (size_t i = 1; i < m.samples.size(); ++i) {
    ASSERT_TRUE(m.samples[i].cpu_utilization_percent) << "sample " << i;
    EXPECT_GE(*m.samples[i].cpu_utilization_percent, 0.0);
    EXPECT_FALSE(m.samples[i].gpu_utilization_percent);
  }
  ASSERT_EQ(m.summary.size(), 1u);
  // One thread spinning is ~100 %; the machine is shared, so the bound is loose.
  EXPECT_GT(m.summary.at("cpu_utilization_percent").mean, 20.0);
  EXPECT_TRUE(m.findings.empty()) << m.findings[0];
  std::cout << "process CPU: mean " << m.summary.at("cpu_utilization_percent").mean << " %, max "
            << m.summary.at("cpu_utilization_percent").max << " % over " << m.samples.size()
            << " samples\n";
}

// ---- with a GPU -----------------------------------------------------------------------------

TEST(DeviceMonitor, SamplesRealGpu_CUDA) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device available (torch::cuda::is_available() is false)";
  const auto bus_id = cuda_pci_bus_id(0);
  EXPECT_TRUE(std::regex_match(bus_id, std::regex("[0-9a-f]{8}:[0-9a-f]{2}:[0-9a-f]{2}\\.0")))
      << bus_id;
  const auto a = torch::randn({4096, 4096}, torch::kCUDA);
  a.matmul(a).sum().item<float>(); // warm-up: context, cuBLAS
  torch::cuda::synchronize();

  auto monitor =
      DeviceMonitor::gpu_for_cuda_device(0, DeviceMonitorOptions().interval_seconds(0.05));
  ASSERT_TRUE(monitor.available()) << monitor.reason();
  ASSERT_TRUE(monitor.start());
  const auto start = std::chrono::steady_clock::now();
  while (seconds_since(start) < 1.5) {
    for (int i = 0; i < 20; ++i)
      (void)a.matmul(a);
    torch::cuda::synchronize();
  }
  const auto m = monitor.stop();
  EXPECT_TRUE(m.available);
  EXPECT_EQ(m.source, "nvml");
  ASSERT_GE(m.samples.size(), 5u);
  ASSERT_EQ(m.summary.count("gpu_utilization_percent"), 1u);
  EXPECT_GT(m.summary.at("gpu_utilization_percent").max, 0.0);
  ASSERT_EQ(m.summary.count("memory_used_bytes"), 1u);
  EXPECT_GT(m.summary.at("memory_used_bytes").max, 4096.0 * 4096 * 4);
  for (const auto& [name, s] : m.summary)
    std::cout << name << ": mean " << s.mean << ", max " << s.max << "\n";
  for (const auto& f : m.findings)
    std::cout << "finding: " << f << "\n";

  std::string reason;
  auto api = load_nvml(&reason);
  ASSERT_TRUE(api) << reason;
  const auto warning = gpu_clock_warning(*api, bus_id);
  std::cout << "clock warning: " << warning.value_or("none") << "\n";
}

} // namespace
} // namespace kan::diagnostics
