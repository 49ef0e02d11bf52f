// kanbench: the command line. Errors end here as one line on stderr and a non-zero exit:
// 2 for a bad command line, 1 for anything that failed while running.
#include "commands.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace kanbench {

std::string first_line(const std::string& message) {
  return message.substr(0, message.find('\n'));
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      throw std::runtime_error("cannot write '" + temporary + "'");
  }
  std::filesystem::rename(temporary, path);
}

} // namespace kanbench

int main(int argc, char** argv) {
  CLI::App app{"kanbench: Kolmogorov-Arnold Networks on LibTorch - training, device audit, "
               "CPU vs GPU benchmarks"};
  app.require_subcommand(1);
  int exit_code = 0;
  kanbench::add_fit_command(app, exit_code);
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
    std::cerr << "kanbench: error: " << kanbench::first_line(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kanbench: error: " << kanbench::first_line(e.what()) << "\n";
    return 1;
  }
  return exit_code;
}
