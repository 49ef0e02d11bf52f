// The JSON of kan's types and of fit.json and audit.json: each round-trips through its strict
// reader, and each reader refuses what the schema does not allow, naming the key path.
#include "cli_runner.h"
#include "test_util.h"

#include "kan/diagnostics/audit_record.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/io/json_reader.h"

#include <cmath>
#include <limits>

namespace {

using namespace kan;
using namespace kan::diagnostics;
using json = nlohmann::json;
using RecordsCli = kan::test::ScratchDirTest;

// The message of the JsonError that `read` throws, or "" when it throws none.
template <typename Read> std::string json_error(Read read) {
  try {
    read();
  } catch (const io::JsonError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(read, ...)                                                                  \
  do {                                                                                             \
    const std::string message = json_error([&] { read; });                                         \
    EXPECT_FALSE(message.empty()) << "accepted: " #read;                                           \
    for (const std::string fragment : {__VA_ARGS__})                                               \
      EXPECT_NE(message.find(fragment), std::string::npos) << message;                             \
  } while (0)

// A small real fit: three stages of three steps (trained, pruned, refined), through the library's
// pipeline with the first stage audited, as `kanbench fit` records it.
results::FitRecord small_fit_record() {
  FitSetup setup;
  setup.model = KANOptions({2, 3, 1}).grid(3).dtype(torch::kFloat64).seed(0);
  setup.fit = FitOptions().steps(3).opt(Optimizer::kAdam).lr(0.01).lamb(0.001);
  setup.prune = PruneStage{0.01, 0.03, 3};
  results::FitRecord record;
  record.config.train_num = 64;
  record.config.test_num = 16;
  record.config.refine = {5};
  write_fit_setup(setup, record.config);
  record.libtorch = "2.11.0";
  record.threads = 2;
  const auto data =
      create_dataset(reference_function("toy").f,
                     DatasetOptions(2).train_num(64).test_num(16).dtype(torch::kFloat64));
  KAN model(setup.model);
  const auto options =
      PipelineOptions()
          .fit(setup.fit)
          .prune(setup.prune)
          .grids(record.config.refine)
          .train([&](KAN& m, const Dataset& d, const FitOptions& o, const PipelineStage& stage) {
            if (stage.kind != PipelineStage::Kind::kTrain)
              return fit(m, d, o);
            auto audited = audited_fit(m, d, o, 1);
            record.device_audit = audited.to_json();
            return std::move(audited.history);
          });
  static_cast<PipelineResult&>(record) = run_pipeline(model, data, options);
  record.parameters = model->parameter_count();
  record.forward_flops = model->forward_flops();
  return record;
}

TEST(Records, KanOptionsFitOptionsAndHistoryRoundTrip) {
  const auto options = FitOptions()
                           .opt(Optimizer::kAdam)
                           .steps(7)
                           .batch(32)
                           .batch_draw(BatchDraw::kPerEpoch)
                           .lamb(0.01)
                           .update_grid(false)
                           .grid_update_memory(1 << 20)
                           .loss(Loss::kCrossEntropy)
                           .seed(99);
  EXPECT_EQ(to_json(fit_options_from_json(to_json(options))), to_json(options));

  FitHistory history;
  StepRecord step;
  step.step = 0;
  step.train_loss = 0.5;
  step.test_loss = 0.25;
  step.train_rmse = step.test_rmse = std::numeric_limits<double>::quiet_NaN(); // classification
  step.test_accuracy = 0.75;
  step.grid_updated = true;
  step.evaluations = 23;
  history.steps.push_back(step);
  history.grid_updates = 1;
  const auto j = results::to_json(history);
  EXPECT_TRUE(j["steps"][0]["train_rmse"].is_null());
  const auto back = results::fit_history_from_json(j);
  EXPECT_TRUE(std::isnan(back.steps[0].train_rmse));
  EXPECT_EQ(back.steps[0].test_accuracy, 0.75);
  EXPECT_EQ(back.steps[0].evaluations, 23);
  EXPECT_EQ(results::to_json(back), j);
  auto older = j; // results from before the count
  older["steps"][0].erase("evaluations");
  EXPECT_EQ(results::fit_history_from_json(older).steps[0].evaluations, 0);
}

TEST(Records, KanReadersNameTheKeyPath) {
  auto j = to_json(FitOptions());
  j["opt"] = "sgd";
  EXPECT_REFUSED(fit_options_from_json(j, "config.fit"), "config.fit.opt", "lbfgs, adam");
  j = to_json(FitOptions());
  j["momentum"] = 0.9;
  EXPECT_REFUSED(fit_options_from_json(j, "config.fit"), "config.fit.momentum", "unknown key");
  j = to_json(FitOptions());
  j["lamb"] = -1;
  EXPECT_REFUSED(fit_options_from_json(j), "lamb", ">= 0");
  auto model = to_json(KANOptions({2, 1}));
  model["grid_range"] = {0, 1, 2};
  EXPECT_REFUSED(kan_options_from_json(model, "model"), "model.grid_range", "[low, high]");
  model = to_json(KANOptions({2, 1}));
  model["width"] = {2, -1};
  EXPECT_REFUSED(kan_options_from_json(model, "model"), "model.width[1]", ">= 0");
}

TEST(Records, FitRecordRoundTrips) {
  const auto record = small_fit_record();
  const auto j = to_json(record);
  EXPECT_EQ(j["schema_version"], results::kFitSchemaVersion);
  EXPECT_EQ(j["refined"][0]["grid"], 5);
  EXPECT_EQ(j["config"]["refine"], json({5}));
  EXPECT_EQ(j["final"]["stage"], "refined");
  EXPECT_EQ(j["final"]["test_rmse"], j["refined"][0]["test_rmse"]);
  EXPECT_TRUE(j["final"]["test_accuracy"].is_null()); // a regression
  const auto back = strict_fit_record_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.trained.history.steps.size(), 3u);
  ASSERT_EQ(back.refined.size(), 1u);
  EXPECT_EQ(back.refined[0].trained.history.steps.size(), 3u);
  EXPECT_EQ(j["config"]["prune"], json({{"node_th", 0.01}, {"edge_th", 0.03}, {"steps", 3}}));
  EXPECT_EQ(j["pruned"]["width_before"], json({2, 3, 1}));
  EXPECT_EQ(back.pruned->retrained.history.steps.size(), 3u);
  EXPECT_EQ(back.pruned->node_scores.size(), 3u);
  EXPECT_EQ(back.pruned->edge_scores.size(), 2u);
  EXPECT_EQ(read_fit_setup(back.config).fit.opt(), Optimizer::kAdam);
  EXPECT_EQ(read_fit_setup(back.config).prune->steps, 3);
  const auto audit = audited_fit_from_json(back.device_audit);
  EXPECT_EQ(audit.trace.summary.steps, 1);
  EXPECT_EQ(audit.trace.operations.size(),
            audited_fit_from_json(record.device_audit).trace.operations.size());
  EXPECT_DOUBLE_EQ(back.seconds(), record.seconds());
  EXPECT_EQ(j["config"]["model_kind"], "kan");
  EXPECT_EQ(back.parameters, record.parameters);
  EXPECT_EQ(back.forward_flops, record.forward_flops);
  EXPECT_GT(j["final"]["forward_flops"].get<int64_t>(), 0);
}

TEST(Records, FitRecordReaderRefusesContradictions) {
  const auto good = to_json(small_fit_record());
  auto j = good;
  j["seconds"] = j["seconds"].get<double>() + 1;
  EXPECT_REFUSED(strict_fit_record_from_json(j, "fit.json"), "fit.json: seconds", "stages");
  j = good;
  j["refined"] = json::array();
  EXPECT_REFUSED(strict_fit_record_from_json(j), "refined[].grid", "config.refine is [5]");
  j = good;
  j["final"]["test_rmse"] = 0.0;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "final", "the last stage");
  j = good;
  j["command"] = "audit";
  EXPECT_REFUSED(strict_fit_record_from_json(j), "command", "\"fit\"");
  // A data file replaces the function: both at once is a contradiction.
  j = good;
  j["config"]["data"] = {{"path", "d.csv"},      {"format", "csv"},
                         {"inputs", {"a", "b"}}, {"targets", {"y"}},
                         {"test_data", nullptr}, {"test_fraction", 0.2},
                         {"classes", 0},         {"description", "d.csv: CSV"}};
  EXPECT_REFUSED(strict_fit_record_from_json(j), "config.function", "must be null");
  j["config"]["function"] = nullptr;
  const auto on_data = strict_fit_record_from_json(j);
  ASSERT_TRUE(on_data.config.data);
  EXPECT_EQ(on_data.config.data->inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(to_json(on_data)["config"], j["config"]);
  j["config"]["data"]["targets"] = json::array();
  EXPECT_REFUSED(strict_fit_record_from_json(j), "config.data.targets", "no columns");
  j = good;
  j["schema_version"] = "1.7.0";
  EXPECT_REFUSED(strict_fit_record_from_json(j), "schema_version", "not supported");
  j = good;
  j["config"]["model"]["k"] = "3";
  EXPECT_REFUSED(strict_fit_record_from_json(j), "config.model.k", "expected an integer");
  j = good;
  j["device_audit"]["trace"]["summary"]["findings"] = 2;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "device_audit.trace.summary.findings",
                 "the report lists 0");
  j = good;
  j["history"]["steps"][1]["reg"] = "small";
  EXPECT_REFUSED(strict_fit_record_from_json(j), "history.steps[1].reg", "expected a number");
  j = good;
  j["final"].erase("forward_flops");
  EXPECT_REFUSED(strict_fit_record_from_json(j), "final.forward_flops",
                 "final.parameters is given");

  // A key from a newer minor version is tolerated; from our own version it is refused.
  j = good;
  j["energy_joules"] = 12.5;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "energy_joules", "unknown key");
  j["schema_version"] = "2.99.0";
  EXPECT_NO_THROW(strict_fit_record_from_json(j));
}

