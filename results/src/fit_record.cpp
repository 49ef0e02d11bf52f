#include "kan/results/fit_record.h"

#include "kan/io/json_fields.h"
#include "kan/results/results_io.h"

#include <algorithm>
#include <cmath>
#include <limits>

// Each struct's keys, for both directions (kan/io/json_fields.h). They are static: this file is
// their one user. Argument-dependent lookup finds them in their structs' namespace: kan for the
// records training returns (kan/train/records.h), kan::results for the rest of the document.
namespace kan {

using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;
using results::to_string;
using results::width_from_json;
using results::width_json;

template <typename Fields, typename Record> static void metric_fields(Fields& f, Record& r) {
  f.metric("train_loss", r.train_loss, Bound::kAny);
  f.metric("test_loss", r.test_loss, Bound::kAny);
  f.metric("train_rmse", r.train_rmse, Bound::kAny);
  f.metric("test_rmse", r.test_rmse, Bound::kAny);
  f.metric("test_accuracy", r.test_accuracy, Bound::kAny);
  f.required("reg", r.reg);
  f.required("seconds", r.seconds, Bound::kNonNegative);
}

template <typename Fields> static void fields(Fields& f, StepRecord& s) {
  f.required("step", s.step, Bound::kNonNegative);
  metric_fields(f, s);
  f.required("grid_updated", s.grid_updated);
  f.defaulted("evaluations", s.evaluations, Bound::kNonNegative);
}

template <typename Fields> static void fields(Fields& f, EpochRecord& e) {
  f.required("epoch", e.epoch, Bound::kNonNegative);
  f.required("last_step", e.last_step, Bound::kNonNegative);
  metric_fields(f, e);
  f.required("epoch_seconds", e.epoch_seconds, Bound::kNonNegative);
}

template <typename Fields> static void fields(Fields& f, FitHistory& h) {
  f.required("steps", h.steps);
  f.required("epochs", h.epochs);
  f.required("grid_updates", h.grid_updates, Bound::kNonNegative);
  f.required("seconds", h.seconds, Bound::kNonNegative);
}

// A stage's keys sit in the object of the stage that holds it (fit.json's top level holds the
// first training's).
template <typename Fields> static void stage_fields(Fields& f, StageResult& s) {
  f.required("history", s.history);
  f.metric("train_rmse", s.train_rmse);
  f.metric("test_rmse", s.test_rmse);
  f.metric("train_accuracy", s.train_accuracy);
  f.metric("test_accuracy", s.test_accuracy);
}

// Scores per layer: one number per node of `width`.
static void check_node_scores(const std::vector<std::vector<double>>& scores,
                              const std::vector<LayerWidth>& width, const std::string& path) {
  if (scores.size() != width.size())
    io::fail(path, "expected one list per layer (" + std::to_string(width.size()) + "), got " +
                       std::to_string(scores.size()));
  for (size_t l = 0; l < scores.size(); ++l)
    if (static_cast<int64_t>(scores[l].size()) != width[l].nodes())
      io::fail(io::index_path(path, l), "expected one score per node (" +
                                            std::to_string(width[l].nodes()) + "), got " +
                                            std::to_string(scores[l].size()));
}

// prune_edge's scores: per layer of the pruned model, one row per node of its layer, rows of one
// length.
static void check_edge_scores(const std::vector<std::vector<std::vector<double>>>& scores,
                              const std::vector<LayerWidth>& after, const std::string& path) {
  if (scores.size() + 1 != after.size())
    io::fail(path, "expected one list per layer of width_after (" +
                       std::to_string(after.size() - 1) + "), got " +
                       std::to_string(scores.size()));
  for (size_t l = 0; l < scores.size(); ++l) {
    const auto at = io::index_path(path, l);
    if (static_cast<int64_t>(scores[l].size()) != after[l].nodes())
      io::fail(at, "expected one row per node of layer " + std::to_string(l) + " (" +
                       std::to_string(after[l].nodes()) + "), got " +
                       std::to_string(scores[l].size()));
    for (size_t i = 0; i < scores[l].size(); ++i)
      if (scores[l][i].size() != scores[l][0].size())
        io::fail(io::index_path(at, i), "has " + std::to_string(scores[l][i].size()) +
                                            " scores but row 0 has " +
                                            std::to_string(scores[l][0].size()));
  }
}

// The pruning's widths and scores fit the model it pruned: width_after is its width with hidden
// nodes removed.
static void check_pruning(const PruneResult& p, const std::vector<LayerWidth>& model) {
  const auto& before = p.width_before;
  const auto& after = p.width_after;
  if (before != model)
    io::fail("pruned.width_before",
             "is " + to_string(before) + " but config.model's width is " + to_string(model));
  bool fewer = after.size() == before.size() && after.size() >= 2 &&
               after.front() == before.front() && after.back() == before.back();
  for (size_t l = 0; fewer && l < after.size(); ++l)
    fewer = after[l].sum <= before[l].sum && after[l].mult <= before[l].mult;
  if (!fewer)
    io::fail("pruned.width_after",
             io::elided(width_json(after).dump(), io::kQuotedChars, /*say_length=*/true) +
                 " is not width_before " +
                 io::elided(width_json(before).dump(), io::kQuotedChars, /*say_length=*/true) +
                 " with hidden nodes removed");
  check_node_scores(p.node_scores, before, "pruned.node_scores");
  check_edge_scores(p.edge_scores, after, "pruned.edge_scores");
}

// What the stages say of the model and the schedule, checked as each is read.
static void check_symbolic(const SymbolicResult& s, const std::vector<LayerWidth>& model) {
  if (!s.formula)
    return;
  const auto outputs = static_cast<size_t>(model.back().nodes());
  if (s.formula->size() != outputs)
    io::fail("symbolic.formula", "expected one formula per output (" + std::to_string(outputs) +
                                     "), got " + std::to_string(s.formula->size()));
}

static void check_schedule(const std::vector<RefineResult>& refined,
                           const std::vector<int64_t>& configured) {
  std::vector<int64_t> grids;
  for (const auto& stage : refined)
    grids.push_back(stage.grid);
  if (grids != configured)
    io::fail("refined[].grid",
             "is " + json(grids).dump() + " but config.refine is " + json(configured).dump());
}

template <typename Fields> static void fields(Fields& f, PruneResult& p) {
  stage_fields(f, p.retrained);
  f.custom("width_before", p.width_before, width_json, width_from_json);
  f.custom("width_after", p.width_after, width_json, width_from_json);
  f.required("node_scores", p.node_scores, Bound::kNonNegative);
  f.required("edge_scores", p.edge_scores, Bound::kNonNegative);
  f.repeats("seconds", p.retrained.history.seconds, "pruned.history.seconds");
}

template <typename Fields> static void fields(Fields& f, RefineResult& r) {
  stage_fields(f, r.trained);
  f.required("grid", r.grid, Bound::kNonNegative);
  f.repeats("seconds", r.trained.history.seconds, f.path_of("history.seconds"));
}

template <typename Fields> static void fields(Fields& f, SymbolicCurve& c) {
  f.required("x", c.x);
  f.required("activation", c.activation);
  f.required("fit", c.fit);
  if constexpr (Fields::reading())
    if (c.activation.size() != c.x.size() || c.fit.size() != c.x.size())
      io::fail(f.object().path(), "x, activation and fit must have one value per point, got " +
                                      std::to_string(c.x.size()) + ", " +
                                      std::to_string(c.activation.size()) + " and " +
                                      std::to_string(c.fit.size()));
}

template <typename Fields> static void fields(Fields& f, SymbolicEdgeResult& e) {
  f.required("layer", e.layer, Bound::kNonNegative);
  f.required("i", e.i, Bound::kNonNegative);
  f.required("j", e.j, Bound::kNonNegative);
  f.required("function", e.function);
  f.required("r2", e.r2);
  f.required("fixed", e.fixed);
  // a, b, c, d: a fixed edge's, and only a fixed edge's.
  if (e.fixed)
    f.required("params", e.params);
  if constexpr (Fields::reading())
    if (e.fixed && e.params.size() != 4)
      io::fail(f.path_of("params"),
               "expected a, b, c, d (4 numbers), got " + std::to_string(e.params.size()));
  f.optional("curve", e.curve);
}

template <typename Fields> static void fields(Fields& f, Formula& formula) {
  f.required("sympy", formula.sympy);
  f.required("latex", formula.latex);
  f.required("sympy_exact", formula.sympy_exact);
}

template <typename Fields> static void fields(Fields& f, SymbolicResult& s) {
  stage_fields(f, s.retrained);
  f.required("auto_symbolic_seconds", s.auto_symbolic_seconds, Bound::kNonNegative);
  f.required("edges", s.edges);
  // No formula (null) comes with why.
  f.nullable("formula", s.formula);
  if (!s.formula)
    f.required("formula_error", s.formula_error);
  f.required("digits", s.digits, Bound::kNonNegative);
  f.repeats("seconds", s.retrained.history.seconds, "symbolic.history.seconds");
}

namespace results {

template <typename Fields> static void fields(Fields& f, FitDataRun& d) {
  f.required("path", d.path);
  f.required("format", d.format);
  f.required("inputs", d.inputs);
  f.required("targets", d.targets);
  f.nullable("test_data", d.test_data);
  f.nullable("test_fraction", d.test_fraction, Bound::kNonNegative);
  f.required("classes", d.classes, Bound::kNonNegative);
  f.required("description", d.description);
  if constexpr (Fields::reading())
    if (d.inputs.empty() || d.targets.empty())
      io::fail(f.path_of(d.inputs.empty() ? "inputs" : "targets"), "no columns");
}

template <typename Fields> static void fields(Fields& f, FitDistributedRun& d) {
  f.required("world_size", d.world_size, Bound::kNonNegative);
  f.required("backend", d.backend);
}

template <typename Fields> static void fields(Fields& f, FitCommunication& c) {
  f.required("collectives", c.collectives, Bound::kNonNegative);
  f.required("bytes", c.bytes, Bound::kNonNegative);
  f.required("wait_seconds", c.wait_seconds, Bound::kNonNegative);
}

// An embedded document of LibTorch's side: an object (or, where `nullable`, null), read whole.
static void check_embedded(const json& value, const std::string& path, bool nullable) {
  if (!value.is_object() && !(nullable && value.is_null()))
    io::fail(path, std::string("expected an object") + (nullable ? " or null" : "") + ", got " +
                       io::describe(value));
}

template <typename Fields> static void fields(Fields& f, FitConfig& c) {
  // A fit on a data file has no function (null).
  f.nullable("data", c.data);
  if constexpr (Fields::reading()) {
    if (!c.data)
      f.required("function", c.function);
    else if (c.function.clear(); !f.object().required("function").is_null())
      io::fail(f.path_of("function"), "must be null when config.data names a data file");
  } else {
    f.required("function", c.data ? json(nullptr) : json(c.function));
  }
  f.required("train_num", c.train_num, Bound::kNonNegative);
  f.required("test_num", c.test_num, Bound::kNonNegative);
  f.required("seed", c.seed);
  f.required("device", c.device);
  f.required("refine", c.refine, Bound::kNonNegative);
  f.required("prune", c.prune);
  f.required("symbolic", c.symbolic);
  f.nullable("distributed", c.distributed);
  f.required("trace_steps", c.trace_steps, Bound::kNonNegative);
  f.required("model_kind", c.model_kind);
  f.required("model", c.model);
  f.required("fit", c.fit);
  f.optional("initial_model", c.initial_model);
  if constexpr (Fields::reading()) {
    check_embedded(c.prune, f.path_of("prune"), true);
    check_embedded(c.symbolic, f.path_of("symbolic"), true);
    check_embedded(c.model, f.path_of("model"), false);
    check_embedded(c.fit, f.path_of("fit"), false);
    if (c.model_kind != "kan" && c.model_kind != "mlp" && c.model_kind != "torchscript")
      io::fail(f.path_of("model_kind"),
               "expected \"kan\", \"mlp\" or \"torchscript\", got " + io::quoted(c.model_kind));
    // An MLP or a TorchScript module trains once: the pipeline's later stages are a KAN's.
    if (c.model_kind != "kan" && (!c.prune.is_null() || !c.symbolic.is_null() || !c.refine.empty()))
      io::fail(f.path_of(!c.prune.is_null()      ? "prune"
                         : !c.symbolic.is_null() ? "symbolic"
                                                 : "refine"),
               "set, but config.model_kind is " + io::quoted(c.model_kind) +
                   ": only a KAN has pruning, refinement or a symbolic stage");
  }
}

// An optional stage `key`: present exactly when its configuration (`config_key`) asks for it.
template <typename Fields, typename Stage>
static void stage(Fields& f, const char* key, std::optional<Stage>& value, bool configured,
                  const char* config_key) {
  f.optional(key, value);
  if constexpr (Fields::reading()) {
    if (configured && !value)
      io::fail(key, std::string("missing, but ") + config_key + " is set");
    if (!configured && value)
      io::fail(key, std::string("present, but ") + config_key + " is null");
  }
}

// `final`: the last stage's metrics, repeated for readers that want one number, and the final
// model's size.
static json final_json(const FitRecord& f) {
  json j = json::object();
  io::JsonWriter writer(j);
  stage_fields(writer, const_cast<StageResult&>(f.last()));
  j.erase("history");
  j["stage"] = f.last_key();
  if (f.parameters)
    j["parameters"] = *f.parameters;
  if (f.forward_flops)
    j["forward_flops"] = *f.forward_flops;
  return j;
}

static void read_final(io::JsonReader& f, FitRecord& record) {
  const auto& value = f.object().required("final");
  ObjectReader size(value, "final", /*allow_unknown=*/true);
  record.parameters = size.optional_integer("parameters", Bound::kNonNegative);
  record.forward_flops = size.optional_integer("forward_flops", Bound::kNonNegative);
  if (record.parameters.has_value() != record.forward_flops.has_value())
    io::fail(record.parameters ? "final.forward_flops" : "final.parameters",
             "missing, but final." +
                 std::string(record.parameters ? "parameters" : "forward_flops") + " is given");
  f.repeats("final", final_json(record), "the last stage");
}

template <typename Fields> static void fields(Fields& f, FitRecord& r) {
  f.required("schema_version", r.schema_version);
  if constexpr (Fields::reading()) {
    if (const auto command = f.object().string("command"); command != "fit")
      io::fail(f.path_of("command"), "expected \"fit\", got " + io::quoted(command));
  } else {
    f.required("command", std::string("fit"));
  }
  f.required("config", r.config);
  if constexpr (Fields::reading()) {
    ObjectReader e(f.object().required("environment"), "environment", f.lenient());
    r.libtorch = e.string("libtorch");
    r.threads = e.integer("threads", Bound::kNonNegative);
    if (const auto device = e.string("device"); device != r.config.device)
      io::fail(e.path_of("device"),
               "is " + io::quoted(device) + " but config.device is " + io::quoted(r.config.device));
    e.finish();
  } else {
    f.required("environment",
               json{{"libtorch", r.libtorch}, {"threads", r.threads}, {"device", r.config.device}});
  }
  f.required("device_audit", r.device_audit);
  stage_fields(f, r.trained);
  stage(f, "pruned", r.pruned, !r.config.prune.is_null(), "config.prune");
  f.required("refined", r.refined);
  stage(f, "symbolic", r.symbolic, !r.config.symbolic.is_null(), "config.symbolic");
  if constexpr (Fields::reading()) {
    const auto width = model_shape(r.config).width;
    if (r.pruned)
      check_pruning(*r.pruned, width);
    check_schedule(r.refined, r.config.refine);
    if (r.symbolic)
      check_symbolic(*r.symbolic, width);
  }
  stage(f, "communication", r.communication, r.config.distributed.has_value(),
        "config.distributed");
  f.repeats("seconds", r.seconds(), "the stages' training time");
  if constexpr (Fields::reading())
    read_final(f, r);
  else
    f.required("final", final_json(r));
  f.required("checkpoint", r.checkpoint);
}

// ---------------------------------------------------------------------------------------------

json to_json(const FitHistory& history) {
  return io::write_object(history);
}

FitHistory fit_history_from_json(const json& value, const std::string& path) {
  return io::read_object<FitHistory>(value, path, /*lenient=*/false);
}

json width_json(const std::vector<LayerWidth>& width) {
  auto j = json::array();
  for (const auto& layer : width)
    j.push_back(layer.mult == 0 ? json(layer.sum) : json{layer.sum, layer.mult});
  return j;
}

std::vector<LayerWidth> width_from_json(const json& value, const std::string& path) {
  return io::read_array<LayerWidth>(value, path, [](const json& entry, const std::string& at) {
    LayerWidth layer;
    if (entry.is_array()) {
      if (entry.size() != 2)
        io::fail(at, "expected an integer or [addition, multiplication] nodes, got " +
                         io::elided(entry.dump(), io::kQuotedChars, /*say_length=*/true));
      layer = {io::as_integer(entry[0], io::index_path(at, 0), Bound::kNonNegative),
               io::as_integer(entry[1], io::index_path(at, 1), Bound::kNonNegative)};
    } else {
      layer.sum = io::as_integer(entry, at, Bound::kNonNegative);
    }
    if (layer.nodes() < 1)
      io::fail(at, "a layer needs at least one node, got " +
                       io::elided(entry.dump(), io::kQuotedChars, /*say_length=*/true));
    return layer;
  });
}

std::string to_string(const std::vector<LayerWidth>& width) {
  std::string text = "[";
  for (size_t l = 0; l < width.size(); ++l)
    text += (l ? ", " : "") + (width[l].mult == 0 ? std::to_string(width[l].sum)
                                                  : "[" + std::to_string(width[l].sum) + ", " +
                                                        std::to_string(width[l].mult) + "]");
  return text + "]";
}

// config.model's width and mult (kan::KANOptions' JSON; an MLP's has no mult): nodes per layer,
// the last `mult[l]` of them multiplication nodes.
static std::vector<LayerWidth> model_width(ObjectReader& model) {
  const auto count = [](const json& value, const std::string& at) {
    return io::as_integer(value, at, Bound::kNonNegative);
  };
  const auto nodes =
      io::read_array<int64_t>(model.required("width"), model.path_of("width"), count);
  if (nodes.size() < 2)
    io::fail(model.path_of("width"), "expected at least 2 layers (inputs and outputs), got " +
                                         std::to_string(nodes.size()));
  std::vector<int64_t> mult;
  if (const auto* value = model.optional("mult"))
    mult = io::read_array<int64_t>(*value, model.path_of("mult"), count);
  if (!mult.empty() && mult.size() != nodes.size())
    io::fail(model.path_of("mult"), "expected one entry per layer of width (" +
                                        std::to_string(nodes.size()) + "), got " +
                                        std::to_string(mult.size()));
  std::vector<LayerWidth> width;
  for (size_t l = 0; l < nodes.size(); ++l) {
    const int64_t m = mult.empty() ? 0 : mult[l];
    if (m > nodes[l])
      io::fail(io::index_path(model.path_of("mult"), l),
               std::to_string(m) + " multiplication nodes in a layer of " +
                   std::to_string(nodes[l]));
    width.push_back({nodes[l] - m, m});
  }
  return width;
}

FitModelShape model_shape(const FitConfig& config) {
  constexpr bool kOtherKeys = true; // the strict readers are LibTorch's
  FitModelShape shape;
  ObjectReader model(config.model, "config.model", kOtherKeys);
  shape.width = model_width(model);
  if (config.model_kind == "mlp") {
    shape.activation = model.string("activation");
  } else if (config.model_kind == "torchscript") {
    shape.script_class = model.string("class");
  } else {
    shape.grid = model.integer("grid", Bound::kNonNegative);
    shape.k = model.integer("k", Bound::kNonNegative);
  }
  shape.dtype = model.string("dtype");
  if (config.symbolic.is_object()) {
    ObjectReader symbolic(config.symbolic, "config.symbolic", kOtherKeys);
    shape.symbolic_lib = io::as_strings(symbolic.required("lib"), symbolic.path_of("lib"));
    shape.r2_threshold = symbolic.number("r2_threshold");
  }
  return shape;
}

bool is_fit_document(const json& document) {
  if (!document.is_object())
    return false;
  const auto command = document.find("command");
  return command != document.end() && *command == "fit";
}

json to_json(const FitRecord& record) {
  return io::write_object(record);
}

json to_json(const FitConfig& config) {
  return io::write_object(config);
}

FitRecord fit_record_from_json(const json& value, const std::string& source) {
  try {
    const int minor = io::check_document(value, kFitSchemaVersion, "fit.json");
    const bool lenient = minor > io::minor_version(kFitSchemaVersion);
    // 2.0 had no config.data (a function's fit) and no config.model_kind (a KAN's); only such a
    // file is copied to add them.
    const auto config = value.find("config");
    if (minor == 0 && config != value.end() && config->is_object()) {
      json upgraded = value;
      upgraded["config"].emplace("data", nullptr);
      upgraded["config"].emplace("model_kind", "kan");
      return io::read_object<FitRecord>(upgraded, "", lenient);
    }
    return io::read_object<FitRecord>(value, "", lenient);
  } catch (const io::JsonError& e) {
    throw e.in_file(source);
  }
}

FitRecord read_fit_record(const std::string& path) {
  return fit_record_from_json(read_json_file(path, "a fit.json file"), path);
}

} // namespace results
} // namespace kan
