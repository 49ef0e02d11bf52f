#pragma once
/// Text for people, written the same way by every part of kanbench.

#include <string>

namespace kan::io {

/// The first line of a message: LibTorch appends a C++ backtrace and context lines to its
/// errors' text, and c10's "[enforce fail at FILE:LINE] condition. " prefix says nothing to users.
std::string first_line(const std::string& message);

/// A duration for people: "512 ms", "1.23 s", "85.1 us", "3 ns".
std::string format_seconds(double seconds);

} // namespace kan::io
