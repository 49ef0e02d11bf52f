#pragma once
/// pykan 0.2.8's LBFGS optimiser (its kan/LBFGS.py), the one kan::fit trains with
/// (docs/kan.md, "Training").

#include <torch/arg.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kan {

/// Options of kan::LBFGS, with the defaults of pykan's LBFGS class. kan::fit sets pykan's
/// training settings instead (history 10, strong Wolfe, every tolerance 1e-32).
struct LBFGSOptions : public torch::optim::OptimizerCloneableOptions<LBFGSOptions> {
  LBFGSOptions(double lr = 1);
  /// The first step of every iteration (1, the Newton step, with a line search).
  TORCH_ARG(double, lr) = 1;
  /// Iterations per step().
  TORCH_ARG(int64_t, max_iter) = 20;
  /// Objective evaluations per step() after which it stops; unset: max_iter * 5 / 4.
  TORCH_ARG(std::optional<int64_t>, max_eval) = std::nullopt;
  /// step() stops when the largest gradient component is at most this.
  TORCH_ARG(double, tolerance_grad) = 1e-7;
  /// step() stops when the loss, the step or the directional derivative changes less.
  TORCH_ARG(double, tolerance_change) = 1e-9;
  /// A curvature pair (y, s) enters the history only when y·s > tolerance_ys. pykan's addition:
  /// PyTorch's LBFGS (and LibTorch's) has 1e-10 built in.
  TORCH_ARG(double, tolerance_ys) = 1e-32;
  /// Curvature pairs kept.
  TORCH_ARG(int64_t, history_size) = 100;
  /// "strong_wolfe", or unset for fixed steps of lr.
  TORCH_ARG(std::optional<std::string>, line_search_fn) = std::nullopt;

public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override;
  void set_lr(const double lr) override;
};

/// pykan's LBFGS: PyTorch's L-BFGS with a strong-Wolfe line search (cubic interpolation), the
/// curvature threshold of LBFGSOptions::tolerance_ys, and a line search of at most 25
/// evaluations. Every step is pykan's, operation for operation: on the CPU in float64 its
/// trajectories are pykan's bit for bit (tests/test_lbfgs.cpp). Scalars the algorithm decides
/// with (the loss, the step length, directional derivatives, the two-loop coefficients) are
/// read to the host as pykan reads them; the vectors and the history stay on the parameters'
/// device.
///
/// Its state is LibTorch's torch::optim::LBFGSParamState, under the first parameter as
/// LibTorch's LBFGS keeps it, so whatever reads optimiser state (the device audit, save/load)
/// reads this one's too. One parameter group; every parameter on one device and of one dtype.
///
/// Example:
///   kan::LBFGS lbfgs(model->parameters(), kan::LBFGSOptions().line_search_fn("strong_wolfe"));
///   lbfgs.step([&] {
///     lbfgs.zero_grad();
///     auto loss = (model(x) - y).square().mean();
///     loss.backward();
///     return loss;
///   });
class LBFGS : public torch::optim::Optimizer {
public:
  explicit LBFGS(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                 LBFGSOptions defaults = {});
  explicit LBFGS(std::vector<torch::Tensor> params, LBFGSOptions defaults = {});

  /// Up to max_iter iterations; closure must zero the gradients, evaluate the objective, run
  /// backward and return the objective. Returns the closure's first value.
  torch::Tensor step(LossClosure closure) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

private:
  int64_t numel();
  /// Flat views of the parameters and their sizes, made once per step: one foreach operation
  /// then moves, saves or restores every parameter (not three operations per parameter).
  void view_parameters();
  torch::Tensor gather_flat_grad();
  void add_grad(double step_size, const torch::Tensor& update);
  std::vector<torch::Tensor> clone_param();
  void set_param(const std::vector<torch::Tensor>& params_data);
  std::pair<double, torch::Tensor> directional_evaluate(const LossClosure& closure,
                                                        const std::vector<torch::Tensor>& x,
                                                        double t, const torch::Tensor& d);
  /// step()'s iterations, from the first evaluation's loss and gradient.
  void iterate(const LossClosure& evaluate, torch::optim::LBFGSParamState& state, double loss,
               torch::Tensor flat_grad);
  /// Moves the parameters along d by the step length: the strong-Wolfe search's from t, or t
  /// itself. Returns the objective evaluations it took.
  int64_t take_step(const LossClosure& evaluate, const torch::Tensor& d, double gtd,
                    bool last_iteration, double& t, double& loss, torch::Tensor& flat_grad);

  std::optional<int64_t> numel_cache_;
  std::vector<torch::Tensor> flat_views_;
  std::vector<int64_t> numels_;
  bool host_vectors_ = false; ///< the parameters' vector arithmetic runs on the host (lbfgs.cpp)
};

} // namespace kan
