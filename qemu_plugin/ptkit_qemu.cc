// SPDX-License-Identifier: GPL-2.0-or-later
//
// ptkit's QEMU TCG plugin: the guest's control flow as genuine Intel PT, for
// `ptrecord --emulate=qemu` (record/emulate/qemu_backend.h).
//
// QEMU (user mode, qemu-x86_64) calls OnBlock each time a translation block starts. A block
// ends at its only change of flow, its last instruction, so the start of the next block a
// thread runs says what that instruction did: a Jcc taken or not, where a RET or an indirect
// branch went. Those are the events the step backend produces per instruction
// (record/emulate/step_events.h: AppendStepEvents), here once per block; swpt::PtEncoder turns
// them into PT packets, one stream per guest thread, written into that thread's slot of the
// shared ring (record/emulate/qemu_ring.h) as a kernel writes an AUX area. System calls come
// from the syscall callbacks: TIP.PGD at the entry (user-only tracing), TIP.PGE where the
// thread resumes. The guest's sideband (its mappings, COMM, FORK, EXIT) is written by the
// plugin as perf records into the same data rings, because the kernel's sideband for the qemu
// process describes qemu, not the guest (guest addresses equal host addresses: guest_base 0).
//
// Options (-plugin libptkit_qemu.so,NAME=VALUE,...): fd=N the memfd of the shared region
// (mapped, and kept close-on-exec for exec following); ring=PATH where to open that memfd
// again when the guest closed or reused fd N before an execve (ptrecord's /proc/PID/fd/M, which
// it keeps open: Python's subprocess closes every descriptor, a shell's `exec 4>f` reuses it);
// truth=FD an O_APPEND file for the exact
// per-instruction ground truth ("TID 0xIP" lines, slow); noretcomp=1, psb_period=N, tsc=0|1,
// max_tnt=N as the perf terms; slot=K: this qemu runs a program that slot K's thread exec'd;
// filter=0xOFFSET/0xSIZE@FILE (one per region): --filter, as IP filtering (see FilterEvent);
// trigger=0xOFFSET@FILE: --trigger, a snapshot when a thread reaches that instruction
// (OnTrigger); crash=1: --snapshot-on-crash, the stream of the thread a fatal signal ends
// stops at its instruction (OnFatalSignal); pidns=INODE: ptrecord's pid namespace (a guest in
// another asks ptrecord for its pids: FindRecorderPids).
//
// Exec: qemu-user runs a guest's execve natively (the new program would run untraced). When
// the kernel would run the file as an x86-64 ELF program (directly, or as the interpreter of
// #! scripts), the plugin execs qemu-x86_64 itself instead, with the same options, the plugin
// told the slot, and the guest's argv (argv[0] by -0) and environment. What the kernel would
// refuse (no such file, not executable, ...) is left to the native call, which fails and
// returns its errno to the guest; the checks are those of fs/exec.c and binfmt_script.c, as
// Valgrind's pre-exec check does them. execveat is followed the same way (PlanExec finds its
// file); a file without a name (memfd, deleted) runs natively: a new qemu could not open it.
//
// Limits of API v1 (no register access, no signal callback; crash=1 finds a fatal signal in
// qemu's kill() of itself, see OnFatalSignal): an asynchronous signal shows as
// a block that is not a successor of the last one (after an indirect branch or RET: a block
// at a handler, which the handler's RET confirms or not); a fault inside a block over-counts
// that block's remaining instructions (the ground-truth mode is exact there).
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ptkit/aux_sample.h"
#include "qemu_plugin/qemu_plugin_api.h"
#include "record/emulate/exec_plan.h"
#include "record/emulate/qemu_ring.h"
#include "record/emulate/step_events.h"
#include "record/proc_maps.h"
#include "record/swpt/pt_encoder.h"

extern "C" {
__attribute__((visibility("default"))) int qemu_plugin_version = kQemuPluginApiVersion;
__attribute__((visibility("default"), used)) ptkit::emulate::QemuPluginAbi ptkit_qemu_abi = {
    {'p', 't', 'k', 'i', 't', '-', 'q', 'e', 'm', 'u', '-', 'a', 'b', 'i', ':', '\0'},
    ptkit::emulate::kQemuRegionVersion};
}

