#include "record/emulate/stepper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ptkit/status.h"
#include "record/emulate/step_events.h"
#include "record/session.h"

namespace ptkit::emulate {
namespace {

constexpr size_t kMaxInsn = 15;

struct Thread {
  uint32_t pid = 0;
  uint32_t tid = 0;         // the kernel's id now (ptrace, memory reads)
  uint32_t stream = 0;      // the id its trace stream has (the tid it started with; see exec)
  uint64_t pending_ip = 0;  // the instruction the current step executes
  bool started = false;     // its stream has begun (first stop seen)
  bool signal_to_handler = false;  // a caught signal was injected: next stop is handler entry
};

// The thread group of `tid`, from /proc (the kernel reports new threads' stops before or after
// the parent's clone event, so a stop may be the first we hear of a thread).
uint32_t TgidOf(uint32_t tid) {
  std::ifstream in(absl::StrCat("/proc/", tid, "/status"));
  std::string key;
  while (in >> key) {
    if (key == "Tgid:") {
      uint32_t tgid = 0;
      in >> tgid;
      return tgid;
    }
    in.ignore(1 << 16, '\n');
  }
  return tid;
}

// Whether process `pid` has a handler for `sig` (SigCgt in /proc/PID/status).
bool Catches(uint32_t pid, int sig) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (in >> key) {
    if (key == "SigCgt:") {
      std::string hex;
      in >> hex;
      uint64_t mask = std::stoull(hex, nullptr, 16);
      return (mask >> (sig - 1)) & 1;
    }
    in.ignore(1 << 16, '\n');
  }
  return false;
}

class Run {
 public:
  Run(const StepperOptions& options, StepSink& sink) : options_(options), sink_(sink) {}
  absl::StatusOr<StepperResult> Go();

 private:
  // The decoded instruction at `ip` in t's process, read through thread t (a process whose
  // leader has exited has no memory of its own any more).
  absl::StatusOr<const InsnInfo*> Info(const Thread& t, uint64_t ip);
  // Forgets the decoded code of process `pid` (its mappings changed) and decodes again what
  // its threads execute next.
  void Invalidate(uint32_t pid);
  // SIGKILL to every traced process (a stopped tracee wakes up to die).
  void KillAll();
  absl::Status Resume(uint32_t tid, int sig);
  absl::Status OnStop(uint32_t tid, int status);
  void OnGone(uint32_t tid, int status);
  absl::Status StartThread(uint32_t tid);
  absl::StatusOr<user_regs_struct> Regs(uint32_t tid);
  absl::StatusOr<uint64_t> Ip(uint32_t tid);
  // The thread will execute the instruction at `ip` next: remember it and decode it now, while
  // the process certainly exists (an exit syscall's step never comes back).
  void Land(Thread& t, uint64_t ip);

  const StepperOptions& options_;
  StepSink& sink_;
  pid_t leader_ = 0;
  std::map<uint32_t, Thread> threads_;
  std::map<uint32_t, std::unordered_map<uint64_t, InsnInfo>> code_;  // pid -> ip -> insn
  std::vector<swpt::Event> events_;
  StepperResult result_;
};

absl::StatusOr<user_regs_struct> Run::Regs(uint32_t tid) {
  user_regs_struct regs;
  if (::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) {
    return ErrnoStatus(absl::StrCat("ptrace(GETREGS) of thread ", tid));
  }
  return regs;
}

absl::StatusOr<uint64_t> Run::Ip(uint32_t tid) {
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(tid));
  return regs.rip;
}

void Run::KillAll() {
  ::kill(leader_, SIGKILL);
  for (const auto& [tid, t] : threads_) {
    if (t.pid != 0) ::kill(static_cast<pid_t>(t.pid), SIGKILL);
  }
}

void Run::Invalidate(uint32_t pid) {
  code_.erase(pid);
  for (auto& [tid, t] : threads_) {
    if (t.pid == pid && t.started) Info(t, t.pending_ip).IgnoreError();
  }
}

