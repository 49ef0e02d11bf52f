#include "kan/bench/fit.h"

#include "kan/data/data_file.h"
#include "kan/data/function_catalogue.h"
#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/nvtx.h"
#include "kan/io/atomic_file.h"
#include "kan/io/text.h"
#include "kan/nn/memory.h"
#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/pykan.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <filesystem>
#include <utility>

namespace kan::bench {
namespace {

using io::first_line;

// model.pt and fit.json are one unit: both are written and synced as temporaries first, so a
// full disk leaves both old files; only the two renames remain, and if the second one fails
// the stale fit.json is removed and the error says so.
void write_outputs(const Model& model, const std::string& checkpoint_path,
                   const std::string& json_path, const std::string& json_text) {
  io::AtomicFile checkpoint(checkpoint_path), json(json_path);
  try {
    save_model(model, [&](const void* data, size_t size) { checkpoint.write(data, size); });
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

// A run of one request: the model, the data and the record as they are resolved.
class FitRun {
public:
  FitRun(FitRequest request, const FitProgress& progress)
      : r_(std::move(request)), progress_(progress), writes_(!r_.group || r_.group->rank() == 0) {
    if (r_.group) {
      r_.device = r_.group->device();
      r_.config.device = r_.device.str();
      r_.config.distributed =
          results::FitDistributedRun{r_.group->world_size(), r_.group->backend_name()};
    }
    if (!writes_) { // rank 0 alone reports progress: every rank has the same record
      progress_.on_start = nullptr;
      progress_.on_data = nullptr;
      progress_.on_stage = nullptr;
      progress_.on_step = nullptr;
    }
  }

  FitOutcome run() {
    if (!r_.model_file.empty())
      return run_file_fit();
    auto initial = resolve_model();
    auto loaded = load_data(initial ? "the --pykan model" : "--width");
    if (writes_)
      check_outputs();
    check_memory(loaded.has_value());
    const Dataset data = loaded ? std::move(loaded->data) : function_samples();
    if (loaded && progress_.on_data)
      progress_.on_data(loaded->description);
    start(loaded ? std::filesystem::path(loaded->path).filename().string() : r_.config.function,
          r_.setup.model_kind);
    if (r_.setup.model_kind == ModelKind::kMLP) {
      MLP model(r_.setup.mlp);
      return finish(train_once(*model, data), *model);
    }
    return run_kan_fit(initial ? *initial : KAN(r_.setup.model), data);
  }

private:
  // fit.json before anything is measured: what runs, and on what.
  results::FitRecord new_record() const {
    results::FitRecord record;
    record.config = r_.config;
    diagnostics::write_fit_setup(r_.setup, record.config);
    record.libtorch = TORCH_VERSION;
    record.threads = at::get_num_threads();
    return record;
  }

  void check_outputs() const {
    io::check_output_folder(r_.out, "--out");
    for (const char* name : {"model.pt", "fit.json"})
      io::check_output_file((std::filesystem::path(r_.out) / name).string(), "--out");
  }

  void start(std::string subject, ModelKind kind) {
    subject_ = std::move(subject);
    if (progress_.on_start)
      progress_.on_start(subject_, kind);
  }

  // The data file in the record, in place of the reference function.
  void record_data(const LoadedDataset& loaded) {
    r_.config.function.clear();
    r_.config.train_num = loaded.train_rows;
    r_.config.test_num = loaded.test_rows;
    const auto& o = r_.data_options;
    r_.config.data =
        results::FitDataRun{loaded.path,
                            to_string(loaded.format),
                            loaded.input_names,
                            loaded.target_names,
                            o.test_data().empty() ? std::nullopt : std::optional(o.test_data()),
                            o.test_fraction(),
                            loaded.classes,
                            loaded.description};
  }

  // The model's options from --pykan (its model, in --dtype when given) or the request's, and
  // the later stages' from theirs. Returns the --pykan model.
  std::optional<KAN> resolve_model() {
    auto& config = r_.config;
    auto& setup = r_.setup;
    std::optional<KAN> initial;
    if (!config.initial_model.empty()) {
      initial = load_pykan(config.initial_model, r_.device);
      if (r_.dtype)
        (*initial)->to(*r_.dtype);
      setup.model = (*initial)->options();
      setup.model.dtype((*initial)->dtype());
    } else {
      setup.model.dtype(r_.dtype.value_or(torch::kFloat64));
    }
    setup.model.device(r_.device).seed(config.seed);
    if (setup.model_kind == ModelKind::kMLP)
      setup.mlp.dtype(setup.model.dtype()).device(r_.device).seed(config.seed);
    setup.fit.seed(config.seed);
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

  // The data file, checked against the model's width before anything is trained (none: the
  // reference function, checked the same way).
  std::optional<LoadedDataset> load_data(const char* model_source) {
    const auto& config = r_.config;
    const auto& setup = r_.setup;
    const auto& width =
        setup.model_kind == ModelKind::kMLP ? setup.mlp.width() : setup.model.width();
    if (r_.data.empty()) {
      const auto& function = reference_function(config.function);
      TORCH_CHECK(width.front() == function.n_var, model_source, " starts with ", width.front(),
                  " inputs but function '", config.function, "' has ", function.n_var,
                  " variables");
      TORCH_CHECK(width.back() == 1, model_source,
                  " must end in 1 output for a regression function, got ", width.back());
      return std::nullopt;
    }
    auto options = r_.data_options;
    auto loaded = load_dataset(
        r_.data, options.seed(config.seed).dtype(setup.model.dtype()).device(r_.device));
    try {
      check_width(loaded, width.front(), width.back());
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, model_source, " ", width_text(pykan_width(setup.model)), ": ",
                  e.what_without_backtrace());
    }
    record_data(loaded);
    return loaded;
  }

  // Refused before anything is allocated: a CPU run past the machine's memory is killed by the
  // kernel without a word, a GPU run fails deep inside a step. (The estimate is a KAN's.)
  void check_memory(bool from_file) const {
    const auto& config = r_.config;
    const auto& setup = r_.setup;
    if (setup.model_kind == ModelKind::kMLP)
      return;
    try {
      check_fits_in_memory(setup.model, setup.fit, config.train_num, config.test_num);
    } catch (const c10::OutOfMemoryError& e) {
      TORCH_CHECK(false, "--width ", width_text(pykan_width(setup.model)), " --grid ",
                  setup.model.grid(), from_file ? " on --data's " : " --train-num ",
                  config.train_num, from_file ? " training rows" : "", " --batch ",
                  setup.fit.batch(), " does not fit: ", e.what_without_backtrace());
    }
  }

  Dataset function_samples() const {
    const auto& function = reference_function(r_.config.function);
    return create_dataset(function.f, DatasetOptions(function.n_var)
                                          .ranges(function.ranges)
                                          .train_num(r_.config.train_num)
                                          .test_num(r_.config.test_num)
                                          .seed(r_.config.seed)
                                          .device(r_.device)
                                          .dtype(r_.setup.model.dtype()));
  }

  // The options of the fit itself, with the group's gradient sync.
  FitOptions fit_options() const {
    auto options = r_.setup.fit;
    options.data_parallel(r_.group);
    return options;
  }

  // The first training under the device audit (a trace of its first steps): the audit goes into
  // the record, the history to the pipeline.
  FitHistory audited_training(Model& model, const Dataset& data, const FitOptions& options,
                              results::FitRecord& record) const {
    auto audited = diagnostics::audited_fit(model, data, options, r_.config.trace_steps);
    if (progress_.on_audit)
      progress_.on_audit(audited);
    record.device_audit = audited.to_json();
    return std::move(audited.history);
  }

  // One stage of training under the device audit (the MLP baseline, a model file's model), with
  // progress: fit.json's record of it.
  results::FitRecord train_once(Model& model, const Dataset& data) const {
    auto record = new_record();
    auto options = fit_options();
    const PipelineStage stage{PipelineStage::Kind::kTrain, 0, r_.setup.fit.steps()};
    if (progress_.on_step)
      options.on_step(
          [&](const StepRecord& step, int64_t /*total*/) { progress_.on_step(stage, step); });
    record.trained =
        train_stage(model, data, options, [&](Model& m, const Dataset& d, const FitOptions& o) {
          return audited_training(m, d, o, record);
        });
    return record;
  }

  // A KAN: kan::run_pipeline, its first training under the device audit.
  FitOutcome run_kan_fit(KAN model, const Dataset& data) const {
    const auto& setup = r_.setup;
    auto record = new_record();
    bool pruning = false; // between the prune stage's start and its retraining's first step
    auto pipeline =
        PipelineOptions()
            .fit(fit_options())
            .prune(setup.prune)
            .grids(r_.config.refine)
            .symbolic(setup.symbolic)
            .on_stage([&](const PipelineStage& stage) {
              pruning = stage.kind == PipelineStage::Kind::kPrune;
              if (progress_.on_stage)
                progress_.on_stage(stage, setup.symbolic ? setup.symbolic->lib.size() : 0);
            })
            .on_stage_step([&](const PipelineStage& stage, const StepRecord& step) {
              pruning = false;
              if (progress_.on_step)
                progress_.on_step(stage, step);
            });
    pipeline.train([&](KAN& m, const Dataset& d, const FitOptions& o, const PipelineStage& stage) {
      if (stage.kind != PipelineStage::Kind::kTrain)
        return fit(m, d, o);
      return audited_training(*m, d, o, record);
    });
    try {
      static_cast<PipelineResult&>(record) = run_pipeline(model, data, pipeline);
    } catch (const c10::Error& e) {
      // A threshold that prunes everything is the user's --prune, not a failure of the library.
      TORCH_CHECK(!pruning, "--prune ", setup.prune->node_th, ",", setup.prune->edge_th, ": ",
                  e.what_without_backtrace());
      throw;
    }
    return finish(std::move(record), *model);
  }

  // A model file's model (a TorchScript module, or a kanbench checkpoint) trained once under the
  // device audit, like the MLP baseline, and written back in its own format beside fit.json. A
  // TorchScript model takes the data's input width.
  FitOutcome run_file_fit() {
    auto& config = r_.config;
    auto& setup = r_.setup;
    std::optional<LoadedDataset> loaded;
    int64_t inputs = 0;
    if (!r_.data.empty()) {
      // Read in float64 and converted below: the model's dtype is known once it is open.
      auto options = r_.data_options;
      loaded =
          load_dataset(r_.data, options.seed(config.seed).dtype(torch::kFloat64).device(r_.device));
      inputs = loaded->inputs();
    } else {
      inputs = reference_function(config.function).n_var;
    }
    const bool script = model_file_kind(r_.model_file) == ModelFileKind::kTorchScript;
    auto model = open_model(r_.model_file, ModelFileOptions()
                                               .device(r_.device)
                                               .trust_torchscript(r_.trust_torchscript)
                                               .inputs(script ? inputs : 0));
    if (r_.dtype)
      model->module().to(*r_.dtype);
    const auto source = "--model " + r_.model_file;
    Dataset data;
    if (loaded) {
      try {
        check_width(*loaded, model->inputs(), model->outputs());
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, source, ": ", e.what_without_backtrace());
      }
      data = loaded->data.to(model->dtype());
      record_data(*loaded);
    } else {
      const auto& function = reference_function(config.function);
      TORCH_CHECK(model->inputs() == function.n_var, source, " takes ", model->inputs(),
                  " inputs but function '", config.function, "' has ", function.n_var,
                  " variables");
      TORCH_CHECK(model->outputs() == 1, source,
                  " must end in 1 output for a regression "
                  "function, got ",
                  model->outputs());
      setup.model.dtype(model->dtype());
      data = function_samples();
    }
    TORCH_CHECK(model->kind() == ModelKind::kKAN || setup.fit.lamb() == 0, "--lamb ",
                setup.fit.lamb(), ": the regulariser scores a KAN's edges; ", source, " holds ",
                to_string(model->kind()) == "mlp" ? "an MLP" : "a TorchScript model",
                ", which has none");
    setup.model_kind = model->kind();
    if (const auto* kan_model = dynamic_cast<const KANImpl*>(model.get()))
      setup.model = kan_model->options();
    else if (const auto* mlp = dynamic_cast<const MLPImpl*>(model.get()))
      setup.mlp = mlp->options();
    else
      setup.script = model->config();
    setup.fit.seed(config.seed);
    config.initial_model = r_.model_file;
    if (writes_)
      check_outputs();
    if (loaded && progress_.on_data)
      progress_.on_data(loaded->description);
    start(loaded ? std::filesystem::path(loaded->path).filename().string() : config.function,
          model->kind());
    return finish(train_once(*model, data), *model);
  }

  // A fit's last steps, for every kind of model: the model's size and, on rank 0, the
  // collectives' cost recorded, then fit.json and the checkpoint written.
  FitOutcome finish(results::FitRecord record, const Model& model) const {
    record.parameters = model.parameter_count();
    record.forward_flops = model.forward_flops();
    FitOutcome outcome;
    outcome.subject = subject_;
    outcome.dtype = model.dtype();
    outcome.device = model.device();
    if (writes_) {
      if (r_.group) {
        const auto& stats = r_.group->stats();
        record.communication =
            results::FitCommunication{stats.collectives, stats.bytes, stats.wait_seconds};
      }
      outcome.fit_json = (std::filesystem::path(r_.out) / "fit.json").string();
      write_outputs(model, (std::filesystem::path(r_.out) / record.checkpoint).string(),
                    outcome.fit_json, results::to_json(record).dump(2) + "\n");
    }
    outcome.record = std::move(record);
    return outcome;
  }

  FitRequest r_;
  FitProgress progress_;
  bool writes_;
  std::string subject_;
};

} // namespace

FitOutcome run_fit(FitRequest request, const FitProgress& progress) {
  // Every kan phase, a data-parallel run's "communication" included, is an NVTX range during the
  // run, as in the suite and sweep runners.
  diagnostics::NvtxScopes nvtx_scopes;
  return FitRun(std::move(request), progress).run();
}

} // namespace kan::bench
