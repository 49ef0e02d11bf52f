#include "kan/bench/accuracy.h"

#include "kan/bench/shards.h"
#include "kan/data/function_catalogue.h"
#include "kan/data/paper_results.h"
#include "kan/io/text.h"
#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

namespace kan::bench {
namespace {

using results::AccuracyFit;
using results::AccuracyPoint;
using results::AccuracyRun;

struct Preset {
  std::vector<uint64_t> seeds;
  std::vector<int64_t> grids;
  int64_t steps;
};

// The paper's protocol (Section 3.2): 200 LBFGS steps per grid of G = 3 ... 200, three seeds.
// The quick preset keeps the protocol's shape on a budget: one seed, grids up to 20, 100 steps.
Preset preset_of(const std::string& name) {
  if (name == "paper")
    return {{0, 1, 2}, {3, 5, 10, 20, 50, 100, 200}, 200};
  TORCH_CHECK(name == "quick", "--preset: expected quick or paper, got ", "\"" + name + "\"");
  return {{0}, {3, 5, 10, 20}, 100};
}

// The paper's numbers for a function, from the library's copy of its tables.
std::optional<results::PublishedAccuracy> published_for(const std::string& function) {
  const auto rmse = [](double value) {
    return std::isnan(value) ? std::nullopt : std::optional<double>(value);
  };
  for (const auto& row : paper_special_functions())
    if (row.function == function)
      return results::PublishedAccuracy{std::string(kKanPaper) + " Table 1 (Special functions)",
                                        row.minimal_kan_shape,
                                        rmse(row.minimal_kan_test_rmse),
                                        row.best_kan_shape,
                                        rmse(row.best_kan_test_rmse),
                                        rmse(row.mlp_test_rmse)};
  for (const auto& row : paper_feynman())
    if (row.function == function)
      return results::PublishedAccuracy{std::string(kKanPaper) + " Table 2 (Feynman dataset)",
                                        row.pruned_kan_shape_minimal,
                                        std::nullopt,
                                        row.pruned_kan_shape_best,
                                        rmse(row.pruned_kan_test_rmse),
                                        rmse(row.mlp_test_rmse)};
  return std::nullopt;
}

// Layers of `hidden` nodes between the inputs and one output: depth 2 is [n, hidden, 1].
std::vector<int64_t> uniform_width(int64_t inputs, int64_t hidden, int64_t depth) {
  std::vector<int64_t> width{inputs};
  width.insert(width.end(), depth - 1, hidden);
  width.push_back(1);
  return width;
}

// The models of one function, seed and device, KANs first.
std::vector<AccuracyModel> models_of(const ReferenceFunction& f, const std::string& device,
                                     uint64_t seed, const std::string& preset, bool prune) {
  std::vector<AccuracyModel> models;
  std::set<std::vector<int64_t>> kan_widths;
  auto add_kan = [&](const std::string& role, const std::vector<int64_t>& width) {
    // The paper's shapes must take the function's inputs and give one output.
    if (width.size() < 2 || width.front() != f.n_var || width.back() != 1 ||
        !kan_widths.insert(width).second)
      return;
    models.push_back({f.name, device, "kan", role, width, "", seed, std::nullopt});
  };
  const auto published = published_for(f.name);
  const auto add_published = [&] {
    if (published) {
      add_kan("minimal", published->minimal_kan_width);
      add_kan("best", published->best_kan_width);
    }
  };
  // The paper's width-5 KANs of depth 2 to 6; the quick preset's of depth 2 and 3, where the
  // paper preset's best KANs were found (docs/accuracy.md), after the paper's own shapes so that
  // a shape of both keeps its published role.
  if (preset == "paper") {
    for (int64_t depth = 2; depth <= 6; ++depth)
      add_kan("width5", uniform_width(f.n_var, 5, depth));
    add_published();
  } else {
    add_published();
    for (int64_t depth = 2; depth <= 3; ++depth)
      add_kan("width5", uniform_width(f.n_var, 5, depth));
  }
  if (prune && preset == "paper")
    for (int64_t depth = 2; depth <= 6; ++depth)
      for (const double lamb : {1e-2, 1e-3}) {
        char role[32];
        std::snprintf(role, sizeof role, "pruned-lamb%g", lamb);
        models.push_back(
            {f.name, device, "kan", role, uniform_width(f.n_var, 5, depth), "", seed, lamb});
      }

  // MLPs of width 5 and 100; the Feynman table's with three activations (the paper's Table 2).
  std::vector<std::string> activations{"silu"};
  if (f.group == "feynman" && preset == "paper")
    activations = {"silu", "tanh", "relu"};
  for (const auto& activation : activations)
    for (const int64_t hidden : {5, 100}) {
      if (preset == "paper") {
        for (int64_t depth = 2; depth <= 6; ++depth)
          models.push_back({f.name, device, "mlp", "width" + std::to_string(hidden),
                            uniform_width(f.n_var, hidden, depth), activation, seed, std::nullopt});
      } else {
        models.push_back({f.name, device, "mlp", "width" + std::to_string(hidden),
                          uniform_width(f.n_var, hidden, 3), activation, seed, std::nullopt});
      }
    }
  return models;
}

// A run of another plan cannot be continued: name the first setting that differs.
void check_resumable(const AccuracyRun& previous, const AccuracyRun& planned) {
  const auto differs = [](const char* option, const std::string& was, const std::string& is) {
    TORCH_CHECK(false, "--out holds an accuracy run of another plan (", option, " ", was, ", now ",
                is, "): use another --out, or the same options to continue it");
  };
  const auto list = [](const auto& values) {
    std::string text;
    for (const auto& v : values)
      text += (text.empty() ? "" : ",") + std::to_string(v);
    return text;
  };
  if (previous.table != planned.table)
    differs("--table", previous.table, planned.table);
  if (previous.preset != planned.preset)
    differs("--preset", previous.preset, planned.preset);
  if (previous.seeds != planned.seeds)
    differs("--seeds", list(previous.seeds), list(planned.seeds));
  if (previous.grids != planned.grids)
    differs("--grids", list(previous.grids), list(planned.grids));
  if (previous.steps != planned.steps)
    differs("--steps", std::to_string(previous.steps), std::to_string(planned.steps));
  if (previous.train_num != planned.train_num || previous.test_num != planned.test_num)
    differs("samples", list(std::vector<int64_t>{previous.train_num, previous.test_num}),
            list(std::vector<int64_t>{planned.train_num, planned.test_num}));
}

// The machine a fit runs on, as results.json names it (merged shards keep it per fit).
std::string this_host() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "";
}

AccuracyPoint point_of(const std::string& stage, int64_t grid, const Model& model,
                       const StageResult& result) {
  return {stage,
          grid,
          model.parameter_count(),
          model.forward_flops(),
          result.train_rmse,
          result.test_rmse,
          result.history.seconds};
}

} // namespace

