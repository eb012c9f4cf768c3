#include "ptkit/sideband.h"

#include <sys/mman.h>

#include <random>
#include <set>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptkit {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

const perf::SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

perf::SampleId Id(uint32_t pid, uint32_t tid, uint64_t time, uint32_t cpu = 0) {
  perf::SampleId s;
  s.has_tid = s.has_time = s.has_cpu = true;
  s.pid = pid;
  s.tid = tid;
  s.time = time;
  s.cpu = cpu;
  return s;
}

class Records {
 public:
  Records& Mmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, std::string_view path,
                uint64_t t, uint32_t prot = 5) {
    perf::Mmap2 m;
    m.pid = m.tid = pid;
    m.addr = addr;
    m.len = len;
    m.pgoff = pgoff;
    m.filename = path;
    m.prot = prot;
    m.sample_id = Id(pid, pid, t);
    return Append(perf::EncodeMmap2(m, kLayout));
  }
  Records& Exec(uint32_t pid, std::string_view comm, uint64_t t) {
    perf::Comm c;
    c.pid = c.tid = pid;
    c.comm = comm;
    c.exec = true;
    c.sample_id = Id(pid, pid, t);
    return Append(perf::EncodeComm(c, kLayout));
  }
  Records& Fork(uint32_t pid, uint32_t tid, uint32_t ppid, uint32_t ptid, uint64_t t) {
    perf::Task k;
    k.pid = pid;
    k.tid = tid;
    k.ppid = ppid;
    k.ptid = ptid;
    k.time = t;
    k.sample_id = Id(pid, tid, t);
    return Append(perf::EncodeTask(k, kLayout));
  }
  Records& Exit(uint32_t pid, uint32_t tid, uint64_t t) {
    perf::Task k;
    k.exit = true;
    k.pid = k.ppid = pid;
    k.tid = k.ptid = tid;
    k.time = t;
    k.sample_id = Id(pid, tid, t);
    return Append(perf::EncodeTask(k, kLayout));
  }
  Records& ItraceStart(uint32_t cpu, uint32_t pid, uint32_t tid, uint64_t t) {
    perf::ItraceStart s;
    s.pid = pid;
    s.tid = tid;
    s.sample_id = Id(pid, tid, t, cpu);
    return Append(perf::EncodeItraceStart(s, kLayout));
  }
  Records& Switch(uint32_t cpu, bool out, uint32_t pid, uint32_t tid, uint64_t t) {
    perf::Switch s;
    s.out = out;
    s.cpu_wide = true;
    s.sample_id = Id(pid, tid, t, cpu);
    return Append(perf::EncodeSwitch(s, kLayout));
  }
  Records& Append(const std::vector<uint8_t>& r) {
    bytes_.insert(bytes_.end(), r.begin(), r.end());
    return *this;
  }
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

std::vector<std::string> PathsAt(const Sideband& sb, uint32_t pid, uint64_t t) {
  std::vector<std::string> paths;
  for (const Mapping* m : sb.MappingsAt(pid, t)) paths.push_back(m->path);
  return paths;
}

TEST(SidebandTest, ExecReplacesTheAddressSpace) {
  Records r;
  r.Mmap(100, 0x400000, 0x1000, 0, "/bin/sh", 10)
      .Exec(100, "app", 20)
      .Mmap(100, 0x500000, 0x2000, 0x1000, "/usr/bin/app", 21)
      .Mmap(100, 0x7f0000000000, 0x10000, 0, "/lib/libc.so.6", 22);
  SidebandBuilder b(kLayout);
  b.Add(0, r.bytes());
  Sideband sb = b.Build();
  EXPECT_THAT(PathsAt(sb, 100, 15), ElementsAre("/bin/sh"));
  EXPECT_THAT(PathsAt(sb, 100, 21), ElementsAre("/usr/bin/app"));
  EXPECT_THAT(PathsAt(sb, 100, 30), ElementsAre("/usr/bin/app", "/lib/libc.so.6"));
  const Mapping* m = sb.FindMapping(100, 0x501234, 30);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, "/usr/bin/app");
  EXPECT_EQ(m->pgoff, 0x1000u);
  EXPECT_EQ(sb.FindMapping(100, 0x400000, 30), nullptr);
  EXPECT_EQ(sb.CommAt(100, 25), "app");
  EXPECT_EQ(sb.stats().execs, 1u);
  EXPECT_EQ(sb.stats().mmaps, 3u);
}

