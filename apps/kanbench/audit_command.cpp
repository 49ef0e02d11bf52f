// `kanbench audit`: the options of kan::diagnostics::audit_model (kan/diagnostics/model_audit.h)
// on the command line; its reports on stdout, audit.json with --json. Exit 0 = clean, 1 =
// findings, 2 = could not run (the reason on stderr).
#include "commands.h"
#include "option_checks.h"

#include "kan/diagnostics/audit_record.h"
#include "kan/diagnostics/model_audit.h"
#include "kan/io/atomic_file.h"
#include "kan/kan.h"

#include <iostream>
#include <memory>

namespace kanbench {
namespace {

constexpr int kClean = 0, kCannotRun = 2;

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
  int64_t inputs = 0; // a TorchScript model's input width
  // --samples, --seed, --opt, --trace-steps and --static, bound onto the library's request.
  kan::diagnostics::AuditRequest request;
  std::string data_device; // default: --device
  std::string data_dtype;  // default: the model's
  std::string json;
};

// The request the options stand for; anything wrong with them is an error (exit 2).
kan::diagnostics::AuditRequest audit_request(const AuditArgs& a) {
  TORCH_CHECK(a.checkpoint.empty() + a.pykan.empty() + a.width.empty() == 2,
              "give the model as one of --model PATH, --pykan PREFIX or --width 2,5,1");
  TORCH_CHECK(a.inputs == 0 || !a.checkpoint.empty(), "--inputs needs --model (the input width "
                                                      "of a TorchScript model)");
  if (!a.json.empty())
    kan::io::check_output_file(a.json, "--json");
  auto request = a.request;
  request.device = parse_device(a.device, "--device", /*meta_allowed=*/true);
  if (!a.data_device.empty())
    request.data_device = parse_device(a.data_device, "--data-device", true);
  request.model_file = a.checkpoint;
  request.trust_torchscript = a.trust_torchscript;
  request.inputs = a.inputs;
  request.pykan = a.pykan;
  request.built = kan::KANOptions({1, 1})
                      .grid(a.grid)
                      .k(a.k)
                      .seed(a.request.seed)
                      .dtype(kan::dtype_from_string(a.dtype));
  if (!a.width.empty()) {
    set_width(request.built, a.width);
    if (!a.mult_arity.empty())
      set_mult_arity(request.built, a.mult_arity);
  }
  if (!a.data_dtype.empty())
    request.data_dtype = kan::dtype_from_string(a.data_dtype);
  return request;
}

// Anything that escapes the audit means it could not run: exit 2, never 1 ("findings").
int run_audit(const AuditArgs& a) {
  try {
    const auto record = kan::diagnostics::audit_model(
        audit_request(a), [](const std::string& text) { std::cout << text << std::flush; });
    std::cout << "audit: "
              << (record.exit_code == kClean
                      ? "clean"
                      : std::to_string(record.findings.size()) + " finding(s)")
              << " on " << record.device << "\n";
    if (!a.json.empty())
      kan::io::write_file_atomically(a.json, kan::diagnostics::to_json(record).dump(2) + "\n");
    return record.exit_code;
  } catch (const c10::Error& e) {
    std::cerr << "kanbench audit: cannot run: " << first_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kanbench audit: cannot run: " << first_line(e.what()) << "\n";
  }
  return kCannotRun;
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
  cmd->add_option("--seed", args->request.seed, "Seed of model and data")
      ->check(unsigned_64())
      ->capture_default_str();
  add_enum_option(cmd, "--opt", args->request.opt, {kan::Optimizer::kLBFGS, kan::Optimizer::kAdam},
                  "Optimiser of the traced steps");
  cmd->add_option("--trace-steps", args->request.trace_steps,
                  "Training steps traced operation by operation (as many again run untraced "
                  "for the timing comparison); 0 = static audit only")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_flag("--static", args->request.static_only,
                "Run nothing: read a TorchScript model's graphs (factories without a device, "
                "copies to the host, host synchronisations, tensor attributes .to() does not "
                "move) and audit where the tensors are; no training steps");
  cmd->add_option("--samples", args->request.samples, "Training samples of the audit dataset")
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
