// `kanbench export-torchscript MODEL OUT.pt`: a kanbench KAN or MLP (a checkpoint or a pykan
// prefix) as a TorchScript module that plain PyTorch loads with torch.jit.load, runs and trains.
#include "commands.h"

#include "kan/io/atomic_file.h"
#include "kan/nn/options.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/torchscript.h"

#include <iostream>
#include <memory>

namespace kanbench {
namespace {

struct ExportArgs {
  std::string model;
  std::string out;
};

int export_torchscript(const ExportArgs& a) {
  kan::io::check_output_file(a.out, "OUT");
  TORCH_CHECK(kan::model_file_kind(a.model) != kan::ModelFileKind::kTorchScript, "'", a.model,
              "' is a TorchScript archive already: PyTorch loads it with torch.jit.load as it is");
  const auto model = kan::open_model(a.model);
  const auto exported = kan::export_torchscript(*model);
  kan::save_torchscript(*exported, a.out);
  std::cout << a.model << " (" << kan::to_string(model->kind()) << ", "
            << kan::to_string(model->dtype()) << ", " << model->inputs() << " -> "
            << model->outputs() << ", " << model->parameter_count() << " parameters) -> " << a.out
            << "; in Python: model = torch.jit.load('" << a.out << "')\n";
  return 0;
}

} // namespace

void add_export_torchscript_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export-torchscript",
      "Write a kanbench KAN or MLP (a checkpoint, or a pykan saveckpt prefix) as a TorchScript "
      "module: PyTorch runs and trains it with torch.jit.load alone, and its outputs equal "
      "kanbench's (docs/torchscript.md)");
  cmd->add_option("MODEL", args->model, "A kanbench checkpoint or a pykan prefix")->required();
  cmd->add_option("OUT", args->out, "The TorchScript archive to write")->required();
  cmd->callback([args, &exit_code] { exit_code = export_torchscript(*args); });
}

} // namespace kanbench
