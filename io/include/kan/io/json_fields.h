#pragma once
/// Each key of a document written once. A struct's keys are listed by one function,
///
///   template <typename Fields> void fields(Fields& f, EpochActivity& e) {
///     f.required("kernels", e.kernels, Bound::kNonNegative);
///     f.optional("reason", e.reason);
///   }
///
/// found by argument-dependent lookup beside the struct, and that list drives both directions:
/// write_object() hands it a JsonWriter, read_object() a JsonReader (strict, through
/// ObjectReader: every error names its key path, and keys nobody listed are refused). A check
/// that only a reader makes (two arrays of one length, a status and what it promises) goes in the
/// same function under `if constexpr (Fields::reading())`.
///
/// Why a list of our own rather than nlohmann's NLOHMANN_DEFINE_TYPE macros: those neither
/// refuse unknown keys nor name the key path of an error, know no bounds (a negative count) and
/// write a missing optional as null, where these documents distinguish missing (an optional
/// key), null (a metric that does not apply) and present.
///
/// Value types: bool, integers, double, std::string, nlohmann::json (kept as it is), structs
/// with fields(), and std::vector, std::optional and std::map<std::string, T> of any of them.

#include "kan/io/enum_names.h"
#include "kan/io/json_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kan::io {

class JsonWriter;

namespace detail {
template <typename T> struct is_vector : std::false_type {};
template <typename T> struct is_vector<std::vector<T>> : std::true_type {};
template <typename T> struct is_optional : std::false_type {};
template <typename T> struct is_optional<std::optional<T>> : std::true_type {};
template <typename T, typename = void> struct has_fields : std::false_type {};
template <typename T>
struct has_fields<T, std::void_t<decltype(fields(std::declval<JsonWriter&>(), std::declval<T&>()))>>
    : std::true_type {};
template <typename T> struct is_string_map : std::false_type {};
template <typename T> struct is_string_map<std::map<std::string, T>> : std::true_type {};
template <typename T> struct is_vector_of_fields : std::false_type {};
template <typename T> struct is_vector_of_fields<std::vector<T>> : has_fields<T> {};
} // namespace detail

template <typename T> json write_value(const T& value);
template <typename T>
T read_value(const json& value, const std::string& path, Bound bound, bool lenient);

/// `value` as a JSON object of the keys its fields() lists.
template <typename T> json write_object(const T& value);

/// Reads a T from the object `value` at `path` by its fields(), into `initial` (a T without a
/// default constructor, or a key's value when an older document lacks it). `lenient`: keys
/// nobody listed are allowed (a document of a newer minor version).
template <typename T>
T read_object(const json& value, const std::string& path, bool lenient, T initial);
template <typename T> T read_object(const json& value, const std::string& path, bool lenient);

/// The writing side of fields(): puts each key into one JSON object.
class JsonWriter {
public:
  explicit JsonWriter(json& out) : out_(out) {}
  static constexpr bool reading() { return false; }
  /// For messages that name a key: only a reader's have a path.
  std::string path_of(const std::string& key) const { return key; }

  /// A key always written.
  template <typename T> void required(const char* key, const T& value, Bound = Bound::kAny) {
    out_[key] = write_value(value);
  }
  /// A key written only when set (an optional) or not empty (a string, a list); read back as
  /// unset or empty when missing.
  template <typename T> void optional(const char* key, const T& value, Bound = Bound::kAny) {
    if constexpr (detail::is_optional<T>::value) {
      if (value)
        out_[key] = write_value(*value);
    } else if constexpr (std::is_same_v<T, json>) {
      if (!value.is_null())
        out_[key] = value;
    } else if (!value.empty()) {
      out_[key] = write_value(value);
    }
  }
  /// A key always written that older files may lack: read as the value's default then.
  template <typename T> void defaulted(const char* key, const T& value, Bound = Bound::kAny) {
    out_[key] = write_value(value);
  }
  /// A key always written, null when unset.
  template <typename T>
  void nullable(const char* key, const std::optional<T>& value, Bound = Bound::kAny) {
    out_[key] = value ? write_value(*value) : json(nullptr);
  }
  /// A metric that may not apply (an RMSE of a classification, anything of an empty test set):
  /// NaN, written null.
  void metric(const char* key, const double& value, Bound = Bound::kNonNegative) {
    out_[key] = std::isfinite(value) ? json(value) : json(nullptr);
  }
  /// A key that repeats what the document says elsewhere (a sum, a copy): written from it, and
  /// a reader refuses a file where the two differ (times up to rounding).
  template <typename T> void repeats(const char* key, const T& expected, const std::string&) {
    out_[key] = write_value(expected);
  }
  /// A key with a JSON form of its own.
  template <typename T, typename Write, typename Read>
  void custom(const char* key, const T& value, Write write, Read) {
    out_[key] = write(value);
  }
  /// An enum by its names (kan/io/enum_names.h).
  template <typename Enum, size_t N>
  void enumeration(const char* key, const Enum& value, const EnumName<Enum> (&table)[N]) {
    out_[key] = name_of(value, table);
  }
  /// An enum always written that older files may lack.
  template <typename Enum, size_t N>
  void defaulted_enumeration(const char* key, const Enum& value, const EnumName<Enum> (&table)[N]) {
    out_[key] = name_of(value, table);
  }

private:
  json& out_;
};

