#pragma once
// Parsing an option's name through its enum's one table of names (kan/io/enum_names.h).

#include "kan/io/enum_names.h"

#include <c10/util/Exception.h>

#include <cstddef>
#include <string>

namespace kan::detail {

/// The value `table` calls `name`; a c10::Error "WHAT must be one of A, B; got 'NAME'" otherwise.
template <typename Enum, size_t N>
Enum parse_name(const std::string& name, const io::EnumName<Enum> (&table)[N], const char* what) {
  const auto value = io::value_named(name, table);
  TORCH_CHECK(value, what, " must be one of ", io::names_of(table), "; got '", name, "'");
  return *value;
}

} // namespace kan::detail
