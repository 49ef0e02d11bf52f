#include "nn/detail/network_node.h"

#include "kan/nn/trace_scope.h"
#include "kernels/layer_pass_cpu.h"
#include "nn/detail/mean_squared_error.h"
#include "nn/detail/regularizer_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace kan::detail {
namespace {

constexpr size_t kLayerTensors = 5;  // grid, coef, scale_base, scale_sp, mask
constexpr size_t kAffineTensors = 4; // subnode_scale, subnode_bias, node_scale, node_bias

// The layout as integers, which the node's context can keep: k, base, affine, the layer count,
// then per layer its addition nodes, its multiplication nodes and their arities.
std::vector<int64_t> encode(const NetworkLayout& layout) {
  std::vector<int64_t> code{layout.k, static_cast<int64_t>(layout.base), layout.affine ? 1 : 0,
                            static_cast<int64_t>(layout.sum_nodes.size())};
  for (size_t l = 0; l < layout.sum_nodes.size(); ++l) {
    code.push_back(layout.sum_nodes[l]);
    code.push_back(static_cast<int64_t>(layout.arities[l].size()));
    code.insert(code.end(), layout.arities[l].begin(), layout.arities[l].end());
  }
  return code;
}

NetworkLayout decode(const std::vector<int64_t>& code) {
  NetworkLayout layout;
  layout.k = code[0];
  layout.base = static_cast<BaseKind>(code[1]);
  layout.affine = code[2] != 0;
  size_t at = 4;
  for (int64_t l = 0; l < code[3]; ++l) {
    layout.sum_nodes.push_back(code[at]);
    const auto mult = static_cast<size_t>(code[at + 1]);
    layout.arities.emplace_back(code.begin() + static_cast<int64_t>(at + 2),
                                code.begin() + static_cast<int64_t>(at + 2 + mult));
    at += 2 + mult;
  }
  return layout;
}

// One layer's affine maps as host arrays: subnodes s = subnode_bias + y subnode_scale, the nodes
// (the addition nodes' subnodes, then each multiplication node's product of its subnodes, left to
// right), h = node_bias + nodes node_scale: KANImpl::nodes_from_subnodes.
template <typename T> struct AffineMaps {
  const T *subnode_scale, *subnode_bias, *node_scale, *node_bias;
  int64_t subnodes, nodes, sum_nodes;
  const std::vector<int64_t>& arities;

  AffineMaps(const std::vector<at::Tensor>& p, int64_t sum_nodes_in,
             const std::vector<int64_t>& arities_in)
      : subnode_scale(p[0].const_data_ptr<T>()), subnode_bias(p[1].const_data_ptr<T>()),
        node_scale(p[2].const_data_ptr<T>()), node_bias(p[3].const_data_ptr<T>()),
        subnodes(p[0].numel()), nodes(p[2].numel()), sum_nodes(sum_nodes_in), arities(arities_in) {}

  // The product of a multiplication node's `arity` subnodes from subs, left to right as pykan.
  static T product_of(const T* subs, int64_t arity) {
    T product = subs[0] * subs[1];
    for (int64_t i = 2; i < arity; ++i)
      product = product * subs[i];
    return product;
  }

  // One sample's subnodes from its row y.
  void subnode_values(const T* y, T* subs) const {
    for (int64_t s = 0; s < subnodes; ++s)
      subs[s] = subnode_bias[s] + y[s] * subnode_scale[s];
  }

  // h (N, nodes) of y (N, subnodes).
  void forward(const T* y, int64_t N, T* h) const {
    std::vector<T> subs(static_cast<size_t>(subnodes));
    for (int64_t n = 0; n < N; ++n, y += subnodes, h += nodes) {
      subnode_values(y, subs.data());
      for (int64_t w = 0; w < sum_nodes; ++w)
        h[w] = node_bias[w] + subs[w] * node_scale[w];
      int64_t at = sum_nodes;
      for (size_t j = 0; j < arities.size(); ++j) {
        const int64_t w = sum_nodes + static_cast<int64_t>(j);
        h[w] = node_bias[w] + product_of(subs.data() + at, arities[j]) * node_scale[w];
        at += arities[j];
      }
    }
  }

  // gy (N, subnodes) for gh (N, nodes), and the parameters' gradients summed over the samples
  // into g (4 arrays in double, zero on entry, in the parameters' order).
  void backward(const T* gh, const T* y, int64_t N, T* gy, const std::vector<double*>& g) const {
    std::vector<T> subs(static_cast<size_t>(subnodes)), gsubs(subs.size());
    for (int64_t n = 0; n < N; ++n, y += subnodes, gh += nodes, gy += subnodes) {
      subnode_values(y, subs.data());
      for (int64_t w = 0; w < sum_nodes; ++w) {
        g[3][w] += static_cast<double>(gh[w]);
        g[2][w] += static_cast<double>(gh[w] * subs[w]);
        gsubs[w] = gh[w] * node_scale[w];
      }
      int64_t at = sum_nodes;
      for (size_t j = 0; j < arities.size(); ++j) {
        const int64_t w = sum_nodes + static_cast<int64_t>(j), arity = arities[j];
        g[3][w] += static_cast<double>(gh[w]);
        g[2][w] += static_cast<double>(gh[w] * product_of(subs.data() + at, arity));
        const T gnode = gh[w] * node_scale[w];
        for (int64_t i = 0; i < arity; ++i) {
          T others = T(1);
          for (int64_t m = 0; m < arity; ++m)
            others = m == i ? others : others * subs[at + m];
          gsubs[at + i] = gnode * others;
        }
        at += arity;
      }
      for (int64_t s = 0; s < subnodes; ++s) {
        g[1][s] += static_cast<double>(gsubs[s]);
        g[0][s] += static_cast<double>(gsubs[s] * y[s]);
        gy[s] = gsubs[s] * subnode_scale[s];
      }
    }
  }
};

// Layer l's affine parameters, made contiguous, from the node's flat list.
std::vector<at::Tensor> affine_of(at::TensorList affine, size_t l) {
  std::vector<at::Tensor> p;
  for (size_t t = 0; t < kAffineTensors; ++t)
    p.push_back(affine[l * kAffineTensors + t].contiguous());
  return p;
}

at::Tensor affine_forward(const at::Tensor& y, const std::vector<at::Tensor>& p,
                          const NetworkLayout& layout, size_t l) {
  auto h = at::empty({y.size(0), p[2].numel()}, y.options());
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "fused_network_affine", [&] {
    AffineMaps<scalar_t>(p, layout.sum_nodes[l], layout.arities[l])
        .forward(y.const_data_ptr<scalar_t>(), y.size(0), h.mutable_data_ptr<scalar_t>());
  });
  return h;
}

