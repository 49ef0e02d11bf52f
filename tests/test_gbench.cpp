// Google Benchmark's --benchmark_out JSON, as the report imports it.
#include "reports_test_util.h"

#include "kan/results/gbench.h"
#include "kan/results/results_io.h"

#include <cmath>

namespace {

using namespace kan::results;
using GBench = test::ReportsScratchTest;

const std::string kSample = std::string(KAN_GBENCH_REFERENCE_DIR) + "/benchmark_out.json";

TEST(GBenchImport, ReadsRealOutput) {
  const auto report = read_gbench_file(kSample);
  EXPECT_EQ(report.source, kSample);
  EXPECT_EQ(report.context.host_name, "vm");
  EXPECT_EQ(report.context.num_cpus, 2);
  EXPECT_EQ(report.context.load_avg.size(), 3u);
  ASSERT_EQ(report.benchmarks.size(), 14u);
  const auto& first = report.benchmarks[0];
  EXPECT_EQ(first.name, "BM_Sum/64");
  EXPECT_EQ(first.run_type, "iteration");
  EXPECT_EQ(first.label, "cpu/float64");
  EXPECT_EQ(first.time_unit, "us");
  EXPECT_EQ(first.iterations, 120178);
  EXPECT_NEAR(*first.real_seconds(), 1.3220230823986576e-07, 1e-20);
  EXPECT_NEAR(first.counters.at("samples/s"), 4.8404751089161527e+08, 1);
  EXPECT_NEAR(first.counters.at("items_per_second"), 4.8404751089161527e+08, 1);
  EXPECT_TRUE(std::isnan(first.counters.at("zero_div"))); // written as a bare NaN
  EXPECT_FALSE(first.counters.count("family_index"));
  const auto& cv = report.benchmarks[5];
  EXPECT_EQ(cv.aggregate_name, "cv");
  EXPECT_EQ(cv.aggregate_unit, "percentage");
  EXPECT_FALSE(cv.real_seconds()); // a percentage, not a time
  const auto& failed = report.benchmarks.back();
  EXPECT_TRUE(failed.error_occurred);
  EXPECT_EQ(failed.error_message, "no CUDA device");
}

TEST(GBenchImport, ErrorsNameFileAndKeyPath) {
  auto expect_error = [](const std::string& text, const std::string& what) {
    try {
      gbench_from_text(text, "bench.json");
      ADD_FAILURE() << "read: " << text;
    } catch (const ResultsError& e) {
      EXPECT_EQ(std::string(e.what()), what);
    }
  };
  expect_error("[]", "bench.json: expected a Google Benchmark JSON object (--benchmark_out), "
                     "got an array of 0");
  expect_error("{\"context\": {}}", "bench.json: benchmarks: missing (a required key)");
  expect_error("{\"benchmarks\": [{\"name\": \"BM_a\", \"real_time\": \"1 ms\"}]}",
               "bench.json: benchmarks[0].real_time: expected a number, got a string (\"1 ms\")");
  expect_error("{\"benchmarks\": [{\"name\": \"BM_a\", \"time_unit\": \"min\"}]}",
               "bench.json: benchmarks[0].time_unit: unknown Google Benchmark time unit \"min\" "
               "(expected ns, us, ms or s)");
  expect_error("{\"benchmarks\": [{\"real_time\": 1}]}",
               "bench.json: benchmarks[0].name: missing (a required key)");
  // A parse error names where it stopped, as the results reader's do.
  expect_error("{\"benchmarks\": [", "bench.json: benchmarks[0]: not valid JSON: parse error at "
                                     "line 1, column 17: syntax error while parsing value - "
                                     "unexpected end of input; expected '[', '{', or a literal");
  expect_error("{\"benchmarks\": [{\"name\": \"BM_a\", \"real_time\": 1e999}]}",
               "bench.json: benchmarks[0].real_time: number out of range (1e999)");
}

TEST(GBenchImport, ARepeatedKeyCountsOnceTheLast) {
  // A user counter named "iterations" repeats the built-in key in Google Benchmark's output.
  const auto report = gbench_from_text(
      "{\"benchmarks\": [{\"name\": \"BM_a\", \"iterations\": 10, \"iterations\": 7}]}");
  ASSERT_EQ(report.benchmarks.size(), 1u);
  EXPECT_EQ(report.benchmarks[0].iterations, 7);
}

TEST(GBenchImport, NanInsideStringsIsLeftAlone) {
  const auto report = gbench_from_text(
      "{\"benchmarks\": [{\"name\": \"BM_NaN/Infinity\", \"label\": \"nan \\\" inf\", "
      "\"real_time\": Infinity, \"x\": -NaN, \"time_unit\": \"ms\"}]}");
  ASSERT_EQ(report.benchmarks.size(), 1u);
  EXPECT_EQ(report.benchmarks[0].name, "BM_NaN/Infinity");
  EXPECT_EQ(report.benchmarks[0].label, "nan \" inf");
  EXPECT_FALSE(report.benchmarks[0].real_time);
  EXPECT_TRUE(std::isnan(report.benchmarks[0].counters.at("x")));
}

TEST_F(GBench, MissingFileNamesIt) {
  try {
    read_gbench_file(path("none.json"));
    ADD_FAILURE();
  } catch (const ResultsError& e) {
    EXPECT_EQ(std::string(e.what()),
              path("none.json") + ": cannot open: No such file or directory");
  }
}

} // namespace
