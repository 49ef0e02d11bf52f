// Multiplication nodes and the node/subnode affine parameters, as pykan's MultKAN: pykan's
// numbers, every feature of the plain network on such networks, bad structures refused.
#include "kan/data/dataset.h"
#include "kan/nn/network.h"
#include "kan/nn/pruning.h"
#include "kan/serialize/checkpoint.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace kan {
namespace {

using test::max_abs_diff;
using test::to_tensor;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

std::vector<std::vector<int64_t>> arity_lists(const nlohmann::json& j) {
  std::vector<std::vector<int64_t>> lists;
  for (const auto& l : j)
    lists.push_back(l.get<std::vector<int64_t>>());
  return lists;
}

// A network of the fixture's structure with the fixture's state, on `backend`.
KAN network_from_reference(const nlohmann::json& net, SplineBackend backend) {
  const auto& c = net["config"];
  KAN model(KANOptions(c["width"].get<std::vector<int64_t>>())
                .mult(c["mult"].get<std::vector<int64_t>>())
                .mult_arity(c["mult_arity"])
                .node_arity(arity_lists(c["node_arity"]))
                .grid(c["G"])
                .k(c["k"])
                .affine_trainable(true)
                .dtype(torch::kFloat64)
                .backend(backend));
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  auto buffers = model->named_buffers();
  size_t copied = 0;
  for (const auto& item : net["state"].items()) {
    auto* target = params.find(item.key());
    if (target == nullptr)
      target = buffers.find(item.key());
    EXPECT_NE(target, nullptr) << item.key();
    if (target == nullptr)
      continue;
    target->copy_(to_tensor(item.value()));
    ++copied;
  }
  EXPECT_EQ(copied, params.size() + buffers.size()) << "every tensor of the model is in the file";
  return model;
}

// A [2, [2, 1], 1]-shaped network with arity 3, and data for it.
KAN small_mult_network(SplineBackend backend = SplineBackend::kFused, bool affine = false) {
  return KAN(KANOptions({2, 3, 1})
                 .mult({0, 1, 0})
                 .mult_arity(3)
                 .affine_trainable(affine)
                 .grid(5)
                 .seed(4)
                 .dtype(torch::kFloat64)
                 .backend(backend));
}

TEST(MultNodes, ForwardMatchesPykansMultKAN) {
  const auto ref = test::load_reference("multkan_forward.json");
  for (const auto& net : ref["networks"]) {
    for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
      auto model = network_from_reference(net, backend);
      const auto x = to_tensor(net["x"]);
      const auto y = to_tensor(net["y"]);
      EXPECT_LT(max_abs_diff(model(x), y) / y.abs().max().item<double>(), 1e-12)
          << net["pykan_width"] << " " << to_string(backend);
      // The activations' path (regularised training) computes the same.
      model->set_save_activations(true);
      EXPECT_LT(max_abs_diff(model(x), y) / y.abs().max().item<double>(), 1e-12);
    }
  }
}

// pykan's attribute() after the same forward: node, edge and subnode scores.
TEST(MultNodes, AttributionMatchesPykan) {
  const auto ref = test::load_reference("multkan_forward.json");
  for (const auto& net : ref["networks"]) {
    auto model = network_from_reference(net, SplineBackend::kFused);
    const auto scores = attribute(*model, to_tensor(net["x"]));
    ASSERT_EQ(scores.node_scores.size(), net["node_scores"].size());
    auto expect_close = [&](const torch::Tensor& ours, const torch::Tensor& pykan,
                            const std::string& what) {
      EXPECT_EQ(ours.sizes(), pykan.sizes()) << what;
      EXPECT_LT(max_abs_diff(ours, pykan) / pykan.abs().max().item<double>(), 1e-12) << what;
    };
    for (size_t l = 0; l < scores.node_scores.size(); ++l)
      expect_close(scores.node_scores[l], to_tensor(net["node_scores"][l]),
                   "node_scores[" + std::to_string(l) + "]");
    for (size_t l = 0; l < scores.edge_scores.size(); ++l) {
      expect_close(scores.edge_scores[l], to_tensor(net["edge_scores"][l]).t(),
                   "edge_scores[" + std::to_string(l) + "]");
      expect_close(scores.subnode_scores[l], to_tensor(net["subnode_scores"][l]),
                   "subnode_scores[" + std::to_string(l) + "]");
    }
    EXPECT_TRUE(torch::equal(scores.feature_score(), scores.node_scores[0]));
  }
  KAN model(KANOptions({2, 3, 1}));
  KAN_EXPECT_ERROR(attribute(*model, torch::rand({1, 2})), "at least 2 samples", "got 1");
}

