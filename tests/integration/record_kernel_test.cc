// The recorder against the real kernel without Intel PT: a software dummy tracking event on
// a forked /bin/true delivers real MMAP2/COMM/EXIT sideband through a real ring buffer, which
// the drain loop moves into a container; software counters count the same child.
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "record/counters.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/event_spec.h"
#include "record/perf_event.h"
#include "record/ring_buffer.h"
#include "record/trace_source.h"
#include "record/workload.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::testing::HasSubstr;

// Opens `attr` on `pid`, or skips the test with the reason when perf_event_open is denied or
// unsupported here.
#define OPEN_OR_SKIP(var, attr, pid, what)                                   \
  absl::StatusOr<PerfEvent> var##_or = PerfEvent::Open(attr, pid, -1, what); \
  if (var##_or.status().code() == absl::StatusCode::kPermissionDenied ||     \
      var##_or.status().code() == absl::StatusCode::kUnimplemented) {        \
    GTEST_SKIP() << var##_or.status();                                       \
  }                                                                          \
  ASSERT_THAT(var##_or, IsOk());                                             \
  PerfEvent var = *std::move(var##_or)

TEST(RecordKernelTest, InheritedPerTaskEventCannotBeMapped) {
  const perf_event_attr attr = BuildTrackingAttr({.inherit = true});
  OPEN_OR_SKIP(ev, attr, 0, "inherited dummy (self)");
  EXPECT_THAT(RingBuffer::Map(ev, 1, 0, false),
              ::ptkit::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("open one event per CPU")));
}

// A page count whose byte size would overflow is refused before mmap (issue 12 item 10).
TEST(RecordKernelTest, HugePageCountsAreRefusedBeforeMapping) {
  const perf_event_attr attr = BuildTrackingAttr({});
  OPEN_OR_SKIP(ev, attr, 0, "dummy (self)");
  EXPECT_THAT(RingBuffer::Map(ev, uint64_t{1} << 63, 0, false),
              ::ptkit::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("at most 4194304 pages")));
  EXPECT_THAT(RingBuffer::Map(ev, 1, uint64_t{1} << 52, false),
              ::ptkit::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("at most 4194304 pages")));
}

// Records `argv` as a session does (one tracking event per CPU, pid = child, inherit,
// enable_on_exec) into `path`; returns every sideband record with its ring's CPU, in time
// order, and the workload's exit code.
struct Recorded {
  struct Rec {
    int32_t ring_cpu;
    std::vector<uint8_t> bytes;
    perf::SampleId sid;
    perf::RecordView view() const { return *perf::ReadRecord(bytes); }
  };
  std::vector<Rec> recs;
  int exit_code = -1;
  pid_t pid = -1;
  bool workload_exited = false;  // the drain loop saw it exit
  StreamStats totals;            // the drainer's
  bool clean = false;            // the container reads without damage
};

constexpr size_t kRingPages = 16;

