// CUPTI activity tracer: the record-to-summary logic with synthetic records, the tracer where
// CUPTI cannot start, the Chrome trace writer, and (with a GPU) real kernels and copies.
#include "kan/diagnostics/cupti_tracer.h"

#include "kan/diagnostics/chrome_trace.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

namespace kan::diagnostics {
namespace {

constexpr double kNs = 1e-9;

KernelRecord kernel(uint64_t start, uint64_t end, uint32_t stream = 7, std::string name = "k") {
  return KernelRecord{start, end, std::move(name), stream};
}

CopyRecord copy(uint64_t bytes, CopyKind kind, uint64_t start = 10, uint64_t end = 20) {
  return CopyRecord{start, end, bytes, kind};
}

// ---- summarize_activity -------------------------------------------------------------------

TEST(CuptiSummary, EmptyIntervalIsGpuNotUsed) {
  const auto s = summarize_activity({}, {}, 1000, 1000 + 2'000'000'000ull);
  EXPECT_TRUE(s.traced);
  EXPECT_EQ(s.kernels, 0);
  EXPECT_EQ(s.busy_seconds, 0.0);
  EXPECT_DOUBLE_EQ(s.wall_seconds, 2.0);
  EXPECT_EQ(s.busy_fraction, 0.0);
  EXPECT_TRUE(s.gpu_not_used());
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0].rfind("GPU not used", 0), 0u) << s.findings[0];
  EXPECT_NE(s.findings[0].find("2 s"), std::string::npos) << s.findings[0];
}

TEST(CuptiSummary, DisjointKernelsAddUp) {
  const auto s = summarize_activity({kernel(0, 100), kernel(200, 300)}, {}, 0, 1000);
  EXPECT_EQ(s.kernels, 2);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 200 * kNs);
  EXPECT_DOUBLE_EQ(s.wall_seconds, 1000 * kNs);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 0.2);
  EXPECT_FALSE(s.gpu_not_used());
  EXPECT_TRUE(s.findings.empty());
}

TEST(CuptiSummary, OverlappingKernelsOnStreamsCountOnce) {
  const auto s =
      summarize_activity({kernel(0, 100, 7), kernel(50, 150, 8), kernel(140, 160, 9)}, {}, 0, 400);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 160 * kNs);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 0.4);
}

TEST(CuptiSummary, NestedKernelsCountTheOuterOnly) {
  const auto s = summarize_activity(
      {kernel(100, 200), kernel(0, 1000), kernel(300, 400), kernel(999, 1000)}, {}, 0, 2000);
  EXPECT_EQ(s.kernels, 4);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 1000 * kNs);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 0.5);
}

TEST(CuptiSummary, TouchingAndUnsortedKernels) {
  const auto s =
      summarize_activity({kernel(200, 300), kernel(0, 100), kernel(100, 200)}, {}, 0, 300);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 300 * kNs);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 1.0);
}

TEST(CuptiSummary, BusyTimeIsClippedToTheInterval) {
  // One kernel started before the interval, one runs past it, one lies wholly after it.
  const auto s =
      summarize_activity({kernel(50, 150), kernel(180, 260), kernel(300, 400)}, {}, 100, 200);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_DOUBLE_EQ(s.busy_seconds, (50 + 20) * kNs);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 0.7);
  EXPECT_LE(s.busy_fraction, 1.0);
}

TEST(CuptiSummary, WithoutAnIntervalNothingIsClipped) {
  const auto s = summarize_activity({kernel(50, 150), kernel(300, 400)}, {}, 500, 500);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 200 * kNs);
  EXPECT_EQ(s.wall_seconds, 0.0);
  EXPECT_EQ(s.busy_fraction, 0.0);
}

TEST(CuptiSummary, KernelsWithoutTimestampsCountButAreNotBusy) {
  const auto s = summarize_activity({kernel(0, 0), kernel(10, 5)}, {}, 0, 100);
  EXPECT_EQ(s.kernels, 2);
  EXPECT_EQ(s.busy_seconds, 0.0);
  EXPECT_FALSE(s.gpu_not_used()) << "kernels ran, even if CUPTI could not time them";
}

