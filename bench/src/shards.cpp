#include "kan/bench/shards.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>

namespace kan::bench {
namespace {

// A whole non-negative decimal number, or none.
std::optional<int64_t> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(text);
}

// NAME=VALUE as the messages show a variable.
std::string shown(const char* name, const char* value) {
  return std::string(name) + "=" + (value ? value : "(unset)");
}

int64_t variable_number(const EnvironmentLookup& lookup, const char* name) {
  const char* value = lookup(name);
  const auto number = value ? whole_number(value) : std::nullopt;
  TORCH_CHECK(number, "shards: ", shown(name, value), " is not a whole number >= 0");
  return *number;
}

results::Shard checked(results::Shard shard, const std::string& what) {
  TORCH_CHECK(shard.count >= 1, what, ": the shard count must be >= 1, got ", shard.count);
  TORCH_CHECK(shard.index >= 0 && shard.index < shard.count, what, ": shard index ", shard.index,
              " is not below the count ", shard.count);
  return shard;
}

} // namespace

results::Shard parse_shard(const std::string& text, const std::string& option) {
  const auto slash = text.find('/');
  const auto index = whole_number(text.substr(0, slash));
  const auto count =
      slash == std::string::npos ? std::nullopt : whole_number(text.substr(slash + 1));
  TORCH_CHECK(index && count, option, ": expected I/N (shard I of N, 0 <= I < N), got \"", text,
              "\"");
  return checked({*index, *count, option}, option + " " + text);
}

std::optional<results::Shard> shard_from_environment(const EnvironmentLookup& lookup,
                                                     std::optional<int64_t> count) {
  if (const char* id = lookup("SLURM_ARRAY_TASK_ID")) {
    const char* total = lookup("SLURM_ARRAY_TASK_COUNT");
    TORCH_CHECK(total, "shards: ", shown("SLURM_ARRAY_TASK_ID", id),
                " is set but SLURM_ARRAY_TASK_COUNT is not (a Slurm job array sets both)");
    const int64_t task = variable_number(lookup, "SLURM_ARRAY_TASK_ID");
    const int64_t first =
        lookup("SLURM_ARRAY_TASK_MIN") ? variable_number(lookup, "SLURM_ARRAY_TASK_MIN") : 0;
    const int64_t step =
        lookup("SLURM_ARRAY_TASK_STEP") ? variable_number(lookup, "SLURM_ARRAY_TASK_STEP") : 1;
    TORCH_CHECK(step >= 1 && task >= first && (task - first) % step == 0,
                "shards: ", shown("SLURM_ARRAY_TASK_ID", id), " is not one of the array's tasks (",
                shown("SLURM_ARRAY_TASK_MIN", lookup("SLURM_ARRAY_TASK_MIN")), ", ",
                shown("SLURM_ARRAY_TASK_STEP", lookup("SLURM_ARRAY_TASK_STEP")), ")");
    return checked({(task - first) / step, variable_number(lookup, "SLURM_ARRAY_TASK_COUNT"),
                    "SLURM_ARRAY_TASK_ID"},
                   "shards: " + shown("SLURM_ARRAY_TASK_ID", id) + ", " +
                       shown("SLURM_ARRAY_TASK_COUNT", total));
  }
  if (const char* index = lookup("JOB_COMPLETION_INDEX")) {
    TORCH_CHECK(count, "shards: ", shown("JOB_COMPLETION_INDEX", index),
                " is set (a Kubernetes indexed Job) but not the Job's count: pass --shard-count N "
                "(its completions)");
    return checked(
        {variable_number(lookup, "JOB_COMPLETION_INDEX"), *count, "JOB_COMPLETION_INDEX"},
        "shards: " + shown("JOB_COMPLETION_INDEX", index) + " with --shard-count " +
            std::to_string(*count));
  }
  if (const char* index = lookup("GTEST_SHARD_INDEX")) {
    const char* total = lookup("GTEST_TOTAL_SHARDS");
    TORCH_CHECK(total, "shards: ", shown("GTEST_SHARD_INDEX", index),
                " is set but GTEST_TOTAL_SHARDS is not");
    return checked({variable_number(lookup, "GTEST_SHARD_INDEX"),
                    variable_number(lookup, "GTEST_TOTAL_SHARDS"), "GTEST_SHARD_INDEX"},
                   "shards: " + shown("GTEST_SHARD_INDEX", index) + ", " +
                       shown("GTEST_TOTAL_SHARDS", total));
  }
  TORCH_CHECK(!count, "--shard-count ", *count,
              " without JOB_COMPLETION_INDEX: give the index too, or use --shard I/N");
  return std::nullopt;
}

std::optional<results::Shard> shard_from_environment(std::optional<int64_t> count) {
  return shard_from_environment([](const char* name) { return std::getenv(name); }, count);
}

std::vector<size_t> shard_share(const std::vector<double>& costs, const results::Shard& shard) {
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(shard.count), 0.0);
  std::vector<size_t> share;
  for (const size_t item : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    load[static_cast<size_t>(least)] += costs[item];
    if (least == shard.index)
      share.push_back(item);
  }
  std::sort(share.begin(), share.end());
  return share;
}

double expected_step_cost(double samples, double forward_flops) {
  constexpr double kFixedStepCost = 7.5e5; // in forward FLOPs
  return kFixedStepCost + samples * forward_flops;
}

void TimeLeft::finished(double cost, double elapsed_seconds) {
  cost_done_ += cost;
  cost_left_ -= cost;
  elapsed_at_last_ = elapsed_seconds;
}

double TimeLeft::seconds_left(double under_way_cost, double under_way_seconds) const {
  if (cost_done_ <= 0 || elapsed_at_last_ <= 0)
    return -1;
  const double seconds_per_cost = elapsed_at_last_ / cost_done_;
  return std::max(0.0, cost_left_ - under_way_cost) * seconds_per_cost +
         std::max(0.0, under_way_cost * seconds_per_cost - under_way_seconds);
}

std::string shard_file(const std::string& file, const results::Shard& shard) {
  const std::filesystem::path path(file);
  const auto tag = ".shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count);
  return (path.parent_path() / (path.stem().string() + tag + path.extension().string())).string();
}

std::string shard_folder(const std::string& out, const results::Shard& shard) {
  return (std::filesystem::path(out) /
          ("shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count)))
      .string();
}

} // namespace kan::bench