// Epochs: the program a process runs changes at each exec, and its code where a mapping of
// code lands on code of another file or offset (perf records no munmap: a library dlclose'd and
// another dlopen'd at its address), not where the same file is mapped again at the same bias
// (ld.so's segments over its reservation, an mprotect), nor for data.
TEST(SidebandTest, EpochsStartAtExecsAndWhereCodeLandsOnOtherCode) {
  Records r;
  r.Mmap(100, 0x400000, 0x3000, 0, "/bin/app", 10)
      .Mmap(100, 0x7f0000000000, 0x2000, 0, "/lib/liba.so", 11)
      .Mmap(100, 0x7f0000001000, 0x1000, 0x1000, "/lib/liba.so", 12)  // the same bytes
      .Mmap(100, 0x7f0000010000, 0x1000, 0, "/lib/data", 13, 3)       // data
      .Mmap(100, 0x7f0000010000, 0x1000, 0, "/lib/other", 14, 3)
      .Mmap(100, 0x7f0000000000, 0x1000, 0, "/lib/libb.so", 15)  // over liba's code
      .Mmap(100, 0x7f0000001000, 0x1000, 0, "/lib/liba.so", 16)  // liba at another offset
      .Exec(100, "next", 20)
      .Mmap(100, 0x400000, 0x1000, 0, "/bin/next", 21);
  SidebandBuilder b(kLayout);
  b.Add(0, r.bytes());
  Sideband sb = b.Build();
  std::vector<std::pair<uint64_t, bool>> starts;
  for (const Sideband::EpochStart& e : sb.EpochStarts(100)) starts.push_back({e.time, e.exec});
  EXPECT_THAT(starts, ElementsAre(std::pair<uint64_t, bool>{15, false},
                                  std::pair<uint64_t, bool>{16, false},
                                  std::pair<uint64_t, bool>{20, true}));
  EXPECT_THAT(sb.ExecTimes(100), ElementsAre(20u));
  EXPECT_EQ(sb.EpochAt(100, 14), 0u);
  EXPECT_EQ(sb.EpochAt(100, 15), 1u);
  EXPECT_EQ(sb.EpochAt(100, 25), 3u);
  // An epoch's mappings: those live in it.
  auto paths = [&sb](uint64_t from, uint64_t to) {
    std::vector<std::string> out;
    for (const Mapping* m : sb.MappingsDuring(100, from, to)) out.push_back(m->path);
    return out;
  };
  EXPECT_THAT(paths(0, 15), ::testing::Not(::testing::Contains("/lib/libb.so")));
  EXPECT_THAT(paths(15, 16), ::testing::Contains("/lib/libb.so"));
  EXPECT_THAT(paths(15, 16), ::testing::Contains("/bin/app"));
  EXPECT_TRUE(sb.EpochStarts(200).empty());
}

// PERF_RECORD_MMAP (kernels before 3.16, perf's own kernel maps) maps as perf takes it: code
// unless PERF_RECORD_MISC_MMAP_DATA says data; a record too short for its fields is malformed.
TEST(SidebandTest, MmapRecordsMapAsMmap2Records) {
  auto mmap = [](uint16_t misc, uint64_t addr, std::string_view path, uint64_t t) {
    return perf::RecordBuilder(PERF_RECORD_MMAP, misc)
        .U32(100)
        .U32(100)
        .U64(addr)
        .U64(0x2000)
        .U64(0x1000)
        .String(std::string(path))
        .Trailer(kLayout, Id(100, 100, t))
        .Finish();
  };
  Records r;
  r.Append(mmap(PERF_RECORD_MISC_USER, 0x400000, "/usr/bin/app", 10))
      .Append(mmap(PERF_RECORD_MISC_USER | PERF_RECORD_MISC_MMAP_DATA, 0x600000, "/data", 11))
      .Append(perf::RecordBuilder(PERF_RECORD_MMAP, 0).U32(100).U32(100).U64(0).Finish());
  SidebandBuilder b(kLayout);
  b.Add(0, r.bytes());
  Sideband sb = b.Build();
  const Mapping* m = sb.FindMapping(100, 0x401234, 20);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, "/usr/bin/app");
  EXPECT_EQ(m->start, 0x400000u);
  EXPECT_EQ(m->end, 0x402000u);
  EXPECT_EQ(m->pgoff, 0x1000u);
  EXPECT_EQ(m->prot, unsigned{PROT_READ | PROT_EXEC});
  const Mapping* data = sb.FindMapping(100, 0x600000, 20);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->prot, unsigned{PROT_READ});
  EXPECT_EQ(sb.stats().mmaps, 2u);
  EXPECT_EQ(sb.stats().malformed, 1u);
}

