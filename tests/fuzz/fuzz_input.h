#pragma once
// What every fuzz target does with libFuzzer's bytes: writes them to a file of its own (kanbench's
// readers take paths, as its commands hand them on) and reads that file. A refusal, an exception,
// is what most inputs should get; a crash, a sanitizer report, a timeout or an allocation past
// libFuzzer's -malloc_limit_mb is a bug.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace kan::fuzz {

/// A folder of this process's own, removed at exit. The path is never destroyed: a static
/// object's destructor, registered after the atexit handler, would run before it and leave the
/// handler a freed string (a campaign's ASan once caught exactly that at a child's exit).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path* const dir = [] {
    auto* path = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                           ("kanbench-fuzz-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*path);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return path;
  }();
  return *dir;
}

/// Writes the input to the file `name` of the scratch folder and returns its path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const auto path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

/// Runs `read`, for which a `Refusal` is the expected answer to a bad file: c10::Error for kan's
/// readers, std::runtime_error (which the JSON readers' errors derive from) for the others. Any
/// other exception (a std::out_of_range, a std::bad_alloc) escapes, and libFuzzer reports it.
template <typename Refusal = std::runtime_error, typename Read> void read_or_refuse(Read read) {
  try {
    read();
  } catch (const Refusal&) {
  }
}

} // namespace kan::fuzz
