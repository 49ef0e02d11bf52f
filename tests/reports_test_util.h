#pragma once
// Helpers of the reports tests (no LibTorch): scratch folders, a fully populated run, and
// reading a report's HTML back.

#include "kan/results/results.h"
#include "kan/results/results_io.h"
#include "kan/results/statistics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kan::results::test {

/// A fixture with a fresh scratch folder per test, removed afterwards.
class ReportsScratchTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kanbench_reports_test_" + std::to_string(::getpid()) + "_" + info->test_suite_name() +
            "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::filesystem::path dir_;
};

/// A run with every field set: a CPU and a GPU target per case, a skipped target, a
/// comparison, edge cases, audit findings, GPU activity and activation curves.
/// A batch-size sweep of deep on cpu and cuda: the GPU overtakes the CPU from batch 256, the
/// CPU's throughput stops growing at 256, and the GPU's max-batch search found 1M samples.
inline Sweep sample_sweep() {
  Sweep s;
  s.batches = {64, 256, 1024, 4096};
  const std::vector<double> cpu{1e4, 1.5e4, 1.6e4, 1.6e4}, gpu{5e3, 2e4, 8e4, 3e5};
  for (size_t i = 0; i < s.batches.size(); ++i) {
    for (const auto* target : {"cpu", "cuda"}) {
      SweepPoint p;
      p.case_name = "deep";
      p.target = target;
      p.device = target == std::string("cpu") ? "cpu" : "cuda:0";
      p.dtype = "float32";
      p.batch = s.batches[i];
      const double rate = target == std::string("cpu") ? cpu[i] : gpu[i];
      const double epoch = static_cast<double>(std::max<int64_t>(1000, p.batch)) / rate;
      p.epoch_seconds = {epoch, epoch};
      p.median_epoch_seconds = epoch;
      p.samples_per_second = rate;
      p.epoch_cv = 0.01;
      p.peak_memory_bytes = p.batch * 4000;
      s.points.push_back(p);
    }
  }
  SweepPoint oom;
  oom.case_name = "deep";
  oom.target = "cpu";
  oom.device = "cpu";
  oom.dtype = "float32";
  oom.batch = 4096;
  s.batches.push_back(16384);
  oom.batch = 16384;
  oom.status = CaseStatus::kTimeout;
  oom.reason = "timed out after 121 s (limit 120 s) at epoch 2 of 6";
  s.points.push_back(oom);
  SweepTarget gpu_target;
  gpu_target.case_name = "deep";
  gpu_target.target = "cuda";
  gpu_target.max_batch = 1048576;
  gpu_target.max_batch_attempts = {{16, true}, {1048576, true}, {2097152, false}};
  s.targets = {gpu_target};
  fill_sweep_summaries(s);
  return s;
}

