#include "kan/results/accuracy.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace kan::results {

namespace {

// A diverged stage's RMSE is NaN, and the reader turns the null it is written as back into
// NaN: two NaNs are the same measurement, or no file would read back equal to what was written.
bool same_number(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

auto tie(const PublishedAccuracy& p) {
  return std::tie(p.source, p.minimal_kan_width, p.minimal_kan_test_rmse, p.best_kan_width,
                  p.best_kan_test_rmse, p.mlp_test_rmse);
}
auto tie(const AccuracyPointRef& r) {
  return std::tie(r.fit, r.point);
}
auto tie(const AccuracyFit& f) {
  return std::tie(f.function, f.device, f.family, f.role, f.width, f.activation, f.seed, f.points,
                  f.seconds, f.error, f.host);
}
auto tie(const AccuracyFunction& f) {
  return std::tie(f.function, f.device, f.formula, f.published, f.fits, f.failed, f.best_kan,
                  f.best_mlp, f.pareto, f.kan_beats_mlp, f.seconds);
}
auto tie(const AccuracyRun& r) {
  return std::tie(r.table, r.preset, r.functions, r.devices, r.seeds, r.train_num, r.test_num,
                  r.grids, r.steps, r.jobs, r.threads_per_fit, r.planned_fits, r.fits, r.summary,
                  r.wall_seconds);
}

// Points that can be a best or on a front: a diverged stage's NaN (or infinite) RMSE cannot.
bool measured(const AccuracyPoint& p) {
  return std::isfinite(p.test_rmse);
}

const AccuracyPoint& at(const AccuracyRun& run, const AccuracyPointRef& ref) {
  return run.fits[static_cast<size_t>(ref.fit)].points[static_cast<size_t>(ref.point)];
}

// The measured points of one function and device (of one family, or both when `family` is
// empty), in fit order and, within a fit, in training order.
std::vector<AccuracyPointRef> points_of(const AccuracyRun& run, const std::string& function,
                                        const std::string& device, const std::string& family) {
  std::vector<AccuracyPointRef> refs;
  for (size_t i = 0; i < run.fits.size(); ++i) {
    const auto& fit = run.fits[i];
    if (fit.function != function || fit.device != device ||
        (!family.empty() && fit.family != family))
      continue;
    for (size_t j = 0; j < fit.points.size(); ++j)
      if (measured(fit.points[j]))
        refs.push_back({static_cast<int64_t>(i), static_cast<int64_t>(j)});
  }
  return refs;
}

// Lowest test RMSE; on a tie fewer parameters; on a tie the first (refs are in fit order).
std::optional<AccuracyPointRef> best_of(const AccuracyRun& run,
                                        const std::vector<AccuracyPointRef>& refs) {
  std::optional<AccuracyPointRef> best;
  for (const auto& ref : refs) {
    const auto& p = at(run, ref);
    if (!best)
      best = ref;
    else if (const auto& b = at(run, *best);
             std::tie(p.test_rmse, p.parameters) < std::tie(b.test_rmse, b.parameters))
      best = ref;
  }
  return best;
}

} // namespace

bool AccuracyPoint::operator==(const AccuracyPoint& o) const {
  return std::tie(stage, grid, parameters, forward_flops, seconds) ==
             std::tie(o.stage, o.grid, o.parameters, o.forward_flops, o.seconds) &&
         same_number(train_rmse, o.train_rmse) && same_number(test_rmse, o.test_rmse);
}
bool AccuracyFit::operator==(const AccuracyFit& o) const {
  return tie(*this) == tie(o);
}
bool PublishedAccuracy::operator==(const PublishedAccuracy& o) const {
  return tie(*this) == tie(o);
}
bool AccuracyPointRef::operator==(const AccuracyPointRef& o) const {
  return tie(*this) == tie(o);
}
bool AccuracyFunction::operator==(const AccuracyFunction& o) const {
  return tie(*this) == tie(o);
}
bool AccuracyRun::operator==(const AccuracyRun& o) const {
  return tie(*this) == tie(o);
}

std::string width_text(const std::vector<int64_t>& width) {
  std::string text = "[";
  for (size_t i = 0; i < width.size(); ++i)
    text += (i ? "," : "") + std::to_string(width[i]);
  return text + "]";
}

std::string AccuracyFit::key() const {
  std::string text = function + "/" + device + "/" + family + "/" + width_text(width) + "/";
  if (!activation.empty())
    text += activation + "/";
  // A pruned KAN is trained differently from the unpruned one of the same width.
  if (role.rfind("pruned", 0) == 0)
    text += role + "/";
  return text + "seed" + std::to_string(seed);
}

std::vector<AccuracyPointRef> pareto_front(const AccuracyRun& run, const std::string& function,
                                           const std::string& device, const std::string& family) {
  auto refs = points_of(run, function, device, family);
  // Cheapest first, and among equally many parameters the lowest RMSE; a stable sort keeps the
  // first of equal points first. A point is then on the front exactly when it beats the RMSE of
  // everything before it: what came before has no more parameters.
  std::stable_sort(refs.begin(), refs.end(), [&](const auto& a, const auto& b) {
    const auto &p = at(run, a), &q = at(run, b);
    return std::tie(p.parameters, p.test_rmse) < std::tie(q.parameters, q.test_rmse);
  });
  std::vector<AccuracyPointRef> front;
  for (const auto& ref : refs)
    if (front.empty() || at(run, ref).test_rmse < at(run, front.back()).test_rmse)
      front.push_back(ref);
  return front;
}

void summarize_accuracy(AccuracyRun& run) {
  for (auto& s : run.summary) {
    s.fits = s.failed = 0;
    s.seconds = 0;
    for (const auto& fit : run.fits)
      if (fit.function == s.function && fit.device == s.device) {
        ++s.fits;
        s.failed += !fit.error.empty();
        s.seconds += fit.seconds;
      }
    s.best_kan = best_of(run, points_of(run, s.function, s.device, "kan"));
    s.best_mlp = best_of(run, points_of(run, s.function, s.device, "mlp"));
    s.pareto = pareto_front(run, s.function, s.device, "");
    s.kan_beats_mlp.reset();
    if (s.best_kan && s.best_mlp)
      s.kan_beats_mlp = at(run, *s.best_kan).test_rmse <= at(run, *s.best_mlp).test_rmse;
  }
}

FindingCount finding_count(const AccuracyRun& run, const std::string& kan_role) {
  const auto rmse = [&](const AccuracyPointRef& ref) {
    return run.fits.at(ref.fit).points.at(ref.point).test_rmse;
  };
  FindingCount count;
  for (const auto& f : run.summary) {
    if (!f.best_mlp)
      continue;
    std::optional<double> best_kan;
    if (kan_role.empty()) {
      if (f.best_kan)
        best_kan = rmse(*f.best_kan);
    } else {
      for (const auto& fit : run.fits)
        if (fit.function == f.function && fit.device == f.device && fit.family == "kan" &&
            fit.role == kan_role)
          for (const auto& p : fit.points)
            if (std::isfinite(p.test_rmse))
              best_kan = std::min(best_kan.value_or(p.test_rmse), p.test_rmse);
    }
    if (!best_kan)
      continue;
    ++count.compared;
    count.holds += *best_kan <= rmse(*f.best_mlp);
  }
  return count;
}

bool has_other_kans(const AccuracyRun& run, const std::string& role) {
  bool of_role = false, others = false;
  for (const auto& fit : run.fits)
    if (fit.family == "kan")
      (fit.role == role ? of_role : others) = true;
  return of_role && others;
}

std::string finding_text(const AccuracyRun& run) {
  const auto all = finding_count(run);
  std::string text = "the paper's finding (best KAN <= best MLP) holds for " +
                     std::to_string(all.holds) + " of " + std::to_string(all.compared) +
                     " functions";
  if (has_other_kans(run, "minimal")) {
    const auto minimal = finding_count(run, "minimal");
    text += " (with the paper's minimal KAN shapes alone: " + std::to_string(minimal.holds) +
            " of " + std::to_string(minimal.compared) + ")";
  }
  return text;
}

} // namespace kan::results
