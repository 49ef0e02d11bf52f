// Helpers shared by the kanbench subcommands.
#include "commands.h"

#include "kan/diagnostics/environment.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <memory>

namespace kanbench {

torch::Device parse_device(const std::string& name, const std::string& option) {
  std::unique_ptr<torch::Device> device;
  try {
    device = std::make_unique<torch::Device>(name);
  } catch (const c10::Error&) {
    TORCH_CHECK(false, option, " must be cpu, cuda or cuda:N, got '", name, "'");
  }
  TORCH_CHECK(device->is_cpu() || device->is_cuda(), option, " must be cpu, cuda or cuda:N, got '",
              name, "'");
  if (device->is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), option, " ", name,
                " requested but no CUDA device: ", kan::diagnostics::cuda_unavailable_reason(),
                " (kanbench env shows the whole report)");
    TORCH_CHECK(!device->has_index() ||
                    device->index() < static_cast<int>(torch::cuda::device_count()),
                option, " ", name, " requested but only ", torch::cuda::device_count(),
                " CUDA device(s) are visible");
  }
  return *device;
}

} // namespace kanbench
