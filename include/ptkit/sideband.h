// The sideband timeline: what the perf sideband records say about processes, their address
// spaces, and which task ran on which CPU, over (perf) time. The decoder asks it which images
// to use for a piece of trace and whose trace it is.
//
// Rules (kernel semantics of the records, see perf_event_open(2)):
//  - MMAP2 adds a mapping to the process `pid` from its time on; a mapping over part of an
//    older one replaces that part.
//  - COMM with PERF_RECORD_MISC_COMM_EXEC (execve) ends every mapping of the process; the
//    MMAP2s of the new program follow it.
//  - FORK of a new process (pid != ppid) copies the parent's mappings at the fork time; FORK
//    of a thread (pid == ppid) only adds the thread. EXIT ends nothing (other threads may
//    outlive the leader); a fork that reuses the pid starts its mappings afresh.
//  - ITRACE_START and SWITCH / SWITCH_CPU_WIDE (switch-in) say which task runs on a CPU from
//    that time on; a switch-out leaves the CPU idle (no task) until the next switch-in.
// Records from all CPUs are merged by their sample_id time (stable for equal times).
//
// Cost: a process's address space over time is a list of versions, each the root of a
// persistent (path-copying) treap of its live mappings by address. A FORK shares the parent's
// root instead of copying its mappings, so R records cost O(R log R) expected time and memory
// whatever their mix (a mapping over k others still costs O(log R), not O(k)); each record
// stores at most three mappings.
#ifndef PTKIT_SIDEBAND_H_
#define PTKIT_SIDEBAND_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/perf_records.h"

namespace ptkit {

inline constexpr uint64_t kForever = std::numeric_limits<uint64_t>::max();

// Where `ptdecode export --to perf.data` maps the JIT code of text pokes (PERF_RECORD_TEXT_POKE
// of user addresses), so that perf decodes it: an MMAP2 of a file named
// kExportedJitDir "jitted-PID-N.so" (no such file; its bytes are in the export's build-id
// cache). Reading such an export back, the text pokes' captured code stands for those files,
// and they start no epoch (Sideband::EpochStarts).
inline constexpr char kExportedJitDir[] = "/ptkit-jit/";

struct Mapping {
  uint64_t start = 0, end = 0;  // [start, end)
  uint64_t pgoff = 0;           // file offset of `start`
  std::string path;
  std::vector<uint8_t> build_id;  // empty when the record carried inode data instead
  uint32_t prot = 0;
};

struct TaskId {
  uint32_t pid = 0, tid = 0;
  friend bool operator==(const TaskId&, const TaskId&) = default;
};

class Sideband {
 public:
  // Every mapping the process had at perf time `t`, sorted by address. Empty if unknown.
  std::vector<const Mapping*> MappingsAt(uint32_t pid, uint64_t t) const;
  // The mapping containing `ip` in `pid` at time `t`, or null.
  const Mapping* FindMapping(uint32_t pid, uint64_t ip, uint64_t t) const;
  // Every mapping the process had at some time in [from, to) (for loading images up front),
  // each once, in the order the process got them (so a later one wins where two overlap).
  // O(m log m) for the m tree nodes the process made or inherited in that time.
  std::vector<const Mapping*> MappingsDuring(uint32_t pid, uint64_t from = 0,
                                             uint64_t to = kForever) const;
  // The task running on `cpu` at time `t`; nullopt when idle or unknown.
  std::optional<TaskId> TaskOnCpu(uint32_t cpu, uint64_t t) const;
  // The process of thread `tid` at time `t` (from FORK/COMM/MMAP2 records), if seen: the
  // latest record at or before `t`, else the first. A tid can belong to several processes over
  // a recording (a process that exits, then a thread of another given its id).
  std::optional<uint32_t> PidOfTid(uint32_t tid, uint64_t t = kForever) const;
  // How many times thread `tid`'s process changed over the recording, plus 1 (0: not seen).
  size_t ProcessesOfTid(uint32_t tid) const;
  // Whether a FORK record made a task `tid` in (from, to]: a thread or process that began then.
  bool ForkedBetween(uint32_t tid, uint64_t from, uint64_t to) const;
  // The thread's name at time `t` ("" when unknown).
  std::string CommAt(uint32_t tid, uint64_t t) const;
  // Every pid seen.
  std::vector<uint32_t> Pids() const;
  // The times the process exec'd (COMM with COMM_EXEC), in order.
  const std::vector<uint64_t>& ExecTimes(uint32_t pid) const;
  // Whether at time `t` the process runs a program it inherited by a FORK from another one
  // (no exec since).
  bool RunsForkedProgram(uint32_t pid, uint64_t t) const;
  // Where the process's code changed, in order: each exec, the fork of a process on a pid an
  // earlier process had (exec: true, another program from there), and each MMAP2 of an executable
  // file over executable code of another file (or of the same file at another offset: a
  // library dlopen'd where a dlclose'd one was; perf has no record of the munmap). Anonymous
  // memory (//anon: JIT code, whose bytes come from text pokes for the whole run) and
  // kExportedJitDir files start none. Its epoch at time `t` (the code it ran: the mappings
  // live between two starts) is the number of them at or before `t`.
  struct EpochStart {
    uint64_t time;
    bool exec;  // else code mapped over other code
  };
  const std::vector<EpochStart>& EpochStarts(uint32_t pid) const;
  size_t EpochAt(uint32_t pid, uint64_t t) const;

