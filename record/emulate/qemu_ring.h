// SPDX-License-Identifier: Apache-2.0
//
// The shared memory between `ptrecord --emulate=qemu` and its QEMU plugin
// (qemu_plugin/ptkit_qemu.cc): one region, made by ptrecord (a memfd the plugin inherits and
// maps), holding a header page and `slot_count` slots. A slot is one guest thread's stream,
// laid out exactly like a perf mmap of a per-thread Intel PT event after its control page:
//
//   [control page][perf_event_mmap_page][data ring (sideband records)][AUX ring (PT bytes)]
//
// so that ptrecord drains every slot with the same Drainer as a kernel event. The plugin is
// the "kernel": it writes PT bytes into the AUX ring and PERF_RECORD_AUX / MMAP2 / COMM /
// FORK / EXIT records into the data ring, with the kernel's ordering rules (record/ring.h).
// Full-trace mode: a full ring makes the plugin wait for the reader (it never overwrites
// unread data, so nothing is lost while ptrecord drains). Overwrite mode (--snapshot,
// --aux-sample): the AUX rings wrap freely, as a kernel AUX area mapped read-only; the
// sideband still never overwrites.
//
// A guest thread claims the next free slot (atomic counter in the header, shared by the
// processes a fork makes: the mapping is MAP_SHARED, so children see the same region). A
// program a traced thread exec's runs under a new qemu-x86_64 with the plugin, which is told
// the slot and goes on writing it (as a per-task PT event lives on across execve).
#ifndef PTKIT_RECORD_EMULATE_QEMU_RING_H_
#define PTKIT_RECORD_EMULATE_QEMU_RING_H_

#include <linux/perf_event.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "ptkit/perf_records.h"
#include "ptkit/scoped_fd.h"
#include "record/aux_sample.h"
#include "record/ring.h"
#include "record/trace_source.h"

