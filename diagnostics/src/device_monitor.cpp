#include "kan/diagnostics/device_monitor.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/resource.h>

namespace kan::diagnostics {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Longer intervals would overflow steady_clock's nanosecond count when added up.
constexpr double kMaxIntervalSeconds = 86400;

// nvml.h's signatures, with its enums (nvmlClockType_t, nvmlTemperatureSensors_t) as the
// unsigned int they are passed as.
using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlErrorStringFn = const char* (*)(NvmlReturn);
using NvmlByPciBusIdFn = NvmlReturn (*)(const char*, NvmlDevice*);
using NvmlUtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using NvmlMemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using NvmlClockFn = NvmlReturn (*)(NvmlDevice, unsigned int, unsigned int*);
using NvmlPowerFn = NvmlReturn (*)(NvmlDevice, unsigned int*);
using NvmlTemperatureFn = NvmlReturn (*)(NvmlDevice, unsigned int, unsigned int*);
using NvmlThrottleFn = NvmlReturn (*)(NvmlDevice, unsigned long long*);

// Calls `f` when the table has it; true when it answered NVML_SUCCESS.
template <typename F, typename... Args> bool succeeded(const F& f, Args... args) {
  return f && f(args...) == kNvmlSuccess;
}

std::string nvml_error(const NvmlApi& api, NvmlReturn result) {
  const char* name = api.error_string ? api.error_string(result) : nullptr;
  return (name != nullptr ? std::string(name) + " " : std::string()) + "(NVML error " +
         std::to_string(result) + ")";
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// User + system CPU time of every thread of this process, seconds.
std::optional<double> process_cpu_seconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return std::nullopt;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

bool cuda_usable() noexcept {
  try {
    return torch::cuda::is_available();
  } catch (...) {
    return false;
  }
}

void check_options(const DeviceMonitorOptions& options) {
  const double interval = options.interval_seconds();
  TORCH_CHECK(std::isfinite(interval) && interval > 0 && interval <= kMaxIntervalSeconds,
              "DeviceMonitorOptions: interval_seconds must be a finite number of seconds > 0 and "
              "at most ",
              kMaxIntervalSeconds, ", got ", interval, "; pass e.g. interval_seconds(0.1)");
  TORCH_CHECK(std::isfinite(options.low_utilization_percent()),
              "DeviceMonitorOptions: low_utilization_percent must be a finite percentage, got ",
              options.low_utilization_percent(), "; pass e.g. low_utilization_percent(20)");
}

} // namespace

// The state of one monitor. While an interval runs, `samples`, `sampler_error` and
// `last_cpu` belong to the sampler thread; the caller reads them only after joining it.
struct MonitorState {
  DeviceMonitorOptions options;
  std::string source;
  std::string reason; // why not available; "" when available
  std::shared_ptr<NvmlApi> api;
  NvmlDevice device = nullptr;

  bool running = false; // the caller's thread only
  Clock::time_point started;
  std::thread sampler;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop_requested = false; // guarded by mutex

  std::vector<results::MonitorSample> samples;
  std::string sampler_error;
  std::optional<std::pair<Clock::time_point, double>> last_cpu; // previous wall and CPU time

  MonitorState(const DeviceMonitorOptions& o, std::string s) : options(o), source(std::move(s)) {}
  ~MonitorState() { stop_sampler_noexcept(); }
  MonitorState(const MonitorState&) = delete;
  MonitorState& operator=(const MonitorState&) = delete;