absl::StatusOr<const InsnInfo*> Run::Info(const Thread& t, uint64_t ip) {
  const uint32_t pid = t.pid;
  auto& cache = code_[pid];
  auto it = cache.find(ip);
  if (it != cache.end()) return &it->second;
  uint8_t bytes[kMaxInsn];
  // Read up to the end of the page first: the next page may be unmapped.
  size_t first = std::min<size_t>(kMaxInsn, 4096 - (ip & 4095));
  size_t got = 0;
  for (size_t want : {first, kMaxInsn - first}) {
    if (want == 0) break;
    iovec local{bytes + got, want};
    iovec remote{reinterpret_cast<void*>(ip + got), want};
    ssize_t n = ::process_vm_readv(static_cast<pid_t>(t.tid), &local, 1, &remote, 1, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) {
    return ErrnoStatus(
        absl::StrCat("read code of thread ", t.tid, " (process ", pid, ") at 0x", absl::Hex(ip)));
  }
  PTKIT_ASSIGN_OR_RETURN(InsnInfo info, DecodeInsn(std::span<const uint8_t>(bytes, got), ip));
  sink_.OnCode(pid, ip, std::span<const uint8_t>(bytes, info.size));
  return &cache.emplace(ip, info).first->second;
}

void Run::Land(Thread& t, uint64_t ip) {
  t.pending_ip = ip;
  // A failure here is reported when the step completes and the instruction is needed.
  Info(t, ip).IgnoreError();
}

absl::Status Run::Resume(uint32_t tid, int sig) {
  if (options_.max_steps != 0 && result_.steps >= options_.max_steps) {
    result_.step_limit_hit = true;
    KillAll();
    return absl::OkStatus();
  }
  ++result_.steps;
  if (::ptrace(PTRACE_SINGLESTEP, tid, nullptr, reinterpret_cast<void*>(sig)) != 0) {
    if (errno == ESRCH) return absl::OkStatus();  // killed meanwhile; waitpid reports it
    return ErrnoStatus(absl::StrCat("ptrace(SINGLESTEP) of thread ", tid));
  }
  return absl::OkStatus();
}

absl::Status Run::StartThread(uint32_t tid) {
  Thread& t = threads_[tid];
  if (t.pid == 0) t.pid = TgidOf(tid);
  t.tid = t.stream = tid;
  PTKIT_ASSIGN_OR_RETURN(uint64_t ip, Ip(tid));
  Land(t, ip);
  t.started = true;
  ++result_.threads;
  sink_.OnThreadStart(t.pid, t.stream);
  sink_.OnEvent(t.stream, swpt::Event::Enable(t.pending_ip));
  return absl::OkStatus();
}

void Run::OnGone(uint32_t tid, int status) {
  auto it = threads_.find(tid);
  if (it == threads_.end()) return;
  Thread& t = it->second;
  if (t.started) {
    // The step in flight was the exit syscall (or the thread was killed before it retired).
    // The process is gone: its code can only come from the cache, which Land() filled.
    const auto& cache = code_[t.pid];
    auto info = cache.find(t.pending_ip);
    if (info != cache.end() && info->second.cls == InsnClass::kSyscall && WIFEXITED(status)) {
      sink_.OnInstruction(t.stream, t.pending_ip);
      ++result_.instructions;
      sink_.OnEvent(t.stream, swpt::Event::Disable(t.pending_ip, 0, /*suppress_ip=*/true));
    } else {
      sink_.OnEvent(t.stream, swpt::Event::AsyncDisable(t.pending_ip));
    }
    sink_.OnThreadEnd(t.stream);
  }
  if (static_cast<pid_t>(tid) == leader_) {
    result_.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  threads_.erase(it);
}

absl::Status Run::OnStop(uint32_t tid, int status) {
  const int sig = WSTOPSIG(status);
  const int event = status >> 16;
  auto found = threads_.find(tid);
  if (found == threads_.end() || !found->second.started) {
    // A new thread or process: its first stop (SIGSTOP from the auto-attach).
    PTKIT_RETURN_IF_ERROR(StartThread(tid));
    return Resume(tid, 0);
  }
  Thread& t = found->second;
  if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
    unsigned long child = 0;
    ::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child);
    Thread& c = threads_[static_cast<uint32_t>(child)];
    if (c.pid == 0) c.pid = event == PTRACE_EVENT_CLONE ? t.pid : static_cast<uint32_t>(child);
    c.tid = c.stream = static_cast<uint32_t>(child);
    return Resume(tid, 0);  // the parent's syscall step goes on
  }
  if (event == PTRACE_EVENT_EXEC) {
    // execve retired; a new program starts at its entry. When a thread other than the leader
    // execs, the kernel gives it the leader's tid and the old leader vanishes without an exit
    // report (ptrace(2), "execve(2) under ptrace"): end the leader's stream, and keep the
    // exec'ing thread's stream (its trace goes on, as a per-task PT event's would).
    unsigned long former_msg = tid;
    ::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &former_msg);
    const uint32_t former = static_cast<uint32_t>(former_msg);
    if (former != tid) {
      auto exec_thread = threads_.find(former);
      if (exec_thread == threads_.end()) {
        return absl::InternalError(absl::StrCat("exec by unknown thread ", former));
      }
      sink_.OnEvent(t.stream, swpt::Event::AsyncDisable(t.pending_ip));
      sink_.OnThreadEnd(t.stream);
      Thread moved = exec_thread->second;
      threads_.erase(exec_thread);
      moved.tid = tid;
      threads_[tid] = moved;
    }
    Thread& e = threads_.at(tid);
    code_.erase(e.pid);
    PTKIT_ASSIGN_OR_RETURN(uint64_t entry, Ip(tid));
    sink_.OnInstruction(e.stream, e.pending_ip);
    ++result_.instructions;
    sink_.OnEvent(e.stream, swpt::Event::Disable(e.pending_ip, 0, /*suppress_ip=*/true));
    sink_.OnEvent(e.stream, swpt::Event::Enable(entry));
    Land(e, entry);
    return Resume(tid, 0);
  }
  if (event != 0) return Resume(tid, 0);

  siginfo_t si{};
  ::ptrace(PTRACE_GETSIGINFO, tid, nullptr, &si);
  // Single-step traps are kernel-made (TRAP_TRACE, TRAP_BRKPT after a syscall, the
  // handler-entry notification); an int3 in the workload is SI_KERNEL and is its own signal.
  const bool step_trap = sig == SIGTRAP && si.si_code > 0 && si.si_code != SI_KERNEL;
  if (!step_trap) {
    // A real signal: deliver it. If the process catches it, the next stop is at the handler.
    if (sig != SIGSTOP && Catches(t.pid, sig)) t.signal_to_handler = true;
    return Resume(tid, sig);
  }
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(tid));
  const uint64_t ip = regs.rip;
  if (t.signal_to_handler) {
    // The kernel stopped at the handler's first instruction; the one at pending_ip did not
    // retire (an asynchronous transfer, through the untraced kernel).
    t.signal_to_handler = false;
    sink_.OnEvent(t.stream, swpt::Event::AsyncDisable(t.pending_ip));
    sink_.OnEvent(t.stream, swpt::Event::Enable(ip));
    Land(t, ip);
    return Resume(tid, 0);
  }
  PTKIT_ASSIGN_OR_RETURN(const InsnInfo* info, Info(t, t.pending_ip));
  if (ip == t.pending_ip && (info->rep || info->cls == InsnClass::kOther)) {
    // One more iteration of a rep string instruction (it retires once, at the end).
    return Resume(tid, 0);
  }
  sink_.OnInstruction(t.stream, t.pending_ip);
  ++result_.instructions;
  events_.clear();
  AppendStepEvents(t.pending_ip, *info, ip, events_);
  for (const swpt::Event& e : events_) sink_.OnEvent(t.stream, e);
  if (info->cls == InsnClass::kSyscall) {
    // Code may have been mapped, unmapped or changed: decode afresh from now on.
    switch (regs.orig_rax) {
      case SYS_mmap:
      case SYS_munmap:
      case SYS_mprotect:
      case SYS_mremap:
      case SYS_remap_file_pages:
        Invalidate(t.pid);
        break;
      default:
        break;
    }
  }
  Land(t, ip);
  return Resume(tid, 0);
}

