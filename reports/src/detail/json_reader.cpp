#include "detail/json_reader.h"

#include <cmath>
#include <limits>

namespace kan::reports::detail {

std::string describe(const json& value) {
  auto preview = [&] {
    std::string text = value.dump();
    if (text.size() > 40)
      text = text.substr(0, 37) + "...";
    return text;
  };
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean (" + preview() + ")";
  case json::value_t::string:
    return "a string (" + preview() + ")";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer (" + preview() + ")";
  case json::value_t::number_float:
    return "a number (" + preview() + ")";
  case json::value_t::array:
    return "an array of " + std::to_string(value.size());
  case json::value_t::object:
    return "an object";
  default:
    return "an unsupported JSON value";
  }
}

void fail(const std::string& path, const std::string& problem) {
  throw ResultsError("", path, problem);
}

double as_number(const json& value, const std::string& path) {
  if (!value.is_number())
    fail(path, "expected a number, got " + describe(value));
  const double number = value.get<double>();
  if (!std::isfinite(number))
    fail(path, "expected a finite number, got " + value.dump());
  return number;
}

int64_t as_integer(const json& value, const std::string& path) {
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, "integer " + value.dump() + " is too large (at most 2^63-1)");
  if (value.is_number_integer())
    return value.get<int64_t>();
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (std::isfinite(number) && std::floor(number) == number && std::fabs(number) < 9.0e15)
      return static_cast<int64_t>(number);
  }
  fail(path, "expected an integer, got " + describe(value));
}

uint64_t as_unsigned(const json& value, const std::string& path) {
  if (value.is_number_unsigned())
    return value.get<uint64_t>();
  const int64_t number = as_integer(value, path);
  if (number < 0)
    fail(path, "expected an integer >= 0, got " + value.dump());
  return static_cast<uint64_t>(number);
}

std::string as_string(const json& value, const std::string& path) {
  if (!value.is_string())
    fail(path, "expected a string, got " + describe(value));
  return value.get<std::string>();
}

bool as_bool(const json& value, const std::string& path) {
  if (!value.is_boolean())
    fail(path, "expected true or false, got " + describe(value));
  return value.get<bool>();
}

const json& as_array(const json& value, const std::string& path) {
  if (!value.is_array())
    fail(path, "expected an array, got " + describe(value));
  return value;
}

const json& as_object(const json& value, const std::string& path) {
  if (!value.is_object())
    fail(path, "expected an object, got " + describe(value));
  return value;
}

std::vector<double> as_numbers(const json& value, const std::string& path) {
  std::vector<double> numbers;
  const auto& array = as_array(value, path);
  numbers.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i)
    numbers.push_back(as_number(array[i], index_path(path, i)));
  return numbers;
}

std::vector<std::string> as_strings(const json& value, const std::string& path) {
  std::vector<std::string> strings;
  const auto& array = as_array(value, path);
  for (size_t i = 0; i < array.size(); ++i)
    strings.push_back(as_string(array[i], index_path(path, i)));
  return strings;
}

std::map<std::string, double> as_number_map(const json& value, const std::string& path) {
  std::map<std::string, double> numbers;
  for (const auto& [key, item] : as_object(value, path).items())
    numbers[key] = as_number(item, child_path(path, key));
  return numbers;
}

ObjectReader::ObjectReader(const json& value, std::string path, bool allow_unknown)
    : value_(as_object(value, path)), path_(std::move(path)), allow_unknown_(allow_unknown) {}

const json& ObjectReader::required(const std::string& key) {
  known_.insert(key);
  const auto it = value_.find(key);
  if (it == value_.end())
    fail(path_of(key), "missing (a required key)");
  return *it;
}

const json* ObjectReader::optional(const std::string& key) {
  known_.insert(key);
  const auto it = value_.find(key);
  return it == value_.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> ObjectReader::nullable_number(const std::string& key) {
  const auto& value = required(key);
  if (value.is_null())
    return std::nullopt;
  return as_number(value, path_of(key));
}

std::optional<int64_t> ObjectReader::nullable_integer(const std::string& key) {
  const auto& value = required(key);
  if (value.is_null())
    return std::nullopt;
  return as_integer(value, path_of(key));
}

std::optional<std::string> ObjectReader::optional_string(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_string(*value, path_of(key));
}

std::optional<double> ObjectReader::optional_number(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_number(*value, path_of(key));
}

std::optional<int64_t> ObjectReader::optional_integer(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_integer(*value, path_of(key));
}

std::optional<uint64_t> ObjectReader::optional_unsigned(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_unsigned(*value, path_of(key));
}

std::optional<bool> ObjectReader::optional_bool(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_bool(*value, path_of(key));
}

std::vector<double> ObjectReader::optional_numbers(const std::string& key) {
  const auto* value = optional(key);
  return value ? as_numbers(*value, path_of(key)) : std::vector<double>{};
}

std::vector<std::string> ObjectReader::optional_strings(const std::string& key) {
  const auto* value = optional(key);
  return value ? as_strings(*value, path_of(key)) : std::vector<std::string>{};
}

std::map<std::string, double> ObjectReader::optional_number_map(const std::string& key) {
  const auto* value = optional(key);
  return value ? as_number_map(*value, path_of(key)) : std::map<std::string, double>{};
}

json ObjectReader::optional_object(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return nullptr;
  return as_object(*value, path_of(key));
}

void ObjectReader::finish() const {
  if (allow_unknown_)
    return;
  for (const auto& item : value_.items()) {
    if (!known_.count(item.key())) {
      std::string expected;
      for (const auto& key : known_)
        expected += (expected.empty() ? "" : ", ") + key;
      fail(path_of(item.key()), "unknown key (schema " + std::string(kSchemaVersion) +
                                    " has here: " + expected + ")");
    }
  }
}

json parse_json(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> from "parse".
    std::string what = e.what();
    const auto start = what.find("] ");
    if (start != std::string::npos)
      what = what.substr(start + 2);
    throw ResultsError("", "", "not valid JSON: " + what);
  }
}

} // namespace kan::reports::detail
