#include "nn/detail/regularizer_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
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

// Per input i, sum over the rows r of f(x[r, i], i) into out (I), in double: column by column
// within blocks of rows that stay in the cache, four running sums per column so that the
// additions do not wait on each other.
template <typename T, typename F>
void column_sums(const T* x, int64_t rows, int64_t I, F f, std::vector<double>& out) {
  constexpr int64_t kBlock = 256;
  std::vector<double> lanes(static_cast<size_t>(4 * I), 0.0);
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t r1 = std::min(rows, r0 + kBlock);
    for (int64_t i = 0; i < I; ++i) {
      const auto at = [&](int64_t r) { return f(static_cast<double>(x[r * I + i]), i); };
      double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4) {
        a0 += at(r);
        a1 += at(r + 1);
        a2 += at(r + 2);
        a3 += at(r + 3);
      }
      for (; r < r1; ++r)
        a0 += at(r);
      double* lane = &lanes[static_cast<size_t>(4 * i)];
      lane[0] += a0;
      lane[1] += a1;
      lane[2] += a2;
      lane[3] += a3;
    }
  }
  out.resize(static_cast<size_t>(I));
  for (int64_t i = 0; i < I; ++i)
    out[i] = (lanes[4 * i] + lanes[4 * i + 1]) + (lanes[4 * i + 2] + lanes[4 * i + 3]);
}

// The inputs' means and variances (two passes, as the tensor formulation's std), {mean, var}.
std::pair<std::vector<double>, std::vector<double>> input_moments(const at::Tensor& input) {
  const int64_t n = input.size(0), I = input.size(1);
  std::vector<double> mean, var;
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "layer_regularizer_cpu", [&] {
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    column_sums(
        x, n, I, [](double v, int64_t) { return v; }, mean);
    for (auto& m : mean)
      m /= static_cast<double>(n);
    const double* mu = mean.data();
    column_sums(
        x, n, I,
        [mu](double v, int64_t i) {
          const double c = v - mu[i];
          return c * c;
        },
        var);
  });
  for (auto& v : var)
    v /= static_cast<double>(n > 1 ? n - 1 : 1);
  return {mean, var};
}

// The scores from the edges' sums (2, I, O) over n samples and the inputs' means and variances.
Scores scores(const at::Tensor& moments, int64_t n, std::vector<double> mean_x,
              std::vector<double> var_x) {
  Scores s;
  s.n = n;
  s.I = moments.size(1);
  s.O = moments.size(2);
  const double denominator = static_cast<double>(s.n > 1 ? s.n - 1 : 1);
  s.mean_x = std::move(mean_x);
  s.var_x = std::move(var_x);
  s.sx.resize(s.I);
  for (int64_t i = 0; i < s.I; ++i)
    s.sx[i] = std::sqrt(std::max(s.var_x[i], kVarianceFloor));
  const double* sums = moments.const_data_ptr<double>();
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
  std::vector<double> g(along); // dh / dp of the line's scores
  for (int64_t line = 0; line < lines; ++line) {
    double sum = 0;
    for (int64_t k = 0; k < along; ++k)
      sum += s.score[at(line, k)];
    const double t = sum + 1;
    double h = 0, weighted = 0; // weighted: sum_k g_k s_k, for the gradient
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

// One layer's term.
double layer_term(const Scores& s, double lamb_l1, double lamb_entropy) {
  double sum = 0;
  for (double v : s.score)
    sum += v;
  return lamb_l1 * sum +
         lamb_entropy * (entropy(s, true, 0, nullptr) + entropy(s, false, 0, nullptr));
}

// One layer's gradients {d/dmoments, d/dinput (undefined unless wanted)} for the term's
// gradient `upstream`.
std::pair<at::Tensor, at::Tensor> layer_gradients(const Scores& s, const at::Tensor& m,
                                                  const at::Tensor& x, double lamb_l1,
                                                  double lamb_entropy, double upstream,
                                                  bool to_input) {
  const int64_t edges = s.I * s.O;
  const double denominator = static_cast<double>(s.n > 1 ? s.n - 1 : 1);
  // d term / d score.
  std::vector<double> grad_score(edges, lamb_l1);
  entropy(s, true, lamb_entropy, &grad_score);
  entropy(s, false, lamb_entropy, &grad_score);
  // Through score = sd / (sx + 0.1), sd = sqrt(max(var, floor)), var from the sums.
  auto grad_moments = at::empty_like(m);
  double* gm = grad_moments.mutable_data_ptr<double>();
  const double* sums = m.const_data_ptr<double>();
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
  if (!to_input)
    return {grad_moments, at::Tensor()};
  auto grad_input = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_regularizer_cpu_backward", [&] {
    const scalar_t* xs = x.const_data_ptr<scalar_t>();
    scalar_t* gx = grad_input.mutable_data_ptr<scalar_t>();
    std::vector<double> scale(s.I);
    for (int64_t i = 0; i < s.I; ++i)
      scale[i] = s.var_x[i] >= kVarianceFloor ? grad_sx[i] * 0.5 / s.sx[i] * 2 / denominator : 0;
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t i = 0; i < s.I; ++i)
        gx[r * s.I + i] =
            static_cast<scalar_t>(scale[i] * (static_cast<double>(xs[r * s.I + i]) - s.mean_x[i]));
  });
  return {grad_moments, grad_input};
}

