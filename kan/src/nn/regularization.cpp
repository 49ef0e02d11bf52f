// KANImpl::regularization: pykan 0.2.8's `edge_forward_spline_n` regulariser.
#include "kan/nn/network.h"
#include "kan/nn/trace_scope.h"
#include "nn/detail/regularizer_cpu.h"

#include <ATen/ATen.h>

namespace kan {
namespace {

// Standard deviation over samples (dim 0), unbiased where N > 1. The floor keeps its gradient
// finite when every sample gives the same value (std 0, e.g. a single sample).
torch::Tensor sample_std(const torch::Tensor& t) {
  const int64_t n = t.size(0);
  const auto centred = t - t.mean(0, /*keepdim=*/true);
  const auto var = centred.square().sum(0) / static_cast<double>(n > 1 ? n - 1 : 1);
  return var.clamp_min(1e-30).sqrt();
}

// sample_std of the numeric part per edge, (I, O): from the activations, or from the fused
// backend's sums (in float64, where S2 - S1^2 / N cancels least).
torch::Tensor numeric_std(const LayerActivations& a, torch::Dtype dtype) {
  if (a.numeric.defined())
    return sample_std(a.numeric);
  const int64_t n = a.input.size(0);
  const auto var = (a.moments[1] - a.moments[0].square() / static_cast<double>(n)) /
                   static_cast<double>(n > 1 ? n - 1 : 1);
  return var.clamp_min(1e-30).sqrt().to(dtype);
}

// Standard deviations from float64 sums over n samples: [0] sum t, [1] sum t^2 (n a tensor).
torch::Tensor std_from_sums(const torch::Tensor& sums, const torch::Tensor& n) {
  const auto var = (sums[1] - sums[0].square() / n) / (n - 1).clamp_min(1);
  return var.clamp_min(1e-30).sqrt();
}

// Per layer, the standard deviations over the samples of every rank (RegularizationOptions::
// sum_over_ranks) of the numeric part per edge, (I, O), and of the inputs, (I). Two collectives
// for all layers: the sums (the edges' S1, S2, the inputs' sums, N), then the inputs' squares
// about the global mean (two passes, as one process's std, which cancels less than S2 - S1^2/N).
std::vector<std::pair<torch::Tensor, torch::Tensor>>
global_stds(const std::vector<LayerActivations>& layers, const RegularizationOptions& w) {
  std::vector<torch::Tensor> parts;
  for (const auto& a : layers) {
    auto moments = a.moments;
    if (!moments.defined()) {
      const auto numeric = a.numeric.to(torch::kFloat64);
      moments = torch::stack({numeric.sum(0), numeric.square().sum(0)});
    }
    parts.push_back(moments.reshape({-1}));
    parts.push_back(a.input.to(torch::kFloat64).sum(0));
  }
  const auto& first = layers.front().input;
  parts.push_back(
      torch::full({1}, static_cast<double>(first.size(0)),
                  torch::TensorOptions().dtype(torch::kFloat64).device(first.device())));
  const auto total = w.sum_over_ranks()(torch::cat(parts));
  const auto n = total[-1];
  std::vector<torch::Tensor> edge_stds, squares;
  int64_t at = 0;
  for (const auto& a : layers) {
    const int64_t in = a.input.size(1), edges = a.moments.defined()
                                                    ? a.moments.size(1) * a.moments.size(2)
                                                    : a.numeric.size(1) * a.numeric.size(2);
    edge_stds.push_back(std_from_sums(total.narrow(0, at, 2 * edges).view({2, in, edges / in}), n));
    at += 2 * edges;
    // Detached: summed over every sample, x - mean adds up to 0, so the mean's own gradient
    // vanishes; each rank's share of it would not, and the gradient sum would keep it.
    const auto mean = (total.narrow(0, at, in) / n).detach();
    at += in;
    squares.push_back((a.input.to(torch::kFloat64) - mean).square().sum(0));
  }
  const auto centred = w.sum_over_ranks()(torch::cat(squares));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> stds;
  at = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const int64_t in = layers[l].input.size(1);
    const auto var = centred.narrow(0, at, in) / (n - 1).clamp_min(1);
    at += in;
    stds.emplace_back(edge_stds[l], var.clamp_min(1e-30).sqrt());
  }
  return stds;
}

// -sum p log2(p + 1e-4) along `dim`, averaged over the other dimension, with
// p = s / (sum of s along dim + 1).
torch::Tensor entropy_along(const torch::Tensor& s, int64_t dim) {
  const auto p = s / (s.sum(dim, /*keepdim=*/true) + 1);
  return -(p * torch::log2(p + 1e-4)).sum(dim).mean();
}

} // namespace

torch::Tensor KANImpl::regularization(const RegularizationOptions& w) const {
  TORCH_CHECK(activations_.size() == depth(),
              "regularization needs the activations of the last forward: call "
              "set_save_statistics(true) or set_save_activations(true) before the forward (have ",
              activations_.size(), " layers' activations, the model has ", depth(), ")");
  PhaseScope phase(Phase::kRegularization);
  torch::Tensor reg; // undefined until a term is added: a small model's step counts operations
  const auto add = [&reg](const torch::Tensor& term) { reg = reg.defined() ? reg + term : term; };
  const auto summed = w.sum_over_ranks() ? global_stds(activations_, w)
                                         : std::vector<std::pair<torch::Tensor, torch::Tensor>>{};
  // The fused backend's sums on the CPU: one autograd node for all those layers instead of ~235
  // operations per layer.
  std::vector<torch::Tensor> cpu_moments, cpu_inputs;
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    const auto& a = activations_[l];
    TORCH_CHECK(a.input.size(0) >= 1, "regularization needs at least one sample, the last "
                                      "forward had an empty batch");
    if (summed.empty() && a.moments.defined() && a.input.is_cpu()) {
      cpu_moments.push_back(a.moments);
      cpu_inputs.push_back(a.input);
      continue;
    }
    // Edge score s_ij = std_n(phi_ij) / (std_n(x_i) + 0.1), (I, O), of the numeric part only (as
    // pykan: the symbolic branch is not penalised). pykan's rows are output
    // nodes: dim 0 (inputs) normalises per output, dim 1 per input.
    const auto score = summed.empty()
                           ? numeric_std(a, dtype()) / (sample_std(a.input) + 0.1).unsqueeze(1)
                           : (summed[l].first / (summed[l].second + 0.1).unsqueeze(1)).to(dtype());
    add(w.lamb_l1() * score.sum() +
        w.lamb_entropy() * (entropy_along(score, 0) + entropy_along(score, 1)));
  }
  if (!cpu_moments.empty()) {
    ModuleScope scope("layers"); // one node for those layers: the trace names them together
    const auto term =
        detail::regularizer_cpu(cpu_moments, cpu_inputs, w.lamb_l1(), w.lamb_entropy());
    record_autograd_node(term);
    add(term);
  }
  if (w.lamb_coef() != 0 || w.lamb_coefdiff() != 0) {
    for (size_t l = 0; l < depth(); ++l) {
      ModuleScope scope("layers", static_cast<int64_t>(l));
      const auto coef = w.differentiate_coefficient_terms() ? layer(l)->coef
                                                            : layer(l)->coef.detach(); // (I, O, M)
      add(w.lamb_coef() * coef.abs().mean(1).sum() +
          w.lamb_coefdiff() * torch::diff(coef, 1, 2).abs().mean(1).sum());
    }
  }
  return reg.defined() ? reg
                       : torch::zeros({}, torch::TensorOptions().dtype(dtype()).device(device()));
}

} // namespace kan