namespace ptkit::emulate {

inline constexpr uint64_t kQemuRegionMagic = 0x31475249514b5450;  // "PTKQIRG1"
inline constexpr uint32_t kQemuRegionVersion = 13;

// What the plugin exports as `ptkit_qemu_abi` (extern "C"), so that ptrecord can check a
// plugin file before it runs qemu (CheckQemuPlugin): ptkit's, with this region version.
struct QemuPluginAbi {
  char tag[16];  // kQemuPluginAbiTag
  uint32_t region_version;
};
inline constexpr char kQemuPluginAbiTag[16] = "ptkit-qemu-abi:";
inline constexpr char kQemuPluginAbiSymbol[] = "ptkit_qemu_abi";
inline constexpr uint64_t kQemuPage = 4096;

// Slot states.
enum QemuSlotState : uint32_t { kSlotFree = 0, kSlotActive = 1, kSlotDone = 2 };

struct QemuRegionHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint64_t slot_size;                     // bytes, a multiple of the page
  uint64_t data_size;                     // bytes of each data ring (power of two)
  uint64_t aux_size;                      // bytes of each AUX ring (power of two)
  std::atomic<uint32_t> slots_claimed;    // next slot to claim (may exceed slot_count)
  std::atomic<uint32_t> threads_refused;  // threads that found no slot: not traced
  std::atomic<uint32_t> threads_cut;      // streams that end without their last bytes
  // Signals after a Jcc whose handler never returned: the trace lacks that Jcc.
  std::atomic<uint32_t> unresolved_signals;
  // execve calls that may succeed and were not followed (the new program is not one
  // qemu-x86_64 runs): if one succeeds, that program runs natively, untraced.
  std::atomic<uint32_t> execs;
  std::atomic<uint32_t> execs_followed;  // programs exec'd under qemu with the plugin
  // Set by ptrecord to the signal that stops the recording: the plugin ends every stream and
  // exits with 128 + it.
  std::atomic<uint32_t> stop_signal;
  std::atomic<uint32_t> has_error;  // `error` is set (first error only)
  char error[1024];                 // the plugin's first error, NUL-terminated
  // --max-steps: set by ptrecord before qemu starts (0: no limit). Every thread of every
  // process of the run claims each block's instructions from it as the block starts
  // (`instructions_claimed`); the first block that would take the total past it does not run
  // (`limit_next`: its instructions), nothing is claimed after it (`limit_hit`), and each
  // process ends its streams and kills itself at its threads' next block or system call
  // return.
  uint64_t max_instructions;
  std::atomic<uint64_t> instructions_claimed;
  std::atomic<uint32_t> limit_hit;
  std::atomic<uint64_t> limit_next;
  // Set by ptrecord before qemu starts. overwrite: the AUX rings are overwritten (snapshot
  // and AUX-sample modes). aux_sample_size / sample_period: --aux-sample (0: none): every
  // sample_period instructions of a thread, a PERF_RECORD_SAMPLE (kQemuAuxSampleType) with
  // the newest aux_sample_size bytes of its AUX ring.
  uint32_t overwrite;
  uint64_t aux_sample_size;
  uint64_t sample_period;
  // Snapshot mode: ptrecord bumps it to ask every running thread to flush its trace into
  // its ring (each says so in QemuSlotControl::snapshot_ack).
  std::atomic<uint32_t> snapshot_request;
  // The first instruction QEMU does not implement that a block ran into (0: none; it raises
  // SIGILL there) and its bytes (15, from guest memory).
  std::atomic<uint64_t> illegal_ip;
  uint8_t illegal_bytes[16];
  // --trigger (the plugin's trigger=0xOFFSET@FILE option): every guest thread that reaches
  // that instruction counts a hit; the first trigger_limit hits (0: all) of any thread or
  // process take a snapshot of their thread (QemuSlotControl::trigger_request).
  uint64_t trigger_limit;
  std::atomic<uint64_t> trigger_hits;
  std::atomic<uint64_t> trigger_taken;  // hits that took a snapshot
  // Set by ptrecord before qemu starts: the workload's COMM as the kernel would set it, the
  // basename of the file it was asked to run (a #! script's, where qemu loads its interpreter),
  // NUL-terminated. Empty: the loaded program's.
  char workload_comm[16];
  // The program of the first execve counted in `execs` (NUL-terminated, cut at 255 bytes), set
  // once by whoever sets unfollowed_named from 0 to 1 (then 2 when written).
  std::atomic<uint32_t> unfollowed_named;
  char unfollowed_program[256];
  // The processes the guest forked, as the parent's fork, vfork or clone (not of a thread)
  // returned their pids: entry forks % kQemuForkedPids. A child claims its slot only when it
  // first runs (AfterForkInChild), after its parent may have exited: ptrecord waits for these
  // too while they run (a daemon's grandchild under load). Recent forks only: it matters until
  // the child has its slot.
  std::atomic<uint32_t> forks;
  std::atomic<uint32_t> forked_pids[64];
  // clone calls with CLONE_VM but not CLONE_THREAD (nor CLONE_VFORK, which qemu runs as a
  // fork) that failed with EINVAL: qemu-user creates no such process, the kernel would have.
  std::atomic<uint32_t> clones_refused;
  // ptrecord's drain passes (one at least every kDrainIntervalMs): a plugin waiting for room in
  // a full ring looks at reader_alive only when they stopped.
  std::atomic<uint64_t> reader_passes;
  // Held by ptrecord's draining thread for the whole run (HoldReaderAlive): a robust,
  // process-shared mutex, so the kernel marks it owner-dead when ptrecord dies, whatever pid
  // namespace either side is in. A plugin waits for room in a full ring for as long as ptrecord
  // holds it (stopped by SIGSTOP or a debugger, or blocked writing its output: nothing is lost,
  // the workload waits) and gives up only when ptrecord is gone (ReaderGone). Not the parent
  // being init (a pid namespace's processes and a daemon's have parent 1 while ptrecord drains:
  // sweep 37c M1), nor 30 s without a drain pass (a ptrecord stopped that long was taken for
  // gone, the rest of the run untraced and the recording ended with an error: sweep 38b M3).
  pthread_mutex_t reader_alive;
  // The ground truth could not be written (its disk filled, the program closed its descriptor
  // and the file cannot be opened again): set once, with the first such error, NUL-terminated.
  // The plugin writes no more of it; ptrecord finishes the recording (the trace is whole) and
  // warns that the ground truth is cut. It failed the whole recording (sweep 38b L2).
  std::atomic<uint32_t> truth_failed;
  char truth_error[512];
  // Streams of threads of a pid namespace other than ptrecord's whose pids ptrecord could not
  // tell (QemuPidQuestion): they keep their namespace's in the recording.
  std::atomic<uint32_t> pids_unknown;
};
inline constexpr uint32_t kQemuForkedPids = 64;
static_assert(sizeof(QemuRegionHeader) <= kQemuPage);
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free);

