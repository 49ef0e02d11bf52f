#include "kan/train/fit.h"

#include "detail/parse_name.h"

#include "detail/checks.h"
#include "kan/distributed/data_parallel.h"
#include "kan/io/clock.h"
#include "kan/nn/autocast.h"
#include "kan/nn/trace_scope.h"
#include "kan/optim/lbfgs.h"
#include "nn/detail/mean_squared_error.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adam.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

namespace kan {
namespace {

using io::Clock;
using io::seconds_since;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_labels(Loss loss, const torch::Tensor& labels, const torch::Tensor& inputs,
                  const Model& model, const char* what) {
  TORCH_CHECK(labels.defined(), what, " is an undefined tensor");
  TORCH_CHECK(labels.dim() >= 1 && labels.size(0) == inputs.size(0), what, " has shape ",
              labels.sizes(), " but its inputs have ", inputs.size(0), " rows");
  TORCH_CHECK(labels.device() == model.device(), what, " is on ", labels.device(),
              " but the model is on ", model.device(), ": move the data (.to(", model.device(),
              ")) or the model; kanbench never moves either silently");
  const int64_t out = model.outputs();
  if (loss == Loss::kMSE) {
    TORCH_CHECK(labels.dim() == 2 && labels.size(1) == out, what, " must have shape (N, ", out,
                ") for the mse loss, got ", labels.sizes());
    TORCH_CHECK(labels.scalar_type() == model.dtype(), what, " has dtype ",
                to_string(labels.scalar_type()), " but the model is ", to_string(model.dtype()));
    detail::check_finite(labels, what);
  } else {
    TORCH_CHECK(labels.dim() == 1 && labels.scalar_type() == torch::kLong, what,
                " must be (N) int64 class indices for the cross_entropy loss, got ",
                to_string(labels.scalar_type()), " of shape ", labels.sizes());
  }
}

// Share of samples whose largest logit is the label, on their device.
torch::Tensor accuracy_on_device(const torch::Tensor& logits, const torch::Tensor& labels) {
  return logits.argmax(1).eq(labels).to(torch::kFloat64).mean();
}
double accuracy(const torch::Tensor& logits, const torch::Tensor& labels) {
  return accuracy_on_device(logits, labels).item<double>();
}

// Minibatch indices, drawn on the CPU from the fit's seed so that every device sees the same
// batches, and moved to the model's device. Undefined at full batch.
class BatchSampler {
public:
  BatchSampler(int64_t n, int64_t count, BatchDraw draw, at::Generator& generator,
               torch::Device device)
      : n_(n), count_(count), draw_(draw), generator_(generator), device_(device) {}

  torch::Tensor next() {
    if (count_ >= n_)
      return {};
    PhaseScope host(Phase::kHostWork);
    if (draw_ == BatchDraw::kPerStep)
      return to_device(torch::randperm(n_, generator_, torch::kLong).narrow(0, 0, count_));
    if (!permutation_.defined() || position_ == n_) {
      permutation_ = to_device(torch::randperm(n_, generator_, torch::kLong));
      position_ = 0;
    }
    const int64_t count = std::min(count_, n_ - position_); // a pass's last batch: the rest
    position_ += count;
    return permutation_.narrow(0, position_ - count, count);
  }

private:
  // To a GPU through pinned memory, without waiting: a copy from pageable memory would make the
  // host wait for the device's queue at every step.
  torch::Tensor to_device(const torch::Tensor& host) const {
    if (!device_.is_cuda())
      return host.to(device_);
    return host.pin_memory().to(device_, /*non_blocking=*/true);
  }

