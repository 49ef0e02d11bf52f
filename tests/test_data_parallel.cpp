// Data-parallel training on c10d with Gloo over loopback: this test binary starts its own ranks
// (itself again, running DataParallelRank.Train with torchrun's environment variables), then
// compares what they wrote with one process's training.
#include "cli_runner.h"
#include "kan/bench/scaling.h"
#include "kan/distributed/data_parallel.h"
#include "kan/train/fit.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The scenario every rank and the one-process reference run: KAN_DP_* variables select it. The
// exit and hang steps are rank 1's (the other ranks keep the defaults); `rank1` gives rank 1
// other values of any variable (a configuration that differs on one rank).
struct Scenario {
  std::string opt = "adam";
  int64_t batch = 64;
  double lamb = 0.01;
  int64_t steps = 12;
  uint64_t seed = 0;             ///< the data's and the minibatches'
  std::string width = "2,3,2,1"; ///< the model's
  int64_t grid = 5;              ///< the model's
  std::string dtype = "float64"; ///< the model's and the data's
  double perturbation = 0;       ///< added to the new model's parameters, before fit
  int exit_at_step = -1;         ///< rank 1 leaves abruptly at that step (a dead rank)
  int hang_at_step = -1;         ///< rank 1 stops answering at that step (a hung rank)
  double timeout = 60;           ///< DataParallelOptions::timeout_seconds
  int64_t bucket_bytes = 1024;   ///< small, so the model's gradients fill several buckets
  std::string device = "cpu";    ///< "cuda": rank r on cuda:r, NCCL
  std::map<std::string, std::string> rank1; ///< e.g. {"KAN_DP_GRID", "6"}: rank 1's values

  std::map<std::string, std::string> environment() const {
    std::map<std::string, std::string> variables = {
        {"KAN_DP_OPT", opt},
        {"KAN_DP_BATCH", std::to_string(batch)},
        {"KAN_DP_LAMB", std::to_string(lamb)},
        {"KAN_DP_STEPS", std::to_string(steps)},
        {"KAN_DP_SEED", std::to_string(seed)},
        {"KAN_DP_WIDTH", width},
        {"KAN_DP_GRID", std::to_string(grid)},
        {"KAN_DP_DTYPE", dtype},
        {"KAN_DP_PERTURBATION", std::to_string(perturbation)},
        {"KAN_DP_EXIT", std::to_string(exit_at_step)},
        {"KAN_DP_HANG", std::to_string(hang_at_step)},
        {"KAN_DP_TIMEOUT", std::to_string(timeout)},
        {"KAN_DP_BUCKET", std::to_string(bucket_bytes)},
        {"KAN_DP_DEVICE", device}};
    for (const auto& [name, value] : rank1)
      variables["RANK1_" + name] = value;
    return variables;
  }

  // As rank `rank` of a launch runs it.
  static Scenario from_environment(int rank) {
    auto get = [rank](const std::string& name) {
      const char* value = rank == 1 ? std::getenv(("RANK1_" + name).c_str()) : nullptr;
      return std::string(value != nullptr ? value : std::getenv(name.c_str()));
    };
    Scenario s;
    s.opt = get("KAN_DP_OPT");
    s.batch = std::stoll(get("KAN_DP_BATCH"));
    s.lamb = std::stod(get("KAN_DP_LAMB"));
    s.steps = std::stoll(get("KAN_DP_STEPS"));
    s.seed = std::stoull(get("KAN_DP_SEED"));
    s.width = get("KAN_DP_WIDTH");
    s.grid = std::stoll(get("KAN_DP_GRID"));
    s.dtype = get("KAN_DP_DTYPE");
    s.perturbation = std::stod(get("KAN_DP_PERTURBATION"));
    s.exit_at_step = std::stoi(get("KAN_DP_EXIT"));
    s.hang_at_step = std::stoi(get("KAN_DP_HANG"));
    s.timeout = std::stod(get("KAN_DP_TIMEOUT"));
    s.bucket_bytes = std::stoll(get("KAN_DP_BUCKET"));
    s.device = get("KAN_DP_DEVICE");
    if (rank != 1)
      s.exit_at_step = s.hang_at_step = -1;
    return s;
  }

