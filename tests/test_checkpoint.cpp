// Checkpoints: exact round trip, loading elsewhere, clear errors on bad files.
#include "kan/serialize/checkpoint.h"

#include "checkpoint_test_util.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize.h>

#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

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
  KAN_EXPECT_ERROR(load_checkpoint(path("text.pt")), "text.pt", "cannot read checkpoint",
                   "not a torch.save file or LibTorch archive");

  torch::save(torch::ones({3}), path("tensor.pt")); // a LibTorch file, but not ours
  KAN_EXPECT_ERROR(load_checkpoint(path("tensor.pt")), "tensor.pt", "not a kanbench checkpoint");
}

TEST_F(Checkpoint, MalformedConfigurationNamesTheKey) {
  torch::serialize::OutputArchive archive;
  archive.write("kanbench_format", c10::IValue(std::string("kanbench-kan-checkpoint")));
  archive.write("kanbench_format_version", c10::IValue(kCheckpointFormatVersion));
  archive.write("kanbench_model_kind", c10::IValue(std::string("kan")));
  auto config = to_json(KANOptions({2, 1}));
  config.erase("grid");
  archive.write("kanbench_config", c10::IValue(config.dump()));
  archive.save_to(path("broken.pt"));
  KAN_EXPECT_ERROR(load_checkpoint(path("broken.pt")), "broken.pt", "grid: missing");
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
  KAN_EXPECT_ERROR(kan_options_from_json(bad, "model"), "model.k", "expected an integer");
}

// The file's bytes, and the offset of `tensor`'s bytes in it (stored uncompressed).
std::pair<std::string, size_t> find_tensor_bytes(const std::string& file, const torch::Tensor& t) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cpu = t.contiguous();
  const std::string needle(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
  return {bytes, bytes.find(needle)};
}

void write_bytes(const std::string& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(Checkpoint, CorruptTensorBytesAreRefusedNamingTheTensor) {
  auto model = trained_model();
  save_checkpoint(model, path("model.pt"));
  auto [bytes, at] = find_tensor_bytes(path("model.pt"), model->layer(1)->coef);
  ASSERT_NE(at, std::string::npos);
  auto flipped = bytes;
  flipped[at + 3] ^= 0x01; // the lowest bits of one coefficient: still a finite number
  write_bytes(path("flipped.pt"), flipped);
  KAN_EXPECT_ERROR(load_checkpoint(path("flipped.pt")), "flipped.pt", "layers.1.coef", "checksum",
                   "corrupt");

  auto nan = bytes;
  const double not_a_number = std::nan("");
  nan.replace(at, sizeof not_a_number, reinterpret_cast<const char*>(&not_a_number),
              sizeof not_a_number);
  write_bytes(path("nan.pt"), nan);
  // The checksum is checked before anything reads the values.
  KAN_EXPECT_ERROR(load_checkpoint(path("nan.pt")), "nan.pt", "layers.1.coef", "checksum");
}

TEST_F(Checkpoint, NonFiniteValuesInAFileWithoutChecksumsAreRefused) {
  auto model = trained_model();
  {
    torch::NoGradGuard no_grad;
    model->layer(1)->coef[0][0][0] = std::nan("");
  }
  auto options = model->options();
  test::write_version1_checkpoint(path("v1-nan.pt"), to_json(options.dtype(model->dtype())),
                                  *model);
  KAN_EXPECT_ERROR(load_checkpoint(path("v1-nan.pt")), "v1-nan.pt", "layers.1.coef", "1 NaN");
}

TEST_F(Checkpoint, NonFiniteModelsAreNotWritten) {
  auto model = trained_model();
  save_checkpoint(model, path("model.pt"));
  const auto before = fs::file_size(path("model.pt"));
  {
    torch::NoGradGuard no_grad;
    model->layer(0)->scale_sp[0][0] = std::numeric_limits<double>::infinity();
  }
  KAN_EXPECT_ERROR(save_checkpoint(model, path("model.pt")), "layers.0.scale_sp", "1 Inf");
  EXPECT_EQ(fs::file_size(path("model.pt")), before);
  EXPECT_NO_THROW(load_checkpoint(path("model.pt")));
}

TEST_F(Checkpoint, ADtypeThatContradictsTheConfigurationIsRefused) {
  auto model = trained_model(); // float64 tensors
  auto options = model->options();
  test::write_version1_checkpoint(path("mixed.pt"), to_json(options.dtype(torch::kFloat32)),
                                  *model);
  KAN_EXPECT_ERROR(load_checkpoint(path("mixed.pt")), "mixed.pt", "float64", "float32",
                   "nothing is converted silently");
}

TEST_F(Checkpoint, VersionOneFilesStillLoad) {
  auto model = trained_model();
  auto options = model->options();
  test::write_version1_checkpoint(path("v1.pt"), to_json(options.dtype(model->dtype())), *model);
  const auto loaded = load_checkpoint(path("v1.pt"));
  EXPECT_TRUE(torch::equal(loaded->layer(1)->coef, model->layer(1)->coef));
}

TEST_F(Checkpoint, WritesAtomicallyAndReplacesASymlinkInsteadOfItsTarget) {
  auto model = trained_model();
  std::ofstream(path("precious.txt")) << "keep me";
  fs::create_symlink(path("precious.txt"), path("model.pt"));
  save_checkpoint(model, path("model.pt"));
  std::ifstream in(path("precious.txt"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
  EXPECT_FALSE(fs::is_symlink(path("model.pt")));
  EXPECT_NO_THROW(load_checkpoint(path("model.pt")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 2);
}

TEST_F(Checkpoint, AFailingWriterIsAnErrorNotAnAbort) {
  // LibTorch's archive writer retries a failed write in its destructor; the failure must come
  // out as one exception after it is done, so that a full disk does not abort kanbench fit.
  auto model = trained_model();
  size_t written = 0;
  try {
    save_checkpoint(model, [&](const void*, size_t size) {
      if (written + size > 1000)
        throw std::runtime_error("model.pt: cannot write: No space left on device");
      written += size;
    });
    ADD_FAILURE() << "no error from a failing writer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
  EXPECT_LE(written, 1000u);
}

TEST_F(Checkpoint, FoldersAndMissingGpusAreNamed) {
  save_checkpoint(trained_model(), path("model.pt"));
  KAN_EXPECT_ERROR(load_checkpoint(dir_.string()), "is a folder");
  if (!torch::cuda::is_available()) {
    KAN_EXPECT_ERROR(load_checkpoint(path("model.pt"), torch::kCUDA), "model.pt",
                     "no usable CUDA device");
  }
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