// Pids in another pid namespace. The plugin's getpid() and gettid() are those of the guest's pid
// namespace, but every record carries those of ptrecord's, as the kernel's, --emulate=step's and
// every tool's outside have them: in a pid namespace of its own (unshare --pid, a container) a
// guest's pids name other processes, or none, and two namespaces' pids collide (sweep 37c H1).
// A guest process that is not in ptrecord's pid namespace (QEMU option pidns=, the inode of
// ptrecord's) asks ptrecord in its slot (QemuSlotControl::question), which answers from its
// /proc (guest_pids.h), and waits for the answer: the task asked about lives meanwhile.
enum QemuPidQuestionKind : uint32_t {
  kAskThread = 1,  // the asking thread: ns_pid, ns_tid its getpid(), gettid(); pidns its namespace
  kAskChild = 2,   // the process the asking thread forked: ns_pid what the fork returned
};
struct QemuPidQuestion {
  uint32_t kind = 0;  // QemuPidQuestionKind
  uint32_t ns_pid = 0, ns_tid = 0;
  // kAskThread: the process it may be in ptrecord's namespace (0: none known); kAskChild: the
  // asking process there.
  uint32_t hint = 0;
  uint64_t pidns = 0;  // kAskThread: the inode of the asker's pid namespace
};
struct QemuPidAnswer {
  uint32_t pid = 0, tid = 0;  // in ptrecord's pid namespace; 0: none found
};

// The first page of a slot.
struct QemuSlotControl {
  std::atomic<uint32_t> state;         // QemuSlotState
  uint32_t pid, tid;                   // valid once state != kSlotFree; tid names the stream
  std::atomic<uint64_t> instructions;  // retired so far (published at each chunk and at the end)
  // The COMM of the program the thread exec's (the kernel's: the basename of the file
  // execve was given, also for a script), for the qemu-x86_64 that runs it.
  char exec_comm[16];
  // Snapshot mode. snapshot_ack: the last snapshot_request whose trace the thread has put
  // into its ring. in_syscall: the thread is in a system call, its trace all in the ring
  // (it writes none before it returns). writing / reading: the plugin writes the AUX ring,
  // ptrecord copies it (each sets its flag, then waits while the other's is set).
  std::atomic<uint32_t> snapshot_ack;
  std::atomic<uint32_t> in_syscall;
  std::atomic<uint32_t> writing;
  std::atomic<uint32_t> reading;
  // --trigger: the thread reached the trigger, put its trace into its ring and bumped
  // trigger_request; it waits (writing nothing) until ptrecord has copied the ring as a
  // snapshot and set trigger_ack to the same value.
  std::atomic<uint32_t> trigger_request;
  std::atomic<uint32_t> trigger_ack;
  // This thread took the signal that ended its process (QEMU's exit path for a fatal guest
  // signal ran the plugin's hook of its kill() on it). 1 (--snapshot-on-crash, the plugin's
  // crash=1 option), or at a system call's return (the call's block retired): at the
  // instruction crash_ip, where its stream ends. 2 (without crash=1, elsewhere): in the
  // block that begins at crash_ip, where its stream ends (the plugin does not know the
  // instruction). The signal is the one qemu then dies of (ptrecord's waitpid).
  std::atomic<uint32_t> crashed;
  uint64_t crash_ip;
  // The AUX bytes that PERF_RECORD_AUX records in the data ring cover; those after it up to
  // the user page's aux_head were staged (QemuSlotWriter::StageTrace) at a system call: the
  // next record covers them, or ptrecord writes one (RecordStaged) when the process died in
  // that call (qemu-user runs no plugin code at a fatal signal).
  std::atomic<uint64_t> aux_recorded;
  // The slot's thread asks ptrecord about pids (QemuPidQuestion): `asked` counts its questions;
  // ptrecord writes `answer`, then sets `answered` to `asked` (AskPids, AnswerPids).
  std::atomic<uint32_t> asked;
  std::atomic<uint32_t> answered;
  QemuPidQuestion question;
  QemuPidAnswer answer;
  // `pid` and `tid` are those of the thread's own pid namespace, not ptrecord's (it could not
  // tell those: QemuRegionHeader::pids_unknown): ptrecord neither waits for nor signals it by
  // them.
  std::atomic<uint32_t> namespace_pids;
};
static_assert(sizeof(QemuSlotControl) <= kQemuPage);

