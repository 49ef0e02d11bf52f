// Joining a torchrun launch: torchrun's environment, the TCP store, and c10d's Gloo and NCCL
// backends. The only file that includes their headers (docs/distributed.md, "Building"): the
// wheel's LibTorch holds both backends but ships no Gloo headers, so CMake points this file at
// Debian's (libgloo-dev), which declare the few Gloo types ProcessGroupGloo.hpp names; kanbench
// never calls Gloo itself. NCCL's header comes from the nvidia-nccl wheel that torch depends on.
#include "kan/distributed/data_parallel.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>

namespace kan {
namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int integer_variable(const char* name, int lowest, const char* fallback = nullptr) {
  const char* text = variable(name);
  if (text == nullptr)
    text = fallback;
  TORCH_CHECK(text != nullptr, "data-parallel training needs the environment variable ", name,
              " (torchrun sets it: torchrun --no-python --nproc-per-node N kanbench fit ... "
              "--distributed)");
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  TORCH_CHECK(end != text && *end == '\0' && value >= lowest &&
                  value <= std::numeric_limits<int>::max(),
              name, " must be an integer >= ", lowest, ", got '", text, "'");
  return static_cast<int>(value);
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

} // namespace

LaunchEnvironment LaunchEnvironment::from_environment() {
  LaunchEnvironment e;
  e.world_size = integer_variable("WORLD_SIZE", 1);
  e.rank = integer_variable("RANK", 0);
  TORCH_CHECK(e.rank < e.world_size, "RANK must be < WORLD_SIZE = ", e.world_size, ", got ",
              e.rank);
  e.local_rank = integer_variable("LOCAL_RANK", 0);
  const std::string world = std::to_string(e.world_size);
  e.local_world_size = integer_variable("LOCAL_WORLD_SIZE", 1, world.c_str());
  TORCH_CHECK(e.local_rank < e.local_world_size,
              "LOCAL_RANK must be < LOCAL_WORLD_SIZE = ", e.local_world_size, ", got ",
              e.local_rank);
  const char* addr = variable("MASTER_ADDR");
  TORCH_CHECK(addr != nullptr, "data-parallel training needs the environment variable "
                               "MASTER_ADDR (torchrun sets it)");
  e.master_addr = addr;
  e.master_port = integer_variable("MASTER_PORT", 1);
  TORCH_CHECK(e.master_port <= 65535, "MASTER_PORT must be a port number, got ", e.master_port);
  const char* agent = variable("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && std::string(agent) == "True";
  e.restart_count = integer_variable("TORCHELASTIC_RESTART_COUNT", 0, "0");
  return e;
}

std::shared_ptr<DataParallel> DataParallel::join(const LaunchEnvironment& launch,
                                                 c10::Device device,
                                                 const DataParallelOptions& options) {
  TORCH_CHECK(device.is_cpu() || device.is_cuda(),
              "data-parallel training runs on the CPU (Gloo) or CUDA (NCCL), got device ", device);
  if (device.is_cuda()) {
    TORCH_CHECK(!device.has_index() || device.index() == launch.local_rank, "data-parallel rank ",
                launch.rank, " has LOCAL_RANK ", launch.local_rank,
                " and must train on cuda:", launch.local_rank, ", not ", device,
                " (give --device cuda and each rank takes its own GPU)");
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
  }
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(1.0, options.timeout_seconds() * 1000.0)));

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(launch.master_port);
  store_options.isServer = launch.rank == 0 && !launch.agent_store;
  store_options.numWorkers = launch.world_size;
  store_options.waitWorkers = false;
  store_options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, store_options);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "data-parallel rank ", launch.rank,
                " could not reach the rendezvous store at ", launch.master_addr, ":",
                launch.master_port, " within ", options.timeout_seconds(), " s: ", e.what());
  }
  store = c10::make_intrusive<c10d::PrefixStore>(
      "kanbench/attempt_" + std::to_string(launch.restart_count), store);

  c10::intrusive_ptr<c10d::Backend> backend;
  if (device.is_cpu()) {
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    // A loopback rendezvous means one machine: bind Gloo to loopback too, which works where the
    // hostname does not resolve (containers). GLOO_SOCKET_IFNAME picks an interface, as in PyTorch.
    if (const char* ifname = variable("GLOO_SOCKET_IFNAME"))
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (is_loopback(launch.master_addr))
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    backend =
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, launch.rank, launch.world_size, gloo);
  } else {
#ifdef USE_C10D_NCCL
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = timeout;
    backend =
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, launch.rank, launch.world_size, nccl);
#else
    TORCH_CHECK(false, "this kanbench was built without NCCL (no nccl.h at configure time): "
                       "data-parallel training on CUDA needs it; train on the CPU with Gloo");
#endif
  }
  auto group = std::make_shared<DataParallel>(backend, device, options);
  group->check_distinct_devices();
  return group;
}

} // namespace kan
