#pragma once
/// A Chrome trace (Trace Event Format JSON, which Perfetto and chrome://tracing open) of GPU
/// kernels, memory copies and kanbench's own ranges (epochs, steps, ...).
///
/// Layout: process 1 "kanbench" holds the ranges, one thread (row) per TraceRange::lane;
/// process 2 "GPU kernels" one row per CUDA stream; process 3 "GPU memory copies" one row per
/// direction (host to device, device to host, device to device, other). Every event is an "X"
/// (complete) event with ts and dur in microseconds since the earliest timestamp in the trace;
/// process and thread names are "M" (metadata) events.

#include "kan/diagnostics/cupti_tracer.h"
#include "kan/diagnostics/nvtx.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// A named span of host time, in ns on CUPTI's clock (CuptiTracer::timestamp_ns()).
struct TraceRange {
  std::string name; ///< "epoch 3", "step", "evaluation"
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  /// The row it is drawn on; ranges of one row should nest ("epoch" around "step").
  std::string lane = "kanbench";
};

/// Writes the trace of `records` (usually CuptiTracer::records()) and `ranges` to `out`.
/// Records without timestamps are left out. Kernel names are demangled.
void write_chrome_trace(std::ostream& out, const ActivityRecords& records,
                        const std::vector<TraceRange>& ranges);

/// As above, into the file `path` (created or replaced). Throws c10::Error if it cannot be written.
///
/// Example:
///   std::vector<kan::diagnostics::TraceRange> ranges;
///   { kan::diagnostics::TraceRangeScope epoch(ranges, "epoch 0"); run_epoch(); }
///   kan::diagnostics::write_chrome_trace("trace.json", tracer.records(), ranges);
void write_chrome_trace(const std::string& path, const ActivityRecords& records,
                        const std::vector<TraceRange>& ranges);

/// Records a TraceRange into `sink` when it ends (CUPTI's clock) and is an NvtxRange while alive,
/// so one object marks a span for both Nsight and the Chrome trace.
///
/// Example:
///   std::vector<kan::diagnostics::TraceRange> ranges;
///   for (int64_t epoch = 0; ...) {
///     kan::diagnostics::TraceRangeScope scope(ranges, "epoch " + std::to_string(epoch));
///     ...
///   }
class TraceRangeScope {
public:
  TraceRangeScope(std::vector<TraceRange>& sink, std::string name, std::string lane = "kanbench");
  ~TraceRangeScope();
  TraceRangeScope(const TraceRangeScope&) = delete;
  TraceRangeScope& operator=(const TraceRangeScope&) = delete;

private:
  std::vector<TraceRange>& sink_;
  TraceRange range_;
  NvtxRange nvtx_;
};

} // namespace kan::diagnostics