namespace {

using ptkit::emulate::AppendStepEvents;
using ptkit::emulate::Exec;
using ptkit::emulate::ExecPlan;
using ptkit::emulate::InsnClass;
using ptkit::emulate::InsnInfo;
using ptkit::emulate::PlanFile;
using ptkit::emulate::QemuSlotWriter;
using ptkit::swpt::Event;
using ptkit::swpt::EventKind;

namespace ptk = ptkit::emulate;

// Encoded bytes go to the ring in chunks of about this size.
constexpr uint64_t kChunk = 64 << 10;
// Bytes older than this are moved even if the chunk is not full.
constexpr uint64_t kMoveNs = 20000000;
// A system call's entry, and under --filter tracing that resumes in a region, give the time (a
// TSC packet) when this much has passed since the last one they gave (GiveTime): a TSC packet
// at every call made a syscall-bound trace 40x larger compressed (`dd bs=1`: TSC values do not
// compress), and 100 us is finer than the 20 ms of Periodic. exit and exit_group always give
// it (a stream's last instructions).
constexpr uint64_t kTimeNs = 100000;
// How often (in blocks) a thread checks whether a chunk is ready.
constexpr uint32_t kCheckBlocks = 1024;
constexpr unsigned kMaxVcpus = 4096;
// x86-64 Linux system call numbers (asm/unistd_64.h).
constexpr int64_t kSysMmap = 9, kSysMprotect = 10, kSysMunmap = 11, kSysRtSigaction = 13,
                  kSysRtSigreturn = 15, kSysMremap = 25, kSysClone = 56, kSysFork = 57,
                  kSysVfork = 58, kSysExecve = 59, kSysExit = 60, kSysClone3 = 435, kSysPrctl = 157,
                  kSysExitGroup = 231, kSysExecveat = 322;
constexpr uint64_t kPrSetName = 15;  // prctl(PR_SET_NAME, name): the thread's COMM
// Signal numbers rt_sigaction accepts (1.._NSIG - 1).
constexpr int kSignals = 65;

// One translated block, kept for the life of the process (blocks are few).
struct Block {
  uint64_t start = 0;
  uint64_t last_ip = 0;  // its last instruction, the only one that may change the flow
  uint64_t end = 0;      // the address after it
  uint32_t insns = 0;
  InsnInfo last;
  // With AUX sampling: each instruction's address less `start` (a sample names one).
  std::vector<uint16_t> offsets;
  // The block ends at `end` with an instruction QEMU does not implement (it raises SIGILL
  // there, before it; not counted in `insns`).
  bool illegal = false;
  bool in_region = false;  // --filter: `start` lies in a filter region
};

// One instruction, for the ground-truth mode.
struct Insn {
  uint64_t ip;
  bool rep;
};

enum Phase : int { kRunning, kInSyscall, kClosed };

uint64_t Now();  // CLOCK_MONOTONIC ns (below)

struct Thread {
  uint32_t pid = 0, tid = 0;        // in ptrecord's pid namespace (FindRecorderPids)
  uint32_t ns_pid = 0, ns_tid = 0;  // getpid(), gettid(): in the guest's
  uint32_t stream = 0;  // the stream's tid: the thread's first (a thread that exec'd keeps it)
  uint32_t slot = 0;
  bool traced = false;  // has a slot
  std::optional<ptkit::swpt::PtEncoder> enc;
  std::optional<QemuSlotWriter> out;
  ptk::QemuSlotControl* control = nullptr;
  const Block* prev = nullptr;  // the block that ran last
  bool in_syscall = false;      // the next block is the return to user
  // The next block may take FollowFast: traced, running, not in a system call, no signal
  // pending. Set by OnBlockSlow, cleared wherever one of those changes elsewhere.
  bool fast = false;
  uint64_t syscall_ip = 0;
  int64_t syscall_num = -1;
  uint64_t args[6] = {};
  uint64_t new_handler = 0;  // of the rt_sigaction call running, and its sa_restorer
  uint64_t new_restorer = 0;
  std::atomic<int> phase{kRunning};
  uint64_t instructions = 0;
  // With an instruction limit: `instructions` may grow up to this before the thread claims
  // more (no limit: never reached).
  uint64_t budget_end = ~uint64_t{0};
  // With AUX sampling: the count (1-based) of the instruction the next sample is taken at,
  // before it retires (no sampling: never reached).
  uint64_t next_sample = ~uint64_t{0};
  // The block may take FollowFast while `instructions` stays at most this: the budget's end
  // and the instruction before the next sample, whichever comes first (UpdateFastEnd).
  uint64_t fast_end = ~uint64_t{0};
  uint32_t snapshot_seen = 0;  // the last snapshot request it flushed for
  // crash=1: the address of the instruction the thread runs (OnInsnIp, called before it runs).
  uint64_t insn_ip = 0;
  uint64_t moved = 0;     // encoder bytes handed to the ring
  uint64_t moved_at = 0;  // Now() of the last Move
  uint64_t timed_at = 0;  // Now() of the last TSC packet of GiveTime
  // Now() at the entry of the system call it is in, when that entry gave no time (else 0).
  uint64_t untimed_call_at = 0;
  uint32_t blocks = 0;
  std::vector<Event> events;
  // An asynchronous signal arrived after a branch whose outcome only the signal frame knows
  // (the address rt_sigreturn resumes at): the events since then wait in `held` until then.
  struct Pending {
    const Block* branch = nullptr;
    uint64_t handler = 0;
    int depth = 0;           // signals delivered on top of it, not yet returned from
    bool returning = false;  // its rt_sigreturn is running: the next block resolves it
    // An indirect branch or RET to a handler may be the program's own (it calls or jumps to
    // its handler): the handler's RET tells. A signal's frame returns to the sa_restorer
    // (`restorer`, 0: unknown); a handler the program ran returns elsewhere. `calls`: calls
    // minus returns since the handler began (at depth 0), so the handler's own RET is the
    // one at 0. `own_possible`: not yet known (a branch that can only be a signal's is not).
    uint64_t restorer = 0;
    int64_t calls = 0;
    bool own_possible = false;
    std::vector<Event> held;  // the thread's events since, written once it is resolved
    uint64_t time = Now();    // when the signal came: the time of its handler's first block
  };
  // Signals' branches waiting for their frames, oldest first: a signal after a conditional
  // branch may come while another one's handler runs (SA_NODEFER, two timers) or after a
  // handler that never returned (siglongjmp). Each holds the events after it; the newest is
  // resolved first, its events then held by the one below. At most kMaxPending, each holding
  // at most kMaxHeld events: beyond that the oldest is given up (Resolve with 0: counted).
  std::vector<Pending> pending;
  bool replaying = false;  // Replay is adding held events (their times are among them)
  // Ground truth.
  // --filter: whether the block running is traced. The encoder's state, except while a
  // signal's branch waits (its events are held): then the block's own (FilterEvent's rule).
  bool truth_on = false;
  std::string truth;
  uint64_t last_truth_ip = 0;
  // Where the lines of the block running (`prev`) begin in `truth` (npos: flushed since):
  // a fatal signal without crash=1 takes them back (OnFatalSignal).
  size_t block_truth = std::string::npos;
};

struct Global {
  uint8_t* region = nullptr;
  uint64_t region_size = 0;
  int region_fd = -1;  // kept (close-on-exec) for the qemu of an exec'd program
  ino_t region_ino = 0;
  ptkit::swpt::PtEncoderOptions pt;
  int truth_fd = -1;
  // The ground truth's file, to open it again where the guest closed (or reused) truth_fd: a
  // program may close every descriptor (Python's subprocess in its child before the exec).
  dev_t truth_dev = 0;
  ino_t truth_ino = 0;
  std::string truth_path;
  std::string region_path;    // ring=: where the region's memfd opens again
  std::string region_socket;  // sock=: where ptrecord hands it over (ReceiveRingFd)
  std::mutex truth_mu;        // truth_fd's checks, opening again and writes (threads flush at once)
  bool truth = false;         // truth_fd is set (fixed at install: truth_fd may change)
  // This process runs a program that the thread of this slot exec'd: its first thread goes
  // on in that slot (~0u: it claims a new one).
  uint32_t resume_slot = ~0u;
  // The inode of ptrecord's pid namespace (pidns=; 0: not given, the guest's pids are taken for
  // ptrecord's), and this process's (set by each thread it starts: a fork child may be in
  // another) and its pid in ptrecord's (0: not known yet).
  uint64_t recorder_pidns = 0;
  uint64_t pidns = 0;
  uint32_t process_pid = 0;
  // How this qemu was started, for an exec'd program's: qemu-x86_64's path and the options
  // before -plugin, the plugin's path, its options (without slot=).
  std::vector<std::string> qemu_command;
  // The variables of qemu-x86_64's own environment that act on qemu itself (ForTheHost).
  std::vector<std::string> host_env;
  std::string plugin_path;
  std::vector<std::string> plugin_options;
  std::string binary;          // the guest's program (qemu_plugin_path_to_binary)
  bool overwrite = false;      // snapshot or AUX-sample mode (from the region's header)
  uint64_t sample_period = 0;  // AUX sampling (0: none)
  uint64_t sample_size = 0;
  std::atomic<Thread*> threads[kMaxVcpus] = {};
  // The process is ending (exit_group, exec): running threads close their streams at their
  // next block.
  std::atomic<bool> closing{false};
  std::atomic<bool> ending{false};  // a thread ends the process (FirstToEnd)
  std::mutex mu;                    // blocks, host_maps, first_process
  std::deque<Block> blocks;
  std::deque<Insn> insns;
  // The host's own mappings when the plugin was installed (qemu, its libraries): everything
  // else in /proc/self/maps at the first block is the guest's.
  std::set<std::tuple<uint64_t, uint64_t, std::string>> host_maps;
  bool first_process = true;  // the process qemu started: writes COMM and the mappings
  // The guest's signal handlers (rt_sigaction), per signal: a branch whose next block is one
  // of them is taken for a signal delivered right after it. `handler_bits` is a filter for
  // the fast path (bit HandlerBit(address) set for every handler ever installed).
  std::atomic<uint64_t> handlers[kSignals] = {};
  std::atomic<uint64_t> restorers[kSignals] = {};  // their sa_restorer (where their frame returns)
  std::atomic<uint64_t> handler_bits[64] = {};
  // --filter: the regions as file ranges, and where the guest has them mapped ([start, end)),
  // found again from /proc/self/maps after the guest changed its mappings (`ranges_stale`).
  struct Filter {
    uint64_t offset = 0, size = 0;
    std::string file;
  };
  std::vector<Filter> filters;
  bool filtering = false;
  std::mutex filter_mu;  // ranges
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::atomic<bool> ranges_stale{true};
  // --trigger: the instruction as a file offset, and its addresses in the guest's mappings
  // (found again with the filter ranges, under filter_mu).
  std::optional<Filter> trigger;
  std::vector<uint64_t> trigger_addresses;
  bool crash = false;  // --snapshot-on-crash
  // Code the guest runs from no file (JIT code): each translated block's bytes go into the
  // sideband as a PERF_RECORD_TEXT_POKE (CaptureCode), once per start, size and bytes; those of
  // a thread not started yet wait in `pokes` (its StartThread writes them). `file_code`: the
  // executable file ranges of the MMAP2 records written, [start, end) by start.
  std::mutex code_mu;                                     // file_code, poked, pokes, build_ids
  std::map<std::string, std::vector<uint8_t>> build_ids;  // path -> its build-id (WriteMmap)
  std::map<uint64_t, uint64_t> file_code;
  std::map<uint64_t, std::vector<uint8_t>> poked;  // start -> the bytes sent
  struct Poke {
    uint64_t addr = 0, time = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Poke> pokes;
};
Global* g = nullptr;
thread_local Thread* t_current = nullptr;

void UpdateFastEnd(Thread& t) { t.fast_end = std::min(t.budget_end, t.next_sample - 1); }

unsigned HandlerBit(uint64_t address) { return (address ^ (address >> 12)) & 4095; }

// Whether `address` is a signal handler the guest installed (first the filter, inline).
bool IsHandlerSlow(uint64_t address) {
  for (const std::atomic<uint64_t>& h : g->handlers) {
    if (h.load(std::memory_order_relaxed) == address) return true;
  }
  return false;
}
// The sa_restorer of a signal whose handler is at `address` (0: none known, or handlers that
// differ in it).
uint64_t RestorerOf(uint64_t address) {
  uint64_t restorer = 0;
  for (int sig = 0; sig < kSignals; ++sig) {
    if (g->handlers[sig].load(std::memory_order_relaxed) != address) continue;
    const uint64_t r = g->restorers[sig].load(std::memory_order_relaxed);
    if (restorer != 0 && r != restorer) return 0;
    restorer = r;
  }
  return restorer;
}
// Whether `address` is the handler of a signal that a fault raises.
bool IsFaultHandler(uint64_t address) {
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) {
    if (g->handlers[sig].load(std::memory_order_relaxed) == address) return true;
  }
  return false;
}

[[gnu::always_inline]] inline bool IsHandler(uint64_t address) {
  const unsigned bit = HandlerBit(address);
  return (g->handler_bits[bit / 64].load(std::memory_order_relaxed) >> (bit % 64) & 1) != 0 &&
         IsHandlerSlow(address);
}

uint64_t Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

ptk::QemuRegionHeader* Header() { return ptk::RegionHeader(g->region); }

// The first error wins; ptrecord prints it.
void Fail(const std::string& message) {
  if (g == nullptr || g->region == nullptr) {
    std::fprintf(stderr, "ptkit qemu plugin: %s\n", message.c_str());
    return;
  }
  if (Header()->has_error.exchange(1) == 0) {
    std::snprintf(Header()->error, sizeof(Header()->error), "%s", message.c_str());
  }
}

// While a ring is full: wait for ptrecord to drain it, for as long as it lives (stopped, in a
// debugger or blocked on its output: the workload waits, nothing is lost). When its drain
// passes (QemuRegionHeader::reader_passes, one at least every 5 ms) stopped for a second, ask
// whether it still holds QemuRegionHeader::reader_alive; false when it does not (gone: nobody
// will drain). Polls every 50 us, every millisecond once it waited 100 ms.
bool WaitForReader() {
  thread_local uint64_t seen = ~uint64_t{0};
  thread_local uint64_t since = 0;
  thread_local uint64_t asked = 0;
  const uint64_t passes = Header()->reader_passes.load(std::memory_order_relaxed);
  const uint64_t now = Now();
  constexpr uint64_t kSecond = 1000000000u;
  if (passes != seen) {
    seen = passes;
    since = now;
  } else if (now - since > kSecond && now - asked > kSecond / 10) {
    asked = now;
    if (ptk::ReaderGone(*Header())) return false;
  }
  timespec ts{0, now - since > kSecond / 10 ? 1000000 : 50000};
  nanosleep(&ts, nullptr);
  return true;
}

void WriteRecord(Thread& t, const std::vector<uint8_t>& record) {
  if (!t.out->WriteRecord(record, WaitForReader)) Fail("ptrecord stopped draining");
}

void FlushTruth(Thread& t);

// Hands `bytes`, taken from the encoder, to the ring with a PERF_RECORD_AUX for them and for
// those staged before them (Stage); Move hands all the encoded bytes. In overwrite mode the AUX
// ring is written only while ptrecord does not copy it for a snapshot (LockSlotForWriting; given up
// while waiting for room in the data ring, which ptrecord drains).
void MoveBytes(Thread& t, std::vector<uint8_t> bytes) {
  t.moved += bytes.size();
  t.moved_at = Now();
  if (g->truth) FlushTruth(t);  // the ground truth ends where the trace does
  if (!bytes.empty() || t.out->staged() != 0) {
    ptk::QemuSlotControl& c = *t.control;
    bool ok = true;
    if (g->overwrite) {
      ok = ptk::LockSlotForWriting(c, WaitForReader) && t.out->WriteTrace(bytes, Now(), [&c] {
        ptk::UnlockSlotForWriting(c);
        return WaitForReader() && ptk::LockSlotForWriting(c, WaitForReader);
      });
      ptk::UnlockSlotForWriting(c);
    } else {
      ok = t.out->WriteTrace(bytes, Now(), WaitForReader);
    }
    if (!ok) Fail("ptrecord stopped draining");
    t.control->aux_recorded.store(t.out->recorded(), std::memory_order_release);
  }
  t.control->instructions.store(t.instructions, std::memory_order_relaxed);
}
void Move(Thread& t) { MoveBytes(t, t.enc->TakeBytes()); }

// At a system call (full-trace mode): the encoded bytes go into the AUX ring at once, with no
// record for them (QemuSlotWriter::StageTrace; the next Move's record covers them), so that a
// signal that ends the process in the call (SIGPIPE from a write, SIGTERM or SIGKILL while it
// waits) loses none of its trace, though qemu then runs no plugin code: ptrecord writes their
// record. A record per system call would cost more than the call (dd bs=1: 2.5x). Where they
// do not fit, a Move.
void Stage(Thread& t) {
  std::vector<uint8_t> bytes = t.enc->TakeBytes();
  if (bytes.empty() || t.out->StageTrace(bytes)) {
    t.moved += bytes.size();
    if (g->truth) FlushTruth(t);
    t.control->instructions.store(t.instructions, std::memory_order_relaxed);
    return;
  }
  MoveBytes(t, std::move(bytes));
}

// Snapshot mode: ptrecord asked for a snapshot since the thread last looked: its trace so far
// goes into the ring (pending TNT bits too, as the hardware's when the event is stopped), and
// it says so.
void FlushForSnapshot(Thread& t) {
  const uint32_t request = Header()->snapshot_request.load(std::memory_order_acquire);
  if (request == t.snapshot_seen) return;
  t.snapshot_seen = request;
  if (absl::Status s = t.enc->Flush(); !s.ok()) Fail(std::string(s.message()));
  Move(t);
  t.control->snapshot_ack.store(request, std::memory_order_release);
}

// AUX sampling: the block `b` holds the instruction of the thread's next sample(s). Each is
// taken before that instruction retires: the pending TNT bits are flushed, the trace moved
// into the ring, and the sample holds the ring's newest bytes (kernel: perf_aux_sample_output()
// copies them out of the AUX buffer). The instructions of `b` before it need no packet.
void TakeSamples(Thread& t, const Block& b) {
  while (t.traced && t.instructions + b.insns >= t.next_sample) {
    const uint64_t ip = b.start + b.offsets.at(t.next_sample - t.instructions - 1);
    t.next_sample += g->sample_period;
    if (absl::Status s = t.enc->Flush(); !s.ok()) {
      Fail(std::string(s.message()));
      break;
    }
    Move(t);
    std::vector<uint8_t> aux(g->sample_size);
    t.out->CopyNewest(aux);
    ptkit::perf::Sample sample;
    sample.id = t.slot;
    sample.ip = ip;
    sample.pid = t.pid;
    sample.tid = t.stream;
    sample.time = Now();
    sample.aux = aux;
    WriteRecord(t, ptkit::perf::EncodeSample(sample, ptk::kQemuAuxSampleType));
  }
  UpdateFastEnd(t);
}

// The guest's mappings changed (or were never read): the --filter regions and the --trigger
// addresses are found again in /proc/self/maps, without the host's own mappings (qemu links
// libc too). The kernel's perf_addr_filter_vma_adjust(), as the step backend resolves them
// (record/proc_maps.h: FileRangeInMapping, as record/emulate/stepper.cc). The caller holds
// filter_mu.
void RefreshRanges() {
  if (!g->ranges_stale.exchange(false)) return;
  g->ranges.clear();
  g->trigger_addresses.clear();
  absl::StatusOr<std::vector<ptkit::record::ProcMapping>> maps =
      ptkit::record::ReadProcMaps("self");
  if (!maps.ok()) {
    return Fail("--filter, --trigger: read /proc/self/maps: " +
                std::string(maps.status().message()));
  }
  for (const ptkit::record::ProcMapping& m : *maps) {
    if (g->host_maps.count({m.start, m.end, m.path}) != 0) continue;
    for (const Global::Filter& f : g->filters) {
      if (m.path != f.file) continue;
      const auto range = ptkit::record::FileRangeInMapping(m, f.offset, f.size);
      if (range) g->ranges.push_back(*range);
    }
    if (g->trigger && m.path == g->trigger->file) {
      const auto at = ptkit::record::FileRangeInMapping(m, g->trigger->offset, 1);
      if (at) g->trigger_addresses.push_back(at->first);
    }
  }
}

// --filter: whether `ip` lies in a filter region of the guest's mappings.
bool InRegion(uint64_t ip) {
  std::lock_guard<std::mutex> lock(g->filter_mu);
  RefreshRanges();
  for (const auto& [from, to] : g->ranges) {
    if (ip >= from && ip < to) return true;
  }
  return false;
}

// --trigger: whether the instruction at `ip` is the trigger's (in any mapping of its file).
bool IsTrigger(uint64_t ip) {
  std::lock_guard<std::mutex> lock(g->filter_mu);
  RefreshRanges();
  return std::find(g->trigger_addresses.begin(), g->trigger_addresses.end(), ip) !=
         g->trigger_addresses.end();
}

// --filter, PT's IP filtering as the step backend applies it (AppendFilteredStepEvents): the
// state changes only where the flow does, so a block (which ends at its only change of flow)
// runs entirely traced or not. Rewrites `e` for the filter; false: it writes nothing. A branch
// out of the regions is TIP.PGD with its target (a CALL's pushing an entry on the encoder's
// RET-compression stack), a branch in TIP.PGE at its target; an enable (return from the
// kernel, after a signal) only inside them.
bool FilterEvent(const Thread& t, Event& e) {
  const bool tracing = t.enc->tracing();
  switch (e.kind) {
    case EventKind::kTime:
    case EventKind::kTick:
      return true;
    case EventKind::kEnable:
      return InRegion(e.target);
    case EventKind::kDisable:
    case EventKind::kAsyncDisable:
      return tracing;
    default: {
      const bool in = InRegion(e.target);
      if (!tracing) {
        if (in) e = Event::Enable(e.target);
        return in;
      }
      if (!in) e = Event::DisableAt(e);  // a CALL's still pushes a stack entry
      return true;
    }
  }
}

bool GiveTime(Thread& t, bool always = false, uint64_t now = Now());

// Signals' branches that may wait for their frames at once, and events each may hold.
constexpr size_t kMaxPending = 16;
constexpr size_t kMaxHeld = size_t{1} << 20;
void GiveUpOldest(Thread& t);

void Add(Thread& t, const Event& event) {
  if (!t.pending.empty()) {
    // Its time is now, held with it and before it, as below (review of a149bab: given when
    // the held events were written, a late time clamped every older one after it).
    if (event.kind == EventKind::kEnable && !t.replaying) GiveTime(t);
    if (!t.pending.empty()) {  // (GiveTime's may have given up the oldest, the only one)
      t.pending.back().held.push_back(event);
      if (t.pending.back().held.size() > kMaxHeld) GiveUpOldest(t);
      return;
    }
  }
  Event e = event;
  if (g->filtering && !FilterEvent(t, e)) return;
  // Tracing resumes after time the trace does not see: a system call (sweep 30a F2: the return
  // of a 500 ms nanosleep had its entry's time, the second charged to the code after it), a
  // signal's delivery, or under --filter code that ran untraced (its system calls gave no time:
  // OnSyscall gives it only while tracing; sweep 27 T5: a filtered run's time advanced once per
  // 64 KiB of trace). The time now, unless given less than kTimeNs ago, and before the
  // TIP.PGE: a decoder applies a TSC after it only at its next packet, so the wait went to the
  // instructions up to the first branch after the resume (sweep 40a F1: 120 ms of a 300 ms
  // sleep_for to __pthread_disable_asynccancel).
  if (e.kind == EventKind::kEnable && !t.replaying) GiveTime(t);
  if (absl::Status s = t.enc->Add(e); !s.ok()) {
    Fail("encoding thread " + std::to_string(t.tid) + ": " + std::string(s.message()));
    t.traced = false;  // this stream stops; the error is reported
    t.fast = false;
    return;
  }
}

// The time `now` as a TSC packet, if kTimeNs passed since the last one given here (or
// `always`). Whether it gave one.
bool GiveTime(Thread& t, bool always, uint64_t now) {
  if (!always && now - t.timed_at < kTimeNs) return false;
  t.timed_at = now;
  Add(t, Event::Time(now));
  return true;
}

void AddAll(Thread& t) {
  for (const Event& e : t.events) {
    if (!t.traced) break;
    Add(t, e);
  }
  t.events.clear();
}

// The ground truth cannot be written: the first error is said (QemuRegionHeader::truth_failed)
// and no process writes more of it.
void TruthFailed(const std::string& message) {
  if (Header()->truth_failed.exchange(1) == 0) {
    std::snprintf(Header()->truth_error, sizeof(Header()->truth_error), "%s", message.c_str());
  }
}  // (ptrecord reads the text bounded: a process killed within snprintf leaves it cut)

// truth_fd, opened again by its path (O_APPEND, as ptrecord opened it) when it no longer
// names the ground truth's file: the guest closed it, or closed it and opened another file
// there. The guest's descriptor of that number is left alone. Under truth_mu. False when it
// cannot be.
bool CheckTruthFd() {
  struct stat st {};
  if (fstat(g->truth_fd, &st) == 0 && st.st_dev == g->truth_dev && st.st_ino == g->truth_ino) {
    return true;
  }
  const int fd = open(g->truth_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != g->truth_dev || st.st_ino != g->truth_ino) {
    TruthFailed("the program closed its descriptor and " + g->truth_path +
                (fd < 0 ? std::string(" cannot be opened again: ") + std::strerror(errno)
                        : std::string(" is another file now")));
    if (fd >= 0) close(fd);
    return false;
  }
  g->truth_fd = fd;
  return true;
}

void FlushTruth(Thread& t) {
  if (t.truth.empty()) return;
  std::lock_guard<std::mutex> lock(g->truth_mu);
  if (Header()->truth_failed.load(std::memory_order_relaxed) == 0 && CheckTruthFd()) {
    // A short write (the disk filled within it) is written on, to the error that says why.
    for (size_t done = 0; done < t.truth.size();) {
      const ssize_t n = write(g->truth_fd, t.truth.data() + done, t.truth.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n == 0 || errno != EINTR) {  // (0: nothing written, as a full disk; review 39 L4)
        TruthFailed(std::string("write: ") + std::strerror(n == 0 ? ENOSPC : errno));
        break;
      }
    }
  }
  t.truth.clear();
}

// MMAP2 for one guest mapping, as the kernel writes it (inode form; the decoder reads the
// build-id from the file).
// The GNU build-id of the 64-bit ELF file `path` (its NT_GNU_BUILD_ID note, read through the
// program headers' PT_NOTE segments, at most 20 bytes as the kernel's MMAP2 carries), or none.
// Read here, in the guest's mount namespace: a container's path may name another file where
// ptrecord runs (sweep 37c H2: ptrecord identified, archived and decoded that one).
std::vector<uint8_t> ReadBuildIdNote(const std::string& path) {
  std::vector<uint8_t> id;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return id;
  Elf64_Ehdr eh{};
  if (pread(fd, &eh, sizeof(eh), 0) == sizeof(eh) &&
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_phentsize == sizeof(Elf64_Phdr)) {
    for (unsigned i = 0; i < eh.e_phnum && id.empty(); ++i) {
      Elf64_Phdr ph{};
      if (pread(fd, &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph))) !=
          sizeof(ph)) {
        break;
      }
      if (ph.p_type != PT_NOTE || ph.p_filesz > (1u << 16)) continue;
      std::vector<uint8_t> notes(ph.p_filesz);
      if (pread(fd, notes.data(), notes.size(), static_cast<off_t>(ph.p_offset)) !=
          static_cast<ssize_t>(notes.size())) {
        continue;
      }
      for (size_t at = 0; at + sizeof(Elf64_Nhdr) <= notes.size();) {
        Elf64_Nhdr nh{};
        std::memcpy(&nh, notes.data() + at, sizeof(nh));
        const size_t name = at + sizeof(nh), desc = name + ((nh.n_namesz + 3u) & ~3u);
        const size_t next = desc + ((nh.n_descsz + 3u) & ~3u);
        if (next > notes.size() || next <= at) break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            std::memcmp(notes.data() + name, "GNU", 4) == 0 && nh.n_descsz > 0 &&
            nh.n_descsz <= 20) {
          id.assign(notes.data() + desc, notes.data() + desc + nh.n_descsz);
          break;
        }
        at = next;
      }
    }
  }
  close(fd);
  return id;
}

