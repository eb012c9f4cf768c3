#include "record/crash.h"

#include <signal.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/perf_event.h"
#include "record/text_util.h"

namespace ptkit::record {

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

bool KillsByDefault(int sig) {
  switch (sig) {
    case SIGCHLD:
    case SIGCONT:
    case SIGURG:
    case SIGWINCH:
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
      return false;
    default:
      return sig > 0 && sig < 65;
  }
}

bool StopsByDefault(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

absl::StatusOr<uint64_t> ParseStatusSignalMask(std::string_view status, std::string_view key) {
  for (std::string_view line : Split(status, '\n')) {
    if (!line.starts_with(key)) continue;
    std::string_view value = line.substr(key.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    uint64_t mask = 0;
    if (!ParseUnsigned(value, &mask, 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", std::string(key), " value '", std::string(value), "'"));
    }
    return mask;
  }
  return absl::NotFoundError(absl::StrCat("no ", std::string(key), " line"));
}

namespace {

// Whether bit `sig` is set in the mask `key` of /proc/PID/status; false when unknown.
bool InStatusMask(uint32_t pid, std::string_view key, int sig) {
  absl::StatusOr<std::string> status = ReadSystemFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return false;
  absl::StatusOr<uint64_t> mask = ParseStatusSignalMask(*status, key);
  return mask.ok() && ((*mask >> (sig - 1)) & 1);
}

}  // namespace

bool SignalIgnored(uint32_t pid, int sig) { return InStatusMask(pid, "SigIgn:", sig); }
bool SignalCaught(uint32_t pid, int sig) { return InStatusMask(pid, "SigCgt:", sig); }

nlohmann::json CrashJson(const CrashInfo& crash) {
  return {{"signal", SignalName(crash.signal)},
          {"pid", crash.pid},
          {"tid", crash.tid},
          {"ip", crash.ip}};
}

absl::StatusOr<std::unique_ptr<CrashWatcher>> CrashWatcher::Start(pid_t pid) {
  std::unique_ptr<CrashWatcher> w(new CrashWatcher(pid));
  // ptrace requests must come from the tracer: the thread that seized.
  w->thread_ = std::thread([raw = w.get()] { raw->Run(); });
  int seize_errno = 0;
  {
    absl::MutexLock lock(&w->mu_);
    w->mu_.Await(absl::Condition(&w->started_));
    seize_errno = w->seize_errno_;
  }
  if (seize_errno != 0) {
    w->thread_.join();
    return ErrnoStatus(seize_errno, "ptrace(PTRACE_SEIZE) of the workload (pid ", pid,
                       ") for --snapshot-on-crash");
  }
  return w;
}

CrashWatcher::~CrashWatcher() {
  if (!thread_.joinable()) return;
  if (!exited()) kill(pid_, SIGKILL);
  Finish();
}

std::optional<CrashInfo> CrashWatcher::crash() const {
  absl::MutexLock lock(&mu_);
  return crash_;
}

void CrashWatcher::Finish() {
  {
    absl::MutexLock lock(&mu_);
    finishing_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CrashWatcher::Run() {
  const bool seized =
      ptrace(PTRACE_SEIZE, pid_, nullptr, reinterpret_cast<void*>(PTRACE_O_TRACECLONE)) == 0;
  {
    absl::MutexLock lock(&mu_);
    if (!seized) seize_errno_ = errno != 0 ? errno : EPERM;
    started_ = true;
    if (!seized) return;
  }
  for (;;) {
    // Look first (WNOWAIT): the workload's own exit is left for its waitpid(pid).
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WSTOPPED | __WALL | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing is left to wait for
    }
    const pid_t who = info.si_pid;
    if (who == pid_ && info.si_code != CLD_TRAPPED && info.si_code != CLD_STOPPED &&
        info.si_code != CLD_CONTINUED) {
      break;  // exited, killed or dumped
    }
    int status = 0;
    if (waitpid(who, &status, __WALL | WNOHANG) <= 0) continue;
    if (WIFSTOPPED(status)) OnStop(who, status);
    // Else a thread other than the leader exited (reaped now, so the leader's exit can be
    // reported once the last one is gone).
  }
  exited_.store(true, std::memory_order_release);
}

void CrashWatcher::OnStop(pid_t tid, int status) {
  const int sig = WSTOPSIG(status);
  const int event = status >> 16;
  if (event == PTRACE_EVENT_STOP) {
    // A seized tracee's group stop (the stopping signal) stays a stop until SIGCONT; the
    // first stop of a new thread (SIGTRAP) and the others go on.
    ptrace(StopsByDefault(sig) ? PTRACE_LISTEN : PTRACE_CONT, tid, nullptr, nullptr);
    return;
  }
  if (event != 0) {  // PTRACE_EVENT_CLONE: the new thread is traced and stops on its own
    ptrace(PTRACE_CONT, tid, nullptr, nullptr);
    return;
  }
  // A signal-delivery stop: the signal is delivered when the thread goes on with it.
  const uint32_t pid = static_cast<uint32_t>(pid_);
  if (KillsByDefault(sig) && !SignalIgnored(pid, sig) && !SignalCaught(pid, sig)) {
    absl::MutexLock lock(&mu_);
    if (!finishing_ && !crash_) {
      user_regs_struct regs{};
      const uint64_t ip = ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 ? regs.rip : 0;
      crash_ = CrashInfo{.pid = pid, .tid = static_cast<uint32_t>(tid), .signal = sig, .ip = ip};
      // Held here until Finish(): the recorder snapshots meanwhile.
      mu_.Await(absl::Condition(&finishing_));
    }
  }
  ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(sig)));
}

}  // namespace ptkit::record
