// pykan 0.2.8's kan/LBFGS.py in C++. pykan's file is PyTorch's torch/optim/lbfgs.py (itself a
// port of minFunc and of Lua torch's optim) with three changes, marked "pykan:" below:
// tolerance_ys, a line search of 25 evaluations whatever max_eval says, and a global
// torch.manual_seed(0) at every step. The code follows the Python statement by statement and in
// its order, so that float64 runs round as pykan's do (tests/test_lbfgs.cpp: bit for bit). The
// scalars pykan keeps as 0-dim tensors and compares (t, gtd, the line search's values) are
// doubles here: the same numbers in float64, while in float32 pykan rounds some to float32.
#include "kan/optim/lbfgs.h"

#include "kernels/cpu_dispatch.h"

#include <ATen/ATen.h>
#include <torch/optim/serialize.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

namespace kan {
namespace {

using torch::Tensor;

// ---- Vector arithmetic on the host ------------------------------------------------------------
// A small model's LBFGS step is made of the optimiser's vector operations as much as of its
// objective: the two-loop recursion alone is four tensor operations per history entry and
// iteration. On the CPU they run as plain loops with ATen's own arithmetic
// (kernels/cpu_dispatch.h), so the numbers are the same bit for bit: ATen's dot is BLAS's ?dot_
// (which LibTorch exports), its add with alpha (add_, _foreach_add_) one fused multiply-add per
// element. Where the BLAS function is missing or disagrees with at::dot (another LibTorch build),
// and for vectors long enough that ATen's threads win, the tensor operations run.

constexpr int64_t kHostVectorLimit = 1 << 16;

// Whether t's arithmetic runs on the host: a contiguous float or double CPU vector, short.
bool on_host(const Tensor& t) {
  if (!t.is_cpu() || !t.is_contiguous() || t.numel() > kHostVectorLimit)
    return false;
  if (t.scalar_type() == at::kDouble)
    return detail::host_dot<double>() != nullptr;
  return t.scalar_type() == at::kFloat && detail::host_dot<float>() != nullptr;
}

bool on_host(const Tensor& a, const Tensor& b) {
  return on_host(a) && on_host(b) && a.scalar_type() == b.scalar_type();
}

// f(T{}) with T t's dtype, of those on_host takes.
template <typename F> void dispatch_host(const Tensor& t, F&& f) {
  if (t.scalar_type() == at::kDouble)
    f(double{});
  else
    f(float{});
}

// a.dot(b).item<double>().
double dot_value(const Tensor& a, const Tensor& b) {
  if (!on_host(a, b))
    return a.dot(b).item<double>();
  double result = 0;
  dispatch_host(a, [&](auto zero) {
    using T = decltype(zero);
    const int n = static_cast<int>(a.numel()), one = 1;
    result = detail::host_dot<T>()(&n, a.const_data_ptr<T>(), &one, b.const_data_ptr<T>(), &one);
  });
  return result;
}

// self += alpha * other[other_offset ...], over self's elements, alpha rounded to self's dtype
// (the host's add_).
void add_scaled(const Tensor& self, const Tensor& other, int64_t other_offset, double alpha) {
  dispatch_host(self, [&](auto zero) {
    using T = decltype(zero);
    T* s = self.mutable_data_ptr<T>();
    const T* o = other.const_data_ptr<T>() + other_offset;
    detail::host_add_scaled(s, o, static_cast<T>(alpha), self.numel());
  });
  self.unsafeGetTensorImpl()->bump_version(); // as an in-place tensor operation does
}

// self.add_(other, alpha).
void add_scaled(const Tensor& self, const Tensor& other, double alpha) {
  if (on_host(self, other))
    add_scaled(self, other, 0, alpha);
  else
    self.add_(other, alpha);
}

// t.mul(scale).abs().max().item<double>(): the largest |t * scale|, scale rounded to t's dtype
// as a tensor operation rounds it (NaN where t has one).
double max_abs(const Tensor& t, double scale = 1) {
  if (!on_host(t))
    return (scale == 1 ? t : t.mul(scale)).abs().max().item<double>();
  double largest = 0;
  dispatch_host(t, [&](auto zero) {
    using T = decltype(zero);
    const T* v = t.const_data_ptr<T>();
    const T s = static_cast<T>(scale);
    for (int64_t j = 0; j < t.numel() && !std::isnan(largest); ++j) {
      const double a = std::abs(static_cast<double>(scale == 1 ? v[j] : static_cast<T>(v[j] * s)));
      largest = std::isnan(a) || a > largest ? a : largest;
    }
  });
  return largest;
}

// A new host vector of a's dtype and length with out[j] = f(a[j], b[j]) (b of a's length), for
// the elementwise steps of an iteration: a tensor operation costs more to dispatch than to run
// on a small model's hundred parameters. f computes in the dtype, as the operation would.
template <typename F> Tensor host_elementwise(const Tensor& a, const Tensor& b, F&& f) {
  auto out = at::empty({a.numel()}, a.options());
  dispatch_host(a, [&](auto zero) {
    using T = decltype(zero);
    const T* x = a.const_data_ptr<T>();
    const T* y = b.const_data_ptr<T>();
    T* o = out.mutable_data_ptr<T>();
    for (int64_t j = 0; j < a.numel(); ++j)
      o[j] = f(x[j], y[j]);
  });
  return out;
}

// host_elementwise of a alone: out[j] = f(a[j]).
template <typename F> Tensor host_elementwise(const Tensor& a, F&& f) {
  return host_elementwise(a, a, [&f](auto v, auto) { return f(v); });
}

// parts[i] (contiguous host tensors, or undefined for zeros) one after another in a new flat
// vector of numel elements with shapes[0]'s options, part i taking shapes[i].numel() elements.
Tensor host_concat(const std::vector<Tensor>& shapes, const std::vector<Tensor>& parts,
                   int64_t numel) {
  auto flat = at::empty({numel}, shapes[0].options());
  auto* out = static_cast<char*>(flat.mutable_data_ptr());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const size_t bytes = static_cast<size_t>(shapes[i].numel()) * shapes[i].element_size();
    if (parts[i].defined())
      std::memcpy(out, parts[i].const_data_ptr(), bytes);
    else
      std::memset(out, 0, bytes);
    out += bytes;
  }
  return flat;
}

// A 0-dim tensor like `like` holding v rounded to its dtype.
Tensor host_scalar(double v, const Tensor& like) {
  auto out = at::empty({}, like.options());
  dispatch_host(like, [&](auto zero) { *out.mutable_data_ptr<decltype(zero)>() = v; });
  return out;
}

// A 0-dim tensor's value.
double value(const Tensor& scalar) {
  if (!on_host(scalar))
    return scalar.item<double>();
  double result = 0;
  dispatch_host(scalar, [&](auto zero) { result = *scalar.const_data_ptr<decltype(zero)>(); });
  return result;
}

// _cubic_interpolate: the minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1
// and g2, clamped to the bounds ([x1, x2] unless given); their middle where the cubic has none.
// std::min and std::max pick as Python's min and max do, NaN included.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  double xmin_bound = 0, xmax_bound = 0;
  if (bounds) {
    std::tie(xmin_bound, xmax_bound) = *bounds;
  } else if (x1 <= x2) {
    xmin_bound = x1;
    xmax_bound = x2;
  } else {
    xmin_bound = x2;
    xmax_bound = x1;
  }
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2; // d1 is a tensor there: d1**2 is d1 * d1
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    double min_pos = 0;
    if (x1 <= x2) {
      min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2));
    } else {
      min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    }
    return std::min(std::max(min_pos, xmin_bound), xmax_bound);
  }
  return (xmin_bound + xmax_bound) / 2.;
}