TEST(CuptiSummary, CopiesOfEachKind) {
  auto batched = copy(300, CopyKind::kHostToDevice);
  batched.count = 3;
  const auto s = summarize_activity(
      {kernel(0, 10)},
      {copy(4096, CopyKind::kHostToDevice), batched, copy(4, CopyKind::kDeviceToHost),
       copy(1 << 20, CopyKind::kDeviceToDevice), copy(1 << 20, CopyKind::kDeviceToDevice),
       copy(64, CopyKind::kOther)},
      0, 100);
  EXPECT_EQ(s.host_to_device.copies, 4);
  EXPECT_EQ(s.host_to_device.bytes, 4096 + 300);
  EXPECT_EQ(s.device_to_host.copies, 1);
  EXPECT_EQ(s.device_to_host.bytes, 4);
  EXPECT_EQ(s.device_to_device.copies, 2);
  EXPECT_EQ(s.device_to_device.bytes, 2 << 20);
  EXPECT_EQ(s.other_copies.copies, 1);
  EXPECT_EQ(s.other_copies.bytes, 64);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 10 * kNs) << "copies are not kernel busy time";
}

TEST(CuptiSummary, CopiesWithoutKernelsAreStillGpuNotUsed) {
  const auto s = summarize_activity({}, {copy(8, CopyKind::kHostToDevice)}, 0, 1'000'000);
  EXPECT_TRUE(s.gpu_not_used());
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_NE(s.findings[0].find("only 1 memory copies"), std::string::npos) << s.findings[0];
}

TEST(CuptiSummary, UnionMatchesBruteForceOnRandomKernels) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<KernelRecord> kernels;
    const int n = static_cast<int>(rng() % 12);
    std::vector<bool> busy(300, false);
    const uint64_t lo = rng() % 50, hi = 250 + rng() % 50;
    for (int i = 0; i < n; ++i) {
      const uint64_t start = rng() % 300, length = rng() % 60;
      const uint64_t end = std::min<uint64_t>(start + length, 300);
      kernels.push_back(kernel(start, end, static_cast<uint32_t>(rng() % 3)));
      for (uint64_t t = start; t < end; ++t)
        busy[t] = busy[t] || (t >= lo && t < hi);
    }
    const auto expected = std::count(busy.begin(), busy.end(), true);
    const auto s = summarize_activity(kernels, {}, lo, hi);
    EXPECT_NEAR(s.busy_seconds, static_cast<double>(expected) * kNs, 1e-15) << "trial " << trial;
    EXPECT_LE(s.busy_fraction, 1.0);
    EXPECT_GE(s.busy_fraction, 0.0);
  }
}

TEST(CuptiSummary, ToEpochActivity) {
  const auto s =
      summarize_activity({kernel(0, 500)},
                         {copy(100, CopyKind::kHostToDevice), copy(8, CopyKind::kDeviceToHost),
                          copy(50, CopyKind::kDeviceToDevice)},
                         0, 1000);
  const auto e = s.to_epoch_activity();
  EXPECT_EQ(e.kernels, 1);
  EXPECT_DOUBLE_EQ(e.busy_seconds, 500 * kNs);
  EXPECT_DOUBLE_EQ(e.wall_seconds, 1000 * kNs);
  EXPECT_DOUBLE_EQ(e.busy_fraction, 0.5);
  EXPECT_EQ(e.h2d_copies, 1);
  EXPECT_EQ(e.h2d_bytes, 100);
  EXPECT_EQ(e.d2h_copies, 1);
  EXPECT_EQ(e.d2h_bytes, 8);
}