TEST(SidebandTest, ForkCopiesTheParentAndThenTheyDiverge) {
  Records r;
  r.Mmap(100, 0x400000, 0x1000, 0, "/bin/app", 10)
      .Fork(200, 200, 100, 100, 20)
      .Fork(100, 101, 100, 100, 25)  // a thread: no new address space
      .Mmap(200, 0x600000, 0x1000, 0, "/lib/plugin.so", 30)
      .Exit(200, 200, 40);
  r.Fork(200, 200, 100, 100, 50);  // the pid is reused by a new child of 100
  SidebandBuilder b(kLayout);
  b.Add(1, r.bytes());
  Sideband sb = b.Build();
  EXPECT_THAT(PathsAt(sb, 200, 51), ElementsAre("/bin/app"));
  EXPECT_THAT(PathsAt(sb, 200, 15), ElementsAre());
  EXPECT_THAT(PathsAt(sb, 200, 21), ElementsAre("/bin/app"));
  EXPECT_THAT(PathsAt(sb, 200, 35), ElementsAre("/bin/app", "/lib/plugin.so"));
  // EXIT (even of the leader) ends nothing: other threads may still run in the process.
  EXPECT_THAT(PathsAt(sb, 200, 41), ElementsAre("/bin/app", "/lib/plugin.so"));
  EXPECT_THAT(PathsAt(sb, 100, 35), ElementsAre("/bin/app"));
  EXPECT_THAT(sb.PidOfTid(101), Optional(100u));
  EXPECT_THAT(sb.Pids(), ElementsAre(100, 200));
}

// A tid that was a process, then a thread of another (review 35 #2): its process by time.
TEST(SidebandTest, ATidsProcessIsKnownByTime) {
  Records r;
  r.Mmap(100, 0x400000, 0x1000, 0, "/bin/app", 10)
      .Fork(200, 200, 100, 100, 20)
      .Exit(200, 200, 40)
      .Fork(100, 200, 100, 100, 50);  // a thread of 100 given the id
  SidebandBuilder b(kLayout);
  b.Add(1, r.bytes());
  Sideband sb = b.Build();
  EXPECT_THAT(sb.PidOfTid(200, 5), Optional(200u));  // before any record: the first
  EXPECT_THAT(sb.PidOfTid(200, 20), Optional(200u));
  EXPECT_THAT(sb.PidOfTid(200, 49), Optional(200u));
  EXPECT_THAT(sb.PidOfTid(200, 50), Optional(100u));
  EXPECT_THAT(sb.PidOfTid(200), Optional(100u));
  EXPECT_EQ(sb.PidOfTid(300), std::nullopt);
}

TEST(SidebandTest, AMappingOverPartOfAnotherSplitsIt) {
  Records r;
  r.Mmap(1, 0x10000, 0x5000, 0x0, "/a", 1).Mmap(1, 0x12000, 0x1000, 0, "/b", 2);
  SidebandBuilder b(kLayout);
  b.Add(0, r.bytes());
  Sideband sb = b.Build();
  auto maps = sb.MappingsAt(1, 3);
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0]->path, "/a");
  EXPECT_EQ(maps[0]->end, 0x12000u);
  EXPECT_EQ(maps[1]->path, "/b");
  EXPECT_EQ(maps[2]->path, "/a");
  EXPECT_EQ(maps[2]->start, 0x13000u);
  EXPECT_EQ(maps[2]->pgoff, 0x3000u);  // file offset follows the address
  EXPECT_THAT(PathsAt(sb, 1, 1), ElementsAre("/a"));
}

