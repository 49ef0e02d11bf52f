// kan's types as JSON: one form each, read strictly (kan/io/json_reader.h): a missing key, a
// wrong type or a key nobody reads is a JsonError naming its key path. The declarations sit
// next to each type (network.h, fit.h, pipeline.h).
#include "kan/io/json_reader.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"

#include <algorithm>

namespace kan {
namespace {

using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;

// An enum's spelling, read through its from_string (whose error names the allowed values).
template <typename Parse>
auto enum_value(ObjectReader& r, const std::string& key, Parse parse) -> decltype(parse("")) {
  const auto text = r.string(key);
  try {
    return parse(text);
  } catch (const std::exception& e) {
    throw io::JsonError("", r.path_of(key), io::elide(e.what(), 200));
  }
}

std::vector<int64_t> integers(const json& value, const std::string& path, Bound bound) {
  std::vector<int64_t> out;
  const auto& array = io::as_array(value, path);
  for (size_t i = 0; i < array.size(); ++i)
    out.push_back(io::as_integer(array[i], io::index_path(path, i), bound));
  return out;
}

template <typename T, typename Read>
std::vector<T> read_array(const json& value, const std::string& path, Read read_one) {
  std::vector<T> out;
  const auto& array = io::as_array(value, path);
  for (size_t i = 0; i < array.size(); ++i)
    out.push_back(read_one(array[i], io::index_path(path, i)));
  return out;
}

} // namespace

json to_json(const KANOptions& o) {
  return {{"width", o.width()},
          {"grid", o.grid()},
          {"k", o.k()},
          {"seed", o.seed()},
          {"noise_scale", o.noise_scale()},
          {"scale_base_mu", o.scale_base_mu()},
          {"scale_base_sigma", o.scale_base_sigma()},
          {"scale_sp", o.scale_sp()},
          {"base_fun", to_string(o.base_fun())},
          {"grid_eps", o.grid_eps()},
          {"grid_range", o.grid_range()},
          {"sp_trainable", o.sp_trainable()},
          {"sb_trainable", o.sb_trainable()},
          {"dtype", to_string(o.dtype())},
          {"backend", to_string(o.backend())},
          {"mult", o.mult()},
          {"mult_arity", o.mult_arity()},
          {"node_arity", o.node_arity()},
          {"affine_trainable", o.affine_trainable()}};
}

KANOptions kan_options_from_json(const json& j, const std::string& path) {
  ObjectReader r(j, path, /*allow_unknown=*/false);
  KANOptions o(integers(r.required("width"), r.path_of("width"), Bound::kNonNegative));
  o.grid(r.integer("grid"))
      .k(r.integer("k"))
      .seed(io::as_unsigned(r.required("seed"), r.path_of("seed")))
      .noise_scale(r.number("noise_scale"))
      .scale_base_mu(r.number("scale_base_mu"))
      .scale_base_sigma(r.number("scale_base_sigma"))
      .scale_sp(r.number("scale_sp"))
      .base_fun(enum_value(r, "base_fun", base_function_from_string))
      .grid_eps(r.number("grid_eps"))
      .sp_trainable(r.boolean("sp_trainable"))
      .sb_trainable(r.boolean("sb_trainable"))
      .dtype(enum_value(r, "dtype", dtype_from_string));
  const auto range = r.numbers("grid_range");
  if (range.size() != 2)
    throw io::JsonError("", r.path_of("grid_range"),
                        "expected [low, high], got " + std::to_string(range.size()) + " numbers");
  o.grid_range({range[0], range[1]});
  // Written since the backend option exists; older checkpoints read as the default, "fused".
  if (r.optional("backend"))
    o.backend(enum_value(r, "backend", spline_backend_from_string));
  // Written since multiplication nodes exist; older configurations have none.
  if (r.optional("mult"))
    o.mult(integers(r.required("mult"), r.path_of("mult"), Bound::kNonNegative));
  if (const auto arity = r.optional_integer("mult_arity"))
    o.mult_arity(*arity);
  if (const auto* lists = r.optional("node_arity"))
    o.node_arity(read_array<std::vector<int64_t>>(*lists, r.path_of("node_arity"),
                                                  [](const json& value, const std::string& at) {
                                                    return integers(value, at, Bound::kNonNegative);
                                                  }));
  if (const auto trainable = r.optional_bool("affine_trainable"))
    o.affine_trainable(*trainable);
  r.finish();
  return o;
}

json to_json(const FitOptions& o) {
  return {{"opt", to_string(o.opt())},
          {"steps", o.steps()},
          {"lr", o.lr()},
          {"batch", o.batch()},
          {"batch_draw", to_string(o.batch_draw())},
          {"lamb", o.lamb()},
          {"lamb_l1", o.lamb_l1()},
          {"lamb_entropy", o.lamb_entropy()},
          {"lamb_coef", o.lamb_coef()},
          {"lamb_coefdiff", o.lamb_coefdiff()},
          {"update_grid", o.update_grid()},
          {"grid_update_num", o.grid_update_num()},
          {"start_grid_update_step", o.start_grid_update_step()},
          {"stop_grid_update_step", o.stop_grid_update_step()},
          {"grid_update_memory", o.grid_update_memory()},
          {"loss", to_string(o.loss())},
          {"seed", o.seed()}};
}

FitOptions fit_options_from_json(const json& j, const std::string& path) {
  ObjectReader r(j, path, /*allow_unknown=*/false);
  FitOptions o;
  o.opt(enum_value(r, "opt", optimizer_from_string))
      .steps(r.integer("steps", Bound::kNonNegative))
      .lr(r.number("lr"))
      .batch(r.integer("batch"))
      .batch_draw(enum_value(r, "batch_draw", batch_draw_from_string))
      .lamb(r.number("lamb", Bound::kNonNegative))
      .lamb_l1(r.number("lamb_l1", Bound::kNonNegative))
      .lamb_entropy(r.number("lamb_entropy", Bound::kNonNegative))
      .lamb_coef(r.number("lamb_coef", Bound::kNonNegative))
      .lamb_coefdiff(r.number("lamb_coefdiff", Bound::kNonNegative))
      .update_grid(r.boolean("update_grid"))
      .grid_update_num(r.integer("grid_update_num"))
      .start_grid_update_step(r.integer("start_grid_update_step"))
      .stop_grid_update_step(r.integer("stop_grid_update_step"))
      .loss(enum_value(r, "loss", loss_from_string))
      .seed(io::as_unsigned(r.required("seed"), r.path_of("seed")));
  // Written from fit.json 1.3 on; earlier files ran with the default.
  if (const auto memory = r.optional_integer("grid_update_memory", Bound::kNonNegative))
    o.grid_update_memory(*memory);
  r.finish();
  return o;
}

json to_json(const PruneStage& stage) {
  return {{"node_th", stage.node_th},
          {"edge_th", stage.edge_th},
          {"steps", stage.steps ? json(*stage.steps) : json(nullptr)}};
}

PruneStage prune_stage_from_json(const json& value, const std::string& path) {
  ObjectReader r(value, path, /*allow_unknown=*/false);
  PruneStage stage;
  stage.node_th = r.number("node_th", Bound::kNonNegative);
  stage.edge_th = r.number("edge_th", Bound::kNonNegative);
  stage.steps = r.nullable_integer("steps", Bound::kNonNegative);
  r.finish();
  return stage;
}

json to_json(const SymbolicStage& stage) {
  return {{"lib", stage.lib},
          {"r2_threshold", stage.r2_threshold},
          {"weight_simple", stage.weight_simple},
          {"steps", stage.steps ? json(*stage.steps) : json(nullptr)},
          {"search", stage.search}};
}

SymbolicStage symbolic_stage_from_json(const json& value, const std::string& path) {
  ObjectReader r(value, path, /*allow_unknown=*/false);
  SymbolicStage stage;
  stage.lib = io::as_strings(r.required("lib"), r.path_of("lib"));
  stage.r2_threshold = r.number("r2_threshold");
  stage.weight_simple = r.number("weight_simple");
  stage.steps = r.nullable_integer("steps", Bound::kNonNegative);
  stage.search = r.string("search");
  const auto& names = symbolic_search_names();
  if (std::find(names.begin(), names.end(), stage.search) == names.end())
    io::fail(r.path_of("search"),
             "expected pykan, zoom or newton, got " + io::quoted(stage.search));
  if (stage.lib.empty())
    io::fail(r.path_of("lib"), "the library is empty");
  r.finish();
  return stage;
}

} // namespace kan
