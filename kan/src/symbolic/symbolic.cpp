#include "kan/symbolic/symbolic.h"

#include "detail/host_list.h"
#include "kan/io/text.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

namespace kan {
namespace {

using torch::Tensor;

// pykan's singularity-avoiding functions (kan/utils.py, f_inv ... f_exp), term for term: inside
// the band around a pole a linear or constant continuation, outside it f (NaN and Inf zeroed).
Tensor inside(const Tensor& x, double x_th) {
  return (x.abs() < x_th).to(x.scalar_type());
}
Tensor outside(const Tensor& x, double x_th) {
  return (x.abs() >= x_th).to(x.scalar_type());
}

Tensor inverse_power(const Tensor& x, double y_th, int power) {
  const double x_th = 1.0 / std::pow(y_th, 1.0 / power);
  // Odd powers continue linearly through 0, even ones stay at y_th (pykan's f_inv .. f_inv5).
  const auto near = power % 2 == 1 ? y_th / x_th * x : torch::full_like(x, y_th);
  return near * inside(x, x_th) + torch::nan_to_num(1 / x.pow(power)) * outside(x, x_th);
}

Tensor sqrt_avoiding(const Tensor& x, double y_th) {
  const double x_th = 1.0 / (y_th * y_th);
  return x_th / y_th * x * inside(x, x_th) +
         torch::nan_to_num(x.abs().sqrt() * x.sign()) * outside(x, x_th);
}

Tensor inverse_sqrt_avoiding(const Tensor& x, double y_th) {
  const double x_th = 1.0 / (y_th * y_th);
  return y_th * inside(x, x_th) + torch::nan_to_num(1 / x.abs().sqrt()) * outside(x, x_th);
}

Tensor log_avoiding(const Tensor& x, double y_th) {
  const double x_th = std::exp(-y_th);
  return -y_th * inside(x, x_th) + torch::nan_to_num(x.abs().log()) * outside(x, x_th);
}

Tensor tan_avoiding(const Tensor& x, double y_th) {
  const auto clip = torch::remainder(x, M_PI); // Python's %: the sign of the divisor
  const double delta = M_PI / 2 - std::atan(y_th);
  const auto from_pole = clip - M_PI / 2;
  return -y_th / delta * from_pole * inside(from_pole, delta) +
         torch::nan_to_num(clip.tan()) * outside(from_pole, delta);
}

Tensor arctanh_avoiding(const Tensor& x, double y_th) {
  const double delta = 1 - std::tanh(y_th) + 1e-4;
  const auto far = (x.abs() > 1 - delta).to(x.scalar_type());
  return y_th * x.sign() * far + torch::nan_to_num(x.atanh()) * (1 - far);
}

Tensor arcsin_avoiding(const Tensor& x, double) {
  const auto far = (x.abs() > 1).to(x.scalar_type());
  return M_PI / 2 * x.sign() * far + torch::nan_to_num(x.asin()) * (1 - far);
}

Tensor arccos_avoiding(const Tensor& x, double) {
  const auto far = (x.abs() > 1).to(x.scalar_type());
  return M_PI / 2 * (1 - x.sign()) * far + torch::nan_to_num(x.acos()) * (1 - far);
}

Tensor exp_avoiding(const Tensor& x, double y_th) {
  const double x_th = std::log(y_th);
  const auto above = (x > x_th).to(x.scalar_type());
  return y_th * above + x.exp() * (1 - above);
}

SymbolicFunction::Parity parity_of_power(int power) {
  return power % 2 == 0 ? SymbolicFunction::Parity::kEven : SymbolicFunction::Parity::kOdd;
}

SymbolicFunction smooth(std::string name, int64_t complexity,
                        std::function<Tensor(const Tensor&)> f, std::string sympy,
                        std::string latex) {
  auto avoiding = [f](const Tensor& x, double) { return f(x); };
  return {std::move(name), complexity, std::move(f), avoiding, std::move(sympy), std::move(latex)};
}

SymbolicFunction inverse(std::string name, int power, int64_t complexity) {
  const auto p = std::to_string(power);
  const auto sympy = power == 1 ? "1/({})" : "({})**(-" + p + ")";
  const auto latex = power == 1 ? "\\frac{1}{{}}" : "\\frac{1}{\\left({}\\right)^{" + p + "}}";
  return {std::move(name),
          complexity,
          [power](const Tensor& x) { return 1 / x.pow(power); },
          [power](const Tensor& x, double y_th) { return inverse_power(x, y_th, power); },
          sympy,
          latex,
          parity_of_power(power),
          -power};
}

SymbolicFunction power(int exponent, int64_t complexity) {
  const auto p = std::to_string(exponent);
  auto f = smooth(
      "x^" + p, complexity, [exponent](const Tensor& x) { return x.pow(exponent); }, "({})**" + p,
      "\\left({}\\right)^{" + p + "}");
  f.parity = parity_of_power(exponent);
  f.power = exponent;
  return f;
}

// Marks the odd and even functions of `functions` (the powers are marked where they are made).
std::vector<SymbolicFunction> with_parities(std::vector<SymbolicFunction> functions) {
  using Parity = SymbolicFunction::Parity;
  const std::map<std::string, Parity> parities{
      {"sin", Parity::kOdd},      {"tan", Parity::kOdd},    {"tanh", Parity::kOdd},
      {"sgn", Parity::kOdd},      {"arcsin", Parity::kOdd}, {"arctan", Parity::kOdd},
      {"arctanh", Parity::kOdd},  {"cos", Parity::kEven},   {"abs", Parity::kEven},
      {"gaussian", Parity::kEven}};
  for (auto& f : functions)
    if (const auto it = parities.find(f.name); it != parities.end())
      f.parity = it->second;
  return functions;
}

// pykan 0.2.8's SYMBOLIC_LIB, in its order.
std::vector<SymbolicFunction> pykan_library() {
  const auto sqrt = [](const Tensor& x) { return x.sqrt(); };
  const auto inv_sqrt = [](const Tensor& x) { return 1 / x.sqrt(); };
  return {
      smooth(
          "x", 1, [](const Tensor& x) { return x; }, "{}", "{}"),
      power(2, 2),
      power(3, 3),
      power(4, 3),
      power(5, 3),
      inverse("1/x", 1, 2),
      inverse("1/x^2", 2, 2),
      inverse("1/x^3", 3, 3),
      inverse("1/x^4", 4, 4),
      inverse("1/x^5", 5, 5),
      {"sqrt", 2, sqrt, sqrt_avoiding, "sqrt({})", "\\sqrt{{}}"},
      {"x^0.5", 2, sqrt, sqrt_avoiding, "sqrt({})", "\\sqrt{{}}"},
      {"x^1.5", 4, [](const Tensor& x) { return x.sqrt().pow(3); },
       [](const Tensor& x, double) { return x.abs().pow(1.5); }, "sqrt({})**3",
       "\\left({}\\right)^{\\frac{3}{2}}"},
      {"1/sqrt(x)", 2, inv_sqrt, inverse_sqrt_avoiding, "1/sqrt({})", "\\frac{1}{\\sqrt{{}}}"},
      {"1/x^0.5", 2, inv_sqrt, inverse_sqrt_avoiding, "1/sqrt({})", "\\frac{1}{\\sqrt{{}}}"},
      {"exp", 2, [](const Tensor& x) { return x.exp(); }, exp_avoiding, "exp({})", "e^{{}}"},
      {"log", 2, [](const Tensor& x) { return x.log(); }, log_avoiding, "log({})",
       "\\log{\\left({}\\right)}"},
      smooth(
          "abs", 3, [](const Tensor& x) { return x.abs(); }, "Abs({})", "\\left|{}\\right|"),
      smooth(
          "sin", 2, [](const Tensor& x) { return x.sin(); }, "sin({})", "\\sin{\\left({}\\right)}"),
      smooth(
          "cos", 2, [](const Tensor& x) { return x.cos(); }, "cos({})", "\\cos{\\left({}\\right)}"),
      {"tan", 3, [](const Tensor& x) { return x.tan(); }, tan_avoiding, "tan({})",
       "\\tan{\\left({}\\right)}"},
      smooth(
          "tanh", 3, [](const Tensor& x) { return x.tanh(); }, "tanh({})",
          "\\tanh{\\left({}\\right)}"),
      smooth(
          "sgn", 3, [](const Tensor& x) { return x.sign(); }, "sign({})",
          "\\operatorname{sign}{\\left({}\\right)}"),
      {"arcsin", 4, [](const Tensor& x) { return x.asin(); }, arcsin_avoiding, "asin({})",
       "\\operatorname{asin}{\\left({}\\right)}"},
      {"arccos", 4, [](const Tensor& x) { return x.acos(); }, arccos_avoiding, "acos({})",
       "\\operatorname{acos}{\\left({}\\right)}"},
      smooth(
          "arctan", 4, [](const Tensor& x) { return x.atan(); }, "atan({})",
          "\\operatorname{atan}{\\left({}\\right)}"),
      {"arctanh", 4, [](const Tensor& x) { return x.atanh(); }, arctanh_avoiding, "atanh({})",
       "\\operatorname{atanh}{\\left({}\\right)}"},
      smooth(
          "0", 0, [](const Tensor& x) { return x * 0; }, "0", "0"),
      smooth(
          "gaussian", 3, [](const Tensor& x) { return (-x.square()).exp(); }, "exp(-({})**2)",
          "e^{- \\left({}\\right)^{2}}"),
  };
}

struct Library {
  std::mutex mutex;
  std::vector<SymbolicFunction> functions = with_parities(pykan_library());
};

Library& library() {
  static Library instance;
  return instance;
}

} // namespace

const SymbolicFunction& symbolic_function(const std::string& name) {
  auto& lib = library();
  std::lock_guard<std::mutex> lock(lib.mutex);
  for (const auto& f : lib.functions)
    if (f.name == name)
      return f;
  std::string known;
  for (const auto& f : lib.functions)
    known += (known.empty() ? "" : ", ") + f.name;
  // The name may come from a checkpoint file: quoted in bounded length.
  TORCH_CHECK(false, "unknown symbolic function '", io::elided(name), "'; the library has ", known);
}

std::vector<std::string> symbolic_function_names() {
  auto& lib = library();
  std::lock_guard<std::mutex> lock(lib.mutex);
  std::vector<std::string> names;
  for (const auto& f : lib.functions)
    names.push_back(f.name);
  return names;
}

const std::vector<std::string>& symbolic_search_names() {
  static const std::vector<std::string> names{"pykan", "zoom", "newton"};
  return names;
}

SymbolicFitOptions symbolic_search(const std::string& name) {
  SymbolicFitOptions o;
  if (name == "pykan")
    return o;
  if (name == "zoom") {
    o.zoom_grid_number = 21;
    o.iterations = 5;
    return o;
  }
  if (name == "newton") {
    o.iterations = 1;
    o.newton_steps = 10;
    return o;
  }
  TORCH_CHECK(false, "unknown symbolic search '", io::elided(name),
              "': expected pykan, zoom or newton");
}

void add_symbolic_function(SymbolicFunction function) {
  TORCH_CHECK(!function.name.empty(), "add_symbolic_function: the name is empty");
  TORCH_CHECK(function.complexity >= 0, "add_symbolic_function('", function.name,
              "'): complexity must be >= 0, got ", function.complexity);
  TORCH_CHECK(static_cast<bool>(function.f), "add_symbolic_function('", function.name,
              "'): f is missing");
  if (!function.f_avoiding)
    function.f_avoiding = [f = function.f](const Tensor& x, double) { return f(x); };
  if (function.sympy.empty())
    function.sympy = function.name + "({})";
  if (function.latex.empty())
    function.latex = "\\operatorname{" + function.name + "}{\\left({}\\right)}";
  auto& lib = library();
  std::lock_guard<std::mutex> lock(lib.mutex);
  for (auto& f : lib.functions)
    if (f.name == function.name) {
      f = std::move(function);
      return;
    }
  lib.functions.push_back(std::move(function));
}

namespace {

// torch.linspace(lo[e], hi[e], steps) for every edge e at once, with torch's own arithmetic (the
// first half counted up from lo, the second down from hi), so the grid is pykan's to the bit.
Tensor grid_points(const Tensor& lo, const Tensor& hi, int64_t steps) {
  const auto index = torch::arange(steps, lo.options()).unsqueeze(0);
  const auto step = ((hi - lo) / (steps - 1)).unsqueeze(1);
  return torch::where(index < steps / 2, lo.unsqueeze(1) + index * step,
                      hi.unsqueeze(1) - (steps - 1 - index) * step);
}

// Where the search stands for E edges after one zoom: the grids a_, b_ (E, G), the flat index
// a_id * G + b_id of the best point (the first maximum, as torch.argmax) and its R^2 (E).
struct Zoom {
  Tensor a, b, best, r2;
};

// pykan's R^2 from the sums over the samples: cov^2 / (var * var + 1e-4), NaN counted as 0.
Tensor r_squared(const Tensor& covariance, const Tensor& post_ss, const Tensor& y_ss) {
  return torch::nan_to_num(covariance.square() / (post_ss * y_ss + 1e-4));
}
// The same in the covariances' place, for the first search's largest temporaries.
Tensor& r_squared_(Tensor& covariance, const Tensor& post_ss, const Tensor& y_ss) {
  return covariance.square_().div_(post_ss * y_ss + 1e-4).nan_to_num_();
}

// A range [lo, hi] as a (1, 2) tensor like `like`.
Tensor range_of(const std::array<double, 2>& range, const Tensor& like) {
  return detail::host_list(std::vector<double>{range[0], range[1]}, like.scalar_type(),
                           like.device())
      .view({1, 2});
}

// The first search, on one (a, b) grid for every edge: post = f(a x + b) is computed once per
// input column and correlated with the activations of all the edges on that column in one
// batched matrix product, so a layer's O outputs share their input's work. x (N, C); column[e]
// edge e's column; y_centered (N, E).
Zoom first_search(const Tensor& x, const std::vector<int64_t>& column, const Tensor& y_centered,
                  const Tensor& y_ss, const SymbolicFunction& function,
                  const SymbolicFitOptions& o) {
  const int64_t N = x.size(0), E = y_centered.size(1), G = o.grid_number;
  // The edges of each used column side by side, padded to the longest with the zero column E.
  std::vector<std::vector<int64_t>> by_column(static_cast<size_t>(x.size(1)));
  for (int64_t e = 0; e < E; ++e)
    by_column[static_cast<size_t>(column[static_cast<size_t>(e)])].push_back(e);
  std::vector<int64_t> used;
  size_t width = 0;
  for (size_t c = 0; c < by_column.size(); ++c)
    if (!by_column[c].empty()) {
      used.push_back(static_cast<int64_t>(c));
      width = std::max(width, by_column[c].size());
    }
  const auto U = static_cast<int64_t>(used.size()), W = static_cast<int64_t>(width);
  std::vector<int64_t> padded(used.size() * width, E), slot(static_cast<size_t>(E));
  for (size_t u = 0; u < used.size(); ++u) {
    const auto& edges = by_column[static_cast<size_t>(used[u])];
    for (size_t k = 0; k < edges.size(); ++k) {
      padded[u * width + k] = edges[k];
      slot[static_cast<size_t>(edges[k])] = static_cast<int64_t>(u * width + k);
    }
  }
  const auto device = x.device();
  const auto padded_index = detail::host_list(padded, torch::kLong, device);
  const auto y_padded = torch::cat({y_centered, torch::zeros({N, 1}, x.options())}, 1)
                            .index_select(1, padded_index)
                            .view({N, U, W})
                            .permute({1, 0, 2}); // (U, N, W)
  const auto y_ss_padded = torch::cat({y_ss, torch::zeros({1}, x.options())})
                               .index_select(0, padded_index)
                               .view({U, 1, W});
  const auto a_range = range_of(o.a_range, x), b_range = range_of(o.b_range, x);
  const auto a = grid_points(a_range.select(1, 0), a_range.select(1, 1), G); // (1, G)
  const auto b = grid_points(b_range.select(1, 0), b_range.select(1, 1), G);
  const auto a_flat = a.view({G, 1}).expand({G, G}).reshape({G * G}); // at a_id * G + b_id
  const auto b_flat = b.view({1, G}).expand({G, G}).reshape({G * G});
  const auto used_index = detail::host_list(used, torch::kLong, device);
  // A few (N, columns, G^2) temporaries and the (columns, G^2, W) covariances live at once. On
  // the CPU one column at a time: larger blocks are fresh pages on every allocation, whose faults
  // cost more than the arithmetic (with larger blocks, half of a deep model's auto_symbolic).
  const int64_t per_column = (N * 4 + W * 3) * G * G * x.element_size();
  const int64_t budget = x.is_cpu() ? 0 : o.memory_budget;
  const int64_t chunk = std::max<int64_t>(1, std::min(U, budget / per_column));
  std::vector<Tensor> best, r2;
  for (int64_t first = 0; first < U; first += chunk) {
    const int64_t count = std::min(chunk, U - first);
    const auto xs = x.index_select(1, used_index.narrow(0, first, count)); // (N, count)
    const auto post =
        function.f((xs.unsqueeze(2) * a_flat).add_(b_flat)); // (N, count, G^2), pykan's bits
    // Sums over the samples in pykan's order (sample by sample), which decides its ties.
    const auto centered = post - post.mean(0, true);
    const auto post_ss = centered.square().sum(0).unsqueeze(2); // (count, G^2, 1)
    auto covariance = torch::bmm(centered.permute({1, 2, 0}), y_padded.narrow(0, first, count));
    const auto [value, index] =
        r_squared_(covariance, post_ss, y_ss_padded.narrow(0, first, count)).max(1);
    best.push_back(index);
    r2.push_back(value);
  }
  const auto slots = detail::host_list(slot, torch::kLong, device);
  return {a.expand({E, G}), b.expand({E, G}), torch::cat(best).view({-1}).index_select(0, slots),
          torch::cat(r2).view({-1}).index_select(0, slots)};
}

// One zoomed search for a group of edges: x, y_centered (N, E); a_range, b_range (E, 2).
Zoom search(const Tensor& x, const Tensor& y_centered, const Tensor& y_ss, const Tensor& a_range,
            const Tensor& b_range, const SymbolicFunction& function, int64_t grid) {
  const auto a = grid_points(a_range.select(1, 0), a_range.select(1, 1), grid);
  const auto b = grid_points(b_range.select(1, 0), b_range.select(1, 1), grid);
  // post (N, E, G, G): f(a_i x + b_j), as pykan's post_fun per edge.
  const auto post = function.f(a.unsqueeze(2).unsqueeze(0) * x.unsqueeze(2).unsqueeze(3) +
                               b.unsqueeze(1).unsqueeze(0));
  const auto centered = post - post.mean(0, true);
  const auto covariance = (centered * y_centered.unsqueeze(2).unsqueeze(3)).sum(0);
  const auto r2 =
      r_squared(covariance, centered.square().sum(0), y_ss.unsqueeze(1).unsqueeze(2)).flatten(1);
  const auto best = r2.argmax(1); // the first maximum, as torch.argmax
  return {a, b, best, r2.gather(1, best.unsqueeze(1)).squeeze(1)};
}

// The new range of one dimension: around the best point, or the grid's first or last cell at
// the border, or unchanged when only the other dimension is at the border (pykan's rule).
Tensor zoom(const Tensor& grid_values, const Tensor& id, const Tensor& range,
            const Tensor& any_border, int64_t grid) {
  const auto pick = [&](const Tensor& index) {
    return grid_values.gather(1, index.clamp(0, grid - 1).unsqueeze(1)).squeeze(1);
  };
  const auto around = torch::stack({pick(id - 1), pick(id + 1)}, 1);
  const auto first = torch::stack({pick(torch::zeros_like(id)), pick(torch::ones_like(id))}, 1);
  const auto last =
      torch::stack({pick(torch::full_like(id, grid - 2)), pick(torch::full_like(id, grid - 1))}, 1);
  auto zoomed = torch::where(any_border.unsqueeze(1), range, around);
  zoomed = torch::where((id == 0).unsqueeze(1), first, zoomed);
  return torch::where((id == grid - 1).unsqueeze(1), last, zoomed);
}

// Both ranges narrowed around each edge's best point.
void zoom_in(const Zoom& z, Tensor& a_range, Tensor& b_range) {
  const int64_t grid = z.a.size(1);
  const auto a_id = torch::div(z.best, grid, "floor");
  const auto b_id = z.best.remainder(grid);
  const auto border = (a_id == 0) | (a_id == grid - 1) | (b_id == 0) | (b_id == grid - 1);
  a_range = zoom(z.a, a_id, a_range, border, grid);
  b_range = zoom(z.b, b_id, b_range, border, grid);
}

// R^2 of E edges at (a, b) with its gradient and Hessian in (a, b), by automatic
// differentiation of pykan's R^2 (so any library function, added ones too, has them).
struct Curvature {
  Tensor r2, ga, gb, haa, hab, hbb;
};

Curvature curvature(const Tensor& x, const Tensor& y_centered, const Tensor& y_ss,
                    const Tensor& a_at, const Tensor& b_at, const SymbolicFunction& function) {
  torch::AutoGradMode enable_grad(true);
  const auto a = a_at.detach().requires_grad_(), b = b_at.detach().requires_grad_();
  const auto post = function.f(a * x + b);
  const auto centered = post - post.mean(0, true);
  const auto r2 = r_squared((centered * y_centered).sum(0), centered.square().sum(0), y_ss);
  const auto zero = torch::zeros_like(r2);
  // A function that ignores its argument (pykan's 0) leaves R^2 without a graph.
  const auto derivatives = [&](const Tensor& of, const std::vector<Tensor>& wrt, bool retain) {
    if (!of.requires_grad())
      return std::vector<Tensor>(wrt.size(), zero);
    auto d = torch::autograd::grad({of.sum()}, wrt, {}, retain, false, true);
    for (auto& t : d)
      t = t.defined() ? torch::nan_to_num(t, 0.0, 0.0, 0.0).detach() : zero;
    return d;
  };
  const auto g = [&] {
    if (!r2.requires_grad())
      return std::vector<Tensor>{zero, zero};
    auto d = torch::autograd::grad({r2.sum()}, {a, b}, {}, true, true, true);
    for (auto& t : d)
      t = t.defined() ? t : zero;
    return d;
  }();
  const auto h_a = derivatives(g[0], {a, b}, true);
  const auto h_b = derivatives(g[1], {b}, false);
  const auto finite = [](const Tensor& t) { return torch::nan_to_num(t.detach(), 0.0, 0.0, 0.0); };
  return {r2.detach(), finite(g[0]), finite(g[1]), h_a[0], h_a[1], h_b[0]};
}

// Safeguarded Newton steps from the searches' best (a, b) of E edges: each step maximises R^2's
// quadratic model (or, where that has no maximum, climbs its gradient) within a box of half-widths
// radius_a, radius_b, clamped to the search ranges, and is kept only where R^2 does not fall by
// more than rounding; a refused step quarters the box.
void newton_refine(const Tensor& x, const Tensor& y_centered, const Tensor& y_ss, Tensor& a,
                   Tensor& b, Tensor& r2, Tensor radius_a, Tensor radius_b,
                   const SymbolicFunction& function, const SymbolicFitOptions& o) {
  const double epsilon = x.scalar_type() == torch::kFloat64 ? std::numeric_limits<double>::epsilon()
                                                            : std::numeric_limits<float>::epsilon();
  auto at = curvature(x, y_centered, y_ss, a, b, function);
  for (int64_t step = 0; step < o.newton_steps; ++step) {
    const auto det = at.haa * at.hbb - at.hab * at.hab;
    const auto has_maximum = (at.haa < 0) & (det > 0);
    const auto safe_det = torch::where(has_maximum, det, torch::ones_like(det));
    // Without a maximum, up the gradient to the box's edge.
    const auto slope = torch::maximum(at.ga.abs(), at.gb.abs());
    const auto safe_slope = torch::where(slope > 0, slope, torch::ones_like(slope));
    const auto da = torch::where(has_maximum, -(at.hbb * at.ga - at.hab * at.gb) / safe_det,
                                 at.ga / safe_slope * radius_a);
    const auto db = torch::where(has_maximum, -(at.haa * at.gb - at.hab * at.ga) / safe_det,
                                 at.gb / safe_slope * radius_b);
    const auto scale = torch::maximum(torch::maximum(da.abs() / radius_a, db.abs() / radius_b),
                                      torch::ones_like(da));
    const auto a_next = (a + da / scale).clamp(o.a_range[0], o.a_range[1]);
    const auto b_next = (b + db / scale).clamp(o.b_range[0], o.b_range[1]);
    auto next = curvature(x, y_centered, y_ss, a_next, b_next, function);
    // Not worse than rounding: near the maximum the last steps change R^2 by less than that.
    const auto better = next.r2 >= at.r2 * (1 - 4 * epsilon);
    const auto keep = [&](const Tensor& taken, const Tensor& kept) {
      return torch::where(better, taken, kept);
    };
    a = keep(a_next, a);
    b = keep(b_next, b);
    at = {keep(next.r2, at.r2),   keep(next.ga, at.ga),   keep(next.gb, at.gb),
          keep(next.haa, at.haa), keep(next.hab, at.hab), keep(next.hbb, at.hbb)};
    radius_a = keep(radius_a, radius_a / 4);
    radius_b = keep(radius_b, radius_b / 4);
  }
  r2 = at.r2;
}

void check_fit(const Tensor& x, const std::vector<int64_t>& column, const Tensor& y,
               const SymbolicFitOptions& o) {
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && y.size(0) == x.size(0) &&
                  y.size(1) == static_cast<int64_t>(column.size()),
              "fit_symbolic_params: x must be (N, columns) and y (N, edges) with one column per "
              "edge, got x ",
              x.sizes(), ", y ", y.sizes(), " and ", column.size(), " columns");
  for (size_t e = 0; e < column.size(); ++e)
    TORCH_CHECK(column[e] >= 0 && column[e] < x.size(1), "fit_symbolic_params: edge ", e,
                "'s column ", column[e], " is out of range (x has ", x.size(1), " columns)");
  TORCH_CHECK(x.size(0) >= 1, "fit_symbolic_params: no samples (x is ", x.sizes(), ")");
  TORCH_CHECK(x.is_floating_point() && y.scalar_type() == x.scalar_type() &&
                  y.device() == x.device(),
              "fit_symbolic_params: x and y must be floating and of one dtype and device, got ",
              x.scalar_type(), " on ", x.device(), " and ", y.scalar_type(), " on ", y.device());
  TORCH_CHECK(o.grid_number >= 3, "fit_symbolic_params: grid_number must be >= 3, got ",
              o.grid_number);
  TORCH_CHECK(o.iterations >= 1, "fit_symbolic_params: iterations must be >= 1, got ",
              o.iterations);
  TORCH_CHECK(o.zoom_grid_number == 0 || o.zoom_grid_number >= 3,
              "fit_symbolic_params: zoom_grid_number must be 0 (grid_number) or >= 3, got ",
              o.zoom_grid_number);
  TORCH_CHECK(o.newton_steps >= 0, "fit_symbolic_params: newton_steps must be >= 0, got ",
              o.newton_steps);
  TORCH_CHECK(o.a_range[0] < o.a_range[1] && o.b_range[0] < o.b_range[1],
              "fit_symbolic_params: a_range and b_range must be increasing, got [", o.a_range[0],
              ", ", o.a_range[1], "] and [", o.b_range[0], ", ", o.b_range[1], "]");
}

// The searches after the first, z's: each narrows every edge's ranges around its best point and
// searches them on a grid of G. xs (N, E) is each edge's inputs.
Zoom zoomed_searches(Zoom z, const Tensor& xs, const Tensor& y_centered, const Tensor& y_ss,
                     const SymbolicFunction& function, const SymbolicFitOptions& o, int64_t G) {
  const int64_t E = xs.size(1);
  auto a_range = range_of(o.a_range, xs).expand({E, 2});
  auto b_range = range_of(o.b_range, xs).expand({E, 2});
  // A few (N, group, G, G) temporaries live at once in a zoomed search (G its grid).
  const int64_t per_edge = xs.size(0) * G * G * xs.element_size() * 4;
  const int64_t group = std::max<int64_t>(1, std::min(E, o.memory_budget / per_edge));
  for (int64_t it = 1; it < o.iterations; ++it) {
    zoom_in(z, a_range, b_range);
    std::vector<Zoom> parts;
    for (int64_t first = 0; first < E; first += group) {
      const int64_t count = std::min(group, E - first);
      parts.push_back(search(xs.narrow(1, first, count), y_centered.narrow(1, first, count),
                             y_ss.narrow(0, first, count), a_range.narrow(0, first, count),
                             b_range.narrow(0, first, count), function, G));
    }
    const auto join = [&](Tensor Zoom::*field) {
      std::vector<Tensor> all;
      for (const auto& part : parts)
        all.push_back(part.*field);
      return torch::cat(all);
    };
    z = {join(&Zoom::a), join(&Zoom::b), join(&Zoom::best), join(&Zoom::r2)};
  }
  return z;
}

// newton_refine of every edge from the last grid's step, edges in groups: a few dozen
// (N, group) temporaries at once.
void newton_refine_all(const Zoom& z, const Tensor& xs, const Tensor& y_centered,
                       const Tensor& y_ss, Tensor& a_best, Tensor& b_best, Tensor& r2,
                       const SymbolicFunction& function, const SymbolicFitOptions& o) {
  const int64_t E = xs.size(1);
  const auto radius_a = z.a.select(1, 1) - z.a.select(1, 0);
  const auto radius_b = z.b.select(1, 1) - z.b.select(1, 0);
  const int64_t newton_group =
      std::max<int64_t>(1, std::min(E, o.memory_budget / (xs.size(0) * 64 * xs.element_size())));
  std::vector<Tensor> a_parts, b_parts, r2_parts;
  for (int64_t first = 0; first < E; first += newton_group) {
    const int64_t count = std::min(newton_group, E - first);
    auto a_part = a_best.narrow(0, first, count), b_part = b_best.narrow(0, first, count);
    auto r2_part = r2.narrow(0, first, count);
    newton_refine(xs.narrow(1, first, count), y_centered.narrow(1, first, count),
                  y_ss.narrow(0, first, count), a_part, b_part, r2_part,
                  radius_a.narrow(0, first, count), radius_b.narrow(0, first, count), function, o);
    a_parts.push_back(a_part);
    b_parts.push_back(b_part);
    r2_parts.push_back(r2_part);
  }
  a_best = torch::cat(a_parts);
  b_best = torch::cat(b_parts);
  r2 = torch::cat(r2_parts);
}

} // namespace

