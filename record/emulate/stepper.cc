#include "record/emulate/stepper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ptkit/errno_text.h"
#include "ptkit/numbers.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "record/crash.h"
#include "record/emulate/step_events.h"
#include "record/proc_maps.h"
#include "record/session.h"
#include "record/trigger.h"
#include "record/workload.h"

namespace ptkit::emulate {
namespace {

constexpr size_t kMaxInsn = 15;
// StepperOptions::stop_requested is asked every this many steps.
constexpr uint64_t kStopCheckSteps = 1024;

// waitpid(), again when a signal interrupts it.
pid_t WaitRestarting(pid_t pid, int* status, int flags) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, flags);
  } while (r < 0 && errno == EINTR);
  return r;
}

struct Thread {
  uint32_t pid = 0;
  uint32_t tid = 0;         // the kernel's id now (ptrace, memory reads)
  uint32_t stream = 0;      // the id its trace stream has (the tid it started with; see exec)
  uint64_t mm = 0;          // its address space (key of Run::mms_; 0: not known yet)
  uint64_t pending_ip = 0;  // the instruction the current step executes
  swpt::ExecMode mode = swpt::ExecMode::k64Bit;  // the mode pending_ip runs in (its CS)
  bool started = false;                          // its stream has begun (first stop seen)
  bool signal_to_handler = false;   // a caught signal was injected: next stop is handler entry
  bool waiting_for_parent = false;  // --filter: first stop seen before the clone event
  bool first_stop_is_group_stop = false;  // (then) that stop is a group-stop (Run::Listen)
  bool cloned = false;                    // counted in its Mm's `unstarted` until StartThread
  uint64_t stale_fault_disarm = 0;        // the Mm's `disarms` when it last had a stale fault
  bool tracing = false;                   // its stream is enabled (the last event was an enable)
  bool free = false;       // --filter: running at full speed (PTRACE_SYSCALL), not stepped
  bool unplanted = false;  // --filter: INT3s removed for the map syscall it is in
  std::deque<int> deferred_signals;  // signals that arrived during an injected syscall
  uint64_t resumed_at = 0;           // options.clock when its current step was resumed
  uint64_t stamped = 0;              // the last time its stream was given
  // Its first step after an exec: the kernel's trap at execve's return comes before the
  // entry's instruction ran.
  bool after_exec = false;
};

// A run of pages holding filter regions, with the protection the workload gave them.
struct Span {
  uint64_t start = 0, end = 0;
  int prot = 0;
  bool operator==(const Span&) const = default;
};

// An address space, for --filter: where the regions are and which pages are armed.
struct Mm {
  bool resolved = false;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // filter regions, run-time [start, end)
  std::vector<Span> spans;                            // the executable pages that hold them
  std::vector<Span> armed;     // pages we took PROT_EXEC from (entering them faults)
  std::vector<Span> disarmed;  // the pages the last Disarm() gave PROT_EXEC back to
  uint64_t disarms = 0;        // Disarm() calls so far
  uint64_t gadget = 0;         // a SYSCALL instruction (in the vDSO) for injected mprotect
  // Region bytes overwritten with INT3 (start, original bytes), while its one thread runs at
  // full speed on a region page outside the regions: entering a region, at any byte, traps.
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> planted;
  bool unwritable = false;  // planting failed once: step on region pages
  int threads = 0;
  int unstarted = 0;  // threads cloned into it whose first stop has not come yet
  // The executable mappings no program file backs (StepSink::OnCode), read from /proc when
  // first needed since the code cache was last invalidated.
  std::optional<std::vector<std::pair<uint64_t, uint64_t>>> unfiled;
};

bool InSpans(const std::vector<Span>& spans, uint64_t ip) {
  for (const Span& s : spans) {
    if (ip >= s.start && ip < s.end) return true;
  }
  return false;
}

// Adds to `spans` the executable pieces of the region pages [start, end) of one mapping whose
// /proc protection is `prot`, and to `armed` those of them still armed. The pages we armed
// have lost their 'x' and, once the workload changes a neighbour's protection (ld.so's RELRO
// mprotect), the kernel merges them with the file's read-only mappings into one VMA: a
// mapping's protection says nothing about its armed pieces, which keep the protection they had
// when armed (`was_armed`, the pieces armed before). A piece that shows 'x' again was
// re-protected by the workload and is no longer armed.
void AddSpans(uint64_t start, uint64_t end, int prot, const std::vector<Span>& was_armed,
              std::vector<Span>& spans, std::vector<Span>& armed) {
  uint64_t at = start;
  auto add_unarmed = [&](uint64_t to) {
    if (at < to && (prot & PROT_EXEC)) spans.push_back(Span{at, to, prot});
  };
  std::vector<Span> inside;
  for (const Span& a : was_armed) {
    if (a.end > start && a.start < end) inside.push_back(a);
  }
  std::sort(inside.begin(), inside.end(),
            [](const Span& a, const Span& b) { return a.start < b.start; });
  for (const Span& a : inside) {
    const Span piece{std::max(a.start, start), std::min(a.end, end), a.prot};
    add_unarmed(piece.start);
    if (prot & PROT_EXEC) {
      spans.push_back(Span{piece.start, piece.end, prot});  // re-protected by the workload
    } else {
      spans.push_back(piece);
      armed.push_back(piece);
    }
    at = piece.end;
  }
  add_unarmed(end);
}

// /proc/TID/mem of a traced thread, open for reading and writing (a tracer may write its
// tracee's read-only code through it, as debuggers do).
class MemFile {
 public:
  explicit MemFile(uint32_t tid)
      : fd_(::open(absl::StrCat("/proc/", tid, "/mem").c_str(), O_RDWR | O_CLOEXEC)) {}
  bool Read(uint64_t at, std::span<uint8_t> out) const {
    return fd_.valid() && ::pread(fd_.get(), out.data(), out.size(), static_cast<off_t>(at)) ==
                              static_cast<ssize_t>(out.size());
  }
  bool Write(uint64_t at, std::span<const uint8_t> bytes) const {
    return fd_.valid() && ::pwrite(fd_.get(), bytes.data(), bytes.size(), static_cast<off_t>(at)) ==
                              static_cast<ssize_t>(bytes.size());
  }

 private:
  ScopedFd fd_;
};