void WriteMmap(Thread& t, uint64_t start, uint64_t len, uint64_t pgoff, uint32_t prot,
               const std::string& path, uint64_t time) {
  ptkit::perf::Mmap2 m;
  m.pid = t.pid;
  m.tid = t.tid;
  m.addr = start;
  m.len = len;
  m.pgoff = pgoff;
  struct stat st {};
  const bool file = !path.empty() && path[0] == '/' && stat(path.c_str(), &st) == 0 &&
                    S_ISREG(st.st_mode) && !path.starts_with("/dev/");
  std::vector<uint8_t> build_id;
  if (file) {
    m.maj = major(st.st_dev);
    m.min = minor(st.st_dev);
    m.ino = st.st_ino;
    // The build-id instead of device and inode, as the kernel writes MMAP2 records for
    // perf record --buildid-mmap: the identity of the file that ran (once per file).
    std::lock_guard<std::mutex> lock(g->code_mu);
    auto [it, first] = g->build_ids.try_emplace(path);
    if (first) it->second = ReadBuildIdNote(path);
    build_id = it->second;
  }
  m.build_id = build_id;
  m.prot = prot;
  m.flags = MAP_PRIVATE;
  m.filename = path.empty() ? std::string_view("//anon") : std::string_view(path);
  m.sample_id = t.out->Sample(time);
  WriteRecord(t, ptkit::perf::EncodeMmap2(m, ptk::QemuSampleLayout()));
  // File code, which the decoder reads from the file; not code of a file no path names (a
  // memfd, "/memfd:NAME (deleted)", or a deleted file) nor of shared memory or a device
  // (/dev/shm, /dev/zero: a review): its blocks are captured as JIT code is (CaptureCode). Before,
  // the decode had a gap there and lost the trace up to the next PSB after it (sweep 37b M2: the
  // rest of the run, 2,893 instructions).
  if (file) {
    std::lock_guard<std::mutex> lock(g->code_mu);
    uint64_t& end = g->file_code[start];
    end = std::max(end, start + len);
  }
}

void WritePoke(Thread& t, const Global::Poke& p) {
  ptkit::perf::TextPoke poke;
  poke.addr = p.addr;
  poke.new_bytes = p.bytes;
  poke.sample_id = t.out->Sample(p.time);
  WriteRecord(t, ptkit::perf::EncodeTextPoke(poke, ptk::QemuSampleLayout()));
}

// Whether `address` is in an executable file range of the MMAP2 records written.
bool InFileCode(uint64_t address) {
  std::lock_guard<std::mutex> lock(g->code_mu);
  auto it = g->file_code.upper_bound(address);
  return it != g->file_code.begin() && address < std::prev(it)->second;
}

// The block [start, end) was translated: where it is no file's code (JIT code, in anonymous
// memory), its bytes go into the sideband as a PERF_RECORD_TEXT_POKE (no old bytes), so that
// the decoder has them though no file does (the kernel path has no such record: perf's jitdump
// is its way). Once per start, size and bytes: code written again at the same place (a JIT
// reusing its memory) is sent again.
void CaptureCode(uint64_t start, uint64_t end) {
  if (end <= start || end - start > 0xffff || InFileCode(start)) return;
  Global::Poke p{start, Now(), std::vector<uint8_t>(end - start)};
  // Guest addresses are host addresses (OnTranslate reads them so too). (A block a thread
  // translates before its StartThread waits in `pokes`; that one checks again against the
  // mappings it writes.)
  iovec local{p.bytes.data(), p.bytes.size()};
  iovec remote{reinterpret_cast<void*>(start), p.bytes.size()};
  if (process_vm_readv(gettid(), &local, 1, &remote, 1, 0) !=
      static_cast<ssize_t>(p.bytes.size())) {
    return;
  }
  Thread* t = t_current;
  const bool now = t != nullptr && t->traced && t->ns_pid == static_cast<uint32_t>(getpid()) &&
                   t->ns_tid == static_cast<uint32_t>(gettid());
  {
    std::lock_guard<std::mutex> lock(g->code_mu);
    auto [it, inserted] = g->poked.try_emplace(start, p.bytes);
    if (!inserted && it->second == p.bytes) return;
    it->second = p.bytes;
    if (!now) return g->pokes.push_back(std::move(p));
  }
  WritePoke(*t, p);
}

// The executable PT_LOAD segments of the ELF file `path`, page-aligned as the loaders map them
// (file range [from, to); `delta`: the address of file offset 0 in a mapping of it, less the
// load bias), and the first PT_LOAD's page-aligned offset and address (where the bias is
// read). None when it is not a readable 64-bit ELF file.
struct ExecSegment {
  uint64_t from = 0, to = 0, delta = 0;
};
struct ExecLayout {
  std::vector<ExecSegment> segments;
  uint64_t first_offset = 0, first_vaddr = 0;
};
ExecLayout ExecutableRanges(const std::string& path) {
  ExecLayout layout;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return layout;
  constexpr uint64_t kPageMask = ~uint64_t{4095};
  Elf64_Ehdr eh{};
  bool first = true;
  if (pread(fd, &eh, sizeof(eh), 0) == sizeof(eh) &&
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_phentsize == sizeof(Elf64_Phdr)) {
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph{};
      if (pread(fd, &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph))) !=
          sizeof(ph)) {
        break;
      }
      if (ph.p_type != PT_LOAD) continue;
      if (first) {
        layout.first_offset = ph.p_offset & kPageMask;
        layout.first_vaddr = ph.p_vaddr & kPageMask;
        first = false;
      }
      if ((ph.p_flags & PF_X) == 0 || ph.p_filesz == 0) continue;
      layout.segments.push_back({ph.p_offset & kPageMask,
                                 (ph.p_offset + ph.p_filesz + 4095) & kPageMask,
                                 (ph.p_vaddr & kPageMask) - (ph.p_offset & kPageMask)});
    }
  }
  close(fd);
  return layout;
}

// The guest's executable file mappings in [lo, hi), from the host's /proc/self/maps (guest
// addresses are host addresses) without the host's own mappings. The host maps guest code
// without PROT_EXEC (it never runs it): the executable part of a mapping is where it maps an
// executable segment of its ELF file. With `anonymous` (the guest made [lo, hi) executable by
// mprotect, as the kernel's MMAP2 says for a mapping that becomes executable), its anonymous
// memory there too, as //anon (JIT code: W^X).
void WriteGuestMappings(Thread& t, uint64_t time, uint64_t lo = 0, uint64_t hi = ~0ull,
                        bool anonymous = false) {
  absl::StatusOr<std::vector<ptkit::record::ProcMapping>> maps =
      ptkit::record::ReadProcMaps("self");
  if (!maps.ok()) return Fail("read /proc/self/maps: " + std::string(maps.status().message()));
  for (const ptkit::record::ProcMapping& m : *maps) {
    if (m.end <= lo || m.start >= hi) continue;
    if (m.path.empty() && anonymous) {
      const uint64_t start = std::max(m.start, lo), end = std::min(m.end, hi);
      WriteMmap(t, start, end - start, 0, PROT_READ | PROT_EXEC, "", time);
      continue;
    }
    if (m.path.empty() || m.path[0] != '/') continue;
    if (g->host_maps.count({m.start, m.end, m.path}) != 0) continue;
    const ExecLayout layout = ExecutableRanges(m.path);
    // The load biases of the file's copies: where a mapping of its first segment's page is (not
    // a writable one: a data segment that shares that file page, mapped a page above).
    std::vector<uint64_t> biases;
    for (const ptkit::record::ProcMapping& z : *maps) {
      if (z.path == m.path && z.offset == layout.first_offset && !(z.prot & PROT_WRITE)) {
        biases.push_back(z.start - layout.first_vaddr);
      }
    }
    for (const auto& [from, to, delta] : layout.segments) {
      // A mapping holds the segment where it maps its file bytes at the segment's addresses
      // (not a neighbour segment's page that shares a file page with it: lld's layout).
      const uint64_t at = m.start - m.offset;
      if (!biases.empty() &&
          std::none_of(biases.begin(), biases.end(), [&](uint64_t b) { return at == b + delta; })) {
        continue;
      }
      // The mapping's file range [m.offset, m.offset + size) against the segment's.
      const uint64_t file_lo = std::max(from, m.offset);
      const uint64_t file_hi = std::min(to, m.offset + (m.end - m.start));
      if (file_lo >= file_hi) continue;
      const uint64_t start = std::max(m.start + (file_lo - m.offset), lo);
      const uint64_t end = std::min(m.start + (file_hi - m.offset), hi);
      if (start >= end) continue;
      WriteMmap(t, start, end - start, m.offset + (start - m.start), PROT_READ | PROT_EXEC, m.path,
                time);
    }
  }
}

ptkit::perf::Task TaskRecord(const Thread& t, bool exit, uint32_t ppid, uint32_t ptid,
                             uint64_t time) {
  ptkit::perf::Task r;
  r.exit = exit;
  r.pid = t.pid;
  r.ppid = ppid;
  r.tid = t.tid;
  r.ptid = ptid;
  r.time = time;
  r.sample_id = t.out->Sample(time);
  return r;
}

// The inode of this process's pid namespace; 0 when /proc/self/ns/pid cannot say.
uint64_t OwnPidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

// Whether this process is in a pid namespace other than ptrecord's (FindRecorderPids).
bool ForeignPids() { return g->recorder_pidns != 0 && g->pidns != g->recorder_pidns; }

// Sets the pid and tid of `t`, which has claimed its slot, to those of ptrecord's pid namespace,
// which every record carries (qemu_ring.h: QemuPidQuestion). In another namespace ptrecord tells
// them while the thread waits; where it cannot, they stay the namespace's, the slot says so
// (namespace_pids) and ptrecord warns (pids_unknown). `hint`: the process it may be there.
void FindRecorderPids(Thread& t, uint32_t hint) {
  if (!ForeignPids()) return;
  const ptk::QemuPidQuestion q{.kind = ptk::kAskThread,
                               .ns_pid = t.ns_pid,
                               .ns_tid = t.ns_tid,
                               .hint = hint,
                               .pidns = g->pidns};
  const std::optional<ptk::QemuPidAnswer> a =
      g->pidns != 0 ? ptk::AskPids(*t.control, q, WaitForReader) : std::nullopt;
  if (!a) {
    // (Once per stream: the program a thread exec'd asks again.)
    if (t.control->namespace_pids.exchange(1) == 0) Header()->pids_unknown.fetch_add(1);
    return;
  }
  t.pid = a->pid;
  t.tid = a->tid;
  g->process_pid = a->pid;
}