// The plugin: asks `q` in slot `c`, its own, and waits for ptrecord's answer; `wait` as for
// QemuSlotWriter (false: give up). nullopt when ptrecord found nothing or `wait` gave up.
template <typename Wait>
std::optional<QemuPidAnswer> AskPids(QemuSlotControl& c, const QemuPidQuestion& q, Wait wait) {
  c.question = q;
  const uint32_t n = c.asked.load(std::memory_order_relaxed) + 1;
  c.asked.store(n, std::memory_order_release);
  while (c.answered.load(std::memory_order_acquire) != n) {
    if (!wait()) return std::nullopt;
  }
  if (c.answer.pid == 0) return std::nullopt;
  return c.answer;
}

// ptrecord: answers slot `c`'s question, if one waits, with `answer(question)`.
template <typename Answer>
void AnswerPids(QemuSlotControl& c, Answer answer) {
  const uint32_t n = c.asked.load(std::memory_order_acquire);
  if (n == c.answered.load(std::memory_order_relaxed)) return;
  c.answer = answer(c.question);
  c.answered.store(n, std::memory_order_release);
}

// The sample_id trailer of every record the plugin writes (as the tracking event's).
inline constexpr uint64_t kQemuSampleType =
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;
inline perf::SampleIdLayout QemuSampleLayout() { return {kQemuSampleType, true}; }
// The sample_type of the AUX samples the plugin writes (those of --emulate=step).
inline constexpr uint64_t kQemuAuxSampleType = record::kEmulatedAuxSampleType;

// Bytes of the region for `slots` slots with the given ring sizes (powers of two pages).
uint64_t QemuRegionSize(uint32_t slots, uint64_t data_pages, uint64_t aux_pages);

// Fills in the header and every slot's user page of a zeroed region of QemuRegionSize bytes.
void InitQemuRegion(uint8_t* base, uint32_t slots, uint64_t data_pages, uint64_t aux_pages);

// QemuRegionHeader::reader_alive. ptrecord: makes it (robust, process-shared) and locks it from
// the thread that drains, before qemu starts; ReleaseReaderAlive from the same thread when the
// run ends (or its death releases it). The plugin: ReaderGone when nobody holds it.
absl::Status HoldReaderAlive(QemuRegionHeader& h);
void ReleaseReaderAlive(QemuRegionHeader& h);
bool ReaderGone(QemuRegionHeader& h);

