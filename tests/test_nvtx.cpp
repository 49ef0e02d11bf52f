// NVTX3 ranges: explicit ranges, and kan's phase and module scopes as ranges. No NVTX tool is
// attached here, so the NVTX calls are no-ops; the tests check the wiring and that nothing breaks.
#include "kan/diagnostics/nvtx.h"

#include "kan/nn/network.h"
#include "kan/nn/trace_scope.h"
#include "kan/train/fit.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <thread>

namespace kan::diagnostics {
namespace {

detail::NvtxScopeCounters operator-(const detail::NvtxScopeCounters& a,
                                    const detail::NvtxScopeCounters& b) {
  return {a.calls - b.calls, a.pushed - b.pushed, a.popped - b.popped};
}

TEST(Nvtx, RangesNestWithAndWithoutPayload) {
  const auto before = detail::nvtx_range_log().size();
  {
    NvtxRange epoch("epoch", 3);
    {
      NvtxRange step(std::string("step"));
      NvtxRange evaluation(std::string("evaluation"), int64_t{-1});
      NvtxRange empty("");
    }
    NvtxRange another("step");
  }
  auto log = detail::nvtx_range_log();
  log.erase(log.begin(), log.begin() + static_cast<std::ptrdiff_t>(before));
  if (!nvtx_compiled_in()) {
    EXPECT_TRUE(log.empty());
    return;
  }
  // Pushed in order with their payloads, popped innermost first, every one of them.
  const std::vector<std::string> expected = {"epoch:3", "step", "evaluation:-1", "",    "pop",
                                             "pop",     "pop",  "step",          "pop", "pop"};
  EXPECT_EQ(log, expected);
}

TEST(Nvtx, ScopesCallbackObservesUserScopesOnly) {
  const auto callback = detail::nvtx_scopes_callback();
  for (size_t i = 0; i < static_cast<size_t>(at::RecordScope::NUM_SCOPES); ++i) {
    const auto scope = static_cast<at::RecordScope>(i);
    EXPECT_EQ(callback.checkScope(scope), scope == at::RecordScope::USER_SCOPE) << "scope " << i;
  }
  EXPECT_FALSE(callback.needsInputs());
  EXPECT_FALSE(callback.needsOutputs());
  EXPECT_FALSE(callback.needsIds());
}

TEST(Nvtx, ScopeRangeNames) {
  using detail::nvtx_scope_range;
  const auto phase = nvtx_scope_range("kan.phase.optimizer_step");
  ASSERT_TRUE(phase);
  EXPECT_EQ(phase->first, "optimizer_step");
  EXPECT_EQ(phase->second, NvtxCategory::kPhase);
  const auto module = nvtx_scope_range("kan.module.layers.0");
  ASSERT_TRUE(module);
  EXPECT_EQ(module->first, "layers.0");
  EXPECT_EQ(module->second, NvtxCategory::kModule);
  EXPECT_FALSE(nvtx_scope_range("aten::add"));
  EXPECT_FALSE(nvtx_scope_range("my.scope"));
  EXPECT_FALSE(nvtx_scope_range(nullptr));
}

TEST(Nvtx, PhaseAndModuleScopesBecomeRangesAndOperationsPayNothing) {
  const auto before = detail::nvtx_scope_counters();
  {
    NvtxScopes scopes;
    EXPECT_EQ(NvtxScopes::active(), nvtx_compiled_in());
    PhaseScope phase(Phase::kForward);
    ModuleScope module("layers", 0);
    auto x = torch::ones({4, 3});
    auto y = (x.matmul(x.t()) + 1).relu().sum(); // ATen operations: no callback
    EXPECT_EQ(y.item<double>(), 16 * 4.0);
    RECORD_USER_SCOPE("not.a.kan.scope"); // observed, but no range
  }
  EXPECT_FALSE(NvtxScopes::active());
  const auto delta = detail::nvtx_scope_counters() - before;
  if (!nvtx_compiled_in()) {
    EXPECT_EQ(delta.calls, 0);
    return;
  }
  EXPECT_EQ(delta.calls, 3); // the two kan scopes and the foreign user scope, nothing else
  EXPECT_EQ(delta.pushed, 2);
  EXPECT_EQ(delta.popped, 2);
}

TEST(Nvtx, ScopesNestAndInstallOneCallback) {
  const auto before = detail::nvtx_scope_counters();
  {
    NvtxScopes outer;
    {
      NvtxScopes inner;
      PhaseScope phase(Phase::kBackward);
    }
    EXPECT_EQ(NvtxScopes::active(), nvtx_compiled_in());
    PhaseScope phase(Phase::kEvaluation);
  }
  EXPECT_FALSE(NvtxScopes::active());
  { PhaseScope unobserved(Phase::kForward); }
  const auto delta = detail::nvtx_scope_counters() - before;
  const int64_t expected = nvtx_compiled_in() ? 2 : 0; // once each, not once per NvtxScopes
  EXPECT_EQ(delta.pushed, expected);
  EXPECT_EQ(delta.popped, expected);
}

TEST(Nvtx, ScopesArePerThread) {
  NvtxScopes scopes;
  bool other_thread_active = true;
  detail::NvtxScopeCounters other;
  std::thread worker([&] {
    other_thread_active = NvtxScopes::active();
    PhaseScope phase(Phase::kForward);
    other = detail::nvtx_scope_counters();
  });
  worker.join();
  EXPECT_FALSE(other_thread_active);
  EXPECT_EQ(other.calls, 0);
}

TEST(Nvtx, FitStepUnderScopesPushesBalancedRanges) {
  const auto before = detail::nvtx_scope_counters();
  {
    NvtxScopes scopes;
    NvtxRange epoch("epoch", 0);
    KAN model(KANOptions({2, 3, 1}));
    auto data =
        create_dataset(reference_function("toy").f, DatasetOptions(2).train_num(32).test_num(8));
    fit(model, data, FitOptions().opt(Optimizer::kAdam).lr(0.01).steps(2).lamb(0.01));
  }
  const auto delta = detail::nvtx_scope_counters() - before;
  EXPECT_EQ(delta.pushed, delta.popped);
  if (nvtx_compiled_in()) {
    EXPECT_GT(delta.pushed, 4) << "fit opens forward, backward, optimizer_step and layer scopes";
  }
}

} // namespace
} // namespace kan::diagnostics
