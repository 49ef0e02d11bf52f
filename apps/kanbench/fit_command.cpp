// `kanbench fit`: the options of kan::run_pipeline (kan/train/pipeline.h) on the command line:
// train a KAN (a new one, or a pykan checkpoint's) on a named reference function or the user's data
// file (kan::load_dataset), optionally prune it, extend its grid and fix its edges to symbolic
// functions, training again after each; write
// DIR/fit.json (configuration, every stage's history and metrics) and DIR/model.pt. With
// --model mlp, the MLP baseline (kan/nn/mlp.h) trained once instead (kan::train_stage).
#include "commands.h"
#include "data_options.h"
#include "option_checks.h"

#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/diagnostics/records.h"
#include "kan/distributed/data_parallel.h"
#include "kan/io/atomic_file.h"
#include "kan/kan.h"
#include "kan/nn/memory.h"
#include "kan/serialize/pykan.h"
#include "kan/train/pipeline.h"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/version.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace kanbench {
namespace {

// What the command line sets. Numbers, flags and enums are bound straight onto the library's
// option structs (add_fit_command), so each option has one home and one default; only the
// values that need LibTorch to parse stay text until the run.
struct FitArgs {
  kan::results::FitConfig config;
  kan::diagnostics::FitSetup setup = defaults();
  DataArgs data;
  std::string width = "2,5,1";
  std::string mult_arity;         // "": the library's default, 2
  std::string dtype;              // "": float64 for a new model, the checkpoint's with --pykan
  std::string model = "kan";      // kan, mlp, or a model file trained as it is
  bool trust_torchscript = false; // --model FILE may be a TorchScript archive
  std::string out = "kanbench-out/fit";
  std::optional<int64_t> steps_after_prune; // unset: --steps
  bool symbolic = false;
  kan::SymbolicStage symbolic_stage; // pykan's auto_symbolic defaults
  std::optional<std::string> lib;    // unset: the whole library
  bool distributed = false;          // one rank of a torchrun launch
  kan::DataParallelOptions data_parallel;

  // The library's defaults, except pykan's reference run: 50 steps, float64.
  static kan::diagnostics::FitSetup defaults() {
    kan::diagnostics::FitSetup setup;
    setup.fit.steps(50);
    return setup;
  }
};

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// A stage's result as the summary line gives it: a classification has no RMSE.
std::string test_metric(const kan::StageResult& stage) {
  if (std::isnan(stage.test_rmse) && !std::isnan(stage.test_accuracy)) {
    char text[48];
    std::snprintf(text, sizeof text, "test accuracy %.2f%%", 100 * stage.test_accuracy);
    return text;
  }
  return "test RMSE " + scientific(stage.test_rmse);
}

// "toy G=5", "toy G=5 pruned", "toy G=10", "toy G=10 symbolic": a stage as progress names it (an
// MLP's, which has no grid, "toy MLP").
std::string stage_label(const std::string& subject, const kan::PipelineStage& stage) {
  std::string label = subject + (stage.grid > 0 ? " G=" + std::to_string(stage.grid) : "");
  if (stage.kind == kan::PipelineStage::Kind::kPrune)
    label += " pruned";
  if (stage.kind == kan::PipelineStage::Kind::kSymbolic)
    label += " symbolic";
  return label;
}

// Progress on stderr: one rewritten line on a terminal, a line every tenth of a stage otherwise.
// Data-parallel, rank 0 alone reports (every rank has the same record).
class Progress {
public:
  Progress(std::string subject, bool silent)
      : subject_(std::move(subject)), tty_(isatty(fileno(stderr))), silent_(silent) {}

  void operator()(const kan::PipelineStage& stage, const kan::StepRecord& r) const {
    if (silent_)
      return;
    const int64_t done = r.step + 1, steps = stage.steps;
    const int64_t every = std::max<int64_t>(1, steps / 10);
    if (!tty_ && done % every != 0 && done != steps)
      return;
    const double left = r.seconds / done * (steps - done);
    // A classification has no RMSE: its loss and accuracy instead.
    char metrics[96];
    if (std::isnan(r.train_rmse))
      std::snprintf(metrics, sizeof metrics, "train loss %.3e  test accuracy %.2f%%", r.train_loss,
                    100 * r.test_accuracy);
    else
      std::snprintf(metrics, sizeof metrics, "train rmse %.3e  test rmse %.3e", r.train_rmse,
                    r.test_rmse);
    std::fprintf(stderr, "%s%s step %lld/%lld  %s  %.1f s, ~%.1f s left%s", tty_ ? "\r" : "",
                 stage_label(subject_, stage).c_str(), static_cast<long long>(done),
                 static_cast<long long>(steps), metrics, r.seconds, left,
                 tty_ && done != steps ? "" : "\n");
  }