// Checks the header of a mapped region of `size` bytes (magic, version, sizes). Errors:
// kFailedPrecondition naming what does not match.
absl::Status CheckQemuRegion(const uint8_t* base, uint64_t size);

inline QemuRegionHeader* RegionHeader(uint8_t* base) {
  return reinterpret_cast<QemuRegionHeader*>(base);
}
inline QemuSlotControl* SlotControl(uint8_t* base, uint32_t slot) {
  return reinterpret_cast<QemuSlotControl*>(base + kQemuPage +
                                            slot * RegionHeader(base)->slot_size);
}
// The slot's perf mmap (user page, data ring, AUX ring); aux_overwrite as the header says.
record::RingView SlotRing(uint8_t* base, uint32_t slot);

// The producer of one slot (the plugin's side). Not thread-safe: one guest thread writes it.
class QemuSlotWriter {
 public:
  // `id` goes into the sample_id trailers; `wait` is called while the ring is full and must
  // return false to give up (the reader is gone). `overwrite`: the AUX ring wraps freely
  // (only the data ring waits for the reader).
  QemuSlotWriter(record::RingView ring, uint32_t pid, uint32_t tid, uint64_t id,
                 bool overwrite = false)
      : ring_(ring), pid_(pid), tid_(tid), id_(id), overwrite_(overwrite) {}

  // Goes on after what the ring's previous writer published (its heads in the user page; the
  // AUX bytes its records cover, QemuSlotControl::aux_recorded): the slot of a thread that
  // exec'd, now in the new program's qemu, or ptrecord's RecordStaged after qemu died.
  void Resume(uint64_t recorded);
  // The newest out.size() bytes of the AUX ring, oldest first (overwrite mode: what an AUX
  // sample holds; bytes never written are zero).
  void CopyNewest(std::span<uint8_t> out) const;

  // The trailer of a record written at `time`.
  perf::SampleId Sample(uint64_t time) const;
  // Appends PT bytes to the AUX ring and a PERF_RECORD_AUX for them (time `time`), waiting
  // while either ring has no room. False when `wait` gave up (nothing more is written).
  template <typename Wait>
  bool WriteTrace(std::span<const uint8_t> bytes, uint64_t time, Wait wait);
  // Appends PT bytes to the AUX ring with no record for them yet (not in overwrite mode): the
  // next WriteTrace's record covers them too. False, writing nothing, where they do not fit now
  // or would make the staged bytes more than a quarter of the ring (WriteTrace's pieces of up
  // to half of it still fit once drained).
  bool StageTrace(std::span<const uint8_t> bytes);
  // A PERF_RECORD_AUX for the staged bytes (time `time`); false when the data ring is full.
  bool RecordStaged(uint64_t time) { return staged() == 0 || TryWriteTrace({}, time); }
  uint64_t staged() const { return aux_head_ - recorded_; }
  uint64_t recorded() const { return recorded_; }
  // Appends one encoded perf record to the data ring, waiting while it has no room.
  template <typename Wait>
  bool WriteRecord(std::span<const uint8_t> record, Wait wait);

 private:
  bool TryWriteRecord(std::span<const uint8_t> record);
  bool TryWriteTrace(std::span<const uint8_t> bytes, uint64_t time);

  record::RingView ring_;
  uint32_t pid_, tid_;
  uint64_t id_;
  bool overwrite_;
  uint64_t aux_head_ = 0;
  uint64_t recorded_ = 0;  // AUX bytes the records written cover (aux_head_ in overwrite mode)
  uint64_t data_head_ = 0;
};

template <typename Wait>
bool QemuSlotWriter::WriteTrace(std::span<const uint8_t> bytes, uint64_t time, Wait wait) {
  // A chunk larger than half the AUX ring is split, so every piece fits once drained.
  const size_t max_piece = overwrite_ ? bytes.size() : ring_.aux.size() / 2;
  while (!bytes.empty()) {
    const std::span<const uint8_t> piece = bytes.first(std::min(bytes.size(), max_piece));
    while (!TryWriteTrace(piece, time)) {
      if (!wait()) return false;
    }
    bytes = bytes.subspan(piece.size());
  }
  return true;
}

