// The kanbench command line as a user runs it: outputs, exit codes, one-line errors.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/diagnostics/fit_setup.h"
#include "kan/serialize/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

namespace {

namespace fs = std::filesystem;

using Run = kan::test::CliRun;

Run kanbench(const std::string& args) {
  return kan::test::run_kanbench(args);
}

using Cli = kan::test::ScratchDirTest;

TEST_F(Cli, FitWritesResultsAndCheckpoint) {
  const auto run = kanbench("fit --function toy --width 2,5,1 --grid 3 --k 3 --opt lbfgs --steps 3 "
                            "--seed 0 --dtype float64 --device cpu --refine 5 --train-num 200 "
                            "--test-num 100 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("test RMSE"), std::string::npos) << run.output;
  std::ifstream in(dir_ / "fit.json");
  ASSERT_TRUE(in.good());
  const auto result = nlohmann::json::parse(in);
  for (const char* key : {"schema_version", "config", "history", "test_rmse", "train_rmse",
                          "refined", "final", "seconds", "checkpoint"}) {
    EXPECT_TRUE(result.contains(key)) << key;
  }
  EXPECT_EQ(result["config"]["model"]["width"], (std::vector<int64_t>{2, 5, 1}));
  EXPECT_EQ(result["config"]["fit"]["opt"], "lbfgs");
  EXPECT_EQ(result["config"]["fit"]["batch_draw"], "per_step");
  EXPECT_EQ(result["config"]["model"]["backend"], "fused");
  EXPECT_EQ(result["history"]["steps"].size(), 3u);
  EXPECT_GT(result["test_rmse"].get<double>(), 0.0);
  EXPECT_EQ(result["refined"][0]["grid"], 5);
  EXPECT_LT(result["final"]["test_rmse"].get<double>(), 1.0);
  EXPECT_EQ(result["final"]["test_rmse"], result["refined"][0]["test_rmse"]);
  EXPECT_TRUE(fs::exists(dir_ / "model.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "fit.json.tmp"));
  // The first step ran under the device audit's operation trace.
  EXPECT_NE(run.output.find("device audit: clean"), std::string::npos) << run.output;
  const auto& audit = result["device_audit"];
  EXPECT_EQ(audit["trace"]["summary"]["steps"], 1);
  EXPECT_GT(audit["trace"]["summary"]["operations"].get<int64_t>(), 100);
  EXPECT_TRUE(audit["audit"]["findings"].empty());
}

TEST_F(Cli, FitRecordsTheBackend) {
  const auto run = kanbench(
      "fit --backend reference --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(dir_ / "fit.json");
  EXPECT_EQ(nlohmann::json::parse(in)["config"]["model"]["backend"], "reference");
}

TEST_F(Cli, HelpExitsZero) {
  const auto run = kanbench("fit --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("--refine"), std::string::npos) << run.output;
  EXPECT_EQ(kanbench("--help").exit_code, 0);
}

// Built without kan::distributed (no Gloo headers), data-parallel training refuses in one line
// that says how to get it; the rest of kanbench works (every other test of this binary).
TEST_F(Cli, DataParallelNeedsKanDistributedWhereItIsLeftOut) {
#ifdef KAN_HAS_DISTRIBUTED
  GTEST_SKIP() << "this build has kan::distributed (test_data_parallel.cpp tests it)";
#else
  for (const std::string args : {"fit --distributed --steps 1", "scaling --nproc 1,2"}) {
    const auto run = kanbench(args + " --out " + dir_.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_NE(run.output.find("-DKAN_BUILD_DISTRIBUTED=ON"), std::string::npos)
        << args << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
        << args << ": " << run.output;
  }
#endif
}

TEST_F(Cli, BadCommandLinesFailWithOneLine) {
  for (const std::string args :
       {"fit --no-such-flag", "fit --dtype float16", "fit --steps many", "fit --function nope",
        "fit --backend fast", "fit --batch-draw shuffle", "frobnicate"}) {
    const auto run = kanbench(args + " --out " + dir_.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
        << args << ": " << run.output;
  }
}

TEST_F(Cli, BadValuesFailWithOneLine) {
  for (const std::string args : {"fit --grid 0 --steps 1", "fit --steps -1",
                                 "fit --width 3,1 --steps 1", "fit --batch 5000 --steps 1",
                                 "fit --device tpu --steps 1", "fit --device meta --steps 1"}) {
    const auto run = kanbench(args + " --out " + dir_.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.output;
    EXPECT_EQ(run.output.rfind("kanbench: ", 0), 0u) << args << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
        << args << ": " << run.output;
  }
}

// pykan's width syntax for multiplication nodes; each malformed width or arity one line naming it.
TEST_F(Cli, FitTrainsMultiplicationNodes) {
  const auto run = kanbench("fit --width '2,[2,1],1' --mult-arity 3 --affine-trainable --steps 3 "
                            "--train-num 100 --test-num 50 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(dir_ / "fit.json");
  const auto model = nlohmann::json::parse(in)["config"]["model"];
  EXPECT_EQ(model["width"], (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(model["mult"], (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(model["mult_arity"], 3);
  EXPECT_EQ(model["affine_trainable"], true);
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--width '2,[2,x],1'", "(entry 'x')"},
      {"--width '2,[2,1,1],1'", "[addition nodes,multiplication nodes]"},
      {"--width '2,[0,0],1'", "has no node"},
      {"--width '[1,1],3,1'", "inputs cannot be multiplication nodes"},
      {"--width '2,[2,1,1'", "without its ']'"},
      {"--width '2,[2,1],1' --mult-arity 1", "must be >= 2"},
      {"--width '2,[2,1],1' --mult-arity 2,3", "gives 2 arities but the width has 1"},
  };
  for (const auto& [args, expected] : bad) {
    const auto refused = kanbench("fit " + args + " --steps 1 --out " + dir_.string());
    EXPECT_EQ(refused.exit_code, 2) << args << ": " << refused.output;
    EXPECT_NE(refused.output.find(expected), std::string::npos) << args << ": " << refused.output;
    EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1)
        << args << ": " << refused.output;
  }
}

TEST_F(Cli, CudaWithoutGpuSaysSo) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "a GPU is present";
  const auto run = kanbench("fit --device cuda --steps 1 --out " + dir_.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("no CUDA device"), std::string::npos) << run.output;
}

TEST_F(Cli, FitOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto run = kanbench("fit --device cuda --steps 5 --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(dir_ / "fit.json");
  EXPECT_EQ(nlohmann::json::parse(in)["config"]["device"], "cuda");
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// --prune: pykan's prune on the training inputs after training, then more steps; fit.json
// records the widths and the scores, model.pt is the pruned model.
TEST_F(Cli, FitPrunesAndTrainsAgain) {
  const auto run =
      kanbench("fit --width '2,[4,1],1' --steps 3 --prune 0.01,0.03 "
               "--steps-after-prune 2 --refine 4 --train-num 100 --test-num 50 --out " +
               dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("pruned to 2,["), std::string::npos) << run.output;
  const auto fit = kan::diagnostics::read_fit_record_strict((dir_ / "fit.json").string());
  const auto prune = kan::diagnostics::read_fit_setup(fit.config).prune;
  ASSERT_TRUE(prune.has_value());
  EXPECT_EQ(prune->node_th, 0.01);
  EXPECT_EQ(prune->edge_th, 0.03);
  EXPECT_EQ(prune->steps, 2);
  ASSERT_TRUE(fit.pruned.has_value());
  EXPECT_EQ(fit.pruned->retrained.history.steps.size(), 2u);
  EXPECT_EQ(fit.pruned->node_scores.size(), 3u);
  EXPECT_EQ(fit.pruned->node_scores[1].size(), 5u);
  const auto j = read_json(dir_ / "fit.json");
  EXPECT_EQ(j["pruned"]["width_before"], nlohmann::json::parse("[2, [4, 1], 1]"));
  // The saved model is the pruned one, refined afterwards.
  const auto model = kan::load_checkpoint((dir_ / "model.pt").string());
  const auto after = fit.pruned->width_after;
  EXPECT_EQ(model->options().width()[1], after[1].nodes());
  EXPECT_EQ(model->options().grid(), 4);
  ASSERT_EQ(fit.refined.size(), 1u);
  EXPECT_EQ(fit.refined[0].trained.history.steps.size(), 3u);

  // Without --steps-after-prune, as many steps as --steps.
  const auto again =
      kanbench("fit --steps 2 --prune 0,0 --train-num 100 --test-num 50 --out " + dir_.string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(read_json(dir_ / "fit.json")["pruned"]["history"]["steps"].size(), 2u);
}

TEST_F(Cli, BadPruneOptionsFailWithOneLine) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--prune 0.1", "--prune: expected NODE_TH,EDGE_TH, two finite numbers >= 0, got '0.1'"},
      {"--prune 0.1,-1", "got '0.1,-1'"},
      {"--prune nan,0.1", "got 'nan,0.1'"},
      {"--prune 0.1,inf", "got '0.1,inf'"},
      {"--prune 0.1,0.2,0.3", "got '0.1,0.2,0.3'"},
      {"--prune ,0.1", "got ',0.1'"},
      {"--steps-after-prune 5", "--steps-after-prune requires --prune"},
      {"--prune 0.1,0.1 --steps-after-prune -1", "--steps-after-prune"},
  };
  for (const auto& [args, expected] : bad) {
    const auto refused =
        kanbench("fit " + args + " --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
    EXPECT_EQ(refused.exit_code, 2) << args << ": " << refused.output;
    EXPECT_NE(refused.output.find(expected), std::string::npos) << args << ": " << refused.output;
    EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1)
        << args << ": " << refused.output;
  }
  // A threshold above every score is found after training: the last line says so.
  const auto run =
      kanbench("fit --prune 1e9,0 --steps 1 --train-num 50 --test-num 20 --out " + dir_.string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  const auto last = run.output.substr(run.output.rfind('\n', run.output.size() - 2) + 1);
  EXPECT_EQ(last.rfind("kanbench: ", 0), 0u) << run.output;
  EXPECT_NE(last.find("--prune 1e+09,0: pruning would remove every node of layer 1"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "fit.json"));
}

TEST_F(Cli, EnvPrintsTheReportAndWritesJson) {
  const auto run = kanbench("env --json " + path("env.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("LibTorch: 2.11"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("CUDA usable: "), std::string::npos) << run.output;
  const auto env = read_json(path("env.json"));
  EXPECT_EQ(env["cuda_available"].get<bool>(), torch::cuda::is_available());
  EXPECT_GE(env["cpu_cores"].get<int64_t>(), 1);
  EXPECT_TRUE(env["problems"].is_array());
}

TEST_F(Cli, FunctionsListsTheCatalogue) {
  auto run = kanbench("functions");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // A header, then one row per function: 5 built-in, 15 special, 27 Feynman.
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1 + 47) << run.output;
  EXPECT_EQ(run.output.rfind("NAME", 0), 0u) << run.output;
  for (const char* text : {"INPUTS", "FORMULA", "DOMAIN", "SOURCE", "\ntoy ", "\nlpmv_2 ",
                           "nu in [0, 3], x in [-0.9, 1]", "theta in [0, 2pi], phi in [0, pi]",
                           "\nfeynman_III.17.37 ", "Table 2: Feynman dataset"}) {
    EXPECT_NE(run.output.find(text), std::string::npos) << text << "\n" << run.output;
  }

  run = kanbench("functions --table special");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1 + 15) << run.output;
  EXPECT_EQ(run.output.find("feynman_"), std::string::npos) << run.output;

  run = kanbench("functions --table feynman --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["schema_version"], "1.0.0");
  const auto& functions = json["functions"];
  ASSERT_EQ(functions.size(), 27u);
  for (const auto& f : functions) {
    SCOPED_TRACE(f.dump());
    EXPECT_EQ(f["group"], "feynman");
    for (const char* key : {"name", "inputs", "variables", "formula", "domain", "ranges", "source",
                            "notes", "paper"}) {
      EXPECT_TRUE(f.contains(key)) << key;
    }
    EXPECT_EQ(f["ranges"].size(), f["inputs"].get<size_t>());
    EXPECT_EQ(f["variables"].size(), f["inputs"].get<size_t>());
  }
  EXPECT_EQ(functions[0]["name"], "feynman_I.6.2");
  EXPECT_EQ(functions[0]["paper"]["human_kan_shape"], (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_TRUE(functions[0]["paper"]["pruned_kan_shape_minimal"].empty()); // not verified
  EXPECT_DOUBLE_EQ(functions[0]["paper"]["mlp_test_rmse"].get<double>(), 1.45e-4);

  run = kanbench("functions --table nope");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--table"), std::string::npos) << run.output;
}

TEST_F(Cli, AuditOfACorrectModelExitsZero) {
  const auto run = kanbench("audit --device cpu --width 2,3,1 --trace-steps 1 --samples 64 "
                            "--opt adam --json " +
                            path("audit.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("audit: clean on cpu"), std::string::npos) << run.output;
  const auto audit = read_json(path("audit.json"));
  EXPECT_TRUE(audit["findings"].is_array());
  EXPECT_TRUE(audit["findings"].empty());
  EXPECT_EQ(audit["summary"]["clean"], true);
  EXPECT_EQ(audit["summary"]["exit_code"], 0);
  EXPECT_EQ(audit["summary"]["trace"]["steps"], 1);
  EXPECT_GT(audit["summary"]["tensors_checked"].get<int64_t>(), 0);
}

TEST_F(Cli, AuditOfACheckpointExitsZero) {
  ASSERT_EQ(kanbench("fit --width 2,3,1 --steps 1 --train-num 50 --test-num 10 --trace-steps 0 "
                     "--out " +
                     dir_.string())
                .exit_code,
            0);
  const auto run = kanbench("audit --device cpu --checkpoint " + path("model.pt") +
                            " --trace-steps 1 --samples 32 --opt adam");
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(Cli, AuditFindingsExitOne) {
  // Data of another dtype than the model, as a loader that yields float64 would give.
  const auto run = kanbench("audit --device cpu --width 2,3,1 --dtype float32 --data-dtype "
                            "float64 --samples 32 --json " +
                            path("audit.json"));
  ASSERT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("data.train_input is float64, the model is float32"), std::string::npos)
      << run.output;
  const auto audit = read_json(path("audit.json"));
  ASSERT_GE(audit["findings"].size(), 4u);
  for (const auto& f : audit["findings"]) {
    for (const char* key : {"tensor", "kind", "device", "expected_device", "message"})
      EXPECT_TRUE(f.contains(key)) << key << " in " << f.dump();
  }
  EXPECT_EQ(audit["findings"][0]["tensor"], "data.train_input");
  EXPECT_EQ(audit["findings"][0]["kind"], "data");
  EXPECT_EQ(audit["summary"]["exit_code"], 1);
}

TEST_F(Cli, AuditThatCannotRunExitsTwo) {
  // A GPU that is not there (this machine has none, or fewer than 8).
  auto run = kanbench("audit --device cuda:7 --width 2,3,1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("kanbench audit: cannot run: --device cuda:7 requested but"),
            std::string::npos)
      << run.output;
  if (!torch::cuda::is_available()) {
    EXPECT_NE(run.output.find("no CUDA device: CUDA is not usable: "), std::string::npos)
        << run.output;
  }
  run = kanbench("audit --device cpu");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("one of --model PATH, --pykan PREFIX or --width"), std::string::npos);
  run = kanbench("audit --device cpu --checkpoint " + path("missing.pt"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  run = kanbench("audit --device tpu --width 2,3,1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--device must be cpu, cuda, cuda:N or meta, got 'tpu'"),
            std::string::npos);
}

TEST_F(Cli, AuditOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  auto run = kanbench("audit --device cuda --width 2,5,1 --samples 128 --json " + path("a.json"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_GT(read_json(path("a.json"))["summary"]["trace"]["operations_per_device"]["cuda:0"]
                .get<int64_t>(),
            0);
  // The classic mistake: the dataset left on the CPU.
  run = kanbench("audit --device cuda --data-device cpu --width 2,5,1 --samples 128");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("data.train_input is on cpu, expected cuda"), std::string::npos)
      << run.output;
}

TEST_F(Cli, RunQuickSuiteWritesResultsJson) {
  const auto run =
      kanbench("run --suite quick --repeat 2 --cv-target 0 --devices cpu --out " + dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = read_json(dir_ / "results.json");
  for (const char* key :
       {"schema_version", "environment", "config", "cases", "comparisons", "edge_cases"})
    ASSERT_TRUE(results.contains(key)) << key;
  EXPECT_EQ(results["config"]["suite"], "quick");
  // Six workloads (four KANs, two MLP baselines) on cpu (float32) and, without a GPU, on
  // cpu-float64 for parity.
  ASSERT_EQ(results["cases"].size(), 12u);
  for (const auto& c : results["cases"]) {
    for (const char* key : {"name", "device", "dtype", "status", "reason", "epoch_seconds",
                            "median_epoch_seconds", "iqr_epoch_seconds", "peak_memory_bytes"})
      EXPECT_TRUE(c.contains(key)) << key << " in " << c["name"];
    EXPECT_EQ(c["status"], "ok") << c.dump();
    EXPECT_EQ(c["epoch_seconds"].size(), 2u);
    EXPECT_GT(c["median_epoch_seconds"].get<double>(), 0.0);
    EXPECT_TRUE(c.contains(c["name"] == "wide" ? "final_accuracy" : "final_test_rmse"))
        << c["name"];
    // What the CPU did during the timed epochs: the process's CPU time, sampled.
    ASSERT_TRUE(c.contains("monitoring")) << c["name"];
    const auto& m = c["monitoring"];
    EXPECT_EQ(m["source"], "process_cpu");
    ASSERT_TRUE(m["available"].get<bool>()) << m.dump();
    // A sample when timing starts and one when it stops at least; each but the first measures
    // the interval before it.
    ASSERT_GE(m["samples"].size(), 2u) << m.dump();
    EXPECT_TRUE(m["samples"].back().contains("cpu_utilization_percent")) << m.dump();
    const auto& cpu = m["summary"]["cpu_utilization_percent"];
    EXPECT_GT(cpu["mean"].get<double>(), 0.0) << m.dump();
    EXPECT_GE(cpu["max"].get<double>(), cpu["mean"].get<double>());
    // Every case's model and its size.
    const bool mlp = c["name"].get<std::string>().find("-mlp") != std::string::npos;
    EXPECT_EQ(c["model_kind"], mlp ? "mlp" : "kan") << c["name"];
    EXPECT_GT(c["parameters"].get<int64_t>(), 0) << c["name"];
    EXPECT_GT(c["forward_flops"].get<int64_t>(), 0) << c["name"];
  }
  ASSERT_EQ(results["comparisons"].size(), 6u);
  for (const auto& c : results["comparisons"]) {
    for (const char* key : {"case", "a", "b", "speedup", "max_abs_output_diff", "max_rel_loss_diff",
                            "final_metric_rel_diff", "parity"})
      EXPECT_TRUE(c.contains(key)) << key << " in " << c["case"];
    EXPECT_EQ(c["label"], "float32 vs float64 on cpu");
    EXPECT_LT(c["max_rel_output_diff"].get<double>(), 1e-4); // same seed, same model
  }
  std::set<std::string> edge_cases;
  for (const auto& e : results["edge_cases"]) {
    edge_cases.insert(e["name"].get<std::string>());
    EXPECT_NE(e["status"], "fail") << e.dump();
  }
  EXPECT_EQ(edge_cases,
            (std::set<std::string>{"empty_input", "single_sample", "million_samples_bounded_memory",
                                   "out_of_memory", "time_limit"}));
}

TEST_F(Cli, RunStopsOnNoiseAndRecordsTheSpread) {
  // A target no machine meets: each case times epochs until its 0.2 s cap.
  // (--empty-cache frees nothing on the CPU: accepted, and harmless.)
  const auto run = kanbench("run --suite quick --repeat 2 --case toy --devices cpu --empty-cache "
                            "--no-edge-cases --cv-target 0.0001 --cv-max-time 0.2 --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = read_json(dir_ / "results.json");
  ASSERT_EQ(results["cases"].size(), 2u);
  for (const auto& c : results["cases"]) {
    EXPECT_GT(c["epoch_seconds"].size(), 2u) << c.dump();
    EXPECT_EQ(c["cv_target"], 0.0001);
    EXPECT_EQ(c["cv_target_met"], false);
    EXPECT_GT(c["epoch_cv"].get<double>(), 0.0);
  }
  EXPECT_EQ(results["config"]["extra"]["cv_max_seconds"], 0.2);
  const auto html = read_text(dir_ / "report.html");
  EXPECT_NE(html.find("target 0.01% not met"), std::string::npos);
}

TEST_F(Cli, RunComparesEachPrecisionWithFloat32) {
  const auto run =
      kanbench("run --suite quick --case deep --devices cpu --precision float32,bf16,fp16 "
               "--repeat 2 --cv-target 0 --no-edge-cases --out " +
               dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = read_json(dir_ / "results.json");
  ASSERT_EQ(results["cases"].size(), 3u);
  EXPECT_EQ(results["cases"][1]["target"], "cpu-bf16");
  EXPECT_EQ(results["cases"][1]["precision"], "bf16");
  // fp16 needs CUDA: a skipped target that says why, never a number.
  EXPECT_EQ(results["cases"][2]["status"], "skipped");
  EXPECT_NE(results["cases"][2]["reason"].get<std::string>().find("CUDA only"), std::string::npos);
  ASSERT_EQ(results["comparisons"].size(), 1u);
  EXPECT_EQ(results["comparisons"][0]["label"], "float32 vs bf16 on cpu");
  EXPECT_NE(run.output.find("deep cpu vs cpu-bf16: speedup"), std::string::npos) << run.output;
}

TEST_F(Cli, SweepWritesThroughputPerBatchAndTheCrossover) {
  const auto run = kanbench("sweep --suite quick --case deep --batch 16,64 --repeat 2 "
                            "--cv-target 0 --devices cpu --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = read_json(dir_ / "results.json");
  EXPECT_EQ(results["config"]["extra"]["command"], "sweep");
  EXPECT_EQ(results["config"]["extra"]["batches"], nlohmann::json({16, 64}));
  const auto& sweep = results["sweep"];
  EXPECT_EQ(sweep["batches"], nlohmann::json({16, 64}));
  const size_t targets = 2; // cpu and, as no GPU target runs, cpu-float64
  EXPECT_EQ(sweep["points"].size(), 2 * targets);
  for (const auto& p : sweep["points"]) {
    EXPECT_EQ(p["status"], "ok") << p.dump();
    EXPECT_GT(p["samples_per_second"].get<double>(), 0.0);
  }
  EXPECT_EQ(sweep["targets"].size(), targets);
  EXPECT_EQ(sweep["crossovers"].size(), targets - 1);
  // The summary names each target's best batch and the crossover.
  EXPECT_NE(run.output.find("deep on cpu: best "), std::string::npos) << run.output;
  const auto html = read_text(dir_ / "report.html");
  EXPECT_NE(html.find("<section id=\"sweep\">"), std::string::npos);
  EXPECT_NE(html.find("chart-sweep"), std::string::npos);

  // Bad lists are refused by name, before anything runs.
  for (const char* batch : {"0", "16,,64", "x", "16.5", "-4"}) {
    const auto bad =
        kanbench(std::string("sweep --suite quick --batch ") + batch + " --out " + path("bad"));
    EXPECT_EQ(bad.exit_code, 2) << batch << ": " << bad.output;
    EXPECT_NE(bad.output.find("--batch"), std::string::npos) << bad.output;
    EXPECT_FALSE(fs::exists(path("bad/results.json")));
  }
}

TEST_F(Cli, RunWithAMissingGpuRecordsSkippedCases) {
  if (torch::cuda::is_available())
    GTEST_SKIP() << "this machine has a GPU";
  const auto run = kanbench("run --suite quick --repeat 1 --devices cpu,cuda --case toy "
                            "--no-edge-cases --out " +
                            dir_.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto results = read_json(dir_ / "results.json");
  bool skipped = false;
  for (const auto& c : results["cases"]) {
    if (c["target"] == "cuda") {
      skipped = true;
      EXPECT_EQ(c["status"], "skipped");
      EXPECT_NE(c["reason"].get<std::string>().find("no CUDA device"), std::string::npos);
      EXPECT_TRUE(c["median_epoch_seconds"].is_null()); // never a number for a missing device
    }
  }
  EXPECT_TRUE(skipped);
}

} // namespace
