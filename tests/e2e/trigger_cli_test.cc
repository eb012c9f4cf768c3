// Snapshot triggers with the emulated trace, both backends:
//   ptrecord --emulate=step|qemu --trigger uprobe:FUNC --ground-truth truth -o trace.pt -- PROGRAM
//   ptrecord --emulate=step|qemu --snapshot-on-crash ... -- CRASHING_PROGRAM
// With step the trigger is a real uprobe perf event; with qemu the plugin instruments FUNC and
// sees the fatal signal at qemu's exit. The oracles are the recorder's ground truth (every
// retired instruction per thread) and nm (FUNC's address range): a thread's k-th trigger
// snapshot decodes to a run of what it executed that ends right before its k-th entry into
// FUNC, where the trace is disabled (FUP FUNC, TIP.PGD) as the hardware's is by the uprobe's
// trap; a crash snapshot ends likewise at the faulting instruction.
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "e2e_programs.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::FirstTruthTid;
using ::ptkit::testing::NmRange;
using ::ptkit::testing::ObjdumpInstructions;
using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

using ::ptkit::testing::kThreads;
const std::string kCrash = std::string(E2E_PROGRAM_DIR) + "/e2e_crash";

using ::ptkit::testing::Denied;

nlohmann::json InfoJson(const std::string& trace) {
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", trace});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  return nlohmann::json::parse(info.out, nullptr, false);
}

// The instructions of snapshot `k` of thread `tid`.
std::vector<uint64_t> SnapshotInsns(const std::string& trace, uint64_t tid, int k) {
  auto dec = RunCommand({PTDECODE_PATH, "insn", "--tid", std::to_string(tid), "--snapshot",
                         std::to_string(k), trace});
  EXPECT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out.find("[error"), std::string::npos) << dec.out;
  PerThread got = ParseInsn(dec.out);
  return got[tid];
}

// Where `run` sits in `ran` (its first instruction's index), or npos.
size_t Find(const std::vector<uint64_t>& ran, const std::vector<uint64_t>& run) {
  auto at = std::search(ran.begin(), ran.end(), run.begin(), run.end());
  return at == ran.end() ? std::string::npos : static_cast<size_t>(at - ran.begin());
}

// Snapshot `k` of thread `tid` ends with FUP `ip`, TIP.PGD: the thread's trace is disabled
// at `ip` (the instruction there has not run), which `ptdecode branches` shows as its last
// branch: an interrupt from `ip` into untraced code.
void ExpectEndsDisabledAt(const std::string& trace, uint64_t tid, int k, uint64_t ip) {
  auto branches = RunCommand({PTDECODE_PATH, "branches", "--tid", std::to_string(tid), "--snapshot",
                              std::to_string(k), trace});
  ASSERT_EQ(branches.exit_code, 0) << branches.err;
  ASSERT_TRUE(branches.out.ends_with(" -> ? [untraced] interrupt\n")) << branches.out;
  const size_t last = branches.out.rfind('\n', branches.out.size() - 2) + 1;
  EXPECT_TRUE(branches.out.substr(last).starts_with(fmt::format("{:016x} ", ip)))
      << branches.out.substr(last);
}

