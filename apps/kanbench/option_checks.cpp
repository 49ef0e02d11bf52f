#include "option_checks.h"

#include "kan/io/text.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace kanbench {
namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// The whole of `text` as a number; false when anything else is there.
bool parse_double(const std::string& text, double& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())))
    return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

bool all_digits(const std::string& text, size_t from = 0) {
  return text.size() > from && text.find_first_not_of("0123456789", from) == std::string::npos;
}

} // namespace

std::string shown(const std::string& value) {
  return "'" + kan::io::elided(value, 36, /*say_length=*/true) + "'";
}

CLI::Validator finite_number(double min, bool exclusive, double max) {
  std::string range = (exclusive ? "> " : ">= ") + number(min);
  if (std::isfinite(max))
    range += " and <= " + number(max);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double value = 0;
        if (!parse_double(input, value) || !std::isfinite(value))
          return "must be a finite number " + range + ", got " + shown(input);
        if (value < min || (exclusive && value == min) || value > max)
          return "must be " + range + ", got " + number(value);
        return "";
      },
      "NUMBER " + range);
}

CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        const bool negative = !input.empty() && input.front() == '-';
        if (!all_digits(input, negative ? 1 : 0))
          return "must be an integer >= " + std::to_string(min) + ", got " + shown(input);
        errno = 0;
        const long long value = std::strtoll(input.c_str(), nullptr, 10);
        if (errno == ERANGE)
          return "must be an integer >= " + std::to_string(min) + ", got " + shown(input) +
                 " (out of range)";
        if (value < min)
          return "must be >= " + std::to_string(min) + ", got " + input;
        return "";
      },
      "INT >= " + std::to_string(min));
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        if (!all_digits(input))
          return "must be an integer from 0 to 2^64 - 1, got " + shown(input);
        errno = 0;
        std::strtoull(input.c_str(), nullptr, 10);
        if (errno == ERANGE)
          return "must be an integer from 0 to 2^64 - 1, got " + shown(input) + " (too large)";
        return "";
      },
      "UINT64");
}

CLI::Option* add_number_pair_option(CLI::App* command, const std::string& name,
                                    std::function<void(double, double)> set,
                                    const std::string& names, double min, const std::string& help) {
  // The whole text, both numbers, or nothing: "0.1" or "0.1,x" is refused, never half read.
  auto parse = [min](const std::string& text, double& first, double& second) {
    const auto comma = text.find(',');
    return comma != std::string::npos && parse_double(text.substr(0, comma), first) &&
           parse_double(text.substr(comma + 1), second) && std::isfinite(first) &&
           std::isfinite(second) && first >= min && second >= min;
  };
  const std::string expected = "expected " + names + ", two finite numbers >= " + number(min);
  auto* option = command->add_option_function<std::string>(
      name,
      [set, parse](const std::string& text) {
        double first = 0, second = 0;
        parse(text, first, second);
        set(first, second);
      },
      help);
  option->type_name(names)->check(CLI::Validator(
      [parse, expected](std::string& text) -> std::string {
        double first = 0, second = 0;
        return parse(text, first, second) ? "" : expected + ", got " + shown(text);
      },
      ""));
  return option;
}

namespace {

// Splits "2,[2,1],1" at the commas outside brackets.
std::vector<std::string> width_entries(const std::string& text, const std::string& option) {
  std::vector<std::string> entries(1);
  int depth = 0;
  for (const char c : text) {
    if (c == '[' && ++depth > 1)
      TORCH_CHECK(false, option, " has a bracket inside a bracket: ", shown(text));
    if (c == ']' && --depth < 0)
      TORCH_CHECK(false, option, " has a ']' without its '[': ", shown(text));
    if (c == ',' && depth == 0)
      entries.emplace_back();
    else
      entries.back() += c;
  }
  TORCH_CHECK(depth == 0, option, " has a '[' without its ']': ", shown(text));
  return entries;
}

int64_t count_in(const std::string& entry, const std::string& text, const std::string& option,
                 int64_t min) {
  TORCH_CHECK(all_digits(entry), option,
              " must be comma-separated counts such as 2,5,1 (or 2,[2,1],1 for 2 addition and 1 "
              "multiplication node), got ",
              shown(text), (entry.empty() ? " (an empty entry)" : " (entry " + shown(entry) + ")"));
  errno = 0;
  const long long value = std::strtoll(entry.c_str(), nullptr, 10);
  TORCH_CHECK(errno != ERANGE && value >= min, option, " entries must be >= ", min, ", got ",
              shown(entry), " in ", shown(text));
  return value;
}

} // namespace

void set_width(kan::KANOptions& options, const std::string& text, const std::string& option) {
  std::vector<int64_t> width, mult;
  for (const auto& entry : width_entries(text, option)) {
    if (entry.empty() || entry.front() != '[') {
      width.push_back(count_in(entry, text, option, 1));
      mult.push_back(0);
      continue;
    }
    // "[n_sum,n_mult]", pykan's form of a layer with multiplication nodes.
    const auto inner = entry.substr(1, entry.size() - 2);
    const auto comma = inner.find(',');
    TORCH_CHECK(entry.back() == ']' && comma != std::string::npos &&
                    inner.find(',', comma + 1) == std::string::npos,
                option, " entry ", shown(entry),
                " must be [addition nodes,multiplication nodes], such as [2,1], in ", shown(text));
    const int64_t n_sum = count_in(inner.substr(0, comma), text, option, 0);
    const int64_t n_mult = count_in(inner.substr(comma + 1), text, option, 0);
    TORCH_CHECK(n_sum + n_mult >= 1, option, " entry ", shown(entry), " has no node, in ",
                shown(text));
    width.push_back(n_sum + n_mult);
    mult.push_back(n_mult);
  }
  TORCH_CHECK(width.size() >= 2, option, " needs at least an input and an output width, got ",
              shown(text));
  TORCH_CHECK(mult.front() == 0, option, " ", shown(text),
              ": the inputs cannot be multiplication nodes");
  const bool any_mult = std::any_of(mult.begin(), mult.end(), [](int64_t m) { return m > 0; });
  options.width(width).mult(any_mult ? mult : std::vector<int64_t>{});
}

void set_mult_arity(kan::KANOptions& options, const std::string& text, const std::string& option) {
  std::vector<int64_t> arities;
  for (const auto& entry : width_entries(text, option)) {
    TORCH_CHECK(!entry.empty() && entry.front() != '[', option,
                " must be one arity (3) or one per multiplication node (2,3), got ", shown(text));
    arities.push_back(count_in(entry, text, option, 2));
  }
  if (arities.size() == 1) {
    options.mult_arity(arities.front()).node_arity({});
    return;
  }
  // One per multiplication node, layer by layer: pykan's per-layer lists.
  std::vector<std::vector<int64_t>> per_layer(options.width().size());
  size_t next = 0;
  for (size_t l = 0; l < per_layer.size(); ++l)
    for (int64_t j = 0; j < kan::mult_nodes(options, l); ++j, ++next)
      if (next < arities.size())
        per_layer[l].push_back(arities[next]);
  TORCH_CHECK(next == arities.size(), option, " ", shown(text), " gives ", arities.size(),
              " arities but the width has ", next,
              " multiplication nodes: give one arity for all, or one per node");
  options.node_arity(per_layer);
}

} // namespace kanbench
