#include "record/trigger.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "ptkit/aux_sample.h"
#include "ptkit/numbers.h"
#include "ptkit/perf_records.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "record/address_filter.h"
#include "record/proc_maps.h"
#include "record/ring.h"
#include "record/text_util.h"
#include "record/workload.h"

namespace ptkit::record {
namespace {

constexpr std::string_view kPrefix = "uprobe:";
constexpr uint64_t kHitSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;

}  // namespace

absl::StatusOr<TriggerSpec> ParseTrigger(std::string_view text, const std::string& program) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--trigger '", std::string(text),
                                                   "': ", std::string(why),
                                                   " (expected uprobe:FUNC or uprobe:FUNC@FILE)"));
  };
  if (!text.starts_with(kPrefix)) return bad("not a uprobe trigger");
  std::string_view rest = text.substr(kPrefix.size());
  TriggerSpec spec;
  spec.text = std::string(text);
  std::string file;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    file = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (file.empty()) return bad("empty FILE after '@'");
  } else if (program.empty()) {
    return bad("no workload to find FUNC in: name the file");
  } else {
    // The program as execvp finds it; as given when it does not (the uprobe then names it).
    file = FindOnPath(program);
    if (file.empty()) file = program;
  }
  if (rest.empty()) return bad("no FUNC");
  spec.function = std::string(rest);
  // A 'start' filter is one address: FUNC's file offset, as --filter resolves it.
  absl::StatusOr<std::vector<AddressFilter>> resolved =
      ParseAddressFilters(absl::StrCat("start ", spec.function, " @ ", file));
  if (!resolved.ok()) {
    // (Said without the filter it was resolved as: sweep 30a F9.)
    const std::string message = absl::StrReplaceAll(
        resolved.status().message(),
        {{absl::StrCat(" in filter 'start ", spec.function, " @ ", file, "'"), ""}});
    return absl::InvalidArgumentError(
        absl::StrCat("--trigger '", std::string(text), "': ", message));
  }
  spec.file = resolved->front().file;
  spec.offset = resolved->front().offset;
  return spec;
}

