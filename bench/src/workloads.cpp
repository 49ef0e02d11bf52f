#include "kan/bench/workloads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace kan::bench {

int64_t Workload::steps_per_epoch() const {
  return batch <= 0 ? 1 : (train_num + batch - 1) / batch;
}

Dataset Workload::dataset(torch::Device device, torch::Dtype dtype) const {
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
                                 .train_num(train_num)
                                 .test_num(test_num)
                                 .seed(seed)
                                 .device(device)
                                 .dtype(dtype));
}

KANOptions Workload::model_options(torch::Device device, torch::Dtype dtype) const {
  return KANOptions(width).grid(grid).k(k).seed(seed).device(device).dtype(dtype);
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
  return {{"description", description},
          {"width", width},
          {"grid", grid},
          {"k", k},
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
  // A batch that divides the training set makes the timed epochs and fit's epochs (counted in
  // samples seen) the same steps.
  for (const auto& workload : w)
    TORCH_INTERNAL_ASSERT(workload.batch <= 0 || workload.train_num % workload.batch == 0,
                          workload.name, ": batch must divide train_num");
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
