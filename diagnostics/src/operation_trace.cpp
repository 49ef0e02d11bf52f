#include "kan/diagnostics/operation_trace.h"

#include "detail/operation_arguments.h"

#include "kan/io/json_fields.h"

#include "kan/io/json_reader.h"
#include "kan/nn/trace_scope.h"
#include "kan/results/results_io.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace kan::diagnostics {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What encloses an operation on this thread: kan scopes, autograd nodes and ATen operations.
struct Frame {
  enum class Kind { kOperation, kPhase, kModule, kBackward } kind;
  std::string text;   // the phase, the module's name, or (backward) the forward's module path
  std::string source; // (backward) the forward's source line
};

// Where a forward operation was, for the backward operations of the autograd node it made.
struct Origin {
  std::string module, source;
};

} // namespace

struct TraceState;

namespace {

// RecordFunction callbacks are plain function pointers: they find their trace through this
// pointer, and the scope stack of their thread through t_frames.
std::atomic<TraceState*> g_active{nullptr};
// Bumped by every start(): a scope opened under an earlier trace must not pop a later one's frames.
std::atomic<uint64_t> g_generation{0};
thread_local std::vector<Frame> t_frames;
thread_local int t_operation_depth = 0;

// The context handed from an operation's start callback to its end callback.
struct OperationContext : at::ObserverContext {
  uint64_t generation = g_generation.load();
  bool pushed = false;
  bool top_level = false;
  Clock::time_point start;
  std::string module, phase, source;
  bool host_work = false;
  bool has_tensor_inputs = false;
  bool cpu_tensor_inputs = false; // a CPU input with at least one dimension
  std::string input_device;       // of the first tensor input
};

constexpr std::string_view kAutogradNodePrefix = "autograd::engine::evaluate_function: ";

bool is_copy(std::string_view name) {
  static const std::set<std::string_view> copies = {"aten::to",
                                                    "aten::_to_copy",
                                                    "aten::copy_",
                                                    "aten::_copy_from",
                                                    "aten::item",
                                                    "aten::_local_scalar_dense",
                                                    "aten::lift_fresh",
                                                    "aten::lift_fresh_copy",
                                                    "aten::_copy_from_and_resize",
                                                    "aten::contiguous"};
  return copies.count(name) > 0;
}

// Devices of the tensors among an operation's arguments. A 0-dim CPU tensor is a scalar that
// LibTorch accepts beside tensors on any device, so it does not make an operation mixed.
void collect_devices(const c10::IValue& value, std::vector<c10::Device>& all,
                     std::vector<c10::Device>& strict) {
  for_each_tensor(value, [&](const at::Tensor& t) {
    all.push_back(t.device());
    if (!is_cpu_scalar(t))
      strict.push_back(t.device());
  });
}

std::string join_devices(std::vector<c10::Device> devices) {
  std::set<std::string> names;
  for (const auto& d : devices)
    names.insert(d.str());
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Where a problem happened: the problem, the operation, its module and phase, the devices
// involved, the user's source line. The trace counts each place; the report makes a
// results::AuditFinding of each.
using Place =
    std::tuple<TraceProblem, std::string, std::string, std::string, std::string, std::string>;

// The line of the user's source that the TorchScript interpreter is running, "model.py:53"
// (the original Python where the archive kept it, else its serialized code); empty outside one.
std::string script_source() {
  const auto stack = torch::jit::currentCallstack();
  if (stack.empty())
    return {};
  const auto& range = stack.back().range;
  const auto original = range.findSourceRangeThatGenerated();
  const auto where = (original ? *original : range).file_line_col();
  if (!where || std::get<0>(*where).empty()) // a traced graph may keep no source
    return {};
  return std::get<0>(*where) + ":" + std::to_string(std::get<1>(*where));
}

// An operation's arguments and returns. A boxed call (the TorchScript interpreter's) hands its
// callbacks the whole interpreter stack: the operation's own values are the last ones on it.
c10::ArrayRef<const c10::IValue> last_of(c10::ArrayRef<const c10::IValue> values, size_t count) {
  return values.size() > count ? values.slice(values.size() - count) : values;
}
c10::ArrayRef<const c10::IValue> arguments_of(const at::RecordFunction& fn) {
  const auto schema = fn.operator_schema();
  return schema ? last_of(fn.inputs(), schema->arguments().size()) : fn.inputs();
}
c10::ArrayRef<const c10::IValue> returns_of(const at::RecordFunction& fn) {
  const auto schema = fn.operator_schema();
  const c10::ArrayRef<const c10::IValue> all(fn.outputs().data(), fn.outputs().size());
  return schema ? last_of(all, schema->returns().size()) : all;
}

// Advanced indexing takes its indices on the host and copies them over.
bool is_advanced_indexing(std::string_view name) {
  return name == "aten::index" || name == "aten::index_put_" || name == "aten::index_put" ||
         name == "aten::_index_put_impl_";
}

// The finding of a place seen `count` times while the model was on `expected`.
results::AuditFinding finding_at(const Place& place, int64_t count, const std::string& expected) {
  const auto& [problem, operation, module, phase, devices, source] = place;
  results::AuditFinding f;
  f.tensor = operation + (module.empty() ? "" : " in " + module);
  f.kind = "operation";
  f.problem = to_string(problem);
  f.device = devices;
  f.expected_device = expected;
  f.module = module;
  f.phase = phase;
  f.source = source;
  f.count = count;
  const std::string where = (module.empty() ? std::string("outside the model") : "in " + module) +
                            (source.empty() ? "" : " at " + source) +
                            (phase.empty() ? "" : " (" + phase + ")");
  const std::string times = count == 1 ? "once" : std::to_string(count) + " times";
  switch (problem) {
  case TraceProblem::kMixedDevices:
    f.message = operation + " " + where + " received tensors on " + devices + " (" + times +
                "); LibTorch refuses or silently computes on one of them";
    f.fix = "Create every tensor the module uses on the model's device (x.options()), or "
            "register it as a buffer so that .to() moves it.";
    break;
  case TraceProblem::kCreatedOnWrongDevice:
    f.message = operation + " " + where + " created a tensor on " + devices +
                " but the model is on " + expected + " (" + times + ")";
    f.fix = "Pass the device when creating it (e.g. torch::zeros(shape, x.options())), or "
            "create it once and register it as a buffer.";
    break;
  case TraceProblem::kRanOnCpu:
    f.message =
        operation + " " + where + " ran on the CPU " + times + " while the model is on " + expected;
    f.fix = "Move the tensors it reads to " + expected +
            "; work that must stay on the host belongs in kan::PhaseScope(kan::Phase::kHostWork).";
    break;
  case TraceProblem::kHostDeviceCopy:
    f.message = operation + " " + where + " copied between " + devices + " (" + times +
                "): every step pays the copy and waits for it";
    f.fix = "Keep the computation on the model's device; if a value must reach the host, fetch "
            "it once after training, not inside forward.";
    break;
  case TraceProblem::kHostSynchronization:
    f.message = operation + " " + where + " made the host wait for " + devices + " (" + times +
                ")" +
                (expected == "meta" ? "; the rehearsal went on with 0 (true for a bool)" : "");
    f.fix = "Keep the value a tensor (torch::clamp, torch::where instead of a branch on it); "
            "read it on the host only outside the training step.";
    break;
  case TraceProblem::kHostIndex:
    f.message = operation + " " + where + " indexed a tensor on " + expected +
                " with an index on the host (" + times + "): copied over on every step";
    f.fix = "Create the index on the model's device (torch::arange(n, x.options().dtype("
            "torch::kLong))), or register it as a buffer.";
    break;
  case TraceProblem::kDeviceNotUsed:
    break;
  }
  return f;
}

} // namespace

struct TraceState {
  torch::Device expected;
  std::string root;
  std::thread::id owner;
  at::CallbackHandle handle = 0;
  bool running = false;
  Clock::time_point started;
  double traced_seconds = 0;

