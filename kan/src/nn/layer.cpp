#include "kan/nn/layer.h"

#include "detail/checks.h"
#include "detail/host_list.h"
#include "detail/initial_values.h"
#include "detail/saturate.h"
#include "kan/io/text.h"
#include "kan/nn/bspline.h"
#include "kan/nn/trace_scope.h"
#include "kan/symbolic/symbolic.h"
#include "kernels/edge_moments.h"
#include "kernels/fused_spline.h"
#include "nn/detail/curve2coef.h"
#include "nn/detail/network_node.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <new>
#include <numeric>
#include <string>
#include <tuple>

namespace kan {
namespace {

// Points at which initialize_from_parent fits the new splines when no samples are given.
int64_t dense_sample_count(int64_t G, int64_t k) {
  return 1000 + 10 * (G + k);
}

// The per-edge splines (N, I, O) of x (N, I) for grid rows (I, P) and coef (I, O, G + k): the
// whole layer's or a piece of its inputs and outputs.
torch::Tensor spline_values(SplineBackend backend, const torch::Tensor& x,
                            const torch::Tensor& grid, const torch::Tensor& coef, int64_t k) {
  if (backend == SplineBackend::kFused)
    return detail::fused_spline_edges(x, grid, coef, k);
  return coef2curve(x, grid, coef, k);
}

} // namespace

KANLayerImpl::KANLayerImpl(KANLayerOptions options) : options_(std::move(options)) {
  reset();
}

void KANLayerImpl::reset() {
  const auto& o = options_;
  TORCH_CHECK(o.in_dim() >= 1, "KANLayer in_dim must be >= 1, got ", o.in_dim());
  TORCH_CHECK(o.out_dim() >= 1, "KANLayer out_dim must be >= 1, got ", o.out_dim());
  TORCH_CHECK(o.grid() >= 1, "grid (number of intervals G) must be >= 1, got G = ", o.grid());
  TORCH_CHECK(o.k() >= 1, "spline order k must be >= 1, got k = ", o.k());
  TORCH_CHECK(o.grid_range()[0] < o.grid_range()[1], "grid_range must satisfy a < b, got [",
              o.grid_range()[0], ", ", o.grid_range()[1], "]");
  TORCH_CHECK(o.grid_eps() >= 0 && o.grid_eps() <= 1, "grid_eps must be in [0, 1], got ",
              o.grid_eps());
  TORCH_CHECK(std::isfinite(o.noise_scale()), "noise_scale must be finite, got ", o.noise_scale());
  detail::check_model_dtype(o.dtype());

  const auto target = torch::TensorOptions().dtype(o.dtype()).device(o.device());
  const int64_t I = o.in_dim(), O = o.out_dim(), M = o.grid() + o.k();
  const std::string building = "KANLayer (" + detail::layer_size(o) + ")";
  // Sizes past 2^63 bytes would overflow LibTorch's size arithmetic: no machine holds them.
  if (detail::sat_mul(I, O, M + 2, int64_t{8}) == detail::kSaturated)
    detail::throw_out_of_memory(building, "it needs more than 2^63 bytes");
  // An allocation failure names the layer and its size, not only the bytes LibTorch tried.
  try {
    grid = register_buffer("grid", torch::empty({I, o.grid() + 2 * o.k() + 1}, target));
    mask = register_buffer("mask", torch::ones({I, O}, target));
    coef = register_parameter("coef", torch::empty({I, O, M}, target));
    scale_base = register_parameter("scale_base", torch::empty({I, O}, target), o.sb_trainable());
    scale_sp = register_parameter("scale_sp", torch::empty({I, O}, target), o.sp_trainable());
    reset_parameters();
  } catch (const c10::Error& e) {
    if (!detail::is_out_of_memory(e))
      throw;
    detail::throw_out_of_memory(building, io::first_line(e.msg()));
  } catch (const std::bad_alloc& e) {
    detail::throw_out_of_memory(building, std::string("std::bad_alloc: ") + e.what());
  }
  // A copy being cloned carries the host record: its tensors must exist for clone to fill.
  if (has_symbolic_state())
    register_symbolic();
}

void KANLayerImpl::reset_parameters() {
  const auto& o = options_;
  const int64_t I = o.in_dim(), O = o.out_dim(), G = o.grid(), k = o.k();
  // Every draw happens on the CPU in float64 from the layer's own generator, so one seed gives
  // the same layer on every device and in every dtype.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed());
  const auto cpu64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto grid_cpu = uniform_grid(I, G, k, o.grid_range()[0], o.grid_range()[1], cpu64);
  const auto coef_cpu =
      detail::initial_values_skipped()
          ? torch::zeros({I, O, G + k}, cpu64)
          : curve2coef(grid_cpu.slice(1, k, -k).t(),
                       (torch::rand({G + 1, I, O}, generator, cpu64) - 0.5) * o.noise_scale() / G,
                       grid_cpu, k);
  const double inv_sqrt_in = 1.0 / std::sqrt(static_cast<double>(I));
  const auto scale_base_cpu =
      o.scale_base_mu() * inv_sqrt_in +
      o.scale_base_sigma() * (torch::rand({I, O}, generator, cpu64) * 2 - 1) * inv_sqrt_in;

  torch::NoGradGuard no_grad;
  grid.copy_(grid_cpu);
  mask.fill_(1.0);
  coef.copy_(coef_cpu);
  scale_base.copy_(scale_base_cpu);
  scale_sp.fill_(o.scale_sp() * inv_sqrt_in);
}

void KANLayerImpl::pretty_print(std::ostream& stream) const {
  stream << "kan::KANLayer(in_dim=" << options_.in_dim() << ", out_dim=" << options_.out_dim()
         << ", grid=" << options_.grid() << ", k=" << options_.k()
         << ", base_fun=" << to_string(options_.base_fun())
         << ", backend=" << to_string(options_.backend()) << ")";
}

void KANLayerImpl::check_input(const torch::Tensor& x, const char* what) const {
  detail::check_points(x, what, options_.in_dim(), dtype(), device());
}

torch::Tensor KANLayerImpl::base(const torch::Tensor& x) const {
  switch (options_.base_fun()) {
  case BaseFunction::kSiLU:
    return torch::silu(x);
  case BaseFunction::kIdentity:
    return x;
  case BaseFunction::kZero:
    return torch::zeros_like(x);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown base function");
}

torch::Tensor KANLayerImpl::spline_weight() const {
  const auto weighted = coef * (scale_sp * mask).unsqueeze(2); // (I, O, M)
  return weighted.permute({0, 2, 1}).reshape({-1, options_.out_dim()});
}

torch::Tensor KANLayerImpl::forward(const torch::Tensor& x) {
  check_input(x);
  // On the CPU a small fused layer is one node (base, splines, scales and mask in one pass each
  // way), with or without gradients, so that both give the same numbers; not under autocast,
  // which runs the base part's product in its lower precision.
  if (options_.backend() == SplineBackend::kFused && detail::fuses_layer_with_moments(x) &&
      x.size(0) * options_.in_dim() * options_.out_dim() <= detail::kOneNodeEdgeEvaluations &&
      !at::autocast::is_autocast_enabled(at::kCPU))
    return forward_as_one_node(x).first;
  const int64_t k = options_.k(), I = options_.in_dim(), O = options_.out_dim();
  torch::Tensor y;
  if (options_.backend() == SplineBackend::kFused) {
    y = detail::fused_spline(x, grid, spline_weight().view({I, -1, O}), k);
  } else {
    const auto basis = bspline_basis(x, grid, k); // (N, I, M)
    y = torch::matmul(basis.reshape({x.size(0), I * basis.size(2)}), spline_weight());
  }
  return add_base_and_symbolic(
      x, options_.base_fun() != BaseFunction::kZero ? base(x) : torch::Tensor(), y);
}

torch::Tensor KANLayerImpl::add_base_and_symbolic(const torch::Tensor& x,
                                                  const torch::Tensor& base_x, torch::Tensor y) {
  if (options_.base_fun() != BaseFunction::kZero)
    y = y + torch::matmul(base_x, scale_base * mask);
  if (symbolic_count_ > 0)
    y = add_symbolic(x, y, {}).first;
  return y;
}

torch::Tensor KANLayerImpl::edge_splines(const torch::Tensor& x) const {
  check_input(x);
  return spline_values(options_.backend(), x, grid, coef, options_.k());
}

LayerActivations KANLayerImpl::forward_with_activations(const torch::Tensor& x) {
  check_input(x);
  LayerActivations acts;
  acts.input = x;
  acts.spline = edge_splines(x);
  acts.numeric = mask * (scale_base * base(x).unsqueeze(2) + scale_sp * acts.spline);
  acts.edges = acts.numeric;
  acts.output = acts.numeric.sum(1);
  if (symbolic_count_ > 0)
    std::tie(acts.output, acts.edges) = add_symbolic(x, acts.output, acts.numeric);
  return acts;
}

LayerActivations KANLayerImpl::forward_with_statistics(const torch::Tensor& x) {
  if (options_.backend() != SplineBackend::kFused)
    return forward_with_activations(x);
  LayerActivations acts;
  acts.input = x;
  if (detail::fuses_layer_with_moments(x)) {
    // The layer and the sums in one node: one pass over the points each way.
    check_input(x);
    std::tie(acts.output, acts.moments) = forward_as_one_node(x);
    return acts;
  }
  acts.output = forward(x);
  acts.moments = detail::fused_edge_moments(x, base(x), grid, coef, scale_base * mask,
                                            scale_sp * mask, options_.k());
  return acts;
}

std::pair<torch::Tensor, torch::Tensor> KANLayerImpl::forward_as_one_node(const torch::Tensor& x) {
  auto [y, moments] =
      detail::fused_layer_with_moments(x, grid, coef, scale_base, scale_sp, mask,
                                       detail::base_kind(options_.base_fun()), options_.k());
  record_autograd_node(y); // its backward is this layer's work in the operation trace
  return {symbolic_count_ > 0 ? add_symbolic(x, y, {}).first : y, moments};
}

void KANLayerImpl::register_symbolic() {
  const auto target = coef.options().requires_grad(false);
  const int64_t I = options_.in_dim(), O = options_.out_dim();
  symbolic_mask = register_buffer("symbolic_mask", torch::zeros({O, I}, target));
  // pykan trains the affine parameters of symbolic edges.
  symbolic_affine = register_parameter("symbolic_affine", torch::zeros({O, I, 4}, target));
}

void KANLayerImpl::enable_symbolic() {
  if (has_symbolic_state())
    return;
  const int64_t edges = options_.in_dim() * options_.out_dim();
  symbolic_names_.assign(static_cast<size_t>(edges), "0");
  symbolic_on_.assign(static_cast<size_t>(edges), 0);
  symbolic_count_ = 0;
  symbolic_groups_valid_ = false;
  register_symbolic();
}

const std::string& KANLayerImpl::symbolic_name(int64_t i, int64_t j) const {
  static const std::string kNone = "0";
  const int64_t I = options_.in_dim(), O = options_.out_dim();
  TORCH_CHECK(i >= 0 && i < I && j >= 0 && j < O, "symbolic_name: the layer has edges 0..", I - 1,
              " -> 0..", O - 1, ", got ", i, " -> ", j);
  return has_symbolic_state() ? symbolic_names_[static_cast<size_t>(j * I + i)] : kNone;
}

void KANLayerImpl::set_symbolic_edges(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out,
                                      const std::vector<std::string>& names,
                                      const std::vector<double>& masks,
                                      const torch::Tensor& affine) {
  const int64_t I = options_.in_dim(), O = options_.out_dim();
  const auto count = in.size();
  TORCH_CHECK(out.size() == count && names.size() == count && masks.size() == count,
              "set_symbolic_edges: in, out, names and masks must have one entry per edge, got ",
              in.size(), ", ", out.size(), ", ", names.size(), " and ", masks.size());
  const std::vector<int64_t> affine_shape{static_cast<int64_t>(count), 4};
  TORCH_CHECK(!affine.defined() || affine.sizes() == c10::IntArrayRef(affine_shape),
              "set_symbolic_edges: affine must be (", count, ", 4), got ", affine.sizes());
  std::vector<int64_t> flat(count);
  for (size_t e = 0; e < count; ++e) {
    TORCH_CHECK(in[e] >= 0 && in[e] < I && out[e] >= 0 && out[e] < O,
                "set_symbolic_edges: the layer has edges 0..", I - 1, " -> 0..", O - 1, ", got ",
                in[e], " -> ", out[e]);
    symbolic_function(names[e]); // an unknown name is an error listing the library
    flat[e] = out[e] * I + in[e];
  }
  enable_symbolic();
  for (size_t e = 0; e < count; ++e) {
    const auto f = static_cast<size_t>(flat[e]);
    symbolic_names_[f] = names[e];
    symbolic_count_ += (masks[e] != 0) - symbolic_on_[f];
    symbolic_on_[f] = masks[e] != 0;
  }
  symbolic_groups_valid_ = false;
  if (count == 0)
    return;
  torch::NoGradGuard no_grad;
  const auto index = detail::host_list(flat, torch::kLong, device());
  symbolic_mask.view({-1}).index_put_(
      {index}, detail::host_list(masks, symbolic_mask.scalar_type(), device()));
  if (affine.defined())
    symbolic_affine.view({-1, 4}).index_put_({index}, affine.to(symbolic_affine.options()));
}

void KANLayerImpl::sync_symbolic_mask() {
  if (!has_symbolic_state())
    return;
  const auto on = (symbolic_mask != 0).to(torch::kCPU, torch::kUInt8).contiguous();
  std::copy_n(on.data_ptr<uint8_t>(), on.numel(), symbolic_on_.begin());
  symbolic_count_ = std::count(symbolic_on_.begin(), symbolic_on_.end(), uint8_t{1});
  symbolic_groups_valid_ = false;
}

void KANLayerImpl::copy_symbolic_from(const KANLayerImpl& other, const std::vector<int64_t>& in_ids,
                                      const std::vector<int64_t>& out_ids) {
  if (!other.has_symbolic_state())
    return;
  const int64_t I = options_.in_dim(), other_I = other.options().in_dim();
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(in_ids.size()) == I &&
                        static_cast<int64_t>(out_ids.size()) == options_.out_dim());
  enable_symbolic();
  for (size_t j = 0; j < out_ids.size(); ++j)
    for (size_t i = 0; i < in_ids.size(); ++i) {
      const auto from = static_cast<size_t>(out_ids[j] * other_I + in_ids[i]);
      symbolic_names_[j * I + i] = other.symbolic_names_[from];
      symbolic_on_[j * I + i] = other.symbolic_on_[from];
    }
  symbolic_count_ = std::count(symbolic_on_.begin(), symbolic_on_.end(), uint8_t{1});
  symbolic_groups_valid_ = false;
  torch::NoGradGuard no_grad;
  const auto ins = detail::host_list(in_ids, torch::kLong, other.device());
  const auto outs = detail::host_list(out_ids, torch::kLong, other.device());
  symbolic_mask.copy_(other.symbolic_mask.index_select(0, outs).index_select(1, ins));
  symbolic_affine.copy_(other.symbolic_affine.index_select(0, outs).index_select(1, ins));
}

std::pair<torch::Tensor, torch::Tensor>
KANLayerImpl::add_symbolic(const torch::Tensor& x, torch::Tensor y, torch::Tensor edges) const {
  const int64_t I = options_.in_dim(), O = options_.out_dim(), N = x.size(0);
  if (!symbolic_groups_valid_ || symbolic_groups_device_ != device()) {
    // Active edges grouped by function, in a fixed (name) order.
    std::map<std::string, std::array<std::vector<int64_t>, 4>> by_name;
    for (int64_t j = 0; j < O; ++j)
      for (int64_t i = 0; i < I; ++i)
        if (symbolic_on_[static_cast<size_t>(j * I + i)]) {
          auto& ids = by_name[symbolic_names_[static_cast<size_t>(j * I + i)]];
          for (auto [k, v] :
               {std::pair(0, i), std::pair(1, j), std::pair(2, j * I + i), std::pair(3, i * O + j)})
            ids[k].push_back(v);
        }
    symbolic_groups_.clear();
    // Built once per device and kept: its upload is not a copy every forward pays.
    PhaseScope once(Phase::kHostWork);
    const auto on_device = [&](const std::vector<int64_t>& v) {
      return detail::host_list(v, torch::kLong, device());
    };
    for (const auto& [name, ids] : by_name)
      symbolic_groups_.push_back(
          {name, on_device(ids[0]), on_device(ids[1]), on_device(ids[2]), on_device(ids[3])});
    symbolic_groups_valid_ = true;
    symbolic_groups_device_ = device();
  }
  // pykan sums the symbolic branch over the inputs first, then adds it to the numeric one.
  auto sum = torch::zeros_like(y);
  auto flat_edges = edges.defined() ? edges.reshape({N, I * O}) : edges;
  const auto affine = symbolic_affine.view({O * I, 4});
  const auto masks = symbolic_mask.view({O * I});
  for (const auto& group : symbolic_groups_) {
    const auto& f = symbolic_function(group.name).f;
    const auto p = affine.index_select(0, group.flat); // (E, 4)
    const auto inner = p.select(1, 0) * x.index_select(1, group.in) + p.select(1, 1);
    const auto value =
        masks.index_select(0, group.flat) * (p.select(1, 2) * f(inner) + p.select(1, 3)); // (N, E)
    sum = sum.index_add(1, group.out, value);
    if (edges.defined())
      flat_edges = flat_edges.index_add(1, group.edge, value);
  }
  return {y + sum, edges.defined() ? flat_edges.view({N, I, O}) : edges};
}

namespace {

// x (N, I)'s columns, each sorted ascending (its values; the grid update reads no indices). On
// the CPU each column is a contiguous row sorted by std::sort: ATen's sort of a strided column,
// with the indices it computes too, took a third of a small model's grid update.
torch::Tensor sorted_columns(const torch::Tensor& x) {
  if (!x.is_cpu() || (x.scalar_type() != torch::kFloat64 && x.scalar_type() != torch::kFloat32))
    return std::get<0>(x.sort(0));
  // (I, N), always a copy (one column's x.t() is contiguous already): x stays as it is.
  auto rows = x.t().clone(at::MemoryFormat::Contiguous);
  const int64_t N = rows.size(1);
  AT_DISPATCH_FLOATING_TYPES(rows.scalar_type(), "sorted_columns", [&] {
    scalar_t* v = rows.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < rows.size(0); ++i)
      std::sort(v + i * N, v + (i + 1) * N);
  });
  return rows.t();
}

} // namespace

