#include "decoder/recording.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "decoder/bts.h"
#include "decoder/forwarding_sink.h"
#include "decoder/ipt_handles.h"
#include "decoder/packets.h"
#include "decoder/parallel_decode.h"
#include "decoder/progress.h"
#include "decoder/sinks.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/elf_file.h"
#include "ptkit/kallsyms.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"

namespace ptkit::decoder {

bool MaySelect(const RecordingOptions& options, const StreamKey& key) {
  if (options.snapshot && key.snapshot != static_cast<int64_t>(*options.snapshot)) return false;
  if (options.cpu && (key.id.kind != StreamKind::kCpu || key.id.id != *options.cpu)) return false;
  return !options.tid || key.id.kind != StreamKind::kThread || key.id.id == *options.tid;
}

// --- RecordingBuilder ------------------------------------------------------------------------

RecordingBuilder::RecordingBuilder(std::string name, const RecordingOptions& options)
    : options_(options) {
  r_.name = std::move(name);
}

absl::StatusOr<SpoolView> CapturedBytes(const Recording& r, const CapturedCode& c) {
  if (!r.spool) return absl::InternalError("captured code without a spool");
  return r.spool->Map(c.run);
}

absl::Status RecordingBuilder::Spool(SpoolRun& run, std::span<const uint8_t> bytes) {
  if (!r_.spool) {
    PTKIT_ASSIGN_OR_RETURN(AuxSpool spool, AuxSpool::Create(AuxSpool::Dirs(options_.spool_dir)));
    r_.spool.emplace(std::move(spool));
  }
  return r_.spool->Append(run, bytes);
}

absl::Status RecordingBuilder::AddAux(StreamId stream, uint64_t aux_offset, uint64_t time,
                                      std::span<const uint8_t> data, uint32_t flags) {
  const StreamKey key{stream, -1};
  if (!data.empty()) r_.present.insert(key);
  if (!MaySelect(options_, key)) return absl::OkStatus();
  RecordedStream& s = r_.streams[key];
  State& st = state_[key];
  uint64_t offset = aux_offset;
  if (!s.pieces.empty() && offset > st.next_aux) {
    s.losses_after.push_back({kLossDiscontinuity, st.next_aux, offset - st.next_aux});
    st.break_next = true;
  } else if (!s.pieces.empty() && offset < st.next_aux && offset != 0) {
    // Bytes the stream has already (the drain never stores a byte twice; an edited or
    // damaged file may): only what is new is kept, so nothing is decoded twice.
    const uint64_t seen = std::min<uint64_t>(st.next_aux - offset, data.size());
    st.repeated_bytes += seen;
    offset += seen;
    data = data.subspan(seen);
  } else if (!s.pieces.empty() && offset < st.next_aux) {
    st.break_next = true;  // a restart at 0: decode it as a new piece
  }
  if (!data.empty()) {
    if (st.break_next || !s.losses_after.empty()) {
      s.pieces.push_back({offset, time, {}, std::move(s.losses_after)});
      s.losses_after.clear();
      st.break_next = false;
    }
    PTKIT_RETURN_IF_ERROR(Spool(s.pieces.back().run, data));
    s.bytes += data.size();
    st.next_aux = offset + data.size();
  }
  // The drain writes a loss record for each flag (placed below); the flag itself only
  // says not to join what follows.
  if (flags & (kAuxTruncated | kAuxCollision | kAuxPartial)) st.break_next = true;
  return absl::OkStatus();
}

void RecordingBuilder::AddLoss(StreamId stream, const std::string& kind, uint64_t aux_offset,
                               uint64_t bytes) {
  const StreamKey key{stream, -1};
  if (!MaySelect(options_, key)) return;
  // One loss point per loss record (an AUX record's flag has its own: the drain writes
  // it, also for a record whose bytes it had copied already or that had none).
  r_.streams[key].losses_after.push_back({kind, aux_offset, bytes});
}

void RecordingBuilder::CountLostSideband(uint64_t records) {
  ++lost_sideband_;
  lost_sideband_records_ += records;
}

void RecordingBuilder::AddLostSideband(StreamId stream, const std::string& kind) {
  const StreamKey key{stream, -1};
  if (!MaySelect(options_, key)) return;
  // Lost perf records: a PERF_RECORD_AUX among them may have said TRUNCATED, so the
  // bytes on either side are not joined; the decoder resyncs after this point.
  r_.streams[key].losses_after.push_back({kind, state_[key].next_aux, 0});
}

absl::StatusOr<uint64_t> RecordingBuilder::SharedWithEnd(const SpoolRun& run,
                                                         std::span<const uint8_t> data) {
  static constexpr uint8_t kPsb[16] = {0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
                                       0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82};
  const auto psb = std::search(data.begin(), data.end(), std::begin(kPsb), std::end(kPsb));
  if (psb == data.end()) return 0;
  const size_t first = static_cast<size_t>(psb - data.begin());
  PTKIT_ASSIGN_OR_RETURN(SpoolView view, r_.spool->Map(run));
  const std::span<const uint8_t> before = view.bytes();
  // Each PSB of `before` where data's first one may be, earliest first (the longest overlap:
  // it cannot start before the end of `before` less data's size). The bytes compared are
  // bounded (a crafted file of PSBs that differ only at the end), past that no join.
  const size_t earliest =
      std::max(first, first + before.size() - std::min(before.size(), data.size()));
  uint64_t budget = 16 * uint64_t{data.size()} + (uint64_t{1} << 20);
  for (auto at = before.begin() + static_cast<std::ptrdiff_t>(std::min(earliest, before.size()));;
       ++at) {
    at = std::search(at, before.end(), std::begin(kPsb), std::end(kPsb));
    if (at == before.end()) return 0;
    const auto start = at - static_cast<std::ptrdiff_t>(first);
    const auto differ = std::mismatch(start, before.end(), data.begin()).first;
    if (differ == before.end()) return static_cast<uint64_t>(before.end() - start);
    const auto compared = static_cast<uint64_t>(differ - start) + 1;
    if (compared >= budget) return 0;
    budget -= compared;
  }
}

absl::Status RecordingBuilder::AddSnapshot(StreamId stream, uint64_t sequence, uint64_t aux_head,
                                           uint64_t time, std::span<const uint8_t> data) {
  const StreamKey key{stream, static_cast<int64_t>(sequence)};
  if (!data.empty()) r_.present.insert(key);
  if (!MaySelect(options_, key)) return absl::OkStatus();
  // Snapshots of a ring read again before it wrapped past what was read share bytes: five of
  // one run were decoded 4.6x over (sweep 28d). The new bytes go on where the earlier ended.
  if (!options_.snapshot && !options_.keep_snapshots && !data.empty()) {
    if (auto j = joined_.find(stream); j != joined_.end()) {
      RecordedStream& joined = r_.streams[j->second];
      PTKIT_ASSIGN_OR_RETURN(const uint64_t shared, SharedWithEnd(joined.pieces.back().run, data));
      if (shared > 0) {
        PTKIT_RETURN_IF_ERROR(Spool(joined.pieces.back().run, data.subspan(shared)));
        joined.bytes += data.size() - shared;
        return absl::OkStatus();
      }
    }
    joined_[stream] = key;
  }
  RecordedStream& s = r_.streams[key];
  // A snapshot is the newest part of an overwritten ring: older trace is gone.
  // Its bytes end at aux_head; an in-buffer head (Intel PT, BTS) can be smaller than the
  // snapshot, and then where they start in the stream is not known: offsets count from 0.
  const uint64_t start = aux_head >= data.size() ? aux_head - data.size() : 0;
  s.pieces.push_back({start, time, {}, {}});
  PTKIT_RETURN_IF_ERROR(Spool(s.pieces.back().run, data));
  s.bytes += data.size();
  return absl::OkStatus();
}

absl::Status RecordingBuilder::AddTextPokes(std::span<const uint8_t> records,
                                            const perf::SampleIdLayout& layout) {
  if (!(layout.sample_type & PERF_SAMPLE_TID)) return absl::OkStatus();
  perf::RecordReader reader(records);
  for (;;) {
    absl::StatusOr<std::optional<perf::RecordView>> rec = reader.Next();
    if (!rec.ok() || !rec->has_value()) return absl::OkStatus();
    if ((*rec)->type != PERF_RECORD_TEXT_POKE) continue;
    absl::StatusOr<perf::TextPoke> poke = perf::ParseTextPoke(**rec, layout);
    // User space ends below 2^47 (x86-64's canonical lower half).
    if (!poke.ok() || poke->new_bytes.empty() || poke->addr >= (uint64_t{1} << 47)) continue;
    // Over code poked before with other bytes (any overlap: sweep 31a F2, a block written over
    // the middle of an earlier one went unsaid; the same bytes again, a block poked from an
    // address inside another, are no rewrite). The pokes are kept as runs that do not overlap:
    // what a new one covers of earlier ones is its.
    const uint32_t pid = poke->sample_id.pid;
    const uint64_t begin = poke->addr, end = begin + poke->new_bytes.size();
    const std::span<const uint8_t> bytes = poke->new_bytes;
    auto it = poked_.lower_bound({pid, begin});
    if (it != poked_.begin() && std::prev(it)->first.first == pid &&
        std::prev(it)->first.second + std::prev(it)->second.size() > begin) {
      --it;
    }
    bool again = false;
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> kept;  // the parts outside [begin, end)
    while (it != poked_.end() && it->first.first == pid && it->first.second < end) {
      const uint64_t at = it->first.second;
      const std::vector<uint8_t>& old = it->second;
      if (at + old.size() <= begin) {
        ++it;
        continue;
      }
      const uint64_t from = std::max(at, begin), to = std::min<uint64_t>(at + old.size(), end);
      again |= !std::equal(old.begin() + static_cast<ptrdiff_t>(from - at),
                           old.begin() + static_cast<ptrdiff_t>(to - at),
                           bytes.begin() + static_cast<ptrdiff_t>(from - begin));
      if (at < begin)
        kept.emplace_back(at, std::vector<uint8_t>(
                                  old.begin(), old.begin() + static_cast<ptrdiff_t>(begin - at)));
      if (at + old.size() > end) {
        kept.emplace_back(
            end, std::vector<uint8_t>(old.begin() + static_cast<ptrdiff_t>(end - at), old.end()));
      }
      it = poked_.erase(it);
    }
    for (auto& [at, part] : kept) poked_[{pid, at}] = std::move(part);
    poked_[{pid, begin}] = std::vector<uint8_t>(bytes.begin(), bytes.end());
    if (again && repokes_++ == 0) repoked_ = std::pair{pid, begin};
    PTKIT_RETURN_IF_ERROR(
        AddCode(poke->sample_id.pid, poke->addr, "//anon", poke->new_bytes, 0, kCodeTextPoke));
  }
}

absl::Status RecordingBuilder::AddSample(StreamId stream, uint64_t sample_type,
                                         std::span<const uint8_t> record) {
  absl::StatusOr<perf::RecordView> view = perf::ReadRecord(record);
  absl::StatusOr<perf::Sample> sample =
      view.ok() ? perf::ParseSample(*view, sample_type) : view.status();
  if (!sample.ok()) {
    if (r_.malformed_samples++ == 0) {
      r_.warnings.push_back(fmt::format("{}: malformed sample record ({}): skipped", r_.name,
                                        std::string(sample.status().message())));
    }
    return absl::OkStatus();
  }
  AuxSample s{.stream = stream, .sample_type = sample_type, .fields = *sample};
  s.fields.aux = {};
  PTKIT_RETURN_IF_ERROR(Spool(s.snippet, sample->aux));
  r_.samples.push_back(std::move(s));
  return absl::OkStatus();
}

absl::Status RecordingBuilder::AddArchivedFile(std::string path, std::vector<uint8_t> build_id,
                                               std::span<const uint8_t> bytes, bool debug_file) {
  if (bytes.size() > options_.max_captured_code - code_bytes_) {
    ++code_left_out_;
    code_left_out_bytes_ += bytes.size();
    return absl::OkStatus();
  }
  code_bytes_ += bytes.size();
  SpoolRun& run = (debug_file ? r_.archived_debug_files
                              : r_.archived_files)[{std::move(path), std::move(build_id)}];
  if (run.size != 0) return absl::OkStatus();  // the same file again
  return Spool(run, bytes);
}

absl::Status RecordingBuilder::AddCode(uint32_t pid, uint64_t address, std::string path,
                                       std::span<const uint8_t> bytes, uint64_t pgoff,
                                       uint32_t flags, std::vector<uint8_t> build_id) {
  if (bytes.empty()) return absl::OkStatus();
  if (bytes.size() > options_.max_captured_code - code_bytes_) {
    ++code_left_out_;
    code_left_out_bytes_ += bytes.size();
    return absl::OkStatus();
  }
  code_bytes_ += bytes.size();
  CapturedCode& c = r_.captured[pid].emplace_back();
  c.address = address;
  c.path = std::move(path);
  c.pgoff = pgoff;
  c.flags = flags;
  c.build_id = std::move(build_id);
  return Spool(c.run, bytes);
}

Recording RecordingBuilder::Finish() {
  // What the recorder warned of: every decode says it.
  for (const std::string& w : r_.metadata.RecorderWarnings()) {
    r_.warnings.push_back(fmt::format("{}: recorded with a warning: {}", r_.name, w));
  }
  if (const RecordingMetadata& m = r_.metadata; !r_.bts && m.pmu && m.pmu->name == "intel_pt" &&
                                                !m.emulated && !m.emulation && !m.synthesizer &&
                                                !options_.config.Over(r_.config).cpu &&
                                                (!m.cpu || !m.cpu->family || !m.cpu->model)) {
    // A trace of hardware, decoded without the errata of its CPU (sweep 29b S7: a perf.data
    // whose CPUID was cut or garbled said nothing of it). Another vendor's CPU with a family
    // and model ran no Intel PT (an emulated recording exported to perf.data): no errata.
    const std::string said = m.cpu && m.cpu->vendor
                                 ? fmt::format(
                                       "it names \"{}\", not a CPU's vendor, family "
                                       "and model",
                                       *m.cpu->vendor)
                                 : std::string("it names none");
    r_.warnings.push_back(fmt::format(
        "{}: the recording CPU is not known ({}): decoded without the workarounds for its "
        "Intel PT errata, so a trace of a CPU with errata may give decode errors; give it: "
        "--cpu FAMILY/MODEL[/STEPPING] (\"cpu family\", \"model\" and \"stepping\" in "
        "/proc/cpuinfo of the machine that recorded it)",
        r_.name, said));
  }
  if (repoked_) {
    r_.warnings.push_back(fmt::format(
        "{}: code run from no file (JIT code) was written again over code written before {} "
        "(first at {:#x} in pid {}): the decode uses the bytes written last at each address for "
        "the whole run, so instructions there before may be wrong",
        r_.name, repokes_ == 1 ? std::string("once") : fmt::format("{} times", repokes_),
        repoked_->second, repoked_->first));
  }
  if (lost_sideband_ > 0) {
    // Sweep 29b M3: only "1 loss point" was said of 7 records lost.
    r_.warnings.push_back(fmt::format(
        "{}: {} lost by the kernel, its data ring full {}: mappings, comms, exits or context "
        "switches among them are missing, so code after that may decode as gaps, under wrong "
        "names or in the wrong process; record with a larger data ring (ptrecord or perf "
        "record -m PAGES)",
        r_.name,
        lost_sideband_records_ > 0 ? Counted(lost_sideband_records_, "sideband record")
                                   : std::string("sideband records"),
        lost_sideband_ == 1 ? std::string("once") : fmt::format("{} times", lost_sideband_)));
  }
  if (code_left_out_ > 0) {
    r_.warnings.push_back(fmt::format(
        "{}: {} code record(s) with {} bytes of captured code beyond the first {} bytes are not "
        "used (the limit of captured code per recording): their code is read from the mapped "
        "files (--sysroot) instead, or missing",
        r_.name, code_left_out_, code_left_out_bytes_, options_.max_captured_code));
  }
  for (const auto& [key, st] : state_) {
    if (st.repeated_bytes == 0) continue;
    r_.warnings.push_back(
        fmt::format("{}: {} AUX bytes repeat offsets the stream already had: "
                    "decoded once",
                    StreamName(key.id), st.repeated_bytes));
  }
  // Losses of a stream that has no trace bytes to place them in (snapshot mode keeps its
  // trace in snapshot records): not shown in any stream, so said here and counted.
  for (const auto& [key, stream] : r_.streams) {
    if (!stream.pieces.empty() || stream.losses_after.empty() || !MaySelect(options_, key)) {
      continue;
    }
    std::map<std::string, uint64_t> kinds;
    for (const LossInfo& l : stream.losses_after) {
      ++kinds[l.kind];
      r_.unplaced.lost_bytes += l.bytes;
      r_.unplaced.unknown_size_losses += l.bytes == 0 ? 1 : 0;
    }
    r_.unplaced.losses += stream.losses_after.size();
    std::string what;
    for (const auto& [kind, n] : kinds)
      what += fmt::format("{}{} {}", what.empty() ? "" : ", ", n, kind);
    r_.warnings.push_back(fmt::format("{}: {} loss point(s) outside the decoded trace ({})",
                                      StreamName(key.id), stream.losses_after.size(), what));
  }
  state_.clear();
  return std::move(r_);
}

// --- Decoding --------------------------------------------------------------------------------

namespace {

// The name thread `tid` of `pid` has last in the program it runs at time `t` (before the
// process's next exec): a thread that names itself after it starts (pthread_setname_np,
// prctl(PR_SET_NAME)) is shown by that name (sweep 33b L1: every worker's timeline track had its
// creator's name, where perf shows each worker-N).
std::string LastCommInProgram(const Sideband& timeline, uint32_t pid, uint32_t tid, uint64_t t) {
  uint64_t until = kForever;
  for (const uint64_t exec : timeline.ExecTimes(pid)) {
    if (exec > t) {
      until = exec - 1;
      break;
    }
  }
  return timeline.CommAt(tid, until);
}

// An archived file range (ptrecord --archive): file bytes, not a process's own code.
bool IsArchivedRange(const CapturedCode& c) {
  return c.flags == 0 && !c.path.empty() && c.path[0] == '/';
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// The AUX area's size in bytes of a kernel intel_bts recording, whose records skip the end of
// the ring (DecodeBtsInto); 0 when unknown, and for emulated BTS (written without a ring).
uint64_t KernelBtsRingSize(const RecordingMetadata& m) {
  if (!m.pmu || m.pmu->name != "intel_bts" || m.emulated || m.emulation) return 0;
  if (!m.aux_pages || !m.page_size || *m.aux_pages > (uint64_t{1} << 40) / *m.page_size) return 0;
  return *m.aux_pages * *m.page_size;
}

// All of a process's mappings over time, for images when the trace's time is unknown.
constexpr size_t kAllEpochs = std::numeric_limits<size_t>::max();

// Follows the trace's time: in a per-CPU stream, when another task runs on the CPU, tells the
// sink (a StreamInfo with context_switch) and, when its process differs, switches to its
// images; in any stream, when the process has exec'd (a new epoch), switches to the new
// program's images and tells the sink the same way.
class TaskSwitcher : public ImageSwitcher {
 public:
  using ImageFor = std::function<ProgramImage*(uint32_t pid, size_t epoch)>;
  // `cpu`: the stream's CPU, or none for a per-thread stream (its task never changes).
  TaskSwitcher(const StreamInfo& first, size_t epoch, std::optional<uint32_t> cpu,
               const Sideband& timeline, const TscConversion& time, ImageFor image_for, Sink& sink)
      : name_(first.name),
        cpu_(cpu),
        task_{first.pid, first.tid},
        epoch_(epoch),
        timeline_(timeline),
        time_(time),
        image_for_(std::move(image_for)),
        sink_(sink),
        current_(first.image) {}
  // The images in use now.
  const ProgramImage* current() const { return current_; }
  const ProgramImage* ImageAt(uint64_t tsc) override {
    const uint64_t t = time_.ToPerfTime(tsc);
    TaskId task = task_;
    if (cpu_) {
      std::optional<TaskId> on = timeline_.TaskOnCpu(*cpu_, t);
      if (!on) return nullptr;  // idle or unknown
      task = *on;
    } else {
      // A tid given to a process, then to a thread of another one (review 35 #2: the whole
      // stream was decoded with the last process's images).
      task.pid = timeline_.PidOfTid(task.tid, t).value_or(task.pid);
    }
    const size_t epoch = timeline_.EpochAt(task.pid, t);
    if (task == task_ && epoch_ == kAllEpochs) {
      // The stream began without a time: it goes on with every mapping of the process, now
      // with the program it runs known.
      epoch_ = epoch;
      return nullptr;
    }
    if (task == task_ && epoch == epoch_) return nullptr;  // the same thread and program
    const ProgramImage* image = current_;
    if (task.pid != task_.pid || epoch != epoch_) {
      image = image_for_(task.pid, epoch);
      if (image == nullptr) return nullptr;
    }
    if (task == task_ && epoch > epoch_ && !ExecBetween(task.pid, epoch_, epoch)) {
      // Only code mapped over other code (a library dlopen'd where another was): the same
      // thread and program go on with the new images.
      epoch_ = epoch;
      current_ = image;
      sink_.OnImage(*image);
      return image;
    }
    const bool new_image = image != current_;
    const bool pid_changed = task.pid != task_.pid;
    if (!cpu_) {
      // A per-thread stream's thread that goes on past an exec of its process made it (the
      // exec ended every other thread); not a thread given the tid after it (review 36 M2).
      exec_leader_ =
          !pid_changed &&
          (exec_leader_ || (epoch > epoch_ && ExecBetween(task.pid, epoch_, epoch) &&
                            !timeline_.ForkedBetween(
                                task.tid, timeline_.EpochStarts(task.pid)[epoch - 1].time, t)));
    }
    task_ = task;
    epoch_ = epoch;
    current_ = image;
    StreamInfo info;
    info.name = name_;
    info.pid = task.pid;
    info.tid = task.tid;
    // A per-thread stream switches at an exec, after which its thread is the process's only
    // one and has the leader's tid (ptrace(2), "execve(2) under ptrace"): the exec's COMM is
    // the leader's. The thread keeps its tid here, as perf shows it. Or its tid went to
    // another process: then its own name.
    const uint32_t named = cpu_ || pid_changed ? task.tid : task.pid;
    info.comm = timeline_.CommAt(named, t);
    info.last_comm = LastCommInProgram(timeline_, task.pid, named, t);
    info.image = image;
    info.context_switch = true;
    info.forked = timeline_.RunsForkedProgram(task.pid, t);
    info.exec_leader = exec_leader_;
    sink_.OnStream(info);
    return new_image ? image : nullptr;
  }

 private:
  // Whether `pid` exec'd in epochs (from, to].
  bool ExecBetween(uint32_t pid, size_t from, size_t to) const {
    const std::vector<Sideband::EpochStart>& starts = timeline_.EpochStarts(pid);
    for (size_t e = from + 1; e <= to && e <= starts.size(); ++e) {
      if (starts[e - 1].exec) return true;
    }
    return false;
  }

  std::string name_;
  std::optional<uint32_t> cpu_;
  TaskId task_;
  size_t epoch_;
  const Sideband& timeline_;
  TscConversion time_;
  ImageFor image_for_;
  Sink& sink_;
  const ProgramImage* current_;
  bool exec_leader_ = false;  // StreamInfo::exec_leader
};

// Between DecodeRecording and the caller's sink, for one stream. Forwards everything and:
// drops the spool pages the decoder, or a scan ahead of it, has passed (OnProgress, OnScanned);
// with `only_tid` (a per-CPU stream filtered by thread), forwards the flow only while that thread
// runs (the switcher's OnStream says who does), announces the stream when the thread first runs,
// and counts what it forwarded, as the totals of that stream.
class StreamSink : public ForwardingSink {
 public:
  StreamSink(Sink& inner, std::optional<uint32_t> only_tid)
      : ForwardingSink(inner), only_(only_tid) {}
  // With a thread filter it counts every instruction it forwards.
  bool branches_only() const override { return !only_ && inner().branches_only(); }

  // The stream starts with `first` running.
  void Begin(const StreamInfo& first) {
    first_ = current_ = first;
    open_ = !only_ || first.tid == *only_;
    if (!only_) Announce();
  }
  // The piece being decoded (for OnProgress).
  void SetView(SpoolView* view, uint64_t offset_base) {
    view_ = view;
    base_ = offset_base;
  }
  bool announced() const { return announced_; }
  // What was forwarded: losses always; the flow only with `only_tid`.
  const DecodeTotals& shown() const { return shown_; }

  void OnImage(const ProgramImage& image) override {
    current_.image = &image;
    if (!only_ || open_) inner().OnImage(image);
  }
  void OnStream(const StreamInfo& info) override {  // a context switch
    current_ = info;
    if (!only_) return inner().OnStream(info);
    open_ = info.tid == *only_;
    if (open_ && announced_) inner().OnStream(info);
    // The thread is the first to run after a loss that came while another one ran: the lost
    // stretch held its start.
    if (open_ && !held_.empty()) {
      if (!announced_) Announce();
      for (const LossInfo& loss : held_) Forward(loss);
      held_.clear();
    }
  }
  void OnLoss(const LossInfo& loss) override {
    if (!only_ || open_) {
      Show();
      return Forward(loss);
    }
    held_.push_back(loss);  // shown if the thread is the next to run (OnStream)
  }
  void OnSync(uint64_t offset) override {
    if (!only_) return inner().OnSync(offset);
    sync_ = offset;  // shown with what follows it, if that is the thread's
  }
  void OnTime(uint64_t tsc) override {
    if (Show()) inner().OnTime(tsc);
  }
  void OnProgress(uint64_t offset) override {
    if (view_ != nullptr && offset >= base_) view_->ReleaseBefore(offset - base_);
    inner().OnProgress(offset);
  }
  void OnScanned(uint64_t offset) override {
    if (view_ != nullptr && offset >= base_) view_->ReleaseBefore(offset - base_);
    inner().OnScanned(offset);
  }
  void OnBlock(const pt_block& block) override {
    if (!Show()) return;
    if (only_) {
      shown_.instructions += block.ninsn;
      ++shown_.blocks;
    }
    inner().OnBlock(block);
  }
  // Without a task filter every block is shown as it is (Begin announced the stream).
  Sink& whole_block_sink() override { return only_ ? *this : inner().whole_block_sink(); }
  // Without a task filter the flow reaches the sink as it is: so may a chunk's summary.
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    return only_ ? nullptr : inner().NewChunkSummary(image);
  }
  void OnInsn(const pt_insn& insn) override {
    if (!Show()) return;
    if (only_) ++shown_.instructions;
    inner().OnInsn(insn);
  }
  void OnEvent(const pt_event& event) override {
    if (!Show()) return;
    if (only_) ++shown_.events;
    inner().OnEvent(event);
  }
  void OnError(const DecodeError& error) override {
    if (!Show()) return;
    if (only_) {
      ++shown_.errors;
      shown_.gaps += error.is_gap() ? 1 : 0;
      ++shown_.errors_by_code[error.code];
    }
    if (error.is_gap() && current_.image != nullptr) {
      // The decoder describes a gap with the images its piece began with; after a switch
      // (exec, another process) the images in use are the switcher's, as OnStream said.
      DecodeError gap = error;
      gap.gap = current_.image->HoleAround(error.ip);
      gap.missing_file = current_.image->MissingAt(error.ip);
      return inner().OnError(gap);
    }
    inner().OnError(error);
  }

 private:
  void Forward(const LossInfo& loss) {
    ++shown_.losses;
    shown_.lost_bytes += loss.bytes;
    shown_.unknown_size_losses += loss.bytes == 0 ? 1 : 0;
    inner().OnLoss(loss);
  }
  // Whether the flow is forwarded now; announces the stream and a held sync first.
  bool Show() {
    if (!open_) {
      sync_.reset();  // what followed the sync was another thread's
      held_.clear();  // the trace resumed with another thread: the loss was not this one's
      return false;
    }
    if (!announced_) Announce();
    if (sync_) {
      ++shown_.syncs;
      inner().OnSync(*sync_);
      sync_.reset();
    }
    return true;
  }
  void Announce() {
    StreamInfo info = current_;
    info.name = first_.name;
    info.bytes = first_.bytes;
    info.context_switch = false;
    announced_ = true;
    inner().OnStream(info);
  }

  std::optional<uint32_t> only_;
  StreamInfo first_, current_;
  bool open_ = true;
  bool announced_ = false;
  std::optional<uint64_t> sync_;
  std::vector<LossInfo> held_;  // losses while another thread ran, until the next one runs
  SpoolView* view_ = nullptr;
  uint64_t base_ = 0;
  DecodeTotals shown_;
};

// A stream the options select, with the task running at its start.
struct Selected {
  const StreamKey* key = nullptr;
  const RecordedStream* stream = nullptr;
  StreamInfo info;  // image not set
  // A per-CPU stream filtered by thread that can follow the tasks (timing and time
  // conversion): only the stretches while options.tid runs.
  bool by_task = false;
  // The program (exec epoch) its process runs at the stream's start; all of the process's
  // mappings over time when the start's time is not known.
  size_t epoch = kAllEpochs;
};

// The perf time of a stream's first TSC packet (in its first PSB+), when the recording has a
// time conversion; none without one, for BTS, or when no TSC packet comes early.
std::optional<uint64_t> TraceStart(const Recording& r, const RecordedStream& stream,
                                   const TraceConfig& config) {
  if (!r.time || r.bts) return std::nullopt;
  absl::StatusOr<SpoolView> view = r.spool->Map(stream.pieces.front().run);
  if (!view.ok() || view->bytes().empty()) return std::nullopt;
  absl::StatusOr<pt_config> pt = MakePtConfig(view->bytes(), config);
  if (!pt.ok()) return std::nullopt;
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&*pt));
  if (!dec || pt_pkt_sync_forward(dec.get()) < 0) return std::nullopt;
  pt_packet packet;
  for (int i = 0; i < 4096 && pt_pkt_next(dec.get(), &packet, sizeof(packet)) >= 0; ++i) {
    if (packet.type == ppt_tsc) return r.time->ToPerfTime(packet.payload.tsc.tsc);
  }
  return std::nullopt;
}

