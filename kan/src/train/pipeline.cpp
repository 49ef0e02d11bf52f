#include "kan/train/pipeline.h"

#include "kan/nn/pruning.h"
#include "kan/symbolic/symbolic_edges.h"

#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace kan {
namespace {

std::vector<double> values_of(const torch::Tensor& t) {
  const auto cpu = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return {cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel()};
}

// The options and the data must agree before the first step: a schedule or a library mistake
// found after an hour of training loses the hour.
void check_options(const KAN& model, const PipelineOptions& o) {
  int64_t grid = model->options().grid();
  for (const int64_t next : o.grids()) {
    TORCH_CHECK(next > grid, "the grid schedule must grow: grid ", next, " after grid ", grid);
    grid = next;
  }
  if (o.prune()) {
    const auto& p = *o.prune();
    TORCH_CHECK(std::isfinite(p.node_th) && p.node_th >= 0 && std::isfinite(p.edge_th) &&
                    p.edge_th >= 0,
                "prune thresholds must be finite and >= 0, got node_th ", p.node_th, " edge_th ",
                p.edge_th);
    TORCH_CHECK(!p.steps || *p.steps >= 0, "prune steps must be >= 0, got ", *p.steps);
  }
  if (o.symbolic()) {
    const auto& s = *o.symbolic();
    TORCH_CHECK(!s.lib.empty(), "the symbolic library is empty; name at least one function");
    for (const auto& name : s.lib)
      symbolic_function(name); // an unknown name is an error listing the known ones
    symbolic_search(s.search);
    TORCH_CHECK(!s.steps || *s.steps >= 0, "symbolic steps must be >= 0, got ", *s.steps);
    TORCH_CHECK(s.weight_simple >= 0 && s.weight_simple <= 1,
                "weight_simple must be in [0, 1], got ", s.weight_simple);
  }
}

class StageRunner {
public:
  StageRunner(const Dataset& data, const PipelineOptions& options)
      : data_(data), options_(options) {}

  // Announced before the stage's own work (pruning, refinement, auto_symbolic) starts.
  PipelineStage begin(PipelineStage::Kind kind, int64_t grid, int64_t steps) const {
    const PipelineStage stage{kind, grid, steps};
    if (options_.on_stage())
      options_.on_stage()(stage);
    return stage;
  }

  StageResult train(KAN& model, const PipelineStage& stage) const {
    auto fit_options = options_.fit();
    fit_options.steps(stage.steps);
    if (options_.on_stage_step()) {
      auto user = fit_options.on_step();
      auto hook = options_.on_stage_step();
      fit_options.on_step([user, hook, stage](const StepRecord& r, int64_t total) {
        if (user)
          user(r, total);
        hook(stage, r);
      });
    }
    return train_stage(*model, data_, fit_options,
                       [&](Model&, const Dataset& data, const FitOptions& options) {
                         return options_.train() ? options_.train()(model, data, options, stage)
                                                 : fit(model, data, options);
                       });
  }

private:
  const Dataset& data_;
  const PipelineOptions& options_;
};

// pykan's prune(node_th, edge_th) on the training inputs, as KANImpl::prune does it but keeping
// the scores each step used.
PruneResult prune(KAN& model, const Dataset& data, const PruneStage& stage) {
  PruneResult pruning;
  pruning.width_before = pykan_width(model->options());
  const auto node_scores = attribute(*model, data.train_input);
  model = prune_node(*model, node_scores, stage.node_th);
  const auto edge_scores = attribute(*model, data.train_input);
  prune_edge(*model, edge_scores, stage.edge_th);
  pruning.width_after = pykan_width(model->options());
  for (const auto& scores : node_scores.node_scores)
    pruning.node_scores.push_back(values_of(scores));
  for (const auto& scores : edge_scores.edge_scores) {
    pruning.edge_scores.emplace_back();
    for (int64_t i = 0; i < scores.size(0); ++i)
      pruning.edge_scores.back().push_back(values_of(scores[i]));
  }
  return pruning;
}

// The learned activation of `edges` (all of one layer) beside c f(a x + b) + d, at
// kCurvePoints of their training inputs evenly spaced in rank. `acts` are the layer's
// activations before auto_symbolic; the model holds the fits' a, b, c, d.
void add_curves(const std::vector<SymbolicEdgeResult*>& edges, const KAN& model,
                const LayerActivations& acts) {
  if (edges.empty())
    return;
  const int64_t N = acts.input.size(0), O = acts.edges.size(2);
  std::vector<int64_t> in, flat;
  for (const auto* e : edges) {
    in.push_back(e->i);
    flat.push_back(e->i * O + e->j);
  }
  const auto device = acts.input.device();
  const auto x = acts.input.index_select(1, torch::tensor(in).to(device)); // (N, E)
  const auto y = acts.edges.reshape({N, -1}).index_select(1, torch::tensor(flat).to(device));
  const auto order = x.argsort(int64_t{0});
  const auto ranks = torch::linspace(0, static_cast<double>(N - 1),
                                     std::min(SymbolicResult::kCurvePoints, N), torch::kFloat64)
                         .round()
                         .to(torch::kLong)
                         .to(device);
  const auto picked = order.index_select(0, ranks);
  const auto xs = x.gather(0, picked).to(torch::kCPU, torch::kFloat64).t().contiguous();
  const auto ys = y.gather(0, picked).to(torch::kCPU, torch::kFloat64).t().contiguous();
  const auto& layer = *model->layer(static_cast<size_t>(edges.front()->layer));
  const auto affine = layer.symbolic_affine.detach().to(torch::kCPU, torch::kFloat64);
  for (size_t e = 0; e < edges.size(); ++e) {
    auto& edge = *edges[e];
    const auto p = affine[edge.j][edge.i];
    const auto& f = symbolic_function(edge.function).f;
    const auto fit = p[2] * f(p[0] * xs[e] + p[1]) + p[3];
    edge.curve = SymbolicCurve{values_of(xs[e]), values_of(ys[e]), values_of(fit)};
  }
}

// pykan's auto_symbolic on the training inputs and the curves of the edges it fixed.
SymbolicResult fix_symbolic(KAN& model, const Dataset& data, const SymbolicStage& stage) {
  SymbolicResult symbolic;
  // The learned activations, before auto_symbolic replaces them.
  std::vector<LayerActivations> acts;
  {
    torch::NoGradGuard no_grad;
    const bool saved = model->save_activations();
    model->set_save_activations(true);
    model->forward(data.train_input);
    acts = model->activations();
    model->set_save_activations(saved);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto choices = auto_symbolic(*model, data.train_input, stage.lib, stage.weight_simple,
                                     stage.r2_threshold, symbolic_search(stage.search));
  symbolic.auto_symbolic_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& c : choices)
    symbolic.edges.push_back(
        {static_cast<int64_t>(c.layer), c.i, c.j, c.name, c.r2, c.fixed, {}, std::nullopt});
  std::vector<std::vector<SymbolicEdgeResult*>> curved(model->depth());
  size_t curves = 0;
  for (auto& edge : symbolic.edges)
    if (edge.fixed && edge.function != "0" && curves < SymbolicResult::kMaxCurves) {
      curved[static_cast<size_t>(edge.layer)].push_back(&edge);
      ++curves;
    }
  for (size_t l = 0; l < curved.size(); ++l)
    add_curves(curved[l], model, acts[l]);
  return symbolic;
}

// The fitted a, b, c, d of the fixed edges and the formula, after the training.
void finish_symbolic(SymbolicResult& symbolic, const KAN& model) {
  for (auto& edge : symbolic.edges)
    if (edge.fixed)
      edge.params =
          values_of(model->layer(static_cast<size_t>(edge.layer))->symbolic_affine[edge.j][edge.i]);
  try {
    std::vector<Formula> formula;
    for (const auto& output : symbolic_formula(*model))
      formula.push_back(
          {output.sympy(symbolic.digits), output.latex(symbolic.digits), output.sympy()});
    symbolic.formula = std::move(formula);
  } catch (const c10::Error& e) {
    symbolic.formula_error = e.what_without_backtrace();
  }
}

} // namespace

