#include "kan/serialize/pykan.h"

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"
#include "kan/nn/memory.h"
#include "kan/serialize/torch_file.h"
#include "kan/symbolic/symbolic.h"

#include "detail/initial_values.h"
#include "serialize/detail/torch_archive.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace kan {
namespace {

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// pykan's state_dict names of kanbench's tensors: its KANLayers are act_fun.l, kanbench's
// layers.l, and its Symbolic_KANLayers symbolic_fun.l, whose mask and affine kanbench's layers
// hold as symbolic_mask and symbolic_affine; the affine parameters have the same names
// (node_scale_l, ...).
std::string pykan_name(const std::string& kanbench_name) {
  if (kanbench_name.rfind("layers.", 0) != 0)
    return kanbench_name;
  const auto rest = kanbench_name.substr(7); // "l.name"
  for (const char* name : {"mask", "affine"})
    if (ends_with(rest, std::string(".symbolic_") + name))
      return "symbolic_fun." + rest.substr(0, rest.find('.')) + "." + name;
  return "act_fun." + rest;
}

// The bytes of the storages behind `tensors`, each counted once.
int64_t storage_bytes(const NamedTensors& tensors) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors)
    if (seen.insert(tensor.storage().data()).second)
      bytes += static_cast<int64_t>(tensor.storage().nbytes());
  return bytes;
}

// Every parameter and buffer of model by its kanbench name.
std::vector<std::pair<std::string, torch::Tensor>> model_tensors(const KAN& model) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model->named_parameters())
    tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model->named_buffers())
    tensors.emplace_back(b.key(), b.value());
  return tensors;
}

// The configuration file, read field by field; every error names the file and the field.
class Config {
public:
  explicit Config(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    TORCH_CHECK(std::filesystem::is_regular_file(path_, ec), "cannot read pykan checkpoint: '",
                path_,
                "' does not exist (pykan's saveckpt(prefix) writes prefix_config.yml, "
                "prefix_state and prefix_cache_data)");
    try {
      root_ = YAML::LoadFile(path_);
    } catch (const YAML::ParserException& e) {
      TORCH_CHECK(false, "'", path_, "': YAML syntax error at line ", e.mark.line + 1, ", column ",
                  e.mark.column + 1, ": ", e.msg);
    } catch (const YAML::Exception& e) {
      TORCH_CHECK(false, "cannot read '", path_, "': ", io::first_line(e.what()));
    }
    TORCH_CHECK(root_.IsMap(), "'", path_, "' is not a pykan configuration (not a YAML mapping)");
    refuse_duplicate_keys();
  }

  YAML::Node field(const std::string& key) const {
    const auto node = root_[key];
    TORCH_CHECK(node.IsDefined() && !node.IsNull(), "'", path_, "' has no field '", key, "'");
    return node;
  }
  bool has(const std::string& key) const { return root_[key].IsDefined(); }

  template <typename T> T get(const YAML::Node& node, const std::string& what) const {
    try {
      return node.as<T>();
    } catch (const YAML::Exception&) {
      TORCH_CHECK(false, "'", path_, "': field '", what, "' is ", describe(node), ", expected ",
                  expected<T>());
    }
    return T();
  }
  template <typename T> T get(const std::string& key) const { return get<T>(field(key), key); }

  const std::string& path() const { return path_; }

private:
  // yaml-cpp keeps the first of two equal keys where PyYAML (pykan's reader) keeps the last: the
  // two would read such a file differently, so it is refused. Every mapping is checked, walked
  // with a stack of its own (no recursion, however deep the file nests), each node once (an alias
  // is the node it names, found by its position in the file: a file of aliases of aliases would
  // otherwise take exponential time).
  void refuse_duplicate_keys() const {
    std::vector<YAML::Node> pending{root_};
    std::set<size_t> visited;
    while (!pending.empty()) {
      const auto node = pending.back();
      pending.pop_back();
      if (!visited.insert(node.Mark().pos).second)
        continue;
      std::map<std::string, int> lines;
      for (auto it = node.begin(); it != node.end(); ++it) {
        const bool map = node.IsMap();
        const YAML::Node value = map ? it->second : *it;
        if (value.IsMap() || value.IsSequence())
          pending.push_back(value);
        if (!map || !it->first.IsScalar())
          continue;
        const int line = it->first.Mark().line + 1;
        const auto [first, fresh] = lines.emplace(it->first.Scalar(), line);
        TORCH_CHECK(fresh, "'", path_, "': key '", io::elided(it->first.Scalar()),
                    "' appears twice, on lines ", first->second, " and ", line,
                    " (pykan would take the second, other readers the first)");
      }
    }
  }

