// Workload: the `-- cmd args...` child. Forked stopped at a pipe so the parent can open its
// perf events (pid = child, enable_on_exec) before it execs; exec failures come back to the
// parent through a CLOEXEC pipe. ForkParked() is the fork/exec both the kernel path (Workload)
// and the emulator's stepper (which ptrace-seizes the parked child) start their workload with.
#ifndef PTKIT_RECORD_WORKLOAD_H_
#define PTKIT_RECORD_WORKLOAD_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::record {

// A forked child that will execvp(argv) (PATH lookup) with an empty signal mask.
struct ParkedChild {
  pid_t pid = -1;
  // The parent's end of the pipe the child waits at before execvp: one byte written lets it
  // exec, EOF makes it exit with 127.
  ScopedFd go;
  ScopedFd exec_error;  // the parent's end: the child's execvp errno, or EOF once it exec'd
};

// `name` as execvp looks it up: with a '/', `name` itself if it is executable; else the first
// executable DIR/name for DIR on PATH (an empty DIR is ".", no PATH is "/usr/bin:/bin"). ""
// when there is none.
std::string FindOnPath(const std::string& name);

// Errors that map to a specific process exit code carry it as a payload under this URL
// (e.g. "127" for program not found).
inline constexpr char kExitCodePayload[] = "ptkit.dev/exit-code";

// The error for a workload `name` whose execve/execvp failed with `err`, with env(1)'s exit
// codes: kNotFound with 127 for ENOENT ("program not found: NAME", or for a file that is there
// "NAME: cannot execute: its interpreter ... does not exist"); else "NAME: cannot execute:
// REASON" with 126 (kPermissionDenied for EACCES and EPERM, kFailedPrecondition otherwise).
absl::Status ExecFailure(const std::string& name, int err);

// Forks the child (nothing is reaped or killed here: the caller owns the pid). Everything the
// child needs is prepared before fork (after it only async-signal-safe calls are made).
// `die_with_parent`: the child gets SIGKILL when the forking thread ends (PR_SET_PDEATHSIG),
// for a child that is only the recorder's means (qemu running the command).
// Errors: kInvalidArgument for an empty argv, the errno of pipe2/fork.
absl::StatusOr<ParkedChild> ForkParked(const std::vector<std::string>& argv,
                                       bool die_with_parent = false);

// Lets the child go on to execvp: writes its byte to `go` and closes it. Errors: the errno of
// write(2) (the child is gone), naming `name`.
absl::Status LetGo(ScopedFd& go, const std::string& name);

// Once the child was let go: blocks until it has exec'd (0) or failed (its execvp errno).
// Errors: kInternal on a short read, the errno of read(2), both naming `name`.
absl::StatusOr<int> ReadExecErrno(const ScopedFd& exec_error, const std::string& name);

// The live descendants of `root` (its children, theirs, ...), by the parents /proc/PID/stat
// gives, read from `proc_root`.
std::vector<pid_t> Descendants(pid_t root, const std::string& proc_root = "/proc");

// A recording's error that came once the command had ended by itself (nothing of it was killed
// for the error: a full disk as the code and the end metadata are written), marked so (a status
// payload) for the message that reports it (CommandHadEnded). Sweep 31c F6: such an error said
// "and the command with it (killed)" of a command that had exited.
absl::Status AfterCommandEnded(absl::Status status);
bool CommandHadEnded(const absl::Status& status);

class Workload {
 public:
  // Forks; the child waits until Go(). Errors: those of ForkParked().
  static absl::StatusOr<Workload> Start(std::vector<std::string> argv,
                                        bool die_with_parent = false);

  Workload(Workload&& other) noexcept;
  // Kills (SIGKILL, with its descendants) and reaps the child this one holds, if not reaped,
  // then takes `other`'s.
  Workload& operator=(Workload&& other) noexcept;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  // Kills (SIGKILL) and reaps a child that was never reaped, and the processes it started
  // that are still its descendants (stopped first, so that none forks away meanwhile).
  ~Workload();

  pid_t pid() const { return pid_; }

  // Lets the child exec (execvp: PATH lookup) and waits until it has either exec'd or
  // failed. Errors: ExecFailure's for the exec's errno; the child is reaped in that case.
  absl::Status Go();

  // Non-blocking: the exit status once the child has exited (waitpid WNOHANG), else nullopt.
  std::optional<int> TryReap();
  // Blocks until the child exits.
  int Wait();
  // The shell-style exit code of a wait status: the exit code, or 128 + signal number.
  static int ExitCode(int wait_status);

 private:
  Workload() = default;
  void KillAndReap();

  pid_t pid_ = -1;
  ScopedFd go_;          // a byte written lets the child exec; EOF makes it exit (127)
  ScopedFd exec_error_;  // the child's exec errno, or EOF on success
  std::optional<int> status_;
  std::string name_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_WORKLOAD_H_