absl::StatusOr<Recorded> RecordSideband(std::vector<std::string> argv, const std::string& path) {
  SignalWatcher signals;
  PTKIT_ASSIGN_OR_RETURN(Workload w, Workload::Start(std::move(argv)));
  const perf_event_attr attr = BuildTrackingAttr({.enable_on_exec = true, .inherit = true});
  const perf::SampleIdLayout layout{attr.sample_type, true};
  const int ncpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<std::unique_ptr<KernelTraceSource>> owned;
  std::vector<TraceSource*> sources;
  for (int cpu = 0; cpu < ncpu; ++cpu) {
    PTKIT_ASSIGN_OR_RETURN(PerfEvent ev, PerfEvent::Open(attr, w.pid(), cpu, "tracking"));
    PTKIT_ASSIGN_OR_RETURN(RingBuffer ring, RingBuffer::Map(ev, kRingPages, 0, false));
    if (ring.view().data.size() != kRingPages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) ||
        !ring.view().aux.empty()) {
      return absl::InternalError("the ring is not 16 data pages without AUX");
    }
    owned.push_back(std::make_unique<KernelTraceSource>(
        std::move(ev), std::vector<PerfEvent>{}, std::move(ring),
        StreamId{StreamKind::kCpu, static_cast<uint64_t>(cpu)}, cpu, layout));
    sources.push_back(owned.back().get());
  }
  PTKIT_ASSIGN_OR_RETURN(auto writer, ContainerWriter::Create(path));
  Drainer drainer(writer.get());
  PTKIT_RETURN_IF_ERROR(w.Go());
  LoopOptions lo;
  lo.poll_timeout_ms = 10;
  Recorded out;
  out.pid = w.pid();
  lo.child_exited = [&] {
    std::optional<int> st = w.TryReap();
    if (st) out.exit_code = Workload::ExitCode(*st);
    return st.has_value();
  };
  PTKIT_ASSIGN_OR_RETURN(LoopResult lr, RunDrainLoop(sources, drainer, signals, lo));
  out.workload_exited = lr.workload_exited;
  out.totals = drainer.Totals();
  PTKIT_RETURN_IF_ERROR(writer->Close());
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader, ContainerReader::Open(path));
  RecordView rv;
  while (true) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(rv));
    if (!more) break;
    if (rv.type != RecordType::kSideband) continue;
    PTKIT_ASSIGN_OR_RETURN(SidebandRecord sb, ParseSideband(rv.payload));
    perf::RecordReader rr(sb.records);
    while (true) {
      PTKIT_ASSIGN_OR_RETURN(std::optional<perf::RecordView> rec, rr.Next());
      if (!rec) break;
      PTKIT_ASSIGN_OR_RETURN(perf::SampleId sid, perf::ParseSampleId(*rec, layout));
      out.recs.push_back(
          Recorded::Rec{sb.cpu, std::vector<uint8_t>(rec->bytes.begin(), rec->bytes.end()), sid});
    }
  }
  out.clean = reader.report().clean();
  std::stable_sort(out.recs.begin(), out.recs.end(),
                   [](const auto& a, const auto& b) { return a.sid.time < b.sid.time; });
  return out;
}

// As a session does it (RecordSideband): /bin/true's exec, mappings and exit, each record
// tagged with the CPU whose ring held it.
TEST(RecordKernelTest, DummyEventSidebandOfBinTrueIntoContainer) {
  ::ptkit::testing::TempDir dir;
  absl::StatusOr<Recorded> r = RecordSideband({"/bin/true"}, dir.File("t.pt"));
  if (r.status().code() == absl::StatusCode::kPermissionDenied ||
      r.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << r.status();
  }
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->workload_exited);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_GT(r->totals.sideband_records, 3u);
  EXPECT_EQ(r->totals.lost_records, 0u);
  EXPECT_TRUE(r->clean);
  for (const Recorded::Rec& rec : r->recs) {
    // The trailer's CPU is the ring's CPU.
    EXPECT_GE(rec.ring_cpu, 0);
    EXPECT_EQ(static_cast<int32_t>(rec.sid.cpu), rec.ring_cpu)
        << perf::RecordTypeName(rec.view().type);
  }
  const perf::SampleIdLayout layout{kSampleIdType, true};
  const uint32_t pid = static_cast<uint32_t>(r->pid);
  std::vector<std::string> mapped;
  bool comm_exec = false, exited = false;
  int order = 0, mmap_order = -1, comm_order = -1, exit_order = -1;
  for (const Recorded::Rec& recorded : r->recs) {
    const perf::RecordView view = recorded.view();
    const perf::RecordView* rec = &view;
    ++order;
    switch (rec->type) {
      case PERF_RECORD_MMAP2: {
        PTKIT_ASSERT_OK_AND_ASSIGN(perf::Mmap2 m, perf::ParseMmap2(*rec, layout));
        EXPECT_EQ(m.pid, pid);
        EXPECT_EQ(m.sample_id.pid, pid);
        EXPECT_EQ(m.sample_id.tid, pid);
        mapped.emplace_back(m.filename);
        if (mmap_order < 0) mmap_order = order;
        break;
      }
      case PERF_RECORD_COMM: {
        PTKIT_ASSERT_OK_AND_ASSIGN(perf::Comm c, perf::ParseComm(*rec, layout));
        if (c.exec) {
          comm_exec = true;
          comm_order = order;
          EXPECT_EQ(c.comm, "true");
          EXPECT_EQ(c.pid, pid);
          EXPECT_EQ(c.tid, pid);
        }
        break;
      }
      case PERF_RECORD_EXIT: {
        PTKIT_ASSERT_OK_AND_ASSIGN(perf::Task t, perf::ParseTask(*rec, layout));
        EXPECT_EQ(t.pid, pid);
        EXPECT_EQ(t.tid, pid);
        exited = true;
        exit_order = order;
        break;
      }
      default:
        break;
    }
  }
  EXPECT_TRUE(comm_exec);
  EXPECT_TRUE(exited);
  // exec's COMM, then the new image's mappings, then the exit.
  EXPECT_LT(comm_order, mmap_order);
  EXPECT_LT(mmap_order, exit_order);
  std::string all;
  for (const std::string& m : mapped) all += m + "\n";
  EXPECT_THAT(all, HasSubstr("bin/true\n"));
  EXPECT_THAT(all, HasSubstr("ld-linux"));
  EXPECT_THAT(all, HasSubstr("libc.so"));
}