absl::StatusOr<uint32_t> ParseStatParent(std::string_view stat) {
  // "pid (comm) S ppid ...": comm ends at the last ')'.
  const size_t close = stat.rfind(')');
  if (close != std::string_view::npos) {
    std::vector<std::string_view> fields;
    for (std::string_view f : Split(stat.substr(close + 1), ' ')) {
      if (!f.empty()) fields.push_back(f);
    }
    uint32_t ppid = 0;
    if (fields.size() >= 2 && ParseUnsigned(fields[1], &ppid)) return ppid;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no parent pid in '", std::string(stat.substr(0, 80)), "'"));
}

bool IsDescendant(uint32_t pid, uint32_t root, const std::string& proc_root) {
  for (int depth = 0; depth < 4096 && pid > 1; ++depth) {
    if (pid == root) return true;
    absl::StatusOr<std::string> stat = ReadSystemFile(absl::StrCat(proc_root, "/", pid, "/stat"));
    if (!stat.ok()) return false;
    absl::StatusOr<uint32_t> parent = ParseStatParent(*stat);
    if (!parent.ok()) return false;
    pid = *parent;
  }
  return pid == root;
}

bool RestoreProbedBytes(uint32_t tid, uint64_t ip, std::span<uint8_t> bytes) {
  if (bytes.empty() || bytes[0] != 0xcc) return false;
  absl::StatusOr<std::vector<ProcMapping>> maps = ReadProcMaps(absl::StrCat(tid));
  if (!maps.ok()) return false;
  for (const ProcMapping& m : *maps) {
    if (ip < m.start || ip >= m.end) continue;
    if (m.path.empty() || m.path[0] != '/') return false;
    ScopedFd fd(::open(m.path.c_str(), O_RDONLY | O_CLOEXEC));
    uint8_t original = 0;
    if (!fd.valid() ||
        ::pread(fd.get(), &original, 1, static_cast<off_t>(m.offset + (ip - m.start))) != 1 ||
        original == 0xcc) {
      return false;
    }
    bytes[0] = original;
    return true;
  }
  return false;
}

absl::StatusOr<UprobeTrigger> UprobeTrigger::Open(const TriggerSpec& spec,
                                                  std::span<const int> cpus, int clockid,
                                                  uint64_t data_pages,
                                                  const std::string& sysfs_root) {
  PmuRegistry pmus(sysfs_root);
  absl::StatusOr<Pmu> pmu = pmus.Find("uprobe");
  if (!pmu.ok()) {
    return absl::NotFoundError(
        absl::StrCat("--trigger needs the kernel's uprobe PMU: ", pmu.status().message(),
                     " (a kernel with CONFIG_UPROBE_EVENTS)"));
  }
  UprobeTrigger t;
  t.spec_ = spec;
  t.sample_type_ = kHitSampleType;
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = pmu->type;
  attr.config = 0;                                               // retprobe (config:0) off
  attr.config1 = reinterpret_cast<uint64_t>(spec.file.c_str());  // uprobe_path, copied at open
  attr.config2 = spec.offset;                                    // probe_offset
  attr.sample_period = 1;
  attr.sample_type = kHitSampleType;
  attr.wakeup_events = 1;
  if (clockid >= 0) {
    attr.use_clockid = 1;
    attr.clockid = clockid;
  }
  for (int cpu : cpus) {
    const std::string what =
        absl::StrCat("uprobe event of --trigger ", spec.text, " (cpu ", cpu, ")");
    PTKIT_ASSIGN_OR_RETURN(PerfEvent event, PerfEvent::Open(attr, -1, cpu, what));
    PTKIT_ASSIGN_OR_RETURN(RingBuffer ring,
                           RingBuffer::Map(event, data_pages, 0, false, cpus.size()));
    t.cpus_.push_back(Cpu{std::move(event), std::move(ring), cpu});
  }
  return t;
}

std::vector<int> UprobeTrigger::poll_fds() const {
  std::vector<int> fds;
  for (const Cpu& c : cpus_) fds.push_back(c.event.fd());
  return fds;
}

bool UprobeTrigger::Pending() const {
  for (const Cpu& c : cpus_) {
    const perf_event_mmap_page* page = c.ring.page();
    if (LoadDataHead(page) != page->data_tail) return true;
  }
  return false;
}

absl::StatusOr<std::vector<TriggerHit>> UprobeTrigger::Poll(
    const std::function<bool(uint32_t)>& keep) {
  std::vector<TriggerHit> hits;
  absl::Status status;
  std::vector<uint8_t> bytes;
  for (Cpu& c : cpus_) {
    RingView ring = c.ring.view();
    const uint64_t head = LoadDataHead(ring.page);
    const uint64_t tail = ring.page->data_tail;
    bytes.clear();
    AppendFromRing(ring.data, tail, head - tail, bytes);
    std::span<const uint8_t> left(bytes);
    while (!left.empty()) {
      absl::StatusOr<perf::RecordView> r = perf::ReadRecord(left);
      if (!r.ok()) {
        if (status.ok())
          status = absl::DataLossError(
              absl::StrCat("trigger ring of cpu ", c.cpu, ": ", r.status().message()));
        break;
      }
      left = left.subspan(r->bytes.size());
      if (r->type == PERF_RECORD_LOST) {
        absl::StatusOr<perf::Lost> lost = perf::ParseLost(*r, perf::SampleIdLayout{0, false});
        if (lost.ok()) lost_ += lost->lost;
        continue;
      }
      if (r->type != PERF_RECORD_SAMPLE) continue;
      absl::StatusOr<perf::Sample> s = perf::ParseSample(*r, sample_type_);
      if (!s.ok()) {
        if (status.ok()) status = absl::DataLossError(s.status().message());
        continue;
      }
      if (keep && !keep(s->pid)) {
        ++ignored_;
        continue;
      }
      ++hits_;
      hits.push_back({s->pid, s->tid, s->ip, s->time, c.cpu});
    }
    StoreDataTail(ring.page, head);
  }
  PTKIT_RETURN_IF_ERROR(status);
  std::stable_sort(hits.begin(), hits.end(),
                   [](const TriggerHit& a, const TriggerHit& b) { return a.time < b.time; });
  return hits;
}

uint64_t UprobeTrigger::TakeForSnapshots(uint64_t n) {
  const uint64_t taken = limit_ == 0 ? n : std::min(n, limit_ - std::min(limit_, snapshot_hits_));
  snapshot_hits_ += taken;
  return taken;
}

std::function<absl::StatusOr<uint64_t>()> SnapshotHitsOf(UprobeTrigger& trigger, uint32_t root) {
  return [&trigger, root]() -> absl::StatusOr<uint64_t> {
    if (!trigger.Pending()) return 0;
    PTKIT_ASSIGN_OR_RETURN(std::vector<TriggerHit> hits,
                           trigger.Poll([root](uint32_t pid) { return IsDescendant(pid, root); }));
    return trigger.TakeForSnapshots(hits.size());
  };
}

}  // namespace ptkit::record