// A pruned model computes what the original computes with the pruned nodes removed.
TEST(MultNodes, PruningNodesGivesASmallerModelWithTheSameOutputs) {
  const auto ref = test::load_reference("multkan_forward.json");
  const auto& net = ref["networks"][0]; // width 3, [2, 2], [1, 1], 1
  auto model = network_from_reference(net, SplineBackend::kFused);
  const auto x = to_tensor(net["x"]);
  // Keep addition node 1 and multiplication node 3 (arity 3) of layer 1, and layer 2 whole.
  auto pruned = keep_nodes(*model, {{3, 1}, {0, 1}});
  EXPECT_EQ(pruned->options().width(), (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_EQ(pruned->options().mult(), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(pruned->options().node_arity()[1], (std::vector<int64_t>{3}));
  EXPECT_EQ(pruned->layer(0)->options().out_dim(), 1 + 3);
  auto removed = model->clone();
  auto& masked = *std::dynamic_pointer_cast<KANImpl>(removed);
  remove_node(masked, 1, 0);
  remove_node(masked, 1, 2);
  const auto expected = masked.forward(x);
  EXPECT_LT(max_abs_diff(pruned(x), expected), 1e-12 * expected.abs().max().item<double>());
  // The original is untouched.
  EXPECT_LT(max_abs_diff(model(x), to_tensor(net["y"])), 1e-12);

  // By score: nodes at or below the threshold go.
  const auto scores = attribute(*model, x).node_scores;
  const double threshold = scores[1].median().item<double>();
  auto by_score = prune_node(*model, x, threshold);
  EXPECT_EQ(by_score->options().width()[1], (scores[1] > threshold).sum().item<int64_t>());
  EXPECT_EQ(by_score->options().width()[2], (scores[2] > threshold).sum().item<int64_t>());
  KAN_EXPECT_ERROR(prune_node(*model, x, 1e9), "every node of layer 1", "unchanged");
  KAN_EXPECT_ERROR(keep_nodes(*model, {{0}}), "one list per hidden layer (2)");
  KAN_EXPECT_ERROR(keep_nodes(*model, {{0, 7}, {0}}), "layer 1 has nodes 0..3, got 7");
}

TEST(MultNodes, PruningEdgesMasksTheWeakOnes) {
  const auto ref = test::load_reference("multkan_forward.json");
  const auto& net = ref["networks"][1];
  auto model = network_from_reference(net, SplineBackend::kFused);
  const auto x = to_tensor(net["x"]);
  const auto edges = attribute(*model, x).edge_scores;
  const double threshold = edges[0].median().item<double>();
  prune_edge(*model, x, threshold);
  EXPECT_TRUE(torch::equal(model->layer(0)->mask, (edges[0] > threshold).to(torch::kFloat64)));
  remove_edge(*model, 1, 0, 0);
  EXPECT_EQ(model->layer(1)->mask[0][0].item<double>(), 0.0);
  KAN_EXPECT_ERROR(remove_edge(*model, 1, 5, 0), "layer 1 has edges 0..2 -> 0..0, got 5 -> 0");
  KAN_EXPECT_ERROR(remove_node(*model, 0, 0), "not a hidden layer");
  KAN_EXPECT_ERROR(prune_edge(*model, x, -1), "threshold must be finite and >= 0");
  const auto pruned = prune(*model, x, 0.0, 0.0);
  EXPECT_EQ(pruned->options().width().front(), 2);
}

// pykan's prune_node, prune_edge, prune and prune_input, each on a fresh copy of one model.
TEST(MultNodes, PruningMatchesPykan) {
  const auto ref = test::load_reference("multkan_prune.json");
  const auto x = to_tensor(ref["x"]);
  const auto& th = ref["thresholds"];
  const auto& ops = ref["operations"];
  for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
    auto fresh = [&] { return network_from_reference(ref, backend); };
    auto expect_like_pykan = [&](const KAN& ours, const torch::Tensor& y, const std::string& op) {
      const auto& expected = ops[op];
      const auto& o = ours->options();
      std::vector<std::vector<int64_t>> width;
      for (size_t l = 0; l < o.width().size(); ++l)
        width.push_back({o.width()[l] - mult_nodes(o, l), mult_nodes(o, l)});
      EXPECT_EQ(width, expected["pykan_width"].get<std::vector<std::vector<int64_t>>>()) << op;
      for (size_t l = 0; l < ours->depth(); ++l)
        EXPECT_EQ(max_abs_diff(ours->layer(l)->mask, to_tensor(expected["mask"][l])), 0.0)
            << op << " layer " << l;
      const auto y_pykan = to_tensor(expected["y"]);
      EXPECT_LT(max_abs_diff(y, y_pykan) / y_pykan.abs().max().item<double>(), 1e-12)
          << op << " " << to_string(backend);
    };
    const auto scores = attribute(*fresh(), x);
    for (size_t l = 0; l < scores.node_scores.size(); ++l)
      EXPECT_LT(max_abs_diff(scores.node_scores[l], to_tensor(ref["node_scores"][l])), 1e-12);

    auto nodes = prune_node(*fresh(), x, th["node"]);
    expect_like_pykan(nodes, nodes(x), "prune_node");
    auto edges = fresh();
    prune_edge(*edges, x, th["edge"]);
    expect_like_pykan(edges, edges(x), "prune_edge");
    auto both = prune(*fresh(), x, th["node"], th["edge"]);
    expect_like_pykan(both, both(x), "prune");
    // pykan's pruned model selects input_id from the full x; ours takes the selected columns.
    auto inputs = prune_input(*fresh(), x, th["input"]);
    EXPECT_EQ(inputs.input_id, ops["prune_input"]["input_id"].get<std::vector<int64_t>>());
    expect_like_pykan(inputs.model, inputs.model(inputs.select_inputs(x)), "prune_input");
  }
}

TEST(MultNodes, PruningInputsRefusesWhatCannotWork) {
  const auto ref = test::load_reference("multkan_prune.json");
  auto model = network_from_reference(ref, SplineBackend::kFused);
  const auto x = to_tensor(ref["x"]);
  const auto y = model(x);
  KAN_EXPECT_ERROR(prune_input(*model, x, 1e9),
                   "every input's score is at most the threshold 1e+09", "unchanged");
  KAN_EXPECT_ERROR(prune_input(*model, x, -1), "prune_input: threshold must be finite and >= 0");
  KAN_EXPECT_ERROR(keep_inputs(*model, {0, 5}), "layer 0 (the inputs) has nodes 0..2, got 5");
  KAN_EXPECT_ERROR(keep_inputs(*model, {}), "every node of layer 0 (the inputs)");
  EXPECT_EQ(max_abs_diff(model(x), y), 0.0) << "the model is unchanged";
  // Kept inputs in any order and repeated are the same inputs, ascending.
  EXPECT_EQ(keep_inputs(*model, {2, 0, 2})->options().width()[0], 2);
  // Scores of another model (here: before pruning) would prune the wrong nodes.
  const auto scores = attribute(*model, x);
  auto pruned = prune_node(*model, scores, ref["thresholds"]["node"]);
  KAN_EXPECT_ERROR(prune_node(*pruned, scores, 0.01), "not this model's attribute()");
  KAN_EXPECT_ERROR(prune_edge(*pruned, scores, 0.01), "not this model's attribute()");
  auto inputs = prune_input(*model, x, ref["thresholds"]["input"]);
  KAN_EXPECT_ERROR(inputs.select_inputs(x.narrow(1, 0, 1)), "select_inputs: x must be (N, 2");
}

TEST(MultNodes, StructureSizesTheLayers) {
  const auto options =
      KANOptions({3, 4, 2, 1}).mult({0, 2, 1, 0}).node_arity({{}, {2, 3}, {2}, {}});
  EXPECT_EQ(subnodes(options, 1), 2 + 2 + 3);
  EXPECT_EQ(subnodes(options, 2), 1 + 2);
  EXPECT_EQ(subnodes(options, 3), 1);
  KAN model(options);
  EXPECT_EQ(model->layer(0)->options().out_dim(), 7);
  EXPECT_EQ(model->layer(1)->options().in_dim(), 4);
  EXPECT_EQ(model->layer(1)->options().out_dim(), 3);
  EXPECT_EQ(model->subnode_scale[0].size(0), 7);
  EXPECT_EQ(model->node_scale[0].size(0), 4);
  EXPECT_EQ(model(torch::rand({5, 3})).sizes(), (std::vector<int64_t>{5, 1}));
  std::ostringstream printed;
  model->pretty_print(printed);
  EXPECT_NE(printed.str().find("mult=[0, 2, 1, 0]"), std::string::npos) << printed.str();
}

TEST(MultNodes, BadStructuresAreRefusedNamingTheEntry) {
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 1})), "mult must be empty or have one entry",
                   "[0, 1]");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 4, 0})), "mult[1] = 4", "width[1] = 3");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, -1, 0})), "mult[1] = -1");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({1, 0, 0})), "mult[0] = 1", "inputs");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 1, 0}).mult_arity(1)), "mult_arity", "got 1");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 2, 0}).node_arity({{}, {2}, {}})),
                   "node_arity[1]", "(2)", "[2]");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 1, 0}).node_arity({{}, {1}, {}})),
                   "node_arity[1] has arity 1");
  KAN_EXPECT_ERROR(KAN(KANOptions({2, 3, 1}).mult({0, 1, 0}).node_arity({{2}})),
                   "one list per layer (3)");
}