  int64_t n_, count_;
  BatchDraw draw_;
  at::Generator& generator_;
  torch::Device device_;
  torch::Tensor permutation_;
  int64_t position_ = 0;
};

void check_options(const FitOptions& o) {
  TORCH_CHECK(o.steps() >= 0, "steps must be >= 0, got ", o.steps());
  TORCH_CHECK(o.lr() > 0 && std::isfinite(o.lr()), "lr must be a positive number, got ", o.lr());
  // NaN compares false with everything, so each weight is checked for being finite first: a NaN
  // weight would turn every parameter into NaN in the first step.
  for (const auto& [name, value] : {std::pair<const char*, double>{"lamb", o.lamb()},
                                    {"lamb_l1", o.lamb_l1()},
                                    {"lamb_entropy", o.lamb_entropy()},
                                    {"lamb_coef", o.lamb_coef()},
                                    {"lamb_coefdiff", o.lamb_coefdiff()}}) {
    TORCH_CHECK(std::isfinite(value) && value >= 0, name, " must be a finite number >= 0, got ",
                value);
  }
  TORCH_CHECK(o.batch() == -1 || o.batch() >= 1, "batch must be -1 (full batch) or >= 1, got ",
              o.batch());
  if (o.update_grid()) {
    TORCH_CHECK(o.grid_update_memory() >= 1, "grid_update_memory must be >= 1 byte, got ",
                o.grid_update_memory(),
                " (default kan::kDefaultGridUpdateMemoryBytes = ", kDefaultGridUpdateMemoryBytes,
                ")");
    TORCH_CHECK(o.grid_update_num() >= 1, "grid_update_num must be >= 1, got ",
                o.grid_update_num());
    TORCH_CHECK(o.stop_grid_update_step() / o.grid_update_num() >= 1,
                "stop_grid_update_step / grid_update_num must be >= 1 (the grid-update period), "
                "got ",
                o.stop_grid_update_step(), " / ", o.grid_update_num());
  }
}

// Sets what a KAN's forwards keep (activations, statistics) and restores it however fit() ends.
// Other models keep nothing.
class KeepScope {
public:
  KeepScope(Model& model, bool activations, bool statistics)
      : model_(dynamic_cast<KANImpl*>(&model)) {
    if (model_ == nullptr)
      return;
    activations_ = model_->save_activations();
    statistics_ = model_->save_statistics();
    model_->set_save_activations(activations);
    model_->set_save_statistics(statistics);
  }
  ~KeepScope() {
    if (model_ == nullptr)
      return;
    model_->set_save_activations(activations_);
    model_->set_save_statistics(statistics_);
  }
  KeepScope(const KeepScope&) = delete;
  KeepScope& operator=(const KeepScope&) = delete;

private:
  KANImpl* model_;
  bool activations_ = false, statistics_ = false;
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const FitOptions& o,
                                                        const std::vector<torch::Tensor>& params) {
  if (o.opt() == Optimizer::kAdam) {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr()));
  }
  // pykan's LBFGS with MultKAN.fit's settings: history 10, strong Wolfe, tolerances off (20
  // iterations per step). Its tolerance_ys keeps the curvature pairs that LibTorch's LBFGS
  // drops late in a float64 fit (y·s <= 1e-10), where the refined model's accuracy is made.
  return std::make_unique<LBFGS>(params, LBFGSOptions(o.lr())
                                             .history_size(kLBFGSHistorySize)
                                             .line_search_fn("strong_wolfe")
                                             .tolerance_grad(1e-32)
                                             .tolerance_change(1e-32)
                                             .tolerance_ys(1e-32));
}

} // namespace

std::string to_string(Optimizer value) {
  return io::name_of(value, kOptimizerNames);
}

Optimizer optimizer_from_string(const std::string& name) {
  // pykan's spellings too: its fit() takes opt="LBFGS" or "Adam".
  if (name == "LBFGS")
    return Optimizer::kLBFGS;
  if (name == "Adam")
    return Optimizer::kAdam;
  return detail::parse_name(name, kOptimizerNames, "opt");
}

std::string to_string(BatchDraw value) {
  return io::name_of(value, kBatchDrawNames);
}

BatchDraw batch_draw_from_string(const std::string& name) {
  return detail::parse_name(name, kBatchDrawNames, "batch_draw");
}

std::string to_string(Loss value) {
  return io::name_of(value, kLossNames);
}

Loss loss_from_string(const std::string& name) {
  return detail::parse_name(name, kLossNames, "loss");
}

torch::Tensor compute_loss(Loss loss, const torch::Tensor& pred, const torch::Tensor& labels) {
  if (loss == Loss::kMSE)
    return detail::mean_squared_error(pred, labels);
  return at::cross_entropy_loss(pred, labels);
}