  // auto_symbolic takes seconds to minutes before its stage's first step.
  void stage_begins(const kan::PipelineStage& stage, size_t functions) const {
    if (!silent_ && stage.kind == kan::PipelineStage::Kind::kSymbolic)
      std::fprintf(stderr, "%s: auto_symbolic over %zu functions...\n",
                   stage_label(subject_, stage).c_str(), functions);
  }

private:
  std::string subject_;
  bool tty_, silent_;
};

// Findings go to stderr; a clean audit is one line.
void report_audit(const kan::diagnostics::AuditedFit& audited) {
  if (!audited.clean()) {
    std::cerr << audited.audit.to_text() << audited.trace.to_text();
    return;
  }
  const auto& t = audited.trace.summary;
  if (t.steps == 0)
    return;
  std::fprintf(stderr,
               "device audit: clean (%lld tensors in place; %lld operations traced in %lld "
               "step(s), trace overhead %.3f s)\n",
               static_cast<long long>(audited.audit.summary.tensors_checked),
               static_cast<long long>(t.operations), static_cast<long long>(t.steps),
               t.overhead_seconds);
}

// --lib's names, each checked against the library.
std::vector<std::string> symbolic_library(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    try {
      kan::symbolic_function(name);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "--lib ", text, ": ", e.what_without_backtrace());
    }
    names.push_back(name);
  }
  TORCH_CHECK(!names.empty(), "--lib: the library is empty; name at least one function");
  return names;
}

// model.pt and fit.json are one unit: both are written and synced as temporaries first, so a
// full disk leaves both old files; only the two renames remain, and if the second one fails
// the stale fit.json is removed and the error says so.
void write_outputs(const kan::Model& model, const std::string& checkpoint_path,
                   const std::string& json_path, const std::string& json_text) {
  kan::io::AtomicFile checkpoint(checkpoint_path), json(json_path);
  try {
    kan::save_model(model, [&](const void* data, size_t size) { checkpoint.write(data, size); });
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write checkpoint: ", first_line(e.what()));
  }
  json.write(json_text);
  checkpoint.finish();
  json.finish();
  checkpoint.commit();
  try {
    json.commit();
  } catch (const std::runtime_error& e) {
    std::error_code ec;
    std::filesystem::remove(json_path, ec);
    TORCH_CHECK(false, first_line(e.what()), "; ", checkpoint_path, " is new, so the stale ",
                json_path, " of the previous run was ",
                ec ? "left in place: delete it" : "removed");
  }
}

// fit.json before anything is measured: what runs, and on what.
kan::results::FitRecord new_record(const FitArgs& a) {
  kan::results::FitRecord record;
  record.config = a.config;
  kan::diagnostics::write_fit_setup(a.setup, record.config);
  record.libtorch = TORCH_VERSION;
  record.threads = at::get_num_threads();
  return record;
}

// A fit's last steps on rank 0, for both kinds of model: the collectives' cost recorded, then
// fit.json and the checkpoint written. Returns fit.json's path.
std::string write_fit(kan::results::FitRecord& record, const kan::Model& model,
                      const kan::DataParallel* group, const std::string& out) {
  if (group) {
    const auto& stats = group->stats();
    record.communication =
        kan::results::FitCommunication{stats.collectives, stats.bytes, stats.wait_seconds};
  }
  const auto json_path = (std::filesystem::path(out) / "fit.json").string();
  write_outputs(model, (std::filesystem::path(out) / record.checkpoint).string(), json_path,
                kan::results::to_json(record).dump(2) + "\n");
  return json_path;
}

// The first training under the device audit (a trace of its first steps): the audit goes into
// the record, the history to the pipeline.
kan::FitHistory audited_training(kan::Model& model, const kan::Dataset& data,
                                 const kan::FitOptions& options, int64_t trace_steps,
                                 kan::results::FitRecord& record) {
  auto audited = kan::diagnostics::audited_fit(model, data, options, trace_steps);
  report_audit(audited);
  record.device_audit = audited.to_json();
  return std::move(audited.history);
}

// How the fit ran, for its summary line: "lbfgs, 50 steps, 1143 evaluations, float64, cpu, 2.5 s".
std::string run_details(const kan::results::FitRecord& record, const kan::FitOptions& fit,
                        const kan::Model& model, const kan::DataParallel* group) {
  int64_t evaluations = 0; // LBFGS's line searches evaluate a step's objective many times
  for (const auto& step : record.trained.history.steps)
    evaluations += step.evaluations;
  std::ostringstream text;
  text << kan::to_string(fit.opt()) << ", " << fit.steps() << " steps, "
       << (fit.opt() == kan::Optimizer::kLBFGS ? std::to_string(evaluations) + " evaluations, "
                                               : std::string())
       << kan::to_string(model.dtype()) << ", " << model.device()
       << (group ? ", " + std::to_string(group->world_size()) + " ranks (" + group->backend_name() +
                       ")"
                 : std::string())
       << ", " << scientific(record.seconds()) << " s";
  return text.str();
}