std::string Join(const std::set<uint64_t>& values, std::string_view prefix = "") {
  std::string s;
  for (uint64_t v : values) s += fmt::format("{}{}{}", s.empty() ? "" : ", ", prefix, v);
  return s;
}

// Why the options select no stream of the recording at `path`: what they asked for and what
// the recording has.
std::string NothingSelected(const std::string& path, const Recording& r,
                            const RecordingOptions& options) {
  if (r.present.empty()) return absl::StrCat(path, ": the recording has no trace (no AUX data)");
  std::set<uint64_t> cpus, tids, snapshots;
  for (const StreamKey& key : r.present) {
    (key.id.kind == StreamKind::kCpu ? cpus : tids).insert(key.id.id);
    if (key.snapshot >= 0) snapshots.insert(static_cast<uint64_t>(key.snapshot));
  }
  std::vector<std::string> why;
  if (options.cpu && !cpus.contains(*options.cpu)) {
    why.push_back(cpus.empty() ? absl::StrCat("no stream of CPU ", *options.cpu,
                                              ": this recording's streams are per thread (",
                                              Join(tids, "tid "), "), not per CPU")
                               : absl::StrCat("no stream of CPU ", *options.cpu,
                                              "; CPUs in this recording: ", Join(cpus)));
  }
  if (options.tid && cpus.empty() && !tids.contains(*options.tid)) {
    why.push_back(absl::StrCat("no stream of thread ", *options.tid,
                               "; threads in this recording: ", Join(tids)));
  }
  if (options.snapshot && !snapshots.contains(*options.snapshot)) {
    why.push_back(snapshots.empty()
                      ? absl::StrCat("no snapshot ", *options.snapshot,
                                     ": this recording has no snapshots (it was not recorded with "
                                     "--snapshot)")
                      : absl::StrCat("no snapshot ", *options.snapshot,
                                     "; snapshots in this recording: ", Join(snapshots)));
  }
  if (why.empty()) {
    std::string names;
    for (const StreamKey& key : r.present) {
      names += absl::StrCat(names.empty() ? "" : ", ", StreamName(key.id),
                            key.snapshot < 0 ? "" : absl::StrCat(" snapshot ", key.snapshot));
    }
    std::string asked;
    if (options.cpu) asked += absl::StrCat(" --cpu ", *options.cpu);
    if (options.tid) asked += absl::StrCat(" --tid ", *options.tid);
    if (options.snapshot) asked += absl::StrCat(" --snapshot ", *options.snapshot);
    why.push_back(absl::StrCat("no stream matches", asked, "; streams in this recording: ", names));
  }
  std::string text = path + ": ";
  for (size_t i = 0; i < why.size(); ++i) text += (i ? "; " : "") + why[i];
  return text;
}

