// `kanbench sweep`'s building blocks: the max-batch search (through a stand-in for "does it fit"),
// the sweep itself on cpu vs cpu-float64, memory caps, and cases on a second GPU.
#include "kan/bench/sweep.h"

#include "kan/bench/measure.h"
#include "kan/diagnostics/device_audit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <set>

namespace kan::bench {
namespace {

// ---- search_max_batch ------------------------------------------------------------------------

TEST(MaxBatchSearch, DoublesThenBisectsToTheLargestThatFits) {
  std::vector<int64_t> tried;
  const auto r = search_max_batch(
      [&](int64_t b) {
        tried.push_back(b);
        return b <= 3000;
      },
      16, 1 << 20);
  ASSERT_TRUE(r.largest.has_value());
  EXPECT_LE(*r.largest, 3000);
  EXPECT_GE(*r.largest, 3000 - 3000 / 64);
  EXPECT_EQ(r.bound, "memory");
  // Doubling first: 16, 32, ..., 2048 fit, 4096 does not.
  const std::vector<int64_t> doubling{16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  ASSERT_GE(tried.size(), doubling.size());
  EXPECT_TRUE(std::equal(doubling.begin(), doubling.end(), tried.begin()));
  // Then bisection inside (2048, 4096), every attempt recorded with its answer.
  ASSERT_EQ(r.attempts.size(), tried.size());
  for (size_t i = 0; i < tried.size(); ++i) {
    EXPECT_EQ(r.attempts[i].first, tried[i]);
    EXPECT_EQ(r.attempts[i].second, tried[i] <= 3000);
    if (i >= doubling.size()) {
      EXPECT_GT(tried[i], 2048);
      EXPECT_LT(tried[i], 4096);
    }
  }
  EXPECT_LT(tried.size(), doubling.size() + 12u);
}

TEST(MaxBatchSearch, ExactAtFineResolutionAndBoundedByItsLimit) {
  const auto exact = search_max_batch([](int64_t b) { return b <= 777; }, 1, 1 << 20, 1e-9);
  EXPECT_EQ(*exact.largest, 777);

  const auto limited = search_max_batch([](int64_t) { return true; }, 16, 1000);
  EXPECT_EQ(*limited.largest, 1000);
  EXPECT_EQ(limited.bound, "limit");
  EXPECT_EQ(limited.attempts.back().first, 1000); // never past the limit

  const auto none = search_max_batch([](int64_t) { return false; }, 16, 1000);
  EXPECT_FALSE(none.largest.has_value());
  EXPECT_EQ(none.bound, "memory");
  EXPECT_EQ(none.attempts.size(), 1u);

  KAN_EXPECT_ERROR(search_max_batch([](int64_t) { return true; }, 0, 10), "starts at a batch >= 1");
  KAN_EXPECT_ERROR(search_max_batch([](int64_t) { return true; }, 64, 10),
                   "limit 10 is below its start 64");
}

TEST(MaxBatchSearch, OneTrainingStepFitsOnTheCpu) {
  auto w = suite_workloads("quick")[1]; // deep
  EXPECT_TRUE(trains_one_step(w, resolve_targets("cpu")[0], 64));
}

// ---- run_sweep ----------------------------------------------------------------------------

SweepOptions quick_sweep() {
  SweepOptions o;
  o.suite = "quick";
  o.devices = "cpu";
  o.cases = {"deep"};
  o.batches = {16, 64};
  o.repeat = 2;
  o.cv_target = 0;
  return o;
}

TEST(Sweep, EveryBatchOnEveryTargetWithItsSummary) {
  const auto results = run_sweep(quick_sweep());
  ASSERT_TRUE(results.sweep.has_value());
  const auto& s = *results.sweep;
  EXPECT_TRUE(results.cases.empty());
  EXPECT_EQ(s.batches, (std::vector<int64_t>{16, 64}));
  // Without a GPU, cpu and cpu-float64 are the targets (the CPU-only crossover).
  ASSERT_EQ(s.points.size(), 4u);
  std::set<std::string> targets;
  for (const auto& p : s.points) {
    ASSERT_EQ(p.status, results::CaseStatus::kOk) << p.reason;
    EXPECT_EQ(p.case_name, "deep");
    EXPECT_GT(*p.samples_per_second, 0.0);
    EXPECT_EQ(p.epoch_seconds.size(), 2u);
    targets.insert(p.target);
  }
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(targets, (std::set<std::string>{"cpu", "cpu-float64"}));
  }
  ASSERT_EQ(s.targets.size(), targets.size());
  for (const auto& t : s.targets) {
    EXPECT_TRUE(t.best_batch == 16 || t.best_batch == 64);
    EXPECT_TRUE(t.saturation_batch.has_value());
    EXPECT_FALSE(t.max_batch.has_value()); // the CPU is not searched
    EXPECT_NE(t.max_batch_reason.find("not searched on the CPU"), std::string::npos);
  }
  ASSERT_EQ(s.crossovers.size(), targets.size() - 1);
  EXPECT_EQ(s.crossovers[0].a, s.targets[0].target);
  EXPECT_FALSE(s.crossovers[0].message.empty());
  EXPECT_EQ(results.config.extra["command"], "sweep");
}

TEST(Sweep, BadOptionsAreRefusedByName) {
  auto o = quick_sweep();
  o.batches = {0};
  KAN_EXPECT_ERROR(run_sweep(o), "--batch sizes must be >= 1, got 0");
  o = quick_sweep();
  o.cases = {"huge"};
  KAN_EXPECT_ERROR(run_sweep(o), "--case huge is not a workload of the quick suite");
  o = quick_sweep();
  o.memory_fraction = -0.5;
  KAN_EXPECT_ERROR(run_sweep(o), "--memory-fraction must be in (0, 1], got -0.5");
}

// ---- memory caps ----------------------------------------------------------------------------

TEST(MemoryFraction, RefusedWithoutAGpuOrOutOfRange) {
  KAN_EXPECT_ERROR(set_memory_fraction(torch::kCPU, 0.5), "--memory-fraction caps a CUDA");
  KAN_EXPECT_ERROR(set_memory_fraction(torch::Device(torch::kCUDA, 0), 0), "(0, 1], got 0");
  KAN_EXPECT_ERROR(set_memory_fraction(torch::Device(torch::kCUDA, 0), 1.5, "--cap"),
                   "--cap must be in (0, 1], got 1.5");
}

TEST(MemoryFraction, ACappedGpuRunsOutAndTheSearchFindsItsMaxBatch_CUDA) {
  KAN_REQUIRE_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  const auto total = at::cuda::getDeviceProperties(0)->totalGlobalMem;
  set_memory_fraction(gpu, 0.02);
  // An allocation past the cap fails with an out-of-memory error, which is recovered.
  EXPECT_THROW(at::empty({static_cast<int64_t>(total / 20)},
                         at::TensorOptions().device(gpu).dtype(at::kByte)),
               c10::OutOfMemoryError);
  release_cuda_cache();
  auto w = suite_workloads("quick")[1];
  const auto target = resolve_targets("cuda")[0];
  const auto search = search_max_batch([&](int64_t b) { return trains_one_step(w, target, b); },
                                       1024, int64_t{1} << 26, 0.1);
  set_memory_fraction(gpu, 1.0);
  ASSERT_TRUE(search.largest.has_value());
  EXPECT_EQ(search.bound, "memory");
  EXPECT_FALSE(search.attempts.back().second && search.attempts.size() == 1);
  // After the search, the GPU still trains.
  EXPECT_TRUE(trains_one_step(w, target, 1024));
}

TEST(Sweep, AutoBatchesSearchTheGpu_CUDA) {
  KAN_REQUIRE_CUDA();
  auto o = quick_sweep();
  o.devices = "cpu,cuda";
  o.batches.clear();
  o.max_batch_limit = 4096; // the search stops at its limit: a quick test
  const auto results = run_sweep(o);
  const auto& s = *results.sweep;
  const auto gpu = std::find_if(s.targets.begin(), s.targets.end(),
                                [](const auto& t) { return t.target == "cuda"; });
  ASSERT_NE(gpu, s.targets.end());
  EXPECT_EQ(gpu->max_batch, 4096);
  EXPECT_EQ(s.batches.back(), 4096);
  for (const auto& p : s.points)
    EXPECT_EQ(p.status, results::CaseStatus::kOk) << p.target << " " << p.batch << ": " << p.reason;
  ASSERT_EQ(s.crossovers.size(), 1u);
}

// ---- a second GPU ---------------------------------------------------------------------------

// A tensor that claims to live on `device` without touching it: CUDA metadata over host memory,
// enough for the audit, which reads devices, dtypes and strides but never the data.
torch::Tensor fake_on(torch::Device device, std::vector<float>& storage) {
  return at::for_blob(storage.data(), {static_cast<int64_t>(storage.size())})
      .options(torch::TensorOptions().dtype(torch::kFloat32))
      .target_device(device)
      .deleter([](void*) {})
      .make_tensor();
}

TEST(SecondGpu, TheAuditFlagsATensorLeftOnCuda0WithAFakeCuda1) {
  std::vector<float> a(4), b(4), c(4);
  torch::nn::Module model;
  model.register_parameter("coef", fake_on(torch::Device(torch::kCUDA, 1), a));
  model.register_buffer("grid", fake_on(torch::Device(torch::kCUDA, 1), b));
  model.register_buffer("mask", fake_on(torch::Device(torch::kCUDA, 0), c)); // left behind
  const auto report =
      diagnostics::DeviceAudit(torch::Device(torch::kCUDA, 1)).module(model).report();
  ASSERT_EQ(report.findings.size(), 1u);
  const auto& f = report.findings[0];
  EXPECT_EQ(f.tensor, "model.mask");
  EXPECT_EQ(f.device, "cuda:0");
  EXPECT_EQ(f.expected_device, "cuda:1");
  EXPECT_EQ(f.problem, to_string(diagnostics::Problem::kWrongDevice));
  // The same model expected on cuda:0 has the other two wrong: the index counts.
  EXPECT_EQ(diagnostics::DeviceAudit(torch::Device(torch::kCUDA, 0))
                .module(model)
                .report()
                .findings.size(),
            2u);
}

TEST(SecondGpu, ACaseOnCuda1KeepsEverythingThere_CUDA) {
  KAN_REQUIRE_CUDA();
  if (torch::cuda::device_count() < 2)
    GTEST_SKIP() << "one CUDA device: no cuda:1";
  auto w = suite_workloads("quick").front();
  w.epochs = 2;
  const auto target = resolve_targets("cuda:1")[0];
  ASSERT_EQ(target.unavailable, "");
  const auto r = run_case(w, target, 60);
  ASSERT_EQ(r.status, results::CaseStatus::kOk) << r.reason;
  EXPECT_EQ(r.device, "cuda:1");
  EXPECT_TRUE(r.audit_findings.empty());
  auto model = w.build_model(target.device, target.dtype);
  EXPECT_TRUE(diagnostics::audit(model->module(), target.device).clean());
}

} // namespace
} // namespace kan::bench