TEST(RecordKernelTest, DlopenAndThreadWorkload) {
  ::ptkit::testing::TempDir dir;
  absl::StatusOr<Recorded> r =
      RecordSideband({PTKIT_DLOPEN_THREAD, PTKIT_TEST_PLUGIN}, dir.File("d.pt"));
  if (r.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << r.status();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 0);
  const perf::SampleIdLayout layout{kSampleIdType, true};
  const uint32_t pid = static_cast<uint32_t>(r->pid);
  // Order of first appearance (index in time order) of each event.
  std::map<std::string, size_t> first;
  uint32_t thread_tid = 0;
  size_t i = 0;
  for (const Recorded::Rec& rec : r->recs) {
    ++i;
    const perf::RecordView v = rec.view();
    EXPECT_EQ(static_cast<int32_t>(rec.sid.cpu), rec.ring_cpu);
    EXPECT_EQ(rec.sid.pid, pid) << perf::RecordTypeName(v.type);
    if (v.type == PERF_RECORD_MMAP2) {
      PTKIT_ASSERT_OK_AND_ASSIGN(perf::Mmap2 m, perf::ParseMmap2(v, layout));
      const std::string f(m.filename);
      for (const char* key : {"ptkit_dlopen_thread", "ld-linux", "libc.so", "ptkit_test_plugin"}) {
        if (f.find(key) != std::string::npos) first.emplace(key, i);
      }
    } else if (v.type == PERF_RECORD_COMM) {
      PTKIT_ASSERT_OK_AND_ASSIGN(perf::Comm c, perf::ParseComm(v, layout));
      if (c.exec) first.emplace("comm_exec", i);
    } else if (v.type == PERF_RECORD_FORK) {
      PTKIT_ASSERT_OK_AND_ASSIGN(perf::Task t, perf::ParseTask(v, layout));
      EXPECT_EQ(t.pid, pid);  // a thread: same process
      EXPECT_EQ(t.ptid, pid);
      EXPECT_NE(t.tid, pid);
      thread_tid = t.tid;
      first.emplace("fork", i);
    } else if (v.type == PERF_RECORD_EXIT) {
      PTKIT_ASSERT_OK_AND_ASSIGN(perf::Task t, perf::ParseTask(v, layout));
      EXPECT_EQ(rec.sid.tid, t.tid);
      first.emplace(t.tid == pid ? "exit_main" : "exit_thread", i);
      if (t.tid != pid) {
        EXPECT_EQ(t.tid, thread_tid);
      }
    }
  }
  for (const char* key : {"comm_exec", "ptkit_dlopen_thread", "ld-linux", "libc.so",
                          "ptkit_test_plugin", "fork", "exit_thread", "exit_main"}) {
    EXPECT_TRUE(first.contains(key)) << key;
  }
  // exec, then the program and its loader, libc, the dlopen()ed library, the thread's birth
  // and death, and the process's exit last.
  EXPECT_LT(first["comm_exec"], first["ptkit_dlopen_thread"]);
  EXPECT_LT(first["ld-linux"], first["libc.so"]);
  EXPECT_LT(first["libc.so"], first["ptkit_test_plugin"]);
  EXPECT_LT(first["ptkit_test_plugin"], first["fork"]);
  EXPECT_LT(first["fork"], first["exit_thread"]);
  EXPECT_LT(first["exit_thread"], first["exit_main"]);
}