bool Filtered(const RecordingOptions& options) {
  return options.cpu || options.tid || options.snapshot;
}

std::vector<Selected> SelectStreams(const Recording& r, const RecordingOptions& options,
                                    const TraceConfig& config) {
  std::vector<Selected> out;
  for (const auto& [key, stream] : r.streams) {
    const StreamId& id = key.id;
    if (stream.pieces.empty()) continue;
    if (!MaySelect(options, key)) continue;
    Selected s;
    s.key = &key;
    s.stream = &stream;
    uint32_t pid = 0, tid = 0;
    // Else the time of the first AUX record: written when the data was drained, so possibly
    // long after the trace began.
    const std::optional<uint64_t> trace_start = TraceStart(r, stream, config);
    const uint64_t start = trace_start.value_or(stream.pieces.front().time);
    if (id.kind == StreamKind::kThread) {
      tid = static_cast<uint32_t>(id.id);
      pid = r.timeline.PidOfTid(tid, start).value_or(tid);
    } else if (auto task = r.timeline.TaskOnCpu(static_cast<uint32_t>(id.id), start)) {
      pid = task->pid;
      tid = task->tid;
    } else if (std::vector<uint32_t> pids = r.timeline.Pids(); pids.size() == 1) {
      pid = pids.front();
    }
    s.by_task = options.tid && id.kind == StreamKind::kCpu && r.time && !r.bts;
    if (options.tid && !s.by_task && tid != *options.tid) continue;
    s.info.name = key.snapshot < 0 ? StreamName(id)
                                   : absl::StrCat(StreamName(id), " snapshot ", key.snapshot);
    s.info.pid = pid;
    s.info.tid = tid;
    s.info.comm = tid != 0 ? r.timeline.CommAt(tid, start) : "";
    s.info.last_comm = tid != 0 ? LastCommInProgram(r.timeline, pid, tid, start) : "";
    s.info.forked = pid != 0 && r.timeline.RunsForkedProgram(pid, start);
    s.info.bytes = stream.bytes;
    if (trace_start) s.epoch = r.timeline.EpochAt(pid, *trace_start);
    out.push_back(std::move(s));
  }
  return out;
}