  kan::FitOptions fit_options() const {
    return kan::FitOptions()
        .opt(kan::optimizer_from_string(opt))
        .lr(opt == "adam" ? 0.01 : 1.0)
        .steps(steps)
        .batch(batch)
        .lamb(lamb)
        .lamb_coef(0.5)
        .lamb_coefdiff(0.25)
        .grid_update_num(4)
        .stop_grid_update_step(8)
        .seed(seed);
  }
};

kan::KAN make_model(const Scenario& s, torch::Device device) {
  std::vector<int64_t> width;
  std::stringstream layers(s.width);
  for (std::string nodes; std::getline(layers, nodes, ',');)
    width.push_back(std::stoll(nodes));
  return kan::KAN(kan::KANOptions(width)
                      .grid(s.grid)
                      .k(3)
                      .seed(7)
                      .dtype(kan::dtype_from_string(s.dtype))
                      .device(device));
}

kan::Dataset make_data(const Scenario& s, torch::Device device) {
  const auto& toy = kan::reference_function("toy");
  return kan::create_dataset(toy.f, kan::DatasetOptions(toy.n_var)
                                        .train_num(203)
                                        .test_num(101)
                                        .seed(s.seed)
                                        .dtype(kan::dtype_from_string(s.dtype))
                                        .device(device));
}