// A guest thread's first block (or a fork child's first moment): claims a slot, writes the
// sideband that introduces it and opens its PT stream. `parent` is the forking thread of a
// new process, null for a new thread or the first process. The first thread of a program
// that a traced thread exec'd goes on in that thread's slot (its stream, as a per-task PT
// event's lives on across execve), after COMM (exec) and the new program's mappings.
Thread* StartThread(unsigned vcpu, const Thread* parent) {
  auto* t = new Thread;
  t->pid = t->ns_pid = static_cast<uint32_t>(getpid());
  t->tid = t->ns_tid = static_cast<uint32_t>(gettid());
  t->stream = t->tid;
  g->pidns = OwnPidNamespace();
  t_current = t;
  g->threads[vcpu].store(t, std::memory_order_release);
  ptk::QemuRegionHeader* h = Header();
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    first = std::exchange(g->first_process, false);
  }
  const bool resumed = first && g->resume_slot != ~0u;
  const uint32_t slot = resumed ? g->resume_slot : h->slots_claimed.fetch_add(1);
  if (slot >= h->slot_count) {
    h->threads_refused.fetch_add(1);
    return t;
  }
  absl::StatusOr<ptkit::swpt::PtEncoder> enc = ptkit::swpt::PtEncoder::Create(g->pt);
  if (!enc.ok()) {
    Fail(std::string(enc.status().message()));
    return t;
  }
  t->enc.emplace(*std::move(enc));
  t->slot = slot;
  t->control = ptk::SlotControl(g->region, slot);
  // A fork child's process is not its parent's; the program of a thread that exec'd is in that
  // thread's process.
  FindRecorderPids(*t, resumed ? t->control->pid : parent != nullptr ? 0 : g->process_pid);
  t->stream = t->tid;
  if (resumed) {
    t->stream = t->control->tid;
    t->instructions = t->control->instructions.load(std::memory_order_relaxed);
  } else {
    t->control->pid = t->pid;
    t->control->tid = t->tid;
    t->control->state.store(ptk::kSlotActive, std::memory_order_release);
  }
  t->out.emplace(ptk::SlotRing(g->region, slot), t->pid, t->tid, slot, h->overwrite != 0);
  if (resumed) {
    t->out->Resume(t->control->aux_recorded.load(std::memory_order_acquire));
    t->control->in_syscall.store(0, std::memory_order_relaxed);  // the execve that led here
  }
  t->traced = true;
  if (h->max_instructions != 0) t->budget_end = t->instructions;
  if (g->sample_period != 0) {
    t->next_sample = (t->instructions / g->sample_period + 1) * g->sample_period;
  }
  UpdateFastEnd(*t);
  const uint64_t now = Now();
  if (!resumed) {
    ptkit::perf::ItraceStart is;
    is.pid = t->pid;
    is.tid = t->tid;
    is.sample_id = t->out->Sample(now);
    WriteRecord(*t, ptkit::perf::EncodeItraceStart(is, ptk::QemuSampleLayout()));
  }
  if (first) {
    // The program qemu loaded: as the kernel reports an exec, COMM (exec) then its mappings.
    // Known once the program is loaded (not yet at install time).
    const char* binary = qemu_plugin_path_to_binary();
    g->binary = binary != nullptr ? binary : "";
    std::free(const_cast<char*>(binary));
    std::string name = g->binary.substr(g->binary.rfind('/') + 1);
    if (resumed && t->control->exec_comm[0] != '\0') name = t->control->exec_comm;
    const char* workload_comm = Header()->workload_comm;
    if (!resumed && workload_comm[0] != '\0') {
      name.assign(workload_comm, strnlen(workload_comm, sizeof(Header()->workload_comm) - 1));
    }
    name = name.substr(0, 15);  // TASK_COMM_LEN - 1
    ptkit::perf::Comm c;
    c.pid = t->pid;
    c.tid = t->tid;
    c.comm = name;
    c.exec = true;
    c.sample_id = t->out->Sample(now);
    WriteRecord(*t, ptkit::perf::EncodeComm(c, ptk::QemuSampleLayout()));
    std::lock_guard<std::mutex> lock(g->mu);
    WriteGuestMappings(*t, now);
  } else if (parent != nullptr) {
    WriteRecord(*t, ptkit::perf::EncodeTask(TaskRecord(*t, false, parent->pid, parent->tid, now),
                                            ptk::QemuSampleLayout()));
  } else {
    WriteRecord(*t, ptkit::perf::EncodeTask(TaskRecord(*t, false, t->pid, t->pid, now),
                                            ptk::QemuSampleLayout()));
  }
  // Code captured before the thread could write it (before its first block; a process's first
  // blocks, translated before its mappings were written: file code after all, dropped). A fork
  // child has its parent's JIT code, whose blocks qemu does not translate again: sent again
  // for the child's process.
  std::vector<Global::Poke> pokes;
  {
    std::lock_guard<std::mutex> lock(g->code_mu);
    pokes.swap(g->pokes);
    if (parent != nullptr && parent->pid != t->pid) {
      for (const auto& [start, bytes] : g->poked) pokes.push_back({start, now, bytes});
    }
  }
  for (const Global::Poke& p : pokes) {
    if (!InFileCode(p.addr)) WritePoke(*t, p);
  }
  Add(*t, Event::Time(Now()));
  return t;
}

// The thread's stream ends: pending bytes out, EXIT, slot done. Only the thread itself, or
// anyone while the thread is stopped in a system call that never returns (exit_group, exit).
void Resolve(Thread& t, uint64_t resume);
void CountOwnCall(Thread& t, InsnClass cls, uint64_t next, bool before_signal);

// Where the block `b` goes next when its last instruction needs no trace to say it (0: it
// does, or it is a system call).
uint64_t KnownSuccessor(const Block& b) {
  switch (b.last.cls) {
    case InsnClass::kOther:
      return b.end;
    case InsnClass::kDirectJump:
    case InsnClass::kDirectCall:
      return b.last.target;
    default:
      return 0;
  }
}

// The caller has set the phase to kClosed (the thread never touches its state again).
// `running`: the thread is stopped between two blocks (EndAll's uninstrumented case: qemu stops
// a running vCPU only there), its last block run whole.
void CloseThread(Thread& t, bool running = false) {
  t.fast = false;
  if (g->truth) FlushTruth(t);
  if (!t.traced) return;
  while (!t.pending.empty()) Resolve(t, 0);
  if (t.enc->tracing()) {
    // In a system call: the kernel entry, its IP suppressed. Stopped after a block that ends in
    // an instruction the decoder follows without trace (a direct jump, say): the trace stops
    // before the next block (FUP, TIP.PGD), else the decoder would walk on into it (sweep 27:
    // a thread stopped by another's crash right after pthread_join's jump decoded 6-12
    // instructions the thread never ran, 1 run in 12).
    const uint64_t next = running && t.prev != nullptr ? KnownSuccessor(*t.prev) : 0;
    Add(t, Event::Time(Now()));  // the last instructions' time (OnSyscall says why)
    Add(t, next != 0 ? Event::AsyncDisable(next)
                     : Event::Disable(t.prev ? t.prev->last_ip : 0, 0, true));
  }
  if (absl::Status s = t.enc->Finish(); !s.ok()) Fail(std::string(s.message()));
  Move(t);
  const uint64_t now = Now();
  WriteRecord(
      t, ptkit::perf::EncodeTask(TaskRecord(t, true, t.pid, t.tid, now), ptk::QemuSampleLayout()));
  t.control->instructions.store(t.instructions, std::memory_order_relaxed);
  t.control->state.store(ptk::kSlotDone, std::memory_order_release);
  t.traced = false;
}

void EndThread(Thread& t) {
  if (t.phase.exchange(kClosed) != kClosed) CloseThread(t);
}

Thread* ThreadOf(unsigned vcpu) {
  return vcpu < kMaxVcpus ? g->threads[vcpu].load(std::memory_order_acquire) : nullptr;
}

// While Replay writes held events: the time of the last of them (their PSB+s' time).
thread_local const uint64_t* t_replay_time = nullptr;

// The encoders' clock (PtEncoderOptions::clock, read at each PSB+): now, or while held events
// are written, their time (a PSB+ among them gave the time they were written, at the end of a
// handler that siglongjmp'd: every older time after it was clamped to it, and a 300 ms
// nanosleep among them got none, 2 runs in 120 under load).
uint64_t EncoderClock() { return t_replay_time != nullptr ? *t_replay_time : Now(); }

// While it lives, the encoders' clock is `*time` (the events written are that old).
class HeldClock {
 public:
  explicit HeldClock(const uint64_t* time) : was_(t_replay_time) { t_replay_time = time; }
  ~HeldClock() { t_replay_time = was_; }
  HeldClock(const HeldClock&) = delete;
  HeldClock& operator=(const HeldClock&) = delete;

 private:
  const uint64_t* was_;
};

// Adds the events a pending signal held, with the times they were given then (GiveTime);
// `time`: when the first of them came.
void Replay(Thread& t, const std::vector<Event>& held, uint64_t time) {
  const bool was = t.replaying;
  const HeldClock clock(&time);
  t.replaying = true;
  for (const Event& e : held) {
    if (e.kind == EventKind::kTime) time = e.target;
    Add(t, e);
  }
  t.replaying = was;
}

// The branch of the newest pending signal went to `resume` (or, with resume 0, nobody will
// know: the handler never returned). Writes it, the signal, and the events held since (held in
// turn by the pending signal below, if any).
void Resolve(Thread& t, uint64_t resume) {
  Thread::Pending p = std::move(t.pending.back());
  t.pending.pop_back();
  const HeldClock clock(&p.time);  // the branch came before the signal (a review)
  const Block& b = *p.branch;
  // The frame resumes inside the block, before its branch (and not at a conditional branch's
  // target there): a fault there (a SIGSEGV that the handler fixed), the faulting instruction
  // run again. The trace stops before it, the branch never ran (sweep 30c F4: the block's RET
  // was written before the handler, ending a live frame). (Its block was counted whole.)
  // A block that ends in a direct call may fault at its first instruction too.
  const bool call = b.last.cls == InsnClass::kDirectCall;
  const bool fault = (resume > b.start || (call && resume == b.start)) && resume <= b.last_ip &&
                     !((b.last.cls == InsnClass::kCondBranch || call) && resume == b.last.target);
  if (resume != 0 && !fault &&
      ((b.last.cls == InsnClass::kCondBranch && resume != b.last.target && resume != b.end) ||
       (call && resume != b.last.target))) {
    // Not this signal's frame (its handler left by siglongjmp, and another signal's
    // rt_sigreturn came at its depth): its branch stays unknown.
    resume = 0;
  }
  if (fault) {
    Add(t, Event::AsyncDisable(resume));
  } else if (resume == 0) {
    // Without its outcome the branch cannot be encoded: the trace says the signal came
    // before it (one instruction short), and the run reports it.
    Header()->unresolved_signals.fetch_add(1);
    Add(t, Event::AsyncDisable(b.last_ip));
  } else {
    // (A direct call ran: a call of the pending handler below, if any.)
    if (call) CountOwnCall(t, InsnClass::kDirectCall, resume, /*before_signal=*/true);
    AppendStepEvents(b.last_ip, b.last, resume, t.events);
    t.events.push_back(Event::AsyncDisable(resume));
    AddAll(t);
  }
  // The handler's entry and its time: when the signal came, before what it held; the time
  // before the TIP.PGE (as in Add; sweep 40a F1: the wait the signal interrupted went to the
  // handler).
  Replay(t, {Event::Time(p.time), Event::Enable(p.handler)}, p.time);
  Replay(t, p.held, p.time);
}

// Too many signals' branches wait, or one holds too many events (a handler that never returns
// keeps them all): the oldest is resolved as unknown, writing what it held (the trace lacks
// its branch, one instruction, counted).
void GiveUpOldest(Thread& t) {
  std::vector<Thread::Pending> newer(std::make_move_iterator(t.pending.begin() + 1),
                                     std::make_move_iterator(t.pending.end()));
  t.pending.resize(1);
  Resolve(t, 0);  // no pending now: its events go to the encoder
  t.pending = std::move(newer);
}

// The pending branch to a handler was the program's own (no signal): it went to the handler.
// Writes it and the events held since.
void ResolveAsBranch(Thread& t) {
  const Thread::Pending p = std::move(t.pending.back());
  t.pending.pop_back();
  const HeldClock clock(&p.time);
  AppendStepEvents(p.branch->last_ip, p.branch->last, p.handler, t.events);
  AddAll(t);
  Replay(t, p.held, p.time);
}

// --filter, and the thread runs outside the regions (tracing off, no signal's branch pending).
bool OutsideTheRegions(const Thread& t) {
  return g->filtering && t.pending.empty() && !t.enc->tracing();
}

// The pending handler on top may be one the program called itself: its calls and returns at
// its own depth are counted, so that its own RET is known. Also a call or a return right
// before another signal's handler (sweep 33b F1: a signal right after a direct call inside a
// handler pending on a RET was not counted, the callee's RET was taken for the handler's own,
// and the handler's frame was dropped with no word: 8 of 377 handler runs of a program with a
// profiling timer and SIGUSR1). `before_signal`: a signal's handler follows, not `next`'s
// code; a RET there that might be the handler's own stays unknown.
void CountOwnCall(Thread& t, InsnClass cls, uint64_t next, bool before_signal) {
  if (t.pending.empty() || !t.pending.back().own_possible || t.pending.back().depth != 0) return;
  Thread::Pending& top = t.pending.back();
  if (cls == InsnClass::kDirectCall || cls == InsnClass::kIndirectCall) {
    ++top.calls;
  } else if (cls == InsnClass::kReturn && (top.calls > 0 || !before_signal) && top.calls-- == 0) {
    // The handler returns: to the restorer, it ran for a signal (its rt_sigreturn resolves
    // the branch); anywhere else, the program ran it itself: the branch went to it.
    if (next == top.restorer) {
      top.own_possible = false;
    } else {
      ResolveAsBranch(t);
    }
  }
}

// The block `b` follows `p`: the events of p's last instruction.
void Follow(Thread& t, const Block& p, const Block& b) {
  if (t.in_syscall) {
    t.in_syscall = false;
    if (t.traced) t.control->in_syscall.store(0, std::memory_order_release);
    if (!t.pending.empty()) {
      Thread::Pending& top = t.pending.back();
      if (t.syscall_num == kSysRtSigreturn && IsHandler(b.start)) {
        // The handler returned and another signal came at once (its frame resumes where
        // this one's did): the branch is still unresolved, at the same depth.
      } else if (t.syscall_num == kSysRtSigreturn) {
        if (top.depth == 0) {
          Resolve(t, b.start);
          Add(t, Event::Enable(b.start));
          return;
        }
        --top.depth;
      } else if (b.start != p.end && t.syscall_num != kSysExecve && t.syscall_num != kSysExecveat) {
        ++top.depth;  // a signal delivered at this system call's return
      }
    }
    Add(t, Event::Enable(b.start));
    return;
  }
  const InsnInfo& last = p.last;
  const uint64_t next = b.start;
  switch (last.cls) {
    case InsnClass::kOther:
      if (next == p.end) return;  // a block cut short (size, page): no change of flow
      break;
    case InsnClass::kDirectJump:
      if (next == last.target) {
        // No packet; under --filter it may enter or leave a region.
        if (g->filtering) Add(t, Event::Simple(EventKind::kDirectJump, p.last_ip, next));
        return;
      }
      break;
    case InsnClass::kCondBranch:
      if (next == last.target || next == p.end) {
        Add(t, Event::Cond(p.last_ip, last.size, next != p.end, last.target));
        return;
      }
      break;
    case InsnClass::kDirectCall:
      if (next == last.target) break;
      if (IsFaultHandler(next) && !OutsideTheRegions(t)) {
        // A fault's handler: a fault in the block stopped it before its call (a store that
        // faults; sweep 33a F2: the call was written, and the handler ran on a frame of a
        // callee never entered, the code run again after it above that frame), or a signal
        // came after the call. Its rt_sigreturn tells (Resolve): inside the block, or at the
        // call's target.
        t.pending.push_back(Thread::Pending{&p, next});
        if (t.pending.size() > kMaxPending) GiveUpOldest(t);
        return;
      }
      // A signal after the call: it went to its target first.
      CountOwnCall(t, last.cls, last.target, /*before_signal=*/true);
      AppendStepEvents(p.last_ip, last, last.target, t.events);
      t.events.push_back(Event::AsyncDisable(last.target));
      t.events.push_back(Event::Enable(next));
      if (!t.pending.empty()) ++t.pending.back().depth;
      return AddAll(t);
    case InsnClass::kIndirectJump:
    case InsnClass::kIndirectCall:
    case InsnClass::kReturn:
      // Any target is possible; at a signal handler, a signal may have come right after the
      // branch, or the program went there itself: the handler's RET tells (Pending). Outside
      // the filter regions nothing is written of the branch: either way tracing resumes at
      // the handler where it is in them (FilterEvent).
      if (!IsHandler(next) || OutsideTheRegions(t)) break;
      if (!t.pending.empty()) {
        // One branch waits for its frame already: this one is recorded as going to the
        // handler (its instructions are right, its target is not), and counted. Its signal's
        // rt_sigreturn is not the waiting one's (review of 9ceff33).
        Header()->unresolved_signals.fetch_add(1);
        CountOwnCall(t, last.cls, next, /*before_signal=*/true);
        ++t.pending.back().depth;
        break;
      }
      t.pending.push_back(Thread::Pending{&p, next});
      t.pending.back().restorer = RestorerOf(next);
      t.pending.back().own_possible = t.pending.back().restorer != 0;
      return;
    case InsnClass::kFarBranch:
    case InsnClass::kSyscall:
      break;
  }
  if (last.cls == InsnClass::kCondBranch) {
    // Neither successor: a signal arrived after the branch; its frame knows where it went.
    // Outside the filter regions the branch writes nothing: tracing resumes at the handler
    // where it is in them (sweep 27 T2: the pending branch was never resolved, as the
    // handler's rt_sigreturn ran untraced; the plugin failed at the next such signal).
    if (OutsideTheRegions(t)) return Add(t, Event::Enable(next));
    // Another one may wait (sweep 30c F1: the recording failed at the second such signal
    // while a handler ran, or after one that siglongjmp'ed out).
    t.pending.push_back(Thread::Pending{&p, next});
    if (t.pending.size() > kMaxPending) GiveUpOldest(t);
    return;
  }
  if (last.cls == InsnClass::kOther || last.cls == InsnClass::kDirectJump) {
    // A signal after a plain instruction or a jump: it went where it had to first.
    const uint64_t went = last.cls == InsnClass::kOther ? p.end : last.target;
    if (last.cls == InsnClass::kDirectJump) {
      t.events.push_back(Event::Simple(EventKind::kDirectJump, p.last_ip, went));
    }
    t.events.push_back(Event::AsyncDisable(went));
    t.events.push_back(Event::Enable(next));
    if (!t.pending.empty()) ++t.pending.back().depth;
    return AddAll(t);
  }
  CountOwnCall(t, last.cls, next, /*before_signal=*/false);
  AppendStepEvents(p.last_ip, last, next, t.events);
  AddAll(t);
}

