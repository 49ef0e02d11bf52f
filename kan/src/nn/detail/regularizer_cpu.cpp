#include "nn/detail/regularizer_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <vector>

namespace kan::detail {
namespace {

constexpr double kVarianceFloor = 1e-30; // regularization.cpp's clamp: a finite gradient at std 0

// What the term and its gradient need, in float64.
struct Scores {
  int64_t n = 0, I = 0, O = 0;
  std::vector<double> mean_x, var_x, sx; // per input
  std::vector<double> var, sd, score;    // per edge (i, o)
};

Scores scores(const at::Tensor& moments, const at::Tensor& input) {
  Scores s;
  s.n = input.size(0);
  s.I = moments.size(1);
  s.O = moments.size(2);
  const double denominator = static_cast<double>(s.n > 1 ? s.n - 1 : 1);
  s.mean_x.assign(s.I, 0);
  s.var_x.assign(s.I, 0);
  s.sx.assign(s.I, 0);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "layer_regularizer_cpu", [&] {
    const scalar_t* x = input.data_ptr<scalar_t>();
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t i = 0; i < s.I; ++i)
        s.mean_x[i] += static_cast<double>(x[r * s.I + i]);
    for (int64_t i = 0; i < s.I; ++i)
      s.mean_x[i] /= static_cast<double>(s.n);
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t i = 0; i < s.I; ++i) {
        const double c = static_cast<double>(x[r * s.I + i]) - s.mean_x[i];
        s.var_x[i] += c * c;
      }
  });
  for (int64_t i = 0; i < s.I; ++i) {
    s.var_x[i] /= denominator;
    s.sx[i] = std::sqrt(std::max(s.var_x[i], kVarianceFloor));
  }
  const double* sums = moments.data_ptr<double>();
  const int64_t edges = s.I * s.O;
  s.var.resize(edges);
  s.sd.resize(edges);
  s.score.resize(edges);
  for (int64_t e = 0; e < edges; ++e) {
    const double s1 = sums[e], s2 = sums[edges + e];
    s.var[e] = (s2 - s1 * s1 / static_cast<double>(s.n)) / denominator;
    s.sd[e] = std::sqrt(std::max(s.var[e], kVarianceFloor));
    s.score[e] = s.sd[e] / (s.sx[e / s.O] + 0.1);
  }
  return s;
}

// One entropy term: for each line (fixed `other`), p = s / (sum of the line + 1) and
// h = -sum p log2(p + 1e-4); the mean of h over the lines. With `grad`, adds d term / d score
// times `weight` into it.
double entropy(const Scores& s, bool over_inputs, double weight, std::vector<double>* grad) {
  const int64_t lines = over_inputs ? s.O : s.I, along = over_inputs ? s.I : s.O;
  auto at = [&](int64_t line, int64_t k) { return over_inputs ? k * s.O + line : line * s.O + k; };
  double total = 0;
  for (int64_t line = 0; line < lines; ++line) {
    double sum = 0;
    for (int64_t k = 0; k < along; ++k)
      sum += s.score[at(line, k)];
    const double t = sum + 1;
    double h = 0, weighted = 0; // weighted: sum_k g_k s_k, for the gradient
    std::vector<double> g(along);
    for (int64_t k = 0; k < along; ++k) {
      const double p = s.score[at(line, k)] / t;
      h -= p * std::log2(p + 1e-4);
      g[k] = -(std::log2(p + 1e-4) + p / ((p + 1e-4) * std::log(2.0))); // dh / dp
      weighted += g[k] * s.score[at(line, k)];
    }
    total += h;
    if (grad != nullptr)
      for (int64_t k = 0; k < along; ++k)
        (*grad)[at(line, k)] +=
            weight / static_cast<double>(lines) * (g[k] / t - weighted / (t * t));
  }
  return total / static_cast<double>(lines);
}

