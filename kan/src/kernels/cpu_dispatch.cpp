// Which CPU code runs: the fused spline's kernel set (KAN_FUSED_CPU_ISA, or the widest this CPU
// and build have) and the host vector arithmetic of LBFGS. Every run-time test of the CPU's
// instruction sets is here.
#include "kernels/cpu_dispatch.h"

#include "kernels/spline_kernels.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace kan::detail {

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

namespace {

// The CPU kernels: KAN_FUSED_CPU_ISA names them (generic, avx2, avx512: AVX2's with AVX-512's
// unregularised layer and its regularised one for small layers, or the CUDA kernels run on the CPU:
// cuda-threads, the per-thread kernels, and cuda-blocks, the block kernels); unset, the widest of
// avx512 and avx2 that was built and that the CPU has. The tests run each.
enum class CpuIsa { kGeneric, kAvx2, kAvx512, kCudaThreads, kCudaBlocks };

// Whether the CPU can run the AVX2 + FMA kernels and this build has them.
bool cpu_has_avx2() {
#ifdef KAN_HAS_AVX2_KERNELS
  return cpu_has_avx2_fma();
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(KAN_HAS_AVX512_KERNELS) && (defined(__x86_64__) || defined(__i386__))
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// KAN_LANE_GATHERS's value: "" (unset), "on" or "off". Read where the kernels are chosen, whose
// errors name it; lane_gathers() reads it too, when the library loads, and takes the default for
// a value it does not know (the kernels' choice then stops with that error).
std::string lane_gathers_setting() {
  const char* env = std::getenv("KAN_LANE_GATHERS");
  return env == nullptr ? "" : env;
}

void check_lane_gathers_setting() {
  const std::string value = lane_gathers_setting();
  TORCH_CHECK(value.empty() || value == "on" || value == "off", "KAN_LANE_GATHERS=", value,
              ": expected on or off (or unset)");
}

CpuIsa cpu_isa() {
  check_lane_gathers_setting();
  const char* env = std::getenv("KAN_FUSED_CPU_ISA");
  const std::string isa = env == nullptr ? "" : env;
  if (isa.empty())
    return cpu_has_avx512() ? CpuIsa::kAvx512 : cpu_has_avx2() ? CpuIsa::kAvx2 : CpuIsa::kGeneric;
  if (isa == "generic")
    return CpuIsa::kGeneric;
  if (isa == "cuda-threads")
    return CpuIsa::kCudaThreads;
  if (isa == "cuda-blocks")
    return CpuIsa::kCudaBlocks;
  if (isa == "avx512") {
    TORCH_CHECK(cpu_has_avx512(),
                "KAN_FUSED_CPU_ISA=avx512: this build or CPU has no AVX-512 kernels");
    return CpuIsa::kAvx512;
  }
  TORCH_CHECK(isa == "avx2", "KAN_FUSED_CPU_ISA=", isa,
              ": expected generic, avx2, avx512, cuda-threads or cuda-blocks (or unset)");
  TORCH_CHECK(cpu_has_avx2(),
              "KAN_FUSED_CPU_ISA=avx2: this build or CPU has no AVX2 + FMA kernels");
  return CpuIsa::kAvx2;
}

#ifdef KAN_HAS_AVX512_KERNELS
// AVX-512's lanes kernels hold eight doubles (sixteen floats) where AVX2's hold four (eight), so a
// small layer's basis, computed lane by lane, takes half the instructions; a large layer runs
// slower on them (this core's AVX-512 clock). Measured with BM_LayerWithSums, float64, G 5, 1000
// samples, 1 thread, Xeon: 1.15-1.3x as fast at 2 x 5 to 32 x 32 edges, 0.93x at 100 x 100. So
// the AVX-512 layer kernels serve layers of up to kWideLaneEdges edges, AVX2's the rest. The
// unregularised layer's kernels are AVX-512's at every size: sixteen floats a vector, a masked
// last one, and y's rows and the span groups' weight rows in the 32 registers
// (BM_LayerForwardBackward G 5, 4096 x 100 -> 100, float32, 1 thread: 24.9-25.1 ms against
// 35.1-36.3 ms with AVX2's).
constexpr int64_t kWideLaneEdges = 1024;

template <typename T> bool wide_lanes_pay(const LayerArgs<T>& a) {
  return a.spline.I * a.spline.O <= kWideLaneEdges;
}
template <typename T> const SplineKernels<T>& avx512_set() {
  static const SplineKernels<T> kernels = cpu_avx512::kernels<T>();
  return kernels;
}
template <typename T> const SplineKernels<T>& avx2_set() {
  static const SplineKernels<T> kernels = cpu_avx2::kernels<T>();
  return kernels;
}
template <typename T>
void layer_by_size(const LayerArgs<T>& a, T* y, double* sums, int64_t slices, int64_t begin,
                   int64_t end) {
  const auto& set = wide_lanes_pay(a) ? avx512_set<T>() : avx2_set<T>();
  set.layer_with_moments(a, y, sums, slices, begin, end);
}
template <typename T>
void layer_backward_by_size(const LayerArgs<T>& a, const LayerGrads<T>& g, int64_t begin,
                            int64_t end) {
  const auto& set = wide_lanes_pay(a) ? avx512_set<T>() : avx2_set<T>();
  set.layer_with_moments_backward(a, g, begin, end);
}
template <typename T> SplineKernels<T> avx512_kernels() {
  auto kernels = avx2_set<T>();
  kernels.forward_rows = avx512_set<T>().forward_rows;
  kernels.backward_tasks = avx512_set<T>().backward_tasks;
  kernels.layer_with_moments = layer_by_size<T>;
  kernels.layer_with_moments_backward = layer_backward_by_size<T>;
  return kernels;
}
#endif

template <typename T> SplineKernels<T> kernels_for(CpuIsa isa) {
  switch (isa) {
  case CpuIsa::kCudaThreads:
  case CpuIsa::kCudaBlocks:
    return cuda_threads::kernels<T>();
  case CpuIsa::kAvx512:
#ifdef KAN_HAS_AVX512_KERNELS
    return avx512_kernels<T>();
#endif
  case CpuIsa::kAvx2:
#ifdef KAN_HAS_AVX2_KERNELS
    return cpu_avx2::kernels<T>();
#endif
  case CpuIsa::kGeneric:
    break;
  }
  return cpu_generic::kernels<T>();
}

} // namespace

bool cpu_runs_cuda_blocks() {
  static const bool blocks = cpu_isa() == CpuIsa::kCudaBlocks;
  return blocks;
}

bool lane_gathers() {
  const std::string value = lane_gathers_setting();
  if (value == "on" || value == "off")
    return value == "on";
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel") != 0;
#else
  return false;
#endif
}

template <typename T> const SplineKernels<T>& cpu_spline_kernels() {
  static const SplineKernels<T> kernels = kernels_for<T>(cpu_isa());
  return kernels;
}
template const SplineKernels<float>& cpu_spline_kernels<float>();
template const SplineKernels<double>& cpu_spline_kernels<double>();

// ---- Host vector arithmetic ---------------------------------------------------------------------

template <typename T> HostDot<T> host_dot() {
  static const HostDot<T> checked = [] {
    constexpr bool f64 = std::is_same_v<T, double>;
    auto* dot = reinterpret_cast<HostDot<T>>(dlsym(RTLD_DEFAULT, f64 ? "ddot_" : "sdot_"));
    if (dot == nullptr)
      return dot;
    at::NoGradGuard no_grad;
    const auto type = f64 ? at::kDouble : at::kFloat;
    const auto a = at::sin(at::arange(37, type) * 0.7), b = at::cos(at::arange(37, type) * 1.3);
    const int n = 37, one = 1;
    const T got = dot(&n, a.const_data_ptr<T>(), &one, b.const_data_ptr<T>(), &one);
    return got == a.dot(b).item<T>() ? dot : nullptr;
  }();
  return checked;
}
template HostDot<float> host_dot<float>();
template HostDot<double> host_dot<double>();

namespace {

// Built for the baseline x86-64, std::fma is a call into libm per element (a tenth of an MLP's
// LBFGS fit, [2, 100, 100, 1]); where the CPU has FMA the same loop runs vectorised, with the
// same single rounding per element.
template <typename T>
__attribute__((always_inline)) inline void fma_loop(T* __restrict s, const T* __restrict o, T a,
                                                    int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    s[j] = std::fma(o[j], a, s[j]);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
__attribute__((target("avx2,fma"))) void fma_loop_avx2(T* s, const T* o, T a, int64_t n) {
  fma_loop(s, o, a, n); // inlined, so compiled for FMA here
}
#endif

} // namespace

template <typename T> void host_add_scaled(T* s, const T* o, T a, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (cpu_has_avx2_fma())
    return fma_loop_avx2(s, o, a, n);
#endif
  fma_loop(s, o, a, n);
}
template void host_add_scaled<float>(float*, const float*, float, int64_t);
template void host_add_scaled<double>(double*, const double*, double, int64_t);

} // namespace kan::detail
