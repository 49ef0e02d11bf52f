#pragma once
/// Google Benchmark's own JSON (`bench_kan --benchmark_out=FILE`), imported as a section of the
/// HTML report.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kan::results {

/// The `context` object: where the benchmarks ran.
struct GBenchContext {
  std::string date;
  std::string host_name;
  std::string executable;
  std::string library_build_type; ///< "release", "debug"
  std::string library_version;    ///< "v1.7.1"; "" for versions that do not write it
  std::optional<int64_t> num_cpus;
  std::optional<double> mhz_per_cpu;
  std::optional<bool> cpu_scaling_enabled;
  std::vector<double> load_avg;
};

/// One entry of `benchmarks`: a run or an aggregate (mean, median, stddev, cv) of repetitions.
struct GBenchRun {
  std::string name;           ///< "BM_LayerForward/cpu/float32/1024"
  std::string run_name;       ///< name without the aggregate suffix
  std::string run_type;       ///< "iteration" or "aggregate"
  std::string aggregate_name; ///< "mean", "median", "stddev", "cv"; "" for iterations
  std::string aggregate_unit; ///< "time" or "percentage"; "" for iterations
  std::string label;
  bool error_occurred = false;
  std::string error_message;
  std::optional<int64_t> iterations;
  std::optional<int64_t> repetitions;
  std::optional<int64_t> repetition_index;
  std::optional<int64_t> threads;
  std::optional<double> real_time; ///< in time_unit per iteration
  std::optional<double> cpu_time;  ///< in time_unit per iteration
  std::string time_unit;           ///< "ns", "us", "ms", "s"
  /// User counters and the built-in rates (items_per_second, bytes_per_second), by name.
  /// NaN where Google Benchmark wrote NaN or Infinity.
  std::map<std::string, double> counters;

  /// real_time in seconds, when known (not for percentage aggregates).
  std::optional<double> real_seconds() const;
  /// cpu_time in seconds, when known.
  std::optional<double> cpu_seconds() const;
};

/// A whole --benchmark_out file.
struct GBenchReport {
  std::string source; ///< the file it was read from
  GBenchContext context;
  std::vector<GBenchRun> benchmarks;
};

/// Seconds per unit of a Google Benchmark time_unit ("ns" -> 1e-9); throws
/// std::invalid_argument for another unit.
double time_unit_seconds(const std::string& unit);

/// Reads a parsed --benchmark_out document. Unknown keys are tolerated (they are Google
/// Benchmark's to add): a number becomes a counter, anything else is ignored. Throws
/// ResultsError naming `source`, the key path ("benchmarks[2].real_time") and the problem.
GBenchReport gbench_from_json(const nlohmann::json& json, const std::string& source = "");

/// Reads a --benchmark_out file. Google Benchmark writes NaN and Infinity as bare words, which
/// are not JSON; they are read as NaN. Throws ResultsError.
GBenchReport read_gbench_file(const std::string& path);

/// Parses Google Benchmark's JSON text (bare NaN / Infinity allowed). Throws ResultsError.
GBenchReport gbench_from_text(const std::string& text, const std::string& source = "");

} // namespace kan::results
