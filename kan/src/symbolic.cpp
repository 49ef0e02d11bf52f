#include "kan/symbolic.h"

#include "detail/host_list.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <mutex>

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
  TORCH_CHECK(false, "unknown symbolic function '", name, "'; the library has ", known);
}

std::vector<std::string> symbolic_function_names() {
  auto& lib = library();
  std::lock_guard<std::mutex> lock(lib.mutex);
  std::vector<std::string> names;
  for (const auto& f : lib.functions)
    names.push_back(f.name);
  return names;
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

// One zoom of the grid search for a group of edges: x, y (N, E); lo, hi (E, 2) the a and b
// ranges. Returns the grids a_, b_ (E, G) and pykan's R^2 (E, G, G).
std::tuple<Tensor, Tensor, Tensor> search(const Tensor& x, const Tensor& y_centered,
                                          const Tensor& y_ss, const Tensor& lo, const Tensor& hi,
                                          const SymbolicFunction& function, int64_t grid) {
  const auto a = grid_points(lo.select(1, 0), hi.select(1, 0), grid);
  const auto b = grid_points(lo.select(1, 1), hi.select(1, 1), grid);
  // post (N, E, G, G): f(a_i x + b_j), as pykan's post_fun per edge.
  const auto post = function.f(a.unsqueeze(2).unsqueeze(0) * x.unsqueeze(2).unsqueeze(3) +
                               b.unsqueeze(1).unsqueeze(0));
  const auto centered = post - post.mean(0, true);
  const auto numerator = (centered * y_centered.unsqueeze(2).unsqueeze(3)).sum(0).square();
  const auto denominator = centered.square().sum(0) * y_ss.unsqueeze(1).unsqueeze(2);
  return {a, b, torch::nan_to_num(numerator / (denominator + 1e-4))};
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

SymbolicFit fit_group(const Tensor& x, const Tensor& y, const SymbolicFunction& function,
                      const SymbolicFitOptions& o) {
  const int64_t edges = x.size(1), grid = o.grid_number;
  auto a_range = detail::host_list(std::vector<double>{o.a_range[0], o.a_range[1]}, x.scalar_type(),
                                   x.device())
                     .expand({edges, 2});
  auto b_range = detail::host_list(std::vector<double>{o.b_range[0], o.b_range[1]}, x.scalar_type(),
                                   x.device())
                     .expand({edges, 2});
  const auto y_centered = y - y.mean(0, true);
  const auto y_ss = y_centered.square().sum(0);
  Tensor a, b, r2, a_id, b_id;
  for (int64_t it = 0; it < o.iterations; ++it) {
    std::tie(a, b, r2) =
        search(x, y_centered, y_ss, torch::stack({a_range.select(1, 0), b_range.select(1, 0)}, 1),
               torch::stack({a_range.select(1, 1), b_range.select(1, 1)}, 1), function, grid);
    const auto best = r2.flatten(1).argmax(1); // the first maximum, as torch.argmax
    a_id = torch::div(best, grid, "floor");
    b_id = best.remainder(grid);
    const auto border = (a_id == 0) | (a_id == grid - 1) | (b_id == 0) | (b_id == grid - 1);
    a_range = zoom(a, a_id, a_range, border, grid);
    b_range = zoom(b, b_id, b_range, border, grid);
  }
  const auto a_best = a.gather(1, a_id.unsqueeze(1)).squeeze(1);
  const auto b_best = b.gather(1, b_id.unsqueeze(1)).squeeze(1);
  const auto r2_best = r2.flatten(1).gather(1, (a_id * grid + b_id).unsqueeze(1)).squeeze(1);
  // c, d: least squares of y on f(a x + b) with an intercept (pykan: sklearn LinearRegression).
  const auto post = torch::nan_to_num(function.f(a_best * x + b_best));
  const auto post_centered = post - post.mean(0, true);
  const auto variance = post_centered.square().sum(0);
  const auto covariance = (post_centered * y_centered).sum(0);
  const auto c = torch::where(variance > 0, covariance / variance, torch::zeros_like(variance));
  const auto d = y.mean(0) - c * post.mean(0);
  return {torch::stack({a_best, b_best, c, d}, 1), r2_best};
}

} // namespace

SymbolicFit fit_symbolic_params(const torch::Tensor& x, const torch::Tensor& y,
                                const SymbolicFunction& function, const SymbolicFitOptions& o) {
  TORCH_CHECK(x.dim() == 2 && y.sizes() == x.sizes(),
              "fit_symbolic_params: x and y must both be (N, edges), got ", x.sizes(), " and ",
              y.sizes());
  TORCH_CHECK(x.size(0) >= 1, "fit_symbolic_params: no samples (x is ", x.sizes(), ")");
  TORCH_CHECK(x.is_floating_point() && y.scalar_type() == x.scalar_type() &&
                  y.device() == x.device(),
              "fit_symbolic_params: x and y must be floating and of one dtype and device, got ",
              x.scalar_type(), " on ", x.device(), " and ", y.scalar_type(), " on ", y.device());
  TORCH_CHECK(o.grid_number >= 3, "fit_symbolic_params: grid_number must be >= 3, got ",
              o.grid_number);
  TORCH_CHECK(o.iterations >= 1, "fit_symbolic_params: iterations must be >= 1, got ",
              o.iterations);
  TORCH_CHECK(o.a_range[0] < o.a_range[1] && o.b_range[0] < o.b_range[1],
              "fit_symbolic_params: a_range and b_range must be increasing, got [", o.a_range[0],
              ", ", o.a_range[1], "] and [", o.b_range[0], ", ", o.b_range[1], "]");
  const int64_t edges = x.size(1);
  if (edges == 0)
    return {torch::empty({0, 4}, x.options()), torch::empty({0}, x.options())};
  // A few (N, group, G, G) temporaries live at once in the search.
  const int64_t per_edge = x.size(0) * o.grid_number * o.grid_number * x.element_size() * 4;
  const int64_t group = std::max<int64_t>(1, std::min(edges, o.memory_budget / per_edge));
  std::vector<Tensor> params, r2;
  for (int64_t first = 0; first < edges; first += group) {
    const int64_t count = std::min(group, edges - first);
    auto fit = fit_group(x.narrow(1, first, count), y.narrow(1, first, count), function, o);
    params.push_back(fit.params);
    r2.push_back(fit.r2);
  }
  return {torch::cat(params), torch::cat(r2)};
}

} // namespace kan
