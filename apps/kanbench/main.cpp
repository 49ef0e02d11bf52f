// kanbench: the command line. Errors end here as a message on stderr (one line, unless it
// lists misplaced tensors) and a non-zero exit: 2 for a bad command line, 1 for anything that
// failed while running (`audit` has its own codes).
#include "commands.h"

#include <c10/util/Exception.h>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"kanbench: Kolmogorov-Arnold Networks on LibTorch - training, device audit, "
               "CPU vs GPU benchmarks"};
  app.require_subcommand(1);
  int exit_code = 0;
  kanbench::add_run_command(app, exit_code);
  kanbench::add_fit_command(app, exit_code);
  kanbench::add_env_command(app, exit_code);
  kanbench::add_audit_command(app, exit_code);
  kanbench::add_compare_command(app, exit_code);
  kanbench::add_report_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0)
      return app.exit(e); // --help
    std::cerr << "kanbench: " << e.what() << " (see kanbench --help)\n";
    return 2;
  } catch (const c10::Error& e) {
    // The message without LibTorch's backtrace; a device-mismatch explanation lists the
    // misplaced tensors on the lines after the first.
    std::cerr << "kanbench: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kanbench: error: " << kanbench::first_line(e.what()) << "\n";
    return 1;
  }
  return exit_code;
}