void Stop();
void OnBlockSlow(Thread* t, unsigned int vcpu, const Block& b);
void Periodic(Thread& t);

// The thread went on into the block `b` as the last one's last instruction allows.
[[gnu::always_inline]] inline bool Advance(Thread& t, const Block& b) {
  t.prev = &b;
  t.instructions += b.insns;
  ++t.blocks;
  return true;
}

// Advance, after that instruction's event `e` when it needs no packet now (else false: one
// event in about six fills a packet, which Follow writes).
[[gnu::always_inline]] inline bool AddAndAdvance(Thread& t, const Block& b, const Event& e) {
  return t.enc->AddWithoutPacket(e) && Advance(t, b);
}

// The common case, inline: a traced thread running user code whose last block went where
// its last instruction could go (no signal, no system call). False, with nothing done, for
// everything else (OnBlockSlow). The events are the ones Follow writes. No calls (a tail call
// to OnBlockSlow is OnBlock's only one: no registers to save on the fast path).
[[gnu::always_inline]] inline bool FollowFast(Thread& t, const Block& b) {
  // (Every kCheckBlocks-th block takes the slow path: it checks whether ptrecord asked to stop.)
  if (!t.fast || t.blocks + 1 >= kCheckBlocks || t.instructions + b.insns > t.fast_end ||
      g->closing.load(std::memory_order_relaxed)) {
    return false;
  }
  const Block& p = *t.prev;
  const InsnInfo& last = p.last;
  const uint64_t next = b.start;
  if (g->filtering) {
    // Outside the regions, whatever the flow does there, tracing stays off: nothing to write.
    // Into them, or from them out of them: Follow.
    if (!t.enc->tracing()) {
      if (b.in_region) return false;
      if (last.rep && next == p.last_ip) {
        t.prev = &b;
        return true;
      }
      return Advance(t, b);
    }
    if (!b.in_region) return false;
  }
  switch (last.cls) {
    case InsnClass::kOther:
      if (next == p.end) return Advance(t, b);
      if (last.rep && next == p.last_ip) {
        // A REP string instruction runs again from its own address once per iteration; it
        // retires once.
        t.prev = &b;
        return true;
      }
      return false;
    case InsnClass::kDirectJump:
      return next == last.target && Advance(t, b);
    case InsnClass::kCondBranch:
      return (next == last.target || next == p.end) &&
             AddAndAdvance(t, b, Event::Cond(p.last_ip, last.size, next != p.end, last.target));
    case InsnClass::kDirectCall:
      return next == last.target &&
             AddAndAdvance(t, b, Event::Simple(EventKind::kDirectCall, p.last_ip, next, last.size));
    // (To a signal handler: Follow decides whether a signal came right after the branch.)
    case InsnClass::kIndirectJump:
      return !IsHandler(next) &&
             AddAndAdvance(t, b, Event::Simple(EventKind::kIndirectJump, p.last_ip, next));
    case InsnClass::kIndirectCall:
      return !IsHandler(next) &&
             AddAndAdvance(t, b,
                           Event::Simple(EventKind::kIndirectCall, p.last_ip, next, last.size));
    case InsnClass::kReturn:
      return !IsHandler(next) &&
             AddAndAdvance(t, b, Event::Simple(EventKind::kReturn, p.last_ip, next));
    default:
      return false;
  }
}

void OnBlock(unsigned int vcpu, void* userdata) {
  const Block& b = *static_cast<const Block*>(userdata);
  if (vcpu >= kMaxVcpus) return;
  Thread* t = g->threads[vcpu].load(std::memory_order_acquire);
  if (t != nullptr && FollowFast(*t, b)) return;
  OnBlockSlow(t, vcpu, b);
}

void EnterBlock(Thread* t, const Block& b);

// Whether the thread may run `insns` more instructions under the instruction limit
// (--max-steps): claims them from the count shared by every thread of every process of the
// run. Each block is claimed as it starts, so no thread holds instructions another could
// run: the run stops at the first block, of any thread, that would take the total past the
// limit, and nothing is claimed after that (`limit_hit`; the thread's `limit_next` says how
// many that block has). Slower than chunks (an atomic per block), only with --max-steps.
bool ClaimBudget(Thread& t, uint64_t insns) {
  if (t.instructions + insns <= t.budget_end) return true;
  ptk::QemuRegionHeader* h = Header();
  const uint64_t need = t.instructions + insns - t.budget_end;
  uint64_t claimed = h->instructions_claimed.load();
  do {
    if (h->limit_hit.load(std::memory_order_relaxed) != 0 || claimed + need > h->max_instructions) {
      if (h->limit_hit.exchange(1) == 0) h->limit_next.store(need);
      return false;
    }
  } while (!h->instructions_claimed.compare_exchange_weak(claimed, claimed + need));
  t.budget_end += need;
  UpdateFastEnd(t);
  return true;
}

void StopAtLimit();

// Everything FollowFast does not handle; then whether the next block may take it.
__attribute__((noinline)) void OnBlockSlow(Thread* t, unsigned int vcpu, const Block& b) {
  // qemu-user gives a new thread the lowest free vCPU index: that of a thread that ended
  // (closed, and not this host thread's) is a new thread's.
  if (t == nullptr || (t != t_current && t->phase.load(std::memory_order_relaxed) == kClosed)) {
    t = StartThread(vcpu, nullptr);
  }
  EnterBlock(t, b);
  t->fast = t->traced && !t->in_syscall && t->pending.empty() && t->prev != nullptr &&
            t->phase.load(std::memory_order_relaxed) != kClosed;
}

// The thread `t` enters the block `b`: the general case.
void EnterBlock(Thread* t, const Block& b) {
  if (t->phase.load(std::memory_order_relaxed) == kClosed) return;
  const Block* p = t->prev;
  t->prev = &b;
  if (!t->traced) return;
  if (p == nullptr) {
    if (!ClaimBudget(*t, b.insns)) {
      // The limit is reached before the thread runs at all.
      t->prev = nullptr;
      return StopAtLimit();
    }
    Add(*t, Event::Enable(b.start));
    t->truth_on = t->enc->tracing();
    if (t->instructions + b.insns >= t->next_sample) TakeSamples(*t, b);
    t->instructions += b.insns;
    return;
  }
  // A REP string instruction ends its block and runs again from its own address once per
  // iteration; it retires once.
  if (p->last.rep && b.start == p->last_ip) return;
  Follow(*t, *p, b);
  if (g->filtering) {
    const bool linear = p->last.cls == InsnClass::kOther && b.start == p->end;
    t->truth_on = t->pending.empty() ? t->enc->tracing() : linear ? t->truth_on : b.in_region;
  }
  const bool limit = !ClaimBudget(*t, b.insns);
  if (g->closing.load(std::memory_order_relaxed) || limit ||
      (t->blocks + 1 >= kCheckBlocks &&
       Header()->stop_signal.load(std::memory_order_relaxed) != 0)) {
    // The process is ending (or the instruction limit is reached): this block does not run
    // as far as the trace (and the ground truth) know.
    while (!t->pending.empty()) Resolve(*t, 0);
    if (t->traced && t->enc->tracing()) Add(*t, Event::AsyncDisable(b.start));
    if (g->closing.load(std::memory_order_relaxed)) return EndThread(*t);
    return limit ? StopAtLimit() : Stop();
  }
  if (t->instructions + b.insns >= t->next_sample) TakeSamples(*t, b);
  t->instructions += b.insns;
  if (++t->blocks >= kCheckBlocks) Periodic(*t);
}

// Every kCheckBlocks blocks.
void Periodic(Thread& t) {
  t.blocks = 0;
  if (g->overwrite) FlushForSnapshot(t);
  // A chunk is full, or old: a process that dies of a signal runs no plugin code, so what
  // was not moved is lost; this bounds it to about kMoveNs of the run.
  const uint64_t now = Now();
  if (t.enc->offset() - t.moved >= kChunk || now - t.moved_at > kMoveNs) {
    Add(t, Event::Time(now));
    Move(t);
  }
}

// The ground truth's line for the instruction at `ip`.
struct TruthLine {
  TruthLine(const Thread& t, uint64_t ip)
      : size(static_cast<size_t>(std::snprintf(text, sizeof(text), "%u 0x%llx\n", t.stream,
                                               static_cast<unsigned long long>(ip)))) {}  // NOLINT
  std::string_view view() const { return {text, size}; }
  char text[40];
  size_t size;
};

void OnInsn(unsigned int vcpu, void* userdata) {
  const Insn& i = *static_cast<const Insn*>(userdata);
  Thread* t = ThreadOf(vcpu);
  if (t == nullptr || t->phase.load(std::memory_order_relaxed) == kClosed) return;
  if (i.rep && t->last_truth_ip == i.ip) return;
  // --filter: the instructions the trace holds (the block's state was set at its start).
  if (g->filtering && (!t->traced || !t->truth_on)) return;
  t->last_truth_ip = i.ip;
  // Flushed where a block begins, so that the lines of the block running are in `truth`: a
  // fatal signal takes back the faulting instruction's line, or without crash=1 the block's
  // (OnFatalSignal). (A block that never begins at its first instruction here, --filter's,
  // flushes at 1 MiB.)
  if (t->prev != nullptr && i.ip == t->prev->start) {
    if (t->truth.size() >= (64 << 10)) FlushTruth(*t);
    t->block_truth = t->truth.size();
  } else if (t->truth.size() >= (1 << 20)) {
    FlushTruth(*t);
    t->block_truth = std::string::npos;
  }
  t->truth += TruthLine(*t, i.ip).view();
}

// A block that ends with an instruction QEMU does not implement runs: ptrecord names it if the
// program dies of the SIGILL (the first one, with its bytes from guest memory).
void OnIllegal(unsigned int vcpu, void* userdata) {
  const Block& b = *static_cast<const Block*>(userdata);
  ptk::QemuRegionHeader* h = Header();
  if (Thread* t = ThreadOf(vcpu); t != nullptr && t == t_current && t->traced &&
                                  t->phase.load(std::memory_order_relaxed) == kRunning) {
    // A SIGILL that kills the program runs no plugin code: its trace so far goes to the ring
    // now (pending TNT bits too, as for a snapshot), up to this block.
    if (absl::Status s = t->enc->Flush(); !s.ok()) Fail(std::string(s.message()));
    Move(*t);
  }
  uint64_t none = 0;
  if (!h->illegal_ip.compare_exchange_strong(none, b.end)) return;
  uint8_t bytes[15] = {};
  iovec local{bytes, sizeof(bytes)};
  iovec remote{reinterpret_cast<void*>(b.end), sizeof(bytes)};
  const ssize_t n = process_vm_readv(gettid(), &local, 1, &remote, 1, 0);
  if (n > 0) std::memcpy(h->illegal_bytes, bytes, static_cast<size_t>(n));
}

// --trigger: a thread reaches the trigger's instruction (`userdata`: its address), before it
// runs. Every hit is counted; the first trigger_limit of the run (any thread, any process)
// take a snapshot of this thread: its trace so far goes into its ring (pending TNT bits too)
// and it waits, writing nothing, until ptrecord has copied the ring (it polls every 5 ms).
// The thread's trace is disabled at the trigger first (FUP, TIP.PGD) and enabled there again
// after, as the hardware's is around the uprobe's trap into the untraced kernel: the snapshot
// ends exactly at the trigger, even after a direct call (which has no packet of its own).
void OnTrigger(unsigned int vcpu, void* userdata) {
  Thread* t = ThreadOf(vcpu);
  if (t == nullptr || t != t_current || t->phase.load(std::memory_order_relaxed) != kRunning) {
    return;
  }
  ptk::QemuRegionHeader* h = Header();
  h->trigger_hits.fetch_add(1);
  if (!t->traced || !g->overwrite) return;
  uint64_t taken = h->trigger_taken.load();
  do {
    if (h->trigger_limit != 0 && taken >= h->trigger_limit) return;
  } while (!h->trigger_taken.compare_exchange_weak(taken, taken + 1));
  // (Events held for a signal's unresolved branch stay held: the snapshot ends before them,
  // at the last packet.)
  const uint64_t ip = reinterpret_cast<uintptr_t>(userdata);
  const bool pause = t->pending.empty() && t->enc->tracing();
  if (pause) Add(*t, Event::AsyncDisable(ip));
  if (absl::Status s = t->enc->Flush(); !s.ok()) Fail(std::string(s.message()));
  Move(*t);
  const uint32_t request = t->control->trigger_request.load(std::memory_order_relaxed) + 1;
  t->control->trigger_request.store(request, std::memory_order_release);
  while (t->control->trigger_ack.load(std::memory_order_acquire) != request) {
    // (ptrecord stopped: it copies no more rings but the last round's.)
    if (h->stop_signal.load(std::memory_order_relaxed) != 0 || !WaitForReader()) break;
  }
  if (pause && t->traced) Add(*t, Event::Enable(ip));
}

