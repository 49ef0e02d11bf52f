// DataParallel's collectives and GradientSync, on any c10d backend (data_parallel_join.cpp
// creates the backends).
#include "kan/distributed/data_parallel.h"

#include "kan/io/clock.h"
#include "kan/nn/trace_scope.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <sstream>

namespace kan {
namespace {

using nlohmann::json;

// Every key path where `theirs` differs from `ours`, in key order.
void differences(const json& ours, const json& theirs, const std::string& path,
                 std::vector<std::string>& found) {
  if (ours.is_object() && theirs.is_object()) {
    for (const auto& [key, value] : ours.items()) {
      const std::string here = path.empty() ? key : path + "." + key;
      if (theirs.contains(key))
        differences(value, theirs.at(key), here, found);
      else
        found.push_back(here);
    }
    for (const auto& [key, value] : theirs.items())
      if (!ours.contains(key))
        found.push_back(path.empty() ? key : path + "." + key);
    return;
  }
  if (ours != theirs)
    found.push_back(path.empty() ? "(the whole configuration)" : path);
}

// The keys whose differences are reported first, in this order; then any other. The settings a
// user gives come before the data, whose fingerprints follow from them (another seed or dtype
// changes them too), and the width before the model's other options (mult and node_arity are as
// long as it).
const char* const kReportedFirst[] = {"model.width", "model",           "fit",           "backend",
                                      "data.dtype",  "data.train_rows", "data.test_rows"};

// The difference that names the cause best ("" when equal).
std::string first_difference(const json& ours, const json& theirs) {
  std::vector<std::string> found;
  differences(ours, theirs, "", found);
  auto order = [](const std::string& path) {
    size_t place = 0;
    for (const std::string key : kReportedFirst) {
      if (path == key || path.rfind(key + ".", 0) == 0)
        break;
      ++place;
    }
    return place;
  };
  const auto first =
      std::min_element(found.begin(), found.end(), [&](const std::string& a, const std::string& b) {
        return order(a) < order(b);
      });
  return first == found.end() ? "" : *first;
}

const json& at_path(const json& j, const std::string& path) {
  static const json missing = "(absent)";
  const json* node = &j;
  std::stringstream keys(path);
  for (std::string key; std::getline(keys, key, '.');) {
    if (!node->is_object() || !node->contains(key))
      return missing;
    node = &node->at(key);
  }
  return *node;
}

// A sum over the ranks in the forward, the identity in the backward (DataParallel's doc).
class SumOverRanks : public torch::autograd::Function<SumOverRanks> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const at::Tensor& t,
                            DataParallel* group) {
    std::vector<at::Tensor> sum{t.clone()};
    group->sum_(sum);
    return sum[0];
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// Tells GradientSync that a parameter's gradient has accumulated for this backward.
class ReadyHook : public torch::autograd::PostAccumulateGradHook {
public:
  ReadyHook(GradientSync& sync, size_t index) : sync_(sync), index_(index) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override {
    sync_.gradient_ready(index_);
  }

private:
  GradientSync& sync_;
  size_t index_;
};

} // namespace

DataParallel::DataParallel(c10::intrusive_ptr<c10d::Backend> backend, c10::Device device,
                           DataParallelOptions options)
    : backend_(std::move(backend)), rank_(backend_->getRank()), world_size_(backend_->getSize()),
      device_(device), options_(options) {
  TORCH_CHECK(options_.bucket_bytes() >= 1, "bucket_bytes must be >= 1, got ",
              options_.bucket_bytes());
  TORCH_CHECK(options_.timeout_seconds() > 0, "timeout_seconds must be > 0, got ",
              options_.timeout_seconds());
}

std::string DataParallel::backend_name() const {
  return backend_->getBackendName();
}

std::pair<int64_t, int64_t> DataParallel::shard(int64_t n) const {
  const int64_t first = n * rank_ / world_size_;
  return {first, n * (rank_ + 1) / world_size_ - first};
}

void DataParallel::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  PhaseScope phase(Phase::kCommunication);
  const auto start = io::Clock::now();
  work->wait();
  stats_.wait_seconds += io::seconds_since(start);
}

c10::intrusive_ptr<c10d::Work> DataParallel::launch_sum(at::Tensor& tensor) {
  PhaseScope phase(Phase::kCommunication);
  std::vector<at::Tensor> one{tensor};
  ++stats_.collectives;
  stats_.bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return backend_->allreduce(one);
}

