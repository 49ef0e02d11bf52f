#pragma once
/// GPU activity while a GPU case is timed, from CUPTI's Activity API: how many kernels ran, how
/// long the GPU was busy (the union of the kernels' intervals), host <-> device copies, and the
/// busy fraction of the wall time. Where CUPTI cannot start (no driver, no GPU, built without
/// CUPTI, switched off) the tracer says why and traces nothing; it never fails the run.
///
/// The record-to-summary logic (summarize_activity) is a pure function over plain records, so it
/// is tested with synthetic records on machines without a GPU.

#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {
namespace detail {
struct CuptiState;
} // namespace detail

/// One kernel execution. Timestamps are nanoseconds on CUPTI's clock (CuptiTracer::timestamp_ns).
struct KernelRecord {
  uint64_t start_ns = 0; ///< 0 with end_ns 0: CUPTI could not time it
  uint64_t end_ns = 0;
  std::string name;    ///< as CUPTI gives it (mangled); empty unless records are kept
  uint32_t stream = 0; ///< CUPTI's stream id
};

/// Direction of a memory copy.
enum class CopyKind {
  kHostToDevice,   ///< pageable or pinned host memory to device memory (or a CUDA array)
  kDeviceToHost,   ///< device memory (or a CUDA array) to host memory
  kDeviceToDevice, ///< within a device, or between devices (peer to peer)
  kOther,          ///< host to host, or a kind CUPTI does not know
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<CopyKind> kCopyKindNames[] = {{CopyKind::kHostToDevice, "h2d"},
                                                            {CopyKind::kDeviceToHost, "d2h"},
                                                            {CopyKind::kDeviceToDevice, "d2d"},
                                                            {CopyKind::kOther, "other"}};
std::string to_string(CopyKind value);

/// One memory copy. Timestamps as in KernelRecord.
struct CopyRecord {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t bytes = 0;
  CopyKind kind = CopyKind::kOther;
  uint32_t stream = 0;
  /// Copies this record stands for (a batched cudaMemcpyBatchAsync record stands for several).
  uint64_t count = 1;
};

/// Copies of one direction.
struct CopyTotals {
  int64_t copies = 0;
  int64_t bytes = 0;
};

/// GPU activity of one traced interval (one timed epoch).
struct ActivitySummary {
  /// false: nothing was traced (CUPTI off or unavailable; see CuptiTracer::reason); every
  /// figure below is then 0 except wall_seconds.
  bool traced = false;
  int64_t kernels = 0; ///< kernel executions
  double busy_seconds =
      0; ///< length of the union of the kernels' intervals, clipped to the interval
  double wall_seconds = 0;  ///< the interval's length (0 when not given)
  double busy_fraction = 0; ///< busy_seconds / wall_seconds, 0..1; 0 when wall_seconds is 0
  CopyTotals host_to_device;
  CopyTotals device_to_host;
  CopyTotals device_to_device;
  CopyTotals other_copies;
  /// One sentence each: "GPU not used: no kernel ran in this 1.25 s interval ..." when a traced
  /// interval ran no kernel.
  std::vector<std::string> findings;