  std::mutex mutex; // guards everything below: autograd threads report too
  std::unordered_map<int64_t, Origin> origin_of_sequence;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, OperationCount> ops;
  std::map<Place, int64_t> findings; ///< how often each place went wrong
  TransferCounts transfers;
  int64_t steps = 0;
  int64_t computing_operations = 0; // top-level, neither copies nor host work
  int64_t cpu_operations = 0;       // of those, on the CPU while the model is elsewhere
  double overhead_seconds = 0;

  explicit TraceState(torch::Device d, std::string r) : expected(d), root(std::move(r)) {}

  bool on_expected(const c10::Device& d) const {
    return d.type() == expected.type() && (!expected.has_index() || d.index() == expected.index());
  }

  // Innermost module and phase around the current operation on this thread, and the source
  // line of a TorchScript module's operation (in backward: of the forward's).
  void attribute(std::string& module, std::string& phase, bool& host_work,
                 std::string* source = nullptr) const {
    std::vector<const std::string*> modules;
    bool module_done = false;
    for (auto it = t_frames.rbegin(); it != t_frames.rend(); ++it) {
      if (it->kind == Frame::Kind::kBackward) {
        if (phase.empty())
          phase = to_string(Phase::kBackward);
        if (!module_done && modules.empty() && !it->text.empty()) {
          module = it->text;
          module_done = true;
          if (source != nullptr)
            *source = it->source;
        }
      } else if (it->kind == Frame::Kind::kPhase) {
        if (phase.empty())
          phase = it->text;
        if (it->text == to_string(Phase::kHostWork))
          host_work = true;
      } else if (it->kind == Frame::Kind::kModule && !module_done) {
        modules.push_back(&it->text);
      }
    }
    if (!module_done && !modules.empty()) {
      module = root;
      for (auto it = modules.rbegin(); it != modules.rend(); ++it)
        module += "." + **it;
    }
    if (!module_done && modules.empty()) {
      module = script_module(module);
      if (source != nullptr)
        *source = script_source();
    }
  }