// {gy, the four parameters' gradients} for gh.
std::vector<at::Tensor> affine_backward(const at::Tensor& gh, const at::Tensor& y,
                                        const std::vector<at::Tensor>& p,
                                        const NetworkLayout& layout, size_t l) {
  auto gy = at::empty_like(y);
  std::vector<at::Tensor> sums;
  std::vector<double*> g;
  for (const auto& t : p) {
    sums.push_back(at::zeros({t.numel()}, t.options().dtype(at::kDouble)));
    g.push_back(sums.back().mutable_data_ptr<double>());
  }
  const auto grad = gh.contiguous();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "fused_network_affine_backward", [&] {
    AffineMaps<scalar_t>(p, layout.sum_nodes[l], layout.arities[l])
        .backward(grad.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(), y.size(0),
                  gy.mutable_data_ptr<scalar_t>(), g);
  });
  std::vector<at::Tensor> grads{gy};
  for (size_t t = 0; t < p.size(); ++t)
    grads.push_back(sums[t].to(y.scalar_type()));
  return grads;
}

// a + b where either may be undefined (a zero gradient).
at::Tensor plus(at::Tensor a, const at::Tensor& b) {
  if (!a.defined())
    return b;
  if (b.defined())
    a.add_(b);
  return a;
}

// The network's forward: its outputs as the node gives them (h_1 .. h_L, each layer's input after
// the first and the network's output; then y_0 .. y_{L-1} where the affine maps apply, else y_l
// is h_{l+1}; then the L sums) and what its backward reads.
struct NetworkForward {
  std::vector<at::Tensor> outputs, saved;
  KeptInput* kept = nullptr; // where the first layer's x-only values came from, if kept
};

