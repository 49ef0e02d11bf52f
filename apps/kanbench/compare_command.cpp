// `kanbench compare OLD.json NEW.json`: per case and target, new/old median epoch time with a
// noise-aware verdict; with --fail-on-regression PCT, exit 1 when a case is slower by more than
// PCT percent (a CI gate).
#include "commands.h"
#include "option_checks.h"

#include "kan/reports/html_report.h"
#include "kan/results/baseline.h"
#include "kan/results/results_io.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

namespace kanbench {
namespace {

struct CompareArgs {
  std::string old_path;
  std::string new_path;
  std::optional<double> fail_on_regression; // percent
  double min_change = 5;                    // percent
  double alpha = 0.05;
};

int run_compare(const CompareArgs& a) {
  const auto baseline = kan::results::read_results_file(a.old_path);
  const auto current = kan::results::read_results_file(a.new_path);
  // A report.html beside either that shows another run would mislead whoever opens it next.
  for (const auto& [path, results] :
       {std::pair{&a.old_path, &baseline}, std::pair{&a.new_path, &current}})
    if (const auto problem = kan::reports::report_pair_problem(*path, *results))
      std::cerr << "kanbench: warning: " << *problem << "\n";
  kan::results::BaselineOptions options;
  options.min_change = a.min_change / 100;
  options.alpha = a.alpha;
  const auto comparison = kan::results::compare_with_baseline(baseline, current, options);
  std::cout << kan::results::format_baseline_table(comparison);
  if (!a.fail_on_regression)
    return 0;
  const auto regressions = comparison.regressions(*a.fail_on_regression);
  for (const auto& r : regressions) {
    std::fprintf(stderr, "kanbench: regression: %s on %s is %.1f%% slower (limit %g%%)\n",
                 r.name.c_str(), r.target.c_str(), r.change_percent(), *a.fail_on_regression);
  }
  return regressions.empty() ? 0 : 1;
}

} // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "Compare two results.json: new/old median epoch time per case, with a "
                 "noise-aware verdict (Mann-Whitney U test)");
  cmd->add_option("old", args->old_path, "Baseline results.json")->required();
  cmd->add_option("new", args->new_path, "New results.json")->required();
  cmd->add_option("--fail-on-regression", args->fail_on_regression,
                  "Exit 1 when a case is significantly slower by more than PCT percent")
      ->check(finite_number(0));
  cmd->add_option("--min-change", args->min_change,
                  "Smaller changes of the median (percent) are reported as same")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--alpha", args->alpha, "Significance level of the U test")
      ->check(finite_number(0, /*exclusive=*/true, 1))
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_compare(*args); });
}

} // namespace kanbench