template <typename Wait>
bool QemuSlotWriter::WriteRecord(std::span<const uint8_t> record, Wait wait) {
  while (!TryWriteRecord(record)) {
    if (!wait()) return false;
  }
  return true;
}

// Snapshot mode: the plugin writing a slot's AUX ring and ptrecord copying it exclude each
// other (Dekker's algorithm over QemuSlotControl::writing / reading, sequentially
// consistent: each side sets its flag, then looks at the other's). The writer gives way.
// The plugin, around each write of the AUX ring; `wait` as for QemuSlotWriter (false: give
// up, nothing locked).
template <typename Wait>
bool LockSlotForWriting(QemuSlotControl& c, Wait wait) {
  c.writing.store(1);
  while (c.reading.load() != 0) {
    c.writing.store(0);
    if (!wait()) return false;
    c.writing.store(1);
  }
  return true;
}
inline void UnlockSlotForWriting(QemuSlotControl& c) { c.writing.store(0); }
// The ring's memfd again, for a guest program that closed the plugin's descriptor of it before
// an execve, where the plugin's ring=/proc/PTRECORD/fd/N does not reach it: in a pid namespace
// with its own /proc ptrecord's pid is not there (unshare --pid --mount-proc, a container's
// launcher that closes inherited descriptors: sweep 37c H3, the program ran untraced). ptrecord
// listens on an abstract unix socket (named within the network namespace, not by a pid or a
// path) and hands the descriptor (SCM_RIGHTS) to a process of its own user that connects.
//   RingSocketName: a name no other run has ("ptkit-ring-PID-RANDOM", printable; the socket's
//   address is it after a NUL). ListenRingSocket: the listening socket (non-blocking,
//   close-on-exec), or -1 with errno. ServeRingSocket: hands `memfd` to each connection
//   waiting (ptrecord, after each drain pass; 16 at most), refusing other users'. ReceiveRingFd:
//   the plugin's side, waiting with `wait` (false: give up) for the answer; the descriptor
//   (close-on-exec) or -1.
std::string RingSocketName();
int ListenRingSocket(const std::string& name);
void ServeRingSocket(int listen_fd, int memfd);
int ReceiveRingFd(const std::string& name, bool (*wait)());

// ptrecord, around a snapshot of the slot. False when the writer kept its flag for
// `timeout_ns` (it died while writing: the copy may be torn); the slot is locked anyway.
bool LockSlotForReading(QemuSlotControl& c, uint64_t timeout_ns);
inline void UnlockSlotForReading(QemuSlotControl& c) { c.reading.store(0); }

// The reader's side of one slot: a TraceSource for the Drainer. The plugin never truncates,
// so Enable/Disable have nothing to do; there is no wakeup fd (ptrecord drains on a timer).
// The stream is the thread that claimed the slot (read from its control page: the plugin
// sets it before it writes anything).
class QemuSlotSource final : public record::TraceSource {
 public:
  QemuSlotSource(record::RingView ring, const QemuSlotControl* control)
      : ring_(ring), control_(control) {}
  // (Snapshots lock the slot around Drainer::Snapshot: LockSlotForReading.)
  record::RingView ring() override { return ring_; }
  int poll_fd() const override { return -1; }
  absl::Status Enable() override { return absl::OkStatus(); }
  absl::Status Disable() override { return absl::OkStatus(); }
  StreamId stream() const override {
    control_->state.load(std::memory_order_acquire);
    return StreamId{StreamKind::kThread, control_->tid};
  }
  int32_t cpu() const override { return -1; }
  perf::SampleIdLayout layout() const override { return QemuSampleLayout(); }

 private:
  record::RingView ring_;
  const QemuSlotControl* control_;
};

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_QEMU_RING_H_