AccuracyFit AccuracyModel::unmeasured_fit() const {
  AccuracyFit fit;
  fit.function = function;
  fit.device = device;
  fit.family = family;
  fit.role = role;
  fit.width = width;
  fit.activation = activation;
  fit.seed = seed;
  return fit;
}

std::string AccuracyModel::key() const {
  return unmeasured_fit().key();
}

AccuracyRun plan_accuracy(const AccuracyOptions& options, std::vector<AccuracyModel>* models) {
  TORCH_CHECK(options.table == "special" || options.table == "feynman",
              "--table: expected special or feynman, got ", "\"" + options.table + "\"");
  const auto preset = preset_of(options.preset);
  AccuracyRun run;
  run.table = options.table;
  run.preset = options.preset;
  run.seeds = options.seeds.empty() ? preset.seeds : options.seeds;
  run.grids = options.grids.empty() ? preset.grids : options.grids;
  run.steps = options.steps > 0 ? options.steps : preset.steps;
  run.train_num = options.train_num;
  run.test_num = options.test_num;
  run.threads_per_fit = options.threads_per_fit;
  TORCH_CHECK(run.threads_per_fit >= 1, "--threads-per-fit must be >= 1, got ",
              run.threads_per_fit);
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  run.jobs = options.jobs > 0 ? options.jobs : std::max<int64_t>(1, cores / run.threads_per_fit);
  TORCH_CHECK(!options.prune || options.preset == "paper",
              "--prune needs --preset paper (the quick preset has no width-5 KANs to prune)");
  TORCH_CHECK(options.train_num >= 1 && options.test_num >= 1,
              "the training and test sets need samples, got ", options.train_num, " and ",
              options.test_num);
  for (size_t i = 1; i < run.grids.size(); ++i)
    TORCH_CHECK(run.grids[i] > run.grids[i - 1], "--grids must grow, got ", run.grids[i], " after ",
                run.grids[i - 1]);
  TORCH_CHECK(!run.grids.empty() && run.grids.front() >= 1, "--grids: the first grid must be "
                                                            ">= 1");

  const auto table = reference_functions(options.table);
  std::vector<const ReferenceFunction*> functions;
  for (const auto& name : options.functions) {
    const auto found = std::find_if(table.begin(), table.end(),
                                    [&](const ReferenceFunction& f) { return f.name == name; });
    if (found == table.end()) {
      std::string known;
      for (const auto& f : table)
        known += (known.empty() ? "" : ", ") + f.name;
      TORCH_CHECK(false, "--functions: ", "\"" + name + "\"", " is not in the ", options.table,
                  " table (", known, ")");
    }
    functions.push_back(&reference_function(name));
  }
  if (options.functions.empty())
    for (const auto& f : table)
      functions.push_back(&reference_function(f.name));

  TORCH_CHECK(!options.devices.empty(), "--devices: name at least one device");
  for (const auto& device : options.devices) {
    torch::Device parsed(torch::kCPU);
    try {
      parsed = torch::Device(device);
    } catch (const c10::Error&) {
      TORCH_CHECK(false, "--devices: ", "\"" + device + "\"", " is no device (cpu, cuda, cuda:N)");
    }
    TORCH_CHECK(!parsed.is_cuda() || torch::cuda::is_available(), "--devices ", device,
                ": no usable CUDA device on this machine");
    run.devices.push_back(parsed.str());
  }

  std::vector<AccuracyModel> planned;
  for (const auto* f : functions) {
    run.functions.push_back(f->name);
    for (const auto& device : run.devices) {
      results::AccuracyFunction summary;
      summary.function = f->name;
      summary.device = device;
      summary.formula = f->formula;
      summary.published = published_for(f->name);
      run.summary.push_back(summary);
      for (const auto seed : run.seeds)
        for (auto& model : models_of(*f, device, seed, options.preset, options.prune))
          planned.push_back(std::move(model));
    }
  }
  if (options.shard) {
    std::vector<double> costs;
    for (const auto& model : planned)
      costs.push_back(expected_cost(model, run));
    std::vector<AccuracyModel> share;
    for (const size_t i : shard_share(costs, *options.shard))
      share.push_back(std::move(planned[i]));
    planned = std::move(share);
  }
  run.planned_fits = static_cast<int64_t>(planned.size());
  if (models)
    *models = std::move(planned);
  return run;
}

