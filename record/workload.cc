#include "record/workload.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "ptkit/errno_text.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/perf_event.h"
#include "record/text_util.h"
#include "record/trigger.h"

namespace ptkit::record {

std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  for (std::string_view dir : Split(path ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : std::string(dir), "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status ExecFailure(const std::string& name, int err) {
  absl::Status s;
  if (err == ENOENT && name.find('/') != std::string::npos && ::access(name.c_str(), F_OK) == 0) {
    // The file is there: what it needs to run is not.
    s = absl::NotFoundError(absl::StrCat(
        name,
        ": cannot execute: its interpreter (#! line, or the ELF program's loader) does "
        "not exist"));
  } else if (err == ENOENT) {
    s = absl::NotFoundError(absl::StrCat("program not found: ", name));
  } else {
    const std::string text = absl::StrCat(name, ": cannot execute: ", ErrnoText(err));
    s = err == EACCES || err == EPERM ? absl::PermissionDeniedError(text)
                                      : absl::FailedPreconditionError(text);
  }
  s.SetPayload(kExitCodePayload, absl::Cord(err == ENOENT ? "127" : "126"));
  return s;
}

absl::StatusOr<ParkedChild> ForkParked(const std::vector<std::string>& argv, bool die_with_parent) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2 for the workload");
  ScopedFd go_read(go[0]), go_write(go[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2 for the workload");
  ScopedFd err_read(err[0]), err_write(err[1]);
  // After fork only async-signal-safe calls are allowed (the parent may be multi-threaded).
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoStatus(errno, "fork the workload");
  if (pid == 0) {
    if (die_with_parent) {
      (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
    }
    close(go[1]);  // so that the parent's end closing is EOF here
    close(err[0]);
    // The recorder blocks SIGINT/SIGTERM/SIGCHLD/SIGUSR2 around its loop; the workload
    // must start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
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
  return ParkedChild{.pid = pid, .go = std::move(go_write), .exec_error = std::move(err_read)};
}

absl::Status LetGo(ScopedFd& go, const std::string& name) {
  const char c = 1;
  ssize_t n;
  do {
    n = write(go.get(), &c, 1);
  } while (n < 0 && errno == EINTR);
  const int write_errno = errno;
  go.reset();
  if (n != 1) return ErrnoStatus(write_errno, "start ", name);
  return absl::OkStatus();
}

absl::StatusOr<int> ReadExecErrno(const ScopedFd& exec_error, const std::string& name) {
  int e = 0;
  ssize_t n;
  do {
    n = read(exec_error.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(errno, "read the exec result of ", name);
  if (n == 0) return 0;  // CLOEXEC closed the pipe: exec succeeded
  if (n != sizeof(e))
    return absl::InternalError(absl::StrCat("start ", name, ": short errno read"));
  return e;
}

absl::StatusOr<Workload> Workload::Start(std::vector<std::string> argv, bool die_with_parent) {
  PTKIT_ASSIGN_OR_RETURN(ParkedChild child, ForkParked(argv, die_with_parent));
  Workload w;
  w.pid_ = child.pid;
  w.go_ = std::move(child.go);
  w.exec_error_ = std::move(child.exec_error);
  w.name_ = argv[0];
  return w;
}

Workload::Workload(Workload&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      go_(std::move(other.go_)),
      exec_error_(std::move(other.exec_error_)),
      status_(std::exchange(other.status_, std::nullopt)),
      name_(std::move(other.name_)) {}

Workload& Workload::operator=(Workload&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, -1);
    go_ = std::move(other.go_);
    exec_error_ = std::move(other.exec_error_);
    status_ = std::exchange(other.status_, std::nullopt);
    name_ = std::move(other.name_);
  }
  return *this;
}

Workload::~Workload() { KillAndReap(); }

std::vector<pid_t> Descendants(pid_t root, const std::string& proc_root) {
  std::multimap<pid_t, pid_t> children;  // by parent
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(proc_root, ec)) {
    uint32_t pid = 0;
    if (!ParseUnsigned(e.path().filename().string(), &pid)) continue;
    absl::StatusOr<std::string> stat = ReadSystemFile(absl::StrCat(proc_root, "/", pid, "/stat"));
    absl::StatusOr<uint32_t> parent =
        stat.ok() ? ParseStatParent(*stat) : absl::StatusOr<uint32_t>(stat.status());
    if (parent.ok()) children.emplace(static_cast<pid_t>(*parent), static_cast<pid_t>(pid));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> next = {root};
  while (!next.empty() && out.size() < 100000) {
    const pid_t p = next.back();
    next.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      next.push_back(it->second);
    }
  }
  return out;
}

namespace {
constexpr char kCommandEnded[] = "ptkit/command-ended";
}  // namespace

absl::Status AfterCommandEnded(absl::Status status) {
  if (!status.ok()) status.SetPayload(kCommandEnded, absl::Cord("1"));
  return status;
}

bool CommandHadEnded(const absl::Status& status) {
  return status.GetPayload(kCommandEnded).has_value();
}

void Workload::KillAndReap() {
  go_.reset();
  exec_error_.reset();
  if (pid_ > 0 && !status_) {
    // The processes it started go with it (sweep 31c F2: a recording that failed killed the
    // command's process only, "the command with it (killed)", and its children ran on; under
    // qemu they were the qemus of the command's forked processes). Stopped until no new one
    // shows, then killed.
    kill(pid_, SIGSTOP);
    std::set<pid_t> stopped;
    for (int round = 0; round < 8; ++round) {
      bool more = false;
      for (pid_t d : Descendants(pid_)) {
        if (!stopped.insert(d).second) continue;
        kill(d, SIGSTOP);
        more = true;
      }
      if (!more) break;
    }
    for (pid_t d : stopped) kill(d, SIGKILL);
    kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

absl::Status Workload::Go() {
  PTKIT_RETURN_IF_ERROR(LetGo(go_, name_));
  absl::StatusOr<int> e = ReadExecErrno(exec_error_, name_);
  exec_error_.reset();
  if (e.ok() && *e == 0) return absl::OkStatus();
  Wait();
  if (!e.ok()) return e.status();
  return ExecFailure(name_, *e);
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
