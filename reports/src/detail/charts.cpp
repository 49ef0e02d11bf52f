#include "detail/charts.h"

#include "detail/html_page.h"

#include "kan/io/text.h"
#include "kan/results/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <tuple>

namespace kan::reports::detail {

using namespace kan::results;
using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// The figures.

CaseFigures figures(const CaseResult& c) {
  CaseFigures f;
  f.times = summarize(c.epoch_seconds);
  if (c.gpu_activity && c.gpu_activity->traced && !c.gpu_activity->epochs.empty()) {
    std::vector<double> busy, kernels;
    for (const auto& epoch : c.gpu_activity->epochs) {
      busy.push_back(epoch.busy_fraction);
      kernels.push_back(static_cast<double>(epoch.kernels));
    }
    f.busy = quantile(busy, 0.5);
    f.kernels = quantile(kernels, 0.5);
  }
  return f;
}

namespace {

// Case names and targets in order of first appearance.
std::vector<std::string> unique_names(const Results& r) {
  std::vector<std::string> names;
  for (const auto& c : r.cases)
    if (std::find(names.begin(), names.end(), c.name) == names.end())
      names.push_back(c.name);
  return names;
}
std::vector<std::string> unique_targets(const Results& r) {
  std::vector<std::string> targets;
  for (const auto& c : r.cases)
    if (std::find(targets.begin(), targets.end(), c.target) == targets.end())
      targets.push_back(c.target);
  return targets;
}

} // namespace

// The case whose learned activation functions are plotted: the first ok case with curves.
const CaseResult* activation_case(const Results& r) {
  for (const auto& c : r.cases)
    if (c.status == CaseStatus::kOk && !c.activations.empty())
      return &c;
  for (const auto& c : r.cases)
    if (!c.activations.empty())
      return &c;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Chart data: everything the script draws, prepared here so the numbers are testable.

namespace {

json grouped_bars(const Results& r, const std::string& id, const std::string& title,
                  const std::string& y_label,
                  const std::function<std::optional<double>(const CaseResult&)>& value,
                  const std::function<json(const CaseResult&)>& error) {
  const auto names = unique_names(r);
  json datasets = json::array();
  bool any = false;
  for (const auto& target : unique_targets(r)) {
    json data = json::array(), errors = json::array();
    for (const auto& name : names) {
      const auto* c = r.find_case(name, target);
      const auto v = c ? value(*c) : std::nullopt;
      data.push_back(v ? json(*v) : json(nullptr));
      errors.push_back(c && v ? error(*c) : json(nullptr));
      any = any || v.has_value();
    }
    datasets.push_back({{"label", target}, {"data", data}, {"errors", errors}});
  }
  if (!any)
    return nullptr;
  return {{"id", id},           {"kind", "bar"},   {"title", title},
          {"y_label", y_label}, {"labels", names}, {"datasets", datasets}};
}

// ---------------------------------------------------------------------------------------------
// The accuracy section's pieces, shared by its charts and tables.

} // namespace

namespace {
constexpr const char* kKanColor = "#1f77b4"; // the palette's first two (report.js)
constexpr const char* kMlpColor = "#ff7f0e";
} // namespace

// A run's or a function's time, hours of it readable: "14.5 s", "12.3 min", "5.2 h".
std::string duration_text(double seconds) {
  char text[48];
  if (seconds >= 7200)
    std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  else if (seconds >= 120)
    std::snprintf(text, sizeof text, "%.1f min", seconds / 60);
  else
    return io::format_seconds(seconds);
  return text;
}

// An RMSE as the paper prints them: "2.13e-04".
std::string rmse_text(double value) {
  if (!std::isfinite(value))
    return "-";
  char text[48];
  std::snprintf(text, sizeof text, "%.2e", value);
  return text;
}

const AccuracyPoint& point_at(const AccuracyRun& run, const AccuracyPointRef& ref) {
  return run.fits[static_cast<size_t>(ref.fit)].points[static_cast<size_t>(ref.point)];
}

namespace {

// What a point is, in a few words: "KAN [2,5,1] G=10 (refined), seed 0", "MLP [2,100,100,1]
// silu, seed 0".
std::string point_label(const AccuracyFit& fit, const AccuracyPoint& p) {
  std::string text = (fit.family == "kan" ? "KAN " : "MLP ") + width_text(fit.width);
  if (fit.family == "kan")
    text += " G=" + std::to_string(p.grid) + " (" + p.stage + ")";
  else if (!fit.activation.empty())
    text += " " + fit.activation;
  return text + ", seed " + std::to_string(fit.seed);
}

// Whether a point can sit on log axes.
bool drawable(const AccuracyPoint& p) {
  return p.parameters > 0 && std::isfinite(p.test_rmse) && p.test_rmse > 0;
}

// The nearest of 1, 2, 5 times a power of ten at or below `value` (or at or above): log axes
// that start and end there label their ends as round numbers.
double round_down(double value) {
  const double power = std::pow(10.0, std::floor(std::log10(value)));
  for (const double step : {5.0, 2.0, 1.0})
    if (step * power <= value)
      return step * power;
  return power;
}
double round_up(double value) {
  const double power = std::pow(10.0, std::floor(std::log10(value)));
  for (const double step : {1.0, 2.0, 5.0})
    if (step * power >= value)
      return step * power;
  return 10 * power;
}

// The values an axis must show (low 0: none yet).
struct Span {
  double low = 0, high = 0;
  void extend(double value) {
    low = low == 0 ? value : std::min(low, value);
    high = std::max(high, value);
  }
};

struct Family {
  const char* family; // AccuracyFit::family
  const char* name;
  const char* color;
};
constexpr Family kFamilies[] = {{"kan", "KAN", kKanColor}, {"mlp", "MLP", kMlpColor}};

// Every point of the function's fits, a dataset per family; x and y take them in.
void add_fit_points(const AccuracyRun& run, const AccuracyFunction& s, json& datasets, Span& x,
                    Span& y) {
  for (const auto& [family, name, color] : kFamilies) {
    json points = json::array();
    for (const auto& fit : run.fits) {
      if (fit.function != s.function || fit.device != s.device || fit.family != family)
        continue;
      for (const auto& p : fit.points)
        if (drawable(p)) {
          points.push_back({p.parameters, p.test_rmse, point_label(fit, p)});
          x.extend(static_cast<double>(p.parameters));
          y.extend(p.test_rmse);
        }
    }
    if (!points.empty())
      datasets.push_back({{"label", std::string(name) + " fits"},
                          {"points", points},
                          {"color", color},
                          {"line", false}});
  }
}

// Each family's Pareto front, a step line.
void add_pareto_fronts(const AccuracyRun& run, const AccuracyFunction& s, json& datasets) {
  for (const auto& [family, name, color] : kFamilies) {
    json front = json::array();
    for (const auto& ref : pareto_front(run, s.function, s.device, family)) {
      const auto& p = point_at(run, ref);
      if (drawable(p))
        front.push_back(
            {p.parameters, p.test_rmse, point_label(run.fits[static_cast<size_t>(ref.fit)], p)});
    }
    if (!front.empty())
      datasets.push_back({{"label", std::string(name) + " Pareto front"},
                          {"points", front},
                          {"color", color},
                          {"stepped", true}});
  }
}

// The paper's RMSEs as dashed lines from x_min to x_max (it gives no parameter counts); y takes
// them in.
void add_paper_lines(const PublishedAccuracy& paper, double x_min, double x_max, json& datasets,
                     Span& y) {
  const auto line = [&](const std::string& label, const std::optional<double>& rmse,
                        const char* color, std::vector<int> dash) {
    if (!rmse || !(*rmse > 0))
      return;
    datasets.push_back({{"label", label},
                        {"points", {{x_min, *rmse}, {x_max, *rmse}}},
                        {"color", color},
                        {"dashed", true},
                        {"dash", dash}});
    y.extend(*rmse);
  };
  const auto shape = [](const std::vector<int64_t>& width) {
    return width.empty() ? std::string() : " " + width_text(width);
  };
  line("paper: best KAN" + shape(paper.best_kan_width), paper.best_kan_test_rmse, kKanColor,
       {6, 4});
  line("paper: minimal KAN" + shape(paper.minimal_kan_width), paper.minimal_kan_test_rmse,
       kKanColor, {2, 3});
  line("paper: MLP", paper.mlp_test_rmse, kMlpColor, {6, 4});
}

} // namespace

// Test RMSE against parameters of one function on one device, log axes: every point of every
// fit coloured by family, each family's Pareto front as a step line, and the paper's RMSEs as
// dashed horizontal lines across the measured range (the paper gives no parameter counts).
json accuracy_chart(const AccuracyRun& run, size_t index) {
  const auto& s = run.summary[index];
  json datasets = json::array();
  // The axes' ranges: every point and line well inside, not on the frame.
  Span x, y;
  add_fit_points(run, s, datasets, x, y);
  add_pareto_fronts(run, s, datasets);
  // Without a measured point, the paper's lines span a range small models have.
  if (x.high == 0) {
    x.low = 10;
    x.high = 1e4;
  }
  const double x_min = round_down(x.low / 1.5), x_max = round_up(x.high * 1.5);
  if (s.published)
    add_paper_lines(*s.published, x_min, x_max, datasets, y);
  if (datasets.empty())
    return nullptr;
  return {{"id", kAccuracyChartPrefix + std::to_string(index)},
          {"kind", "xy"},
          {"title", s.function + " on " + s.device + ": test RMSE against parameters (log axes)"},
          {"x_label", "parameters"},
          {"y_label", "test RMSE"},
          {"log_x", true},
          {"log_y", true},
          {"x_min", x_min},
          {"x_max", x_max},
          {"y_min", round_down(y.low / 1.5)},
          {"y_max", round_up(y.high * 1.5)},
          {"point_labels", true},
          {"datasets", datasets}};
}

namespace {

// Cases thirty times apart or more (a sub-millisecond toy beside a deep network) share a log axis,
// where each stays readable; on a linear one the small ones would be invisible.
json epoch_time_chart(const Results& r) {
  auto chart = grouped_bars(
      r, "chart-epoch-time", "Epoch time per case and target (median, IQR bars)",
      "seconds per epoch",
      [](const CaseResult& c) {
        return c.status == CaseStatus::kOk ? c.median_epoch_seconds : std::nullopt;
      },
      [](const CaseResult& c) -> json {
        if (const auto s = summarize(c.epoch_seconds))
          return {s->q1, s->q3};
        return nullptr;
      });
  if (chart.is_null())
    return chart;
  double low = std::numeric_limits<double>::infinity(), high = 0;
  for (const auto& dataset : chart["datasets"])
    for (const auto& v : dataset["data"])
      if (v.is_number() && v.get<double>() > 0) {
        low = std::min(low, v.get<double>());
        high = std::max(high, v.get<double>());
      }
  if (high > 0 && high / low >= 30) {
    chart["log_y"] = true;
    chart["title"] = "Epoch time per case and target (median, IQR bars; log axis)";
  }
  return chart;
}

json memory_chart(const Results& r) {
  return grouped_bars(
      r, "chart-memory", "Peak memory per case and target", "MiB",
      [](const CaseResult& c) -> std::optional<double> {
        if (!c.peak_memory_bytes)
          return std::nullopt;
        return static_cast<double>(*c.peak_memory_bytes) / (1024.0 * 1024.0);
      },
      [](const CaseResult&) -> json { return nullptr; });
}

json speedup_chart(const Results& r) {
  json labels = json::array(), data = json::array(), errors = json::array();
  bool any = false;
  for (const auto& c : r.comparisons) {
    labels.push_back(c.case_name + ": " + c.b + " vs " + c.a);
    data.push_back(c.speedup ? json(*c.speedup) : json(nullptr));
    errors.push_back(c.speedup_low && c.speedup_high ? json{*c.speedup_low, *c.speedup_high}
                                                     : json(nullptr));
    any = any || c.speedup.has_value();
  }
  if (!any)
    return nullptr;
  return {{"id", "chart-speedup"},
          {"kind", "bar"},
          {"title", "Speedup per case: median(a) / median(b), spread as bars"},
          {"y_label", "times faster"},
          {"labels", labels},
          {"datasets", json::array({{{"label", "speedup"}, {"data", data}, {"errors", errors}}})}};
}

// The training loss of both sides of comparison `index`, epoch by epoch.
json loss_chart(const Results& r, size_t index) {
  const auto& cmp = r.comparisons[index];
  const auto* a = r.find_case(cmp.case_name, cmp.a);
  const auto* b = r.find_case(cmp.case_name, cmp.b);
  if (!a || !b || a->train_loss_per_epoch.empty() || b->train_loss_per_epoch.empty())
    return nullptr;
  const size_t epochs = std::max(a->train_loss_per_epoch.size(), b->train_loss_per_epoch.size());
  json labels = json::array();
  for (size_t k = 0; k < epochs; ++k)
    labels.push_back(k + 1);
  bool positive = true;
  for (const auto* side : {a, b})
    for (double v : side->train_loss_per_epoch)
      positive = positive && v > 0;
  return {{"id", "chart-loss-" + std::to_string(index)},
          {"kind", "line"},
          {"title", "Training loss per epoch: " + cmp.case_name + ", " + cmp.a + " vs " + cmp.b},
          {"x_label", "epoch"},
          {"y_label", "training loss"},
          {"log_y", positive},
          {"labels", labels},
          {"datasets", json::array({{{"label", cmp.a}, {"data", a->train_loss_per_epoch}},
                                    {{"label", cmp.b}, {"data", b->train_loss_per_epoch}}})}};
}

// phi(x) of every edge of the case that recorded them, as small multiples.
std::vector<json> activation_charts(const Results& r) {
  std::vector<json> charts;
  const auto* c = activation_case(r);
  if (c == nullptr)
    return charts;
  for (const auto& curve : c->activations) {
    if (curve.x.empty())
      continue;
    const auto edge = std::to_string(curve.layer) + "-" + std::to_string(curve.input) + "-" +
                      std::to_string(curve.output);
    charts.push_back(
        {{"id", "chart-activation-" + edge},
         {"kind", "curve"},
         {"small", true},
         {"title", "phi[" + std::to_string(curve.layer) + "] " + std::to_string(curve.input) +
                       " -> " + std::to_string(curve.output)},
         {"x", curve.x},
         {"y", curve.y}});
  }
  return charts;
}

// Data-parallel speedup against the number of ranks, one line per workload and device, and the
// ideal (speedup = ranks).
json scaling_chart(const Results& r) {
  if (r.scaling.empty())
    return nullptr;
  std::vector<int64_t> ranks;
  std::vector<std::string> series;
  for (const auto& s : r.scaling) {
    if (std::find(ranks.begin(), ranks.end(), s.ranks) == ranks.end())
      ranks.push_back(s.ranks);
    const std::string name = s.case_name + " on " + s.device;
    if (std::find(series.begin(), series.end(), name) == series.end())
      series.push_back(name);
  }
  std::sort(ranks.begin(), ranks.end());
  json datasets = json::array();
  for (const auto& name : series) {
    json data = json::array();
    for (int64_t n : ranks) {
      json point = nullptr;
      for (const auto& s : r.scaling)
        if (s.case_name + " on " + s.device == name && s.ranks == n && s.speedup)
          point = *s.speedup;
      data.push_back(point);
    }
    datasets.push_back({{"label", name}, {"data", data}});
  }
  datasets.push_back({{"label", "ideal"}, {"data", ranks}});
  return {{"id", "chart-scaling"},
          {"kind", "line"},
          {"title", "Data-parallel speedup against ranks (the 1-rank run = 1)"},
          {"x_label", "ranks"},
          {"y_label", "speedup"},
          {"log_y", false},
          {"labels", ranks},
          {"datasets", datasets}};
}

// Throughput against batch size, log axes, one line per case and target; each crossover a dashed
// vertical line across the measured range.
json sweep_chart(const Results& r) {
  if (!r.sweep || r.sweep->points.empty())
    return nullptr;
  std::vector<std::pair<std::string, std::string>> series;
  double low = 0, high = 0;
  for (const auto& p : r.sweep->points) {
    if (std::find(series.begin(), series.end(), std::pair{p.case_name, p.target}) == series.end())
      series.emplace_back(p.case_name, p.target);
    if (p.samples_per_second) {
      low = low == 0 ? *p.samples_per_second : std::min(low, *p.samples_per_second);
      high = std::max(high, *p.samples_per_second);
    }
  }
  const bool one_case = std::all_of(series.begin(), series.end(),
                                    [&](const auto& s) { return s.first == series.front().first; });
  json datasets = json::array();
  for (const auto& [case_name, target] : series) {
    json points = json::array();
    for (const auto& p : r.sweep->points)
      if (p.case_name == case_name && p.target == target && p.samples_per_second)
        points.push_back({p.batch, *p.samples_per_second});
    datasets.push_back(
        {{"label", one_case ? target : case_name + " on " + target}, {"points", points}});
  }
  for (const auto& c : r.sweep->crossovers)
    if (c.batch && high > 0)
      datasets.push_back({{"label", c.case_name + ": " + c.b + " overtakes " + c.a},
                          {"points", {{*c.batch, low}, {*c.batch, high}}},
                          {"dashed", true}});
  return {{"id", "chart-sweep"},
          {"kind", "xy"},
          {"title", "Throughput against batch size (samples/s, log axes)"},
          {"x_label", "batch size"},
          {"y_label", "samples/s"},
          {"log_x", true},
          {"log_y", true},
          {"datasets", datasets}};
}

// One figure the monitor samples during the timed epochs.
struct MonitorFigure {
  const char* id;
  const char* title;
  const char* y_label;
  std::optional<double> (*value)(const MonitorSample&);
};

const MonitorFigure kMonitorFigures[] = {
    {"chart-monitor-gpu", "GPU utilisation during the timed epochs (NVML)", "GPU busy, %",
     [](const MonitorSample& s) { return s.gpu_utilization_percent; }},
    {"chart-monitor-gpu-memory", "GPU memory in use during the timed epochs (NVML)",
     "memory used, MiB",
     [](const MonitorSample& s) -> std::optional<double> {
       if (!s.memory_used_bytes)
         return std::nullopt;
       return static_cast<double>(*s.memory_used_bytes) / (1 << 20);
     }},
    {"chart-monitor-clock", "SM clock during the timed epochs (NVML)", "SM clock, MHz",
     [](const MonitorSample& s) { return s.sm_clock_mhz; }},
    {"chart-monitor-power", "Board power during the timed epochs (NVML)", "power, W",
     [](const MonitorSample& s) { return s.power_watts; }},
    {"chart-monitor-temperature", "GPU temperature during the timed epochs (NVML)",
     "temperature, \u00b0C", [](const MonitorSample& s) { return s.temperature_celsius; }},
    {"chart-monitor-cpu", "Process CPU utilisation during the timed epochs (100 % = one core)",
     "CPU, %", [](const MonitorSample& s) { return s.cpu_utilization_percent; }}};

// What the devices did during the timed epochs (the nvidia-smi view: NVML on a GPU, the
// process's CPU utilisation on the CPU), one line per case and target against seconds since
// timing started; null when no case has the figure.
json monitor_chart(const Results& r, const MonitorFigure& figure) {
  json datasets = json::array();
  for (const auto& c : r.cases) {
    if (!c.monitoring)
      continue;
    json points = json::array();
    for (const auto& sample : c.monitoring->samples)
      if (const auto value = figure.value(sample))
        points.push_back({sample.seconds, *value});
    if (points.size() >= 2)
      datasets.push_back({{"label", c.name + " on " + c.target}, {"points", points}});
  }
  if (datasets.empty())
    return nullptr;
  return {{"id", figure.id},
          {"kind", "xy"},
          {"title", figure.title},
          {"x_label", "seconds since the first timed epoch"},
          {"y_label", figure.y_label},
          {"log_x", false},
          {"log_y", false},
          {"datasets", datasets}};
}

} // namespace

// Every chart the document has data for, in the order the report shows them.
json chart_data(const Results& r) {
  json charts = json::array();
  const auto add = [&](json chart) {
    if (!chart.is_null())
      charts.push_back(std::move(chart));
  };
  add(epoch_time_chart(r));
  add(speedup_chart(r));
  for (size_t i = 0; i < r.comparisons.size(); ++i)
    add(loss_chart(r, i));
  for (auto& chart : activation_charts(r))
    add(std::move(chart));
  add(scaling_chart(r));
  add(sweep_chart(r));
  for (const auto& figure : kMonitorFigures)
    add(monitor_chart(r, figure));
  if (r.accuracy)
    for (size_t k = 0; k < r.accuracy->summary.size(); ++k)
      add(accuracy_chart(*r.accuracy, k));
  add(memory_chart(r));
  return {{"charts", charts}};
}

} // namespace kan::reports::detail
