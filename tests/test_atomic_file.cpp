// kan::io: atomic writes that lose nothing (full disk, a symlink at the destination, a writer
// killed earlier) and output paths checked before any work.
#include "fault_injection.h"
#include "reports_test_util.h"

#include "kan/io/atomic_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

namespace {

namespace fs = std::filesystem;
using AtomicFile = kan::results::test::ReportsScratchTest;

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}));
}

TEST_F(AtomicFile, ReplacesAndLeavesNoTemporary) {
  kan::io::write_file_atomically(path("a.txt"), "first");
  kan::io::write_file_atomically(path("a.txt"), "second");
  EXPECT_EQ(read("a.txt"), "second");
  EXPECT_EQ(entries(dir_), 1u);
  const auto perms = fs::status(path("a.txt")).permissions();
  EXPECT_NE(perms & fs::perms::owner_read, fs::perms::none);
  EXPECT_NE(perms & fs::perms::others_read, fs::perms::none); // not mkstemp's 0600
  try {
    kan::io::write_file_atomically(path("no/such/folder/a.txt"), "x");
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/folder/a.txt"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFile, FullDiskLeavesThePreviousFileAndNoTemporary) {
  write("a.txt", "the good old content");
  const int code = kan::test::with_file_size_limit(4096, [&] {
    try {
      kan::io::write_file_atomically(path("a.txt"), std::string(1 << 20, 'x'));
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      // Names the file, the system's reason and that the old file is intact.
      return what.find("a.txt") != std::string::npos &&
             what.find("File too large") != std::string::npos &&
             what.find("left as it was") != std::string::npos;
    }
    return false;
  });
  EXPECT_EQ(code, 0);
  EXPECT_EQ(read("a.txt"), "the good old content");
  EXPECT_EQ(entries(dir_), 1u);
}

TEST_F(AtomicFile, ReplacesASymlinkInsteadOfItsTarget) {
  write("target.txt", "precious");
  fs::create_symlink(path("target.txt"), path("link.txt"));
  kan::io::write_file_atomically(path("link.txt"), "new");
  EXPECT_EQ(read("target.txt"), "precious");
  EXPECT_FALSE(fs::is_symlink(path("link.txt")));
  EXPECT_EQ(read("link.txt"), "new");
}

TEST_F(AtomicFile, UncommittedWritesLeaveTheDestinationAlone) {
  write("a.txt", "old");
  {
    kan::io::AtomicFile file(path("a.txt"));
    file.write("half of it");
    file.finish();
  } // destroyed without commit, as when a later step fails
  EXPECT_EQ(read("a.txt"), "old");
  EXPECT_EQ(entries(dir_), 1u);
}

TEST_F(AtomicFile, RemovesTemporariesOfWritersThatNoLongerRun) {
  const pid_t dead = ::fork();
  if (dead == 0)
    ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = ".a.txt.tmp." + std::to_string(dead) + ".Ab12Cd";
  const std::string running = ".a.txt.tmp.1.Ab12Cd"; // pid 1 runs
  const std::string legacy = ".a.txt.tmp.Xy34Zw";    // before process ids, an hour old
  const std::string other = ".b.txt.tmp." + std::to_string(dead) + ".Ab12Cd";
  for (const auto& name : {stale, running, legacy, other})
    write(name, "leftover");
  fs::last_write_time(path(legacy), fs::file_time_type::clock::now() - std::chrono::hours(2));
  kan::io::write_file_atomically(path("a.txt"), "new");
  EXPECT_FALSE(fs::exists(path(stale)));
  EXPECT_FALSE(fs::exists(path(legacy)));
  EXPECT_TRUE(fs::exists(path(running)));
  EXPECT_TRUE(fs::exists(path(other)));
}

TEST_F(AtomicFile, OutputPathsAreCheckedBeforeAnyWork) {
  write("file", "x");
  auto message = [](auto check) {
    try {
      check();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  kan::io::check_output_folder(path("new/folder"), "--out"); // created
  EXPECT_TRUE(fs::is_directory(path("new/folder")));
  EXPECT_EQ(entries(path("new/folder")), 0u); // the probe file is gone
  auto m = message([&] { kan::io::check_output_folder(path("file/sub"), "--out"); });
  EXPECT_NE(m.find("--out"), std::string::npos) << m;
  EXPECT_NE(m.find("file/sub"), std::string::npos) << m;
  m = message([&] { kan::io::check_output_folder("/proc/kanbench-out", "--out"); });
  EXPECT_NE(m.find("cannot"), std::string::npos) << m;
  m = message([&] { kan::io::check_output_file(dir_.string(), "--trace"); });
  EXPECT_NE(m.find("--trace"), std::string::npos) << m;
  EXPECT_NE(m.find("is a folder"), std::string::npos) << m;
  m = message([&] { kan::io::check_output_file(path("file/trace.json"), "--trace"); });
  EXPECT_NE(m.find("--trace"), std::string::npos) << m;
  kan::io::check_output_file(path("trace.json"), "--trace");
  EXPECT_FALSE(fs::exists(path("trace.json")));
}

} // namespace