struct LineSearch {
  double loss;
  Tensor flat_grad;
  double t;
  int64_t func_evals;
};

// The objective and its flat gradient at x + t * d.
using Objective =
    std::function<std::pair<double, Tensor>(const std::vector<Tensor>&, double, const Tensor&)>;

// What _strong_wolfe's two phases share: the objective along d with its value, gradient and
// directional derivative at t = 0, the Wolfe constants, the counts, and the bracket as pykan
// keeps it, in four parallel lists.
struct WolfeSearch {
  const Objective& obj_func;
  const std::vector<Tensor>& x;
  const Tensor& d;
  double f;
  const Tensor& g;
  double gtd;
  double c1;
  double c2;
  int64_t max_ls;
  int64_t ls_func_evals = 0;
  int64_t ls_iter = 0;
  bool done = false;
  std::vector<double> bracket{}, bracket_f{}, bracket_gtd{};
  std::vector<Tensor> bracket_g{};

  // The objective, its gradient and the directional derivative at x + t * d.
  std::tuple<double, Tensor, double> evaluate(double t) {
    auto [f_new, g_new] = obj_func(x, t, d);
    ls_func_evals += 1;
    const double gtd_new = dot_value(g_new, d);
    return {f_new, g_new, gtd_new};
  }
};

// The bracketing phase: from the initial step t, steps grow by cubic extrapolation until two
// of them bracket a point satisfying the strong Wolfe conditions, or one satisfies them (done).
void bracket_phase(WolfeSearch& s, double t) {
  // evaluate objective and gradient using initial step
  auto [f_new, g_new, gtd_new] = s.evaluate(t);

  // bracket an interval containing a point satisfying the Wolfe criteria
  double t_prev = 0, f_prev = s.f, gtd_prev = s.gtd;
  Tensor g_prev = s.g;
  while (s.ls_iter < s.max_ls) {
    // check conditions
    if (f_new > (s.f + s.c1 * t * s.gtd) || (s.ls_iter > 1 && f_new >= f_prev)) {
      s.bracket = {t_prev, t};
      s.bracket_f = {f_prev, f_new};
      s.bracket_g = {g_prev, g_new};
      s.bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::abs(gtd_new) <= -s.c2 * s.gtd) {
      s.bracket = {t};
      s.bracket_f = {f_new};
      s.bracket_g = {g_new};
      s.done = true;
      break;
    }
    if (gtd_new >= 0) {
      s.bracket = {t_prev, t};
      s.bracket_f = {f_prev, f_new};
      s.bracket_g = {g_prev, g_new};
      s.bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // interpolate
    const double min_step = t + 0.01 * (t - t_prev);
    const double max_step = t * 10;
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::make_pair(min_step, max_step));
    // next step
    t_prev = tmp;
    f_prev = f_new;
    g_prev = g_new;
    gtd_prev = gtd_new;
    std::tie(f_new, g_new, gtd_new) = s.evaluate(t);
    s.ls_iter += 1;
  }
  // reached max number of iterations? (bracket_gtd is then unused: the zoom does not run)
  if (s.ls_iter == s.max_ls) {
    s.bracket = {0, t};
    s.bracket_f = {s.f, f_new};
    s.bracket_g = {s.g, g_new};
  }
}