// --width of an MLP: plain node counts, checked as a KAN's are.
std::vector<int64_t> mlp_width(const std::string& text) {
  kan::KANOptions parsed({1, 1});
  set_width(parsed, text);
  TORCH_CHECK(!kan::has_mult_nodes(parsed), "--width ", shown(text),
              ": an MLP has no multiplication nodes; give one node count per layer");
  return parsed.width();
}

// Whether --model names a file (kan and mlp are the kinds kanbench builds).
bool is_model_file(const FitArgs& a) {
  return a.model != "kan" && a.model != "mlp";
}

// What only a KAN has, refused for --model mlp with one line naming the option (and --activation,
// an MLP's, for a KAN): silently ignoring it would train something other than what was asked.
void check_model_options(const CLI::App& cmd, const FitArgs& a) {
  const auto& setup = a.setup;
  if (is_model_file(a)) {
    for (const char* name :
         {"--pykan", "--width", "--activation", "--grid", "--k", "--backend", "--mult-arity",
          "--affine-trainable", "--prune", "--steps-after-prune", "--refine", "--symbolic"})
      TORCH_CHECK(cmd.count(name) == 0, name, " describes a model kanbench builds; --model ",
                  a.model,
                  " trains the model in that file as it is (one stage, no pruning, "
                  "refinement or symbolic stage)");
    return;
  }
  TORCH_CHECK(!a.trust_torchscript, "--trust-torchscript needs --model FILE (a TorchScript "
                                    "archive)");
  if (setup.model_kind == kan::ModelKind::kKAN) {
    TORCH_CHECK(cmd.count("--activation") == 0,
                "--activation is an MLP's option (--model mlp); a KAN's edges learn their own");
    return;
  }
  for (const char* name :
       {"--pykan", "--grid", "--k", "--backend", "--mult-arity", "--affine-trainable", "--prune",
        "--steps-after-prune", "--refine", "--symbolic", "--lamb-l1", "--lamb-entropy",
        "--lamb-coef", "--lamb-coefdiff", "--no-update-grid", "--grid-update-num",
        "--stop-grid-update-step"})
    TORCH_CHECK(cmd.count(name) == 0, name,
                " is a KAN's option; --model mlp trains an MLP (its options: --width, "
                "--activation)");
  TORCH_CHECK(setup.fit.lamb() == 0, "--lamb ", setup.fit.lamb(),
              ": the regulariser scores a KAN's edges; --model mlp has none (FitOptions::lamb "
              "must be 0)");
}

// One stage of training under the device audit (the MLP baseline, a model file's model), with
// progress: fit.json's record of it.
kan::results::FitRecord train_once(const FitArgs& a, kan::Model& model, const kan::Dataset& data,
                                   const std::shared_ptr<kan::DataParallel>& group, bool writes,
                                   const std::string& label) {
  auto record = new_record(a);
  auto fit_options = a.setup.fit;
  fit_options.data_parallel(group);
  const Progress progress(label, !writes);
  const kan::PipelineStage stage{kan::PipelineStage::Kind::kTrain, 0, a.setup.fit.steps()};
  fit_options.on_step(
      [&](const kan::StepRecord& step, int64_t /*total*/) { progress(stage, step); });
  record.trained =
      kan::train_stage(model, data, fit_options,
                       [&](kan::Model& m, const kan::Dataset& d, const kan::FitOptions& o) {
                         return audited_training(m, d, o, a.config.trace_steps, record);
                       });
  record.parameters = model.parameter_count();
  record.forward_flops = model.forward_flops();
  return record;
}

// `kanbench fit --model mlp`: the MLP trained once under the device audit, its fit.json shaped as
// a KAN's first stage (kan::train_stage) and its checkpoint beside it.
int run_mlp_fit(const FitArgs& a, const kan::Dataset& data,
                const std::shared_ptr<kan::DataParallel>& group, bool writes,
                const std::string& subject) {
  const auto& setup = a.setup;
  kan::MLP model(setup.mlp);
  auto record = train_once(a, *model, data, group, writes, subject + " MLP");
  if (!writes)
    return 0;
  const auto json_path = write_fit(record, *model, group.get(), a.out);
  std::cout << subject << " MLP " << c10::IntArrayRef(setup.mlp.width()) << " "
            << kan::to_string(setup.mlp.activation()) << ": " << test_metric(record.trained) << " ("
            << *record.parameters << " parameters, " << *record.forward_flops
            << " FLOPs per sample; " << run_details(record, a.setup.fit, *model, group.get())
            << ") -> " << json_path << "\n";
  return 0;
}

