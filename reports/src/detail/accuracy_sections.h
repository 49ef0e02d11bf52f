#pragma once
// The run report's pieces about an accuracy run (kanbench accuracy: the KAN paper's accuracy
// table re-measured). Internal to kan::reports.

#include "kan/results/results.h"

#include <string>

namespace kan::reports::detail {

/// The verdict's line on the accuracy run: how often the paper's finding reproduces, how many
/// fits finished; empty without an accuracy run.
std::string accuracy_line(const results::Results& r);

/// The Accuracy section: the run's settings, the summary against the paper's numbers, the
/// failed fits, and each function's chart and points; empty without an accuracy run.
std::string accuracy_section(const results::Results& r);

/// A merged run's shards, where each ran and how long it took (kanbench merge); empty for a run
/// that was not merged. Inside the Accuracy section for an accuracy run, a section of its own
/// (`as_section`) for run and sweep.
std::string shards_table(const results::Results& r, bool as_section = false);

} // namespace kan::reports::detail
