#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace conv1d::e2e {

ServerProcess::ServerProcess(std::vector<std::string> args) {
  static int counter = 0;
  log_path_ = absl::StrCat(::testing::TempDir(), "conv1d_server_", getpid(), "_",
                           counter++, ".log");
  // $CONV1D_SERVER_BINARY runs a copy of the binary elsewhere (a packed
  // build on a GPU host); by default the one this build made.
  const char* binary = std::getenv("CONV1D_SERVER_BINARY");
  std::vector<std::string> argv_strings = {
      binary != nullptr && *binary != '\0' ? binary : CONV1D_SERVER_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  spawn_error_ = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  unlink(log_path_.c_str());
}

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ServerProcess::Wait(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    }
    if (absl::Now() > give_up) return -1;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

int ServerProcess::Port() const {
  std::smatch m;
  const std::string log = Log();
  static const std::regex kPort(R"(grpc=\S+ \(port (\d+)\))");
  return std::regex_search(log, m, kPort) ? std::stoi(m[1]) : 0;
}

int ServerProcess::WaitForPort(absl::Duration timeout) const {
  const absl::Time give_up = absl::Now() + timeout;
  int port = 0;
  while ((port = Port()) == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return port;
}

}  // namespace conv1d::e2e
