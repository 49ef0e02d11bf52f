// Grid updates and refinements in pieces under a memory budget: the same results as in one
// piece, bounded peak memory, and non-finite samples refused up front with the input named.
#include "kan/bench/measure.h"
#include "kan/nn/bspline.h"
#include "kan/nn/layer.h"
#include "kan/nn/network.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <iostream>
#include <limits>
#include <string>

namespace kan {
namespace {

using test::error_of;
using test::max_abs_diff;

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
// Large enough that everything is one piece.
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

torch::Tensor uniform(std::vector<int64_t> shape, uint64_t seed, double lo = -1, double hi = 1) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::rand(shape, gen, torch::kFloat64) * (hi - lo) + lo;
}

// max |a - b| / max |b|: the relative difference the 1e-12 tolerances below bound.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return max_abs_diff(a, b) / (scale > 0 ? scale : 1.0);
}

// One input's piece of (N, O) = (400, 600) at G = 20 needs about 4 MB, its targets most of it:
// half of that splits the outputs, a tenth the samples too.
constexpr int64_t kN = 400, kI = 3, kO = 600, kG = 20, kK = 3;

TEST(GridMemory, ChunksFollowTheBudget) {
  const auto whole = curve2coef_chunks(kN, kI, kO, kG, kK, kUnbounded);
  EXPECT_EQ(whole.inputs, kI);
  EXPECT_EQ(whole.outputs, kO);
  EXPECT_EQ(whole.samples, kN);

  const auto one = curve2coef_chunks(kN, kI, kO, kG, kK, 1);
  ASSERT_EQ(one.inputs, 1); // an impossible budget gives the smallest piece, not an error...
  EXPECT_GE(one.outputs, 1);
  EXPECT_GE(one.samples, 1);

  // ...and a budget between the two splits what it must, each piece within it.
  const int64_t per_input = curve2coef_chunks(kN, 1, kO, kG, kK, kUnbounded).bytes;
  const auto inputs = curve2coef_chunks(kN, kI, kO, kG, kK, 2 * per_input);
  EXPECT_EQ(inputs.inputs, 2);
  EXPECT_EQ(inputs.outputs, kO);
  EXPECT_LE(inputs.bytes, 2 * per_input);
  const auto outputs = curve2coef_chunks(kN, kI, kO, kG, kK, per_input / 2);
  EXPECT_EQ(outputs.inputs, 1);
  EXPECT_LT(outputs.outputs, kO);
  EXPECT_EQ(outputs.samples, kN);
  EXPECT_LE(outputs.bytes, per_input / 2);
  const auto samples = curve2coef_chunks(kN, kI, kO, kG, kK, per_input / 10);
  EXPECT_EQ(samples.inputs, 1);
  EXPECT_LT(samples.samples, kN);
  EXPECT_LE(samples.bytes, per_input / 10);

  // Sizes near 2^63 saturate instead of wrapping into a small piece.
  const int64_t huge = int64_t{1} << 62;
  const auto absurd = curve2coef_chunks(huge, huge, huge, 5, 3);
  EXPECT_EQ(absurd.inputs, 1);
  EXPECT_GE(absurd.samples, 1);
  EXPECT_THROW(curve2coef_chunks(kN, kI, kO, kG, kK, 0), c10::Error);
}

TEST(GridMemory, Curve2coefInPiecesMatchesOnePiece) {
  const auto grid = extend_grid(std::get<0>(uniform({kI, kG + 1}, 1).sort(1)), kK);
  const auto x = uniform({kN, kI}, 2, -1.2, 1.2);
  const auto y = uniform({kN, kI, kO}, 3);
  const auto whole = curve2coef(x, y, grid, kK, kUnbounded);
  const int64_t per_input = curve2coef_chunks(kN, 1, kO, kG, kK, kUnbounded).bytes;
  // Pieces of inputs, of outputs within a single input, and of samples too.
  for (const int64_t budget : {2 * per_input, per_input / 2, per_input / 10}) {
    const auto chunks = curve2coef_chunks(kN, kI, kO, kG, kK, budget);
    const auto pieces = curve2coef(x, y, grid, kK, budget);
    const std::string what = "budget " + std::to_string(budget) + ": pieces of " +
                             std::to_string(chunks.inputs) + " inputs, " +
                             std::to_string(chunks.outputs) + " outputs, " +
                             std::to_string(chunks.samples) + " samples";
    EXPECT_LE(relative_diff(pieces, whole), 1e-12) << what;
    if (chunks.outputs == kO) { // every input's problem is independent: bit-identical
      EXPECT_TRUE(torch::equal(pieces, whole)) << what;
    }
  }
}