// Whether syscall `nr` changes mappings; `ia32`: a number of the i386 table (an INT 0x80 or
// SYSENTER: 32-bit programs, or 64-bit code calling through INT 0x80).
bool IsMapSyscall(uint64_t nr, bool ia32) {
  if (ia32) {
    // arch/x86/entry/syscalls/syscall_32.tbl: mmap, munmap, mprotect, mremap, mmap2,
    // remap_file_pages.
    return nr == 90 || nr == 91 || nr == 125 || nr == 163 || nr == 192 || nr == 257;
  }
  return nr == SYS_mmap || nr == SYS_munmap || nr == SYS_mprotect || nr == SYS_mremap ||
         nr == SYS_remap_file_pages;
}

// At a syscall stop: whether the kernel took the call through its i386 entry (AUDIT_ARCH_I386,
// linux/audit.h), so that orig_rax is a number of the i386 table.
bool Ia32SyscallStop(uint32_t tid, const user_regs_struct& regs) {
  __ptrace_syscall_info info{};
  if (::ptrace(PTRACE_GET_SYSCALL_INFO, tid, reinterpret_cast<void*>(sizeof info), &info) <= 0) {
    return regs.cs != 0x33;  // (before Linux 5.3) the segment tells, but for INT 0x80
  }
  constexpr uint32_t kAuditArchI386 = 0x40000003;  // EM_386 | __AUDIT_ARCH_LE
  return info.arch == kAuditArchI386;
}

// Whether registers can be replaced for an injected syscall at this stop: not while a syscall
// that a signal interrupted waits to be restarted (the kernel would restart ours).
bool SafeToInject(const user_regs_struct& regs) {
  const auto orig = static_cast<int64_t>(regs.orig_rax);
  const auto rax = static_cast<int64_t>(regs.rax);
  return orig < 0 || rax < -516 || rax > -512;  // -ERESTARTSYS .. -ERESTART_RESTARTBLOCK
}

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
      uint64_t mask = 0;
      return ParseUnsigned(hex, &mask, 16) && ((mask >> (sig - 1)) & 1);
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
  void Invalidate(uint32_t mm);
  // Whether `ip` is in memory of t's process no program file backs (StepSink::OnCode).
  bool Unfiled(const Thread& t, uint64_t ip);
  // SIGKILL to every traced process (a stopped tracee wakes up to die).
  void KillAll();
  // Whether StepperOptions::stop_requested ended the run; asks it every kStopCheckSteps steps
  // (always with `now`).
  bool StopRequested(bool now);
  absl::Status Resume(uint32_t tid, int sig);
  // Leaves a thread in its group-stop (PTRACE_LISTEN): it runs again after SIGCONT.
  absl::Status Listen(uint32_t tid);
  absl::Status OnStop(uint32_t tid, int status);
  void OnGone(uint32_t tid, int status);
  absl::Status StartThread(uint32_t tid);
  absl::StatusOr<user_regs_struct> Regs(uint32_t tid);
  // The thread will execute the instruction at `ip` next, in the mode of code segment `cs`:
  // remember it and decode it now, while the process certainly exists (an exit syscall's step
  // never comes back). Fails (kUnimplemented) on a code segment of unknown mode.
  absl::Status Land(Thread& t, uint64_t ip, uint64_t cs);
  // Forwards an event of t's stream, keeping t.tracing.
  void Emit(Thread& t, const swpt::Event& e);
  // Whether `ip` is traced in t's address space (always, without --filter).
  bool Traced(const Thread& t, uint64_t ip);

  // --filter. Reads t's /proc maps: the regions' run-time ranges, their pages, the vDSO's
  // SYSCALL. Armed pages no longer mapped are forgotten.
  void Resolve(Thread& t);
  // Makes stopped thread t execute syscall `nr` (at the vDSO gadget) and restores it.
  absl::StatusOr<int64_t> Inject(Thread& t, uint64_t nr, uint64_t a0, uint64_t a1, uint64_t a2);
  // Takes PROT_EXEC from (arm) or gives it back to (disarm) the pages of t's regions.
  absl::Status Arm(Thread& t);
  absl::Status Disarm(Thread& t);
  // Overwrites the region bytes of t's executable region pages with INT3 (plant) or puts the
  // original bytes back (unplant), through /proc/TID/mem.
  absl::Status Plant(Thread& t);
  absl::Status Unplant(Thread& t);
  // Whether an instruction decoded in t's process begins before a region and ends inside it.
  bool StraddlesARegion(const Thread& t);
  // A SIGTRAP stop of a free thread at a planted INT3: unplant and step from the region byte.
  absl::StatusOr<bool> OnPlantedTrap(Thread& t, const siginfo_t& si);
  // A SIGSEGV stop that is entry into an armed page: disarm and step from there.
  absl::StatusOr<bool> OnArmedFault(Thread& t, const siginfo_t& si);
  // A stop of a thread that runs at full speed (syscall stops, signals).
  absl::Status OnFreeStop(Thread& t, int sig);
  // After a step of single-threaded t to `ip` outside the regions: run at full speed.
  absl::Status MaybeFastForward(Thread& t, const user_regs_struct& regs);

  const StepperOptions& options_;
  StepSink& sink_;
  pid_t leader_ = 0;
  std::map<uint32_t, Thread> threads_;
  // Per address space (Thread::mm: a new one at each fork and exec, so a process on a pid an
  // earlier one had does not see that one's code; sweep 35b F1): ip -> insn.
  std::map<uint32_t, std::unordered_map<uint64_t, InsnInfo>> code_;
  // Uprobe sites met (pid, ip): the kernel's INT3 at an instruction the file has otherwise.
  std::set<std::pair<uint32_t, uint64_t>> probed_;
  std::map<uint64_t, Mm> mms_;
  uint64_t next_mm_ = 1;
  const bool filtering_ = !options_.filters.empty();
  uint64_t now_ = 0;  // options.clock at the stop being handled
  absl::Time start_ = absl::Now();
  absl::Time last_progress_ = start_;  // options.progress was last called
  uint64_t stops_ = 0;
  std::vector<swpt::Event> events_;
  StepperResult result_;
  // Instructions retired under single-step, traced or not (--max-steps counts them).
  uint64_t retired_ = 0;
};

absl::StatusOr<user_regs_struct> Run::Regs(uint32_t tid) {
  user_regs_struct regs;
  if (::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) {
    return ErrnoStatus(errno, "ptrace(GETREGS) of thread ", tid);
  }
  return regs;
}