// The zoom phase's trial step t, kept off the bracket's ends.
double away_from_ends(double t, const std::vector<double>& bracket, bool& insuf_progress) {
  // test that we are making sufficient progress: in case `t` is so close to boundary, we mark
  // that we are making insufficient progress, and if we have made insufficient progress in
  // the last step, or `t` is at one of the boundary, we will move `t` to a position which is
  // `0.1 * len(bracket)` away from the nearest boundary point.
  const double bracket_max = std::max(bracket[0], bracket[1]);
  const double bracket_min = std::min(bracket[0], bracket[1]);
  const double eps = 0.1 * (bracket_max - bracket_min);
  if (std::min(bracket_max - t, t - bracket_min) < eps) {
    // interpolation close to boundary
    if (insuf_progress || t >= bracket_max || t <= bracket_min) {
      // evaluate at 0.1 away from boundary
      if (std::abs(t - bracket_max) < std::abs(t - bracket_min)) {
        t = bracket_max - eps;
      } else {
        t = bracket_min + eps;
      }
      insuf_progress = false;
    } else {
      insuf_progress = true;
    }
  } else {
    insuf_progress = false;
  }
  return t;
}

// The zoom phase: we now have a point satisfying the criteria, or a bracket around it. We refine
// the bracket until we find the exact point satisfying the criteria. Returns the position of the
// bracket's low point.
size_t zoom_phase(WolfeSearch& s, double d_norm, double tolerance_change) {
  auto& bracket = s.bracket;
  auto& bracket_f = s.bracket_f;
  auto& bracket_g = s.bracket_g;
  auto& bracket_gtd = s.bracket_gtd;
  bool insuf_progress = false;
  // find high and low points in bracket
  size_t low_pos = 0, high_pos = 1;
  if (!(bracket_f[0] <= bracket_f.back()))
    std::swap(low_pos, high_pos);
  while (!s.done && s.ls_iter < s.max_ls) {
    // line-search bracket is so small
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change)
      break;
    // compute new trial value
    double t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                                 bracket_gtd[1]);
    t = away_from_ends(t, bracket, insuf_progress);
    // Evaluate new point
    const auto [f_new, g_new, gtd_new] = s.evaluate(t);
    s.ls_iter += 1;

    if (f_new > (s.f + s.c1 * t * s.gtd) || f_new >= bracket_f[low_pos]) {
      // Armijo condition not satisfied or not lower than lowest point
      bracket[high_pos] = t;
      bracket_f[high_pos] = f_new;
      bracket_g[high_pos] = g_new;
      bracket_gtd[high_pos] = gtd_new;
      low_pos = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high_pos = 1 - low_pos;
    } else {
      if (std::abs(gtd_new) <= -s.c2 * s.gtd) {
        // Wolfe conditions satisfied
        s.done = true;
      } else if (gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0) {
        // old low becomes new high
        bracket[high_pos] = bracket[low_pos];
        bracket_f[high_pos] = bracket_f[low_pos];
        bracket_g[high_pos] = bracket_g[low_pos];
        bracket_gtd[high_pos] = bracket_gtd[low_pos];
      }
      // new point becomes new low
      bracket[low_pos] = t;
      bracket_f[low_pos] = f_new;
      bracket_g[low_pos] = g_new;
      bracket_gtd[low_pos] = gtd_new;
    }
  }
  return low_pos;
}

