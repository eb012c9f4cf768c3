// --trigger on the real kernel: the uprobe PMU's events count every thread's hits of a
// function of the workload (nm and the program's source say how many), and the drain loop the
// kernel path runs takes a snapshot round of its sources when the trigger fires (a simulated
// PMU's ring here: no Intel PT on this machine). Skips with the reason when perf_event_open
// of the uprobe PMU is denied or the PMU is absent.
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
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
  // A copy of the program of its own: a uprobe is on a file (inode and offset), and other tests
  // run the program at the same time.
  testing::TempDir dir;
  const std::string program = dir.File("threads");
  std::filesystem::copy_file(kThreads, program);
  std::filesystem::permissions(program, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
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

TEST(TriggerKernelTest, TheDrainLoopSnapshotsWhenTheTriggerFires) {
  absl::StatusOr<TriggerSpec> spec = ParseTrigger("uprobe:work", kThreads);
  ASSERT_TRUE(spec.ok()) << spec.status();
  testing::TempDir dir;
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
  absl::StatusOr<Workload> w = Workload::Start({kThreads});
  ASSERT_TRUE(w.ok()) << w.status();
  std::string skip;
  absl::StatusOr<UprobeTrigger> trigger = OpenOrSkipReason(*spec, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(trigger.ok()) << trigger.status();
  Drainer drainer(writer->get());
  const uint32_t root = static_cast<uint32_t>(w->pid());
  LoopOptions lo;
  lo.poll_timeout_ms = 20;
  lo.snapshot_mode = true;
  lo.trigger_fds = trigger->poll_fds();
  lo.triggered = [&]() -> absl::StatusOr<uint64_t> {
    if (!trigger->Pending()) return 0;
    absl::StatusOr<std::vector<TriggerHit>> hits =
        trigger->Poll([root](uint32_t pid) { return IsDescendant(pid, root); });
    if (!hits.ok()) return hits.status();
    return hits->size();
  };
  lo.child_exited = [&] { return w->TryReap().has_value(); };
  ASSERT_TRUE(w->Go().ok());
  TraceSource* sources[] = {sim->get()};
  absl::StatusOr<LoopResult> r = RunDrainLoop(sources, drainer, signals, lo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->workload_exited);
  EXPECT_EQ(r->trigger_fires, 2u);
  EXPECT_GE(r->trigger_snapshots, 1u);  // hits in one pass share a round
  EXPECT_LE(r->trigger_snapshots, 2u);
  EXPECT_EQ(r->snapshots, r->trigger_snapshots + 1);  // and the end round
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

}  // namespace
}  // namespace ptkit::record
