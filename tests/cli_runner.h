#pragma once
// Runs the kanbench executable as a user or a CI job would (for the CLI tests).

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kan::test {

struct CliRun {
  int exit_code;
  std::string output; // stdout and stderr together
};

/// `kanbench ARGS` with stderr folded into stdout; the exit code as the shell sees it.
/// `shell_prefix` runs before it in the same shell (e.g. a resource limit, or a scheduler's
/// variables). The variables that make kanbench take a shard are cleared first: tests run under a
/// Slurm array or a sharded CI job must not shard the commands they run.
inline CliRun run_kanbench(const std::string& args, const std::string& shell_prefix = "") {
  const std::string command = "unset SLURM_ARRAY_TASK_ID JOB_COMPLETION_INDEX GTEST_SHARD_INDEX; " +
                              shell_prefix + std::string(KANBENCH_EXECUTABLE) + " " + args +
                              " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe)
    throw std::runtime_error("cannot run " + command);
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe))
    output += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

} // namespace kan::test