  static std::string describe(const YAML::Node& node) {
    if (node.IsScalar())
      return "'" + io::elided(node.Scalar()) + "'";
    return node.IsSequence() ? "a list" : node.IsMap() ? "a mapping" : "empty";
  }
  template <typename T> static const char* expected() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else
      return "a string";
  }

  std::string path_;
  YAML::Node root_;
};

// pykan's width entries are n or [n_sum, n_mult]; kanbench's width counts both, mult the second.
void read_width(const Config& config, KANOptions& options) {
  const auto width = config.field("width");
  TORCH_CHECK(width.IsSequence() && width.size() >= 2, "'", config.path(),
              "': field 'width' must be a list of at least 2 layers");
  std::vector<int64_t> nodes, mult;
  for (size_t l = 0; l < width.size(); ++l) {
    const auto what = "width[" + std::to_string(l) + "]";
    int64_t n_sum = 0, n_mult = 0;
    if (width[l].IsSequence()) {
      TORCH_CHECK(width[l].size() == 2, "'", config.path(), "': field '", what,
                  "' must be n or [n_sum, n_mult], got a list of ", width[l].size());
      n_sum = config.get<int64_t>(width[l][0], what + "[0]");
      n_mult = config.get<int64_t>(width[l][1], what + "[1]");
    } else {
      n_sum = config.get<int64_t>(width[l], what);
    }
    TORCH_CHECK(n_sum >= 0 && n_mult >= 0 && n_sum <= (int64_t{1} << 40) &&
                    n_mult <= (int64_t{1} << 40) && n_sum + n_mult >= 1,
                "'", config.path(), "': field '", what,
                "' needs non-negative counts below 2^40 and at least one node, got [", n_sum, ", ",
                n_mult, "]");
    nodes.push_back(n_sum + n_mult);
    mult.push_back(n_mult);
  }
  options.width(nodes);
  if (std::any_of(mult.begin(), mult.end(), [](int64_t m) { return m > 0; }))
    options.mult(mult);
}

// mult_arity: one number, or per layer a list with one arity per multiplication node.
void read_mult_arity(const Config& config, KANOptions& options) {
  const auto arity = config.field("mult_arity");
  if (!arity.IsSequence()) {
    options.mult_arity(config.get<int64_t>(arity, "mult_arity"));
    return;
  }
  std::vector<std::vector<int64_t>> per_layer;
  for (size_t l = 0; l < arity.size(); ++l) {
    TORCH_CHECK(arity[l].IsSequence(), "'", config.path(), "': field 'mult_arity[", l,
                "]' must be a list of arities");
    per_layer.emplace_back();
    for (size_t j = 0; j < arity[l].size(); ++j)
      per_layer.back().push_back(config.get<int64_t>(
          arity[l][j], "mult_arity[" + std::to_string(l) + "][" + std::to_string(j) + "]"));
  }
  if (has_mult_nodes(options))
    options.node_arity(per_layer);
}

KANOptions read_config(const Config& config) {
  KANOptions options({1, 1});
  read_width(config, options);
  read_mult_arity(config, options);
  options.grid(config.get<int64_t>("grid")).k(config.get<int64_t>("k"));
  TORCH_CHECK(options.grid() >= 1 && options.k() >= 1, "'", config.path(),
              "': grid and k must be >= 1, got grid ", options.grid(), ", k ", options.k());
  const auto base = config.get<std::string>("base_fun_name");
  try {
    options.base_fun(base_function_from_string(base));
  } catch (const c10::Error&) {
    TORCH_CHECK(false, "'", config.path(), "': field 'base_fun_name' is '", io::elided(base),
                "'; kanbench knows pykan's 'silu', 'identity' and 'zero'");
  }
  options.grid_eps(config.get<double>("grid_eps"));
  const auto range = config.field("grid_range");
  TORCH_CHECK(range.IsSequence() && range.size() == 2, "'", config.path(),
              "': field 'grid_range' must be a list [a, b]");
  options.grid_range({config.get<double>(range[0], "grid_range[0]"),
                      config.get<double>(range[1], "grid_range[1]")});
  options.sp_trainable(config.get<bool>("sp_trainable"))
      .sb_trainable(config.get<bool>("sb_trainable"))
      .affine_trainable(config.get<bool>("affine_trainable"));
  try {
    check_structure(options);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "'", config.path(), "': ", io::first_line(e.what_without_backtrace()));
  }
  return options;
}

