#pragma once
// Zip archives as NumPy's savez (stored entries) and savez_compressed (deflate) write them,
// zip64 included, read with zlib and without LibTorch. Every size and offset in the archive is
// checked against the file before it is used; an entry's bytes are checked against its CRC-32.

#include "detail/byte_source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kan::detail {

/// The central directory of a zip archive, and its entries' bytes.
class ZipReader {
public:
  /// One file of the archive.
  struct Entry {
    std::string name;
    uint16_t method = 0; ///< 0 stored, 8 deflate
    uint16_t flags = 0;
    uint32_t crc32 = 0;
    uint64_t compressed_size = 0;
    uint64_t size = 0;          ///< uncompressed
    uint64_t header_offset = 0; ///< of its local header
  };

  /// Reads the central directory; a file that is not a zip archive is an error naming it.
  explicit ZipReader(std::string path);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  /// Whether `path` starts as a zip archive does ("PK\3\4", or "PK\5\6" when empty).
  static bool looks_like_zip(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }
  /// The entry called `name`; nullptr when there is none.
  const Entry* find(const std::string& name) const;
  /// The entry's uncompressed bytes, read on demand; the reader must outlive the source.
  std::unique_ptr<ByteSource> open(const Entry& entry) const;

  /// The archive's file, shared with the sources open() returns.
  class File;

private:
  std::string path_;
  std::shared_ptr<File> file_;
  std::vector<Entry> entries_;
};

} // namespace kan::detail
