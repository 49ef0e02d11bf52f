#include "kan/results/merge.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace kan::results {
namespace {

Shard shard_of(const ShardDocument& d) {
  return d.results.config.shard.value_or(Shard{0, 1, ""});
}

std::string text_of(const std::string& value) {
  return value;
}
template <typename T> std::string text_of(T value) {
  return std::to_string(value);
}

// "3,5,10": a plan's list as the option takes it.
template <typename T> std::string list(const std::vector<T>& values) {
  std::string text;
  for (const auto& v : values)
    text += (text.empty() ? "" : ",") + text_of(v);
  return text;
}

// What makes two shards parts of one plan, each with the option that sets it.
std::vector<std::pair<std::string, std::string>> plan_of(const ShardDocument& d) {
  const auto& a = *d.results.accuracy;
  return {{"--table", a.table},
          {"--preset", a.preset},
          {"--functions", list(a.functions)},
          {"--devices", list(a.devices)},
          {"--seeds", list(a.seeds)},
          {"--grids", list(a.grids)},
          {"--steps", std::to_string(a.steps)},
          {"--train-num", std::to_string(a.train_num)},
          {"--test-num", std::to_string(a.test_num)},
          {"shard count", std::to_string(shard_of(d).count)},
          {"kanbench version", d.results.environment.kanbench_version}};
}

// Two fits with the same key hold the same results: the same points (timings aside) and error.
bool same_results(const AccuracyFit& a, const AccuracyFit& b) {
  if (a.error != b.error || a.points.size() != b.points.size())
    return false;
  for (size_t i = 0; i < a.points.size(); ++i) {
    auto p = a.points[i], q = b.points[i];
    p.seconds = q.seconds = 0;
    if (!(p == q))
      return false;
  }
  return true;
}

std::string rmse_text(const AccuracyFit& fit) {
  if (!fit.error.empty())
    return "failed (" + fit.error + ")";
  char text[40];
  std::snprintf(text, sizeof text, "test RMSE %.6g", fit.points.back().test_rmse);
  return text;
}

void check_documents(const std::vector<ShardDocument>& shards) {
  if (shards.empty())
    throw MergeError("merge: no shards to merge");
  for (const auto& d : shards) {
    if (!d.results.accuracy)
      throw MergeError("merge: " + d.folder +
                       " holds no accuracy run (kanbench merge takes kanbench accuracy shards)");
    const auto s = shard_of(d);
    if (s.count < 1 || s.index < 0 || s.index >= s.count)
      throw MergeError("merge: " + d.folder + " holds shard " + s.text() + ", which is no shard");
  }
  const auto first = plan_of(shards.front());
  for (const auto& d : shards) {
    const auto plan = plan_of(d);
    for (size_t i = 0; i < plan.size(); ++i)
      if (plan[i].second != first[i].second)
        throw MergeError("merge: " + shards.front().folder + " and " + d.folder +
                         " are shards of different plans (" + first[i].first + " " +
                         first[i].second + " against " + plan[i].second + ")");
  }
}

// Plan order, as near as the documents tell it: function, device, seed, KANs before MLPs.
auto plan_position(const AccuracyRun& run, const AccuracyFit& fit) {
  const auto index = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  const auto seed = std::find(run.seeds.begin(), run.seeds.end(), fit.seed) - run.seeds.begin();
  return std::make_tuple(index(run.functions, fit.function), index(run.devices, fit.device), seed,
                         fit.family != "kan");
}

} // namespace

MergedRun merge_shards(const std::vector<ShardDocument>& shards) {
  check_documents(shards);
  const int64_t count = shard_of(shards.front()).count;

  // Shards in index order; a folder given twice (or two folders of one shard) counts once.
  std::vector<const ShardDocument*> ordered;
  for (const auto& d : shards)
    ordered.push_back(&d);
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto* a, const auto* b) {
    return shard_of(*a).index < shard_of(*b).index;
  });

  MergedRun merged;
  auto& results = merged.results;
  const auto& front = *ordered.front();
  results.environment = front.results.environment;
  results.config = front.results.config;
  results.config.shard.reset();
  AccuracyRun run = *front.results.accuracy;
  run.fits.clear();
  run.planned_fits = 0;
  run.wall_seconds = 0;

  std::map<std::string, std::pair<const AccuracyFit*, const ShardDocument*>> seen;
  std::set<int64_t> present;
  for (const auto* d : ordered) {
    const auto& share = *d->results.accuracy;
    const auto shard = shard_of(*d);
    const bool first_of_index = present.insert(shard.index).second;
    for (const auto& fit : share.fits) {
      const auto [at, added] = seen.emplace(fit.key(), std::make_pair(&fit, d));
      if (added) {
        run.fits.push_back(fit);
        continue;
      }
      if (!same_results(*at->second.first, fit))
        throw MergeError("merge: fit " + fit.key() + " is in " + at->second.second->folder +
                         " and in " + d->folder + " with different results (" +
                         rmse_text(*at->second.first) + " against " + rmse_text(fit) + ")");
    }
    if (first_of_index) {
      run.planned_fits += share.planned_fits;
      results.shards.push_back(
          {shard, d->folder, d->results.run_id, d->results.environment, d->results.wall_seconds});
      run.wall_seconds = std::max(run.wall_seconds, share.wall_seconds);
      const auto done = static_cast<int64_t>(share.fits.size());
      if (done < share.planned_fits)
        merged.missing.push_back("shard " + shard.text() + " (" + d->folder +
                                 "): " + std::to_string(share.planned_fits - done) + " of " +
                                 std::to_string(share.planned_fits) +
                                 " fits not run; run it again with the same options and --out "
                                 "to finish it");
    }
  }
  for (int64_t index = 0; index < count; ++index)
    if (!present.count(index))
      merged.missing.push_back("shard " + std::to_string(index) + "/" + std::to_string(count) +
                               ": no folder holds it");

  std::stable_sort(run.fits.begin(), run.fits.end(), [&](const auto& a, const auto& b) {
    return plan_position(run, a) < plan_position(run, b);
  });
  summarize_accuracy(run);
  results.wall_seconds = run.wall_seconds;
  results.accuracy = std::move(run);
  return merged;
}

} // namespace kan::results