// The layers' terms summed, in one node: moments then inputs, one of each per layer.
class Regularizer : public torch::autograd::Function<Regularizer> {
public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList moments,
                            at::TensorList inputs, double lamb_l1, double lamb_entropy) {
    std::vector<at::Tensor> m, x;
    for (size_t l = 0; l < moments.size(); ++l) {
      m.push_back(moments[l].contiguous());
      x.push_back(inputs[l].contiguous());
    }
    std::vector<double> kept;
    const double value = regularizer_value(m, x, lamb_l1, lamb_entropy, kept);
    m.insert(m.end(), x.begin(), x.end());
    ctx->save_for_backward(m);
    ctx->saved_data["lamb_l1"] = lamb_l1;
    ctx->saved_data["lamb_entropy"] = lamb_entropy;
    ctx->saved_data["input_moments"] = kept;
    return at::scalar_tensor(value, inputs[0].options());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const size_t layers = saved.size() / 2;
    const std::vector<at::Tensor> m(saved.begin(), saved.begin() + static_cast<int64_t>(layers)),
        x(saved.begin() + static_cast<int64_t>(layers), saved.end());
    std::vector<bool> to_inputs(layers);
    for (size_t l = 0; l < layers; ++l)
      to_inputs[l] = ctx->needs_input_grad(layers + l);
    auto [gm, gx] = regularizer_gradients(m, x, ctx->saved_data["input_moments"].toDoubleVector(),
                                          ctx->saved_data["lamb_l1"].toDouble(),
                                          ctx->saved_data["lamb_entropy"].toDouble(),
                                          grad_outputs[0].item<double>(), to_inputs);
    torch::autograd::tensor_list grads(gm.begin(), gm.end());
    grads.insert(grads.end(), gx.begin(), gx.end());
    grads.resize(2 * layers + 2); // the weights
    return grads;
  }
};

} // namespace

double regularizer_value(const std::vector<at::Tensor>& moments,
                         const std::vector<at::Tensor>& inputs, double lamb_l1, double lamb_entropy,
                         std::vector<double>& kept) {
  kept.clear();
  double value = 0;
  for (size_t l = 0; l < moments.size(); ++l) {
    auto [mean, var] = input_moments(inputs[l]);
    kept.insert(kept.end(), mean.begin(), mean.end());
    kept.insert(kept.end(), var.begin(), var.end());
    value += layer_term(scores(moments[l], inputs[l].size(0), std::move(mean), std::move(var)),
                        lamb_l1, lamb_entropy);
  }
  return value;
}

std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>
regularizer_gradients(const std::vector<at::Tensor>& moments, const std::vector<at::Tensor>& inputs,
                      const std::vector<double>& kept, double lamb_l1, double lamb_entropy,
                      double upstream, const std::vector<bool>& to_inputs) {
  std::vector<at::Tensor> gm(moments.size()), gx(moments.size());
  auto at = kept.begin();
  for (size_t l = 0; l < moments.size(); ++l) {
    const int64_t I = inputs[l].size(1);
    std::vector<double> mean(at, at + I), var(at + I, at + 2 * I);
    at += 2 * I;
    const auto s = scores(moments[l], inputs[l].size(0), std::move(mean), std::move(var));
    std::tie(gm[l], gx[l]) =
        layer_gradients(s, moments[l], inputs[l], lamb_l1, lamb_entropy, upstream, to_inputs[l]);
  }
  return {gm, gx};
}

at::Tensor regularizer_cpu(const std::vector<at::Tensor>& moments,
                           const std::vector<at::Tensor>& inputs, double lamb_l1,
                           double lamb_entropy) {
  TORCH_CHECK(!moments.empty() && moments.size() == inputs.size(),
              "regularizer_cpu: one moments and one input tensor per layer, got ", moments.size(),
              " and ", inputs.size());
  for (size_t l = 0; l < moments.size(); ++l) {
    const auto& m = moments[l];
    const auto& x = inputs[l];
    TORCH_CHECK(m.is_cpu() && x.is_cpu() && m.scalar_type() == at::kDouble && m.dim() == 3 &&
                    m.size(0) == 2 && x.dim() == 2 && x.size(1) == m.size(1) && x.size(0) >= 1 &&
                    x.scalar_type() == inputs[0].scalar_type(),
                "regularizer_cpu: layer ", l,
                ": moments (2, I, O) float64 and input (N >= 1, I) on the CPU, of one dtype, got ",
                m.sizes(), " and ", x.sizes(), " ", x.scalar_type());
  }
  // As TensorLists: autograd takes a std::vector for a non-tensor argument.
  return Regularizer::apply(at::TensorList(moments), at::TensorList(inputs), lamb_l1, lamb_entropy);
}

} // namespace kan::detail