// Every thread that enters `work` gets a snapshot there, and only there: the two worker
// threads hit it once each (as the ground truth says), the main thread never.
void ExpectASnapshotAtEveryEntry(const std::string& backend) {
  testing::TempDir dir;
  const std::string trace = dir.File("t.pt"), truth_file = dir.File("t.truth");
  const std::string program = dir.Copy(kThreads, "threads");
  auto rec = RunCommand({PTRECORD_PATH, "--emulate=" + backend, "--trigger", "uprobe:work",
                         "--ground-truth", truth_file, "-o", trace, "--", program});
  if (Denied(rec.err)) GTEST_SKIP() << "perf_event_open or ptrace denied: " << rec.err;
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto [work_begin, work_end] = NmRange(kThreads, "work");
  ASSERT_LT(work_begin, work_end);
  const PerThread truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), 3u);
  uint64_t entries = 0;
  for (const auto& [tid, ips] : truth) entries += std::count(ips.begin(), ips.end(), work_begin);
  ASSERT_EQ(entries, 2u);
  EXPECT_THAT(rec.err, HasSubstr("; 2 hits of uprobe:work, 2 snapshots at them"));

  const nlohmann::json info = InfoJson(trace);
  const nlohmann::json& t = info["metadata"]["end"]["trigger"];
  EXPECT_EQ(t["hits"], 2);
  EXPECT_EQ(t["snapshots"], 2);
  EXPECT_EQ(t["offset"].get<uint64_t>(), work_begin - 0x400000);  // static, linked at 0x400000
  EXPECT_EQ(info["metadata"]["mode"], "snapshot");

  for (const auto& [tid, ran] : truth) {
    SCOPED_TRACE(::testing::Message() << "tid " << tid);
    const auto entry = std::find(ran.begin(), ran.end(), work_begin);
    if (entry == ran.end()) {
      // No hit: its only snapshot is the end one, a run ending where the thread did.
      const std::vector<uint64_t> end = SnapshotInsns(trace, tid, 0);
      ASSERT_FALSE(end.empty());
      EXPECT_TRUE(std::equal(end.begin(), end.end(), ran.end() - end.size()));
      continue;
    }
    const std::vector<uint64_t> got = SnapshotInsns(trace, tid, 0);
    ASSERT_FALSE(got.empty());
    const size_t at = Find(ran, got);
    ASSERT_NE(at, std::string::npos) << "snapshot 0 is no run of the thread's instructions";
    const size_t entry_index = static_cast<size_t>(entry - ran.begin());
    // The decode ends right before work's entry, which has not run in the trace yet: the
    // thread's trace is disabled there (FUP work, TIP.PGD), its last packets.
    EXPECT_EQ(at + got.size(), entry_index) << "the snapshot does not end at work's entry";
    ExpectEndsDisabledAt(trace, tid, 0, work_begin);
    // The end snapshot follows, and it is the thread's end.
    const std::vector<uint64_t> end = SnapshotInsns(trace, tid, 1);
    ASSERT_FALSE(end.empty());
    EXPECT_TRUE(std::equal(end.begin(), end.end(), ran.end() - end.size()));
  }
}

TEST(TriggerCliTest, AUprobeSnapshotEndsAtTheFunctionsEntryInEveryThread) {
  ExpectASnapshotAtEveryEntry("step");
}

// Under qemu the plugin instruments work's first instruction; the thread waits there until
// ptrecord has copied its ring.
TEST(TriggerCliTest, UnderQemuASnapshotEndsAtTheFunctionsEntryInEveryThread) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectASnapshotAtEveryEntry("qemu");
}

