// --trigger on the real kernel: the uprobe PMU's events count every thread's hits of a
// function of the workload (nm and the program's source say how many), and the drain loop the
// kernel path runs takes a snapshot round of its sources when the trigger fires (a simulated
// PMU's ring here: no Intel PT on this machine). Skips with the reason when perf_event_open
// of the uprobe PMU is denied or the PMU is absent.
// --snapshot-on-crash on the kernel path: the CrashWatcher (real ptrace) holds the thread that
// got the fatal signal while the drain loop takes its last snapshot round; nm says where the
// fault is.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "record/crash.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/perf_event.h"
#include "record/session.h"
#include "record/sim_pmu.h"
#include "record/trigger.h"
#include "record/workload.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

// examples/programs/threads.c: main starts two threads, each calls work() once.
const std::string kThreads = THREADS_PROGRAM;
// tests/e2e/programs/crash.c: SIGSEGV in main, or with an argument in a second thread's fault().
const std::string kCrash = CRASH_PROGRAM;
// examples/programs/alarm.c: 40 SIGALRMs it catches, then exit 0.
const std::string kSignals = SIGNALS_PROGRAM;

std::vector<int> OnlineCpus() {
  absl::StatusOr<std::string> text = ReadSystemFile("/sys/devices/system/cpu/online");
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text.ok() ? *text : "0");
  return cpus.ok() ? *cpus : std::vector<int>{0};
}

absl::StatusOr<UprobeTrigger> OpenOrSkipReason(const TriggerSpec& spec, std::string& skip) {
  absl::StatusOr<UprobeTrigger> t = UprobeTrigger::Open(spec, OnlineCpus());
  if (absl::IsPermissionDenied(t.status()) || absl::IsNotFound(t.status())) {
    skip = std::string(t.status().message());
  }
  return t;
}

TEST(TriggerKernelTest, TheUprobeCountsEveryThreadsHitsAndOnlyTheWorkloads) {
  // A copy of the program of its own (TempDir::Copy says why).
  testing::TempDir dir;
  const std::string program = dir.Copy(kThreads, "threads");
  absl::StatusOr<TriggerSpec> spec = ParseTrigger("uprobe:work", program);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto [work, work_end] = testing::NmRange(program, "work");
  ASSERT_LT(work, work_end);
  EXPECT_EQ(spec->offset, work - 0x400000);  // a static program linked at 0x400000
  absl::StatusOr<Workload> w = Workload::Start({program});
  ASSERT_TRUE(w.ok()) << w.status();
  std::string skip;
  absl::StatusOr<UprobeTrigger> trigger = OpenOrSkipReason(*spec, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(trigger.ok()) << trigger.status();
  ASSERT_TRUE(w->Go().ok());
  // An unrelated run of the same program: its hits are not the workload's.
  absl::StatusOr<Workload> other = Workload::Start({program});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->Go().ok());
  EXPECT_EQ(w->Wait(), 0);
  EXPECT_EQ(other->Wait(), 0);
  EXPECT_TRUE(trigger->Pending());
  const uint32_t pid = static_cast<uint32_t>(w->pid());
  absl::StatusOr<std::vector<TriggerHit>> hits =
      trigger->Poll([pid](uint32_t p) { return p == pid; });
  ASSERT_TRUE(hits.ok()) << hits.status();
  ASSERT_EQ(hits->size(), 2u);
  std::set<uint32_t> tids;
  for (const TriggerHit& h : *hits) {
    EXPECT_EQ(h.pid, pid);
    EXPECT_NE(h.tid, pid);  // the workers, not main
    EXPECT_EQ(h.ip, work);
    tids.insert(h.tid);
  }
  EXPECT_EQ(tids.size(), 2u);
  EXPECT_EQ(trigger->hits(), 2u);
  EXPECT_EQ(trigger->ignored(), 2u);  // the other run's two
  EXPECT_FALSE(trigger->Pending());
}

