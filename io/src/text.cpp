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

namespace {

// The length of the UTF-8 sequence that starts at text[i] (1 to 4), or 0 when it is not a valid
// one (a stray continuation byte, an overlong or truncated sequence).
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const size_t n = lead < 0x80                   ? 1
                   : lead >= 0xC2 && lead < 0xE0 ? 2
                   : lead >= 0xE0 && lead < 0xF0 ? 3
                   : lead >= 0xF0 && lead < 0xF5 ? 4
                                                 : 0;
  if (n == 0 || i + n > text.size())
    return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80)
      return 0;
  return n;
}

// Appends text[begin, end) with control characters and invalid UTF-8 as \xNN.
void append_printable(std::string& out, std::string_view text, size_t begin, size_t end) {
  for (size_t i = begin; i < end;) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    if (n == 0 || c < 0x20 || c == 0x7F || i + n > end) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", static_cast<unsigned>(c));
      out += escaped;
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
}

// Moves i back to the start of the UTF-8 character it falls in (at most 3 bytes back).
size_t character_start(std::string_view text, size_t i) {
  for (int back = 0;
       back < 3 && i > 0 && i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
       ++back)
    --i;
  return i;
}

} // namespace

std::string elided(std::string_view text, size_t max_chars, bool say_length) {
  std::string out;
  if (text.size() <= max_chars) {
    append_printable(out, text, 0, text.size());
    return out;
  }
  // Two thirds from the start, where a value's meaning usually is, a third from the end.
  const size_t keep_head = max_chars * 2 / 3, keep_tail = max_chars - keep_head;
  const size_t head = character_start(text, keep_head);
  const size_t tail = character_start(text, text.size() - keep_tail);
  append_printable(out, text, 0, head);
  out += "...";
  append_printable(out, text, tail, text.size());
  if (say_length)
    out += " (" + std::to_string(text.size()) + " characters)";
  return out;
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