SymbolicFit fit_symbolic_params(const torch::Tensor& x, const torch::Tensor& y,
                                const SymbolicFunction& function, const SymbolicFitOptions& o) {
  TORCH_CHECK(x.dim() == 2 && y.sizes() == x.sizes(),
              "fit_symbolic_params: x and y must both be (N, edges), got ", x.sizes(), " and ",
              y.sizes());
  std::vector<int64_t> column(static_cast<size_t>(x.size(1)));
  std::iota(column.begin(), column.end(), 0);
  return fit_symbolic_params(x, column, y, function, o);
}

SymbolicFit fit_symbolic_params(const torch::Tensor& x, const std::vector<int64_t>& column,
                                const torch::Tensor& y, const SymbolicFunction& function,
                                const SymbolicFitOptions& o) {
  check_fit(x, column, y, o);
  const int64_t E = y.size(1), G = o.zoom_grid_number > 0 ? o.zoom_grid_number : o.grid_number;
  if (E == 0)
    return {torch::empty({0, 4}, x.options()), torch::empty({0}, x.options())};
  const auto y_centered = y - y.mean(0, true);
  const auto y_ss = y_centered.square().sum(0);
  auto z = first_search(x, column, y_centered, y_ss, function, o);
  const auto xs = x.index_select(1, detail::host_list(column, torch::kLong, x.device())); // (N, E)
  z = zoomed_searches(std::move(z), xs, y_centered, y_ss, function, o, G);
  const int64_t last_grid = z.a.size(1);
  auto a_best = z.a.gather(1, torch::div(z.best, last_grid, "floor").unsqueeze(1)).squeeze(1);
  auto b_best = z.b.gather(1, z.best.remainder(last_grid).unsqueeze(1)).squeeze(1);
  auto r2 = z.r2;
  if (o.newton_steps > 0)
    newton_refine_all(z, xs, y_centered, y_ss, a_best, b_best, r2, function, o);
  // c, d: least squares of y on f(a x + b) with an intercept (pykan: sklearn LinearRegression).
  const auto post = torch::nan_to_num(function.f(a_best * xs + b_best));
  const auto post_centered = post - post.mean(0, true);
  const auto variance = post_centered.square().sum(0);
  const auto covariance = (post_centered * y_centered).sum(0);
  const auto c = torch::where(variance > 0, covariance / variance, torch::zeros_like(variance));
  const auto d = y.mean(0) - c * post.mean(0);
  return {torch::stack({a_best, b_best, c, d}, 1), r2};
}

} // namespace kan
