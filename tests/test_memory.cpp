// Memory estimates, the memory a device has, refusing what cannot fit before allocating it, and
// allocation failures while building a model reported as out of memory with the layer's size.
#include "kan/nn/memory.h"

#include "kan/bench/measure.h"
#include "kan/data/dataset.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

namespace kan {
namespace {

using test::error_of;

int64_t mem_total() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  in >> key >> kb;
  return static_cast<int64_t>(kb) * 1024;
}

TEST(Memory, FormatsBytesForPeople) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1000), "1.00 KB");
  EXPECT_EQ(format_bytes(1500), "1.50 KB");
  EXPECT_EQ(format_bytes(9996), "10.0 KB");
  EXPECT_EQ(format_bytes(999'600), "1.00 MB");
  EXPECT_EQ(format_bytes(int64_t{512} << 20), "537 MB");
  EXPECT_EQ(format_bytes(23'800'000'000), "23.8 GB");
  EXPECT_EQ(format_bytes(int64_t{1} << 50), "1.13 PB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::max() - 1), "9.22 EB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::max()), "more than 9.22 EB");
}

TEST(Memory, EstimateCountsEveryPart) {
  // [2, 5, 1], G 5, k 3, float64: 15 edges of 8 coefficients and 2 scales.
  const auto model = KANOptions({2, 5, 1}).grid(5).k(3).dtype(torch::kFloat64);
  const auto lbfgs = estimate_training_memory(model, FitOptions(), 1000, 1000);
  ASSERT_GE(lbfgs.parts.size(), 6u);
  EXPECT_EQ(lbfgs.parts[0].name, "parameters");
  EXPECT_EQ(lbfgs.parts[0].bytes, 15 * 10 * 8);
  EXPECT_EQ(lbfgs.parts[1].name, "buffers"); // grid (I, G + 2k + 1) and mask (I, O)
  EXPECT_EQ(lbfgs.parts[1].bytes, (2 * 12 + 5 * 12 + 15) * 8);
  EXPECT_EQ(lbfgs.parts[2].name, "gradients");
  EXPECT_EQ(lbfgs.parts[2].bytes, 15 * 10 * 8);
  EXPECT_EQ(lbfgs.parts[3].name, "optimizer state (LBFGS, history 10)");
  EXPECT_EQ(lbfgs.parts[3].bytes, 23 * 15 * 10 * 8);
  EXPECT_EQ(lbfgs.parts[5].name, "dataset (1000 + 1000 samples)");
  EXPECT_EQ(lbfgs.parts[5].bytes, 2000 * 3 * 8);
  EXPECT_EQ(lbfgs.what, "the model [2, 5, 1] (G 5, k 3, float64) and one LBFGS step");

  const auto adam = estimate_training_memory(model, FitOptions().opt(Optimizer::kAdam), 1000, 0);
  EXPECT_EQ(adam.parts[3].name, "optimizer state (Adam)");
  EXPECT_LT(adam.total(), lbfgs.total());

  // Regularisation on the reference backend keeps (N, I, O) edge activations, on the fused one
  // per-edge sums; the reference backend keeps an (N, I, P) basis too.
  auto activations = [&](const KANOptions& m, const FitOptions& f) {
    for (const auto& p : estimate_training_memory(m, f, 4096, 0).parts)
      if (p.name.rfind("activations", 0) == 0)
        return p.bytes;
    return int64_t{-1};
  };
  const auto wide = KANOptions({100, 100, 1}).grid(50).dtype(torch::kFloat32);
  const auto plain = activations(wide, FitOptions());
  const auto reference = KANOptions(wide).backend(SplineBackend::kReference);
  const auto reference_plain = activations(reference, FitOptions());
  EXPECT_GT(reference_plain, plain + 4096 * 100 * 57 * 4);
  EXPECT_GT(activations(reference, FitOptions().lamb(0.01)),
            reference_plain + 8 * 4096 * 100 * 100 * 4 / 2);
  // (On the CPU one node per layer, which saves less than the unregularised layer's tensors.)
  EXPECT_LT(activations(wide, FitOptions().lamb(0.01)), plain + 4096 * 100 * 100 * 4 / 10);
  // A grid update is bounded by its budget, whatever the width.
  for (const auto& p :
       estimate_training_memory(KANOptions({1000, 1000}).grid(200), FitOptions(), 100000, 0)
           .parts) {
    if (p.name.rfind("grid update", 0) == 0) {
      EXPECT_LE(p.bytes, kDefaultGridUpdateMemoryBytes + 100000 * 2000 * 4);
    }
  }
}

TEST(Memory, EstimateSaturatesInsteadOfOverflowing) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  const auto e = estimate_training_memory(KANOptions({2, huge, 1}), FitOptions(), 1000, 1000);
  EXPECT_EQ(e.total(), std::numeric_limits<int64_t>::max());
  EXPECT_NE(e.breakdown().find("parameters more than 9.22 EB"), std::string::npos) << e.breakdown();
  const auto message = error_of([&] { check_fits_in_memory(e, int64_t{1} << 40); });
  EXPECT_NE(message.find("need more than 9.22 EB"), std::string::npos) << message;
  EXPECT_EQ(message.find("e+"), std::string::npos) << message;
}

TEST(Memory, AvailableMemoryIsPlausible) {
  const int64_t available = available_memory(torch::kCPU);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, mem_total());
  if (!torch::cuda::is_available()) {
    const auto message = error_of([] { (void)available_memory(torch::Device(torch::kCUDA, 0)); });
    EXPECT_NE(message.find("CUDA is not usable"), std::string::npos) << message;
  }
}