  // Inside a TorchScript module's forward, which has no kanbench scopes: the interpreter's own
  // hierarchy ("TOP(KAN)::forward", "0(KANLinear)::forward", "base_activation(SiLU)::forward",
  // "::silu") as a path of instance names, "model.0.base_activation" (a ModuleList's items by
  // their index: the interpreter does not see the list). `module` where there is none.
  std::string script_module(const std::string& module) const {
    const auto hierarchy = torch::jit::currentModuleHierarchy();
    if (hierarchy.empty())
      return module;
    std::string path = root;
    for (size_t i = 1; i < hierarchy.size(); ++i) {
      // "SELF(...)": a call to a method of the same module.
      const auto paren = hierarchy[i].find('(');
      if (paren != 0 && paren != std::string::npos && hierarchy[i].compare(0, paren, "SELF") != 0)
        path += "." + hierarchy[i].substr(0, paren);
    }
    return path;
  }

  void add_finding(TraceProblem problem, const std::string& operation, const OperationContext& op,
                   const std::string& devices) {
    ++findings[Place(problem, operation, op.module, op.phase, devices, op.source)];
  }

  // Copies and waits cost every step where they are part of the model's own forward or
  // backward; the training loop around it may read a loss on the host by design.
  static bool in_model_step(const OperationContext& op) {
    return !op.module.empty() && !op.host_work &&
           (op.phase == to_string(Phase::kForward) || op.phase == to_string(Phase::kBackward));
  }

  void record_transfer(const c10::Device& from, const c10::Device& to, int64_t bytes) {
    if (from.is_cpu() && !to.is_cpu()) {
      ++transfers.host_to_device;
      transfers.host_to_device_bytes += bytes;
    } else if (!from.is_cpu() && to.is_cpu()) {
      ++transfers.device_to_host;
      transfers.device_to_host_bytes += bytes;
      ++transfers.synchronizations;
    } else if (from != to) {
      ++transfers.device_to_device;
      transfers.device_to_device_bytes += bytes;
    }
  }

  std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn);
  std::unique_ptr<at::ObserverContext> backward_frame(int64_t sequence_nr);
  void on_end(const at::RecordFunction& fn, OperationContext& context);
};

namespace {

std::unique_ptr<at::ObserverContext> start_callback(const at::RecordFunction& fn) {
  TraceState* state = g_active.load();
  if (state == nullptr)
    return nullptr;
  const auto t0 = Clock::now();
  auto context = state->on_start(fn);
  const double spent = seconds_between(t0, Clock::now());
  std::lock_guard<std::mutex> lock(state->mutex);
  state->overhead_seconds += spent;
  return context;
}

void end_callback(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* op = static_cast<OperationContext*>(context);
  if (op == nullptr)
    return;
  if (op->pushed && op->generation == g_generation.load() && !t_frames.empty()) {
    if (t_frames.back().kind == Frame::Kind::kOperation)
      --t_operation_depth;
    t_frames.pop_back();
  }
  TraceState* state = g_active.load();
  if (state == nullptr || fn.scope() != at::RecordScope::FUNCTION || !op->top_level)
    return;
  const auto t0 = Clock::now();
  state->on_end(fn, *op);
  const double spent = seconds_between(t0, Clock::now());
  std::lock_guard<std::mutex> lock(state->mutex);
  state->overhead_seconds += spent;
}

} // namespace

