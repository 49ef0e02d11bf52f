#pragma once
// A full disk, simulated: RLIMIT_FSIZE makes every write past the limit fail with EFBIG (once
// SIGXFSZ is ignored), which is what a writer sees when the disk fills up, without needing a
// small file system to mount.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace kan::test {

/// Runs `body` in a child process whose files cannot grow past `limit_bytes`; returns the child's
/// exit code (0 when body returned true). Only for code that starts no threads (no LibTorch).
template <typename Body> int with_file_size_limit(rlim_t limit_bytes, Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit r{limit_bytes, limit_bytes};
    ::setrlimit(RLIMIT_FSIZE, &r);
    ::_exit(body() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// A /bin/sh prefix that runs the command after it as if the disk were full past `kib` KiB
/// (dash counts ulimit -f in 512-byte blocks).
inline std::string full_disk_after_kib(int kib) {
  return "trap '' XFSZ; ulimit -f " + std::to_string(2 * kib) + "; ";
}

} // namespace kan::test
