#include "kan/io/json_reader.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace kan::io {

namespace {

std::string compose(const std::string& file, const std::string& key_path,
                    const std::string& problem) {
  std::string text;
  if (!file.empty())
    text += file + ": ";
  if (!key_path.empty())
    text += key_path + ": ";
  return text + problem;
}

} // namespace

JsonError::JsonError(std::string file, std::string key_path, std::string problem)
    : std::runtime_error(compose(file, key_path, problem)), file_(std::move(file)),
      key_path_(std::move(key_path)), problem_(std::move(problem)) {}

JsonError JsonError::in_file(const std::string& file) const {
  return JsonError(file, key_path_, problem_);
}

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

std::string format_number(double number) {
  return json(number).dump();
}

void fail(const std::string& path, const std::string& problem) {
  throw JsonError("", path, problem);
}

namespace {

template <typename T>
void check_bound(T number, const json& value, const std::string& path, Bound bound) {
  if (bound == Bound::kNonNegative && number < 0)
    fail(path, "expected a number >= 0, got " + value.dump());
  if (bound == Bound::kFraction && !(number >= 0 && number <= 1))
    fail(path, "expected a fraction from 0 to 1, got " + value.dump());
}

} // namespace

double as_number(const json& value, const std::string& path, Bound bound) {
  if (!value.is_number())
    fail(path, "expected a number, got " + describe(value));
  const double number = value.get<double>();
  if (!std::isfinite(number))
    fail(path, "expected a finite number, got " + value.dump());
  check_bound(number, value, path, bound);
  return number;
}

int64_t as_integer(const json& value, const std::string& path, Bound bound) {
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, "integer " + value.dump() + " is too large (at most 2^63-1)");
  std::optional<int64_t> integer;
  if (value.is_number_integer()) {
    integer = value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double number = value.get<double>();
    if (std::isfinite(number) && std::floor(number) == number && std::fabs(number) < 9.0e15)
      integer = static_cast<int64_t>(number);
  }
  if (!integer)
    fail(path, "expected an integer, got " + describe(value));
  check_bound(*integer, value, path, bound);
  return *integer;
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

std::vector<double> as_numbers(const json& value, const std::string& path, Bound bound) {
  std::vector<double> numbers;
  const auto& array = as_array(value, path);
  numbers.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i)
    numbers.push_back(as_number(array[i], index_path(path, i), bound));
  return numbers;
}

std::vector<std::string> as_strings(const json& value, const std::string& path) {
  std::vector<std::string> strings;
  const auto& array = as_array(value, path);
  for (size_t i = 0; i < array.size(); ++i)
    strings.push_back(as_string(array[i], index_path(path, i)));
  return strings;
}

std::map<std::string, double> as_number_map(const json& value, const std::string& path,
                                            Bound bound) {
  std::map<std::string, double> numbers;
  for (const auto& [key, item] : as_object(value, path).items())
    numbers[key] = as_number(item, child_path(path, key), bound);
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

std::optional<double> ObjectReader::nullable_number(const std::string& key, Bound bound) {
  const auto& value = required(key);
  if (value.is_null())
    return std::nullopt;
  return as_number(value, path_of(key), bound);
}

std::optional<int64_t> ObjectReader::nullable_integer(const std::string& key, Bound bound) {
  const auto& value = required(key);
  if (value.is_null())
    return std::nullopt;
  return as_integer(value, path_of(key), bound);
}

std::optional<std::string> ObjectReader::optional_string(const std::string& key) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_string(*value, path_of(key));
}

std::optional<double> ObjectReader::optional_number(const std::string& key, Bound bound) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_number(*value, path_of(key), bound);
}

std::optional<int64_t> ObjectReader::optional_integer(const std::string& key, Bound bound) {
  const auto* value = optional(key);
  if (!value)
    return std::nullopt;
  return as_integer(*value, path_of(key), bound);
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

std::map<std::string, double> ObjectReader::optional_number_map(const std::string& key,
                                                                Bound bound) {
  const auto* value = optional(key);
  return value ? as_number_map(*value, path_of(key), bound) : std::map<std::string, double>{};
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
      fail(path_of(item.key()), "unknown key (known here: " + expected + ")");
    }
  }
}

int check_schema_version(const json& version, const std::string& key_path, const char* writes) {
  const std::string text = as_string(version, key_path);
  int major = 0, minor = 0, patch = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%d.%d.%d%n", &major, &minor, &patch, &consumed) != 3 ||
      consumed != static_cast<int>(text.size()) || major < 0 || minor < 0 || patch < 0)
    fail(key_path, "expected \"MAJOR.MINOR.PATCH\", got " + quoted(text));
  int our_major = 0;
  std::sscanf(writes, "%d", &our_major);
  if (major != our_major)
    fail(key_path, "version " + elided(text, kQuotedChars, /*say_length=*/true) +
                       " is not supported: this kanbench reads major version " +
                       std::to_string(our_major) + " (writes " + writes + ")");
  return minor;
}