// An autograd node: its operations belong to the module whose forward created it.
std::unique_ptr<at::ObserverContext> TraceState::backward_frame(int64_t sequence_nr) {
  Origin origin;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = origin_of_sequence.find(sequence_nr);
    if (it != origin_of_sequence.end())
      origin = it->second;
  }
  t_frames.push_back({Frame::Kind::kBackward, origin.module, origin.source});
  auto context = std::make_unique<OperationContext>();
  context->pushed = true;
  return context;
}

std::unique_ptr<at::ObserverContext> TraceState::on_start(const at::RecordFunction& fn) {
  auto context = std::make_unique<OperationContext>();
  const std::string_view name = fn.name();
  switch (fn.scope()) {
  case at::RecordScope::USER_SCOPE:
    if (name.substr(0, kPhaseScopePrefix.size()) == kPhaseScopePrefix) {
      t_frames.push_back(
          {Frame::Kind::kPhase, std::string(name.substr(kPhaseScopePrefix.size())), {}});
      context->pushed = true;
    } else if (name.substr(0, kModuleScopePrefix.size()) == kModuleScopePrefix) {
      t_frames.push_back(
          {Frame::Kind::kModule, std::string(name.substr(kModuleScopePrefix.size())), {}});
      context->pushed = true;
    } else if (name == kAutogradNodeMark && fn.seqNr() >= 0) {
      // A custom node made in a module's forward (kan::record_autograd_node).
      std::string module, phase, source;
      bool host_work = false;
      attribute(module, phase, host_work, &source);
      std::lock_guard<std::mutex> lock(mutex);
      if (!module.empty() && phase != "backward")
        origin_of_sequence[fn.seqNr()] = {module, source};
    }
    return context;
  case at::RecordScope::BACKWARD_FUNCTION:
    return backward_frame(fn.seqNr());
  case at::RecordScope::FUNCTION:
    // The autograd engine wraps each node in a FUNCTION record of this name; the node's own
    // operations inside it are the ones that count.
    if (name.substr(0, kAutogradNodePrefix.size()) == kAutogradNodePrefix)
      return backward_frame(fn.seqNr());
    break;
  default:
    return context;
  }

  context->top_level = t_operation_depth == 0;
  context->start = Clock::now();
  attribute(context->module, context->phase, context->host_work, &context->source);
  std::vector<c10::Device> all, strict;
  const auto inputs = arguments_of(fn);
  for (const auto& value : inputs)
    collect_devices(value, all, strict);
  context->has_tensor_inputs = !all.empty();
  context->cpu_tensor_inputs =
      std::any_of(strict.begin(), strict.end(), [](const c10::Device& d) { return d.is_cpu(); });
  if (!all.empty())
    context->input_device = all.front().str();

  {
    std::lock_guard<std::mutex> lock(mutex);
    if (fn.seqNr() >= 0 && !context->module.empty() && context->phase != "backward")
      origin_of_sequence[fn.seqNr()] = {context->module, context->source};
    // Traffic is counted where it happens, at any depth: copy_ does the moving for to(),
    // _local_scalar_dense the waiting for item().
    if (name == "aten::copy_" && inputs.size() >= 2 && inputs[0].isTensor() &&
        inputs[1].isTensor()) {
      const auto& dst = inputs[0].toTensor();
      const auto& src = inputs[1].toTensor();
      if (dst.defined() && src.defined() && dst.device() != src.device())
        record_transfer(src.device(), dst.device(), static_cast<int64_t>(src.nbytes()));
    } else if (name == "aten::_local_scalar_dense" && !all.empty() && !all.front().is_cpu()) {
      record_transfer(all.front(), c10::Device(c10::kCPU),
                      static_cast<int64_t>(inputs[0].toTensor().element_size()));
    } else if (name == "aten::nonzero" && !all.empty() && !all.front().is_cpu()) {
      ++transfers.synchronizations;
    }
    // A mixed operation is named before LibTorch gets to refuse it. Advanced indexing with a
    // host index is not refused on a GPU: the index is copied over.
    if (context->top_level && !is_copy(name)) {
      bool mixed = false;
      for (const auto& d : strict)
        mixed = mixed || d != strict.front();
      if (mixed && is_advanced_indexing(name) && !strict.front().is_cpu())
        add_finding(TraceProblem::kHostIndex, std::string(name), *context, join_devices(strict));
      else if (mixed)
        add_finding(TraceProblem::kMixedDevices, std::string(name), *context, join_devices(strict));
    }
    if (context->top_level && in_model_step(*context) &&
        (name == "aten::item" || name == "aten::_local_scalar_dense") && !all.empty() &&
        !all.front().is_cpu())
      add_finding(TraceProblem::kHostSynchronization, std::string(name), *context,
                  all.front().str());
  }
  t_frames.push_back({Frame::Kind::kOperation, {}, {}});
  ++t_operation_depth;
  context->pushed = true;
  return context;
}

