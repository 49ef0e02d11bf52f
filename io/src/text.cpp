#include "kan/io/text.h"

#include <cmath>
#include <cstdio>

namespace kan::io {

std::string first_line(const std::string& message) {
  auto line = message.substr(0, message.find('\n'));
  // c10's enforce prefix, "[enforce fail at alloc_cpu.cpp:127] err == 0. ", says nothing to users.
  if (line.rfind("[enforce fail at ", 0) == 0) {
    const auto end = line.find(". ", line.find("] "));
    if (end != std::string::npos)
      line = line.substr(end + 2);
  }
  return line;
}

std::string format_seconds(double seconds) {
  char text[48];
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1 || magnitude == 0 || !std::isfinite(seconds))
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  else if (magnitude >= 1e-3)
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
  else if (magnitude >= 1e-6)
    std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  else
    std::snprintf(text, sizeof text, "%.3g ns", seconds * 1e9);
  return text;
}

} // namespace kan::io
