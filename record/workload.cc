#include "record/workload.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<Workload> Workload::Start(std::vector<std::string> argv) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0) return ErrnoStatus("pipe2 for the workload");
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close(go[0]);
    close(go[1]);
    return absl::ErrnoToStatus(e, "pipe2 for the workload");
  }
  // Everything the child needs is prepared before fork: after it only async-signal-safe
  // calls are allowed (the parent may be multi-threaded).
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(go[0]);
    close(go[1]);
    close(err[0]);
    close(err[1]);
    return absl::ErrnoToStatus(e, "fork the workload");
  }
  if (pid == 0) {
    close(go[1]);
    close(err[0]);
    // The recorder blocks SIGINT/SIGTERM/SIGCHLD/SIGUSR2 around its loop; the workload
    // must start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    char c;
    ssize_t n;
    do {
      n = read(go[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) _exit(127);  // the parent gave up
    execvp(args[0], args.data());
    const int e = errno;
    (void)!write(err[1], &e, sizeof(e));
    _exit(127);
  }
  close(go[0]);
  close(err[1]);
  Workload w;
  w.pid_ = pid;
  w.go_fd_ = go[1];
  w.err_fd_ = err[0];
  w.name_ = argv[0];
  return w;
}

Workload::Workload(Workload&& other) noexcept { *this = std::move(other); }

Workload& Workload::operator=(Workload&& other) noexcept {
  if (this != &other) {
    pid_ = std::exchange(other.pid_, -1);
    go_fd_ = std::exchange(other.go_fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    name_ = std::move(other.name_);
  }
  return *this;
}

Workload::~Workload() {
  if (go_fd_ >= 0) close(go_fd_);
  if (err_fd_ >= 0) close(err_fd_);
  if (pid_ > 0 && !status_) {
    kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

absl::Status Workload::Go() {
  const char c = 1;
  ssize_t n;
  do {
    n = write(go_fd_, &c, 1);
  } while (n < 0 && errno == EINTR);
  close(go_fd_);
  go_fd_ = -1;
  if (n != 1) return ErrnoStatus(Cat("start ", name_));
  int e = 0;
  do {
    n = read(err_fd_, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  close(err_fd_);
  err_fd_ = -1;
  if (n == 0) return absl::OkStatus();  // CLOEXEC closed the pipe: exec succeeded
  Wait();
  if (n != sizeof(e)) return absl::InternalError(Cat("start ", name_, ": short errno read"));
  if (e == ENOENT) return absl::NotFoundError(Cat("program not found: ", name_));
  return absl::ErrnoToStatus(e, Cat("execvp ", name_));
}

std::optional<int> Workload::TryReap() {
  if (status_ || pid_ <= 0) return status_;
  int st;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = st;
  return status_;
}

int Workload::Wait() {
  if (status_) return *status_;
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  status_ = st;
  return st;
}

int Workload::ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace ptkit::record
