// kan's types as JSON: one form each, read strictly (kan/io/json_reader.h): a missing key, a
// wrong type or a key nobody reads is a JsonError naming its key path. The declarations sit
// next to each type (network.h, mlp.h, fit.h, pipeline.h).
#include "kan/io/json_fields.h"
#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"

#include <algorithm>

namespace kan {

using io::Bound;
using json = nlohmann::json;

// Each struct's keys, for both directions (kan/io/json_fields.h). They are static: this file is
// their one user, and argument-dependent lookup finds them here, beside their structs. The
// options' TORCH_ARG accessors hand out references, so one list reads and writes them.

// A dtype by its name ("float64"), read through dtype_from_string (whose error names the
// choices).
static json dtype_json(const torch::Dtype& dtype) {
  return to_string(dtype);
}
static torch::Dtype dtype_from(const json& value, const std::string& path) {
  try {
    return dtype_from_string(io::as_string(value, path));
  } catch (const c10::Error& e) {
    throw io::JsonError("", path, io::elided(e.what_without_backtrace(), 200, /*say_length=*/true));
  }
}

static json range_json(const GridRange& range) {
  return {range[0], range[1]};
}
static GridRange range_from(const json& value, const std::string& path) {
  const auto range = io::as_numbers(value, path);
  if (range.size() != 2)
    throw io::JsonError("", path,
                        "expected [low, high], got " + std::to_string(range.size()) + " numbers");
  return {range[0], range[1]};
}

template <typename Fields> static void fields(Fields& f, KANOptions& o) {
  f.required("width", o.width(), Bound::kNonNegative);
  f.required("grid", o.grid());
  f.required("k", o.k());
  f.required("seed", o.seed());
  f.required("noise_scale", o.noise_scale());
  f.required("scale_base_mu", o.scale_base_mu());
  f.required("scale_base_sigma", o.scale_base_sigma());
  f.required("scale_sp", o.scale_sp());
  f.enumeration("base_fun", o.base_fun(), kBaseFunctionNames);
  f.required("grid_eps", o.grid_eps());
  f.custom("grid_range", o.grid_range(), range_json, range_from);
  f.required("sp_trainable", o.sp_trainable());
  f.required("sb_trainable", o.sb_trainable());
  f.custom("dtype", o.dtype(), dtype_json, dtype_from);
  // Older configurations have no backend ("fused"), no multiplication nodes and no node affine.
  f.defaulted_enumeration("backend", o.backend(), kSplineBackendNames);
  f.defaulted("mult", o.mult(), Bound::kNonNegative);
  f.defaulted("mult_arity", o.mult_arity());
  f.defaulted("node_arity", o.node_arity(), Bound::kNonNegative);
  f.defaulted("affine_trainable", o.affine_trainable());
}

template <typename Fields> static void fields(Fields& f, FitOptions& o) {
  f.enumeration("opt", o.opt(), kOptimizerNames);
  f.required("steps", o.steps(), Bound::kNonNegative);
  f.required("lr", o.lr());
  f.required("batch", o.batch());
  f.enumeration("batch_draw", o.batch_draw(), kBatchDrawNames);
  f.required("lamb", o.lamb(), Bound::kNonNegative);
  f.required("lamb_l1", o.lamb_l1(), Bound::kNonNegative);
  f.required("lamb_entropy", o.lamb_entropy(), Bound::kNonNegative);
  f.required("lamb_coef", o.lamb_coef(), Bound::kNonNegative);
  f.required("lamb_coefdiff", o.lamb_coefdiff(), Bound::kNonNegative);
  f.required("update_grid", o.update_grid());
  f.required("grid_update_num", o.grid_update_num());
  f.required("start_grid_update_step", o.start_grid_update_step());
  f.required("stop_grid_update_step", o.stop_grid_update_step());
  // Written from fit.json 1.3 on; earlier files ran with the default.
  f.defaulted("grid_update_memory", o.grid_update_memory(), Bound::kNonNegative);
  f.enumeration("loss", o.loss(), kLossNames);
  f.required("seed", o.seed());
}

template <typename Fields> static void fields(Fields& f, PruneStage& stage) {
  f.required("node_th", stage.node_th, Bound::kNonNegative);
  f.required("edge_th", stage.edge_th, Bound::kNonNegative);
  f.nullable("steps", stage.steps, Bound::kNonNegative);
}

template <typename Fields> static void fields(Fields& f, SymbolicStage& stage) {
  f.required("lib", stage.lib);
  f.required("r2_threshold", stage.r2_threshold);
  f.required("weight_simple", stage.weight_simple);
  f.nullable("steps", stage.steps, Bound::kNonNegative);
  f.required("search", stage.search);
  if constexpr (Fields::reading()) {
    const auto& names = symbolic_search_names();
    if (std::find(names.begin(), names.end(), stage.search) == names.end())
      io::fail(f.path_of("search"),
               "expected pykan, zoom or newton, got " + io::quoted(stage.search));
    if (stage.lib.empty())
      io::fail(f.path_of("lib"), "the library is empty");
  }
}

template <typename Fields> static void fields(Fields& f, MLPOptions& o) {
  f.required("width", o.width());
  f.enumeration("activation", o.activation(), kActivationNames);
  f.required("seed", o.seed());
  f.custom("dtype", o.dtype(), dtype_json, dtype_from);
}

json to_json(const KANOptions& options) {
  return io::write_object(options);
}

KANOptions kan_options_from_json(const json& value, const std::string& path) {
  return io::read_object(value, path, /*lenient=*/false, KANOptions({}));
}

json to_json(const FitOptions& options) {
  return io::write_object(options);
}

FitOptions fit_options_from_json(const json& value, const std::string& path) {
  return io::read_object<FitOptions>(value, path, /*lenient=*/false);
}

json to_json(const PruneStage& stage) {
  return io::write_object(stage);
}

PruneStage prune_stage_from_json(const json& value, const std::string& path) {
  return io::read_object<PruneStage>(value, path, /*lenient=*/false);
}

json to_json(const SymbolicStage& stage) {
  return io::write_object(stage);
}

SymbolicStage symbolic_stage_from_json(const json& value, const std::string& path) {
  return io::read_object<SymbolicStage>(value, path, /*lenient=*/false);
}

json to_json(const MLPOptions& options) {
  return io::write_object(options);
}

MLPOptions mlp_options_from_json(const json& value, const std::string& path) {
  auto options = io::read_object(value, path, /*lenient=*/false, MLPOptions({}));
  try {
    check_mlp_options(options);
  } catch (const c10::Error& e) {
    throw io::JsonError("", path, io::elided(e.what_without_backtrace(), 200, /*say_length=*/true));
  }
  return options;
}

} // namespace kan
