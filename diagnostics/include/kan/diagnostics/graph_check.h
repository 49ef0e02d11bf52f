#pragma once
/// Static device check of a TorchScript module: reads the graphs of forward and of every method
/// and function it calls, without running them, and flags what goes wrong once the model is on a
/// GPU (tensors made on the CPU, copies to the host, host synchronisations, tensors that
/// Module.to(device) does not move), each at the user's source line.

#include "kan/io/enum_names.h"
#include "kan/results/results.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// What the static check of a TorchScript graph flags.
enum class GraphProblem {
  kFactoryWithoutDevice, ///< zeros, arange, tensor([...]) ... without a device: made on the CPU
  kFixedDevice,          ///< a factory or to() with a device constant in the graph (tracing
                         ///< bakes one in), whatever device the model is moved to
  kHostCopy,             ///< cpu(), to("cpu"): a copy to the host inside forward
  kHostSynchronization,  ///< item(), tolist(), bool/int/float of a tensor: the host waits
  kPlainTensorAttribute, ///< a tensor attribute that is neither a parameter nor a buffer
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<GraphProblem> kGraphProblemNames[] = {
    {GraphProblem::kFactoryWithoutDevice, "factory_without_device"},
    {GraphProblem::kFixedDevice, "fixed_device"},
    {GraphProblem::kHostCopy, "host_copy"},
    {GraphProblem::kHostSynchronization, "host_synchronization"},
    {GraphProblem::kPlainTensorAttribute, "plain_tensor_attribute"}};
std::string to_string(GraphProblem value);

/// The result of check_graph; `to_json()` has `findings` and `summary`.
struct GraphCheckReport {
  /// One per problem, operation and source line, in the one finding type of every result file:
  /// kind "graph", tensor "aten::zeros in model.layers.0" (an attribute: "model.out_scale"),
  /// problem a GraphProblem's name, source the user's "file.py:53", count the nodes there.
  /// Sorted by source line, then operation.
  std::vector<results::AuditFinding> findings;
  int64_t methods = 0; ///< graphs read: forward and every method and function it reaches
  int64_t nodes = 0;   ///< nodes inspected (a method called by two submodules: twice)
  double seconds = 0;  ///< wall time of the check

  bool clean() const { return findings.empty(); }
  nlohmann::json to_json() const;
  /// One line per finding, then a summary line: for a terminal.
  std::string to_text() const;
};

/// The inverse of GraphCheckReport::to_json, strict (kan/io/json_reader.h): key paths below `path`.
GraphCheckReport graph_check_report_from_json(const nlohmann::json& json,
                                              const std::string& path = "");

/// Checks forward of `module` and everything it calls. root: the name module paths start with
/// ("model" -> "model.layers.0").
///
/// Example:
///   auto module = torch::jit::load("model.pt");
///   std::cout << kan::diagnostics::check_graph(module).to_text();
GraphCheckReport check_graph(const torch::jit::Module& module, const std::string& root = "model");

} // namespace kan::diagnostics