inline Results sample_results() {
  Results r;
  r.run_id = "20261129T183608Z-5a3c0e7d91b2f468"; // fixed: the same sample is the same run
  auto& e = r.environment;
  e.kanbench_version = "0.1.0";
  e.git_commit = "20075b1";
  e.date = "2026-11-29T18:36:08Z";
  e.hostname = "gpu-box";
  e.libtorch_version = "2.11.0";
  e.cuda_build_version = "13.0";
  e.cudnn_build_version = "9.10.2";
  e.cuda_runtime_version = "13.0";
  e.cuda_driver_version = "13.0";
  e.cuda_available = true;
  e.cuda_visible_devices = "0";
  e.cuda_devices = {{0, "NVIDIA H200", "9.0", 132, 150000000000, 149000000000}};
  e.cpu_model = "Intel(R) Xeon(R) Platinum 8480+";
  e.cpu_cores = 16;
  e.torch_threads = 16;
  e.nvtx_available = true;
  e.cupti_available = true;
  e.cpu_governor = "performance";
  e.load_average = 0.25;
  e.problems = {{"CUPTI could not start", "Run as a user allowed to profile."}};

  r.config.suite = "quick";
  r.config.devices = {"cpu", "cuda"};
  r.config.repeat = 5;
  r.config.warmup = 1;
  r.config.cases = {"toy", "wide"};
  r.config.seed = 0;
  r.config.time_limit_seconds = 60;
  r.config.cupti = true;
  r.config.trace = "trace.json";
  r.config.out = "kanbench-out/run";
  r.config.extra = {{"note", "sample"}};

  CaseResult toy_cpu;
  toy_cpu.name = "toy";
  toy_cpu.target = "cpu";
  toy_cpu.device = "cpu";
  toy_cpu.dtype = "float64";
  toy_cpu.epoch_seconds = {0.50, 0.52, 0.49, 0.51, 0.55};
  toy_cpu.median_epoch_seconds = 0.51;
  toy_cpu.iqr_epoch_seconds = 0.02;
  toy_cpu.peak_memory_bytes = 12345678;
  toy_cpu.final_test_rmse = 1.5e-3;
  toy_cpu.backend = "reference";
  toy_cpu.threads = 16;
  toy_cpu.warmup_epochs = 1;
  toy_cpu.min_epoch_seconds = 0.49;
  toy_cpu.max_epoch_seconds = 0.55;
  toy_cpu.steps_per_epoch = 20;
  toy_cpu.samples_per_epoch = 1000;
  toy_cpu.steps_per_second = 20 / 0.51;
  toy_cpu.samples_per_second = 1000 / 0.51;
  toy_cpu.timer = "steady_clock";
  toy_cpu.memory_kind = "cpu_rss_growth";
  toy_cpu.train_loss_per_epoch = {0.5, 0.1, 0.01, 0.005, 0.004, 0.003};
  toy_cpu.test_loss_per_epoch = {0.6, 0.12, 0.02, 0.006, 0.005, 0.004};
  toy_cpu.config = {{"width", {2, 5, 1}}, {"grid", 5}, {"k", 3}, {"opt", "lbfgs"}};
  toy_cpu.activations = {{0, 0, 0, {-1, 0, 1}, {0.1, 0.0, -0.1}},
                         {0, 1, 0, {-1, 0, 1}, {1.0, 0.0, 1.0}},
                         {1, 0, 0, {-2, 0, 2}, {-0.5, 0.25, 3.0}}};
  AuditFinding finding;
  finding.tensor = "data.train_input";
  finding.kind = "data";
  finding.device = finding.expected_device = "cpu";
  finding.message = "float32 data for a float64 model";
  finding.problem = "wrong_dtype";
  finding.fix = "Create the data in float64.";
  toy_cpu.audit_findings = {finding};
  toy_cpu.monitoring = DeviceMonitoring{"process_cpu", true, "", 0.1, {}, {}, {}, {}};
  toy_cpu.monitoring->samples = {MonitorSample{}, MonitorSample{}};
  toy_cpu.monitoring->samples[1].seconds = 0.1;
  toy_cpu.monitoring->samples[1].cpu_utilization_percent = 1450;
  summarize_monitoring(*toy_cpu.monitoring);

  CaseResult toy_gpu = toy_cpu;
  toy_gpu.target = "cuda";
  toy_gpu.device = "cuda:0";
  toy_gpu.epoch_seconds = {0.10, 0.11, 0.10, 0.12, 0.10};
  toy_gpu.median_epoch_seconds = 0.10;
  toy_gpu.iqr_epoch_seconds = 0.01;
  toy_gpu.min_epoch_seconds = 0.10;
  toy_gpu.max_epoch_seconds = 0.12;
  toy_gpu.steps_per_second = 20 / 0.10;
  toy_gpu.samples_per_second = 1000 / 0.10;
  toy_gpu.peak_memory_bytes = 4096;
  toy_gpu.final_test_rmse = 1.50001e-3;
  toy_gpu.timer = "cuda_events";
  toy_gpu.memory_kind = "cuda_peak_allocated";
  toy_gpu.threads.reset();
  toy_gpu.audit_findings.clear();
  toy_gpu.peak_reserved_bytes = 2097152;
  toy_gpu.monitoring = DeviceMonitoring{"nvml", true, "", 0.1, {}, {}, {}, {}};
  for (int i = 0; i < 3; ++i) {
    MonitorSample m;
    m.seconds = 0.1 * i;
    m.gpu_utilization_percent = 60 + 10 * i;
    m.memory_utilization_percent = 20;
    m.memory_used_bytes = 1000000000;
    m.sm_clock_mhz = 1980;
    m.power_watts = 300.5;
    m.temperature_celsius = 45;
    m.throttle_reasons = i == 2 ? 0x4 : 0x0; // sw_power_cap once
    toy_gpu.monitoring->samples.push_back(m);
  }
  summarize_monitoring(*toy_gpu.monitoring);
  toy_gpu.epoch_cv = 0.0816;
  toy_gpu.cv_target = 0.02;
  toy_gpu.cv_target_met = false;
  toy_gpu.gpu_activity = GpuActivity{
      true, "", {{120, 0.08, 0.10, 0.8, 2, 64000, 1, 8}, {118, 0.085, 0.11, 0.77, 0, 0, 1, 8}}};

  CaseResult wide_cpu;
  wide_cpu.name = "wide";
  wide_cpu.target = "cpu";
  wide_cpu.device = "cpu";
  wide_cpu.dtype = "float32";
  wide_cpu.epoch_seconds = {2.0, 2.1, 1.9};
  wide_cpu.median_epoch_seconds = 2.0;
  wide_cpu.iqr_epoch_seconds = 0.1;
  wide_cpu.peak_memory_bytes = 50000000;
  wide_cpu.final_accuracy = 0.91;

  CaseResult wide_gpu;
  wide_gpu.name = "wide";
  wide_gpu.target = "cuda";
  wide_gpu.device = "cuda";
  wide_gpu.dtype = "float32";
  wide_gpu.status = CaseStatus::kSkipped;
  wide_gpu.reason = "no CUDA device: CUDA is not usable: no NVIDIA driver";

  r.cases = {toy_cpu, toy_gpu, wide_cpu, wide_gpu};

  Comparison cmp;
  cmp.case_name = "toy";
  cmp.a = "cpu";
  cmp.b = "cuda";
  cmp.speedup = 5.1;
  cmp.max_abs_output_diff = 1e-12;
  cmp.max_rel_loss_diff = 1e-9;
  cmp.final_metric_rel_diff = 6.7e-6;
  cmp.label = "cpu vs cuda, float64";
  cmp.speedup_low = 4.2;
  cmp.speedup_high = 5.5;
  cmp.max_rel_output_diff = 1e-11;
  cmp.max_abs_grad_diff = 2e-12;
  cmp.max_rel_grad_diff = 3e-10;
  cmp.tolerances = {{"max_abs_output_diff", 1e-9}, {"max_rel_loss_diff", 1e-6}};
  r.comparisons = {cmp};

  EdgeCaseResult empty;
  empty.name = "empty_input";
  empty.device = "cpu";
  empty.message = "forward returned (0, 1); fit refused: no training samples";
  empty.samples = 0;
  EdgeCaseResult million;
  million.name = "million_samples";
  million.device = "cpu";
  million.status = EdgeStatus::kFail;
  million.message = "peak extra memory 600 MB > 512 MB";
  million.samples = 1 << 20;
  million.peak_memory_bytes = 600000000;
  million.seconds = 12.5;
  million.measurements = {{"unchunked_bytes_estimate", 3.2e9}, {"limit_bytes", 536870912}};
  EdgeCaseResult oom;
  oom.name = "out_of_memory";
  oom.device = "cuda";
  oom.status = EdgeStatus::kSkipped;
  oom.message = "no CUDA device";
  r.edge_cases = {empty, million, oom};
  // Data-parallel scaling of deep on 1, 2 and 4 GPUs: 4 ranks did not fit.
  for (int64_t ranks : {1, 2, 4}) {
    ScalingResult s;
    s.case_name = "deep";
    s.device = "cuda";
    s.backend = "nccl";
    s.ranks = ranks;
    if (ranks == 4) {
      s.status = CaseStatus::kSkipped;
      s.reason = "4 ranks need as many GPUs; this machine has 2";
    } else {
      s.epoch_seconds = {0.5 / ranks + 0.01, 0.5 / ranks + 0.02, 0.5 / ranks + 0.015};
      s.median_epoch_seconds = 0.5 / ranks + 0.015;
      s.communication_seconds = ranks == 1 ? 0.001 : 0.04;
      s.collectives_per_step = 3;
      s.bytes_per_step = 1.2e6;
      s.train_loss_per_epoch = {0.5, 0.25, ranks == 1 ? 0.125 : 0.12500001};
    }
    r.scaling.push_back(s);
  }
  fill_scaling_comparisons(r.scaling);
  r.sweep = sample_sweep();
  r.wall_seconds = 42.0;
  return r;
}

