#pragma once
// The kanbench subcommands. Each add_*_command registers one subcommand on the app; its
// callback stores the process exit code in `exit_code`.

#include <CLI/CLI.hpp>

#include <string>

namespace kanbench {

/// `kanbench fit`: trains a KAN on a reference function and writes fit.json and a checkpoint.
void add_fit_command(CLI::App& app, int& exit_code);

/// `kanbench compare OLD.json NEW.json`: baseline comparison, a CI gate with --fail-on-regression.
void add_compare_command(CLI::App& app, int& exit_code);

/// `kanbench report RESULTS.json`: the self-contained HTML report.
void add_report_command(CLI::App& app, int& exit_code);

/// The first line of an exception's message (LibTorch appends a backtrace).
std::string first_line(const std::string& message);

/// Writes `text` to `path` through a temporary file and a rename, so a reader never sees a
/// half-written file.
void write_file_atomically(const std::string& path, const std::string& text);

} // namespace kanbench