// crash=1: the thread is about to run the instruction at `userdata` (a fault ends it there).
void OnInsnIp(unsigned int vcpu, void* userdata) {
  if (Thread* t = ThreadOf(vcpu); t != nullptr) t->insn_ip = reinterpret_cast<uintptr_t>(userdata);
}

void OnTranslate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  const size_t n = qemu_plugin_tb_n_insns(tb);
  if (n == 0) return;
  struct qemu_plugin_insn* last = qemu_plugin_tb_get_insn(tb, n - 1);
  Block b;
  b.start = qemu_plugin_tb_vaddr(tb);
  b.last_ip = qemu_plugin_insn_vaddr(last);
  b.insns = static_cast<uint32_t>(n);
  size_t size = qemu_plugin_insn_size(last);
  const auto* data = static_cast<const uint8_t*>(qemu_plugin_insn_data(last));
  uint8_t bytes[15];
  std::memcpy(bytes, data, std::min(size, sizeof(bytes)));
  if ((b.last_ip & 4095) > 4096 - sizeof(bytes)) {
    // QEMU 7.2 gives only the first page's bytes (and length) of an instruction that crosses
    // a page. Guest addresses are host addresses: read them (process_vm_readv stops at an
    // unmapped page instead of faulting; by thread id: the leader may have exited).
    iovec local{bytes, sizeof(bytes)};
    iovec remote{reinterpret_cast<void*>(b.last_ip), sizeof(bytes)};
    const ssize_t n = process_vm_readv(gettid(), &local, 1, &remote, 1, 0);
    if (n > 0) size = static_cast<size_t>(n);
  }
  absl::StatusOr<InsnInfo> info =
      ptk::DecodeInsn(std::span<const uint8_t>(bytes, std::min(size, sizeof(bytes))), b.last_ip);
  if (info.ok() && n > 1 && qemu_plugin_insn_size(last) < info->size) {
    // QEMU 7.2 lists an instruction that crosses into the next page as the block's last, but
    // ends the block before it (it starts the next block): the block runs on into it.
    b.insns = static_cast<uint32_t>(n - 1);
    b.last_ip = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, n - 2));
    b.end = qemu_plugin_insn_vaddr(last);
    b.last = InsnInfo{};
    b.last.size = static_cast<uint8_t>(b.end - b.last_ip);
  } else if (info.ok()) {
    b.last = *info;
    b.end = b.last_ip + info->size;
  } else {
    // QEMU could not decode it either (it gives the bytes it read, e.g. 1 of an EVEX
    // instruction: AVX-512) and translated an illegal-opcode exception: the block runs up to
    // it, then the guest gets SIGILL there.
    b.illegal = true;
    b.end = b.last_ip;
    b.insns = static_cast<uint32_t>(n - 1);
    b.last_ip = n > 1 ? qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, n - 2)) : b.start;
    b.last = InsnInfo{};
    b.last.size = static_cast<uint8_t>(b.end - b.last_ip);
  }
  if (g->sample_period != 0) {
    for (size_t i = 0; i < b.insns; ++i) {
      b.offsets.push_back(
          static_cast<uint16_t>(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i)) - b.start));
    }
  }
  if (g->filtering) b.in_region = InRegion(b.start);
  CaptureCode(b.start, b.end);
  // The instructions that run (an illegal one starts to: it raises SIGILL). QEMU calls an
  // instruction's callbacks before the instruction (after the block's).
  const size_t runs = b.insns + (b.illegal ? 1 : 0);
  for (size_t i = 0; i < runs && (g->trigger || g->crash); ++i) {
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    void* const ip = reinterpret_cast<void*>(qemu_plugin_insn_vaddr(insn));
    if (g->crash)
      qemu_plugin_register_vcpu_insn_exec_cb(insn, OnInsnIp, QEMU_PLUGIN_CB_NO_REGS, ip);
    if (g->trigger && IsTrigger(reinterpret_cast<uintptr_t>(ip))) {
      qemu_plugin_register_vcpu_insn_exec_cb(insn, OnTrigger, QEMU_PLUGIN_CB_NO_REGS, ip);
    }
  }
  std::lock_guard<std::mutex> lock(g->mu);
  g->blocks.push_back(std::move(b));
  qemu_plugin_register_vcpu_tb_exec_cb(tb, OnBlock, QEMU_PLUGIN_CB_NO_REGS, &g->blocks.back());
  if (g->blocks.back().illegal) {
    qemu_plugin_register_vcpu_tb_exec_cb(tb, OnIllegal, QEMU_PLUGIN_CB_NO_REGS, &g->blocks.back());
  }
  if (!g->truth) return;
  const Block& added = g->blocks.back();
  for (size_t i = 0; i < added.insns; ++i) {  // (not an illegal one: it does not retire)
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    const uint64_t ip = qemu_plugin_insn_vaddr(insn);
    const bool rep = i + 1 == added.insns && added.last.rep;
    g->insns.push_back(Insn{ip, rep});
    qemu_plugin_register_vcpu_insn_exec_cb(insn, OnInsn, QEMU_PLUGIN_CB_NO_REGS, &g->insns.back());
  }
}

// Every other thread ends with the process (and the current one too with `with_current`):
// one stopped in a system call is closed here; a running one closes its own stream at its next
// block (its ground truth ends there too) while this waits for it (a while: a thread that does
// not get there in time is cut, counted). `uninstrumented`: the other threads run no plugin
// callback again (OnExit; OnFatalSignal after a core-dumping signal): a running one is closed
// here too, after the last block it entered.
void EndAll(bool with_current = true, bool uninstrumented = false) {
  g->closing.store(true, std::memory_order_relaxed);
  const uint64_t deadline = Now() + 500000000;
  for (unsigned v = 0; v < kMaxVcpus; ++v) {
    Thread* t = g->threads[v].load(std::memory_order_acquire);
    if (t == nullptr || t == t_current) continue;
    for (;;) {
      int expected = kInSyscall;
      if (t->phase.compare_exchange_strong(expected, kClosed)) {
        CloseThread(*t);
        break;
      }
      if (uninstrumented && expected == kRunning &&
          t->phase.compare_exchange_strong(expected, kClosed)) {
        CloseThread(*t, /*running=*/true);
        break;
      }
      if (expected == kClosed) break;
      if (Now() > deadline) {
        if (t->traced) {
          Header()->threads_cut.fetch_add(1);
          t->control->state.store(ptk::kSlotDone, std::memory_order_release);
        }
        break;
      }
      timespec ts{0, 20000};
      nanosleep(&ts, nullptr);
    }
  }
  if (with_current && t_current != nullptr) EndThread(*t_current);
}

// Whether this thread is the first to end the process (Stop, StopAtLimit). Another one that
// gets there meanwhile ends only its own stream and waits to be ended with the process (the
// first one waits for it to do that).
bool FirstToEnd() {
  if (!g->ending.exchange(true)) return true;
  if (t_current != nullptr) EndThread(*t_current);
  for (;;) pause();
}

// ptrecord asked to stop (SIGINT, SIGTERM, SIGHUP): every stream ends here, then the process
// exits as that signal's 128 + N.
void Stop() {
  if (!FirstToEnd()) return;
  EndAll();
  syscall(SYS_exit_group, 128 + static_cast<int>(Header()->stop_signal.load()));
}

// The instruction limit is reached: every stream ends here, then the process dies of SIGKILL
// (as the step backend kills the workload at --max-steps).
void StopAtLimit() {
  Header()->limit_hit.store(1);
  if (!FirstToEnd()) return;
  EndAll();
  syscall(SYS_kill, getpid(), SIGKILL);
}

// --- Exec ------------------------------------------------------------------------------------

// Reads `out.size()` bytes of guest memory at `address` (guest addresses are host addresses;
// process_vm_readv fails on an unmapped page instead of faulting). False when not all could be.
bool ReadGuest(uint64_t address, std::span<uint8_t> out) {
  iovec local{out.data(), out.size()};
  iovec remote{reinterpret_cast<void*>(address), out.size()};
  return process_vm_readv(gettid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(out.size());
}

// A NUL-terminated guest string (read up to each page end, as it may end before an unmapped
// page). False on a fault or past 1 MiB.
bool ReadGuestString(uint64_t address, std::string* out) {
  out->clear();
  while (out->size() < (1 << 20)) {
    uint8_t chunk[256];
    const size_t n = std::min<uint64_t>(sizeof(chunk), 4096 - (address & 4095));
    if (!ReadGuest(address, std::span<uint8_t>(chunk, n))) return false;
    const auto* end = static_cast<const uint8_t*>(std::memchr(chunk, 0, n));
    out->append(reinterpret_cast<const char*>(chunk), end != nullptr ? end - chunk : n);
    if (end != nullptr) return true;
    address += n;
  }
  return false;
}

// The strings of a NULL-terminated guest array of string pointers (none for a null array).
bool ReadGuestStrings(uint64_t address, std::vector<std::string>* out) {
  out->clear();
  for (; address != 0 && out->size() < (1 << 20); address += 8) {
    uint64_t p = 0;
    if (!ReadGuest(address, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&p), 8))) return false;
    if (p == 0) return true;
    out->emplace_back();
    if (!ReadGuestString(p, &out->back())) return false;
  }
  return address == 0;
}

// The path of the file open at guest descriptor `fd` (guest descriptors are qemu's), when that
// path still names it (not a deleted file, a memfd, a pipe). False when it does not.
bool DescriptorPath(int fd, std::string* out) {
  char link[64], target[4096];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  struct stat by_fd {
  }, by_path{};
  if (n <= 0 || target[0] != '/' || fstat(fd, &by_fd) != 0) return false;
  out->assign(target, static_cast<size_t>(n));
  return stat(out->c_str(), &by_path) == 0 && by_path.st_dev == by_fd.st_dev &&
         by_path.st_ino == by_fd.st_ino;
}

// execve(path, argv, envp) or execveat(dirfd, path, argv, envp, flags) with `args`. The file
// execveat names is found as the kernel finds it (fs/exec.c do_execveat_common, alloc_bprm):
// PATH relative to DIRFD unless absolute, the descriptor's own file with AT_EMPTY_PATH and an
// empty PATH, no symlink last with AT_SYMLINK_NOFOLLOW. COMM: the basename of PATH, or with
// AT_EMPTY_PATH the name of the descriptor's file (its dentry's: Linux 6.12, not "N" of
// "/dev/fd/N"). A file named /proc/self/fd/N or /dev/fd/N is that descriptor's (the kernel
// opens it before the exec closes descriptors): followed where a path names it, else (a memfd,
// a deleted file: qemu-x86_64 could not open it after the exec) left to run natively.
ExecPlan PlanExec(int64_t num, const uint64_t args[6], Exec* e) {
  const bool at = num == kSysExecveat;
  const int dirfd = at ? static_cast<int>(args[0]) : AT_FDCWD;
  const uint64_t flags = at ? args[4] : 0;
  std::string path;
  if (!ReadGuestString(args[at ? 1 : 0], &path)) return ExecPlan::kFails;  // EFAULT
  if ((flags & ~uint64_t{AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW}) != 0) {
    return ExecPlan::kFails;  // EINVAL
  }
  bool from_dentry = false;
  if (path.empty()) {
    if ((flags & AT_EMPTY_PATH) == 0) return ExecPlan::kFails;  // ENOENT
    struct stat st {};
    if (fstat(dirfd, &st) != 0) return ExecPlan::kFails;  // EBADF
    // (fexecve of a file without a name: qemu-x86_64 cannot open it after the exec.)
    if (!DescriptorPath(dirfd, &path)) return ExecPlan::kNotFollowed;
    from_dentry = true;
  } else if (path[0] != '/' && dirfd != AT_FDCWD) {
    std::string dir;
    struct stat st {};
    if (fstat(dirfd, &st) != 0) return ExecPlan::kFails;              // EBADF
    if (!S_ISDIR(st.st_mode)) return ExecPlan::kFails;                // ENOTDIR
    if (!DescriptorPath(dirfd, &dir)) return ExecPlan::kNotFollowed;  // a deleted directory
    e->comm = path.substr(path.rfind('/') + 1);
    path = dir + "/" + path;
  }
  if ((flags & AT_SYMLINK_NOFOLLOW) != 0) {
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return ExecPlan::kFails;  // ELOOP
  }
  if (!ReadGuestStrings(args[at ? 2 : 1], &e->argv) ||
      !ReadGuestStrings(args[at ? 3 : 2], &e->envp)) {
    return ExecPlan::kFails;  // EFAULT
  }
  if (e->argv.empty()) e->argv.emplace_back();  // Linux 5.18: an empty argv gets ""
  if (e->comm.empty() || from_dentry) e->comm = path.substr(path.rfind('/') + 1);
  for (const std::string_view dir : {"/proc/self/fd/", "/dev/fd/"}) {
    if (!path.starts_with(dir)) continue;
    const std::string n = path.substr(dir.size());
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) break;
    if (!DescriptorPath(std::atoi(n.c_str()), &path)) return ExecPlan::kNotFollowed;
  }
  // qemu-user runs its own program for /proc/self/exe (the guest means the guest's).
  if (path == "/proc/self/exe" && !g->binary.empty()) path = g->binary;
  e->program = path;  // (PlanFile's when it follows; else the file, for the warning)
  return PlanFile(path, e);
}

bool SetCloseOnExec(int fd, bool on) {
  return fd < 0 || fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0) == 0;
}

// Whether the environment variable `var` ("NAME=VALUE") acts on qemu-x86_64 itself, a
// dynamically linked program that reads QEMU_* options: the dynamic loader's LD_* and glibc's
// tunables.
bool ForTheHost(std::string_view var) {
  const std::string_view name = var.substr(0, var.find('='));
  return name.starts_with("LD_") || name.starts_with("QEMU_") || name == "GLIBC_TUNABLES";
}

// The new qemu-x86_64's environment and options for an exec'd program whose environment is
// `guest`: as native, the program sees `guest`, and qemu sees its own variables that act on it
// (ForTheHost), not the program's (`ldd` sets LD_TRACE_LOADED_OBJECTS for the program it runs,
// stdbuf LD_PRELOAD): the guest's go to it by -E, and qemu's own that it lacks are unset by
// -U. (-E splits its argument at commas: a value with one goes into qemu's environment.)
void GuestEnvironment(const std::vector<std::string>& guest, std::vector<std::string>& env,
                      std::vector<std::string>& options) {
  std::set<std::string_view> names;
  for (const std::string& v : guest) {
    if (!ForTheHost(v) || v.find(',') != std::string::npos) {
      env.push_back(v);
      if (ForTheHost(v)) names.insert(std::string_view(v).substr(0, v.find('=')));
      continue;
    }
    names.insert(std::string_view(v).substr(0, v.find('=')));
    if (std::find(g->host_env.begin(), g->host_env.end(), v) == g->host_env.end()) {
      options.insert(options.end(), {"-E", v});
    }
  }
  for (const std::string& v : g->host_env) {
    const std::string name = v.substr(0, v.find('='));
    if (std::any_of(env.begin(), env.end(),
                    [&](const std::string& e) { return e.substr(0, e.find('=')) == name; })) {
      continue;  // the guest's own, with a comma
    }
    env.push_back(v);
    if (!names.contains(name)) options.insert(options.end(), {"-U", name});
  }
}

