#include "values.h"

#include <c10/util/Exception.h>

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
  constexpr size_t kMax = 40;
  if (value.size() <= kMax)
    return "'" + value + "'";
  return "'" + value.substr(0, kMax / 2) + "..." + value.substr(value.size() - kMax / 4) + "' (" +
         std::to_string(value.size()) + " characters)";
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

std::vector<int64_t> parse_width(const std::string& text, const std::string& option) {
  std::vector<int64_t> width;
  size_t begin = 0;
  while (true) {
    const auto comma = text.find(',', begin);
    const std::string entry =
        text.substr(begin, comma == std::string::npos ? comma : comma - begin);
    TORCH_CHECK(all_digits(entry), option,
                " must be comma-separated positive integers such as "
                "2,5,1, got ",
                shown(text),
                (entry.empty() ? " (an empty entry)" : " (entry " + shown(entry) + ")"));
    errno = 0;
    const long long value = std::strtoll(entry.c_str(), nullptr, 10);
    TORCH_CHECK(errno != ERANGE && value >= 1, option, " entries must be >= 1, got ", shown(entry),
                " in ", shown(text));
    width.push_back(value);
    if (comma == std::string::npos)
      break;
    begin = comma + 1;
  }
  TORCH_CHECK(width.size() >= 2, option, " needs at least an input and an output width, got ",
              shown(text));
  return width;
}

} // namespace kanbench
