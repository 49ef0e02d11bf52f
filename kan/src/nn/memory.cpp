#include "kan/nn/memory.h"

#include "kernels/edge_moments.h"

#include "detail/checks.h"
#include "detail/saturate.h"
#include "kan/nn/bspline.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

namespace kan {
namespace {

using detail::kSaturated;
using detail::sat_add;
using detail::sat_mul;

// The shape of one layer, in elements.
struct LayerShape {
  int64_t in, out, edges, M, P;
};

std::vector<LayerShape> layer_shapes(const KANOptions& o) {
  check_structure(o);
  TORCH_CHECK(o.grid() >= 1 && o.k() >= 0, "grid must be >= 1 and k >= 0, got grid = ", o.grid(),
              ", k = ", o.k());
  std::vector<LayerShape> shapes;
  for (size_t l = 0; l + 1 < o.width().size(); ++l) {
    // A layer's outputs are the next layer's subnodes (more than its nodes with multiplication).
    const int64_t in = o.width()[l], out = subnodes(o, l + 1);
    const int64_t M = sat_add(o.grid(), o.k());
    shapes.push_back({in, out, sat_mul(in, out), M, sat_add(M, sat_add(o.k(), 1))});
  }
  return shapes;
}

int64_t dtype_bytes(torch::Dtype dtype) {
  return static_cast<int64_t>(c10::elementSize(dtype));
}

std::string model_description(const KANOptions& o) {
  std::ostringstream s;
  s << "the model " << c10::IntArrayRef(o.width()) << " (G " << o.grid() << ", k " << o.k() << ", "
    << to_string(o.dtype()) << ")";
  return s.str();
}

// Persistent parts of a model: parameters and buffers.
void add_model_parts(MemoryEstimate& e, const KANOptions& o) {
  const int64_t s = dtype_bytes(o.dtype());
  int64_t parameters = 0, buffers = 0;
  for (const auto& l : layer_shapes(o)) {
    // coef (I, O, M), scale_base and scale_sp (I, O); grid (I, P) and mask (I, O).
    parameters = sat_add(parameters, sat_mul(l.edges, sat_add(l.M, 2), s));
    buffers = sat_add(buffers, sat_mul(sat_add(sat_mul(l.in, l.P), l.edges), s));
  }
  e.parts.push_back({"parameters", parameters, false});
  e.parts.push_back({"buffers", buffers, false});
}

std::optional<int64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word))
    return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(word, &used);
    if (used != word.size())
      return std::nullopt; // "max": no limit
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The value of a "key value" line of a cgroup memory.stat, or 0.
int64_t stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  long long v = 0;
  while (in >> k >> v) {
    if (k == key)
      return static_cast<int64_t>(v);
  }
  return 0;
}

// Room under the memory limits of the cgroup at `path` (under the hierarchy's mount `root`) and
// each of its ancestors, the smallest of them; nullopt where none sets a limit. The working set
// (usage less inactive page cache, which the kernel reclaims before it kills) is what counts.
std::optional<int64_t> cgroup_room(const std::string& root, std::string path, const char* limit,
                                   const char* usage, const char* inactive_key) {
  std::optional<int64_t> room;
  while (true) {
    const std::string dir = root + (path == "/" ? "" : path);
    const auto max = read_number(dir + "/" + limit);
    // v1 reports "no limit" as LONG_MAX rounded down to a page.
    if (max && *max < (int64_t{1} << 62)) {
      const int64_t used = read_number(dir + "/" + usage).value_or(0) -
                           stat_value(dir + "/memory.stat", inactive_key);
      const int64_t left = std::max<int64_t>(0, *max - std::max<int64_t>(0, used));
      room = room ? std::min(*room, left) : left;
    }
    if (path.empty() || path == "/")
      break;
    const auto slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return room;
}

// The room under this process's cgroup memory limits, v2 or v1; nullopt without a limit.
std::optional<int64_t> cgroup_memory_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::optional<int64_t> room;
  auto take = [&](std::optional<int64_t> r) {
    if (r)
      room = room ? std::min(*room, *r) : *r;
  };
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos)
      continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1),
                      path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      take(cgroup_room("/sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file"));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      take(cgroup_room("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                       "memory.usage_in_bytes", "total_inactive_file"));
    }
  }
  return room;
}

int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:")
      return sat_mul(static_cast<int64_t>(value), int64_t{1024});
  }
  TORCH_CHECK(false, "available_memory: /proc/meminfo has no MemAvailable line; cannot tell how "
                     "much memory the cpu has (a Linux kernel older than 3.14?)");
}

} // namespace

