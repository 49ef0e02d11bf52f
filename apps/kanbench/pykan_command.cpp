// `kanbench import-pykan PREFIX --out DIR` and `kanbench export-pykan CHECKPOINT PREFIX`: pykan
// 0.2.8 checkpoints (what saveckpt(prefix) writes) to kanbench checkpoints and back.
#include "commands.h"

#include "kan/io/atomic_file.h"
#include "kan/serialize/checkpoint.h"
#include "kan/serialize/pykan.h"
#include "kan/train/pipeline.h"

#include <filesystem>
#include <iostream>
#include <memory>

namespace kanbench {
namespace {

void print_model(const kan::KAN& model) {
  const auto& o = model->options();
  int64_t parameters = 0;
  for (const auto& p : model->parameters())
    parameters += p.numel();
  model->pretty_print(std::cout);
  std::cout << "\n  width " << kan::width_text(kan::pykan_width(o)) << ", grid " << o.grid()
            << ", k " << o.k() << ", grid_range [" << o.grid_range()[0] << ", " << o.grid_range()[1]
            << "], base_fun " << kan::to_string(o.base_fun()) << ", "
            << kan::to_string(model->dtype()) << ", " << parameters << " parameters\n";
}

struct ImportArgs {
  std::string prefix;
  std::string out = "kanbench-out/pykan-import";
};

int import_pykan(const ImportArgs& a) {
  kan::io::check_output_folder(a.out, "--out");
  const auto path = (std::filesystem::path(a.out) / "model.pt").string();
  kan::io::check_output_file(path, "--out");
  const auto model = kan::load_pykan(a.prefix);
  print_model(model);
  kan::save_checkpoint(model, path);
  std::cout << "pykan checkpoint " << a.prefix << " -> " << path << "\n";
  return 0;
}

struct ExportArgs {
  std::string checkpoint;
  std::string prefix;
};

int export_pykan(const ExportArgs& a) {
  const auto model = kan::load_checkpoint(a.checkpoint);
  kan::io::check_output_file(a.prefix + "_config.yml", "PREFIX");
  kan::save_pykan(model, a.prefix);
  print_model(model);
  std::cout << a.checkpoint << " -> " << a.prefix << "_config.yml, " << a.prefix << "_state, "
            << a.prefix << "_cache_data; in Python: model = KAN.loadckpt('" << a.prefix << "')";
  // pykan builds the model in torch's default dtype and load_state_dict converts into it.
  if (model->dtype() == torch::kFloat64)
    std::cout << " after torch.set_default_dtype(torch.float64), or pykan rounds it to float32";
  std::cout << "\n";
  return 0;
}

} // namespace

void add_import_pykan_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "import-pykan", "Convert a pykan 0.2.8 checkpoint (the prefix given to saveckpt) into a "
                      "kanbench checkpoint, DIR/model.pt, and print the model");
  cmd->add_option("PREFIX", args->prefix, "pykan's saveckpt prefix (PREFIX_config.yml, ...)")
      ->required();
  cmd->add_option("--out", args->out, "Output folder for model.pt")->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = import_pykan(*args); });
}

void add_export_pykan_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export-pykan", "Write a kanbench checkpoint as a pykan 0.2.8 checkpoint that pykan's "
                      "KAN.loadckpt(PREFIX) loads");
  cmd->add_option("CHECKPOINT", args->checkpoint, "A kanbench model.pt")->required();
  cmd->add_option("PREFIX", args->prefix,
                  "Writes PREFIX_config.yml, PREFIX_state and PREFIX_cache_data")
      ->required();
  cmd->callback([args, &exit_code] { exit_code = export_pykan(*args); });
}

} // namespace kanbench