// An emulated recording counts the instructions it traced (end.instructions): a decode of all
// of it that finds another number says so (with losses too: how much they took is not known
// otherwise; a SIGKILL in a loop with no packet took the whole loop). A loop of direct
// jumps only (`for (;;) x++;` at -O0) writes no packet, so Intel PT cannot tell how many times
// it went round: the decode follows it once, up to where tracing stopped.
std::string CountMismatch(const Recording& r, const RecordingOptions& options,
                          const DecodeTotals& totals) {
  const RecordingMetadata& m = r.metadata;
  if (!m.end || !m.end->instructions || !m.emulated ||
      *m.emulated == RecordingMetadata::kEmulatedSynthesized || options.cpu || options.tid ||
      options.snapshot || m.mode.value_or("full-trace") != "full-trace" ||
      (m.emulation && m.emulation->filter && !m.emulation->filter->empty()) ||
      *m.end->instructions == totals.instructions) {
    return "";
  }
  const uint64_t counted = *m.end->instructions;
  if (counted > totals.instructions) {
    // (With losses or errors: those, and maybe also what follows.)
    return fmt::format(
        "{}: the recorder counted {} instructions and the trace holds {}: {} ran where the trace "
        "cannot show them ({}a loop of direct jumps only makes no packet, so how many times it "
        "went round is not in the trace; or a thread's last block, cut short by its end; or, "
        "under qemu, a block a fault cut short, counted whole)",
        r.name, counted, totals.instructions, counted - totals.instructions,
        totals.losses + totals.errors != 0 ? "the losses and errors said; " : "");
  }
  return fmt::format("{}: the recorder counted {} instructions and the decode finds {} ({} more)",
                     r.name, counted, totals.instructions, totals.instructions - counted);
}

}  // namespace