TEST(SidebandTest, TheTaskOnACpuFollowsItraceStartAndSwitches) {
  Records cpu0, cpu1;
  cpu0.ItraceStart(0, 100, 100, 10).Switch(0, true, 100, 100, 20).Switch(0, false, 200, 201, 30);
  cpu1.ItraceStart(1, 200, 200, 5).Switch(1, true, 200, 200, 25).Switch(1, false, 100, 100, 26);
  SidebandBuilder b(kLayout);
  b.Add(1, cpu1.bytes());  // batches arrive per CPU, not in time order
  b.Add(0, cpu0.bytes());
  Sideband sb = b.Build();
  EXPECT_EQ(sb.TaskOnCpu(0, 5), std::nullopt);
  EXPECT_EQ(sb.TaskOnCpu(0, 10), (TaskId{100, 100}));
  EXPECT_EQ(sb.TaskOnCpu(0, 19), (TaskId{100, 100}));
  EXPECT_EQ(sb.TaskOnCpu(0, 25), std::nullopt);
  EXPECT_EQ(sb.TaskOnCpu(0, 30), (TaskId{200, 201}));
  EXPECT_EQ(sb.TaskOnCpu(1, 24), (TaskId{200, 200}));
  EXPECT_EQ(sb.TaskOnCpu(1, 1000), (TaskId{100, 100}));
  EXPECT_EQ(sb.stats().itrace_starts, 2u);
  EXPECT_EQ(sb.stats().switches, 4u);
}

TEST(SidebandTest, MalformedRecordsAreCountedAndDescribed) {
  Records r;
  r.Mmap(1, 0x1000, 0x1000, 0, "/ok", 1);
  std::vector<uint8_t> bytes(r.bytes().begin(), r.bytes().end());
  std::vector<uint8_t> bad = {PERF_RECORD_MMAP2, 0, 0, 0, 0, 0, 200, 0};  // size 200, 8 bytes
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  SidebandBuilder b(kLayout);
  b.Add(3, bytes);
  Sideband sb = b.Build();
  EXPECT_EQ(sb.stats().mmaps, 1u);
  EXPECT_EQ(sb.stats().malformed, 1u);
  ASSERT_EQ(sb.problems().size(), 1u);
  EXPECT_THAT(sb.problems()[0], ::testing::HasSubstr("cpu 3"));
}

