#pragma once
/// NVTX3 ranges in the `kanbench` domain, for Nsight Systems and any other NVTX tool. With no
/// tool attached an NVTX call returns at once. In a build without the NVTX3 headers
/// (KAN_WITH_NVTX=OFF, or no CUDA toolkit) every class here is a no-op with the same API, so
/// callers never need an #ifdef.
///
/// Ranges are per thread: each one must end on the thread that opened it.

#include <ATen/record_function.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// The NVTX domain that every kanbench range belongs to.
inline constexpr const char* kNvtxDomain = "kanbench";

/// Whether this build of kan::diagnostics emits NVTX ranges (it was built with the NVTX3 headers).
bool nvtx_compiled_in();

/// What a range marks; NVTX tools show it as the range's category (and colour).
enum class NvtxCategory : uint32_t {
  kRange = 1,  ///< an explicit NvtxRange ("epoch", "step", "evaluation")
  kPhase = 2,  ///< a kan::PhaseScope ("forward", "backward", "optimizer_step", ...)
  kModule = 3, ///< a kan::ModuleScope ("layers.0")
};

/// One NVTX range in the `kanbench` domain, open while the object lives.
///
/// Example:
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     kan::diagnostics::NvtxRange range("epoch", epoch); // "epoch", payload 3
///     for (...) { kan::diagnostics::NvtxRange step("step"); ... }
///   }
class NvtxRange {
public:
  explicit NvtxRange(const char* name);
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  /// With an integer payload (the epoch or step index), which NVTX tools show with the range.
  NvtxRange(const char* name, int64_t payload);
  NvtxRange(const std::string& name, int64_t payload) : NvtxRange(name.c_str(), payload) {}
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

private:
  bool pushed_ = false;
};

/// While alive, every kan::PhaseScope and kan::ModuleScope opened on this thread becomes an NVTX
/// range in the `kanbench` domain: "forward", "backward", "optimizer_step", "grid_update",
/// "regularization", "evaluation", "host_work", "communication" (category kPhase) and the
/// module's name, "layers.0" (category kModule). It installs a thread-local RecordFunction
/// callback for at::RecordScope::USER_SCOPE only, so ATen operations pay nothing. Instances nest
/// (only the outermost installs the callback) and must be destroyed on the thread that made them.
///
/// Example:
///   kan::diagnostics::NvtxScopes nvtx_scopes; // kan::fit's phases and KAN's layers as ranges
///   kan::fit(model, data, options);
class NvtxScopes {
public:
  NvtxScopes();
  ~NvtxScopes();
  NvtxScopes(const NvtxScopes&) = delete;
  NvtxScopes& operator=(const NvtxScopes&) = delete;

  /// Whether NVTX scopes are on for the current thread.
  static bool active();

private:
  bool installed_ = false;
};

namespace detail {

/// The RecordFunction callback NvtxScopes installs (exposed for tests: its scopes).
at::RecordFunctionCallback nvtx_scopes_callback();

/// What the NvtxScopes callback did on this thread (exposed for tests).
struct NvtxScopeCounters {
  int64_t calls = 0;  ///< start callbacks run
  int64_t pushed = 0; ///< ranges pushed (kan.phase.* and kan.module.* scopes)
  int64_t popped = 0; ///< ranges popped
};
/// This thread's counters, from its first NvtxScopes on.
NvtxScopeCounters nvtx_scope_counters();

/// The NvtxRanges this thread pushed to NVTX, as "name" or "name:payload", each followed by
/// "pop" when it ended (exposed for tests; the last 64 events, empty without NVTX).
std::vector<std::string> nvtx_range_log();

/// The NVTX range name for a RecordFunction name: "kan.phase.forward" -> "forward" (kPhase),
/// "kan.module.layers.0" -> "layers.0" (kModule); nullopt for any other name.
std::optional<std::pair<std::string, NvtxCategory>> nvtx_scope_range(const char* record_name);

} // namespace detail
} // namespace kan::diagnostics