// _strong_wolfe: a step t along d satisfying the strong Wolfe conditions, by bracketing and
// then zooming with cubic interpolation. Its tolerance_change is its own default, not the
// optimiser's (in PyTorch's too). pykan: max_ls stays 25, where PyTorch's lbfgs.py now passes
// max_eval - current_evals. pykan clones gradients that nothing writes into; not here.
LineSearch strong_wolfe(const Objective& obj_func, const std::vector<Tensor>& x, double t,
                        const Tensor& d, double f, const Tensor& g, double gtd, double c1 = 1e-4,
                        double c2 = 0.9, double tolerance_change = 1e-9, int64_t max_ls = 25) {
  const double d_norm = max_abs(d);
  WolfeSearch search{obj_func, x, d, f, g, gtd, c1, c2, max_ls};
  bracket_phase(search, t);
  const size_t low_pos = zoom_phase(search, d_norm, tolerance_change);
  // the bracket is one point where the bracketing phase found it
  const size_t pick = search.bracket.size() == 1 ? 0 : low_pos;
  return {search.bracket_f[pick], search.bracket_g[pick], search.bracket[pick],
          search.ls_func_evals};
}

void check_options(const LBFGSOptions& o) {
  TORCH_CHECK(std::isfinite(o.lr()) && o.lr() > 0,
              "kan::LBFGS: lr must be a positive finite number, got ", o.lr());
  TORCH_CHECK(o.max_iter() >= 1, "kan::LBFGS: max_iter must be >= 1, got ", o.max_iter());
  TORCH_CHECK(!o.max_eval() || *o.max_eval() >= 1,
              "kan::LBFGS: max_eval must be >= 1 or unset (max_iter * 5 / 4), got ",
              o.max_eval().value_or(0));
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"tolerance_grad", o.tolerance_grad()},
        {"tolerance_change", o.tolerance_change()},
        {"tolerance_ys", o.tolerance_ys()}}) {
    // A NaN tolerance would compare false everywhere and switch its test off unseen.
    TORCH_CHECK(std::isfinite(value) && value >= 0, "kan::LBFGS: ", name,
                " must be a finite number >= 0, got ", value);
  }
  TORCH_CHECK(o.history_size() >= 1, "kan::LBFGS: history_size must be >= 1, got ",
              o.history_size());
  TORCH_CHECK(!o.line_search_fn() || *o.line_search_fn() == "strong_wolfe",
              "kan::LBFGS: line_search_fn must be \"strong_wolfe\" or unset, got \"",
              o.line_search_fn().value_or(""), "\"");
}

