#include "kan/nn/trace_scope.h"

#include <torch/csrc/autograd/function.h>

#include <string>

namespace kan {
namespace {

// The name is built only when an observer is listening.
void begin_scope(at::RecordFunction& guard, std::string_view prefix, std::string_view name,
                 int64_t index = -1) {
  if (!guard.isActive())
    return;
  std::string full(prefix);
  full.append(name);
  if (index >= 0)
    full.append(".").append(std::to_string(index));
  guard.before(std::string_view(full));
}

} // namespace

const char* to_string(Phase phase) {
  switch (phase) {
  case Phase::kForward:
    return "forward";
  case Phase::kBackward:
    return "backward";
  case Phase::kOptimizerStep:
    return "optimizer_step";
  case Phase::kGridUpdate:
    return "grid_update";
  case Phase::kRegularization:
    return "regularization";
  case Phase::kEvaluation:
    return "evaluation";
  case Phase::kHostWork:
    return "host_work";
  case Phase::kCommunication:
    return "communication";
  }
  return "unknown";
}

void record_autograd_node(const at::Tensor& output) {
  at::RecordFunction guard(at::RecordScope::USER_SCOPE);
  if (!guard.isActive())
    return;
  if (const auto node = output.grad_fn())
    guard.before(kAutogradNodeMark, static_cast<int64_t>(node->sequence_nr()));
}

PhaseScope::PhaseScope(Phase phase) : guard_(at::RecordScope::USER_SCOPE) {
  begin_scope(guard_, kPhaseScopePrefix, to_string(phase));
}

ModuleScope::ModuleScope(std::string_view name) : guard_(at::RecordScope::USER_SCOPE) {
  begin_scope(guard_, kModuleScopePrefix, name);
}

ModuleScope::ModuleScope(std::string_view list_name, int64_t index)
    : guard_(at::RecordScope::USER_SCOPE) {
  begin_scope(guard_, kModuleScopePrefix, list_name, index);
}

} // namespace kan
