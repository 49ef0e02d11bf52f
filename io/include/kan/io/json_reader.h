#pragma once
/// Strict JSON reading with key paths, for every document kanbench reads (results.json,
/// fit.json, audit.json, checkpoint configurations): every accessor names the path of what it
/// reads, so a wrong input ends in one JsonError("", "cases[3].median_epoch_seconds",
/// "expected ..."), and ObjectReader::finish() refuses keys nobody read.

#include "kan/io/enum_names.h"
#include "kan/io/text.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kan::io {

using json = nlohmann::json;

/// A document that cannot be read: what() is "FILE: KEY.PATH: PROBLEM", e.g.
/// "run/results.json: cases[3].median_epoch_seconds: expected a number, got a string (\"fast\")".
class JsonError : public std::runtime_error {
public:
  JsonError(std::string file, std::string key_path, std::string problem);
  const std::string& file() const { return file_; }         ///< "" when not read from a file
  const std::string& key_path() const { return key_path_; } ///< "" for the whole document
  const std::string& problem() const { return problem_; }
  /// The same error, attributed to `file`.
  JsonError in_file(const std::string& file) const;

private:
  std::string file_, key_path_, problem_;
};

/// "a string (\"fast\")", "null", "an array of 3", ... for "expected X, got Y".
std::string describe(const json& value);

/// How many characters of a value a JSON reader's message quotes (elided).
inline constexpr size_t kQuotedChars = 60;
/// `text` elided and in double quotes, for messages: "\"toy\"".
inline std::string quoted(const std::string& text) {
  return "\"" + elided(text, kQuotedChars, /*say_length=*/true) + "\"";
}
/// A finite number as JSON writes it (shortest form that reads back: "0.51", "1e-09").
std::string format_number(double number);

[[noreturn]] void fail(const std::string& path, const std::string& problem);

/// The key path of `key` in the object at `path` (an overlong key is elided).
inline std::string child_path(const std::string& path, const std::string& key) {
  return path.empty() ? elided(key, 80, /*say_length=*/true)
                      : path + "." + elided(key, 80, /*say_length=*/true);
}
inline std::string index_path(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

/// What a number may be besides finite: seconds, counts, bytes and rates cannot be negative;
/// fractions are 0..1.
enum class Bound { kAny, kNonNegative, kFraction };

double as_number(const json& value, const std::string& path, Bound bound = Bound::kAny);
int64_t as_integer(const json& value, const std::string& path, Bound bound = Bound::kAny);
uint64_t as_unsigned(const json& value, const std::string& path);
std::string as_string(const json& value, const std::string& path);
bool as_bool(const json& value, const std::string& path);
const json& as_array(const json& value, const std::string& path);
const json& as_object(const json& value, const std::string& path);
std::vector<double> as_numbers(const json& value, const std::string& path,
                               Bound bound = Bound::kAny);
std::vector<std::string> as_strings(const json& value, const std::string& path);
std::map<std::string, double> as_number_map(const json& value, const std::string& path,
                                            Bound bound = Bound::kAny);

/// One JSON object being read. Every key read is remembered; finish() refuses the others
/// unless unknown keys are allowed (a newer minor version of the format).
class ObjectReader {
public:
  ObjectReader(const json& value, std::string path, bool allow_unknown);

  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return child_path(path_, key); }

  /// The value of a key that must be there (it may be null).
  const json& required(const std::string& key);
  /// The value of a key that may be missing; nullptr when missing or null.
  const json* optional(const std::string& key);

  std::string string(const std::string& key) { return as_string(required(key), path_of(key)); }
  double number(const std::string& key, Bound bound = Bound::kAny) {
    return as_number(required(key), path_of(key), bound);
  }
  int64_t integer(const std::string& key, Bound bound = Bound::kAny) {
    return as_integer(required(key), path_of(key), bound);
  }
  bool boolean(const std::string& key) { return as_bool(required(key), path_of(key)); }
  std::vector<double> numbers(const std::string& key, Bound bound = Bound::kAny) {
    return as_numbers(required(key), path_of(key), bound);
  }

  /// A key that must be there but may be null.
  std::optional<double> nullable_number(const std::string& key, Bound bound = Bound::kAny);
  std::optional<int64_t> nullable_integer(const std::string& key, Bound bound = Bound::kAny);

  /// Keys that may be missing (or null).
  std::optional<std::string> optional_string(const std::string& key);
  std::optional<double> optional_number(const std::string& key, Bound bound = Bound::kAny);
  std::optional<int64_t> optional_integer(const std::string& key, Bound bound = Bound::kAny);
  std::optional<uint64_t> optional_unsigned(const std::string& key);
  std::optional<bool> optional_bool(const std::string& key);
  std::vector<double> optional_numbers(const std::string& key);
  std::vector<std::string> optional_strings(const std::string& key);
  std::map<std::string, double> optional_number_map(const std::string& key,
                                                    Bound bound = Bound::kAny);
  /// An object kept as JSON; null when missing.
  json optional_object(const std::string& key);

  /// Throws for the first key that was never read (unless unknown keys are allowed).
  void finish() const;

private:
  const json& value_;
  std::string path_;
  bool allow_unknown_;
  std::set<std::string> known_;
};

/// Each element of the array `value` read by `read_one(element, its key path)`.
template <typename T, typename ReadOne>
std::vector<T> read_array(const json& value, const std::string& path, ReadOne&& read_one) {
  std::vector<T> items;
  const auto& array = as_array(value, path);
  for (size_t i = 0; i < array.size(); ++i)
    items.push_back(read_one(array[i], index_path(path, i)));
  return items;
}

/// The value `table` calls `text`; a JsonError at `path` that lists the names otherwise.
template <typename Enum, size_t N>
Enum enum_from_string(const std::string& text, const EnumName<Enum> (&table)[N],
                      const std::string& path) {
  if (const auto value = value_named(text, table))
    return *value;
  fail(path, "expected one of " + names_of(table) + ", got " + quoted(text));
}

/// Checks that `version` is "MAJOR.MINOR.PATCH" with the major of `writes` (the version this
/// reader's library writes, "1.2.0"); a JsonError at `key_path` otherwise. Returns the file's
/// minor version: a newer minor than the reader's may hold keys the reader does not know.
int check_schema_version(const json& version, const std::string& key_path, const char* writes);
/// The minor version of "MAJOR.MINOR.PATCH".
int minor_version(const char* version);
/// The top level of a document `what` ("results.json"): an object whose schema_version has the
/// major of `writes`. Returns the file's minor version; its readers tolerate unknown keys only
/// when it is newer than `writes`'.
int check_document(const json& value, const char* writes, const char* what);

/// Objects and arrays nested deeper than this are refused (every reader and writer of the
/// value recurses; a results.json nests about 6 levels).
inline constexpr size_t kMaxJsonDepth = 512;

/// Parses text as JSON. Throws JsonError with the key path where parsing stopped:
/// ("", "cases[0].epoch_seconds[2]", "number out of range (1e999)"), ("", "cases[1]", "not valid
/// JSON: parse error at line 9, column 3: ..."); also for nesting deeper than kMaxJsonDepth and,
/// unless `allow_duplicate_keys` (then the last one counts), a key twice in one object. Echoed
/// input is elided.
json parse_json(const std::string& text, bool allow_duplicate_keys = false);

} // namespace kan::io