void TraceState::on_end(const at::RecordFunction& fn, OperationContext& op) {
  const std::string name = fn.name();
  std::vector<c10::Device> out_all, out_strict;
  std::vector<c10::Device> out_dims; // outputs with at least one dimension
  bool trained = false;              // an output autograd differentiates
  for (const auto& value : returns_of(fn)) {
    collect_devices(value, out_all, out_strict);
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().dim() > 0)
      out_dims.push_back(value.toTensor().device());
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().requires_grad())
      trained = true;
  }
  const std::string device = !out_all.empty() ? out_all.front().str() : op.input_device;
  const bool copy = is_copy(name);
  const double seconds = seconds_between(op.start, Clock::now());

  std::lock_guard<std::mutex> lock(mutex);
  auto& count = ops[std::make_tuple(op.module, op.phase, name, device)];
  count.operation = name;
  count.module = op.module;
  count.phase = op.phase;
  count.device = device.empty() ? "none" : device;
  ++count.calls;
  count.seconds += seconds;
  // A top-level copy between host and device inside the model's step.
  if (copy && in_model_step(op) && !op.input_device.empty() && !out_all.empty()) {
    const c10::Device from(op.input_device);
    const c10::Device to = out_all.front();
    if (from.is_cpu() != to.is_cpu() && name != "aten::item" && name != "aten::_local_scalar_dense")
      add_finding(TraceProblem::kHostDeviceCopy, name, op, from.str() + " -> " + to.str());
  }
  if (copy || op.host_work)
    return;
  // A factory (no tensor inputs) whose result is off the model's device. 0-dim results are
  // scalars, usable beside tensors on any device.
  if (out_all.empty())
    return;
  ++computing_operations;
  // A constant CPU scalar made from CPU scalars or from nothing is not work meant for the device:
  // LibTorch's own LBFGS keeps H_diag = torch::tensor(1) on the CPU beside a direction on the
  // GPU. A scalar that autograd differentiates (a 0-dim parameter left on the CPU) still counts.
  const bool cpu_scalar = out_dims.empty() && !op.cpu_tensor_inputs && !trained;
  const bool on_cpu = !expected.is_cpu() && out_all.front().is_cpu() && !cpu_scalar;
  if (on_cpu)
    ++cpu_operations;
  if (!op.has_tensor_inputs) {
    std::vector<c10::Device> wrong;
    for (const auto& d : out_dims) {
      if (!on_expected(d))
        wrong.push_back(d);
    }
    if (!wrong.empty()) {
      add_finding(TraceProblem::kCreatedOnWrongDevice, name, op, join_devices(wrong));
      return; // one finding for one mistake
    }
  }
  if (on_cpu)
    add_finding(TraceProblem::kRanOnCpu, name, op, "cpu");
}

} // namespace detail

using detail::Clock;
using detail::g_active;
using detail::g_generation;
using detail::seconds_between;
using detail::t_frames;
using detail::t_operation_depth;

OperationTrace::OperationTrace(torch::Device expected_device, std::string root)
    : state_(std::make_unique<detail::TraceState>(expected_device, std::move(root))) {}

OperationTrace::~OperationTrace() {
  try {
    stop();
  } catch (...) {
    // stop() throws only on another thread than start()'s: the callback stays registered
    // there, but with no active trace it records nothing and touches no freed state.
    detail::TraceState* self = state_.get();
    g_active.compare_exchange_strong(self, nullptr);
  }
}