void Run::KillAll() {
  ::kill(leader_, SIGKILL);
  for (const auto& [tid, t] : threads_) {
    if (t.pid != 0) ::kill(static_cast<pid_t>(t.pid), SIGKILL);
  }
}

bool Run::StopRequested(bool now) {
  if (!result_.stop_requested && options_.stop_requested &&
      (now || result_.steps % kStopCheckSteps == 0)) {
    result_.stop_requested = options_.stop_requested();
  }
  return result_.stop_requested;
}

void Run::Invalidate(uint32_t mm) {
  code_.erase(mm);
  mms_[mm].unfiled.reset();
  for (auto& [tid, t] : threads_) {
    if (t.mm == mm && t.started) Info(t, t.pending_ip).IgnoreError();
  }
}

// A program's code is in a file a decoder reads (by the MMAP2 record's path, or the path's
// archived bytes): a mapping of a path that names a file, but a deleted one, a memfd
// ("/memfd:NAME (deleted)") or one under /dev (shared memory, a device). Other executable
// memory, but the kernel's [vdso] and [vsyscall] (which the decoder has otherwise), is not.
bool Run::Unfiled(const Thread& t, uint64_t ip) {
  Mm& mm = mms_[t.mm];
  if (!mm.unfiled) {
    mm.unfiled.emplace();
    absl::StatusOr<std::vector<record::ProcMapping>> maps =
        record::ReadProcMaps(std::to_string(t.tid));
    if (maps.ok()) {
      for (const record::ProcMapping& m : *maps) {
        if (!(m.prot & PROT_EXEC) || m.path == "[vdso]" || m.path == "[vsyscall]") continue;
        const bool file = m.path.starts_with('/') && !m.path.ends_with(" (deleted)") &&
                          !m.path.starts_with("/memfd:") && !m.path.starts_with("/dev/");
        if (!file) mm.unfiled->emplace_back(m.start, m.end);
      }
    }
  }
  for (const auto& [start, end] : *mm.unfiled) {
    if (ip >= start && ip < end) return true;
  }
  return false;
}

absl::StatusOr<const InsnInfo*> Run::Info(const Thread& t, uint64_t ip) {
  const uint32_t pid = t.pid;
  auto& cache = code_[t.mm];
  auto it = cache.find(ip);
  // (The same bytes run in another mode decode differently: a heaven's gate's.)
  if (it != cache.end() && it->second.mode == t.mode) return &it->second;
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
    return ErrnoStatus(errno, "read code of thread ", t.tid, " (process ", pid, ") at 0x",
                       absl::Hex(ip));
  }
  if (t.mm != 0) {
    for (const auto& [start, original] : mms_[t.mm].planted) {  // the program's bytes, not INT3
      for (size_t i = 0; i < got; ++i) {
        if (ip + i >= start && ip + i < start + original.size())
          bytes[i] = original[ip + i - start];
      }
    }
  }
  if (bytes[0] == 0xcc && record::RestoreProbedBytes(t.tid, ip, std::span(bytes, got))) {
    probed_.insert({pid, ip});  // a uprobe's INT3 (--trigger): the program has its own byte
  }
  PTKIT_ASSIGN_OR_RETURN(InsnInfo info,
                         DecodeInsn(std::span<const uint8_t>(bytes, got), ip, t.mode));
  sink_.OnCode(pid, t.stream, ip, std::span<const uint8_t>(bytes, info.size), Unfiled(t, ip));
  return &(cache[ip] = info);
}

absl::Status Run::Land(Thread& t, uint64_t ip, uint64_t cs) {
  PTKIT_ASSIGN_OR_RETURN(t.mode, ExecModeOfCs(cs));
  t.pending_ip = ip;
  // A failure here is reported when the step completes and the instruction is needed.
  Info(t, ip).IgnoreError();
  return absl::OkStatus();
}

absl::Status Run::Resume(uint32_t tid, int sig) {
  Thread& t = threads_[tid];
  if (sig == 0 && !t.deferred_signals.empty()) {
    sig = t.deferred_signals.front();  // one per resume, in the order they came
    t.deferred_signals.pop_front();
    if (!t.free && Catches(t.pid, sig)) t.signal_to_handler = true;
  }
  if (t.free) {
    if (StopRequested(true)) {  // a signal that came while this stop was handled
      KillAll();
      return absl::OkStatus();
    }
    if (::ptrace(PTRACE_SYSCALL, tid, nullptr, reinterpret_cast<void*>(sig)) != 0) {
      if (errno == ESRCH) return absl::OkStatus();
      return ErrnoStatus(errno, "ptrace(SYSCALL) of thread ", tid);
    }
    return absl::OkStatus();
  }
  if (StopRequested(false)) {
    KillAll();
    return absl::OkStatus();
  }
  // --max-steps counts retired instructions (without --filter the ground truth's lines; a rep
  // string instruction's iterations are steps of one instruction), as the qemu backend does.
  if (options_.max_steps != 0 && retired_ >= options_.max_steps) {
    result_.step_limit_hit = true;
    KillAll();
    return absl::OkStatus();
  }
  ++result_.steps;
  t.resumed_at = now_;
  if (::ptrace(PTRACE_SINGLESTEP, tid, nullptr, reinterpret_cast<void*>(sig)) != 0) {
    if (errno == ESRCH) return absl::OkStatus();  // killed meanwhile; waitpid reports it
    return ErrnoStatus(errno, "ptrace(SINGLESTEP) of thread ", tid);
  }
  return absl::OkStatus();
}

absl::Status Run::Listen(uint32_t tid) {
  if (StopRequested(true)) {
    KillAll();
    return absl::OkStatus();
  }
  // A seized tracee's group-stop (PTRACE_EVENT_STOP with the stopping signal) lasts, as the
  // program's would untraced, only if the tracer does not restart the thread: PTRACE_LISTEN
  // lets it report the end of the stop (SIGCONT: another PTRACE_EVENT_STOP, with SIGTRAP)
  // without running it (ptrace(2), "Group-stop"; a single-step would run it on, sweep 38b M4).
  // No instruction ran since the last stop: the thread's step is resumed after that report.
  if (::ptrace(PTRACE_LISTEN, tid, nullptr, nullptr) != 0) {
    if (errno == ESRCH) return absl::OkStatus();  // killed meanwhile; waitpid reports it
    return ErrnoStatus(errno, "ptrace(LISTEN) of thread ", tid);
  }
  return absl::OkStatus();
}

