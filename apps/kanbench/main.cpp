// kanbench: the command line. One exit-code rule for every subcommand:
//   0  success;
//   1  the thing checked failed (audit findings, failed cases of a run, a regression);
//   2  the command could not do its job (bad input, an unreadable or unwritable file, no GPU
//      where one was required, out of memory).
// Errors end here as a message on stderr (one line, unless it lists misplaced tensors).
#include "commands.h"
#include "option_checks.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <new>

namespace {

constexpr int kCouldNotRun = 2;

bool is_out_of_memory(const std::string& message) {
  return message.find("out of memory") != std::string::npos ||
         message.find("not enough memory") != std::string::npos;
}

int fail(const std::string& message) {
  std::cerr << "kanbench: " << (is_out_of_memory(message) ? "out of memory: " : "error: ")
            << message << "\n";
  return kCouldNotRun;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"kanbench: Kolmogorov-Arnold Networks on LibTorch - training, device audit, "
               "CPU vs GPU benchmarks. Exit codes: 0 success, 1 the thing checked failed "
               "(findings, failed cases, a regression), 2 the command could not do its job"};
  app.require_subcommand(1);
  int exit_code = 0;
  kanbench::add_run_command(app, exit_code);
  kanbench::add_fit_command(app, exit_code);
  kanbench::add_accuracy_command(app, exit_code);
  kanbench::add_merge_command(app, exit_code);
  kanbench::add_functions_command(app, exit_code);
  kanbench::add_scaling_command(app, exit_code);
  kanbench::add_sweep_command(app, exit_code);
  kanbench::add_env_command(app, exit_code);
  kanbench::add_audit_command(app, exit_code);
  kanbench::add_predict_command(app, exit_code);
  kanbench::add_compare_command(app, exit_code);
  kanbench::add_report_command(app, exit_code);
  kanbench::add_import_pykan_command(app, exit_code);
  kanbench::add_export_pykan_command(app, exit_code);
  kanbench::add_export_torchscript_command(app, exit_code);
  std::string names;
  bool known = false;
  for (const auto* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + command->get_name();
    known = known || (argc > 1 && command->check_name(argv[1]));
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "kanbench: unknown command " << kanbench::shown(argv[1]) << "; the commands are "
              << names << " (see kanbench --help)\n";
    return kCouldNotRun;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0)
      return app.exit(e); // --help
    std::cerr << "kanbench: " << e.what() << " (see kanbench --help)\n";
    return kCouldNotRun;
  } catch (const c10::Error& e) {
    // The message without LibTorch's backtrace; a device-mismatch explanation lists the
    // misplaced tensors on the lines after the first.
    return fail(e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return fail("out of memory (an allocation failed)");
  } catch (const std::exception& e) {
    return fail(kanbench::first_line(e.what()));
  }
  return exit_code;
}