std::string format_bytes(int64_t bytes) {
  if (bytes >= kSaturated)
    return "more than 9.22 EB";
  if (bytes < 1000)
    return std::to_string(bytes) + " B";
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 999.5 && u + 1 < std::size(units)) {
    v /= 1000;
    ++u;
  }
  // 3 significant digits, decided after rounding (9.996 KB reads "10.0 KB", not "10.00 KB").
  const int decimals = v < 9.995 ? 2 : v < 99.95 ? 1 : 0;
  char text[32];
  std::snprintf(text, sizeof text, "%.*f %s", decimals, v, units[u]);
  return text;
}

int64_t MemoryEstimate::total() const {
  int64_t persistent = 0, transient = 0;
  for (const auto& p : parts) {
    if (p.transient)
      transient = std::max(transient, p.bytes);
    else
      persistent = sat_add(persistent, p.bytes);
  }
  return sat_add(persistent, transient);
}

std::string MemoryEstimate::breakdown() const {
  std::string s;
  for (const auto& p : parts) {
    if (!s.empty())
      s += ", ";
    s += p.name + " " + format_bytes(p.bytes);
  }
  return s;
}

MemoryEstimate estimate_model_memory(const KANOptions& options) {
  MemoryEstimate e;
  e.what = "the parameters and buffers of " + model_description(options);
  e.device = options.device();
  add_model_parts(e, options);
  return e;
}

MemoryEstimate estimate_training_memory(const KANOptions& model, const FitOptions& fit,
                                        int64_t train_num, int64_t test_num) {
  TORCH_CHECK(train_num >= 0 && test_num >= 0,
              "estimate_training_memory: train_num and test_num must be >= 0, got ", train_num,
              " and ", test_num);
  const auto shapes = layer_shapes(model);
  const int64_t s = dtype_bytes(model.dtype());
  const bool lbfgs = fit.opt() == Optimizer::kLBFGS;
  const bool regularized = fit.lamb() > 0;
  const bool fused = model.backend() == SplineBackend::kFused;
  const int64_t batch = fit.batch() < 0 ? train_num : std::min(fit.batch(), train_num);

  MemoryEstimate e;
  e.what = model_description(model) + " and one " + (lbfgs ? "LBFGS" : "Adam") + " step";
  e.device = model.device();
  add_model_parts(e, model);

  // Trainable elements: coef always, the scales where trainable.
  int64_t trainable = 0, largest_coef = 0;
  for (const auto& l : shapes) {
    const int64_t scales = (model.sb_trainable() ? 1 : 0) + (model.sp_trainable() ? 1 : 0);
    trainable = sat_add(trainable, sat_mul(l.edges, sat_add(l.M, scales)));
    largest_coef = std::max(largest_coef, sat_mul(l.edges, l.M));
  }
  const int64_t trainable_bytes = sat_mul(trainable, s);
  e.parts.push_back({"gradients", trainable_bytes, false});
  if (lbfgs) {
    // Its history (old_dirs, old_stps), the direction d, prev_flat_grad and the flat gradient.
    // The strong-Wolfe line search and the two-loop recursion add copies of the flat parameters
    // and gradients while the objective runs again. PeakMemory measured 38 to 59 flat copies in
    // all with history 10 on the CPU (the allocator's fragmentation included); 2h + 3 + 14 = 37
    // are counted, the rest is within the factor of 2 this estimate promises.
    const int64_t h = kLBFGSHistorySize;
    e.parts.push_back({"optimizer state (LBFGS, history " + std::to_string(h) + ")",
                       sat_mul(sat_add(sat_mul(2, h), 3), trainable_bytes), false});
    e.parts.push_back({"LBFGS line search", sat_mul(14, trainable_bytes), false});
  } else {
    // exp_avg and exp_avg_sq, and the step's temporaries (its denominator) for one parameter.
    e.parts.push_back({"optimizer state (Adam)",
                       sat_add(sat_mul(2, trainable_bytes), sat_mul(2, largest_coef, s)), false});
  }
  const int64_t label_bytes = fit.loss() == Loss::kMSE ? sat_mul(model.width().back(), s) : 8;
  e.parts.push_back(
      {"dataset (" + std::to_string(train_num) + " + " + std::to_string(test_num) + " samples)",
       sat_mul(sat_add(train_num, test_num),
               sat_add(sat_mul(model.width().front(), s), label_bytes)),
       false});

  // One forward + backward on the batch: every layer's saved tensors at once, plus the backward's
  // temporaries of one layer at a time.
  int64_t saved = 0, backward = 0, update = 0;
  // On the CPU a fused layer that is regularised, or small and outside autocast, is one autograd
  // node that saves its input only (kan/src/kernels/edge_moments.cpp), and the regulariser's
  // sample terms are loops.
  const bool cpu_fused = fused && model.device().is_cpu();
  for (const auto& l : shapes) {
    const bool one_node =
        cpu_fused && (regularized || (!fit.autocast() &&
                                      sat_mul(batch, l.edges) <= detail::kOneNodeEdgeEvaluations));
    // The input's contiguous copy, b(x), the outputs and their gradients; of one node, the input,
    // the output and their gradients.
    const int64_t per_sample = one_node ? sat_add(sat_mul(2, l.in), sat_mul(2, l.out))
                                        : sat_add(sat_mul(4, l.in), sat_mul(4, l.out));
    int64_t layer = sat_mul(batch, per_sample);
    if (regularized && !fused) {
      // Edge splines, edges and the regulariser's centred copy stay; the two scaled terms and
      // their sum exist during the forward; their gradients during the backward.
      layer = sat_add(layer, sat_mul(8, batch, l.edges));
    } else if (regularized) {
      // The fused backend keeps per-edge sums over the samples instead (S1, S2 in float64 and
      // their gradients); off the CPU the regulariser's tensors centre the layer's inputs (a copy
      // and its gradient).
      layer = sat_add(layer, sat_add(one_node ? 0 : sat_mul(2, batch, l.in), sat_mul(8, l.edges)));
    }
    if (!fused) {
      // The Cox-de Boor recursion, saved for the backward through x: about 3 tensors of
      // (N, I, P) per order, and the basis.
      layer = sat_add(layer, sat_mul(sat_add(sat_mul(3, model.k()), 3), batch, l.in, l.P));
    }
    // The masked, scaled spline weight (or coef's transposed copy) the spline product saves.
    layer = sat_add(layer, sat_mul(l.edges, l.M));
    saved = sat_add(saved, sat_mul(layer, s));
    // Backward: the weight's gradient, its per-thread slices and coef's.
    backward = std::max(backward, sat_mul(3, l.edges, l.M, s));
    if (fit.update_grid()) {
      const auto chunks = curve2coef_chunks(batch, l.in, l.out, model.grid(), model.k(),
                                            fit.grid_update_memory(), model.device());
      update = std::max(update, sat_add(chunks.bytes, sat_mul(batch, sat_add(l.in, l.out), s)));
    }
  }
  e.parts.push_back({"activations (batch " + std::to_string(batch) + ", " +
                         to_string(model.backend()) + (regularized ? ", regularised" : "") + ")",
                     sat_add(saved, backward), true});
  if (fit.update_grid())
    e.parts.push_back({"grid update (pieces within " + format_bytes(fit.grid_update_memory()) +
                           " and the layers' outputs at the batch, between steps)",
                       update, true});
  return e;
}

