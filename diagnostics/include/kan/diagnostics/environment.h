#pragma once
/// The environment report: LibTorch and CUDA versions, whether CUDA is usable and why not,
/// the devices, the CPU and the threads, each problem with what to do about it.

#include "kan/results/environment.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// Collects the report for this process on this machine. Queries every visible GPU (which
/// creates a CUDA context on each); never throws for a missing driver or device.
///
/// Example:
///   std::cout << kan::diagnostics::to_text(kan::diagnostics::collect_environment());
results::Environment collect_environment();

/// Why CUDA cannot be used in this process ("no NVIDIA driver: ...", "CUDA_VISIBLE_DEVICES=''
/// hides every GPU", ...), or an empty string when it can.
std::string cuda_unavailable_reason();

/// What would make CPU timings on this machine unreliable, each with its fix: fewer LibTorch
/// threads than usable CPUs, a load average above the CPU count (other processes), a frequency
/// governor other than "performance" (the clock drifts with load). collect_environment adds these
/// to its problems from /proc and /sys.
std::vector<results::EnvironmentProblem>
timing_problems(int64_t cpu_cores, int64_t torch_threads, std::optional<double> load_average,
                const std::optional<std::string>& governor);

/// The report for a terminal: one "key: value" line each, then the problems with their fixes.
std::string to_text(const results::Environment& environment);

} // namespace kan::diagnostics
