#pragma once
/// The statistics every figure in kanbench is reported with: median, quartiles, and the
/// Mann-Whitney U test the baseline comparison uses.

#include <optional>
#include <vector>

namespace kan::results {

/// The q-quantile (0..1) of `values` with linear interpolation between order statistics
/// (numpy's default). Throws std::invalid_argument when `values` is empty.
double quantile(std::vector<double> values, double q);

/// A distribution of repeated measurements in five numbers.
struct Summary {
  double median = 0;
  double q1 = 0;  ///< 25th percentile
  double q3 = 0;  ///< 75th percentile
  double iqr = 0; ///< q3 - q1
  double min = 0;
  double max = 0;
};
/// The summary of `values`; std::nullopt when empty. Producers use it for
/// median_epoch_seconds / iqr_epoch_seconds / min / max so every file agrees on the definition.
std::optional<Summary> summarize(const std::vector<double>& values);

/// The coefficient of variation of `values`: sample standard deviation (n - 1) / mean, the
/// relative spread that stop-on-noise timing drives below a target (as nvbench does).
/// std::nullopt with fewer than two values or a mean that is not positive.
std::optional<double> coefficient_of_variation(const std::vector<double>& values);

/// The result of a two-sided Mann-Whitney U test.
struct UTest {
  double u = 0;           ///< U statistic of the first sample
  double p_value = 1;     ///< two-sided
  bool exact = false;     ///< from the exact distribution (no ties, small samples), else normal
  double min_p_value = 0; ///< the smallest p-value these sample sizes can give
};
/// Two-sided Mann-Whitney U test of `a` against `b`: exact for small samples without ties,
/// otherwise the normal approximation with tie and continuity corrections (as scipy's
/// mannwhitneyu, which Google Benchmark's compare.py uses). Throws std::invalid_argument when
/// either sample is empty.
UTest mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

} // namespace kan::results
