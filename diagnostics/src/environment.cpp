#include "kan/diagnostics/environment.h"

#include "kan/config.h"

#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <sched.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

namespace kan::diagnostics {
namespace {

// 13000 -> "13.0", 12080 -> "12.8".
std::string cuda_version_string(int version) {
  if (version <= 0)
    return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

// 91002 -> "9.10.2" (cuDNN 9 encodes major * 10000 + minor * 100 + patch).
std::string cudnn_version_string(long version) {
  if (version <= 0)
    return "";
  return std::to_string(version / 10000) + "." + std::to_string((version % 10000) / 100) + "." +
         std::to_string(version % 100);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? ""
                                        : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "";
}

int64_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  return static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN));
}

std::string run_and_read(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe)
    return "";
  std::array<char, 256> buffer{};
  std::string out;
  while (fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr)
    out += buffer.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string hostname() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "";
}

std::optional<std::string> visible_devices_variable() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value ? std::optional<std::string>(value) : std::nullopt;
}

// The CUDA version LibTorch was built with; 0 for a CPU-only LibTorch (whose stub hooks throw).
int libtorch_cuda_version() {
  try {
    return static_cast<int>(at::detail::getCUDAHooks().versionCUDART());
  } catch (const c10::Error&) {
    return 0;
  }
}

long libtorch_cudnn_version() {
  try {
    return at::detail::getCUDAHooks().versionCuDNN();
  } catch (const c10::Error&) {
    return 0;
  }
}

// Why CUDA is unusable, with the fix; both empty when it is usable.
results::EnvironmentProblem diagnose_cuda() {
  const int built = libtorch_cuda_version();
  if (built == 0) {
    return {"CUDA is not usable: this LibTorch is a CPU-only build",
            "Build kanbench against a CUDA build of LibTorch (the torch==2.11.0 wheel for "
            "CUDA 13.0)."};
  }
  int driver = 0;
  cudaDriverGetVersion(&driver);
  if (driver == 0) {
    return {"CUDA is not usable: no NVIDIA driver is installed (libcuda.so.1 not found)",
            "Install the NVIDIA driver (580 or newer for CUDA 13.0), or run with --device cpu."};
  }
  const auto visible = visible_devices_variable();
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError(); // clear the sticky error, so LibTorch starts from a clean state
  // CUDA's minor-version compatibility: a driver for 13.0 runs 13.x builds; majors must match.
  if (status == cudaErrorInsufficientDriver || driver / 1000 < built / 1000) {
    return {"CUDA is not usable: the driver supports CUDA " + cuda_version_string(driver) +
                " but LibTorch was built for CUDA " + cuda_version_string(built),
            "Update the NVIDIA driver to one that supports CUDA " + cuda_version_string(built) +
                ", or use a LibTorch built for CUDA " + cuda_version_string(driver) + "."};
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    if (visible && (visible->empty() || visible->front() == '-')) {
      return {"CUDA is not usable: CUDA_VISIBLE_DEVICES='" + *visible + "' hides every GPU",
              "Unset CUDA_VISIBLE_DEVICES or list the GPUs to use (e.g. CUDA_VISIBLE_DEVICES=0)."};
    }
    return {"CUDA is not usable: the NVIDIA driver " + cuda_version_string(driver) +
                " sees no CUDA device" +
                (visible ? " (CUDA_VISIBLE_DEVICES='" + *visible + "')" : std::string()),
            "Check nvidia-smi; in a container, pass the GPU in (e.g. docker --gpus all)."};
  }
  if (status != cudaSuccess) {
    return {std::string("CUDA is not usable: ") + cudaGetErrorName(status) + ": " +
                cudaGetErrorString(status),
            "Check nvidia-smi and the driver's kernel module (dmesg), or run with --device cpu."};
  }
  if (!torch::cuda::is_available()) {
    return {"CUDA is not usable: the CUDA runtime sees " + std::to_string(count) +
                " device(s) but LibTorch does not",
            "Check that LibTorch's CUDA libraries (libtorch_cuda.so) are loaded."};
  }
  return {};
}

} // namespace

std::string cuda_unavailable_reason() {
  return diagnose_cuda().what;
}

