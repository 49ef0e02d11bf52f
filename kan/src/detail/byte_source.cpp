#include "detail/byte_source.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kan::detail {
namespace {

class FileSource final : public ByteSource {
public:
  explicit FileSource(const std::string& path) : name_(path) {
    std::error_code ec;
    TORCH_CHECK(!std::filesystem::is_directory(path, ec), "cannot read '", path,
                "': it is a folder");
    file_ = std::fopen(path.c_str(), "rb");
    TORCH_CHECK(file_ != nullptr, "cannot read '", path, "': ", std::strerror(errno));
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) {
      std::fclose(file_);
      TORCH_CHECK(false, "cannot read '", path, "': ", ec.message());
    }
    size_ = size;
  }
  ~FileSource() override { std::fclose(file_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  size_t read(char* out, size_t n) override {
    const size_t got = std::fread(out, 1, n, file_);
    TORCH_CHECK(got == n || !std::ferror(file_), "cannot read '", name_,
                "': ", std::strerror(errno));
    return got;
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

private:
  std::string name_;
  std::FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

} // namespace

std::unique_ptr<ByteSource> open_file_source(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

void read_exactly(ByteSource& source, char* out, size_t n, const char* what) {
  size_t done = 0;
  while (done < n) {
    const size_t got = source.read(out + done, n - done);
    TORCH_CHECK(got > 0, source.name(), ": truncated: it ends within ", what, " (", done, " of ", n,
                " bytes read)");
    done += got;
  }
}

} // namespace kan::detail