TEST(CuptiSummary, GpuNotUsedFinding) {
  EXPECT_FALSE(gpu_not_used_finding(summarize_activity({kernel(0, 1)}, {}, 0, 10), "cuda:0", 0));
  EXPECT_FALSE(gpu_not_used_finding(ActivitySummary{}, "cuda:0", 0)) << "not traced: no finding";
  const auto f = gpu_not_used_finding(summarize_activity({}, {}, 0, 1'500'000'000), "cuda:0", 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "kernel");
  EXPECT_EQ(f->problem, "gpu_not_used");
  EXPECT_EQ(f->tensor, "epoch 2");
  EXPECT_EQ(f->expected_device, "cuda:0");
  EXPECT_NE(f->message.find("GPU not used"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find("cuda:0"), std::string::npos) << f->message;
  EXPECT_FALSE(f->fix.empty());
}

TEST(CuptiSummary, CopyKindNames) {
  EXPECT_EQ(to_string(CopyKind::kHostToDevice), "h2d");
  EXPECT_EQ(to_string(CopyKind::kDeviceToHost), "d2h");
  EXPECT_EQ(to_string(CopyKind::kDeviceToDevice), "d2d");
  EXPECT_EQ(to_string(CopyKind::kOther), "other");
}

// ---- the tracer where it cannot trace -----------------------------------------------------

TEST(CuptiTracer, DisabledTracesNothing) {
  CuptiTracer tracer(CuptiTracerOptions().enabled(false));
  EXPECT_EQ(tracer.status(), CuptiStatus::kDisabled);
  EXPECT_FALSE(tracer.start());
  EXPECT_FALSE(tracer.tracing());
  const auto s = tracer.stop();
  EXPECT_FALSE(s.traced);
  EXPECT_FALSE(s.gpu_not_used()) << "nothing traced is no finding";
  EXPECT_NE(tracer.reason().find("CUPTI disabled"), std::string::npos) << tracer.reason();
  const auto g = tracer.gpu_activity();
  EXPECT_FALSE(g.traced);
  EXPECT_EQ(g.reason, tracer.reason());
  EXPECT_TRUE(g.epochs.empty());
  EXPECT_TRUE(tracer.intervals().empty());
}

TEST(CuptiTracer, UnavailableWithoutGpuSaysWhyAndNeverThrows) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "a CUDA device is available; this test is for machines without one";
  CuptiTracer tracer;
  EXPECT_EQ(tracer.status(), cupti_compiled_in() ? CuptiStatus::kReady : CuptiStatus::kUnavailable);
  bool started = true;
  EXPECT_NO_THROW(started = tracer.start());
  EXPECT_FALSE(started);
  EXPECT_EQ(tracer.status(), CuptiStatus::kUnavailable);
  EXPECT_EQ(tracer.reason().rfind("CUPTI unavailable: ", 0), 0u) << tracer.reason();
  const char* expected =
      cupti_compiled_in() ? "torch::cuda::is_available() is false" : "built without CUPTI";
  EXPECT_NE(tracer.reason().find(expected), std::string::npos) << tracer.reason();
  std::cout << "reason: " << tracer.reason() << "\n";
  EXPECT_FALSE(tracer.start()) << "a failed start is not retried";
  EXPECT_FALSE(tracer.stop().traced);
  const auto g = tracer.gpu_activity();
  EXPECT_FALSE(g.traced);
  EXPECT_EQ(g.reason, tracer.reason());
  // Another tracer may try again, and fails the same way.
  CuptiTracer second;
  EXPECT_FALSE(second.start());
  EXPECT_EQ(second.status(), CuptiStatus::kUnavailable);
}

TEST(CuptiTracer, TimestampsAdvance) {
  const uint64_t a = CuptiTracer::timestamp_ns();
  const uint64_t b = CuptiTracer::timestamp_ns();
  EXPECT_GT(a, 0u);
  EXPECT_GE(b, a);
}

TEST(CuptiTracer, StatusNames) {
  EXPECT_EQ(to_string(CuptiStatus::kReady), "ready");
  EXPECT_EQ(to_string(CuptiStatus::kTracing), "tracing");
  EXPECT_EQ(to_string(CuptiStatus::kDisabled), "disabled");
  EXPECT_EQ(to_string(CuptiStatus::kUnavailable), "unavailable");
}

// ---- Chrome trace ------------------------------------------------------------------------

nlohmann::json trace_json(const ActivityRecords& records, const std::vector<TraceRange>& ranges) {
  std::ostringstream out;
  write_chrome_trace(out, records, ranges);
  return nlohmann::json::parse(out.str()); // throws on invalid JSON
}

void expect_well_formed(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  for (const auto& e : trace["traceEvents"]) {
    for (const char* key : {"ph", "ts", "dur", "pid", "tid", "name"})
      EXPECT_TRUE(e.contains(key)) << "event lacks " << key << ": " << e.dump();
    EXPECT_TRUE(e["name"].is_string());
    EXPECT_TRUE(e["ts"].is_number());
    EXPECT_TRUE(e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_TRUE(e["pid"].is_number_integer());
    EXPECT_TRUE(e["tid"].is_number_integer());
    const auto ph = e["ph"].get<std::string>();
    EXPECT_TRUE(ph == "X" || ph == "M") << ph;
  }
}

std::vector<nlohmann::json> events_of(const nlohmann::json& trace, const std::string& ph) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == ph)
      out.push_back(e);
  return out;
}

TEST(CuptiChromeTrace, KernelsCopiesAndRangesInTheirLanes) {
  const uint64_t t0 = 1'700'000'000'000'000'000ull; // a realistic CUPTI timestamp
  ActivityRecords records;
  records.kernels = {kernel(t0 + 1000, t0 + 2500, 7, "_Z3addPfS_i"),
                     kernel(t0 + 2000, t0 + 3000, 13, "plain_kernel"), kernel(0, 0, 7, "untimed")};
  records.copies = {copy(4096, CopyKind::kHostToDevice, t0 + 500, t0 + 900),
                    copy(4, CopyKind::kDeviceToHost, t0 + 3100, t0 + 3200)};
  const std::vector<TraceRange> ranges = {{"epoch 0", t0, t0 + 4000, "kanbench"},
                                          {"step", t0 + 100, t0 + 3500, "kanbench"},
                                          {"case toy/cuda", t0, t0 + 4000, "cases"}};
  const auto trace = trace_json(records, ranges);
  expect_well_formed(trace);
  const auto complete = events_of(trace, "X");
  EXPECT_EQ(complete.size(), 2u + 2u + 3u) << "the untimed kernel is left out";

  std::set<std::string> names;
  double min_ts = 1e300;
  for (const auto& e : complete) {
    names.insert(e["name"].get<std::string>());
    min_ts = std::min(min_ts, e["ts"].get<double>());
  }
  EXPECT_EQ(min_ts, 0.0) << "times are relative to the earliest event";
  EXPECT_TRUE(names.count("add(float*, float*, int)")) << "kernel names are demangled";
  EXPECT_TRUE(names.count("plain_kernel"));
  EXPECT_TRUE(names.count("Memcpy HtoD"));
  EXPECT_TRUE(names.count("Memcpy DtoH"));
  EXPECT_TRUE(names.count("epoch 0"));
  EXPECT_EQ(trace["otherData"]["time_base_ns"].get<uint64_t>(), t0);

  for (const auto& e : complete) {
    if (e["name"] == "add(float*, float*, int)") {
      EXPECT_EQ(e["pid"], 2);
      EXPECT_EQ(e["tid"], 7);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0); // microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.5);
      EXPECT_EQ(e["cat"], "kernel");
    } else if (e["name"] == "Memcpy HtoD") {
      EXPECT_EQ(e["pid"], 3);
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.4);
    } else if (e["name"] == "case toy/cuda") {
      EXPECT_EQ(e["pid"], 1);
      EXPECT_NE(e["tid"], complete.front()["tid"]) << "another lane, another row";
    }
  }

  // Process and thread names: three processes, two range lanes, two streams, two copy lanes.
  std::set<std::string> labels;
  for (const auto& e : events_of(trace, "M"))
    labels.insert(e["name"].get<std::string>() + ":" + e["args"]["name"].get<std::string>());
  for (const char* label :
       {"process_name:kanbench", "process_name:GPU kernels", "process_name:GPU memory copies",
        "thread_name:kanbench", "thread_name:cases", "thread_name:stream 7",
        "thread_name:stream 13", "thread_name:host to device", "thread_name:device to host"})
    EXPECT_TRUE(labels.count(label)) << label;
}

