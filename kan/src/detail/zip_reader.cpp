#include "detail/zip_reader.h"

#include "kan/io/text.h"

#include <c10/util/Exception.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace kan::detail {
namespace {

constexpr uint64_t kMaxCentralDirectory = uint64_t{64} << 20;
constexpr uint64_t kMaxComment = 0xFFFF;
constexpr size_t kEndRecord = 22;   // end of central directory record, without its comment
constexpr size_t kEntryRecord = 46; // central directory entry, without name, extra, comment
constexpr size_t kLocalRecord = 30; // local file header, without name and extra
// Deflate cannot compress better than about 1032:1, so an entry that claims more than this many
// bytes per compressed byte is corrupt (or a decompression bomb): refused before any allocation.
constexpr uint64_t kMaxDeflateRatio = 1100;

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes; i-- > 0;)
    value = (value << 8) | p[i];
  return value;
}

} // namespace

// The archive's file, read at offsets (pread): shared by the reader and the entries it opened.
class ZipReader::File {
public:
  explicit File(const std::string& path) : path_(path) {
    std::error_code ec;
    TORCH_CHECK(!std::filesystem::is_directory(path, ec), "cannot read '", path,
                "': it is a folder");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(fd_ >= 0, "cannot read '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || st.st_size < 0) {
      ::close(fd_);
      TORCH_CHECK(false, "cannot read '", path, "': ", std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Exactly n bytes at `offset`, which the caller checked lie inside the file.
  void read(uint64_t offset, void* out, size_t n) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      TORCH_CHECK(got > 0, "cannot read '", path_, "' at byte ", offset, ": ",
                  got == 0 ? "it ends early (was it truncated while being read?)"
                           : std::strerror(errno));
      p += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }

private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

namespace {

// An entry's uncompressed bytes: stored ones copied, deflated ones inflated by zlib a buffer at a
// time; the CRC-32 and the size are checked when the last byte has been read.
class EntrySource final : public ByteSource {
public:
  EntrySource(std::shared_ptr<const ZipReader::File> file, const ZipReader::Entry& entry,
              uint64_t data_offset, std::string name)
      : file_(std::move(file)), entry_(entry), offset_(data_offset), name_(std::move(name)) {
    if (entry_.method == 8) {
      TORCH_CHECK(inflateInit2(&stream_, -MAX_WBITS) == Z_OK, name_,
                  ": cannot start zlib: out of memory");
      inflating_ = true;
      input_.resize(1 << 16);
    }
  }
  ~EntrySource() override {
    if (inflating_)
      inflateEnd(&stream_);
  }
  EntrySource(const EntrySource&) = delete;
  EntrySource& operator=(const EntrySource&) = delete;

  uint64_t size() const override { return entry_.size; }
  const std::string& name() const override { return name_; }

  size_t read(char* out, size_t n) override {
    n = static_cast<size_t>(std::min<uint64_t>({n, entry_.size - produced_, uint64_t{1} << 30}));
    if (n == 0)
      return 0;
    if (entry_.method == 0) {
      file_->read(offset_ + produced_, out, n);
    } else {
      stream_.next_out = reinterpret_cast<Bytef*>(out);
      stream_.avail_out = static_cast<uInt>(n);
      while (stream_.avail_out > 0) {
        TORCH_CHECK(!ended_, name_, ": corrupt: its compressed data ends after ",
                    produced_ + (n - stream_.avail_out), " of the ", entry_.size,
                    " bytes its header promises");
        if (stream_.avail_in == 0) {
          const uint64_t left = entry_.compressed_size - consumed_;
          TORCH_CHECK(left > 0, name_, ": corrupt: its compressed data ends early");
          const auto chunk = static_cast<size_t>(std::min<uint64_t>(left, input_.size()));
          file_->read(offset_ + consumed_, input_.data(), chunk);
          consumed_ += chunk;
          stream_.next_in = input_.data();
          stream_.avail_in = static_cast<uInt>(chunk);
        }
        const int status = inflate(&stream_, Z_NO_FLUSH);
        TORCH_CHECK(status == Z_OK || status == Z_STREAM_END, name_,
                    ": corrupt compressed data (zlib: ", stream_.msg ? stream_.msg : zError(status),
                    ")");
        ended_ = status == Z_STREAM_END;
      }
    }
    crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(out), static_cast<uInt>(n));
    produced_ += n;
    if (produced_ == entry_.size)
      check_end();
    return n;
  }

private:
  void check_end() {
    if (entry_.method == 8 && !ended_) {
      // The stream must end here: one more call may only consume its final block's end.
      Bytef extra = 0;
      stream_.next_out = &extra;
      stream_.avail_out = 1;
      for (;;) {
        if (stream_.avail_in == 0 && consumed_ < entry_.compressed_size) {
          const auto chunk =
              static_cast<size_t>(std::min<uint64_t>(entry_.compressed_size - consumed_, 1 << 16));
          file_->read(offset_ + consumed_, input_.data(), chunk);
          consumed_ += chunk;
          stream_.next_in = input_.data();
          stream_.avail_in = static_cast<uInt>(chunk);
        }
        const int status = inflate(&stream_, Z_NO_FLUSH);
        TORCH_CHECK(stream_.avail_out == 1 &&
                        (status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR),
                    name_, ": corrupt: its compressed data holds more than the ", entry_.size,
                    " bytes its header says");
        if (status == Z_STREAM_END)
          break;
        TORCH_CHECK(status == Z_OK && (stream_.avail_in > 0 || consumed_ < entry_.compressed_size),
                    name_, ": corrupt: its compressed data ends early");
      }
      ended_ = true;
    }
    TORCH_CHECK(crc_ == entry_.crc32, name_, ": corrupt: CRC-32 ", crc_, " of its bytes, not ",
                entry_.crc32, " as the archive says");
  }

  std::shared_ptr<const ZipReader::File> file_;
  ZipReader::Entry entry_;
  uint64_t offset_;
  std::string name_;
  z_stream stream_{};
  bool inflating_ = false, ended_ = false;
  std::vector<Bytef> input_;
  uint64_t consumed_ = 0, produced_ = 0;
  uLong crc_ = crc32(0, nullptr, 0);
};

// The refusal of a file that is not a zip archive this reader can read, naming what is wrong.
struct ZipCheck {
  const std::string& path;
  void operator()(bool ok, const std::string& what) const {
    TORCH_CHECK(ok, "'", path, "': not a zip archive kanbench can read (", what, ")");
  }
};

struct CentralDirectory {
  uint64_t count = 0, size = 0, offset = 0;
};

// The central directory, as the end of central directory record (the last "PK\5\6" within its
// comment's reach) or, for zip64, the zip64 end record gives it, checked to lie in the file.
CentralDirectory find_central_directory(const ZipReader::File& file, const ZipCheck& fail_unless) {
  const uint64_t size = file.size();
  fail_unless(size >= kEndRecord, "too short");
  const uint64_t tail_size = std::min<uint64_t>(size, kEndRecord + kMaxComment);
  std::vector<unsigned char> tail(tail_size);
  file.read(size - tail_size, tail.data(), tail_size);
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail_size - kEndRecord); i >= 0; --i)
    if (std::memcmp(&tail[i], "PK\5\6", 4) == 0) {
      end = i;
      break;
    }
  fail_unless(end >= 0, "no end of central directory record");
  const unsigned char* e = &tail[end];
  CentralDirectory d{le(e + 10, 2), le(e + 12, 4), le(e + 16, 4)};
  const uint64_t end_offset = size - tail_size + static_cast<uint64_t>(end);
  if (d.count == 0xFFFF || d.size == 0xFFFFFFFF || d.offset == 0xFFFFFFFF) {
    // Zip64: a locator just before the record points at the zip64 end record.
    fail_unless(end_offset >= 20, "no zip64 locator");
    unsigned char locator[20];
    file.read(end_offset - 20, locator, 20);
    fail_unless(std::memcmp(locator, "PK\6\7", 4) == 0, "no zip64 locator");
    const uint64_t record_offset = le(locator + 8, 8);
    fail_unless(record_offset <= end_offset && end_offset - record_offset >= 56,
                "a zip64 record outside the file");
    unsigned char record[56];
    file.read(record_offset, record, 56);
    fail_unless(std::memcmp(record, "PK\6\6", 4) == 0, "no zip64 end record");
    d = {le(record + 32, 8), le(record + 40, 8), le(record + 48, 8)};
  }
  fail_unless(d.offset <= size && d.size <= size - d.offset && d.size <= kMaxCentralDirectory,
              "a central directory of " + std::to_string(d.size) + " bytes at byte " +
                  std::to_string(d.offset) + " of " + std::to_string(size));
  fail_unless(d.count <= d.size / kEntryRecord, std::to_string(d.count) +
                                                    " entries in a central directory of " +
                                                    std::to_string(d.size) + " bytes");
  return d;
}

// The zip64 extra field holds, in this order, the fields whose 32-bit value is 0xFFFFFFFF.
void read_zip64_fields(const unsigned char* extra, size_t extra_size, ZipReader::Entry& entry,
                       const std::string& which, const ZipCheck& fail_unless) {
  for (size_t x = 0; x + 4 <= extra_size;) {
    const uint64_t id = le(extra + x, 2), length = le(extra + x + 2, 2);
    fail_unless(x + 4 + length <= extra_size, "a corrupt extra field in " + which);
    if (id == 1) {
      size_t y = x + 4;
      for (uint64_t* field : {&entry.size, &entry.compressed_size, &entry.header_offset}) {
        if (*field != 0xFFFFFFFF)
          continue;
        fail_unless(y + 8 <= x + 4 + length, "a short zip64 field in " + which);
        *field = le(extra + y, 8);
        y += 8;
      }
    }
    x += 4 + length;
  }
}

// The central directory's entry at byte `at`, and the length of its record.
std::pair<ZipReader::Entry, size_t> read_entry(const std::vector<unsigned char>& directory,
                                               size_t at, const std::string& which,
                                               const ZipCheck& fail_unless) {
  fail_unless(directory.size() - at >= kEntryRecord &&
                  std::memcmp(&directory[at], "PK\1\2", 4) == 0,
              "a corrupt " + which);
  const unsigned char* r = &directory[at];
  ZipReader::Entry entry;
  entry.flags = static_cast<uint16_t>(le(r + 8, 2));
  entry.method = static_cast<uint16_t>(le(r + 10, 2));
  entry.crc32 = static_cast<uint32_t>(le(r + 16, 4));
  entry.compressed_size = le(r + 20, 4);
  entry.size = le(r + 24, 4);
  const size_t name_size = le(r + 28, 2), extra_size = le(r + 30, 2), comment_size = le(r + 32, 2);
  entry.header_offset = le(r + 42, 4);
  fail_unless(directory.size() - at - kEntryRecord >= name_size + extra_size + comment_size,
              "a corrupt " + which);
  entry.name.assign(reinterpret_cast<const char*>(r + kEntryRecord), name_size);
  read_zip64_fields(r + kEntryRecord + name_size, extra_size, entry, which, fail_unless);
  return {std::move(entry), kEntryRecord + name_size + extra_size + comment_size};
}

} // namespace

