#include "kan/diagnostics/model_audit.h"

#include "kan/data/dataset.h"
#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/graph_check.h"
#include "kan/diagnostics/meta_rehearsal.h"
#include "kan/io/text.h"
#include "kan/nn/options.h"
#include "kan/nn/torchscript_model.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/pykan.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <set>

namespace kan::diagnostics {
namespace {

// A small regression dataset for the model's input and output widths.
Dataset audit_dataset(const AuditRequest& r, const Model& model, torch::Device device,
                      torch::Dtype dtype) {
  const int64_t inputs = model.inputs();
  const int64_t outputs = model.outputs();
  auto target = [outputs](const torch::Tensor& x) {
    return torch::sin(M_PI * x.sum(1, /*keepdim=*/true)).expand({-1, outputs}).contiguous();
  };
  return create_dataset(target, DatasetOptions(inputs)
                                    .train_num(r.samples)
                                    .test_num(std::max<int64_t>(1, r.samples / 4))
                                    .seed(r.seed)
                                    .device(device)
                                    .dtype(dtype));
}

// Every finding in one list with the stage that found it; a tensor's fault seen before and
// after training is one finding.
std::vector<results::AuditFinding> all_findings(const GraphCheckReport* graph,
                                                const AuditReport* before, const AuditedFit* after,
                                                const std::string& training_error) {
  std::vector<results::AuditFinding> findings;
  std::set<std::string> seen;
  auto add = [&](results::AuditFinding f, const char* stage) {
    if (f.kind != "operation" && !seen.insert(f.tensor + "/" + f.problem + "/" + f.source).second)
      return;
    f.stage = stage;
    findings.push_back(std::move(f));
  };
  if (graph != nullptr) {
    for (const auto& f : graph->findings)
      add(f, "graph");
  }
  if (before != nullptr) {
    for (const auto& f : before->findings)
      add(f, "before_training");
  }
  if (after != nullptr) {
    for (const auto& f : after->audit.findings)
      add(f, "after_training");
    for (const auto& f : after->trace.findings)
      add(f, "trace");
  }
  if (!training_error.empty()) {
    results::AuditFinding f;
    f.kind = "error";
    f.problem = "training_failed";
    f.expected_device = before != nullptr ? before->expected_device : "";
    f.message = training_error;
    f.fix = "See the findings above.";
    add(f, "trace");
  }
  return findings;
}

} // namespace

AuditRecord audit_model(const AuditRequest& r,
                        const std::function<void(const std::string&)>& on_text) {
  const auto print = [&](const std::string& text) {
    if (on_text && !text.empty())
      on_text(text);
  };
  const torch::Device device = r.device;
  const torch::Device data_device = r.data_device.value_or(device);
  // Opened inside the rehearsal, a model file is read on the CPU and moved in place, as a GPU
  // run moves it; its data is made on the CPU and moved too.
  std::optional<MetaRehearsal> rehearsal;
  if (device.is_meta()) {
    rehearsal.emplace();
    print("rehearsal: a GPU run rehearsed on the meta device (shapes and devices, no "
          "data): its findings are what a GPU run would raise or pay\n");
  }
  auto built = r.built;
  built.device(device);
  const std::shared_ptr<Model> model =
      !r.model_file.empty() ? open_model(r.model_file, ModelFileOptions()
                                                           .device(device)
                                                           .trust_torchscript(r.trust_torchscript)
                                                           .inputs(r.inputs))
      : !r.pykan.empty()    ? load_pykan(r.pykan, device).ptr()
                            : KAN(built).ptr();
  const Dataset data = audit_dataset(r, *model, data_device, r.data_dtype.value_or(model->dtype()));

  AuditRecord record;
  // A TorchScript model's graphs, read without running them.
  if (const auto* script = dynamic_cast<const TorchScriptModelImpl*>(model.get())) {
    record.graph_check = check_graph(script->script());
    print(record.graph_check->to_text());
  }
  record.static_audit = DeviceAudit(device).module(model->module()).dataset(data).report();
  print(record.static_audit.to_text());

  // N traced steps, then N untraced ones to compare their time.
  const bool adam = r.opt == Optimizer::kAdam;
  auto fit_options =
      FitOptions().opt(r.opt).lr(adam ? 0.01 : 1.0).steps(2 * r.trace_steps).seed(r.seed);
  std::string training_error;
  try {
    if (!r.static_only)
      record.after_training = audited_fit(*model, data, fit_options, r.trace_steps);
  } catch (const c10::Error& e) {
    training_error = e.what_without_backtrace();
    // A device mismatch is what the audit looks for; anything else stops it, unless the static
    // audit already explains why training could not run.
    TORCH_CHECK(training_error.rfind("device mismatch", 0) == 0 || !record.static_audit.clean(),
                "training failed: ", io::first_line(training_error));
  }
  if (const auto& after = record.after_training) {
    print(after->audit.to_text() + after->trace.to_text());
    if (after->trace.summary.steps > 0 && !rehearsal) { // meta has no time worth showing
      char timing[200];
      std::snprintf(timing, sizeof timing,
                    "timing: traced step %.4f s, untraced step %.4f s (the traced steps include "
                    "the first step's warm-up and grid update)\n",
                    after->traced_step_seconds, after->untraced_step_seconds);
      print(timing);
    }
  }
  if (!training_error.empty())
    print("training failed: " + training_error + "\n");

  record.findings =
      all_findings(record.graph_check ? &*record.graph_check : nullptr, &record.static_audit,
                   record.after_training ? &*record.after_training : nullptr, training_error);
  record.exit_code = record.findings.empty() ? 0 : 1;
  record.device = device.str();
  auto& c = record.config;
  c.checkpoint = r.model_file;
  c.model_kind = model->kind();
  c.model = model->config();
  c.data_device = data_device.str();
  c.data_dtype = r.data_dtype ? kan::to_string(*r.data_dtype) : "model";
  c.samples = r.samples;
  c.opt = kan::to_string(r.opt);
  c.trace_steps = r.static_only ? 0 : r.trace_steps;
  c.seed = r.seed;
  c.rehearsal = rehearsal.has_value();
  return record;
}

} // namespace kan::diagnostics