NetworkForward network_forward(const at::Tensor& x, at::TensorList layers, at::TensorList affine,
                               const NetworkLayout& layout, KeptInput* kept = nullptr) {
  const size_t L = layout.sum_nodes.size();
  NetworkForward f;
  std::vector<at::Tensor> ys, moments;
  at::Tensor h = x;
  for (size_t l = 0; l < L; ++l) {
    ModuleScope scope("layers", static_cast<int64_t>(l)); // the trace names each layer's work
    const auto* p = &layers[l * kLayerTensors];
    const LayerPass pass(h, p[0], p[1], p[2], p[3], p[4], layout.base, layout.k,
                         l == 0 ? kept : nullptr);
    if (l == 0)
      f.kept = pass.kept;
    auto [y, m] = layer_pass_forward(pass);
    const auto tensors = pass.tensors();
    f.saved.insert(f.saved.end(), tensors.begin(), tensors.end());
    moments.push_back(m);
    ys.push_back(y);
    h = layout.affine ? affine_forward(y, affine_of(affine, l), layout, l) : y;
    f.outputs.push_back(h);
  }
  if (layout.affine) {
    f.saved.insert(f.saved.end(), ys.begin(), ys.end());
    for (size_t l = 0; l < L; ++l) {
      const auto p = affine_of(affine, l);
      f.saved.insert(f.saved.end(), p.begin(), p.end());
    }
    f.outputs.insert(f.outputs.end(), ys.begin(), ys.end());
  }
  f.outputs.insert(f.outputs.end(), moments.begin(), moments.end());
  return f;
}

// The gradients of the forward's inputs (x, the layers' tensors, the affine maps', in order; those
// `wanted` rejects undefined) for its outputs' gradients (undefined: zero). `kept`: the forward's.
template <typename Wanted>
std::vector<at::Tensor> network_backward(const std::vector<at::Tensor>& saved,
                                         const NetworkLayout& layout,
                                         const std::vector<at::Tensor>& grad_outputs, Wanted wanted,
                                         KeptInput* kept = nullptr) {
  const size_t L = layout.sum_nodes.size(), per_layer = LayerPass::kTensors;
  const size_t moments_at = layout.affine ? 2 * L : L, affine_at = 1 + kLayerTensors * L;
  std::vector<at::Tensor> grads(affine_at + (layout.affine ? kAffineTensors * L : 0));
  const auto keep = [&](size_t input, const at::Tensor& g) {
    if (wanted(input))
      grads[input] = g;
  };
  at::Tensor gh = grad_outputs[L - 1];
  for (size_t l = L; l-- > 0;) {
    ModuleScope scope("layers", static_cast<int64_t>(l));
    LayerPass pass({saved.begin() + static_cast<int64_t>(l * per_layer),
                    saved.begin() + static_cast<int64_t>((l + 1) * per_layer)},
                   layout.base, layout.k);
    if (l == 0)
      pass.kept = kept;
    at::Tensor gy = gh;
    if (layout.affine) {
      gy = grad_outputs[L + l];
      if (gh.defined()) {
        const auto& y = saved[per_layer * L + l];
        const std::vector<at::Tensor> p(
            saved.begin() + static_cast<int64_t>(per_layer * L + L + kAffineTensors * l),
            saved.begin() + static_cast<int64_t>(per_layer * L + L + kAffineTensors * (l + 1)));
        const auto ga = affine_backward(gh, y, p, layout, l);
        gy = plus(ga[0], gy);
        for (size_t t = 0; t < kAffineTensors; ++t)
          keep(affine_at + kAffineTensors * l + t, ga[1 + t]);
      }
    }
    const auto g = layer_pass_backward(pass, gy, grad_outputs[moments_at + l], l > 0 || wanted(0));
    const size_t at = 1 + kLayerTensors * l;
    keep(at + 1, g.coef);
    keep(at + 2, g.scale_base);
    keep(at + 3, g.scale_sp);
    gh = l > 0 ? plus(g.x, grad_outputs[l - 1]) : g.x;
  }
  keep(0, gh);
  return grads;
}

// Inputs: x, then the layers' tensors, then the affine maps' (layout.affine), then the layout;
// outputs network_forward's.
class NetworkFunction : public torch::autograd::Function<NetworkFunction> {
public:
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx,
                                              const at::Tensor& x, at::TensorList layers,
                                              at::TensorList affine,
                                              const std::vector<int64_t>& code) {
    ctx->set_materialize_grads(false);
    auto f = network_forward(x, layers, affine, decode(code));
    ctx->save_for_backward(f.saved);
    ctx->saved_data["layout"] = code;
    return f.outputs;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "backend fused does not support double backward (create_graph=true); use "
                "backend reference for higher-order derivatives");
    auto grads = network_backward(ctx->get_saved_variables(),
                                  decode(ctx->saved_data["layout"].toIntVector()), grad_outputs,
                                  [&](size_t input) { return ctx->needs_input_grad(input); });
    grads.emplace_back(); // the layout
    return grads;
  }
};