Evaluation evaluate(Model& model, const Dataset& data, Loss loss, int64_t chunk) {
  TORCH_CHECK(chunk >= 1, "evaluate: chunk must be >= 1 rows, got ", chunk);
  PhaseScope phase(Phase::kEvaluation);
  torch::NoGradGuard no_grad;
  KeepScope fast_path(model, false, false);
  auto measure = [&](const torch::Tensor& x, const torch::Tensor& labels, const char* what,
                     double& loss_out, double& rmse_out, double& accuracy_out) {
    loss_out = rmse_out = accuracy_out = kNaN;
    const int64_t n = x.size(0);
    if (n == 0)
      return;
    check_labels(loss, labels, x, model, what);
    // Sums over chunks of rows, so memory stays bounded by the chunk, not the dataset.
    double loss_sum = 0, correct = 0;
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t rows = std::min(chunk, n - start);
      const auto pred = model.forward(x.narrow(0, start, rows));
      const auto y = labels.narrow(0, start, rows);
      loss_sum += compute_loss(loss, pred, y).item<double>() * static_cast<double>(rows);
      if (loss == Loss::kCrossEntropy)
        correct += accuracy(pred, y) * static_cast<double>(rows);
    }
    loss_out = loss_sum / static_cast<double>(n);
    if (loss == Loss::kMSE) {
      rmse_out = std::sqrt(loss_out);
    } else {
      accuracy_out = correct / static_cast<double>(n);
    }
  };
  model.check_input(data.train_input, "train_input");
  model.check_input(data.test_input, "test_input");
  Evaluation e;
  measure(data.train_input, data.train_label, "train_label", e.train_loss, e.train_rmse,
          e.train_accuracy);
  measure(data.test_input, data.test_label, "test_label", e.test_loss, e.test_rmse,
          e.test_accuracy);
  return e;
}

Evaluation evaluate(KAN& model, const Dataset& data, Loss loss, int64_t chunk) {
  return evaluate(*model, data, loss, chunk);
}

Evaluation evaluate(MLP& model, const Dataset& data, Loss loss, int64_t chunk) {
  return evaluate(*model, data, loss, chunk);
}

namespace {

// Everything fit() refuses before it touches the model: options, shapes, dtypes, devices,
// non-finite samples and labels that do not fit the loss.
void check_training_data(Model& model, const Dataset& data, const FitOptions& o) {
  check_options(o);
  TORCH_CHECK(o.lamb() == 0 || model.kind() == ModelKind::kKAN, "FitOptions::lamb = ", o.lamb(),
              ": the regulariser scores a KAN's edges, and a ", to_string(model.kind()),
              " has none; train it with lamb = 0");
  model.check_input(data.train_input, "train_input");
  model.check_input(data.test_input, "test_input");
  const int64_t n_train = data.train_input.size(0);
  TORCH_CHECK(n_train >= 1, "fit needs a non-empty training set, train_input has shape ",
              data.train_input.sizes());
  TORCH_CHECK(o.batch() <= n_train, "batch = ", o.batch(), " is larger than the training set (",
              n_train, " samples); use batch = -1 for full batch");
  detail::check_finite(data.train_input, "train_input");
  detail::check_finite(data.test_input, "test_input");
  check_labels(o.loss(), data.train_label, data.train_input, model, "train_label");
  check_labels(o.loss(), data.test_label, data.test_input, model, "test_label");
}

std::vector<torch::Tensor> trainable_parameters(Model& model) {
  std::vector<torch::Tensor> trainable;
  for (const auto& p : model.module().parameters())
    if (p.requires_grad())
      trainable.push_back(p);
  return trainable;
}

// pykan's schedule: every stop_grid_update_step / grid_update_num steps, from
// start_grid_update_step, before stop_grid_update_step; never for a model without grids.
bool grid_update_due(const Model& model, const FitOptions& o, int64_t step) {
  if (!o.update_grid() || !model.has_grid())
    return false;
  const int64_t period = o.stop_grid_update_step() / o.grid_update_num();
  return step % period == 0 && step < o.stop_grid_update_step() &&
         step >= o.start_grid_update_step();
}

// This rank's part of the batch's data loss: the loss summed over its rows, divided by the
// global batch's size, so that the parts summed over the ranks are the batch's mean loss.
torch::Tensor loss_part(Loss loss, const torch::Tensor& pred, const torch::Tensor& labels,
                        int64_t global_rows) {
  if (loss == Loss::kMSE)
    return (pred - labels).square().sum() / static_cast<double>(global_rows * pred.size(1));
  return at::cross_entropy_loss(pred, labels, {}, at::Reduction::Sum) /
         static_cast<double>(global_rows);
}

// Optimizer::zero_grad(), which also detaches every gradient before dropping it: an operation per
// parameter and evaluation, for nothing.
void drop_gradients(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params())
      p.mutable_grad().reset();
}