// pykan's symbolic function names of layer l, (out, in) lists ("0" everywhere when absent).
std::vector<std::vector<std::string>> symbolic_names(const Config& config, size_t l, int64_t in,
                                                     int64_t out) {
  std::vector<std::vector<std::string>> names(static_cast<size_t>(out),
                                              std::vector<std::string>(in, "0"));
  const auto key = "symbolic.funs_name." + std::to_string(l);
  if (!config.has(key))
    return names;
  const auto rows = config.field(key);
  TORCH_CHECK(rows.IsSequence() && static_cast<int64_t>(rows.size()) == out, "'", config.path(),
              "': field '", key, "' must be ", out, " lists of ", in, " names (out, in)");
  for (int64_t j = 0; j < out; ++j) {
    TORCH_CHECK(rows[j].IsSequence() && static_cast<int64_t>(rows[j].size()) == in, "'",
                config.path(), "': field '", key, "' must be ", out, " lists of ", in,
                " names (out, in)");
    for (int64_t i = 0; i < in; ++i)
      names[j][i] = config.get<std::string>(rows[j][i], key + "[" + std::to_string(j) + "][" +
                                                            std::to_string(i) + "]");
  }
  return names;
}

// Gives layer l of model the symbolic state of the checkpoint where it has any (a non-zero mask
// or a function other than "0"); the tensors themselves are read with the others.
void read_symbolic(const Config& config, const std::map<std::string, torch::Tensor>& by_name,
                   const std::string& prefix, bool enabled, size_t l, KANLayerImpl& layer) {
  const int64_t in = layer.options().in_dim(), out = layer.options().out_dim();
  const auto names = symbolic_names(config, l, in, out);
  const auto mask_key = "symbolic_fun." + std::to_string(l) + ".mask";
  const auto found = by_name.find(mask_key);
  int64_t active = 0;
  if (found != by_name.end() && found->second.sizes() == c10::IntArrayRef{out, in})
    active = torch::count_nonzero(found->second).item<int64_t>();
  // pykan's symbolic_enabled false ignores the symbolic branch; kanbench always computes it.
  TORCH_CHECK(enabled || active == 0, "pykan checkpoint '", prefix, "': layer ", l, " has ", active,
              " symbolic edge(s) but symbolic_enabled is false; kanbench always evaluates "
              "symbolic edges: set model.symbolic_enabled = True or unfix them before saving");
  bool named = false;
  for (const auto& row : names)
    named = named || std::any_of(row.begin(), row.end(), [](const auto& n) { return n != "0"; });
  if (active == 0 && !named)
    return;
  std::vector<int64_t> ins, outs;
  std::vector<std::string> flat;
  for (int64_t j = 0; j < out; ++j)
    for (int64_t i = 0; i < in; ++i) {
      const auto& name = names[j][i];
      try {
        symbolic_function(name);
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, "pykan checkpoint '", prefix, "': edge ", i, " -> ", j, " of layer ", l,
                    " has symbolic function '", io::elided(name),
                    "': ", io::first_line(e.what_without_backtrace()));
      }
      ins.push_back(i);
      outs.push_back(j);
      flat.push_back(name);
    }
  layer.set_symbolic_edges(ins, outs, flat, std::vector<double>(flat.size(), 0.0));
}

// Whether pykan 0.2.8's SYMBOLIC_LIB has `name`: its loadckpt looks every edge's name up there.
bool in_pykan_library(const std::string& name) {
  static const std::set<std::string> names{
      "x",      "x^2",    "x^3",     "x^4",   "x^5",     "1/x",       "1/x^2",   "1/x^3",
      "1/x^4",  "1/x^5",  "sqrt",    "x^0.5", "x^1.5",   "1/sqrt(x)", "1/x^0.5", "exp",
      "log",    "abs",    "sin",     "cos",   "tan",     "tanh",      "sgn",     "arcsin",
      "arccos", "arctan", "arctanh", "0",     "gaussian"};
  return names.count(name) > 0;
}

} // namespace

bool is_pykan_checkpoint(const std::string& prefix) {
  std::error_code ec;
  return std::filesystem::exists(prefix + "_config.yml", ec);
}