// --trigger-count 1: of the two worker threads' hits, only the first (in time) takes a
// snapshot; the other thread has its end snapshot only, and both hits are counted.
void ExpectOnlyTheFirstHitToSnapshot(const std::string& backend) {
  testing::TempDir dir;
  const std::string trace = dir.File("t.pt"), truth_file = dir.File("t.truth");
  const std::string program = dir.Copy(kThreads, "threads");
  auto rec = RunCommand({PTRECORD_PATH, "--emulate=" + backend, "--trigger", "uprobe:work",
                         "--trigger-count", "1", "--ground-truth", truth_file, "-o", trace, "--",
                         program});
  if (Denied(rec.err)) GTEST_SKIP() << "perf_event_open or ptrace denied: " << rec.err;
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_THAT(rec.err,
              HasSubstr("; 2 hits of uprobe:work, 1 snapshot at them (--trigger-count 1)"));
  const nlohmann::json info = InfoJson(trace);
  const nlohmann::json& t = info["metadata"]["end"]["trigger"];
  EXPECT_EQ(t["hits"], 2);
  EXPECT_EQ(t["snapshots"], 1);
  EXPECT_EQ(t["count"], 1);
  const auto [work_begin, work_end] = NmRange(kThreads, "work");
  const PerThread truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), 3u);
  int triggered = 0;
  for (const auto& [tid, ran] : truth) {
    SCOPED_TRACE(::testing::Message() << "tid " << tid);
    const std::vector<uint64_t> first = SnapshotInsns(trace, tid, 0);
    ASSERT_FALSE(first.empty());
    if (std::equal(first.begin(), first.end(), ran.end() - first.size())) {
      // Its end snapshot: nothing follows.
      auto second = RunCommand(
          {PTDECODE_PATH, "insn", "--tid", std::to_string(tid), "--snapshot", "1", trace});
      EXPECT_NE(second.exit_code, 0);
      continue;
    }
    // The trigger snapshot: a run of the thread's instructions that ends at its entry into work
    // (as in AUprobeSnapshotEndsAtTheFunctionsEntryInEveryThread).
    ++triggered;
    const size_t at = Find(ran, first);
    ASSERT_NE(at, std::string::npos) << "snapshot 0 is no run of the thread's instructions";
    const auto entry = std::find(ran.begin(), ran.end(), work_begin);
    ASSERT_NE(entry, ran.end());
    const size_t entry_index = static_cast<size_t>(entry - ran.begin());
    EXPECT_EQ(at + first.size(), entry_index);
    const std::vector<uint64_t> end = SnapshotInsns(trace, tid, 1);
    ASSERT_FALSE(end.empty());
    EXPECT_TRUE(std::equal(end.begin(), end.end(), ran.end() - end.size()));
  }
  EXPECT_EQ(triggered, 1);
}

// FUNC entered by a direct call (no packet of its own): e2e_filter_calls' traced() calls
// direct() six times. The first entry's snapshot ends with that call, at direct's entry (it
// ended at the last conditional branch's packet before, short of the call).
void ExpectASnapshotAtADirectCall(const std::string& backend) {
  testing::TempDir dir;
  const std::string trace = dir.File("t.pt"), truth_file = dir.File("t.truth");
  const std::string program = dir.Copy(E2E_PROGRAM_DIR "/e2e_filter_calls", "calls");
  auto rec = RunCommand({PTRECORD_PATH, "--emulate=" + backend, "--trigger", "uprobe:direct",
                         "--trigger-count", "1", "--ground-truth", truth_file, "-o", trace, "--",
                         program});
  if (Denied(rec.err)) GTEST_SKIP() << "perf_event_open or ptrace denied: " << rec.err;
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_THAT(rec.err, HasSubstr("; 6 hits of uprobe:direct, 1 snapshot at them"));
  const PerThread truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), 1u);
  const auto& [tid, ran] = *truth.begin();
  const uint64_t direct = NmRange(program, "direct").first;
  const auto [traced_begin, traced_end] = NmRange(program, "traced");
  const auto entry = std::find(ran.begin(), ran.end(), direct);
  ASSERT_NE(entry, ran.end());
  ASSERT_NE(entry, ran.begin());
  const uint64_t call = *(entry - 1);  // the call in traced(), by the ground truth
  EXPECT_GE(call, traced_begin);
  EXPECT_LT(call, traced_end);
  const std::vector<uint64_t> got = SnapshotInsns(trace, tid, 0);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), call);
  const size_t at = Find(ran, got);
  ASSERT_NE(at, std::string::npos) << "snapshot 0 is no run of the thread's instructions";
  EXPECT_EQ(at + got.size(), static_cast<size_t>(entry - ran.begin()));
  ExpectEndsDisabledAt(trace, tid, 0, direct);
}

TEST(TriggerCliTest, ASnapshotAtADirectlyCalledFunctionEndsWithTheCall) {
  ExpectASnapshotAtADirectCall("step");
}