// NOTE: LBFGS has only global state, but we register it as state for the first param, because
// this helps with casting in load_state_dict
torch::optim::LBFGSParamState& global_state(torch::optim::Optimizer& optimizer) {
  auto& slot = optimizer.state()[optimizer.param_groups()[0].params()[0].unsafeGetTensorImpl()];
  if (!slot)
    slot = std::make_unique<torch::optim::LBFGSParamState>();
  auto* state = dynamic_cast<torch::optim::LBFGSParamState*>(slot.get());
  TORCH_CHECK(state != nullptr, "kan::LBFGS: the state of its first parameter is not "
                                "torch::optim::LBFGSParamState (loaded from another optimizer?)");
  return *state;
}

// The lbfgs update (update memory): the last step's curvature pair (y, s) joins the history and
// rescales the initial Hessian approximation H_diag.
void update_history(torch::optim::LBFGSParamState& state, const Tensor& y, const Tensor& s,
                    const LBFGSOptions& options, Tensor& H_diag) {
  const bool host = on_host(y, s);
  const Tensor ys = host ? host_scalar(dot_value(y, s), y) : y.dot(s); // y*s
  // pykan: tolerance_ys (1e-32 by default) where PyTorch's LBFGS, LibTorch's too, skips
  // every pair with y·s <= 1e-10: near convergence in float64, that can be all of them.
  if (value(ys) > options.tolerance_ys()) {
    // updating memory
    if (static_cast<int64_t>(state.old_dirs().size()) == options.history_size()) {
      // shift history by one (limited-memory)
      state.old_dirs().pop_front();
      state.old_stps().pop_front();
      state.ro().pop_front();
    }
    // store new direction/step
    state.old_dirs().push_back(y);
    state.old_stps().push_back(s);
    // update scale of initial Hessian approximation
    if (host) { // the same quotients in the dtype
      dispatch_host(y, [&](auto zero) {
        using T = decltype(zero);
        const T ys_value = static_cast<T>(value(ys));
        state.ro().push_back(host_scalar(T(1) / ys_value, y));
        H_diag = host_scalar(ys_value / static_cast<T>(dot_value(y, y)), y); // (y*y)
      });
    } else {
      state.ro().push_back(ys.reciprocal());
      H_diag = ys / y.dot(y); // (y*y)
    }
  }
}

// lbfgs_direction where the vectors are not host arrays (a GPU's, or long ones): pykan's 0-dim
// tensors stay tensors, so the two loops queue their operations without reading a number back
// (pykan's `alpha=-al[i]` copies each one to the host, one synchronisation per history entry
// and loop). q + (-1) dir al is q - al dir as pykan's add_ computes it, the negation exact.
Tensor lbfgs_direction_on_device(const Tensor& flat_grad,
                                 const torch::optim::LBFGSParamState& state, const Tensor& H_diag) {
  const auto& old_dirs = state.old_dirs();
  const auto& old_stps = state.old_stps();
  const auto& ro = state.ro();
  const auto num_old = static_cast<int64_t>(old_dirs.size());
  std::vector<Tensor> al(static_cast<size_t>(num_old));
  Tensor q = flat_grad.neg();
  for (int64_t i = num_old - 1; i > -1; --i) {
    al[i] = old_stps[i].dot(q) * ro[i];
    q.addcmul_(old_dirs[i], al[i], -1);
  }
  Tensor r = torch::mul(q, H_diag);
  for (int64_t i = 0; i < num_old; ++i) {
    const Tensor be_i = old_dirs[i].dot(r) * ro[i];
    r.addcmul_(old_stps[i], al[i] - be_i);
  }
  return r;
}