json flat_parameters(kan::KAN& model) {
  std::vector<double> values;
  for (const auto& p : model->parameters()) {
    const auto flat = p.detach().cpu().reshape({-1}).contiguous();
    values.insert(values.end(), flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  }
  for (const auto& b : model->buffers()) {
    const auto flat = b.detach().cpu().to(torch::kFloat64).reshape({-1}).contiguous();
    values.insert(values.end(), flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  }
  return values;
}

// The parameters and buffers a run starts from.
json flat_parameters_of_new_model(const Scenario& s) {
  auto model = make_model(s, torch::kCPU);
  return flat_parameters(model);
}

json train(const Scenario& s, std::shared_ptr<kan::DataParallel> group,
           torch::Device device = torch::kCPU) {
  auto model = make_model(s, device);
  if (s.perturbation != 0) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      p.add_(s.perturbation);
  }
  auto options = s.fit_options().data_parallel(group);
  if (group) {
    options.on_step([&s](const kan::StepRecord& record, int64_t) {
      if (record.step == s.exit_at_step)
        std::_Exit(3);
      if (record.step == s.hang_at_step)
        std::this_thread::sleep_for(std::chrono::hours(1));
    });
  }
  const auto history = kan::fit(model, make_data(s, device), options);
  json losses = json::array(), tests = json::array(), regs = json::array();
  for (const auto& r : history.steps) {
    losses.push_back(r.train_loss);
    tests.push_back(r.test_loss);
    regs.push_back(r.reg);
  }
  return {{"train_loss", losses},
          {"test_loss", tests},
          {"reg", regs},
          {"parameters", flat_parameters(model)},
          {"grid_updates", history.grid_updates}};
}

// One rank, started by DataParallel's tests: writes its results (or its error) to
// $KAN_DP_OUT/rank<r>.json.
TEST(DataParallelRank, Train) {
  const char* out = std::getenv("KAN_DP_OUT");
  if (out == nullptr)
    GTEST_SKIP() << "runs as a rank started by the DataParallel tests";
  const auto launch = kan::LaunchEnvironment::from_environment();
  const auto scenario = Scenario::from_environment(launch.rank);
  json result;
  try {
    const torch::Device device =
        scenario.device == "cuda" ? torch::Device(torch::kCUDA, launch.local_rank) : torch::kCPU;
    auto group = kan::DataParallel::join(launch, device,
                                         kan::DataParallelOptions()
                                             .timeout_seconds(scenario.timeout)
                                             .bucket_bytes(scenario.bucket_bytes));
    result = train(scenario, group, device);
    result["collectives"] = group->stats().collectives;
    result["bytes"] = group->stats().bytes;
  } catch (const std::exception& e) {
    result = {{"error", e.what()}};
  }
  std::ofstream(fs::path(out) / ("rank" + std::to_string(launch.rank) + ".json")) << result.dump();
}

// A backend with no collectives: enough for what DataParallel computes alone (c10d's own
// FakeProcessGroup needs Python's headers).
class NoCollectives : public c10d::Backend {
public:
  NoCollectives(int rank, int size) : c10d::Backend(rank, size) {}
};

struct RankRun {
  std::vector<json> results; ///< rank r's JSON, or null when it wrote none
  std::vector<int> exit_codes;
  std::vector<std::string> logs; ///< each rank's stdout and stderr
  std::vector<json> fit_json;    ///< a kanbench rank's DIR/fit.json, or null
  double seconds = 0;
};

// Starts `world` ranks of this binary (DataParallelRank.Train) as torchrun would, or of
// `command` (e.g. kanbench, its output in logs[r]; DIR in its arguments becomes a folder of its
// own per rank), waits at most `limit` seconds (then kills what is left), and reads what each
// rank wrote.
RankRun run_ranks(const Scenario& s, int world, double limit,
                  const std::vector<std::string>& command = {}) {
  const auto dir = fs::temp_directory_path() /
                   ("kan-dp-" + std::to_string(getpid()) + "-" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  kan::bench::LocalLaunch launch;
  launch.argv = command;
  if (launch.argv.empty())
    launch.argv = {fs::read_symlink("/proc/self/exe").string(),
                   "--gtest_filter=DataParallelRank.Train"};
  for (auto& word : launch.argv)
    if (word == "DIR")
      word = (dir / "out{rank}").string();
  launch.world_size = world;
  launch.limit_seconds = limit;
  launch.stop_with_rank0 = s.hang_at_step >= 0; // a hung rank never exits
  launch.environment = s.environment();
  launch.environment["KAN_DP_OUT"] = dir.string();
  launch.environment["OMP_NUM_THREADS"] = "1";
  const auto start = std::chrono::steady_clock::now();
  const auto exits = kan::bench::launch_local_ranks(launch);
  RankRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < world; ++r) {
    run.exit_codes.push_back(exits[r].exit_code);
    run.logs.push_back(exits[r].output);
    std::ifstream in(dir / ("rank" + std::to_string(r) + ".json"));
    run.results.push_back(in ? json::parse(in) : json());
    std::ifstream fit(dir / ("out" + std::to_string(r)) / "fit.json");
    run.fit_json.push_back(fit ? json::parse(fit) : json());
  }
  fs::remove_all(dir);
  return run;
}

// Largest |a - b| / max(|b|, tiny) over two equally long arrays.
double max_relative_difference(const json& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double x = a[i].get<double>(), y = b[i].get<double>();
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-300));
  }
  return worst;
}

void expect_parity(const Scenario& s, int world = 2) {
  const auto reference =
      train(s, nullptr, s.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::kCPU);
  const auto run = run_ranks(s, world, 300);
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(run.results[r].is_null()) << "rank " << r << " wrote nothing";
    ASSERT_FALSE(run.results[r].contains("error")) << run.results[r]["error"];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_LE(max_relative_difference(run.results[r]["train_loss"], reference["train_loss"]),
              1e-10);
    EXPECT_LE(max_relative_difference(run.results[r]["test_loss"], reference["test_loss"]), 1e-10);
    EXPECT_LE(max_relative_difference(run.results[r]["reg"], reference["reg"]), 1e-10);
    // Final parameters: relative to the largest, since some are exactly 0 in both.
    const auto& p = run.results[r]["parameters"];
    const auto& q = reference["parameters"];
    ASSERT_EQ(p.size(), q.size());
    double worst = 0, largest = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      worst = std::max(worst, std::abs(p[i].get<double>() - q[i].get<double>()));
      largest = std::max(largest, std::abs(q[i].get<double>()));
    }
    EXPECT_LE(worst, 1e-10 * largest);
    EXPECT_EQ(run.results[r]["grid_updates"], reference["grid_updates"]);
    EXPECT_GT(run.results[r]["collectives"].get<int64_t>(), s.steps * 3);
  }
  // The run moved away from its start (a parity of two frozen models would prove nothing).
  const auto& p = reference["parameters"];
  const auto start = flat_parameters_of_new_model(s);
  double moved = 0;
  for (size_t i = 0; i < p.size(); ++i)
    moved = std::max(moved, std::abs(p[i].get<double>() - start[i].get<double>()));
  EXPECT_GT(moved, 1e-3);
  // And the ranks agree with each other exactly: identical decisions.
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(run.results[0]["parameters"], run.results[r]["parameters"]);
}