TEST(MultNodes, GradientsMatchFiniteDifferences) {
  auto model = small_mult_network(SplineBackend::kFused, /*affine=*/true);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->subnode_bias)
      p.uniform_(-0.3, 0.3);
  }
  const auto x = torch::rand({16, 2}, f64) * 2 - 1;
  model(x).square().sum().backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    // Central differences on the first element of every parameter.
    auto flat = p.value().detach().view(-1);
    const double h = 1e-6, saved = flat[0].item<double>();
    double loss[2];
    for (int side = 0; side < 2; ++side) {
      torch::NoGradGuard no_grad;
      flat[0] = saved + (side ? h : -h);
      loss[side] = model(x).square().sum().item<double>();
    }
    {
      torch::NoGradGuard no_grad;
      flat[0] = saved;
    }
    const double numeric = (loss[1] - loss[0]) / (2 * h);
    const double analytic = p.value().grad().view(-1)[0].item<double>();
    EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << p.key();
  }
}

using MultNodesFiles = test::ScratchDirTest;

TEST_F(MultNodesFiles, TrainGridUpdateRefineAndCheckpointWork) {
  const auto data = create_dataset(
      [](const torch::Tensor& x) { return (x.select(1, 0) * x.select(1, 1)).unsqueeze(1); },
      DatasetOptions(2).train_num(200).test_num(100).dtype(torch::kFloat64));
  for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
    auto model = small_mult_network(backend, /*affine=*/true);
    const auto before = evaluate(model, data).test_rmse;
    const auto history = fit(model, data, FitOptions().steps(20).lamb(0.001));
    EXPECT_LT(history.steps.back().test_rmse, before) << to_string(backend);
    EXPECT_GT(history.grid_updates, 0);
    // The affine parameters trained.
    EXPECT_GT(max_abs_diff(model->node_scale[0], torch::ones_like(model->node_scale[0])), 0.0);

    // A grid update refits the splines on new knots: close, not equal (the reference model of
    // this fit moves by 5.9% of max |y| on an AMD EPYC, 10.9% on an AVX-512 Xeon: the trajectory
    // of 20 LBFGS steps depends on the CPU's rounding).
    const auto y = model(data.train_input);
    model->update_grid_from_samples(data.train_input);
    EXPECT_LT(max_abs_diff(model(data.train_input), y), 0.15 * y.abs().max().item<double>())
        << to_string(backend);
    const auto z = model(data.train_input);
    auto refined = model->refine(10, data.train_input);
    EXPECT_TRUE(torch::equal(refined->node_bias[0], model->node_bias[0]));
    EXPECT_LT(max_abs_diff(refined(data.train_input), z), 1e-3 * z.abs().max().item<double>());

    save_checkpoint(model, path("mult.pt"));
    auto loaded = load_checkpoint(path("mult.pt"));
    EXPECT_EQ(loaded->options().mult(), model->options().mult());
    EXPECT_EQ(loaded->options().mult_arity(), 3);
    EXPECT_TRUE(loaded->options().affine_trainable());
    EXPECT_TRUE(torch::equal(loaded(data.test_input), model(data.test_input)));
  }
}

