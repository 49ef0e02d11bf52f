#include "kan/diagnostics/records.h"

#include "kan/io/json_reader.h"
#include "kan/results/results_io.h"

#include <algorithm>
#include <cmath>

namespace kan::diagnostics {

namespace {

using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;

// The top level of a document: an object whose schema_version has our major. Returns the
// file's minor version: unknown keys are tolerated below only when it is newer than ours.
int check_document(const json& value, const char* writes, const char* what) {
  if (!value.is_object())
    io::fail("", "expected a JSON object at the top level, got " + io::describe(value));
  const auto version = value.find("schema_version");
  if (version == value.end())
    io::fail("schema_version",
             std::string("missing (a required key; is this a kanbench ") + what + "?)");
  return io::check_schema_version(*version, "schema_version", writes);
}

void check_command(ObjectReader& r, const char* expected) {
  const auto command = r.string("command");
  if (command != expected)
    io::fail(r.path_of("command"),
             "expected \"" + std::string(expected) + "\", got " + io::quoted(command));
}

// A summary key that repeats another part of the document must repeat it exactly.
void check_repeats(const json& value, const json& original, const std::string& path,
                   const std::string& original_path) {
  if (value != original)
    io::fail(path, "is " + io::elide(value.dump()) + " but " + original_path + " is " +
                       io::elide(original.dump()));
}

// A metric that does not apply (an RMSE of a classification, an accuracy of a regression, any
// metric of an empty test set) is NaN, written null.
json metric(double value) {
  return std::isnan(value) ? json(nullptr) : json(value);
}

double metric_from(ObjectReader& r, const std::string& key, Bound bound = Bound::kNonNegative) {
  return r.nullable_number(key, bound).value_or(std::nan(""));
}

json stage_json(const StageResult& stage) {
  return {{"history", to_json(stage.history)},
          {"train_rmse", metric(stage.train_rmse)},
          {"test_rmse", metric(stage.test_rmse)},
          {"train_accuracy", metric(stage.train_accuracy)},
          {"test_accuracy", metric(stage.test_accuracy)}};
}

StageResult stage_from(ObjectReader& r) {
  StageResult stage;
  stage.history = fit_history_from_json(r.required("history"), r.path_of("history"));
  stage.train_rmse = metric_from(r, "train_rmse");
  stage.test_rmse = metric_from(r, "test_rmse");
  stage.train_accuracy = metric_from(r, "train_accuracy");
  stage.test_accuracy = metric_from(r, "test_accuracy");
  return stage;
}

// A time that repeats others (a stage's, the stages' sum) must equal them up to rounding.
void check_seconds(ObjectReader& r, const std::string& key, double expected, const char* what) {
  const double seconds = r.number(key, Bound::kNonNegative);
  if (std::abs(seconds - expected) > 1e-9 * std::max(1.0, seconds))
    io::fail(r.path_of(key),
             io::format_number(seconds) + " is not " + what + " " + io::format_number(expected));
}

json width_json(const std::vector<LayerWidth>& width) {
  auto j = json::array();
  for (const auto& layer : width)
    j.push_back(layer.mult == 0 ? json(layer.sum) : json{layer.sum, layer.mult});
  return j;
}

std::vector<LayerWidth> width_from(const json& value, const std::string& path) {
  std::vector<LayerWidth> width;
  const auto& entries = io::as_array(value, path);
  for (size_t l = 0; l < entries.size(); ++l) {
    const auto at = io::index_path(path, l);
    LayerWidth layer;
    if (entries[l].is_array()) {
      const auto& pair = entries[l];
      if (pair.size() != 2)
        io::fail(at, "expected an integer or [addition, multiplication] nodes, got " +
                         io::elide(pair.dump()));
      layer = {io::as_integer(pair[0], io::index_path(at, 0), Bound::kNonNegative),
               io::as_integer(pair[1], io::index_path(at, 1), Bound::kNonNegative)};
    } else {
      layer.sum = io::as_integer(entries[l], at, Bound::kNonNegative);
    }
    if (layer.nodes() < 1)
      io::fail(at, "a layer needs at least one node, got " + io::elide(entries[l].dump()));
    width.push_back(layer);
  }
  return width;
}

json pruning_json(const PruneResult& p) {
  auto j = stage_json(p.retrained);
  j["width_before"] = width_json(p.width_before);
  j["width_after"] = width_json(p.width_after);
  j["node_scores"] = p.node_scores;
  j["edge_scores"] = p.edge_scores;
  j["seconds"] = p.retrained.history.seconds;
  return j;
}

// Scores per layer: one number per node, or (for edges) one row of numbers per node.
std::vector<std::vector<double>> scores_from(const json& value, const std::string& path,
                                             const std::vector<LayerWidth>& width) {
  std::vector<std::vector<double>> scores;
  const auto& layers = io::as_array(value, path);
  if (layers.size() != width.size())
    io::fail(path, "expected one list per layer (" + std::to_string(width.size()) + "), got " +
                       std::to_string(layers.size()));
  for (size_t l = 0; l < layers.size(); ++l) {
    scores.push_back(io::as_numbers(layers[l], io::index_path(path, l), Bound::kNonNegative));
    if (static_cast<int64_t>(scores.back().size()) != width[l].nodes())
      io::fail(io::index_path(path, l), "expected one score per node (" +
                                            std::to_string(width[l].nodes()) + "), got " +
                                            std::to_string(scores.back().size()));
  }
  return scores;
}

PruneResult pruning_from(ObjectReader& r, const FitRun& config) {
  PruneResult p;
  p.retrained = stage_from(r);
  check_repeats(r.required("width_before"), width_json(pykan_width(config.model)),
                r.path_of("width_before"), "config.model's width");
  p.width_before = pykan_width(config.model);
  p.width_after = width_from(r.required("width_after"), r.path_of("width_after"));
  const auto& before = p.width_before;
  const auto& after = p.width_after;
  bool fewer = after.size() == before.size() && after.size() >= 2 &&
               after.front() == before.front() && after.back() == before.back();
  for (size_t l = 0; fewer && l < after.size(); ++l)
    fewer = after[l].sum <= before[l].sum && after[l].mult <= before[l].mult;
  if (!fewer)
    io::fail(r.path_of("width_after"),
             io::elide(width_json(after).dump()) + " is not width_before " +
                 io::elide(width_json(before).dump()) + " with hidden nodes removed");
  p.node_scores = scores_from(r.required("node_scores"), r.path_of("node_scores"), before);
  // prune_edge's scores: per layer of the pruned model, one row per node of its layer.
  const auto edges_path = r.path_of("edge_scores");
  const auto& edges = io::as_array(r.required("edge_scores"), edges_path);
  if (edges.size() + 1 != after.size())
    io::fail(edges_path, "expected one list per layer of width_after (" +
                             std::to_string(after.size() - 1) + "), got " +
                             std::to_string(edges.size()));
  for (size_t l = 0; l < edges.size(); ++l) {
    const auto at = io::index_path(edges_path, l);
    const auto& rows = io::as_array(edges[l], at);
    if (static_cast<int64_t>(rows.size()) != after[l].nodes())
      io::fail(at, "expected one row per node of layer " + std::to_string(l) + " (" +
                       std::to_string(after[l].nodes()) + "), got " + std::to_string(rows.size()));
    p.edge_scores.emplace_back();
    for (size_t i = 0; i < rows.size(); ++i) {
      p.edge_scores.back().push_back(
          io::as_numbers(rows[i], io::index_path(at, i), Bound::kNonNegative));
      if (p.edge_scores.back()[i].size() != p.edge_scores.back()[0].size())
        io::fail(io::index_path(at, i), "has " + std::to_string(rows[i].size()) +
                                            " scores but row 0 has " +
                                            std::to_string(rows[0].size()));
    }
  }
  check_seconds(r, "seconds", p.retrained.history.seconds, "pruned.history.seconds");
  return p;
}

json symbolic_json(const SymbolicResult& s) {
  auto j = stage_json(s.retrained);
  j["auto_symbolic_seconds"] = s.auto_symbolic_seconds;
  j["edges"] = json::array();
  for (const auto& e : s.edges) {
    json edge{{"layer", e.layer},       {"i", e.i},   {"j", e.j},
              {"function", e.function}, {"r2", e.r2}, {"fixed", e.fixed}};
    if (e.fixed)
      edge["params"] = e.params;
    if (e.curve)
      edge["curve"] = {
          {"x", e.curve->x}, {"activation", e.curve->activation}, {"fit", e.curve->fit}};
    j["edges"].push_back(edge);
  }
  if (s.formula) {
    j["formula"] = json::array();
    for (const auto& f : *s.formula)
      j["formula"].push_back(
          {{"sympy", f.sympy}, {"latex", f.latex}, {"sympy_exact", f.sympy_exact}});
  } else {
    j["formula"] = nullptr;
    j["formula_error"] = s.formula_error;
  }
  j["digits"] = s.digits;
  j["seconds"] = s.retrained.history.seconds;
  return j;
}

SymbolicEdgeResult symbolic_edge_from(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  SymbolicEdgeResult e;
  e.layer = r.integer("layer", Bound::kNonNegative);
  e.i = r.integer("i", Bound::kNonNegative);
  e.j = r.integer("j", Bound::kNonNegative);
  e.function = r.string("function");
  e.r2 = r.number("r2");
  e.fixed = r.boolean("fixed");
  if (e.fixed) {
    e.params = r.numbers("params");
    if (e.params.size() != 4)
      io::fail(r.path_of("params"),
               "expected a, b, c, d (4 numbers), got " + std::to_string(e.params.size()));
  }
  if (const auto* curve = r.optional("curve")) {
    ObjectReader c(*curve, r.path_of("curve"), lenient);
    e.curve = SymbolicCurve{c.numbers("x"), c.numbers("activation"), c.numbers("fit")};
    if (e.curve->activation.size() != e.curve->x.size() || e.curve->fit.size() != e.curve->x.size())
      io::fail(r.path_of("curve"), "x, activation and fit must have one value per point, got " +
                                       std::to_string(e.curve->x.size()) + ", " +
                                       std::to_string(e.curve->activation.size()) + " and " +
                                       std::to_string(e.curve->fit.size()));
    c.finish();
  }
  r.finish();
  return e;
}

SymbolicResult symbolic_from(ObjectReader& r, const FitRun& config, bool lenient) {
  SymbolicResult s;
  s.retrained = stage_from(r);
  s.auto_symbolic_seconds = r.number("auto_symbolic_seconds", Bound::kNonNegative);
  s.edges = io::read_array<SymbolicEdgeResult>(r.required("edges"), r.path_of("edges"),
                                               [&](const json& edge, const std::string& at) {
                                                 return symbolic_edge_from(edge, at, lenient);
                                               });
  const auto& formula = r.required("formula");
  if (formula.is_null()) {
    s.formula_error = r.string("formula_error");
  } else {
    s.formula = io::read_array<Formula>(
        formula, r.path_of("formula"), [&](const json& f, const std::string& at) {
          ObjectReader o(f, at, lenient);
          Formula out{o.string("sympy"), o.string("latex"), o.string("sympy_exact")};
          o.finish();
          return out;
        });
    const auto outputs = static_cast<size_t>(config.model.width().back());
    if (s.formula->size() != outputs)
      io::fail(r.path_of("formula"), "expected one formula per output (" + std::to_string(outputs) +
                                         "), got " + std::to_string(s.formula->size()));
  }
  s.digits = r.integer("digits", Bound::kNonNegative);
  check_seconds(r, "seconds", s.retrained.history.seconds, "symbolic.history.seconds");
  return s;
}

template <typename Read> auto in_file(const std::string& source, Read read) {
  try {
    return read();
  } catch (const io::JsonError& e) {
    throw e.in_file(source);
  }
}

// The metrics of the model the fit leaves (its last stage), for readers that want one number,
// and (from 2.1) its size.
json final_json(const FitRecord& f) {
  auto j = stage_json(f.last());
  j.erase("history");
  j["stage"] = f.symbolic           ? "symbolic"
               : !f.refined.empty() ? "refined"
               : f.pruned           ? "pruned"
                                    : "trained";
  if (f.parameters)
    j["parameters"] = *f.parameters;
  if (f.forward_flops)
    j["forward_flops"] = *f.forward_flops;
  return j;
}

FitDataRun data_run_from(const json& value, const std::string& path, bool lenient) {
  ObjectReader d(value, path, lenient);
  FitDataRun run;
  run.path = d.string("path");
  run.format = d.string("format");
  run.inputs = io::as_strings(d.required("inputs"), d.path_of("inputs"));
  run.targets = io::as_strings(d.required("targets"), d.path_of("targets"));
  if (const auto& test = d.required("test_data"); !test.is_null())
    run.test_data = io::as_string(test, d.path_of("test_data"));
  run.test_fraction = d.nullable_number("test_fraction", Bound::kNonNegative);
  run.classes = d.integer("classes", Bound::kNonNegative);
  run.description = d.string("description");
  if (run.inputs.empty() || run.targets.empty())
    io::fail(d.path_of(run.inputs.empty() ? "inputs" : "targets"), "no columns");
  d.finish();
  return run;
}

PruneStage prune_stage_from(const json& value, const std::string& path, bool lenient) {
  ObjectReader p(value, path, lenient);
  PruneStage stage;
  stage.node_th = p.number("node_th", Bound::kNonNegative);
  stage.edge_th = p.number("edge_th", Bound::kNonNegative);
  stage.steps = p.integer("steps", Bound::kNonNegative);
  p.finish();
  return stage;
}

SymbolicStage symbolic_stage_from(const json& value, const std::string& path, bool lenient) {
  ObjectReader p(value, path, lenient);
  SymbolicStage stage;
  stage.lib = io::as_strings(p.required("lib"), p.path_of("lib"));
  stage.r2_threshold = p.number("r2_threshold");
  stage.weight_simple = p.number("weight_simple");
  stage.steps = p.integer("steps", Bound::kNonNegative);
  stage.search = p.string("search");
  const auto& names = symbolic_search_names();
  if (std::find(names.begin(), names.end(), stage.search) == names.end())
    io::fail(p.path_of("search"),
             "expected pykan, zoom or newton, got " + io::quoted(stage.search));
  if (stage.lib.empty())
    io::fail(p.path_of("lib"), "the library is empty");
  p.finish();
  return stage;
}

// `config`: what ran. A file of minor version `minor` (2.x) holds what that version writes.
FitRun fit_run_from(const json& value, int minor, bool lenient) {
  ObjectReader c(value, "config", lenient);
  FitRun run;
  // Required from 2.1; 2.0 files written before data files have none.
  const json* data = minor >= 1 ? &c.required("data") : c.optional("data");
  if (data != nullptr && !data->is_null()) {
    if (!c.required("function").is_null())
      io::fail(c.path_of("function"), "must be null when config.data names a data file");
    run.data = data_run_from(*data, c.path_of("data"), lenient);
    run.function.clear();
  } else {
    run.function = c.string("function");
  }
  run.train_num = c.integer("train_num", Bound::kNonNegative);
  run.test_num = c.integer("test_num", Bound::kNonNegative);
  run.seed = io::as_unsigned(c.required("seed"), c.path_of("seed"));
  run.device = c.string("device");
  run.refine = io::read_array<int64_t>(c.required("refine"), c.path_of("refine"),
                                       [](const json& grid, const std::string& at) {
                                         return io::as_integer(grid, at, Bound::kNonNegative);
                                       });
  if (const auto& prune = c.required("prune"); !prune.is_null())
    run.prune = prune_stage_from(prune, c.path_of("prune"), lenient);
  if (const auto& symbolic = c.required("symbolic"); !symbolic.is_null())
    run.symbolic = symbolic_stage_from(symbolic, c.path_of("symbolic"), lenient);
  if (const auto& distributed = c.required("distributed"); !distributed.is_null()) {
    ObjectReader p(distributed, c.path_of("distributed"), lenient);
    run.distributed =
        FitDistributedRun{p.integer("world_size", Bound::kNonNegative), p.string("backend")};
    p.finish();
  }
  run.trace_steps = c.integer("trace_steps", Bound::kNonNegative);
  // From 2.1 the kind says what config.model holds; before, it is a KAN's.
  if (minor >= 1)
    run.model_kind =
        io::enum_from_string(c.string("model_kind"), kModelKindNames, c.path_of("model_kind"));
  if (run.model_kind == ModelKind::kMLP) {
    run.mlp = mlp_options_from_json(c.required("model"), c.path_of("model"));
    // An MLP trains once: the pipeline's later stages are a KAN's.
    if (run.prune || run.symbolic || !run.refine.empty())
      io::fail(run.prune      ? "config.prune"
               : run.symbolic ? "config.symbolic"
                              : "config.refine",
               "set, but config.model_kind is \"mlp\": an MLP has no pruning, refinement or "
               "symbolic stage");
  } else {
    run.model = kan_options_from_json(c.required("model"), c.path_of("model"));
  }
  run.fit = fit_options_from_json(c.required("fit"), c.path_of("fit"));
  if (c.optional("initial_model"))
    run.initial_model = c.string("initial_model");
  c.finish();
  return run;
}

// An optional stage `key` of the document: present exactly when its configuration `configured`
// (named `config_key`) asks for it.
template <typename Read>
void read_stage(ObjectReader& r, const char* key, bool configured, const char* config_key,
                bool lenient, Read read) {
  if (!r.optional(key)) {
    if (configured)
      io::fail(key, std::string("missing, but ") + config_key + " is set");
    return;
  }
  if (!configured)
    io::fail(key, std::string("present, but ") + config_key + " is null");
  ObjectReader stage(r.required(key), key, lenient);
  read(stage);
  stage.finish();
}

// The stages after the first, and what a data-parallel fit's collectives cost.
void later_stages_from(ObjectReader& r, FitRecord& f, bool lenient) {
  read_stage(r, "pruned", f.config.prune.has_value(), "config.prune", lenient,
             [&](ObjectReader& pruned) { f.pruned = pruning_from(pruned, f.config); });
  f.refined = io::read_array<RefineResult>(
      r.required("refined"), "refined", [&](const json& stage, const std::string& at) {
        ObjectReader refined(stage, at, lenient);
        RefineResult result;
        result.trained = stage_from(refined);
        result.grid = refined.integer("grid", Bound::kNonNegative);
        check_seconds(refined, "seconds", result.trained.history.seconds,
                      (at + ".history.seconds").c_str());
        refined.finish();
        return result;
      });
  std::vector<int64_t> grids;
  for (const auto& stage : f.refined)
    grids.push_back(stage.grid);
  check_repeats(json(grids), json(f.config.refine), "refined[].grid", "config.refine");
  read_stage(
      r, "symbolic", f.config.symbolic.has_value(), "config.symbolic", lenient,
      [&](ObjectReader& symbolic) { f.symbolic = symbolic_from(symbolic, f.config, lenient); });
  read_stage(r, "communication", f.config.distributed.has_value(), "config.distributed", lenient,
             [&](ObjectReader& m) {
               f.communication = FitCommunication{m.integer("collectives", Bound::kNonNegative),
                                                  m.integer("bytes", Bound::kNonNegative),
                                                  m.number("wait_seconds", Bound::kNonNegative)};
             });
}

// `final`: the last stage's metrics, repeated, and (from 2.1) the final model's size, both or
// neither (a record whose writer had no model).
void final_from(const json& final, FitRecord& f, int minor) {
  if (minor >= 1) {
    ObjectReader size(final, "final", /*allow_unknown=*/true);
    f.parameters = size.optional_integer("parameters", Bound::kNonNegative);
    f.forward_flops = size.optional_integer("forward_flops", Bound::kNonNegative);
    if (f.parameters.has_value() != f.forward_flops.has_value())
      io::fail(f.parameters ? "final.forward_flops" : "final.parameters",
               "missing, but final." + std::string(f.parameters ? "parameters" : "forward_flops") +
                   " is given");
    // An MLP's size follows from its configuration alone.
    const auto& mlp = f.config.mlp;
    if (f.config.model_kind == ModelKind::kMLP && f.parameters) {
      check_repeats(*f.parameters, mlp_parameter_count(mlp.width()), "final.parameters",
                    "config.model's count");
      check_repeats(*f.forward_flops, mlp_forward_flops(mlp.width(), mlp.activation()),
                    "final.forward_flops", "config.model's count");
    }
  }
  check_repeats(final, final_json(f), "final", "the last stage");
}

} // namespace

json to_json(const FitRecord& f) {
  const auto& c = f.config;
  json prune = nullptr;
  if (c.prune)
    prune = {{"node_th", c.prune->node_th},
             {"edge_th", c.prune->edge_th},
             {"steps", c.prune->steps.value_or(c.fit.steps())}};
  json symbolic = nullptr;
  if (c.symbolic)
    symbolic = {{"lib", c.symbolic->lib},
                {"r2_threshold", c.symbolic->r2_threshold},
                {"weight_simple", c.symbolic->weight_simple},
                {"steps", c.symbolic->steps.value_or(c.fit.steps())},
                {"search", c.symbolic->search}};
  json distributed = nullptr;
  if (c.distributed)
    distributed = {{"world_size", c.distributed->world_size}, {"backend", c.distributed->backend}};
  json data = nullptr;
  if (c.data)
    data = {{"path", c.data->path},
            {"format", c.data->format},
            {"inputs", c.data->inputs},
            {"targets", c.data->targets},
            {"test_data", c.data->test_data.empty() ? json(nullptr) : json(c.data->test_data)},
            {"test_fraction", c.data->test_fraction ? json(*c.data->test_fraction) : json(nullptr)},
            {"classes", c.data->classes},
            {"description", c.data->description}};
  const bool mlp = c.model_kind == ModelKind::kMLP;
  json j{{"schema_version", f.schema_version},
         {"command", "fit"},
         {"config",
          {{"function", c.data ? json(nullptr) : json(c.function)},
           {"data", data},
           {"train_num", c.train_num},
           {"test_num", c.test_num},
           {"seed", c.seed},
           {"device", c.device},
           {"refine", c.refine},
           {"prune", prune},
           {"symbolic", symbolic},
           {"distributed", distributed},
           {"trace_steps", c.trace_steps},
           {"model_kind", to_string(c.model_kind)},
           {"model", mlp ? to_json(c.mlp) : to_json(c.model)},
           {"fit", to_json(c.fit)}}},
         {"environment", {{"libtorch", f.libtorch}, {"threads", f.threads}, {"device", c.device}}},
         {"device_audit", f.device_audit.to_json()}};
  if (!c.initial_model.empty())
    j["config"]["initial_model"] = c.initial_model;
  j.update(stage_json(f.trained));
  j["seconds"] = f.seconds();
  if (f.pruned)
    j["pruned"] = pruning_json(*f.pruned);
  j["refined"] = json::array();
  for (const auto& r : f.refined) {
    auto stage = stage_json(r.trained);
    stage["grid"] = r.grid;
    stage["seconds"] = r.trained.history.seconds;
    j["refined"].push_back(stage);
  }
  if (f.symbolic)
    j["symbolic"] = symbolic_json(*f.symbolic);
  if (f.communication)
    j["communication"] = {{"collectives", f.communication->collectives},
                          {"bytes", f.communication->bytes},
                          {"wait_seconds", f.communication->wait_seconds}};
  j["final"] = final_json(f);
  j["checkpoint"] = f.checkpoint;
  return j;
}

FitRecord fit_record_from_json(const json& value, const std::string& source) {
  return in_file(source, [&] {
    const int minor = check_document(value, kFitSchemaVersion, "fit.json");
    const bool lenient = minor > io::minor_version(kFitSchemaVersion);
    ObjectReader r(value, "", lenient);
    FitRecord f;
    f.schema_version = r.string("schema_version");
    check_command(r, "fit");
    f.config = fit_run_from(r.required("config"), minor, lenient);
    ObjectReader e(r.required("environment"), "environment", lenient);
    f.libtorch = e.string("libtorch");
    f.threads = e.integer("threads", Bound::kNonNegative);
    check_repeats(e.required("device"), f.config.device, "environment.device", "config.device");
    e.finish();
    f.device_audit = audited_fit_from_json(r.required("device_audit"), "device_audit");
    f.trained = stage_from(r);
    later_stages_from(r, f, lenient);
    check_seconds(r, "seconds", f.seconds(), "the stages' training time");
    final_from(r.required("final"), f, minor);
    f.checkpoint = r.string("checkpoint");
    r.finish();
    return f;
  });
}

FitRecord read_fit_record(const std::string& path) {
  return in_file(
      path, [&] { return fit_record_from_json(io::parse_json(results::read_text_file(path))); });
}

json to_json(const AuditRecord& a) {
  const auto& c = a.config;
  auto findings = json::array();
  for (const auto& f : a.findings)
    findings.push_back(results::to_json(f));
  json summary{{"clean", a.findings.empty()},
               {"findings", a.findings.size()},
               {"tensors_checked", a.static_audit.summary.tensors_checked},
               {"bytes_per_device", a.static_audit.summary.bytes_per_device},
               {"exit_code", a.exit_code}};
  json j{{"schema_version", a.schema_version},
         {"command", "audit"},
         {"device", a.device},
         {"config",
          {{"checkpoint", c.checkpoint},
           {"model", to_json(c.model)},
           {"data_device", c.data_device},
           {"data_dtype", c.data_dtype},
           {"samples", c.samples},
           {"opt", c.opt},
           {"trace_steps", c.trace_steps},
           {"seed", c.seed}}},
         {"findings", findings},
         {"static_audit", a.static_audit.to_json()}};
  if (a.after_training) {
    const auto after = a.after_training->to_json();
    summary["trace"] = after["trace"]["summary"];
    summary["traced_step_seconds"] = after["traced_step_seconds"];
    summary["untraced_step_seconds"] = after["untraced_step_seconds"];
    j["after_training"] = after;
  }
  j["summary"] = summary;
  return j;
}

AuditRecord audit_record_from_json(const json& value, const std::string& source) {
  return in_file(source, [&] {
    const bool lenient = check_document(value, kAuditSchemaVersion, "audit.json") >
                         io::minor_version(kAuditSchemaVersion);
    ObjectReader r(value, "", lenient);
    AuditRecord a;
    a.schema_version = r.string("schema_version");
    check_command(r, "audit");
    a.device = r.string("device");
    ObjectReader c(r.required("config"), "config", lenient);
    a.config.checkpoint = c.string("checkpoint");
    a.config.model = kan_options_from_json(c.required("model"), c.path_of("model"));
    a.config.data_device = c.string("data_device");
    a.config.data_dtype = c.string("data_dtype");
    a.config.samples = c.integer("samples", Bound::kNonNegative);
    a.config.opt = c.string("opt");
    a.config.trace_steps = c.integer("trace_steps", Bound::kNonNegative);
    a.config.seed = io::as_unsigned(c.required("seed"), c.path_of("seed"));
    c.finish();
    const auto& findings = io::as_array(r.required("findings"), "findings");
    for (size_t i = 0; i < findings.size(); ++i)
      a.findings.push_back(
          results::audit_finding_from_json(findings[i], io::index_path("findings", i)));
    a.static_audit = audit_report_from_json(r.required("static_audit"), "static_audit");
    if (r.optional("after_training"))
      a.after_training = audited_fit_from_json(r.required("after_training"), "after_training");

    // The summary repeats the rest of the document; it must agree with it.
    ObjectReader s(r.required("summary"), "summary", lenient);
    a.exit_code = static_cast<int>(s.integer("exit_code", Bound::kNonNegative));
    const auto written = to_json(a)["summary"];
    for (const auto& item : written.items())
      check_repeats(s.required(item.key()), item.value(), s.path_of(item.key()),
                    "the rest of the document");
    s.finish();
    r.finish();
    return a;
  });
}

AuditRecord read_audit_record(const std::string& path) {
  return in_file(
      path, [&] { return audit_record_from_json(io::parse_json(results::read_text_file(path))); });
}

} // namespace kan::diagnostics
