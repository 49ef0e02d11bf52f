#pragma once
/// Static device audit: where every tensor of a model, its gradients, its optimiser and its
/// data lives, and what is wrong with it.

#include "kan/data/dataset.h"
#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// What an audited tensor is to the model.
enum class TensorKind { kParameter, kBuffer, kGradient, kOptimizerState, kData, kPlainAttribute };
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<TensorKind> kTensorKindNames[] = {
    {TensorKind::kParameter, "parameter"},
    {TensorKind::kBuffer, "buffer"},
    {TensorKind::kGradient, "grad"},
    {TensorKind::kOptimizerState, "optimizer_state"},
    {TensorKind::kData, "data"},
    /// A TorchScript module's tensor attribute that is neither a parameter nor a buffer.
    {TensorKind::kPlainAttribute, "plain_attribute"}};
std::string to_string(TensorKind value);

/// What is wrong with a tensor.
enum class Problem {
  kWrongDevice,      ///< not on the expected device
  kWrongDtype,       ///< a floating tensor of another dtype than the model's
  kNonContiguous,    ///< strided but not contiguous where the KAN needs dense memory
  kNonDense,         ///< sparse or another non-strided layout
  kNonLeafParameter, ///< a parameter that is the result of an operation: it no longer trains
  kNotModuleState,   ///< a tensor attribute that .to() does not move (TensorKind::kPlainAttribute)
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<Problem> kProblemNames[] = {
    {Problem::kWrongDevice, "wrong_device"},
    {Problem::kWrongDtype, "wrong_dtype"},
    {Problem::kNonContiguous, "non_contiguous"},
    {Problem::kNonDense, "non_dense"},
    {Problem::kNonLeafParameter, "non_leaf_parameter"},
    {Problem::kNotModuleState, "not_module_state"}};
std::string to_string(Problem value);

struct AuditSummary {
  int64_t tensors_checked = 0;
  std::map<std::string, int64_t> bytes_per_device; ///< e.g. {"cpu": 1234}
  int64_t findings = 0;
};

/// The result of an audit; `to_json()` has a top-level `findings` array and a `summary`.
struct AuditReport {
  std::string expected_device;
  std::string expected_dtype;
  /// One per misplaced or faulty tensor, in the one finding type of every result file: `kind`
  /// is a TensorKind's name, `problem` a Problem's (to_string), with the tensor's dtype and shape.
  std::vector<results::AuditFinding> findings;
  AuditSummary summary;

  bool clean() const { return findings.empty(); }
  nlohmann::json to_json() const;
  /// One line per finding, then the summary: for a terminal.
  std::string to_text() const;
};

/// The inverse of AuditReport::to_json, strict (kan/io/json_reader.h): key paths below `path`.
AuditReport audit_report_from_json(const nlohmann::json& json, const std::string& path = "");

/// Collects tensors to audit against one expected device (and dtype), then reports.
///
/// Example:
///   auto report = kan::diagnostics::DeviceAudit(torch::kCUDA)
///                     .module(*model)
///                     .optimizer(optimizer, *model)
///                     .dataset(data)
///                     .report();
///   if (!report.clean()) std::cerr << report.to_text();
class DeviceAudit {
public:
  /// expected_dtype: the model's floating dtype; by default the dtype of the first floating
  /// parameter audited.
  explicit DeviceAudit(torch::Device expected_device,
                       std::optional<torch::Dtype> expected_dtype = std::nullopt);

  /// Every parameter and buffer of the module tree (recursively, full dotted names) and every
  /// defined gradient.
  DeviceAudit& module(const torch::nn::Module& module, const std::string& prefix = "model");
  /// Every state tensor of the optimiser (Adam moments, LBFGS history), named after the
  /// parameter of `module` it belongs to.
  DeviceAudit& optimizer(torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                         const std::string& prefix = "optimizer");
  /// One data tensor (inputs, labels).
  DeviceAudit& data(const std::string& name, const torch::Tensor& tensor);
  /// The dataset's train/test inputs and labels.
  DeviceAudit& dataset(const Dataset& dataset, const std::string& prefix = "data");

  AuditReport report() const;

private:
  void check(const std::string& name, TensorKind kind, const torch::Tensor& tensor);

  torch::Device expected_device_;
  std::optional<torch::Dtype> expected_dtype_;
  AuditReport report_;
};

/// Audits a module's parameters, buffers and gradients against `expected_device`.
AuditReport audit(const torch::nn::Module& module, torch::Device expected_device);

/// True for LibTorch's device-mismatch errors ("Expected all tensors to be on the same
/// device ...", "Tensor on device X is not on the expected device Y!"), which never say which
/// parameter or buffer is misplaced.
bool is_device_mismatch(const c10::Error& error);

/// Runs fn. When a device-mismatch error escapes it, runs `make_report` (an audit of the
/// model, optimiser and data involved) and throws a c10::Error that names every misplaced
/// tensor with its fix, followed by LibTorch's own message. Other errors pass unchanged.
///
/// Example:
///   kan::diagnostics::diagnose_device_errors([&] { kan::fit(model, data, options); }, [&] {
///     return kan::diagnostics::DeviceAudit(torch::kCUDA).module(*model).dataset(data).report();
///   });
void diagnose_device_errors(const std::function<void()>& fn,
                            const std::function<AuditReport()>& make_report);

} // namespace kan::diagnostics
