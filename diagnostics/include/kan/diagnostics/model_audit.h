#pragma once
/// `kanbench audit` as one call: is this model, on this device, really where it should be? A
/// static audit of the model and a small dataset, a TorchScript model's graphs read without
/// running them, then traced training steps; on the meta device the whole audit is a rehearsal of
/// a GPU run (kan/diagnostics/meta_rehearsal.h). Returns audit.json's record
/// (kan/diagnostics/audit_record.h). docs/audit.md describes what it finds.

#include "kan/diagnostics/audit_record.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace kan::diagnostics {

/// The model to audit and how. Option names in its errors are those of `kanbench audit`.
struct AuditRequest {
  /// Where the model should run: cpu, cuda:N, or meta (a GPU run rehearsed without a GPU).
  torch::Device device = torch::kCPU;
  /// Where the audit's dataset goes; none: `device` (another one plays a loader that yields CPU
  /// tensors).
  std::optional<torch::Device> data_device;
  /// The model: a model file (kan::open_model: a kanbench checkpoint, or a TorchScript archive
  /// with trust_torchscript and its input width `inputs`), else a pykan checkpoint prefix, else
  /// a KAN built from `built` (its device set here).
  std::string model_file;
  bool trust_torchscript = false;
  int64_t inputs = 0;
  std::string pykan;
  KANOptions built{{2, 5, 1}};
  /// The dataset's dtype; none: the model's.
  std::optional<torch::Dtype> data_dtype;
  int64_t samples = 256; ///< training samples of the audit's dataset
  uint64_t seed = 0;     ///< of the dataset (and of the traced steps)
  Optimizer opt = Optimizer::kLBFGS;
  /// Steps traced operation by operation (as many again run untraced, for the timing); 0: the
  /// static audit alone.
  int64_t trace_steps = 1;
  /// Runs nothing: the graphs and the static audit, no training step.
  bool static_only = false;
};

/// Runs the audit `request` asks for. `on_text` (may be empty) gets each part's report as it is
/// done (the rehearsal's banner, the graph check, the static audit, the trace, the timing): the
/// record holds the same. An error before the training steps, or a training error other than a
/// device mismatch while the static audit is clean, means the audit could not run: an exception
/// ("training failed: ..."). A device mismatch in training is a finding (problem
/// training_failed).
///
/// Example:
///   kan::diagnostics::AuditRequest request;
///   request.device = torch::Device("meta");
///   request.model_file = "model.pt";
///   const auto record = kan::diagnostics::audit_model(request);
///   if (record.exit_code != 0) std::cerr << record.findings.size() << " findings\n";
AuditRecord audit_model(const AuditRequest& request,
                        const std::function<void(const std::string&)>& on_text = nullptr);

} // namespace kan::diagnostics