  void request_stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop_requested = true;
    }
    wake.notify_all();
  }

  void stop_sampler_noexcept() noexcept {
    if (!sampler.joinable())
      return;
    // join() throws only for a thread that cannot be joined (itself, or already joined), which
    // the sampler never is here.
    try {
      request_stop();
      sampler.join();
    } catch (...) {
    }
    running = false;
  }

  results::MonitorSample take_sample() {
    const auto now = Clock::now();
    results::MonitorSample s;
    s.seconds = seconds_between(started, now);
    if (api) {
      const NvmlApi& nvml = *api;
      NvmlUtilization utilization;
      if (succeeded(nvml.utilization_rates, device, &utilization)) {
        s.gpu_utilization_percent = utilization.gpu;
        s.memory_utilization_percent = utilization.memory;
      }
      NvmlMemory memory;
      if (succeeded(nvml.memory_info, device, &memory))
        s.memory_used_bytes = static_cast<int64_t>(memory.used);
      unsigned int value = 0;
      if (succeeded(nvml.clock_info, device, kNvmlClockSm, &value))
        s.sm_clock_mhz = value;
      if (succeeded(nvml.power_usage, device, &value))
        s.power_watts = value * 1e-3; // NVML reports milliwatts
      if (succeeded(nvml.temperature, device, kNvmlTemperatureGpu, &value))
        s.temperature_celsius = value;
      unsigned long long reasons = 0;
      if (succeeded(nvml.clocks_throttle_reasons, device, &reasons))
        s.throttle_reasons = reasons;
      return s;
    }
    // process_cpu: the utilisation over the time since the previous sample.
    const auto cpu = process_cpu_seconds();
    if (cpu && last_cpu) {
      const double wall = seconds_between(last_cpu->first, now);
      if (wall > 0)
        s.cpu_utilization_percent = std::max(0.0, (*cpu - last_cpu->second) / wall * 100);
    }
    if (cpu)
      last_cpu = std::make_pair(now, *cpu);
    return s;
  }

  // The sampler thread: a sample at once, one per interval, a last one when asked to stop.
  void run() noexcept {
    try {
      const auto interval = to_duration(options.interval_seconds());
      auto next = started;
      for (;;) {
        samples.push_back(take_sample());
        next += interval;
        const auto now = Clock::now();
        if (next <= now) // fell behind (a slow query): skip ahead rather than sample in a burst
          next = now + interval;
        std::unique_lock<std::mutex> lock(mutex);
        if (wake.wait_until(lock, next, [this] { return stop_requested; }))
          break;
      }
      samples.push_back(take_sample());
    } catch (const std::exception& e) {
      sampler_error = e.what();
    } catch (...) {
      sampler_error = "an unknown exception";
    }
  }
};

} // namespace detail

std::shared_ptr<NvmlApi> load_nvml(const std::string& library, std::string* reason) {
  auto fail = [&](const std::string& why) -> std::shared_ptr<NvmlApi> {
    if (reason != nullptr)
      *reason = "NVML not loaded: " + why;
    return nullptr;
  };
  (void)dlerror(); // clears an earlier error
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return fail(error != nullptr ? error : library + ": dlopen failed");
  }
  std::string missing;
  auto find = [&](std::initializer_list<const char*> names) -> void* {
    for (const char* name : names)
      if (void* symbol = dlsym(handle, name))
        return symbol;
    if (missing.empty())
      missing = *names.begin();
    return nullptr;
  };
  auto* init = reinterpret_cast<detail::NvmlInitFn>(find({"nvmlInit_v2"}));
  auto* shutdown = reinterpret_cast<detail::NvmlShutdownFn>(find({"nvmlShutdown"}));
  auto* error_string = reinterpret_cast<detail::NvmlErrorStringFn>(find({"nvmlErrorString"}));
  auto* by_pci_bus_id =
      reinterpret_cast<detail::NvmlByPciBusIdFn>(find({"nvmlDeviceGetHandleByPciBusId_v2"}));
  auto* utilization =
      reinterpret_cast<detail::NvmlUtilizationFn>(find({"nvmlDeviceGetUtilizationRates"}));
  auto* memory = reinterpret_cast<detail::NvmlMemoryFn>(find({"nvmlDeviceGetMemoryInfo"}));
  auto* clock = reinterpret_cast<detail::NvmlClockFn>(find({"nvmlDeviceGetClockInfo"}));
  auto* max_clock = reinterpret_cast<detail::NvmlClockFn>(find({"nvmlDeviceGetMaxClockInfo"}));
  auto* power = reinterpret_cast<detail::NvmlPowerFn>(find({"nvmlDeviceGetPowerUsage"}));
  auto* temperature =
      reinterpret_cast<detail::NvmlTemperatureFn>(find({"nvmlDeviceGetTemperature"}));
  // Drivers from CUDA 12.2 on call throttle reasons "clocks event reasons"; both names exist.
  auto* throttle = reinterpret_cast<detail::NvmlThrottleFn>(find(
      {"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetCurrentClocksEventReasons"}));
  if (!missing.empty()) {
    dlclose(handle);
    return fail(library + " lacks " + missing + " (a driver too old for this NVML API?)");
  }
  const NvmlReturn initialised = init();
  if (initialised != kNvmlSuccess) {
    const char* name = error_string(initialised);
    dlclose(handle);
    return fail("nvmlInit_v2 failed with " + std::string(name != nullptr ? name : "an error") +
                " (NVML error " + std::to_string(initialised) + "); is the NVIDIA driver loaded?");
  }
  auto api = std::make_unique<NvmlApi>();
  api->error_string = error_string;
  api->device_by_pci_bus_id = by_pci_bus_id;
  api->utilization_rates = utilization;
  api->memory_info = memory;
  api->clock_info = clock;
  api->max_clock_info = max_clock;
  api->power_usage = power;
  api->temperature = temperature;
  api->clocks_throttle_reasons = throttle;
  api->library = library;
  // Each nvmlInit_v2 is matched by one nvmlShutdown. The library itself stays loaded: unloading
  // a driver library that has started threads risks a crash at exit and saves nothing.
  return std::shared_ptr<NvmlApi>(api.release(), [shutdown](NvmlApi* p) {
    (void)shutdown();
    delete p;
  });
}

