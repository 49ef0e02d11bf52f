#include "kan/diagnostics/cupti_tracer.h"

#include "kan/config.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string_view>
#include <unordered_set>
#include <utility>

#ifdef KAN_HAS_CUPTI
#include <cupti.h>
#endif

namespace kan::diagnostics {
namespace detail {

// The state of one tracer. The fields under "pending" are written by CUPTI's buffer-completed
// callback (any thread) while this tracer is the active one, and read under g_mutex.
struct CuptiState {
  CuptiTracerOptions options;
  CuptiStatus status = CuptiStatus::kReady;
  std::string reason;
  uint64_t begin_ns = 0;
  std::vector<ActivitySummary> intervals;
  ActivityRecords kept;

  // pending: the records of the running interval
  std::vector<KernelRecord> pending_kernels;
  std::vector<CopyRecord> pending_copies;
  std::string records_lost;             // why records are missing; "" when none are
  int64_t buffers_refused_at_start = 0; // g_buffers_refused when the interval began
  int64_t records_dropped_at_start = 0; // g_records_dropped when the interval began

  explicit CuptiState(const CuptiTracerOptions& o) : options(o) {}
};

#ifdef KAN_HAS_CUPTI

namespace {

std::string_view base_name(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string cupti_error_name(CUptiResult result) {
  const char* name = nullptr;
  if (cuptiGetResultString(result, &name) != CUPTI_SUCCESS || name == nullptr)
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  return name;
}

std::string cupti_failure(CUptiResult result, const char* call, const char* file, int line) {
  return std::string(call) + " failed with " + cupti_error_name(result) + " (" +
         std::string(base_name(file)) + ":" + std::to_string(line) + ")";
}

} // namespace

// Throws c10::Error naming the call, the CUPTI error and where it was made.
void check_cupti(CUptiResult result, const char* call, const char* file, int line) {
  if (result != CUPTI_SUCCESS)
    C10_THROW_ERROR(Error, cupti_failure(result, call, file, line));
}

// For destructors: reports a failed call on stderr and carries on.
void check_cupti_noexcept(CUptiResult result, const char* call, const char* file,
                          int line) noexcept {
  if (result == CUPTI_SUCCESS)
    return;
  try {
    std::cerr << "kanbench: warning: " << cupti_failure(result, call, file, line) << "\n";
  } catch (...) {
  }
}

#endif // KAN_HAS_CUPTI

} // namespace detail

/// Calls a CUPTI function; on failure throws c10::Error with file:line, the error's name and the
/// call's text.
#define KAN_CUPTI_CALL(call)                                                                       \
  ::kan::diagnostics::detail::check_cupti((call), #call, __FILE__, __LINE__)
/// As KAN_CUPTI_CALL, for destructors: a failure is printed on stderr, never thrown.
#define KAN_CUPTI_CALL_NOEXCEPT(call)                                                              \
  ::kan::diagnostics::detail::check_cupti_noexcept((call), #call, __FILE__, __LINE__)

namespace detail {
namespace {

#ifdef KAN_HAS_CUPTI

constexpr size_t kBufferAlignment = 8; // CUPTI's requirement for activity buffers

std::mutex g_mutex;             // guards g_active, g_buffers and the active tracer's records
CuptiState* g_active = nullptr; // the tracer whose interval is running
// The buffers buffer_requested handed to CUPTI: only those are ours to read and free. Another
// CUPTI client (the LibTorch profiler) may have buffers in flight when we register our callbacks.
std::unordered_set<uint8_t*> g_buffers;
std::atomic<size_t> g_buffer_bytes{size_t{8} << 20};
std::atomic<int64_t> g_buffers_refused{0}; // requests we could not allocate: CUPTI dropped records
std::atomic<int64_t> g_records_dropped{0}; // records CUPTI dropped with its buffers full

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  const size_t bytes =
      (g_buffer_bytes.load() + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  // A null buffer is allowed: CUPTI then drops records rather than failing.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, bytes));
  *max_records = 0;
  if (*buffer != nullptr) {
    try {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_buffers.insert(*buffer);
    } catch (...) { // CUPTI calls this from C: nothing may escape
      std::free(*buffer);
      *buffer = nullptr;
    }
  }
  *size = *buffer != nullptr ? bytes : 0;
  if (*buffer == nullptr)
    ++g_buffers_refused;
}

CopyKind copy_kind(uint8_t kind) {
  switch (static_cast<CUpti_ActivityMemcpyKind>(kind)) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
    return CopyKind::kHostToDevice;
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
    return CopyKind::kDeviceToHost;
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
  case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    return CopyKind::kDeviceToDevice;
  default:
    return CopyKind::kOther;
  }
}

// Appends the buffer's records to the state's; returns why some are missing, or "".
std::string parse_records(CuptiState& state, uint8_t* buffer, size_t valid_size, bool keep_names) {
  CUpti_Activity* record = nullptr;
  CUptiResult status;
  while ((status = cuptiActivityGetNextRecord(buffer, valid_size, &record)) == CUPTI_SUCCESS) {
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      // CUPTI writes the newest record layout it knows; later layouts only append fields.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelRecord r;
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.stream = k->streamId;
      if (keep_names && k->name != nullptr)
        r.name = k->name;
      state.pending_kernels.push_back(std::move(r));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      CopyRecord r;
      r.start_ns = m->start;
      r.end_ns = m->end;
      r.bytes = m->bytes;
      r.kind = copy_kind(m->copyKind);
      r.stream = m->streamId;
      r.count = m->copyCount > 0 ? m->copyCount : 1;
      state.pending_copies.push_back(r);
      break;
    }
    default:
      break;
    }
  }
  // MAX_LIMIT_REACHED is the end of the buffer; anything else (INVALID_KIND: an incomplete
  // record) leaves the rest of the buffer unread.
  if (status != CUPTI_ERROR_MAX_LIMIT_REACHED)
    return "an unreadable activity record (" + cupti_error_name(status) + ")";
  return "";
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  // Reading the count resets it, so it is kept whichever buffer this is; read before taking
  // g_mutex, which is never held across a CUPTI call that can call back into this file.
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
    g_records_dropped += static_cast<int64_t>(dropped);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (buffer == nullptr || g_buffers.erase(buffer) == 0)
    return; // another CUPTI client's buffer: neither ours to read nor to free
  std::unique_ptr<uint8_t, decltype(&std::free)> owned(buffer, &std::free);
  CuptiState* state = g_active;
  if (state == nullptr)
    return; // records outside any interval are dropped
  if (valid_size == 0)
    return;
  // CUPTI calls this from C: nothing may escape. Out of memory loses the rest of the buffer.
  try {
    auto lost = parse_records(*state, buffer, valid_size, state->options.keep_records());
    if (!lost.empty() && state->records_lost.empty())
      state->records_lost = std::move(lost);
  } catch (...) {
    if (state->records_lost.empty())
      state->records_lost = "out of memory while reading a buffer (free host memory)";
  }
}

// Disables what start() enabled and delivers what CUPTI still holds; never throws.
void disable_and_flush_noexcept() noexcept {
  KAN_CUPTI_CALL_NOEXCEPT(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  KAN_CUPTI_CALL_NOEXCEPT(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
  KAN_CUPTI_CALL_NOEXCEPT(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
}

// After a failed start: undoes what may have been enabled. The failure is already the reason,
// so what fails here (usually the same thing) is not reported again.
void undo_start_quietly() noexcept {
  (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

bool cuda_usable() noexcept {
  try {
    return torch::cuda::is_available();
  } catch (...) {
    return false;
  }
}

// What to do about a failed start.
std::string start_failure_hint(CUptiResult result) {
  if (!cuda_usable())
    return "no usable CUDA driver or GPU here (torch::cuda::is_available() is false), so GPU "
           "activity cannot be traced";
  switch (result) {
  case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    return "another CUPTI client holds it (Nsight Systems, Nsight Compute, cuda-gdb or the "
           "LibTorch profiler): run without it, or pass --no-cupti";
  case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
  case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
    return "this user, or this virtual machine, may not trace the GPU (see NVIDIA's "
           "ERR_NVGPUCTRPERM page); --no-cupti runs without tracing";
  default:
    return "--no-cupti runs without tracing";
  }
}

#endif // KAN_HAS_CUPTI

void make_unavailable(CuptiState& s, std::string reason) {
  s.status = CuptiStatus::kUnavailable;
  s.reason = std::move(reason);
}

} // namespace
} // namespace detail

std::string to_string(CuptiStatus value) {
  return io::name_of(value, kCuptiStatusNames);
}

bool cupti_compiled_in() {
#ifdef KAN_HAS_CUPTI
  return true;
#else
  return false;
#endif
}

CuptiTracer::CuptiTracer(CuptiTracerOptions options)
    : state_(std::make_unique<detail::CuptiState>(options)) {
  auto& s = *state_;
  if (!s.options.enabled()) {
    s.status = CuptiStatus::kDisabled;
    s.reason = "CUPTI disabled: GPU activity is not traced (switched off, e.g. kanbench run "
               "--no-cupti)";
    return;
  }
#ifndef KAN_HAS_CUPTI
  detail::make_unavailable(
      s, "CUPTI unavailable: kanbench was built without CUPTI (rebuild with the CUDA toolkit's "
         "CUPTI found and -DKAN_WITH_CUPTI=ON; kanbench env shows what was found)");
#endif
}

CuptiTracer::~CuptiTracer() {
#ifdef KAN_HAS_CUPTI
  auto& s = *state_;
  if (s.status != CuptiStatus::kTracing)
    return;
  detail::disable_and_flush_noexcept();
  std::lock_guard<std::mutex> lock(detail::g_mutex);
  if (detail::g_active == &s)
    detail::g_active = nullptr;
#endif
}

bool CuptiTracer::start() {
  auto& s = *state_;
  TORCH_CHECK(s.status != CuptiStatus::kTracing,
              "CuptiTracer::start: this tracer is already tracing; call stop() first");
  if (s.status != CuptiStatus::kReady)
    return false;
#ifdef KAN_HAS_CUPTI
  {
    std::lock_guard<std::mutex> lock(detail::g_mutex);
    TORCH_CHECK(detail::g_active == nullptr,
                "CuptiTracer::start: another CuptiTracer is tracing; CUPTI traces one interval "
                "at a time, so stop() that one first");
    detail::g_active = &s;
    s.pending_kernels.clear();
    s.pending_copies.clear();
    s.records_lost.clear();
  }
  s.buffers_refused_at_start = detail::g_buffers_refused.load();
  s.records_dropped_at_start = detail::g_records_dropped.load();
  auto release = [&] {
    std::lock_guard<std::mutex> lock(detail::g_mutex);
    detail::g_active = nullptr;
    s.pending_kernels.clear();
    s.pending_copies.clear();
  };
  detail::g_buffer_bytes.store(std::max<size_t>(s.options.buffer_bytes(), 64 << 10));
  // Registered on every start: another CUPTI client may have replaced the callbacks since.
  CUptiResult result = CUPTI_SUCCESS;
  const char* failed_call = "";
  auto attempt = [&](CUptiResult r, const char* call) {
    if (r != CUPTI_SUCCESS) {
      result = r;
      failed_call = call;
    }
    return r == CUPTI_SUCCESS;
  };
  if (!(attempt(cuptiActivityRegisterCallbacks(detail::buffer_requested, detail::buffer_completed),
                "cuptiActivityRegisterCallbacks") &&
        attempt(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                "cuptiActivityEnable(CONCURRENT_KERNEL)") &&
        attempt(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)"))) {
    detail::undo_start_quietly();
    release();
    detail::make_unavailable(s, "CUPTI unavailable: " + std::string(failed_call) + " failed with " +
                                    detail::cupti_error_name(result) + "; " +
                                    detail::start_failure_hint(result));
    return false;
  }
  if (!detail::cuda_usable()) {
    detail::undo_start_quietly();
    release();
    detail::make_unavailable(s, "CUPTI unavailable: no CUDA device is visible "
                                "(torch::cuda::is_available() is false), so GPU activity cannot "
                                "be traced");
    return false;
  }
  s.begin_ns = timestamp_ns();
  s.status = CuptiStatus::kTracing;
  return true;
#else
  return false; // unreachable: the constructor made the tracer kUnavailable
#endif
}

ActivitySummary CuptiTracer::stop() {
  auto& s = *state_;
  if (s.status != CuptiStatus::kTracing)
    return {};
#ifdef KAN_HAS_CUPTI
  std::string failure;
  if (s.options.synchronize()) {
    try {
      const int devices = static_cast<int>(torch::cuda::device_count()); // c10::DeviceIndex: int8_t
      for (int d = 0; d < devices; ++d)
        torch::cuda::synchronize(d);
    } catch (const c10::Error& e) {
      failure = std::string("synchronising the CUDA devices failed: ") + e.what_without_backtrace();
    }
  }
  const uint64_t end_ns = timestamp_ns();
  try {
    KAN_CUPTI_CALL(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    KAN_CUPTI_CALL(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
    KAN_CUPTI_CALL(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  } catch (const c10::Error& e) {
    if (failure.empty())
      failure = e.what_without_backtrace();
  }
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
  std::string lost;
  {
    std::lock_guard<std::mutex> lock(detail::g_mutex);
    detail::g_active = nullptr;
    kernels.swap(s.pending_kernels);
    copies.swap(s.pending_copies);
    lost.swap(s.records_lost);
  }
  // Incomplete records would understate the kernels, or invent "GPU not used".
  const int64_t dropped = detail::g_records_dropped.load() - s.records_dropped_at_start;
  if (lost.empty() && dropped > 0)
    lost = std::to_string(dropped) + " record(s) CUPTI dropped with its buffers full (a larger "
                                     "CuptiTracerOptions::buffer_bytes gives it more room)";
  if (lost.empty() && detail::g_buffers_refused.load() != s.buffers_refused_at_start)
    lost = "out of memory allocating a buffer (free host memory, or use a smaller "
           "CuptiTracerOptions::buffer_bytes)";
  if (failure.empty() && !lost.empty())
    failure = "activity records are missing: " + lost;
  if (!failure.empty()) {
    detail::make_unavailable(s, "CUPTI failed while tracing, so this interval is not counted: " +
                                    failure);
    ActivitySummary none;
    none.wall_seconds = end_ns > s.begin_ns ? static_cast<double>(end_ns - s.begin_ns) * 1e-9 : 0;
    return none;
  }
  ActivitySummary summary = summarize_activity(kernels, copies, s.begin_ns, end_ns);
  s.intervals.push_back(summary);
  if (s.options.keep_records()) {
    s.kept.kernels.insert(s.kept.kernels.end(), std::make_move_iterator(kernels.begin()),
                          std::make_move_iterator(kernels.end()));
    s.kept.copies.insert(s.kept.copies.end(), copies.begin(), copies.end());
  }
  s.status = CuptiStatus::kReady;
  return summary;
#else
  return {};
#endif
}

CuptiStatus CuptiTracer::status() const {
  return state_->status;
}

const std::string& CuptiTracer::reason() const {
  return state_->reason;
}

const std::vector<ActivitySummary>& CuptiTracer::intervals() const {
  return state_->intervals;
}

results::GpuActivity CuptiTracer::gpu_activity() const {
  const auto& s = *state_;
  results::GpuActivity g;
  g.traced = !s.intervals.empty();
  // A tracer that failed after some intervals keeps them, and says why the rest are missing.
  g.reason = s.reason;
  if (!g.traced && g.reason.empty())
    g.reason = "CUPTI traced no interval (start() was never called)";
  for (const auto& interval : s.intervals)
    g.epochs.push_back(interval.to_epoch_activity());
  return g;
}

const ActivityRecords& CuptiTracer::records() const {
  return state_->kept;
}

uint64_t CuptiTracer::timestamp_ns() {
#ifdef KAN_HAS_CUPTI
  uint64_t now = 0;
  if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS)
    return now;
#endif
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

} // namespace kan::diagnostics
