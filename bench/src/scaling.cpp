#include "kan/bench/scaling.h"

#include "kan/distributed/data_parallel.h"
#include "kan/results/statistics.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kan::bench {
namespace {

namespace fs = std::filesystem;

// A TCP port on loopback that nothing listens on now (the kernel's choice).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  TORCH_CHECK(fd >= 0, "cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
  close(fd);
  TORCH_CHECK(ok, "cannot find a free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

std::string replace_rank(std::string value, int rank) {
  const std::string key = "{rank}";
  for (auto at = value.find(key); at != std::string::npos; at = value.find(key))
    value.replace(at, key.size(), std::to_string(rank));
  return value;
}

// The environment of one rank: the caller's, with the launch's variables ({rank} replaced) and
// the rendezvous (c10d's env:// variables) over it.
std::vector<std::string> rank_environment(const LocalLaunch& launch, int rank, int port) {
  std::map<std::string, std::string> env;
  for (const auto& [key, value] : launch.environment)
    env[key] = replace_rank(value, rank);
  env["RANK"] = env["LOCAL_RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = std::to_string(launch.world_size);
  env["MASTER_ADDR"] = "127.0.0.1";
  env["MASTER_PORT"] = std::to_string(port);
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0)
      entries.push_back(entry);
  }
  for (const auto& [key, value] : env)
    entries.push_back(key + "=" + value);
  return entries;
}

// Starts one rank with its stdout and stderr in `log`; posix_spawn's error, 0 when it started.
int spawn_rank(const LocalLaunch& launch, int rank, int port, const std::string& log, pid_t& pid) {
  auto entries = rank_environment(launch, rank, port);
  std::vector<char*> envp, argv;
  for (auto& e : entries)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> words = launch.argv;
  for (auto& w : words) {
    w = replace_rank(w, rank);
    argv.push_back(w.data());
  }
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return error;
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Waits for the ranks until all exited, the time limit, or (stop_with_rank0) rank 0's exit; the
// ones still running then are killed. An exited rank's pid becomes 0.
std::vector<RankExit> wait_for_ranks(const LocalLaunch& launch, std::vector<pid_t>& pids) {
  std::vector<RankExit> exits(pids.size());
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  size_t running = pids.size();
  while (running > 0 && elapsed() < launch.limit_seconds &&
         !(launch.stop_with_rank0 && pids[0] == 0)) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        exits[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        pids[r] = 0;
        --running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exits;
}

} // namespace

std::vector<RankExit> launch_local_ranks(const LocalLaunch& launch) {
  TORCH_CHECK(!launch.argv.empty(), "launch_local_ranks needs a command");
  TORCH_CHECK(launch.world_size >= 1, "world_size must be >= 1, got ", launch.world_size);
  const auto logs = fs::temp_directory_path() / ("kanbench-ranks-" + std::to_string(getpid()) +
                                                 "-" + std::to_string(free_port()));
  fs::create_directories(logs);
  const auto log_of = [&](size_t rank) { return logs / (std::to_string(rank) + ".log"); };
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < launch.world_size; ++rank) {
    pid_t pid = 0;
    const int error = spawn_rank(launch, rank, port, log_of(rank).string(), pid);
    if (error != 0) {
      for (pid_t started : pids)
        kill_and_reap(started);
      fs::remove_all(logs);
      TORCH_CHECK(false, "cannot start rank ", rank, " (", launch.argv.front(),
                  "): ", std::strerror(error));
    }
    pids.push_back(pid);
  }

  auto exits = wait_for_ranks(launch, pids);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] > 0) {
      kill_and_reap(pids[r]);
      exits[r].killed = true;
    }
    std::ifstream log(log_of(r));
    std::ostringstream text;
    text << log.rdbuf();
    exits[r].output = text.str();
  }
  fs::remove_all(logs);
  return exits;
}

results::ScalingResult train_data_parallel(const Workload& w, DataParallel& group,
                                           torch::Dtype dtype) {
  results::ScalingResult result;
  result.case_name = w.name;
  result.device = group.device().is_cuda() ? "cuda" : "cpu";
  result.backend = group.backend_name();
  result.ranks = group.world_size();

  const auto model = w.build_model(group.device(), dtype);
  const auto data = w.dataset(group.device(), dtype);
  // Rank 0's time waiting for collectives after every step, to split it by epoch.
  // Counted from the first step: the start's configuration check and broadcast are not steps.
  // FitOptions holds the group by shared_ptr; the caller owns it, so the pointer owns nothing.
  std::vector<double> waited;
  CommunicationStats before;
  auto options = w.fit_options()
                     .data_parallel(std::shared_ptr<DataParallel>(&group, [](DataParallel*) {}))
                     .on_step_begin([&](int64_t step, torch::optim::Optimizer&) {
                       if (step == 0)
                         before = group.stats();
                     })
                     .after_step([&](int64_t, int64_t) {
                       waited.push_back(group.stats().wait_seconds);
                       return false;
                     });
  const auto history = fit(*model, data, options);
  const auto after = group.stats();

  std::vector<double> communication;
  double previous = before.wait_seconds;
  for (size_t e = 0; e < history.epochs.size(); ++e) {
    const auto& epoch = history.epochs[e];
    const double now = waited.at(static_cast<size_t>(epoch.last_step));
    if (static_cast<int64_t>(e) >= w.warmup_epochs) {
      result.epoch_seconds.push_back(epoch.epoch_seconds);
      communication.push_back(now - previous);
    }
    previous = now;
    result.train_loss_per_epoch.push_back(epoch.train_loss);
  }
  if (const auto s = results::summarize(result.epoch_seconds))
    result.median_epoch_seconds = s->median;
  if (const auto s = results::summarize(communication))
    result.communication_seconds = s->median;
  const double steps = static_cast<double>(std::max<size_t>(history.steps.size(), 1));
  result.collectives_per_step = static_cast<double>(after.collectives - before.collectives) / steps;
  result.bytes_per_step = static_cast<double>(after.bytes - before.bytes) / steps;
  return result;
}

} // namespace kan::bench