TEST(RecordKernelTest, SoftwareCountersCountTheChildHardwareOnesAreSkipped) {
  PTKIT_ASSERT_OK_AND_ASSIGN(
      std::vector<CounterSpec> specs,
      EncodeCounters("task-clock,page-faults,context-switches,cycles", true, true));
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload w, Workload::Start({"/bin/true"}));
  absl::StatusOr<CounterSet> set = CounterSet::Open(specs, w.pid(), -1, true);
  if (set.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << set.status();
  ASSERT_THAT(set, IsOk());
  const bool have_pmu = set->size() == 4;
  if (!have_pmu) {
    ASSERT_EQ(set->size(), 3u);
    ASSERT_EQ(set->warnings().size(), 1u);
    EXPECT_THAT(set->warnings()[0], HasSubstr("counter cycles is not supported on this machine"));
    EXPECT_THAT(set->warnings()[0], HasSubstr("recording continues without it"));
  }
  ASSERT_THAT(w.Go(), IsOk());
  EXPECT_EQ(Workload::ExitCode(w.Wait()), 0);
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<CounterValue> v, set->ReadAll());
  std::map<std::string, CounterValue> by_name;
  for (const CounterValue& c : v) by_name[c.name] = c;
  EXPECT_GT(by_name["task-clock"].value, 0u);
  EXPECT_GT(by_name["task-clock"].time_enabled, 0u);
  EXPECT_GT(by_name["page-faults"].value, 10u);  // the loader maps and touches pages
  EXPECT_TRUE(by_name.contains("context-switches"));
}

// A snapshot disables the trace source: with -p and several threads on a CPU, the other
// threads' trace events (peers, writing into the same AUX area) must stop too, and tracking
// events must not. Software task-clock events on this thread stand in for both: an event
// that is disabled stops accumulating time_enabled.
TEST(RecordKernelTest, DisablingATraceSourceDisablesItsPeersNotItsTracking) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  absl::StatusOr<PerfEvent> main = PerfEvent::Open(attr, 0, -1, "main");
  if (main.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << main.status();
  ASSERT_THAT(main, IsOk());
  PTKIT_ASSERT_OK_AND_ASSIGN(PerfEvent peer, PerfEvent::Open(attr, 0, -1, "peer"));
  PTKIT_ASSERT_OK_AND_ASSIGN(PerfEvent tracking, PerfEvent::Open(attr, 0, -1, "tracking"));
  PTKIT_ASSERT_OK_AND_ASSIGN(RingBuffer ring, RingBuffer::Map(*main, 1, 0, false));
  std::vector<PerfEvent> redirected, peers;
  redirected.push_back(std::move(tracking));
  peers.push_back(std::move(peer));
  KernelTraceSource source(*std::move(main), std::move(redirected), std::move(ring),
                           StreamId{StreamKind::kThread, 0}, -1, {}, std::move(peers));
  auto enabled_time = [&](PerfEvent& e) {
    absl::StatusOr<CounterReading> r = e.Read();
    EXPECT_THAT(r, IsOk());
    return r.ok() ? r->time_enabled : 0;
  };
  auto spin = [] {
    uint64_t x = 0;
    for (int i = 0; i < 5'000'000; ++i) {
      x += static_cast<uint64_t>(i);
      asm volatile("" : "+r"(x));  // keeps the loop
    }
  };
  ASSERT_THAT(source.Enable(), IsOk());
  spin();
  ASSERT_THAT(source.Disable(), IsOk());
  const uint64_t main_off = enabled_time(source.aux_event());
  const uint64_t peer_off = enabled_time(source.peers()[0]);
  const uint64_t tracking_off = enabled_time(source.redirected()[0]);
  spin();
  EXPECT_EQ(enabled_time(source.aux_event()), main_off);
  EXPECT_EQ(enabled_time(source.peers()[0]), peer_off);
  EXPECT_GT(enabled_time(source.redirected()[0]), tracking_off);  // tracking stays on
  ASSERT_THAT(source.Enable(), IsOk());
  spin();
  EXPECT_GT(enabled_time(source.aux_event()), main_off);
  EXPECT_GT(enabled_time(source.peers()[0]), peer_off);
}