// A step's losses, still on the model's device (undefined where the step has none): the host
// reads many steps' in one copy (read_losses), so the device need not wait for it between steps.
struct StepLosses {
  torch::Tensor train_loss, reg, test_loss, test_accuracy;
};

// Steps whose losses wait on the device at most: a long epoch's are read in parts.
constexpr size_t kMostQueuedSteps = 1024;

// A queued step whose losses the host has not read yet, with its batch size and whether it
// closes an epoch.
struct QueuedStep {
  StepRecord record;
  StepLosses losses;
  int64_t rows = 0;
  bool closes_epoch = false;
};

// What a step needs besides the model and its batch.
struct StepContext {
  torch::optim::Optimizer& optimizer;
  const FitOptions& o;
  const RegularizationOptions& reg_weights;
  DataParallel* group; ///< null in one process
  GradientSync* sync;  ///< with group
};

// One evaluation of the objective by the model's own path without autograd
// (Model::mse_objective: a small KAN's), its gradients added to .grad; nullopt where the model
// has none or something else wraps the evaluation (ranks, loss scaling, autocast, another loss).
std::optional<ObjectiveValues> evaluate_without_autograd(Model& model, const StepContext& c,
                                                         const torch::Tensor& x,
                                                         const torch::Tensor& y) {
  const auto& o = c.o;
  if (c.group || o.grad_scaler() || o.autocast() || o.loss() != Loss::kMSE)
    return std::nullopt;
  return model.mse_objective(x, y, o.lamb() > 0 ? o.lamb() : 0.0, c.reg_weights);
}

// One optimiser step on a batch (data-parallel: on this rank's shard of it, `global_rows` rows in
// all): the loss (plus lamb * the regulariser when regularised), backward, step (LBFGS
// re-evaluates the objective in its line search). Sets the losses' train_loss and reg.
// Data-parallel, every evaluation sums the loss and the gradients over the ranks, so every rank
// sees the global objective and takes the same step (and LBFGS the same line search).
void optimize(Model& model, const StepContext& c, const torch::Tensor& x, const torch::Tensor& y,
              int64_t global_rows, StepRecord& record, StepLosses& losses) {
  const auto& o = c.o;
  const bool regularized = o.lamb() > 0;
  GradScaler* scaler = o.grad_scaler().get();
  torch::Tensor loss, reg;
  bool overflow = false; // the scaled gradients of the last evaluation overflowed
  auto objective = [&]() {
    ++record.evaluations;
    drop_gradients(c.optimizer);
    if (auto values = evaluate_without_autograd(model, c, x, y)) {
      loss = values->loss;
      reg = values->reg;
      return values->total;
    }
    torch::Tensor total;
    c10::intrusive_ptr<c10d::Work> loss_sum;
    {
      PhaseScope phase(Phase::kForward);
      std::optional<AutocastGuard> autocast;
      if (o.autocast())
        autocast.emplace(model.device().type(), *o.autocast());
      const auto pred = model.forward(x);
      loss = c.group ? loss_part(o.loss(), pred, y, global_rows) : compute_loss(o.loss(), pred, y);
      total = loss;
      if (regularized) {
        reg = model.regularization(c.reg_weights);
        total = loss + o.lamb() * reg;
      }
      if (c.group) {
        loss = loss.detach().reshape({1}).clone();
        loss_sum = c.group->launch_sum(loss);
      }
    }
    PhaseScope phase(Phase::kBackward);
    if (scaler == nullptr) {
      total.backward();
    } else {
      scaler->scale(total).backward();
      overflow = scaler->unscale_(c.optimizer);
    }
    if (!c.group)
      return total;
    c.sync->finish();
    c.group->wait(loss_sum);
    loss = loss.reshape({});
    return regularized ? loss + o.lamb() * reg.detach() : loss;
  };
  if (o.opt() == Optimizer::kLBFGS) {
    // With loss scaling, an evaluation whose gradients overflowed runs again at the backed-off
    // scale: the line search only ever sees finite gradients.
    auto evaluate = [&]() {
      for (int attempt = 0;; ++attempt) {
        auto total = objective();
        if (scaler == nullptr)
          return total;
        scaler->update();
        if (!overflow)
          return total;
        TORCH_CHECK(attempt < 64, "loss scaling: the gradients are still inf or NaN at scale ",
                    scaler->get_scale(), " (does the loss itself overflow?)");
      }
    };
    PhaseScope phase(Phase::kOptimizerStep);
    c.optimizer.step(evaluate);
  } else {
    objective();
    PhaseScope phase(Phase::kOptimizerStep);
    if (!overflow) // a step whose scaled gradients overflowed is skipped
      c.optimizer.step();
    if (scaler != nullptr)
      scaler->update();
  }
  losses.train_loss = loss.detach();
  if (reg.defined())
    losses.reg = reg.detach();
}