RecordingImages::RecordingImages(const Recording& r, const RecordingOptions& options)
    : r_(r), sysroot_(options.sysroot), buildid_dir_(options.buildid_dir) {}

void RecordingImages::ShareSymbolsWith(RecordingImages& other) {
  if (!other.link_symbols_) other.link_symbols_ = ProgramImage::NewLinkSymbolCache();
  link_symbols_ = other.link_symbols_;
}

bool RecordingImages::Fit(const Recording& r, const RecordingOptions& options) const {
  return &r == &r_ && options.sysroot == sysroot_ && options.buildid_dir == buildid_dir_;
}

absl::StatusOr<ProgramImage*> RecordingImages::For(uint32_t pid, size_t epoch) {
  const std::vector<Sideband::EpochStart>& starts = r_.timeline.EpochStarts(pid);
  if (starts.empty()) epoch = 0;  // one program: all its mappings either way
  auto it = images_.find({pid, epoch});
  if (it != images_.end()) return it->second.get();
  // The epoch's time span: from the exec (or code mapped over code) that began it to the next.
  uint64_t from = 0, to = kForever;
  if (epoch != kAllEpochs) {
    if (epoch > 0 && epoch <= starts.size()) from = starts[epoch - 1].time;
    if (epoch < starts.size()) to = starts[epoch].time;
  }
  if (!iscache_) {
    PTKIT_ASSIGN_OR_RETURN(iscache_, ProgramImage::CreateSectionCache());
  }
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ProgramImage> image, ProgramImage::Create(iscache_));
  image->set_sysroot(sysroot_);
  image->set_buildid_dir(buildid_dir_);
  if (!link_symbols_) link_symbols_ = ProgramImage::NewLinkSymbolCache();
  image->set_link_symbol_cache(link_symbols_);
  static const std::vector<CapturedCode> kNone;
  auto c = r_.captured.find(pid);
  const std::vector<CapturedCode>& code = c == r_.captured.end() ? kNone : c->second;
  // ptrecord --kcore: the kernel text (code of pid 0) is in every process, named by kallsyms.
  auto k = r_.captured.find(0);
  const std::vector<CapturedCode>& kernel = k == r_.captured.end() || pid == 0 ? kNone : k->second;
  bool kernel_code = false;
  for (const std::vector<CapturedCode>* list : {&code, &kernel}) {
    for (const CapturedCode& c : *list) {
      if (list == &kernel && !(c.flags & kCodeKernel)) continue;
      if (IsArchivedRange(c)) continue;  // placed by the mappings of this epoch (below)
      kernel_code |= (c.flags & kCodeKernel) != 0;
      // Mapped, not copied: the pages are the spool's (copy-on-write for libelf's sake).
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r_.spool->Map(c.run, /*private_copy=*/true));
      auto owner = std::make_shared<SpoolView>(std::move(view));
      image->AddBytes(c.path, c.address, owner->private_bytes(), owner);
    }
  }
  if (kernel_code) image->AddSymbols(KernelSymbols());
  for (const Mapping* mapping : r_.timeline.MappingsDuring(pid, from, to)) {
    const Mapping& m = *mapping;
    const bool vdso = m.path == "[vdso]";
    if (!(m.prot & PROT_EXEC) || m.path.empty() || (m.path[0] != '/' && !vdso)) continue;
    // The file's archived bytes (--archive) where it is mapped in this program: by the file, not
    // by the process that archived them (sweep 32b F1, F2: a program exec'd at the addresses of
    // the one before had that one's code, each in the other's image; a forked child, which
    // archived nothing of its own, had none).
    PTKIT_ASSIGN_OR_RETURN(bool archived, AddArchived(*image, m));
    if (archived) continue;
    bool covered = false;
    for (const CapturedCode& c : code) {
      if (IsArchivedRange(c)) continue;
      // Code from text pokes (JIT code) replaces no file's but the export's files of it and
      // those no path names or that hold no program: a memfd ("/memfd:NAME (deleted)"), a
      // deleted file, shared memory or a device (/dev/shm/NAME, /dev/zero), whose blocks the
      // qemu backend captures as JIT code.
      if ((c.flags & kCodeTextPoke) && m.path[0] == '/' && m.path != "//anon" &&
          !m.path.starts_with(kExportedJitDir) && !m.path.starts_with("/memfd:") &&
          !m.path.ends_with(" (deleted)") && !m.path.starts_with("/dev/")) {
        continue;
      }
      covered |= c.address < m.end && m.start < c.address + c.run.size;
    }
    if (covered) continue;
    if (vdso) {
      // Not captured: perf's build-id cache may hold it ([vdso]/BUILDID/vdso), as perf finds it.
      const std::string cached = FromBuildIdCache(m);
      if (!cached.empty() &&
          !image->AddFileMapping(cached, m.start, m.end - m.start, m.pgoff).ok()) {
        image->AddMissing(cached, m.start, m.end);
      }
      continue;
    }
    const std::string file = sysroot_ + m.path;
    // The file at the path, unless it is another build than the recording's and the build-id
    // cache has that one (as perf looks in its cache first): the file rebuilt since.
    const std::vector<uint8_t>& recorded = RecordedBuildId(r_, m);
    std::optional<std::vector<uint8_t>> other_build;
    if (!recorded.empty()) {
      if (const auto& id = BuildIdOf(file); id.ok() && *id != recorded) other_build = *id;
    }
    if (other_build) {
      const std::string cached = FromBuildIdCache(m);
      if (!cached.empty() &&
          image->AddFileMapping(cached, m.start, m.end - m.start, m.pgoff, file).ok()) {
        continue;
      }
      if (warned_.insert(file).second) {
        warnings_.push_back(fmt::format(
            "{}: build-id {} differs from the recorded {} (rebuilt since?): decoding with it may "
            "be wrong; put the recorded build in a build-id cache (--buildid-dir DIR; perf "
            "buildid-cache -a FILE) or under --sysroot DIR{}",
            file, other_build->empty() ? std::string("(none)") : Hex(*other_build), Hex(recorded),
            ArchiveAdvice()));
      }
    } else if (recorded.empty() && ChangedSinceRecorded(file, m.path) &&
               warned_.insert(file).second) {
      // No build-id to look the recorded one up by: only said (sweep 29b S1: the profile of
      // a rebuilt program, its branches swapped, was wrong with no word).
      warnings_.push_back(fmt::format(
          "{}: not the file that was recorded (it has no build-id, and its content differs from "
          "the recorded file's: rebuilt since?): decoding with it may be wrong; put the recorded "
          "file under --sysroot DIR{}",
          file, ArchiveAdvice()));
    }
    absl::Status st = image->AddFileMapping(file, m.start, m.end - m.start, m.pgoff);
    if (!st.ok()) {
      const std::string cached = FromBuildIdCache(m);
      if (cached.empty() ||
          !image->AddFileMapping(cached, m.start, m.end - m.start, m.pgoff, file).ok()) {
        image->AddMissing(file, m.start, m.end);
        // Said once, by every decode (a gap's error code alone did not name it: sweep 27 S3),
        // of a file (not perf's //anon, a memfd, a device or shared memory: no file to find).
        const bool a_file = !m.path.starts_with("//") && !m.path.starts_with("/memfd:") &&
                            !m.path.starts_with("/dev/") && !m.path.starts_with("/SYSV");
        if (a_file && warned_.insert("missing\n" + file).second) {
          warnings_.push_back(
              fmt::format("{} could not be loaded ({}): what ran in it is a gap{}", file,
                          std::string(st.message()),
                          sysroot_.empty() ? " (--sysroot DIR where it is elsewhere)" : ""));
        }
      }
    }
  }
  // A separate debug file of another build (sweep 38a F1: its names named the new code).
  for (const ImageFile& f : image->files()) {
    if (f.refused_debug.empty() || !warned_.insert("debug\n" + f.refused_debug).second) continue;
    warnings_.push_back(
        fmt::format("{}: the debug file {} is another build's (its build-id, or the CRC-32 that "
                    ".gnu_debuglink gives, is not this file's): its symbols and lines are not used",
                    f.name, f.refused_debug));
  }
  // Code of two files at one address in one image: the later mapping's is decoded throughout.
  for (const ProgramImage::Overlap& o : image->overlaps()) {
    const std::string& replaced = image->files()[o.replaced].name;
    const std::string& by = image->files()[o.by].name;
    if (replaced == by) continue;  // the same file again: the same code
    if (!warned_.insert(fmt::format("overlap {} {}\n{}", pid, replaced, by)).second) continue;
    warnings_.push_back(fmt::format(
        "process {}: {} was mapped at {:#x}-{:#x} where {} was before, and {}: the code there is "
        "decoded as {}'s throughout, so what ran there of {} decodes wrongly",
        pid, by, o.begin, o.end, replaced,
        epoch != kAllEpochs ? "one image holds every mapping of a program"
        : r_.bts            ? "BTS records have no timestamps to tell its programs apart"
                            : "the trace has no timestamps (tsc=0) to tell its programs apart",
        by, replaced));
  }
  ProgramImage* raw = image.get();
  images_.emplace(std::make_pair(pid, epoch), std::move(image));
  return raw;
}

