// The whole-network node (KANImpl::set_whole_network_node) and the evaluation without autograd
// (KANImpl::mse_objective) against the same network run layer by layer: outputs, losses and every
// gradient on every feature the node covers (multiplication nodes of several arities, trainable
// affine maps, pruned edges, frozen scales, the base functions, spline orders, float32 and float64,
// with and without the regulariser), and the rule that picks it.
#include "kan/nn/network.h"
#include "kan/symbolic/symbolic.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>

#include <cstdlib>
#include <string>

namespace kan {
namespace {

using test::max_relative_diff;

// Whether this process's CPU kernels run a layer in one pass (KAN_FUSED_CPU_ISA's cuda-threads
// and cuda-blocks sets keep the layer and its sums apart, as the GPU does): the node needs them.
bool kernels_fuse_layers() {
  const char* isa = std::getenv("KAN_FUSED_CPU_ISA");
  return isa == nullptr || std::string(isa).rfind("cuda", 0) != 0;
}

bool ran_as_one_node(const torch::Tensor& output) {
  return output.grad_fn() != nullptr &&
         output.grad_fn()->name().find("NetworkFunction") != std::string::npos;
}

struct Step {
  torch::Tensor output, loss, grad_x;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  bool one_node = false;
};

// MSE against a target plus 0.01 times the regulariser (when regularised), and its gradients.
Step step(KAN& model, const torch::Tensor& x_in, bool whole_network, bool regularised) {
  model->set_whole_network_node(whole_network);
  model->set_save_statistics(regularised);
  model->zero_grad();
  auto x = x_in.clone().requires_grad_(true);
  Step s;
  s.output = model(x);
  s.one_node = ran_as_one_node(s.output);
  s.loss = (s.output - 0.3).square().mean();
  if (regularised)
    s.loss = s.loss + 0.01 * model->regularization(RegularizationOptions().lamb_entropy(2));
  s.loss.backward();
  s.grad_x = x.grad();
  for (const auto& p : model->named_parameters())
    if (p.value().requires_grad())
      s.grads.emplace_back(p.key(), p.value().grad().defined() ? p.value().grad()
                                                               : torch::zeros_like(p.value()));
  return s;
}

// The same objective against labels, the MSE plus 0.01 times the regulariser, without autograd
// (KANImpl::mse_objective): the values and the gradients it writes.
Step objective_without_autograd(KAN& model, const torch::Tensor& x, const torch::Tensor& labels,
                                bool regularised) {
  model->set_whole_network_node(true);
  model->zero_grad();
  Step s;
  const auto values = model->mse_objective(x, labels, regularised ? 0.01 : 0.0,
                                           RegularizationOptions().lamb_entropy(2));
  s.one_node = values.has_value();
  if (!values)
    return s;
  s.loss = values->total;
  for (const auto& p : model->named_parameters())
    if (p.value().requires_grad())
      s.grads.emplace_back(p.key(), p.value().grad().defined() ? p.value().grad()
                                                               : torch::zeros_like(p.value()));
  return s;
}

// An evaluation without autograd against another evaluation of the same objective: the loss and
// every gradient within tol.
void expect_same_objective(const Step& direct, const Step& expected, double tol,
                           const std::string& what) {
  EXPECT_LE(max_relative_diff(direct.loss, expected.loss), tol) << what;
  ASSERT_EQ(direct.grads.size(), expected.grads.size()) << what;
  for (size_t i = 0; i < direct.grads.size(); ++i)
    EXPECT_LE(max_relative_diff(direct.grads[i].second, expected.grads[i].second), tol)
        << what << ", " << direct.grads[i].first;
}

// Perturbs every parameter (affine maps and scales off their initial 1 and 0, so that every
// gradient path matters) and prunes one edge.
void perturb(KAN& model) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (auto& p : model->parameters())
    p.add_((torch::rand(p.sizes(), gen, torch::kFloat64) - 0.5).to(p.scalar_type()) * 0.4);
  model->layer(0)->mask.view(-1)[1] = 0;
}

void check_same(KANOptions options, double tol, bool regularised,
                const std::vector<int64_t>& sizes = {1, 3, 200}) {
  KAN model(options.grid(4).seed(3));
  perturb(model);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (const int64_t N : sizes) {
    // Some samples outside the grid, where the splines are zero.
    const auto x = (torch::rand({N, options.width()[0]}, gen, torch::kFloat64) * 2.4 - 1.2)
                       .to(options.dtype());
    const auto layered = step(model, x, false, regularised);
    const auto node = step(model, x, true, regularised);
    const std::string what =
        c10::str("width ", options.width(), ", mult ", options.mult(), ", ", options.dtype(),
                 ", N=", N, regularised ? ", regularised" : "");
    EXPECT_FALSE(layered.one_node) << what;
    EXPECT_EQ(node.one_node, kernels_fuse_layers()) << what;
    EXPECT_LE(max_relative_diff(node.output, layered.output), tol) << what;
    EXPECT_LE(max_relative_diff(node.loss, layered.loss), tol) << what;
    EXPECT_LE(max_relative_diff(node.grad_x, layered.grad_x), tol) << what;
    ASSERT_EQ(node.grads.size(), layered.grads.size()) << what;
    for (size_t i = 0; i < node.grads.size(); ++i)
      EXPECT_LE(max_relative_diff(node.grads[i].second, layered.grads[i].second), tol)
          << what << ", " << node.grads[i].first;
    // Without autograd: the same loss against labels 0.3 and the same gradients.
    const auto direct = objective_without_autograd(
        model, x, torch::full({N, options.width().back()}, 0.3, x.options()), regularised);
    ASSERT_EQ(direct.one_node, kernels_fuse_layers()) << what;
    if (!direct.one_node)
      continue;
    expect_same_objective(direct, layered, tol, what + ", without autograd");
  }
}

void check_both_dtypes(const KANOptions& options) {
  for (const bool regularised : {false, true}) {
    check_same(KANOptions(options).dtype(torch::kFloat64), 1e-11, regularised);
    check_same(KANOptions(options).dtype(torch::kFloat32), 2e-5, regularised);
  }
}

TEST(FusedBackend, WholeNetworkNodeMatchesLayerByLayer) {
  check_both_dtypes(KANOptions({3, 4, 2}));
  check_both_dtypes(KANOptions({2, 5, 1})); // pykan's toy
  check_both_dtypes(KANOptions({2, 3, 3, 1}).k(1));
  check_both_dtypes(KANOptions({2, 19, 11}).k(5)); // wider than one vector of outputs
}

TEST(FusedBackend, WholeNetworkEvaluationsMatchTheReferenceBackend) {
  // Against the reference backend (no fused kernel at all), after an evaluation at other points
  // (nothing of it may stay in the next), with a last slice shorter than the lanes.
  struct Case {
    KANOptions options;
    double tol;
  };
  for (const auto& c : {Case{KANOptions({2, 5, 1}).grid(3).dtype(torch::kFloat64), 1e-10},
                        Case{KANOptions({3, 4, 2}).grid(4).dtype(torch::kFloat32), 2e-4}}) {
    KAN fused(KANOptions(c.options).seed(3));
    KAN reference(KANOptions(c.options).seed(3).backend(SplineBackend::kReference));
    perturb(fused);
    perturb(reference);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    for (const int64_t N : {203, 1000}) {
      const auto draw = [&] {
        return (torch::rand({N, c.options.width()[0]}, gen, torch::kFloat64) * 2.4 - 1.2)
            .to(c.options.dtype());
      };
      const auto other = draw(), x = draw();
      const auto labels = torch::full({N, c.options.width().back()}, 0.3, x.options());
      const auto expected = step(reference, x, false, true);
      for (const bool whole_network : {false, true}) {
        step(fused, other, whole_network, true);
        const auto got = step(fused, x, whole_network, true);
        const std::string what = c10::str(c10::IntArrayRef(c.options.width()), ", N=", N,
                                          whole_network ? ", one node" : ", layer by layer");
        EXPECT_LE(max_relative_diff(got.loss, expected.loss), c.tol) << what;
        EXPECT_LE(max_relative_diff(got.grad_x, expected.grad_x), c.tol) << what;
        ASSERT_EQ(got.grads.size(), expected.grads.size()) << what;
        for (size_t i = 0; i < got.grads.size(); ++i)
          EXPECT_LE(max_relative_diff(got.grads[i].second, expected.grads[i].second), c.tol)
              << what << ", " << got.grads[i].first;
      }
      objective_without_autograd(fused, other, labels, true);
      const auto direct = objective_without_autograd(fused, x, labels, true);
      if (!direct.one_node)
        continue;
      expect_same_objective(direct, expected, c.tol, "without autograd");
    }
  }
}

TEST(FusedBackend, WholeNetworkNodeWithMultiplicationNodesAndAffineMaps) {
  check_both_dtypes(KANOptions({2, 3, 1}).mult({0, 1, 0}).mult_arity(3));
  check_both_dtypes(KANOptions({3, 4, 3, 1}).mult({0, 2, 1, 0}).node_arity({{}, {2, 3}, {2}, {}}));
  check_both_dtypes(KANOptions({3, 4, 2}).affine_trainable(true));
}

TEST(FusedBackend, WholeNetworkNodeWithOtherBaseFunctionsAndFrozenScales) {
  check_both_dtypes(KANOptions({3, 4, 2}).base_fun(BaseFunction::kIdentity));
  check_both_dtypes(KANOptions({3, 4, 2}).base_fun(BaseFunction::kZero));
  check_both_dtypes(KANOptions({3, 4, 2}).sb_trainable(false).sp_trainable(false));
}

// Evaluations at one training input keep the first layer's values that depend on x and its grid
// alone (detail::KeptInput): each evaluation must still be the layer-by-layer one at the x and
// grid of that moment, after x changes in place (with and without a version bump), after a grid
// update, with another number of threads (other slices of the samples), and across an input too
// large to keep.
TEST(FusedBackend, EvaluationsAtOneInputFollowItsChangesAndTheGrid) {
  if (!kernels_fuse_layers())
    GTEST_SKIP() << "this CPU kernel set keeps the layer and its sums apart";
  const int saved_threads = at::get_num_threads();
  struct Case {
    KANOptions options;
    double tol;
    int64_t N;
  };
  // [1, 4, 1] at 10007 samples: two threads split its first layer's samples in two slices.
  for (const auto& c :
       {Case{KANOptions({2, 5, 1}).dtype(torch::kFloat64), 1e-11, 1003},
        Case{KANOptions({1, 4, 1}).dtype(torch::kFloat64), 1e-11, 10007},
        Case{KANOptions({3, 4, 2}).dtype(torch::kFloat32), 2e-5, 1003},
        Case{KANOptions({2, 3, 1}).base_fun(BaseFunction::kIdentity), 2e-5, 1003}}) {
    KAN model(KANOptions(c.options).grid(5).seed(3));
    perturb(model);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
    const int64_t I = c.options.width()[0], O = c.options.width().back();
    const auto draw = [&](int64_t N) {
      return (torch::rand({N, I}, gen, torch::kFloat64) * 2.4 - 1.2).to(c.options.dtype());
    };
    auto x = draw(c.N);
    const auto labels = torch::full({c.N, O}, 0.3, x.options());
    const auto check = [&](const std::string& what) {
      // The first may fill what the others read, with and without the regulariser.
      for (int repeat = 0; repeat < 3; ++repeat) {
        const bool regularised = repeat < 2;
        const auto direct = objective_without_autograd(model, x, labels, regularised);
        const auto expected = step(model, x, false, regularised);
        ASSERT_TRUE(direct.one_node) << what;
        expect_same_objective(direct, expected, c.tol,
                              what + ", evaluation " + std::to_string(repeat));
      }
    };
    const std::string name = c10::str(c10::IntArrayRef(c.options.width()), " ", x.scalar_type());
    check(name);
    x.mul_(0.9); // in place: the same tensor, a new version
    check(name + ", x scaled in place");
    {
      torch::NoGradGuard no_grad;
      x.data().narrow(0, 0, 500).add_(0.05); // .data(): x's version stays
    }
    check(name + ", x changed through .data()");
    model->update_grid_from_samples(x);
    check(name + ", after a grid update");
    at::set_num_threads(saved_threads == 1 ? 2 : 1);
    check(name + ", other threads");
    at::set_num_threads(saved_threads);
    // Too large to keep (KeptInput::kMaxBytes), then small again.
    const auto small = x;
    x = draw(120000);
    {
      const auto direct =
          objective_without_autograd(model, x, torch::full({120000, O}, 0.3, x.options()), true);
      const auto expected = step(model, x, false, true);
      ASSERT_TRUE(direct.one_node) << name;
      EXPECT_LE(max_relative_diff(direct.loss, expected.loss), 10 * c.tol) << name << ", large";
    }
    x = small;
    check(name + ", small again");
  }
}

TEST(FusedBackend, WholeNetworkNodeKeepsEachLayersStatistics) {
  KAN model(KANOptions({2, 3, 2}).mult({0, 1, 0}).dtype(torch::kFloat64));
  model->set_save_statistics(true);
  const auto x = torch::rand({50, 2}, torch::kFloat64);
  model(x);
  const auto node = model->activations();
  model->set_whole_network_node(false);
  model(x);
  const auto& layered = model->activations();
  ASSERT_EQ(node.size(), layered.size());
  for (size_t l = 0; l < node.size(); ++l) {
    EXPECT_LE(max_relative_diff(node[l].input, layered[l].input), 1e-12) << "layer " << l;
    EXPECT_LE(max_relative_diff(node[l].output, layered[l].output), 1e-12) << "layer " << l;
    EXPECT_LE(max_relative_diff(node[l].moments, layered[l].moments), 1e-12) << "layer " << l;
  }
}

TEST(FusedBackend, WholeNetworkNodeOnlyWhereItApplies) {
  if (!kernels_fuse_layers())
    GTEST_SKIP() << "this CPU kernel set keeps the layer and its sums apart";
  const auto x = torch::rand({20, 2}, torch::kFloat64);
  KAN model(KANOptions({2, 3, 1}).dtype(torch::kFloat64));
  EXPECT_TRUE(ran_as_one_node(model(x)));
  {
    // Without gradients too: the same numbers either way.
    torch::NoGradGuard no_grad;
    model->set_whole_network_node(false);
    const auto layered = model(x);
    model->set_whole_network_node(true);
    EXPECT_LE(max_relative_diff(model(x), layered), 1e-13);
  }
  model->set_save_activations(true); // the plots' (N, I, O) activations: layer by layer
  EXPECT_FALSE(ran_as_one_node(model(x)));
  model->set_save_activations(false);
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    const bool one_node = ran_as_one_node(model(x));
    at::autocast::set_autocast_enabled(at::kCPU, false);
    EXPECT_FALSE(one_node);
  }
  KAN reference(KANOptions({2, 3, 1}).dtype(torch::kFloat64).backend(SplineBackend::kReference));
  EXPECT_FALSE(ran_as_one_node(reference(x)));
  // Without autograd only where nothing else is asked of the step.
  const auto labels = torch::zeros({20, 1}, torch::kFloat64);
  EXPECT_TRUE(model->mse_objective(x, labels, 0.01, {}).has_value());
  EXPECT_FALSE(model->mse_objective(x, labels, 0.01, RegularizationOptions().lamb_coef(1)));
  EXPECT_FALSE(model->mse_objective(x, torch::zeros({20, 2}, torch::kFloat64), 0.0, {}));
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(model->mse_objective(x, labels, 0.0, {}));
  }
  model->layer(0)->set_symbolic_edges({0}, {1}, {"sin"}, {1.0}, {});
  EXPECT_FALSE(ran_as_one_node(model(x))); // symbolic edges: layer by layer
  EXPECT_FALSE(model->mse_objective(x, labels, 0.01, {}));
}

} // namespace
} // namespace kan
