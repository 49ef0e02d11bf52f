#include "kernels/layer_pass_cpu.h"

#include "kernels/cpu_dispatch.h"
#include "kernels/fused_spline.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

namespace kan::detail {
namespace {

// Slices of the samples: one per thread where there is work enough for each (each slice sums
// into its own copy, so results depend on the thread count only through them).
int64_t sample_slices(int64_t N, int64_t work_per_sample, int64_t at_most) {
  const int64_t by_work = N / parallel_grain(work_per_sample);
  return std::max<int64_t>(1, std::min({by_work, at_most, int64_t{at::get_num_threads()}}));
}

// coef (I, O, M) into weight (I, M + 2k, O): transposed, k zero rows at both ends.
template <typename T>
void padded_weight(const T* coef, T* weight, int64_t I, int64_t O, int64_t M, int64_t k) {
  const int64_t rows = M + 2 * k;
  for (int64_t i = 0; i < I; ++i)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < O; ++o) {
        const int64_t m = r - k;
        weight[(i * rows + r) * O + o] = m >= 0 && m < M ? coef[(i * O + o) * M + m] : T(0);
      }
}

// total[e] = sum over the slices s of partial[s * size + e]; total may be partial itself.
void sum_slices(const double* partial, int64_t slices, int64_t size, double* total) {
  for (int64_t e = 0; e < size; ++e) {
    double sum = partial[e];
    for (int64_t s = 1; s < slices; ++s)
      sum += partial[s * size + e];
    total[e] = sum;
  }
}

// The kernels' (slices, I, M + 2k, O) weight gradient, in double, as coef's (I, O, M) in T:
// summed over the slices, the padding rows dropped.
template <typename T>
void coef_gradient(const double* gweight, int64_t slices, int64_t I, int64_t O, int64_t M,
                   int64_t k, T* gcoef) {
  const int64_t rows = M + 2 * k, size = I * rows * O;
  for (int64_t i = 0; i < I; ++i)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t m = 0; m < M; ++m) {
        const int64_t at = (i * rows + m + k) * O + o;
        double sum = gweight[at];
        for (int64_t s = 1; s < slices; ++s)
          sum += gweight[s * size + at];
        gcoef[(i * O + o) * M + m] = static_cast<T>(sum);
      }
}

// wb = mask * scale_base and ws = mask * scale_sp, as host arrays.
template <typename T> struct MaskedScales {
  std::vector<T> wb, ws;
  explicit MaskedScales(const LayerPass& p)
      : wb(static_cast<size_t>(p.mask.numel())), ws(wb.size()) {
    const T* sb = p.scale_base.const_data_ptr<T>();
    const T* sp = p.scale_sp.const_data_ptr<T>();
    const T* mask = p.mask.const_data_ptr<T>();
    for (size_t e = 0; e < wb.size(); ++e) {
      wb[e] = sb[e] * mask[e];
      ws[e] = sp[e] * mask[e];
    }
  }
};

// The kernels' view of the layer.
template <typename T> LayerArgs<T> layer_args(const LayerPass& p, const MaskedScales<T>& scales) {
  auto spline = spline_args<T>(p.x, p.grid, p.inv, p.weight, p.k);
  spline.M -= 2 * p.k; // the weight's padding rows are not basis functions
  return {spline, scales.wb.data(), scales.ws.data(), p.base,
          p.sigmoid.defined() ? p.sigmoid.const_data_ptr<T>() : nullptr};
}

// Whether a holds b's values, bit for bit (a contiguous).
bool same_values(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
    return false;
  const auto contiguous = b.contiguous();
  return std::memcmp(a.const_data_ptr(), contiguous.const_data_ptr(), a.nbytes()) == 0;
}

// The knot reciprocals of grid, and sigmoid(x) for the SiLU base (silu = x sigmoid(x), the
// sigmoid by ATen's vectorised kernel; undefined otherwise): what a pass derives from x and the
// grid alone.
std::pair<at::Tensor, at::Tensor> input_values(const at::Tensor& x, const at::Tensor& grid,
                                               int64_t k, BaseKind base) {
  return {knot_reciprocals(grid, k), base == BaseKind::kSiLU ? at::sigmoid(x) : at::Tensor()};
}

} // namespace

