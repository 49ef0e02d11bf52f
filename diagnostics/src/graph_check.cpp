#include "kan/diagnostics/graph_check.h"

#include "kan/io/json_fields.h"
#include "kan/io/json_reader.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace kan::diagnostics {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
namespace attr = torch::jit::attr;
namespace aten = torch::jit::aten;
namespace prim = torch::jit::prim;

// The module a value holds: its dotted path and, where known, its object (for an attribute's
// device and for methods of an interface-typed submodule).
struct Owner {
  std::string path;
  c10::intrusive_ptr<c10::ivalue::Object> object;
};

// Findings of one problem at one operation and line, over every module that reaches it.
struct Place {
  std::string source, operation;
  GraphProblem problem;
  // By file, then line as a number ("f.py:9" before "f.py:53"), then operation.
  auto key() const {
    const auto colon = source.rfind(':');
    const long line = colon == std::string::npos ? 0 : std::atol(source.c_str() + colon + 1);
    return std::make_tuple(source.substr(0, colon), line, operation, problem);
  }
  bool operator<(const Place& o) const { return key() < o.key(); }
};
struct Seen {
  std::vector<std::string> modules;
  std::string device;
  int64_t count = 0;
  bool decides_branch = false;
};

bool is_tensor(const Value* v) {
  return v->type()->isSubtypeOf(*c10::TensorType::get());
}

// TorchScript's own code (torch/nn/functional.py, builtins compiled from strings) is not where
// a user can fix anything: its nodes are reported at the user's call.
bool is_torch_source(const std::string& file) {
  return file.empty() || file == "<string>" ||
         file.find("site-packages/torch/") != std::string::npos ||
         file.find("dist-packages/torch/") != std::string::npos ||
         file.find("__torch__/torch/") != std::string::npos;
}

// "file.py:53" of the user's original source (an archive's ranges point at its serialized code
// and remember the range that generated it); empty where the node has none.
std::string user_source(const Node* node) {
  auto range = node->sourceRange();
  if (auto original = range.findSourceRangeThatGenerated())
    range = *original;
  const auto where = range.file_line_col();
  if (!where || is_torch_source(std::get<0>(*where)) || std::get<1>(*where) == 0)
    return "";
  return std::get<0>(*where) + ":" + std::to_string(std::get<1>(*where));
}

std::optional<c10::IValue> constant(const Value* v) {
  return v->node()->kind() == prim::Constant ? torch::jit::toIValue(v) : std::nullopt;
}

bool in(const Node* node, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* name) {
    return std::strcmp(node->kind().toQualString(), name) == 0;
  });
}

// A 0-dim CPU tensor of sizes or literals (traced code turns x.shape[0] into one): reading it
// costs no synchronisation and it mixes with GPU tensors freely.
bool is_host_scalar(const Value* v, int depth = 0) {
  const Node* n = v->node();
  const auto k = n->kind();
  if (k == prim::NumToTensor || k == aten::scalar_tensor || k == prim::Constant)
    return true;
  if (k == aten::tensor)
    return n->input(0)->type()->kind() != c10::TypeKind::ListType;
  if (depth > 8 || !in(n, {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::floor_divide",
                           "aten::remainder", "aten::neg"}))
    return false;
  return std::all_of(n->inputs().begin(), n->inputs().end(), [&](const Value* input) {
    return !is_tensor(input) || is_host_scalar(input, depth + 1);
  });
}

// The device argument of an operation with one: none (absent or not a constant, as
// prim::device(x) is), "" (a constant None) or the constant device's name.
std::optional<std::string> constant_device(const Node* node) {
  const auto* schema = node->maybeSchema();
  const auto index = schema ? schema->argumentIndexWithName("device") : std::nullopt;
  const auto value = index && *index < static_cast<int>(node->inputs().size())
                         ? constant(node->input(*index))
                         : std::nullopt;
  if (value && value->isNone())
    return std::string();
  if (value && value->isDevice())
    return value->toDevice().str();
  return std::nullopt;
}

