// `kanbench audit`: is this model, on this device, really where it should be? A static audit
// of the model and a small dataset, then traced training steps. On `--device meta` the whole
// audit is a rehearsal of a GPU run (kan/diagnostics/meta_rehearsal.h), for machines without
// one. Exit 0 = clean, 1 = findings, 2 = could not run (the reason on stderr).
#include "commands.h"
#include "option_checks.h"

#include "kan/diagnostics/audit_record.h"
#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/environment.h"
#include "kan/diagnostics/graph_check.h"
#include "kan/diagnostics/meta_rehearsal.h"
#include "kan/io/atomic_file.h"
#include "kan/kan.h"
#include "kan/nn/torchscript_model.h"
#include "kan/results/results_io.h"
#include "kan/serialize/pykan.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>

namespace kanbench {
namespace {

constexpr int kClean = 0, kFindings = 1, kCannotRun = 2;

struct AuditArgs {
  inline static const kan::KANOptions kModel{{2, 5, 1}};

  std::string device = "cpu";
  std::string checkpoint;
  std::string pykan;
  std::string width;
  std::string mult_arity;
  int64_t grid = kModel.grid();
  int64_t k = kModel.k();
  std::string dtype = "float32";
  bool trust_torchscript = false;
  bool static_only = false; // --static: a TorchScript model's graphs, not run
  int64_t inputs = 0;       // a TorchScript model's input width
  uint64_t seed = 0;
  kan::Optimizer opt = kan::Optimizer::kLBFGS;
  int64_t trace_steps = 1;
  int64_t samples = 256;
  std::string data_device; // default: --device
  std::string data_dtype;  // default: the model's
  std::string json;
};

// A small regression dataset for the model's input and output widths.
kan::Dataset audit_dataset(const AuditArgs& a, const kan::Model& model, torch::Device device,
                           torch::Dtype dtype) {
  const int64_t inputs = model.inputs();
  const int64_t outputs = model.outputs();
  auto target = [outputs](const torch::Tensor& x) {
    return torch::sin(M_PI * x.sum(1, /*keepdim=*/true)).expand({-1, outputs}).contiguous();
  };
  return kan::create_dataset(target, kan::DatasetOptions(inputs)
                                         .train_num(a.samples)
                                         .test_num(std::max<int64_t>(1, a.samples / 4))
                                         .seed(a.seed)
                                         .device(device)
                                         .dtype(dtype));
}

// Every finding in one list with the stage that found it; a tensor's fault seen before and
// after training is one finding.
std::vector<kan::results::AuditFinding>
all_findings(const kan::diagnostics::GraphCheckReport* graph,
             const kan::diagnostics::AuditReport* before, const kan::diagnostics::AuditedFit* after,
             const std::string& training_error) {
  std::vector<kan::results::AuditFinding> findings;
  std::set<std::string> seen;
  auto add = [&](kan::results::AuditFinding f, const char* stage) {
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
    kan::results::AuditFinding f;
    f.kind = "error";
    f.problem = "training_failed";
    f.expected_device = before != nullptr ? before->expected_device : "";
    f.message = training_error;
    f.fix = "See the findings above.";
    add(f, "trace");
  }
  return findings;
}

int audit(const AuditArgs& a);

// Anything that escapes the audit means it could not run: exit 2, never 1 ("findings").
int run_audit(const AuditArgs& a) {
  try {
    return audit(a);
  } catch (const c10::Error& e) {
    std::cerr << "kanbench audit: cannot run: " << first_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kanbench audit: cannot run: " << first_line(e.what()) << "\n";
  }
  return kCannotRun;
}

int audit(const AuditArgs& a) {
  // Everything up to the training steps decides whether the audit can run at all; an error
  // here leaves through run_audit as exit 2.
  TORCH_CHECK(a.checkpoint.empty() + a.pykan.empty() + a.width.empty() == 2,
              "give the model as one of --model PATH, --pykan PREFIX or --width 2,5,1");
  TORCH_CHECK(a.inputs == 0 || !a.checkpoint.empty(), "--inputs needs --model (the input width "
                                                      "of a TorchScript model)");
  if (!a.json.empty())
    kan::io::check_output_file(a.json, "--json");
  const torch::Device device = parse_device(a.device, "--device", /*meta_allowed=*/true);
  const torch::Device data_device =
      a.data_device.empty() ? device : parse_device(a.data_device, "--data-device", true);
  // Opened inside the rehearsal, a model file is read on the CPU and moved in place, as a GPU
  // run moves it; its data is made on the CPU and moved too.
  std::optional<kan::diagnostics::MetaRehearsal> rehearsal;
  if (device.is_meta()) {
    rehearsal.emplace();
    std::cout << "rehearsal: a GPU run rehearsed on the meta device (shapes and devices, no "
                 "data): its findings are what a GPU run would raise or pay\n";
  }
  auto built = kan::KANOptions({1, 1}).grid(a.grid).k(a.k).seed(a.seed).device(device).dtype(
      kan::dtype_from_string(a.dtype));
  if (!a.width.empty()) {
    set_width(built, a.width);
    if (!a.mult_arity.empty())
      set_mult_arity(built, a.mult_arity);
  }
  const std::shared_ptr<kan::Model> model =
      !a.checkpoint.empty()
          ? kan::open_model(a.checkpoint, kan::ModelFileOptions()
                                              .device(device)
                                              .trust_torchscript(a.trust_torchscript)
                                              .inputs(a.inputs))
      : !a.pykan.empty() ? kan::load_pykan(a.pykan, device).ptr()
                         : kan::KAN(built).ptr();
  const auto data_dtype =
      a.data_dtype.empty() ? model->dtype() : kan::dtype_from_string(a.data_dtype);
  const kan::Dataset data = audit_dataset(a, *model, data_device, data_dtype);

  // A TorchScript model's graphs, read without running them.
  std::optional<kan::diagnostics::GraphCheckReport> graph;
  if (const auto* script = dynamic_cast<const kan::TorchScriptModelImpl*>(model.get())) {
    graph = kan::diagnostics::check_graph(script->script());
    std::cout << graph->to_text();
  }
  const auto before =
      kan::diagnostics::DeviceAudit(device).module(model->module()).dataset(data).report();
  std::cout << before.to_text();

  // N traced steps, then N untraced ones to compare their time.
  const bool adam = a.opt == kan::Optimizer::kAdam;
  auto fit_options =
      kan::FitOptions().opt(a.opt).lr(adam ? 0.01 : 1.0).steps(2 * a.trace_steps).seed(a.seed);
  std::unique_ptr<kan::diagnostics::AuditedFit> after;
  std::string training_error;
  try {
    if (!a.static_only)
      after = std::make_unique<kan::diagnostics::AuditedFit>(
          kan::diagnostics::audited_fit(*model, data, fit_options, a.trace_steps));
  } catch (const c10::Error& e) {
    training_error = e.what_without_backtrace();
    // A device mismatch is what the audit looks for; anything else stops it, unless the static
    // audit already explains why training could not run.
    if (training_error.rfind("device mismatch", 0) != 0 && before.clean()) {
      std::cerr << "kanbench audit: cannot run: training failed: " << first_line(training_error)
                << "\n";
      return kCannotRun;
    }
  }
  if (after) {
    std::cout << after->audit.to_text() << after->trace.to_text();
    if (after->trace.summary.steps > 0 && !rehearsal) { // meta has no time worth showing
      std::printf("timing: traced step %.4f s, untraced step %.4f s (the traced steps include the "
                  "first step's warm-up and grid update)\n",
                  after->traced_step_seconds, after->untraced_step_seconds);
    }
  }
  if (!training_error.empty())
    std::cout << "training failed: " << training_error << "\n";

  const auto findings =
      all_findings(graph ? &*graph : nullptr, &before, after.get(), training_error);
  const int code = findings.empty() ? kClean : kFindings;
  std::cout << "audit: "
            << (code == kClean ? "clean" : std::to_string(findings.size()) + " finding(s)")
            << " on " << device << "\n";

  if (!a.json.empty()) {
    kan::diagnostics::AuditRecord record;
    record.device = device.str();
    record.config = {a.checkpoint,
                     model->kind(),
                     model->config(),
                     data_device.str(),
                     a.data_dtype.empty() ? "model" : a.data_dtype,
                     a.samples,
                     kan::to_string(a.opt),
                     a.static_only ? 0 : a.trace_steps,
                     a.seed,
                     rehearsal.has_value()};
    record.findings = findings;
    record.exit_code = code;
    record.static_audit = before;
    if (after)
      record.after_training = *after;
    record.graph_check = graph;
    kan::io::write_file_atomically(a.json, kan::diagnostics::to_json(record).dump(2) + "\n");
  }
  return code;
}

} // namespace

void add_audit_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AuditArgs>();
  auto* cmd = app.add_subcommand(
      "audit", "Audit where a model's tensors live and where its operations run on a device; "
               "exit 0 = clean, 1 = findings, 2 = could not run");
  cmd->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or meta: a GPU run rehearsed without a GPU")
      ->capture_default_str();
  auto* checkpoint = cmd->add_option("--model,--checkpoint", args->checkpoint,
                                     "The model to audit: a kanbench checkpoint (a KAN's or an "
                                     "MLP's), a pykan saveckpt prefix, or a TorchScript archive "
                                     "(with --trust-torchscript and --inputs)");
  add_trust_torchscript_flag(*cmd, args->trust_torchscript);
  cmd->add_option("--inputs", args->inputs,
                  "The input width of a TorchScript --model (its archive records none)")
      ->check(integer_at_least(1));
  auto* pykan = cmd->add_option("--pykan", args->pykan,
                                "Or a pykan checkpoint (the prefix given to pykan's saveckpt)")
                    ->excludes(checkpoint);
  cmd->add_option("--mult-arity", args->mult_arity,
                  "Arity of the multiplication nodes (with --width): one, or one per node");
  cmd->add_option("--width", args->width,
                  "Or build a model of these widths, e.g. 2,5,1 or 2,[2,1],1 (2 addition and 1 "
                  "multiplication node)")
      ->excludes(checkpoint)
      ->excludes(pykan);
  cmd->add_option("--grid", args->grid, "Grid intervals G (with --width)")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--k", args->k, "Spline order k (with --width)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Model dtype (with --width)")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of model and data")
      ->check(unsigned_64())
      ->capture_default_str();
  add_enum_option(cmd, "--opt", args->opt, {kan::Optimizer::kLBFGS, kan::Optimizer::kAdam},
                  "Optimiser of the traced steps");
  cmd->add_option("--trace-steps", args->trace_steps,
                  "Training steps traced operation by operation (as many again run untraced "
                  "for the timing comparison); 0 = static audit only")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_flag("--static", args->static_only,
                "Run nothing: read a TorchScript model's graphs (factories without a device, "
                "copies to the host, host synchronisations, tensor attributes .to() does not "
                "move) and audit where the tensors are; no training steps");
  cmd->add_option("--samples", args->samples, "Training samples of the audit dataset")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--data-device", args->data_device,
                  "Put the dataset here instead (as a loader that yields CPU tensors would)");
  cmd->add_option("--data-dtype", args->data_dtype, "Give the dataset this dtype instead")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->add_option("--json", args->json, "Also write the findings and summary as JSON");
  cmd->callback([args, &exit_code] { exit_code = run_audit(*args); });
}

} // namespace kanbench