TEST(RecordKernelTest, AuxAreaOnASoftwareEventIsRefusedClearly) {
  const perf_event_attr attr = BuildTrackingAttr({});
  OPEN_OR_SKIP(ev, attr, 0, "dummy event (self)");
  absl::StatusOr<RingBuffer> rb = RingBuffer::Map(ev, 1, 4, false);
  EXPECT_FALSE(rb.ok());
  EXPECT_THAT(std::string(rb.status().message()), HasSubstr("AUX area of dummy event (self)"));
}

// Whether the page at `addr` is mapped in this process (mincore fails with ENOMEM otherwise).
bool Mapped(const void* addr) {
  unsigned char resident = 0;
  return ::mincore(const_cast<void*>(addr), static_cast<size_t>(::sysconf(_SC_PAGESIZE)),
                   &resident) == 0;
}

// Moving a RingBuffer moves its mappings: the target's own are unmapped, the moved-in ones
// stay mapped and usable, the moved-from one holds nothing (its view is empty, so nothing
// reads a mapping it no longer owns), and the last owner's destruction unmaps.
TEST(RecordKernelTest, RingBufferMovesUnmapWhatTheyReplace) {
  const perf_event_attr attr = BuildTrackingAttr({});
  OPEN_OR_SKIP(ev1, attr, 0, "dummy (self) 1");
  OPEN_OR_SKIP(ev2, attr, 0, "dummy (self) 2");
  PTKIT_ASSERT_OK_AND_ASSIGN(RingBuffer a, RingBuffer::Map(ev1, 1, 0, false));
  PTKIT_ASSERT_OK_AND_ASSIGN(RingBuffer b, RingBuffer::Map(ev2, 2, 0, false));
  const void* a_page = a.page();
  const void* b_page = b.page();
  const size_t b_data = b.view().data.size();
  ASSERT_TRUE(Mapped(a_page));
  ASSERT_TRUE(Mapped(b_page));

  a = std::move(b);
  EXPECT_FALSE(Mapped(a_page)) << "the mapping move assignment replaced is unmapped";
  EXPECT_TRUE(Mapped(b_page));
  EXPECT_EQ(a.page(), b_page);
  EXPECT_EQ(a.view().data.size(), b_data);
  EXPECT_EQ(a.page()->data_size, b_data) << "the user page is readable through the new owner";
  EXPECT_EQ(b.page(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_TRUE(b.view().data.empty());

  {
    RingBuffer c(std::move(a));
    EXPECT_EQ(c.page(), b_page);
    EXPECT_EQ(a.page(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
    EXPECT_TRUE(a.view().data.empty());
    EXPECT_TRUE(Mapped(b_page));
    RingBuffer& same = c;
    c = std::move(same);  // a self-move keeps the mappings
    EXPECT_EQ(c.page(), b_page);
    EXPECT_TRUE(Mapped(b_page));
  }
  EXPECT_FALSE(Mapped(b_page)) << "the last owner's destruction unmaps";
}

}  // namespace
}  // namespace ptkit::record