ZipReader::ZipReader(std::string path) : path_(std::move(path)) {
  file_ = std::make_shared<File>(path_);
  const ZipCheck fail_unless{path_};
  const auto d = find_central_directory(*file_, fail_unless);
  std::vector<unsigned char> directory(d.size);
  file_->read(d.offset, directory.data(), d.size);
  size_t at = 0;
  for (uint64_t i = 0; i < d.count; ++i) {
    const std::string which = "entry " + std::to_string(i + 1) + " of the central directory";
    auto [entry, length] = read_entry(directory, at, which, fail_unless);
    entries_.push_back(std::move(entry));
    at += length;
  }
}

ZipReader::~ZipReader() = default;

bool ZipReader::looks_like_zip(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char magic[4] = {};
  const bool zip = ::read(fd, magic, 4) == 4 &&
                   (std::memcmp(magic, "PK\3\4", 4) == 0 || std::memcmp(magic, "PK\5\6", 4) == 0);
  ::close(fd);
  return zip;
}

const ZipReader::Entry* ZipReader::find(const std::string& name) const {
  const auto found = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& e) { return e.name == name; });
  return found == entries_.end() ? nullptr : &*found;
}

std::unique_ptr<ByteSource> ZipReader::open(const Entry& entry) const {
  const std::string name = path_ + ": " + io::elided(entry.name);
  const uint64_t size = file_->size();
  TORCH_CHECK((entry.flags & 1) == 0, name, ": encrypted, which is not read");
  TORCH_CHECK(entry.method == 0 || entry.method == 8, name, ": compression method ", entry.method,
              ", which is not read (stored and deflate are: np.savez, np.savez_compressed)");
  TORCH_CHECK(entry.header_offset <= size && size - entry.header_offset >= kLocalRecord, name,
              ": corrupt: its local header lies outside the file");
  unsigned char local[kLocalRecord];
  file_->read(entry.header_offset, local, kLocalRecord);
  TORCH_CHECK(std::memcmp(local, "PK\3\4", 4) == 0, name, ": corrupt: no local header at byte ",
              entry.header_offset);
  const uint64_t data_offset =
      entry.header_offset + kLocalRecord + le(local + 26, 2) + le(local + 28, 2);
  TORCH_CHECK(data_offset <= size && entry.compressed_size <= size - data_offset, name,
              ": corrupt: its ", entry.compressed_size, " compressed bytes at byte ", data_offset,
              " lie outside the file of ", size);
  TORCH_CHECK(entry.method == 8 ? entry.size / kMaxDeflateRatio <= entry.compressed_size
                                : entry.size == entry.compressed_size,
              name, ": corrupt: ", entry.size, " bytes from ", entry.compressed_size,
              " compressed ones");
  return std::make_unique<EntrySource>(file_, entry, data_offset, name);
}

} // namespace kan::detail