// The graph of a method or function (lazily compiled ones compiled first); null for a builtin.
const Graph* graph_of(torch::jit::Function* function) {
  auto* graph_function = function ? torch::jit::tryToGraphFunction(*function) : nullptr;
  if (!graph_function)
    return nullptr;
  graph_function->ensure_defined();
  return graph_function->graph().get();
}

class Checker {
public:
  explicit Checker(GraphCheckReport& report) : report_(report) {}

  void walk_graph(const Graph& graph, const Owner& self, const std::string& call_site) {
    graphs_.insert(&graph);
    std::unordered_map<const Value*, Owner> owners;
    if (!graph.inputs().empty() && graph.inputs()[0]->type()->cast<c10::ClassType>())
      owners[graph.inputs()[0]] = self;
    walk_block(graph.block(), self, call_site, owners);
  }

  void finish() {
    report_.methods = static_cast<int64_t>(graphs_.size());
    for (auto& [place, seen] : found_)
      report_.findings.push_back(finding(place, seen));
  }

private:
  void walk_block(const Block* block, const Owner& self, const std::string& call_site,
                  std::unordered_map<const Value*, Owner>& owners) {
    for (const Node* node : block->nodes()) {
      ++report_.nodes;
      const auto owner_of = [&](const Value* v) {
        const auto it = owners.find(v);
        return it == owners.end() ? self : it->second;
      };
      const auto source = user_source(node);
      const auto& here = source.empty() ? call_site : source;
      const auto kind = node->kind();
      if (kind == prim::GetAttr) {
        get_attr(node, owner_of(node->input(0)), call_site, owners);
      } else if (kind == prim::CallMethod) {
        const auto callee = owner_of(node->input(0));
        auto type =
            callee.object ? callee.object->type() : node->input(0)->type()->cast<c10::ClassType>();
        if (const auto* graph = graph_of(type ? type->findMethod(node->s(attr::name)) : nullptr))
          walk_graph(*graph, callee, here);
      } else if (kind == prim::CallFunction) {
        const auto type = node->input(0)->type()->cast<c10::FunctionType>();
        if (const auto* graph = graph_of(type ? type->function() : nullptr))
          walk_graph(*graph, self, here);
      } else {
        check_operation(node, self, here);
      }
      for (const Block* sub : node->blocks())
        walk_block(sub, self, call_site, owners);
    }
  }

  void get_attr(const Node* node, const Owner& owner, const std::string& call_site,
                std::unordered_map<const Value*, Owner>& owners) {
    const auto name = node->s(attr::name);
    const auto* out = node->output();
    c10::IValue held;
    if (owner.object && owner.object->type()->hasAttribute(name))
      held = owner.object->getAttr(name);
    if (out->type()->cast<c10::ClassType>()) {
      owners[out] = {owner.path + "." + name, held.isObject() ? held.toObject() : nullptr};
      return;
    }
    const auto type = node->input(0)->type()->cast<c10::ClassType>();
    if (!is_tensor(out) || !type || !type->is_module())
      return;
    const size_t slot = type->getAttributeSlot(name);
    if (type->is_parameter(slot) || type->is_buffer(slot))
      return;
    // A GetAttr has no source line of its own: its first use's is where forward reads it.
    std::string source;
    for (const auto& use : out->uses())
      if (source.empty())
        source = user_source(use.user);
    auto& seen =
        add({source.empty() ? call_site : source, name, GraphProblem::kPlainTensorAttribute},
            owner.path);
    if (held.isTensor())
      seen.device = held.toTensor().device().str();
  }