void KANLayerImpl::update_grid_from_samples(const torch::Tensor& x, int64_t memory_budget) {
  check_input(x, "grid-update samples");
  const int64_t N = x.size(0), I = options_.in_dim(), O = options_.out_dim(), k = options_.k(),
                G = grid.size(1) - 1 - 2 * k;
  TORCH_CHECK(N >= 1, "update_grid_from_samples needs at least one sample, got an empty batch (0, ",
              x.size(1), ")");
  // Non-finite samples would otherwise surface as an eigh failure that names no input.
  detail::check_finite(x, "the layer's input x (grid-update samples)");
  torch::NoGradGuard no_grad;
  const auto chunks = curve2coef_chunks(N, I, O, G, k, memory_budget, x.device());

  // Knot i sits at sample rank floor(N / G * i), computed as pykan does, plus the largest.
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  const auto ranks = torch::cat({(torch::arange(G, f64) * (static_cast<double>(N) / G)).floor(),
                                 torch::full({1}, static_cast<double>(N - 1), f64)})
                         .to(torch::kLong);
  const double eps = options_.grid_eps();
  // Every input's knots and least squares are independent: a piece of inputs at a time, each
  // overwriting its own rows of grid and coef once its targets (the old splines) are computed.
  for (int64_t i0 = 0; i0 < I; i0 += chunks.inputs) {
    const int64_t ic = std::min(chunks.inputs, I - i0);
    const auto sorted = sorted_columns(x.narrow(1, i0, ic)); // (N, ic)
    const auto grid_rows = grid.narrow(0, i0, ic), coef_rows = coef.narrow(0, i0, ic);
    const auto adaptive = sorted.index_select(0, ranks).t(); // (ic, G + 1)
    const auto lo = adaptive.narrow(1, 0, 1), hi = adaptive.narrow(1, G, 1);
    const auto uniform = lo + (hi - lo) / G * torch::arange(G + 1, x.options());
    const auto new_grid = extend_grid(eps * uniform + (1 - eps) * adaptive, k);
    // An input whose samples are all equal (e.g. one sample) gives no knot span: keep its grid
    // and splines rather than collapse them.
    const auto collapsed = (hi == lo); // (ic, 1)
    detail::curve2coef_pieces(
        sorted, new_grid, k, O, chunks,
        [&](int64_t o0, int64_t oc, int64_t n0, int64_t nc) {
          return spline_values(options_.backend(), sorted.narrow(0, n0, nc), grid_rows,
                               coef_rows.narrow(1, o0, oc), k);
        },
        [&](int64_t o0, const torch::Tensor& c) {
          auto old = coef_rows.narrow(1, o0, c.size(1));
          old.copy_(torch::where(collapsed.unsqueeze(2), old, c.to(old.scalar_type())));
        });
    grid_rows.copy_(torch::where(collapsed, grid_rows, new_grid));
  }
}