bool RecordingImages::ChangedSinceRecorded(const std::string& path,
                                           const std::string& recorded_path) {
  auto recorded = r_.content_hashes.find(recorded_path);
  if (recorded == r_.content_hashes.end()) return false;
  auto [it, inserted] = changed_.try_emplace(path, false);
  if (inserted) {
    absl::StatusOr<uint64_t> hash = ContentHash(path);
    it->second = hash.ok() && *hash != recorded->second;
  }
  return it->second;
}

const absl::StatusOr<std::vector<uint8_t>>& RecordingImages::BuildIdOf(const std::string& path) {
  auto it = build_ids_.find(path);
  if (it == build_ids_.end()) it = build_ids_.emplace(path, ReadBuildId(path)).first;
  return it->second;
}

absl::StatusOr<bool> RecordingImages::AddArchived(ProgramImage& image, const Mapping& m) {
  if (!archived_ranges_) {
    // Each archived range of a file once (every process that mapped it archived it).
    archived_ranges_.emplace();
    std::set<std::tuple<std::string, std::vector<uint8_t>, uint64_t, uint64_t>> seen;
    for (const auto& [pid, list] : r_.captured) {
      for (const CapturedCode& c : list) {
        if (IsArchivedRange(c) && seen.emplace(c.path, c.build_id, c.pgoff, c.run.size).second) {
          (*archived_ranges_)[c.path].push_back(&c);
        }
      }
    }
  }
  auto it = archived_ranges_->find(m.path);
  if (it == archived_ranges_->end()) return false;
  const std::vector<uint8_t>& recorded = RecordedBuildId(r_, m);
  const uint64_t from = m.pgoff, to = m.pgoff + (m.end - m.start);  // file offsets mapped
  bool added = false;
  for (const CapturedCode* c : it->second) {
    if (!recorded.empty() && !c->build_id.empty() && c->build_id != recorded) continue;
    const uint64_t lo = std::max(from, c->pgoff), hi = std::min(to, c->pgoff + c->run.size);
    if (lo >= hi) continue;
    // Mapped, not copied: the pages are the spool's (copy-on-write for libelf's sake).
    PTKIT_ASSIGN_OR_RETURN(SpoolView view, r_.spool->Map(c->run, /*private_copy=*/true));
    auto owner = std::make_shared<SpoolView>(std::move(view));
    // Its names from the file where this machine has the same one (the container holds no
    // symbol table).
    const std::string& file = ArchivedFileHere(*c);
    image.AddArchivedBytes(c->path, m.start + (lo - from),
                           owner->private_bytes().subspan(lo - c->pgoff, hi - lo), owner, lo, file,
                           ArchivedDebugFile(*c, file));
    added = true;
  }
  return added;
}

std::string RecordingImages::ArchivedFileHere(const CapturedCode& c) {
  auto [it, inserted] = archived_here_.try_emplace({c.path, c.build_id});
  if (inserted) {
    const std::string file = sysroot_ + c.path;
    absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(file);
    const bool archived = r_.archived_files.contains({c.path, c.build_id});
    // The file here when its build-id confirms it, or (no build-id recorded) when the archive
    // has no copy of its own.
    if (id.ok() && (c.build_id.empty() ? !archived : *id == c.build_id)) {
      it->second = file;
    } else if (auto a = r_.archived_files.find({c.path, c.build_id});
               a != r_.archived_files.end() && r_.spool) {
      // Not here: the recording's copy, written out for libelf (symbols, line tables).
      it->second = WriteOut(a->second, c.path);
    }
  }
  return it->second;
}