// The model's options from --pykan (its model, in --dtype when given) or --width, and the later
// stages' from theirs. Returns the --pykan model.
std::optional<kan::KAN> resolve_model(FitArgs& a, torch::Device device) {
  auto& config = a.config;
  auto& setup = a.setup;
  std::optional<kan::KAN> initial;
  if (!config.initial_model.empty()) {
    initial = kan::load_pykan(config.initial_model, device);
    if (!a.dtype.empty())
      (*initial)->to(kan::dtype_from_string(a.dtype));
    setup.model = (*initial)->options();
    setup.model.dtype((*initial)->dtype());
  } else {
    set_width(setup.model, a.width);
    if (!a.mult_arity.empty())
      set_mult_arity(setup.model, a.mult_arity);
    setup.model.dtype(kan::dtype_from_string(a.dtype.empty() ? "float64" : a.dtype));
  }
  setup.model.device(device).seed(config.seed);
  if (setup.model_kind == kan::ModelKind::kMLP)
    setup.mlp.width(mlp_width(a.width)).dtype(setup.model.dtype()).device(device).seed(config.seed);
  setup.fit.seed(config.seed);
  if (setup.prune)
    setup.prune->steps = a.steps_after_prune.value_or(setup.fit.steps());
  if (a.symbolic) {
    if (a.lib)
      a.symbolic_stage.lib = symbolic_library(*a.lib);
    a.symbolic_stage.steps = a.symbolic_stage.steps.value_or(setup.fit.steps());
    setup.symbolic = a.symbolic_stage;
  }
  int64_t grid = setup.model.grid();
  for (const int64_t next : config.refine) {
    TORCH_CHECK(next > grid,
                "--refine: each grid must be larger than the one before it (the "
                "model's is ",
                setup.model.grid(), "), got ", next, " after ", grid);
    grid = next;
  }
  return initial;
}

// The user's --data, checked against the model's width before anything is trained (none: the
// reference function's samples, checked the same way).
std::optional<kan::LoadedDataset> load_data(FitArgs& a, torch::Device device,
                                            const char* model_source) {
  auto& config = a.config;
  auto& setup = a.setup;
  const auto& width =
      setup.model_kind == kan::ModelKind::kMLP ? setup.mlp.width() : setup.model.width();
  if (a.data.data.empty()) {
    const auto& function = kan::reference_function(config.function);
    TORCH_CHECK(width.front() == function.n_var, model_source, " starts with ", width.front(),
                " inputs but function '", config.function, "' has ", function.n_var, " variables");
    TORCH_CHECK(width.back() == 1, model_source,
                " must end in 1 output for a regression function, got ", width.back());
    return std::nullopt;
  }
  auto loaded = kan::load_dataset(
      a.data.data,
      a.data.load_options().seed(config.seed).dtype(setup.model.dtype()).device(device));
  try {
    kan::check_width(loaded, width.front(), width.back());
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, model_source, " ", kan::width_text(kan::pykan_width(setup.model)), ": ",
                e.what_without_backtrace());
  }
  config.function.clear();
  config.train_num = loaded.train_rows;
  config.test_num = loaded.test_rows;
  config.data = kan::results::FitDataRun{loaded.path,
                                         kan::to_string(loaded.format),
                                         loaded.input_names,
                                         loaded.target_names,
                                         a.data.test_data.empty() ? std::nullopt
                                                                  : std::optional(a.data.test_data),
                                         a.data.test_fraction,
                                         loaded.classes,
                                         loaded.description};
  return loaded;
}

// Refused before anything is allocated: a CPU run past the machine's memory is killed by the
// kernel without a word, a GPU run fails deep inside a step. (The estimate is a KAN's.)
void check_memory(const FitArgs& a, bool from_file) {
  const auto& config = a.config;
  const auto& setup = a.setup;
  if (setup.model_kind == kan::ModelKind::kMLP)
    return;
  try {
    kan::check_fits_in_memory(setup.model, setup.fit, config.train_num, config.test_num);
  } catch (const c10::OutOfMemoryError& e) {
    TORCH_CHECK(false, "--width ", a.width, " --grid ", setup.model.grid(),
                from_file ? " on --data's " : " --train-num ", config.train_num,
                from_file ? " training rows" : "", " --batch ", setup.fit.batch(),
                " does not fit: ", e.what_without_backtrace());
  }
}

kan::Dataset function_samples(const FitArgs& a, torch::Device device) {
  const auto& config = a.config;
  const auto& setup = a.setup;
  const auto& function = kan::reference_function(config.function);
  return kan::create_dataset(function.f, kan::DatasetOptions(function.n_var)
                                             .ranges(function.ranges)
                                             .train_num(config.train_num)
                                             .test_num(config.test_num)
                                             .seed(config.seed)
                                             .device(device)
                                             .dtype(setup.model.dtype()));
}