TEST(TriggerCliTest, UnderQemuASnapshotAtADirectlyCalledFunctionEndsWithTheCall) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectASnapshotAtADirectCall("qemu");
}

TEST(TriggerCliTest, TriggerCountSnapshotsOnlyTheFirstHitOfAnyThread) {
  ExpectOnlyTheFirstHitToSnapshot("step");
}

TEST(TriggerCliTest, UnderQemuTriggerCountSnapshotsOnlyTheFirstHitOfAnyThread) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectOnlyTheFirstHitToSnapshot("qemu");
}

TEST(TriggerCliTest, BadTriggersAreUsageErrors) {
  testing::TempDir dir;
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--trigger", "work"}, "not a uprobe trigger"},
           {{"--trigger", "uprobe:"}, "no FUNC"},
           {{"--trigger", "uprobe:no_such_function"}, "no symbol 'no_such_function'"},
           {{"--trigger", "uprobe:work@/nonexistent"}, "not found"},
           {{"--trigger", "uprobe:work", "--aux-sample"}, "exclude each other"},
           {{"--trigger-count", "2"}, "--trigger-count needs --trigger"},
           {{"--trigger", "uprobe:work", "--trigger-count", "0"}, "expected 1 or more"},
       }) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=step", "-o", dir.File("bad.pt")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--");
    argv.push_back(kThreads);
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(says)) << args[1];
  }
}

