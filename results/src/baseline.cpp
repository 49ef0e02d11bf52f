#include "kan/results/baseline.h"

#include "kan/io/text.h"

#include "kan/results/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace kan::results {

std::string to_string(Verdict value) {
  return io::name_of(value, kVerdictNames);
}

std::vector<CaseChange> BaselineComparison::regressions(double min_percent) const {
  std::vector<CaseChange> found;
  for (const auto& change : changes)
    if (change.verdict == Verdict::kSlower && change.change_percent() > min_percent)
      found.push_back(change);
  return found;
}

size_t BaselineComparison::count(Verdict verdict) const {
  return static_cast<size_t>(std::count_if(
      changes.begin(), changes.end(), [&](const CaseChange& c) { return c.verdict == verdict; }));
}

namespace {

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%%", fraction * 100);
  return text;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

std::string describe_status(const CaseResult& c) {
  return to_string(c.status) + (c.reason.empty() ? "" : " (" + c.reason + ")");
}

// The verdict on measured epoch times of both sides.
void judge(CaseChange& change, const std::vector<double>& old_times,
           const std::vector<double>& new_times, const BaselineOptions& options) {
  const double ratio = *change.ratio;
  const bool relevant = std::fabs(ratio - 1) >= options.min_change;
  bool significant = false;
  const auto sizes =
      "n=" + std::to_string(old_times.size()) + "+" + std::to_string(new_times.size());
  if (old_times.size() < 2 || new_times.size() < 2) {
    significant = true;
    change.note = sizes + ": no noise estimate with one repetition; threshold " +
                  percent(options.min_change) + " alone";
  } else {
    const auto test = mann_whitney_u(old_times, new_times);
    change.p_value = test.p_value;
    if (test.min_p_value >= options.alpha) {
      const auto [old_min, old_max] = std::minmax_element(old_times.begin(), old_times.end());
      const auto [new_min, new_max] = std::minmax_element(new_times.begin(), new_times.end());
      significant = *new_min > *old_max || *new_max < *old_min;
      change.note = sizes + ": too few repetitions for the U test at alpha " +
                    number(options.alpha) + "; ranges " +
                    (significant ? "do not overlap" : "overlap");
    } else {
      significant = test.p_value < options.alpha;
      change.note = sizes + ": U test " + (significant ? "significant" : "not significant");
    }
  }
  if (significant && relevant)
    change.verdict = ratio > 1 ? Verdict::kSlower : Verdict::kFaster;
  else
    change.verdict = Verdict::kSame;
  if (significant && !relevant)
    change.note += "; change below " + percent(options.min_change);
}

void warn_if_different(std::vector<std::string>& warnings, const std::string& what,
                       const std::string& old_value, const std::string& new_value) {
  if (old_value != new_value)
    warnings.push_back("different " + what + ": baseline \"" + old_value + "\", this run \"" +
                       new_value + "\"");
}

std::string gpu_names(const Environment& e) {
  std::string names;
  for (const auto& d : e.cuda_devices)
    names += (names.empty() ? "" : ", ") + d.name;
  return names.empty() ? "none" : names;
}

} // namespace

