// KANImpl::regularization: pykan 0.2.8's `edge_forward_spline_n` regulariser.
#include "kan/network.h"
#include "kan/trace_scope.h"

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
  auto reg = torch::zeros({}, torch::TensorOptions().dtype(dtype()).device(device()));
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    const auto& a = activations_[l];
    TORCH_CHECK(a.input.size(0) >= 1, "regularization needs at least one sample, the last "
                                      "forward had an empty batch");
    // Edge score s_ij = std_n(phi_ij) / (std_n(x_i) + 0.1), (I, O), of the numeric part only (as
    // pykan: the symbolic branch is not penalised). pykan's rows are output
    // nodes: dim 0 (inputs) normalises per output, dim 1 per input.
    const auto score = numeric_std(a, dtype()) / (sample_std(a.input) + 0.1).unsqueeze(1);
    reg = reg + w.lamb_l1() * score.sum() +
          w.lamb_entropy() * (entropy_along(score, 0) + entropy_along(score, 1));
  }
  if (w.lamb_coef() != 0 || w.lamb_coefdiff() != 0) {
    for (size_t l = 0; l < depth(); ++l) {
      ModuleScope scope("layers", static_cast<int64_t>(l));
      const auto& coef = layer(l)->coef; // (I, O, M)
      reg = reg + w.lamb_coef() * coef.abs().mean(1).sum() +
            w.lamb_coefdiff() * torch::diff(coef, 1, 2).abs().mean(1).sum();
    }
  }
  return reg;
}

} // namespace kan
