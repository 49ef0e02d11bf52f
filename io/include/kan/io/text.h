#pragma once
/// Text for people, written the same way by every part of kanbench.

#include <string>

namespace kan::io {

/// The first line of a message (LibTorch appends a C++ backtrace to its errors' text).
std::string first_line(const std::string& message);

/// A duration for people: "512 ms", "1.23 s", "85.1 us", "3 ns".
std::string format_seconds(double seconds);

} // namespace kan::io
