// SPDX-License-Identifier: Apache-2.0
//
// `ptrecord --emulate=qemu` of programs in pid namespaces of their own (sweep 37c H1, H3): the
// recording carries the pids and tids of ptrecord's namespace, as the kernel's and
// --emulate=step's do, not the namespaces' own (two programs that were both "pid 1" had their
// traces mixed). Oracles: the plugin's ground truth, the pids the programs read from the
// host's /proc and the shell's `$!`, and perf's reading of the export. Root (unshare --pid);
// skips without qemu-user or pid namespaces.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit::qemu_pidns_test {
namespace {

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kWork = E2E_PROGRAM_DIR "/e2e_pidns_work";
const std::string kCloseExec = E2E_PROGRAM_DIR "/e2e_close_exec";
constexpr char kPerf[] = "/usr/bin/perf";

// A line of e2e_pidns_work: ROLE (main, thread, child), the task's tid in the pid namespace of
// the /proc it read, and in its own.
struct Task {
  std::string role;
  uint64_t outer = 0, inner = 0;
};
std::vector<Task> ReadTasks(const std::string& path) {
  std::vector<Task> tasks;
  std::ifstream in(path);
  for (Task t; in >> t.role >> t.outer >> t.inner;) tasks.push_back(t);
  return tasks;
}
uint64_t ReadPid(const std::string& path) {
  uint64_t pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

// One process of a recording, as perf script shows its PERF_RECORD_FORK: its parent and
// threads.
struct Process {
  uint64_t parent = 0;
  int forked = 0;  // FORK records that made it (one: its pid is no other process's)
  std::set<uint64_t> threads;
};

// The processes of perf.data `data` by its FORK records ("PERF_RECORD_FORK(PID:TID):(PPID:PTID)").
std::map<uint64_t, Process> PerfProcesses(const std::string& data, std::string* out) {
  auto r = RunCommand({kPerf, "script", "-i", data, "--show-task-events", "-F", "event"});
  *out = r.out + r.err;
  std::map<uint64_t, Process> processes;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("PERF_RECORD_FORK(");
    unsigned long long pid = 0, tid = 0, ppid = 0, ptid = 0;  // NOLINT(runtime/int)
    if (at == std::string::npos ||
        std::sscanf(line.c_str() + at, "PERF_RECORD_FORK(%llu:%llu):(%llu:%llu)", &pid, &tid, &ppid,
                    &ptid) != 4) {
      continue;
    }
    if (pid == tid) {
      processes[pid].parent = ppid;
      ++processes[pid].forked;
    }
    processes[pid].threads.insert(tid);
  }
  return processes;
}

bool CanUnsharePid() {
  return geteuid() == 0 &&
         RunCommand({"/usr/bin/unshare", "--fork", "--pid", "--mount-proc", "true"}).exit_code == 0;
}

#define PTKIT_SKIP_WITHOUT_PID_NAMESPACES() \
  PTKIT_SKIP_WITHOUT_QEMU();                \
  if (!CanUnsharePid()) GTEST_SKIP() << "needs root and unshare --pid (util-linux)"

// e2e_pidns_work in two new pid namespaces at once, A with the host's /proc, B with its own
// (--mount-proc): both are pid 1 there, and so are their threads and children alike.
class QemuPidNamespaceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>();
    if (!testing::HaveQemu() || !CanUnsharePid()) return;  // (each test skips)
    const std::string script =
        "unshare --fork --pid " + kWork + " 3000 > " + Dir().File("A.out") + " & echo $! > " +
        Dir().File("A.pid") + "; unshare --fork --pid --mount-proc " + kWork + " 5000 > " +
        Dir().File("B.out") + " & echo $! > " + Dir().File("B.pid") + "; wait";
    run_ = RunCommand({PTRECORD_PATH, "--emulate=qemu", "--ground-truth", Dir().File("two.truth"),
                       "-o", Dir().File("two.pt"), "--", "/bin/sh", "-c", script});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static testing::TempDir& Dir() { return *dir_; }

  static std::unique_ptr<testing::TempDir> dir_;
  static testing::CommandResult run_;
};
std::unique_ptr<testing::TempDir> QemuPidNamespaceTest::dir_;
testing::CommandResult QemuPidNamespaceTest::run_;