void KANLayerImpl::initialize_from_parent(const KANLayerImpl& parent, const torch::Tensor& x,
                                          int64_t memory_budget) {
  const auto& o = options_;
  TORCH_CHECK(parent.options().in_dim() == o.in_dim() && parent.options().out_dim() == o.out_dim(),
              "initialize_from_parent: parent is ", parent.options().in_dim(), " -> ",
              parent.options().out_dim(), " but this layer is ", o.in_dim(), " -> ", o.out_dim());
  TORCH_CHECK(parent.device() == device() && parent.dtype() == dtype(),
              "initialize_from_parent: parent is ", parent.dtype(), " on ", parent.device(),
              ", this layer is ", dtype(), " on ", device());
  const int64_t pk = parent.options().k(), parent_G = parent.grid.size(1) - 1 - 2 * pk;
  const int64_t G = o.grid(), k = o.k(), I = o.in_dim(), O = o.out_dim();
  const bool given = x.defined() && x.size(0) > 0;
  if (x.defined()) {
    parent.check_input(x, "refinement samples");
    detail::check_finite(x, "the layer's input x (refinement samples)");
  }
  torch::NoGradGuard no_grad;

  // New interior knots: the parent's knots interpolated piecewise linearly at G + 1 positions
  // of its knot index. When refining (G >= parent G) each parent interval gets a whole number
  // of new intervals, so every parent knot stays a knot and the new splines contain the old ones
  // exactly inside the parent's grid.
  const auto parent_knots = parent.grid.slice(1, pk, pk + parent_G + 1); // (I, parent_G + 1)
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device());
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device());
  torch::Tensor position;
  if (G >= parent_G) {
    const auto starts = (torch::arange(parent_G + 1, i64) * G).div(parent_G, "floor");
    const auto j = torch::arange(G + 1, i64);
    const auto interval = (torch::searchsorted(starts, j, false, true) - 1).clamp_max(parent_G - 1);
    const auto first = starts.index_select(0, interval),
               next = starts.index_select(0, interval + 1);
    position = interval.to(torch::kFloat64) +
               (j - first).to(torch::kFloat64) / (next - first).to(torch::kFloat64);
  } else {
    position = torch::arange(G + 1, f64) * static_cast<double>(parent_G) / G;
  }
  const auto lower = position.floor().clamp_max(parent_G - 1).to(torch::kLong);
  const auto frac = (position - lower.to(torch::kFloat64)).to(dtype());
  // Without samples, a dense uniform sample of each input's parent grid range.
  const auto u = given
                     ? torch::Tensor()
                     : torch::linspace(0, 1, dense_sample_count(G, k), grid.options()).unsqueeze(1);

  const int64_t N = given ? x.size(0) : u.size(0);
  const auto chunks = curve2coef_chunks(N, I, O, G, k, memory_budget, device());
  for (int64_t i0 = 0; i0 < I; i0 += chunks.inputs) {
    const int64_t ic = std::min(chunks.inputs, I - i0);
    const auto knots = parent_knots.narrow(0, i0, ic);
    const auto t0 = knots.index_select(1, lower), t1 = knots.index_select(1, lower + 1);
    const auto grid_rows = grid.narrow(0, i0, ic), coef_rows = coef.narrow(0, i0, ic);
    grid_rows.copy_(extend_grid(t0 + frac * (t1 - t0), k));
    torch::Tensor samples;
    if (given) {
      samples = x.narrow(1, i0, ic);
    } else {
      const auto first = knots.narrow(1, 0, 1).t(), last = knots.narrow(1, -1, 1).t();
      samples = first + u * (last - first); // (n, ic)
    }
    const auto parent_grid = parent.grid.narrow(0, i0, ic),
               parent_coef = parent.coef.narrow(0, i0, ic);
    detail::curve2coef_pieces(
        samples, grid_rows, k, O, chunks,
        [&](int64_t o0, int64_t oc, int64_t n0, int64_t nc) {
          return spline_values(parent.options().backend(), samples.narrow(0, n0, nc), parent_grid,
                               parent_coef.narrow(1, o0, oc), pk);
        },
        [&](int64_t o0, const torch::Tensor& c) { coef_rows.narrow(1, o0, c.size(1)).copy_(c); });
  }
  scale_base.copy_(parent.scale_base);
  scale_sp.copy_(parent.scale_sp);
  mask.copy_(parent.mask);
  std::vector<int64_t> ins(static_cast<size_t>(I)), outs(static_cast<size_t>(O));
  std::iota(ins.begin(), ins.end(), 0);
  std::iota(outs.begin(), outs.end(), 0);
  copy_symbolic_from(parent, ins, outs);
}

} // namespace kan
