#pragma once
/// A GPU run rehearsed on the meta device, for machines without a GPU: the model and the data
/// on `meta` (shapes, dtypes and devices, no data), every operation of the thread intercepted so
/// that the run goes on where meta alone would stop, while an OperationTrace on kMeta names what
/// a GPU run would trip over.
///
/// What the interception does, each time as CUDA would have it:
/// - `.to(meta)` of a module's tensors moves them in place (`set_data`, which LibTorch allows
///   between CPU and CUDA but not meta), so a module that keeps its own references to its
///   parameters sees them moved, as on a GPU;
/// - a non-scalar CPU tensor meeting meta tensors (the error a GPU run raises) is moved to meta
///   in place after the trace has named it, so one rehearsal lists every such bug on its path;
/// - a copy of a meta tensor to the host (`.cpu()`) yields a CPU tensor of zeros, as a GPU run
///   would yield a CPU tensor: what the code then does with it is traced like on a GPU;
/// - a host synchronisation (`.item()`, `bool(tensor)`) yields kSubstitutedValue (true for a
///   bool) so that the code can go on;
/// - an operator that has no meta kernel in LibTorch (many have one only in Python) gets its
///   output shapes from the CPU kernel run on zeros of the inputs' shapes.
///
/// Example:
///   kan::diagnostics::MetaRehearsal rehearsal;
///   model->to(torch::kMeta);
///   kan::diagnostics::OperationTrace trace(torch::kMeta);
///   trace.start();
///   model->forward(x.to(torch::kMeta)).sum().backward();
///   trace.stop();

#include <cstdint>

namespace kan::diagnostics {

/// What a host synchronisation returns in a rehearsal (true for a bool).
inline constexpr double kSubstitutedValue = 0.0;

/// While alive, operations on this thread (and on the autograd threads working for it) are
/// intercepted as described above. One per thread; they do not nest.
class MetaRehearsal {
public:
  MetaRehearsal();
  ~MetaRehearsal();
  MetaRehearsal(const MetaRehearsal&) = delete;
  MetaRehearsal& operator=(const MetaRehearsal&) = delete;

  /// True on a thread inside a rehearsal.
  static bool active();
  /// Operators that had no meta kernel and ran on the CPU for their shapes, so far (process).
  static int64_t shape_fallbacks();
};

} // namespace kan::diagnostics