  /// No kernel ran in a traced interval.
  bool gpu_not_used() const { return traced && kernels == 0; }
  /// As the results model's per-epoch figures (device-to-device copies have no field there).
  results::EpochActivity to_epoch_activity() const;
};

/// Summarises the records of one interval [begin_ns, end_ns] (CUPTI's clock). Every record is
/// taken to belong to the interval (the tracer hands over only the records of its interval); the
/// busy time is the union of the kernels' intervals clipped to [begin_ns, end_ns] when
/// end_ns > begin_ns. Records without timestamps (0, 0) count but add no busy time. Zero kernels
/// give the finding "GPU not used".
///
/// Example:
///   auto s = kan::diagnostics::summarize_activity(
///       {{0, 100, "k1", 7}, {50, 150, "k2", 8}}, {{0, 10, 4096, CopyKind::kHostToDevice}}, 0,
///       300);
///   // s.kernels == 2, s.busy_seconds == 150e-9, s.busy_fraction == 0.5
ActivitySummary summarize_activity(const std::vector<KernelRecord>& kernels,
                                   const std::vector<CopyRecord>& copies, uint64_t begin_ns,
                                   uint64_t end_ns);

/// The results model's audit finding for a traced epoch that ran no kernel (kind "kernel",
/// problem "gpu_not_used"), or nullopt when the epoch used the GPU or was not traced.
/// epoch: the index of the timed epoch; device: "cuda:0".
std::optional<results::AuditFinding> gpu_not_used_finding(const ActivitySummary& summary,
                                                          const std::string& device, int64_t epoch);

/// Settings of a CuptiTracer.
struct CuptiTracerOptions {
  /// false: start() traces nothing and reason() says CUPTI is off (the suite's --no-cupti).
  TORCH_ARG(bool, enabled) = true;
  /// Keep every kernel and copy record, with kernel names, for a Chrome trace (records()); when
  /// false only the per-interval summaries are kept. A long GPU epoch runs ~10^5 kernels.
  TORCH_ARG(bool, keep_records) = false;
  /// stop() waits for the CUDA devices first (torch::cuda::synchronize) so that every kernel of
  /// the interval is complete; switch off only where the caller has just synchronised.
  TORCH_ARG(bool, synchronize) = true;
  /// Size of each activity buffer handed to CUPTI, bytes (a kernel record is ~200 B).
  TORCH_ARG(size_t, buffer_bytes) = size_t{8} << 20;
};

/// What a tracer can do.
enum class CuptiStatus {
  kReady,       ///< enabled, not yet started (or stopped): start() will try
  kTracing,     ///< between start() and stop()
  kDisabled,    ///< CuptiTracerOptions::enabled is false
  kUnavailable, ///< CUPTI could not start or failed (reason() says why), or built without CUPTI
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<CuptiStatus> kCuptiStatusNames[] = {
    {CuptiStatus::kReady, "ready"},
    {CuptiStatus::kTracing, "tracing"},
    {CuptiStatus::kDisabled, "disabled"},
    {CuptiStatus::kUnavailable, "unavailable"}};
std::string to_string(CuptiStatus value);

/// All records a tracer kept (CuptiTracerOptions::keep_records), for write_chrome_trace.
struct ActivityRecords {
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
};

/// Traces kernels and memory copies with CUPTI's Activity API (CONCURRENT_KERNEL and MEMCPY
/// records, delivered through buffer callbacks) between start() and stop(), one summary per
/// interval. Activity is enabled only inside intervals. One tracer traces at a time per process
/// (CUPTI is global); start() throws if another is tracing. CUPTI being unavailable is not an
/// error: start() returns false, status() is kUnavailable and reason() says why, once and for
/// all for this tracer. Other CUPTI clients in the same process (Nsight Systems, the LibTorch
/// profiler) take CUPTI's activity callbacks over; do not run them together with a tracer.
///
/// Example:
///   kan::diagnostics::CuptiTracer tracer(
///       kan::diagnostics::CuptiTracerOptions().enabled(!no_cupti).keep_records(!trace.empty()));
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     tracer.start();       // false (and nothing traced) where CUPTI cannot start
///     run_epoch();
///     auto summary = tracer.stop(); // synchronises, flushes, summarises
///     if (summary.gpu_not_used()) ...;
///   }
///   case_result.gpu_activity = tracer.gpu_activity();
class CuptiTracer {
public:
  explicit CuptiTracer(CuptiTracerOptions options = {});
  /// Disables CUPTI activity and flushes if still tracing; never throws.
  ~CuptiTracer();
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  /// Starts an interval: enables CUPTI activity and reads the start time. Returns whether it
  /// traces. Never throws for CUPTI or the device being unavailable; throws c10::Error if this
  /// tracer is already tracing or another one is.
  bool start();
  /// Ends the interval: synchronises (CuptiTracerOptions::synchronize), reads the end time,
  /// disables activity, flushes CUPTI's buffers and summarises the interval's records. Without
  /// a matching successful start() it returns a summary with traced == false. Never throws for
  /// CUPTI failures (the tracer becomes kUnavailable).
  ActivitySummary stop();

  CuptiStatus status() const;
  bool tracing() const { return status() == CuptiStatus::kTracing; }
  /// Why nothing is traced: "CUPTI disabled ...", "CUPTI unavailable: ... built without CUPTI",
  /// "CUPTI unavailable: cuptiActivityEnable(...) failed ..."; "" while CUPTI works.
  const std::string& reason() const;

  /// The summaries of the traced intervals, in order.
  const std::vector<ActivitySummary>& intervals() const;
  /// traced/reason and one EpochActivity per traced interval, for CaseResult::gpu_activity.
  /// traced is true when at least one interval was traced.
  results::GpuActivity gpu_activity() const;
  /// The kept records of every traced interval (empty unless keep_records).
  const ActivityRecords& records() const;

  /// Now on CUPTI's clock (cuptiGetTimestamp), in ns: use it for the ranges of a Chrome trace so
  /// that they line up with the kernels. Without CUPTI, the system clock in ns since the epoch.
  static uint64_t timestamp_ns();

private:
  std::unique_ptr<detail::CuptiState> state_;
};

/// Whether this build of kan::diagnostics has CUPTI (KAN_HAS_CUPTI).
bool cupti_compiled_in();

} // namespace kan::diagnostics