  void check_operation(const Node* node, const Owner& self, const std::string& source) {
    const auto kind = node->kind();
    const std::string op = kind.toQualString();
    // `*_like` and `new_*` factories take their device from a tensor: never flagged.
    if (in(node,
           {"aten::zeros", "aten::ones", "aten::empty", "aten::empty_strided", "aten::full",
            "aten::arange", "aten::linspace", "aten::logspace", "aten::eye", "aten::rand",
            "aten::randn", "aten::randint", "aten::randperm", "aten::tensor", "aten::as_tensor"})) {
      // tensor(2.0) is a 0-dim CPU scalar, fine next to GPU tensors; as_tensor(x) keeps x's device.
      if ((kind == aten::tensor || kind == aten::as_tensor) &&
          node->input(0)->type()->kind() != c10::TypeKind::ListType)
        return;
      if (const auto device = constant_device(node))
        add({source, op,
             device->empty() ? GraphProblem::kFactoryWithoutDevice : GraphProblem::kFixedDevice},
            self.path)
            .device = device->empty() ? "cpu" : *device;
    } else if (kind == prim::Constant && is_tensor(node->output())) {
      // Tracing keeps tensors made from Python data as constants of the graph, where
      // Module.to(device) does not reach; a 0-dim CPU one is harmless like tensor(2.0).
      const auto value = constant(node->output());
      if (!value || !value->isTensor())
        return;
      const auto& t = value->toTensor();
      if (t.dim() > 0 || !t.device().is_cpu())
        add({source, op, GraphProblem::kFixedDevice}, self.path).device = t.device().str();
    } else if (kind == c10::Symbol::aten("cpu") || kind == c10::Symbol::aten("numpy")) {
      add({source, op, GraphProblem::kHostCopy}, self.path).device = "cpu";
    } else if (kind == c10::Symbol::aten("cuda")) {
      add({source, op, GraphProblem::kFixedDevice}, self.path).device = "cuda";
    } else if (kind == aten::to || kind == aten::_to_copy) {
      const auto device = constant_device(node);
      if (device && !device->empty()) {
        const bool host = c10::Device(*device).is_cpu();
        add({source, op, host ? GraphProblem::kHostCopy : GraphProblem::kFixedDevice}, self.path)
            .device = *device;
      }
    } else if (in(node,
                  {"aten::item", "aten::tolist", "prim::tolist", "aten::is_nonzero", "aten::Bool",
                   "aten::Int", "aten::Float", "aten::Complex", "aten::ScalarImplicit",
                   "aten::IntImplicit", "aten::FloatImplicit", "aten::ComplexImplicit"}) &&
               !node->inputs().empty() && is_tensor(node->input(0)) &&
               !is_host_scalar(node->input(0))) {
      auto& seen = add({source, op, GraphProblem::kHostSynchronization}, self.path);
      for (const auto& use : node->output()->uses())
        if (use.user->kind() == prim::If || use.user->kind() == prim::Loop)
          seen.decides_branch = true;
    }
  }

  Seen& add(const Place& place, const std::string& module) {
    auto& seen = found_[place];
    ++seen.count;
    if (std::find(seen.modules.begin(), seen.modules.end(), module) == seen.modules.end())
      seen.modules.push_back(module);
    return seen;
  }

