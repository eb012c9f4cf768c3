// The ptrecord binary: exit codes, the one-line errors, and sideband-only recordings of real
// processes read back from the container.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kPtrecord = std::string(PTKIT_BINARY_DIR) + "/src/tools/ptrecord";
const std::string kFixture = std::string(PTKIT_SOURCE_DIR) + "/tests/data/sysfs";

struct CliRun {
  int code = -1;
  std::string err;
};

// Runs ptrecord with `args` (shell words) in `dir`; stderr captured.
CliRun Ptrecord(const std::string& dir, const std::string& args) {
  const std::string err_file = dir + "/stderr.txt";
  const std::string cmd =
      "cd '" + dir + "' && '" + kPtrecord + "' " + args + " 2>'" + err_file + "' >/dev/null";
  const int st = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

bool PerfAllowed() {
  std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
  int v = 2;
  in >> v;
  return geteuid() == 0 || v <= 1;
}

TEST(PtrecordCliTest, NoIntelPtIsOneClearLineAndExit1) {
  if (std::filesystem::exists("/sys/bus/event_source/devices/intel_pt")) {
    GTEST_SKIP() << "this machine has intel_pt";
  }
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(), "-- /bin/true");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("ptrecord: no intel_pt PMU here "
                                "(/sys/bus/event_source/devices/intel_pt does not exist)"));
  EXPECT_THAT(r.err, HasSubstr("--sideband-only"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("trace.pt")));
}

TEST(PtrecordCliTest, UsageErrorsExit2WithOneLine) {
  ::ptkit::testing::TempDir dir;
  for (const char* args :
       {"--bogus", "-m 3 -- /bin/true", "", "-a -- /bin/true", "-u -k -- /bin/true",
        "--snapshot=12Q -- /bin/true", "--snapshot=0 -- /bin/true",
        "-m 64,16 --snapshot=65K -- /bin/true", "--emulate=step --snapshot=1M -- /bin/true",
        "--bts --event intel_pt// -- /bin/true", "--sideband-only -e no-such-counter -- /bin/true",
        "-C 9999 -a --sideband-only",
        // A forgotten value: "--" is no file name; no limit below 1 step; a directory.
        "-o -- /bin/true", "--emulate --ground-truth -- /bin/true",
        "--emulate --max-steps -5 -- /bin/true", "--emulate --max-steps 0 -- /bin/true",
        "-o . --emulate -- /bin/true"}) {
    const CliRun r = Ptrecord(dir.path(), args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("ptrecord: ")) << args;
  }
  const CliRun caps = Ptrecord(
      dir.path(), "--sysfs-root " + kFixture + " --event 'intel_pt/psb_period=9/' -- /bin/true");
  EXPECT_EQ(caps.code, 2);
  EXPECT_THAT(caps.err, HasSubstr("invalid psb_period=9 for intel_pt; valid values are: 0, 1, 2, "
                                  "3, 4, 5"));
  const CliRun term =
      Ptrecord(dir.path(), "--sysfs-root " + kFixture + " --event 'intel_pt/cycles/' -- /bin/true");
  EXPECT_EQ(term.code, 2);
  EXPECT_THAT(term.err, HasSubstr("valid terms: branch, cyc,"));
  // A filter naming a symbol the file does not have (checked before the PMU is looked up).
  const CliRun filter =
      Ptrecord(dir.path(), "--filter 'filter no_such_symbol @ " + kPtrecord + "' -- /bin/true");
  EXPECT_EQ(filter.code, 2) << filter.err;
  EXPECT_EQ(Lines(filter.err), 1) << filter.err;
  EXPECT_THAT(filter.err, HasSubstr("no symbol 'no_such_symbol'"));
}

// A negative or 0 id is a mistake, not "no -p" (it used to record nothing, or the system).
TEST(PtrecordCliTest, ABadPidOrTidIsAUsageError) {
  ::ptkit::testing::TempDir dir;
  for (const char* args : {"-p -1", "-p 0", "--pid=-7", "-p 12x", "-p 4294967297"}) {
    const CliRun r = Ptrecord(dir.path(), std::string("--sideband-only ") + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("ptrecord: -p: expected a process id (a number of 1 or more)"))
        << args;
  }
  const CliRun t = Ptrecord(dir.path(), "--sideband-only -t -5");
  EXPECT_EQ(t.code, 2) << t.err;
  EXPECT_EQ(t.err, "ptrecord: -t: expected a thread id (a number of 1 or more), not '-5'\n");
}