/// A fit of `kanbench accuracy` on cpu with seed 0 and one point per (parameters, test RMSE):
/// a KAN's at grids 3, 5, 10, ... (trained, then refined), an MLP's one "trained" point.
inline AccuracyFit accuracy_fit(const std::string& function, const std::string& family,
                                std::vector<int64_t> width, const std::string& activation,
                                const std::vector<std::pair<int64_t, double>>& points,
                                double seconds = 1.5, const std::string& error = "") {
  AccuracyFit f;
  f.function = function;
  f.device = "cpu";
  f.family = family;
  f.role = family == "kan" ? "width5" : "width" + std::to_string(width[1]);
  f.width = std::move(width);
  f.activation = activation;
  const int64_t grids[] = {3, 5, 10, 20, 50};
  for (size_t j = 0; j < points.size(); ++j) {
    AccuracyPoint p;
    p.stage = j == 0 ? "trained" : "refined";
    p.grid = family == "kan" ? grids[j % 5] : 0;
    p.parameters = points[j].first;
    p.forward_flops = 10 * points[j].first;
    p.train_rmse = points[j].second / 2;
    p.test_rmse = points[j].second;
    p.seconds = seconds / static_cast<double>(points.size() + 1);
    f.points.push_back(p);
  }
  f.seconds = seconds;
  f.error = error;
  return f;
}