  // Counts of records by kind that were used, and of records that could not be parsed.
  struct Stats {
    uint64_t mmaps = 0, comms = 0, execs = 0, forks = 0, exits = 0, switches = 0;
    uint64_t itrace_starts = 0, lost_records = 0, lost_events = 0, malformed = 0;
  };
  const Stats& stats() const { return stats_; }
  // One line per record that could not be parsed (what and where).
  const std::vector<std::string>& problems() const { return problems_; }
  // Mappings held for every process and time: at most three per MMAP2 (it and the two parts
  // of the mappings it cuts), whatever the forks. For tests and benchmarks.
  size_t stored_mappings() const { return mappings_.size(); }
  // Tree nodes held: O(log R) expected per MMAP2, none per FORK or exec.
  size_t stored_nodes() const { return nodes_.size() - 1; }

 private:
  friend class SidebandBuilder;
  // A treap node (0: none). Its key is mappings_[mapping].start; its priority is a salted
  // hash of `mapping`, so an input cannot choose a deep tree.
  struct Node {
    uint32_t mapping, left, right;
  };
  // The live mappings from `time` on (until the next version's time).
  struct Version {
    uint64_t time;
    uint32_t root;
  };
  uint64_t Priority(uint32_t node) const;
  uint32_t Make(uint32_t mapping, uint32_t left, uint32_t right);
  uint32_t AddMapping(Mapping m);
  // Splits `tree` into the nodes with start < key and the rest, copying the paths it cuts.
  std::pair<uint32_t, uint32_t> Split(uint32_t tree, uint64_t key);
  // Joins two trees whose keys are all below, resp. above, each other's.
  uint32_t Merge(uint32_t low, uint32_t high);
  // `tree` with `m` mapped over it: the live mappings it overlaps end, their parts outside it
  // live on. The old tree stays as it was. With `replaces_code`, says whether m is executable
  // and overlaps executable code of another file or offset.
  uint32_t Map(uint32_t tree, Mapping m, bool* replaces_code = nullptr);
  void SetRoot(uint32_t pid, uint64_t t, uint32_t root);
  void SetPid(uint32_t tid, uint64_t t, uint32_t pid);
  uint32_t Root(uint32_t pid) const;  // the latest version
  uint32_t RootAt(uint32_t pid, uint64_t t) const;

  struct CpuSlot {
    uint64_t time;
    std::optional<TaskId> task;
  };
  struct CommSlot {
    uint64_t time;
    std::string comm;
  };
  std::deque<Mapping> mappings_;            // stable addresses
  std::vector<Node> nodes_{Node{0, 0, 0}};  // [0]: no node
  uint64_t salt_ = 0;
  std::map<uint32_t, std::vector<Version>> spaces_;     // pid -> address space over time
  std::map<uint32_t, std::vector<uint64_t>> execs_;     // pid -> exec times
  std::map<uint32_t, uint64_t> forked_;                 // pid -> time another process forked it
  std::map<uint32_t, std::vector<EpochStart>> epochs_;  // pid -> EpochStarts
  std::map<uint32_t, std::vector<CpuSlot>> schedule_;   // cpu -> time-sorted slots
  struct PidSlot {
    uint64_t time;
    uint32_t pid;
  };
  std::map<uint32_t, std::vector<PidSlot>> tid_pid_;     // tid -> its processes over time
  std::map<uint32_t, std::vector<uint64_t>> tid_forks_;  // tid -> times FORK records made it
  std::map<uint32_t, std::vector<CommSlot>> comms_;      // tid -> time-sorted names
  Stats stats_;
  std::vector<std::string> problems_;
};

// Parses the body of a perf record of a kind the timeline reads (MMAP2, COMM, FORK, EXIT,
// ITRACE_START, LOST, SWITCH*, AUX) and returns the parser's error (kDataLoss, e.g. "perf mmap2
// record build_id_size 200 above 20"); other kinds are not looked at. Without the attrs, pass
// an empty layout ({0, false}): only bodies wrong whatever the trailer is are refused.
absl::Status CheckRecordBody(const perf::RecordView& r, const perf::SampleIdLayout& layout);

// Collects sideband batches (as stored in the container), then builds the timeline.
class SidebandBuilder {
 public:
  // `layout` describes the sample_id_all trailer of the tracking event's records.
  explicit SidebandBuilder(perf::SampleIdLayout layout) : layout_(layout) {}
  // Adds one batch of perf_event_header-framed records read from `cpu`'s ring (-1: per-thread
  // ring). A malformed record ends the batch; it is counted and described in problems().
  void Add(int32_t cpu, std::span<const uint8_t> records);
  // As Add, for records whose trailer is laid out as `layout` (perf.data: each attr's own).
  void Add(int32_t cpu, std::span<const uint8_t> records, const perf::SampleIdLayout& layout);
  Sideband Build();

 private:
  struct Pending {
    uint64_t time;
    size_t order;
    int32_t cpu;
    std::vector<uint8_t> bytes;
    perf::SampleIdLayout layout;
  };
  perf::SampleIdLayout layout_;
  std::vector<Pending> pending_;
  std::vector<std::string> problems_;
  uint64_t malformed_ = 0;
};

// perf time <-> TSC, with the conversion the kernel publishes in perf_event_mmap_page
// (time_zero, time_mult, time_shift; valid when cap_user_time_zero is set).
struct TscConversion {
  uint64_t time_zero = 0;
  uint32_t time_mult = 0;
  uint16_t time_shift = 0;
  // Defined for every field value: a time_shift of 64 or more maps every TSC to time_zero
  // (and ToTsc() gives 0), as the formula's limit, instead of shifting out of range.
  uint64_t ToPerfTime(uint64_t tsc) const;
  uint64_t ToTsc(uint64_t perf_time) const;  // inverse, exact up to rounding
};

}  // namespace ptkit

#endif  // PTKIT_SIDEBAND_H_