TEST(PtrecordCliTest, UsageErrorsSayWhatToDo) {
  ::ptkit::testing::TempDir dir;
  EXPECT_THAT(Ptrecord(dir.path(), "-o -- /bin/true").err,
              HasSubstr("-o needs a file name, not '--'"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("--")));
  EXPECT_THAT(Ptrecord(dir.path(), "--emulate --max-steps -5 -- /bin/true").err,
              HasSubstr("--max-steps -5: expected a number of steps >= 1"));
  EXPECT_THAT(Ptrecord(dir.path(), "-o . -- /bin/true").err, HasSubstr("-o . is a directory"));
  // An option with an optional value given the command without -- (sweep 37a L4).
  for (const char* option : {"--snapshot", "--aux-sample"}) {
    const CliRun swallowed = Ptrecord(dir.path(), std::string(option) + " /bin/true");
    EXPECT_EQ(swallowed.code, 2) << swallowed.err;
    EXPECT_THAT(swallowed.err, HasSubstr("=SIZE, and the command goes after --")) << option;
  }
  // An output that exists: the option that replaces it is named.
  std::ofstream(dir.File("old.pt")) << "x";
  const CliRun exists = Ptrecord(dir.path(), "--emulate -o old.pt -- /bin/true");
  EXPECT_EQ(exists.code, 2) << exists.err;
  EXPECT_THAT(exists.err, HasSubstr("--overwrite-existing"));
  // A path stat cannot check is the file's error, not an abort (sweep 31c F9: SIGABRT, exit
  // 134, from an exception of std::filesystem::is_directory).
  std::filesystem::create_symlink("loop-b", dir.File("loop-a"));
  std::filesystem::create_symlink("loop-a", dir.File("loop-b"));
  const CliRun loop = Ptrecord(dir.path(), "--emulate -o loop-a -- /bin/true");
  EXPECT_EQ(loop.code, 2) << loop.err;
  EXPECT_THAT(loop.err, HasSubstr("loop-a already exists"));
  const CliRun long_name =
      Ptrecord(dir.path(), "--emulate -o " + std::string(300, 'x') + " -- /bin/true");
  EXPECT_EQ(long_name.code, 1) << long_name.err;
  EXPECT_THAT(long_name.err, HasSubstr("File name too long"));
}

// A container where the command writes (its standard output or error: -o /dev/stdout into a
// pipe, or -o t.pt with `> t.pt`) would hold the command's output too: refused before it runs
// (it used to write "hi" over the container's magic, exit 0).
TEST(PtrecordCliTest, AnOutputThatIsTheCommandsStandardOutputIsRefused) {
  ::ptkit::testing::TempDir dir;
  const std::string ptrecord = "'" + kPtrecord + "' --emulate -q ";
  // Each runs in `dir`, its status in code.txt, ptrecord's stderr in the file named second.
  for (const auto& [run, err_file] : std::vector<std::pair<std::string, std::string>>{
           {"--overwrite-existing -o t.pt -- /bin/echo hi >t.pt 2>err.txt", "err.txt"},
           {"-o t.pt -- /bin/echo hi 2>t.pt >/dev/null", "t.pt"},
           {"--overwrite-existing -o /dev/stdout -- /bin/echo hi 2>err.txt", "err.txt"}}) {
    std::filesystem::remove(dir.File("t.pt"));
    const std::string cmd = absl::StrCat("cd '", dir.path(), "' && { ", ptrecord, run,
                                         "; echo $? >code.txt; } | cat >piped.txt");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::stringstream code, err;
    code << std::ifstream(dir.File("code.txt")).rdbuf();
    err << std::ifstream(dir.File(err_file)).rdbuf();
    EXPECT_EQ(code.str(), "2\n") << run << ": " << err.str();
    EXPECT_THAT(err.str(), HasSubstr("is the command's standard ")) << run;
    EXPECT_THAT(err.str(), ::testing::Not(HasSubstr("hi"))) << run;
  }
  // /dev/null takes both.
  EXPECT_EQ(
      Ptrecord(dir.path(), "--emulate -q --overwrite-existing -o /dev/null -- /bin/true").code, 0);
}

