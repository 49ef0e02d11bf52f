#pragma once
/// Training a KAN as pykan's fit() does, or its MLP baseline the same way (docs/kan.md,
/// "Training", "MLP baseline").

#include "kan/data/dataset.h"
#include "kan/io/enum_names.h"
#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/optim/grad_scaler.h"
#include "kan/train/records.h"

#include <nlohmann/json_fwd.hpp>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kan {

class DataParallel;

enum class Optimizer { kLBFGS, kAdam };
/// LBFGS keeps this many past steps (pykan's setting); estimate_training_memory counts them.
inline constexpr int64_t kLBFGSHistorySize = 10;
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Optimizer> kOptimizerNames[] = {{Optimizer::kLBFGS, "lbfgs"},
                                                              {Optimizer::kAdam, "adam"}};
std::string to_string(Optimizer value);
Optimizer optimizer_from_string(const std::string& name);

/// How minibatches are drawn (batch < the training set).
enum class BatchDraw {
  kPerStep, ///< pykan's: a fresh draw without replacement every step (one permutation per step)
  /// One permutation per pass over the set, cut into batches (the last one of a pass holds the
  /// remainder): every sample exactly once per epoch, and one permutation per epoch instead of
  /// one per step, which at 2^20 samples is most of an epoch's time on a fast device.
  kPerEpoch
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<BatchDraw> kBatchDrawNames[] = {{BatchDraw::kPerStep, "per_step"},
                                                              {BatchDraw::kPerEpoch, "per_epoch"}};
std::string to_string(BatchDraw value);
BatchDraw batch_draw_from_string(const std::string& name);

/// The data term of the objective.
enum class Loss {
  kMSE,         ///< mean squared error; labels (N, out) of the model's dtype
  kCrossEntropy ///< classification; labels (N) of class indices (int64)
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Loss> kLossNames[] = {{Loss::kMSE, "mse"},
                                                    {Loss::kCrossEntropy, "cross_entropy"}};
std::string to_string(Loss value);
Loss loss_from_string(const std::string& name);

/// Options of fit(), with pykan 0.2.8's defaults.
struct FitOptions {
  TORCH_ARG(Optimizer, opt) = Optimizer::kLBFGS;
  TORCH_ARG(int64_t, steps) = 100;
  /// Learning rate (LBFGS: 1; Adam: e.g. 1e-3).
  TORCH_ARG(double, lr) = 1.0;
  /// Samples per step; -1 = the whole training set. Otherwise drawn as batch_draw says.
  TORCH_ARG(int64_t, batch) = -1;
  /// How minibatches are drawn: pykan's fresh draw per step, or a permutation per epoch.
  TORCH_ARG(BatchDraw, batch_draw) = BatchDraw::kPerStep;
  /// Objective = loss + lamb * reg.
  TORCH_ARG(double, lamb) = 0.0;
  TORCH_ARG(double, lamb_l1) = 1.0;
  TORCH_ARG(double, lamb_entropy) = 2.0;
  TORCH_ARG(double, lamb_coef) = 0.0;
  TORCH_ARG(double, lamb_coefdiff) = 0.0;
  /// Grid updates run every stop_grid_update_step / grid_update_num steps, from
  /// start_grid_update_step, while step < stop_grid_update_step.
  TORCH_ARG(bool, update_grid) = true;
  TORCH_ARG(int64_t, grid_update_num) = 10;
  TORCH_ARG(int64_t, start_grid_update_step) = -1;
  TORCH_ARG(int64_t, stop_grid_update_step) = 50;
  /// Bound in bytes on a grid update's extra memory (KANImpl::update_grid_from_samples).
  TORCH_ARG(int64_t, grid_update_memory) = kDefaultGridUpdateMemoryBytes;
  TORCH_ARG(Loss, loss) = Loss::kMSE;
  /// Seed of the minibatch draws (made on the CPU: the same batches on every device).
  TORCH_ARG(uint64_t, seed) = 0;
  /// Called before every step (before its grid update) with the step's index and the optimiser,
  /// e.g. to start an operation trace or to audit the optimiser's state.
  TORCH_ARG(std::function<void(int64_t, torch::optim::Optimizer&)>, on_step_begin) = nullptr;
  /// Called after every step with the record and the total number of steps (progress). A step's
  /// losses are on the model's device: to hand them over, the host waits for the device after
  /// every step while on_step or stop_early is set. Without them it reads the steps' losses in
  /// one copy at each epoch's last step, at the last step and every 1024 steps of a long epoch,
  /// so a minibatch fit on a GPU does not wait for the device between steps.
  TORCH_ARG(std::function<void(const StepRecord&, int64_t)>, on_step) = nullptr;
  /// Asked after every step (after on_step): true ends training there, and fit() returns the
  /// history so far (a benchmark that has measured enough). With data-parallel training every
  /// rank must give the same answer.
  TORCH_ARG(std::function<bool(const StepRecord&)>, stop_early) = nullptr;
  /// Called after every step with its index and the total number of steps, once its work is
  /// queued and before its losses are read (timers, traces, stop rules that need no loss): true
  /// ends training there. Unlike on_step and stop_early, it lets the host read the losses once per
  /// epoch. Data-parallel, every rank must give the same answer.
  TORCH_ARG(std::function<bool(int64_t, int64_t)>, after_step) = nullptr;
  /// Data-parallel training (kan/distributed/data_parallel.h): every rank holds the whole dataset
  /// and runs fit() with the same options; each trains on its shard of every global batch, and the
  /// step equals one process's step on the global batch. Empty: one process.
  TORCH_ARG(std::shared_ptr<DataParallel>, data_parallel) = nullptr;
  /// Mixed precision: every forward pass (training steps and test batches) and loss under
  /// LibTorch's autocast to this dtype (torch::kBFloat16 on the CPU or CUDA, torch::kHalf on
  /// CUDA; kan/nn/autocast.h). Parameters, gradients and optimiser state stay float32 (the model's
  /// dtype must be). Empty: off. Not written by to_json: `kanbench run` records it with each
  /// case's precision.
  TORCH_ARG(std::optional<torch::Dtype>, autocast) = std::nullopt;
  /// Dynamic loss scaling (float16; kan/optim/grad_scaler.h): the scaled loss is differentiated and
  /// the gradients unscaled before the step; Adam skips a step whose gradients overflowed, and
  /// LBFGS's closure evaluates again at the backed-off scale. Null: no scaling.
  TORCH_ARG(std::shared_ptr<GradScaler>, grad_scaler) = nullptr;

public:
  /// The four regulariser weights as RegularizationOptions.
  RegularizationOptions regularization() const {
    return RegularizationOptions()
        .lamb_l1(lamb_l1_)
        .lamb_entropy(lamb_entropy_)
        .lamb_coef(lamb_coef_)
        .lamb_coefdiff(lamb_coefdiff_);
  }
};

/// FitOptions as JSON (the callbacks are left out); docs/formats.md, "Fit options".
nlohmann::json to_json(const FitOptions& options);
/// The inverse of to_json, strict: a kan::io::JsonError names the key path below `path`.
FitOptions fit_options_from_json(const nlohmann::json& json, const std::string& path = "");

/// Trains model on data. Data and model must share one device and dtype: a mismatch is an
/// error naming both, never a silent move. Refuses NaN or Inf in the data, an empty training
/// set, steps < 0 and a batch larger than the training set. Data-parallel, it also refuses a
/// batch smaller than the number of ranks and ranks whose model, options or data differ, and
/// starts from rank 0's parameters and buffers. Grid updates run for models that have grids
/// (Model::has_grid(), a KAN's) and are skipped for others; the regulariser (lamb > 0) is a
/// KAN's, and any other model with lamb > 0 is refused.
///
/// Example:
///   auto history = kan::fit(model, data, kan::FitOptions().opt(kan::Optimizer::kLBFGS).steps(50));
///   std::cout << history.steps.back().test_rmse;
FitHistory fit(Model& model, const Dataset& data, const FitOptions& options = {});
/// fit(*model, ...): a KAN or an MLP by its module holder.
FitHistory fit(KAN& model, const Dataset& data, const FitOptions& options = {});
FitHistory fit(MLP& model, const Dataset& data, const FitOptions& options = {});

/// Loss and metrics of a model on a whole dataset, after training.
struct Evaluation {
  double train_loss = 0;
  double test_loss = 0;
  double train_rmse = 0; ///< sqrt(MSE); NaN for cross-entropy
  double test_rmse = 0;
  double train_accuracy = 0; ///< cross-entropy only; NaN for MSE
  double test_accuracy = 0;
};

/// Evaluates model on every train and test sample, without gradients, `chunk` rows at a time
/// (so 2^20 samples need no more memory than `chunk` of them). Empty splits give NaN.
Evaluation evaluate(Model& model, const Dataset& data, Loss loss = Loss::kMSE,
                    int64_t chunk = 65536);
/// evaluate(*model, ...): a KAN or an MLP by its module holder.
Evaluation evaluate(KAN& model, const Dataset& data, Loss loss = Loss::kMSE, int64_t chunk = 65536);
Evaluation evaluate(MLP& model, const Dataset& data, Loss loss = Loss::kMSE, int64_t chunk = 65536);

/// The data loss of pred against labels.
torch::Tensor compute_loss(Loss loss, const torch::Tensor& pred, const torch::Tensor& labels);

} // namespace kan