// The pruning's widths and scores must fit its model.
TEST(Records, FitRecordReaderChecksThePruning) {
  const auto good = to_json(small_fit_record());
  auto j = good;
  j.erase("pruned");
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned: missing, but config.prune is set");
  j = good;
  j["config"]["prune"] = nullptr;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned: present, but config.prune is null");
  j = good;
  j["config"]["prune"]["edge_th"] = -1;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "config.prune.edge_th", ">= 0");
  j = good;
  j["pruned"]["width_before"] = json::array({2, json::array({2, 1}), 1});
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.width_before", "config.model's width");
  j = good;
  j["pruned"]["width_after"] = json::array({2, 4, 1});
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.width_after", "with hidden nodes removed");
  j = good;
  j["pruned"]["width_after"] = json::array({2, json::array({0, 0}), 1});
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.width_after[1]", "at least one node");
  j = good;
  j["pruned"]["node_scores"][1].push_back(0.5);
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.node_scores[1]", "one score per node (3)");
  j = good;
  j["pruned"]["node_scores"][0][0] = -0.5;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.node_scores[0][0]", ">= 0");
  j = good;
  j["pruned"]["edge_scores"][0].erase(0);
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.edge_scores[0]",
                 "one row per node of layer 0");
  j = good;
  j["pruned"]["seconds"] = 1e6;
  EXPECT_REFUSED(strict_fit_record_from_json(j), "pruned.seconds");
  j = good;
  j["config"].erase("prune");
  EXPECT_REFUSED(strict_fit_record_from_json(j), "config.prune", "missing");
}