// An output that takes no more (ulimit -f; a pipe whose reader went away) is a write error that
// ptrecord says, exit 1, not a silent death by SIGXFSZ or SIGPIPE (sweep 31c F4, F5: exit 153
// and 141, nothing said, the command left running). The command still starts with neither
// ignored nor caught (ptrecord's handlers go at exec).
TEST(PtrecordCliTest, AnOutputThatTakesNoMoreIsSaidNotASilentDeath) {
  ::ptkit::testing::TempDir dir;
  const std::string ptrecord = "'" + kPtrecord + "' --emulate=step -q ";
  auto run = [&](const std::string& script) {
    const std::string cmd = absl::StrCat("cd '", dir.path(), "' && bash -c '", script, "'");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::stringstream code, err;
    code << std::ifstream(dir.File("code.txt")).rdbuf();
    err << std::ifstream(dir.File("err.txt")).rdbuf();
    return std::pair{code.str(), err.str()};
  };
  // 16 KiB: a step recording of /bin/true is about 230 KB.
  auto [code, err] =
      run("ulimit -f 16; " + ptrecord + "-o big.pt -- /bin/true 2>err.txt; echo $? >code.txt");
  EXPECT_EQ(code, "1\n") << err;
  EXPECT_THAT(err, HasSubstr("big.pt: File too large")) << err;
  std::tie(code, err) = run(ptrecord +
                            "-o /dev/fd/3 -- /bin/true 3>&1 >/dev/null 2>err.txt | head -c 100 "
                            ">/dev/null; echo ${PIPESTATUS[0]} >code.txt");
  EXPECT_EQ(code, "1\n") << err;
  EXPECT_THAT(err, HasSubstr("/dev/fd/3: Broken pipe")) << err;
  // SigIgn and SigCgt of the command: bits 13 (SIGPIPE) and 25 (SIGXFSZ) clear.
  std::tie(code, err) =
      run("'" + kPtrecord +
          "' --sideband-only -q -o sig.pt -- /bin/grep -E \"^Sig(Ign|Cgt)\" /proc/self/status "
          ">code.txt 2>err.txt");
  for (const std::string& line :
       {code.substr(0, code.find('\n')), code.substr(code.find('\n') + 1)}) {
    ASSERT_GT(line.size(), 8u) << code << err;
    const uint64_t mask = std::stoull(line.substr(8), nullptr, 16);
    EXPECT_EQ(mask & ((uint64_t{1} << (SIGPIPE - 1)) | (uint64_t{1} << (SIGXFSZ - 1))), 0u) << line;
  }
}

// A low open-file limit: the qemu backend records under ulimit -n 16 (its 64 rings have no
// descriptor to poll; sweep 31c F8: ppoll failed with EINVAL below 64), and a limit too low for
// anything says which limit it is.
TEST(PtrecordCliTest, ALowOpenFileLimitIsSaidOrDoesNotMatter) {
  ::ptkit::testing::TempDir dir;
  auto run = [&](int limit) {
    // (The limit in a subshell, set after its redirections: bash needs descriptors for them.)
    const std::string cmd = absl::StrCat("cd '", dir.path(), "' && bash -c '(ulimit -n ", limit,
                                         "; exec \"", kPtrecord, "\" --emulate -q -o fd", limit,
                                         ".pt -- /bin/true) 2>err.txt; echo $? >code.txt'");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::stringstream code, err;
    code << std::ifstream(dir.File("code.txt")).rdbuf();
    err << std::ifstream(dir.File("err.txt")).rdbuf();
    return std::pair{code.str(), err.str()};
  };
  auto [code, err] = run(16);
  EXPECT_EQ(code, "0\n") << err;
  std::tie(code, err) = run(5);
  EXPECT_EQ(code, "1\n") << err;
  EXPECT_THAT(err,
              HasSubstr("Too many open files (the open-file limit, ulimit -n, is 5; raise it)"));
}

// A ground truth that cannot be created fails before the workload runs and leaves no stub
// container that would refuse the next run.
TEST(PtrecordCliTest, AFailedEmulationSetupLeavesNoFile) {
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(), "--emulate --ground-truth /nonexistent/x -- /bin/true");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/x"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("trace.pt")));
}

TEST(PtrecordCliTest, VersionHasTheFormOfPtdecodes) {
  const std::string out = ::testing::TempDir() + "/ptrecord_version.txt";
  ASSERT_EQ(std::system(("'" + kPtrecord + "' --version >'" + out + "'").c_str()), 0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "ptrecord " PTKIT_VERSION);
}

