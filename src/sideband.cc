#include "ptkit/sideband.h"

#include <sys/mman.h>

#include <algorithm>
#include <random>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace ptkit {
namespace {

// splitmix64's finalizer: a well-mixed priority from an index and a salt.
uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
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

uint64_t Sideband::Priority(uint32_t node) const { return Mix(nodes_[node].mapping ^ salt_); }

uint32_t Sideband::Make(uint32_t mapping, uint32_t left, uint32_t right) {
  nodes_.push_back(Node{mapping, left, right});
  return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t Sideband::AddMapping(Mapping m) {
  mappings_.push_back(std::move(m));
  return Make(static_cast<uint32_t>(mappings_.size() - 1), 0, 0);
}

std::pair<uint32_t, uint32_t> Sideband::Split(uint32_t tree, uint64_t key) {
  if (tree == 0) return {0, 0};
  const Node n = nodes_[tree];  // a copy: Make() may move nodes_
  if (mappings_[n.mapping].start < key) {
    auto [low, high] = Split(n.right, key);
    return {Make(n.mapping, n.left, low), high};
  }
  auto [low, high] = Split(n.left, key);
  return {low, Make(n.mapping, high, n.right)};
}

uint32_t Sideband::Merge(uint32_t low, uint32_t high) {
  if (low == 0) return high;
  if (high == 0) return low;
  if (Priority(low) > Priority(high)) {
    const Node n = nodes_[low];
    return Make(n.mapping, n.left, Merge(n.right, high));
  }
  const Node n = nodes_[high];
  return Make(n.mapping, Merge(low, n.left), n.right);
}

uint32_t Sideband::Map(uint32_t tree, Mapping m, bool* replaces_code) {
  // Live mappings never overlap, so only the last one starting below m.start and the last
  // one starting inside m can reach past m's ends; the ones inside end whole.
  auto [below, rest] = Split(tree, m.start);
  auto [inside, above] = Split(rest, m.end);
  auto last = [this](uint32_t t) -> const Mapping* {
    if (t == 0) return nullptr;
    while (nodes_[t].right != 0) t = nodes_[t].right;
    return &mappings_[nodes_[t].mapping];
  };
  // A file's code over other code: another file's, or the same file's at another offset.
  auto file = [](const Mapping& x) {
    return (x.prot & PROT_EXEC) && x.path.starts_with('/') && !x.path.starts_with("//") &&
           !x.path.starts_with(kExportedJitDir);
  };
  auto other_code = [&](const Mapping& old) {
    return file(m) && file(old) &&
           (old.path != m.path || old.start - old.pgoff != m.start - m.pgoff);
  };
  if (replaces_code != nullptr) {
    *replaces_code = false;
    std::vector<uint32_t> stack = {inside};
    while (!stack.empty() && !*replaces_code) {
      const uint32_t n = stack.back();
      stack.pop_back();
      if (n == 0) continue;
      *replaces_code = other_code(mappings_[nodes_[n].mapping]);
      stack.push_back(nodes_[n].left);
      stack.push_back(nodes_[n].right);
    }
  }
  std::optional<Mapping> right;  // the part of a cut mapping above m
  uint32_t middle = 0;
  if (const Mapping* prev = last(below); prev != nullptr && prev->end > m.start) {
    if (replaces_code != nullptr && other_code(*prev)) *replaces_code = true;
    const Mapping cut = *prev;
    below = Split(below, cut.start).first;
    Mapping left = cut;
    left.end = m.start;
    middle = AddMapping(std::move(left));
    if (cut.end > m.end) right = cut;
  }
  if (const Mapping* in = last(inside); in != nullptr && in->end > m.end) right = *in;
  if (right) {
    right->pgoff += m.end - right->start;
    right->start = m.end;
  }
  middle = Merge(middle, AddMapping(std::move(m)));
  if (right) middle = Merge(middle, AddMapping(*std::move(right)));
  return Merge(Merge(below, middle), above);
}

void Sideband::SetRoot(uint32_t pid, uint64_t t, uint32_t root) {
  spaces_[pid].push_back(Version{t, root});
}

uint32_t Sideband::Root(uint32_t pid) const {
  auto it = spaces_.find(pid);
  return it == spaces_.end() || it->second.empty() ? 0 : it->second.back().root;
}

uint32_t Sideband::RootAt(uint32_t pid, uint64_t t) const {
  auto it = spaces_.find(pid);
  if (it == spaces_.end()) return 0;
  const std::vector<Version>& v = it->second;
  auto after = std::upper_bound(v.begin(), v.end(), t,
                                [](uint64_t x, const Version& s) { return x < s.time; });
  return after == v.begin() ? 0 : std::prev(after)->root;
}

Sideband SidebandBuilder::Build() {
  Sideband sb;
  sb.salt_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
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
      case PERF_RECORD_MMAP:
      case PERF_RECORD_MMAP2: {
        auto m = r.type == PERF_RECORD_MMAP ? perf::ParseMmap(r, p.layout)
                                            : perf::ParseMmap2(r, p.layout);
        if (!m.ok()) {
          problem(p, m.status());
          break;
        }
        ++sb.stats_.mmaps;
        sb.SetPid(m->tid, t, m->pid);
        // An empty mapping maps nothing (and the kernel sends none); one past the top of the
        // address space ends there.
        const uint64_t end = m->addr + std::min(m->len, ~uint64_t{0} - m->addr);
        if (end == m->addr) {
          sb.spaces_[m->pid];
          break;
        }
        bool replaces_code = false;
        sb.SetRoot(m->pid, t,
                   sb.Map(sb.Root(m->pid),
                          Mapping{.start = m->addr,
                                  .end = end,
                                  .pgoff = m->pgoff,
                                  .path = std::string(m->filename),
                                  .build_id = {m->build_id.begin(), m->build_id.end()},
                                  .prot = m->prot},
                          &replaces_code));
        // Code where other code was (a library dlopen'd where a dlclose'd one was): from
        // now on another program image, as after an exec.
        if (replaces_code) sb.epochs_[m->pid].push_back({t, false});
        break;
      }
      case PERF_RECORD_COMM: {
        auto c = perf::ParseComm(r, p.layout);
        if (!c.ok()) {
          problem(p, c.status());
          break;
        }
        ++sb.stats_.comms;
        sb.SetPid(c->tid, t, c->pid);
        sb.comms_[c->tid].push_back({t, std::string(c->comm)});
        if (c->exec) {
          ++sb.stats_.execs;
          sb.SetRoot(c->pid, t, 0);
          sb.execs_[c->pid].push_back(t);
          sb.epochs_[c->pid].push_back({t, true});
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
        sb.SetPid(k->tid, t, k->pid);
        if (!k->exit) {
          ++sb.stats_.forks;
          sb.tid_forks_[k->tid].push_back(t);
          if (k->pid != k->ppid) {
            // A new process: it starts with (a share of) its parent's address space. On a pid
            // an earlier process had, another program image from here, as after an exec (sweep
            // 35b F1: the mappings it inherits went into the image of the program the earlier
            // one exec'd, and where they overlapped that program was decoded with their bytes).
            const bool reused = sb.spaces_.contains(k->pid);
            sb.spaces_[k->ppid];
            sb.SetRoot(k->pid, t, sb.Root(k->ppid));
            sb.forked_[k->pid] = t;
            if (reused) sb.epochs_[k->pid].push_back({t, true});
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
  // In order, without recursion: the tree depth is only expected to be small.
  std::vector<uint32_t> stack;
  for (uint32_t n = RootAt(pid, t); n != 0 || !stack.empty();) {
    if (n != 0) {
      stack.push_back(n);
      n = nodes_[n].left;
      continue;
    }
    n = stack.back();
    stack.pop_back();
    out.push_back(&mappings_[nodes_[n].mapping]);
    n = nodes_[n].right;
  }
  return out;
}

const Mapping* Sideband::FindMapping(uint32_t pid, uint64_t ip, uint64_t t) const {
  const Mapping* best = nullptr;  // the last mapping starting at or below ip
  for (uint32_t n = RootAt(pid, t); n != 0;) {
    const Mapping& m = mappings_[nodes_[n].mapping];
    if (m.start <= ip) {
      best = &m;
      n = nodes_[n].right;
    } else {
      n = nodes_[n].left;
    }
  }
  return best != nullptr && ip < best->end ? best : nullptr;
}

std::vector<const Mapping*> Sideband::MappingsDuring(uint32_t pid, uint64_t from,
                                                     uint64_t to) const {
  auto it = spaces_.find(pid);
  if (it == spaces_.end()) return {};
  const std::vector<Version>& v = it->second;
  // Newest version first; a node seen in a later version is skipped with its whole subtree
  // (trees are immutable), so each node is visited once. A mapping is ordered by the last
  // version that has it: of two that overlap (so never live at once), the one the process got
  // last is also the one it had last.
  std::unordered_set<uint32_t> seen_nodes, seen_mappings;
  std::vector<std::pair<size_t, uint32_t>> got;
  std::vector<uint32_t> stack;
  for (size_t i = v.size(); i-- > 0;) {
    const uint64_t until = i + 1 < v.size() ? v[i + 1].time : kForever;
    if (v[i].time >= to || until <= from) continue;  // [time, until) misses [from, to)
    stack.push_back(v[i].root);
    while (!stack.empty()) {
      const uint32_t n = stack.back();
      stack.pop_back();
      if (n == 0 || !seen_nodes.insert(n).second) continue;
      if (seen_mappings.insert(nodes_[n].mapping).second) got.push_back({i, nodes_[n].mapping});
      stack.push_back(nodes_[n].left);
      stack.push_back(nodes_[n].right);
    }
  }
  std::sort(got.begin(), got.end());
  std::vector<const Mapping*> out;
  out.reserve(got.size());
  for (const auto& [version, mapping] : got) out.push_back(&mappings_[mapping]);
  return out;
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

void Sideband::SetPid(uint32_t tid, uint64_t t, uint32_t pid) {
  std::vector<PidSlot>& slots = tid_pid_[tid];
  if (slots.empty() || slots.back().pid != pid) slots.push_back({t, pid});
}

std::optional<uint32_t> Sideband::PidOfTid(uint32_t tid, uint64_t t) const {
  auto it = tid_pid_.find(tid);
  if (it == tid_pid_.end() || it->second.empty()) return std::nullopt;
  const std::vector<PidSlot>& slots = it->second;
  auto after = std::upper_bound(slots.begin(), slots.end(), t,
                                [](uint64_t v, const PidSlot& s) { return v < s.time; });
  return after == slots.begin() ? slots.front().pid : std::prev(after)->pid;
}

size_t Sideband::ProcessesOfTid(uint32_t tid) const {
  auto it = tid_pid_.find(tid);
  return it == tid_pid_.end() ? 0 : it->second.size();
}

bool Sideband::ForkedBetween(uint32_t tid, uint64_t from, uint64_t to) const {
  auto it = tid_forks_.find(tid);
  if (it == tid_forks_.end()) return false;
  auto after = std::upper_bound(it->second.begin(), it->second.end(), from);
  return after != it->second.end() && *after <= to;
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
  for (const auto& [pid, versions] : spaces_) pids.push_back(pid);
  for (const auto& [tid, slots] : tid_pid_) {
    for (const PidSlot& s : slots) pids.push_back(s.pid);
  }
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

bool Sideband::RunsForkedProgram(uint32_t pid, uint64_t t) const {
  auto fork = forked_.find(pid);
  if (fork == forked_.end() || fork->second > t) return false;
  const std::vector<uint64_t>& execs = ExecTimes(pid);
  return std::none_of(execs.begin(), execs.end(),
                      [&](uint64_t e) { return e >= fork->second && e <= t; });
}

const std::vector<Sideband::EpochStart>& Sideband::EpochStarts(uint32_t pid) const {
  static const std::vector<EpochStart> kNone;
  auto it = epochs_.find(pid);
  return it == epochs_.end() ? kNone : it->second;
}

size_t Sideband::EpochAt(uint32_t pid, uint64_t t) const {
  const std::vector<EpochStart>& starts = EpochStarts(pid);
  return static_cast<size_t>(
      std::upper_bound(starts.begin(), starts.end(), t,
                       [](uint64_t v, const EpochStart& e) { return v < e.time; }) -
      starts.begin());
}

}  // namespace ptkit