TEST(DataParallel, AdamOnTwoRanksEqualsOneProcess) {
  Scenario s; // minibatches of 64 (shards of 32), regularised, grid updates every 2 steps
  expect_parity(s);
}

// One step: 20 LBFGS iterations with strong-Wolfe line searches (about 25 evaluations). The
// split sums differ from one process's in the last bits, and the line search's accept/reject
// decisions amplify that by 10^3 to 10^4 per step (measured: 7e-14 relative after step 0, 1.3e-10
// after step 1, 1.7e-7 after step 2), so longer LBFGS runs agree to fewer digits; every rank still
// takes identical decisions.
TEST(DataParallel, LbfgsOnTwoRanksEqualsOneProcess) {
  Scenario s;
  s.opt = "lbfgs";
  s.batch = -1; // full batch of 203: shards of 101 and 102
  s.steps = 1;
  s.lamb = 0.001;
  expect_parity(s);
}

// NCCL, one rank per GPU: world size 1, then every GPU of the machine.
TEST(DataParallel, NcclOnEveryGpuEqualsOneProcess_CUDA) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device";
  Scenario s;
  s.device = "cuda";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  for (int world : gpus > 1 ? std::vector<int>{1, gpus} : std::vector<int>{1}) {
    SCOPED_TRACE(std::to_string(world) + " rank(s)");
    expect_parity(s, world);
  }
}

// Each setting that differs on rank 1 is named, also when it changes the data too (the seed, the
// dtype): the data's fingerprints are compared last.
TEST(DataParallel, MismatchedConfigurationIsRefusedOnEveryRank) {
  struct Mismatch {
    const char* variable; // rank 1's value of it differs
    const char* value;
    const char* message;
  };
  for (const auto& m :
       {Mismatch{"KAN_DP_SEED", "5", "rank 1 has fit.seed = 5 but rank 0 has 0"},
        Mismatch{"KAN_DP_DTYPE", "float32",
                 "rank 1 has model.dtype = \"float32\" but rank 0 has \"float64\""},
        Mismatch{"KAN_DP_WIDTH", "2,4,2,1",
                 "rank 1 has model.width = [2,4,2,1] but rank 0 has [2,3,2,1]"},
        Mismatch{"KAN_DP_GRID", "6", "rank 1 has model.grid = 6 but rank 0 has 5"},
        Mismatch{"KAN_DP_BATCH", "32", "rank 1 has fit.batch = 32 but rank 0 has 64"}}) {
    SCOPED_TRACE(m.variable);
    Scenario s;
    s.rank1[m.variable] = m.value;
    const auto run = run_ranks(s, 2, 120);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(run.results[r].contains("error")) << "rank " << r << ": " << run.results[r];
      const std::string error = run.results[r]["error"];
      EXPECT_NE(error.find(m.message), std::string::npos) << error;
    }
  }
}

// Rank 1 starts from other parameters: the broadcast from rank 0 gives it rank 0's, so the run
// still equals one process's training of rank 0's model.
TEST(DataParallel, RankZerosParametersAreBroadcast) {
  Scenario s;
  Scenario perturbed; // rank 1's start
  perturbed.perturbation = 0.1;
  s.rank1["KAN_DP_PERTURBATION"] = std::to_string(perturbed.perturbation);
  expect_parity(s);
  // Trained from rank 1's start, one process ends far from that parity: the perturbation matters.
  const auto reference = train(s, nullptr);
  const auto from_rank1s_start = train(perturbed, nullptr);
  EXPECT_GT(max_relative_difference(from_rank1s_start["train_loss"], reference["train_loss"]),
            1e-3);
}