// The rules of sideband.h done the plain way (a vector of mappings with lifetimes per process,
// each FORK copies the parent's), as the timeline was built before it shared address spaces.
class PlainTimeline {
 public:
  struct M {
    uint64_t start, end, pgoff;
    std::string path;
    uint64_t from, to = kForever;
  };
  void Mmap(uint32_t pid, uint64_t start, uint64_t end, uint64_t pgoff, const std::string& path,
            uint64_t t) {
    std::vector<M>& maps = maps_[pid];
    std::vector<M> rest;
    for (M& m : maps) {
      if (m.to != kForever || m.end <= start || end <= m.start) continue;
      if (m.start < start) rest.push_back({m.start, start, m.pgoff, m.path, t});
      if (end < m.end) rest.push_back({end, m.end, m.pgoff + (end - m.start), m.path, t});
      m.to = t;
    }
    maps.insert(maps.end(), rest.begin(), rest.end());
    maps.push_back({start, end, pgoff, path, t});
  }
  void Exec(uint32_t pid, uint64_t t) { EndAll(maps_[pid], t); }
  void Fork(uint32_t pid, uint32_t ppid, uint64_t t) {
    std::vector<M> copy;
    for (const M& m : maps_[ppid]) {
      if (m.to == kForever) copy.push_back({m.start, m.end, m.pgoff, m.path, t});
    }
    EndAll(maps_[pid], t);
    maps_[pid].insert(maps_[pid].end(), copy.begin(), copy.end());
  }
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t, std::string>> At(uint32_t pid, uint64_t t) {
    std::vector<std::tuple<uint64_t, uint64_t, uint64_t, std::string>> out;
    for (const M& m : maps_[pid]) {
      if (m.from <= t && t < m.to) out.push_back({m.start, m.end, m.pgoff, m.path});
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // What an image of the process over [from, to) maps at `ip`: the last mapping in record
  // order that covers it.
  std::string Winner(uint32_t pid, uint64_t from, uint64_t to, uint64_t ip) {
    std::string path;
    for (const M& m : maps_[pid]) {
      if (m.from < to && m.to > from && m.start <= ip && ip < m.end) path = m.path;
    }
    return path;
  }

 private:
  static void EndAll(std::vector<M>& maps, uint64_t t) {
    for (M& m : maps) {
      if (m.to == kForever) m.to = t;
    }
  }
  std::map<uint32_t, std::vector<M>> maps_;
};

std::vector<std::tuple<uint64_t, uint64_t, uint64_t, std::string>> At(const Sideband& sb,
                                                                      uint32_t pid, uint64_t t) {
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t, std::string>> out;
  for (const Mapping* m : sb.MappingsAt(pid, t))
    out.push_back({m->start, m->end, m->pgoff, m->path});
  return out;
}

// Random MMAP2 (overlapping on a small grid), FORK, thread FORK and exec records among three
// processes, some at equal times: the shared address spaces must say what the plain model says,
// at every time, address and span of time.
TEST(SidebandTest, SharedAddressSpacesEqualThePlainModel) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    Records r;
    PlainTimeline plain;
    uint64_t t = 1;
    for (int i = 0; i < 120; ++i) {
      t += rng() % 3;  // 0: the same time as the record before
      const uint32_t pid = 1 + rng() % 3;
      const uint32_t kind = rng() % 10;
      if (kind < 6) {
        const uint64_t start = 0x1000 * (rng() % 16), len = 0x1000 * (1 + rng() % 5);
        const uint64_t pgoff = 0x1000 * (rng() % 4);
        const std::string path = "/f" + std::to_string(i);
        r.Mmap(pid, start, len, pgoff, path, t);
        plain.Mmap(pid, start, start + len, pgoff, path, t);
      } else if (kind < 8) {
        const uint32_t parent = 1 + (pid + rng() % 2) % 3;  // another pid
        r.Fork(pid, pid, parent, parent, t);
        plain.Fork(pid, parent, t);
      } else if (kind < 9) {
        r.Fork(pid, pid + 10, pid, pid, t);  // a thread: nothing changes
      } else {
        r.Exec(pid, "x", t);
        plain.Exec(pid, t);
      }
    }
    SidebandBuilder b(kLayout);
    b.Add(0, r.bytes());
    Sideband sb = b.Build();
    EXPECT_EQ(sb.stats().malformed, 0u);
    for (uint32_t pid = 1; pid <= 3; ++pid) {
      for (uint64_t at = 0; at <= t + 1; ++at) {
        const auto live = plain.At(pid, at);
        ASSERT_EQ(At(sb, pid, at), live) << "seed " << seed << " pid " << pid << " time " << at;
        for (uint64_t ip = 0; ip < 0x15000; ip += 0x800) {
          const Mapping* m = sb.FindMapping(pid, ip, at);
          std::string want;
          for (const auto& [s, e, o, path] : live) {
            if (s <= ip && ip < e) want = path;
          }
          ASSERT_EQ(m == nullptr ? "" : m->path, want) << seed << " " << pid << " " << at;
        }
      }
      // Spans as the decoder asks for them (an exec epoch, or all time): the same mappings win.
      for (auto [from, to] : std::vector<std::pair<uint64_t, uint64_t>>{
               {0, kForever}, {0, t / 2}, {t / 3, t / 2 + 1}, {t / 2, kForever}}) {
        const std::vector<const Mapping*> maps = sb.MappingsDuring(pid, from, to);
        std::set<const Mapping*> once(maps.begin(), maps.end());
        EXPECT_EQ(once.size(), maps.size()) << "each mapping once";
        for (uint64_t ip = 0; ip < 0x15000; ip += 0x800) {
          std::string got;
          for (const Mapping* m : maps) {
            if (m->start <= ip && ip < m->end) got = m->path;
          }
          ASSERT_EQ(got, plain.Winner(pid, from, to, ip))
              << "seed " << seed << " pid " << pid << " [" << from << ", " << to << ") ip " << ip;
        }
      }
    }
  }
}