double expected_cost(const AccuracyModel& model, const AccuracyRun& run) {
  const auto samples = static_cast<double>(run.train_num);
  const auto steps = static_cast<double>(run.steps);
  if (model.family == "mlp")
    return steps * static_cast<double>(run.grids.size()) *
           expected_step_cost(samples, static_cast<double>(mlp_forward_flops(
                                           model.width, activation_from_string(model.activation))));
  // A KAN's step at G >= 10 costs about 4.5 times its FLOPs' worth. Measured on the paper
  // preset's special functions (ellipeinc, yv and kv as two shards each, 2026-12-06): KAN points
  // ran at the MLPs' pace or faster for G <= 5, then 1.3 to 5.8 times slower (more for more edges
  // and finer grids), as LBFGS's line searches evaluate the network more often per step. With
  // 4.5 the KANs' 1,742 s and the MLPs' 7,541 s are both predicted at one pace (within 2 %), so a
  // shard's time left after its first three fits (KANs) says 20-36 min for 23-26, where FLOPs
  // alone said 58-113.
  const auto at_grid = [&](int64_t grid) {
    const double weight = grid >= 10 ? 4.5 : 1.0;
    return weight * steps *
           expected_step_cost(
               samples, static_cast<double>(kan_forward_flops(KANOptions(model.width).grid(grid))));
  };
  double cost = 0;
  for (const int64_t grid : run.grids)
    cost += at_grid(grid);
  if (model.prune_lamb) // retrained once more after pruning, at the first grid
    cost += at_grid(run.grids.front());
  return cost;
}