TEST(CuptiChromeTrace, NamesAreEscaped) {
  const std::string nasty = "say \"hi\"\\ \n\ttab \x01 and \xff bad utf8";
  ActivityRecords records;
  records.kernels = {kernel(100, 200, 1, nasty)};
  const auto trace = trace_json(records, {{nasty, 50, 300, "lane \"q\""}});
  expect_well_formed(trace);
  bool seen = false;
  for (const auto& e : events_of(trace, "X")) {
    const auto name = e["name"].get<std::string>();
    if (name.rfind("say \"hi\"\\ \n\ttab \x01", 0) == 0)
      seen = true;
  }
  EXPECT_TRUE(seen);
}

TEST(CuptiChromeTrace, EmptyTraceIsValid) {
  const auto trace = trace_json({}, {});
  expect_well_formed(trace);
  EXPECT_TRUE(events_of(trace, "X").empty());
  EXPECT_EQ(events_of(trace, "M").size(), 3u);
}

class CuptiChromeTraceFile : public kan::test::ScratchDirTest {};

TEST_F(CuptiChromeTraceFile, WritesAFileAndRefusesABadPath) {
  std::vector<TraceRange> ranges;
  {
    TraceRangeScope epoch(ranges, "epoch 0");
    TraceRangeScope step(ranges, "step");
  }
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].name, "step") << "recorded when they end";
  EXPECT_LE(ranges[1].start_ns, ranges[0].start_ns);
  EXPECT_GE(ranges[1].end_ns, ranges[0].end_ns);
  ActivityRecords records;
  records.kernels = {kernel(ranges[0].start_ns, ranges[0].end_ns)};
  write_chrome_trace(path("trace.json"), records, ranges);
  std::ifstream in(path("trace.json"));
  const auto trace = nlohmann::json::parse(in);
  expect_well_formed(trace);
  EXPECT_EQ(events_of(trace, "X").size(), 3u);
  KAN_EXPECT_ERROR(write_chrome_trace(path("no/such/folder/trace.json"), records, ranges),
                   "cannot create", "no/such/folder/trace.json");
}