std::string RecordingImages::ArchivedDebugFile(const CapturedCode& c, const std::string& file) {
  auto [it, inserted] = archived_debug_.try_emplace({c.path, c.build_id});
  if (!inserted || file.empty() || r_.archived_debug_files.empty() || !r_.spool) {
    return it->second;
  }
  // By build-id (a debug file carries its file's); else, as FindDebugFile checks it, by the
  // .gnu_debuglink name and CRC-32 of a file without one.
  const SpoolRun* found = nullptr;
  if (!c.build_id.empty()) {
    for (const auto& [key, run] : r_.archived_debug_files) {
      if (key.second == c.build_id) found = &run;
    }
  }
  if (found == nullptr) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(file);
    const ElfFile::DebugLink link = elf.ok() ? elf->GnuDebugLink() : ElfFile::DebugLink{};
    for (const auto& [key, run] : r_.archived_debug_files) {
      if (found != nullptr || link.name.empty() || !link.crc ||
          std::filesystem::path(key.first).filename() != link.name) {
        continue;
      }
      absl::StatusOr<SpoolView> bytes = r_.spool->Map(run);
      if (bytes.ok() && Crc32(bytes->bytes()) == *link.crc) found = &run;
    }
  }
  if (found != nullptr) it->second = WriteOut(*found, c.path + ".debug");
  return it->second;
}

std::string RecordingImages::WriteOut(const SpoolRun& run, const std::string& path) {
  absl::StatusOr<SpoolView> view = r_.spool->Map(run);
  if (!view.ok()) return "";
  const std::filesystem::path base = std::filesystem::path(path).filename();
  std::error_code ec;
  std::string file =
      (std::filesystem::temp_directory_path(ec) / ("ptdecode-XXXXXX-" + base.string())).string();
  ScopedFd fd(::mkstemps(file.data(), static_cast<int>(base.string().size()) + 1));
  if (!fd.valid()) return "";
  ::unlink(file.c_str());
  std::span<const uint8_t> bytes = view->bytes();
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  std::string name = absl::StrCat("/proc/self/fd/", fd.get());
  written_out_.push_back(std::move(fd));
  return name;
}

const std::vector<Symbol>& RecordingImages::KernelSymbols() {
  if (kernel_symbols_) return *kernel_symbols_;
  kernel_symbols_.emplace();
  auto t = r_.kernel_tables.find("/proc/kallsyms");
  if (t == r_.kernel_tables.end()) return *kernel_symbols_;
  for (KallsymsEntry& e : ParseKallsyms(t->second)) {
    if (!IsKallsymsText(e.type) || !e.module.empty()) continue;
    // Of several names at one address, the one perf picks (AliasRank: startup_64, not _stext
    // or _text). kallsyms gives no sizes: perf's symbols from it have none either.
    const uint32_t rank =
        AliasRank(e.name, /*sized=*/false, /*label=*/false, /*ifunc=*/false,
                  e.type == 'W' || e.type == 'w', std::isupper(e.type) != 0 && e.type != 'W');
    kernel_symbols_->push_back(
        {.begin = e.address, .end = 0, .name = std::move(e.name), .rank = rank});
  }
  return *kernel_symbols_;
}

const std::vector<uint8_t>& RecordedBuildId(const Recording& r, const Mapping& m) {
  if (!m.build_id.empty()) return m.build_id;
  static const std::vector<uint8_t> kNone;
  auto it = r.build_ids.find(m.path);
  return it == r.build_ids.end() ? kNone : it->second;
}

std::string RecordingImages::ArchiveAdvice() const {
  if (r_.archived_files.empty()) return ", or record with --archive";
  return " (the recording archived other files, not this one: ptrecord said why when it "
         "recorded, e.g. the file changed while the command ran)";
}

std::string RecordingImages::FromBuildIdCache(const Mapping& m) const {
  return BuildIdCacheFile(r_, m, buildid_dir_);
}