TEST(DataParallel, DeadRankFailsTheOthersQuickly) {
  Scenario s;
  s.exit_at_step = 3;
  s.timeout = 10;
  const auto run = run_ranks(s, 2, 120);
  EXPECT_EQ(run.exit_codes[1], 3);
  ASSERT_TRUE(run.results[0].contains("error")) << run.results[0];
  EXPECT_LT(run.seconds, 60);
}

TEST(DataParallel, HungRankFailsTheOthersWithinTheTimeout) {
  Scenario s;
  s.hang_at_step = 3;
  s.timeout = 5;
  const auto run = run_ranks(s, 2, 90); // kills the hung rank once rank 0 has failed
  ASSERT_TRUE(run.results[0].contains("error")) << run.results[0];
  const std::string error = run.results[0]["error"];
  EXPECT_NE(error.find("imed out"), std::string::npos) << error;
  EXPECT_LT(run.seconds, 60);
}

// The command line under torchrun's variables: two ranks of `kanbench fit --distributed` train
// as one process does, and only rank 0 writes.
TEST(DataParallel, KanbenchFitDistributedEqualsOneProcess) {
  const std::vector<std::string> fit = {
      KANBENCH_EXECUTABLE, "fit", "--opt",  "adam",  "--lr",        "0.01", "--batch",    "100",
      "--steps",           "15",  "--lamb", "0.001", "--train-num", "300",  "--test-num", "100",
      "--trace-steps",     "0",   "--out",  "DIR"};
  auto distributed = fit;
  distributed.push_back("--distributed");
  const auto one = run_ranks(Scenario{}, 1, 300, fit);
  const auto two = run_ranks(Scenario{}, 2, 300, distributed);
  ASSERT_EQ(one.exit_codes[0], 0) << one.logs[0];
  ASSERT_EQ(two.exit_codes[0], 0) << two.logs[0];
  ASSERT_EQ(two.exit_codes[1], 0) << two.logs[1];
  EXPECT_TRUE(two.fit_json[1].is_null()) << "rank 1 wrote fit.json";
  const auto& a = one.fit_json[0];
  const auto& b = two.fit_json[0];
  ASSERT_FALSE(b.is_null()) << two.logs[0];
  EXPECT_TRUE(a["config"]["distributed"].is_null());
  EXPECT_EQ(b["config"]["distributed"], json({{"world_size", 2}, {"backend", "gloo"}}));
  EXPECT_GT(b["communication"]["collectives"].get<int64_t>(), 15 * 3);
  json la = json::array(), lb = json::array();
  for (const auto& step : a["history"]["steps"])
    la.push_back(step["train_loss"]);
  for (const auto& step : b["history"]["steps"])
    lb.push_back(step["train_loss"]);
  EXPECT_LE(max_relative_difference(lb, la), 1e-10);
  EXPECT_NE(two.logs[0].find("2 ranks (gloo)"), std::string::npos) << two.logs[0];
}