TEST(Memory, AvailableMemory_CUDA) {
  KAN_REQUIRE_CUDA();
  const int64_t before = available_memory(torch::Device(torch::kCUDA, 0));
  EXPECT_GT(before, 0);
  // Freed tensors stay in LibTorch's cache, and still count as available.
  {
    auto t = torch::empty({int64_t{256} << 20}, torch::TensorOptions().device(torch::kCUDA));
    EXPECT_LT(available_memory(torch::Device(torch::kCUDA, 0)), before - (int64_t{200} << 20));
  }
  EXPECT_GT(available_memory(torch::Device(torch::kCUDA, 0)), before - (int64_t{64} << 20));
}

TEST(Memory, HugeWidthIsRefusedBeforeAnyAllocation) {
  // The CLI's `fit --width 2,100000000,1` case: tens of GB, refused in microseconds.
  const auto start = std::chrono::steady_clock::now();
  const auto model = KANOptions({2, 100'000'000, 1}).grid(5).k(3).dtype(torch::kFloat64);
  std::string message;
  try {
    check_fits_in_memory(model, FitOptions(), 1000, 1000);
  } catch (const c10::OutOfMemoryError& e) {
    message = e.msg();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_NE(message.find("the model [2, 100000000, 1] (G 5, k 3, float64) and one LBFGS step need "
                         "about "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("(parameters 24.0 GB, buffers "), std::string::npos) << message;
  EXPECT_NE(message.find(" but cpu has "), std::string::npos) << message;
  EXPECT_NE(message.find(" available; use a smaller width"), std::string::npos) << message;

  // What fits passes and returns its estimate.
  const auto small = check_fits_in_memory(KANOptions({2, 5, 1}), FitOptions(), 1000, 1000);
  EXPECT_LT(small.total(), int64_t{10} << 20);
}

// The estimate against a real fit's peak resident memory: model, dataset, a grid update (where
// on) and one optimiser step, measured from before the model was built.
void expect_estimate_close(const KANOptions& model_options, const FitOptions& fit_options,
                           int64_t train_num, int64_t test_num, const std::string& what) {
  const auto estimate =
      estimate_training_memory(model_options, fit_options, train_num, test_num).total();
  const int64_t out = model_options.width().back();
  const kan::bench::PeakMemory memory(torch::kCPU);
  {
    KAN model(model_options);
    const auto data = create_dataset(
        [out](const torch::Tensor& x) {
          return x.sin().sum(1, true).repeat({1, out});
        },
        DatasetOptions(model_options.width().front())
            .train_num(train_num)
            .test_num(test_num)
            .dtype(model_options.dtype()));
    (void)fit(model, data, fit_options);
  }
  const auto measured = memory.bytes();
  if (!measured)
    GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  ::testing::Test::RecordProperty(what + "_estimate_bytes", std::to_string(estimate));
  ::testing::Test::RecordProperty(what + "_peak_rss_growth_bytes", std::to_string(*measured));
  std::cout << what << ": estimate " << format_bytes(estimate) << ", measured peak growth "
            << format_bytes(*measured) << "\n";
  EXPECT_LE(estimate, 2 * *measured) << what << ": estimate " << format_bytes(estimate)
                                     << ", measured " << format_bytes(*measured);
  EXPECT_GE(2 * estimate, *measured) << what << ": estimate " << format_bytes(estimate)
                                     << ", measured " << format_bytes(*measured);
}

TEST(Memory, EstimateOfAnLBFGSStepIsWithinAFactorOfTwo) {
  // LBFGS's history dominates: 2 x 10 copies of the 10000 edges' 105 parameters (8.4 MB).
  expect_estimate_close(KANOptions({2, 5000}).grid(100).dtype(torch::kFloat64),
                        FitOptions().steps(1), 50, 50, "lbfgs");
}

TEST(Memory, EstimateOfARegularisedAdamStepWithAGridUpdateIsWithinAFactorOfTwo) {
  // The grid update dominates.
  expect_estimate_close(KANOptions({4, 1000, 4}).grid(5).dtype(torch::kFloat64),
                        FitOptions().opt(Optimizer::kAdam).lr(1e-3).lamb(0.01).steps(1), 200, 100,
                        "adam_regularised");
}

TEST(Memory, EstimateOfAFusedRegularisedStepIsWithinAFactorOfTwo) {
  // The layers' saved inputs and outputs dominate: the fused backend's regulariser keeps per-edge
  // sums, not the (N, I, O) edge activations (counting them puts the estimate 20 times off).
  expect_estimate_close(
      KANOptions({4, 200, 200, 1}).grid(5).dtype(torch::kFloat32),
      FitOptions().opt(Optimizer::kAdam).lr(1e-3).lamb(0.01).steps(1).update_grid(false), 8192, 100,
      "fused_regularised");
}

TEST(Memory, AllocationFailureWhileBuildingNamesTheLayer) {
  // 2^44 outputs: the mask alone is 2^47 bytes (128 TB), which malloc refuses at once instead of
  // overcommitting.
  const int64_t wide = int64_t{1} << 44;
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    KAN model(KANOptions({2, wide, 1}).grid(5).k(3).dtype(torch::kFloat64));
  } catch (const c10::OutOfMemoryError& e) {
    message = e.msg();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_EQ(message.rfind("out of memory while building layer 0 (2 -> 17592186044416, coef 2 x "
                          "17592186044416 x 8 float64 = 2.25 PB on cpu; the model [2, "
                          "17592186044416, 1] needs about ",
                          0),
            0u)
      << message;
  // LibTorch's own line, without c10's "[enforce fail at ...]" prefix.
  EXPECT_NE(message.find("): DefaultCPUAllocator: "), std::string::npos) << message;
  EXPECT_NE(message.find("you tried to allocate"), std::string::npos) << message;
  EXPECT_NE(message.find("; use a smaller width or grid"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  // A layer on its own names itself; a size past 2^63 bytes is refused without trying.
  message = error_of([&] { KANLayer layer(KANLayerOptions(wide, 4).dtype(torch::kFloat32)); });
  EXPECT_EQ(message.rfind("out of memory while building KANLayer (17592186044416 -> 4, coef ", 0),
            0u)
      << message;
  message = error_of([&] { KANLayer layer(KANLayerOptions(wide, wide)); });
  EXPECT_NE(message.find("it needs more than 2^63 bytes"), std::string::npos) << message;
  // Other errors pass through unchanged.
  message = error_of([&] { KANLayer layer(KANLayerOptions(0, 4)); });
  EXPECT_EQ(message.rfind("KANLayer in_dim must be >= 1", 0), 0u) << message;
}

} // namespace
} // namespace kan
