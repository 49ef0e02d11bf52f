// bench_kan family of users' data files: kan::load_dataset on a generated CSV file (the yardstick:
// 1M rows x 10 columns in <= 3 s on a 2-core machine, peak extra memory <= 2x the tensors it
// returns).
#include "bench_util.h"

#include "kan/bench/measure.h"
#include "kan/data/data_file.h"

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>

namespace kan::bench {
namespace {

namespace fs = std::filesystem;

// Generated files, written once per process into a temporary folder removed at exit.
class CsvFiles {
public:
  ~CsvFiles() {
    std::error_code ec;
    if (!dir_.empty())
      fs::remove_all(dir_, ec);
  }

  // `rows` x `columns` uniform numbers in [-1, 1), each at the 17 significant digits a double
  // needs, under a header line: ~20 bytes a value, 200 MB for 1M x 10.
  const std::string& get(int64_t rows, int64_t columns) {
    auto& path = files_[{rows, columns}];
    if (!path.empty())
      return path;
    if (dir_.empty()) {
      dir_ = fs::temp_directory_path() / ("kanbench_bench_data_" + std::to_string(::getpid()));
      fs::create_directories(dir_);
    }
    path = (dir_ / (std::to_string(rows) + "x" + std::to_string(columns) + ".csv")).string();
    std::FILE* file = std::fopen(path.c_str(), "wb");
    TORCH_CHECK(file != nullptr, "cannot write ", path);
    std::string line;
    for (int64_t c = 0; c < columns; ++c)
      line += (c ? ",c" : "c") + std::to_string(c);
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), file);
    std::mt19937_64 random(1);
    std::uniform_real_distribution<double> uniform(-1, 1);
    char number[32];
    for (int64_t r = 0; r < rows; ++r) {
      line.clear();
      for (int64_t c = 0; c < columns; ++c) {
        const auto end = std::to_chars(number, number + sizeof number, uniform(random),
                                       std::chars_format::general, 17)
                             .ptr;
        line.append(c ? "," : "").append(number, end);
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), file);
    }
    TORCH_CHECK(std::fclose(file) == 0, "cannot write ", path);
    return path;
  }

private:
  fs::path dir_;
  std::map<std::pair<int64_t, int64_t>, std::string> files_;
};

CsvFiles& csv_files() {
  static CsvFiles files;
  return files;
}

// Args: rows, columns, dtype (bits). The default split (test fraction 0.2, seeded shuffle), the
// last column the target. Counters: rows/s, bytes/s of the file, and the peak extra memory of a
// load over the bytes of the tensors it returns (the bound: <= 2).
void BM_LoadCsv(benchmark::State& state) {
  const int64_t rows = state.range(0), columns = state.range(1);
  const auto dtype = dtype_arg(state.range(2));
  const auto& path = csv_files().get(rows, columns);
  const auto options = LoadDatasetOptions().dtype(dtype);
  double peak_ratio = 0;
  for (auto _ : state) {
    PeakMemory peak(torch::kCPU);
    auto loaded = load_dataset(path, options);
    const auto& d = loaded.data;
    const double tensor_bytes =
        static_cast<double>(d.train_input.nbytes() + d.train_label.nbytes() +
                            d.test_input.nbytes() + d.test_label.nbytes());
    peak_ratio = std::max(peak_ratio, static_cast<double>(peak.bytes().value_or(0)) / tensor_bytes);
    benchmark::DoNotOptimize(loaded);
  }
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(fs::file_size(path)));
  state.counters["peak/tensors"] = peak_ratio;
}

} // namespace

void register_data_families() {
  // rows:1000 is the ctest smoke case; rows:1000000 x 10 the yardstick above.
  benchmark::RegisterBenchmark("BM_LoadCsv", BM_LoadCsv)
      ->ArgNames({"rows", "columns", "dtype"})
      ->Args({1000, 10, 64})
      ->Args({1000000, 10, 64})
      ->Args({1000000, 10, 32})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

} // namespace kan::bench