// One summary line of a KAN's fit, every stage's test metric, and the formula's lines.
std::pair<std::string, std::string> kan_summary(const kan::results::FitRecord& record,
                                                const std::string& subject, int64_t grid) {
  std::string summary = subject + " G=" + std::to_string(grid) + ": " + test_metric(record.trained);
  if (record.pruned)
    summary += ", pruned to " + kan::width_text(record.pruned->width_after) + ": " +
               test_metric(record.pruned->retrained);
  for (const auto& refined : record.refined)
    summary += ", refined " + subject + " G=" + std::to_string(refined.grid) + ": " +
               test_metric(refined.trained);
  std::string formulas;
  if (const auto& symbolic = record.symbolic) {
    summary += ", symbolic: " + test_metric(symbolic->retrained);
    if (symbolic->formula) {
      for (size_t out = 0; out < symbolic->formula->size(); ++out)
        formulas += "formula" +
                    (symbolic->formula->size() > 1 ? " y" + std::to_string(out + 1) : "") + ": " +
                    (*symbolic->formula)[out].sympy + "\n";
    } else {
      formulas = "no formula: " + symbolic->formula_error + "\n";
    }
  }
  return {summary, formulas};
}

// `kanbench fit` of a KAN: kan::run_pipeline with progress, its first training under the device
// audit, then fit.json, the checkpoint and the summary.
int run_kan_fit(FitArgs& a, kan::KAN model, const kan::Dataset& data,
                const std::shared_ptr<kan::DataParallel>& group, bool writes,
                const std::string& subject) {
  const auto& config = a.config;
  const auto& setup = a.setup;
  auto record = new_record(a);
  auto fit_options = setup.fit;
  fit_options.data_parallel(group);
  const Progress progress(subject, !writes);
  bool pruning = false; // between the prune stage's start and its retraining's first step
  auto pipeline =
      kan::PipelineOptions()
          .fit(fit_options)
          .prune(setup.prune)
          .grids(config.refine)
          .symbolic(setup.symbolic)
          .on_stage([&](const kan::PipelineStage& stage) {
            pruning = stage.kind == kan::PipelineStage::Kind::kPrune;
            progress.stage_begins(stage, setup.symbolic ? setup.symbolic->lib.size() : 0);
          })
          .on_stage_step([&](const kan::PipelineStage& stage, const kan::StepRecord& step) {
            pruning = false;
            progress(stage, step);
          });
  // The first training runs under the device audit (a trace of its first steps).
  pipeline.train([&](kan::KAN& m, const kan::Dataset& d, const kan::FitOptions& o,
                     const kan::PipelineStage& stage) {
    if (stage.kind != kan::PipelineStage::Kind::kTrain)
      return kan::fit(m, d, o);
    return audited_training(*m, d, o, config.trace_steps, record);
  });
  try {
    static_cast<kan::PipelineResult&>(record) = kan::run_pipeline(model, data, pipeline);
    record.parameters = model->parameter_count();
    record.forward_flops = model->forward_flops();
  } catch (const c10::Error& e) {
    // A threshold that prunes everything is the user's --prune, not a failure of the library.
    TORCH_CHECK(!pruning, "--prune ", setup.prune->node_th, ",", setup.prune->edge_th, ": ",
                e.what_without_backtrace());
    throw;
  }
  if (!writes)
    return 0;
  if (record.symbolic)
    std::fprintf(stderr, "auto_symbolic: %zu edges in %.1f s\n", record.symbolic->edges.size(),
                 record.symbolic->auto_symbolic_seconds);
  const auto [summary, formulas] = kan_summary(record, subject, setup.model.grid());
  const auto json_path = write_fit(record, *model, group.get(), a.out);
  std::cout << summary << " (" << run_details(record, a.setup.fit, *model, group.get()) << ") -> "
            << json_path << "\n"
            << formulas;
  return 0;
}

