#include "kan/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace kan::io {
namespace {

namespace fs = std::filesystem;

std::string folder_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

std::string temporary_prefix(const std::string& file_name) {
  return "." + file_name + ".tmp.";
}

// Durability of the rename itself; a file system that cannot sync a folder still renamed.
void sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

} // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::string folder = folder_of(path_);
  const std::string name = fs::path(path_).filename().string();
  if (name.empty())
    throw std::runtime_error(path_ + ": not a file name");
  remove_stale_temporaries(folder, name);
  std::string pattern =
      (fs::path(folder) / (temporary_prefix(name) + std::to_string(::getpid()) + ".XXXXXX"))
          .string();
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": cannot create a temporary file in " + folder + ": " +
                             std::strerror(errno));
  temporary_ = pattern;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_ && !temporary_.empty())
    ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& step, int error) {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  temporary_.clear();
  throw std::runtime_error(path_ + ": " + step + ": " + std::strerror(error) + " (" + path_ +
                           " was left as it was)");
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": write after the file was finished or failed");
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int error = errno; // before the message's allocations can touch it
      fail("cannot write " + temporary_, error);
    }
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::finish() {
  if (fd_ < 0) {
    if (temporary_.empty())
      throw std::runtime_error(path_ + ": finish after a failure");
    return; // finished already
  }
  if (::fsync(fd_) != 0) {
    const int error = errno;
    fail("cannot sync " + temporary_, error);
  }
  // mkstemp creates 0600; an output is as readable as any other file the user writes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    fail("cannot close " + temporary_, error);
  }
}

void AtomicFile::commit() {
  finish();
  // rename replaces a symbolic link at the destination, never the file it points to.
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    const std::string temporary = temporary_;
    ::unlink(temporary.c_str());
    temporary_.clear();
    throw std::runtime_error(path_ + ": cannot rename " + temporary + " to " + path_ + ": " +
                             std::strerror(error) + " (" + path_ + " was left as it was)");
  }
  committed_ = true;
  sync_folder(folder_of(path_));
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

int remove_stale_temporaries(const std::string& folder, const std::string& file_name) {
  const std::string prefix = temporary_prefix(file_name);
  std::error_code ec;
  fs::directory_iterator it(folder.empty() ? "." : folder, ec), end;
  int removed = 0;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    const std::string suffix = name.substr(prefix.size()); // "PID.XXXXXX"; older versions: "XXXXXX"
    const auto dot = suffix.find('.');
    bool stale = false;
    if (dot != std::string::npos && suffix.size() - dot - 1 == 6 &&
        all_digits(suffix.substr(0, dot))) {
      const long pid = std::stol(suffix.substr(0, dot));
      stale = pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    } else if (dot == std::string::npos && suffix.size() == 6) {
      std::error_code time_ec;
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(it->path(), time_ec);
      stale = !time_ec && age > std::chrono::hours(1);
    }
    if (stale && fs::is_regular_file(it->symlink_status()) && ::unlink(it->path().c_str()) == 0)
      ++removed;
  }
  return removed;
}

void check_output_folder(const std::string& folder, const std::string& option) {
  const std::string where = folder.empty() ? std::string(".") : folder;
  std::error_code ec;
  fs::create_directories(where, ec);
  if (ec || !fs::is_directory(where))
    throw std::runtime_error(option + " " + where + ": cannot create the folder: " +
                             (ec ? ec.message() : std::string("a file of that name exists")));
  std::string probe = (fs::path(where) / ".kanbench-probe.XXXXXX").string();
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(option + " " + where +
                             ": cannot write into the folder: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_file(const std::string& path, const std::string& option) {
  if (path.empty())
    throw std::runtime_error(option + " is empty; give a file name");
  if (fs::is_directory(path))
    throw std::runtime_error(option + " " + path + " is a folder; give a file name");
  check_output_folder(folder_of(path), option);
}

} // namespace kan::io