// ---- with a GPU ---------------------------------------------------------------------------

TEST(CuptiTracer, CountsKernelsAndCopies_CUDA) {
  KAN_REQUIRE_CUDA();
  if (!cupti_compiled_in())
    GTEST_SKIP() << "built without CUPTI";
  const auto host = torch::randn({512, 256}); // 512 KiB of float32
  auto work = [&] {
    auto x = host.to(torch::kCUDA);
    auto y = x.matmul(x.t()).relu().sum();
    return y.cpu();
  };
  work(); // lazy CUDA initialisation (context, cuBLAS) outside the interval
  torch::cuda::synchronize();

  CuptiTracer tracer(CuptiTracerOptions().keep_records(true));
  ASSERT_TRUE(tracer.start()) << tracer.reason();
  EXPECT_EQ(tracer.status(), CuptiStatus::kTracing);
  const auto result = work();
  const auto s = tracer.stop();
  EXPECT_TRUE(s.traced);
  EXPECT_GE(s.kernels, 3) << "matmul, relu, sum";
  EXPECT_GT(s.busy_seconds, 0.0);
  EXPECT_GT(s.wall_seconds, 0.0);
  EXPECT_LE(s.busy_seconds, s.wall_seconds);
  EXPECT_GT(s.busy_fraction, 0.0);
  EXPECT_EQ(s.host_to_device.copies, 1);
  EXPECT_EQ(s.host_to_device.bytes, static_cast<int64_t>(host.nbytes()));
  EXPECT_EQ(s.device_to_host.copies, 1);
  EXPECT_EQ(s.device_to_host.bytes, static_cast<int64_t>(result.nbytes()));
  EXPECT_TRUE(s.findings.empty());
  EXPECT_TRUE(tracer.reason().empty()) << tracer.reason();
  EXPECT_EQ(tracer.records().kernels.size(), static_cast<size_t>(s.kernels));
  EXPECT_FALSE(tracer.records().kernels.front().name.empty());

  // An interval without GPU work is a finding.
  ASSERT_TRUE(tracer.start()) << tracer.reason();
  (torch::ones({8}) * 2).sum().item<float>();
  const auto idle = tracer.stop();
  EXPECT_TRUE(idle.gpu_not_used());
  EXPECT_TRUE(gpu_not_used_finding(idle, "cuda:0", 1));

  const auto g = tracer.gpu_activity();
  EXPECT_TRUE(g.traced);
  ASSERT_EQ(g.epochs.size(), 2u);
  EXPECT_EQ(g.epochs[0].h2d_bytes, static_cast<int64_t>(host.nbytes()));
  EXPECT_EQ(g.epochs[1].kernels, 0);

  std::ostringstream out;
  write_chrome_trace(out, tracer.records(), {});
  EXPECT_NO_THROW(nlohmann::json::parse(out.str()));
}

TEST(CuptiTracer, KanFitStepRunsKernels_CUDA) {
  KAN_REQUIRE_CUDA();
  if (!cupti_compiled_in())
    GTEST_SKIP() << "built without CUPTI";
  KAN model(KANOptions({2, 5, 1}).device(torch::kCUDA));
  auto data = create_dataset(reference_function("toy").f,
                             DatasetOptions(2).train_num(256).test_num(64).device(torch::kCUDA));
  auto options = FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(2);
  fit(model, data, options); // warm-up
  CuptiTracer tracer;
  ASSERT_TRUE(tracer.start()) << tracer.reason();
  fit(model, data, options);
  const auto s = tracer.stop();
  EXPECT_GT(s.kernels, 10);
  EXPECT_GT(s.busy_fraction, 0.0);
  EXPECT_LE(s.busy_fraction, 1.0);
  EXPECT_FALSE(s.gpu_not_used());
}

} // namespace
} // namespace kan::diagnostics