// The workload dies of SIGSEGV, in main or (`in_thread`) in a second thread's `fault`: the
// snapshot names the signal, the thread and the faulting instruction (in that function, by
// nm), and decodes to the end of what the thread executed, up to the faulting store. The
// step backend takes it before the signal is delivered; under qemu the plugin ends the
// thread's stream at the fault (FUP, TIP.PGD) when qemu exits for the signal, and qemu dies of
// it as the program does natively.
void ExpectACrashSnapshot(const std::string& backend, bool in_thread) {
  testing::TempDir dir;
  const std::string trace = dir.File("c.pt"), truth_file = dir.File("c.truth");
  std::vector<std::string> argv = {PTRECORD_PATH,
                                   "--emulate=" + backend,
                                   "--snapshot-on-crash",
                                   "--ground-truth",
                                   truth_file,
                                   "-o",
                                   trace,
                                   "--",
                                   kCrash};
  if (in_thread) argv.push_back("thread");
  auto rec = RunCommand(argv);
  if (Denied(rec.err)) GTEST_SKIP() << "ptrace or perf_event_open denied: " << rec.err;
  EXPECT_EQ(rec.exit_code, 128 + SIGSEGV) << rec.err;
  EXPECT_THAT(rec.err, HasSubstr("workload killed by SIGSEGV"));
  const PerThread truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), in_thread ? 2u : 1u);

  const nlohmann::json info = InfoJson(trace);
  const nlohmann::json& crash = info["metadata"]["end"]["crash"];
  ASSERT_TRUE(crash.is_object()) << info.dump();
  EXPECT_EQ(crash["signal"], "SIGSEGV");
  const uint64_t tid = crash["tid"];
  ASSERT_EQ(truth.count(tid), 1u) << "the crash names no thread of the run";
  const std::vector<uint64_t>& ran = truth.at(tid);
  EXPECT_THAT(rec.err, HasSubstr("crash snapshot: SIGSEGV in thread " + std::to_string(tid)));
  const uint64_t ip = crash["ip"];
  const auto [fn_begin, fn_end] = NmRange(kCrash, in_thread ? "fault" : "main");
  EXPECT_GE(ip, fn_begin);
  EXPECT_LT(ip, fn_end);
  // The fault did not retire: the ground truth ends right before it. The snapshot decodes to
  // a run of the thread's instructions that ends there too.
  const std::vector<uint64_t> got = SnapshotInsns(trace, tid, 0);
  ASSERT_FALSE(got.empty());
  const size_t at = Find(ran, got);
  ASSERT_NE(at, std::string::npos) << "the crash snapshot is no run of the thread's instructions";
  // The stream ends at the fault itself (FUP, TIP.PGD): the decode is the thread's end.
  EXPECT_EQ(at + got.size(), ran.size());
  // The function's instructions by objdump: the faulting one is the one after the thread's
  // last (the truth's last step is in the function, straight-line to the fault).
  const std::vector<uint64_t> fn = ObjdumpInstructions(kCrash, in_thread ? "fault" : "main");
  auto next_of = [&fn](uint64_t address) -> uint64_t {
    const auto it = std::find(fn.begin(), fn.end(), address);
    return it == fn.end() || it + 1 == fn.end() ? 0 : *(it + 1);
  };
  EXPECT_EQ(ip, next_of(ran.back()));
  ExpectEndsDisabledAt(trace, tid, 0, ip);
  // It is the thread's last snapshot: no end round after the crash.
  auto second =
      RunCommand({PTDECODE_PATH, "insn", "--tid", std::to_string(tid), "--snapshot", "1", trace});
  EXPECT_NE(second.exit_code, 0);

  // The default report starts with the crash and the thread's last branches, the newest one
  // the last branch the ground truth has: into the straight-line run that ends at the fault.
  auto report = RunCommand({PTDECODE_PATH, trace});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  std::vector<std::string> lines;
  for (size_t from = 0; from < report.out.size();) {
    const size_t nl = std::min(report.out.find('\n', from), report.out.size());
    lines.push_back(report.out.substr(from, nl - from));
    from = nl + 1;
  }
  ASSERT_GE(lines.size(), 3u) << report.out;
  EXPECT_EQ(lines[0], fmt::format("crash:       SIGSEGV in thread {} (pid {}) at 0x{:x}", tid,
                                  crash["pid"].get<uint64_t>(), ip));
  EXPECT_THAT(lines[1], HasSubstr(fmt::format("branches of thread {} (the crash snapshot", tid)));
  size_t last = 2;
  while (last < lines.size() && lines[last].starts_with("  ")) ++last;
  ASSERT_GT(last, 2u) << report.out;
  EXPECT_LE(last - 2, 16u);
  EXPECT_EQ(lines[last], "") << "a blank line after the branches";
  // Under qemu the fault ends the trace as an interrupt out of the traced code at the faulting
  // instruction (ptdecode branches' "interrupt", perf's "tr end async"); the taken branch
  // before it is the newest one.
  if (lines[last - 1].ends_with(" interrupt")) {
    EXPECT_THAT(lines[last - 1], ::testing::StartsWith(fmt::format("  {:016x} ", ip)));
    ASSERT_GT(--last, 2u) << report.out;
  }
  const std::string& newest = lines[last - 1];
  const size_t arrow = newest.find(" -> ");
  ASSERT_NE(arrow, std::string::npos) << newest;
  const uint64_t from = std::stoull(newest.substr(2, newest.find(' ', 2) - 2), nullptr, 16);
  const uint64_t to = std::stoull(newest.substr(arrow + 4), nullptr, 16);
  // The ground truth's last taken branch: its last step that does not go to the next
  // instruction by objdump (or comes into the function from elsewhere).
  size_t taken = ran.size() - 1;
  while (taken > 0 && next_of(ran[taken - 1]) == ran[taken]) --taken;
  ASSERT_GT(taken, 0u);
  EXPECT_EQ(from, ran[taken - 1]) << newest;
  EXPECT_EQ(to, ran[taken]) << newest;
  for (size_t i = taken; i < ran.size(); ++i) {
    EXPECT_GE(ran[i], fn_begin);
    EXPECT_LT(ran[i], fn_end);
  }
}

TEST(TriggerCliTest, ACrashSnapshotNamesTheSignalAndEndsAtTheFault) {
  ExpectACrashSnapshot("step", /*in_thread=*/false);
}

