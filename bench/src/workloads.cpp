#include "kan/bench/workloads.h"

#include "kan/data/data_file.h"
#include "kan/serialize/model_file.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <filesystem>

namespace kan::bench {

int64_t Workload::steps_per_epoch() const {
  return batch <= 0 ? 1 : (train_num + batch - 1) / batch;
}

Dataset Workload::dataset(torch::Device device, torch::Dtype dtype) const {
  if (data)
    return data->to(dtype).to(device);
  if (model)
    return synthetic_model_data(*model, train_num, test_num, seed, loss).to(dtype).to(device);
  if (loss == Loss::kCrossEntropy)
    return synthetic_classification(width.front(), width.back(), train_num, test_num, seed, device,
                                    dtype);
  const char* function = width.front() == 2   ? "toy"
                         : width.front() == 4 ? "exp_sin4"
                                              : "highdim100";
  const auto& f = reference_function(function);
  TORCH_CHECK(f.n_var == width.front(), "workload ", name, ": no reference function with ",
              width.front(), " inputs");
  return create_dataset(f.f, DatasetOptions(f.n_var)
                                 .ranges(f.ranges)
                                 .train_num(train_num)
                                 .test_num(test_num)
                                 .seed(seed)
                                 .device(device)
                                 .dtype(dtype));
}

KANOptions Workload::model_options(torch::Device device, torch::Dtype dtype) const {
  return KANOptions(width).grid(grid).k(k).seed(seed).device(device).dtype(dtype);
}

MLPOptions Workload::mlp_options(torch::Device device, torch::Dtype dtype) const {
  return MLPOptions(width).activation(activation).seed(seed).device(device).dtype(dtype);
}

std::shared_ptr<Model> Workload::build_model(torch::Device device, torch::Dtype dtype) const {
  if (model)
    return copy_model(*model, device, dtype);
  if (model_kind == ModelKind::kMLP)
    return MLP(mlp_options(device, dtype)).ptr();
  TORCH_CHECK(model_kind == ModelKind::kKAN, "workload ", name, " has no ", to_string(model_kind),
              " model to train");
  return KAN(model_options(device, dtype)).ptr();
}

FitOptions Workload::fit_options() const {
  return FitOptions()
      .opt(opt)
      .lr(lr)
      .batch(batch)
      .batch_draw(BatchDraw::kPerEpoch)
      .loss(loss)
      .update_grid(false)
      .seed(seed)
      .steps((warmup_epochs + epochs) * steps_per_epoch());
}

nlohmann::json Workload::to_json() const {
  nlohmann::json json = {{"description", description},
                         {"model_kind", kan::to_string(model_kind)},
                         {"width", width},
                         {"opt", to_string(opt)},
                         {"lr", lr},
                         {"batch", batch},
                         {"batch_draw", to_string(fit_options().batch_draw())},
                         {"loss", to_string(loss)},
                         {"train_num", train_num},
                         {"test_num", test_num},
                         {"warmup_epochs", warmup_epochs},
                         {"epochs", epochs},
                         {"steps_per_epoch", steps_per_epoch()},
                         {"update_grid", false},
                         {"seed", seed}};
  if (model_kind == ModelKind::kMLP) {
    json["activation"] = kan::to_string(activation);
  } else if (model_kind == ModelKind::kKAN) {
    json["grid"] = grid;
    json["k"] = k;
  }
  if (model) {
    json["model"] = model_path;
    json["model_kind"] = kan::to_string(model->kind());
    json["model_options"] = model->config();
    json["model_dtype"] = kan::to_string(model->dtype());
    json["data"] = data_source;
    if (!data_description.empty())
      json["data_description"] = data_description;
  }
  return json;
}

const std::vector<std::string>& suite_names() {
  static const std::vector<std::string> names = {"quick", "default", "full"};
  return names;
}

std::vector<Workload> suite_workloads(const std::string& suite) {
  TORCH_CHECK(suite == "quick" || suite == "default" || suite == "full",
              "--suite must be quick, default or full, got '", suite, "'");
  const bool quick = suite == "quick", full = suite == "full";
  std::vector<Workload> w;

  Workload toy;
  toy.name = "toy";
  toy.description = "pykan's standard example: exp(sin(pi x) + y^2), LBFGS full batch";
  toy.width = {2, 5, 1};
  toy.train_num = toy.test_num = quick ? 200 : 1000;
  toy.warmup_epochs = quick ? 1 : 2;
  toy.epochs = quick ? 3 : full ? 20 : 10;
  toy.plot_activations = true;
  w.push_back(toy);

  Workload deep;
  deep.name = "deep";
  deep.description = "pykan's device tutorial: KAN [4,100,100,100,1], Adam, minibatch";
  deep.width =
      quick ? std::vector<int64_t>{4, 10, 10, 10, 1} : std::vector<int64_t>{4, 100, 100, 100, 1};
  deep.opt = Optimizer::kAdam;
  deep.lr = 1e-3;
  deep.train_num = quick ? 256 : full ? 50000 : 10000;
  deep.test_num = quick ? 64 : 2000;
  deep.batch = quick ? 64 : full ? 1000 : 500;
  deep.epochs = quick ? 2 : full ? 10 : 5;
  w.push_back(deep);

  Workload wide;
  wide.name = "wide";
  wide.description =
      "MNIST-shaped classification (784 inputs, 10 classes, synthetic), cross-entropy";
  wide.width = quick ? std::vector<int64_t>{784, 8, 10} : std::vector<int64_t>{784, 64, 10};
  wide.opt = Optimizer::kAdam;
  wide.lr = 1e-3;
  wide.loss = Loss::kCrossEntropy;
  wide.train_num = quick ? 256 : full ? 60000 : 10000;
  wide.test_num = quick ? 64 : full ? 10000 : 2000;
  wide.batch = quick ? 128 : 250;
  wide.epochs = quick ? 2 : 5;
  w.push_back(wide);

  Workload million;
  million.name = "million";
  million.description = full ? "2^22 training samples: minibatch epochs and a full evaluation"
                             : "2^20 training samples (2^14 in quick): minibatch epochs and a "
                               "full evaluation";
  million.width = {2, 5, 1};
  million.opt = Optimizer::kAdam;
  million.lr = 1e-2;
  million.train_num = quick ? (1 << 14) : full ? (1 << 22) : (1 << 20);
  million.test_num = quick ? (1 << 12) : (1 << 16);
  million.batch = quick ? (1 << 12) : (1 << 16);
  million.epochs = quick ? 2 : 5;
  w.push_back(million);

  // The MLP baselines, after the KAN workloads (whose indices callers rely on).
  w.push_back(mlp_matching_kan(toy));
  w.push_back(mlp_matching_kan(deep));
  // A batch that divides the training set makes the timed epochs and fit's epochs (counted in
  // samples seen) the same steps.
  for (const auto& workload : w)
    TORCH_INTERNAL_ASSERT(workload.batch <= 0 || workload.train_num % workload.batch == 0,
                          workload.name, ": batch must divide train_num");
  return w;
}

Workload suite_workload(const std::string& suite, const std::string& name) {
  auto all = suite_workloads(suite);
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
  std::string names;
  for (const auto& w : all)
    names += (names.empty() ? "" : ", ") + w.name;
  TORCH_CHECK(it != all.end(), "--case ", name, " is not a workload of the ", suite, " suite (",
              names, ")");
  return *it;
}

Workload mlp_matching_kan(const Workload& base, Activation activation) {
  TORCH_CHECK(base.model_kind == ModelKind::kKAN && base.width.size() >= 3, "workload ", base.name,
              ": an MLP baseline is matched to a KAN with a hidden layer");
  const int64_t target = kan_parameter_count(base.model_options(torch::kCPU, torch::kFloat32));
  const int64_t in = base.width.front(), out = base.width.back();
  const size_t hidden_layers = base.width.size() - 2;
  auto width_of = [&](int64_t h) {
    std::vector<int64_t> width(hidden_layers + 2, h);
    width.front() = in;
    width.back() = out;
    return width;
  };
  // The count grows with h: the first h at or past the target, or the one before it.
  int64_t h = 1;
  while (mlp_parameter_count(width_of(h)) < target)
    ++h;
  if (h > 1 &&
      target - mlp_parameter_count(width_of(h - 1)) <= mlp_parameter_count(width_of(h)) - target)
    --h;
  Workload w = base;
  w.name = base.name + "-mlp";
  w.model_kind = ModelKind::kMLP;
  w.width = width_of(h);
  w.activation = activation;
  w.plot_activations = false;
  w.description = "MLP baseline of " + base.name + ": " + c10::str(c10::IntArrayRef(w.width)) +
                  " " + kan::to_string(activation) + ", " +
                  std::to_string(mlp_parameter_count(w.width)) + " parameters (the KAN's " +
                  std::to_string(target) + "), the same data and training";
  return w;
}

std::pair<torch::Tensor, torch::Tensor> input_range(const Model& model) {
  const auto options = torch::TensorOptions().device(model.device()).dtype(model.dtype());
  if (const auto* kan = dynamic_cast<const KANImpl*>(&model)) {
    const auto layer = kan->layer(0);
    const int64_t k = layer->options().k();
    const auto& grid = layer->grid; // (I, G + 2k + 1): the span is knots k .. G + k
    return {grid.select(1, k).to(options), grid.select(1, grid.size(1) - 1 - k).to(options)};
  }
  return {-torch::ones({model.inputs()}, options), torch::ones({model.inputs()}, options)};
}

Dataset shape_only_data(const Model& model, int64_t n, Loss loss) {
  const auto options = torch::TensorOptions().device(model.device()).dtype(model.dtype());
  const auto [lo, hi] = input_range(model);
  Dataset data;
  data.train_input = lo + torch::rand({n, model.inputs()}, options) * (hi - lo);
  data.test_input = data.train_input.narrow(0, 0, 1);
  data.train_label = loss == Loss::kCrossEntropy ? torch::zeros({n}, options.dtype(torch::kLong))
                                                 : torch::zeros({n, model.outputs()}, options);
  data.test_label = data.train_label.narrow(0, 0, 1);
  return data;
}

Dataset synthetic_model_data(const Model& model, int64_t train_num, int64_t test_num, uint64_t seed,
                             Loss loss) {
  if (loss == Loss::kCrossEntropy)
    return synthetic_classification(model.inputs(), model.outputs(), train_num, test_num, seed,
                                    torch::kCPU, torch::kFloat64);
  torch::NoGradGuard no_grad;
  // A float64 CPU copy evaluates the labels, whatever the model's own dtype and device.
  const auto copy = copy_model(model, torch::kCPU, torch::kFloat64);
  auto [lo, hi] = input_range(*copy);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  Dataset d;
  d.train_input = lo + torch::rand({train_num, model.inputs()}, generator, f64) * (hi - lo);
  d.test_input = lo + torch::rand({test_num, model.inputs()}, generator, f64) * (hi - lo);
  d.train_label = copy->forward(d.train_input);
  d.test_label = copy->forward(d.test_input);
  auto spread = train_num > 1 ? d.train_label.std(0) : torch::ones({model.outputs()}, f64);
  spread = torch::where(spread > 0, spread, torch::ones_like(spread));
  d.train_label += 0.1 * spread * torch::randn(d.train_label.sizes(), generator, f64);
  d.test_label += 0.1 * spread * torch::randn(d.test_label.sizes(), generator, f64);
  return d;
}

Workload model_workload(const std::string& model_path, const ModelFileOptions& file_options,
                        const std::string& data_path, const std::string& suite,
                        const LoadDatasetOptions& data_options, Loss loss) {
  // The toy case is pykan's standard fit (LBFGS, full batch, MSE); its epochs and sizes per suite.
  Workload w = suite_workloads(suite).front();
  TORCH_INTERNAL_ASSERT(w.name == "toy");
  w.name = std::filesystem::path(model_path).filename().string();
  if (w.name.empty())
    w.name = model_path;
  const bool classification = loss == Loss::kCrossEntropy;
  // kanbench's and pykan's files record the model's width; a TorchScript model takes the data's
  // (or file_options') input width, so its data is read first.
  auto open_options = file_options;
  open_options.device(torch::kCPU);
  if (model_file_kind(model_path) != ModelFileKind::kTorchScript)
    w.model = open_model(model_path, open_options);
  std::optional<LoadedDataset> loaded;
  if (!data_path.empty()) {
    auto options = data_options;
    options.dtype(torch::kFloat64).device(torch::kCPU).classification(classification);
    if (classification && options.classes() == 0 && w.model)
      options.classes(w.model->outputs()); // one output per class: labels must lie below
    loaded = load_dataset(data_path, options);
    if (open_options.inputs() == 0)
      open_options.inputs(loaded->inputs());
  }
  if (!w.model)
    w.model = open_model(model_path, open_options);
  w.model_path = model_path;
  w.model_kind = w.model->kind();
  if (const auto* kan = dynamic_cast<const KANImpl*>(w.model.get())) {
    const auto& o = kan->options();
    w.width = o.width();
    w.grid = o.grid();
    w.k = o.k();
  } else if (const auto* mlp = dynamic_cast<const MLPImpl*>(w.model.get())) {
    w.width = mlp->options().width();
    w.activation = mlp->options().activation();
  } else {
    w.width = {w.model->inputs(), w.model->outputs()};
  }
  w.opt = Optimizer::kLBFGS;
  w.lr = 1.0;
  w.batch = -1;
  w.loss = loss;
  if (loaded) {
    check_width(*loaded, w.model->inputs(), w.model->outputs());
    w.data = loaded->data;
    w.data_source = data_path;
    w.data_description = loaded->description;
    w.train_num = loaded->train_rows;
    w.test_num = loaded->test_rows;
  } else {
    w.data_source = "synthetic";
  }
  // One curve per edge in the report: only for KANs small enough to look at.
  int64_t edges = 0;
  for (size_t l = 0; l + 1 < w.width.size(); ++l)
    edges += w.width[l] * w.width[l + 1];
  w.plot_activations = w.model_kind == ModelKind::kKAN && edges <= 100;
  w.description = "your model " + model_path + " (" + kan::to_string(w.model->kind()) + ", " +
                  kan::to_string(w.model->dtype()) + "), LBFGS full batch, " +
                  (classification ? "cross-entropy, " : "") +
                  (data_path.empty() ? "synthetic data from the model itself" : data_path);
  return w;
}

Dataset synthetic_classification(int64_t inputs, int64_t classes, int64_t train_num,
                                 int64_t test_num, uint64_t seed, torch::Device device,
                                 torch::Dtype dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // The classes differ only in the first quarter of the inputs (like digits in the centre of
  // an image) and the noise is strong, so accuracy stays below 100% and parity means something.
  const int64_t informative = std::max<int64_t>(1, inputs / 4);
  auto prototypes = torch::zeros({classes, inputs}, f64);
  prototypes.narrow(1, 0, informative)
      .copy_(torch::rand({classes, informative}, generator, f64) - 0.5);
  auto draw = [&](int64_t n, torch::Tensor& x, torch::Tensor& y) {
    y = torch::randint(classes, {n}, generator, torch::TensorOptions().dtype(torch::kLong));
    x = (prototypes.index_select(0, y) + 1.0 * torch::randn({n, inputs}, generator, f64))
            .clamp(-1, 1)
            .to(device, dtype);
    y = y.to(device);
  };
  Dataset d;
  draw(train_num, d.train_input, d.train_label);
  draw(test_num, d.test_input, d.test_label);
  return d;
}

} // namespace kan::bench
