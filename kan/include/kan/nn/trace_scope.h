#pragma once
/// Names for regions of kanbench's work, seen by observers of LibTorch's RecordFunction: the
/// operation trace of kan::diagnostics attributes every ATen operation to the innermost phase
/// and module that ran it. When nothing observes, a scope costs one branch.

#include <ATen/record_function.h>

#include <cstdint>
#include <string_view>

namespace kan {

/// What part of training a piece of work belongs to.
enum class Phase {
  kForward,       ///< the model's forward and the loss
  kBackward,      ///< gradients
  kOptimizerStep, ///< the optimiser's update (LBFGS re-enters forward and backward inside it)
  kGridUpdate,    ///< update_grid_from_samples
  kRegularization,
  kEvaluation,    ///< metrics on held-out data
  kHostWork,      ///< deliberately on the CPU whatever the model's device (seeded draws)
  kCommunication, ///< data-parallel collectives (kan::DataParallel)
};
/// "forward", "backward", "optimizer_step", "grid_update", "regularization", "evaluation",
/// "host_work", "communication".
const char* to_string(Phase phase);

/// RecordFunction names of the scopes: the prefix, then the phase or the module's name.
inline constexpr std::string_view kPhaseScopePrefix = "kan.phase.";
inline constexpr std::string_view kModuleScopePrefix = "kan.module.";
/// RecordFunction name of record_autograd_node's mark; its sequence number is the node's.
inline constexpr std::string_view kAutogradNodeMark = "kan.autograd_node";

/// Tells observers that the autograd node behind `output` belongs to the enclosing module scope,
/// so that its backward's work is attributed to that module: for custom nodes
/// (torch::autograd::Function), whose creation no ATen operation records. Costs one branch when
/// nothing observes.
void record_autograd_node(const at::Tensor& output);

/// Marks the work done while it is alive as `phase`.
///
/// Example:
///   { kan::PhaseScope scope(kan::Phase::kBackward); loss.backward(); }
class PhaseScope {
public:
  explicit PhaseScope(Phase phase);

private:
  at::RecordFunction guard_;
};

/// Marks the work done while it is alive as done by the sub-module `name` of the enclosing
/// module scope (e.g. "layers.0"); nested scopes join into a dotted path.
class ModuleScope {
public:
  explicit ModuleScope(std::string_view name);
  /// The element `index` of a module list: ModuleScope("layers", 0) is "layers.0".
  ModuleScope(std::string_view list_name, int64_t index);

private:
  at::RecordFunction guard_;
};

} // namespace kan