TEST(TriggerCliTest, UnderQemuACrashSnapshotNamesTheSignalAndEndsAtTheFault) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectACrashSnapshot("qemu", /*in_thread=*/false);
}

TEST(TriggerCliTest, UnderQemuACrashInASecondThreadNamesThatThread) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectACrashSnapshot("qemu", /*in_thread=*/true);
}

// One run of crash.c in `mode` with --snapshot-on-crash under `backend` (false: skip it),
// its ground truth in `truth`, and the decode of every thread in `got`.
struct CrashRun {
  testing::TempDir dir;
  std::string trace = dir.File("c.pt"), truth_file = dir.File("c.truth");
  testing::CommandResult rec;
  PerThread truth, got;
};
bool RunCrash(const std::string& backend, const std::string& mode, CrashRun& run) {
  run.rec = RunCommand({PTRECORD_PATH, "--emulate=" + backend, "--snapshot-on-crash",
                        "--ground-truth", run.truth_file, "-o", run.trace, "--", kCrash, mode});
  if (Denied(run.rec.err)) return false;
  run.truth = ReadTruth(run.truth_file);
  auto dec = RunCommand({PTDECODE_PATH, "insn", run.trace});
  EXPECT_EQ(dec.exit_code, 0) << dec.err;
  run.got = ParseInsn(dec.out);
  return true;
}

// The crash snapshot holds every thread of the process to its end: a thread that was running
// user code when another crashed ends where it stopped (sweep 30a F3: under step, its snapshot
// was taken at the signal, before its stream ended, and lost its last 5 to 8 instructions).
TEST(TriggerCliTest, TheCrashSnapshotHoldsEveryThreadToItsEnd) {
  for (const std::string backend : {"step", "qemu"}) {
    SCOPED_TRACE(backend);
    if (backend == "qemu" && access("/usr/bin/qemu-x86_64", X_OK) != 0) continue;
    CrashRun run;
    if (!RunCrash(backend, "spinning", run)) GTEST_SKIP() << "ptrace or perf_event_open denied";
    EXPECT_EQ(run.rec.exit_code, 128 + SIGSEGV) << run.rec.err;
    ASSERT_EQ(run.truth.size(), 3u);
    for (const auto& [tid, ips] : run.truth) {
      EXPECT_EQ(run.got[tid].size(), ips.size()) << "tid " << tid;
      EXPECT_TRUE(run.got[tid] == ips) << "tid " << tid;
    }
  }
}

// A forked child that dies of SIGSEGV is no crash of the workload, which goes on and exits 0:
// no crash snapshot, and the workload's trace whole to its end (sweep 30a F1: the step backend
// took the child's signal as the crash, its snapshot the last, and the parent's last 6,478
// instructions were dropped with no word).
TEST(TriggerCliTest, AForkedChildsCrashIsNotTheWorkloads) {
  for (const std::string backend : {"step", "qemu"}) {
    SCOPED_TRACE(backend);
    if (backend == "qemu" && access("/usr/bin/qemu-x86_64", X_OK) != 0) continue;
    CrashRun run;
    if (!RunCrash(backend, "child", run)) GTEST_SKIP() << "ptrace or perf_event_open denied";
    EXPECT_EQ(run.rec.exit_code, 0) << run.rec.err;
    EXPECT_THAT(run.rec.err, Not(HasSubstr("crash snapshot")));
    const nlohmann::json info = InfoJson(run.trace);
    EXPECT_FALSE(info["metadata"]["end"].contains("crash")) << info["metadata"]["end"].dump();
    ASSERT_EQ(run.truth.size(), 2u);
    const uint64_t parent = FirstTruthTid(run.truth_file);
    EXPECT_EQ(run.got[parent].size(), run.truth.at(parent).size());
    EXPECT_TRUE(run.got[parent] == run.truth.at(parent));
  }
}

}  // namespace
}  // namespace ptkit