class LayerRegularizer : public torch::autograd::Function<LayerRegularizer> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& moments,
                            const at::Tensor& input, double lamb_l1, double lamb_entropy) {
    const auto m = moments.contiguous(), x = input.contiguous();
    const auto s = scores(m, x);
    double sum = 0;
    for (double v : s.score)
      sum += v;
    const double value = lamb_l1 * sum + lamb_entropy * (entropy(s, true, 0, nullptr) +
                                                         entropy(s, false, 0, nullptr));
    ctx->save_for_backward({m, x});
    ctx->saved_data["lamb_l1"] = lamb_l1;
    ctx->saved_data["lamb_entropy"] = lamb_entropy;
    return at::scalar_tensor(value, x.options());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& m = saved[0];
    const auto& x = saved[1];
    const double lamb_l1 = ctx->saved_data["lamb_l1"].toDouble();
    const double lamb_entropy = ctx->saved_data["lamb_entropy"].toDouble();
    const double upstream = grad_outputs[0].item<double>();
    const auto s = scores(m, x);
    const int64_t edges = s.I * s.O;
    const double denominator = static_cast<double>(s.n > 1 ? s.n - 1 : 1);
    // d term / d score.
    std::vector<double> grad_score(edges, lamb_l1);
    entropy(s, true, lamb_entropy, &grad_score);
    entropy(s, false, lamb_entropy, &grad_score);
    // Through score = sd / (sx + 0.1), sd = sqrt(max(var, floor)), var from the sums.
    auto grad_moments = at::zeros_like(m);
    double* gm = grad_moments.data_ptr<double>();
    const double* sums = m.data_ptr<double>();
    std::vector<double> grad_sx(s.I, 0);
    for (int64_t e = 0; e < edges; ++e) {
      const int64_t i = e / s.O;
      const double g = upstream * grad_score[e];
      const double grad_sd = g / (s.sx[i] + 0.1);
      grad_sx[i] -= g * s.sd[e] / ((s.sx[i] + 0.1) * (s.sx[i] + 0.1));
      const double grad_var = s.var[e] >= kVarianceFloor ? grad_sd * 0.5 / s.sd[e] : 0;
      gm[edges + e] = grad_var / denominator;
      gm[e] = -grad_var * 2 * sums[e] / (static_cast<double>(s.n) * denominator);
    }
    if (!ctx->needs_input_grad(1))
      return {grad_moments, at::Tensor(), at::Tensor(), at::Tensor()};
    auto grad_input = at::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_regularizer_cpu_backward", [&] {
      const scalar_t* xs = x.data_ptr<scalar_t>();
      scalar_t* gx = grad_input.data_ptr<scalar_t>();
      std::vector<double> grad_var_x(s.I);
      for (int64_t i = 0; i < s.I; ++i)
        grad_var_x[i] = s.var_x[i] >= kVarianceFloor ? grad_sx[i] * 0.5 / s.sx[i] : 0;
      for (int64_t r = 0; r < s.n; ++r)
        for (int64_t i = 0; i < s.I; ++i)
          gx[r * s.I + i] = static_cast<scalar_t>(
              grad_var_x[i] * 2 * (static_cast<double>(xs[r * s.I + i]) - s.mean_x[i]) /
              denominator);
    });
    return {grad_moments, grad_input, at::Tensor(), at::Tensor()};
  }
};

} // namespace

at::Tensor layer_regularizer_cpu(const at::Tensor& moments, const at::Tensor& input, double lamb_l1,
                                 double lamb_entropy) {
  TORCH_CHECK(moments.is_cpu() && input.is_cpu() && moments.scalar_type() == at::kDouble &&
                  moments.dim() == 3 && moments.size(0) == 2 && input.dim() == 2 &&
                  input.size(1) == moments.size(1) && input.size(0) >= 1,
              "layer_regularizer_cpu: moments (2, I, O) float64 and input (N >= 1, I) on the CPU, "
              "got ",
              moments.sizes(), " and ", input.sizes());
  return LayerRegularizer::apply(moments, input, lamb_l1, lamb_entropy);
}

} // namespace kan::detail