// Two identical float64 layers, one updated with an unbounded budget, the other with `budget`.
void expect_grid_update_matches(SplineBackend backend, int64_t budget) {
  const auto options =
      KANLayerOptions(kI, kO).grid(kG).k(kK).seed(4).dtype(torch::kFloat64).backend(backend);
  KANLayer whole(options), pieces(options);
  const auto x = uniform({kN, kI}, 5, -0.8, 1.3);
  whole->update_grid_from_samples(x, kUnbounded);
  pieces->update_grid_from_samples(x, budget);
  const std::string what = to_string(backend) + ", budget " + std::to_string(budget);
  EXPECT_TRUE(torch::equal(pieces->grid, whole->grid)) << what;
  EXPECT_LE(relative_diff(pieces->coef, whole->coef), 1e-12) << what;

  // Refinement of the updated layer, at the samples and at the dense default sample.
  for (const bool with_samples : {true, false}) {
    auto refined = options;
    refined.grid(2 * kG);
    KANLayer a(refined), b(refined);
    const auto samples = with_samples ? x : torch::Tensor();
    a->initialize_from_parent(*whole, samples, kUnbounded);
    b->initialize_from_parent(*whole, samples, budget);
    EXPECT_TRUE(torch::equal(b->grid, a->grid)) << what;
    EXPECT_LE(relative_diff(b->coef, a->coef), 1e-12)
        << what << (with_samples ? ", refined at the samples" : ", refined at the dense sample");
  }
}

TEST(GridMemory, LayerGridUpdateAndRefinementInPiecesMatchOnePiece) {
  const int64_t per_input = curve2coef_chunks(kN, 1, kO, kG, kK, kUnbounded).bytes;
  for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
    for (const int64_t budget : {2 * per_input, per_input / 2, per_input / 10})
      expect_grid_update_matches(backend, budget);
  }
}

TEST(GridMemory, NetworkGridUpdateAndRefineInPiecesMatchOnePiece) {
  for (const auto backend : {SplineBackend::kFused, SplineBackend::kReference}) {
    const auto options =
        KANOptions({3, 40, 2}).grid(10).seed(6).dtype(torch::kFloat64).backend(backend);
    KAN whole(options), pieces(options);
    const auto x = uniform({300, 3}, 7);
    whole->update_grid_from_samples(x, kUnbounded);
    // 64 KB: pieces of inputs, outputs and samples, and the forward between layers in pieces.
    pieces->update_grid_from_samples(x, 64 << 10);
    for (size_t l = 0; l < whole->depth(); ++l) {
      EXPECT_LE(relative_diff(pieces->layer(l)->grid, whole->layer(l)->grid), 1e-12)
          << to_string(backend) << " layer " << l;
      EXPECT_LE(relative_diff(pieces->layer(l)->coef, whole->layer(l)->coef), 1e-12)
          << to_string(backend) << " layer " << l;
    }
    auto a = whole->refine(20, x, kUnbounded), b = whole->refine(20, x, 64 << 10);
    EXPECT_LE(relative_diff(b(x), a(x)), 1e-12) << to_string(backend);
  }
}

