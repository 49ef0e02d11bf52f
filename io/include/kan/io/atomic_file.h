#pragma once
/// Files written so that nothing is lost: through a temporary file in the destination's folder,
/// synced, then renamed over the destination. A reader never sees a half-written file, a kill or a
/// full disk leaves the previous file as it was, and a destination that is a symbolic link is
/// replaced by the new file instead of having its target overwritten. No LibTorch here: kan,
/// reports and the command line all write through this one place.

#include <cstddef>
#include <string>

namespace kan::io {

/// One file being written atomically.
///
/// Example:
///   kan::io::AtomicFile file("out/model.pt");
///   file.write(bytes.data(), bytes.size());
///   file.commit(); // without it, the destructor removes the temporary and out/model.pt stays
///
/// Temporaries are named `.NAME.tmp.PID.XXXXXX`; creating an AtomicFile for NAME removes the
/// temporaries of NAME left by writers that no longer run (killed, or out of disk). Every failure
/// throws std::runtime_error naming the destination, the step and the system's reason.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends to the temporary file.
  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  /// Syncs and closes the temporary: after it, only the rename is left, which needs no space.
  /// Separate from commit() so that several files can be finished before any is replaced.
  void finish();
  /// finish(), then renames the temporary over the destination and syncs the folder.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_; }

private:
  [[noreturn]] void fail(const std::string& step, int error);

  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `content` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& content);

/// Removes the temporaries of `file_name` in `folder` whose writer process no longer exists (and
/// those of earlier kanbench versions, which had no process id, once an hour old). Returns how
/// many it removed; never throws.
int remove_stale_temporaries(const std::string& folder, const std::string& file_name);

/// Checks, before any work, that `folder` exists or can be created and that a file can be created
/// in it. Throws std::runtime_error naming `option` (e.g. "--out"), the folder and the reason.
void check_output_folder(const std::string& folder, const std::string& option);

/// Checks, before any work, that `path` can be written: not a folder, and its folder passes
/// check_output_folder. Throws std::runtime_error naming `option` and the path.
void check_output_file(const std::string& path, const std::string& option);

} // namespace kan::io
