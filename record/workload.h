// Workload: the `-- cmd args...` child. Forked stopped at a pipe so the parent can open its
// perf events (pid = child, enable_on_exec) before it execs; exec failures come back to the
// parent through a CLOEXEC pipe.
#ifndef PTKIT_RECORD_WORKLOAD_H_
#define PTKIT_RECORD_WORKLOAD_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::record {

class Workload {
 public:
  // Forks; the child waits until Go(). Errors: kInvalidArgument for an empty argv, the errno
  // of pipe2/fork.
  static absl::StatusOr<Workload> Start(std::vector<std::string> argv);

  Workload() = default;
  Workload(Workload&& other) noexcept;
  Workload& operator=(Workload&& other) noexcept;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  // Kills (SIGKILL) and reaps a child that was never reaped.
  ~Workload();

  pid_t pid() const { return pid_; }

  // Lets the child exec (execvp: PATH lookup) and waits until it has either exec'd or
  // failed. Errors: kNotFound "program not found: NAME" (ENOENT), kPermissionDenied
  // (EACCES), other exec errnos; the child is reaped in that case.
  absl::Status Go();

  // Non-blocking: the exit status once the child has exited (waitpid WNOHANG), else nullopt.
  std::optional<int> TryReap();
  // Blocks until the child exits.
  int Wait();
  // The shell-style exit code of a wait status: the exit code, or 128 + signal number.
  static int ExitCode(int wait_status);

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1;   // parent's end: closing/writing lets the child exec
  int err_fd_ = -1;  // parent's end: the child's exec errno, or EOF on success
  std::optional<int> status_;
  std::string name_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_WORKLOAD_H_
