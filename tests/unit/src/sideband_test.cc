#include "ptkit/sideband.h"

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
                uint64_t t) {
    perf::Mmap2 m;
    m.pid = m.tid = pid;
    m.addr = addr;
    m.len = len;
    m.pgoff = pgoff;
    m.filename = path;
    m.prot = 5;
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