// The MLP baseline trains data-parallel as a KAN does: the same steps as one process.
TEST(DataParallel, KanbenchFitMlpDistributedEqualsOneProcess) {
  const std::vector<std::string> fit = {KANBENCH_EXECUTABLE,
                                        "fit",
                                        "--model",
                                        "mlp",
                                        "--width",
                                        "2,16,1",
                                        "--opt",
                                        "adam",
                                        "--lr",
                                        "0.01",
                                        "--batch",
                                        "100",
                                        "--steps",
                                        "10",
                                        "--train-num",
                                        "300",
                                        "--test-num",
                                        "100",
                                        "--trace-steps",
                                        "0",
                                        "--out",
                                        "DIR"};
  auto distributed = fit;
  distributed.push_back("--distributed");
  const auto one = run_ranks(Scenario{}, 1, 300, fit);
  const auto two = run_ranks(Scenario{}, 2, 300, distributed);
  ASSERT_EQ(one.exit_codes[0], 0) << one.logs[0];
  ASSERT_EQ(two.exit_codes[0], 0) << two.logs[0];
  ASSERT_EQ(two.exit_codes[1], 0) << two.logs[1];
  const auto& a = one.fit_json[0];
  const auto& b = two.fit_json[0];
  ASSERT_FALSE(b.is_null()) << two.logs[0];
  EXPECT_EQ(b["config"]["model_kind"], "mlp");
  EXPECT_EQ(b["config"]["distributed"], json({{"world_size", 2}, {"backend", "gloo"}}));
  json la = json::array(), lb = json::array();
  for (const auto& step : a["history"]["steps"])
    la.push_back(step["train_loss"]);
  for (const auto& step : b["history"]["steps"])
    lb.push_back(step["train_loss"]);
  EXPECT_LE(max_relative_difference(lb, la), 1e-10);
}

// The command line's settings are named too: --seed (here the rank: launch_local_ranks replaces
// {rank}) sets the model's, the data's and the minibatches' seeds, and the model's is named.
TEST(DataParallel, KanbenchFitDistributedNamesAMismatchedFlag) {
  const auto run =
      run_ranks(Scenario{}, 2, 120,
                {KANBENCH_EXECUTABLE, "fit", "--distributed", "--seed", "{rank}", "--steps", "1",
                 "--train-num", "50", "--test-num", "50", "--trace-steps", "0", "--out", "DIR"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(run.exit_codes[r], 0) << run.logs[r];
    EXPECT_NE(run.logs[r].find("rank 1 has model.seed = 1 but rank 0 has 0"), std::string::npos)
        << run.logs[r];
  }
}

// The launch of docs/distributed.md ("Launching") with torchrun itself (the torch wheel's, beside
// the LibTorch this build uses): two Gloo ranks over loopback, on the store of torchrun's agent.
TEST(DataParallel, TorchrunLaunchesKanbenchFit) {
  if (!fs::exists(KAN_TORCHRUN))
    GTEST_SKIP() << "no torchrun at " << KAN_TORCHRUN << " (tools/setup.sh installs it)";
  const auto out = fs::temp_directory_path() / ("kan-torchrun-" + std::to_string(getpid()));
  fs::remove_all(out);
  const auto run = kan::test::run_kanbench(
      "fit --distributed --distributed-timeout 60 --opt adam --lr 0.01 --batch 50 --steps 4 "
      "--train-num 100 --test-num 50 --trace-steps 0 --out " +
          out.string(),
      std::string("timeout 120 ") + KAN_TORCHRUN + " --no-python --standalone --nproc-per-node 2 ");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("2 ranks (gloo)"), std::string::npos) << run.output;
  std::ifstream in(out / "fit.json");
  ASSERT_TRUE(in) << run.output;
  const auto fit = json::parse(in);
  EXPECT_EQ(fit["config"]["distributed"], json({{"world_size", 2}, {"backend", "gloo"}}));
  const auto& communication = fit["communication"];
  EXPECT_GT(communication["collectives"].get<int64_t>(), 4 * 3); // gradients, loss, test loss
  EXPECT_GT(communication["bytes"].get<int64_t>(), 0);
  EXPECT_GE(communication["wait_seconds"].get<double>(), 0);
  fs::remove_all(out);
}

TEST(DataParallel, KanbenchFitDistributedOutsideALaunchIsRefused) {
  const auto run = kan::test::run_kanbench(
      "fit --distributed --steps 1 --out " + (fs::temp_directory_path() / "kan-dp-none").string(),
      "env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT ");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("needs the environment variable WORLD_SIZE (torchrun sets it"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / "kan-dp-none" / "fit.json"));
}