// Runs kThreads under the drain loop of the kernel path with a uprobe trigger on work()
// (SnapshotHitsOf, the snapshot limit `count`) and a simulated PMU's overwritten AUX ring as
// the trace; checks that every snapshot round stored the ring's bytes. Sets `skip` when the
// uprobe PMU is denied or absent.
struct TriggeredRun {
  LoopResult loop;
  uint64_t hits = 0;
};
void RunTriggered(uint64_t count, TriggeredRun& out, std::string& skip) {
  testing::TempDir dir;
  const std::string program = dir.Copy(kThreads, "threads");
  absl::StatusOr<TriggerSpec> spec = ParseTrigger("uprobe:work", program);
  ASSERT_TRUE(spec.ok()) << spec.status();
  WriterOptions wo;
  absl::StatusOr<std::unique_ptr<ContainerWriter>> writer =
      ContainerWriter::Create(dir.File("t.pt"), wo);
  ASSERT_TRUE(writer.ok());
  absl::StatusOr<std::unique_ptr<SimulatedPmu>> sim =
      SimulatedPmu::Create({.data_pages = 8, .aux_pages = 4, .overwrite = true});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const std::vector<uint8_t> trace(1000, 0x55);
  (*sim)->WriteTrace(trace);
  SignalWatcher signals;
  absl::StatusOr<Workload> w = Workload::Start({program});
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<UprobeTrigger> trigger = OpenOrSkipReason(*spec, skip);
  if (!skip.empty()) return;
  ASSERT_TRUE(trigger.ok()) << trigger.status();
  trigger->set_snapshot_limit(count);
  Drainer drainer(writer->get());
  LoopOptions lo;
  lo.poll_timeout_ms = 20;
  lo.snapshot_mode = true;
  lo.trigger_fds = trigger->poll_fds();
  lo.triggered = SnapshotHitsOf(*trigger, static_cast<uint32_t>(w->pid()));
  lo.child_exited = [&] { return w->TryReap().has_value(); };
  ASSERT_TRUE(w->Go().ok());
  TraceSource* sources[] = {sim->get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  ASSERT_TRUE(r.ok()) << r.status();
  out.loop = *r;
  out.hits = trigger->hits();
  EXPECT_EQ(trigger->snapshot_hits(), r->trigger_fires);
  ASSERT_TRUE((*writer)->Close().ok());
  absl::StatusOr<ContainerReader> reader = ContainerReader::Open(dir.File("t.pt"));
  ASSERT_TRUE(reader.ok());
  RecordView rec;
  uint64_t snapshots = 0;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kSnapshot) continue;
    absl::StatusOr<SnapshotRecord> s = ParseSnapshot(rec.payload);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(std::vector<uint8_t>(s->data.begin(), s->data.end()), trace);
    ++snapshots;
  }
  EXPECT_EQ(snapshots, r->snapshots);
}

