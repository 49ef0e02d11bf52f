#pragma once
/// Data-parallel scaling (`kanbench scaling`; docs/distributed.md): a workload trained on 1, 2,
/// ... ranks of this machine, each rank a process started as torchrun starts its workers.

#include "kan/bench/workloads.h"
#include "kan/results/results.h"

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kan {
class DataParallel;
}

namespace kan::bench {

/// How one process of a local launch ended.
struct RankExit {
  int exit_code = -1;  ///< -1: killed (past the limit) or ended by a signal
  bool killed = false; ///< still running at the limit, or after rank 0 ended with stop_with_rank0
  std::string output;  ///< its stdout and stderr
};

/// Options of launch_local_ranks.
struct LocalLaunch {
  /// The command every rank runs; argv[0] is the executable's path.
  std::vector<std::string> argv;
  int world_size = 1;
  double limit_seconds = 600; ///< then every rank still running is killed
  /// Variables set for every rank besides torchrun's; the value "{rank}" becomes the rank.
  std::map<std::string, std::string> environment;
  /// Kill the others once rank 0 has ended (a rank that hangs never would).
  bool stop_with_rank0 = false;
};

/// Starts world_size processes on this machine with the environment torchrun gives its workers
/// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
/// MASTER_PORT), waits for them, and returns how each ended.
std::vector<RankExit> launch_local_ranks(const LocalLaunch& launch);

/// One rank's part of a scaling measurement: trains `w` data-parallel in `group` for its warm-up
/// and timed epochs (the suite's schedule) and returns rank 0's view, without the entries that
/// compare rank counts (speedup, efficiency, max_rel_loss_diff: fill_scaling_comparisons).
results::ScalingResult train_data_parallel(const Workload& w, DataParallel& group,
                                           torch::Dtype dtype);

} // namespace kan::bench