// The test loss (and accuracy) of one test batch, without gradients; none without test data.
// Data-parallel, each rank measures its shard and the sums are reduced over the ranks.
void evaluate_test_batch(Model& model, const FitOptions& o, DataParallel* group,
                         const torch::Tensor& x, const torch::Tensor& labels, int64_t global_rows,
                         StepLosses& losses) {
  if (global_rows == 0)
    return;
  PhaseScope phase(Phase::kEvaluation);
  torch::NoGradGuard no_grad;
  KeepScope fast_path(model, false, false);
  std::optional<AutocastGuard> autocast; // the test loss in the training's precision
  if (o.autocast())
    autocast.emplace(model.device().type(), *o.autocast());
  const auto pred = model.forward(x);
  if (group == nullptr) {
    losses.test_loss = compute_loss(o.loss(), pred, labels);
    if (o.loss() == Loss::kCrossEntropy)
      losses.test_accuracy = accuracy_on_device(pred, labels);
    return;
  }
  const auto correct = pred.argmax(1).eq(labels).sum().to(torch::kFloat64);
  std::vector<torch::Tensor> sums{
      torch::stack({loss_part(o.loss(), pred, labels, global_rows).to(torch::kFloat64),
                    o.loss() == Loss::kCrossEntropy ? correct : torch::zeros_like(correct)})};
  group->sum_(sums);
  losses.test_loss = sums[0][0];
  if (o.loss() == Loss::kCrossEntropy)
    losses.test_accuracy = sums[0][1] / static_cast<double>(global_rows);
}

// The steps' records completed with their losses, read from the device in one copy.
void read_losses(std::vector<QueuedStep>& steps, bool mse) {
  PhaseScope phase(Phase::kHostWork);
  std::vector<torch::Tensor> values;
  for (const auto& q : steps)
    for (const auto* t :
         {&q.losses.train_loss, &q.losses.reg, &q.losses.test_loss, &q.losses.test_accuracy})
      if (t->defined())
        values.push_back(*t);
  const auto host = torch::stack(values).to(torch::kCPU, torch::kFloat64);
  const double* next = host.data_ptr<double>();
  auto next_or = [&](const torch::Tensor& t, double absent) {
    return t.defined() ? *next++ : absent;
  };
  for (auto& q : steps) {
    auto& r = q.record;
    r.train_loss = next_or(q.losses.train_loss, kNaN);
    r.reg = next_or(q.losses.reg, 0.0);
    r.test_loss = next_or(q.losses.test_loss, kNaN);
    r.test_accuracy = next_or(q.losses.test_accuracy, kNaN);
    r.train_rmse = mse ? std::sqrt(r.train_loss) : kNaN;
    r.test_rmse = mse ? std::sqrt(r.test_loss) : kNaN;
  }
}

// Epochs are passes over the training set: an epoch closes at the step that completes a pass,
// known when the step is queued (closes), and its record is made when the step's losses are read
// (add). Its loss weighs each step by its batch.
class EpochBook {
public:
  EpochBook(int64_t n_train, bool mse) : n_train_(n_train), mse_(mse) {}

  // Whether the step just queued, with its batch size, completes a pass.
  bool closes(int64_t batch_size) {
    samples_seen_ += batch_size;
    if (samples_seen_ / n_train_ <= epochs_queued_)
      return false;
    ++epochs_queued_;
    return true;
  }

  // The epoch this read step closed, if it closed one.
  std::optional<EpochRecord> add(const StepRecord& record, int64_t batch_size, bool closes) {
    loss_sum_ += record.train_loss * static_cast<double>(batch_size);
    samples_ += batch_size;
    if (!closes)
      return std::nullopt;
    EpochRecord epoch;
    epoch.epoch = epochs_++;
    epoch.last_step = record.step;
    epoch.train_loss = loss_sum_ / static_cast<double>(samples_);
    epoch.test_loss = record.test_loss;
    epoch.train_rmse = mse_ ? std::sqrt(epoch.train_loss) : kNaN;
    epoch.test_rmse = record.test_rmse;
    epoch.test_accuracy = record.test_accuracy;
    epoch.reg = record.reg;
    epoch.seconds = record.seconds;
    epoch.epoch_seconds = seconds_since(start_);
    start_ = Clock::now();
    loss_sum_ = 0;
    samples_ = 0;
    return epoch;
  }

private:
  int64_t n_train_;
  bool mse_;
  int64_t epochs_ = 0, epochs_queued_ = 0, samples_seen_ = 0, samples_ = 0;
  double loss_sum_ = 0;
  Clock::time_point start_ = Clock::now();
};

} // namespace

