// Environment report: versions, CUDA usability with its reason, CPU and threads.
#include "kan/diagnostics/environment.h"

#include "test_util.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

namespace kan::diagnostics {
namespace {

TEST(Environment, ReportsVersionsCpuAndThreads) {
  const auto env = collect_environment();
  EXPECT_EQ(env.libtorch_version, TORCH_VERSION); // the LibTorch this test was built against
  EXPECT_FALSE(env.cuda_build_version.empty());   // the project builds against a CUDA LibTorch
  EXPECT_EQ(env.kanbench_version, KANBENCH_PROJECT_VERSION);
  EXPECT_EQ(env.date.size(), 20u) << env.date; // 2026-11-29T18:36:08Z
  EXPECT_GE(env.cpu_cores, 1);
  EXPECT_EQ(env.torch_threads, at::get_num_threads());
  EXPECT_FALSE(env.cpu_model.empty());
}

TEST(Environment, CudaIsUsableOrSaysWhyNot) {
  const auto env = collect_environment();
  EXPECT_EQ(env.cuda_available, torch::cuda::is_available());
  if (env.cuda_available) {
    EXPECT_TRUE(env.cuda_unavailable_reason.empty());
    EXPECT_EQ(env.cuda_devices.size(), torch::cuda::device_count());
    EXPECT_FALSE(env.cuda_devices.front().name.empty());
    EXPECT_GT(env.cuda_devices.front().total_memory_bytes, 0);
    EXPECT_FALSE(env.cuda_runtime_version.empty());
  } else {
    EXPECT_EQ(env.cuda_unavailable_reason.rfind("CUDA is not usable: ", 0), 0u)
        << env.cuda_unavailable_reason;
    EXPECT_EQ(cuda_unavailable_reason(), env.cuda_unavailable_reason);
    EXPECT_TRUE(env.cuda_devices.empty());
    ASSERT_FALSE(env.problems.empty());
    EXPECT_EQ(env.problems.front().what, env.cuda_unavailable_reason);
    EXPECT_FALSE(env.problems.front().fix.empty());
  }
}

TEST(Environment, TextHasOneLinePerFactAndEachProblemsFix) {
  auto env = collect_environment();
  env.problems.push_back({"something is off", "Do this."});
  const auto text = to_text(env);
  for (const char* key : {"LibTorch: ", "CUDA usable: ", "CPU: ", "LibTorch threads: ",
                          "NVTX3 ranges: ", "CUPTI: ", "problem: something is off. Fix: Do this."})
    EXPECT_NE(text.find(key), std::string::npos) << key << "\n" << text;
}

TEST(Environment, WhatSkewsCpuTimingsIsAProblemWithItsFix) {
  // An idle machine with every CPU in use and the performance governor: nothing to say.
  EXPECT_TRUE(timing_problems(8, 8, 0.5, std::string("performance")).empty());
  EXPECT_TRUE(timing_problems(8, 8, std::nullopt, std::nullopt).empty());      // not exposed
  EXPECT_TRUE(timing_problems(8, 8, 8.0, std::string("performance")).empty()); // at, not above

  const auto busy = timing_problems(4, 4, 6.5, std::string("performance"));
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_NE(busy[0].what.find("load average 6.5 on 4 usable CPUs"), std::string::npos)
      << busy[0].what;
  EXPECT_FALSE(busy[0].fix.empty());

  const auto governor = timing_problems(4, 4, 1.0, std::string("powersave"));
  ASSERT_EQ(governor.size(), 1u);
  EXPECT_NE(governor[0].what.find("\"powersave\""), std::string::npos) << governor[0].what;
  EXPECT_NE(governor[0].fix.find("performance"), std::string::npos);

  const auto all = timing_problems(4, 2, 9.0, std::string("ondemand"));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_NE(all[0].what.find("LibTorch uses 2 of 4 usable CPUs"), std::string::npos);
  EXPECT_NE(all[0].fix.find("OMP_NUM_THREADS"), std::string::npos);
}

TEST(Environment, DevicesAreListed_CUDA) {
  KAN_REQUIRE_CUDA();
  const auto env = collect_environment();
  ASSERT_FALSE(env.cuda_devices.empty());
  EXPECT_GT(env.cuda_devices.front().multiprocessors, 0);
  EXPECT_GT(env.cuda_devices.front().free_memory_bytes, 0);
  EXPECT_NE(to_text(env).find("cuda:0: "), std::string::npos);
}

} // namespace
} // namespace kan::diagnostics