bool KeptInput::refresh(const at::Tensor& x, const at::Tensor& grid, int64_t k, BaseKind base) {
  const int64_t N = x.size(0), I = x.size(1), M = grid.size(1) - k - 1;
  const int64_t values = N * I * 2 + grid.numel() * (k + 1) + kept_basis_size(N, I, M);
  if (values * static_cast<int64_t>(x.element_size()) > kMaxBytes) {
    *this = KeptInput();
    return false;
  }
  if (k == k_ && base == base_ && same_values(x_, x) && same_values(grid_, grid))
    return true;
  // Copies: the caller's tensors may change in place.
  x_ = x.contiguous().clone();
  grid_ = grid.contiguous().clone();
  std::tie(inv_, sigmoid_) = input_values(x_, grid_, k, base);
  k_ = k;
  base_ = base;
  basis_ready_ = false;
  return true;
}

template <typename T>
KeptBasis<T> KeptInput::basis(int64_t slices, const void* kernel, int64_t outputs) {
  if (!basis_ready_ || slices != slices_ || kernel != kernel_ || outputs != outputs_) {
    const int64_t size = kept_basis_size(x_.size(0), x_.size(1), grid_.size(1) - k_ - 1);
    if (!basis_.defined() || basis_.numel() != size || basis_.scalar_type() != x_.scalar_type())
      basis_ = at::empty({size}, x_.options());
    basis_ready_ = false;
    slices_ = slices;
    kernel_ = kernel;
    outputs_ = outputs;
  }
  return {basis_.mutable_data_ptr<T>(), basis_ready_};
}

LayerPass::LayerPass(const at::Tensor& x_in, const at::Tensor& grid_in, const at::Tensor& coef,
                     const at::Tensor& scale_base_in, const at::Tensor& scale_sp_in,
                     const at::Tensor& mask_in, BaseKind base_in, int64_t k_in, KeptInput* kept_in)
    : scale_base(scale_base_in.contiguous()), scale_sp(scale_sp_in.contiguous()),
      mask(mask_in.contiguous()), base(base_in), k(k_in) {
  const int64_t I = coef.size(0), O = coef.size(1), M = coef.size(2);
  if (kept_in != nullptr && kept_in->refresh(x_in, grid_in, k, base)) {
    kept = kept_in;
    x = kept->x();
    grid = kept->grid();
    inv = kept->inv();
    sigmoid = kept->sigmoid();
  } else {
    x = x_in.contiguous();
    grid = grid_in.contiguous();
    std::tie(inv, sigmoid) = input_values(x, grid, k, base);
  }
  // coef (I, O, M) as (I, M + 2k, O), with k zero rows at both ends (kernels/cpu/layer_points.h).
  weight = at::empty({I, M + 2 * k, O}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_pass_weight", [&] {
    padded_weight(coef.contiguous().const_data_ptr<scalar_t>(), weight.mutable_data_ptr<scalar_t>(),
                  I, O, M, k);
  });
}

LayerPass::LayerPass(const std::vector<at::Tensor>& t, BaseKind base_in, int64_t k_in)
    : x(t.at(0)), grid(t.at(1)), inv(t.at(2)), weight(t.at(3)), scale_base(t.at(4)),
      scale_sp(t.at(5)), mask(t.at(6)), sigmoid(t.at(7)), base(base_in), k(k_in) {}

std::vector<at::Tensor> LayerPass::tensors() const {
  return {x, grid, inv, weight, scale_base, scale_sp, mask, sigmoid};
}

std::pair<at::Tensor, at::Tensor> layer_pass_forward(const LayerPass& p) {
  const int64_t N = p.x.size(0), I = p.x.size(1), O = p.weight.size(2);
  const int64_t slices = sample_slices(N, I * (p.k + 1) * (O + p.k + 1), N);
  auto y = at::zeros({N, O}, p.x.options());
  auto sums = at::empty({2, I, O}, p.x.options().dtype(at::kDouble));
  std::vector<double> partial(static_cast<size_t>(slices * 2 * I * O), 0.0);
  AT_DISPATCH_FLOATING_TYPES(p.x.scalar_type(), "layer_pass_forward", [&] {
    const MaskedScales<scalar_t> scales(p);
    const auto args = layer_args<scalar_t>(p, scales);
    const auto kernel = cpu_spline_kernels<scalar_t>().layer_with_moments;
    auto* out = y.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
      kernel(args, out, partial.data(), slices, begin, end);
    });
  });
  sum_slices(partial.data(), slices, 2 * I * O, sums.mutable_data_ptr<double>());
  return {y, sums};
}

