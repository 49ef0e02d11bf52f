// `kanbench functions`: the function catalogue (the built-in functions, the KAN paper's special
// functions and Feynman equations), one row each, as a table or as JSON.
#include "commands.h"

#include "kan/data/dataset.h"
#include "kan/data/paper_results.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

namespace kanbench {
namespace {

/// The `kanbench functions --json` format's version.
constexpr const char* kFunctionsSchemaVersion = "1.0.0";

// A range end as written in the docs: multiples of pi as such (pi/2, 2pi, 2pi/5), others %g.
std::string number(double v) {
  if (v != 0) {
    for (int d : {1, 2, 3, 4, 5, 6, 10, 20}) {
      const double k = v * d / M_PI;
      if (std::fabs(k - std::round(k)) < 1e-9) {
        const auto n = static_cast<long>(std::round(k));
        std::string s = n == 1 ? "" : n == -1 ? "-" : std::to_string(n);
        s += "pi";
        return d == 1 ? s : s + "/" + std::to_string(d);
      }
    }
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

std::string variable(const kan::ReferenceFunction& f, size_t i) {
  return i < f.variables.size() ? f.variables[i] : "x" + std::to_string(i);
}

kan::GridRange range_of(const kan::ReferenceFunction& f, size_t i) {
  return f.ranges.size() == 1 ? f.ranges[0] : f.ranges[i];
}

// "nu in [0, 3], x in [0, 10]"; one range for all inputs: "[-1, 1] each".
std::string domain(const kan::ReferenceFunction& f) {
  auto interval = [](const kan::GridRange& r) {
    return "[" + number(r[0]) + ", " + number(r[1]) + "]";
  };
  if (f.ranges.size() == 1 && f.n_var > 1)
    return interval(f.ranges[0]) + " each";
  std::string text;
  for (int64_t i = 0; i < f.n_var; ++i)
    text += (i ? ", " : "") + variable(f, i) + " in " + interval(range_of(f, i));
  return text;
}

nlohmann::json rmse(double v) {
  return std::isnan(v) ? nlohmann::json() : nlohmann::json(v);
}

nlohmann::json to_json(const kan::ReferenceFunction& f) {
  nlohmann::json variables = nlohmann::json::array();
  nlohmann::json ranges = nlohmann::json::array();
  for (int64_t i = 0; i < f.n_var; ++i) {
    variables.push_back(variable(f, i));
    ranges.push_back({range_of(f, i)[0], range_of(f, i)[1]});
  }
  nlohmann::json j{{"name", f.name},         {"group", f.group},     {"inputs", f.n_var},
                   {"variables", variables}, {"formula", f.formula}, {"domain", domain(f)},
                   {"ranges", ranges},       {"source", f.source},   {"notes", f.notes}};
  for (const auto& row : kan::paper_special_functions()) {
    if (row.function == f.name) {
      j["paper"] = {{"table", "Table 1: special functions"},
                    {"minimal_kan_shape", row.minimal_kan_shape},
                    {"minimal_kan_test_rmse", rmse(row.minimal_kan_test_rmse)},
                    {"best_kan_shape", row.best_kan_shape},
                    {"best_kan_test_rmse", rmse(row.best_kan_test_rmse)},
                    {"mlp_test_rmse", rmse(row.mlp_test_rmse)}};
    }
  }
  for (const auto& row : kan::paper_feynman()) {
    if (row.function == f.name) {
      j["paper"] = {{"table", "Table 2: Feynman dataset"},
                    {"equation", row.equation},
                    {"human_kan_shape", row.human_kan_shape},
                    {"pruned_kan_shape_minimal", row.pruned_kan_shape_minimal},
                    {"pruned_kan_shape_best", row.pruned_kan_shape_best},
                    {"human_kan_test_rmse", rmse(row.human_kan_test_rmse)},
                    {"pruned_kan_test_rmse", rmse(row.pruned_kan_test_rmse)},
                    {"unpruned_kan_test_rmse", rmse(row.unpruned_kan_test_rmse)},
                    {"mlp_test_rmse", rmse(row.mlp_test_rmse)}};
    }
  }
  return j;
}

void print_table(const std::vector<kan::ReferenceFunction>& functions) {
  const std::vector<std::string> header{"NAME", "INPUTS", "FORMULA", "DOMAIN", "SOURCE"};
  std::vector<std::vector<std::string>> rows{header};
  for (const auto& f : functions)
    rows.push_back({f.name, std::to_string(f.n_var), f.formula, domain(f), f.source});
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size())
        line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

} // namespace

void add_functions_command(CLI::App& app, int& exit_code) {
  auto table = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "functions", "List the reference functions (the built-in ones, the KAN paper's special "
                   "functions and Feynman equations): name, inputs, formula, domain, source");
  cmd->add_option("--table", *table, "Only this table: builtin, special or feynman")
      ->check(CLI::IsMember({"builtin", "special", "feynman"}));
  cmd->add_flag("--json", *json,
                "Print JSON instead (with each function's variables, ranges, notes and the "
                "paper's published results where it has them)");
  cmd->callback([table, json, &exit_code] {
    const auto functions =
        table->empty() ? kan::reference_functions() : kan::reference_functions(*table);
    if (*json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& f : functions)
        list.push_back(to_json(f));
      std::cout << nlohmann::json{{"schema_version", kFunctionsSchemaVersion}, {"functions", list}}
                       .dump(2)
                << "\n";
    } else {
      print_table(functions);
    }
    exit_code = 0;
  });
}

} // namespace kanbench