void check_lists(const std::vector<at::Tensor>& layers, const std::vector<at::Tensor>& affine,
                 const NetworkLayout& layout) {
  const size_t L = layout.sum_nodes.size();
  TORCH_CHECK(L >= 1 && layers.size() == kLayerTensors * L && layout.arities.size() == L &&
                  affine.size() == (layout.affine ? kAffineTensors * L : 0),
              "fused_network: ", layers.size(), " layer tensors and ", affine.size(),
              " affine tensors do not fit a layout of ", L, " layers");
}

} // namespace

BaseKind base_kind(BaseFunction f) {
  switch (f) {
  case BaseFunction::kSiLU:
    return BaseKind::kSiLU;
  case BaseFunction::kIdentity:
    return BaseKind::kIdentity;
  case BaseFunction::kZero:
    return BaseKind::kZero;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown base function");
}

NetworkPass fused_network(const at::Tensor& x, const std::vector<at::Tensor>& layers,
                          const std::vector<at::Tensor>& affine, const NetworkLayout& layout) {
  check_lists(layers, affine, layout);
  const size_t L = layout.sum_nodes.size();
  // As TensorLists: autograd takes a std::vector for a non-tensor argument.
  const auto outputs =
      NetworkFunction::apply(x, at::TensorList(layers), at::TensorList(affine), encode(layout));
  NetworkPass pass;
  pass.output = outputs[L - 1];
  for (size_t l = 0; l < L; ++l) {
    pass.inputs.push_back(l == 0 ? x : outputs[l - 1]);
    pass.outputs.push_back(layout.affine ? outputs[L + l] : outputs[l]);
    pass.moments.push_back(outputs[(layout.affine ? 2 * L : L) + l]);
  }
  return pass;
}

ObjectivePass network_objective(const at::Tensor& x, const at::Tensor& labels,
                                const std::vector<at::Tensor>& layers,
                                const std::vector<at::Tensor>& affine, const NetworkLayout& layout,
                                const ObjectiveWeights& w, KeptInput* kept) {
  check_lists(layers, affine, layout);
  const int64_t outputs =
      layout.sum_nodes.back() + static_cast<int64_t>(layout.arities.back().size());
  TORCH_CHECK(labels.dim() == 2 && labels.size(0) == x.size(0) && labels.size(1) == outputs &&
                  labels.scalar_type() == x.scalar_type() && labels.is_cpu() && x.size(0) >= 1,
              "network_objective: labels ", labels.sizes(), " ", labels.scalar_type(),
              " do not fit the network's ", outputs, " outputs for x ", x.sizes(), " ",
              x.scalar_type());
  const size_t L = layout.sum_nodes.size();
  ObjectivePass o;
  NetworkForward f;
  std::vector<at::Tensor> grad_outputs; // undefined: zero
  {
    PhaseScope phase(Phase::kForward);
    f = network_forward(x, layers, affine, layout, kept);
    const auto& pred = f.outputs[L - 1];
    const auto y = labels.contiguous();
    o.loss = squared_error_mean(pred, y);
    grad_outputs.resize(f.outputs.size());
    grad_outputs[L - 1] = squared_error_gradient(pred, y, 1.0);
  }
  if (w.lamb != 0) {
    PhaseScope phase(Phase::kRegularization);
    ModuleScope scope("layers");
    const size_t moments_at = layout.affine ? 2 * L : L;
    std::vector<at::Tensor> moments, inputs;
    for (size_t l = 0; l < L; ++l) {
      moments.push_back(f.outputs[moments_at + l]);
      inputs.push_back(l == 0 ? f.saved[0] : f.outputs[l - 1]); // f.saved[0]: x, contiguous
    }
    std::vector<double> kept;
    o.reg = regularizer_value(moments, inputs, w.lamb_l1, w.lamb_entropy, kept);
    std::vector<bool> to_inputs(L, true);
    to_inputs[0] = false; // x's gradient is not wanted
    auto [grad_moments, grad_inputs] =
        regularizer_gradients(moments, inputs, kept, w.lamb_l1, w.lamb_entropy, w.lamb, to_inputs);
    for (size_t l = 0; l < L; ++l) {
      grad_outputs[moments_at + l] = grad_moments[l];
      if (l > 0)
        grad_outputs[l - 1] = plus(grad_inputs[l], grad_outputs[l - 1]);
    }
  }
  PhaseScope phase(Phase::kBackward);
  o.grads = network_backward(
      f.saved, layout, grad_outputs, [](size_t input) { return input > 0; }, f.kept);
  return o;
}

} // namespace kan::detail
