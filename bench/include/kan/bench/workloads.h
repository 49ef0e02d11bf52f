#pragma once
/// The named workloads of `kanbench run` and their sizes per suite (quick, default, full), the
/// MLP baselines beside the KAN ones, and the workload of a user's own model (`kanbench run
/// --model`).

#include "kan/data/data_file.h"
#include "kan/data/dataset.h"
#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/serialize/model_file.h"
#include "kan/train/fit.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kan::bench {

/// One workload at one suite's size: what to train, how, and how long to time it.
struct Workload {
  std::string name;        ///< "toy", "deep", "wide", "million", "toy-mlp", "deep-mlp"
  std::string description; ///< one line for the report
  /// What it trains: a KAN of width, grid and k, or an MLP of width with `activation` (grid and
  /// k then unused).
  ModelKind model_kind = ModelKind::kKAN;
  std::vector<int64_t> width;
  int64_t grid = 5;
  int64_t k = 3;
  Activation activation = Activation::kSiLU; ///< an MLP's
  Optimizer opt = Optimizer::kLBFGS;
  double lr = 1.0;
  int64_t batch = -1; ///< -1: full batch (one step per epoch)
  Loss loss = Loss::kMSE;
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  int64_t warmup_epochs = 1;
  int64_t epochs = 5; ///< timed epochs (the suite's repeat count overrides it)
  uint64_t seed = 0;
  /// Sample every learned activation after training, for the report's plots (small models:
  /// one curve per edge). Not part of to_json(): it changes what is recorded, not what is run.
  bool plot_activations = false;

  /// A user's model (on the CPU, in its own dtype; any kind: a KAN, an MLP, a TorchScript
  /// module): every target trains a copy of it instead of a new model from width, grid, k and
  /// seed, which then only describe it. Empty: a new model.
  std::shared_ptr<Model> model;
  /// The data of a user's model (CPU, float64): every target gets a copy. Empty: the reference
  /// function's or the classification set's data, or for a user's model a seeded regression on
  /// it (synthetic_model_data) of train_num and test_num samples.
  std::optional<Dataset> data;
  /// Where the user's model and data came from ("synthetic": made from the model), for the
  /// results; empty for the suite's own workloads.
  std::string model_path, data_source;
  /// The user's data file as load_dataset describes it (format, split, columns); "" otherwise.
  std::string data_description;

  /// Steps per epoch: 1 at full batch, else ceil(train_num / batch).
  int64_t steps_per_epoch() const;
  /// The dataset, made on the CPU from the seed (identical for every target), then moved.
  Dataset dataset(torch::Device device, torch::Dtype dtype) const;
  KANOptions model_options(torch::Device device, torch::Dtype dtype) const;
  MLPOptions mlp_options(torch::Device device, torch::Dtype dtype) const;
  /// The model to train on a target: a copy of the user's, or a new one of the workload's kind
  /// (a KANImpl from model_options, an MLPImpl from mlp_options).
  std::shared_ptr<Model> build_model(torch::Device device, torch::Dtype dtype) const;
  /// Fit options for warm-up plus timed epochs; no grid update (a timing of steady state).
  FitOptions fit_options() const;
  /// Everything above as JSON, written into the results.
  nlohmann::json to_json() const;
};

/// The suites' names: "quick", "default", "full".
const std::vector<std::string>& suite_names();

/// The workloads of a suite: quick (seconds, used by the tests), default (the README's main
/// job: all cases within 5 minutes on a 2-core CPU-only machine), full (the real sizes). The KAN
/// workloads toy, deep, wide and million come first, then the MLP baselines of toy and deep
/// (toy-mlp, deep-mlp): the same data and training, and an MLP of the KAN's depth whose hidden
/// width gives about the KAN's parameter count (mlp_matching_kan).
std::vector<Workload> suite_workloads(const std::string& suite);

/// The workload `name` of a suite; an error naming --case and the suite otherwise.
Workload suite_workload(const std::string& suite, const std::string& name);

/// The MLP baseline of a KAN workload: named NAME-mlp, the same data, optimiser, batches and
/// epochs, and a width of the KAN's depth {in, h, ..., h, out} whose hidden width h gives the
/// parameter count closest to the KAN's (kan_parameter_count; the smaller h on a tie).
Workload mlp_matching_kan(const Workload& base, Activation activation = Activation::kSiLU);

/// Where a model's inputs live: each input's span of a KAN's first grid (where its splines are),
/// [-1, 1] for any other model. Two (inputs()) tensors on the model's device in its dtype.
std::pair<torch::Tensor, torch::Tensor> input_range(const Model& model);

/// n samples for a step's memory and time, not its numbers: inputs uniform over input_range, zero
/// labels of the model's output shape (class 0 for cross-entropy), on the model's device in its
/// dtype; the test set is the first sample.
Dataset shape_only_data(const Model& model, int64_t n, Loss loss);

/// A seeded regression on a model: inputs uniform over input_range, labels the model's own outputs
/// plus N(0, (0.1 s_j)^2) noise, s_j the spread of output j (1 where it is 0), so that training has
/// something to fit; random classes below outputs() for cross-entropy. CPU float64.
Dataset synthetic_model_data(const Model& model, int64_t train_num, int64_t test_num, uint64_t seed,
                             Loss loss);

/// The workload of `kanbench run --model PATH [--data FILE]`, named after the model file: the
/// model (kan::open_model with `file_options`, any kind), trained as pykan's fit() trains by
/// default (LBFGS, full batch) with `loss` (MSE, or cross-entropy on class labels) for as many
/// epochs as the suite's toy case, without grid updates (like every workload). The data: FILE read
/// by kan::load_dataset with `data_options` (columns, test set; classification when `loss` is
/// cross-entropy, labels below the model's outputs), checked against the model's width
/// (a TorchScript model takes the data's input width unless file_options gives one), as CPU
/// float64; or without FILE, synthetic_model_data sized like the toy case (docs/commands.md,
/// `kanbench run --model`). Bad data is an error naming the file, where and why.
Workload model_workload(const std::string& model_path, const ModelFileOptions& file_options,
                        const std::string& data_path, const std::string& suite,
                        const LoadDatasetOptions& data_options = LoadDatasetOptions(),
                        Loss loss = Loss::kMSE);

/// A seeded, synthetic classification set of MNIST's shape: `classes` prototypes that differ in
/// the first quarter of the inputs, each sample one prototype plus N(0, 1) noise, clamped to
/// [-1, 1]. Labels are int64 class indices.
Dataset synthetic_classification(int64_t inputs, int64_t classes, int64_t train_num,
                                 int64_t test_num, uint64_t seed, torch::Device device,
                                 torch::Dtype dtype);

} // namespace kan::bench
