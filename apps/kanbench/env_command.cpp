// `kanbench env`: the environment report, on the terminal and optionally as JSON.
#include "commands.h"

#include "kan/diagnostics/environment.h"
#include "kan/io/atomic_file.h"
#include "kan/results/results_io.h"

#include <iostream>
#include <memory>

namespace kanbench {

void add_env_command(CLI::App& app, int& exit_code) {
  auto json_path = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "env", "Print the environment: LibTorch and CUDA versions, whether CUDA is usable (and "
             "why not), GPUs, CPU, threads, NVTX and CUPTI");
  cmd->add_option("--json", *json_path, "Also write the report as JSON to this file");
  cmd->callback([json_path, &exit_code] {
    if (!json_path->empty())
      kan::io::check_output_file(*json_path, "--json");
    const auto environment = kan::diagnostics::collect_environment();
    std::cout << kan::diagnostics::to_text(environment);
    if (!json_path->empty())
      kan::io::write_file_atomically(*json_path, kan::results::to_json(environment).dump(2) + "\n");
    exit_code = 0;
  });
}

} // namespace kanbench