TEST(Records, PykanWidthWritesMultiplicationNodesAsPairs) {
  const auto width = pykan_width(KANOptions({2, 3, 1}).mult({0, 1, 0}));
  ASSERT_EQ(width.size(), 3u);
  EXPECT_EQ(width[1].sum, 2);
  EXPECT_EQ(width[1].mult, 1);
  EXPECT_EQ(width[0].nodes(), 2);
}

TEST(Records, AuditRecordRoundTripsAndChecksItsSummary) {
  AuditRecord record;
  record.device = "cpu";
  record.config.model = to_json(KANOptions({2, 3, 1}));
  record.config.data_device = "cpu";
  record.config.data_dtype = "float64";
  record.config.samples = 32;
  record.static_audit.expected_device = "cpu";
  record.static_audit.expected_dtype = "float32";
  record.static_audit.summary.tensors_checked = 14;
  record.static_audit.summary.bytes_per_device = {{"cpu", 1484}};
  results::AuditFinding finding;
  finding.tensor = "data.train_input";
  finding.kind = "data";
  finding.problem = "wrong_dtype";
  finding.device = finding.expected_device = "cpu";
  finding.dtype = "float64";
  finding.shape = {32, 2};
  finding.message = "data.train_input is float64, the model is float32";
  record.static_audit.findings = {finding};
  finding.stage = "before_training";
  record.findings = {finding};
  record.static_audit.summary.findings = 1;
  record.exit_code = 1;
  const auto j = to_json(record);
  EXPECT_EQ(j["summary"]["clean"], false);
  EXPECT_EQ(j["findings"][0]["shape"], (std::vector<int64_t>{32, 2}));
  const auto back = audit_record_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.findings, record.findings);

  auto bad = j;
  bad["summary"]["clean"] = true;
  EXPECT_REFUSED(audit_record_from_json(bad, "audit.json"), "audit.json: summary.clean");
  bad = j;
  bad["summary"]["tensors_checked"] = 15;
  EXPECT_REFUSED(audit_record_from_json(bad), "summary.tensors_checked", "14");
  bad = j;
  bad["static_audit"]["findings"][0]["kind"] = "weights";
  EXPECT_REFUSED(audit_record_from_json(bad), "static_audit.findings[0].kind", "parameter");
}

