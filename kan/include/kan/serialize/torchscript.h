#pragma once
/// TorchScript archives in and out: a PyTorch model saved with `torch.jit.save` (scripted or
/// traced) loaded as a kan::TorchScriptModel, and written back so that `torch.jit.load` reads it
/// (docs/torchscript.md).

#include "kan/nn/torchscript_model.h"

#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace kan {

/// How load_torchscript opens an archive.
struct TorchScriptLoadOptions {
  /// A TorchScript archive is a program that LibTorch's loader compiles and runs, and that loader
  /// is not hardened against crafted files: loading one is refused unless the caller says it
  /// trusts the file (the command line's --trust-torchscript).
  TORCH_ARG(bool, trusted) = false;
  /// The model's input width (kanbench's own files record theirs; a TorchScript module does not).
  TORCH_ARG(int64_t, inputs) = 0;
  /// Where the model's tensors go.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Whether `path` is a TorchScript archive: a zip archive with TorchScript code whose pickle is not
/// a kanbench checkpoint's. Told from the zip directory and the pickle's bytes, without reading
/// the tensors or running anything. Anything else, an unreadable archive included, is false
/// (load_torchscript and the checkpoint loader name what is wrong with a file).
bool is_torchscript_archive(const std::string& path);

/// Loads the TorchScript module at `path`. Before LibTorch's loader sees it, kanbench's own
/// archive reader checks its structure (the zip directory, the pickles of its state and
/// constants, every tensor record against the file), so that a truncated or corrupted file is an
/// error naming it, never a crash. Then, only where options.trusted(), LibTorch loads it on the
/// CPU and it is moved to options.device(). Errors: not trusted (naming --trust-torchscript), no
/// input width, a module whose forward does not take (N, inputs) to (N, outputs), parameters
/// in more than one dtype or in one that is not float32 or float64.
TorchScriptModel load_torchscript(const std::string& path, const TorchScriptLoadOptions& options);

/// kanbench's own model (a KAN, pykan-imported ones included, with its symbolic edges, node maps
/// and multiplication nodes; or an MLP) as a TorchScript module that plain PyTorch runs
/// (`torch.jit.load`, no kanbench or pykan needed) and trains (its coefficients, scales and affine
/// parameters are parameters, trainable as in the model). Its forward is the reference backend's
/// arithmetic, so its outputs equal the model's to rounding (1e-12 in float64). A copy: the model
/// is not changed. A symbolic edge of a function outside pykan's library is an error naming it.
///
/// Example:
///   auto exported = kan::export_torchscript(*kan::open_model("results/fit/model.pt"));
///   kan::save_torchscript(*exported, "kan_scripted.pt"); // Python: torch.jit.load(...)
TorchScriptModel export_torchscript(const Model& model);

/// Writes the model's TorchScript module (with its current parameters, on their device) to
/// `path` atomically; `torch.jit.load(path)` in Python reads it.
void save_torchscript(const TorchScriptModelImpl& model, const std::string& path);
/// The same archive, handed to `write` piece by piece (for a caller that writes several files as
/// one unit, e.g. through kan::io::AtomicFile).
void save_torchscript(const TorchScriptModelImpl& model,
                      const std::function<void(const void*, size_t)>& write);

} // namespace kan