void Run::Emit(Thread& t, const swpt::Event& e) {
  if (options_.clock) {
    const uint64_t time = e.kind == swpt::EventKind::kEnable ? now_ : t.resumed_at;
    if (time > t.stamped) {
      sink_.OnEvent(t.stream, swpt::Event::Time(time));
      t.stamped = time;
    }
  }
  if (e.kind == swpt::EventKind::kEnable) {
    t.tracing = true;
  } else if (e.kind == swpt::EventKind::kDisable || e.kind == swpt::EventKind::kAsyncDisable) {
    t.tracing = false;
  }
  sink_.OnEvent(t.stream, e);
}

bool Run::Traced(const Thread& t, uint64_t ip) {
  if (!filtering_) return true;
  for (const auto& [start, end] : mms_[t.mm].ranges) {
    if (ip >= start && ip < end) return true;
  }
  return false;
}

void Run::Resolve(Thread& t) {
  Mm& mm = mms_[t.mm];
  mm.resolved = true;
  mm.ranges.clear();
  std::vector<Span> spans, armed;
  absl::StatusOr<std::vector<record::ProcMapping>> maps = record::ReadProcMaps(absl::StrCat(t.tid));
  if (!maps.ok()) return;  // the thread is gone; its exit is on the way
  for (const record::ProcMapping& m : *maps) {
    if (m.path == "[vdso]" && mm.gadget == 0) {
      std::vector<uint8_t> vdso(m.end - m.start);
      iovec local{vdso.data(), vdso.size()};
      iovec remote{reinterpret_cast<void*>(m.start), vdso.size()};
      ssize_t n = ::process_vm_readv(static_cast<pid_t>(t.tid), &local, 1, &remote, 1, 0);
      for (ssize_t i = 0; i + 1 < n; ++i) {
        if (vdso[i] == 0x0f && vdso[i + 1] == 0x05) {  // SYSCALL
          mm.gadget = m.start + i;
          break;
        }
      }
      continue;
    }
    for (const record::AddressFilter& f : options_.filters) {
      if (m.path != f.file) continue;
      const auto range = record::FileRangeInMapping(m, f.offset, f.size);
      if (!range) continue;
      const auto [from, to] = *range;
      mm.ranges.emplace_back(from, to);
      AddSpans(from & ~4095ull, std::min<uint64_t>(m.end, (to + 4095) & ~4095ull), m.prot, mm.armed,
               spans, armed);
    }
  }
  auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
  std::sort(spans.begin(), spans.end(), by_start);
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());
  std::sort(armed.begin(), armed.end(), by_start);
  armed.erase(std::unique(armed.begin(), armed.end()), armed.end());
  mm.armed = std::move(armed);
  mm.spans = std::move(spans);
}

absl::StatusOr<int64_t> Run::Inject(Thread& t, uint64_t nr, uint64_t a0, uint64_t a1, uint64_t a2) {
  const Mm& mm = mms_[t.mm];
  if (mm.gadget == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--filter: process ", t.pid, " has no SYSCALL instruction in its vDSO to inject with"));
  }
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct saved, Regs(t.tid));
  user_regs_struct regs = saved;
  regs.rip = mm.gadget;
  regs.cs = 0x33;  // a 64-bit SYSCALL with x86-64 numbers, also from compatibility-mode code
  regs.rax = nr;
  regs.rdi = a0;
  regs.rsi = a1;
  regs.rdx = a2;
  regs.orig_rax = ~0ull;
  if (::ptrace(PTRACE_SETREGS, t.tid, nullptr, &regs) != 0) {
    return ErrnoStatus(errno, "ptrace(SETREGS) of thread ", t.tid);
  }
  bool group_stop_changed = false;
  for (;;) {
    if (::ptrace(PTRACE_SINGLESTEP, t.tid, nullptr, nullptr) != 0) {
      return ErrnoStatus(errno, "ptrace(SINGLESTEP) of thread ", t.tid);
    }
    int status = 0;
    if (WaitRestarting(static_cast<pid_t>(t.tid), &status, __WALL) < 0) {
      return ErrnoStatus(errno, "waitpid");
    }
    if (!WIFSTOPPED(status)) {
      return absl::InternalError(absl::StrCat("thread ", t.tid, " ended in an injected syscall"));
    }
    if ((status >> 16) == PTRACE_EVENT_STOP) {
      // A group-stop began or ended meanwhile: the injected call completes first.
      group_stop_changed = true;
      continue;
    }
    if (WSTOPSIG(status) == SIGTRAP) break;
    t.deferred_signals.push_back(WSTOPSIG(status));  // delivered when the thread goes on
  }
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct after, Regs(t.tid));
  if (after.rip != mm.gadget + 2) {
    return absl::InternalError(
        absl::StrCat("injected syscall in thread ", t.tid, " stopped at 0x", absl::Hex(after.rip)));
  }
  if (::ptrace(PTRACE_SETREGS, t.tid, nullptr, &saved) != 0) {
    return ErrnoStatus(errno, "ptrace(SETREGS) of thread ", t.tid);
  }
  // Then the thread traps again (PTRACE_EVENT_STOP) as soon as it is resumed, before its next
  // instruction: with the stopping signal if the group is still stopped (OnStop leaves it so).
  if (group_stop_changed && ::ptrace(PTRACE_INTERRUPT, t.tid, nullptr, nullptr) != 0) {
    return ErrnoStatus(errno, "ptrace(INTERRUPT) of thread ", t.tid);
  }
  return static_cast<int64_t>(after.rax);
}

absl::Status Run::Arm(Thread& t) {
  Mm& mm = mms_[t.mm];
  for (const Span& s : mm.spans) {
    if (InSpans(mm.armed, s.start)) continue;
    PTKIT_ASSIGN_OR_RETURN(int64_t rc, Inject(t, SYS_mprotect, s.start, s.end - s.start,
                                              static_cast<uint64_t>(s.prot & ~PROT_EXEC)));
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("--filter: mprotect(0x", absl::Hex(s.start),
                                              ") in process ", t.pid, ": ", ErrnoText(-rc)));
    }
    mm.armed.push_back(s);
  }
  return absl::OkStatus();
}