int minor_version(const char* version) {
  int minor = 0;
  std::sscanf(version, "%*d.%d", &minor);
  return minor;
}

int check_document(const json& value, const char* writes, const char* what) {
  if (!value.is_object())
    fail("", "expected a JSON object at the top level, got " + describe(value));
  const auto version = value.find("schema_version");
  if (version == value.end())
    fail("schema_version",
         std::string("missing (a required key; is this a kanbench ") + what + "?)");
  return check_schema_version(*version, "schema_version", writes);
}

namespace {

// Builds the document as nlohmann's own parser does (SAX events), and knows the key path of
// the value being read, so a syntax error or a number out of range names where it happened.
// Also refuses a key given twice in one object (JSON leaves it open; nlohmann keeps the last)
// and nesting deeper than kMaxJsonDepth.
class PathTrackingBuilder {
public:
  explicit PathTrackingBuilder(bool allow_duplicate_keys)
      : allow_duplicate_keys_(allow_duplicate_keys) {}
  json take() { return std::move(root_); }

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(json::number_integer_t value) { return add(value); }
  bool number_unsigned(json::number_unsigned_t value) { return add(value); }
  bool number_float(json::number_float_t value, const json::string_t&) { return add(value); }
  bool string(json::string_t& value) { return add(std::move(value)); }
  bool binary(json::binary_t& value) { return add(json::binary(std::move(value))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool key(json::string_t& key) {
    auto& frame = frames_.back();
    if (!allow_duplicate_keys_ && frame.value->contains(key))
      fail(child_path(path_of(frames_.size() - 1), key),
           "key given twice in one object (which one counts is unclear)");
    frame.key = std::move(key);
    frame.has_key = true;
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t, const std::string& last_token, const json::exception& error) {
    // 406: nlohmann's "number overflow parsing '1e999'" (a number no double holds).
    if (error.id == 406)
      fail(path(), "number out of range (" + elided(last_token, 40, /*say_length=*/true) + ")");
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> from "parse",
    // with the token it stopped at elided (a string or number may be megabytes long).
    std::string what = error.what();
    if (const auto start = what.find("] "); start != std::string::npos)
      what = what.substr(start + 2);
    const std::string token = "last read: '" + last_token + "'";
    if (const auto at = what.find(token); !last_token.empty() && at != std::string::npos)
      what.replace(at, token.size(),
                   "last read: '" + elided(last_token, 40, /*say_length=*/true) + "'");
    fail(path(), "not valid JSON: " + elided(what, 400, /*say_length=*/true));
  }

private:
  struct Frame {
    json* value = nullptr; // the object or array being filled
    std::string key;       // object: the key whose value comes next
    bool has_key = false;  // object: a key was read
    size_t index = 0;      // array: the index of the element being read
  };

  // The key path of what is read inside frames_[0..depth].
  std::string path_of(size_t depth) const {
    std::string path;
    for (size_t i = 0; i < depth; ++i)
      path = step(path, frames_[i]);
    return path;
  }
  std::string path() const { return path_of(frames_.size()); }
  static std::string step(const std::string& path, const Frame& frame) {
    if (frame.value->is_array())
      return index_path(path, frame.index);
    return frame.has_key ? child_path(path, frame.key) : path;
  }

  // Puts a value where the parser is; pointers stay valid, since a container's frame is only
  // below the top while its own last element is being filled.
  json* place(json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    auto& frame = frames_.back();
    if (frame.value->is_array()) {
      frame.value->push_back(std::move(value));
      return &frame.value->back();
    }
    return &((*frame.value)[frame.key] = std::move(value));
  }
  // The value at the top is complete: an array moves on to its next index.
  void done() {
    if (!frames_.empty() && frames_.back().value->is_array())
      ++frames_.back().index;
  }
  bool add(json value) {
    place(std::move(value));
    done();
    return true;
  }
  bool open(json container) {
    if (frames_.size() >= kMaxJsonDepth)
      fail(elided(path(), 100, /*say_length=*/true),
           "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    Frame frame;
    frame.value = place(std::move(container));
    frames_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    frames_.pop_back();
    done();
    return true;
  }

  bool allow_duplicate_keys_;
  json root_;
  std::vector<Frame> frames_;
};

} // namespace

json parse_json(const std::string& text, bool allow_duplicate_keys) {
  PathTrackingBuilder builder(allow_duplicate_keys);
  json::sax_parse(text, &builder);
  return builder.take();
}

} // namespace kan::io
