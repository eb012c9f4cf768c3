#include "ptkit/sideband.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ptkit {
namespace {

// Ends or trims every live mapping of `maps` that overlaps [start, end) at time `t`; the parts
// outside the range live on as new mappings.
void Unmap(std::vector<Mapping>& maps, uint64_t start, uint64_t end, uint64_t t) {
  std::vector<Mapping> remainders;
  for (Mapping& m : maps) {
    if (m.to != kForever || m.end <= start || end <= m.start) continue;
    if (m.start < start) {
      Mapping left = m;
      left.end = start;
      left.from = t;
      remainders.push_back(left);
    }
    if (end < m.end) {
      Mapping right = m;
      right.pgoff += end - m.start;
      right.start = end;
      right.from = t;
      remainders.push_back(right);
    }
    m.to = t;
  }
  maps.insert(maps.end(), remainders.begin(), remainders.end());
}

void EndAll(std::vector<Mapping>& maps, uint64_t t) {
  for (Mapping& m : maps) {
    if (m.to == kForever) m.to = t;
  }
}

}  // namespace

absl::Status CheckRecordBody(const perf::RecordView& r, const perf::SampleIdLayout& layout) {
  switch (r.type) {
    case PERF_RECORD_MMAP2:
      return perf::ParseMmap2(r, layout).status();
    case PERF_RECORD_COMM:
      return perf::ParseComm(r, layout).status();
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT:
      return perf::ParseTask(r, layout).status();
    case PERF_RECORD_AUX:
      return perf::ParseAux(r, layout).status();
    case PERF_RECORD_ITRACE_START:
      return perf::ParseItraceStart(r, layout).status();
    case PERF_RECORD_LOST:
      return perf::ParseLost(r, layout).status();
    case PERF_RECORD_SWITCH:
    case PERF_RECORD_SWITCH_CPU_WIDE:
      return perf::ParseSwitch(r, layout).status();
    default:
      return absl::OkStatus();
  }
}

void SidebandBuilder::Add(int32_t cpu, std::span<const uint8_t> records) {
  Add(cpu, records, layout_);
}

void SidebandBuilder::Add(int32_t cpu, std::span<const uint8_t> records,
                          const perf::SampleIdLayout& layout) {
  perf::RecordReader reader(records);
  for (;;) {
    auto rec = reader.Next();
    if (!rec.ok()) {
      ++malformed_;
      problems_.push_back(absl::StrCat("cpu ", cpu, " sideband: ", rec.status().message()));
      return;
    }
    if (!rec->has_value()) return;
    const perf::RecordView& r = **rec;
    uint64_t time = 0;
    if (r.type != PERF_RECORD_SAMPLE && layout.sample_id_all) {
      auto id = perf::ParseSampleId(r, layout);
      if (id.ok() && id->has_time) time = id->time;
    }
    pending_.push_back(Pending{time, pending_.size(), cpu,
                               std::vector<uint8_t>(r.bytes.begin(), r.bytes.end()), layout});
  }
}