// kanbench scaling: the deep workload on 1 and 2 Gloo ranks, in float64: both measured, the
// 2-rank run compared with the 1-rank run (same loss per epoch), and the report written.
TEST(DataParallel, KanbenchScalingMeasuresEachRankCount) {
  const auto out = fs::temp_directory_path() / ("kan-scaling-" + std::to_string(getpid()));
  fs::remove_all(out);
  const auto run = kan::test::run_kanbench("scaling --suite quick --case deep --nproc 2,1 "
                                           "--dtype float64 --out " +
                                           out.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(out / "results.json");
  const auto results = json::parse(in);
  const auto& scaling = results.at("scaling");
  ASSERT_EQ(scaling.size(), 2u) << scaling;
  EXPECT_EQ(scaling[0]["ranks"], 1); // in ascending order, whatever the order asked
  EXPECT_EQ(scaling[1]["ranks"], 2);
  for (const auto& s : scaling) {
    EXPECT_EQ(s["status"], "ok") << s;
    EXPECT_EQ(s["backend"], "gloo");
    EXPECT_EQ(s["epoch_seconds"].size(), 2u); // the quick deep case times 2 epochs
    EXPECT_GT(s["speedup"].get<double>(), 0);
    EXPECT_GT(s["bytes_per_step"].get<double>(), 0);
    EXPECT_GE(s["collectives_per_step"].get<double>(), 3); // regulariser-free: grads, loss, test
  }
  EXPECT_DOUBLE_EQ(scaling[0]["speedup"].get<double>(), 1.0);
  EXPECT_LE(scaling[1]["max_rel_loss_diff"].get<double>(), 1e-10);
  EXPECT_TRUE(fs::exists(out / "report.html"));
  EXPECT_FALSE(fs::exists(out / ".ranks"));
  fs::remove_all(out);

  const auto unknown = kan::test::run_kanbench("scaling --case nope --out " + out.string());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("--case: no workload 'nope' (known: toy, deep"), std::string::npos)
      << unknown.output;
}

TEST(DataParallel, ShardsCoverTheBatchInRankOrder) {
  for (int world : {1, 2, 3, 7}) {
    for (int64_t n : {7, 8, 203}) {
      int64_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const kan::DataParallel group(c10::make_intrusive<NoCollectives>(rank, world), torch::kCPU,
                                      {});
        const auto [first, count] = group.shard(n);
        EXPECT_EQ(first, next) << "rank " << rank << " of " << world << ", n = " << n;
        EXPECT_GE(count, n / world);
        EXPECT_LE(count, n / world + 1);
        next = first + count;
      }
      EXPECT_EQ(next, n);
    }
  }
}

// Refused before CUDA or the store is touched, so a machine without a GPU checks it.
TEST(DataParallel, CudaDeviceOtherThanLocalRanksIsRefused) {
  kan::LaunchEnvironment launch;
  launch.rank = launch.local_rank = 1;
  launch.world_size = launch.local_world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = 1; // nothing listens: a join past the check fails otherwise, in 5 s
  try {
    kan::DataParallel::join(launch, torch::Device(torch::kCUDA, 0),
                            kan::DataParallelOptions().timeout_seconds(5));
    ADD_FAILURE() << "LOCAL_RANK 1 was let train on cuda:0";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "data-parallel rank 1 has LOCAL_RANK 1 and must train on cuda:1, not cuda:0"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallel, BadOptionsAndLaunchVariablesAreNamed) {
  auto fake = c10::make_intrusive<NoCollectives>(0, 2);
  EXPECT_THROW(
      {
        try {
          kan::DataParallel(fake, torch::kCPU, kan::DataParallelOptions().bucket_bytes(0));
        } catch (const c10::Error& e) {
          EXPECT_NE(std::string(e.what()).find("bucket_bytes must be >= 1, got 0"),
                    std::string::npos);
          throw;
        }
      },
      c10::Error);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "two", 1);
  try {
    kan::LaunchEnvironment::from_environment();
    ADD_FAILURE() << "RANK=two was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK must be an integer >= 0, got 'two'"),
              std::string::npos)
        << e.what();
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

} // namespace