void DataParallel::sum_(std::vector<at::Tensor>& tensors) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& t : tensors)
    works.push_back(launch_sum(t));
  for (const auto& w : works)
    wait(w);
}

at::Tensor DataParallel::sum_differentiable(const at::Tensor& t) {
  return SumOverRanks::apply(t, this);
}

void DataParallel::broadcast_from_rank0(std::vector<at::Tensor>& tensors) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& t : tensors) {
    PhaseScope phase(Phase::kCommunication);
    TORCH_CHECK(t.is_contiguous(), "broadcast_from_rank0 needs contiguous tensors");
    std::vector<at::Tensor> one{t};
    ++stats_.collectives;
    stats_.bytes += t.numel() * static_cast<int64_t>(t.element_size());
    works.push_back(backend_->broadcast(one, c10d::BroadcastOptions{}));
  }
  for (const auto& w : works)
    wait(w);
}

at::Tensor DataParallel::gather_rows(const at::Tensor& rows) {
  // Ranks may hold different numbers of rows, and c10d's all-gather wants equal shapes: gather
  // the counts, pad every rank's rows to the largest, gather, cut the padding off.
  auto count = at::full({1}, rows.size(0), at::TensorOptions().dtype(at::kLong).device(device_));
  std::vector<std::vector<at::Tensor>> counts(1);
  for (int r = 0; r < world_size_; ++r)
    counts[0].push_back(at::empty_like(count));
  std::vector<at::Tensor> input{count};
  ++stats_.collectives;
  wait(backend_->allgather(counts, input));
  const auto host_counts = at::cat(counts[0]).cpu();
  const auto* c = host_counts.data_ptr<int64_t>();
  const int64_t most = *std::max_element(c, c + world_size_);

  auto shape = rows.sizes().vec();
  shape[0] = most;
  auto padded = at::zeros(shape, rows.options());
  padded.narrow(0, 0, rows.size(0)).copy_(rows);
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int r = 0; r < world_size_; ++r)
    gathered[0].push_back(at::empty_like(padded));
  std::vector<at::Tensor> mine{padded};
  ++stats_.collectives;
  stats_.bytes += padded.numel() * static_cast<int64_t>(padded.element_size());
  wait(backend_->allgather(gathered, mine));
  std::vector<at::Tensor> parts;
  for (int r = 0; r < world_size_; ++r)
    parts.push_back(gathered[0][r].narrow(0, 0, c[r]));
  return at::cat(parts);
}

void DataParallel::check_same_configuration(const json& config) {
  TORCH_CHECK(config.is_object(), "check_same_configuration needs a JSON object");
  const auto bytes_options = at::TensorOptions().dtype(at::kByte).device(device_);
  const auto long_options = at::TensorOptions().dtype(at::kLong).device(device_);
  // Sends rank `root`'s text to every rank.
  auto broadcast_text = [&](const std::string& text, int root) {
    auto length = at::full({1}, static_cast<int64_t>(text.size()), long_options);
    std::vector<at::Tensor> one{length};
    c10d::BroadcastOptions from;
    from.rootRank = root;
    wait(backend_->broadcast(one, from));
    const int64_t n = length.cpu().item<int64_t>();
    auto data = at::zeros({std::max<int64_t>(n, 1)}, bytes_options);
    if (rank_ == root && n > 0)
      data.narrow(0, 0, n).copy_(at::from_blob(const_cast<char*>(text.data()), {n}, at::kByte));
    std::vector<at::Tensor> payload{data};
    wait(backend_->broadcast(payload, from));
    const auto host = data.cpu();
    return std::string(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()),
                       static_cast<size_t>(n));
  };

  const json reference = json::parse(broadcast_text(config.dump(), 0));
  const std::string differs = first_difference(reference, config);
  // Which ranks differ: each sets its own slot, the sum tells everyone.
  auto mismatch = at::zeros({world_size_}, long_options);
  if (!differs.empty())
    mismatch[rank_].fill_(1);
  std::vector<at::Tensor> flags{mismatch};
  sum_(flags);
  const auto host = mismatch.cpu();
  int first = -1;
  for (int r = 0; r < world_size_ && first < 0; ++r)
    if (host.data_ptr<int64_t>()[r] != 0)
      first = r;
  if (first < 0)
    return;
  std::string message;
  if (rank_ == first) {
    message = "data-parallel ranks disagree: rank " + std::to_string(rank_) + " has " + differs +
              " = " + at_path(config, differs).dump() + " but rank 0 has " +
              at_path(reference, differs).dump() +
              "; every rank must run the same model, data and options";
  }
  message = broadcast_text(message, first);
  TORCH_CHECK(false, message);
}