KAN load_pykan(const std::string& prefix, torch::Device device) {
  TORCH_CHECK(!device.is_cuda() || torch::cuda::is_available(), "cannot load pykan checkpoint '",
              prefix, "' onto ", device, ": no usable CUDA device here (kanbench env says why)");
  const Config config(prefix + "_config.yml");
  auto options = read_config(config);
  const auto state_path = prefix + "_state";
  auto state = read_named_tensors(state_path);
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());

  // The dtype is the state's (pykan follows torch's default dtype).
  const auto first = by_name.find("act_fun.0.coef");
  TORCH_CHECK(first != by_name.end(), "'", state_path,
              "' has no act_fun.0.coef: not the state of a pykan MultKAN");
  options.dtype(first->second.scalar_type());
  TORCH_CHECK(options.dtype() == torch::kFloat32 || options.dtype() == torch::kFloat64, "'",
              state_path, "': act_fun.0.coef is ", to_string(options.dtype()),
              "; kanbench's KAN is float32 or float64");
  // A corrupt or hostile width is named before a model of its size is allocated.
  const int64_t implied = estimate_model_memory(options).total(), stored = storage_bytes(state);
  TORCH_CHECK(detail::stored_bytes_cover(implied, stored), "'", config.path(), "': width ",
              c10::IntArrayRef(options.width()), ", grid ", options.grid(), " implies ",
              format_bytes(implied), " of parameters and buffers, but '", state_path,
              "' holds only ", format_bytes(stored), " of tensors; the checkpoint is corrupt");

  // pykan's symbolic branch: the layers that have symbolic edges (or names) get kanbench's
  // symbolic state; the others none, and their all-zero symbolic_fun tensors are not kept.
  const bool symbolic = !config.has("symbolic_enabled") || config.get<bool>("symbolic_enabled");
  std::set<std::string> known;
  const detail::SkipInitialValues every_value_comes_from_the_file;
  KAN model(options);
  for (size_t l = 0; l < model->depth(); ++l) {
    for (const char* name : {"mask", "affine"})
      known.insert("symbolic_fun." + std::to_string(l) + "." + name);
    read_symbolic(config, by_name, prefix, symbolic, l, *model->layer(l));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : model_tensors(model)) {
    const auto key = pykan_name(name);
    known.insert(key);
    const auto found = by_name.find(key);
    TORCH_CHECK(found != by_name.end(), "'", state_path, "' has no ", key,
                ", which the configuration (width ", c10::IntArrayRef(options.width()),
                ") implies");
    auto stored = found->second;
    // pykan's prune_node leaves float32 masks (0 or 1, exact in any dtype) in a float64 model;
    // converted once its shape is known to be the model's.
    const bool mask = ends_with(key, ".mask") && stored.is_floating_point();
    TORCH_CHECK((stored.scalar_type() == options.dtype() || mask) &&
                    stored.sizes() == tensor.sizes(),
                "'", state_path, "': ", key, " is ", to_string(stored.scalar_type()), " of shape ",
                stored.sizes(), " but '", config.path(), "' (width ",
                c10::IntArrayRef(options.width()), ", grid ", options.grid(), ", k ", options.k(),
                ") implies ", to_string(options.dtype()), " of shape ", tensor.sizes());
    if (mask)
      stored = stored.to(options.dtype());
    TORCH_CHECK(torch::isfinite(stored).all().item<bool>(), "'", state_path, "': ", key,
                " contains NaN or Inf");
    tensor.copy_(stored);
  }
  for (size_t l = 0; l < model->depth(); ++l)
    model->layer(l)->sync_symbolic_mask();
  for (const auto& [key, tensor] : state)
    TORCH_CHECK(known.count(key), "'", state_path, "' holds ", io::elided(key),
                ", which pykan 0.2.8's MultKAN does not have (a newer pykan, or another model?)");

  // kanbench applies the affine maps only where pykan's can differ from the identity.
  if (!model->applies_affine()) {
    for (size_t l = 0; l < model->depth(); ++l)
      for (const auto* p : {&model->node_scale[l], &model->subnode_scale[l]})
        TORCH_CHECK((*p == 1).all().item<bool>(), "pykan checkpoint '", prefix,
                    "': the node or subnode scale of layer ", l,
                    " is not 1 while affine_trainable is false and there are no multiplication "
                    "nodes; kanbench cannot represent such a model");
    for (size_t l = 0; l < model->depth(); ++l)
      for (const auto* p : {&model->node_bias[l], &model->subnode_bias[l]})
        TORCH_CHECK((*p == 0).all().item<bool>(), "pykan checkpoint '", prefix,
                    "': the node or subnode bias of layer ", l,
                    " is not 0 while affine_trainable is false and there are no multiplication "
                    "nodes; kanbench cannot represent such a model");
  }
  model->to(device);
  return model;
}

torch::Tensor load_pykan_cache_data(const std::string& prefix) {
  std::error_code ec;
  const auto path = prefix + "_cache_data";
  if (!std::filesystem::exists(path, ec))
    return {};
  return read_tensor(path);
}