std::string PipelineStage::key() const {
  switch (kind) {
  case Kind::kTrain:
    return "trained";
  case Kind::kPrune:
    return "pruned";
  case Kind::kRefine:
    return "refined";
  case Kind::kSymbolic:
    return "symbolic";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown pipeline stage");
}

std::vector<LayerWidth> pykan_width(const KANOptions& options) {
  std::vector<LayerWidth> width;
  for (size_t l = 0; l < options.width().size(); ++l) {
    const int64_t mult = mult_nodes(options, l);
    width.push_back({options.width()[l] - mult, mult});
  }
  return width;
}

std::string width_text(const std::vector<LayerWidth>& width) {
  std::string text;
  for (const auto& layer : width)
    text += (text.empty() ? "" : ",") + (layer.mult == 0 ? std::to_string(layer.sum)
                                                         : "[" + std::to_string(layer.sum) + "," +
                                                               std::to_string(layer.mult) + "]");
  return text;
}

StageResult
train_stage(Model& model, const Dataset& data, const FitOptions& options,
            const std::function<FitHistory(Model&, const Dataset&, const FitOptions&)>& train) {
  StageResult result;
  result.history = train ? train(model, data, options) : fit(model, data, options);
  const auto metrics = evaluate(model, data, options.loss());
  result.train_rmse = metrics.train_rmse;
  result.test_rmse = metrics.test_rmse;
  result.train_accuracy = metrics.train_accuracy;
  result.test_accuracy = metrics.test_accuracy;
  return result;
}

PipelineResult run_pipeline(KAN& model, const Dataset& data, const PipelineOptions& options) {
  using Kind = PipelineStage::Kind;
  check_options(model, options);
  const int64_t steps = options.fit().steps();
  const StageRunner runner(data, options);
  PipelineResult result;
  result.trained = runner.train(model, runner.begin(Kind::kTrain, model->options().grid(), steps));
  if (options.prune()) {
    const auto& prune_stage = *options.prune();
    const auto stage =
        runner.begin(Kind::kPrune, model->options().grid(), prune_stage.steps.value_or(steps));
    result.pruned = prune(model, data, prune_stage);
    result.pruned->retrained = runner.train(model, stage);
  }
  for (const int64_t grid : options.grids()) {
    const auto stage = runner.begin(Kind::kRefine, grid, steps);
    model = model->refine(grid, data.train_input, options.fit().grid_update_memory());
    result.refined.push_back({grid, runner.train(model, stage)});
  }
  if (options.symbolic()) {
    const auto& symbolic_stage = *options.symbolic();
    const auto stage = runner.begin(Kind::kSymbolic, model->options().grid(),
                                    symbolic_stage.steps.value_or(steps));
    result.symbolic = fix_symbolic(model, data, symbolic_stage);
    result.symbolic->retrained = runner.train(model, stage);
    finish_symbolic(*result.symbolic, model);
  }
  return result;
}

} // namespace kan