// Issue 12 item 7: N MMAP2 and N FORK records alternating between two pids (each FORK makes
// the other pid a new child with all the mappings so far). Copying the parent's mappings at
// every FORK stored N^2/2 of them (N = 2000: 50 s and 695 MB to decode); shared address
// spaces store at most three per MMAP2 and O(log N) tree nodes.
TEST(SidebandTest, ForksBetweenTwoProcessesStoreLinearlyManyMappings) {
  constexpr uint32_t kN = 2000;
  Records r;
  for (uint32_t i = 0; i < kN; ++i) {
    const uint32_t pid = i % 2 == 0 ? 100 : 200, other = 300 - pid;
    r.Mmap(pid, 0x10000000 + uint64_t{i} * 0x1000, 0x1000, 0, "/lib/l" + std::to_string(i),
           2 * i + 1);
    r.Fork(other, other, pid, pid, 2 * i + 2);
  }
  SidebandBuilder b(kLayout);
  b.Add(0, r.bytes());
  Sideband sb = b.Build();
  EXPECT_EQ(sb.stats().mmaps, kN);
  EXPECT_EQ(sb.stats().forks, kN);
  // The last child holds every mapping; and each process had each mapping once.
  EXPECT_EQ(sb.MappingsAt(100, 2 * kN + 1).size(), kN);
  EXPECT_EQ(sb.MappingsDuring(100).size(), kN);
  EXPECT_EQ(sb.MappingsDuring(200).size(), kN);
  const Mapping* m = sb.FindMapping(100, 0x10000000 + 1234 * 0x1000 + 5, 2 * kN + 1);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, "/lib/l1234");
  EXPECT_LE(sb.stored_mappings(), 3 * kN);
  // Expected O(N log N) nodes (~25 per MMAP2 measured); N^2/2 would be 2 M.
  EXPECT_LE(sb.stored_nodes(), 100 * kN) << "the trees are copied, not shared";
}

TEST(TscConversionTest, MatchesTheKernelFormulaAndInvertsIt) {
  // Values as a 2.6 GHz machine publishes them.
  TscConversion c{.time_zero = 18446743321491823000ull, .time_mult = 6452915, .time_shift = 24};
  for (uint64_t tsc :
       {uint64_t{0}, uint64_t{1} << 20, uint64_t{123456789012345}, uint64_t{1} << 60}) {
    unsigned __int128 exact = static_cast<unsigned __int128>(tsc) * c.time_mult;
    uint64_t expected = c.time_zero + static_cast<uint64_t>(exact >> c.time_shift);
    EXPECT_EQ(c.ToPerfTime(tsc), expected) << tsc;
    uint64_t back = c.ToTsc(c.ToPerfTime(tsc));
    // One nanosecond is ~2.6 TSC ticks: the round trip is exact to within that.
    EXPECT_LE(tsc - back, 3u) << tsc;
  }
}

// A recording's time_shift is data (issue 12 item 9): 64 and more must not shift out of range
// (the ASan/UBSan run of this test catches "shift exponent 64").
TEST(TscConversionTest, AnOutOfRangeShiftIsDefined) {
  for (uint16_t shift : {uint16_t{64}, uint16_t{65}, uint16_t{1000}, uint16_t{65535}}) {
    TscConversion c{.time_zero = 1000, .time_mult = 7, .time_shift = shift};
    EXPECT_EQ(c.ToPerfTime(0), 1000u) << shift;
    EXPECT_EQ(c.ToPerfTime(~uint64_t{0}), 1000u) << shift;
    EXPECT_EQ(c.ToTsc(5000), 0u) << shift;
  }
  // The largest valid shift still follows the formula.
  TscConversion c{.time_zero = 0, .time_mult = 3, .time_shift = 63};
  EXPECT_EQ(c.ToPerfTime(uint64_t{1} << 63), 3u);
}

}  // namespace
}  // namespace ptkit