// --help names every option --emulate refuses, and each is refused.
TEST(PtrecordCliTest, HelpNamesWhatEmulateRefuses) {
  ::ptkit::testing::TempDir dir;
  const std::string out = dir.File("help.txt");
  ASSERT_EQ(std::system(("'" + kPtrecord + "' --help >'" + out + "'").c_str()), 0);
  std::ifstream in(out);
  std::stringstream help;
  help << in.rdbuf();
  const size_t refuses = help.str().find("Refuses ");
  ASSERT_NE(refuses, std::string::npos) << help.str();
  const std::string list = help.str().substr(refuses);
  for (const char* option :
       {"--pid 1", "--tid 1", "--all-cpus", "--cpu 0", "--per-thread", "--kernel",
        "--aux-watermark 4K", "--counters task-clock", "--sideband-only", "--sysfs-root /x",
        "--sample-event cycles --aux-sample", "--control fifo:x"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find(' '));
    EXPECT_THAT(list, HasSubstr(name));
    const CliRun r = Ptrecord(dir.path(), std::string("--emulate ") + option + " -- /bin/true");
    EXPECT_EQ(r.code, 2) << option << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(name + " does not apply to --emulate")) << option;
  }
}

TEST(PtrecordCliTest, ProgramNotFoundExits127) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(), "--sideband-only -- no-such-program-ptkit");
  EXPECT_EQ(r.code, 127) << r.err;
  EXPECT_EQ(r.err, "ptrecord: program not found: no-such-program-ptkit\n");
  EXPECT_FALSE(std::filesystem::exists(dir.File("trace.pt")));
}

struct CliRecording {
  std::map<std::string, uint64_t> counters;
  std::vector<std::string> mmaps;
  std::vector<std::string> exec_comms;
  int exits = 0;
  int code_identities = 0, vdso_records = 0;
  uint64_t archived_bytes = 0;
  bool metadata = false;
  bool clean = false;
};

CliRecording ReadRecording(const std::string& path) {
  CliRecording out;
  absl::StatusOr<ContainerReader> reader = ContainerReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  const perf::SampleIdLayout layout{
      PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};
  RecordView rv;
  while (*reader->Next(rv)) {
    if (rv.type == RecordType::kMetadata) out.metadata = true;
    if (rv.type == RecordType::kCode) {
      absl::StatusOr<CodeRecord> c = ParseCode(rv.payload);
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok() && c->flags == 0) {
        out.archived_bytes += c->bytes.size();
      } else if (c.ok()) {
        (c->flags & kCodeVdso ? out.vdso_records : out.code_identities) += 1;
      }
    }
    if (rv.type == RecordType::kCounters) {
      absl::StatusOr<std::vector<CounterValue>> values = ParseCounters(rv.payload);
      EXPECT_TRUE(values.ok()) << values.status();
      if (values.ok()) {
        for (const CounterValue& v : *values) out.counters[v.name] = v.value;
      }
    }
    if (rv.type != RecordType::kSideband) continue;
    absl::StatusOr<SidebandRecord> sb = ParseSideband(rv.payload);
    perf::RecordReader rr(sb->records);
    while (true) {
      absl::StatusOr<std::optional<perf::RecordView>> rec = rr.Next();
      EXPECT_TRUE(rec.ok());
      if (!rec.ok() || !*rec) break;
      if ((*rec)->type == PERF_RECORD_MMAP2) {
        out.mmaps.emplace_back(perf::ParseMmap2(**rec, layout)->filename);
      } else if ((*rec)->type == PERF_RECORD_COMM) {
        absl::StatusOr<perf::Comm> c = perf::ParseComm(**rec, layout);
        if (c->exec) out.exec_comms.emplace_back(c->comm);
      } else if ((*rec)->type == PERF_RECORD_EXIT) {
        ++out.exits;
      }
    }
  }
  out.clean = reader->report().clean();
  return out;
}