/// The reading side of fields(): reads each key of one object strictly.
class JsonReader {
public:
  JsonReader(ObjectReader& object, bool lenient) : object_(object), lenient_(lenient) {}
  static constexpr bool reading() { return true; }
  bool lenient() const { return lenient_; }
  /// The object being read, for checks that need its keys' paths.
  ObjectReader& object() { return object_; }
  std::string path_of(const std::string& key) const { return object_.path_of(key); }

  template <typename T> void required(const char* key, T& value, Bound bound = Bound::kAny) {
    value = read_value<T>(object_.required(key), path_of(key), bound, lenient_);
  }
  template <typename T> void optional(const char* key, T& value, Bound bound = Bound::kAny) {
    const json* found = object_.optional(key);
    if constexpr (detail::is_optional<T>::value) {
      value = found ? std::optional(
                          read_value<typename T::value_type>(*found, path_of(key), bound, lenient_))
                    : std::nullopt;
    } else {
      value = found ? read_value<T>(*found, path_of(key), bound, lenient_) : T{};
    }
  }
  template <typename T> void defaulted(const char* key, T& value, Bound bound = Bound::kAny) {
    if (const json* found = object_.optional(key))
      value = read_value<T>(*found, path_of(key), bound, lenient_);
  }
  template <typename T>
  void nullable(const char* key, std::optional<T>& value, Bound bound = Bound::kAny) {
    const json& found = object_.required(key);
    value = found.is_null() ? std::nullopt
                            : std::optional(read_value<T>(found, path_of(key), bound, lenient_));
  }
  void metric(const char* key, double& value, Bound bound = Bound::kNonNegative) {
    value = object_.nullable_number(key, bound).value_or(std::numeric_limits<double>::quiet_NaN());
  }
  template <typename Enum, size_t N>
  void enumeration(const char* key, Enum& value, const EnumName<Enum> (&table)[N]) {
    value = enum_from_string(object_.string(key), table, path_of(key));
  }
  template <typename Enum, size_t N>
  void defaulted_enumeration(const char* key, Enum& value, const EnumName<Enum> (&table)[N]) {
    if (object_.optional(key))
      enumeration(key, value, table);
  }
  /// `what` names the original in the error: "the stages' training time".
  template <typename T> void repeats(const char* key, const T& expected, const std::string& what) {
    const json& found = object_.required(key);
    if constexpr (std::is_floating_point_v<T>) {
      const double value = as_number(found, path_of(key), Bound::kAny);
      if (std::abs(value - expected) > 1e-9 * std::max(1.0, std::abs(value)))
        fail(path_of(key),
             format_number(value) + " is not " + what + " " + format_number(expected));
    } else if (const json written = write_value(expected); found != written) {
      fail(path_of(key), "is " + elided(found.dump(), kQuotedChars, /*say_length=*/true) + " but " +
                             what + " is " +
                             elided(written.dump(), kQuotedChars, /*say_length=*/true));
    }
  }
  template <typename T, typename Write, typename Read>
  void custom(const char* key, T& value, Write, Read read) {
    value = read(object_.required(key), path_of(key));
  }

private:
  ObjectReader& object_;
  bool lenient_;
};

template <typename T> json write_value(const T& value) {
  if constexpr (detail::has_fields<T>::value) {
    return write_object(value);
  } else if constexpr (detail::is_vector_of_fields<T>::value) {
    json array = json::array();
    for (const auto& item : value)
      array.push_back(write_object(item));
    return array;
  } else if constexpr (detail::is_string_map<T>::value) {
    json object = json::object();
    for (const auto& [key, item] : value)
      object[key] = write_value(item);
    return object;
  } else {
    return json(value);
  }
}

template <typename T>
T read_value(const json& value, const std::string& path, Bound bound, bool lenient) {
  if constexpr (std::is_same_v<T, bool>) {
    return as_bool(value, path);
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return static_cast<T>(as_integer(value, path, bound));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(as_unsigned(value, path));
  } else if constexpr (std::is_floating_point_v<T>) {
    return as_number(value, path, bound);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return as_string(value, path);
  } else if constexpr (std::is_same_v<T, json>) {
    return value;
  } else if constexpr (detail::is_string_map<T>::value) {
    T items;
    for (const auto& [key, item] : as_object(value, path).items())
      items.emplace(
          key, read_value<typename T::mapped_type>(item, child_path(path, key), bound, lenient));
    return items;
  } else if constexpr (detail::is_vector<T>::value) {
    using Item = typename T::value_type;
    return read_array<Item>(value, path, [&](const json& item, const std::string& at) {
      return read_value<Item>(item, at, bound, lenient);
    });
  } else {
    static_assert(detail::has_fields<T>::value, "a value type without fields()");
    return read_object<T>(value, path, lenient);
  }
}

template <typename T> json write_object(const T& value) {
  json out = json::object();
  JsonWriter writer(out);
  // One fields() serves both directions, so it takes its struct by non-const reference; the
  // writer only reads it.
  fields(writer, const_cast<T&>(value));
  return out;
}

namespace detail {
template <typename T>
void read_fields(const json& value, const std::string& path, bool lenient, T& result) {
  ObjectReader object(value, path, lenient);
  JsonReader reader(object, lenient);
  fields(reader, result);
  object.finish();
}
} // namespace detail

template <typename T>
T read_object(const json& value, const std::string& path, bool lenient, T initial) {
  detail::read_fields(value, path, lenient, initial);
  return initial;
}

template <typename T> T read_object(const json& value, const std::string& path, bool lenient) {
  T result{};
  detail::read_fields(value, path, lenient, result);
  return result;
}

} // namespace kan::io