// `kanbench fit --model FILE`: the model in the file (a TorchScript module, or a kanbench
// checkpoint) trained once under the device audit, like the MLP baseline, and written back in its
// own format beside fit.json. A TorchScript model takes the data's input width.
int run_file_fit(FitArgs& a, torch::Device device, const std::shared_ptr<kan::DataParallel>& group,
                 bool writes) {
  auto& config = a.config;
  auto& setup = a.setup;
  std::optional<kan::LoadedDataset> loaded;
  int64_t inputs = 0;
  if (!a.data.data.empty()) {
    // Read in float64 and converted below: the model's dtype is known once it is open.
    loaded = kan::load_dataset(
        a.data.data, a.data.load_options().seed(config.seed).dtype(torch::kFloat64).device(device));
    inputs = loaded->inputs();
  } else {
    inputs = kan::reference_function(config.function).n_var;
  }
  const bool script = kan::model_file_kind(a.model) == kan::ModelFileKind::kTorchScript;
  auto model = kan::open_model(a.model, kan::ModelFileOptions()
                                            .device(device)
                                            .trust_torchscript(a.trust_torchscript)
                                            .inputs(script ? inputs : 0));
  if (!a.dtype.empty())
    model->module().to(kan::dtype_from_string(a.dtype));
  const auto source = "--model " + a.model;
  kan::Dataset data;
  if (loaded) {
    try {
      kan::check_width(*loaded, model->inputs(), model->outputs());
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, source, ": ", e.what_without_backtrace());
    }
    data = loaded->data.to(model->dtype());
    config.function.clear();
    config.train_num = loaded->train_rows;
    config.test_num = loaded->test_rows;
    config.data = kan::results::FitDataRun{
        loaded->path,
        kan::to_string(loaded->format),
        loaded->input_names,
        loaded->target_names,
        a.data.test_data.empty() ? std::nullopt : std::optional(a.data.test_data),
        a.data.test_fraction,
        loaded->classes,
        loaded->description};
  } else {
    const auto& function = kan::reference_function(config.function);
    TORCH_CHECK(model->inputs() == function.n_var, source, " takes ", model->inputs(),
                " inputs but function '", config.function, "' has ", function.n_var, " variables");
    TORCH_CHECK(model->outputs() == 1, source,
                " must end in 1 output for a regression "
                "function, got ",
                model->outputs());
    setup.model.dtype(model->dtype());
    data = function_samples(a, device);
  }
  TORCH_CHECK(model->kind() == kan::ModelKind::kKAN || setup.fit.lamb() == 0, "--lamb ",
              setup.fit.lamb(), ": the regulariser scores a KAN's edges; ", source, " holds ",
              kan::to_string(model->kind()) == "mlp" ? "an MLP" : "a TorchScript model",
              ", which has none");
  setup.model_kind = model->kind();
  if (const auto* kan_model = dynamic_cast<const kan::KANImpl*>(model.get()))
    setup.model = kan_model->options();
  else if (const auto* mlp = dynamic_cast<const kan::MLPImpl*>(model.get()))
    setup.mlp = mlp->options();
  else
    setup.script = model->config();
  setup.fit.seed(config.seed);
  config.initial_model = a.model;
  if (writes) {
    kan::io::check_output_folder(a.out, "--out");
    for (const char* name : {"model.pt", "fit.json"})
      kan::io::check_output_file((std::filesystem::path(a.out) / name).string(), "--out");
    if (loaded)
      std::fprintf(stderr, "data: %s\n", loaded->description.c_str());
  }
  const std::string subject =
      loaded ? std::filesystem::path(loaded->path).filename().string() : config.function;
  const std::string label = subject + " " + kan::to_string(model->kind());
  auto record = train_once(a, *model, data, group, writes, label);
  if (!writes)
    return 0;
  const auto json_path = write_fit(record, *model, group.get(), a.out);
  std::cout << label << " " << a.model << ": " << test_metric(record.trained) << " ("
            << *record.parameters << " parameters; "
            << run_details(record, a.setup.fit, *model, group.get()) << ") -> " << json_path
            << "\n";
  return 0;
}

int run_fit(FitArgs& a) {
  // Every kan phase, a data-parallel run's "communication" included, is an NVTX range during the
  // run, as in the suite and sweep runners.
  kan::diagnostics::NvtxScopes nvtx_scopes;
  auto& config = a.config;
  auto& setup = a.setup;
  auto device = parse_device(config.device);
  // Data-parallel: join the launch first, so that a bad launch fails before any work. Each rank
  // trains on its own device (cuda:LOCAL_RANK); rank 0 writes the outputs.
  std::shared_ptr<kan::DataParallel> group;
  if (a.distributed) {
    group = kan::DataParallel::join(kan::LaunchEnvironment::from_environment(), device,
                                    a.data_parallel);
    device = group->device();
    config.device = device.str();
    config.distributed =
        kan::results::FitDistributedRun{group->world_size(), group->backend_name()};
  }
  const bool writes = !group || group->rank() == 0;
  a.data.check_needs_data();
  // fit's width comes from --width, the model file or the data: --inputs selects columns only.
  TORCH_CHECK(a.data.inputs.empty() || !a.data.data.empty(),
              "--inputs needs --data (the file it reads)");
  setup.fit.loss(a.data.loss_kind());
  TORCH_CHECK(!a.data.data.empty() || setup.fit.loss() == kan::Loss::kMSE, "--loss ", a.data.loss,
              " needs --data (a file whose target column holds integer class labels): the "
              "reference functions are regressions");
  if (is_model_file(a))
    return run_file_fit(a, device, group, writes);
  auto initial = resolve_model(a, device);
  auto loaded = load_data(a, device, initial ? "the --pykan model" : "--width");
  if (writes) {
    kan::io::check_output_folder(a.out, "--out");
    for (const char* name : {"model.pt", "fit.json"})
      kan::io::check_output_file((std::filesystem::path(a.out) / name).string(), "--out");
  }
  check_memory(a, loaded.has_value());
  const kan::Dataset data = loaded ? std::move(loaded->data) : function_samples(a, device);
  if (loaded && writes)
    std::fprintf(stderr, "data: %s\n", loaded->description.c_str());
  // What progress and the summary call the run: the function, or the data file's name.
  const std::string subject =
      loaded ? std::filesystem::path(loaded->path).filename().string() : config.function;
  if (setup.model_kind == kan::ModelKind::kMLP)
    return run_mlp_fit(a, data, group, writes, subject);
  return run_kan_fit(a, initial ? *initial : kan::KAN(setup.model), data, group, writes, subject);
}

} // namespace