void DataParallel::check_distinct_devices() {
  if (!device_.is_cuda())
    return;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const auto key = static_cast<int64_t>(std::hash<std::string>{}(host) >> 1);
  auto mine =
      at::tensor({key, static_cast<int64_t>(device_.index())}, at::kLong).to(device_).unsqueeze(0);
  const auto all = gather_rows(mine).cpu();
  const auto* a = all.data_ptr<int64_t>();
  for (int r = 0; r < world_size_; ++r)
    for (int s = r + 1; s < world_size_; ++s)
      TORCH_CHECK(a[2 * r] != a[2 * s] || a[2 * r + 1] != a[2 * s + 1], "data-parallel ranks ", r,
                  " and ", s, " share one GPU (cuda:", a[2 * r + 1],
                  " on one machine): each rank must train on its own device, cuda:LOCAL_RANK");
}

GradientSync::GradientSync(std::shared_ptr<DataParallel> group, std::vector<at::Tensor> parameters)
    : group_(std::move(group)), parameters_(std::move(parameters)), bucket_of_(parameters_.size()),
      offset_of_(parameters_.size()), ready_(parameters_.size(), false) {
  // Reverse order: backward produces the last layers' gradients first.
  const int64_t cap = group_->options().bucket_bytes();
  int64_t bytes = 0;
  for (size_t k = parameters_.size(); k-- > 0;) {
    const auto& p = parameters_[k];
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    const bool fits = !buckets_.empty() && bytes + size <= cap &&
                      parameters_[buckets_.back().members.front()].scalar_type() == p.scalar_type();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    auto& bucket = buckets_.back();
    offset_of_[k] = static_cast<size_t>(bytes / static_cast<int64_t>(p.element_size()));
    bucket.members.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += size;
  }
  for (auto& bucket : buckets_) {
    int64_t numel = 0;
    for (size_t k : bucket.members)
      numel += parameters_[k].numel();
    bucket.flat = at::zeros({numel}, parameters_[bucket.members.front()].options());
    bucket.pending = static_cast<int64_t>(bucket.members.size());
  }
  for (size_t k = 0; k < parameters_.size(); ++k)
    torch::autograd::impl::set_post_acc_grad_hooks(parameters_[k],
                                                   std::make_unique<ReadyHook>(*this, k));
}

GradientSync::~GradientSync() {
  for (const auto& p : parameters_)
    torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSync::copy_in(size_t k) {
  const auto& p = parameters_[k];
  auto slot =
      buckets_[bucket_of_[k]].flat.narrow(0, static_cast<int64_t>(offset_of_[k]), p.numel());
  if (p.grad().defined())
    slot.copy_(p.grad().reshape({-1}));
  else
    slot.zero_(); // did not take part in this backward
}

void GradientSync::gradient_ready(size_t k) {
  TORCH_CHECK(!ready_[k], "GradientSync: parameter ", k,
              "'s gradient accumulated twice in one backward");
  ready_[k] = true;
  copy_in(k);
  --buckets_[bucket_of_[k]].pending;
  launch_ready_buckets();
}

void GradientSync::launch_ready_buckets() {
  // In bucket order only: c10d matches collectives by the order in which ranks issue them.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    auto& bucket = buckets_[next_launch_++];
    bucket.work = group_->launch_sum(bucket.flat);
  }
}

void GradientSync::finish() {
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (!ready_[k]) {
      ready_[k] = true;
      copy_in(k);
      --buckets_[bucket_of_[k]].pending;
    }
  }
  launch_ready_buckets();
  for (auto& bucket : buckets_) {
    group_->wait(bucket.work);
    bucket.work.reset();
    for (size_t k : bucket.members) {
      auto& p = parameters_[k];
      const auto sum =
          bucket.flat.narrow(0, static_cast<int64_t>(offset_of_[k]), p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(sum);
      else
        p.mutable_grad() = sum.clone();
    }
    bucket.pending = static_cast<int64_t>(bucket.members.size());
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

} // namespace kan