absl::Status Run::Disarm(Thread& t) {
  PTKIT_RETURN_IF_ERROR(Unplant(t));
  Mm& mm = mms_[t.mm];
  mm.disarmed = mm.armed;
  ++mm.disarms;
  for (const Span& s : mm.armed) {
    PTKIT_ASSIGN_OR_RETURN(int64_t rc, Inject(t, SYS_mprotect, s.start, s.end - s.start,
                                              static_cast<uint64_t>(s.prot)));
    if (rc < 0 && rc != -ENOMEM) {  // ENOMEM: unmapped meanwhile
      return absl::InternalError(absl::StrCat("--filter: mprotect(0x", absl::Hex(s.start),
                                              ") in process ", t.pid, ": ", ErrnoText(-rc)));
    }
  }
  mm.armed.clear();
  return absl::OkStatus();
}

bool Run::StraddlesARegion(const Thread& t) {
  const auto& cache = code_[t.mm];
  for (const auto& [start, end] : mms_[t.mm].ranges) {
    for (uint64_t back = 1; back < kMaxInsn && back <= start; ++back) {
      auto it = cache.find(start - back);
      if (it != cache.end() && it->second.size > back) return true;
    }
  }
  return false;
}

absl::Status Run::Plant(Thread& t) {
  Mm& mm = mms_[t.mm];
  if (!mm.planted.empty()) return absl::OkStatus();
  std::vector<std::pair<uint64_t, uint64_t>> code;  // the regions' bytes on executable pages
  for (const auto& [start, end] : mm.ranges) {
    for (const Span& s : mm.spans) {
      const uint64_t from = std::max(start, s.start), to = std::min(end, s.end);
      if (from < to) code.emplace_back(from, to);
    }
  }
  const MemFile mem(t.tid);
  for (const auto& [from, to] : code) {
    std::vector<uint8_t> original(to - from);
    const std::vector<uint8_t> traps(to - from, 0xcc);
    if (!mem.Read(from, original) || !mem.Write(from, traps)) {
      absl::Status failed = ErrnoStatus(errno, "--filter: write breakpoints at 0x", absl::Hex(from),
                                        " in process ", t.pid);
      Unplant(t).IgnoreError();
      return failed;
    }
    mm.planted.emplace_back(from, std::move(original));
  }
  return absl::OkStatus();
}

absl::Status Run::Unplant(Thread& t) {
  Mm& mm = mms_[t.mm];
  if (mm.planted.empty()) return absl::OkStatus();
  const MemFile mem(t.tid);
  absl::Status status;
  for (const auto& [from, original] : mm.planted) {
    if (!mem.Write(from, original)) {
      if (status.ok()) {
        status = ErrnoStatus(errno, "--filter: restore code at 0x", absl::Hex(from), " in process ",
                             t.pid);
      }
    }
  }
  mm.planted.clear();
  return status;
}

absl::StatusOr<bool> Run::OnPlantedTrap(Thread& t, const siginfo_t& si) {
  Mm& mm = mms_[t.mm];
  if (mm.planted.empty() || si.si_signo != SIGTRAP || si.si_code != SI_KERNEL) return false;
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(t.tid));
  const uint64_t ip = regs.rip - 1;  // INT3 traps after itself
  bool ours = false;
  for (const auto& [from, original] : mm.planted) ours |= ip >= from && ip < from + original.size();
  if (!ours) return false;  // the program's own INT3
  PTKIT_RETURN_IF_ERROR(Unplant(t));
  regs.rip = ip;  // the instruction there has not run
  if (::ptrace(PTRACE_SETREGS, t.tid, nullptr, &regs) != 0) {
    return ErrnoStatus(errno, "ptrace(SETREGS) of thread ", t.tid);
  }
  const bool was_free = t.free;  // else a step ran into INT3s not yet taken out
  t.free = false;
  PTKIT_RETURN_IF_ERROR(Land(t, ip, regs.cs));
  if (was_free && Traced(t, ip)) Emit(t, swpt::Event::Enable(ip, t.mode));
  return true;
}

absl::StatusOr<bool> Run::OnArmedFault(Thread& t, const siginfo_t& si) {
  if (!filtering_ || si.si_signo != SIGSEGV || si.si_code != SEGV_ACCERR) return false;
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(t.tid));
  const uint64_t ip = regs.rip;
  const auto addr = reinterpret_cast<uint64_t>(si.si_addr);
  if (addr != ip) return false;
  Mm& mm = mms_[t.mm];
  if (InSpans(mm.armed, ip)) {
    PTKIT_RETURN_IF_ERROR(Disarm(t));
  } else if (InSpans(mm.disarmed, ip) && t.stale_fault_disarm != mm.disarms) {
    // Taken while the page was armed, reported after another thread's stop disarmed it (the
    // threads run while we handle one): the instruction runs now. Once per thread and
    // disarm, so that a fault of the program's own is still delivered.
    t.stale_fault_disarm = mm.disarms;
  } else {
    return false;
  }
  if (t.free) {
    t.free = false;
    PTKIT_RETURN_IF_ERROR(Land(t, ip, regs.cs));
    if (Traced(t, ip)) Emit(t, swpt::Event::Enable(ip, t.mode));
  }
  return true;
}

absl::Status Run::OnFreeStop(Thread& t, int sig) {
  if (sig == (SIGTRAP | 0x80)) {  // syscall entry or exit
    PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(t.tid));
    const bool exit = static_cast<int64_t>(regs.rax) != -ENOSYS;
    const bool map = IsMapSyscall(regs.orig_rax, Ia32SyscallStop(t.tid, regs));
    if (!exit && map && !mms_[t.mm].planted.empty()) {
      // The mappings may change under the planted bytes: the program's own go back first, and
      // the thread steps from the syscall's return until it can run free again.
      PTKIT_RETURN_IF_ERROR(Unplant(t));
      t.unplanted = true;
    }
    if (exit && map) {
      Invalidate(t.mm);
      Resolve(t);  // keeps only armed pages that still hold regions
      if (mms_[t.mm].spans != mms_[t.mm].armed || t.unplanted) {
        // New region pages: step (outside them) until the next safe point arms them too.
        t.unplanted = false;
        t.free = false;
        PTKIT_RETURN_IF_ERROR(Land(t, regs.rip, regs.cs));
      }
    }
    return Resume(t.tid, 0);
  }
  siginfo_t si{};
  ::ptrace(PTRACE_GETSIGINFO, t.tid, nullptr, &si);
  PTKIT_ASSIGN_OR_RETURN(bool trapped, OnPlantedTrap(t, si));
  if (trapped) return Resume(t.tid, 0);
  PTKIT_ASSIGN_OR_RETURN(bool entered, OnArmedFault(t, si));
  return Resume(t.tid, entered ? 0 : sig);
}