TEST(PtrecordCliTest, SidebandOnlyWorkloadWithCountersKeepsExitStatus) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(),
                            "--sideband-only -e task-clock,page-faults,context-switches,cycles "
                            "-o side.pt -- /bin/sh -c 'exit 3'");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: counter cycles is not supported on this machine"))
      << "(only on machines without a hardware PMU)";
  EXPECT_THAT(r.err, HasSubstr("ptrecord: wrote side.pt"));
  CliRecording rec = ReadRecording(dir.File("side.pt"));
  EXPECT_TRUE(rec.clean);
  EXPECT_TRUE(rec.metadata);
  EXPECT_GT(rec.counters["task-clock"], 0u);
  EXPECT_GT(rec.counters["page-faults"], 10u);
  EXPECT_THAT(rec.exec_comms, ::testing::Contains("sh"));
  EXPECT_THAT(rec.mmaps, ::testing::Contains(::testing::HasSubstr("libc.so")));
  EXPECT_GE(rec.exits, 1);
  EXPECT_GE(rec.code_identities, 3);  // sh, ld-linux, libc
  EXPECT_GE(rec.vdso_records, 1);
}

TEST(PtrecordCliTest, ArchiveStoresExecutableRanges) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(), "--sideband-only --archive -q -- /bin/true");
  EXPECT_EQ(r.code, 0) << r.err;
  const CliRecording rec = ReadRecording(dir.File("trace.pt"));
  EXPECT_TRUE(rec.clean);
  // The text segments of true, ld-linux and libc: well over 100 KiB together.
  EXPECT_GT(rec.archived_bytes, 100u << 10);
}

TEST(PtrecordCliTest, PerThreadRing) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const CliRun r = Ptrecord(dir.path(), "--sideband-only --per-thread -q -- /bin/sh -c 'exit 5'");
  EXPECT_EQ(r.code, 5) << r.err;
  const CliRecording rec = ReadRecording(dir.File("trace.pt"));
  EXPECT_TRUE(rec.clean);
  EXPECT_THAT(rec.exec_comms, ::testing::Contains("sh"));
  EXPECT_THAT(rec.mmaps, ::testing::Contains(::testing::HasSubstr("libc.so")));
}

TEST(PtrecordCliTest, AttachToOneThreadWithT) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", "sleep 0.4; exec /bin/true", nullptr);
    _exit(127);
  }
  const CliRun r = Ptrecord(dir.path(), "--sideband-only -q -t " + std::to_string(child));
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(r.code, 0) << r.err;
  const CliRecording rec = ReadRecording(dir.File("trace.pt"));
  EXPECT_THAT(rec.exec_comms, ::testing::Contains("true"));
}

TEST(PtrecordCliTest, AttachToRunningProcessWithP) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  // A process that waits, then execs: the exec happens while ptrecord is attached.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", "sleep 0.5; exec /bin/true", nullptr);
    _exit(127);
  }
  const CliRun r = Ptrecord(dir.path(), "--sideband-only -q -p " + std::to_string(child));
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const CliRecording rec = ReadRecording(dir.File("trace.pt"));
  EXPECT_TRUE(rec.clean);
  EXPECT_THAT(rec.exec_comms, ::testing::Contains("true"));
  EXPECT_THAT(rec.mmaps, ::testing::Contains(::testing::HasSubstr("bin/true")));
}

TEST(PtrecordCliTest, SystemWideStopsOnSigint) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const pid_t rec = fork();
  ASSERT_GE(rec, 0);
  if (rec == 0) {
    if (chdir(dir.path().c_str()) != 0) _exit(99);
    execl(kPtrecord.c_str(), "ptrecord", "--sideband-only", "-q", "-a", "-C", "0", nullptr);
    _exit(127);
  }
  usleep(300000);
  // Something to see on any CPU.
  ASSERT_EQ(std::system("/bin/true"), 0);
  usleep(200000);
  kill(rec, SIGINT);
  int st = 0;
  waitpid(rec, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  const CliRecording r = ReadRecording(dir.File("trace.pt"));
  EXPECT_TRUE(r.clean);
  EXPECT_TRUE(r.metadata);
}

