#include "kan/network.h"

#include "kan/memory.h"
#include "kan/trace_scope.h"

#include "detail/checks.h"
#include "detail/saturate.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <string>

namespace kan {
namespace {

// splitmix64: independent, reproducible seeds for the layers from one network seed.
uint64_t mix_seed(uint64_t seed, uint64_t layer) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (layer + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void check_width(const std::vector<int64_t>& width) {
  TORCH_CHECK(width.size() >= 2, "width must have at least 2 entries (inputs and outputs), got ",
              c10::IntArrayRef(width));
  for (size_t l = 0; l < width.size(); ++l) {
    TORCH_CHECK(width[l] >= 1, "width entries must be >= 1, got width[", l, "] = ", width[l],
                " in ", c10::IntArrayRef(width));
  }
}

// layer.forward(x) without gradients, in pieces of samples whose temporaries stay within
// memory_budget (the reference backend's (n, I, G + k) basis); one piece when all fit.
torch::Tensor forward_in_pieces(KANLayerImpl& layer, const torch::Tensor& x,
                                int64_t memory_budget) {
  const auto& o = layer.options();
  const int64_t N = x.size(0), P = o.grid() + 2 * o.k() + 1;
  // Per sample: the Cox-de Boor recursion's few (I, P) tensors, base(x) and a few outputs.
  int64_t per_sample =
      detail::sat_add(detail::sat_mul(4, o.in_dim()), detail::sat_mul(4, o.out_dim()));
  if (o.backend() == SplineBackend::kReference)
    per_sample = detail::sat_add(per_sample, detail::sat_mul(6, o.in_dim(), P));
  per_sample = detail::sat_mul(per_sample, static_cast<int64_t>(x.element_size()));
  const int64_t rows = std::max<int64_t>(1, memory_budget / per_sample);
  if (rows >= N)
    return layer.forward(x);
  auto y = torch::empty({N, o.out_dim()}, x.options());
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int64_t n = std::min(rows, N - n0);
    y.narrow(0, n0, n).copy_(layer.forward(x.narrow(0, n0, n)));
  }
  return y;
}

// A hidden layer's samples are the previous layer's outputs: non-finite ones mean that layer's
// parameters are, not the data.
void check_hidden_finite(const torch::Tensor& h, size_t l, const char* what) {
  detail::check_finite(h,
                       "the input of layer " + std::to_string(l) + " (" + what +
                           " samples: the output of layer " + std::to_string(l - 1) + ")",
                       "the layers before it give non-finite outputs (non-finite parameters or an "
                       "overflow: did training diverge?)");
}

} // namespace

KANLayerOptions layer_options(const KANOptions& o, size_t l) {
  return KANLayerOptions(o.width().at(l), o.width().at(l + 1))
      .grid(o.grid())
      .k(o.k())
      .noise_scale(o.noise_scale())
      .scale_base_mu(o.scale_base_mu())
      .scale_base_sigma(o.scale_base_sigma())
      .scale_sp(o.scale_sp())
      .base_fun(o.base_fun())
      .grid_eps(o.grid_eps())
      .grid_range(o.grid_range())
      .sp_trainable(o.sp_trainable())
      .sb_trainable(o.sb_trainable())
      .seed(mix_seed(o.seed(), l))
      .device(o.device())
      .dtype(o.dtype())
      .backend(o.backend());
}

KANImpl::KANImpl(KANOptions options) : options_(std::move(options)) {
  reset();
}

void KANImpl::reset() {
  check_width(options_.width());
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (size_t l = 0; l + 1 < options_.width().size(); ++l) {
    const auto layer_opts = layer_options(options_, l);
    try {
      layers_->push_back(KANLayer(layer_opts));
    } catch (const detail::BuildOutOfMemory& e) {
      // Which layer of which model, and what the whole model needs, not just "KANLayer".
      detail::throw_out_of_memory(
          "layer " + std::to_string(l) + " (" + detail::layer_size(layer_opts) + "; the model " +
              c10::str(c10::IntArrayRef(options_.width())) + " needs about " +
              format_bytes(estimate_model_memory(options_).total()) +
              " for parameters and buffers)",
          e.cause());
    }
  }
  activations_.clear();
}

void KANImpl::pretty_print(std::ostream& stream) const {
  stream << "kan::KAN(width=" << c10::IntArrayRef(options_.width()) << ", grid=" << options_.grid()
         << ", k=" << options_.k() << ", base_fun=" << to_string(options_.base_fun())
         << ", backend=" << to_string(options_.backend()) << ")";
}

torch::Device KANImpl::device() const {
  return layer(0)->device();
}

torch::Dtype KANImpl::dtype() const {
  return layer(0)->dtype();
}

void KANImpl::check_input(const torch::Tensor& x, const char* what) const {
  detail::check_points(x, what, options_.width().front(), dtype(), device());
}

torch::Tensor KANImpl::forward(const torch::Tensor& x) {
  check_input(x);
  activations_.clear();
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    if (save_activations_) {
      activations_.push_back(layer(l)->forward_with_activations(h));
      h = activations_.back().output;
    } else {
      h = layer(l)->forward(h);
    }
  }
  return h;
}

void KANImpl::update_grid_from_samples(const torch::Tensor& x, int64_t memory_budget) {
  check_input(x, "grid-update samples");
  detail::check_finite(x, "the network's input x (grid-update samples)");
  PhaseScope phase(Phase::kGridUpdate);
  torch::NoGradGuard no_grad;
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    if (l > 0)
      check_hidden_finite(h, l, "grid-update");
    layer(l)->update_grid_from_samples(h, memory_budget);
    if (l + 1 < depth())
      h = forward_in_pieces(*layer(l), h, memory_budget);
  }
}

KAN KANImpl::refine(int64_t new_grid, const torch::Tensor& x, int64_t memory_budget) const {
  TORCH_CHECK(new_grid >= 1, "refine: new grid (number of intervals G) must be >= 1, got ",
              new_grid);
  if (x.defined()) {
    check_input(x, "refinement samples");
    detail::check_finite(x, "the network's input x (refinement samples)");
  }
  auto options = options_;
  options.grid(new_grid).device(device()).dtype(dtype());
  KAN refined(options);
  torch::NoGradGuard no_grad;
  auto h = x;
  for (size_t l = 0; l < depth(); ++l) {
    if (l > 0 && h.defined())
      check_hidden_finite(h, l, "refinement");
    refined->layer(l)->initialize_from_parent(*layer(l), h, memory_budget);
    if (h.defined() && l + 1 < depth())
      h = forward_in_pieces(*layer(l), h, memory_budget);
  }
  return refined;
}

} // namespace kan
