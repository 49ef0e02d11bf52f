#include "kan/results/statistics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kan::results {

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    throw std::invalid_argument("quantile of an empty sample");
  std::sort(values.begin(), values.end());
  const double position = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

std::optional<Summary> summarize(const std::vector<double>& values) {
  if (values.empty())
    return std::nullopt;
  Summary s;
  s.median = quantile(values, 0.5);
  s.q1 = quantile(values, 0.25);
  s.q3 = quantile(values, 0.75);
  s.iqr = s.q3 - s.q1;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

std::optional<double> coefficient_of_variation(const std::vector<double>& values) {
  if (values.size() < 2)
    return std::nullopt;
  double mean = 0;
  for (double v : values)
    mean += v / static_cast<double>(values.size());
  if (!(mean > 0))
    return std::nullopt;
  double squares = 0;
  for (double v : values)
    squares += (v - mean) * (v - mean);
  return std::sqrt(squares / static_cast<double>(values.size() - 1)) / mean;
}

namespace {

// counts[u] = number of orderings of n1 + n2 distinct values whose U statistic is u.
std::vector<double> u_distribution(size_t n1, size_t n2) {
  // c[m][n] over u, built up by the recurrence c(m,n,u) = c(m-1,n,u-n) + c(m,n-1,u).
  std::vector<std::vector<std::vector<double>>> c(n1 + 1, std::vector<std::vector<double>>(n2 + 1));
  for (size_t m = 0; m <= n1; ++m) {
    for (size_t n = 0; n <= n2; ++n) {
      auto& counts = c[m][n];
      counts.assign(m * n + 1, 0.0);
      if (m == 0 || n == 0) {
        counts[0] = 1;
        continue;
      }
      for (size_t u = 0; u <= m * n; ++u) {
        double total = 0;
        if (u >= n && u - n < c[m - 1][n].size())
          total += c[m - 1][n][u - n];
        if (u < c[m][n - 1].size())
          total += c[m][n - 1][u];
        counts[u] = total;
      }
    }
  }
  return c[n1][n2];
}

} // namespace

UTest mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.empty() || b.empty())
    throw std::invalid_argument("Mann-Whitney U test of an empty sample");
  const size_t n1 = a.size(), n2 = b.size(), n = n1 + n2;
  std::vector<std::pair<double, int>> all;
  all.reserve(n);
  for (double v : a)
    all.emplace_back(v, 0);
  for (double v : b)
    all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  double rank_sum_a = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first)
      ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0)
        rank_sum_a += average_rank;
    const double t = static_cast<double>(j - i);
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }
  UTest test;
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2);
  test.u = rank_sum_a - d1 * (d1 + 1) / 2;
  const double mean = d1 * d2 / 2;

  if (!ties && n1 <= 50 && n2 <= 50) {
    const auto counts = u_distribution(n1, n2);
    double total = 0;
    for (double c : counts)
      total += c;
    const auto u = static_cast<size_t>(std::llround(test.u));
    double below = 0, above = 0; // P(U <= u), P(U >= u)
    for (size_t k = 0; k < counts.size(); ++k) {
      if (k <= u)
        below += counts[k];
      if (k >= u)
        above += counts[k];
    }
    test.exact = true;
    test.p_value = std::min(1.0, 2 * std::min(below, above) / total);
    test.min_p_value = std::min(1.0, 2 * counts[0] / total);
    return test;
  }
  const double dn = static_cast<double>(n);
  const double variance = d1 * d2 / 12 * ((dn + 1) - tie_term / (dn * (dn - 1)));
  if (variance <= 0) {
    test.p_value = 1; // every value equal
    return test;
  }
  const double z = std::max(0.0, std::fabs(test.u - mean) - 0.5) / std::sqrt(variance);
  test.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  const double z_max = std::max(0.0, mean - 0.5) / std::sqrt(variance);
  test.min_p_value = std::min(1.0, std::erfc(z_max / std::sqrt(2.0)));
  return test;
}

} // namespace kan::results
