#include "kan/bench/measure.h"

#include "kan/io/clock.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace kan::bench {
namespace {

constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// A "Vm...:   1234 kB" line of /proc/self/status, in bytes; 0 when unreadable.
int64_t proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0)
      return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

} // namespace

struct EpochTimer::CudaEvents {
  at::cuda::CUDAEvent begin{cudaEventDefault};
  at::cuda::CUDAEvent end{cudaEventDefault};
};

EpochTimer::EpochTimer(torch::Device device) : device_(device) {
  if (device_.is_cuda())
    events_ = std::make_unique<CudaEvents>();
}

EpochTimer::~EpochTimer() = default;

void EpochTimer::start() {
  if (events_) {
    events_->begin.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
  wall_start_ = io::Clock::now();
}

double EpochTimer::stop() {
  if (events_) {
    events_->end.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    events_->end.synchronize();
    return events_->begin.elapsed_time(events_->end) / 1000.0;
  }
  return io::seconds_since(wall_start_);
}

PeakMemory::PeakMemory(torch::Device device) : device_(device) {
  if (device_.is_cuda()) {
    torch::cuda::synchronize(device_.index());
    const auto index = device_.has_index() ? device_.index() : c10::cuda::current_device();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    baseline_ = stats.allocated_bytes[kAggregate].current;
    reserved_baseline_ = stats.reserved_bytes[kAggregate].current;
    return;
  }
  // Freed heap memory goes back to the system first, or the work would reuse it unseen: a
  // measurement after another (a regularised step after an unregularised one) would read 0.4 MiB
  // instead of 300.
  malloc_trim(0);
  // Writing 5 to clear_refs resets the high-water mark VmHWM to the current resident set.
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  reset_ = static_cast<bool>(clear_refs);
  baseline_ = proc_status_bytes("VmRSS");
}

std::optional<int64_t> PeakMemory::bytes() const {
  if (device_.is_cuda()) {
    const auto index = device_.has_index() ? device_.index() : c10::cuda::current_device();
    const auto peak =
        c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[kAggregate].peak;
    return std::max<int64_t>(0, peak - baseline_);
  }
  if (!reset_)
    return std::nullopt;
  return std::max<int64_t>(0, proc_status_bytes("VmHWM") - baseline_);
}

std::optional<int64_t> PeakMemory::reserved_bytes() const {
  if (!device_.is_cuda())
    return std::nullopt;
  const auto index = device_.has_index() ? device_.index() : c10::cuda::current_device();
  const auto peak =
      c10::cuda::CUDACachingAllocator::getDeviceStats(index).reserved_bytes[kAggregate].peak;
  return std::max<int64_t>(0, peak - reserved_baseline_);
}

std::string PeakMemory::kind() const {
  return device_.is_cuda() ? "cuda_peak_allocated" : "cpu_rss_growth";
}

void release_cuda_cache() {
  if (torch::cuda::is_available())
    c10::cuda::CUDACachingAllocator::emptyCache();
}

void set_memory_fraction(torch::Device device, double fraction, const std::string& option) {
  TORCH_CHECK(fraction > 0 && fraction <= 1, option, " must be in (0, 1], got ", fraction);
  TORCH_CHECK(device.is_cuda(), option, " caps a CUDA device's memory, got ", device.str());
  TORCH_CHECK(torch::cuda::is_available(), option, " needs a CUDA device; there is none");
  const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
}

} // namespace kan::bench