absl::Status Run::MaybeFastForward(Thread& t, const user_regs_struct& regs) {
  Mm& mm = mms_[t.mm];
  // No regions mapped yet (a library loaded later) is fine: mmap's syscall stops watch for them.
  // One thread only, counting those cloned but not started yet: they could run into a region
  // before their start disarms it.
  if (!filtering_ || t.tracing || mm.threads != 1 || mm.unstarted != 0 || t.signal_to_handler ||
      !t.deferred_signals.empty()) {
    return absl::OkStatus();
  }
  if (InSpans(mm.spans, regs.rip)) {
    // On a region page, outside the regions: run with INT3 over the regions' bytes, unless
    // an instruction seen here straddles a region's start (its tail would be overwritten).
    if (Traced(t, regs.rip) || StraddlesARegion(t)) return absl::OkStatus();
    // Code that cannot be written (a shared mapping) is stepped.
    if (mm.unwritable || !Plant(t).ok()) {
      mm.unwritable = true;
      return absl::OkStatus();
    }
  } else {
    // (An i386 process's vDSO may have no SYSCALL to inject mprotect with: it is stepped.)
    if (!SafeToInject(regs) || mm.gadget == 0) return absl::OkStatus();
    PTKIT_RETURN_IF_ERROR(Arm(t));
  }
  t.free = true;
  ++result_.fast_forwards;
  return absl::OkStatus();
}

absl::Status Run::StartThread(uint32_t tid) {
  Thread& t = threads_[tid];
  if (t.pid == 0) t.pid = TgidOf(tid);
  t.tid = t.stream = tid;
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(tid));
  PTKIT_RETURN_IF_ERROR(Land(t, regs.rip, regs.cs));
  t.started = true;
  ++result_.threads;
  sink_.OnThreadStart(t.pid, t.stream);
  Mm& mm = mms_[t.mm];
  ++mm.threads;
  if (t.cloned) --mm.unstarted;
  if (filtering_) {
    if (!mm.resolved) Resolve(t);
    if (!mm.armed.empty() || !mm.planted.empty()) {
      if (mm.threads == 1) {
        t.free = true;  // a forked child of a process running at full speed
        return absl::OkStatus();
      }
      // A second thread: several threads are single-stepped throughout (one running at full
      // speed could enter a region another one opened).
      if (!mm.armed.empty() && !SafeToInject(regs)) {
        return absl::InternalError(absl::StrCat("--filter: cannot disarm for new thread ", tid));
      }
      PTKIT_RETURN_IF_ERROR(Disarm(t));
    }
  }
  if (Traced(t, t.pending_ip)) Emit(t, swpt::Event::Enable(t.pending_ip, t.mode));
  return absl::OkStatus();
}