Sideband SidebandBuilder::Build() {
  Sideband sb;
  sb.problems_ = std::move(problems_);
  sb.stats_.malformed = malformed_;
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.time < b.time; });
  auto problem = [&sb](const Pending& p, const absl::Status& s) {
    ++sb.stats_.malformed;
    sb.problems_.push_back(
        absl::StrCat("cpu ", p.cpu, " sideband at time ", p.time, ": ", s.message()));
  };
  for (const Pending& p : pending_) {
    auto view = perf::ReadRecord(p.bytes);
    if (!view.ok()) {
      problem(p, view.status());
      continue;
    }
    const perf::RecordView& r = *view;
    const uint64_t t = p.time;
    switch (r.type) {
      case PERF_RECORD_MMAP2: {
        auto m = perf::ParseMmap2(r, p.layout);
        if (!m.ok()) {
          problem(p, m.status());
          break;
        }
        ++sb.stats_.mmaps;
        sb.tid_pid_[m->tid] = m->pid;
        std::vector<Mapping>& maps = sb.maps_[m->pid];
        Unmap(maps, m->addr, m->addr + m->len, t);
        maps.push_back(Mapping{.start = m->addr,
                               .end = m->addr + m->len,
                               .pgoff = m->pgoff,
                               .path = std::string(m->filename),
                               .build_id = {m->build_id.begin(), m->build_id.end()},
                               .prot = m->prot,
                               .from = t});
        break;
      }
      case PERF_RECORD_COMM: {
        auto c = perf::ParseComm(r, p.layout);
        if (!c.ok()) {
          problem(p, c.status());
          break;
        }
        ++sb.stats_.comms;
        sb.tid_pid_[c->tid] = c->pid;
        sb.comms_[c->tid].push_back({t, std::string(c->comm)});
        if (c->exec) {
          ++sb.stats_.execs;
          EndAll(sb.maps_[c->pid], t);
          sb.execs_[c->pid].push_back(t);
        }
        break;
      }
      case PERF_RECORD_FORK:
      case PERF_RECORD_EXIT: {
        auto k = perf::ParseTask(r, p.layout);
        if (!k.ok()) {
          problem(p, k.status());
          break;
        }
        sb.tid_pid_[k->tid] = k->pid;
        if (!k->exit) {
          ++sb.stats_.forks;
          if (k->pid != k->ppid) {
            // A new process: it starts with a copy of its parent's address space.
            std::vector<Mapping> copy;
            for (const Mapping& m : sb.maps_[k->ppid]) {
              if (m.to != kForever) continue;
              Mapping c = m;
              c.from = t;
              copy.push_back(std::move(c));
            }
            std::vector<Mapping>& child = sb.maps_[k->pid];
            EndAll(child, t);
            child.insert(child.end(), copy.begin(), copy.end());
          }
          auto parent_comm = sb.comms_.find(k->ptid);
          if (parent_comm != sb.comms_.end() && !parent_comm->second.empty()) {
            sb.comms_[k->tid].push_back({t, parent_comm->second.back().comm});
          }
        } else {
          // Not the end of the address space, even for the leader (tid == pid): the other
          // threads may run on after its pthread_exit. A reused pid starts afresh at its fork.
          ++sb.stats_.exits;
        }
        break;
      }
      case PERF_RECORD_ITRACE_START: {
        auto s = perf::ParseItraceStart(r, p.layout);
        if (!s.ok()) {
          problem(p, s.status());
          break;
        }
        ++sb.stats_.itrace_starts;
        uint32_t cpu = s->sample_id.has_cpu ? s->sample_id.cpu : static_cast<uint32_t>(p.cpu);
        sb.schedule_[cpu].push_back({t, TaskId{s->pid, s->tid}});
        break;
      }
      case PERF_RECORD_SWITCH:
      case PERF_RECORD_SWITCH_CPU_WIDE: {
        auto s = perf::ParseSwitch(r, p.layout);
        if (!s.ok()) {
          problem(p, s.status());
          break;
        }
        ++sb.stats_.switches;
        uint32_t cpu = s->sample_id.has_cpu ? s->sample_id.cpu : static_cast<uint32_t>(p.cpu);
        std::optional<TaskId> task;
        if (!s->out) {
          // Switch-in: the task that now runs is the one the record belongs to (its trailer).
          task = TaskId{s->sample_id.pid, s->sample_id.tid};
        }
        sb.schedule_[cpu].push_back({t, task});
        break;
      }
      case PERF_RECORD_LOST: {
        auto l = perf::ParseLost(r, p.layout);
        if (!l.ok()) {
          problem(p, l.status());
          break;
        }
        ++sb.stats_.lost_records;
        sb.stats_.lost_events += l->lost;
        break;
      }
      default:
        break;
    }
  }
  pending_.clear();
  return sb;
}