namespace {

// 64-bit FNV-1a of a tensor's bytes (on the host): ranks compare their data by it.
uint64_t fingerprint(const torch::Tensor& t) {
  if (!t.defined() || t.numel() == 0)
    return 0;
  const auto host = t.contiguous().cpu();
  const auto* bytes = static_cast<const uint8_t*>(host.data_ptr());
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0, n = host.nbytes(); i < n; ++i)
    h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

// Before a data-parallel fit: same configuration and data on every rank, the model on the
// rank's device, then rank 0's parameters and buffers everywhere.
void join_training(Model& model, const Dataset& data, const FitOptions& o, DataParallel& group,
                   int64_t batch) {
  TORCH_CHECK(group.device() == model.device(), "data-parallel rank ", group.rank(), " trains on ",
              group.device(), " but the model is on ", model.device());
  TORCH_CHECK(batch >= group.world_size(), "batch = ", batch, " is smaller than the ",
              group.world_size(), " data-parallel ranks: every rank needs at least one sample");
  nlohmann::json config = {{"model", model.config()},
                           {"model_kind", to_string(model.kind())},
                           {"fit", to_json(o)},
                           {"backend", group.backend_name()},
                           {"data",
                            {{"dtype", to_string(data.train_input.scalar_type())},
                             {"train_rows", data.train_input.size(0)},
                             {"test_rows", data.test_input.size(0)},
                             {"train_input", fingerprint(data.train_input)},
                             {"train_label", fingerprint(data.train_label)},
                             {"test_input", fingerprint(data.test_input)},
                             {"test_label", fingerprint(data.test_label)}}}};
  group.check_same_configuration(config);
  std::vector<torch::Tensor> state;
  for (const auto& p : model.module().parameters())
    state.push_back(p.detach());
  for (const auto& b : model.module().buffers())
    state.push_back(b);
  torch::NoGradGuard no_grad;
  group.broadcast_from_rank0(state);
}

// Autocast needs a float32 model; data-parallel training has no mixed precision.
void check_precision(const Model& model, const FitOptions& o) {
  if (o.autocast()) {
    check_autocast(model.device().type(), *o.autocast(), "FitOptions::autocast");
    TORCH_CHECK(model.dtype() == torch::kFloat32,
                "FitOptions::autocast needs a float32 model (autocast lowers float32 "
                "operations), got ",
                model.dtype());
  }
  TORCH_CHECK(o.data_parallel() == nullptr || (!o.autocast() && !o.grad_scaler()),
              "mixed precision (FitOptions::autocast, grad_scaler) is not supported with "
              "data-parallel training");
}

// The rows of a step: the batch's (all rows at full batch), or this rank's shard of them.
torch::Tensor step_rows(const torch::Tensor& t, const torch::Tensor& index, DataParallel* group) {
  if (group == nullptr)
    return index.defined() ? t.index_select(0, index) : t;
  const auto [first, count] = group->shard(index.defined() ? index.size(0) : t.size(0));
  return index.defined() ? t.index_select(0, index.narrow(0, first, count))
                         : t.narrow(0, first, count);
}

// The batch's size, all ranks' rows.
int64_t batch_rows(const torch::Tensor& t, const torch::Tensor& index) {
  return index.defined() ? index.size(0) : t.size(0);
}

// One step on its training and test batches: the grid update when due, the optimiser step, the
// test batch's losses.
void train_step(Model& model, const StepContext& c, const Dataset& data,
                const torch::Tensor& train_index, const torch::Tensor& test_index, QueuedStep& q,
                FitHistory& history) {
  DataParallel* group = c.group;
  const auto x = step_rows(data.train_input, train_index, group);
  q.rows = batch_rows(data.train_input, train_index);
  if (grid_update_due(model, c.o, q.record.step)) {
    // Every rank updates from the whole batch, so every rank computes the same grid.
    model.update_grid_from_samples(group ? group->gather_rows(x) : x, c.o.grid_update_memory());
    q.record.grid_updated = true;
    ++history.grid_updates;
  }
  optimize(model, c, x, step_rows(data.train_label, train_index, group), q.rows, q.record,
           q.losses);
  evaluate_test_batch(model, c.o, group, step_rows(data.test_input, test_index, group),
                      step_rows(data.test_label, test_index, group),
                      batch_rows(data.test_input, test_index), q.losses);
}

// The queued steps read and recorded, with the epochs they close; on_step and stop_early see each.
// Returns whether stop_early asked to stop.
bool record_queued(std::vector<QueuedStep>& queued, const FitOptions& o, Clock::time_point start,
                   EpochBook& epochs, FitHistory& history) {
  read_losses(queued, o.loss() == Loss::kMSE);
  queued.back().record.seconds = seconds_since(start); // after the read, which waited
  bool stop = false;
  for (const auto& read : queued) {
    history.steps.push_back(read.record);
    if (auto epoch = epochs.add(read.record, read.rows, read.closes_epoch))
      history.epochs.push_back(*epoch);
    if (o.on_step())
      o.on_step()(read.record, o.steps());
    if (o.stop_early() && o.stop_early()(read.record))
      stop = true;
  }
  queued.clear();
  return stop;
}

} // namespace