LayerPassGrads layer_pass_backward(const LayerPass& p, const at::Tensor& gy_in,
                                   const at::Tensor& gm_in, bool x_gradient) {
  const auto& x = p.x;
  const int64_t N = x.size(0), I = x.size(1), rows = p.weight.size(1), O = p.weight.size(2),
                k = p.k, M = rows - 2 * k;
  const auto gy = gy_in.defined() ? gy_in.contiguous() : at::Tensor();
  const auto gm = gm_in.defined() ? gm_in.to(at::kDouble).contiguous() : at::Tensor();
  const std::vector<double> no_gm(gm.defined() ? 0 : static_cast<size_t>(2 * I * O), 0.0);
  const double* g1 = gm.defined() ? gm.const_data_ptr<double>() : no_gm.data();
  // Slices where the inputs alone leave threads idle.
  const int64_t threads = at::get_num_threads();
  const int64_t slices =
      I >= threads ? 1 : sample_slices(N, 2 * (k + 1) * (O + k + 1), (threads + I - 1) / I);
  LayerPassGrads grads{x_gradient ? at::empty({N, I}, x.options()) : at::Tensor(),
                       at::empty({I, O, M}, x.options()), at::empty({I, O}, x.options()),
                       at::empty({I, O}, x.options())};
  // The slices' sums, in double.
  std::vector<double> gweight(static_cast<size_t>(slices * I * rows * O), 0.0);
  std::vector<double> gwb(static_cast<size_t>(slices * I * O), 0.0), gws(gwb);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_pass_backward", [&] {
    const MaskedScales<scalar_t> scales(p);
    const auto args = layer_args<scalar_t>(p, scales);
    LayerGrads<scalar_t> g{gy.defined() ? gy.const_data_ptr<scalar_t>() : nullptr,
                           g1,
                           g1 + I * O,
                           x_gradient ? grads.x.mutable_data_ptr<scalar_t>() : nullptr,
                           gweight.data(),
                           gwb.data(),
                           gws.data(),
                           slices,
                           {}};
    const auto kernel = cpu_spline_kernels<scalar_t>().layer_with_moments_backward;
    if (p.kept != nullptr && !x_gradient)
      g.kept = p.kept->basis<scalar_t>(slices, reinterpret_cast<const void*>(kernel), O);
    // Tasks of too little work stay on this thread: waking the OpenMP team for them costs
    // more than it saves, much more where cores are oversubscribed (kernels/cpu/drivers.cpp).
    const int64_t task_work = (N / slices) * 2 * (k + 1) * (O + k + 1);
    at::parallel_for(0, slices * I, parallel_grain(task_work),
                     [&](int64_t begin, int64_t end) { kernel(args, g, begin, end); });
    if (g.kept.values != nullptr)
      p.kept->basis_written();
    coef_gradient(gweight.data(), slices, I, O, M, k, grads.coef.mutable_data_ptr<scalar_t>());
    // d/dscale = mask d/dw.
    const scalar_t* mask = p.mask.const_data_ptr<scalar_t>();
    auto* gsb = grads.scale_base.mutable_data_ptr<scalar_t>();
    auto* gsp = grads.scale_sp.mutable_data_ptr<scalar_t>();
    sum_slices(gwb.data(), slices, I * O, gwb.data());
    sum_slices(gws.data(), slices, I * O, gws.data());
    for (int64_t e = 0; e < I * O; ++e) {
      gsb[e] = mask[e] * static_cast<scalar_t>(gwb[e]);
      gsp[e] = mask[e] * static_cast<scalar_t>(gws[e]);
    }
  });
  return grads;
}

} // namespace kan::detail
