#pragma once
// Bytes read front to back, from a file or from a zip entry (zip_reader.h): what the .npy reader
// reads from, without LibTorch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kan::detail {

/// A sequence of bytes of known size, read front to back.
class ByteSource {
public:
  virtual ~ByteSource() = default;
  /// Reads up to `n` further bytes into `out`; fewer only at the end (0: at the end).
  virtual size_t read(char* out, size_t n) = 0;
  /// The bytes it holds in all.
  virtual uint64_t size() const = 0;
  /// What messages call it: a path, or "archive.npz: x.npy".
  virtual const std::string& name() const = 0;
};

/// A file's bytes; a missing file or a folder is an error naming the path.
std::unique_ptr<ByteSource> open_file_source(const std::string& path);

/// Reads exactly `n` bytes; fewer is an error naming the source and `what` was read.
void read_exactly(ByteSource& source, char* out, size_t n, const char* what);

} // namespace kan::detail
