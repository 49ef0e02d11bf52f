// The record-to-summary logic of the CUPTI tracer: pure functions over plain records.
#include "kan/diagnostics/cupti_tracer.h"

#include "kan/io/text.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace kan::diagnostics {
namespace detail {
namespace {

// Length of the union of [start, end) intervals, each clipped to [lo, hi) when hi > lo.
// Sorts its argument.
uint64_t union_length_ns(std::vector<std::pair<uint64_t, uint64_t>>& intervals, uint64_t lo,
                         uint64_t hi) {
  const bool clip = hi > lo;
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0;
  bool open = false;
  uint64_t run_start = 0, run_end = 0;
  for (auto [start, end] : intervals) {
    if (clip) {
      start = std::clamp(start, lo, hi);
      end = std::clamp(end, lo, hi);
    }
    if (end <= start)
      continue;
    if (open && start <= run_end) {
      run_end = std::max(run_end, end);
      continue;
    }
    if (open)
      total += run_end - run_start;
    open = true;
    run_start = start;
    run_end = end;
  }
  if (open)
    total += run_end - run_start;
  return total;
}

} // namespace
} // namespace detail

std::string to_string(CopyKind value) {
  return io::name_of(value, kCopyKindNames);
}

ActivitySummary summarize_activity(const std::vector<KernelRecord>& kernels,
                                   const std::vector<CopyRecord>& copies, uint64_t begin_ns,
                                   uint64_t end_ns) {
  ActivitySummary s;
  s.traced = true;
  s.kernels = static_cast<int64_t>(kernels.size());
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  intervals.reserve(kernels.size());
  for (const auto& k : kernels)
    intervals.emplace_back(k.start_ns, k.end_ns);
  s.busy_seconds = static_cast<double>(detail::union_length_ns(intervals, begin_ns, end_ns)) * 1e-9;
  s.wall_seconds = end_ns > begin_ns ? static_cast<double>(end_ns - begin_ns) * 1e-9 : 0.0;
  s.busy_fraction = s.wall_seconds > 0 ? std::min(1.0, s.busy_seconds / s.wall_seconds) : 0.0;

  for (const auto& c : copies) {
    CopyTotals* totals = &s.other_copies;
    switch (c.kind) {
    case CopyKind::kHostToDevice:
      totals = &s.host_to_device;
      break;
    case CopyKind::kDeviceToHost:
      totals = &s.device_to_host;
      break;
    case CopyKind::kDeviceToDevice:
      totals = &s.device_to_device;
      break;
    case CopyKind::kOther:
      break;
    }
    totals->copies += static_cast<int64_t>(std::max<uint64_t>(c.count, 1));
    totals->bytes += static_cast<int64_t>(c.bytes);
  }

  if (s.kernels == 0) {
    std::string what = "GPU not used: no kernel ran";
    what += s.wall_seconds > 0 ? " in this " + io::format_seconds(s.wall_seconds) + " interval"
                               : " in this interval";
    const int64_t all_copies = s.host_to_device.copies + s.device_to_host.copies +
                               s.device_to_device.copies + s.other_copies.copies;
    if (all_copies > 0)
      what += " (only " + std::to_string(all_copies) + " memory copies)";
    what += "; the work ran on the CPU or nowhere. Check that the model and its data are on the "
            "GPU (kanbench audit).";
    s.findings.push_back(std::move(what));
  }
  return s;
}

results::EpochActivity ActivitySummary::to_epoch_activity() const {
  results::EpochActivity e;
  e.kernels = kernels;
  e.busy_seconds = busy_seconds;
  e.wall_seconds = wall_seconds;
  e.busy_fraction = busy_fraction;
  e.h2d_copies = host_to_device.copies;
  e.h2d_bytes = host_to_device.bytes;
  e.d2h_copies = device_to_host.copies;
  e.d2h_bytes = device_to_host.bytes;
  return e;
}

std::optional<results::AuditFinding>
gpu_not_used_finding(const ActivitySummary& summary, const std::string& device, int64_t epoch) {
  if (!summary.gpu_not_used())
    return std::nullopt;
  results::AuditFinding f;
  f.tensor = "epoch " + std::to_string(epoch);
  f.kind = "kernel";
  f.device = "none";
  f.expected_device = device;
  f.problem = "gpu_not_used";
  f.message = "GPU not used: CUPTI saw no kernel on " + device + " during timed epoch " +
              std::to_string(epoch) +
              (summary.wall_seconds > 0 ? " (" + io::format_seconds(summary.wall_seconds) + ")"
                                        : std::string());
  f.fix = "Move the model and the data to " + device +
          " (model->to(device), Dataset::to(device)) and run kanbench audit to find what stayed "
          "on the CPU.";
  return f;
}

} // namespace kan::diagnostics
