#include "kan/diagnostics/chrome_trace.h"

#include "kan/io/atomic_file.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <unordered_map>

namespace kan::diagnostics {
namespace detail {
namespace {

constexpr int kRangesPid = 1;
constexpr int kKernelsPid = 2;
constexpr int kCopiesPid = 3;

// A JSON string literal; invalid UTF-8 is replaced rather than refused.
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string demangle(const std::string& name) {
  if (name.empty())
    return "kernel";
  if (name.compare(0, 2, "_Z") != 0)
    return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> text(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && text ? std::string(text.get()) : name;
}

std::string copy_name(CopyKind kind) {
  switch (kind) {
  case CopyKind::kHostToDevice:
    return "Memcpy HtoD";
  case CopyKind::kDeviceToHost:
    return "Memcpy DtoH";
  case CopyKind::kDeviceToDevice:
    return "Memcpy DtoD";
  case CopyKind::kOther:
    break;
  }
  return "Memcpy";
}

int copy_lane(CopyKind kind) {
  switch (kind) {
  case CopyKind::kHostToDevice:
    return 1;
  case CopyKind::kDeviceToHost:
    return 2;
  case CopyKind::kDeviceToDevice:
    return 3;
  case CopyKind::kOther:
    break;
  }
  return 4;
}

bool has_time(uint64_t start, uint64_t end) {
  return !(start == 0 && end == 0);
}

// Streams the events one per line, so that 10^6 kernels need no JSON tree in memory.
class EventWriter {
public:
  EventWriter(std::ostream& out, uint64_t base_ns) : out_(out), base_ns_(base_ns) {}

  void metadata(const char* what, int pid, int tid, const std::string& name) {
    begin();
    out_ << "{\"name\":\"" << what << "\",\"ph\":\"M\",\"ts\":0,\"dur\":0,\"pid\":" << pid
         << ",\"tid\":" << tid << ",\"args\":{\"name\":" << quoted(name) << "}}";
  }

  // `args` is the inside of a JSON object ("\"bytes\":4096"), or empty.
  void complete(const std::string& quoted_name, const char* category, uint64_t start_ns,
                uint64_t end_ns, int pid, int64_t tid, const std::string& args) {
    begin();
    const uint64_t start = std::max(start_ns, base_ns_);
    const uint64_t end = std::max(end_ns, start);
    out_ << "{\"name\":" << quoted_name << ",\"cat\":\"" << category
         << "\",\"ph\":\"X\",\"ts\":" << microseconds(start - base_ns_)
         << ",\"dur\":" << microseconds(end - start) << ",\"pid\":" << pid << ",\"tid\":" << tid;
    if (!args.empty())
      out_ << ",\"args\":{" << args << "}";
    out_ << "}";
  }

private:
  void begin() {
    out_ << (first_ ? "\n" : ",\n");
    first_ = false;
  }

  static std::string microseconds(uint64_t ns) {
    char text[32];
    std::snprintf(text, sizeof(text), "%llu.%03llu", static_cast<unsigned long long>(ns / 1000),
                  static_cast<unsigned long long>(ns % 1000));
    return text;
  }

  std::ostream& out_;
  uint64_t base_ns_;
  bool first_ = true;
};

} // namespace
} // namespace detail

void write_chrome_trace(std::ostream& out, const ActivityRecords& records,
                        const std::vector<TraceRange>& ranges) {
  using namespace detail;
  uint64_t base = std::numeric_limits<uint64_t>::max();
  for (const auto& k : records.kernels)
    if (has_time(k.start_ns, k.end_ns))
      base = std::min(base, k.start_ns);
  for (const auto& c : records.copies)
    if (has_time(c.start_ns, c.end_ns))
      base = std::min(base, c.start_ns);
  for (const auto& r : ranges)
    base = std::min(base, r.start_ns);
  if (base == std::numeric_limits<uint64_t>::max())
    base = 0;

  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"kanbench\",\"clock\":"
         "\"CUPTI timestamps (ns); ts = (t - time_base_ns) / 1000\",\"time_base_ns\":"
      << base << "},\"traceEvents\":[";
  EventWriter events(out, base);

  // The rows: ranges by lane (in order of first appearance), kernels by stream, copies by kind.
  events.metadata("process_name", kRangesPid, 0, "kanbench");
  events.metadata("process_name", kKernelsPid, 0, "GPU kernels");
  events.metadata("process_name", kCopiesPid, 0, "GPU memory copies");
  std::map<std::string, int> lanes;
  for (const auto& r : ranges) {
    if (lanes.count(r.lane) == 0) {
      const int tid = static_cast<int>(lanes.size()) + 1;
      lanes[r.lane] = tid;
      events.metadata("thread_name", kRangesPid, tid, r.lane);
    }
  }
  std::map<uint32_t, bool> streams;
  for (const auto& k : records.kernels)
    streams[k.stream] = true;
  for (const auto& [stream, unused] : streams)
    events.metadata("thread_name", kKernelsPid, static_cast<int>(stream),
                    "stream " + std::to_string(stream));
  std::map<int, bool> copy_lanes;
  for (const auto& c : records.copies)
    copy_lanes[copy_lane(c.kind)] = true;
  for (const auto& [lane, unused] : copy_lanes) {
    static const char* const names[] = {"", "host to device", "device to host", "device to device",
                                        "other copies"};
    events.metadata("thread_name", kCopiesPid, lane, names[lane]);
  }

  for (const auto& r : ranges)
    events.complete(quoted(r.name), "range", r.start_ns, r.end_ns, kRangesPid, lanes[r.lane], "");
  std::unordered_map<std::string, std::string> names; // mangled -> quoted demangled
  for (const auto& k : records.kernels) {
    if (!has_time(k.start_ns, k.end_ns))
      continue;
    auto it = names.find(k.name);
    if (it == names.end())
      it = names.emplace(k.name, quoted(demangle(k.name))).first;
    events.complete(it->second, "kernel", k.start_ns, k.end_ns, kKernelsPid, k.stream,
                    "\"stream\":" + std::to_string(k.stream));
  }
  for (const auto& c : records.copies) {
    if (!has_time(c.start_ns, c.end_ns))
      continue;
    std::string args =
        "\"bytes\":" + std::to_string(c.bytes) + ",\"stream\":" + std::to_string(c.stream);
    if (c.count > 1)
      args += ",\"copies\":" + std::to_string(c.count);
    events.complete(quoted(copy_name(c.kind)), "memcpy", c.start_ns, c.end_ns, kCopiesPid,
                    copy_lane(c.kind), args);
  }
  out << "\n]}\n";
}

void write_chrome_trace(const std::string& path, const ActivityRecords& records,
                        const std::vector<TraceRange>& ranges) {
  std::ostringstream out;
  write_chrome_trace(out, records, ranges);
  try {
    io::write_file_atomically(path, out.str());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what()); // "PATH: cannot write ...: reason"
  }
}

TraceRangeScope::TraceRangeScope(std::vector<TraceRange>& sink, std::string name, std::string lane)
    : sink_(sink), range_{std::move(name), CuptiTracer::timestamp_ns(), 0, std::move(lane)},
      nvtx_(range_.name) {}

TraceRangeScope::~TraceRangeScope() {
  range_.end_ns = CuptiTracer::timestamp_ns();
  try {
    sink_.push_back(std::move(range_));
  } catch (...) {
    // out of memory: the range is lost, the run goes on
  }
}

} // namespace kan::diagnostics