FitHistory fit(Model& model, const Dataset& data, const FitOptions& o) {
  check_training_data(model, data, o);
  const int64_t n_train = data.train_input.size(0), n_test = data.test_input.size(0);
  const bool full_batch = o.batch() == -1;
  const int64_t batch = full_batch ? n_train : o.batch();
  const int64_t test_batch = full_batch ? n_test : std::min(o.batch(), n_test);
  DataParallel* group = o.data_parallel().get();
  check_precision(model, o);
  if (group != nullptr)
    join_training(model, data, o, *group, batch);

  const auto trainable = trainable_parameters(model);
  auto optimizer = make_optimizer(o, trainable);
  std::optional<GradientSync> sync;
  auto reg_weights = o.regularization();
  if (group != nullptr) {
    sync.emplace(o.data_parallel(), trainable);
    reg_weights.sum_over_ranks(
        [group](const torch::Tensor& t) { return group->sum_differentiable(t); });
    reg_weights.differentiate_coefficient_terms(group->rank() == 0);
  }
  KeepScope capture(model, false, /*statistics=*/o.lamb() > 0); // the regulariser reads them
  // One generator for both samplers: with per-step draws, train and test alternate on it.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed());
  BatchSampler train_batches(n_train, batch, o.batch_draw(), generator, model.device());
  BatchSampler test_batches(n_test, test_batch, o.batch_draw(), generator, model.device());
  const StepContext context{*optimizer, o, reg_weights, group, sync ? &*sync : nullptr};

  FitHistory history;
  EpochBook epochs(n_train, o.loss() == Loss::kMSE);
  // Read after every step for on_step and stop_early, else at each epoch's last step, at the
  // last step, after a stop by after_step, and every kMostQueuedSteps.
  std::vector<QueuedStep> queued;
  const bool read_every_step = o.on_step() || o.stop_early();
  bool stop = false;
  const auto start = Clock::now();
  for (int64_t step = 0; step < o.steps() && !stop; ++step) {
    if (o.on_step_begin())
      o.on_step_begin()(step, *optimizer);
    QueuedStep q;
    q.record.step = step;
    const auto train_index = train_batches.next();
    const auto test_index = test_batches.next();
    train_step(model, context, data, train_index, test_index, q, history);
    q.record.seconds = seconds_since(start);
    q.closes_epoch = epochs.closes(q.rows);
    queued.push_back(std::move(q));
    if (o.after_step() && o.after_step()(step, o.steps()))
      stop = true;
    if (!read_every_step && !queued.back().closes_epoch && !stop && step + 1 < o.steps() &&
        queued.size() < kMostQueuedSteps)
      continue;
    if (record_queued(queued, o, start, epochs, history))
      stop = true;
  }
  history.seconds = seconds_since(start);
  return history;
}

FitHistory fit(KAN& model, const Dataset& data, const FitOptions& options) {
  return fit(*model, data, options);
}

FitHistory fit(MLP& model, const Dataset& data, const FitOptions& options) {
  return fit(*model, data, options);
}

} // namespace kan