// What the command line writes, the readers read; every option lands in its field.
TEST_F(RecordsCli, CommandLineDocumentsReadBack) {
  const auto fit_run =
      kan::test::run_kanbench("fit --width 2,3,1 --grid 4 --k 2 --opt adam --lr 0.02 --steps 4 "
                              "--batch 16 --batch-draw per_epoch --lamb 0.001 --lamb-entropy 3 "
                              "--no-update-grid --seed 7 --train-num 64 --test-num 16 --refine 6 "
                              "--trace-steps 1 --out " +
                              dir_.string());
  ASSERT_EQ(fit_run.exit_code, 0) << fit_run.output;
  const auto fit = read_fit_record_strict(path("fit.json"));
  const auto setup = read_fit_setup(fit.config);
  EXPECT_EQ(setup.model.width(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(setup.model.grid(), 4);
  EXPECT_EQ(setup.model.k(), 2);
  EXPECT_EQ(setup.model.seed(), 7u);
  EXPECT_EQ(setup.model.dtype(), torch::kFloat64);
  EXPECT_EQ(setup.fit.opt(), Optimizer::kAdam);
  EXPECT_EQ(setup.fit.lr(), 0.02);
  EXPECT_EQ(setup.fit.steps(), 4);
  EXPECT_EQ(setup.fit.batch(), 16);
  EXPECT_EQ(setup.fit.batch_draw(), BatchDraw::kPerEpoch);
  EXPECT_EQ(setup.fit.lamb(), 0.001);
  EXPECT_EQ(setup.fit.lamb_entropy(), 3.0);
  EXPECT_FALSE(setup.fit.update_grid());
  EXPECT_EQ(setup.fit.seed(), 7u);
  EXPECT_EQ(fit.trained.history.steps.size(), 4u);
  ASSERT_EQ(fit.refined.size(), 1u);
  EXPECT_EQ(fit.refined[0].grid, 6);
  EXPECT_EQ(fit.refined[0].trained.history.steps.size(), 4u);
  EXPECT_TRUE(fit.config.prune.is_null());
  EXPECT_FALSE(setup.prune);

  const auto audit_run = kan::test::run_kanbench(
      "audit --device cpu --width 2,3,1 --dtype float32 --data-dtype float64 --samples 32 "
      "--trace-steps 1 --json " +
      path("audit.json"));
  ASSERT_EQ(audit_run.exit_code, 1) << audit_run.output;
  const auto audit = read_audit_record(path("audit.json"));
  EXPECT_EQ(audit.exit_code, 1);
  ASSERT_FALSE(audit.findings.empty());
  EXPECT_EQ(audit.findings[0].stage, "before_training");
  EXPECT_EQ(audit.findings[0].problem, "wrong_dtype");
  EXPECT_EQ(audit.config.data_dtype, "float64");
  EXPECT_EQ(audit.static_audit.findings.size(), 4u);
}

} // namespace
