#pragma once
/// New run against a baseline run: per case and target, the ratio new/old of the median epoch
/// time with a noise-aware verdict (faster / slower / same), and warnings when the two runs come
/// from different machines or devices.

#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// What a baseline comparison concludes for one case.
enum class Verdict {
  kFaster,      ///< significantly and relevantly faster
  kSlower,      ///< significantly and relevantly slower
  kSame,        ///< within noise or below the minimum relevant change
  kUnavailable, ///< not measured on one side (missing, skipped, failed, ...)
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Verdict> kVerdictNames[] = {{Verdict::kFaster, "faster"},
                                                          {Verdict::kSlower, "slower"},
                                                          {Verdict::kSame, "same"},
                                                          {Verdict::kUnavailable, "n/a"}};
std::string to_string(Verdict value);

/// How the verdict is reached.
struct BaselineOptions {
  /// Changes of the median smaller than this fraction are `same` (0.05 = 5%).
  double min_change = 0.05;
  /// Significance level of the two-sided Mann-Whitney U test on the epoch times.
  double alpha = 0.05;
};

/// One case on one target in both runs.
struct CaseChange {
  std::string name;                 ///< CaseResult::name
  std::string target;               ///< CaseResult::target
  std::string dtype;                ///< of the new run (of the old one when only there)
  std::string device;               ///< of the new run (of the old one when only there)
  std::optional<double> old_median; ///< median epoch seconds, baseline
  std::optional<double> new_median; ///< median epoch seconds, this run
  std::optional<double> ratio;      ///< new / old: > 1 is slower
  std::optional<double> p_value;    ///< of the U test, when one was made
  size_t old_repetitions = 0;
  size_t new_repetitions = 0;
  Verdict verdict = Verdict::kUnavailable;
  std::string note; ///< how the verdict was reached, or why there is none

  /// (ratio - 1) * 100, 0 without a ratio: +30 is 30% slower.
  double change_percent() const { return ratio ? (*ratio - 1) * 100 : 0; }
};

/// All cases of both runs.
struct BaselineComparison {
  std::vector<CaseChange> changes;   ///< new run's order, then cases only in the baseline
  std::vector<std::string> warnings; ///< different machine, GPU, LibTorch, threads, device, dtype
  BaselineOptions options;

  /// The changes with verdict `slower` and a change above `min_percent` (the CI gate).
  std::vector<CaseChange> regressions(double min_percent = 0) const;
  /// Counts per verdict.
  size_t count(Verdict verdict) const;
};

/// Compares `current` against `baseline`. Cases are matched by (name, target).
///
/// The verdict uses both runs' repetitions: a two-sided Mann-Whitney U test at `alpha` when the
/// sample sizes allow it to reach `alpha`; with fewer repetitions (e.g. 3 and 3, whose smallest
/// possible p-value is 0.1) non-overlapping ranges instead; with one repetition on a side, the
/// threshold alone (the note says so). A significant change smaller than `min_change` is `same`.
///
/// Example:
///   auto diff = kan::results::compare_with_baseline(read_results_file("old/results.json"),
///                                                   read_results_file("new/results.json"));
///   std::cout << kan::results::format_baseline_table(diff);
///   if (!diff.regressions(10).empty()) return 1;
BaselineComparison compare_with_baseline(const Results& baseline, const Results& current,
                                         const BaselineOptions& options = {});

/// A plain-text table (one line per case) with the warnings above it, for a terminal or CI log.
std::string format_baseline_table(const BaselineComparison& comparison);

} // namespace kan::results
