#pragma once
/// One table of names per enum: an enum's to_string, its parser and every reader of its JSON
/// spelling look the same table up, so each spelling is written once.
///
/// Example:
///   inline constexpr kan::io::EnumName<Loss> kLossNames[] = {{Loss::kMSE, "mse"},
///                                                           {Loss::kCrossEntropy,
///                                                           "cross_entropy"}};
///   std::string to_string(Loss loss) { return kan::io::name_of(loss, kLossNames); }

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kan::io {

template <typename Enum> using EnumName = std::pair<Enum, const char*>;

/// The name of `value`; "unknown" for a value the table lacks (an integer cast to the enum).
template <typename Enum, size_t N>
std::string name_of(Enum value, const EnumName<Enum> (&table)[N]) {
  for (const auto& [entry, name] : table)
    if (entry == value)
      return name;
  return "unknown";
}

/// The value called `name`; none when no entry is.
template <typename Enum, size_t N>
std::optional<Enum> value_named(std::string_view name, const EnumName<Enum> (&table)[N]) {
  for (const auto& [entry, spelling] : table)
    if (name == spelling)
      return entry;
  return std::nullopt;
}

/// "a, b, c": every name, in the table's order (for errors that list what is accepted).
template <typename Enum, size_t N> std::string names_of(const EnumName<Enum> (&table)[N]) {
  std::string names;
  for (const auto& entry : table)
    names += (names.empty() ? "" : ", ") + std::string(entry.second);
  return names;
}

} // namespace kan::io