void add_fit_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FitArgs>();
  auto& config = args->config;
  auto& setup = args->setup;
  auto& model = setup.model;
  auto& fit = setup.fit;
  auto* cmd = app.add_subcommand("fit", "Train a KAN (pykan's fit), or the MLP baseline, on a "
                                        "reference function or a data file");
  std::vector<std::string> functions;
  for (const auto& f : kan::reference_functions())
    functions.push_back(f.name);
  auto* function = cmd->add_option("--function", config.function,
                                   "Target function (`kanbench functions` lists them)")
                       ->check(CLI::IsMember(functions))
                       ->capture_default_str();
  auto* data = add_data_options(
      cmd, args->data,
      "Train on this data file instead of --function: a CSV file, a NumPy .npy or .npz, or "
      "pykan's create_dataset dict saved with torch.save (docs/formats.md, \"Data files\")",
      "Loss: mse, or cross-entropy (--data's target: one column of integer class labels below "
      "the model's output count; accuracy reported)");
  data->excludes(function);
  auto* pykan = cmd->add_option("--pykan", config.initial_model,
                                "Start from this pykan checkpoint (the prefix given to pykan's "
                                "saveckpt) instead of a new model");
  cmd->add_option("--model", args->model,
                  "kan; mlp: the MLP baseline (nn::Linear layers of --width with --activation "
                  "between them), trained and recorded the same way, KAN-only options refused; "
                  "or a model FILE trained as it is and written back in its format as "
                  "DIR/model.pt: a TorchScript archive (with --trust-torchscript; its input "
                  "width is the data's) or a kanbench checkpoint")
      ->capture_default_str();
  add_trust_torchscript_flag(*cmd, args->trust_torchscript);
  add_enum_option(cmd, "--activation", setup.mlp.activation(),
                  {kan::Activation::kSiLU, kan::Activation::kTanh, kan::Activation::kReLU},
                  "--model mlp: the activation between layers");
  cmd->add_option("--width", args->width,
                  "Nodes per layer, comma separated; a layer with multiplication nodes as "
                  "[addition,multiplication], e.g. 2,[2,1],1 (quote it for the shell); with "
                  "--model mlp the MLP's layer widths, e.g. 2,100,100,1")
      ->capture_default_str()
      ->excludes(pykan);
  cmd->add_option("--mult-arity", args->mult_arity,
                  "Subnodes each multiplication node multiplies: one arity (3), or one per node "
                  "(2,3); default 2")
      ->excludes(pykan);
  cmd->add_flag_callback(
         "--affine-trainable", [&model] { model.affine_trainable(true); },
         "Train the node and subnode affine parameters (pykan's affine_trainable)")
      ->excludes(pykan);
  cmd->add_option("--grid", model.grid(), "Grid intervals G")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(pykan);
  cmd->add_option("--k", model.k(), "Spline order k")
      ->excludes(pykan)
      ->check(integer_at_least(0))
      ->capture_default_str();
  add_enum_option(cmd, "--backend", model.backend(),
                  {kan::SplineBackend::kReference, kan::SplineBackend::kFused}, "Spline backend");
  add_enum_option(cmd, "--opt", fit.opt(), {kan::Optimizer::kLBFGS, kan::Optimizer::kAdam},
                  "Optimiser");
  cmd->add_option("--steps", fit.steps(), "Optimisation steps")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--lr", fit.lr(), "Learning rate")
      ->check(finite_number(0, /*exclusive=*/true))
      ->capture_default_str();
  cmd->add_option("--batch", fit.batch(), "Samples per step, -1 = full batch")
      ->check(integer_at_least(-1))
      ->capture_default_str();
  add_enum_option(cmd, "--batch-draw", fit.batch_draw(),
                  {kan::BatchDraw::kPerStep, kan::BatchDraw::kPerEpoch},
                  "per_step: a fresh draw each step (pykan); per_epoch: one permutation per pass "
                  "over the training set");
  cmd->add_option("--lamb", fit.lamb(), "Regularisation strength")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-l1", fit.lamb_l1(), "Weight of the L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-entropy", fit.lamb_entropy(), "Weight of the entropy term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coef", fit.lamb_coef(), "Weight of the coef L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coefdiff", fit.lamb_coefdiff(), "Weight of the coef smoothness term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_flag_callback(
      "--no-update-grid", [&fit] { fit.update_grid(false); },
      "Keep the grids fixed during training");
  cmd->add_option("--grid-update-num", fit.grid_update_num(), "Grid updates before the stop step")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--stop-grid-update-step", fit.stop_grid_update_step(),
                  "No grid update from this step on")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--seed", config.seed, "Seed of data, model and minibatches")
      ->check(unsigned_64())
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "Floating type (default float64; with --pykan, the checkpoint's)")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->add_option("--device", config.device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--refine", config.refine,
                  "After training (and pruning), refine to each grid in turn and train again at "
                  "each: one grid (10) or a schedule (5,10,20, the KAN paper's grid extension)")
      ->delimiter(',')
      ->check(integer_at_least(1));
  auto* prune = add_number_pair_option(
      cmd, "--prune",
      [&setup](double node_th, double edge_th) {
        setup.prune = kan::PruneStage{node_th, edge_th, std::nullopt};
      },
      "NODE_TH,EDGE_TH", 0,
      "After training (before --refine), prune as pykan's prune(node_th, edge_th) on the "
      "training inputs and train again");
  cmd->add_option_function<int64_t>(
         "--steps-after-prune", [args](int64_t steps) { args->steps_after_prune = steps; },
         "Steps of the training after --prune (default: --steps)")
      ->check(integer_at_least(0))
      ->needs(prune);
  auto* symbolic = cmd->add_flag("--symbolic", args->symbolic,
                                 "After the other stages, pykan's auto_symbolic on the training "
                                 "inputs (every edge to its best library function), train "
                                 "again, and write the formula");
  cmd->add_option_function<std::string>(
         "--lib", [args](const std::string& names) { args->lib = names; },
         "--symbolic's library, comma separated (default: all of pykan's), e.g. "
         "x,x^2,x^3,x^4,exp,log,sqrt,tanh,sin,abs")
      ->needs(symbolic);
  cmd->add_option("--r2-threshold", args->symbolic_stage.r2_threshold,
                  "--symbolic: an edge whose best R^2 is below this stays numeric (pykan's "
                  "default 0)")
      ->check(finite_number(-1e300))
      ->needs(symbolic);
  cmd->add_option("--weight-simple", args->symbolic_stage.weight_simple,
                  "--symbolic: weight of simplicity against R^2 in the choice, in [0, 1] "
                  "(pykan's default 0.8)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(symbolic);
  cmd->add_option("--symbolic-search", args->symbolic_stage.search,
                  "--symbolic: how each edge's (a, b) is searched: pykan (pykan's 101 x 101 grid, "
                  "3 searches), zoom (21-point zoomed searches, 5 searches) or newton (the first "
                  "search, then Newton steps: fastest on deep models)")
      ->check(CLI::IsMember(kan::symbolic_search_names()))
      ->capture_default_str()
      ->needs(symbolic);
  cmd->add_option_function<int64_t>(
         "--steps-after-symbolic", [args](int64_t steps) { args->symbolic_stage.steps = steps; },
         "Steps of the training after --symbolic (default: --steps)")
      ->check(integer_at_least(0))
      ->needs(symbolic);
  auto* distributed = cmd->add_flag(
      "--distributed", args->distributed,
      "Train data-parallel as one rank of a torchrun launch (RANK, WORLD_SIZE, LOCAL_RANK, "
      "MASTER_ADDR, MASTER_PORT): Gloo on the CPU, NCCL on cuda:LOCAL_RANK; rank 0 writes --out "
      "(docs/distributed.md)");
  cmd->add_option_function<double>(
         "--distributed-timeout",
         [args](double seconds) { args->data_parallel.timeout_seconds(seconds); },
         "--distributed: seconds a rank waits for the others before it fails (default 300)")
      ->check(CLI::PositiveNumber)
      ->needs(distributed);
  cmd->add_option("--train-num", config.train_num, "Training samples of --function")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(data);
  cmd->add_option("--test-num", config.test_num, "Test samples of --function")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(data);
  cmd->add_option("--trace-steps", config.trace_steps,
                  "Trace the device of every operation in the first N steps (0: off)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Output folder for fit.json and model.pt")
      ->capture_default_str();
  cmd->callback([args, cmd, &exit_code] {
    if (args->model == "mlp")
      args->setup.model_kind = kan::ModelKind::kMLP;
    check_model_options(*cmd, *args);
    exit_code = run_fit(*args);
  });
}

} // namespace kanbench