results::Environment collect_environment() {
  results::Environment env;
  env.kanbench_version = KANBENCH_VERSION;
  env.git_commit = run_and_read("git -C '" KAN_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
  env.date = utc_now();
  env.hostname = hostname();
  env.libtorch_version = TORCH_VERSION;
  env.cuda_build_version = cuda_version_string(libtorch_cuda_version());
  env.cudnn_build_version = cudnn_version_string(libtorch_cudnn_version());
  int driver = 0;
  cudaDriverGetVersion(&driver);
  env.cuda_driver_version = cuda_version_string(driver);
  env.cuda_visible_devices = visible_devices_variable();

  const auto problem = diagnose_cuda();
  env.cuda_available = problem.what.empty();
  env.cuda_unavailable_reason = problem.what;
  if (!env.cuda_available) {
    env.problems.push_back(problem);
  } else {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    env.cuda_runtime_version = cuda_version_string(runtime);
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      cudaDeviceProp props{};
      results::CudaDevice device;
      device.index = i;
      if (cudaGetDeviceProperties(&props, i) != cudaSuccess) {
        cudaGetLastError();
        env.problems.push_back({"cannot read the properties of CUDA device " + std::to_string(i),
                                "Check nvidia-smi for that device."});
        continue;
      }
      device.name = props.name;
      device.compute_capability = std::to_string(props.major) + "." + std::to_string(props.minor);
      device.multiprocessors = props.multiProcessorCount;
      device.total_memory_bytes = static_cast<int64_t>(props.totalGlobalMem);
      size_t free = 0, total = 0;
      int previous = 0;
      cudaGetDevice(&previous);
      if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
        device.free_memory_bytes = static_cast<int64_t>(free);
      cudaGetLastError();
      cudaSetDevice(previous);
      env.cuda_devices.push_back(device);
      if (props.major < 9) {
        env.problems.push_back(
            {"CUDA device " + std::to_string(i) + " (" + device.name + ") has compute capability " +
                 device.compute_capability + "; kanbench's CUDA code is compiled for sm_90",
             "Expect a one-time PTX JIT compile at start-up and slower GPU numbers than on a "
             "Hopper GPU."});
      }
    }
  }

  env.cpu_model = cpu_model();
  env.cpu_cores = usable_cpus();
  env.torch_threads = at::get_num_threads();
  if (double load = 0; std::ifstream("/proc/loadavg") >> load)
    env.load_average = load;
  if (std::string governor;
      std::ifstream("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") >> governor)
    env.cpu_governor = governor;
  for (auto& p :
       timing_problems(env.cpu_cores, env.torch_threads, env.load_average, env.cpu_governor))
    env.problems.push_back(std::move(p));
#ifdef KAN_HAS_NVTX
  env.nvtx_available = true;
#endif
#ifdef KAN_HAS_CUPTI
  env.cupti_available = true;
#endif
  return env;
}

std::vector<results::EnvironmentProblem>
timing_problems(int64_t cpu_cores, int64_t torch_threads, std::optional<double> load_average,
                const std::optional<std::string>& governor) {
  std::vector<results::EnvironmentProblem> problems;
  if (torch_threads < cpu_cores) {
    problems.push_back({"LibTorch uses " + std::to_string(torch_threads) + " of " +
                            std::to_string(cpu_cores) + " usable CPUs",
                        "Unset OMP_NUM_THREADS (or set it to " + std::to_string(cpu_cores) +
                            ") for CPU timings that use the whole machine."});
  }
  if (load_average && *load_average > static_cast<double>(cpu_cores)) {
    char text[160];
    std::snprintf(text, sizeof text, "the machine is busy: load average %.1f on %lld usable CPUs",
                  *load_average, static_cast<long long>(cpu_cores));
    problems.push_back({text, "Run timings on an idle machine; CPU epoch times (and LibTorch's "
                              "spinning OpenMP threads) suffer from other processes."});
  }
  // Another governor than "performance" lets the clock drift with load during a timing.
  if (governor && *governor != "performance")
    problems.push_back(
        {"the CPU frequency governor is \"" + *governor + "\", not \"performance\"",
         "For stable CPU timings: sudo cpupower frequency-set -g performance (or write "
         "performance to /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)."});
  return problems;
}

std::string to_text(const results::Environment& e) {
  std::ostringstream out;
  auto line = [&](const char* key, const std::string& value) {
    out << key << ": " << (value.empty() ? "-" : value) << "\n";
  };
  auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
  line("kanbench", e.kanbench_version + (e.git_commit.empty() ? "" : " (" + e.git_commit + ")"));
  line("date", e.date);
  line("host", e.hostname);
  line("LibTorch", e.libtorch_version);
  line("LibTorch built for CUDA", e.cuda_build_version);
  line("LibTorch built with cuDNN", e.cudnn_build_version);
  line("CUDA driver supports", e.cuda_driver_version);
  line("CUDA runtime", e.cuda_runtime_version);
  line("CUDA usable", e.cuda_available ? "yes" : "no: " + e.cuda_unavailable_reason);
  line("CUDA_VISIBLE_DEVICES",
       e.cuda_visible_devices ? "'" + *e.cuda_visible_devices + "'" : "(unset)");
  line("CUDA devices", std::to_string(e.cuda_devices.size()));
  for (const auto& d : e.cuda_devices) {
    char memory[96];
    std::snprintf(memory, sizeof memory, "%.1f GiB total, %.1f GiB free",
                  static_cast<double>(d.total_memory_bytes) / (1 << 30),
                  static_cast<double>(d.free_memory_bytes) / (1 << 30));
    out << "cuda:" << d.index << ": " << d.name << ", compute capability " << d.compute_capability
        << ", " << d.multiprocessors << " SMs, " << memory << "\n";
  }
  line("CPU", e.cpu_model);
  line("CPUs usable", std::to_string(e.cpu_cores));
  line("LibTorch threads", std::to_string(e.torch_threads));
  line("CPU governor", e.cpu_governor.value_or("(not exposed)"));
  if (e.load_average) {
    char load[32];
    std::snprintf(load, sizeof load, "%.2f", *e.load_average);
    line("load average", load);
  }
  line("NVTX3 ranges", yes_no(e.nvtx_available));
  line("CUPTI", yes_no(e.cupti_available));
  for (const auto& p : e.problems)
    out << "problem: " << p.what << ". Fix: " << p.fix << "\n";
  if (e.problems.empty())
    out << "no problems found\n";
  return out.str();
}

} // namespace kan::diagnostics
