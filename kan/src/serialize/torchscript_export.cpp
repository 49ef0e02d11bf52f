// kanbench's own models as TorchScript modules that plain PyTorch runs: the reference path's
// arithmetic (kan/nn/bspline.h's recursion, the layer's two products, the symbolic branch, the
// node maps) written as TorchScript source, compiled by LibTorch, with the model's tensors as the
// module's parameters and buffers.

#include "kan/serialize/torchscript.h"

#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/symbolic/symbolic.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/api/module.h>

#include <map>
#include <sstream>

namespace kan {
namespace {

// A tensor the module owns: a detached copy, so that the export never aliases the model.
torch::Tensor owned(const torch::Tensor& t) {
  return t.detach().clone().contiguous();
}

void add_parameter(torch::jit::Module& m, const std::string& name, const torch::Tensor& t) {
  m.register_parameter(name, owned(t).set_requires_grad(t.requires_grad()), false);
}

// TorchScript for f(u), u an expression, for pykan's library functions: the same ATen operations
// as kanbench's own (kan/symbolic/symbolic.cpp), so that the numbers agree to rounding.
std::string symbolic_code(const std::string& name, const std::string& u) {
  static const std::map<std::string, std::string> kCode = {
      {"x", "({})"},
      {"x^2", "({}).pow(2)"},
      {"x^3", "({}).pow(3)"},
      {"x^4", "({}).pow(4)"},
      {"x^5", "({}).pow(5)"},
      {"1/x", "torch.reciprocal(({}).pow(1))"},
      {"1/x^2", "torch.reciprocal(({}).pow(2))"},
      {"1/x^3", "torch.reciprocal(({}).pow(3))"},
      {"1/x^4", "torch.reciprocal(({}).pow(4))"},
      {"1/x^5", "torch.reciprocal(({}).pow(5))"},
      {"sqrt", "({}).sqrt()"},
      {"x^0.5", "({}).sqrt()"},
      {"x^1.5", "({}).sqrt().pow(3)"},
      {"1/sqrt(x)", "torch.reciprocal(({}).sqrt())"},
      {"1/x^0.5", "torch.reciprocal(({}).sqrt())"},
      {"exp", "({}).exp()"},
      {"log", "({}).log()"},
      {"abs", "({}).abs()"},
      {"sin", "({}).sin()"},
      {"cos", "({}).cos()"},
      {"tan", "({}).tan()"},
      {"tanh", "({}).tanh()"},
      {"sgn", "({}).sign()"},
      {"arcsin", "({}).asin()"},
      {"arccos", "({}).acos()"},
      {"arctan", "({}).atan()"},
      {"arctanh", "({}).atanh()"},
      {"0", "({}) * 0"},
      {"gaussian", "(-({}).square()).exp()"},
  };
  const auto it = kCode.find(name);
  TORCH_CHECK(it != kCode.end(), "export to TorchScript: symbolic function '", name,
              "' is not one of pykan's library, so it has no TorchScript form");
  auto code = it->second;
  for (auto at = code.find("{}"); at != std::string::npos; at = code.find("{}", at + u.size()))
    code.replace(at, 2, u);
  return code;
}

// One KAN layer as a module of its own class: its forward is the reference backend's.
torch::jit::Module layer_module(const KANLayerImpl& layer, size_t l) {
  const auto& o = layer.options();
  const int64_t I = o.in_dim(), O = o.out_dim(), k = o.k();
  torch::jit::Module m("__torch__.kanbench.KANLayer" + std::to_string(l));
  add_parameter(m, "coef", layer.coef);
  add_parameter(m, "scale_base", layer.scale_base);
  add_parameter(m, "scale_sp", layer.scale_sp);
  m.register_buffer("grid", owned(layer.grid));
  m.register_buffer("mask", owned(layer.mask));
  std::ostringstream code;
  // B_batch's recursion (kan::bspline_basis): order 0 indicators, then k raisings, a zero
  // reciprocal where two knots coincide.
  code << "def basis(self, x):\n"
       << "    xe = x.unsqueeze(2)\n"
       << "    t = self.grid.unsqueeze(0)\n"
       << "    P = t.size(2)\n"
       << "    value = torch.logical_and(xe >= t[:, :, 0:P - 1], xe < t[:, :, 1:P]).to(x.dtype)\n"
       << "    for p in range(1, " << k + 1 << "):\n"
       << "        d_left = t[:, :, p:P - 1] - t[:, :, 0:P - p - 1]\n"
       << "        d_right = t[:, :, p + 1:P] - t[:, :, 1:P - p]\n"
       << "        left = torch.where(d_left == 0, torch.zeros_like(d_left), d_left.reciprocal())\n"
       << "        right = torch.where(d_right == 0, torch.zeros_like(d_right), "
          "d_right.reciprocal())\n"
       << "        n = value.size(2)\n"
       << "        value = (xe - t[:, :, 0:P - p - 1]) * left * value[:, :, 0:n - 1] + "
          "(t[:, :, p + 1:P] - xe) * right * value[:, :, 1:n]\n"
       << "    return value\n\n";
  code << "def forward(self, x):\n"
       << "    basis = self.basis(x)\n"
       << "    weight = (self.coef * (self.scale_sp * self.mask).unsqueeze(2)).permute(0, 2, 1)"
          ".reshape(-1, "
       << O << ")\n"
       << "    y = torch.matmul(basis.flatten(1), weight)\n";
  switch (o.base_fun()) {
  case BaseFunction::kSiLU:
    code << "    y = y + torch.matmul(torch.silu(x), self.scale_base * self.mask)\n";
    break;
  case BaseFunction::kIdentity:
    code << "    y = y + torch.matmul(x, self.scale_base * self.mask)\n";
    break;
  case BaseFunction::kZero:
    break;
  }
  if (layer.symbolic_edge_count() > 0) {
    add_parameter(m, "symbolic_affine", layer.symbolic_affine);
    m.register_buffer("symbolic_mask", owned(layer.symbolic_mask));
    // pykan's symbolic branch, summed over the inputs and added to the numeric one.
    code << "    zero = x[:, 0] * 0\n";
    const auto on = layer.symbolic_mask.to(torch::kCPU, torch::kFloat64).contiguous();
    const auto* on_data = on.data_ptr<double>(); // (O, I)
    std::vector<std::string> columns;
    for (int64_t j = 0; j < O; ++j) {
      std::string column = "zero";
      for (int64_t i = 0; i < I; ++i) {
        if (on_data[j * I + i] == 0)
          continue;
        const auto p = "self.symbolic_affine[" + std::to_string(j) + ", " + std::to_string(i) + "]";
        const auto u = p + "[0] * x[:, " + std::to_string(i) + "] + " + p + "[1]";
        column += " + self.symbolic_mask[" + std::to_string(j) + ", " + std::to_string(i) +
                  "] * (" + p + "[2] * " + symbolic_code(layer.symbolic_name(i, j), u) + " + " + p +
                  "[3])";
      }
      code << "    s" << j << " = " << column << "\n";
      columns.push_back("s" + std::to_string(j));
    }
    code << "    y = y + torch.stack([";
    for (size_t j = 0; j < columns.size(); ++j)
      code << (j ? ", " : "") << columns[j];
    code << "], 1)\n";
  }
  code << "    return y\n";
  m.define(code.str());
  return m;
}

torch::jit::Module kan_module(const KANImpl& model) {
  const auto& o = model.options();
  torch::jit::Module m("__torch__.kanbench.KAN");
  std::ostringstream code;
  code << "def forward(self, x):\n    h = x\n";
  for (size_t l = 0; l < model.depth(); ++l) {
    const auto name = "layer_" + std::to_string(l);
    m.register_module(name, layer_module(*model.layer(l), l));
    code << "    h = self." << name << ".forward(h)\n";
    if (!(o.affine_trainable() || has_mult_nodes(o)))
      continue;
    // KANImpl::nodes_from_subnodes: the subnode map, the products, the node map.
    const auto suffix = "_" + std::to_string(l);
    add_parameter(m, "subnode_scale" + suffix, model.subnode_scale[l]);
    add_parameter(m, "subnode_bias" + suffix, model.subnode_bias[l]);
    add_parameter(m, "node_scale" + suffix, model.node_scale[l]);
    add_parameter(m, "node_bias" + suffix, model.node_bias[l]);
    code << "    h = torch.addcmul(self.subnode_bias" << suffix << ", h, self.subnode_scale"
         << suffix << ")\n";
    const int64_t n_mult = mult_nodes(o, l + 1);
    if (n_mult > 0) {
      const int64_t n_sum = o.width()[l + 1] - n_mult;
      code << "    h = torch.cat([h.narrow(1, 0, " << n_sum << ")";
      for (int64_t j = 0, at = n_sum; j < n_mult; ++j) {
        const int64_t arity = node_arity(o, l + 1, j);
        code << ", h.narrow(1, " << at << ", 1) * h.narrow(1, " << at + 1 << ", 1)";
        for (int64_t i = 2; i < arity; ++i)
          code << " * h.narrow(1, " << at + i << ", 1)";
        at += arity;
      }
      code << "], 1)\n";
    }
    code << "    h = torch.addcmul(self.node_bias" << suffix << ", h, self.node_scale" << suffix
         << ")\n";
  }
  code << "    return h\n";
  m.define(code.str());
  return m;
}

torch::jit::Module mlp_module(const MLPImpl& model) {
  torch::jit::Module m("__torch__.kanbench.MLP");
  std::ostringstream code;
  code << "def forward(self, x):\n    h = x\n";
  for (size_t l = 0; l < model.depth(); ++l) {
    const auto suffix = "_" + std::to_string(l);
    add_parameter(m, "weight" + suffix, model.layer(l)->weight);
    add_parameter(m, "bias" + suffix, model.layer(l)->bias);
    code << "    h = torch.linear(h, self.weight" << suffix << ", self.bias" << suffix << ")\n";
    if (l + 1 == model.depth())
      break;
    switch (model.options().activation()) {
    case Activation::kSiLU:
      code << "    h = torch.silu(h)\n";
      break;
    case Activation::kTanh:
      code << "    h = torch.tanh(h)\n";
      break;
    case Activation::kReLU:
      code << "    h = torch.relu(h)\n";
      break;
    }
  }
  code << "    return h\n";
  m.define(code.str());
  return m;
}

} // namespace

TorchScriptModel export_torchscript(const Model& model) {
  torch::NoGradGuard no_grad;
  torch::jit::Module script;
  if (const auto* kan = dynamic_cast<const KANImpl*>(&model))
    script = kan_module(*kan);
  else if (const auto* mlp = dynamic_cast<const MLPImpl*>(&model))
    script = mlp_module(*mlp);
  else
    TORCH_CHECK(false, "export to TorchScript: a ", to_string(model.kind()),
                " model is one already");
  return TorchScriptModel(script, model.inputs(), "kanbench " + to_string(model.kind()));
}

} // namespace kan