/// A summary entry of `function` on `device`, not summarised yet.
inline AccuracyFunction accuracy_function(const std::string& function, const std::string& device,
                                          const std::string& formula) {
  AccuracyFunction f;
  f.function = function;
  f.device = device;
  f.formula = formula;
  return f;
}

/// An unfinished `kanbench accuracy` run of three functions on the CPU (10 fits planned, 9
/// done), summarised:
/// - jv: KANs [2,1,1] and [2,5,1] (a diverged NaN point; 2e-3 reached by both, the smaller
///   first), MLPs [2,5,5,1] and [2,100,100,1] silu and a failed [2,100,100,1] tanh. The MLP
///   wins (1e-3 < 2e-3); the Pareto front is fits[0] (all three points) and fits[3].
/// - ellipj: KANs [2,2,1] and [2,3,1] (an equal point: the first stays on the front), an MLP;
///   the KAN wins. The paper has no best-KAN number for it.
/// - fresnel: only a KAN so far (nothing to compare), and not in the paper's tables.
inline AccuracyRun sample_accuracy_run() {
  AccuracyRun run;
  run.table = "special";
  run.preset = "quick";
  run.functions = {"jv", "ellipj", "fresnel"};
  run.devices = {"cpu"};
  run.seeds = {0};
  run.train_num = 1000;
  run.test_num = 1000;
  run.grids = {3, 5, 10};
  run.steps = 50;
  run.jobs = 2;
  run.threads_per_fit = 1;
  run.planned_fits = 10;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  run.fits = {
      accuracy_fit("jv", "kan", {2, 1, 1}, "", {{20, 1e-2}, {28, 5e-3}, {48, 2e-3}}, 3.0),
      accuracy_fit("jv", "kan", {2, 5, 1}, "", {{100, 3e-3}, {140, 2e-3}, {240, nan}}, 4.0),
      accuracy_fit("jv", "mlp", {2, 5, 5, 1}, "silu", {{51, 4e-3}}, 2.0),
      accuracy_fit("jv", "mlp", {2, 100, 100, 1}, "silu", {{10501, 1e-3}}, 5.0),
      accuracy_fit("jv", "mlp", {2, 100, 100, 1}, "tanh", {}, 0.5,
                   "LBFGS diverged: the loss is NaN at step 12"),
      accuracy_fit("ellipj", "kan", {2, 2, 1}, "", {{30, 1e-4}, {50, 5e-5}}, 2.5),
      accuracy_fit("ellipj", "mlp", {2, 5, 5, 1}, "silu", {{51, 1e-3}}, 1.0),
      accuracy_fit("ellipj", "kan", {2, 3, 1}, "", {{30, 1e-4}}, 1.25),
      accuracy_fit("fresnel", "kan", {1, 1}, "", {{12, 3e-2}, {20, 2e-2}}, 0.75),
  };
  run.fits[0].role = "minimal";
  auto jv = accuracy_function("jv", "cpu", "J_v(x)");
  jv.published = PublishedAccuracy{"arXiv:2404.19756 Table 1 (Special functions)",
                                   {2, 1, 1},
                                   7.64e-3,
                                   {2, 3, 2, 1, 1, 1},
                                   1.67e-5,
                                   1.43e-3};
  auto ellipj = accuracy_function("ellipj", "cpu", "sn(u, m)");
  ellipj.published = PublishedAccuracy{"arXiv:2404.19756 Table 1 (Special functions)",
                                       {2, 2, 1},
                                       1.33e-4,
                                       {},
                                       std::nullopt,
                                       6.48e-4};
  auto fresnel = accuracy_function("fresnel", "cpu", "S(x)");
  run.summary = {jv, ellipj, fresnel};
  run.wall_seconds = 9.5;
  summarize_accuracy(run);
  return run;
}