// Runs the exec'd program under a new qemu-x86_64 with the plugin, which goes on in `t`'s slot.
// The first program exec'd natively, untraced (the region's unfollowed_program), for
// ptrecord's warning.
void NameUnfollowed(const std::string& program) {
  if (program.empty()) return;
  ptk::QemuRegionHeader* h = Header();
  uint32_t none = 0;
  if (!h->unfollowed_named.compare_exchange_strong(none, 1)) return;
  std::snprintf(h->unfollowed_program, sizeof(h->unfollowed_program), "%s", program.c_str());
  h->unfollowed_named.store(2, std::memory_order_release);
}

// Whether g->region_fd is the ring's memfd, opened again from `ring=` (another number) where
// the guest closed it or put another file there, or else asked of ptrecord at `sock=` (a pid
// namespace with its own /proc, where ring='s /proc/PID is not ptrecord's).
bool RegionFdOpen() {
  struct stat st {};
  if (fstat(g->region_fd, &st) == 0 && st.st_ino == g->region_ino) return true;
  for (int way = 0; way < 2; ++way) {
    const int fd =
        way == 0
            ? (g->region_path.empty() ? -1 : open(g->region_path.c_str(), O_RDWR | O_CLOEXEC))
            : (g->region_socket.empty() ? -1 : ptk::ReceiveRingFd(g->region_socket, WaitForReader));
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == g->region_ino) {
      g->region_fd = fd;
      return true;
    }
    if (fd >= 0) close(fd);
  }
  return false;
}

// Returns only when it could not (the ring's descriptor is gone; that execve failed: E2BIG is
// left to the native call to fail as well).
void FollowExec(Thread& t, const Exec& e) {
  ptk::QemuRegionHeader* h = Header();
  if (!RegionFdOpen()) {
    // The program closed (or reused) the ring's descriptor, and it cannot be opened again: the
    // new program runs natively, untraced, as one qemu cannot run (counted in `execs`,
    // ptrecord warns).
    NameUnfollowed(e.program);
    return;
  }
  std::vector<std::string> args = g->qemu_command;
  std::string plugin = g->plugin_path;
  {
    std::lock_guard<std::mutex> lock(g->truth_mu);
    if (g->truth) CheckTruthFd();  // (opened again: another number)
    for (const std::string& o : g->plugin_options) {
      plugin += "," + (o.starts_with("truth=") ? "truth=" + std::to_string(g->truth_fd)
                       : o.starts_with("fd=")  ? "fd=" + std::to_string(g->region_fd)
                                               : o);
    }
  }
  plugin += ",slot=" + std::to_string(t.slot);
  std::vector<std::string> env;
  GuestEnvironment(e.envp, env, args);
  args.insert(args.end(), {"-plugin", plugin, "-0", e.argv[0], "--", e.program});
  args.insert(args.end(), e.argv.begin() + 1, e.argv.end());
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& v : env) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  std::snprintf(t.control->exec_comm, sizeof(t.control->exec_comm), "%s", e.comm.c_str());
  if (h->max_instructions != 0 && t.budget_end > t.instructions) {
    // The new program claims its own.
    h->instructions_claimed.fetch_sub(t.budget_end - t.instructions);
    t.budget_end = t.instructions;
    UpdateFastEnd(t);
  }
  h->execs.fetch_sub(1);
  h->execs_followed.fetch_add(1);
  SetCloseOnExec(g->region_fd, false);
  SetCloseOnExec(g->truth_fd, false);
  syscall(SYS_execve, argv[0], argv.data(), envp.data());
  const int err = errno;
  SetCloseOnExec(g->region_fd, true);
  SetCloseOnExec(g->truth_fd, true);
  h->execs_followed.fetch_sub(1);
  h->execs.fetch_add(1);
  if (err != E2BIG)
    Fail("exec " + args[0] + " to follow the execve of " + e.program + ": " + std::strerror(err));
}

// A traced thread calls execve or execveat (its TIP.PGD is written). Its trace so far goes to
// the ring whatever happens; counted in `execs` until the call returns (an error).
void OnExec(Thread& t, int64_t num) {
  Exec e;
  const ExecPlan plan = PlanExec(num, t.args, &e);
  ptk::QemuRegionHeader* h = Header();
  h->execs.fetch_add(1);
  if (plan == ExecPlan::kFails) {
    // The native call fails and returns its errno to the guest; nothing else changes.
    return Move(t);
  }
  if (plan == ExecPlan::kNotFollowed) NameUnfollowed(e.program);
  while (!t.pending.empty()) Resolve(t, 0);  // their frames go with the old program
  Move(t);
  // The other threads vanish with the old program: they end now (if the call fails after
  // all, their traces end here anyway).
  EndAll(/*with_current=*/false);
  if (plan == ExecPlan::kFollow) FollowExec(t, e);
}

void OnSyscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2,
               uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8) {
  Thread* t = ThreadOf(vcpu);
  if (t == nullptr || t->phase.load(std::memory_order_relaxed) == kClosed) return;
  t_current = t;
  t->fast = false;
  t->syscall_num = num;
  const uint64_t args[6] = {a1, a2, a3, a4, a5, a6};
  std::memcpy(t->args, args, sizeof(args));
  if (t->traced && t->prev != nullptr && t->enc->tracing()) {
    // intel_pt//u: the kernel entry is TIP.PGD with suppressed IP. The time first (a TSC
    // packet, every kTimeNs): the emulation writes no MTC, so without it the
    // instructions since the last TSC (a short program's whole main, a thread's last ones
    // before exit) would get no time.
    t->syscall_ip = t->prev->last_ip;
    const uint64_t now = Now();
    const bool timed = GiveTime(*t, /*always=*/num == kSysExit || num == kSysExitGroup, now);
    t->untimed_call_at = timed ? 0 : now;
    Add(*t, Event::Disable(t->syscall_ip, 0, /*suppress_ip=*/true));
    t->in_syscall = true;
  }
  if (num == kSysRtSigaction && a2 != 0) {
    // struct sigaction as the x86-64 kernel takes it: handler, flags, restorer, mask. Read
    // now (the call reads it now); installed when the call succeeds.
    constexpr uint64_t kSaRestorer = 0x04000000;
    uint64_t sa[3] = {};
    const bool read = ReadGuest(a2, std::span<uint8_t>(reinterpret_cast<uint8_t*>(sa), sizeof(sa)));
    t->new_handler = read ? sa[0] : 0;
    t->new_restorer = read && (sa[1] & kSaRestorer) != 0 ? sa[2] : 0;
  }
  if (num == kSysExit) return EndThread(*t);
  if (num == kSysExitGroup) return EndAll();
  if (t->traced && (num == kSysExecve || num == kSysExecveat)) OnExec(*t, num);
  if (t->traced) {
    // All its trace goes into the ring now (Stage), and a snapshot taken while the thread is in
    // the call need not wait for it.
    g->overwrite ? Move(*t) : Stage(*t);
    t->control->in_syscall.store(1, std::memory_order_release);
  }
  t->phase.store(kInSyscall, std::memory_order_release);
}

void OnSyscallReturn(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, int64_t ret) {
  Thread* t = ThreadOf(vcpu);
  if (t == nullptr) return;
  int expected = kInSyscall;
  if (!t->phase.compare_exchange_strong(expected, kRunning)) return;
  // (control->in_syscall stays set until the next block runs, in Follow: a signal delivered at
  // the return that ends the process leaves nothing but the ring's bytes.)
  // crash=1: a signal delivered now comes after the system call (its instruction ends a block).
  if (g->crash && t->prev != nullptr) t->insn_ip = t->prev->end;
  if (t->traced && (num == kSysExecve || num == kSysExecveat)) {
    // The call failed: the program goes on (the other threads' streams ended at the call).
    Header()->execs.fetch_sub(1);
    g->closing.store(false, std::memory_order_relaxed);
  }
  if (Header()->stop_signal.load(std::memory_order_relaxed) != 0) return Stop();
  // Another process (or thread) reached --max-steps while this one was in the call.
  if (Header()->limit_hit.load(std::memory_order_relaxed) != 0) return StopAtLimit();
  if (num == kSysRtSigaction && ret == 0 && t->args[1] != 0 && t->args[0] < kSignals) {
    // SIG_DFL (0) and SIG_IGN (1) run no guest code.
    const uint64_t handler = t->new_handler > 1 ? t->new_handler : 0;
    g->handlers[t->args[0]].store(handler, std::memory_order_relaxed);
    g->restorers[t->args[0]].store(t->new_restorer, std::memory_order_relaxed);
    const unsigned bit = HandlerBit(handler);
    if (handler != 0) g->handler_bits[bit / 64].fetch_or(uint64_t{1} << (bit % 64));
  }
  if (num == kSysMmap || num == kSysMprotect || num == kSysMunmap || num == kSysMremap) {
    g->ranges_stale.store(true);  // --filter: the regions may have moved
  }
  // A process forked (a thread's clone returns its tid; a thread's clone3, whose flags are in
  // memory, is counted too: waiting for a thread of a running process costs nothing): ptrecord
  // waits for it while it runs, also before it claims its slot.
  if (num == kSysClone && ret == -EINVAL &&
      (t->args[0] & (CLONE_VM | CLONE_THREAD | CLONE_VFORK)) == CLONE_VM) {
    Header()->clones_refused.fetch_add(1);
  }
  if (ret > 0 && (num == kSysFork || num == kSysVfork || num == kSysClone3 ||
                  (num == kSysClone && (t->args[0] & CLONE_THREAD) == 0))) {
    ptk::QemuRegionHeader* h = Header();
    // The pid the fork returned is in this process's pid namespace: ptrecord tells its own.
    uint32_t pid = static_cast<uint32_t>(ret);
    if (ForeignPids()) {
      const ptk::QemuPidQuestion q{.kind = ptk::kAskChild, .ns_pid = pid, .hint = t->pid};
      std::optional<ptk::QemuPidAnswer> a;
      if (t->traced && t->control->namespace_pids.load(std::memory_order_relaxed) == 0) {
        a = ptk::AskPids(*t->control, q, WaitForReader);
      }
      // Not found (the asker's own pids were not: counted then): not waited for by that pid,
      // which may name another process; the child is once it has its slot.
      pid = a ? a->pid : 0;
    }
    if (pid != 0) h->forked_pids[h->forks.fetch_add(1) % ptk::kQemuForkedPids].store(pid);
  }
  const uint64_t now = Now();
  if (t->traced && t->untimed_call_at != 0 && now - t->untimed_call_at >= kTimeNs) {
    // A call that waited (nanosleep, read) whose entry gave no time, the last TSC being less
    // than kTimeNs before it: the entry's time now, between its TIP.PGD and the TIP.PGE, so that
    // the wait is the call's. Without it the time from that TSC to the return went to the
    // instructions before the call (a 300 ms nanosleep soon after a sigprocmask: 274 ms went
    // to the 500 instructions between them, 8 ms to nanosleep).
    t->timed_at = t->untimed_call_at;
    Add(*t, Event::Time(t->untimed_call_at));
  }
  t->untimed_call_at = 0;
  if (!t->traced || ret < 0) return;
  if (num == kSysMmap && (t->args[2] & PROT_EXEC) != 0) {
    std::string path;
    const int fd = static_cast<int>(t->args[4]);
    if ((t->args[3] & MAP_ANONYMOUS) == 0 && fd >= 0) {
      char link[64], target[4096];
      std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
      const ssize_t n = readlink(link, target, sizeof(target) - 1);
      if (n > 0) path.assign(target, static_cast<size_t>(n));
    }
    WriteMmap(*t, static_cast<uint64_t>(ret), t->args[1], t->args[5], t->args[2], path, now);
    Add(*t, Event::Time(Now()));
  } else if (num == kSysMprotect && (t->args[2] & PROT_EXEC) != 0) {
    std::lock_guard<std::mutex> lock(g->mu);
    WriteGuestMappings(*t, now, t->args[0], t->args[0] + t->args[1], /*anonymous=*/true);
    Add(*t, Event::Time(Now()));
  } else if (num == kSysPrctl && t->args[0] == kPrSetName) {
    // The thread renamed itself: a COMM record, as the kernel writes one (not an exec's). The
    // name was read by the call (guest addresses are host addresses), at most 15 bytes.
    const char* name = reinterpret_cast<const char*>(t->args[1]);
    ptkit::perf::Comm c;
    c.pid = t->pid;
    c.tid = t->tid;
    c.comm = std::string_view(name, strnlen(name, 15));
    c.exec = false;
    c.sample_id = t->out->Sample(now);
    WriteRecord(*t, ptkit::perf::EncodeComm(c, ptk::QemuSampleLayout()));
    Add(*t, Event::Time(Now()));  // the instructions after it are timed after it (perf's comm)
  }
}

// QEMU 7.2 (linux-user) calls the atexit callback from preexit_cleanup() (linux-user/exit.c)
// through qemu_plugin_user_exit() (plugins/core.c), on the thread that calls exit_group, or
// exit as the last thread (linux-user/syscall.c; OnSyscall has closed the streams then). It
// first stops every vCPU (start_exclusive: each leaves cpu_exec at a block boundary),
// unregisters every callback but this one and flushes the translated blocks (tb_flush): from
// then on no plugin callback runs, so a thread still running is closed here, after the last
// block it entered (which it ran to its end).
void OnExit(qemu_plugin_id_t id, void* userdata) {
  EndAll(/*with_current=*/true, /*uninstrumented=*/true);
}

// --- crash=1: a fatal signal ---------------------------------------------------------------
//
// QEMU 7.2 tells a plugin nothing when a guest signal ends the process: dump_core_and_abort()
// (linux-user/signal.c), which runs on the thread that took the signal (for a fault, the
// faulting one) when its default action ends the process, does not call preexit_cleanup()
// (in Debian's 7.2 binary its only callers are exit and exit_group in do_syscall), so no
// atexit callback runs. What it does: gdb_signalled(); for a core-dumping signal (SIGABRT,
// SIGFPE, SIGILL, SIGQUIT, SIGSEGV, SIGTRAP, SIGBUS: core_dump_signal()) stop_all_tasks(),
// i.e. start_exclusive(), which stops every other vCPU at a block boundary for good, and the
// guest core dump (nothing is written under RLIMIT_CORE 0); then sigaction(host_sig, SIG_DFL)
// and kill(getpid(), host_sig), through libc's kill (its PLT), so qemu dies of the guest's
// signal (x86-64 guest and host number signals alike). qemu's only other kill() is
// kill(getpid(), SIGSTOP) for the stop signals; the guest's kill system calls go through
// safe_syscall, not libc. So the plugin puts KillHook in qemu-x86_64's GOT entry of kill
// (HookQemuKill): the dying thread runs it before qemu is gone.

