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

// Where `value` is in `values`; past the end where it is not.
template <typename T> auto position(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) - values.begin();
}

// "3,5,10": a plan's list as the option takes it.
template <typename T> std::string list(const std::vector<T>& values) {
  std::string text;
  for (const auto& v : values)
    text += (text.empty() ? "" : ",") + text_of(v);
  return text;
}

// Which command wrote a document: merge puts each kind together its own way.
std::string command_of(const Results& r) {
  if (r.accuracy)
    return "accuracy";
  if (r.sweep)
    return "sweep";
  if (!r.scaling.empty())
    return "scaling";
  return "run";
}

// What makes two shards parts of one plan, each with the option that sets it.
std::vector<std::pair<std::string, std::string>> plan_of(const ShardDocument& d) {
  const auto& r = d.results;
  std::vector<std::pair<std::string, std::string>> plan{{"command", command_of(r)}};
  if (r.accuracy) {
    const auto& a = *r.accuracy;
    plan.insert(plan.end(), {{"--table", a.table},
                             {"--preset", a.preset},
                             {"--functions", list(a.functions)},
                             {"--devices", list(a.devices)},
                             {"--seeds", list(a.seeds)},
                             {"--grids", list(a.grids)},
                             {"--steps", std::to_string(a.steps)},
                             {"--train-num", std::to_string(a.train_num)},
                             {"--test-num", std::to_string(a.test_num)}});
  } else {
    const auto& c = r.config;
    plan.insert(plan.end(),
                {{"--suite", c.suite},
                 {"devices", list(c.devices)},
                 {"workloads", list(c.cases)},
                 {"--repeat", std::to_string(c.repeat)},
                 {"--time-limit", c.time_limit_seconds ? text_of(*c.time_limit_seconds) : "-"},
                 {"--no-cupti", c.cupti && !*c.cupti ? "given" : "not given"}});
    // Every further setting by its key, so that a difference names it (sweep's own "command" is
    // the one above).
    if (c.extra.is_object())
      for (const auto& [key, value] : c.extra.items())
        if (key != "command")
          plan.emplace_back(key, value.dump());
  }
  plan.emplace_back("shard count", std::to_string(shard_of(d).count));
  plan.emplace_back("kanbench version", r.environment.kanbench_version);
  return plan;
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
    if (command_of(d.results) == "scaling")
      throw MergeError("merge: " + d.folder +
                       " holds a kanbench scaling run, which is not split into shards (kanbench "
                       "merge takes accuracy, run and sweep shards)");
    const auto s = shard_of(d);
    if (s.count < 1 || s.index < 0 || s.index >= s.count)
      throw MergeError("merge: " + d.folder + " holds shard " + s.text() + ", which is no shard");
  }
  // Setting by setting, in the first shard's order; a setting only one of them has is named.
  const auto& first_folder = shards.front().folder;
  const auto first = plan_of(shards.front());
  const auto value_in = [](const auto& plan, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : plan)
      if (k == key)
        return &v;
    return nullptr;
  };
  for (const auto& d : shards) {
    const auto plan = plan_of(d);
    const auto differ = [&](const std::string& what) {
      throw MergeError("merge: " + first_folder + " and " + d.folder +
                       " are shards of different plans (" + what + ")");
    };
    for (const auto& [key, value] : first) {
      const auto* other = value_in(plan, key);
      if (!other)
        differ(key + " set in " + first_folder + " only");
      if (*other != value)
        differ(key + " " + value + " against " + *other);
    }
    for (const auto& [key, value] : plan)
      if (!value_in(first, key))
        differ(key + " set in " + d.folder + " only");
  }
}

// Plan order, as near as the documents tell it: function, device, seed, KANs before MLPs.
auto plan_position(const AccuracyRun& run, const AccuracyFit& fit) {
  const auto seed = std::find(run.seeds.begin(), run.seeds.end(), fit.seed) - run.seeds.begin();
  return std::make_tuple(position(run.functions, fit.function), position(run.devices, fit.device),
                         seed, fit.family != "kan");
}

// The shards in index order, each with whether it is the first document of its index (a folder
// given twice, or two folders of one shard, count once).
using Ordered = std::vector<std::pair<const ShardDocument*, bool>>;

void merge_accuracy(const Ordered& ordered, MergedRun& merged) {
  AccuracyRun run = *ordered.front().first->results.accuracy;
  run.fits.clear();
  run.planned_fits = 0;
  run.wall_seconds = 0;
  std::map<std::string, std::pair<const AccuracyFit*, const ShardDocument*>> seen;
  for (const auto& [d, first_of_index] : ordered) {
    const auto& share = *d->results.accuracy;
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
    if (!first_of_index)
      continue;
    run.planned_fits += share.planned_fits;
    run.wall_seconds = std::max(run.wall_seconds, share.wall_seconds);
    const auto done = static_cast<int64_t>(share.fits.size());
    if (done < share.planned_fits)
      merged.missing.push_back("shard " + shard_of(*d).text() + " (" + d->folder +
                               "): " + std::to_string(share.planned_fits - done) + " of " +
                               std::to_string(share.planned_fits) +
                               " fits not run; run it again with the same options and --out "
                               "to finish it");
  }
  std::stable_sort(run.fits.begin(), run.fits.end(), [&](const auto& a, const auto& b) {
    return plan_position(run, a) < plan_position(run, b);
  });
  summarize_accuracy(run);
  merged.results.wall_seconds = run.wall_seconds;
  merged.results.accuracy = std::move(run);
}