std::shared_ptr<NvmlApi> load_nvml(std::string* reason) {
  return load_nvml("libnvidia-ml.so.1", reason);
}

std::string cuda_pci_bus_id(int64_t cuda_index) {
  TORCH_CHECK(detail::cuda_usable(), "cuda_pci_bus_id: no CUDA device is available "
                                     "(torch::cuda::is_available() is false)");
  const auto devices = static_cast<int64_t>(torch::cuda::device_count());
  TORCH_CHECK(cuda_index >= 0 && cuda_index < devices, "cuda_pci_bus_id: cuda_index must be in 0..",
              devices - 1, " (the CUDA devices present), got ", cuda_index);
  const cudaDeviceProp* p =
      at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(cuda_index));
  char text[32];
  std::snprintf(text, sizeof text, "%08x:%02x:%02x.0", static_cast<unsigned>(p->pciDomainID),
                static_cast<unsigned>(p->pciBusID), static_cast<unsigned>(p->pciDeviceID));
  return text;
}

std::optional<std::string> gpu_clock_warning(NvmlApi& api, const std::string& pci_bus_id) {
  NvmlDevice device = nullptr;
  unsigned int current = 0, maximum = 0;
  if (!detail::succeeded(api.device_by_pci_bus_id, pci_bus_id.c_str(), &device) ||
      !detail::succeeded(api.clock_info, device, kNvmlClockSm, &current) ||
      !detail::succeeded(api.max_clock_info, device, kNvmlClockSm, &maximum) || maximum == 0)
    return std::nullopt;
  if (current >= 0.9 * maximum)
    return std::nullopt;
  std::string text = "GPU SM clock " + std::to_string(current) + " MHz is below its maximum " +
                     std::to_string(maximum) + " MHz at start: ";
  std::vector<std::string> throttling;
  bool idle = false;
  unsigned long long reasons = 0;
  if (detail::succeeded(api.clocks_throttle_reasons, device, &reasons)) {
    for (auto& name : results::throttle_reason_names(reasons)) {
      if (name == "gpu_idle")
        idle = true;
      else if (name != "applications_clocks_setting")
        throttling.push_back(std::move(name));
    }
  }
  if (!throttling.empty())
    text += "it is throttled (" + detail::join(throttling) +
            "), so timings will be slower than the GPU can run; check its power limit and "
            "cooling (nvidia-smi -q -d PERFORMANCE)";
  else if (idle)
    text += "it is idle (gpu_idle), and an idle GPU lowers its clocks until work arrives; run "
            "warm-up work before timing";
  else
    text += "its clocks may be locked or capped (application clocks, nvidia-smi -lgc), so "
            "timings may be slower than the GPU can run (nvidia-smi -q -d CLOCK)";
  return text;
}

DeviceMonitor::DeviceMonitor(std::unique_ptr<detail::MonitorState> state)
    : state_(std::move(state)) {}
DeviceMonitor::~DeviceMonitor() = default; // ~MonitorState stops the sampler
DeviceMonitor::DeviceMonitor(DeviceMonitor&&) noexcept = default;
DeviceMonitor& DeviceMonitor::operator=(DeviceMonitor&&) noexcept = default;