// Every thread has a stream of its own, decoded exactly as the ground truth has it, named by
// its tid in ptrecord's namespace: those A read from the host's /proc, none of the namespaces'
// own. Before, both programs' main threads (and their children, and their threads) were one
// stream each: 427,161 instructions lost in the sweep's run.
TEST_F(QemuPidNamespaceTest, EveryThreadIsItsOwnStreamByItsPidInTheRecordersNamespace) {
  PTKIT_SKIP_WITHOUT_PID_NAMESPACES();
  ASSERT_EQ(run_.exit_code, 0) << run_.err;
  EXPECT_THAT(run_.err, Not(HasSubstr("namespace's pids"))) << run_.err;
  const std::vector<Task> a = ReadTasks(Dir().File("A.out"));
  const std::vector<Task> b = ReadTasks(Dir().File("B.out"));
  ASSERT_EQ(a.size(), 4u);  // main, 2 threads, child
  ASSERT_EQ(b.size(), 4u);
  const PerThread truth = ReadTruth(Dir().File("two.truth"));
  auto d = RunCommand({PTDECODE_PATH, "insn", Dir().File("two.pt")});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out.find("[gap"), std::string::npos) << d.err;
  PerThread got = ParseInsn(d.out);
  // sh, two unshare, and the 4 tasks of each program.
  EXPECT_EQ(truth.size(), 11u);
  EXPECT_EQ(got.size(), truth.size());
  for (const auto& [tid, ips] : truth) {
    EXPECT_EQ(got[tid].size(), ips.size()) << "thread " << tid;
    EXPECT_TRUE(got[tid] == ips) << "thread " << tid << ": decoded differs from the ground truth";
  }
  // The host's tids, by A's own reading of /proc and by the shell's $!.
  for (const Task& t : a) {
    EXPECT_NE(t.outer, t.inner) << "A's " << t.role << " did not see the host's /proc";
    EXPECT_TRUE(truth.contains(t.outer)) << "A's " << t.role << " " << t.outer;
  }
  EXPECT_TRUE(truth.contains(ReadPid(Dir().File("A.pid"))));
  EXPECT_TRUE(truth.contains(ReadPid(Dir().File("B.pid"))));
  // Nothing by a namespace's own tids (1..: init and kernel threads in the host's).
  for (const Task& t : b) {
    EXPECT_EQ(t.outer, t.inner) << "B's " << t.role << " saw another /proc than its namespace's";
    EXPECT_FALSE(truth.contains(t.inner)) << "B's " << t.role << " " << t.inner;
  }
}