// Peak resident memory of a grid update and a refinement of a wide layer, under a 64 MB budget.
// In one piece the float64 basis is I * N * (G + k) * 8 B = 124 MB, and its QR holds about five of
// those at once: 700 MB on the CPU (1 GB elsewhere, where the recursion holds eight of I * N *
// (G + 2k + 1)). (Sized for a few seconds: the work grows with I N G.)
TEST(GridMemory, GridUpdateAndRefineMemoryStaysWithinTheBudget) {
  constexpr int64_t I = 150, N = 1000, G = 100;
  constexpr int64_t budget = int64_t{64} << 20;
  EXPECT_GT(curve2coef_chunks(N, I, 1, G, 3, kUnbounded).bytes, 8 * budget);
  const auto options = KANLayerOptions(I, 1).k(3).dtype(torch::kFloat64);
  KANLayer layer(KANLayerOptions(options).grid(G));
  KANLayer coarse(KANLayerOptions(options).grid(G / 2)), finer(KANLayerOptions(options).grid(G));
  const auto x = uniform({N, I}, 8);
  auto peak_growth = [&](const char* what, auto&& work) -> int64_t {
    const kan::bench::PeakMemory memory(torch::kCPU);
    work();
    const auto growth = memory.bytes();
    if (!growth)
      return -1;
    RecordProperty(std::string(what) + "_peak_rss_growth_bytes", std::to_string(*growth));
    return *growth;
  };
  const int64_t update =
      peak_growth("grid_update", [&] { layer->update_grid_from_samples(x, budget); });
  const int64_t refine =
      peak_growth("refine", [&] { finer->initialize_from_parent(*coarse, x, budget); });
  if (update < 0)
    GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  EXPECT_LT(update, int64_t{256} << 20)
      << "a grid update's peak resident memory grew by " << (update >> 20) << " MiB";
  EXPECT_LT(refine, int64_t{256} << 20)
      << "a refinement's peak resident memory grew by " << (refine >> 20) << " MiB";
  std::cout << "peak resident growth under a 64 MiB budget: grid update " << (update >> 20)
            << " MiB, refinement " << (refine >> 20) << " MiB\n";
  EXPECT_TRUE(layer->coef.isfinite().all().item<bool>());
  EXPECT_TRUE(finer->coef.isfinite().all().item<bool>());
}

TEST(GridMemory, NonFiniteSamplesAreRefusedNamingTheInput) {
  auto x = uniform({50, 2}, 9);
  x[3][0] = std::numeric_limits<double>::quiet_NaN();
  x[7][1] = std::numeric_limits<double>::quiet_NaN();
  x[9][1] = std::numeric_limits<double>::infinity();

  KANLayer layer(KANLayerOptions(2, 3).dtype(torch::kFloat64));
  const auto grid_before = layer->grid.clone();
  auto message = error_of([&] { layer->update_grid_from_samples(x); });
  EXPECT_NE(message.find("the layer's input x (grid-update samples) contains 2 NaN and 1 Inf"),
            std::string::npos)
      << message;
  EXPECT_TRUE(torch::equal(layer->grid, grid_before)) << "a refused update changed the grid";
  KANLayer finer(KANLayerOptions(2, 3).grid(10).dtype(torch::kFloat64));
  message = error_of([&] { finer->initialize_from_parent(*layer, x); });
  EXPECT_NE(message.find("refinement samples) contains 2 NaN and 1 Inf"), std::string::npos)
      << message;

  KAN model(KANOptions({2, 4, 1}).dtype(torch::kFloat64));
  message = error_of([&] { model->update_grid_from_samples(x); });
  EXPECT_NE(message.find("the network's input x (grid-update samples) contains 2 NaN and 1 Inf"),
            std::string::npos)
      << message;
  message = error_of([&] { (void)model->refine(10, x); });
  EXPECT_NE(message.find("the network's input x (refinement samples) contains 2 NaN and 1 Inf"),
            std::string::npos)
      << message;

  // A hidden layer's samples turn non-finite through the layer before it: name that layer.
  {
    torch::NoGradGuard no_grad;
    model->layer(0)->scale_base[1][2] = std::numeric_limits<double>::infinity();
  }
  const auto clean = uniform({50, 2}, 10);
  message = error_of([&] { model->update_grid_from_samples(clean); });
  EXPECT_NE(message.find("the input of layer 1 (grid-update samples: the output of layer 0) "
                         "contains"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("did training diverge"), std::string::npos) << message;
  message = error_of([&] { (void)model->refine(10, clean); });
  EXPECT_NE(message.find("the input of layer 1 (refinement samples: the output of layer 0)"),
            std::string::npos)
      << message;
}

} // namespace
} // namespace kan
