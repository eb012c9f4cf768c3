// `ptrecord --snapshot-on-crash`: a snapshot when the workload dies of a signal, taken while
// its threads still exist (before the signal is delivered), labelled with the signal, the
// thread that got it and where it was. The emulation's stepper sees the signal at its own
// ptrace stops; the kernel path watches the workload with a CrashWatcher.
#ifndef PTKIT_RECORD_CRASH_H_
#define PTKIT_RECORD_CRASH_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace ptkit::record {

// "SIGSEGV" (sigabbrev_np), or "signal N" for a number without a name.
std::string SignalName(int sig);

// Whether `sig`'s default action ends the process (Term or Core in signal(7)): every signal
// but SIGCHLD, SIGCONT, SIGURG, SIGWINCH (ignored) and SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU
// (stop).
bool KillsByDefault(int sig);

// Whether `sig` is one of the four stopping signals, SIGSTOP, SIGTSTP, SIGTTIN and SIGTTOU (Stop
// in signal(7)): a seized tracee's PTRACE_EVENT_STOP with one of them is a group-stop
// (ptrace(2), "Group-stop").
bool StopsByDefault(int sig);

// The signal mask `key` ("SigIgn:", "SigCgt:", ...) of a /proc/PID/status text, bit N-1 for
// signal N. Errors: kNotFound without that line, kInvalidArgument when its value is no hex.
absl::StatusOr<uint64_t> ParseStatusSignalMask(std::string_view status, std::string_view key);

// Whether process `pid` ignores `sig` (SigIgn in /proc/PID/status); false when unknown.
bool SignalIgnored(uint32_t pid, int sig);
// Whether process `pid` has a handler for `sig` (SigCgt in /proc/PID/status); false when
// unknown.
bool SignalCaught(uint32_t pid, int sig);

// What --snapshot-on-crash stores (the "crash" member of the end metadata, ptkit-format(5)).
struct CrashInfo {
  uint32_t pid = 0, tid = 0;  // tid: the thread's stream id
  int signal = 0;
  uint64_t ip = 0;  // the instruction it stopped at
};

// The end metadata's "crash" member: {signal (its name, "SIGSEGV"), pid, tid, ip}.
nlohmann::json CrashJson(const CrashInfo& crash);

// --snapshot-on-crash on the kernel path: a thread of its own ptrace-seizes the workload
// (PTRACE_SEIZE with PTRACE_O_TRACECLONE: every thread it starts is traced too, the processes
// it forks are not) and restarts every stop at once, passing signals on, so the workload runs
// as it would (group stops stay stops, PTRACE_LISTEN). At the delivery stop of a signal that
// ends the process (KillsByDefault, neither ignored nor caught), it keeps that thread stopped
// and reports crash(): the recorder takes its last snapshot round then, while the workload
// still exists, and calls Finish(), which delivers the signal.
//
// While it runs, this watcher is the only one that may wait for the workload: waitpid(pid)
// elsewhere would take its ptrace stops. exited() says when waitpid(pid) may reap it (the
// watcher leaves the exit status there and stops waiting).
class CrashWatcher {
 public:
  // Seizes `pid` (a child that has not exec'd yet: Workload::Start's) from a new thread.
  // Errors: ptrace(PTRACE_SEIZE)'s, e.g. kPermissionDenied (another tracer, or no
  // CAP_SYS_PTRACE for a process that is not ours).
  static absl::StatusOr<std::unique_ptr<CrashWatcher>> Start(pid_t pid);
  // Finishes (the workload is killed with SIGKILL first if it still runs).
  ~CrashWatcher();
  CrashWatcher(const CrashWatcher&) = delete;
  CrashWatcher& operator=(const CrashWatcher&) = delete;

  // Once a thread is held at the delivery of its fatal signal: who, what and where.
  std::optional<CrashInfo> crash() const;
  // Whether the workload has exited: its exit status waits for waitpid(pid).
  bool exited() const { return exited_.load(std::memory_order_acquire); }
  // Delivers the held signal, if any, passes every later one on and returns once the
  // workload has exited (reap it then: Workload::Wait()).
  void Finish();

 private:
  explicit CrashWatcher(pid_t pid) : pid_(pid) {}
  void Run();
  // Restarts the ptrace stop `status` of thread `tid`; holds it at a fatal signal (above).
  void OnStop(pid_t tid, int status);

  const pid_t pid_;
  std::thread thread_;
  std::atomic<bool> exited_{false};
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // PTRACE_SEIZE was tried
  int seize_errno_ ABSL_GUARDED_BY(mu_) = 0;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<CrashInfo> crash_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_CRASH_H_