// The model of the inputs that stay is an ordinary model: its checkpoint needs nothing new.
TEST_F(MultNodesFiles, InputPrunedModelsSaveAndLoad) {
  const auto ref = test::load_reference("multkan_prune.json");
  auto model = network_from_reference(ref, SplineBackend::kFused);
  const auto x = to_tensor(ref["x"]);
  auto pruned = prune_input(*model, x, ref["thresholds"]["input"]);
  save_checkpoint(pruned.model, path("inputs.pt"));
  auto loaded = load_checkpoint(path("inputs.pt"));
  EXPECT_EQ(loaded->options().width(), pruned.model->options().width());
  const auto selected = pruned.select_inputs(x);
  EXPECT_TRUE(torch::equal(loaded(selected), pruned.model(selected)));
}

TEST(MultNodes, PlainNetworksKeepTheIdentityAndSkipIt) {
  KAN model(KANOptions({2, 3, 1}).seed(2).dtype(torch::kFloat64));
  EXPECT_FALSE(model->applies_affine());
  const auto x = torch::rand({8, 2}, f64);
  EXPECT_TRUE(torch::equal(model->nodes_from_subnodes(0, x), x));
  for (const auto& p : model->node_scale)
    EXPECT_FALSE(p.requires_grad());
  EXPECT_TRUE(small_mult_network()->applies_affine());
}

