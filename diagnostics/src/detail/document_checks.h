#pragma once
// What the readers of kanbench's documents in kan::diagnostics (audit.json, fit.json's strict
// reader) check alike.

#include "kan/io/json_fields.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kan::diagnostics::detail {

using io::ObjectReader;
using json = nlohmann::json;

inline void check_command(ObjectReader& r, const char* expected) {
  const auto command = r.string("command");
  if (command != expected)
    io::fail(r.path_of("command"),
             "expected \"" + std::string(expected) + "\", got " + io::quoted(command));
}

// A summary key that repeats another part of the document must repeat it exactly.
inline void check_repeats(const json& value, const json& original, const std::string& path,
                          const std::string& original_path) {
  if (value != original)
    io::fail(path, "is " + io::elided(value.dump(), io::kQuotedChars, /*say_length=*/true) +
                       " but " + original_path + " is " +
                       io::elided(original.dump(), io::kQuotedChars, /*say_length=*/true));
}

template <typename Read> auto in_file(const std::string& source, Read read) {
  try {
    return read();
  } catch (const io::JsonError& e) {
    throw e.in_file(source);
  }
}

} // namespace kan::diagnostics::detail