int64_t available_memory(torch::Device device) {
  if (device.is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), "available_memory: ", device,
                " requested but CUDA is not usable here (no GPU, no driver, or "
                "CUDA_VISIBLE_DEVICES hides them); run `kanbench env` to see why");
    const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    TORCH_CHECK(index < c10::cuda::device_count(), "available_memory: ", device,
                " requested but there are only ", static_cast<int>(c10::cuda::device_count()),
                " CUDA devices");
    c10::cuda::CUDAGuard guard(index);
    size_t free = 0, total = 0;
    const auto status = cudaMemGetInfo(&free, &total);
    TORCH_CHECK(status == cudaSuccess, "available_memory: cudaMemGetInfo on ", device,
                " failed: ", cudaGetErrorString(status));
    // What LibTorch's caching allocator holds but does not use is free to this process too.
    const auto& stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const int64_t cached = stats.reserved_bytes[all].current - stats.allocated_bytes[all].current;
    return sat_add(static_cast<int64_t>(free), std::max<int64_t>(0, cached));
  }
  TORCH_CHECK(device.is_cpu(), "available_memory: device must be cpu or cuda, got ", device);
  const int64_t available = meminfo_available();
  const auto room = cgroup_memory_room();
  return room ? std::min(available, *room) : available;
}

void check_fits_in_memory(const MemoryEstimate& estimate, int64_t available_bytes) {
  const int64_t need = estimate.total();
  if (need <= available_bytes)
    return;
  const std::string size = format_bytes(need); // "more than 9.22 EB" where it saturated
  TORCH_CHECK_WITH(OutOfMemoryError, false, estimate.what,
                   size.rfind("more than", 0) == 0 ? " need " : " need about ", size, " (",
                   estimate.breakdown(), ") but ", estimate.device, " has ",
                   format_bytes(available_bytes),
                   " available; use a smaller width, grid or batch, fewer samples, float32, or a "
                   "device with more memory");
}

MemoryEstimate check_fits_in_memory(const KANOptions& model, const FitOptions& fit,
                                    int64_t train_num, int64_t test_num) {
  auto estimate = estimate_training_memory(model, fit, train_num, test_num);
  check_fits_in_memory(estimate, available_memory(model.device()));
  return estimate;
}

} // namespace kan