DeviceMonitor DeviceMonitor::gpu(std::shared_ptr<NvmlApi> api, const std::string& pci_bus_id,
                                 DeviceMonitorOptions options, const std::string& reason) {
  detail::check_options(options);
  auto state = std::make_unique<detail::MonitorState>(options, "nvml");
  if (!api) {
    state->reason = reason.empty() ? "NVML not loaded (no NVML was given to the monitor)" : reason;
    return DeviceMonitor(std::move(state));
  }
  NvmlDevice device = nullptr;
  if (!api->device_by_pci_bus_id) {
    state->reason = "NVML cannot find the GPU: the NVML table has no device_by_pci_bus_id";
    return DeviceMonitor(std::move(state));
  }
  const NvmlReturn found = api->device_by_pci_bus_id(pci_bus_id.c_str(), &device);
  if (found != kNvmlSuccess) {
    state->reason = "NVML knows no GPU at PCI bus id \"" + pci_bus_id +
                    "\": nvmlDeviceGetHandleByPciBusId_v2 failed with " +
                    detail::nvml_error(*api, found);
    return DeviceMonitor(std::move(state));
  }
  state->api = std::move(api);
  state->device = device;
  return DeviceMonitor(std::move(state));
}

DeviceMonitor DeviceMonitor::gpu_for_cuda_device(int64_t cuda_index, DeviceMonitorOptions options) {
  detail::check_options(options);
  TORCH_CHECK(cuda_index >= 0, "DeviceMonitor::gpu_for_cuda_device: cuda_index must be >= 0, got ",
              cuda_index);
  if (!detail::cuda_usable())
    return gpu(nullptr, "", options,
               "no CUDA device: torch::cuda::is_available() is false, so there is no GPU to "
               "monitor");
  const auto devices = static_cast<int64_t>(torch::cuda::device_count());
  TORCH_CHECK(cuda_index < devices, "DeviceMonitor::gpu_for_cuda_device: cuda_index ", cuda_index,
              " is past the ", devices,
              " CUDA devices present (after CUDA_VISIBLE_DEVICES); pass 0..", devices - 1);
  std::string reason;
  auto api = load_nvml(&reason);
  if (!api)
    return gpu(nullptr, "", options, reason);
  return gpu(std::move(api), cuda_pci_bus_id(cuda_index), options);
}

DeviceMonitor DeviceMonitor::process_cpu(DeviceMonitorOptions options) {
  detail::check_options(options);
  return DeviceMonitor(std::make_unique<detail::MonitorState>(options, "process_cpu"));
}

bool DeviceMonitor::start() {
  auto& s = *state_;
  TORCH_CHECK(!s.running, "DeviceMonitor::start: already monitoring; call stop() first");
  if (!s.reason.empty())
    return false;
  s.samples.clear();
  s.sampler_error.clear();
  s.last_cpu.reset();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop_requested = false;
  }
  s.started = detail::Clock::now();
  // The sampler's first sample is taken as soon as the thread runs.
  s.sampler = std::thread([&s] { s.run(); });
  s.running = true;
  return true;
}

results::DeviceMonitoring DeviceMonitor::stop() {
  auto& s = *state_;
  results::DeviceMonitoring m;
  m.source = s.source;
  m.interval_seconds = s.options.interval_seconds();
  if (!s.running) {
    m.reason = !s.reason.empty()
                   ? s.reason
                   : "not started: DeviceMonitor::stop() was called without a running start()";
    return m;
  }
  s.request_stop();
  s.sampler.join();
  s.running = false;
  m.available = true;
  m.samples = std::move(s.samples);
  s.samples.clear();
  results::summarize_monitoring(m, s.options.low_utilization_percent());
  if (!s.sampler_error.empty())
    m.findings.push_back("Device monitoring stopped early: the sampler failed with " +
                         s.sampler_error + "; the samples before it are kept");
  return m;
}

bool DeviceMonitor::running() const {
  return state_->running;
}
bool DeviceMonitor::available() const {
  return state_->reason.empty();
}
const std::string& DeviceMonitor::reason() const {
  return state_->reason;
}
const std::string& DeviceMonitor::source() const {
  return state_->source;
}
const DeviceMonitorOptions& DeviceMonitor::options() const {
  return state_->options;
}

} // namespace kan::diagnostics