void save_pykan(const KAN& model, const std::string& prefix, const torch::Tensor& cache_data) {
  const auto& o = model->options();
  NamedTensors state;
  for (const auto& [name, tensor] : model_tensors(model)) {
    TORCH_CHECK(torch::isfinite(tensor).all().item<bool>(), "pykan checkpoint '", prefix,
                "' not written: ", name, " contains NaN or Inf");
    state.emplace_back(pykan_name(name), tensor);
  }
  // pykan's symbolic branch: a layer's own where it has symbolic state (its tensors are among
  // model_tensors), else every edge numerical (mask 0), function '0'.
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::BeginMap;
  for (size_t l = 0; l < model->depth(); ++l) {
    const auto layer = model->layer(l);
    const int64_t in = layer->coef.size(0), outs = layer->coef.size(1);
    if (!layer->has_symbolic_state()) {
      const auto zeros = torch::zeros({outs, in}, layer->coef.options().device(torch::kCPU));
      state.emplace_back("symbolic_fun." + std::to_string(l) + ".mask", zeros);
      state.emplace_back("symbolic_fun." + std::to_string(l) + ".affine",
                         torch::zeros({outs, in, 4}, zeros.options()));
    }
    out << YAML::Key << "symbolic.funs_name." + std::to_string(l) << YAML::Value << YAML::BeginSeq;
    for (int64_t j = 0; j < outs; ++j) {
      out << YAML::Flow << YAML::BeginSeq;
      for (int64_t i = 0; i < in; ++i) {
        const auto& name = layer->symbolic_name(i, j);
        TORCH_CHECK(in_pykan_library(name), "pykan checkpoint '", prefix, "' not written: edge (",
                    l, ", ", i, ", ", j, ") has symbolic function '", name,
                    "', which pykan 0.2.8's SYMBOLIC_LIB lacks (its loadckpt would fail)");
        out << YAML::SingleQuoted << name; // quoted: pykan compares names with the string '0'
      }
      out << YAML::EndSeq;
    }
    out << YAML::EndSeq;
  }
  out << YAML::Key << "width" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (size_t l = 0; l < o.width().size(); ++l)
    out << YAML::Flow << YAML::BeginSeq << o.width()[l] - mult_nodes(o, l) << mult_nodes(o, l)
        << YAML::EndSeq;
  out << YAML::EndSeq;
  out << YAML::Key << "mult_arity" << YAML::Value;
  if (o.node_arity().empty()) {
    out << o.mult_arity();
  } else {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& layer : o.node_arity())
      out << YAML::Flow << layer;
    out << YAML::EndSeq;
  }
  out << YAML::Key << "grid" << YAML::Value << o.grid();
  out << YAML::Key << "k" << YAML::Value << o.k();
  out << YAML::Key << "base_fun_name" << YAML::Value << to_string(o.base_fun());
  out << YAML::Key << "symbolic_enabled" << YAML::Value << true;
  out << YAML::Key << "affine_trainable" << YAML::Value << o.affine_trainable();
  out << YAML::Key << "grid_eps" << YAML::Value << o.grid_eps();
  out << YAML::Key << "grid_range" << YAML::Value << YAML::Flow << YAML::BeginSeq
      << o.grid_range()[0] << o.grid_range()[1] << YAML::EndSeq;
  out << YAML::Key << "sp_trainable" << YAML::Value << o.sp_trainable();
  out << YAML::Key << "sb_trainable" << YAML::Value << o.sb_trainable();
  // Bookkeeping pykan's loadckpt reads: no auto-saving, where a later save would go.
  out << YAML::Key << "state_id" << YAML::Value << 0;
  out << YAML::Key << "auto_save" << YAML::Value << false;
  out << YAML::Key << "ckpt_path" << YAML::Value << "./model";
  out << YAML::Key << "round" << YAML::Value << 0;
  out << YAML::Key << "device" << YAML::Value << "cpu";
  out << YAML::EndMap;
  TORCH_CHECK(out.good(), "pykan checkpoint '", prefix, "' not written: ", out.GetLastError());

  // The configuration last: it is what marks a pykan checkpoint (is_pykan_checkpoint).
  write_named_tensors(prefix + "_state", state);
  write_tensor(prefix + "_cache_data", cache_data);
  try {
    io::AtomicFile file(prefix + "_config.yml");
    const std::string text = std::string(out.c_str()) + "\n";
    file.write(text.data(), text.size());
    file.commit();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write '", prefix, "_config.yml': ", io::first_line(e.what()));
  }
}

} // namespace kan