TEST(MultNodes, ForwardOnCudaMatchesCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  auto cpu = small_mult_network(SplineBackend::kFused, true);
  auto gpu = small_mult_network(SplineBackend::kFused, true);
  gpu->to(torch::kCUDA);
  const auto x = torch::rand({500, 2}, f64) * 2 - 1;
  EXPECT_LT(max_abs_diff(cpu(x), gpu(x.cuda()).cpu()), 1e-12);
  auto refined = gpu->refine(7, x.cuda());
  EXPECT_TRUE(refined->node_scale[0].is_cuda());
}

TEST(MultNodes, PruningOnCudaMatchesCpu_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto ref = test::load_reference("multkan_prune.json");
  auto cpu = network_from_reference(ref, SplineBackend::kFused);
  auto gpu = network_from_reference(ref, SplineBackend::kFused);
  gpu->to(torch::kCUDA);
  const auto x = to_tensor(ref["x"]);
  const auto& th = ref["thresholds"];
  auto on_cpu = prune_input(*cpu, x, th["input"]);
  auto on_gpu = prune_input(*gpu, x.cuda(), th["input"]);
  EXPECT_EQ(on_gpu.input_id, on_cpu.input_id);
  EXPECT_TRUE(on_gpu.model->layer(0)->coef.is_cuda());
  EXPECT_LT(max_abs_diff(on_gpu.model(on_gpu.select_inputs(x.cuda())).cpu(),
                         on_cpu.model(on_cpu.select_inputs(x))),
            1e-12);
  auto pruned_gpu = prune(*gpu, x.cuda(), th["node"], th["edge"]);
  auto pruned_cpu = prune(*cpu, x, th["node"], th["edge"]);
  EXPECT_EQ(pruned_gpu->options().width(), pruned_cpu->options().width());
  EXPECT_LT(max_abs_diff(pruned_gpu(x.cuda()).cpu(), pruned_cpu(x)), 1e-12);
}

} // namespace
} // namespace kan