TEST(TriggerKernelTest, TheDrainLoopSnapshotsWhenTheTriggerFires) {
  TriggeredRun run;
  std::string skip;
  RunTriggered(/*count=*/0, run, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  const LoopResult& r = run.loop;
  EXPECT_TRUE(r.workload_exited);
  EXPECT_EQ(run.hits, 2u);
  EXPECT_EQ(r.trigger_fires, 2u);
  EXPECT_GE(r.trigger_snapshots, 1u);  // hits in one pass share a round
  EXPECT_LE(r.trigger_snapshots, 2u);
  EXPECT_EQ(r.snapshots, r.trigger_snapshots + 1);  // and the end round
}

// --trigger-count 1: the first hit of either worker thread takes the one trigger snapshot, the
// other thread's hit is counted and takes none.
TEST(TriggerKernelTest, TriggerCountLimitsTheHitsThatSnapshot) {
  TriggeredRun run;
  std::string skip;
  RunTriggered(/*count=*/1, run, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  const LoopResult& r = run.loop;
  EXPECT_TRUE(r.workload_exited);
  EXPECT_EQ(run.hits, 2u);
  EXPECT_EQ(r.trigger_fires, 1u);
  EXPECT_EQ(r.trigger_snapshots, 1u);
  EXPECT_EQ(r.snapshots, 2u);  // and the end round
}

TEST(TriggerKernelTest, TakeForSnapshotsCountsUpToTheLimit) {
  testing::TempDir dir;
  absl::StatusOr<TriggerSpec> spec = ParseTrigger("uprobe:work", dir.Copy(kThreads, "threads"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string skip;
  absl::StatusOr<UprobeTrigger> t = OpenOrSkipReason(*spec, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->TakeForSnapshots(3), 3u);  // no limit
  t->set_snapshot_limit(5);
  EXPECT_EQ(t->TakeForSnapshots(1), 1u);
  EXPECT_EQ(t->TakeForSnapshots(4), 1u);
  EXPECT_EQ(t->TakeForSnapshots(2), 0u);
  EXPECT_EQ(t->snapshot_hits(), 5u);
}

// The kernel path's loop with a CrashWatcher on `argv` (session.cc's child_exited): the loop
// ends at the crash, its last snapshot round of a simulated PMU's ring taken while the
// faulting thread is held. Returns the crash (if any) and the workload's wait status.
struct WatchedRun {
  std::optional<CrashInfo> crash;
  bool alive_at_end = false;  // the faulting thread still existed when the loop ended
  LoopResult loop;
  int status = -1;
};
void RunWatched(const std::vector<std::string>& argv, WatchedRun& out, std::string& skip) {
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<ContainerWriter>> writer =
      ContainerWriter::Create(dir.File("c.pt"), WriterOptions{});
  ASSERT_TRUE(writer.ok());
  absl::StatusOr<std::unique_ptr<SimulatedPmu>> sim =
      SimulatedPmu::Create({.data_pages = 8, .aux_pages = 4, .overwrite = true});
  ASSERT_TRUE(sim.ok()) << sim.status();
  (*sim)->WriteTrace(std::vector<uint8_t>(1000, 0x55));
  SignalWatcher signals;
  absl::StatusOr<Workload> w = Workload::Start(argv);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<std::unique_ptr<CrashWatcher>> watcher = CrashWatcher::Start(w->pid());
  if (absl::IsPermissionDenied(watcher.status())) {
    skip = std::string(watcher.status().message());
    return;
  }
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  Drainer drainer(writer->get());
  LoopOptions lo;
  lo.poll_timeout_ms = 10;
  lo.snapshot_mode = true;
  lo.child_exited = [&] {
    if ((*watcher)->crash()) return true;
    return (*watcher)->exited() && w->TryReap().has_value();
  };
  ASSERT_TRUE(w->Go().ok());
  TraceSource* sources[] = {sim->get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  ASSERT_TRUE(r.ok()) << r.status();
  out.loop = *r;
  out.crash = (*watcher)->crash();
  if (out.crash) {
    out.alive_at_end =
        std::filesystem::exists(absl::StrCat("/proc/", w->pid(), "/task/", out.crash->tid));
  }
  (*watcher)->Finish();
  out.status = w->Wait();
  ASSERT_TRUE((*writer)->Close().ok());
}

TEST(CrashWatcherTest, TheLoopEndsAtTheFaultWithTheThreadHeld) {
  const auto [main_begin, main_end] = testing::NmRange(kCrash, "main");
  const auto [fault_begin, fault_end] = testing::NmRange(kCrash, "fault");
  ASSERT_LT(main_begin, main_end);
  ASSERT_LT(fault_begin, fault_end);
  for (const bool in_thread : {false, true}) {
    SCOPED_TRACE(in_thread ? "in a second thread" : "in main");
    std::vector<std::string> argv = {kCrash};
    if (in_thread) argv.push_back("thread");
    WatchedRun run;
    std::string skip;
    RunWatched(argv, run, skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(run.crash.has_value());
    EXPECT_EQ(run.crash->signal, SIGSEGV);
    EXPECT_TRUE(run.alive_at_end);
    EXPECT_TRUE(run.loop.workload_exited);
    EXPECT_EQ(run.loop.snapshots, 1u);  // the last round, at the crash
    if (in_thread) {
      EXPECT_NE(run.crash->tid, run.crash->pid);
      EXPECT_GE(run.crash->ip, fault_begin);
      EXPECT_LT(run.crash->ip, fault_end);
    } else {
      EXPECT_EQ(run.crash->tid, run.crash->pid);
      EXPECT_GE(run.crash->ip, main_begin);
      EXPECT_LT(run.crash->ip, main_end);
    }
    // Delivered at Finish(): it dies of it.
    ASSERT_TRUE(WIFSIGNALED(run.status)) << run.status;
    EXPECT_EQ(WTERMSIG(run.status), SIGSEGV);
  }
}

// Threads (clone stops) and 40 caught SIGALRMs pass through the watcher: no crash, and the
// programs exit 0 as they do unwatched.
TEST(CrashWatcherTest, ThreadsAndCaughtSignalsRunAsUnwatched) {
  for (const std::string& program : {kThreads, kSignals}) {
    SCOPED_TRACE(program);
    WatchedRun run;
    std::string skip;
    RunWatched({program}, run, skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    EXPECT_FALSE(run.crash.has_value());
    EXPECT_TRUE(run.loop.workload_exited);
    ASSERT_TRUE(WIFEXITED(run.status)) << run.status;
    EXPECT_EQ(WEXITSTATUS(run.status), 0);
  }
}

}  // namespace
}  // namespace ptkit::record
