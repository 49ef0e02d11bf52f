// The benchmark suite's building blocks: targets, one case, parity, edge cases.
#include "kan/bench/suite.h"

#include "kan/serialize/checkpoint.h"
#include "test_util.h"

#include <algorithm>

namespace kan::bench {
namespace {

Workload tiny_toy() {
  Workload w = suite_workloads("quick").front();
  w.train_num = w.test_num = 64;
  w.epochs = 2;
  return w;
}

TEST(Suite, TargetsForTheDevicesAskedFor) {
  const auto cpu = resolve_targets("cpu");
  if (!torch::cuda::is_available()) {
    // Without a GPU, float64 on the CPU is the second side of every parity comparison.
    ASSERT_EQ(cpu.size(), 2u);
    EXPECT_EQ(cpu[1].name, "cpu-float64");
    const auto both = resolve_targets("cpu,cuda");
    ASSERT_EQ(both.size(), 3u);
    EXPECT_EQ(both[1].name, "cuda");
    EXPECT_NE(both[1].unavailable.find("cuda requested but no CUDA device: "), std::string::npos);
    EXPECT_EQ(resolve_targets("auto").size(), 2u);
  } else {
    EXPECT_EQ(resolve_targets("auto").size(), 2u);
    EXPECT_EQ(resolve_targets("cpu,cuda")[1].device, torch::Device(torch::kCUDA, 0));
  }
  KAN_EXPECT_ERROR(resolve_targets("cpu,tpu"),
                   "--devices must be auto or a list of cpu, cuda, cuda:N and cuda:all");
  KAN_EXPECT_ERROR(resolve_targets("cuda:x"), "got 'cuda:x'");
  KAN_EXPECT_ERROR(resolve_targets("cuda:-1"), "got 'cuda:-1'");
  KAN_EXPECT_ERROR(resolve_targets(""), "--devices names no device: ''");
  KAN_EXPECT_ERROR(suite_workloads("huge"), "--suite must be quick, default or full, got 'huge'");
}

TEST(Suite, TargetsOnNamedAndAllGpus) {
  const int64_t gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  const auto second = resolve_targets("cuda:1");
  ASSERT_GE(second.size(), 1u);
  EXPECT_EQ(second[0].name, "cuda:1");
  EXPECT_EQ(second[0].device, torch::Device(torch::kCUDA, 1));
  if (gpus < 2)
    EXPECT_NE(second[0].unavailable.find("cuda:1 requested but"), std::string::npos)
        << second[0].unavailable;
  else
    EXPECT_EQ(second[0].unavailable, "");

  const auto all = resolve_targets("cpu,cuda:all");
  if (gpus == 0) {
    // One skipped entry says why, and float64 on the CPU is the parity partner.
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[1].name, "cuda:all");
    EXPECT_NE(all[1].unavailable.find("no CUDA device"), std::string::npos) << all[1].unavailable;
    EXPECT_EQ(all[2].name, "cpu-float64");
  } else {
    ASSERT_EQ(static_cast<int64_t>(all.size()), 1 + gpus);
    for (int64_t i = 0; i < gpus; ++i) {
      EXPECT_EQ(all[1 + i].name, "cuda:" + std::to_string(i));
      EXPECT_EQ(all[1 + i].device.index(), i);
      EXPECT_EQ(all[1 + i].unavailable, "");
    }
  }
  // One device once, under the first name it was given.
  const auto twice = resolve_targets("cuda,cuda:0");
  ASSERT_GE(twice.size(), 1u);
  EXPECT_EQ(twice[0].name, "cuda");
  EXPECT_TRUE(twice.size() == 1 || twice[1].device != twice[0].device);
}

TEST(Suite, StopOnNoiseAddsEpochsUntilItsCap) {
  // A target no machine meets: epochs are added until the timed seconds reach the cap.
  auto w = tiny_toy();
  StopOnNoise noise{1e-12, 0.3, 50};
  const auto r = run_case(w, resolve_targets("cpu")[0], 60, {}, nullptr, noise);
  ASSERT_EQ(r.status, results::CaseStatus::kOk) << r.reason;
  EXPECT_GT(r.epoch_seconds.size(), 2u);
  EXPECT_LE(r.epoch_seconds.size(), 50u);
  double timed = 0;
  for (size_t i = 0; i + 1 < r.epoch_seconds.size(); ++i)
    timed += r.epoch_seconds[i];
  EXPECT_LT(timed, 0.3) << "one epoch more than the cap needed";
  EXPECT_EQ(r.train_loss_per_epoch.size(), r.epoch_seconds.size() + 1); // and the warm-up
  EXPECT_EQ(*r.cv_target, 1e-12);
  EXPECT_FALSE(*r.cv_target_met);
  EXPECT_GT(*r.epoch_cv, 0.0);

  // A target every run meets: exactly the workload's epochs, and it says so.
  const auto met = run_case(w, resolve_targets("cpu")[0], 60, {}, nullptr, {0.999, 10, 50});
  ASSERT_EQ(met.status, results::CaseStatus::kOk) << met.reason;
  EXPECT_EQ(met.epoch_seconds.size(), 2u);
  EXPECT_TRUE(*met.cv_target_met);

  // Off (the default): the workload's epochs, the spread recorded, no target.
  const auto off = run_case(w, resolve_targets("cpu")[0], 60);
  EXPECT_EQ(off.epoch_seconds.size(), 2u);
  EXPECT_TRUE(off.epoch_cv.has_value());
  EXPECT_FALSE(off.cv_target.has_value());
  EXPECT_FALSE(off.cv_target_met.has_value());
}

TEST(Suite, StopOnNoiseRunsOnEveryTargetOfTheSuite) {
  SuiteOptions o;
  o.suite = "quick";
  o.cases = {"toy"};
  o.repeat = 2;
  o.edge_cases = false;
  o.cv_target = 1e-12;
  o.cv_max_seconds = 0.05;
  const auto results = run_suite(o);
  ASSERT_EQ(results.cases.size(), 2u);
  for (const auto& c : results.cases) {
    ASSERT_EQ(c.status, results::CaseStatus::kOk) << c.reason;
    EXPECT_FALSE(*c.cv_target_met);
  }
  EXPECT_EQ(results.config.extra["cv_target"], 1e-12);
  // Loss curves of different lengths are compared over the epochs both ran.
  ASSERT_EQ(results.comparisons.size(), 1u);
  EXPECT_TRUE(results.comparisons[0].max_rel_loss_diff.has_value());
  KAN_EXPECT_ERROR(
      [&] {
        auto bad = o;
        bad.cv_target = 1.5;
        run_suite(bad);
      }(),
      "--cv-target must be in [0, 1), got 1.5");
  KAN_EXPECT_ERROR(
      [&] {
        auto bad = o;
        bad.memory_fraction = 1.5;
        run_suite(bad);
      }(),
      "--memory-fraction must be in (0, 1], got 1.5");
}

TEST(Suite, PrecisionTargetsPerDevice) {
  const auto precisions = parse_precisions("float64,float32,bf16,tf32,fp16");
  ASSERT_EQ(precisions.size(), 5u);
  const auto t = resolve_targets("cpu", torch::kFloat32, precisions);
  ASSERT_EQ(t.size(), 5u); // no cpu-float64 partner: the precisions compare with each other
  EXPECT_EQ(t[0].name, "cpu-float64");
  EXPECT_EQ(t[0].dtype, torch::kFloat64);
  EXPECT_FALSE(t[0].precision.has_value());
  EXPECT_EQ(t[1].name, "cpu"); // the run's own precision keeps the device's name
  EXPECT_EQ(t[2].name, "cpu-bf16");
  EXPECT_EQ(t[2].dtype, torch::kFloat32);
  EXPECT_EQ(*t[2].precision, Precision::kBF16);
  EXPECT_EQ(t[2].unavailable, "");
  EXPECT_NE(t[3].unavailable.find("tf32 is a mode of CUDA's tensor cores"), std::string::npos);
  EXPECT_NE(t[4].unavailable.find("fp16 autocast runs on CUDA only"), std::string::npos);
  // Each precision is compared with float32 on its device; float32 with the first.
  EXPECT_EQ(reference_target(t, 2, torch::kFloat32), 1u);
  EXPECT_EQ(reference_target(t, 1, torch::kFloat32), 0u);
  // Less precise, wider limits.
  const auto f32 = parity_tolerances(Precision::kFloat32, Optimizer::kAdam);
  const auto bf16 = parity_tolerances(Precision::kBF16, Optimizer::kAdam);
  EXPECT_GT(bf16.output_rel, f32.output_rel);
  EXPECT_GT(bf16.grad_rel, f32.grad_rel);

  KAN_EXPECT_ERROR(parse_precisions("float32,half"),
                   "--precision must be a list of float64, float32, tf32, bf16, fp16");
  KAN_EXPECT_ERROR(parse_precisions("bf16,bf16"), "--precision names bf16 twice");
  KAN_EXPECT_ERROR(parse_precisions(""), "--precision names no precision");
}

TEST(Suite, Bf16OnTheCpuIsTimedAndComparedWithFloat32) {
  SuiteOptions o;
  o.suite = "quick";
  o.devices = "cpu";
  o.cases = {"toy", "deep"};
  o.repeat = 2;
  o.cv_target = 0;
  o.edge_cases = false;
  o.precisions = parse_precisions("float32,bf16");
  const auto results = run_suite(o);
  ASSERT_EQ(results.cases.size(), 4u);
  for (const auto& c : results.cases) {
    ASSERT_EQ(c.status, results::CaseStatus::kOk) << c.target << ": " << c.reason;
    if (c.target == "cpu-bf16") {
      EXPECT_EQ(*c.precision, "bf16");
      EXPECT_NE(c.precision_detail->find("fused spline kernels"), std::string::npos);
    } else {
      EXPECT_FALSE(c.precision.has_value());
    }
  }
  ASSERT_EQ(results.comparisons.size(), 2u);
  for (const auto& c : results.comparisons) {
    EXPECT_EQ(c.a, "cpu");
    EXPECT_EQ(c.b, "cpu-bf16");
    EXPECT_EQ(*c.label, "float32 vs bf16 on cpu");
    EXPECT_GT(*c.max_rel_output_diff, 0.0) << "bfloat16 changed nothing in " << c.case_name;
    const auto opt = c.case_name == "toy" ? Optimizer::kLBFGS : Optimizer::kAdam;
    EXPECT_EQ(c.tolerances.at("max_rel_output_diff"),
              parity_tolerances(Precision::kBF16, opt).output_rel);
    EXPECT_DOUBLE_EQ(c.tolerances.at("rounding_floor"), 2 * *c.max_abs_output_diff);
    // At initialisation both agree to bfloat16's rounding; Adam's training too. (LBFGS's line
    // search in bfloat16 may end elsewhere: the toy case's verdict is a measurement.)
    EXPECT_LT(*c.max_rel_output_diff, parity_tolerances(Precision::kBF16, opt).output_rel);
    EXPECT_LT(*c.max_rel_grad_diff, parity_tolerances(Precision::kBF16, opt).grad_rel);
    if (c.case_name == "deep") {
      EXPECT_EQ(c.parity, results::Parity::kPass) << c.message;
    }
  }
  EXPECT_EQ(results.config.extra["precisions"], nlohmann::json({"float32", "bf16"}));
}

TEST(Suite, EveryPrecisionOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  SuiteOptions o;
  o.suite = "quick";
  o.devices = "cuda";
  o.cases = {"deep"};
  o.repeat = 2;
  o.cv_target = 0;
  o.edge_cases = false;
  o.precisions = parse_precisions("float32,tf32,bf16,fp16");
  o.empty_cache = true; // each case starts from an emptied allocator
  const auto results = run_suite(o);
  ASSERT_EQ(results.cases.size(), 4u);
  for (const auto& c : results.cases) {
    EXPECT_EQ(c.status, results::CaseStatus::kOk) << c.target << ": " << c.reason;
    // The caching allocator's peaks while the case trained.
    EXPECT_EQ(c.memory_kind, "cuda_peak_allocated") << c.target;
    EXPECT_GT(c.peak_memory_bytes.value_or(0), 0) << c.target;
    EXPECT_GT(c.peak_reserved_bytes.value_or(0), 0) << c.target;
  }
  EXPECT_NE(results.cases[3].precision_detail->find("dynamic loss scaling"), std::string::npos);
  ASSERT_EQ(results.comparisons.size(), 3u);
  for (const auto& c : results.comparisons) {
    EXPECT_EQ(c.a, "cuda");
    EXPECT_EQ(c.parity, results::Parity::kPass) << c.b << ": " << c.message;
  }
}

TEST(Suite, TargetsInAFloat64ModelsDtype) {
  const auto targets = resolve_targets("cpu", torch::kFloat64);
  EXPECT_EQ(targets[0].name, "cpu");
  EXPECT_EQ(targets[0].dtype, torch::kFloat64);
  if (!torch::cuda::is_available()) {
    // The parity partner is the other precision.
    ASSERT_EQ(targets.size(), 2u);
    EXPECT_EQ(targets[1].name, "cpu-float32");
    EXPECT_EQ(targets[1].dtype, torch::kFloat32);
  }
}

using UserModel = kan::test::ScratchDirTest;

TEST_F(UserModel, EveryTargetTrainsACopyOnDataFromTheModel) {
  KAN saved(KANOptions({2, 3, 1}).grid(4).seed(2).dtype(torch::kFloat64));
  {
    // Updated from skewed samples: each input's grid spans its own range.
    torch::NoGradGuard no_grad;
    saved->update_grid_from_samples(torch::rand({100, 2}, torch::kFloat64) * 3 + 1);
  }
  save_checkpoint(saved, path("my.pt"));
  const auto w = model_workload(path("my.pt"), ModelFileOptions(), "", "quick");
  EXPECT_EQ(w.name, "my.pt");
  EXPECT_EQ(w.width, (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(w.train_num, 200);
  EXPECT_EQ(w.to_json()["data"], "synthetic");

  const auto data = w.dataset(torch::kCPU, torch::kFloat64);
  ASSERT_EQ(data.train_input.sizes(), (std::vector<int64_t>{200, 2}));
  const auto knots = saved->layer(0)->grid.slice(1, 3, saved->layer(0)->grid.size(1) - 3);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_GE(data.train_input.select(1, i).min().item<double>(), knots[i][0].item<double>());
    EXPECT_LE(data.train_input.select(1, i).max().item<double>(), knots[i][-1].item<double>());
  }
  // Labels: the model's outputs plus noise of a tenth of their spread.
  const auto outputs = saved->forward(data.train_input).detach();
  const double noise = (data.train_label - outputs).std().item<double>();
  EXPECT_NEAR(noise / outputs.std().item<double>(), 0.1, 0.03);

  // Each target's model is an independent copy of the saved one, in the target's dtype.
  auto a = std::dynamic_pointer_cast<KANImpl>(w.build_model(torch::kCPU, torch::kFloat64));
  auto b = w.build_model(torch::kCPU, torch::kFloat32);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(torch::equal(a->forward(data.test_input), saved->forward(data.test_input)));
  EXPECT_EQ(b->dtype(), torch::kFloat32);
  EXPECT_NE(a->layer(0)->coef.data_ptr(),
            std::dynamic_pointer_cast<KANImpl>(w.model)->layer(0)->coef.data_ptr());
}

TEST(Suite, OneCaseIsTimedPerEpoch) {
  const auto r = run_case(tiny_toy(), resolve_targets("cpu")[0], 60);
  ASSERT_EQ(r.status, results::CaseStatus::kOk) << r.reason;
  EXPECT_EQ(r.epoch_seconds.size(), 2u); // warm-up excluded
  EXPECT_EQ(r.train_loss_per_epoch.size(), 3u);
  EXPECT_GT(*r.median_epoch_seconds, 0.0);
  EXPECT_GE(*r.iqr_epoch_seconds, 0.0);
  EXPECT_TRUE(r.final_test_rmse.has_value());
  EXPECT_EQ(*r.backend, "fused");
  EXPECT_EQ(*r.memory_kind, "cpu_rss_growth");
  EXPECT_TRUE(r.audit_findings.empty());
}

TEST(Suite, ACaseOverItsLimitIsATimeoutWithoutNumbers) {
  auto w = tiny_toy();
  w.epochs = 100;
  const auto r = run_case(w, resolve_targets("cpu")[0], 1e-6);
  EXPECT_EQ(r.status, results::CaseStatus::kTimeout);
  EXPECT_NE(r.reason.find("timed out after"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.epoch_seconds.empty());
  EXPECT_FALSE(r.median_epoch_seconds.has_value());
  EXPECT_FALSE(r.final_test_rmse.has_value());
}

TEST(Suite, AMissingDeviceIsSkippedWithItsReason) {
  Target gpu{"cuda", torch::Device(torch::kCUDA, 0), torch::kFloat32, "no CUDA device: no driver"};
  const auto r = run_case(tiny_toy(), gpu, 60);
  EXPECT_EQ(r.status, results::CaseStatus::kSkipped);
  EXPECT_EQ(r.reason, "no CUDA device: no driver");
  EXPECT_FALSE(r.median_epoch_seconds.has_value());
}

TEST(Suite, ParityOfTwoIdenticalTargetsIsExact) {
  const auto w = tiny_toy();
  const Target a{"cpu", torch::kCPU, torch::kFloat64, ""},
      b{"cpu-again", torch::kCPU, torch::kFloat64, ""};
  const auto ra = run_case(w, a, 60), rb = run_case(w, b, 60);
  const auto c = compare_targets(w, a, b, ra, rb);
  EXPECT_EQ(c.parity, results::Parity::kPass) << c.message;
  EXPECT_EQ(*c.max_abs_output_diff, 0.0);
  EXPECT_EQ(*c.max_abs_grad_diff, 0.0);
  EXPECT_EQ(*c.max_rel_loss_diff, 0.0); // one thread count, one seed: the same run
  EXPECT_GT(*c.speedup, 0.0);
  EXPECT_EQ(c.tolerances.at("max_rel_loss_diff"),
            parity_tolerances(torch::kFloat64, w.opt).loss_curve_rel);
}

TEST(Suite, ParityFailsBeyondTheTolerance) {
  const auto w = tiny_toy();
  const Target a{"cpu", torch::kCPU, torch::kFloat64, ""},
      b{"cpu-b", torch::kCPU, torch::kFloat64, ""};
  auto ra = run_case(w, a, 60);
  auto rb = ra;
  rb.target = "cpu-b";
  rb.final_test_rmse = *ra.final_test_rmse * 2; // a planted divergence
  const auto c = compare_targets(w, a, b, ra, rb);
  EXPECT_EQ(c.parity, results::Parity::kFail);
  EXPECT_NE(c.message.find("final_metric_rel_diff 1 > "), std::string::npos) << c.message;
}

TEST(Suite, EdgeCasesPassOnTheCpu) {
  const auto results = run_edge_cases(resolve_targets("cpu")[0], "quick");
  ASSERT_EQ(results.size(), edge_case_names().size());
  for (const auto& e : results) {
    EXPECT_NE(e.status, results::EdgeStatus::kFail) << e.name << ": " << e.message;
    EXPECT_FALSE(e.message.empty()) << e.name;
  }
  const auto oom = std::find_if(results.begin(), results.end(),
                                [](const auto& e) { return e.name == "out_of_memory"; });
  ASSERT_NE(oom, results.end());
  EXPECT_EQ(oom->status, results::EdgeStatus::kSkipped); // GPUs only
}

TEST(Suite, EdgeCasesPassOnCuda_CUDA) {
  KAN_REQUIRE_CUDA();
  for (const auto& e : run_edge_cases(resolve_targets("cuda")[0], "quick"))
    EXPECT_EQ(e.status, results::EdgeStatus::kPass) << e.name << ": " << e.message;
}

} // namespace
} // namespace kan::bench