BaselineComparison compare_with_baseline(const Results& baseline, const Results& current,
                                         const BaselineOptions& options) {
  BaselineComparison result;
  result.options = options;
  const auto& o = baseline.environment;
  const auto& n = current.environment;
  warn_if_different(result.warnings, "machine", o.hostname, n.hostname);
  warn_if_different(result.warnings, "CPU", o.cpu_model, n.cpu_model);
  warn_if_different(result.warnings, "GPUs", gpu_names(o), gpu_names(n));
  warn_if_different(result.warnings, "LibTorch", o.libtorch_version, n.libtorch_version);
  warn_if_different(result.warnings, "CPU threads", std::to_string(o.torch_threads),
                    std::to_string(n.torch_threads));
  warn_if_different(result.warnings, "suite", baseline.config.suite, current.config.suite);

  auto add = [&](const CaseResult* old_case, const CaseResult* new_case) {
    const auto& any = new_case ? *new_case : *old_case;
    CaseChange change;
    change.name = any.name;
    change.target = any.target;
    change.dtype = any.dtype;
    change.device = any.device;
    if (old_case) {
      change.old_median = old_case->median_epoch_seconds;
      change.old_repetitions = old_case->epoch_seconds.size();
    }
    if (new_case) {
      change.new_median = new_case->median_epoch_seconds;
      change.new_repetitions = new_case->epoch_seconds.size();
    }
    if (!old_case) {
      change.note = "not in the baseline";
    } else if (!new_case) {
      change.note = "only in the baseline";
    } else {
      const std::string label = "case " + any.name + " target " + any.target;
      if (old_case->device != new_case->device)
        result.warnings.push_back(label + " ran on different devices: baseline " +
                                  old_case->device + ", this run " + new_case->device);
      if (old_case->dtype != new_case->dtype)
        result.warnings.push_back(label + " used different dtypes: baseline " + old_case->dtype +
                                  ", this run " + new_case->dtype);
      if (old_case->backend != new_case->backend)
        result.warnings.push_back(label + " used different backends: baseline " +
                                  old_case->backend.value_or("unknown") + ", this run " +
                                  new_case->backend.value_or("unknown"));
      if (old_case->status != CaseStatus::kOk || !change.old_median || *change.old_median <= 0)
        change.note = "baseline " + describe_status(*old_case);
      else if (new_case->status != CaseStatus::kOk || !change.new_median)
        change.note = "this run " + describe_status(*new_case);
      else {
        change.ratio = *change.new_median / *change.old_median;
        judge(change, old_case->epoch_seconds, new_case->epoch_seconds, options);
      }
    }
    result.changes.push_back(std::move(change));
  };

  for (const auto& c : current.cases)
    add(baseline.find_case(c.name, c.target), &c);
  for (const auto& c : baseline.cases)
    if (!current.find_case(c.name, c.target))
      add(&c, nullptr);
  return result;
}

std::string format_baseline_table(const BaselineComparison& comparison) {
  std::ostringstream out;
  for (const auto& w : comparison.warnings)
    out << "warning: " << w << "\n";
  std::vector<std::vector<std::string>> rows{
      {"case", "target", "dtype", "old median", "new median", "new/old", "p", "verdict", "note"}};
  for (const auto& c : comparison.changes) {
    char ratio[32] = "-", p[32] = "-";
    if (c.ratio)
      std::snprintf(ratio, sizeof ratio, "%.3f", *c.ratio);
    if (c.p_value)
      std::snprintf(p, sizeof p, "%.3g", *c.p_value);
    rows.push_back({c.name, c.target, c.dtype,
                    c.old_median ? io::format_seconds(*c.old_median) : "-",
                    c.new_median ? io::format_seconds(*c.new_median) : "-", ratio, p,
                    to_string(c.verdict), c.note});
  }
  // A column is as wide as its longest cell of at most kMaxColumnWidth characters. A longer
  // cell (a case name or target label of any length) is printed in full and the rest of its row
  // continues on the next line at the next column, so the other rows keep their layout and the
  // output grows with the input, not with rows x the longest name.
  constexpr size_t kMaxColumnWidth = 40;
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i)
      if (row[i].size() <= kMaxColumnWidth)
        widths[i] = std::max(widths[i], row[i].size());
  for (const auto& row : rows) {
    std::string line;
    size_t column = 0;     // where the current cell starts on its line
    bool overflow = false; // the previous cell ran past its column
    for (size_t i = 0; i < row.size(); ++i) {
      if (overflow) {
        out << line << "\n";
        line.clear();
      }
      line.resize(column, ' ');
      line += row[i];
      overflow = row[i].size() > widths[i];
      column += widths[i] + 2;
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out << line << "\n";
  }
  out << comparison.count(Verdict::kSlower) << " slower, " << comparison.count(Verdict::kFaster)
      << " faster, " << comparison.count(Verdict::kSame) << " same, "
      << comparison.count(Verdict::kUnavailable) << " not comparable (minimum relevant change "
      << percent(comparison.options.min_change) << ")\n";
  return out.str();
}

} // namespace kan::results
