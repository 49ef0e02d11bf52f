#pragma once
/// Data-parallel training on PyTorch's c10d (docs/distributed.md): each rank trains on its shard
/// of every global batch, c10d's collectives (Gloo on the CPU, NCCL on CUDA) keep the ranks in
/// step, and torchrun launches them.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kan {

/// What torchrun tells each process it starts (its environment variables).
struct LaunchEnvironment {
  int rank = 0;             ///< RANK
  int world_size = 1;       ///< WORLD_SIZE
  int local_rank = 0;       ///< LOCAL_RANK: the rank on this machine, and its GPU
  int local_world_size = 1; ///< LOCAL_WORLD_SIZE (defaults to WORLD_SIZE)
  std::string master_addr;  ///< MASTER_ADDR: where the rendezvous store listens
  int master_port = 0;      ///< MASTER_PORT
  /// TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store, rank 0 is a client.
  bool agent_store = false;
  int restart_count = 0; ///< TORCHELASTIC_RESTART_COUNT: keys of a restarted attempt stay apart

  /// Reads the variables; a missing or malformed one is an error naming it and its value.
  static LaunchEnvironment from_environment();
};

struct DataParallelOptions {
  /// How long a collective waits for the other ranks before it fails: a rank that died or hangs
  /// makes the others fail with an error within this time, never a silent hang.
  TORCH_ARG(double, timeout_seconds) = 300;
  /// Gradients are all-reduced in buckets of at most this many bytes (DDP's default, 25 MiB).
  TORCH_ARG(int64_t, bucket_bytes) = int64_t{25} << 20;
};

/// What the collectives of one process cost so far.
struct CommunicationStats {
  int64_t collectives = 0; ///< every all-reduce, broadcast and all-gather
  int64_t bytes = 0;       ///< payload bytes this rank contributed to them
  double wait_seconds = 0; ///< time spent waiting for them to complete
};

/// One process's membership of a data-parallel group: its rank, its device, and the c10d backend
/// that carries its collectives. fit() takes one through FitOptions::data_parallel.
///
/// Example (under torchrun):
///   auto group = kan::DataParallel::join(kan::LaunchEnvironment::from_environment(), device);
///   kan::fit(model, data, kan::FitOptions().data_parallel(group));
class DataParallel {
public:
  /// Joins the group torchrun launched: a TCP store at MASTER_ADDR:MASTER_PORT, then Gloo when
  /// `device` is the CPU and NCCL when it is a CUDA device (which must be cuda:LOCAL_RANK).
  /// Defined in kan::distributed (link it to call this), which needs Gloo's headers to build;
  /// a group made otherwise goes to the constructor.
  static std::shared_ptr<DataParallel> join(const LaunchEnvironment& launch, c10::Device device,
                                            const DataParallelOptions& options = {});

  DataParallel(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device,
               DataParallelOptions options);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  c10::Device device() const { return device_; }
  const DataParallelOptions& options() const { return options_; }
  /// "gloo" or "nccl".
  std::string backend_name() const;

  /// This rank's rows [first, first + count) of `n` global rows: consecutive, balanced shards in
  /// rank order, so the shards concatenated are the global batch.
  std::pair<int64_t, int64_t> shard(int64_t n) const;

  /// Overwrites every tensor with rank 0's (in place).
  void broadcast_from_rank0(std::vector<at::Tensor>& tensors);
  /// Sums every tensor over the ranks, in place.
  void sum_(std::vector<at::Tensor>& tensors);
  /// A sum over the ranks that autograd differentiates as the identity: when every rank derives
  /// the same objective from the sum, each rank's gradient of its own term, summed over the ranks
  /// by the gradient all-reduce, is the gradient of the whole objective.
  at::Tensor sum_differentiable(const at::Tensor& t);
  /// Every rank's rows of `rows` (ranks may hold different counts), concatenated in rank order.
  at::Tensor gather_rows(const at::Tensor& rows);

  /// Refuses, on every rank, a configuration that differs from rank 0's: the error names a
  /// differing key, the rank and both values. `config` must be a JSON object; of several
  /// differences, the first under model.width, model, fit, backend, data.dtype, data.train_rows,
  /// data.test_rows (in this order) is named, then any other: a setting that also changes the
  /// data (a seed, a dtype) is named rather than the data's fingerprint.
  void check_same_configuration(const nlohmann::json& config);

  /// Refuses, on every rank, two ranks on one machine that share a CUDA device.
  void check_distinct_devices();

  const CommunicationStats& stats() const { return stats_; }

  /// Waits for a collective, counting the time; used by GradientSync.
  void wait(const c10::intrusive_ptr<c10d::Work>& work);
  /// Launches an all-reduce (sum) of one tensor, counting its bytes.
  c10::intrusive_ptr<c10d::Work> launch_sum(at::Tensor& tensor);

private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_, world_size_;
  c10::Device device_;
  DataParallelOptions options_;
  CommunicationStats stats_;
};

/// Sums gradients over the ranks during backward, as DDP does (fit scales each rank's loss by
/// its share of the global batch, so the sum is the whole batch's gradient): the parameters are
/// grouped into buckets of at most DataParallelOptions::bucket_bytes (in reverse order, roughly the
/// order backward produces their gradients); a bucket's all-reduce starts as soon as its last
/// gradient has accumulated, so communication overlaps the rest of the backward. Buckets start in
/// one fixed order on every rank, as c10d requires. finish() waits for them and writes the sums
/// back. Hooks are installed while the object lives.
class GradientSync {
public:
  GradientSync(std::shared_ptr<DataParallel> group, std::vector<at::Tensor> parameters);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  /// After backward: starts the buckets whose gradients never came (a parameter that did not
  /// take part counts as zero), waits for all, and sets every parameter's gradient to the sum
  /// over the ranks.
  void finish();

  /// Called by the hooks when `index`'s gradient has accumulated.
  void gradient_ready(size_t index);

private:
  struct Bucket {
    std::vector<size_t> members; ///< indices into parameters_
    at::Tensor flat;
    int64_t pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void launch_ready_buckets();
  void copy_in(size_t index);

  std::shared_ptr<DataParallel> group_;
  std::vector<at::Tensor> parameters_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, offset_of_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
};

} // namespace kan
