// Checkpoints: exact round trip, loading elsewhere, clear errors on bad files.
#include "kan/checkpoint.h"

#include "kan/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>

namespace kan {
namespace {

namespace fs = std::filesystem;

class Checkpoint : public test::ScratchDirTest {
protected:
  static KAN trained_model() {
    auto data =
        create_dataset(reference_function("toy").f,
                       DatasetOptions(2).train_num(100).test_num(10).dtype(torch::kFloat64));
    KAN model(KANOptions({2, 3, 1})
                  .grid(4)
                  .k(2)
                  .seed(8)
                  .sb_trainable(false)
                  .dtype(torch::kFloat64)
                  .base_fun(BaseFunction::kIdentity));
    fit(model, data, FitOptions().steps(3).grid_update_num(1).stop_grid_update_step(1));
    torch::NoGradGuard no_grad;
    model->layer(0)->mask[1][2] = 0.0; // a pruned edge must survive too
    return model;
  }
};

TEST_F(Checkpoint, RoundTripIsExact) {
  auto model = trained_model();
  save_checkpoint(model, path("model.pt"));
  auto loaded = load_checkpoint(path("model.pt"));
  EXPECT_EQ(to_json(loaded->options()), to_json(model->options()));
  const auto original = model->named_parameters(), restored = loaded->named_parameters();
  ASSERT_EQ(original.size(), restored.size());
  for (const auto& p : original) {
    EXPECT_TRUE(torch::equal(p.value(), restored[p.key()])) << p.key();
    EXPECT_EQ(p.value().requires_grad(), restored[p.key()].requires_grad()) << p.key();
  }
  for (const auto& b : model->named_buffers()) {
    EXPECT_TRUE(torch::equal(b.value(), loaded->named_buffers()[b.key()])) << b.key();
  }
  const auto x = torch::rand({33, 2}, torch::kFloat64) * 2 - 1;
  EXPECT_TRUE(torch::equal(model(x), loaded(x)));
}

TEST_F(Checkpoint, RefinedModelRoundTrips) {
  auto model = trained_model()->refine(9);
  save_checkpoint(model, path("refined.pt"));
  auto loaded = load_checkpoint(path("refined.pt"));
  EXPECT_EQ(loaded->options().grid(), 9);
  EXPECT_TRUE(torch::equal(model->layer(1)->grid, loaded->layer(1)->grid));
}

TEST_F(Checkpoint, LoadsOntoAnotherDevice) {
  save_checkpoint(trained_model(), path("model.pt"));
  // The meta device stands in for another device on a machine without a GPU.
  auto loaded = load_checkpoint(path("model.pt"), torch::kMeta);
  for (const auto& t : loaded->parameters())
    EXPECT_TRUE(t.is_meta());
  for (const auto& t : loaded->buffers())
    EXPECT_TRUE(t.is_meta());
}

TEST_F(Checkpoint, BadFilesGiveClearErrors) {
  save_checkpoint(trained_model(), path("model.pt"));
  KAN_EXPECT_ERROR(load_checkpoint(path("missing.pt")), "missing.pt", "no such file");

  std::ofstream(path("empty.pt")).close();
  KAN_EXPECT_ERROR(load_checkpoint(path("empty.pt")), "empty.pt", "empty");

  const auto size = fs::file_size(path("model.pt"));
  for (double fraction : {0.1, 0.5, 0.9}) {
    fs::copy_file(path("model.pt"), path("truncated.pt"), fs::copy_options::overwrite_existing);
    fs::resize_file(path("truncated.pt"), static_cast<uintmax_t>(size * fraction));
    KAN_EXPECT_ERROR(load_checkpoint(path("truncated.pt")), "truncated.pt", "cannot read");
  }

  std::ofstream(path("text.pt")) << "definitely not a checkpoint\n";
  KAN_EXPECT_ERROR(load_checkpoint(path("text.pt")), "text.pt", "not a readable LibTorch archive");

  torch::save(torch::ones({3}), path("tensor.pt")); // a LibTorch file, but not ours
  KAN_EXPECT_ERROR(load_checkpoint(path("tensor.pt")), "tensor.pt", "not a kanbench checkpoint");
}

TEST_F(Checkpoint, MalformedConfigurationNamesTheKey) {
  torch::serialize::OutputArchive archive;
  archive.write("kanbench_format", c10::IValue(std::string("kanbench-kan-checkpoint")));
  archive.write("kanbench_format_version", c10::IValue(kCheckpointFormatVersion));
  auto config = to_json(KANOptions({2, 1}));
  config.erase("grid");
  archive.write("kanbench_config", c10::IValue(config.dump()));
  archive.save_to(path("broken.pt"));
  KAN_EXPECT_ERROR(load_checkpoint(path("broken.pt")), "broken.pt", "'grid'");
}

TEST_F(Checkpoint, OptionsJsonRoundTrip) {
  const auto options = KANOptions({4, 3, 2})
                           .grid(7)
                           .k(2)
                           .seed(123456789012345ULL)
                           .noise_scale(0.1)
                           .base_fun(BaseFunction::kZero)
                           .grid_range({-2, 3})
                           .sp_trainable(false)
                           .dtype(torch::kFloat64);
  EXPECT_EQ(to_json(kan_options_from_json(to_json(options))), to_json(options));
  auto bad = to_json(options);
  bad["k"] = "three";
  KAN_EXPECT_ERROR(kan_options_from_json(bad), "'k'", "wrong type");
}

TEST_F(Checkpoint, LoadsOntoCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  auto model = trained_model();
  save_checkpoint(model, path("model.pt"));
  auto gpu = load_checkpoint(path("model.pt"), torch::kCUDA);
  for (const auto& t : gpu->parameters())
    EXPECT_TRUE(t.is_cuda());
  const auto x = torch::rand({40, 2}, torch::kFloat64);
  EXPECT_LT(test::max_abs_diff(model(x), gpu(x.cuda())), 1e-12);
  save_checkpoint(gpu, path("from_gpu.pt"));
  EXPECT_TRUE(
      torch::equal(load_checkpoint(path("from_gpu.pt"))->layer(0)->coef, model->layer(0)->coef));
}

} // namespace
} // namespace kan