std::string BuildIdCacheFile(const Recording& r, const Mapping& m, const std::string& buildid_dir) {
  if (buildid_dir.empty()) return "";
  const std::vector<uint8_t>& id = RecordedBuildId(r, m);
  if (id.empty()) return "";
  const std::string hex = Hex(id);
  std::string link = absl::StrCat(buildid_dir, "/.build-id/", hex.substr(0, 2), "/", hex.substr(2));
  struct stat st;
  for (const char* name : {"/elf", "/vdso"}) {
    if (stat((link + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) return link + name;
  }
  if (stat(link.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return link;
  return "";
}

void RecordingImages::DropGraphs(uint32_t pid) {
  for (auto it = images_.lower_bound({pid, 0}); it != images_.end() && it->first.first == pid;
       ++it) {
    it->second->fast_decoder_graphs().reset();
  }
}

absl::StatusOr<DecodeTotals> DecodeRecording(const Recording& r, const RecordingOptions& options,
                                             Sink& sink, RecordingImages* shared_images) {
  const std::string& path = r.name;
  const TraceConfig config = options.config.Over(r.config);
  if (shared_images != nullptr && !shared_images->Fit(r, options)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": the images given were made for another recording, sysroot or "
                     "build-id cache"));
  }
  std::optional<RecordingImages> own_images;
  RecordingImages& images =
      shared_images != nullptr ? *shared_images : own_images.emplace(r, options);
  const uint64_t bts_ring = r.bts ? KernelBtsRingSize(r.metadata) : 0;

  DecodeTotals totals;
  std::vector<Selected> selected = SelectStreams(r, options, config);
  if (selected.empty() && Filtered(options)) {
    return absl::NotFoundError(NothingSelected(path, r, options));
  }
  // -j: streams that need no switcher are decoded in parallel, each thread with images of its
  // own (libipt's images are not thread-safe), made when a piece of several chunks needs them.
  const ParallelOptions parallel = GetParallelOptions();
  std::vector<std::unique_ptr<RecordingImages>> worker_images;
  if (DecodesInParallel() && !r.bts) {
    for (unsigned i = 0; i < parallel.jobs; ++i) {
      worker_images.push_back(std::make_unique<RecordingImages>(r, options));
      worker_images.back()->ShareSymbolsWith(images);
    }
  }
  // After a process's last stream the decoding graphs of its images go (the images stay: the
  // sinks name code by them), so that the graphs held are those of one process, not of every
  // process the recording has (sweep 31b F1: 57 MB more per compile of a build). Not where a
  // per-CPU stream may switch to any process.
  std::map<uint32_t, size_t> streams_left;
  for (const Selected& s : selected) ++streams_left[s.info.pid];
  for (Selected& s : selected) {
    PTKIT_ASSIGN_OR_RETURN(s.info.image, images.For(s.info.pid, s.epoch));

    StreamSink out(sink, s.by_task ? options.tid : std::nullopt);
    out.Begin(s.info);
    // A block sink's blocks as any -j gives them (the switcher's context switches through it,
    // in order with the blocks).
    CanonicalBlocks canonical(out, *s.info.image);
    Sink& flow = !r.bts && sink.kind() == DecoderKind::kBlock ? static_cast<Sink&>(canonical)
                                                              : static_cast<Sink&>(out);
    // A per-CPU stream follows the tasks scheduled on its CPU, and any stream the programs
    // its process exec'd (needs TSC in the trace and the recording's time conversion).
    std::unique_ptr<TaskSwitcher> switcher;
    const bool per_cpu = s.key->id.kind == StreamKind::kCpu;
    // (Also a thread's stream whose tid went to another process: review 36 M1.)
    const bool tid_moves = !per_cpu && r.timeline.ProcessesOfTid(s.info.tid) > 1;
    if (!r.bts && r.time && (per_cpu || tid_moves || !r.timeline.EpochStarts(s.info.pid).empty())) {
      switcher = std::make_unique<TaskSwitcher>(
          s.info, s.epoch,
          per_cpu ? std::optional<uint32_t>(static_cast<uint32_t>(s.key->id.id)) : std::nullopt,
          r.timeline, *r.time,
          [&](uint32_t p, size_t epoch) -> ProgramImage* {
            auto image = images.For(p, epoch);
            return image.ok() ? *image : nullptr;
          },
          flow);
    }
    std::vector<const ProgramImage*> workers;  // made for the first piece of several chunks
    // A switcher that never switches: a thread's stream whose program is known at its start
    // and not exec'd after it (its tracing began at the exec). Such a stream decodes in
    // parallel as well, told the time as the switcher has it told.
    const bool still = switcher && !per_cpu && !tid_moves && s.epoch != kAllEpochs &&
                       r.timeline.EpochAt(s.info.pid, kForever) == s.epoch;
    // Filtered by task, the stream's totals are what the sink was shown.
    DecodeTotals decoded;
    DecodeTotals& into = s.by_task ? decoded : totals;
    for (const Piece& piece : s.stream->pieces) {
      for (const LossInfo& loss : piece.losses_before) out.OnLoss(loss);
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(piece.run));
      out.SetView(&view, piece.aux_offset);
      const ProgramImage& now = switcher ? *switcher->current() : *s.info.image;
      // The switcher is at the stream's program (a trace whose time is before the exec, e.g.
      // damaged, starts at the one before: it would switch, and the workers' images, the
      // stream's, would not be the merge's; fuzzer: UBSan in CallStack::Unknown, a file index
      // of one image into the other's empty list).
      const bool stays = still && &now == s.info.image;
      const uint64_t chunk_bytes =
          worker_images.empty() ? 0 : ChunkBytesFor(out, now, parallel, view.bytes(), config);
      if (r.bts) {
        // A snapshot's offsets are not the ring's (AddSnapshot).
        const uint64_t ring = s.key->snapshot < 0 ? bts_ring : 0;
        PTKIT_RETURN_IF_ERROR(DecodeBtsInto(view.bytes(), now, out, into, piece.aux_offset, ring));
      } else if ((!switcher || stays) && chunk_bytes != 0 && view.bytes().size() > chunk_bytes) {
        if (workers.empty()) {
          for (auto& cache : worker_images) {
            PTKIT_ASSIGN_OR_RETURN(workers.emplace_back(), cache->For(s.info.pid, s.epoch));
          }
        }
        PTKIT_RETURN_IF_ERROR(DecodeInParallel(view.bytes(), config, now, workers, out, into,
                                               piece.aux_offset, chunk_bytes,
                                               /*stats=*/nullptr, /*follow_time=*/stays));
      } else if (const OneThread plan =
                     !switcher || stays
                         ? PlanOneThread(view.bytes(), config, out, now, piece.aux_offset)
                         : OneThread{};
                 plan.chunk_bytes != 0) {
        PTKIT_RETURN_IF_ERROR(DecodeInChunksAlone(view.bytes(), config, now, out, into,
                                                  piece.aux_offset, plan.chunk_bytes,
                                                  /*stats=*/nullptr, /*follow_time=*/stays));
      } else {
        canonical.SetImage(now);
        PTKIT_RETURN_IF_ERROR(DecodeInto(view.bytes(), config, now, flow, into, piece.aux_offset,
                                         switcher.get(),
                                         plan.coverage ? &*plan.coverage : nullptr));
        canonical.Flush();
        into.blocks -= canonical.TakeJoined();
      }
      out.SetView(nullptr, 0);
    }
    for (const LossInfo& loss : s.stream->losses_after) out.OnLoss(loss);  // at the end
    if (s.by_task) {
      totals.trace_bytes += decoded.trace_bytes;
      AddFlowTotals(totals, out.shown());
    }
    totals.losses += out.shown().losses;
    totals.lost_bytes += out.shown().lost_bytes;
    totals.unknown_size_losses += out.shown().unknown_size_losses;
    totals.streams += out.announced() ? 1 : 0;
    if (!per_cpu && --streams_left[s.info.pid] == 0) {
      images.DropGraphs(s.info.pid);
      for (auto& cache : worker_images) cache->DropGraphs(s.info.pid);
    }
  }
  totals.warnings = r.warnings;
  totals.losses += r.unplaced.losses;
  totals.lost_bytes += r.unplaced.lost_bytes;
  totals.unknown_size_losses += r.unplaced.unknown_size_losses;
  for (const std::string& w : images.warnings()) totals.warnings.push_back(w);
  if (std::string w = CountMismatch(r, options, totals); !w.empty()) totals.warnings.push_back(w);
  PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
  if (options.tid && totals.streams == 0) {
    // Per-CPU streams followed by task: the thread never ran while they traced.
    const std::vector<uint32_t> pids = r.timeline.Pids();
    return absl::NotFoundError(
        absl::StrCat(path, ": thread ", *options.tid,
                     " did not run while the CPU streams traced; processes in "
                     "this recording: ",
                     Join(std::set<uint64_t>(pids.begin(), pids.end()))));
  }
  return totals;
}

absl::StatusOr<std::vector<std::string>> ForEachSample(const Recording& r,
                                                       const RecordingOptions& options,
                                                       const SampleFn& fn) {
  RecordingImages images(r, options);
  for (const AuxSample& s : r.samples) {
    const uint32_t pid = s.fields.pid;
    PTKIT_ASSIGN_OR_RETURN(ProgramImage * image,
                           images.For(pid, r.timeline.EpochAt(pid, s.fields.time)));
    std::span<const uint8_t> bytes;
    std::optional<SpoolView> view;
    if (s.snippet.size > 0) {
      PTKIT_ASSIGN_OR_RETURN(view, r.spool->Map(s.snippet));
      bytes = view->bytes();
    }
    PTKIT_RETURN_IF_ERROR(fn(s, *image, bytes));
  }
  return images.warnings();
}

absl::Status DumpRecordingPackets(const Recording& r, const RecordingOptions& options,
                                  std::FILE* out, const OutputOptions& output,
                                  uint64_t* trace_bytes) {
  const std::string& path = r.name;
  if (r.bts) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an intel_bts recording has branch records, not Intel PT packets"));
  }
  const TraceConfig config = options.config.Over(r.config);
  std::vector<Selected> selected = SelectStreams(r, options, config);
  if (selected.empty() && Filtered(options)) {
    return absl::NotFoundError(NothingSelected(path, r, options));
  }
  ProgressLine progress(options.progress);
  uint64_t total = 0, done = 0;  // trace bytes
  for (const Selected& s : selected) total += s.stream->bytes;
  if (trace_bytes != nullptr) *trace_bytes = total;
  for (const Selected& s : selected) {
    PacketContext context;
    context.stream = &s.info;
    context.on_progress = [&](uint64_t offset) { progress.Update(done + offset, total); };
    // Filtered by task: the packets while the thread runs, by the last TSC packet's time; the
    // stream's header only if the thread ran on it.
    std::optional<TaskId> task;
    bool shown = false;
    if (s.by_task) {
      context.stream_shown = &shown;
      task = TaskId{s.info.pid, s.info.tid};
      context.keep = [&, cpu = static_cast<uint32_t>(s.key->id.id)](const pt_packet& p) {
        if (p.type == ppt_tsc) {
          if (auto t = r.timeline.TaskOnCpu(cpu, r.time->ToPerfTime(p.payload.tsc.tsc))) task = t;
        }
        return task->tid == *options.tid;
      };
    }
    for (const Piece& piece : s.stream->pieces) {
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(piece.run));
      context.losses = piece.losses_before;
      context.offset_base = piece.aux_offset;
      PTKIT_RETURN_IF_ERROR(DumpPackets(view.bytes(), config, out, output, context));
      done += view.bytes().size();
      if (!s.by_task || shown) context.stream = nullptr;
    }
    if (!s.stream->losses_after.empty()) {
      context.losses = s.stream->losses_after;
      PTKIT_RETURN_IF_ERROR(DumpPackets({}, config, out, output, context));
    }
  }
  return absl::OkStatus();
}

uint64_t TraceBytes(const Recording& r) {
  uint64_t total = 0;
  for (const auto& [key, stream] : r.streams) total += stream.bytes;
  return total;
}

absl::StatusOr<nlohmann::json> DecodeRecordingSummary(const Recording& r,
                                                      const RecordingOptions& options) {
  // Blocks as stats, calls and folded count them: a call ends one (sweep 31b F3: info --decode
  // said 4-15% fewer blocks than stats of the same recording). The totals are the decode's; the
  // sink reads nothing of a block, so the fast decoder walks its cached blocks and runs for it
  // as for stats (sweep 39b N1: a block at a time, info --decode took 4.4x the CPU of stats).
  class Counter : public Sink {
    bool end_block_on_call() const override { return true; }
    bool coarse_block_class() const override { return true; }
    void OnWholeBlock(const pt_block&, BlockMemo&) override {}
    void OnWholeRun(const WalkedRun&) override {}
  };
  std::unique_ptr<Sink> sink =
      WithProgress(std::make_unique<Counter>(), options.progress, TraceBytes(r));
  PTKIT_ASSIGN_OR_RETURN(DecodeTotals t, DecodeRecording(r, options, *sink));
  nlohmann::json codes = nlohmann::json::object();
  for (const auto& [code, n] : t.errors_by_code) codes[IptErrorName(code)] = n;
  return nlohmann::json{{"streams", t.streams},    {"instructions", t.instructions},
                        {"blocks", t.blocks},      {"syncs", t.syncs},
                        {"errors", t.errors},      {"gaps", t.gaps},
                        {"losses", t.losses},      {"lost_bytes", t.lost_bytes},
                        {"errors_by_code", codes}, {"warnings", t.warnings}};
}

}  // namespace ptkit::decoder