// Each keyed item once, in shard order: the same item in two shards must hold the same results
// (`same` compares what a rerun reproduces, timings aside; `text` shows it). Returns the items.
template <typename Item, typename Items, typename Key, typename Same, typename Text>
std::vector<Item> once_each(const Ordered& ordered, Items items, Key key, Same same, Text text,
                            const std::string& what) {
  std::vector<Item> merged;
  std::map<std::string, std::pair<Item, const ShardDocument*>> seen;
  for (const auto& entry : ordered) {
    const auto* d = entry.first;
    for (const auto& item : items(d->results)) {
      const auto [at, added] = seen.emplace(key(item), std::make_pair(item, d));
      if (added)
        merged.push_back(item);
      else if (!same(at->second.first, item))
        throw MergeError("merge: " + what + " " + key(item) + " is in " +
                         at->second.second->folder + " and in " + d->folder +
                         " with different results (" + text(at->second.first) + " against " +
                         text(item) + ")");
    }
  }
  return merged;
}

// Items of a shard, each with where it ran: the shard's machine, unless a merge of merges says.
template <typename Item> std::vector<Item> with_host(std::vector<Item> items, const Results& r) {
  for (auto& item : items)
    if (!item.host)
      item.host = r.environment.hostname;
  return items;
}

std::string outcome_text(CaseStatus status, std::optional<double> metric) {
  if (status != CaseStatus::kOk || !metric)
    return to_string(status);
  char text[40];
  std::snprintf(text, sizeof text, "final metric %.6g", *metric);
  return text;
}

// `kanbench run` shards: each workload's cases and comparisons from the shard that ran it, the
// edge cases from the one that ran them, the rehearsed cases of every shard; in plan order.
void merge_run(const Ordered& ordered, MergedRun& merged) {
  auto& results = merged.results;
  const auto& config = results.config;
  results.cases = once_each<CaseResult>(
      ordered, [](const Results& r) { return with_host(r.cases, r); },
      [](const CaseResult& c) { return c.name + " on " + c.target; },
      [](const CaseResult& a, const CaseResult& b) {
        return a.status == b.status && a.final_test_rmse == b.final_test_rmse &&
               a.final_accuracy == b.final_accuracy;
      },
      [](const CaseResult& c) {
        return outcome_text(c.status, c.final_test_rmse ? c.final_test_rmse : c.final_accuracy);
      },
      "case");
  std::stable_sort(results.cases.begin(), results.cases.end(), [&](const auto& a, const auto& b) {
    return std::pair{position(config.cases, a.name), position(config.devices, a.target)} <
           std::pair{position(config.cases, b.name), position(config.devices, b.target)};
  });
  // A comparison follows from its two cases, which were checked above.
  results.comparisons = once_each<Comparison>(
      ordered, [](const Results& r) { return r.comparisons; },
      [](const Comparison& c) { return c.case_name + " " + c.a + " vs " + c.b; },
      [](const Comparison&, const Comparison&) { return true; },
      [](const Comparison&) { return std::string(); }, "comparison");
  std::stable_sort(
      results.comparisons.begin(), results.comparisons.end(), [&](const auto& a, const auto& b) {
        return std::pair{position(config.cases, a.case_name), position(config.devices, a.b)} <
               std::pair{position(config.cases, b.case_name), position(config.devices, b.b)};
      });
  results.edge_cases = once_each<EdgeCaseResult>(
      ordered, [](const Results& r) { return r.edge_cases; },
      [](const EdgeCaseResult& e) { return e.name + " on " + e.device; },
      [](const EdgeCaseResult& a, const EdgeCaseResult& b) { return a.status == b.status; },
      [](const EdgeCaseResult& e) { return to_string(e.status); }, "edge case");
  for (const auto& entry : ordered) {
    const auto* d = entry.first;
    if (!d->results.rehearsal)
      continue;
    if (!results.rehearsal)
      results.rehearsal = Rehearsal{d->results.rehearsal->reason, {}};
    for (const auto& c : d->results.rehearsal->cases)
      if (std::none_of(results.rehearsal->cases.begin(), results.rehearsal->cases.end(),
                       [&](const RehearsedCase& o) { return o.case_name == c.case_name; }))
        results.rehearsal->cases.push_back(c);
  }
  if (results.rehearsal)
    std::stable_sort(results.rehearsal->cases.begin(), results.rehearsal->cases.end(),
                     [&](const auto& a, const auto& b) {
                       return position(config.cases, a.case_name) <
                              position(config.cases, b.case_name);
                     });
}

