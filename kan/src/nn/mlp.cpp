#include "kan/nn/mlp.h"

#include "detail/parse_name.h"

#include "detail/checks.h"
#include "detail/saturate.h"
#include "kan/nn/options.h"
#include "nn/detail/mlp_objective.h"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <mutex>

namespace kan {
namespace {

// Runs `build` with LibTorch's default CPU generator restored afterwards: nn::Linear draws its
// initial weights from it as it is constructed, and a model seeded on its own must not shift the
// random numbers of anything else in the process.
// The generator's lock is not held while `build` runs: the draws inside it take the lock too.
template <typename Build> void keeping_global_generator(Build build) {
  auto generator = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  build();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

} // namespace

std::string to_string(Activation value) {
  return io::name_of(value, kActivationNames);
}

Activation activation_from_string(const std::string& name) {
  return detail::parse_name(name, kActivationNames, "activation");
}

int64_t activation_flops(Activation activation) {
  switch (activation) {
  case Activation::kSiLU:
    return kSiLUFlops;
  case Activation::kTanh:
    return kTanhFlops;
  case Activation::kReLU:
    return kReLUFlops;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Activation ", static_cast<int>(activation));
}

void check_mlp_options(const MLPOptions& o) {
  const auto& width = o.width();
  TORCH_CHECK(width.size() >= 2,
              "MLPOptions::width must have at least 2 entries (inputs and outputs), got ",
              c10::IntArrayRef(width));
  for (size_t l = 0; l < width.size(); ++l)
    TORCH_CHECK(width[l] >= 1, "MLPOptions::width entries must be >= 1, got width[", l,
                "] = ", width[l], " in ", c10::IntArrayRef(width));
  TORCH_CHECK(o.dtype() == torch::kFloat32 || o.dtype() == torch::kFloat64,
              "MLPOptions::dtype must be float32 or float64, got ", to_string(o.dtype()));
}

int64_t mlp_parameter_count(const std::vector<int64_t>& width) {
  int64_t count = 0;
  for (size_t l = 0; l + 1 < width.size(); ++l)
    count = detail::sat_add(count, detail::sat_mul(detail::sat_add(width[l], 1), width[l + 1]));
  return count;
}

int64_t mlp_forward_flops(const std::vector<int64_t>& width, Activation activation) {
  int64_t flops = 0;
  for (size_t l = 0; l + 1 < width.size(); ++l) {
    const int64_t in = width[l], out = width[l + 1];
    flops = detail::sat_add(flops, detail::sat_add(detail::sat_mul(2, in, out), out));
    if (l + 2 < width.size()) // no activation after the last layer
      flops = detail::sat_add(flops, detail::sat_mul(activation_flops(activation), out));
  }
  return flops;
}

MLPImpl::MLPImpl(MLPOptions options) : options_(std::move(options)) {
  reset();
}

void MLPImpl::reset() {
  check_mlp_options(options_);
  layers_ = register_module("layers", torch::nn::ModuleList());
  objective_buffers_.clear(); // a clone's own, not its original's
  const auto& width = options_.width();
  keeping_global_generator([&] {
    for (size_t l = 0; l + 1 < width.size(); ++l)
      layers_->push_back(torch::nn::Linear(torch::nn::LinearOptions(width[l], width[l + 1])));
  });
  layers_->to(options_.device(), options_.dtype());
  reset_parameters();
}

void MLPImpl::reset_parameters() {
  // LibTorch's nn::Linear default (kaiming_uniform_ with a = sqrt(5) for the weight, which is
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same for the bias), drawn from our own generator.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed());
  const auto cpu64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < depth(); ++l) {
    auto linear = layer(l);
    const double bound = 1.0 / std::sqrt(static_cast<double>(linear->options.in_features()));
    for (auto* tensor : {&linear->weight, &linear->bias})
      tensor->copy_((torch::rand(tensor->sizes(), generator, cpu64) * 2 - 1) * bound);
  }
}

void MLPImpl::pretty_print(std::ostream& stream) const {
  stream << "kan::MLP(width=" << c10::IntArrayRef(options_.width())
         << ", activation=" << to_string(options_.activation()) << ")";
}

torch::nn::Linear MLPImpl::layer(size_t l) const {
  return torch::nn::Linear(layers_->ptr<torch::nn::LinearImpl>(l));
}

void MLPImpl::check_input(const torch::Tensor& x, const std::string& name) const {
  detail::check_points(x, name.c_str(), inputs(), dtype(), device());
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  check_input(x, "input");
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    h = layer(l)->forward(h);
    if (l + 1 == depth())
      break;
    switch (options_.activation()) {
    case Activation::kSiLU:
      h = torch::silu(h);
      break;
    case Activation::kTanh:
      h = torch::tanh(h);
      break;
    case Activation::kReLU:
      h = torch::relu(h);
      break;
    }
  }
  return h;
}

std::optional<ObjectiveValues> MLPImpl::mse_objective(const torch::Tensor& x,
                                                      const torch::Tensor& labels, double lamb,
                                                      const RegularizationOptions& /*weights*/) {
  if (lamb != 0 || x.dim() != 2 || x.size(0) < 1 || !x.is_cpu() || !at::GradMode::is_enabled() ||
      labels.sizes() != c10::IntArrayRef({x.size(0), outputs()}) ||
      labels.scalar_type() != x.scalar_type() || !labels.is_cpu())
    return std::nullopt;
  check_input(x, "input");
  std::vector<torch::Tensor> weights, biases;
  for (size_t l = 0; l < depth(); ++l) {
    weights.push_back(layer(l)->weight);
    biases.push_back(layer(l)->bias);
  }
  const auto objective =
      detail::mlp_objective(x, labels, weights, biases, options_.activation(), objective_buffers_);
  for (size_t l = 0; l < depth(); ++l) {
    accumulate_grad(weights[l], objective.grads[2 * l]);
    accumulate_grad(biases[l], objective.grads[2 * l + 1]);
  }
  ObjectiveValues values;
  values.loss = torch::scalar_tensor(objective.loss, torch::TensorOptions().dtype(dtype()));
  values.total = values.loss;
  return values;
}

torch::Device MLPImpl::device() const {
  return layer(0)->weight.device();
}

torch::Dtype MLPImpl::dtype() const {
  return layer(0)->weight.scalar_type();
}

int64_t MLPImpl::forward_flops() const {
  return mlp_forward_flops(options_.width(), options_.activation());
}

nlohmann::json MLPImpl::config() const {
  auto options = options_;
  return to_json(options.dtype(dtype()));
}

} // namespace kan