void OperationTrace::start() {
  TORCH_CHECK(!state_->running, "OperationTrace::start: this trace is already running");
  detail::TraceState* expected = nullptr;
  TORCH_CHECK(g_active.compare_exchange_strong(expected, state_.get()),
              "OperationTrace::start: another operation trace is running; one at a time");
  state_->owner = std::this_thread::get_id();
  ++g_generation;
  t_frames.clear();
  t_operation_depth = 0;
  state_->handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(detail::start_callback, detail::end_callback)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
  state_->running = true;
  state_->started = Clock::now();
}

void OperationTrace::stop() {
  if (!state_->running)
    return;
  TORCH_CHECK(state_->owner == std::this_thread::get_id(),
              "OperationTrace::stop must run on the thread that called start()");
  at::removeCallback(state_->handle);
  g_active.store(nullptr);
  state_->running = false;
  state_->traced_seconds += seconds_between(state_->started, Clock::now());
  t_frames.clear();
  t_operation_depth = 0;
}

bool OperationTrace::running() const {
  return state_->running;
}

void OperationTrace::count_step() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  ++state_->steps;
}

TraceReport OperationTrace::report() const {
  TORCH_CHECK(!state_->running, "OperationTrace::report: stop() the trace first");
  const auto& s = *state_;
  const std::string expected = s.expected.str();
  TraceReport r;
  r.expected_device = expected;
  auto& sum = r.summary;
  sum.steps = s.steps;
  sum.traced_seconds = s.traced_seconds;
  sum.overhead_seconds = s.overhead_seconds;
  sum.cpu_operations = s.cpu_operations;
  sum.transfers = s.transfers;
  int64_t on_expected_device = 0;
  for (const auto& [key, count] : s.ops) {
    r.operations.push_back(count);
    sum.operations += count.calls;
    sum.operations_per_device[count.device] += count.calls;
    if (count.device != "none" && s.on_expected(c10::Device(count.device)))
      on_expected_device += count.calls;
  }
  for (const auto& [place, count] : s.findings)
    r.findings.push_back(detail::finding_at(place, count, expected));
  if (!s.expected.is_cpu() && sum.operations > 0) {
    sum.cpu_share = static_cast<double>(s.cpu_operations) /
                    static_cast<double>(std::max<int64_t>(s.computing_operations, 1));
    if (on_expected_device == 0) {
      results::AuditFinding f;
      f.tensor = "(all operations)";
      f.kind = "operation";
      f.problem = to_string(TraceProblem::kDeviceNotUsed);
      for (const auto& [device, calls] : sum.operations_per_device)
        f.device += (f.device.empty() ? "" : ", ") + device;
      f.expected_device = expected;
      f.count = sum.operations;
      f.message = "none of the " + std::to_string(sum.operations) + " traced operations ran on " +
                  expected + "; they ran on " + f.device;
      f.fix = "Move the model and the data to " + expected +
              " (model->to(device), Dataset::to(device)) before training.";
      r.findings.insert(r.findings.begin(), std::move(f));
    }
  }
  std::sort(r.operations.begin(), r.operations.end(), [](const auto& a, const auto& b) {
    return std::tie(a.module, a.phase, a.operation, a.device) <
           std::tie(b.module, b.phase, b.operation, b.device);
  });
  sum.findings = static_cast<int64_t>(r.findings.size());
  return r;
}

std::string to_string(TraceProblem value) {
  return io::name_of(value, kTraceProblemNames);
}

// Each struct's keys, for both directions (kan/io/json_fields.h); static, found by
// argument-dependent lookup beside their structs.

template <typename Fields> static void fields(Fields& f, OperationCount& o) {
  f.required("operation", o.operation);
  f.required("module", o.module);
  f.required("phase", o.phase);
  f.required("device", o.device);
  f.required("calls", o.calls, io::Bound::kNonNegative);
  f.required("seconds", o.seconds, io::Bound::kNonNegative);
}