// The approximate (L-BFGS) inverse Hessian multiplied by the negative gradient: the two-loop
// recursion over the history.
Tensor lbfgs_direction(const Tensor& flat_grad, const torch::optim::LBFGSParamState& state,
                       const Tensor& H_diag) {
  if (!on_host(flat_grad))
    return lbfgs_direction_on_device(flat_grad, state, H_diag);
  const auto& old_dirs = state.old_dirs();
  const auto& old_stps = state.old_stps();
  const auto num_old = static_cast<int64_t>(old_dirs.size());

  // iteration in L-BFGS loop collapsed to use just one buffer. pykan multiplies and
  // subtracts its 0-dim tensors: here the same products and differences of the same numbers
  // on the host, rounded to the parameters' dtype as a tensor operation would be, without
  // two operations per history entry and loop.
  const bool single = flat_grad.scalar_type() == at::kFloat;
  const auto times = [single](double a, double b) {
    return single ? static_cast<double>(static_cast<float>(a) * static_cast<float>(b)) : a * b;
  };
  const auto minus = [single](double a, double b) {
    return single ? static_cast<double>(static_cast<float>(a) - static_cast<float>(b)) : a - b;
  };
  std::vector<double> ro_values(static_cast<size_t>(num_old)), al(ro_values.size());
  for (int64_t i = 0; i < num_old; ++i)
    ro_values[i] = value(state.ro()[i]);
  Tensor q = host_elementwise(flat_grad, [](auto g) { return -g; });
  for (int64_t i = num_old - 1; i > -1; --i) {
    al[i] = times(dot_value(old_stps[i], q), ro_values[i]);
    add_scaled(q, old_dirs[i], -al[i]);
  }

  // multiply by initial Hessian; r/d is the final direction
  const double h = value(H_diag);
  Tensor r = host_elementwise(q, [h](auto v) { return v * static_cast<decltype(v)>(h); });
  for (int64_t i = 0; i < num_old; ++i) {
    const double be_i = times(dot_value(old_dirs[i], r), ro_values[i]);
    add_scaled(r, old_stps[i], minus(al[i], be_i));
  }
  return r;
}

} // namespace

LBFGSOptions::LBFGSOptions(double lr) : lr_(lr) {}

void LBFGSOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_iter);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_eval);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(tolerance_grad);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(tolerance_change);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(tolerance_ys);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(history_size);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(line_search_fn);
}

void LBFGSOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, max_iter);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG_OPTIONAL(int64_t, max_eval);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, tolerance_grad);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, tolerance_change);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, tolerance_ys);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, history_size);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG_OPTIONAL(std::string, line_search_fn);
}

double LBFGSOptions::get_lr() const {
  return lr();
}

void LBFGSOptions::set_lr(const double lr) {
  this->lr(lr);
}

LBFGS::LBFGS(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
             LBFGSOptions defaults)
    : Optimizer(param_groups, std::make_unique<LBFGSOptions>(defaults)) {
  TORCH_CHECK(param_groups_.size() == 1,
              "kan::LBFGS takes one parameter group (LBFGS has no per-parameter options), got ",
              param_groups_.size());
  auto* options = dynamic_cast<LBFGSOptions*>(&param_groups_[0].options());
  TORCH_CHECK(options != nullptr, "kan::LBFGS: the parameter group's options must be "
                                  "kan::LBFGSOptions");
  check_options(*options);
  TORCH_CHECK(!param_groups_[0].params().empty(), "kan::LBFGS needs at least one parameter");
  if (!options->max_eval()) {
    options->max_eval(options->max_iter() * 5 / 4);
    static_cast<LBFGSOptions&>(*defaults_).max_eval(options->max_eval());
  }
}

