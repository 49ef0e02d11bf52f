#include "kan/data/paper_results.h"

#include "paper_results_data.h" // generated from data/kan-paper/*.csv (kan/CMakeLists.txt)

#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>

namespace kan {
namespace {

// One CSV record: fields split at commas outside double quotes (the shapes "[2,2,1]" are quoted).
std::vector<std::string> split_record(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted)
      fields.emplace_back();
    else
      fields.back() += c;
  }
  return fields;
}

// The data rows of an embedded CSV: comment lines (#) and the header dropped, each checked to
// have the header's number of fields.
std::vector<std::vector<std::string>> records(const char* text, const char* file) {
  std::istringstream in(text);
  std::string line;
  std::vector<std::vector<std::string>> rows;
  size_t columns = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    auto fields = split_record(line);
    if (columns == 0) {
      columns = fields.size();
      continue;
    }
    TORCH_INTERNAL_ASSERT(fields.size() == columns, file, ": a row has ", fields.size(),
                          " fields, the header ", columns, ": ", line);
    rows.push_back(std::move(fields));
  }
  return rows;
}

double rmse(const std::string& text) {
  return text.empty() ? NAN : std::stod(text);
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

} // namespace

std::vector<int64_t> parse_paper_shape(const std::string& text) {
  std::vector<int64_t> shape;
  if (text.empty())
    return shape;
  TORCH_CHECK(text.size() >= 2 && text.front() == '[' && text.back() == ']',
              "a KAN shape is written [n0,n1,...], got '", text, "'");
  std::istringstream in(text.substr(1, text.size() - 2));
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TORCH_CHECK(used > 0 && item.find_first_not_of(' ', used) == std::string::npos && n > 0,
                "a KAN shape holds positive integers, got '", text, "'");
    shape.push_back(n);
  }
  return shape;
}

const std::vector<PaperSpecialFunctionResult>& paper_special_functions() {
  static const auto rows = [] {
    std::vector<PaperSpecialFunctionResult> out;
    for (const auto& f : records(kKanPaperSpecialFunctions, "special_functions.csv")) {
      out.push_back({f[0], f[1], f[2], parse_paper_shape(f[3]), rmse(f[4]), parse_paper_shape(f[5]),
                     rmse(f[6]), rmse(f[7])});
    }
    return out;
  }();
  return rows;
}

const std::vector<PaperFeynmanResult>& paper_feynman() {
  static const auto rows = [] {
    std::vector<PaperFeynmanResult> out;
    for (const auto& f : records(kKanPaperFeynman, "feynman.csv")) {
      out.push_back({f[0], f[1], f[2], words(f[3]), parse_paper_shape(f[4]),
                     parse_paper_shape(f[5]), parse_paper_shape(f[6]), rmse(f[7]), rmse(f[8]),
                     rmse(f[9]), rmse(f[10])});
    }
    return out;
  }();
  return rows;
}

} // namespace kan