// perf reads the export's FORK records as it reads the kernel's: one process per pid, B's
// program the child of B's unshare (the shell's $!), with its two threads and a child, none of
// them by its namespace's pid; A's the same with the very pids it read.
TEST_F(QemuPidNamespaceTest, PerfSeesTheProcessTreeByTheRecordersPids) {
  PTKIT_SKIP_WITHOUT_PID_NAMESPACES();
  if (access(kPerf, X_OK) != 0) GTEST_SKIP() << kPerf << " not installed";
  ASSERT_EQ(run_.exit_code, 0) << run_.err;
  const std::string data = Dir().File("two.data");
  auto e =
      RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", Dir().File("two.pt"), "-o", data});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  std::string script;
  const std::map<uint64_t, Process> processes = PerfProcesses(data, &script);
  for (const auto& [pid, p] : processes) EXPECT_EQ(p.forked, 1) << "pid " << pid << "\n" << script;
  const std::vector<Task> a = ReadTasks(Dir().File("A.out"));
  const std::vector<Task> b = ReadTasks(Dir().File("B.out"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (const auto& [name, tasks] : {std::pair{"A", a}, std::pair{"B", b}}) {
    SCOPED_TRACE(name);
    const uint64_t unshare = ReadPid(Dir().File(std::string(name) + ".pid"));
    // The program: unshare's only child, with 2 threads besides its main one and a child.
    std::vector<uint64_t> programs;
    for (const auto& [pid, p] : processes) {
      if (p.parent == unshare) programs.push_back(pid);
    }
    ASSERT_EQ(programs.size(), 1u) << script;
    const uint64_t main = programs[0];
    EXPECT_EQ(processes.at(main).threads.size(), 3u) << script;
    std::vector<uint64_t> children;
    for (const auto& [pid, p] : processes) {
      if (p.parent == main) children.push_back(pid);
    }
    ASSERT_EQ(children.size(), 1u) << script;
    std::set<uint64_t> recorded = processes.at(main).threads;
    recorded.insert(children[0]);
    std::set<uint64_t> inner, outer;
    for (const Task& t : tasks) {
      inner.insert(t.inner);
      outer.insert(t.outer);
    }
    if (std::string(name) == "A") {
      EXPECT_EQ(recorded, outer) << script;  // as A read them from the host's /proc
    }
    for (uint64_t tid : recorded) EXPECT_FALSE(inner.contains(tid)) << tid << "\n" << script;
  }
}

// A program left in a pid namespace whose init exits is killed by the kernel (SIGKILL: its
// slot never ends). ptrecord must not wait for it by its namespace's pid, which names some
// other process of the host (a kernel thread): it waited for ever (sweep 37c H3 b).
// A program in a pid namespace with its own /proc that closes every inherited descriptor and
// then execs (a container's launcher, a closefrom() user) is followed into the new program: the
// plugin asks ptrecord for the ring on a unix socket (sock=), where ring=/proc/PTRECORD/fd/N
// names no process of that /proc. It ran natively, untraced: "the trace ends at execve" (sweep
// 37c H3).
TEST(QemuPidNamespaceExecTest, AProgramThatClosedItsDescriptorsIsFollowedIntoItsExec) {
  PTKIT_SKIP_WITHOUT_PID_NAMESPACES();
  testing::TempDir dir;
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "--ground-truth", dir.File("t.truth"), "-o",
                       dir.File("t.pt"), "--", "/usr/bin/unshare", "--fork", "--pid",
                       "--mount-proc", kCloseExec, kWork, "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("the trace ends at execve"))) << r.err;
  const PerThread truth = ReadTruth(dir.File("t.truth"));
  auto d = RunCommand({PTDECODE_PATH, "insn", dir.File("t.pt")});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  PerThread got = ParseInsn(d.out);
  // unshare, and e2e_close_exec that becomes e2e_pidns_work: its main thread, 2 threads and a
  // child.
  EXPECT_EQ(truth.size(), 5u);
  EXPECT_EQ(got.size(), truth.size());
  for (const auto& [tid, ips] : truth) {
    EXPECT_EQ(got[tid].size(), ips.size()) << "thread " << tid;
    EXPECT_TRUE(got[tid] == ips) << "thread " << tid << ": decoded differs from the ground truth";
  }
  auto stats = RunCommand({PTDECODE_PATH, "stats", dir.File("t.pt")});
  EXPECT_THAT(stats.out, HasSubstr("work [e2e_pidns_work]")) << stats.out;
}

TEST(QemuPidNamespaceKillTest, AProgramKilledWithItsNamespaceDoesNotKeepTheRecordingOpen) {
  PTKIT_SKIP_WITHOUT_PID_NAMESPACES();
  testing::TempDir dir;
  const std::string script = std::string(E2E_PROGRAM_DIR) + "/e2e_spin & sleep 0.5; exit 0";
  auto r = RunCommand({"/usr/bin/timeout", "60", PTRECORD_PATH, "--emulate=qemu", "-o",
                       dir.File("kill.pt"), "--", "/usr/bin/unshare", "--fork", "--pid", "/bin/sh",
                       "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("waiting for a process"))) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("namespace's pids"))) << r.err;
  auto d = RunCommand({PTDECODE_PATH, "info", dir.File("kill.pt")});
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_THAT(d.out, HasSubstr("closed cleanly")) << d.out;
}

// ptrecord itself in a pid namespace of its own, with the host's /proc: that /proc's pids are
// not ptrecord's, so it cannot tell those of the program (in a namespace below) and says so.
// (Not checked against the ground truth: the two namespaces' small pids may meet.)
TEST(QemuPidNamespaceUnknownTest, PidsThatCannotBeToldAreKeptAndSaidSo) {
  PTKIT_SKIP_WITHOUT_PID_NAMESPACES();
  testing::TempDir dir;
  auto r =
      RunCommand({"/usr/bin/unshare", "--fork", "--pid", PTRECORD_PATH, "--emulate=qemu", "-o",
                  dir.File("in.pt"), "--", "/usr/bin/unshare", "--fork", "--pid", kWork, "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // main (unshare's child, which exec'd it), its 2 threads and its child.
  EXPECT_THAT(r.err, HasSubstr("warning: 4 threads of a pid namespace other than ptrecord's keep "
                               "that namespace's pids"))
      << r.err;
  // The decoders say it too.
  auto d = RunCommand({PTDECODE_PATH, "info", dir.File("in.pt")});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_THAT(d.out + d.err, HasSubstr("keep that namespace's pids")) << d.out << d.err;
}

}  // namespace
}  // namespace ptkit::qemu_pidns_test