absl::StatusOr<StepperResult> Run::Go() {
  if (options_.argv.empty()) return absl::InvalidArgumentError("no program to run");
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  absl::Time start = absl::Now();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) {
    ::close(err_pipe[0]);
    std::vector<char*> args;
    for (const std::string& a : options_.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    (void)::raise(SIGSTOP);
    ::execvp(args[0], args.data());
    int e = errno;
    if (::write(err_pipe[1], &e, sizeof(e)) < 0) _exit(126);
    _exit(127);
  }
  ::close(err_pipe[1]);
  leader_ = pid;
  int status = 0;
  auto kill_and_reap = [&](const absl::Status& s) {
    KillAll();
    while (::waitpid(-1, &status, __WALL) > 0) {
    }
    ::close(err_pipe[0]);
    return s;
  };
  if (::waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) {
    return kill_and_reap(absl::InternalError("the workload did not stop before exec"));
  }
  constexpr long kOptions = PTRACE_O_EXITKILL | PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK |
                            PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC;
  if (::ptrace(PTRACE_SETOPTIONS, pid, nullptr, reinterpret_cast<void*>(kOptions)) != 0) {
    return kill_and_reap(ErrnoStatus("ptrace(SETOPTIONS) of the workload"));
  }
  if (options_.before_exec) {
    if (absl::Status s = options_.before_exec(pid); !s.ok()) return kill_and_reap(s);
  }
  ::ptrace(PTRACE_CONT, pid, nullptr, nullptr);
  if (::waitpid(pid, &status, 0) != pid) return kill_and_reap(ErrnoStatus("waitpid"));
  if (!WIFSTOPPED(status) || (status >> 16) != PTRACE_EVENT_EXEC) {
    int e = 0;
    bool exec_failed = ::read(err_pipe[0], &e, sizeof(e)) == sizeof(e);
    kill_and_reap(absl::OkStatus()).IgnoreError();
    if (exec_failed) {
      absl::Status not_found = absl::NotFoundError(
          absl::StrCat(options_.argv[0], ": cannot execute: ", std::strerror(e)));
      // The shell's "command not found" exit code, for ptrecord.
      not_found.SetPayload(record::kExitCodePayload, absl::Cord("127"));
      return not_found;
    }
    return absl::InternalError("the workload did not reach execve");
  }
  ::close(err_pipe[0]);
  threads_[pid].pid = pid;
  leader_ = pid;
  if (absl::Status s = StartThread(pid); !s.ok()) return kill_and_reap(s);
  if (absl::Status s = Resume(pid, 0); !s.ok()) return kill_and_reap(s);

  while (!threads_.empty()) {
    pid_t tid = ::waitpid(-1, &status, __WALL);
    if (tid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) break;
      return kill_and_reap(ErrnoStatus("waitpid"));
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      OnGone(static_cast<uint32_t>(tid), status);
      continue;
    }
    if (absl::Status s = OnStop(static_cast<uint32_t>(tid), status); !s.ok()) {
      return kill_and_reap(s);
    }
  }
  result_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result_;
}

}  // namespace

absl::StatusOr<StepperResult> RunStepped(const StepperOptions& options, StepSink& sink) {
  Run run(options, sink);
  return run.Go();
}

}  // namespace ptkit::emulate