// Ctrl-C while the command runs: the command gets SIGTERM (as perf sends it), the recording is
// closed, and ptrecord exits 130 as a shell shows perf's own exit (not 143, the command's death
// by that SIGTERM); SIGTERM gives 143.
TEST(PtrecordCliTest, AStopSignalWhileTheCommandRunsIs128PlusThatSignal) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  for (int sig : {SIGINT, SIGTERM}) {
    ::ptkit::testing::TempDir dir;
    const pid_t rec = fork();
    ASSERT_GE(rec, 0);
    if (rec == 0) {
      if (chdir(dir.path().c_str()) != 0) _exit(99);
      execl(kPtrecord.c_str(), "ptrecord", "--sideband-only", "-q", "--", "/bin/sleep", "30",
            nullptr);
      _exit(127);
    }
    usleep(300000);
    kill(rec, sig);
    int st = 0;
    waitpid(rec, &st, 0);
    ASSERT_TRUE(WIFEXITED(st)) << sig;
    EXPECT_EQ(WEXITSTATUS(st), 128 + sig);
    const CliRecording r = ReadRecording(dir.File("trace.pt"));
    EXPECT_TRUE(r.clean) << sig;
    EXPECT_THAT(r.exec_comms, ::testing::Contains("sleep")) << sig;
  }
}

}  // namespace
}  // namespace ptkit

namespace ptkit {
namespace {

// --aux-sample on the kernel path: its limits are checked before anything is opened (against
// the sysfs fixture: no Intel PT is needed to be refused).
TEST(PtrecordCliTest, AuxSampleLimitsAreUsageErrors) {
  ::ptkit::testing::TempDir dir;
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--aux-sample=8192 -m 64,1", "larger than the AUX area (4096 bytes)"},
           {"--aux-sample=100K", "a multiple of 8 from 8 to 61440 bytes"},
           {"--aux-sample --bts", "--aux-sample needs intel_pt"},
           {"--aux-sample --snapshot", "full-trace mode"},
           {"-c 100", "need --aux-sample"},
       }) {
    const CliRun r =
        Ptrecord(dir.path(), absl::StrCat("--sysfs-root ", kFixture, " ", args, " -- /bin/true"));
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(says)) << args;
  }
  EXPECT_THAT(Ptrecord(dir.path(), "--control fd:3 --sideband-only -- /bin/true").err,
              HasSubstr("expected fifo:CTL[,ACK]"));
  EXPECT_THAT(Ptrecord(dir.path(), "--control fifo:nofifo --sideband-only -- /bin/true").err,
              HasSubstr("--control: open control FIFO nofifo"));
}

// Reads a line from `fd` within `ms`; "<timeout>" appended when it does not come.
std::string ReadLineWithin(int fd, int ms) {
  std::string line;
  char c;
  while (line.empty() || line.back() != '\n') {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1 || read(fd, &c, 1) != 1) return line + "<timeout>";
    line.push_back(c);
  }
  return line;
}

// A script drives a real recording through the FIFOs as it drives perf: ping is acked, stop
// ends the recording (the workload, a 30 s sleep, is ended too) with a complete container.
TEST(PtrecordCliTest, ControlFifoDrivesARecording) {
  if (!PerfAllowed()) GTEST_SKIP() << "perf_event_open not allowed for this user";
  ::ptkit::testing::TempDir dir;
  const std::string ctl = dir.File("ctl"), ack = dir.File("ack"), out = dir.File("t.pt");
  ASSERT_EQ(mkfifo(ctl.c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(ack.c_str(), 0600), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string control = "fifo:" + ctl + "," + ack;
    execl(kPtrecord.c_str(), "ptrecord", "-q", "--sideband-only", "--control", control.c_str(),
          "-o", out.c_str(), "--", "/bin/sleep", "30", static_cast<char*>(nullptr));
    _exit(126);
  }
  // ptrecord opens both FIFOs before it starts the workload; until then CTL has no reader.
  int w = -1;
  for (int i = 0; i < 1000 && w < 0; ++i) {
    w = open(ctl.c_str(), O_WRONLY | O_NONBLOCK);
    if (w < 0) usleep(10000);
  }
  ASSERT_GE(w, 0) << "ptrecord never opened the control FIFO";
  const int r = open(ack.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(r, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(write(w, "ping\n", 5), 5);
  EXPECT_EQ(ReadLineWithin(r, 10000), "ack\n");
  ASSERT_EQ(write(w, "stop\n", 5), 5);
  EXPECT_EQ(ReadLineWithin(r, 10000), "ack\n");
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(w);
  close(r);
  EXPECT_LT(seconds, 20) << "stop did not end the recording";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);  // the workload, ended by ptrecord
  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(out));
  RecordView rec;
  while (reader.Next(rec).value_or(false)) {
  }
  EXPECT_TRUE(reader.report().footer_present);
}

}  // namespace
}  // namespace ptkit