// `steps`: the per-step figures divide the totals by them; written for readers, not read back.
template <typename Fields>
static void transfer_fields(Fields& f, TransferCounts& t, int64_t steps) {
  constexpr auto kCount = io::Bound::kNonNegative;
  f.required("host_to_device", t.host_to_device, kCount);
  f.required("host_to_device_bytes", t.host_to_device_bytes, kCount);
  f.required("device_to_host", t.device_to_host, kCount);
  f.required("device_to_host_bytes", t.device_to_host_bytes, kCount);
  f.required("device_to_device", t.device_to_device, kCount);
  f.required("device_to_device_bytes", t.device_to_device_bytes, kCount);
  f.required("synchronizations", t.synchronizations, kCount);
  const double per = static_cast<double>(std::max<int64_t>(steps, 1));
  if constexpr (Fields::reading())
    f.object().required("per_step");
  else
    f.required("per_step", nlohmann::json{{"host_to_device_bytes", t.host_to_device_bytes / per},
                                          {"device_to_host_bytes", t.device_to_host_bytes / per},
                                          {"synchronizations", t.synchronizations / per}});
}

template <typename Fields> static void fields(Fields& f, TraceSummary& s) {
  constexpr auto kCount = io::Bound::kNonNegative;
  f.required("steps", s.steps, kCount);
  f.required("operations", s.operations, kCount);
  f.required("operations_per_device", s.operations_per_device, kCount);
  f.required("cpu_operations", s.cpu_operations, kCount);
  f.required("cpu_share", s.cpu_share, io::Bound::kFraction);
  f.required("traced_seconds", s.traced_seconds, kCount);
  f.required("overhead_seconds", s.overhead_seconds, kCount);
  if constexpr (Fields::reading()) {
    io::ObjectReader t(f.object().required("transfers"), f.path_of("transfers"), f.lenient());
    io::JsonReader transfers(t, f.lenient());
    transfer_fields(transfers, s.transfers, s.steps);
    t.finish();
  } else {
    nlohmann::json t = nlohmann::json::object();
    io::JsonWriter transfers(t);
    transfer_fields(transfers, s.transfers, s.steps);
    f.required("transfers", t);
  }
  f.required("findings", s.findings, kCount);
}

template <typename Fields> static void fields(Fields& f, TraceReport& r) {
  f.required("expected_device", r.expected_device);
  f.required("findings", r.findings);
  f.required("operations", r.operations);
  f.required("summary", r.summary);
  if constexpr (Fields::reading()) {
    // A trace's finding names one of the trace's problems.
    for (size_t i = 0; i < r.findings.size(); ++i)
      io::enum_from_string(r.findings[i].problem, kTraceProblemNames,
                           io::index_path(f.path_of("findings"), i) + ".problem");
    if (r.summary.findings != static_cast<int64_t>(r.findings.size()))
      throw io::JsonError("", f.path_of("summary") + ".findings",
                          std::to_string(r.summary.findings) + " but the report lists " +
                              std::to_string(r.findings.size()));
  }
}

nlohmann::json TraceReport::to_json() const {
  return io::write_object(*this);
}

TraceReport trace_report_from_json(const nlohmann::json& json, const std::string& path) {
  return io::read_object<TraceReport>(json, path, /*lenient=*/false);
}

std::string TraceReport::to_text() const {
  std::ostringstream out;
  for (const auto& f : findings)
    out << "trace: " << f.problem << ": " << f.message << ". Fix: " << f.fix << "\n";
  const auto& s = summary;
  const auto& t = s.transfers;
  out << "trace: " << s.operations << " operations";
  if (s.steps > 0)
    out << " in " << s.steps << (s.steps == 1 ? " step" : " steps");
  out << " (";
  bool first = true;
  for (const auto& [device, calls] : s.operations_per_device) {
    out << (first ? "" : ", ") << device << " " << calls;
    first = false;
  }
  out << "), " << t.host_to_device << " host-to-device copies (" << t.host_to_device_bytes
      << " B), " << t.device_to_host << " device-to-host (" << t.device_to_host_bytes << " B), "
      << t.synchronizations << " synchronisations; traced " << s.traced_seconds
      << " s, of which trace overhead " << s.overhead_seconds << " s; " << s.findings
      << (s.findings == 1 ? " finding" : " findings") << "\n";
  return out.str();
}

TraceReport trace_operations(torch::Device expected_device, const std::function<void()>& fn) {
  OperationTrace trace(expected_device);
  trace.start();
  try {
    fn();
  } catch (...) {
    trace.stop();
    throw;
  }
  trace.stop();
  return trace.report();
}

} // namespace kan::diagnostics
