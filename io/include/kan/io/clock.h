#pragma once
/// Elapsed wall time, measured the same way by every part of kanbench.

#include <chrono>

namespace kan::io {

/// The monotonic clock every duration is measured on (never the wall clock: it can jump).
using Clock = std::chrono::steady_clock;

/// Seconds from `start` to now on Clock.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace kan::io
