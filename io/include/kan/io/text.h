#pragma once
/// Text for people, written the same way by every part of kanbench.

#include <cstddef>
#include <string>
#include <string_view>

namespace kan::io {

/// The first line of a message: LibTorch appends a C++ backtrace and context lines to its
/// errors' text, and c10's "[enforce fail at FILE:LINE] condition. " prefix says nothing to users.
std::string first_line(const std::string& message);

/// `text` as it may appear in a one-line message, so that no message echoes a megabyte of input
/// and any byte sequence quoted from a file stays one printable line: a text longer than
/// `max_chars` keeps about two thirds of them from its start and a third from its end around
/// "..." ("abc...xyz"), with `say_length` followed by its length ("abc...xyz (5000
/// characters)"); control characters and bytes that are not UTF-8 are written as \xNN.
std::string elided(std::string_view text, size_t max_chars = 80, bool say_length = false);

/// A duration for people: "512 ms", "1.23 s", "85.1 us", "3 ns".
std::string format_seconds(double seconds);

} // namespace kan::io