void Run::OnGone(uint32_t tid, int status) {
  auto it = threads_.find(tid);
  if (it == threads_.end()) return;
  if (options_.clock) now_ = options_.clock();
  Thread& t = it->second;
  if (!t.started && t.cloned) --mms_[t.mm].unstarted;  // gone before its first stop
  if (t.started) {
    --mms_[t.mm].threads;
    // The step in flight was the exit syscall (or the thread was killed before it retired).
    // The process is gone: its code can only come from the cache, which Land() filled.
    const auto& cache = code_[t.mm];
    auto info = cache.find(t.pending_ip);
    if (!t.tracing) {
      // Outside the filter regions: nothing to close.
    } else if (info != cache.end() && info->second.cls == InsnClass::kSyscall &&
               WIFEXITED(status)) {
      sink_.OnInstruction(t.stream, t.pending_ip);
      ++result_.instructions;
      Emit(t, swpt::Event::Disable(t.pending_ip, 0, /*suppress_ip=*/true));
    } else {
      Emit(t, swpt::Event::AsyncDisable(t.pending_ip));
    }
    sink_.OnThreadEnd(t.stream);
  }
  const bool leader = static_cast<pid_t>(tid) == leader_;
  if (leader) {
    result_.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result_.exit_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  const uint32_t pid = it->second.pid;
  threads_.erase(it);
  if (leader && options_.command_exited) {
    std::vector<uint32_t> left;
    for (const auto& [other, thread] : threads_) {
      if (thread.pid != pid) left.push_back(thread.pid);
    }
    std::sort(left.begin(), left.end());
    left.erase(std::unique(left.begin(), left.end()), left.end());
    if (!left.empty()) options_.command_exited(left);
  }
}

absl::Status Run::OnStop(uint32_t tid, int status) {
  if (options_.clock) now_ = options_.clock();
  if (options_.progress && ++stops_ % 1024 == 0) {
    const absl::Time now = absl::Now();
    if (now - last_progress_ >= absl::Seconds(1)) {
      last_progress_ = now;
      result_.seconds = absl::ToDoubleSeconds(now - start_);
      options_.progress(result_);
    }
  }
  const int sig = WSTOPSIG(status);
  const int event = status >> 16;
  // (The stopping signal; else SIGTRAP: a thread's first stop, the end of a group-stop, or
  // PTRACE_INTERRUPT.)
  const bool group_stop = event == PTRACE_EVENT_STOP && record::StopsByDefault(sig);
  auto found = threads_.find(tid);
  if (found == threads_.end() || !found->second.started) {
    // A new thread or process: its first stop (PTRACE_EVENT_STOP from the auto-attach; a
    // group-stop when its process is stopped).
    Thread& n = threads_[tid];
    if (filtering_ && n.mm == 0) {
      // Stopped before its parent's clone event says whose address space it has: wait.
      n.tid = tid;
      n.waiting_for_parent = true;
      n.first_stop_is_group_stop = group_stop;
      return absl::OkStatus();
    }
    PTKIT_RETURN_IF_ERROR(StartThread(tid));
    return group_stop ? Listen(tid) : Resume(tid, 0);
  }
  Thread& t = found->second;
  if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
    unsigned long child = 0;
    ::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child);
    Thread& c = threads_[static_cast<uint32_t>(child)];
    if (c.pid == 0) c.pid = event == PTRACE_EVENT_CLONE ? t.pid : static_cast<uint32_t>(child);
    c.tid = c.stream = static_cast<uint32_t>(child);
    if (event == PTRACE_EVENT_FORK) {
      c.mm = next_mm_++;
      Mm& copy = mms_[c.mm];
      copy = mms_[t.mm];  // the child's memory, protections included, is a copy
      copy.threads = 0;
    } else {
      c.mm = t.mm;  // a thread, or a vfork child until it execs
      if (!c.waiting_for_parent) {
        c.cloned = true;
        ++mms_[c.mm].unstarted;
      }
      if (t.free) {
        // The address space gains a thread: everyone is stepped from here on.
        PTKIT_RETURN_IF_ERROR(Unplant(t));
        PTKIT_ASSIGN_OR_RETURN(user_regs_struct after, Regs(tid));
        t.free = false;
        // SYSCALL (or INT 0x80, SYSENTER); its step completes when the call returns.
        PTKIT_RETURN_IF_ERROR(Land(t, after.rip - 2, after.cs));
      }
    }
    if (c.waiting_for_parent) {
      c.waiting_for_parent = false;
      PTKIT_RETURN_IF_ERROR(StartThread(c.tid));
      PTKIT_RETURN_IF_ERROR(c.first_stop_is_group_stop ? Listen(c.tid) : Resume(c.tid, 0));
    }
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
      if (t.tracing) Emit(t, swpt::Event::AsyncDisable(t.pending_ip));
      --mms_[t.mm].threads;
      sink_.OnThreadEnd(t.stream);
      Thread moved = exec_thread->second;
      threads_.erase(exec_thread);
      moved.tid = tid;
      threads_[tid] = moved;
    }
    Thread& e = threads_.at(tid);
    // (The old address space's code goes with it, unless a vfork parent still has it.)
    if (mms_[e.mm].threads <= 1) code_.erase(e.mm);
    PTKIT_ASSIGN_OR_RETURN(user_regs_struct entry_regs, Regs(tid));
    const uint64_t entry = entry_regs.rip;
    ++retired_;
    if (e.tracing) {
      sink_.OnInstruction(e.stream, e.pending_ip);
      ++result_.instructions;
      Emit(e, swpt::Event::Disable(e.pending_ip, 0, /*suppress_ip=*/true));
    }
    // A new address space.
    --mms_[e.mm].threads;
    e.mm = next_mm_++;
    mms_[e.mm].threads = 1;
    e.free = false;
    if (filtering_) Resolve(e);
    // The new program's mode: an exec between a 64-bit and an i386 program changes it.
    PTKIT_RETURN_IF_ERROR(Land(e, entry, entry_regs.cs));
    if (Traced(e, entry)) Emit(e, swpt::Event::Enable(entry, e.mode));
    e.after_exec = true;
    sink_.OnExec(e.pid);
    return Resume(tid, 0);
  }
  if (group_stop) return Listen(tid);
  if (event != 0) return Resume(tid, 0);
  if (t.free) return OnFreeStop(t, sig);

  siginfo_t si{};
  ::ptrace(PTRACE_GETSIGINFO, tid, nullptr, &si);
  // Single-step traps are kernel-made (TRAP_TRACE, TRAP_BRKPT after a syscall, the
  // handler-entry notification); an int3 in the workload is SI_KERNEL and is its own signal.
  // A uprobe executes the probed instruction out of line and then, for the tracer's TF, sends
  // the task a SIGTRAP of its own (SI_USER from itself: arch/x86/kernel/uprobes.c,
  // arch_uprobe_post_xol): at a probed instruction that is the step's trap too.
  const bool probed_step = sig == SIGTRAP && (si.si_code == SI_USER || si.si_code == SI_KERNEL) &&
                           probed_.contains({t.pid, t.pending_ip});
  const bool step_trap =
      probed_step || (sig == SIGTRAP && si.si_code > 0 && si.si_code != SI_KERNEL);
  if (!step_trap) {
    PTKIT_ASSIGN_OR_RETURN(bool trapped, OnPlantedTrap(t, si));
    if (trapped) return Resume(tid, 0);
    PTKIT_ASSIGN_OR_RETURN(bool entered, OnArmedFault(t, si));
    if (entered) return Resume(tid, 0);
    // A real signal: deliver it. If the process catches it, the next stop is at the handler;
    // a stopping signal it does not catch stops it (a group-stop: every thread reports one).
    if (sig != SIGSTOP && Catches(t.pid, sig)) {
      t.signal_to_handler = true;
    } else if (options_.on_fatal_signal && record::KillsByDefault(sig) &&
               !record::SignalIgnored(t.pid, sig)) {
      // It ends the process: the instruction at pending_ip never retires and the thread's
      // trace ends there, as the hardware's does when the thread enters the kernel (FUP,
      // TIP.PGD; OnGone would say the same later). Said now, so the crash snapshot holds
      // everything up to that instruction; then the last chance to see the threads as they are.
      if (t.tracing) Emit(t, swpt::Event::AsyncDisable(t.pending_ip));
      options_.on_fatal_signal(t.pid, t.stream, sig, t.pending_ip);
    }
    return Resume(tid, sig);
  }
  PTKIT_ASSIGN_OR_RETURN(user_regs_struct regs, Regs(tid));
  const uint64_t ip = regs.rip;
  if (t.signal_to_handler) {
    // The kernel stopped at the handler's first instruction; the one at pending_ip did not
    // retire (an asynchronous transfer, through the untraced kernel).
    t.signal_to_handler = false;
    if (t.tracing) Emit(t, swpt::Event::AsyncDisable(t.pending_ip));
    PTKIT_RETURN_IF_ERROR(Land(t, ip, regs.cs));
    if (Traced(t, ip)) Emit(t, swpt::Event::Enable(ip, t.mode));
    return Resume(tid, 0);
  }
  PTKIT_ASSIGN_OR_RETURN(const InsnInfo* cached, Info(t, t.pending_ip));
  const InsnInfo info = *cached;  // a copy: Invalidate() below frees the cache
  if (ip == t.pending_ip &&
      (std::exchange(t.after_exec, false) || info.rep || info.cls == InsnClass::kOther)) {
    // One more iteration of a rep string instruction (it retires once, at the end); or the
    // trap at execve's return, before the entry's instruction ran (sweep 31a F6: an entry
    // that is a jump, Go's _rt0_amd64_linux, was counted twice, in the ground truth too).
    return Resume(tid, 0);
  }
  t.after_exec = false;
  const bool traced = t.tracing;  // the instruction at pending_ip is inside the filter regions
  ++retired_;
  if (traced) {
    sink_.OnInstruction(t.stream, t.pending_ip);
    ++result_.instructions;
  }
  events_.clear();
  const bool syscall = info.cls == InsnClass::kSyscall;
  if (syscall && IsMapSyscall(regs.orig_rax, info.ia32_syscall)) {
    // Code may have been mapped, unmapped or changed: decode afresh from now on.
    Invalidate(t.mm);
    if (filtering_) Resolve(t);
  }
  PTKIT_ASSIGN_OR_RETURN(const swpt::ExecMode next_mode, ExecModeOfCs(regs.cs));
  AppendFilteredStepEvents(t.pending_ip, info, ip, next_mode, traced, Traced(t, ip), events_);
  for (const swpt::Event& e : events_) Emit(t, e);
  PTKIT_RETURN_IF_ERROR(Land(t, ip, regs.cs));
  PTKIT_RETURN_IF_ERROR(MaybeFastForward(t, regs));
  return Resume(tid, 0);
}

