// pykan checkpoints in and out (kan/serialize/pykan.h) and torch.save files
// (kan/serialize/torch_file.h), against the checkpoints pykan 0.2.8 wrote
// (tests/reference/pykan/pykan_checkpoints.json).

#include "kan/serialize/checkpoint.h"
#include "kan/serialize/pykan.h"
#include "kan/serialize/torch_file.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

namespace kan {
namespace {

namespace fs = std::filesystem;

// The same model with every layer on `backend`.
KAN with_backend(const KAN& model, SplineBackend backend) {
  auto options = model->options();
  KAN copy(options.backend(backend).dtype(model->dtype()));
  torch::NoGradGuard no_grad;
  auto params = copy->named_parameters();
  for (const auto& p : model->named_parameters())
    params[p.key()].copy_(p.value());
  auto buffers = copy->named_buffers();
  for (const auto& b : model->named_buffers())
    buffers[b.key()].copy_(b.value());
  return copy;
}

double tolerance(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? 1e-12 : 1e-6;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
// A copy of the reference checkpoint `name` at `prefix`, for tests that damage one file.
void copy_checkpoint(const std::string& name, const std::string& prefix) {
  for (const char* suffix : {"_config.yml", "_state", "_cache_data"})
    fs::copy_file(test::reference_checkpoint(name) + suffix, prefix + suffix,
                  fs::copy_options::overwrite_existing);
}

TEST(Pykan, LoadedCheckpointsReproducePykansOutputs) {
  const auto ref = test::load_reference("pykan_checkpoints.json");
  ASSERT_GE(ref["cases"].size(), 7u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto prefix = test::reference_checkpoint(c["name"]);
    ASSERT_TRUE(is_pykan_checkpoint(prefix));
    auto model = load_pykan(prefix);
    const auto dtype = dtype_from_string(c["dtype"]);
    EXPECT_EQ(model->dtype(), dtype);
    std::vector<int64_t> width;
    for (const auto& w : c["width"])
      width.push_back(w[0].get<int64_t>() + w[1].get<int64_t>());
    EXPECT_EQ(model->options().width(), width);
    const auto x = test::to_tensor(c["x"]).to(dtype);
    const auto y = test::to_tensor(c["y"]);
    for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
      const double diff = test::max_relative_diff(with_backend(model, backend)(x), y);
      EXPECT_LE(diff, tolerance(dtype)) << "backend " << to_string(backend);
      RecordProperty(c["name"].get<std::string>() + "_" + to_string(backend), c10::str(diff));
    }
    // pykan's cache_data is the inputs of the model's last forward before saveckpt.
    const auto cache = load_pykan_cache_data(prefix);
    ASSERT_TRUE(cache.defined());
    EXPECT_EQ(cache.size(1), width.front());
  }
}

TEST(Pykan, ConfigurationFieldsReachTheModel) {
  const auto options = load_pykan(test::reference_checkpoint("options"))->options();
  EXPECT_EQ(options.grid(), 7);
  EXPECT_EQ(options.k(), 2);
  EXPECT_EQ(options.base_fun(), BaseFunction::kIdentity);
  EXPECT_EQ(options.grid_range()[0], -2.0);
  EXPECT_EQ(options.grid_range()[1], 3.0);
  EXPECT_EQ(options.grid_eps(), 0.5);
  EXPECT_FALSE(options.sp_trainable());
  EXPECT_FALSE(options.sb_trainable());

  const auto mult = load_pykan(test::reference_checkpoint("mult"))->options();
  EXPECT_EQ(mult.width(), (std::vector<int64_t>{3, 4, 2, 1}));
  EXPECT_EQ(mult.mult(), (std::vector<int64_t>{0, 2, 1, 0}));
  EXPECT_EQ(mult.node_arity(), (std::vector<std::vector<int64_t>>{{}, {2, 3}, {3}, {}}));
  EXPECT_TRUE(mult.affine_trainable());
  EXPECT_EQ(load_pykan(test::reference_checkpoint("mult_arity3"))->options().mult_arity(), 3);
  EXPECT_EQ(load_pykan(test::reference_checkpoint("zero_base"))->options().base_fun(),
            BaseFunction::kZero);
}

TEST(Pykan, SavedCheckpointLoadsBackIdentical) {
  test::TempDir dir("kan_pykan");
  for (const char* name : {"mult", "plain_float32", "options"}) {
    SCOPED_TRACE(name);
    auto model = load_pykan(test::reference_checkpoint(name));
    const auto cache = load_pykan_cache_data(test::reference_checkpoint(name));
    save_pykan(model, dir / name, cache);
    auto copy = load_pykan(dir / name);
    const auto original = model->named_parameters(), copied = copy->named_parameters();
    for (const auto& p : original)
      EXPECT_TRUE(torch::equal(p.value(), copied[p.key()])) << p.key();
    for (const auto& b : model->named_buffers())
      EXPECT_TRUE(torch::equal(b.value(), copy->named_buffers()[b.key()])) << b.key();
    EXPECT_EQ(copy->options().width(), model->options().width());
    EXPECT_EQ(copy->options().node_arity(), model->options().node_arity());
    EXPECT_EQ(copy->options().grid_range(), model->options().grid_range());
    EXPECT_EQ(copy->options().grid_eps(), model->options().grid_eps());
    EXPECT_TRUE(torch::equal(load_pykan_cache_data(dir / name), cache));
  }
  // A model without cache data writes None.
  save_pykan(load_pykan(test::reference_checkpoint("plain")), dir / "nocache");
  EXPECT_FALSE(load_pykan_cache_data(dir / "nocache").defined());
}

TEST(Pykan, SymbolicEdgeLoadsAndAnUnknownFunctionIsRefusedNamingIt) {
  // Its outputs against pykan's: test_symbolic_edges.cpp.
  EXPECT_EQ(load_pykan(test::reference_checkpoint("symbolic"))->layer(0)->symbolic_name(1, 2),
            "sin");
  test::TempDir dir("kan_pykan");
  copy_checkpoint("symbolic", dir / "unknown");
  const auto config = dir / "unknown_config.yml";
  write_text(config, std::regex_replace(read_text(config), std::regex("sin"), "sine"));
  const auto error = test::error_of([&] { load_pykan(dir / "unknown"); });
  EXPECT_NE(error.find("edge 1 -> 2 of layer 0"), std::string::npos) << error;
  EXPECT_NE(error.find("'sine'"), std::string::npos) << error;
}

TEST(Pykan, BadCheckpointsGiveOneLineErrors) {
  test::TempDir dir("kan_pykan");
  const auto damaged = [&](const std::string& what, const auto& damage) {
    const auto prefix = dir / what;
    copy_checkpoint("plain", prefix);
    damage(prefix);
    const auto error = test::error_of([&] { load_pykan(prefix); });
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    return error;
  };
  const auto config = [](const std::string& prefix) { return prefix + "_config.yml"; };
  const auto replace = [&](const std::string& prefix, const std::string& from,
                           const std::string& to) {
    write_text(config(prefix), std::regex_replace(read_text(config(prefix)), std::regex(from), to));
  };

  EXPECT_NE(test::error_of([&] { load_pykan(dir / "absent"); }).find("absent_config.yml"),
            std::string::npos);
  auto error = damaged("no_state", [](const std::string& p) { fs::remove(p + "_state"); });
  EXPECT_NE(error.find("no_state_state"), std::string::npos) << error;
  EXPECT_NE(error.find("no such file"), std::string::npos) << error;

  error = damaged("truncated", [](const std::string& p) {
    const auto bytes = read_text(p + "_state");
    write_text(p + "_state", bytes.substr(0, bytes.size() / 2));
  });
  EXPECT_NE(error.find("truncated_state"), std::string::npos) << error;
  EXPECT_NE(error.find("not a torch.save file"), std::string::npos) << error;

  error = damaged("foreign", [&](const std::string& p) {
    save_checkpoint(load_pykan(test::reference_checkpoint("plain")), p + "_state");
  });
  EXPECT_NE(error.find("foreign_state"), std::string::npos) << error;

  error = damaged("mismatch", [&](const std::string& p) { replace(p, "grid: 5", "grid: 6"); });
  EXPECT_NE(error.find("act_fun.0."), std::string::npos) << error;
  EXPECT_NE(error.find("shape"), std::string::npos) << error;

  error = damaged("base", [&](const std::string& p) { replace(p, "silu", "tanh"); });
  EXPECT_NE(error.find("base_fun_name"), std::string::npos) << error;
  EXPECT_NE(error.find("'tanh'"), std::string::npos) << error;

  error = damaged("syntax", [&](const std::string& p) { replace(p, "k: 3", "k: [3"); });
  EXPECT_NE(error.find("YAML syntax error at line"), std::string::npos) << error;

  error = damaged("missing_field", [&](const std::string& p) { replace(p, "grid_eps: .*\n", ""); });
  EXPECT_NE(error.find("no field 'grid_eps'"), std::string::npos) << error;

  error = damaged("typed", [&](const std::string& p) { replace(p, "k: 3", "k: three"); });
  EXPECT_NE(error.find("field 'k' is 'three', expected an integer"), std::string::npos) << error;

  error = damaged("width", [&](const std::string& p) {
    replace(p, "width:(.|\n)*", "width:\n- 2\n- [x, 1]\n- 1\n");
  });
  EXPECT_NE(error.find("width[1][0]"), std::string::npos) << error;

  error =
      damaged("arity", [&](const std::string& p) { replace(p, "mult_arity: 2", "mult_arity: 1"); });
  EXPECT_NE(error.find("mult_arity"), std::string::npos) << error;
}

TEST(TorchFile, NamedTensorsRoundTripAndRefuseCode) {
  test::TempDir dir("kan_pykan");
  const NamedTensors tensors = {{"b", torch::arange(6, torch::kFloat64).reshape({2, 3})},
                                {"a", torch::ones({0, 4}, torch::kFloat32)},
                                {"t", torch::arange(6, torch::kInt64).reshape({3, 2}).t()}};
  write_named_tensors(dir / "dict", tensors);
  const auto back = read_named_tensors(dir / "dict");
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].first, tensors[i].first);
    EXPECT_TRUE(torch::equal(back[i].second, tensors[i].second)) << back[i].first;
    EXPECT_EQ(back[i].second.scalar_type(), tensors[i].second.scalar_type());
  }
  write_tensor(dir / "none", {});
  EXPECT_FALSE(read_tensor(dir / "none").defined());
  EXPECT_NE(test::error_of([&] { read_tensor(dir / "dict"); }).find("holds a dict"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { read_named_tensors(dir / "none"); }).find("holds None"),
            std::string::npos);
  // pykan's state: an OrderedDict with _metadata, every tensor in its file order.
  const auto state = read_named_tensors(test::reference_checkpoint("plain") + "_state");
  ASSERT_FALSE(state.empty());
  EXPECT_EQ(state.front().first, "node_bias_0");
}

} // namespace
} // namespace kan
