// ptrecord attached to a running process (-p, -t): what the kernel path records of it, against
// perf 6.1 attached to the same process at the same time (sweep 37a). --sideband-only: the
// kernel path as with intel_pt (no Intel PT here; --emulate does not attach).
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "build_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "run_command.h"
#include "temp_dir.h"

// (Its own namespace: the e2e tests are compiled in unity batches, where ptkit::Sideband and
// ptkit::Mapping are declared too.)
namespace ptkit::attach_test {
namespace {

using ::ptkit::testing::CommandResult;
using ::ptkit::testing::HexBuildId;
using ::ptkit::testing::ReadelfBuildId;
using ::ptkit::testing::RunCommand;
using ::ptkit::testing::TempDir;
namespace fs = std::filesystem;

const std::string kProgram = std::string(E2E_PROGRAM_DIR) + "/e2e_attach";

bool HavePerf() { return RunCommand({"/usr/bin/env", "perf", "--version"}).exit_code == 0; }

// The target (tests/e2e/programs/attach.c) started in `dir`, and its pid once both its threads
// run; 0 if it did not get there in 20 s.
class Target {
 public:
  explicit Target(const TempDir& dir) : dir_(dir) {
    run_ = std::async(std::launch::async, [this] { return RunCommand({kProgram, dir_.path()}); });
    for (int i = 0; i < 2000 && pid_ == 0; ++i) {
      std::ifstream(dir_.File("ready")) >> pid_;
      if (pid_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Target() {
    Stop("stop-early");
    Stop("stop");
    if (run_.valid()) run_.wait();
  }
  pid_t pid() const { return pid_; }
  // The target's thread ids, sorted (main, the spinning thread, the early one).
  std::vector<pid_t> Threads() const {
    std::vector<pid_t> out;
    for (const auto& e :
         fs::directory_iterator(fs::path("/proc") / std::to_string(pid_) / "task")) {
      out.push_back(std::stoi(e.path().filename().string()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void Stop(const std::string& what) const { std::ofstream(dir_.File(what)) << "\n"; }
  CommandResult Wait() { return run_.get(); }

 private:
  const TempDir& dir_;
  std::future<CommandResult> run_;
  pid_t pid_ = 0;
};

// A command run in the background.
std::future<CommandResult> Start(const std::vector<std::string>& argv) {
  return std::async(std::launch::async, [argv] { return RunCommand(argv); });
}

// Waits until `path` exists and is not empty. perf's output is there once it has attached.
// ptrecord's is made before it opens its events, so the tests give it an empty file to
// replace (--overwrite-existing): the recording takes the path once the events are on.
bool AppearsWithin(const std::string& path, int ms) {
  std::error_code ec;
  for (int i = 0; i < ms / 10; ++i) {
    if (fs::file_size(path, ec) > 0 && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// ptrecord --sideband-only attached with `target` ("-p PID"), writing `out` (see AppearsWithin).
std::future<CommandResult> StartPtrecord(const std::string& out,
                                         const std::vector<std::string>& target,
                                         const std::vector<std::string>& more = {}) {
  std::ofstream(out).close();  // the empty file the recording replaces
  std::vector<std::string> argv = {
      PTRECORD_PATH, "--sideband-only", "-q", "--overwrite-existing", "-o", out};
  argv.insert(argv.end(), more.begin(), more.end());
  argv.insert(argv.end(), target.begin(), target.end());
  return Start(argv);
}

// A mapping as perf script prints it: address, length, file offset, path. (Ours carry the
// file's build-id where perf's have device and inode: checked against readelf below.)
using Mapping = std::tuple<uint64_t, uint64_t, uint64_t, std::string>;
// (pid, tid, name) of a COMM record.
using Comm = std::tuple<uint32_t, uint32_t, std::string>;

struct Sideband {
  std::set<Mapping> mmaps;                       // of the attached process
  std::map<std::string, std::string> build_ids;  // path -> build-id (hex), where the MMAP2 has one
  std::set<Comm> comms;
  std::set<std::pair<uint32_t, uint32_t>> exits;  // (pid, tid)
};

// The MMAP2, COMM and EXIT records of `pid` in a trace.pt.
Sideband ReadTracePt(const std::string& path, uint32_t pid) {
  Sideband out;
  auto reader = ContainerReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  RecordView rec;
  const perf::SampleIdLayout none{0, false};
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kSideband) continue;
    auto sb = ParseSideband(rec.payload);
    if (!sb.ok()) continue;
    for (perf::RecordReader r(sb->records);;) {
      auto next = r.Next();
      if (!next.ok() || !*next) break;
      const perf::RecordView& v = **next;
      if (v.type == PERF_RECORD_MMAP2) {
        auto m = perf::ParseMmap2(v, none);
        if (!m.ok() || m->pid != pid) continue;
        out.mmaps.emplace(m->addr, m->len, m->pgoff, std::string(m->filename));
        if (!m->build_id.empty()) out.build_ids[std::string(m->filename)] = HexBuildId(m->build_id);
      } else if (v.type == PERF_RECORD_COMM) {
        auto c = perf::ParseComm(v, none);
        if (c.ok() && c->pid == pid) out.comms.emplace(c->pid, c->tid, std::string(c->comm));
      } else if (v.type == PERF_RECORD_EXIT) {
        auto t = perf::ParseTask(v, none);
        if (t.ok() && t->pid == pid) out.exits.emplace(t->pid, t->tid);
      }
    }
  }
  return out;
}

// The same of a perf.data, from `perf script --show-mmap-events --show-task-events`:
//   ... PERF_RECORD_MMAP2 4950/4950: [0x7f61306de000(0x156000) @ 0x26000 fe:00 332835 0]: r-xp
//   /usr/lib/...
//   ... PERF_RECORD_COMM: bash:4950/4950
Sideband ReadPerfData(const std::string& path, uint32_t pid) {
  Sideband out;
  CommandResult script = RunCommand(
      {"/usr/bin/env", "perf", "script", "-i", path, "--show-mmap-events", "--show-task-events"});
  EXPECT_EQ(script.exit_code, 0) << script.err;
  static const std::regex kMmap(
      R"(PERF_RECORD_MMAP2 (\d+)/\d+: \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|0) )"
      R"([0-9a-f]+:[0-9a-f]+ \d+ \d+\]: \S+ (.*)$)");
  static const std::regex kComm(R"(PERF_RECORD_COMM: (.*):(\d+)/(\d+)$)");
  std::istringstream lines(script.out);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, m, kMmap)) {
      if (std::stoul(m[1]) != pid || m[5] == "[vsyscall]") continue;
      out.mmaps.emplace(std::stoull(m[2], nullptr, 16), std::stoull(m[3], nullptr, 16),
                        std::stoull(m[4], nullptr, 16), m[5]);
    } else if (std::regex_search(line, m, kComm) && std::stoul(m[2]) == pid) {
      out.comms.emplace(std::stoul(m[2]), std::stoul(m[3]), m[1]);
    }
  }
  return out;
}

// Attached to a process that already runs, ptrecord records what it had mapped and its
// threads' names, as perf does (from /proc): before, only what the process mapped after the
// attach was in the recording, so its program, libc, ld.so and vdso had no image (sweep 37a
// F1). perf record -e dummy -p, attached at the same time, is the oracle.
TEST(AttachTest, WhatTheProcessHadMappedIsRecordedAsPerfRecordsIt) {
  if (!HavePerf()) GTEST_SKIP() << "perf (linux-perf) is not installed";
  TempDir dir;
  Target target(dir);
  ASSERT_NE(target.pid(), 0) << "the target did not start";
  const std::string pid = std::to_string(target.pid());
  auto perf = Start({"/usr/bin/env", "perf", "record", "-q", "-e", "dummy", "-p", pid, "-o",
                     dir.File("perf.data")});
  auto ptrecord = StartPtrecord(dir.File("a.pt"), {"-p", pid});
  ASSERT_TRUE(AppearsWithin(dir.File("a.pt"), 20000));
  ASSERT_TRUE(AppearsWithin(dir.File("perf.data"), 20000));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // perf has synthesized
  const std::vector<pid_t> threads = target.Threads();
  target.Stop("stop-early");
  target.Stop("stop");
  EXPECT_EQ(target.Wait().exit_code, 0);
  const CommandResult recorded = ptrecord.get();
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  const CommandResult perfed = perf.get();
  ASSERT_EQ(perfed.exit_code, 0) << perfed.err;

  const Sideband ours = ReadTracePt(dir.File("a.pt"), target.pid());
  const Sideband theirs = ReadPerfData(dir.File("perf.data"), target.pid());
  // The program, libc, ld.so and the vdso (e2e_attach is dynamic), as perf has them.
  ASSERT_GE(theirs.mmaps.size(), 4u);
  EXPECT_EQ(ours.mmaps, theirs.mmaps);
  bool program = false;
  for (const Mapping& m : ours.mmaps) program |= std::get<3>(m) == fs::canonical(kProgram);
  EXPECT_TRUE(program);
  // Each file's build-id, as readelf reads it from the file (read through the process's
  // /proc/PID/map_files: the file it mapped, in whatever mount namespace it runs).
  EXPECT_EQ(ours.build_ids.size(), 3u);  // the program, libc, ld.so
  for (const auto& [path, id] : ours.build_ids) EXPECT_EQ(id, ReadelfBuildId(path)) << path;
  // A COMM of each thread, named as perf names it.
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_EQ(ours.comms, theirs.comms);
  EXPECT_EQ(ours.comms.size(), 3u);
  // Every thread's exit, after the attach.
  EXPECT_EQ(ours.exits.size(), 3u);
}

// -p given a thread id other than the process's records the process until it ends, as perf
// does: before, ptrecord stopped when that thread exited, and the rest of the process ran
// untraced, without a word (sweep 37a F4).
TEST(AttachTest, AnyThreadsIdAttachesToTheProcessUntilItEnds) {
  TempDir dir;
  Target target(dir);
  ASSERT_NE(target.pid(), 0) << "the target did not start";
  const std::vector<pid_t> threads = target.Threads();
  ASSERT_EQ(threads.size(), 3u);
  const pid_t early = threads.back();
  auto ptrecord = StartPtrecord(dir.File("a.pt"), {"-p", std::to_string(early)});
  ASSERT_TRUE(AppearsWithin(dir.File("a.pt"), 20000));
  target.Stop("stop-early");
  // The early thread is gone; ptrecord goes on while the process runs.
  for (int i = 0; i < 500 && fs::exists(fs::path("/proc") / std::to_string(early)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ptrecord.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  target.Stop("stop");
  EXPECT_EQ(target.Wait().exit_code, 0);
  const CommandResult recorded = ptrecord.get();
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  const Sideband ours = ReadTracePt(dir.File("a.pt"), target.pid());
  const std::set<std::pair<uint32_t, uint32_t>> all = {
      {target.pid(), threads[0]}, {target.pid(), threads[1]}, {target.pid(), threads[2]}};
  EXPECT_EQ(ours.exits, all);
}

// -e with -p counts every thread of the process, summed, as perf stat -p does; before, only
// the lowest tid was counted: 0.033 ms of task-clock where perf stat gave 779 ms, for a
// process whose two threads spin (sweep 37a F2). perf stat -p at the same time is the oracle.
TEST(AttachTest, CountersCountEveryThreadOfTheProcess) {
  if (!HavePerf()) GTEST_SKIP() << "perf (linux-perf) is not installed";
  TempDir dir;
  Target target(dir);
  ASSERT_NE(target.pid(), 0) << "the target did not start";
  const std::string pid = std::to_string(target.pid());
  auto stat = Start({"/usr/bin/env", "perf", "stat", "-x", ",", "-e", "task-clock", "-p", pid, "-o",
                     dir.File("stat.txt")});
  auto ptrecord = StartPtrecord(dir.File("a.pt"), {"-p", pid}, {"-e", "task-clock"});
  ASSERT_TRUE(AppearsWithin(dir.File("a.pt"), 20000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // two threads spin
  target.Stop("stop-early");
  target.Stop("stop");
  EXPECT_EQ(target.Wait().exit_code, 0);
  const CommandResult recorded = ptrecord.get();
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  ASSERT_EQ(stat.get().exit_code, 0);
  // perf stat -x ,: "779.00,msec,task-clock,..."
  double perf_ms = 0;
  std::ifstream lines(dir.File("stat.txt"));
  for (std::string line; std::getline(lines, line);) {
    if (line.find(",task-clock") != std::string::npos) perf_ms = std::stod(line);
  }
  ASSERT_GT(perf_ms, 100) << "the target's threads did not spin";
  double ours_ns = -1;
  auto reader = ContainerReader::Open(dir.File("a.pt"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  RecordView rec;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kCounters) continue;
    auto values = ParseCounters(rec.payload);
    ASSERT_TRUE(values.ok()) << values.status();
    ASSERT_EQ(values->size(), 1u);  // one value: the threads' summed
    EXPECT_EQ((*values)[0].name, "task-clock");
    ours_ns = static_cast<double>((*values)[0].value);
  }
  // Both attached for about the same time (either may be the later one on a loaded machine)
  // and stopped together.
  EXPECT_GT(ours_ns / 1e6, perf_ms * 0.5) << "perf stat -p: " << perf_ms << " ms";
  EXPECT_LT(ours_ns / 1e6, perf_ms * 3) << "perf stat -p: " << perf_ms << " ms";
}

// The kernel path asks for build-ids in MMAP2 records (perf record --buildid-mmap): a program
// run at a path that is another file in its mount namespace (a bind mount, a container's own
// /usr/bin/...) is identified as the file that ran. Before, ptrecord read the path in its own
// namespace and stored that file's build-id, so every decode used the wrong program's code and
// names, silently (sweep 37c H2). The oracle: readelf's build-id of the file that ran.
TEST(KernelPathTest, AProgramOfAnotherMountNamespaceIsIdentifiedAsTheFileThatRan) {
  if (RunCommand({"/usr/bin/unshare", "--mount", "/bin/true"}).exit_code != 0) {
    GTEST_SKIP() << "unshare --mount not available here (needs root)";
  }
  TempDir dir;
  const std::string path = dir.Copy(kProgram, "prog");  // what the path names out here
  // What runs there in the namespace, for a second: its files are read through its root while
  // it runs (a process gone before ptrecord drains its MMAP2 leaves the warning).
  const std::string ran = fs::canonical("/bin/sleep");
  const std::string want = ReadelfBuildId(ran), other = ReadelfBuildId(path);
  if (want.empty() || other.empty()) GTEST_SKIP() << "readelf (binutils) gives no build-id";
  ASSERT_NE(want, other);
  const std::string trace = dir.File("ns.pt");
  // With --archive, the file that ran is stored (read through the process's root while it
  // ran: sweep 37c M2, it was not archived, "changed while the command ran").
  auto r = RunCommand({PTRECORD_PATH, "--sideband-only", "--archive", "-q", "-o", trace, "--",
                       "/usr/bin/unshare", "--mount", "/bin/sh", "-c",
                       "mount --bind " + ran + " " + path + " && " + path + " 1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // No word about it (not archived, changed while the command ran) but that it is stripped.
  std::istringstream err_lines(r.err);
  for (std::string line; std::getline(err_lines, line);) {
    if (line.find("stripped (no .symtab)") != std::string::npos) continue;
    EXPECT_THAT(line, ::testing::Not(::testing::HasSubstr(path)));
  }
  auto reader = ContainerReader::Open(trace);
  ASSERT_TRUE(reader.ok()) << reader.status();
  RecordView rec;
  std::string stored, archived;
  uint64_t archived_bytes = 0;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kCode) continue;
    auto code = ParseCode(rec.payload);
    if (!code.ok() || code->path != path) continue;
    const std::string id = HexBuildId(code->build_id);
    if (code->flags & kCodeIdentity) stored = id;
    if (code->flags & kCodeArchivedFile) {
      archived = id;
      archived_bytes = code->bytes.size();
    }
  }
  EXPECT_EQ(stored, want) << "the file out here has " << other;
  EXPECT_EQ(archived, want);
  EXPECT_EQ(archived_bytes, fs::file_size(ran));
}

}  // namespace
}  // namespace ptkit::attach_test