absl::StatusOr<StepperResult> Run::Go() {
  start_ = last_progress_ = absl::Now();
  PTKIT_ASSIGN_OR_RETURN(record::ParkedChild child, record::ForkParked(options_.argv));
  const pid_t pid = child.pid;
  leader_ = pid;
  int status = 0;
  auto kill_and_reap = [&](const absl::Status& s) {
    KillAll();
    while (WaitRestarting(-1, &status, __WALL) > 0) {
    }
    return s;
  };
  // Seized, not PTRACE_TRACEME: a seized tracee's group-stop is told from other stops
  // (PTRACE_EVENT_STOP) and can last (PTRACE_LISTEN); its threads and children are seized too.
  constexpr long kOptions = PTRACE_O_EXITKILL | PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK |
                            PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD;
  if (::ptrace(PTRACE_SEIZE, pid, nullptr, reinterpret_cast<void*>(kOptions)) != 0) {
    return kill_and_reap(ErrnoStatus(errno, "ptrace(SEIZE) of the workload"));
  }
  if (options_.before_exec) {
    if (absl::Status s = options_.before_exec(pid); !s.ok()) return kill_and_reap(s);
  }
  if (absl::Status s = record::LetGo(child.go, options_.argv[0]); !s.ok()) {
    return kill_and_reap(s);
  }
  // Up to its execve, what a seized child reports besides (a signal that reaches it in these
  // milliseconds: Ctrl-C, Ctrl-Z, a terminal resize) goes as it would untraced: a signal is
  // delivered, a group-stop lasts (PTRACE_LISTEN) until SIGCONT. Any such stop was taken for a
  // failed execve and the exec-error pipe read, which the stopped child held open: ptrecord hung
  // for good, SIGINT and SIGTERM ignored (review 39 H1).
  for (;;) {
    if (WaitRestarting(pid, &status, 0) != pid) {
      return kill_and_reap(ErrnoStatus(errno, "waitpid"));
    }
    if (!WIFSTOPPED(status) || (status >> 16) == PTRACE_EVENT_EXEC) break;
    const int event = status >> 16, sig = WSTOPSIG(status);
    long done = 0;
    if (event == PTRACE_EVENT_STOP && record::StopsByDefault(sig)) {
      done = ::ptrace(PTRACE_LISTEN, pid, nullptr, nullptr);
    } else {
      const long deliver = event == 0 ? sig : 0;
      done = ::ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(deliver));
    }
    if (done != 0 && errno != ESRCH) return kill_and_reap(ErrnoStatus(errno, "ptrace(CONT)"));
  }
  if (!WIFSTOPPED(status)) {
    // It ended before its execve: by a signal, or (its exit status 127) where execve failed,
    // whose errno is in the pipe, now closed.
    absl::StatusOr<int> e = record::ReadExecErrno(child.exec_error, options_.argv[0]);
    kill_and_reap(absl::OkStatus()).IgnoreError();
    if (e.ok() && *e != 0) return record::ExecFailure(options_.argv[0], *e);
    if (WIFSIGNALED(status)) {
      return absl::CancelledError(absl::StrCat("the command was killed by ",
                                               record::SignalName(WTERMSIG(status)),
                                               " before it started"));
    }
    return absl::InternalError("the workload did not reach execve");
  }
  child.exec_error.reset();
  if (options_.after_exec) {
    if (absl::Status s = options_.after_exec(); !s.ok()) return kill_and_reap(s);
  }
  threads_[pid].pid = pid;
  threads_[pid].mm = next_mm_++;
  leader_ = pid;
  if (options_.clock) now_ = options_.clock();
  if (absl::Status s = StartThread(pid); !s.ok()) return kill_and_reap(s);
  threads_[pid].after_exec = true;
  sink_.OnExec(pid);
  if (absl::Status s = Resume(pid, 0); !s.ok()) return kill_and_reap(s);

  while (!threads_.empty()) {
    pid_t tid = ::waitpid(-1, &status, __WALL);
    if (tid < 0) {
      if (errno == EINTR) {
        if (StopRequested(true)) KillAll();  // also a thread running at full speed (--filter)
        continue;
      }
      if (errno == ECHILD) break;
      return kill_and_reap(ErrnoStatus(errno, "waitpid"));
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      OnGone(static_cast<uint32_t>(tid), status);
      continue;
    }
    if (absl::Status s = OnStop(static_cast<uint32_t>(tid), status); !s.ok()) {
      // Killed meanwhile (a thread's crash ends its process, SIGKILL to every thread): it left
      // its ptrace-stop, and a ptrace call on it failed with ESRCH; waitpid reports its end
      // (trigger_cli_test under load: "ptrace(GETREGS) of thread N: No such process" failed the
      // recording of a crash).
      errno = 0;
      if (absl::IsNotFound(s) && ::ptrace(PTRACE_PEEKUSER, tid, nullptr, nullptr) == -1 &&
          errno == ESRCH) {
        continue;  // (ErrnoStatus makes ESRCH kNotFound; another failure is the recording's)
      }
      return kill_and_reap(s);
    }
  }
  result_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  return result_;
}

}  // namespace

absl::StatusOr<StepperResult> RunStepped(const StepperOptions& options, StepSink& sink) {
  Run run(options, sink);
  return run.Go();
}

}  // namespace ptkit::emulate