AccuracyFit run_accuracy_fit(const AccuracyModel& model, const AccuracyRun& run) {
  const auto start = std::chrono::steady_clock::now();
  auto fit = model.unmeasured_fit();
  fit.host = this_host();
  try {
    const auto& f = reference_function(model.function);
    const torch::Device device(model.device);
    const auto data = create_dataset(f.f, DatasetOptions(f.n_var)
                                              .ranges(f.ranges)
                                              .train_num(run.train_num)
                                              .test_num(run.test_num)
                                              .seed(model.seed)
                                              .dtype(torch::kFloat64)
                                              .device(device));
    const auto fit_options = FitOptions().steps(run.steps).seed(model.seed);
    if (model.family == "kan") {
      KAN kan(KANOptions(model.width)
                  .grid(run.grids.front())
                  .seed(model.seed)
                  .dtype(torch::kFloat64)
                  .device(device));
      // Each stage's model is measured as it trains: the pipeline replaces it as it prunes and
      // refines.
      std::vector<std::pair<int64_t, int64_t>> costs; // parameters, FLOPs per stage
      auto pipeline = PipelineOptions()
                          .fit(fit_options)
                          .grids(std::vector<int64_t>(run.grids.begin() + 1, run.grids.end()))
                          .train([&](KAN& m, const Dataset& d, const FitOptions& o,
                                     const PipelineStage& stage) {
                            auto options = o;
                            // The paper's pruned KANs: sparsified at the first grid only.
                            if (model.prune_lamb && stage.kind == PipelineStage::Kind::kTrain)
                              options.lamb(*model.prune_lamb);
                            auto history = kan::fit(m, d, options);
                            costs.emplace_back(m->parameter_count(), m->forward_flops());
                            return history;
                          });
      if (model.prune_lamb)
        pipeline.prune(PruneStage{1e-2, 3e-2, std::nullopt});
      const auto result = run_pipeline(kan, data, pipeline);
      const auto add = [&](const std::string& stage, int64_t grid, const StageResult& r) {
        const auto& cost = costs.at(fit.points.size());
        fit.points.push_back(
            {stage, grid, cost.first, cost.second, r.train_rmse, r.test_rmse, r.history.seconds});
      };
      add("trained", run.grids.front(), result.trained);
      if (result.pruned)
        add("pruned", run.grids.front(), result.pruned->retrained);
      for (const auto& refined : result.refined)
        add("refined", refined.grid, refined.trained);
    } else {
      MLP mlp(MLPOptions(model.width)
                  .activation(activation_from_string(model.activation))
                  .seed(model.seed)
                  .dtype(torch::kFloat64)
                  .device(device));
      // As many steps as a KAN's whole schedule: the same optimisation budget in steps.
      StageResult result;
      result.history = kan::fit(
          *mlp, data,
          FitOptions(fit_options).steps(run.steps * static_cast<int64_t>(run.grids.size())));
      const auto evaluation = evaluate(*mlp, data);
      result.train_rmse = evaluation.train_rmse;
      result.test_rmse = evaluation.test_rmse;
      fit.points.push_back(point_of("trained", 0, *mlp, result));
    }
    for (const auto& point : fit.points)
      TORCH_CHECK(std::isfinite(point.test_rmse), "the ", point.stage, " stage's test RMSE is ",
                  point.test_rmse, " (the training diverged)");
  } catch (const std::exception& e) {
    fit.points.clear();
    fit.error = io::first_line(e.what());
  }
  fit.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return fit;
}

AccuracyRun run_accuracy(const AccuracyOptions& options) {
  std::vector<AccuracyModel> models;
  auto run = plan_accuracy(options, &models);
  if (options.resume) {
    check_resumable(*options.resume, run);
    std::set<std::string> planned;
    for (const auto& model : models)
      planned.insert(model.key());
    // Fits of the plan that finished; a fit the plan no longer has (a narrower --functions) is
    // kept too: nothing measured is dropped.
    run.fits = options.resume->fits;
    run.wall_seconds = options.resume->wall_seconds;
    std::set<std::string> done;
    for (const auto& fit : run.fits)
      done.insert(fit.key());
    models.erase(std::remove_if(models.begin(), models.end(),
                                [&](const AccuracyModel& m) { return done.count(m.key()) > 0; }),
                 models.end());
    const auto add_once = [](std::vector<std::string>& names, const std::string& name) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    };
    for (const auto& summary : options.resume->summary) {
      const auto same = [&](const results::AccuracyFunction& s) {
        return s.function == summary.function && s.device == summary.device;
      };
      if (std::none_of(run.summary.begin(), run.summary.end(), same)) {
        run.summary.push_back(summary);
        add_once(run.functions, summary.function);
        add_once(run.devices, summary.device);
      }
    }
    run.planned_fits = static_cast<int64_t>(run.fits.size() + models.size());
  }
  results::summarize_accuracy(run);

  const auto start = std::chrono::steady_clock::now();
  const double previous_seconds = run.wall_seconds;
  std::mutex mutex;
  std::exception_ptr failure;
  if (options.on_fit)
    options.on_fit(run, nullptr);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    // Each job's own intra-op threads: jobs x threads_per_fit cores in all.
    at::set_num_threads(static_cast<int>(run.threads_per_fit));
    for (size_t i = next++; i < models.size(); i = next++) {
      auto fit = run_accuracy_fit(models[i], run);
      std::lock_guard<std::mutex> lock(mutex);
      if (failure)
        return;
      run.fits.push_back(std::move(fit));
      run.wall_seconds =
          previous_seconds +
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      results::summarize_accuracy(run);
      try {
        if (options.on_fit)
          options.on_fit(run, &run.fits.back());
      } catch (...) {
        failure = std::current_exception();
        next = models.size();
        return;
      }
    }
  };
  const auto jobs = std::min<size_t>(static_cast<size_t>(run.jobs), models.size());
  std::vector<std::thread> threads;
  for (size_t j = 1; j < jobs; ++j)
    threads.emplace_back(worker);
  if (jobs > 0)
    worker();
  for (auto& thread : threads)
    thread.join();
  if (failure)
    std::rethrow_exception(failure);
  return run;
}

} // namespace kan::bench