LBFGS::LBFGS(std::vector<torch::Tensor> params, LBFGSOptions defaults)
    : LBFGS({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

int64_t LBFGS::numel() {
  if (!numel_cache_) {
    int64_t total = 0;
    for (const auto& p : param_groups_[0].params())
      total += p.numel();
    numel_cache_ = total;
  }
  return *numel_cache_;
}

// A parameter without a gradient (not part of the objective) contributes zeros.
Tensor LBFGS::gather_flat_grad() {
  const auto& params = param_groups_[0].params();
  const bool host = host_vectors_ && std::all_of(params.begin(), params.end(), [](const auto& p) {
                      const auto& grad = p.grad();
                      return !grad.defined() || (grad.layout() == at::kStrided && on_host(grad, p));
                    });
  if (host) {
    std::vector<Tensor> grads;
    for (const auto& p : params)
      grads.push_back(p.grad());
    return host_concat(params, grads, numel());
  }
  std::vector<Tensor> views;
  for (const auto& p : param_groups_[0].params()) {
    const auto& grad = p.grad();
    if (!grad.defined()) {
      views.push_back(torch::zeros({p.numel()}, p.options()));
    } else if (grad.is_sparse()) {
      views.push_back(grad.to_dense().reshape(-1));
    } else {
      views.push_back(grad.reshape(-1));
    }
  }
  return torch::cat(views, 0);
}

void LBFGS::view_parameters() {
  flat_views_.clear();
  numels_.clear();
  const auto& params = param_groups_[0].params();
  host_vectors_ = numel() <= kHostVectorLimit;
  for (const auto& p : params) {
    TORCH_CHECK(p.is_contiguous(), "kan::LBFGS: parameters must be contiguous, one of shape ",
                p.sizes(), " is not");
    flat_views_.push_back(p.view({-1}));
    numels_.push_back(p.numel());
    host_vectors_ = host_vectors_ && on_host(p, params[0]);
  }
}

// p += step_size * update, for every parameter in one operation (the same arithmetic as one
// add_ per parameter).
void LBFGS::add_grad(double step_size, const Tensor& update) {
  TORCH_INTERNAL_ASSERT(update.numel() == numel());
  if (!host_vectors_ || !on_host(update, flat_views_[0])) {
    at::_foreach_add_(flat_views_, update.split_with_sizes(numels_), step_size);
    return;
  }
  int64_t offset = 0;
  for (const auto& view : flat_views_) {
    add_scaled(view, update, offset, step_size);
    offset += view.numel();
  }
}

// The parameters as one flat tensor.
std::vector<Tensor> LBFGS::clone_param() {
  if (!host_vectors_)
    return {at::cat(flat_views_)};
  return {host_concat(flat_views_, flat_views_, numel())};
}

void LBFGS::set_param(const std::vector<Tensor>& params_data) {
  const auto& flat = params_data.front();
  if (!host_vectors_ || !on_host(flat, flat_views_[0])) {
    at::_foreach_copy_(flat_views_, flat.split_with_sizes(numels_));
    return;
  }
  const auto* in = static_cast<const char*>(flat.const_data_ptr());
  for (const auto& view : flat_views_) {
    const size_t bytes = static_cast<size_t>(view.numel()) * view.element_size();
    std::memcpy(view.mutable_data_ptr(), in, bytes);
    view.unsafeGetTensorImpl()->bump_version();
    in += bytes;
  }
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const LossClosure& closure,
                                                      const std::vector<Tensor>& x, double t,
                                                      const Tensor& d) {
  add_grad(t, d);
  const double loss = closure().item<double>();
  auto flat_grad = gather_flat_grad();
  set_param(x);
  return {loss, flat_grad};
}

Tensor LBFGS::step(LossClosure closure) {
  TORCH_CHECK(closure != nullptr, "kan::LBFGS::step needs a closure that zeroes the gradients, "
                                  "evaluates the objective, runs backward and returns it");
  // pykan: torch.manual_seed(0) here, at every step. The closure draws nothing, so it changes
  // no number of the algorithm; resetting the caller's global generator is left out.
  torch::NoGradGuard no_grad;
  // Make sure the closure is always called with grad enabled
  const LossClosure evaluate = [&closure] {
    torch::AutoGradMode enable_grad(true);
    return closure();
  };

  TORCH_INTERNAL_ASSERT(param_groups_.size() == 1);
  const auto& group = static_cast<const LBFGSOptions&>(param_groups_[0].options());
  auto& state = global_state(*this);

  view_parameters();
  // evaluate initial f(x) and df/dx
  const Tensor orig_loss = evaluate();
  const double loss = orig_loss.item<double>();
  state.func_evals(state.func_evals() + 1);

  Tensor flat_grad = gather_flat_grad();
  const bool opt_cond = max_abs(flat_grad) <= group.tolerance_grad();

  // optimal condition
  if (opt_cond)
    return orig_loss;
  iterate(evaluate, state, loss, std::move(flat_grad));
  return orig_loss;
}

void LBFGS::iterate(const LossClosure& evaluate, torch::optim::LBFGSParamState& state, double loss,
                    Tensor flat_grad) {
  const auto& group = static_cast<const LBFGSOptions&>(param_groups_[0].options());
  const double lr = group.lr();
  const int64_t max_iter = group.max_iter();
  const int64_t max_eval = group.max_eval().value_or(max_iter * 5 / 4);
  const double tolerance_grad = group.tolerance_grad();
  const double tolerance_change = group.tolerance_change();
  int64_t current_evals = 1; // step()'s first evaluation

  // The history is changed in place, as pykan changes its lists; the rest is stored at the end.
  Tensor d = state.d();
  double t = state.t();
  Tensor H_diag = state.H_diag();
  Tensor prev_flat_grad = state.prev_flat_grad();
  double prev_loss = state.prev_loss();

  int64_t n_iter = 0;
  // optimize for a max of max_iter iterations
  while (n_iter < max_iter) {
    // keep track of nb of iterations
    n_iter += 1;
    state.n_iter(state.n_iter() + 1);

    // compute gradient descent direction
    if (state.n_iter() == 1) {
      d = flat_grad.neg();
      state.old_dirs().clear();
      state.old_stps().clear();
      state.ro().clear();
      // pykan's is the number 1; a scalar on the parameters' device multiplies alike.
      H_diag = torch::ones({}, flat_grad.options());
    } else {
      // do lbfgs update (update memory)
      const bool host = on_host(flat_grad, prev_flat_grad) && on_host(d, flat_grad);
      const Tensor y =
          host ? host_elementwise(flat_grad, prev_flat_grad, [](auto g, auto p) { return g - p; })
               : flat_grad.sub(prev_flat_grad);
      const Tensor s =
          host ? host_elementwise(d, [t](auto v) { return v * static_cast<decltype(v)>(t); })
               : d.mul(t);
      update_history(state, y, s, group, H_diag);
      d = lbfgs_direction(flat_grad, state, H_diag);
    }

    if (!prev_flat_grad.defined()) {
      prev_flat_grad = flat_grad.clone(at::MemoryFormat::Contiguous);
    } else if (on_host(prev_flat_grad, flat_grad)) {
      std::memcpy(prev_flat_grad.mutable_data_ptr(), flat_grad.const_data_ptr(),
                  flat_grad.nbytes());
      prev_flat_grad.unsafeGetTensorImpl()->bump_version();
    } else {
      prev_flat_grad.copy_(flat_grad);
    }
    prev_loss = loss;

    // compute step length: reset initial guess for step size
    if (state.n_iter() == 1) {
      t = std::min(1., 1. / flat_grad.abs().sum().item<double>()) * lr;
    } else {
      t = lr;
    }

    // directional derivative
    const double gtd = dot_value(flat_grad, d); // g * d

    // directional derivative is below tolerance
    if (gtd > -tolerance_change)
      break;

    const int64_t ls_func_evals =
        take_step(evaluate, d, gtd, n_iter == max_iter, t, loss, flat_grad);
    // update func eval
    current_evals += ls_func_evals;
    state.func_evals(state.func_evals() + ls_func_evals);

    // check conditions
    if (n_iter == max_iter || current_evals >= max_eval)
      break;
    // optimal condition
    if (max_abs(flat_grad) <= tolerance_grad)
      break;
    // lack of progress
    if (max_abs(d, t) <= tolerance_change || std::abs(loss - prev_loss) < tolerance_change)
      break;
  }

  state.d(d);
  state.t(t);
  state.H_diag(H_diag);
  state.prev_flat_grad(prev_flat_grad);
  state.prev_loss(prev_loss);
}

// With a line search t becomes its step, and loss and flat_grad its point's; a fixed step
// re-evaluates the function only if not in the last iteration: in a stochastic setting, there
// is no use to re-evaluate that function there.
int64_t LBFGS::take_step(const LossClosure& evaluate, const Tensor& d, double gtd,
                         bool last_iteration, double& t, double& loss, Tensor& flat_grad) {
  const auto& group = static_cast<const LBFGSOptions&>(param_groups_[0].options());
  // optional line search: user function
  if (group.line_search_fn()) {
    // perform line search, using user function
    const auto x_init = clone_param();
    const Objective obj_func = [&](const std::vector<Tensor>& x, double step,
                                   const Tensor& direction) {
      return directional_evaluate(evaluate, x, step, direction);
    };
    auto result = strong_wolfe(obj_func, x_init, t, d, loss, flat_grad, gtd);
    loss = result.loss;
    flat_grad = result.flat_grad;
    t = result.t;
    add_grad(t, d);
    return result.func_evals;
  }
  // no line search, simply move with fixed-step
  add_grad(t, d);
  if (last_iteration)
    return 0;
  loss = evaluate().item<double>();
  flat_grad = gather_flat_grad();
  return 1;
}

void LBFGS::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::LBFGSParamState, LBFGSOptions>(archive, *this);
}

void LBFGS::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<torch::optim::LBFGSParamState, LBFGSOptions>(archive, *this);
}

} // namespace kan