std::vector<const Mapping*> Sideband::MappingsAt(uint32_t pid, uint64_t t) const {
  std::vector<const Mapping*> out;
  auto it = maps_.find(pid);
  if (it == maps_.end()) return out;
  for (const Mapping& m : it->second) {
    if (m.live_at(t)) out.push_back(&m);
  }
  std::sort(out.begin(), out.end(),
            [](const Mapping* a, const Mapping* b) { return a->start < b->start; });
  return out;
}

const Mapping* Sideband::FindMapping(uint32_t pid, uint64_t ip, uint64_t t) const {
  auto it = maps_.find(pid);
  if (it == maps_.end()) return nullptr;
  // Later records win when two live mappings overlap (they cannot after Unmap, but a record
  // with an unknown time of 0 may).
  for (auto m = it->second.rbegin(); m != it->second.rend(); ++m) {
    if (m->live_at(t) && m->start <= ip && ip < m->end) return &*m;
  }
  return nullptr;
}

const std::vector<Mapping>* Sideband::AllMappings(uint32_t pid) const {
  auto it = maps_.find(pid);
  return it == maps_.end() ? nullptr : &it->second;
}

std::optional<TaskId> Sideband::TaskOnCpu(uint32_t cpu, uint64_t t) const {
  auto it = schedule_.find(cpu);
  if (it == schedule_.end()) return std::nullopt;
  const auto& slots = it->second;
  // The last slot that started at or before t.
  auto after = std::upper_bound(slots.begin(), slots.end(), t,
                                [](uint64_t v, const CpuSlot& s) { return v < s.time; });
  if (after == slots.begin()) return std::nullopt;
  return std::prev(after)->task;
}

std::optional<uint32_t> Sideband::PidOfTid(uint32_t tid) const {
  auto it = tid_pid_.find(tid);
  if (it == tid_pid_.end()) return std::nullopt;
  return it->second;
}

std::string Sideband::CommAt(uint32_t tid, uint64_t t) const {
  auto it = comms_.find(tid);
  if (it == comms_.end()) return "";
  std::string name;
  for (const CommSlot& c : it->second) {
    if (c.time > t) break;
    name = c.comm;
  }
  if (name.empty() && !it->second.empty()) name = it->second.front().comm;
  return name;
}

std::vector<uint32_t> Sideband::Pids() const {
  std::vector<uint32_t> pids;
  for (const auto& [pid, maps] : maps_) pids.push_back(pid);
  for (const auto& [tid, pid] : tid_pid_) pids.push_back(pid);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

// The kernel's formula (perf_event_mmap_page, "time_zero"): split the TSC so the product does
// not overflow 64 bits.
uint64_t TscConversion::ToPerfTime(uint64_t tsc) const {
  // A shift of 64 or more (only from a damaged or forged recording; the kernel's is at most
  // 32) would be undefined behaviour below: the quotient is then 0 and so is the remainder's
  // scaled product.
  if (time_shift >= 64) return time_zero;
  uint64_t quot = tsc >> time_shift;
  uint64_t rem = tsc & ((uint64_t{1} << time_shift) - 1);
  return time_zero + quot * time_mult + ((rem * time_mult) >> time_shift);
}

// perf's perf_time_to_tsc() (tools/perf/util/tsc.c).
uint64_t TscConversion::ToTsc(uint64_t perf_time) const {
  if (time_mult == 0 || time_shift >= 64) return 0;
  uint64_t t = perf_time - time_zero;
  uint64_t quot = t / time_mult;
  uint64_t rem = t % time_mult;
  return (quot << time_shift) + (rem << time_shift) / time_mult;
}

const std::vector<uint64_t>& Sideband::ExecTimes(uint32_t pid) const {
  static const std::vector<uint64_t> kNone;
  auto it = execs_.find(pid);
  return it == execs_.end() ? kNone : it->second;
}

size_t Sideband::EpochAt(uint32_t pid, uint64_t t) const {
  const std::vector<uint64_t>& execs = ExecTimes(pid);
  return static_cast<size_t>(std::upper_bound(execs.begin(), execs.end(), t) - execs.begin());
}

}  // namespace ptkit