// Whether a sweep target's entry holds its max-batch search: the search's outcome, or why it
// did not run (an entry that only summarises points has neither).
bool ran_search(const SweepTarget& t) {
  return !t.max_batch_reason.empty() || !t.max_batch_attempts.empty();
}

std::string search_text(const SweepTarget& t) {
  return t.max_batch ? "max batch " + std::to_string(*t.max_batch) : t.max_batch_reason;
}

// `kanbench sweep` shards: every point and max-batch search once, the batches of all, and the
// best batches, saturation and crossovers derived again from all the points.
void merge_sweep(const Ordered& ordered, MergedRun& merged) {
  auto& results = merged.results;
  const auto& config = results.config;
  Sweep sweep;
  sweep.points = once_each<SweepPoint>(
      ordered, [](const Results& r) { return with_host(r.sweep->points, r); },
      [](const SweepPoint& p) {
        return p.case_name + " at batch " + std::to_string(p.batch) + " on " + p.target;
      },
      [](const SweepPoint& a, const SweepPoint& b) { return a.status == b.status; },
      [](const SweepPoint& p) { return to_string(p.status); }, "point");
  // A target's max-batch search from the shard that ran it; the other shards' entries of it
  // hold only their points' summaries, derived again below.
  std::map<std::string, const ShardDocument*> searched_in;
  for (const auto& entry : ordered)
    for (const auto& t : entry.first->results.sweep->targets) {
      if (!ran_search(t))
        continue;
      const auto key = t.case_name + " on " + t.target;
      const auto [at, added] = searched_in.emplace(key, entry.first);
      if (added) {
        sweep.targets.push_back(t);
        continue;
      }
      const auto& first = *std::find_if(sweep.targets.begin(), sweep.targets.end(), [&](auto& o) {
        return o.case_name == t.case_name && o.target == t.target;
      });
      if (first.max_batch != t.max_batch || first.max_batch_reason != t.max_batch_reason)
        throw MergeError("merge: the max-batch search of " + key + " is in " + at->second->folder +
                         " and in " + entry.first->folder + " with different results (" +
                         search_text(first) + " against " + search_text(t) + ")");
    }
  for (const auto& p : sweep.points)
    if (std::find(sweep.batches.begin(), sweep.batches.end(), p.batch) == sweep.batches.end())
      sweep.batches.push_back(p.batch);
  std::sort(sweep.batches.begin(), sweep.batches.end());
  const auto point_position = [&](const SweepPoint& p) {
    return std::make_tuple(position(config.cases, p.case_name), p.batch,
                           position(config.devices, p.target));
  };
  std::stable_sort(sweep.points.begin(), sweep.points.end(), [&](const auto& a, const auto& b) {
    return point_position(a) < point_position(b);
  });
  std::stable_sort(sweep.targets.begin(), sweep.targets.end(), [&](const auto& a, const auto& b) {
    return std::pair{position(config.cases, a.case_name), position(config.devices, a.target)} <
           std::pair{position(config.cases, b.case_name), position(config.devices, b.target)};
  });
  fill_sweep_summaries(sweep);
  results.sweep = std::move(sweep);
}

} // namespace

MergedRun merge_shards(const std::vector<ShardDocument>& shards) {
  check_documents(shards);
  const int64_t count = shard_of(shards.front()).count;
  std::vector<const ShardDocument*> by_index;
  for (const auto& d : shards)
    by_index.push_back(&d);
  std::stable_sort(by_index.begin(), by_index.end(), [](const auto* a, const auto* b) {
    return shard_of(*a).index < shard_of(*b).index;
  });

  MergedRun merged;
  auto& results = merged.results;
  const auto& front = *by_index.front();
  results.environment = front.results.environment;
  results.config = front.results.config;
  results.config.shard.reset();
  results.config.trace.reset(); // each shard wrote its own
  Ordered ordered;
  std::set<int64_t> present;
  for (const auto* d : by_index) {
    const auto shard = shard_of(*d);
    const bool first_of_index = present.insert(shard.index).second;
    ordered.emplace_back(d, first_of_index);
    if (!first_of_index)
      continue;
    results.shards.push_back(
        {shard, d->folder, d->results.run_id, d->results.environment, d->results.wall_seconds});
    if (d->results.wall_seconds)
      results.wall_seconds = std::max(results.wall_seconds.value_or(0), *d->results.wall_seconds);
  }
  for (int64_t index = 0; index < count; ++index)
    if (!present.count(index))
      merged.missing.push_back("shard " + std::to_string(index) + "/" + std::to_string(count) +
                               ": no folder holds it");
  const auto command = command_of(front.results);
  if (command == "accuracy")
    merge_accuracy(ordered, merged);
  else if (command == "sweep")
    merge_sweep(ordered, merged);
  else
    merge_run(ordered, merged);
  return merged;
}

} // namespace kan::results