// The signal `sig` ends the process; the current thread took it. Its stream ends at the
// instruction it was at (OnInsnIp, called before each instruction runs: for a fault, the
// faulting one; after the system call when the signal came at its return), as the hardware's
// does at a fault (FUP, TIP.PGD), and its slot says so (QemuSlotControl::crashed); ptrecord
// names the signal qemu dies of. Every other stream ends too: after a core-dumping signal the
// other threads are stopped for good (closed here, after the last block each entered), after
// another one they run on and close their own at their next block (EndAll).
//
// Without crash=1 (full-trace recordings: no callback per instruction, which costs) the plugin
// does not know which instruction of the block running took the signal: the stream ends where
// that block began, its instructions (those before the fault retired) neither counted nor in
// the ground truth, and ptrecord says so (crash_ip, crashed 2). Before, such a stream lost up
// to 20 ms of its end (the trace not yet moved to the ring): the crash path. A signal
// delivered at a system call's return (abort(), SIGPIPE) comes after a whole block: the
// stream is whole (crashed 1, crash_ip after the call).
void OnFatalSignal(int sig) {
  Thread* t = t_current;
  if (t != nullptr && t->traced && !g->ending.exchange(true) && t->phase.load() == kRunning) {
    uint64_t ip = t->insn_ip;
    // At a system call's return (abort()'s tgkill, SIGPIPE from write(2), a signal from
    // outside while it waited; the next block has not begun): the block that made the call
    // retired, and its trace is in the ring. The thread died right after it.
    const bool at_return = t->in_syscall && t->prev != nullptr;
    if (at_return) {
      ip = t->prev->end;
    } else if (g->crash) {
      // The instruction did not retire: the ground truth (written before it ran) drops it.
      if (const TruthLine line(*t, ip); t->truth.ends_with(line.view())) {
        t->truth.resize(t->truth.size() - line.size);
      }
    } else if (t->prev != nullptr) {
      ip = t->prev->start;
      t->instructions -= std::min<uint64_t>(t->instructions, t->prev->insns);
      if (g->truth && t->block_truth != std::string::npos && t->last_truth_ip >= ip &&
          t->last_truth_ip < t->prev->end) {
        t->truth.resize(std::min(t->truth.size(), t->block_truth));
      }
    }
    while (!t->pending.empty()) Resolve(*t, 0);
    if (t->enc->tracing() && ip != 0) Add(*t, Event::AsyncDisable(ip));
    t->control->crash_ip = ip;
    t->control->crashed.store(g->crash || at_return ? 1 : 2, std::memory_order_release);
  }
  const bool core = sig == SIGABRT || sig == SIGFPE || sig == SIGILL || sig == SIGQUIT ||
                    sig == SIGSEGV || sig == SIGTRAP || sig == SIGBUS;
  EndAll(/*with_current=*/true, /*uninstrumented=*/core);
}

int KillHook(pid_t pid, int sig) {
  if (pid == getpid() && sig != SIGSTOP && sig != 0) OnFatalSignal(sig);
  return kill(pid, sig);  // the plugin's own reference: libc's
}

// Points qemu-x86_64's GOT entry of kill (a JUMP_SLOT or GLOB_DAT relocation of its dynamic
// symbol "kill", in the executable: dl_iterate_phdr's first object) at KillHook. False when
// there is none, or the page cannot be written (it is RELRO: made writable for the store).
bool HookQemuKill() {
  uint64_t* slot = nullptr;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        const ElfW(Dyn)* dyn = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          }
        }
        if (dyn == nullptr) return 1;
        // ld.so has relocated these in place (glibc); an unrelocated one is a link-time address.
        auto at = [info](ElfW(Addr) a) { return a < info->dlpi_addr ? a + info->dlpi_addr : a; };
        const ElfW(Sym)* symtab = nullptr;
        const char* strtab = nullptr;
        std::pair<const ElfW(Rela)*, size_t> tables[2] = {};
        for (; dyn->d_tag != DT_NULL; ++dyn) {
          const ElfW(Addr) v = dyn->d_un.d_ptr;
          if (dyn->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(at(v));
          if (dyn->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(at(v));
          if (dyn->d_tag == DT_JMPREL) tables[0].first = reinterpret_cast<const ElfW(Rela)*>(at(v));
          if (dyn->d_tag == DT_PLTRELSZ) tables[0].second = dyn->d_un.d_val / sizeof(ElfW(Rela));
          if (dyn->d_tag == DT_RELA) tables[1].first = reinterpret_cast<const ElfW(Rela)*>(at(v));
          if (dyn->d_tag == DT_RELASZ) tables[1].second = dyn->d_un.d_val / sizeof(ElfW(Rela));
        }
        if (symtab == nullptr || strtab == nullptr) return 1;
        for (const auto& [rela, n] : tables) {
          for (size_t i = 0; rela != nullptr && i < n; ++i) {
            const uint64_t type = ELF64_R_TYPE(rela[i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            if (std::strcmp(strtab + symtab[ELF64_R_SYM(rela[i].r_info)].st_name, "kill") != 0) {
              continue;
            }
            *static_cast<uint64_t**>(data) =
                reinterpret_cast<uint64_t*>(info->dlpi_addr + rela[i].r_offset);
            return 1;
          }
        }
        return 1;  // only the executable
      },
      &slot);
  if (slot == nullptr) return false;
  auto* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~uintptr_t{4095});
  if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0) return false;
  *slot = reinterpret_cast<uint64_t>(&KillHook);
  mprotect(page, 4096, PROT_READ);  // (RELRO again; a failure leaves it writable, harmless)
  return true;
}

// In a fork child: only the forking thread lives on, in a new process with a new stream.
void AfterForkInChild() {
  Thread* parent = t_current;
  if (parent == nullptr) return;
  unsigned vcpu = kMaxVcpus;
  for (unsigned v = 0; v < kMaxVcpus; ++v) {
    Thread* t = g->threads[v].load(std::memory_order_relaxed);
    if (t == parent) vcpu = v;
    // The other threads do not exist here; their streams belong to the parent (leaked: the
    // child never touches them again).
    g->threads[v].store(nullptr, std::memory_order_relaxed);
  }
  if (vcpu == kMaxVcpus) return;
  parent->truth.clear();  // the parent writes its own lines
  Thread* t = StartThread(vcpu, parent);
  t->prev = parent->prev;
  t->phase.store(kInSyscall);
  t->in_syscall = true;  // the child returns from fork(): TIP.PGE at its next block
  t->syscall_num = parent->syscall_num;
}

bool ParseOption(std::string_view arg, std::string_view name, uint64_t max, uint64_t* out) {
  if (arg.substr(0, name.size() + 1) != std::string(name) + "=") return false;
  const std::string value(arg.substr(name.size() + 1));
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);  // NOLINT
  if (value.empty() || *end != '\0' || v > max) {
    std::fprintf(stderr, "ptkit qemu plugin: bad option '%.*s'\n", static_cast<int>(arg.size()),
                 arg.data());
    std::exit(1);
  }
  *out = v;
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                                          const qemu_info_t* info,
                                                                          int argc, char** argv) {
  if (info->system_emulation || std::string_view(info->target_name) != "x86_64") {
    std::fprintf(stderr, "ptkit qemu plugin: needs qemu-x86_64 (user mode), not %s%s\n",
                 info->target_name, info->system_emulation ? " system emulation" : "");
    return 1;
  }
  g = new Global;
  g->pt.tsc = true;
  g->pt.clock = EncoderClock;  // time is given at system calls only: each PSB+ reads the clock
  uint64_t fd = ~0ull, truth = ~0ull, slot = ~0ull;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a(argv[i]);
    uint64_t v = 0;
    if (ParseOption(a, "slot", 1 << 20, &slot)) {
      g->resume_slot = static_cast<uint32_t>(slot);
      continue;  // (not handed on: an exec'd program's qemu is told its own)
    }
    g->plugin_options.emplace_back(a);
    if (a.starts_with("ring=")) {
      g->region_path = std::string(a.substr(5));
    } else if (a.starts_with("sock=")) {
      g->region_socket = std::string(a.substr(5));
    } else if (ParseOption(a, "fd", 1 << 20, &fd) || ParseOption(a, "truth", 1 << 20, &truth)) {
    } else if (ParseOption(a, "noretcomp", 1, &v)) {
      g->pt.ret_compression = v == 0;
    } else if (ParseOption(a, "psb_period", 15, &v)) {
      g->pt.psb_period = static_cast<uint8_t>(v);
    } else if (ParseOption(a, "tsc", 1, &v)) {
      g->pt.tsc = v != 0;
    } else if (ParseOption(a, "max_tnt", 47, &v)) {
      g->pt.max_tnt_bits = static_cast<uint8_t>(v);
    } else if (ParseOption(a, "crash", 1, &v)) {
      g->crash = v != 0;
    } else if (ParseOption(a, "pidns", ~0ull, &v)) {
      g->recorder_pidns = v;
    } else if (a.starts_with("trigger=")) {
      // trigger=0xOFFSET@FILE
      Global::Filter f;
      const std::string text(a.substr(8));
      char* end = nullptr;
      f.offset = std::strtoull(text.c_str(), &end, 16);
      if (end == text.c_str() || *end != '@' || end[1] != '/') {
        std::fprintf(stderr, "ptkit qemu plugin: bad option '%s' (trigger=0xOFFSET@/FILE)\n",
                     argv[i]);
        return 1;
      }
      f.file = end + 1;
      g->trigger = std::move(f);
    } else if (a.starts_with("filter=")) {
      // filter=0xOFFSET/0xSIZE@FILE
      Global::Filter f;
      const std::string text(a.substr(7));
      char* end = nullptr;
      f.offset = std::strtoull(text.c_str(), &end, 16);
      if (*end == '/') f.size = std::strtoull(end + 1, &end, 16);
      if (*end != '@' || end[1] != '/' || f.size == 0) {
        std::fprintf(stderr, "ptkit qemu plugin: bad option '%s' (filter=0xOFFSET/0xSIZE@/FILE)\n",
                     argv[i]);
        return 1;
      }
      f.file = end + 1;
      g->filters.push_back(std::move(f));
      g->filtering = true;
    } else {
      std::fprintf(stderr, "ptkit qemu plugin: unknown option '%s'\n", argv[i]);
      return 1;
    }
  }
  if (fd == ~0ull) {
    std::fprintf(stderr,
                 "ptkit qemu plugin: needs fd=N (run it through ptrecord --emulate=qemu)\n");
    return 1;
  }
  struct stat st {};
  if (fstat(static_cast<int>(fd), &st) != 0) {
    std::fprintf(stderr, "ptkit qemu plugin: fd %llu: %s\n", static_cast<unsigned long long>(fd),
                 std::strerror(errno));
    return 1;
  }
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                   static_cast<int>(fd), 0);
  // Kept for the qemu of a program the guest exec's, and closed in any other program.
  g->region_fd = static_cast<int>(fd);
  g->region_ino = st.st_ino;
  SetCloseOnExec(g->region_fd, true);
  if (map == MAP_FAILED) {
    std::fprintf(stderr, "ptkit qemu plugin: mmap the shared ring: %s\n", std::strerror(errno));
    return 1;
  }
  g->region = static_cast<uint8_t*>(map);
  g->region_size = static_cast<uint64_t>(st.st_size);
  if (absl::Status s = ptk::CheckQemuRegion(g->region, g->region_size); !s.ok()) {
    std::fprintf(stderr, "ptkit qemu plugin: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  g->overwrite = ptk::RegionHeader(g->region)->overwrite != 0;
  g->sample_period = ptk::RegionHeader(g->region)->sample_period;
  g->sample_size = ptk::RegionHeader(g->region)->aux_sample_size;
  if (truth != ~0ull) {
    g->truth_fd = static_cast<int>(truth);
    g->truth = true;
    SetCloseOnExec(g->truth_fd, true);
    struct stat tst {};
    char link[64], target[4096];
    std::snprintf(link, sizeof(link), "/proc/self/fd/%d", g->truth_fd);
    const ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (fstat(g->truth_fd, &tst) != 0 || n <= 0) {
      std::fprintf(stderr, "ptkit qemu plugin: truth=%d: %s\n", g->truth_fd, std::strerror(errno));
      return 1;
    }
    g->truth_dev = tst.st_dev;
    g->truth_ino = tst.st_ino;
    g->truth_path.assign(target, static_cast<size_t>(n));
  }
  if (g->resume_slot != ~0u && g->resume_slot >= ptk::RegionHeader(g->region)->slot_count) {
    std::fprintf(stderr, "ptkit qemu plugin: slot=%u: the ring has %u slots\n", g->resume_slot,
                 ptk::RegionHeader(g->region)->slot_count);
    return 1;
  }
  // How qemu was started: its path and the options before -plugin (ptrecord puts -plugin
  // last), and the plugin's path (the option's text up to its first comma).
  {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    std::vector<std::string> words;
    for (size_t at = 0; at < cmdline.size();) {
      const size_t end = std::min(cmdline.find('\0', at), cmdline.size());
      words.push_back(cmdline.substr(at, end - at));
      at = end + 1;
    }
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) g->qemu_command.emplace_back(self, static_cast<size_t>(n));
    for (size_t i = 1; i < words.size(); ++i) {
      if (words[i] == "-plugin" || words[i] == "--plugin") {
        if (i + 1 < words.size()) g->plugin_path = words[i + 1].substr(0, words[i + 1].find(','));
        break;
      }
      if (words[i] == "-E" || words[i] == "-U") {
        ++i;  // the guest environment FollowExec gave this qemu: the next one gets its own
        continue;
      }
      g->qemu_command.push_back(words[i]);
    }
    for (char** v = environ; *v != nullptr; ++v) {
      if (ForTheHost(*v)) g->host_env.emplace_back(*v);
    }
    if (g->plugin_path.starts_with("file=")) g->plugin_path = g->plugin_path.substr(5);
  }
  if (absl::StatusOr<std::vector<ptkit::record::ProcMapping>> maps =
          ptkit::record::ReadProcMaps("self");
      maps.ok()) {
    for (const ptkit::record::ProcMapping& m : *maps) g->host_maps.insert({m.start, m.end, m.path});
  }
  // Every recording hooks qemu's kill (a fatal signal's trace flushed); only --snapshot-on-crash
  // needs it (without, a fatal signal loses the stream's last bytes, and ptrecord says so).
  if (!HookQemuKill() && g->crash) {
    Fail(
        "--snapshot-on-crash: qemu-x86_64 calls no libc kill() this plugin can hook (not QEMU "
        "7.2's linux-user?)");
    return 1;
  }
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
  qemu_plugin_register_vcpu_tb_trans_cb(id, OnTranslate);
  qemu_plugin_register_vcpu_syscall_cb(id, OnSyscall);
  qemu_plugin_register_vcpu_syscall_ret_cb(id, OnSyscallReturn);
  qemu_plugin_register_atexit_cb(id, OnExit, nullptr);
  return 0;
}
