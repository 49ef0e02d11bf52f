#pragma once
/// Dynamic device audit: which device every ATen operation of a forward, backward, optimiser
/// step or fit step ran on, attributed to the KAN module and training phase that ran it.

#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kan::diagnostics {
namespace detail {
struct TraceState;
} // namespace detail

/// What the trace saw go wrong.
enum class TraceProblem {
  kMixedDevices,         ///< one operation received tensors on different devices
  kCreatedOnWrongDevice, ///< a factory (zeros, ones, arange, ...) made a tensor off the model's
                         ///< device
  kRanOnCpu,      ///< a computing operation ran on the CPU while the model is on an accelerator
  kDeviceNotUsed, ///< no traced operation ran on the model's device at all
  /// In the model's forward or backward: a copy between host and device (.cpu(), .to(device) of
  /// a host tensor), paid on every step.
  kHostDeviceCopy,
  /// In the model's forward or backward: the host waits for the device (.item(), bool(tensor)).
  kHostSynchronization,
  /// Advanced indexing of a device tensor with a CPU index: allowed, but copied every step.
  kHostIndex,
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<TraceProblem> kTraceProblemNames[] = {
    {TraceProblem::kMixedDevices, "mixed_devices"},
    {TraceProblem::kCreatedOnWrongDevice, "created_on_wrong_device"},
    {TraceProblem::kRanOnCpu, "ran_on_cpu"},
    {TraceProblem::kDeviceNotUsed, "device_not_used"},
    {TraceProblem::kHostDeviceCopy, "host_device_copy"},
    {TraceProblem::kHostSynchronization, "host_synchronization"},
    {TraceProblem::kHostIndex, "host_index"}};
std::string to_string(TraceProblem value);

/// Calls of one top-level ATen operation at one place, on one device.
struct OperationCount {
  std::string operation;
  std::string module;
  std::string phase;
  std::string device; ///< where it ran: its first output's device, else its first input's
  int64_t calls = 0;
  double seconds = 0; ///< host wall time inside the calls (for CUDA: launch time)
};

/// Host <-> device traffic, and operations that make the host wait for a device.
struct TransferCounts {
  int64_t host_to_device = 0;
  int64_t host_to_device_bytes = 0;
  int64_t device_to_host = 0;
  int64_t device_to_host_bytes = 0;
  int64_t device_to_device = 0;
  int64_t device_to_device_bytes = 0;
  /// item(), nonzero() and copies to the host of device tensors.
  int64_t synchronizations = 0;
};

struct TraceSummary {
  int64_t steps = 0;      ///< steps counted with OperationTrace::count_step()
  int64_t operations = 0; ///< top-level ATen operations
  std::map<std::string, int64_t> operations_per_device;
  /// Computing operations on the CPU while the model is elsewhere, and their share of all
  /// computing operations (copies and host work excluded); 0 for a model on the CPU.
  int64_t cpu_operations = 0;
  double cpu_share = 0;
  double traced_seconds = 0;   ///< wall time with the trace on
  double overhead_seconds = 0; ///< of which inside the trace's own callbacks
  TransferCounts transfers;    ///< totals over the traced steps
  int64_t findings = 0;
};

/// The result of a trace; `to_json()` has `findings`, `operations` and `summary`.
struct TraceReport {
  std::string expected_device;
  /// One per problem at one place, in the one finding type of every result file: kind
  /// "operation", tensor "aten::ones in model.layers.0" (or "(all operations)"), problem a
  /// TraceProblem's name (to_string), device the devices involved, count how often it happened.
  std::vector<results::AuditFinding> findings;
  std::vector<OperationCount> operations; ///< sorted by module, phase and operation
  TraceSummary summary;

  bool clean() const { return findings.empty(); }
  nlohmann::json to_json() const;
  /// One line per finding, then the summary: for a terminal.
  std::string to_text() const;
};

/// The inverse of TraceReport::to_json, strict (kan/io/json_reader.h): key paths below `path`.
TraceReport trace_report_from_json(const nlohmann::json& json, const std::string& path = "");

/// Records every ATen operation the current thread (and the autograd threads working for it)
/// runs between start() and stop(), through LibTorch's RecordFunction callbacks. Operations
/// are attributed to the innermost kan::ModuleScope and kan::PhaseScope around them; backward
/// operations to the module whose forward made them. Inside a TorchScript module, findings also
/// name the line of the user's source the operation came from. One trace at a time per process.
/// On kMeta inside a MetaRehearsal (meta_rehearsal.h) it predicts a GPU run's findings.
///
/// Example:
///   kan::diagnostics::OperationTrace trace(model->device());
///   trace.start();
///   model->forward(x).sum().backward();
///   trace.stop();
///   std::cout << trace.report().to_text();
class OperationTrace {
public:
  /// root: the name module scopes are joined under ("model" -> "model.layers.0").
  explicit OperationTrace(torch::Device expected_device, std::string root = "model");
  ~OperationTrace();
  OperationTrace(const OperationTrace&) = delete;
  OperationTrace& operator=(const OperationTrace&) = delete;

  /// Starts recording; throws if another trace is running.
  void start();
  /// Stops recording (on the thread that started it). Calling it twice is harmless.
  void stop();
  bool running() const;
  /// Counts one training step, for per-step figures.
  void count_step();

  TraceReport report() const;

private:
  std::unique_ptr<detail::TraceState> state_;
};

/// Traces fn and reports.
TraceReport trace_operations(torch::Device expected_device, const std::function<void()>& fn);

} // namespace kan::diagnostics