/// Results of an accuracy run alone (no cases, comparisons or edge cases).
inline Results sample_accuracy_results() {
  Results r;
  r.run_id = "20261203T230000Z-0123456789abcdef";
  r.environment.kanbench_version = "0.1.0";
  r.environment.date = "2026-12-03T23:00:00Z";
  r.environment.hostname = "cpu-box";
  r.config.suite = "accuracy";
  r.config.devices = {"cpu"};
  r.config.out = "kanbench-out/accuracy";
  r.accuracy = sample_accuracy_run();
  r.wall_seconds = r.accuracy->wall_seconds;
  return r;
}

/// A run whose two cases (toy/cpu, deep/cpu) have epoch times drawn around `seconds` with 2% noise
/// (seeded, so each call gives the same run).
inline Results synthetic_run(uint32_t seed, double toy_seconds, double deep_seconds,
                             int repetitions) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> noise(1.0, 0.02);
  Results r = test::sample_results();
  r.run_id = "synthetic-" + std::to_string(seed);
  r.comparisons.clear();
  r.cases.resize(2);
  r.cases[1].name = "deep";
  r.cases[1].target = "cpu";
  r.cases[1].device = "cpu";
  r.cases[1].gpu_activity.reset();
  for (auto [c, seconds] : {std::pair{&r.cases[0], toy_seconds}, {&r.cases[1], deep_seconds}}) {
    c->epoch_seconds.clear();
    for (int i = 0; i < repetitions; ++i)
      c->epoch_seconds.push_back(seconds * noise(generator));
    fill_epoch_statistics(*c); // the reader refuses statistics that are not the epochs'
  }
  return r;
}

/// A string that would run script if a report let it through unescaped.
/// The error reading `j` as file "run/results.json"; fails the test when there is none.
inline ResultsError results_error_of(const nlohmann::json& j) {
  try {
    results_from_json(j, "run/results.json");
  } catch (const ResultsError& e) {
    return e;
  }
  ADD_FAILURE() << "no ResultsError for " << j.dump().substr(0, 200);
  return ResultsError("", "", "");
}

/// Reading `j` fails at `key_path` with a problem containing `problem_part`, in one line
/// "run/results.json: KEY.PATH: PROBLEM".
inline void expect_results_error(const nlohmann::json& j, const std::string& key_path,
                                 const std::string& problem_part) {
  const auto e = results_error_of(j);
  EXPECT_EQ(e.file(), "run/results.json");
  EXPECT_EQ(e.key_path(), key_path) << e.what();
  EXPECT_NE(e.problem().find(problem_part), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).rfind("run/results.json: " + key_path + ": ", 0), 0u) << e.what();
}

inline const std::string kHostile = "</script><img src=x onerror=alert(1)>";

/// How often `part` occurs in `text` (overlapping occurrences count).
inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

/// The JSON embedded in <script type="application/json" id=ID>.
inline nlohmann::json embedded(const std::string& html, const std::string& id) {
  const std::string open = "<script type=\"application/json\" id=\"" + id + "\">";
  const auto start = html.find(open);
  if (start == std::string::npos)
    throw std::runtime_error("no embedded " + id);
  const auto end = html.find("</script>", start);
  return nlohmann::json::parse(html.substr(start + open.size(), end - start - open.size()));
}

/// The chart spec `id` of the embedded chart list.
inline const nlohmann::json& chart(const nlohmann::json& charts, const std::string& id) {
  for (const auto& c : charts["charts"])
    if (c["id"] == id)
      return c;
  throw std::runtime_error("no chart " + id);
}

/// The contents of every <script> element, joined.
inline std::string scripts(const std::string& html) {
  std::string text;
  for (size_t at = html.find("<script"); at != std::string::npos; at = html.find("<script", at)) {
    const auto start = html.find('>', at) + 1;
    const auto end = html.find("</script>", start);
    text += html.substr(start, end - start) + "\n";
    at = end;
  }
  return text;
}

/// Checks that a page (without the inlined Chart.js, whose licence names its web site) names no
/// URL, loads nothing and forbids every request.
inline void expect_fetches_nothing(const std::string& html) {
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  const std::regex fetching(R"((src|href|action|srcset)\s*=|url\(|@import|<link|<iframe|<img)",
                            std::regex::icase);
  EXPECT_FALSE(std::regex_search(html, fetching));
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
}

} // namespace kan::results::test