  static results::AuditFinding finding(const Place& place, const Seen& seen) {
    results::AuditFinding f;
    const bool attribute = place.problem == GraphProblem::kPlainTensorAttribute;
    f.module = seen.modules.front();
    f.tensor = attribute ? f.module + "." + place.operation : place.operation + " in " + f.module;
    f.kind = "graph";
    f.problem = to_string(place.problem);
    f.device = seen.device;
    f.source = place.source;
    f.phase = "forward";
    f.count = seen.count;
    const auto more = seen.modules.size() - 1;
    const auto others =
        more ? " and " + std::to_string(more) + (more == 1 ? " more module" : " more modules") : "";
    const auto what = f.tensor + others + (place.source.empty() ? "" : " at " + place.source);
    switch (place.problem) {
    case GraphProblem::kFactoryWithoutDevice:
      f.message = what + " makes a tensor without a device: on the CPU even when the model runs "
                         "on a GPU, so the operations using it mix devices or copy";
      f.fix = "Pass the device of an input or a parameter (device=x.device).";
      break;
    case GraphProblem::kFixedDevice:
      f.message = what + " puts its tensor on " + seen.device +
                  (place.operation == "prim::Constant" ? " (a tensor constant of the graph)" : "") +
                  ", a device fixed in the graph (tracing bakes one in), whatever device the "
                  "model is moved to";
      f.fix = "Take the device from an input or a parameter (device=x.device), and script "
              "rather than trace code that makes tensors.";
      break;
    case GraphProblem::kHostCopy:
      f.message = what + " copies a tensor to the host inside forward: on a GPU the host waits "
                         "for it and what follows runs on the CPU";
      f.fix = "Keep the tensor on its device; move results to the host outside forward.";
      break;
    case GraphProblem::kHostSynchronization:
      f.message = what + " reads a tensor's value on the host" +
                  (seen.decides_branch ? " to decide a branch" : "") +
                  ": on a GPU the host waits for every queued kernel at each call";
      f.fix = "Keep the value a tensor (torch.where, clamp, masks) instead of a Python number.";
      break;
    case GraphProblem::kPlainTensorAttribute:
      f.message = f.tensor + others +
                  (place.source.empty() ? "" : ", read at " + place.source + ",") +
                  " is a tensor attribute that is neither a parameter nor a buffer: "
                  "Module.to(device) leaves it on " +
                  (seen.device.empty() ? "its device" : seen.device);
      f.fix = "Register it as a buffer (self.register_buffer(name, tensor)) or a parameter.";
      break;
    }
    return f;
  }

  GraphCheckReport& report_;
  std::unordered_set<const Graph*> graphs_;
  std::map<Place, Seen> found_;
};

} // namespace

std::string to_string(GraphProblem value) {
  return io::name_of(value, kGraphProblemNames);
}

GraphCheckReport check_graph(const torch::jit::Module& module, const std::string& root) {
  const auto start = std::chrono::steady_clock::now();
  GraphCheckReport report;
  Checker checker(report);
  const auto* forward = graph_of(&module.get_method("forward").function());
  TORCH_CHECK(forward, "check_graph: forward of ", module.type()->name()->qualifiedName(),
              " has no graph");
  checker.walk_graph(*forward, {root, module._ivalue()}, "");
  checker.finish();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

// The report's keys (kan/io/json_fields.h), both ways.
template <typename Fields> static void fields(Fields& f, GraphCheckReport& r) {
  f.required("findings", r.findings);
  if constexpr (Fields::reading()) {
    io::ObjectReader summary(f.object().required("summary"), f.path_of("summary"), f.lenient());
    r.methods = summary.integer("methods", io::Bound::kNonNegative);
    r.nodes = summary.integer("nodes", io::Bound::kNonNegative);
    r.seconds = summary.number("seconds", io::Bound::kNonNegative);
    const auto count = summary.integer("findings", io::Bound::kNonNegative);
    if (count != static_cast<int64_t>(r.findings.size()))
      throw io::JsonError("", f.path_of("summary") + ".findings",
                          std::to_string(count) + " but the report lists " +
                              std::to_string(r.findings.size()));
    summary.finish();
  } else {
    f.required("summary", nlohmann::json{{"methods", r.methods},
                                         {"nodes", r.nodes},
                                         {"seconds", r.seconds},
                                         {"findings", static_cast<int64_t>(r.findings.size())}});
  }
}

nlohmann::json GraphCheckReport::to_json() const {
  return io::write_object(*this);
}

GraphCheckReport graph_check_report_from_json(const nlohmann::json& json, const std::string& path) {
  return io::read_object<GraphCheckReport>(json, path, /*lenient=*/false);
}

std::string GraphCheckReport::to_text() const {
  std::ostringstream out;
  for (const auto& f : findings)
    out << "static: " << f.problem << ": " << f.message << ". Fix: " << f.fix << "\n";
  out << "static: " << findings.size() << (findings.size() == 1 ? " finding" : " findings")
      << " in " << methods << (methods == 1 ? " method" : " methods") << " (" << nodes << " nodes, "
      << seconds << " s)\n";
  return out.str();
}

} // namespace kan::diagnostics
