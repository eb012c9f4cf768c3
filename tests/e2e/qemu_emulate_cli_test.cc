// SPDX-License-Identifier: Apache-2.0
//
// `ptrecord --emulate=qemu` end to end: the plugin's exact per-instruction ground truth
// (QEMU's instruction callbacks, independent of the block-level flow the PT is made from)
// against what `ptdecode insn` decodes, instruction by instruction, per thread; two runs give
// the same per-function counts; bad setups are one clear line. Skips where qemu-user is not
// installed.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "build_ids.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "read_file.h"
#include "run_command.h"
#include "scoped_tmpfs.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::FirstTruthTid;
using ::ptkit::testing::ObjdumpInstructions;
using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

// The instructions ptrecord's summary says the plugin counted ("..., N instructions in").
uint64_t CountedInstructions(const std::string& err) {
  const size_t end = err.find(" instructions in ");
  if (end == std::string::npos) return 0;
  const size_t begin = err.rfind(' ', end - 1) + 1;
  return std::stoull(err.substr(begin, end - begin));
}

struct Recorded {
  std::string trace, truth;
  testing::CommandResult run;
};

class QemuEmulateTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = std::make_unique<testing::TempDir>(); }

  Recorded Record(const std::string& name, const std::vector<std::string>& command,
                  bool with_truth = true, const std::vector<std::string>& options = {}) {
    Recorded r;
    r.trace = dir_->File(name + ".pt");
    r.truth = dir_->File(name + ".truth");
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=qemu", "-o", r.trace};
    argv.insert(argv.end(), options.begin(), options.end());
    if (with_truth) {
      argv.push_back("--ground-truth");
      argv.push_back(r.truth);
    }
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    r.run = RunCommand(argv);
    return r;
  }

  // Records `command` with the ground truth and checks every thread's decoded instructions
  // against it; returns the truth.
  PerThread ExpectDecodedEqualsTruth(const std::string& name,
                                     const std::vector<std::string>& command, int expected_exit = 0,
                                     std::string* err = nullptr,
                                     const std::vector<std::string>& options = {},
                                     std::string* insn = nullptr, std::string* out = nullptr) {
    Recorded rec = Record(name, command, /*with_truth=*/true, options);
    EXPECT_EQ(rec.run.exit_code, expected_exit) << rec.run.err;
    if (err != nullptr) *err = rec.run.err;
    if (out != nullptr) *out = rec.run.out;
    return ExpectTraceDecodesToTruth(name, rec.trace, rec.truth, insn);
  }

  // Checks every thread's decoded instructions of `trace` against the ground truth in `truth`;
  // returns the truth.
  PerThread ExpectTraceDecodesToTruth(const std::string& name, const std::string& trace,
                                      const std::string& truth_file, std::string* insn = nullptr,
                                      const std::vector<std::string>& decode_options = {}) {
    std::vector<std::string> argv = {PTDECODE_PATH, "insn", trace};
    argv.insert(argv.end(), decode_options.begin(), decode_options.end());
    auto d = RunCommand(argv);
    if (insn != nullptr) *insn = d.out;
    EXPECT_EQ(d.exit_code, 0) << d.err;
    // (Not printed whole on failure: it is long.)
    EXPECT_EQ(d.out.find("[gap"), std::string::npos) << d.err;
    PerThread truth = ReadTruth(truth_file);
    PerThread got = ParseInsn(d.out);
    EXPECT_FALSE(truth.empty());
    EXPECT_EQ(got.size(), truth.size());
    for (const auto& [tid, ips] : truth) {
      const std::vector<uint64_t>& decoded = got[tid];
      EXPECT_EQ(decoded.size(), ips.size()) << "thread " << tid;
      size_t i = 0;
      while (i < ips.size() && i < decoded.size() && ips[i] == decoded[i]) ++i;
      EXPECT_EQ(i, ips.size()) << name << " thread " << tid << ": first difference at "
                               << "instruction " << i << " of " << ips.size() << ": truth 0x"
                               << std::hex << (i < ips.size() ? ips[i] : 0) << ", decoded 0x"
                               << (i < decoded.size() ? decoded[i] : 0);
    }
    return truth;
  }

  // A file of the test's directory with `text`, mode 0755.
  std::string WriteExecutable(const std::string& name, const std::string& text) {
    std::string path = dir_->File(name);
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), 0755), 0);
    return path;
  }

  std::unique_ptr<testing::TempDir> dir_;
};

// ptrecord started with its standard streams closed (`cmd >&- 2>&-`: a daemon's or cron's
// context): the ring's memfd and the ground truth, which qemu inherits, are not the guest's
// stdout and stderr (sweep 38b F1: the guest's writes went into the ring's header, ptrecord died
// of SIGSEGV with the whole trace lost; or into the ground truth). The guest's writes fail as
// natively, and the recording decodes to the ground truth.
TEST_F(QemuEmulateTest, ClosedStandardStreamsAreNotTheRingNorTheTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string trace = dir_->File("closed.pt"), truth = dir_->File("closed.truth");
  const std::string script =
      "exec \"$0\" --emulate=qemu --ground-truth \"$1\" -o \"$2\" -- /bin/sh -c "
      "'i=0; while [ $i -lt 200 ]; do echo out; echo err >&2; i=$((i+1)); done' >&- 2>&-";
  auto r = RunCommand({"/bin/sh", "-c", script, PTRECORD_PATH, truth, trace});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ExpectTraceDecodesToTruth("closed", trace, truth);
}

// qemu-x86_64 starts but fails before the program's first block (here a truncated ELF, which
// the kernel would exec and kill): the recording is discarded as for a command that could not
// run, so --overwrite-existing keeps the old file whole and a new path gets no file (sweep 38b
// F3c: the old recording was replaced by a 1 KB stub with no footer; a stub at a new path made
// the next run refuse it as existing).
TEST_F(QemuEmulateTest, QemuFailingBeforeTheFirstBlockKeepsTheOldFile) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string kept = dir_->File("kept.pt"), fresh = dir_->File("fresh.pt");
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  ASSERT_EQ(RunCommand({PTRECORD_PATH, "--emulate=qemu", "-q", "-o", kept, "--", fib}).exit_code,
            0);
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = read(kept);
  ASSERT_FALSE(before.empty());
  const std::string cut = dir_->File("cut");
  std::ofstream(cut, std::ios::binary) << read(fib).substr(0, 3000);
  ASSERT_EQ(chmod(cut.c_str(), 0755), 0);
  auto over =
      RunCommand({PTRECORD_PATH, "--emulate=qemu", "--overwrite-existing", "-o", kept, "--", cut});
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_THAT(over.err, HasSubstr("ran no guest code"));
  EXPECT_TRUE(read(kept) == before) << "the old recording was replaced";
  auto created = RunCommand({PTRECORD_PATH, "--emulate=qemu", "-o", fresh, "--", cut});
  EXPECT_EQ(created.exit_code, 1) << created.err;
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

TEST_F(QemuEmulateTest, AStaticProgramDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  PerThread truth = ExpectDecodedEqualsTruth("fib", {::ptkit::testing::kFib});
  ASSERT_EQ(truth.size(), 1u);
  EXPECT_GT(truth.begin()->second.size(), 10000u);
}

// `--emulate` alone picks qemu where qemu-x86_64 and the plugin are there (step without
// qemu-x86_64 on PATH), and the metadata says what ran: the backend, QEMU's version as
// `qemu-x86_64 --version` prints it, the CPU model, the plugin, the clock of the TSC packets.
TEST_F(QemuEmulateTest, EmulateAlonePicksQemuAndTheMetadataSaysWhatRan) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string trace = dir_->File("default.pt");
  auto r = RunCommand({PTRECORD_PATH, "--emulate", "-o", trace, "--", ::ptkit::testing::kFib});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(emulated under qemu)"));
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", trace});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json meta = nlohmann::json::parse(info.out)["metadata"];
  EXPECT_EQ(meta["emulated"], "qemu");
  EXPECT_EQ(meta["emulation"]["backend"], "qemu");
  EXPECT_EQ(meta["emulation"]["qemu_cpu"], "max");
  EXPECT_EQ(meta["emulation"]["plugin"],
            (std::filesystem::path(PTRECORD_PATH).parent_path() / "libptkit_qemu.so").string());
  const std::string version = RunCommand({"/usr/bin/qemu-x86_64", "--version"}).out;
  const std::string first = version.substr(0, version.find('\n'));
  EXPECT_EQ("qemu-x86_64 version " + meta["emulation"]["qemu_version"].get<std::string>(), first);
  EXPECT_THAT(meta["clock"].get<std::string>(), HasSubstr("CLOCK_MONOTONIC"));
  // Without qemu-x86_64 on PATH: the step backend (whose own tests are elsewhere).
  auto step =
      RunCommand({"/usr/bin/env", "PATH=/nonexistent", PTRECORD_PATH, "--emulate", "--max-steps",
                  "100", "-o", dir_->File("step.pt"), "--", ::ptkit::testing::kFib});
  if (step.err.find("Operation not permitted") != std::string::npos) return;
  EXPECT_THAT(step.err, HasSubstr("(emulated)")) << step.err;
  auto step_info = RunCommand({PTDECODE_PATH, "info", "--json", dir_->File("step.pt")});
  EXPECT_EQ(nlohmann::json::parse(step_info.out)["metadata"]["emulated"], "step");
}

TEST_F(QemuEmulateTest, ADynamicProgramWithDlopenDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectDecodedEqualsTruth("dlopen",
                           {PROGRAM_DIR "/emulate_dlopen", PROGRAM_DIR "/libemulate_plugin.so"});
}

TEST_F(QemuEmulateTest, ThreadsForkAndSignalsDecodeToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  // main and two workers (a worker that starts after the other ended gets its vCPU index).
  EXPECT_EQ(ExpectDecodedEqualsTruth("threads", {PROGRAM_DIR "/emulate_threads"}).size(), 3u);
  EXPECT_EQ(ExpectDecodedEqualsTruth("fork", {PROGRAM_DIR "/emulate_fork"}).size(), 2u);
  ExpectDecodedEqualsTruth("signal", {PROGRAM_DIR "/emulate_signal"});
  ExpectDecodedEqualsTruth("alarm", {PROGRAM_DIR "/emulate_alarm"});
  EXPECT_EQ(ExpectDecodedEqualsTruth("leader_exit", {PROGRAM_DIR "/emulate_leader_exit"}).size(),
            2u);
}

// SIGALRM every 200 us while main calls hot() over and over: signals land after hot's RET too.
// QEMU delivers them at a block boundary, so the block after the RET is the handler; the RET
// must still go where it went (the frame's resume address, known at rt_sigreturn), never to
// the handler, which nothing calls (its address from nm).
TEST_F(QemuEmulateTest, ASignalRightAfterARetKeepsTheRetTarget) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string alarm = E2E_PROGRAM_DIR "/e2e_signal_ret";
  const auto [handler, handler_end] = ::ptkit::testing::NmRange(alarm, "on_alarm");
  const auto [hot, hot_end] = ::ptkit::testing::NmRange(alarm, "hot");
  ASSERT_NE(handler, 0u);
  ASSERT_NE(hot, 0u);
  Recorded rec = Record("alarm", {alarm}, /*with_truth=*/false);
  ASSERT_EQ(rec.run.exit_code, 0) << rec.run.err;  // 40 signals handled
  auto d = RunCommand({PTDECODE_PATH, "branches", rec.trace});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  // "FROM sym+off -> TO sym+off KIND" (TO is "? [untraced]" where tracing stops after it).
  // A signal that comes in user code is an interrupt out of the traced code ("FROM sym+off ->
  // ? [untraced] interrupt", where it came), between the branch before it and the handler's
  // first (on_alarm's RET: it has no other branch); one that comes in a system call (the
  // setitimer, a handler's rt_sigreturn) follows the call's "? [untraced] far_call" instead.
  int to_handler = 0, handler_returns = 0, signals_after_hot_ret = 0, interrupts = 0;
  int after_interrupt = 0, after_syscall = 0;
  bool last_was_hot_ret = false, last_was_interrupt = false, last_was_syscall = false;
  std::istringstream lines(d.out);
  for (std::string line; std::getline(lines, line);) {
    uint64_t from = 0, to = 0;
    char sym[256] = {};
    if (std::sscanf(line.c_str(), "%" SCNx64 " %255s -> %" SCNx64, &from, sym, &to) < 2) continue;
    if (line.ends_with(" interrupt")) {
      ++interrupts;
      last_was_interrupt = true;
      last_was_syscall = false;  // (a signal right after a system call's return: the interrupt's)
      continue;
    }
    to_handler += to == handler ? 1 : 0;
    const bool in_handler = from >= handler && from < handler_end;
    handler_returns += in_handler ? 1 : 0;
    signals_after_hot_ret += in_handler && last_was_hot_ret ? 1 : 0;
    after_interrupt += in_handler && last_was_interrupt ? 1 : 0;
    after_syscall += in_handler && last_was_syscall ? 1 : 0;
    last_was_hot_ret = from >= hot && from < hot_end && line.ends_with(" ret");
    last_was_syscall = line.ends_with(" -> ? [untraced] far_call");
    last_was_interrupt = false;
  }
  EXPECT_EQ(to_handler, 0) << "branches recorded as going to the handler";
  EXPECT_GE(handler_returns, 40);
  // Every handler was entered by one or the other, and most signals come in user code.
  EXPECT_EQ(after_interrupt + after_syscall, handler_returns);
  EXPECT_EQ(after_interrupt, interrupts);
  EXPECT_GE(interrupts, 20);
  EXPECT_GE(signals_after_hot_ret, 1) << "no signal came right after hot's RET this time";
  // And instruction by instruction (signals also come right at rt_sigreturn's return).
  ExpectDecodedEqualsTruth("signal_ret", {alarm});
}

// A program that runs its own SIGUSR1 handler by an indirect call, an indirect jump and a RET,
// and gets the signal too: QEMU's block after each of those branches is the handler, as after
// a signal that came right then. The handler's own RET says which it was (a signal's goes to
// its sa_restorer): the flow is the ground truth, instruction by instruction, and no branch
// is counted as unresolved. The handler's entries by objdump: 50 + 5 + 5 branches to it.
TEST_F(QemuEmulateTest, AProgramRunningItsOwnHandlerIsNotTakenForASignal) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_own_handler";
  const auto [handler, handler_end] = ::ptkit::testing::NmRange(program, "on_usr1");
  ASSERT_NE(handler, 0u);
  std::string err, insn, out;
  ExpectDecodedEqualsTruth("own_handler", {program}, 0, &err, {}, &insn, &out);
  EXPECT_EQ(out, "650\n");
  EXPECT_THAT(err, Not(HasSubstr("warning")));
  auto d = RunCommand({PTDECODE_PATH, "branches", dir_->File("own_handler.pt")});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  int to_handler = 0;
  std::istringstream lines(d.out);
  for (std::string line; std::getline(lines, line);) {
    uint64_t from = 0, to = 0;
    char sym[256] = {};
    if (std::sscanf(line.c_str(), "%" SCNx64 " %255s -> %" SCNx64, &from, sym, &to) == 3) {
      to_handler += to == handler ? 1 : 0;
    }
  }
  EXPECT_EQ(to_handler, 60) << "branches to the handler (the 5 signals enter it asynchronously)";
}

// Per thread of `ptdecode insn` output, the addresses decoded in function `name` (the
// "name+0xOFFSET" lines), each checked to be NAME's start (nm) + OFFSET.
std::map<uint64_t, std::vector<uint64_t>> DecodedIn(const std::string& insn,
                                                    const std::string& name, uint64_t start) {
  std::map<uint64_t, std::vector<uint64_t>> in;
  std::istringstream lines(insn);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(" " + name + "+0x");
    const size_t tid_at = line.find("tid ");
    if (at == std::string::npos || tid_at == std::string::npos) continue;
    uint64_t tid = 0, address = 0, offset = 0;
    if (std::sscanf(line.c_str() + tid_at, "tid %" SCNu64 " %" SCNx64, &tid, &address) != 2)
      continue;
    offset = std::stoull(line.substr(at + name.size() + 4), nullptr, 16);
    EXPECT_EQ(address, start + offset) << line;
    in[tid].push_back(address);
  }
  return in;
}

// The sideband as perf 6.1 reads it from the recording's perf.data export (`perf script
// --show-task-events --show-mmap-events`): its COMM, MMAP2, FORK and EXIT lines, each from
// "PERF_RECORD_" on. Empty when perf is not installed.
std::vector<std::string> PerfSideband(const std::string& trace) {
  if (access("/usr/bin/perf", X_OK) != 0) return {};
  const std::string data = trace + ".data";
  auto e = RunCommand({PTDECODE_PATH, "export", trace, "--to", "perf.data", "-o", data});
  EXPECT_EQ(e.exit_code, 0) << e.err;
  auto r = RunCommand({"/usr/bin/perf", "script", "-i", data, "--show-task-events",
                       "--show-mmap-events", "--itrace="});
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (const size_t at = line.find("PERF_RECORD_"); at != std::string::npos) {
      lines.push_back(line.substr(at));
    }
  }
  return lines;
}

// Exec is followed, as a per-task PT event goes on across execve: the program a traced thread
// exec's runs under a new qemu-x86_64 with the plugin, in that thread's stream, after the
// kernel's sideband of an exec (COMM with the exec flag, the new program's MMAP2, by perf).
// fork_exec's child and thread_exec's second thread exec emulate_fib (static): each stream
// decodes to the ground truth through both programs; by their symbols, the exec'ing program's
// spin / run and the exec'd fib's fib hold instructions objdump lists there, fib in exactly one
// stream.
TEST_F(QemuEmulateTest, ExecIsFollowedInTheThreadsStream) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  struct Case {
    std::string name;
    std::vector<std::string> command;
    int exit_code;
    std::string before;  // a function of the exec'ing program
  };
  for (const Case& c : std::vector<Case>{
           {"fork_exec", {PROGRAM_DIR "/emulate_fork_exec", fib, "x"}, 3, "spin"},  // fib exits 3
           {"thread_exec", {PROGRAM_DIR "/emulate_thread_exec", fib}, 0, "run"}}) {
    std::string err, insn;
    PerThread truth = ExpectDecodedEqualsTruth(c.name, c.command, c.exit_code, &err, {}, &insn);
    EXPECT_EQ(truth.size(), 2u) << c.name;
    EXPECT_THAT(err, Not(HasSubstr("the trace ends at execve"))) << c.name;
    // The stream goes on as the new program's (its COMM, the kernel's for the exec: a thread
    // other than the leader that execs becomes the leader; it was named by its old COMM).
    EXPECT_THAT(insn, ::testing::ContainsRegex("\\[switch tid [0-9]+: pid [0-9]+ tid [0-9]+ "
                                               "\\(emulate_fib\\)\\]"))
        << c.name;
    for (const auto& [program, function] :
         std::vector<std::pair<std::string, std::string>>{{c.command[0], c.before}, {fib, "fib"}}) {
      const auto [start, end] = ::ptkit::testing::NmRange(program, function);
      ASSERT_NE(start, 0u) << program << " " << function;
      const std::vector<uint64_t> objdump = ObjdumpInstructions(program, function);
      ASSERT_GT(objdump.size(), 3u) << function;
      const auto in = DecodedIn(insn, function, start);
      ASSERT_FALSE(in.empty()) << c.name << ": no stream ran " << function;
      if (function == "fib") {
        EXPECT_EQ(in.size(), 1u) << c.name << ": streams that ran fib";
      }
      for (const auto& [tid, ran] : in) {
        for (uint64_t address : ran) {
          ASSERT_TRUE(std::binary_search(objdump.begin(), objdump.end(), address))
              << c.name << ": 0x" << std::hex << address << " is no instruction of " << function
              << " by objdump";
        }
      }
    }
    // The exec as the kernel reports it: COMM exec (the new program's name) of the thread's
    // process, then the new program's executable mapping.
    const std::vector<std::string> sideband = PerfSideband(dir_->File(c.name + ".pt"));
    if (sideband.empty()) continue;  // no perf here
    auto comm = std::find_if(sideband.begin(), sideband.end(), [](const std::string& l) {
      return l.starts_with("PERF_RECORD_COMM exec: emulate_fib:");
    });
    ASSERT_NE(comm, sideband.end()) << c.name;
    const std::string task = comm->substr(comm->rfind(':') + 1);  // PID/TID
    auto mmap = std::find_if(comm, sideband.end(), [&](const std::string& l) {
      return l.starts_with("PERF_RECORD_MMAP2 " + task + ":") && l.ends_with("/emulate_fib");
    });
    EXPECT_NE(mmap, sideband.end()) << c.name << ": no MMAP2 of emulate_fib after " << *comm;
  }
}

// execve as a shell does it: what the kernel refuses (no such file, a directory, no x, not
// ELF nor #!, a missing #! interpreter) returns its errno to the program; a #! script runs
// its interpreter with the kernel's argv; a static program runs. The program's output is the
// same as natively, and every stream decodes to the ground truth through each program.
TEST_F(QemuEmulateTest, ExecFailuresAndScriptsBehaveAsNatively) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_exec";
  const std::string script = WriteExecutable("script", "#!" + program + " args  one two \t\n");
  const std::string noexec = WriteExecutable("noexec", "hello\n");
  const std::string missing = WriteExecutable("missing", "#!/nonexistent/interpreter\n");
  const std::vector<std::string> command = {program, "run",  ::ptkit::testing::kFib,
                                            script,  noexec, missing};
  auto native = RunCommand(command);
  ASSERT_EQ(native.exit_code, 3) << native.err;
  ASSERT_THAT(native.out, HasSubstr("exec /nonexistent/program: No such file or directory\n"
                                    "exec /: Permission denied\n"
                                    "exec /etc/passwd: Permission denied\n"
                                    "exec NOEXEC: Exec format error\n"
                                    "exec MISSING: No such file or directory\n"));
  ASSERT_THAT(native.out, HasSubstr("argv[1]=args  one two\nargv[2]=" + script +
                                    "\nargv[3]=ignored\nargv[4]=last\nscript: exit 5\n"));
  std::string err, out;
  EXPECT_EQ(ExpectDecodedEqualsTruth("qemu_exec", command, 3, &err, {}, nullptr, &out).size(), 2u);
  EXPECT_EQ(out, native.out);
  EXPECT_THAT(err, Not(HasSubstr("warning")));
}

// Debian's expr is a stripped PIE; qemu-x86_64 loads it at 0x4000000000 (the kernel at a random
// address). Code without a symbol entered by a call is named by its address in the ELF file
// (sub_ADDRESS, as objdump shows it; the same in every run), not by its run-time address: each
// name is an instruction objdump disassembles there, and most are a function's start in the
// file's .eh_frame (readelf; the rest are crt code and .init, which have no FDE).
TEST_F(QemuEmulateTest, StrippedPieCodeIsNamedByItsAddressInTheFile) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string expr = "/usr/bin/expr";
  if (!std::filesystem::exists(expr)) GTEST_SKIP() << expr << " is absent";
  Recorded r = Record("expr", {expr, "3", "+", "4"}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  std::set<uint64_t> named;
  const nlohmann::json doc = nlohmann::json::parse(stats.out);
  for (const auto& fn : doc["functions"]) {
    const std::string name = fn["function"];
    if (name.starts_with("sub_") && fn["image"] == expr) {
      named.insert(std::stoull(name.substr(4), nullptr, 16));
      EXPECT_GT(std::stoull(fn["address"].get<std::string>(), nullptr, 16), 0x4000000000u);
    }
  }
  ASSERT_GE(named.size(), 5u) << stats.out.substr(0, 2000);
  auto objdump = RunCommand({"/usr/bin/objdump", "-d", "--no-show-raw-insn", expr});
  ASSERT_EQ(objdump.exit_code, 0) << objdump.err;
  std::set<uint64_t> instructions;
  std::istringstream lines(objdump.out);
  for (std::string line; std::getline(lines, line);) {
    uint64_t at = 0;
    if (std::sscanf(line.c_str(), " %" SCNx64 ":", &at) == 1) instructions.insert(at);
  }
  auto frames = RunCommand({"/usr/bin/readelf", "-W", "--debug-dump=frames", expr});
  std::set<uint64_t> fde_starts;
  std::istringstream fdes(frames.out);
  for (std::string line; std::getline(fdes, line);) {
    const size_t pc =
        line.find(" FDE ") == std::string::npos ? std::string::npos : line.find("pc=");
    if (pc != std::string::npos) fde_starts.insert(std::stoull(line.substr(pc + 3), nullptr, 16));
  }
  size_t at_fde = 0;
  for (uint64_t address : named) {
    EXPECT_TRUE(instructions.contains(address)) << "sub_" << std::hex << address;
    at_fde += fde_starts.contains(address) ? 1 : 0;
  }
  EXPECT_GE(at_fde * 2, named.size()) << at_fde << " of " << named.size() << " at an FDE's start";
}

// Python's subprocess closes every descriptor of the child before its exec, the ring's too:
// the plugin opens the ring again (from ptrecord's descriptor, the plugin's ring= option) and
// follows the exec, so the program Python ran is traced (sweep 26 N7: it ran natively,
// untraced, with a warning; a shell's `exec 4>file` did the same).
TEST_F(QemuEmulateTest, AProgramRunAfterItsParentClosedEveryDescriptorIsTraced) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "python3 not installed";
  Recorded r =
      Record("subprocess",
             {"/usr/bin/python3", "-c",
              "import subprocess; subprocess.run(['" E2E_PROGRAM_DIR "/e2e_fib_rebuilt'])"},
             /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_THAT(r.run.err, Not(HasSubstr("the trace ends at execve")));
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  uint64_t fib_calls = 0;
  for (const auto& f : report["functions"]) {
    if (f["function"] == "fib") fib_calls += f["calls"].get<uint64_t>();
  }
  // fib(0) .. fib(7), recursively: 1 + 1 + 3 + 5 + 9 + 15 + 25 + 41 calls.
  EXPECT_EQ(fib_calls, 100u) << stats.out.substr(0, 2000);
}

// A fork child closes every descriptor and opens files in their place (Python's subprocess
// does so before its exec): the plugin's ground-truth descriptor goes, and its number may then
// name the child's own file. The plugin opens the ground truth's file again (before, the
// child's truth write failed with EBADF and the whole recording with it: "no footer"), and
// writes nothing into the child's file: every thread decodes to its ground truth.
TEST_F(QemuEmulateTest, AChildClosingEveryDescriptorKeepsItsGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  std::string err;
  EXPECT_EQ(ExpectDecodedEqualsTruth("close_fds", {E2E_PROGRAM_DIR "/e2e_qemu_close_fds"}, 0, &err)
                .size(),
            2u);
  EXPECT_THAT(err, Not(HasSubstr("failed")));
}

// A process sharing its parent's memory (clone with CLONE_VM, not CLONE_THREAD) runs
// natively, but qemu-user refuses to create it (EINVAL) and the program takes another path:
// ptrecord says so and names the backend that records it (before, nothing was said).
TEST_F(QemuEmulateTest, AProcessSharingItsParentsMemoryThatQemuRefusesIsSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_clone_vm";
  auto native = RunCommand({program});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  EXPECT_EQ(native.out, "shared=499500\n");
  auto r = RunCommand(
      {PTRECORD_PATH, "--emulate=qemu", "-q", "-o", dir_->File("clone_vm.pt"), "--", program});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // the program's own exit status: its clone failed
  EXPECT_THAT(r.err, HasSubstr("clone: Invalid argument"));
  EXPECT_THAT(r.err, HasSubstr("1 clone call with CLONE_VM but not CLONE_THREAD failed with "
                               "EINVAL under qemu-x86_64"));
  EXPECT_THAT(r.err, HasSubstr("--emulate=step records it"));
}

// Calls out of a filtered region (e2e_filter_calls: traced() calls by_pointer() through a
// pointer, direct(), and leaves(), which longjmps back into traced() every other time): each
// returns, or is left, where tracing resumes in traced(), with no instruction of its own. Before,
// the indirect call's frame never returned (libipt flags tracing that resumes at its return
// address `resumed`, which was taken for an interrupt's) nor did a longjmp's, so frames piled
// up ("traced;by_pointer;leaves;by_pointer;...", 1 GB of folded stacks on a qsort callback).
// Every decoder and -j agree.
TEST_F(QemuEmulateTest, CallsOutOfAFilteredRegionReturnWhereTracingResumes) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_filter_calls";
  Recorded r = Record("filter_calls", {prog}, false, {"--filter", "filter traced @ " + prog});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_EQ(folded.out, "traced 158\n");  // every traced instruction (insn: 158) in traced()
  auto calls = RunCommand({PTDECODE_PATH, "calls", r.trace});
  ASSERT_EQ(calls.exit_code, 0) << calls.err;
  std::istringstream lines(calls.out);
  std::string prev;
  int entered = 0;
  for (std::string line; std::getline(lines, line); prev = line) {
    if (line.find("  > ") != std::string::npos) ++entered;
    if (prev.find("  > ") == std::string::npos) continue;
    const std::string callee = prev.substr(prev.find("  > ") + 4);
    EXPECT_NE(line.find("  < " + callee + " (0 insns"), std::string::npos) << prev << "\n" << line;
  }
  EXPECT_EQ(entered, 6 * 4);  // by_pointer, direct, _setjmp, leaves, 6 times
  for (const char* job : {"-j2", "--decoder=libipt"}) {
    EXPECT_EQ(RunCommand({PTDECODE_PATH, "calls", job, r.trace}).out, calls.out) << job;
    EXPECT_EQ(RunCommand({PTDECODE_PATH, "folded", job, r.trace}).out, folded.out) << job;
  }
}

// A filtered function that recurses through a pointer and calls out of its region at every
// level (e2e_filter_calls' recurse()): a CALL out of the region is TIP.PGD, and it pushes its
// return address for RET compression as the decoders push it (the SDM's algorithm, perf's,
// libipt's block decoder). Sweep 27 S4: it did not, so a later return within the region was
// compressed against another entry: stats 101 calls of 134 (outside() 44 of 77) and 864
// instructions of 881, perf on the export a wrong path; insn (libipt's instruction decoder)
// alone was right. Oracles: the program's own counts and the ground truth; perf 6.1.
TEST_F(QemuEmulateTest, ReturnsAfterCallsOutOfAFilteredRegionDecodeAsTheyRan) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_filter_calls";
  Recorded r = Record("filter_rec", {prog}, true, {"--filter", "filter recurse @ " + prog});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  int sum = 0, recursed = 0, outside = 0;
  const size_t counts = r.run.out.find(" recurse ");
  ASSERT_NE(counts, std::string::npos) << r.run.out;
  ASSERT_EQ(std::sscanf(r.run.out.substr(r.run.out.rfind('\n', counts) + 1).c_str(),
                        "%d recurse %d outside %d", &sum, &recursed, &outside),
            3)
      << r.run.out;
  uint64_t truth = 0;
  for (const auto& [tid, ips] : ReadTruth(r.truth)) truth += ips.size();
  for (const char* decoder : {"--decoder=fast", "--decoder=libipt"}) {
    SCOPED_TRACE(decoder);
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", decoder, r.trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    const nlohmann::json report = nlohmann::json::parse(stats.out);
    EXPECT_EQ(report["totals"]["instructions"].get<uint64_t>(), truth);
    std::map<std::string, uint64_t> calls;
    for (const auto& f : report["functions"]) {
      calls[f["function"].get<std::string>()] += f["calls"].get<uint64_t>();
    }
    // main's 20 calls enter the region (TIP.PGE): no call in the trace.
    EXPECT_EQ(calls["recurse"], static_cast<uint64_t>(recursed - 20));
    EXPECT_EQ(calls["outside"], static_cast<uint64_t>(outside));
  }
  if (access("/usr/bin/perf", X_OK) != 0) return;
  const std::string data = dir_->File("filter_rec.data");
  ASSERT_EQ(
      RunCommand({PTDECODE_PATH, "export", r.trace, "--to", "perf.data", "-o", data}).exit_code, 0);
  auto perf = RunCommand({"/usr/bin/perf", "--buildid-dir", data + ".debug", "script", "-i", data,
                          "--itrace=i0ns", "-F", "ip"});
  std::vector<uint64_t> theirs;
  std::istringstream p(perf.out);
  for (std::string line; std::getline(p, line);) theirs.push_back(std::stoull(line, nullptr, 16));
  EXPECT_EQ(theirs, ReadTruth(r.truth).begin()->second) << perf.err;
}

// Code that an untraced callee jumps to inside the regions returns across the call that left
// them (e2e_filter_calls' region_mid -> away() -> jmp region_back): libipt's instruction
// decoder (ptdecode insn and branches) does not push such a call for RET compression where its
// block decoder (stats) and perf do, so no RET may be compressed there. Sweep 27 T1: after the
// S4 fix (55c04fd) pushed it, insn decoded 15 of 170 instructions and ended in "compressed
// return without call", exit 0. Oracles: the ground truth, perf 6.1.
TEST_F(QemuEmulateTest, ATailCallBackIntoTheRegionsDecodesAlikeEverywhere) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_filter_calls";
  const std::string filter = "filter region_top @ " + prog + ", filter region_mid @ " + prog +
                             ", filter region_back @ " + prog;
  const PerThread truth =
      ExpectDecodedEqualsTruth("tail_back", {prog}, 0, nullptr, {"--filter", filter});
  ASSERT_EQ(truth.size(), 1u);
  const std::vector<uint64_t>& ran = truth.begin()->second;
  const std::string trace = dir_->File("tail_back.pt");
  for (const char* decoder : {"--decoder=fast", "--decoder=libipt"}) {
    SCOPED_TRACE(decoder);
    auto insn = RunCommand({PTDECODE_PATH, "insn", decoder, trace});
    EXPECT_EQ(insn.out.find("[error"), std::string::npos) << insn.out;
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", decoder, trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    EXPECT_EQ(nlohmann::json::parse(stats.out)["totals"]["instructions"].get<uint64_t>(),
              ran.size());
  }
  // The option repeated, one region each, is the same filter (it was refused: "At Most 1
  // required but received 3").
  Recorded repeated =
      Record("tail_back_repeated", {prog}, false,
             {"--filter", "filter region_top @ " + prog, "--filter", "filter region_mid @ " + prog,
              "--filter", "filter region_back @ " + prog});
  ASSERT_EQ(repeated.run.exit_code, 0) << repeated.run.err;
  auto once = RunCommand({PTDECODE_PATH, "stats", trace});
  auto thrice = RunCommand({PTDECODE_PATH, "stats", repeated.trace});
  EXPECT_EQ(thrice.out.substr(thrice.out.find('\n')), once.out.substr(once.out.find('\n')));
  if (access("/usr/bin/perf", X_OK) != 0) return;
  const std::string data = dir_->File("tail_back.data");
  ASSERT_EQ(RunCommand({PTDECODE_PATH, "export", trace, "--to", "perf.data", "-o", data}).exit_code,
            0);
  auto perf = RunCommand({"/usr/bin/perf", "--buildid-dir", data + ".debug", "script", "-i", data,
                          "--itrace=i0ns", "-F", "ip"});
  std::vector<uint64_t> theirs;
  std::istringstream p(perf.out);
  for (std::string line; std::getline(p, line);) theirs.push_back(std::stoull(line, nullptr, 16));
  EXPECT_EQ(theirs, ran) << perf.err;
}

// A signal handler inside the filter regions, the code it interrupts outside them
// (e2e_signal_ret: 40 SIGALRMs every 200 us, `filter on_alarm`): sweep 27 T2, a signal right
// after a conditional branch outside the regions waited for its handler's rt_sigreturn to
// resolve the branch, which it never did (the return ran untraced): the plugin failed at the
// second such signal ("while another one is unresolved", exit 1, the trace cut), or warned
// that the handler never returned. Every handler run decodes to the ground truth.
TEST_F(QemuEmulateTest, AFilteredHandlerOfSignalsOutsideTheRegionsDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_signal_ret";
  std::string err;
  const PerThread truth = ExpectDecodedEqualsTruth("filtered_handler", {prog}, 0, &err,
                                                   {"--filter", "filter on_alarm @ " + prog});
  ASSERT_EQ(truth.size(), 1u);
  EXPECT_GE(truth.begin()->second.size(), 40u * 3);  // each run of on_alarm: a few instructions
  EXPECT_THAT(err, Not(HasSubstr("warning")));
  auto stats = RunCommand({PTDECODE_PATH, "stats", dir_->File("filtered_handler.pt")});
  EXPECT_THAT(stats.err, Not(HasSubstr("warning")));
}

// A function entered from untraced code that a traced one called (recursion across the
// regions' edge, e2e_filter_calls' cross_a -> cross_b -> cross_a, `filter cross_a`) runs in a
// frame of its own, as gdb's stack has it: sweep 27 T4, it ran in the untraced callee's frame
// (folded "cross_a;cross_b;cross_b;cross_a") and its return out closed the outermost frame of
// its function with every frame above it (cross_a(2)'s last instructions charged to the root).
// cross_a(4) and cross_a(2) run the same instructions, cross_a(0) fewer; the three frames sum
// to the ground truth; -j 2 in 1 KiB chunks gives the same.
TEST_F(QemuEmulateTest, ARecursionAcrossTheRegionsEdgeHasAFramePerCall) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_filter_calls";
  Recorded r = Record("cross", {prog}, true, {"--filter", "filter cross_a @ " + prog});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  uint64_t truth = 0;
  for (const auto& [tid, ips] : ReadTruth(r.truth)) truth += ips.size();
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  std::map<std::string, uint64_t> stacks;
  uint64_t sum = 0;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    const uint64_t n = std::stoull(line.substr(line.rfind(' ') + 1));
    stacks[line.substr(0, line.rfind(' '))] = n;
    sum += n;
  }
  EXPECT_EQ(sum, truth);
  const std::string a = "cross_a", ab = a + ";cross_b;";
  ASSERT_EQ(stacks.size(), 3u) << folded.out;
  EXPECT_EQ(stacks[a], stacks[ab + a]) << folded.out;
  EXPECT_LT(stacks[ab + ab + a], stacks[a]) << folded.out;
  EXPECT_EQ(RunCommand({PTDECODE_PATH, "folded", "-j", "2", "--chunk-size", "1024", r.trace}).out,
            folded.out);
}

// The emulation writes no MTC, so a stretch of a stream after its last TSC packet had no time:
// sweep 27 S2, a short program's main got 0 ticks, `folded --weight=time` had no stack through
// main and `diff --metric time` (under main) refused: "the trace has no timing packets". Now a
// TSC packet comes at every system call's entry and at a stream's end: main has its time.
TEST_F(QemuEmulateTest, AStreamsLastInstructionsHaveTheirTime) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/diff_base/e2e_diff_work";
  Recorded a = Record("time_a", {prog}, false);
  Recorded b = Record("time_b", {prog}, false);
  ASSERT_EQ(a.run.exit_code, 0) << a.run.err;
  ASSERT_EQ(b.run.exit_code, 0) << b.run.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", a.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  uint64_t main_ticks = 0;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& f : report["functions"]) {
    if (f["function"] == "main") main_ticks = f["ticks"].get<uint64_t>();
  }
  EXPECT_GT(main_ticks, 0u);
  auto folded = RunCommand({PTDECODE_PATH, "folded", "--weight", "time", a.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr(";main"));
  auto diff = RunCommand({PTDECODE_PATH, "diff", a.trace, b.trace, "--metric", "time"});
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
}

// Under --filter the system calls run untraced (they gave no time) and the time advanced once
// per 64 KiB of trace: sweep 27 T5, a short filtered run had one instant, 0 ticks. Tracing that
// resumes in a region now gives the time (every 100 us at most): emulate_hot_cold's hot(),
// entered 6 times around cold(100000) calls (outside), has its time.
TEST_F(QemuEmulateTest, AFilteredRecordingsTimeAdvances) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = PROGRAM_DIR "/emulate_hot_cold";
  Recorded r =
      Record("filtered_time", {prog, "100000"}, false, {"--filter", "filter hot @ " + prog});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  uint64_t hot_ticks = 0;
  for (const auto& f : report["functions"]) {
    if (f["function"] == "hot") hot_ticks = f["ticks"].get<uint64_t>();
  }
  EXPECT_GT(hot_ticks, 0u);
  auto insn = RunCommand({PTDECODE_PATH, "insn", r.trace});
  std::set<std::string> times;
  std::istringstream lines(insn.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" tid ") != std::string::npos) times.insert(line.substr(0, line.find(" tid ")));
  }
  EXPECT_GE(times.size(), 3u);
}

// A program file gone since the recording: every decode names it (sweep 27 S3: stats said only
// "error nomap: 1", and the program's functions were missing from its rows without a word).
TEST_F(QemuEmulateTest, AProgramFileGoneSinceTheRecordingIsNamed) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = dir_->File("gone");
  std::filesystem::copy_file(::ptkit::testing::kFib, prog);
  Recorded r = Record("gone", {prog}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  std::filesystem::remove(prog);
  const std::string said = prog + " could not be loaded (stat " + prog;
  // (All its code was the program's, a static one: nothing decodes, and exit 1 says so.)
  for (const char* command : {"stats", "folded", "calls"}) {
    auto d = RunCommand({PTDECODE_PATH, command, r.trace});
    EXPECT_THAT(d.err, HasSubstr("warning: " + said)) << command;
  }
}

// --archive: the code is decoded from the container, and its names come from the file where
// this machine has the same one (same path and build-id): the profile is the one without
// --archive (before, every function was sub_<run-time address>). A file rebuilt since lends
// no names: the archive's copy of the file names them (sweep 29b S8: sub_ADDRESS).
TEST_F(QemuEmulateTest, AnArchivedRecordingIsNamedFromTheFileWhereItIsHere) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = dir_->File("fib");
  std::filesystem::copy_file(::ptkit::testing::kFib, prog);
  Recorded archived = Record("archived", {prog}, false, {"--archive"});
  Recorded plain = Record("plain", {prog}, false);
  ASSERT_EQ(archived.run.exit_code, plain.run.exit_code) << archived.run.err;
  auto a = RunCommand({PTDECODE_PATH, "stats", archived.trace});
  auto p = RunCommand({PTDECODE_PATH, "stats", plain.trace});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out.substr(a.out.find("\n#")), p.out.substr(p.out.find("\n#")));
  EXPECT_THAT(a.out, HasSubstr(" fib [fib]\n"));
  EXPECT_THAT(a.out, Not(HasSubstr("sub_")));
  std::filesystem::copy_file(E2E_PROGRAM_DIR "/e2e_crash", prog,
                             std::filesystem::copy_options::overwrite_existing);
  auto rebuilt = RunCommand({PTDECODE_PATH, "stats", archived.trace});
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  EXPECT_EQ(rebuilt.out, a.out);
  EXPECT_THAT(rebuilt.out, Not(HasSubstr("sub_")));
}

// --archive: each program's code is decoded from the container by the file it maps, in the
// program that maps it: a program exec'd where the one before was mapped decodes as itself, and
// a forked child as its parent's program, also without the files (sweep 32b F1, F2: every
// archived range of a process went into each of its programs, env's bytes decoding true's
// code; a child, which archived nothing of its own, was a gap once the program was moved away).
TEST_F(QemuEmulateTest, AnArchivedExecAndForkDecodeToTheGroundTruthWithoutTheirFiles) {
  PTKIT_SKIP_WITHOUT_QEMU();
  // env and true: PIE, both loaded at 0x4000000000 by qemu-x86_64.
  ExpectDecodedEqualsTruth("archived_exec", {"/usr/bin/env", "/bin/true"}, 0, nullptr,
                           {"--archive"});
  const std::string prog = dir_->File("fork");
  std::filesystem::copy_file(PROGRAM_DIR "/emulate_fork", prog);
  Recorded r = Record("archived_fork", {prog}, /*with_truth=*/true, {"--archive"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  std::filesystem::remove(prog);
  EXPECT_EQ(ExpectTraceDecodesToTruth("archived_fork", r.trace, r.truth).size(), 2u);
}

// A program exec'd under qemu runs under a new qemu-x86_64, a dynamically linked program that
// reads LD_* and QEMU_* variables itself: they must act on the program, as natively, not on
// qemu (ldd's LD_TRACE_LOADED_OBJECTS listed qemu's 20 libraries; QEMU_STRACE traced; a
// program's LD_PRELOAD ran twice), and what the program unsets is unset for it.
TEST_F(QemuEmulateTest, AnExecdProgramsLoaderVariablesActOnItNotOnQemu) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded list =
      Record("ld_trace", {"/usr/bin/env", "LD_TRACE_LOADED_OBJECTS=1", "/bin/true"}, false);
  ASSERT_EQ(list.run.exit_code, 0) << list.run.err;
  EXPECT_THAT(list.run.out, HasSubstr("libc.so.6 => "));
  EXPECT_THAT(list.run.out, Not(HasSubstr("libglib")));  // qemu-x86_64's
  Recorded strace = Record("qemu_strace", {"/usr/bin/env", "QEMU_STRACE=1", "/bin/true"}, false);
  ASSERT_EQ(strace.run.exit_code, 0) << strace.run.err;
  EXPECT_THAT(strace.run.err, Not(HasSubstr("exit_group")));
  const std::string trace = dir_->File("ld_env.pt");
  auto unset =
      RunCommand({"/usr/bin/env", "LD_PTKIT_TEST=1", PTRECORD_PATH, "--emulate=qemu", "-q", "-o",
                  trace, "--", "/usr/bin/env", "-u", "LD_PTKIT_TEST", "/bin/sh", "-c",
                  "echo \"[$LD_PTKIT_TEST]\"; LD_PTKIT_TEST=2 /bin/sh -c 'echo $LD_PTKIT_TEST'"});
  ASSERT_EQ(unset.exit_code, 0) << unset.err;
  EXPECT_EQ(unset.out, "[]\n2\n");
}

// `--event intel_pt/tsc=0/u`: a trace without TSC packets. Its perf.data export says so in the
// event's config (perf 6.1 decoded nothing from it, without an error, when the config had the
// TSC bit), so perf's instructions are ptdecode's. MTC and CYC the plugin cannot write: refused.
TEST_F(QemuEmulateTest, ATraceWithoutTscExportsAsPerfDecodesIt) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (access("/usr/bin/perf", X_OK) != 0) GTEST_SKIP() << "perf (linux-perf) is not installed";
  Recorded r = Record("notsc", {E2E_PROGRAM_DIR "/e2e_filter_calls"}, false,
                      {"--event", "intel_pt/tsc=0/u"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const std::string data = dir_->File("notsc.data");
  ASSERT_EQ(
      RunCommand({PTDECODE_PATH, "export", r.trace, "--to", "perf.data", "-o", data}).exit_code, 0);
  auto perf = RunCommand({"/usr/bin/perf", "--buildid-dir", data + ".debug", "script", "-i", data,
                          "--itrace=i0ns", "-F", "ip"});
  auto insn = RunCommand({PTDECODE_PATH, "insn", r.trace});
  std::vector<uint64_t> theirs, ours;
  std::istringstream p(perf.out), o(insn.out);
  for (std::string line; std::getline(p, line);) theirs.push_back(std::stoull(line, nullptr, 16));
  for (std::string line; std::getline(o, line);) {
    uint64_t tid = 0, ip = 0;
    if (std::sscanf(line.c_str(), "tid %" SCNu64 " %" SCNx64, &tid, &ip) == 2) ours.push_back(ip);
  }
  EXPECT_GT(ours.size(), 10000u);
  EXPECT_EQ(theirs, ours) << perf.err;
  Recorded mtc =
      Record("mtc", {E2E_PROGRAM_DIR "/e2e_filter_calls"}, false, {"--event", "intel_pt/mtc/u"});
  EXPECT_EQ(mtc.run.exit_code, 2);  // a term the emulated PMU does not take (sweep 40b L1)
  EXPECT_THAT(mtc.run.err, HasSubstr("writes no MTC or CYC packets"));
}

// Without TSC packets the trace of a process that execs cannot be split at the exec: one image
// holds both programs, and under qemu they overlap (both PIE at qemu's one guest base). The
// later mapping's code is used there by both decoders, as libipt's image does it (the fast
// decoder took the earlier one: 199,564 of dash's + true's 302,480 instructions, libipt
// 301,530), and the decode says so.
TEST_F(QemuEmulateTest, WithoutTimeAnExecdProgramOverlappingTheFirstDecodesAlikeAndIsWarned) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r =
      Record("exec", {"/bin/sh", "-c", "/bin/true"}, false, {"--event", "intel_pt/tsc=0/u"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  std::string counts[2];
  for (int libipt = 0; libipt < 2; ++libipt) {
    std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--json", r.trace};
    if (libipt) argv.insert(argv.begin() + 2, {"--decoder", "libipt"});
    auto d = RunCommand(argv);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_THAT(d.err,
                ::testing::ContainsRegex(
                    "warning: process [0-9]+: /usr/bin/true was mapped at 0x[0-9a-f]+-0x"
                    "[0-9a-f]+ where /usr/bin/dash was before, and the trace has no timestamps"));
    const nlohmann::json j = nlohmann::json::parse(d.out);
    counts[libipt] = j["functions"].dump();
    EXPECT_GT(j["totals"]["instructions"].get<uint64_t>(), 250000u);
    EXPECT_THAT(j["warnings"].dump(), HasSubstr("/usr/bin/true was mapped at"));
  }
  EXPECT_EQ(counts[0], counts[1]) << "the fast decoder and libipt decode the overlap differently";
}

// The program's code as the plugin's MMAP2 records give it: its executable segment's pages
// only, as readelf lists them, not a data segment's page that shares a file page with the
// code (GNU ld -z noseparate-code; lld lays out every program so): that page, mapped a page
// above, was given as code too, and its symbols placed a page off (DebugFileTest.
// AMappingNamesOnlyTheCodeItMaps).
TEST_F(QemuEmulateTest, OnlyTheCodeSegmentsPagesAreMappedAsCode) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (access("/usr/bin/perf", X_OK) != 0) GTEST_SKIP() << "perf (linux-perf) is not installed";
  const std::string source = dir_->File("shared_page.c"), program = dir_->File("shared_page");
  std::ofstream(source) << "int x = 3;\nint main(void) { return x - 3; }\n";
  auto cc =
      RunCommand({"/usr/bin/env", "gcc", "-O1", "-Wl,-z,noseparate-code", "-o", program, source});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  // readelf: the executable PT_LOAD (offset, file size), and that the data one shares its page.
  auto readelf = RunCommand({"/usr/bin/env", "readelf", "-lW", program});
  std::istringstream phdrs(readelf.out);
  uint64_t code_offset = ~0ull, code_size = 0, data_offset = ~0ull;
  for (std::string line; std::getline(phdrs, line);) {
    unsigned long long offset = 0, vaddr = 0, paddr = 0, filesz = 0, memsz = 0;
    char flags[8] = {};
    if (std::sscanf(line.c_str(), " LOAD 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx %7[RWE ]", &offset,
                    &vaddr, &paddr, &filesz, &memsz, flags) != 6) {
      continue;
    }
    if (std::string(flags).find('E') != std::string::npos) {
      code_offset = offset;
      code_size = filesz;
    } else if (std::string(flags).find('W') != std::string::npos) {
      data_offset = offset;
    }
  }
  ASSERT_NE(code_offset, ~0ull) << readelf.out;
  if (data_offset / 4096 != (code_offset + code_size - 1) / 4096) {
    GTEST_SKIP() << "the data segment shares no file page with the code here: " << readelf.out;
  }
  Recorded r = Record("shared_page", {program}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const std::string data = dir_->File("shared_page.data");
  ASSERT_EQ(
      RunCommand({PTDECODE_PATH, "export", r.trace, "--to", "perf.data", "-o", data}).exit_code, 0);
  auto mmaps =
      RunCommand({"/usr/bin/perf", "script", "-i", data, "--show-mmap-events", "--itrace="});
  std::istringstream lines(mmaps.out);
  std::vector<std::pair<uint64_t, uint64_t>> code;  // (length, pgoff) of r-x MMAP2s of it
  for (std::string line; std::getline(lines, line);) {
    if (!line.ends_with("r-xp " + program)) continue;
    const size_t at = line.find("PERF_RECORD_MMAP2");
    unsigned long long start = 0, length = 0, pgoff = 0;
    ASSERT_EQ(std::sscanf(line.c_str() + line.find('[', at), "[0x%llx(0x%llx) @ %lli", &start,
                          &length, &pgoff),
              3)
        << line;
    code.emplace_back(length, pgoff);
  }
  const uint64_t first = code_offset / 4096 * 4096;
  const uint64_t last = (code_offset + code_size + 4095) / 4096 * 4096;
  EXPECT_EQ(code, (std::vector<std::pair<uint64_t, uint64_t>>{{last - first, first}})) << mmaps.out;
}

// Counting only under a function (--only-under, and --exclude-startup: under main) follows a
// frame that jumps into another function, as the unscoped counts do: a call through a PLT
// entry (printf@plt, its lazy binding, then printf) is printf's from the jump on. Before,
// the scoped counts lost track at each such jump: functions got an inclusive count below
// their self count (0 for some), --only-under printf counted nothing and --only-under
// printf@plt went on counting after printf returned.
TEST_F(QemuEmulateTest, ScopedCountsFollowCallsThroughThePlt) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r =
      Record("plt", {E2E_PROGRAM_DIR "/e2e_dl_swap", PROGRAM_DIR "/libemulate_plugin.so"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto stats = [&](const std::vector<std::string>& options) {
    std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--json"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(r.trace);
    auto d = RunCommand(argv);
    EXPECT_EQ(d.exit_code, 0) << d.err;
    // self, inclusive, calls (printf's: its PLT entry's jump to it, since df82bd3; the scoped
    // counts had none of them: review of df82bd3)
    std::map<std::string, std::tuple<uint64_t, uint64_t, uint64_t>> rows;
    const nlohmann::json j = nlohmann::json::parse(d.out);
    for (const auto& f : j["functions"]) {
      auto& row = rows[f["function"].get<std::string>() + " " + f["image"].get<std::string>()];
      std::get<0>(row) += f["self"].get<uint64_t>();
      std::get<1>(row) += f["inclusive"].get<uint64_t>();
      std::get<2>(row) += f["calls"].get<uint64_t>();
    }
    return std::make_pair(rows, j["totals"]["instructions"].get<uint64_t>());
  };
  const auto [all, total] = stats({});
  const auto [in_main, main_total] = stats({"--exclude-startup"});
  ASSERT_GT(main_total, 1000u);
  for (const auto& [name, row] : in_main) {
    EXPECT_GE(std::get<1>(row), std::get<0>(row)) << name << ": inclusive below self";
  }
  // printf and plugin_work run under main only: their counts are the unscoped ones.
  std::string printf_row;
  for (const auto& [name, row] : all) {
    if (name.starts_with("printf ") || name.starts_with("plugin_work ")) {
      EXPECT_EQ(in_main.at(name), row) << name;
      if (name.starts_with("printf ")) printf_row = name;
    }
  }
  ASSERT_FALSE(printf_row.empty());
  EXPECT_GT(std::get<2>(all.at(printf_row)), 0u);
  // Under printf: what ran while a frame was printf's, its inclusive count.
  const auto [under_printf, printf_total] = stats({"--only-under", "printf"});
  EXPECT_EQ(printf_total, std::get<1>(all.at(printf_row)));
  // Under printf@plt: the same calls from their PLT entry on, nothing after they return (the
  // exit handlers ran after the last printf).
  const auto [under_plt, plt_total] = stats({"--only-under", "printf@plt"});
  EXPECT_GE(plt_total, printf_total);
  for (const auto& [name, row] : under_plt) {
    EXPECT_FALSE(name.starts_with("_dl_fini ") || name.starts_with("__libc_start_call_main ") ||
                 name.starts_with("exit "))
        << name;
  }
  // A root that never ran: the empty result says why, on stderr too, and exits 1 (sweep 29b
  // U1: exit 0, the reason on stdout only), with --json as well.
  for (const bool json : {false, true}) {
    std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--only-under", "no_such_function"};
    if (json) argv.push_back("--json");
    argv.push_back(r.trace);
    auto none = RunCommand(argv);
    EXPECT_EQ(none.exit_code, 1) << none.err;
    EXPECT_THAT(none.out, HasSubstr("0 instructions of "));
    EXPECT_THAT(none.out, HasSubstr("no call to a function of that name was traced"));
    EXPECT_THAT(none.err, HasSubstr(r.trace + ": only what ran under no_such_function is counted: "
                                              "0 instructions of "));
    EXPECT_THAT(none.err, HasSubstr("no call to a function of that name was traced"));
  }
}

// The plugin's MMAP2 records carry no build-id, but the container's identity records do: a
// file rebuilt since the recording is warned about, as for the kernel path's recordings.
TEST_F(QemuEmulateTest, AFileRebuiltSinceIsWarnedAbout) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = dir_->File("fib_rebuilt");
  std::filesystem::copy_file(::ptkit::testing::kFib, prog);
  Recorded r = Record("rebuilt", {prog}, false);
  auto before = RunCommand({PTDECODE_PATH, "stats", r.trace});
  EXPECT_THAT(before.err, Not(HasSubstr("build-id")));
  std::filesystem::copy_file(E2E_PROGRAM_DIR "/e2e_fib_rebuilt", prog,
                             std::filesystem::copy_options::overwrite_existing);
  auto after = RunCommand({PTDECODE_PATH, "stats", r.trace});
  EXPECT_THAT(after.err, HasSubstr(prog + ": build-id "));
  EXPECT_THAT(after.err, HasSubstr("differs from the recorded"));
}

// JIT code (e2e_qemu_jit: machine code written at run time into an RWX mapping and into one
// made RX by mprotect, a loop and a call between them): the plugin sends each block of it as a
// PERF_RECORD_TEXT_POKE, so the decode equals the ground truth with no gap (before: "no code
// at ...: //anon could not be loaded", 27,201 of 46,593 instructions), and ptrecord says
// nothing about //anon (it looked for a file of that name).
TEST_F(QemuEmulateTest, JitCodeDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  std::string err, insn;
  ExpectDecodedEqualsTruth("jit", {E2E_PROGRAM_DIR "/e2e_qemu_jit"}, 0, &err, {}, &insn);
  EXPECT_THAT(err, Not(HasSubstr("//anon")));
  EXPECT_EQ(insn.find("gap"), std::string::npos);
  EXPECT_NE(insn.find("  [anon]\n"), std::string::npos);  // its image, as perf's //anon
  // A fork child runs its parent's JIT code, which qemu does not translate again.
  EXPECT_EQ(ExpectDecodedEqualsTruth("jit_fork", {E2E_PROGRAM_DIR "/e2e_qemu_jit", "fork"}).size(),
            2u);
  // Code in a memfd ("/memfd:jit (deleted)": no file to read it from) is captured as JIT code
  // is: before, it was a gap, and the trace after it was lost up to the next PSB, there the
  // rest of the run (sweep 37b M2).
  // The same for POSIX shared memory (/dev/shm/NAME: a file, but no program's; a review).
  for (const std::string way : {"memfd", "shm"}) {
    std::string way_err, way_insn;
    ExpectDecodedEqualsTruth("jit_" + way, {E2E_PROGRAM_DIR "/e2e_qemu_jit", way}, 0, &way_err, {},
                             &way_insn);
    EXPECT_EQ(way_insn.find("gap"), std::string::npos) << way;
    // No file to identify: nothing to say.
    EXPECT_THAT(way_err, Not(HasSubstr("/memfd:"))) << way;
    EXPECT_THAT(way_err, Not(HasSubstr("/dev/shm"))) << way;
  }
  // The records as perf 6.1 reads them from the export (`perf script
  // --show-text-poke-events`: "PERF_RECORD_TEXT_POKE ADDR old len 0 new len N"), and the export
  // read back decodes alike. perf decodes JIT code from mapped files only (perf inject's, made
  // from a jitdump): the export maps each poke's bytes from a file in its build-id cache, and
  // perf's instructions are then ptdecode's (it failed at every JIT block, 28,153 of 46,607).
  if (access("/usr/bin/perf", X_OK) != 0) return;
  const std::string trace = dir_->File("jit.pt"), data = dir_->File("jit.data");
  ASSERT_EQ(RunCommand({PTDECODE_PATH, "export", trace, "--to", "perf.data", "-o", data}).exit_code,
            0);
  auto perf_insns = RunCommand({"/usr/bin/perf", "--buildid-dir", data + ".debug", "script", "-i",
                                data, "--itrace=i0nse", "-F", "ip"});
  EXPECT_EQ(perf_insns.out.find("error"), std::string::npos) << perf_insns.err;
  std::vector<uint64_t> theirs, ours;
  std::istringstream p(perf_insns.out), o(insn);
  for (std::string line; std::getline(p, line);) {
    if (line.find("error") == std::string::npos) theirs.push_back(std::stoull(line, nullptr, 16));
  }
  for (std::string line; std::getline(o, line);) {
    double time = 0;
    uint64_t tid = 0, ip = 0;
    if (std::sscanf(line.c_str(), "%lf tid %" SCNu64 " %" SCNx64, &time, &tid, &ip) == 3) {
      ours.push_back(ip);
    }
  }
  EXPECT_GT(ours.size(), 40000u);
  EXPECT_EQ(theirs, ours);
  auto r =
      RunCommand({"/usr/bin/perf", "script", "-i", data, "--show-text-poke-events", "--itrace="});
  std::istringstream lines(r.out);
  int pokes = 0;
  for (std::string line; std::getline(lines, line);) {
    uint64_t addr = 0;
    unsigned new_len = 0;
    const size_t at = line.find("PERF_RECORD_TEXT_POKE ");
    if (at == std::string::npos) continue;
    ASSERT_EQ(
        std::sscanf(line.c_str() + at, "PERF_RECORD_TEXT_POKE %" SCNx64 " old len 0 new len %u",
                    &addr, &new_len),
        2)
        << line;
    EXPECT_GT(new_len, 0u);
    EXPECT_NE(insn.find(absl::StrCat(absl::Hex(addr, absl::kZeroPad16), "  [anon]")),
              std::string::npos)
        << line;
    ++pokes;
  }
  EXPECT_GE(pokes, 3) << r.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", trace});
  auto back = RunCommand({PTDECODE_PATH, "stats", data});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out.substr(back.out.find("\n#")), stats.out.substr(stats.out.find("\n#")));
  // Each JIT function is named as its call entered it (sub_ADDRESS) through all its blocks, each
  // captured on its own (sweep 31a F4: every block after the first was "[anon]", 17,190 of
  // 17,370 JIT instructions).
  auto folded = RunCommand({PTDECODE_PATH, "folded", trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, Not(HasSubstr("[anon]")));
  EXPECT_THAT(folded.out, HasSubstr(";sub_"));
}

// JIT code written again over code it wrote before (e2e_qemu_jit rewrite: at the same address;
// rewrite_inside: into the middle of it, sweep 31a F2, unsaid): the decoder has one set of
// bytes per address for the whole run (the last), so it warns that the code there before may
// decode wrongly.
TEST_F(QemuEmulateTest, JitCodeWrittenAgainIsWarnedAbout) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const std::string mode : {"rewrite", "rewrite_inside"}) {
    SCOPED_TRACE(mode);
    Recorded r = Record("jit_" + mode, {E2E_PROGRAM_DIR "/e2e_qemu_jit", mode}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    EXPECT_EQ(r.run.out, "144602\n");  // 144560 + 42
    auto d = RunCommand({PTDECODE_PATH, "stats", r.trace});
    EXPECT_THAT(d.err, HasSubstr("was written again over code written before once (first at 0x"));
  }
}

// A library replaced while the command runs (after the program that mapped it ended, as a
// reinstall would): the recording keeps the identity of the file that was mapped, says the file
// changed, and a decode with the file as it is now warns that it is not the one recorded; with
// --archive its new bytes are not stored as the code that ran (sweep 31a F3: the identity and
// the archive were read at the end, the new library's, and the decode used it without a word:
// names that never ran, calls of 0).
TEST_F(QemuEmulateTest, ALibraryReplacedWhileTheCommandRunsIsSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const bool archive : {false, true}) {
    SCOPED_TRACE(archive ? "--archive" : "");
    const std::string lib = dir_->File("lib.so"), other = dir_->File("other.so");
    std::filesystem::copy_file(PROGRAM_DIR "/libemulate_plugin.so", lib,
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(E2E_PROGRAM_DIR "/libe2e_dl_swap_other.so", other,
                               std::filesystem::copy_options::overwrite_existing);
    Recorded r =
        Record(archive ? "replaced_archive" : "replaced",
               {"/bin/sh", "-c",
                absl::StrCat(E2E_PROGRAM_DIR "/e2e_dl_swap ", lib, " && mv ", other, " ", lib)},
               false, archive ? std::vector<std::string>{"--archive"} : std::vector<std::string>{});
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    EXPECT_THAT(r.run.err, HasSubstr(lib + " changed while the command ran"));
    if (archive) {
      EXPECT_THAT(r.run.err, HasSubstr("its code is not archived"));
    }
    auto d = RunCommand({PTDECODE_PATH, "stats", r.trace});
    EXPECT_THAT(d.err,
                ::testing::ContainsRegex(lib + ": build-id [0-9a-f]+ differs from the recorded"))
        << d.err;
    // Advice that can be followed (sweep 33b L3: "or record with --archive" to a recording
    // made with it).
    if (archive) {
      EXPECT_THAT(d.err, Not(HasSubstr("record with --archive")));
      EXPECT_THAT(d.err, HasSubstr("the recording archived other files, not this one"));
    } else {
      EXPECT_THAT(d.err, HasSubstr("or record with --archive"));
    }
  }
}

// A workload that dies of a signal: ptrecord says so and exits as a shell would (128 + 11).
// The plugin hooks qemu's kill() of itself at a fatal signal, so a thread's trace is whole up
// to where it took the signal: at a system call (the shell's kill of itself) the whole stream,
// and at a fault in user code (e2e_crash's store through a null pointer; in main, and in a
// second thread) up to the start of the block the fault came in, which ptrecord says; the
// ground truth takes that block back too. (Before, such a stream lost up to 20 ms of its end,
// the crash path itself, with a warning.)
TEST_F(QemuEmulateTest, AWorkloadKilledByASignalIsSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  std::string err;
  ExpectDecodedEqualsTruth("killed", {"/bin/sh", "-c", "kill -SEGV $$"}, 139, &err);
  EXPECT_THAT(err, HasSubstr("ptrecord: workload killed by SIGSEGV (exit status 139)"));
  EXPECT_THAT(err, Not(HasSubstr("without its last bytes")));
  for (const bool thread : {false, true}) {
    SCOPED_TRACE(thread ? "in a thread" : "in main");
    std::vector<std::string> crash = {E2E_PROGRAM_DIR "/e2e_crash"};
    if (thread) crash.push_back("thread");
    const PerThread truth =
        ExpectDecodedEqualsTruth(thread ? "crash_thread" : "crash", crash, 139, &err);
    EXPECT_THAT(err, Not(HasSubstr("without its last bytes")));
    EXPECT_THAT(err, ::testing::ContainsRegex("warning: thread [0-9]+ died of SIGSEGV in the block "
                                              "at 0x[0-9a-f]+: its trace ends where that block "
                                              "began"));
    // Without the ground truth (no callback per instruction): the same end, and the count of
    // instructions the container's end gives is the decoded one.
    Recorded r = Record(thread ? "crash_thread_bare" : "crash_bare", crash, /*with_truth=*/false);
    EXPECT_EQ(r.run.exit_code, 139) << r.run.err;
    auto info = RunCommand({PTDECODE_PATH, "info", "--json", r.trace});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    const auto meta = nlohmann::json::parse(info.out);
    const auto totals = nlohmann::json::parse(stats.out)["totals"];
    EXPECT_EQ(totals["instructions"], meta["metadata"]["end"]["instructions"]) << info.out;
    EXPECT_EQ(totals["losses"], 0);
    // (One thread runs alike each time; two do not: pthread_join's waits.)
    if (thread) continue;
    uint64_t in_truth = 0;
    for (const auto& [tid, ips] : truth) in_truth += ips.size();
    EXPECT_EQ(totals["instructions"].get<uint64_t>(), in_truth);
  }
  // A process killed by SIGKILL (no code of qemu's runs) in user code loses the end of its
  // stream: ptrecord warns, in the singular, and the container says so, so that every decode
  // does: a loss of kind "killed" where the stream ends.
  Recorded r =
      Record("sigkill",
             {"/bin/sh", "-c",
              std::string(E2E_PROGRAM_DIR "/e2e_spin & sleep 0.2; kill -KILL $!; wait $!")},
             /*with_truth=*/false);
  EXPECT_EQ(r.run.exit_code, 137) << r.run.err;
  EXPECT_THAT(r.run.err, HasSubstr("warning: 1 stream ends without its last bytes"));
  EXPECT_THAT(r.run.err, HasSubstr("died of a signal in user code"));
  auto info = RunCommand({PTDECODE_PATH, "info", r.trace});
  EXPECT_THAT(info.out, HasSubstr("killed"));
  // Its size is unknown (the trace not flushed), not none (info and stats said "0 B" lost).
  EXPECT_THAT(info.out, HasSubstr("killed x1, size unknown"));
  EXPECT_THAT(info.out, HasSubstr("in total (+ 1 of unknown size)"));
  auto stats = RunCommand({PTDECODE_PATH, "stats", r.trace});
  EXPECT_THAT(stats.out, HasSubstr("1 loss point, 0 bytes lost (+ 1 of unknown size)\n"));
  // How much the loss took, which its size does not say (sweep 26 N1: a SIGKILL in a loop
  // that writes no packet took the whole loop, 94% of the run): the recorder's count against
  // the trace's.
  EXPECT_THAT(stats.err, ::testing::ContainsRegex("the recorder counted [0-9]+ instructions and "
                                                  "the trace holds [0-9]+"));
  stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  EXPECT_THAT(stats.out, HasSubstr("\"unknown_size_losses\": 1"));
}

// A pipeline's writer killed by SIGPIPE in write(2) (`head` exits first), a program killed
// by SIGTERM while it sleeps (timeout) and one that calls abort() (SIGABRT at the return of
// the tgkill that raises it): every stream whole, as the ground truth (up to 20 ms of each was
// missing, with a warning, before the plugin put its trace into the ring at each system call),
// and nothing said lost: sweep 27 S1, a signal delivered at a system call's return was taken
// for one in the next block ("died of SIGABRT in the block at ...: its trace ends where that
// block began"), the recorder's count short by the call's block, and every decode warned that
// it found more instructions than the recorder counted.
TEST_F(QemuEmulateTest, ProcessesKilledInASystemCallKeepTheirWholeTrace) {
  PTKIT_SKIP_WITHOUT_QEMU();
  std::string err;
  EXPECT_EQ(
      ExpectDecodedEqualsTruth("sigpipe", {"/bin/sh", "-c", "seq 1 200000 | head -1"}, 0, &err)
          .size(),
      3u);
  EXPECT_THAT(err, Not(HasSubstr("without")));
  EXPECT_THAT(err, Not(HasSubstr("died of")));
  EXPECT_EQ(
      ExpectDecodedEqualsTruth("sigterm", {"/usr/bin/timeout", "0.3", "/bin/sleep", "2"}, 124, &err)
          .size(),
      2u);
  EXPECT_THAT(err, Not(HasSubstr("without")));
  const std::vector<std::string> abort = {E2E_PROGRAM_DIR "/e2e_crash", "abort"};
  EXPECT_EQ(ExpectDecodedEqualsTruth("abort", abort, 128 + SIGABRT, &err).size(), 1u);
  EXPECT_THAT(err, HasSubstr("workload killed by SIGABRT"));
  EXPECT_THAT(err, Not(HasSubstr("died of")));
  // Without the ground truth (no callback per instruction): the recorder's count is the
  // decode's, and no decode says otherwise.
  Recorded r = Record("abort_bare", abort, /*with_truth=*/false);
  EXPECT_EQ(r.run.exit_code, 128 + SIGABRT) << r.run.err;
  EXPECT_THAT(r.run.err, Not(HasSubstr("died of")));
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", r.trace});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["totals"]["instructions"],
            nlohmann::json::parse(info.out)["metadata"]["end"]["instructions"]);
  EXPECT_THAT(stats.err, Not(HasSubstr("the recorder counted")));
}

// COMMAND itself a #! script: qemu-x86_64 loads only ELF programs (given a script it exited 1
// without a word and ptrecord said "qemu-x86_64 ran no guest code"). It runs as the kernel runs
// it: the interpreter, with the kernel's argv (the same output as natively) and COMM (the
// script's name), decoded to the ground truth. A script whose interpreter is missing is
// refused before qemu runs, saying why (emulate_cli_test's
// EveryRecorderRunsWhatExecvpRunsAndFailsAsEnvDoes has the other cases).
TEST_F(QemuEmulateTest, AScriptAsTheCommandRunsUnderItsInterpreterAsNatively) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_exec";
  const std::string script = WriteExecutable("my_script", "#!" + program + " args  one two \t\n");
  auto native = RunCommand({script, "x", "y"});
  ASSERT_THAT(native.out, HasSubstr("argv[1]=args  one two\nargv[2]=" + script + "\n"));
  std::string err, out, insn;
  EXPECT_EQ(ExpectDecodedEqualsTruth("script", {script, "x", "y"}, native.exit_code, &err, {},
                                     &insn, &out)
                .size(),
            1u);
  EXPECT_EQ(out, native.out);
  EXPECT_THAT(err, Not(HasSubstr("warning")));
  EXPECT_THAT(insn, HasSubstr(" (my_script), "));  // the stream's COMM, as the kernel's

  const std::string missing = WriteExecutable("missing", "#!/nonexistent/interpreter\n");
  Recorded r = Record("missing", {missing}, /*with_truth=*/false);
  EXPECT_EQ(r.run.exit_code, 127);
  EXPECT_THAT(r.run.err, HasSubstr(missing + ": cannot execute: its interpreter"));
  EXPECT_FALSE(std::filesystem::exists(r.trace));
}

// The lines of `text`, without those that start with `drop` (when given).
std::vector<std::string> TextLines(const std::string& text, const std::string& drop = "") {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (drop.empty() || !line.starts_with(drop)) lines.push_back(line);
  }
  return lines;
}

// execveat is followed as execve is: relative to a directory's descriptor, relative to the
// working directory, a descriptor's own file (AT_EMPTY_PATH: fexecve, also of an O_PATH
// descriptor), through a symlink; each child's stream decodes to the ground truth through the
// program it exec'd, and the sideband has the kernel's COMM for each exec (as the program
// itself reads it natively from /proc/self/comm: the symlink's name, the descriptor's file's
// name). What the kernel refuses (an empty path without AT_EMPTY_PATH, no such name, a bad
// descriptor, bad flags, a file as the directory, a symlink with AT_SYMLINK_NOFOLLOW) returns
// the kernel's errno as natively, or ENOSYS: qemu-user 7.2 has no execveat of its own (8.1
// has), and the plugin cannot change a system call's result.
TEST_F(QemuEmulateTest, ExecveatIsFollowedAsExecveIs) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_exec";
  const std::string dir = dir_->File("bin");
  std::filesystem::create_directory(dir);
  std::filesystem::copy_file(program, dir + "/prog");
  std::filesystem::create_symlink("prog", dir + "/link");
  auto native = RunCommand({"/usr/bin/env", "PRINT_COMM=1", program, "at", dir, "prog"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  std::vector<std::string> comms;
  for (const std::string& line : TextLines(native.out)) {
    if (line.starts_with("comm=")) comms.push_back(line.substr(5));
  }
  ASSERT_EQ(comms, (std::vector<std::string>{"prog", "prog", "prog", "prog", "prog", "link"}));
  std::string err, out;
  // The parent and 12 children, 6 of which exec.
  EXPECT_EQ(ExpectDecodedEqualsTruth("at", {program, "at", dir, "prog"}, 0, &err, {}, nullptr, &out)
                .size(),
            13u);
  EXPECT_THAT(err, Not(HasSubstr("warning")));
  const std::vector<std::string> want = TextLines(native.out, "comm="), got = TextLines(out);
  ASSERT_EQ(got.size(), want.size()) << out;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string name = want[i].substr(0, want[i].find(':') + 1);
    if (got[i] != name + " Function not implemented") {
      EXPECT_EQ(got[i], want[i]);
    }
  }
  EXPECT_THAT(out, HasSubstr("args-fexecve: exit 5\n"));
  EXPECT_THAT(out, HasSubstr("args-link: exit 5\n"));
  const std::vector<std::string> sideband = PerfSideband(dir_->File("at.pt"));
  if (sideband.empty()) return;  // no perf here
  std::vector<std::string> exec_comms;
  for (const std::string& line : sideband) {
    if (!line.starts_with("PERF_RECORD_COMM exec: ")) continue;
    const std::string name = line.substr(23, line.rfind(':') - 23);
    if (name != "e2e_qemu_exec") exec_comms.push_back(name);
  }
  EXPECT_EQ(exec_comms, comms);
}

// fexecve(3) of a memfd (glibc: execveat, then execve of /proc/self/fd/N): a file without a
// name, which a new qemu-x86_64 could not open after the exec. It runs natively, as it would
// under qemu-user alone (the same output), the trace ends at that exec, and ptrecord says so.
TEST_F(QemuEmulateTest, AnExecOfAFileWithoutANameRunsNativelyAndSaysSo) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_exec";
  auto native = RunCommand({program, "memfd", program});
  ASSERT_EQ(native.exit_code, 5) << native.err;
  Recorded rec = Record("memfd", {program, "memfd", program}, /*with_truth=*/false);
  EXPECT_EQ(rec.run.exit_code, 5) << rec.run.err;
  EXPECT_EQ(rec.run.out, native.out);
  EXPECT_THAT(rec.run.err, HasSubstr("the trace ends at execve (1 time)"));
  EXPECT_THAT(rec.run.err, HasSubstr("a file without a name"));
}

// ldd (a bash script) runs each loader it knows with --version and --verify: Debian's i386
// one (libc6-i386) is no program qemu-x86_64 runs, so those two execs run natively and the
// warning names it (it named no program: which of ldd's five execs was it?).
TEST_F(QemuEmulateTest, AnExecNotFollowedIsNamed) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string i386 = "/lib/ld-linux.so.2";
  char header[20] = {};
  std::ifstream(i386, std::ios::binary).read(header, sizeof(header));
  if (std::memcmp(header, "\177ELF\1", 5) != 0 || header[18] != 3 /* EM_386 */) {
    GTEST_SKIP() << i386 << " is no i386 program here (no libc6-i386)";
  }
  Recorded rec = Record("ldd", {"/usr/bin/ldd", "/bin/true"}, /*with_truth=*/false);
  EXPECT_EQ(rec.run.exit_code, 0) << rec.run.err;
  EXPECT_THAT(rec.run.out, HasSubstr("libc.so.6 => "));
  EXPECT_THAT(rec.run.err,
              HasSubstr("the trace ends at execve of " + i386 + " (2 times, the first named)"));
  // The i386 program itself: refused, pointing to the backend that records it (sweep 40b M4:
  // only "without --emulate where the CPU has Intel PT").
  auto direct = RunCommand(
      {PTRECORD_PATH, "--emulate=qemu", "-o", dir_->File("i386.pt"), "--", i386, "--version"});
  EXPECT_EQ(direct.exit_code, 126);
  EXPECT_THAT(direct.err, HasSubstr("record an i386 program with --emulate=step"));
}

// A program that closes every descriptor before it execs takes the plugin's descriptor of the
// ring with them: the plugin opens the ring again (ptrecord's descriptor) and follows the exec,
// so the new program (emulate_fib, exit 3) is traced. (It ran natively, with a warning, before.)
TEST_F(QemuEmulateTest, AnExecAfterClosingEveryDescriptorIsFollowed) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded rec =
      Record("closed", {E2E_PROGRAM_DIR "/e2e_qemu_exec", "closed", ::ptkit::testing::kFib},
             /*with_truth=*/false);
  EXPECT_EQ(rec.run.exit_code, 3) << rec.run.err;
  EXPECT_THAT(rec.run.err, Not(HasSubstr("the trace ends at execve")));
  auto d = RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  uint64_t fib_calls = 0;
  const nlohmann::json report = nlohmann::json::parse(d.out);
  for (const auto& f : report["functions"]) {
    if (f["function"] == "fib") fib_calls += f["calls"].get<uint64_t>();
  }
  EXPECT_EQ(fib_calls, 100u);  // fib(0) .. fib(7), recursively
}

// A shell forks and execs dynamic programs (ld.so, libc) and execs one itself: every stream
// decodes to the ground truth through each program (~0.9 M instructions in the exact mode).
// Long: PTKIT_QEMU_LONG=1.
TEST_F(QemuEmulateTest, AShellExecingDynamicProgramsDecodesToTheGroundTruthLong) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (std::getenv("PTKIT_QEMU_LONG") == nullptr) GTEST_SKIP() << "long: set PTKIT_QEMU_LONG=1";
  std::string err, out;
  EXPECT_EQ(ExpectDecodedEqualsTruth(
                "sh", {"/bin/sh", "-c", "/bin/true; /bin/echo hi; exec /bin/echo bye"}, 0, &err, {},
                nullptr, &out)
                .size(),
            3u);
  EXPECT_EQ(out, "hi\nbye\n");
  EXPECT_THAT(err, Not(HasSubstr("warning")));
}

TEST_F(QemuEmulateTest, GzipOfAFileDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string input = dir_->File("input.txt");
  {
    std::ofstream out(input);
    for (int i = 0; i < 20; ++i) out << "line " << i << " of a small file for gzip\n";
  }
  ExpectDecodedEqualsTruth("gzip", {"/bin/gzip", "-c", "-9", input});
}

// Real interpreters from Debian under QEMU: the program's own output is right, and the trace
// decodes without an error, gap or loss to exactly the instructions the plugin counted, with
// the interpreter's main loop among the functions. (Instruction by instruction against the
// ground truth: the ...Long tests below, ~25 M instructions in the slow exact mode.)
class QemuInterpreterTest : public QemuEmulateTest {
 protected:
  void ExpectCountDecoded(const std::string& name, const std::vector<std::string>& command,
                          const std::string& expected_out, const std::string& main_loop) {
    Recorded rec = Record(name, command, /*with_truth=*/false);
    ASSERT_EQ(rec.run.exit_code, 0) << rec.run.err;
    EXPECT_EQ(rec.run.out, expected_out);
    const uint64_t counted = CountedInstructions(rec.run.err);
    EXPECT_GT(counted, 1000000u) << rec.run.err;
    auto r = RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto doc = nlohmann::json::parse(r.out);
    const auto& totals = doc["totals"];
    EXPECT_EQ(totals["instructions"].get<uint64_t>(), counted);
    EXPECT_EQ(totals["errors"].get<uint64_t>(), 0u);
    EXPECT_EQ(totals["gaps"].get<uint64_t>(), 0u);
    EXPECT_EQ(totals["losses"].get<uint64_t>(), 0u);
    uint64_t in_main_loop = 0;
    for (const auto& row : doc["functions"]) {
      if (row["function"].get<std::string>() == main_loop)
        in_main_loop += row["self"].get<uint64_t>();
    }
    EXPECT_GT(in_main_loop, counted / 20) << main_loop;
  }
};

constexpr char kPythonLoop[] = "s = 0\nfor i in range(3000): s += i * i\nprint(s)";

TEST_F(QemuInterpreterTest, APythonLoopDecodesToTheCountThePluginCounted) {
  PTKIT_SKIP_WITHOUT_QEMU();
  ExpectCountDecoded("python", {"/usr/bin/python3", "-S", "-c", kPythonLoop}, "8995500500\n",
                     "_PyEval_EvalFrameDefault");
}

TEST_F(QemuInterpreterTest, ASqliteQueryDecodesToTheCountThePluginCounted) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (access("/usr/bin/sqlite3", X_OK) != 0) GTEST_SKIP() << "sqlite3 is not installed";
  ExpectCountDecoded("sqlite",
                     {"/usr/bin/sqlite3", ":memory:",
                      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3000) "
                      "SELECT sum(x) FROM c;"},
                     "4501500\n", "sqlite3VdbeExec");
}

// Long (25 M instructions in the exact mode: 10-65 s here; sqlite3's fewer): PTKIT_QEMU_LONG=1
// runs them, e.g.
//   PTKIT_QEMU_LONG=1 build/ci/tests/e2e/qemu_emulate_cli_test --gtest_filter=*Long
TEST_F(QemuInterpreterTest, APythonLoopDecodesToTheGroundTruthLong) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (std::getenv("PTKIT_QEMU_LONG") == nullptr) GTEST_SKIP() << "long: set PTKIT_QEMU_LONG=1";
  ExpectDecodedEqualsTruth("python_truth", {"/usr/bin/python3", "-S", "-c", kPythonLoop});
}

TEST_F(QemuInterpreterTest, ASqliteQueryDecodesToTheGroundTruthLong) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (std::getenv("PTKIT_QEMU_LONG") == nullptr) GTEST_SKIP() << "long: set PTKIT_QEMU_LONG=1";
  if (access("/usr/bin/sqlite3", X_OK) != 0) GTEST_SKIP() << "sqlite3 is not installed";
  std::string out;
  ExpectDecodedEqualsTruth("sqlite_truth",
                           {"/usr/bin/sqlite3", ":memory:",
                            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT "
                            "3000) SELECT sum(x) FROM c;"},
                           0, nullptr, {}, nullptr, &out);
  EXPECT_EQ(out, "4501500\n");
}

// Both backends on a non-PIE program: the flow through the program's own functions is the
// same (libc's differs: glibc picks its code paths from QEMU's CPUID).
TEST_F(QemuEmulateTest, StepAndQemuRunTheProgramsOwnCodeAlike) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  Recorded qemu = Record("fib_qemu", {fib});
  ASSERT_EQ(qemu.run.exit_code, 0) << qemu.run.err;
  const std::string step_truth = dir_->File("fib_step.truth");
  // Filtered to those functions: the step backend runs at full speed elsewhere.
  auto step = RunCommand({PTRECORD_PATH, "--emulate=step", "--filter",
                          "filter main @ " + fib + ",filter fib @ " + fib, "--ground-truth",
                          step_truth, "-o", dir_->File("fib_step.pt"), "--", fib});
  if (step.exit_code != 0 && step.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_EQ(step.exit_code, 0) << step.err;
  std::vector<std::pair<uint64_t, uint64_t>> own = {::ptkit::testing::NmRange(fib, "main"),
                                                    ::ptkit::testing::NmRange(fib, "fib")};
  ASSERT_NE(own[0].second, 0u);
  ASSERT_NE(own[1].second, 0u);
  auto own_code = [&](const PerThread& truth) {
    std::vector<uint64_t> ips;
    for (uint64_t ip : truth.begin()->second) {
      for (const auto& [begin, end] : own) {
        if (ip >= begin && ip < end) ips.push_back(ip);
      }
    }
    return ips;
  };
  const std::vector<uint64_t> q = own_code(ReadTruth(qemu.truth));
  const std::vector<uint64_t> s = own_code(ReadTruth(step_truth));
  EXPECT_GT(q.size(), 500u);
  EXPECT_TRUE(q == s) << q.size() << " vs " << s.size() << " instructions in main and fib";
}

// SIGINT stops the recording: the plugin ends every stream where the program is, and the
// trace decodes to exactly the ground truth up to there.
TEST_F(QemuEmulateTest, SigintEndsEveryStreamExactly) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string trace = dir_->File("spin.pt"), truth = dir_->File("spin.truth");
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(PTRECORD_PATH, PTRECORD_PATH, "--emulate=qemu", "--ground-truth", truth.c_str(), "-o",
          trace.c_str(), "--", E2E_PROGRAM_DIR "/e2e_spin", static_cast<char*>(nullptr));
    _exit(126);
  }
  usleep(250000);
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  auto d = RunCommand({PTDECODE_PATH, "insn", trace});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  PerThread want = ReadTruth(truth), got = ParseInsn(d.out);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_GT(want.begin()->second.size(), 1000u);
  EXPECT_EQ(got.begin()->second.size(), want.begin()->second.size());
  EXPECT_TRUE(got == want);
}

// The property `ptdecode diff` needs: the same program gives the same counts.
TEST_F(QemuEmulateTest, TwoRunsGiveTheSamePerFunctionCounts) {
  PTKIT_SKIP_WITHOUT_QEMU();
  std::string stats[2];
  for (int i = 0; i < 2; ++i) {
    Recorded rec = Record("hot_cold" + std::to_string(i), {PROGRAM_DIR "/emulate_hot_cold"},
                          /*with_truth=*/false);
    ASSERT_EQ(rec.run.exit_code, 0) << rec.run.err;
    auto r = RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto doc = nlohmann::json::parse(r.out);
    std::map<std::string, uint64_t> counts;
    for (const auto& row : doc["functions"]) {
      counts[row["function"].get<std::string>()] += row["self"].get<uint64_t>();
    }
    ASSERT_GT(counts.size(), 3u) << r.out;
    stats[i] = nlohmann::json(counts).dump();
  }
  EXPECT_EQ(stats[0], stats[1]);
}

// --max-steps under QEMU counts what the step backend counts: instructions retired over all
// threads and processes (stepper_test: exactly N there). QEMU stops at a block boundary, at
// the first block of any thread that would take the total past N: at most N ran, and fewer
// than one block (at most 512 instructions, TCG_MAX_INSNS) short of it. Every stream ends
// exactly (the decoded instructions equal the ground truth), every process is killed and the
// container says why it ended. Threads in parallel, and a fork child that execs (where the
// limit was once applied per process: 50,448 of 70,000).
TEST_F(QemuEmulateTest, MaxStepsEndsEveryStreamAtTheLimit) {
  PTKIT_SKIP_WITHOUT_QEMU();
  struct Case {
    std::string name;
    std::vector<std::string> command;
    uint64_t limit;
    size_t min_streams, max_streams;  // a worker thread may not have run yet at the limit
  };
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  for (const Case& c : std::vector<Case>{
           {"threads_limit", {PROGRAM_DIR "/emulate_threads"}, 35000, 2, 3},  // of ~38,000
           {"fork_exec_limit", {PROGRAM_DIR "/emulate_fork_exec", fib, "x"}, 70000, 2, 2}}) {
    std::string err;
    PerThread truth = ExpectDecodedEqualsTruth(c.name, c.command, 128 + SIGKILL, &err,
                                               {"--max-steps", std::to_string(c.limit)});
    EXPECT_GE(truth.size(), c.min_streams) << c.name;
    EXPECT_LE(truth.size(), c.max_streams) << c.name;
    uint64_t total = 0;
    for (const auto& [tid, ips] : truth) total += ips.size();
    EXPECT_LE(total, c.limit) << c.name;
    EXPECT_LT(c.limit - total, 512u) << c.name;
    EXPECT_EQ(CountedInstructions(err), total) << err;
    EXPECT_THAT(err, HasSubstr("stopped at --max-steps"));
    EXPECT_THAT(err, Not(HasSubstr("warning")));
    auto info = RunCommand({PTDECODE_PATH, "info", dir_->File(c.name + ".pt")});
    EXPECT_THAT(info.out, HasSubstr("\"stopped_by\":\"--max-steps\""));
  }
}

// What the qemu backend cannot do is a usage error naming the option and the step backend.
TEST_F(QemuEmulateTest, BtsNamesTheStepBackend) {
  PTKIT_SKIP_WITHOUT_QEMU();
  auto r = RunCommand(
      {PTRECORD_PATH, "--emulate=qemu", "-o", dir_->File("x.pt"), "--bts", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("BTS"));
  EXPECT_THAT(r.err, HasSubstr("--emulate=step"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_->File("x.pt")));
}

// --filter as IP filtering, as the step backend does it: a region of one function. The trace
// decodes to the plugin's ground truth, all of it inside the function (nm -S), and to the
// instructions the step backend records with the same filter (fib is static and non-PIE: the
// same code at the same addresses; main's calls to fib and its return to libc leave it).
TEST_F(QemuEmulateTest, FilterTracesOnlyItsRegionAsTheStepBackend) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  for (const std::string function : {"fib", "main"}) {
    const std::string filter = absl::StrCat("filter ", function, " @ ", fib);
    std::string insn;
    const PerThread truth = ExpectDecodedEqualsTruth("filter_" + function, {fib}, 0, nullptr,
                                                     {"--filter", filter}, &insn);
    ASSERT_EQ(truth.size(), 1u) << function;
    const std::vector<uint64_t>& ips = truth.begin()->second;
    const auto [begin, end] = ::ptkit::testing::NmRange(fib, function);
    ASSERT_NE(end, 0u) << function;
    EXPECT_GT(ips.size(), 10u) << function;
    const PerThread decoded = ParseInsn(insn);
    for (uint64_t ip : decoded.begin()->second) {
      ASSERT_TRUE(ip >= begin && ip < end) << function << ": decoded 0x" << std::hex << ip;
    }
    const std::string step_truth = dir_->File("filter_step_" + function + ".truth");
    auto step =
        RunCommand({PTRECORD_PATH, "--emulate=step", "--filter", filter, "--ground-truth",
                    step_truth, "-o", dir_->File("filter_step_" + function + ".pt"), "--", fib});
    if (step.exit_code != 0 && step.err.find("Operation not permitted") != std::string::npos) {
      GTEST_SKIP() << "ptrace or perf_event_open denied";
    }
    ASSERT_EQ(step.exit_code, 0) << step.err;
    const PerThread s = ReadTruth(step_truth);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_TRUE(s.begin()->second == ips) << function << ": " << s.begin()->second.size()
                                          << " instructions (step) vs " << ips.size() << " (qemu)";
  }
}

// A daemon (fork, setsid, fork) outlives the command: ptrecord waits for it, as --emulate=step
// does, and its trace is whole (it was cut where the command exited, silently, and the middle
// process's ordinary exit was a loss "killed").
TEST_F(QemuEmulateTest, ADaemonStartedByTheCommandIsTracedToItsEnd) {
  const std::string done = dir_->File("daemon.done");
  std::string err;
  const PerThread truth =
      ExpectDecodedEqualsTruth("daemon", {E2E_PROGRAM_DIR "/e2e_daemon", done}, 0, &err);
  EXPECT_EQ(truth.size(), 3u);
  // Written by the daemon at its end, before ptrecord returned.
  EXPECT_EQ(testing::ReadWholeFile<std::string>(done), "1249975000\n");
  EXPECT_NE(err.find("the command exited; waiting for "), std::string::npos) << err;
  auto info = RunCommand({PTDECODE_PATH, "info", dir_->File("daemon.pt")});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("loss:        none recorded"), std::string::npos) << info.out;
}

// A signal's handler runs in a frame of its own, on top of the frames it interrupted, as gdb
// shows it: its calls nest under it (not under the interrupted function), and its inclusive count
// is what ran from its entry until it returned to the signal's restorer (the ground truth).
// More processes than the ring has streams (64): those after are not traced, and every decode
// says so (sweep 26 N9: only ptrecord's stderr did; the report said "losses and errors:
// none").
TEST_F(QemuEmulateTest, ThreadsTheRingCouldNotTraceAreSaidByEveryDecode) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("many", {"/bin/sh", "-c", "for i in $(seq 70); do /bin/true; done"},
                      /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_THAT(r.run.err, ::testing::ContainsRegex("warning: [0-9]+ guest threads were not traced"));
  auto stats = RunCommand({PTDECODE_PATH, "stats", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.err, ::testing::ContainsRegex(
                             "recorded with a warning: [0-9]+ guest threads were not traced"));
  auto report = RunCommand({PTDECODE_PATH, r.trace});
  EXPECT_THAT(report.out, HasSubstr("# warning: "));
  EXPECT_THAT(report.out, HasSubstr("losses and errors: none; 1 warning (above)"));
  auto json = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  EXPECT_THAT(json.out, HasSubstr("guest threads were not traced"));
}

// A thread that goes round a loop of direct jumps only until its process exits (sweep 26 N4):
// the trace has no packet for the rounds, so the decode follows the loop once. The recorder
// counted every round: every decode says how many instructions the trace cannot show (it said
// nothing, with "0 loss points").
TEST_F(QemuEmulateTest, InstructionsTheTraceCannotShowAreSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("jump_loop", {E2E_PROGRAM_DIR "/e2e_jump_loop"}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.err, ::testing::ContainsRegex("the recorder counted [0-9]+ instructions and "
                                                  "the trace holds [0-9]+: [0-9]+ ran where the "
                                                  "trace cannot show them"));
  // info --decode too, in its summary and its JSON (sweep 29c F6).
  auto info = RunCommand({PTDECODE_PATH, "info", "--decode", r.trace});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, ::testing::ContainsRegex("\n  warning: [^\n]*the recorder counted [0-9]+ "
                                                 "instructions and the trace holds"));
  auto json = RunCommand({PTDECODE_PATH, "info", "--decode", "--json", r.trace});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(nlohmann::json::parse(json.out)["decode"]["warnings"].dump(),
              HasSubstr("the recorder counted"));
  // And a recording whose count the trace holds says nothing.
  Recorded fib = Record("fib_count", {::ptkit::testing::kFib}, /*with_truth=*/false);
  stats = RunCommand({PTDECODE_PATH, "stats", fib.trace});
  EXPECT_EQ(stats.err, "");
}

// Two static functions of one name in two sources (e2e_same_name): two rows of stats, each
// with its own calls (10 and 3), as perf report shows them (sweep 26 N8: one row of 13).
// nm gives their addresses.
TEST_F(QemuEmulateTest, FunctionsOfOneNameInAFileAreRowsOfTheirOwn) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string prog = E2E_PROGRAM_DIR "/e2e_same_name";
  Recorded r = Record("same_name", {prog}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto nm = RunCommand({"/usr/bin/nm", prog});
  std::set<uint64_t> helpers;
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.ends_with(" t helper")) helpers.insert(std::stoull(line, nullptr, 16));
  }
  ASSERT_EQ(helpers.size(), 2u) << nm.out;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  std::map<uint64_t, uint64_t> calls;  // address -> calls
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& f : report["functions"]) {
    if (f["function"] == "helper") {
      calls[std::stoull(f["address"].get<std::string>(), nullptr, 16)] +=
          f["calls"].get<uint64_t>();
    }
  }
  EXPECT_EQ(calls, (std::map<uint64_t, uint64_t>{{*helpers.begin(), 10}, {*helpers.rbegin(), 3}}));
}

// Signals at a callee's first instruction (right after the call), at a function's entry a
// tail call jumps to, and back to back at a handler's rt_sigreturn (e2e_signal_tail): every
// handler runs in a frame of its own and every interrupted function resumes in its own, so the
// calls are the program's: t1 called 2,000,000 times, t2 and t3 entered by its tail calls, the
// handler as many times as it ran (its calls of in_h, which the program prints). (Sweep 26
// N3: an interrupt at a call's target was taken for a call into untraced code, the handler for
// a callback from it, and a resumption at a function's entry after back-to-back signals for
// another handler: calls of t2 and t3, 275 calls of t1 too many, the handler's missing.)
TEST_F(QemuEmulateTest, SignalsAtCallTargetsAndBackToBackKeepTheCalls) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("signal_tail", {E2E_PROGRAM_DIR "/e2e_signal_tail"}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const uint64_t ticks = std::stoull(r.run.out);
  EXPECT_GT(ticks, 10u);
  std::string serial;
  for (const char* jobs : {"1", "2"}) {
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", "-j", jobs, r.trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    if (serial.empty()) serial = stats.out;
    EXPECT_EQ(stats.out, serial) << "-j " << jobs;
  }
  std::map<std::string, uint64_t> calls;
  const nlohmann::json report = nlohmann::json::parse(serial);
  for (const auto& f : report["functions"]) calls[f["function"]] += f["calls"].get<uint64_t>();
  EXPECT_EQ(calls["t1"], 2000000u);
  // t2 and t3 are entered by tail calls (jumps to their first instruction), each counted as a
  // call, also where a signal came between the jump and the function's first instruction (the
  // frame went on unrenamed after the handler: 196 entries of t2 uncounted).
  EXPECT_EQ(calls["t2"], 2000000u);
  EXPECT_EQ(calls["t3"], 2000000u);
  EXPECT_EQ(calls["on_alarm"], ticks);
  EXPECT_EQ(calls["in_h"], ticks);
}

// Signals that come after a conditional branch while another such signal waits for its
// handler's rt_sigreturn (which tells where the branch went): one while a handler runs
// (SA_NODEFER), or after a handler left by siglongjmp (it never returns). Sweep 30c F1: the
// plugin failed the whole recording at the second (exit 1, no footer, the rest of the trace
// lost). Now each waits in turn; one whose handler never returns is given up, its branch (one
// instruction) missing from the trace and counted. The decode is the ground truth less those,
// with no error, and the handler's calls are the program's own count.
TEST_F(QemuEmulateTest, SignalsWhileAnotherWaitsForItsFrameAreRecorded) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_signal_nested";
  for (const auto& [mode, handler] :
       {std::pair<std::string, std::string>{"longjmp", "leaving_handler"},
        {"nested", "nested_handler"}}) {
    SCOPED_TRACE(mode);
    Recorded r = Record(mode, {program, mode, mode == "longjmp" ? "3" : "20"}, true);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    int handlers = 0;
    ASSERT_EQ(std::sscanf(r.run.out.c_str(), "handlers=%d", &handlers), 1) << r.run.out;
    uint64_t unresolved = 0;
    if (const size_t at = r.run.err.find(" signals came right after a branch");
        at != std::string::npos) {
      const size_t from = r.run.err.rfind(' ', at - 1) + 1;
      unresolved = std::stoull(r.run.err.substr(from, at - from));
    }
    if (mode == "longjmp") {
      EXPECT_EQ(unresolved, 3u) << r.run.err;
    }
    auto d = RunCommand({PTDECODE_PATH, "insn", r.trace});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(d.out.find("[error"), std::string::npos);
    PerThread truth = ReadTruth(r.truth);
    PerThread got = ParseInsn(d.out);
    ASSERT_EQ(truth.size(), 1u);
    const std::vector<uint64_t>& all = truth.begin()->second;
    const std::vector<uint64_t>& decoded = got[truth.begin()->first];
    // The decode is the ground truth less at most `unresolved` instructions.
    size_t i = 0, skipped = 0;
    for (uint64_t ip : decoded) {
      while (i < all.size() && all[i] != ip) ++i, ++skipped;
      ASSERT_LT(i, all.size()) << "decoded 0x" << std::hex << ip << " is not in the truth";
      ++i;
    }
    skipped += all.size() - i;
    EXPECT_LE(skipped, unresolved) << all.size() << " " << decoded.size();
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    uint64_t calls = 0;
    const nlohmann::json report = nlohmann::json::parse(stats.out);
    for (const auto& f : report["functions"]) {
      if (f["function"] == handler) calls = f["calls"].get<uint64_t>();
    }
    EXPECT_EQ(calls, static_cast<uint64_t>(handlers));
  }
}

// `ptdecode stats --json OPTIONS trace`'s report (no function when it fails).
nlohmann::json StatsReport(const std::string& trace, const std::vector<std::string>& options) {
  std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--json"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(trace);
  auto stats = RunCommand(argv);
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  return stats.exit_code == 0 ? nlohmann::json::parse(stats.out)
                              : nlohmann::json{{"functions", nlohmann::json::array()}};
}

// The names nm -C gives the functions of `program`, by the names a stripped copy of it (the
// same code at the same addresses) has in ptdecode's stacks: "sub_1290" -> "parse(int)".
std::map<std::string, std::string> SubNames(const std::string& program) {
  std::map<std::string, std::string> names;
  std::istringstream lines(RunCommand({"/usr/bin/nm", "-C", program}).out);
  for (std::string line; std::getline(lines, line);) {
    // "0000000000001290 t (anonymous namespace)::parse(int)"
    if (line.size() < 20 || line[16] != ' ' ||
        std::string("tTwW").find(line[17]) == std::string::npos) {
      continue;
    }
    const size_t digits = line.find_first_not_of('0');
    if (digits >= 16) continue;
    names.emplace("sub_" + line.substr(digits, 16 - digits), line.substr(19));
  }
  return names;
}

// `stack` (folded, ';' between frames) with each frame named sub_ADDR as `names` names it.
std::string NameSubs(const std::string& stack, const std::map<std::string, std::string>& names) {
  if (names.empty()) return stack;
  std::vector<std::string> frames = absl::StrSplit(stack, ';');
  for (std::string& frame : frames) {
    if (auto it = names.find(frame); it != names.end()) frame = it->second;
  }
  return absl::StrJoin(frames, ";");
}

// A static signal handler of a stripped program (no symbol) runs in a frame of its own, named
// as a call to it is, on top of the frames it interrupted, which it leaves as they were (sweep
// 35a F1: it got no frame, and its return to the restorer popped every frame below: the rest
// of the thread ran under roots "__restore_rt", "main"). At a system call (SIGCHLD in waitpid)
// and asynchronously (SIGALRM in spin). Names by the unstripped build's symbols (the same code
// at the same addresses); each handler entered as often as the ground truth enters it. And two
// signals pending at once: the kernel delivers the second at the first's rt_sigreturn (a review:
// taken for that handler's return, every frame popped again).
TEST_F(QemuEmulateTest, AStrippedProgramsStaticHandlerRunsOnTheFramesItInterrupted) {
  const std::string program = E2E_PROGRAM_DIR "/e2e_signal_stripped";
  const auto names = SubNames(E2E_PROGRAM_DIR "/e2e_signal_unstripped");
  for (const std::string mode : {"wait", "alarm", "pending"}) {
    SCOPED_TRACE(mode);
    const std::string handler = mode == "wait" ? "onchld" : mode == "alarm" ? "onalrm" : "onusr1";
    Recorded r = Record("stripped_" + mode, {program, mode});
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    const PerThread truth = ReadTruth(r.truth);
    ASSERT_FALSE(truth.empty());
    // The parent's (the children of `wait` start inside main: their streams begin there).
    const std::string parent = std::to_string(FirstTruthTid(r.truth));
    auto folded = RunCommand({PTDECODE_PATH, "folded", "--tid", parent, r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    uint64_t in_handler = 0, in_work = 0;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      const std::string stack = NameSubs(line.substr(0, line.rfind(' ')), names);
      const std::string root = stack.substr(0, stack.find(';'));
      EXPECT_TRUE(root != "__restore_rt" && root != "main" && root != handler &&
                  root != "__libc_start_call_main" && root != "exit")
          << line;
      if (stack.find(";" + handler) != std::string::npos) {
        ++in_handler;
        const std::string under = mode == "wait" ? "__libc_start_call_main;main;waitkid;"
                                                 : "__libc_start_call_main;main;";
        // (The second one at the first's rt_sigreturn: on the frames it interrupted too.)
        if (mode == "pending") {
          EXPECT_THAT(stack, HasSubstr("main;__GI___sigprocmask;"));
        }
        EXPECT_THAT(stack, HasSubstr(under)) << line;
      }
      const std::string top = stack.substr(stack.rfind(';') + 1);
      if (top.starts_with("work")) {  // (GCC's work.constprop.0)
        ++in_work;
        EXPECT_THAT(stack, ::testing::EndsWith(";__libc_start_call_main;main;" + top)) << line;
      }
    }
    EXPECT_GT(in_handler, 0u) << folded.out;
    EXPECT_EQ(in_work, 1u) << folded.out;
    // Entered as often as it ran (qemu-x86_64 loads a PIE at 0x4000000000).
    const uint64_t entry =
        0x4000000000 +
        ::ptkit::testing::NmRange(E2E_PROGRAM_DIR "/e2e_signal_unstripped", handler).first;
    uint64_t entries = 0;
    for (const auto& [tid, ips] : truth) {
      entries += static_cast<uint64_t>(std::count(ips.begin(), ips.end(), entry));
    }
    EXPECT_GE(entries, mode == "alarm" ? 20u : 3u);
    auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    uint64_t calls = 0;
    const nlohmann::json report = nlohmann::json::parse(stats.out);
    for (const auto& fn : report["functions"]) {
      if (NameSubs(fn["function"].get<std::string>(), names) == handler) {
        calls += fn["calls"].get<uint64_t>();
      }
    }
    EXPECT_EQ(calls, entries);
    auto chunked = RunCommand(
        {PTDECODE_PATH, "folded", "--tid", parent, "-j", "2", "--chunk-size", "4096", r.trace});
    EXPECT_TRUE(chunked.out == folded.out) << "-j 2 --chunk-size 4096 differs";
  }
}

// Stripped code that tail-jumps to an exported wrapper, which tail-jumps on into stripped code:
// the wrapper is entered and counted as the ground truth runs it (sweep 35a F2: a block from
// stripped code to stripped code was counted whole to the first one, so `exported_upd` had no
// row; callgrind counts its 2,000 calls). Every decoder, and -j, the same.
TEST_F(QemuEmulateTest, AnExportedWrapperBetweenStrippedCodeIsEntered) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string unstripped = E2E_PROGRAM_DIR "/e2e_tail_exported_unstripped";
  Recorded r = Record("tail_exported", {E2E_PROGRAM_DIR "/e2e_tail_exported_stripped", "1000"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const PerThread truth = ReadTruth(r.truth);
  ASSERT_EQ(truth.size(), 1u);
  const std::vector<uint64_t>& ips = truth.begin()->second;
  // (qemu-x86_64 loads a PIE at 0x4000000000.)
  auto truth_of = [&](const std::string& name, uint64_t* entries) {
    const auto [begin, end] = ::ptkit::testing::NmRange(unstripped, name);
    EXPECT_LT(begin, end) << name;
    uint64_t within = 0;
    *entries = 0;
    for (uint64_t ip : ips) {
      within += ip >= 0x4000000000 + begin && ip < 0x4000000000 + end;
      *entries += ip == 0x4000000000 + begin;
    }
    return within;
  };
  uint64_t upd_entries = 0, api_entries = 0;
  const uint64_t upd_self = truth_of("exported_upd", &upd_entries);
  const uint64_t api_self = truth_of("api", &api_entries);
  EXPECT_EQ(upd_entries, 2000u);
  for (const std::vector<std::string>& options :
       {std::vector<std::string>{}, {"--decoder", "libipt"}, {"-j", "2", "--chunk-size", "512"}}) {
    SCOPED_TRACE(absl::StrJoin(options, " "));
    const nlohmann::json report = StatsReport(r.trace, options);
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_name;  // (self, calls)
    for (const auto& f : report["functions"]) {
      auto& [self, calls] = by_name[f["function"].get<std::string>()];
      self += f["self"].get<uint64_t>();
      calls += f["calls"].get<uint64_t>();
    }
    EXPECT_EQ(by_name["exported_upd"], std::make_pair(upd_self, upd_entries));
    EXPECT_EQ(by_name["api"], std::make_pair(api_self, api_entries));
  }
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr(";main;api;exported_upd "));
}

// An indirect call through a retpoline enters its callee: the thunk's `mov %rax, (%rsp); ret`
// jumps there for the call that reached the thunk, and its call into its own middle is no call
// (sweep 36a F3: op_add..op_xor had 0 calls against 100 native entries each, the thunk 800
// calls against 400, dispatch 1,200 against 400 with thunk-inline). Oracle: the ground truth's
// entries at each function's address (nm).
TEST_F(QemuEmulateTest, ARetpolinesCalleeIsEntered) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const std::string build : {"thunk", "inline"}) {
    SCOPED_TRACE(build);
    const std::string program = E2E_PROGRAM_DIR "/e2e_retpoline_" + build;
    Recorded r = Record("retpoline_" + build, {program, "100"});
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    const PerThread truth = ReadTruth(r.truth);
    auto entries = [&](const std::string& name) {
      // (By objdump: the thunk's symbol has no size for nm -S.)
      const std::vector<uint64_t> insns = ObjdumpInstructions(program, name);
      EXPECT_FALSE(insns.empty()) << name;
      const uint64_t entry = 0x4000000000 + (insns.empty() ? 0 : insns.front());
      uint64_t n = 0;
      for (const auto& [tid, ips] : truth) n += std::count(ips.begin(), ips.end(), entry);
      return n;
    };
    std::vector<std::string> names = {"op_add", "op_sub", "op_mul", "op_xor", "dispatch"};
    if (build == "thunk") names.push_back("__x86_indirect_thunk_rax");
    // (--exclude-startup: all they run is under main.)
    for (const std::vector<std::string>& options : {std::vector<std::string>{},
                                                    {"--decoder", "libipt"},
                                                    {"-j", "2", "--chunk-size", "512"},
                                                    {"--exclude-startup"}}) {
      SCOPED_TRACE(absl::StrJoin(options, " "));
      const nlohmann::json report = StatsReport(r.trace, options);
      std::map<std::string, uint64_t> calls;
      for (const auto& f : report["functions"]) {
        calls[f["function"].get<std::string>()] += f["calls"].get<uint64_t>();
      }
      for (const std::string& name : names) {
        EXPECT_EQ(calls[name], entries(name)) << name;
      }
      EXPECT_EQ(calls["op_add"], 100u);
    }
    auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    EXPECT_THAT(folded.out, HasSubstr(";main;dispatch;op_add "));
  }
}

// A longjmp lands in the frame that called setjmp, also in a recursion of one function (sweep
// 30c F2: f(10) longjmping to f(3)'s setjmp left f(4)..f(10) open, "main;f x 10;landed" where
// gdb has "main;f;f;f;landed", 7 more stale frames per longjmp of an interpreter's error loop),
// and out of a recursion beyond the 65,536 frames the model keeps (F3: everything after it
// stayed under the recursion's frames, counted in rec's inclusive count).
TEST_F(QemuEmulateTest, ALongjmpLandsInTheFrameThatCalledSetjmp) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_longjmp_frames";
  // Also stripped (dynamic: a static program's longjmp would be code without a symbol too),
  // where the setjmp's frame runs code without a symbol (sweep 33a F7: the longjmp was taken for
  // a jump, its frames stayed); named by an unstripped build's symbols.
  for (const std::string suffix : {"_stripped", "_stripped_noplt"}) {
    SCOPED_TRACE(suffix);
    const std::string stripped = program + suffix;
    Recorded r = Record("recursive" + suffix, {stripped, "recursive", "50"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    const auto names = SubNames(program + "_unstripped" + suffix.substr(9));  // ("_noplt")
    int landed = 0;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      const std::string stack = NameSubs(line.substr(0, line.rfind(' ')), names);
      if (!stack.ends_with(";landed")) continue;
      ++landed;
      EXPECT_TRUE(stack.ends_with(";main;f;f;f;landed")) << line;
    }
    EXPECT_EQ(landed, 1) << folded.out;
    auto chunked = RunCommand({PTDECODE_PATH, "folded", "-j", "2", "--chunk-size", "256", r.trace});
    EXPECT_TRUE(chunked.out == folded.out) << "-j 2 --chunk-size 256 differs";
  }
  Recorded r = Record("recursive", {program, "recursive", "50"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  std::istringstream lines(folded.out);
  int landed = 0;
  size_t deepest = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string stack = line.substr(0, line.rfind(' '));
    size_t fs = 0;
    for (size_t at = stack.find(";f;"); at != std::string::npos; at = stack.find(";f;", at + 1)) {
      ++fs;
    }
    deepest = std::max(deepest, fs + (stack.ends_with(";f") ? 1 : 0));
    if (stack.ends_with(";landed")) {
      ++landed;
      EXPECT_TRUE(stack.ends_with(";main;f;f;f;landed")) << line;
    }
  }
  EXPECT_EQ(landed, 1) << folded.out;
  EXPECT_EQ(deepest, 10u) << folded.out.substr(0, 4000);
  // A chunk that cannot tell which frame called setjmp (it may be before the chunk, or the
  // chunk begins inside the frame that calls it: review of c78b84a, f(3) working before its
  // setjmp) is decoded again by the merge: -j 2 in chunks of any size gives the same.
  for (const char* bytes : {"256", "4096"}) {
    auto chunked = RunCommand({PTDECODE_PATH, "folded", "-j", "2", "--chunk-size", bytes, r.trace});
    EXPECT_TRUE(chunked.out == folded.out) << "-j 2 --chunk-size " << bytes << " differs";
  }

  r = Record("deep", {program, "deep", "70000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  std::map<std::string, nlohmann::json> row;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& f : report["functions"]) row[f["function"].get<std::string>()] = f;
  ASSERT_TRUE(row.contains("rec") && row.contains("mid") && row.contains("main")) << stats.out;
  EXPECT_EQ(row["mid"]["calls"], 5);
  // What ran after the longjmp (mid, leaf, printf, exit) is main's, not rec's.
  EXPECT_LE(row["rec"]["inclusive"].get<uint64_t>() + row["mid"]["inclusive"].get<uint64_t>(),
            row["main"]["inclusive"].get<uint64_t>());
  // (Its inclusive count is its own and the longjmp's: 59 instructions; 2,153 before.)
  EXPECT_LT(row["rec"]["inclusive"].get<uint64_t>(), row["rec"]["self"].get<uint64_t>() + 100);

  // Beyond 65,536 frames a cold part's jump back into its function is no longjmp: the calls
  // given no frame stay counted, and every return pops its own (review of c78b84a: the jump
  // ended them, ~3,470 returns then popped real frames, and mid's calls hung under rec).
  r = Record("cold", {program, "cold", "70000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  stats = RunCommand({PTDECODE_PATH, "stats", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  uint64_t calls = 0, returns = 0;
  ASSERT_EQ(std::sscanf(stats.out.c_str() + stats.out.find(" blocks, ") + 9,
                        "%" SCNu64 " calls, %" SCNu64 " returns", &calls, &returns),
            2)
      << stats.out;
  EXPECT_GT(calls, 70000u);
  EXPECT_LE(calls - returns, 10u) << stats.out.substr(0, 400);
}

// folded writes a stack deeper than --max-depth (1024 by default) as its outermost frames, one
// frame "[deeper frames]" and the function on top, and says so: a 70,000-deep recursion has a
// line per depth, quadratic output without it (sweep 33a N5: 34 GB of a 104,823-deep one). The
// lines are the full stacks' (written with --max-depth 0, of a 3,000-deep recursion) cut so,
// their counts added up (every element of these stacks is a frame: rec calls rec).
TEST_F(QemuEmulateTest, FoldedCutsStacksDeeperThanTheMaxDepth) {
  const std::string program = E2E_PROGRAM_DIR "/e2e_longjmp_frames";
  auto parse = [](const std::string& text) {
    std::map<std::string, uint64_t> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const size_t space = line.rfind(' ');
      out[line.substr(0, space)] += std::stoull(line.substr(space + 1));
    }
    return out;
  };
  auto cut = [](const std::map<std::string, uint64_t>& full, size_t depth) {
    std::map<std::string, uint64_t> out;
    for (const auto& [stack, count] : full) {
      std::vector<std::string> frames = absl::StrSplit(stack, ';');
      if (frames.size() <= depth) {
        out[stack] += count;
        continue;
      }
      frames.resize(depth);
      frames.push_back("[deeper frames]");
      frames.push_back(stack.substr(stack.rfind(';') + 1));
      out[absl::StrJoin(frames, ";")] += count;
    }
    return out;
  };
  Recorded r = Record("deep3000", {program, "deep", "3000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto all = RunCommand({PTDECODE_PATH, "folded", "--max-depth", "0", r.trace});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.err.find("deeper frames"), std::string::npos) << all.err;
  const std::map<std::string, uint64_t> full = parse(all.out);
  size_t deepest = 0;
  for (const auto& [stack, count] : full) {
    deepest = std::max<size_t>(deepest, std::count(stack.begin(), stack.end(), ';') + 1);
  }
  ASSERT_GT(deepest, 3000u);
  for (const char* depth : {"16", "1024"}) {
    SCOPED_TRACE(depth);
    std::vector<std::string> argv = {PTDECODE_PATH, "folded", r.trace};
    if (depth != std::string("1024"))
      argv = {PTDECODE_PATH, "folded", "--max-depth", depth, r.trace};
    auto folded = RunCommand(argv);
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    EXPECT_EQ(parse(folded.out), cut(full, std::stoul(depth)));
    EXPECT_THAT(folded.err, HasSubstr(absl::StrCat("stacks up to ", deepest,
                                                   " frames deep are written with their outermost ",
                                                   depth, " frames")));
    // -j: the chunks' frames are cut where the merge places them.
    argv.insert(argv.begin() + 2, {"-j", "2", "--chunk-size", "4096"});
    EXPECT_EQ(RunCommand(argv).out, folded.out);
  }
  r = Record("deep", {program, "deep", "70000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_LT(folded.out.size(), size_t{8} << 20);
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  uint64_t sum = 0;
  for (const auto& [stack, count] : parse(folded.out)) sum += count;
  EXPECT_EQ(sum, nlohmann::json::parse(stats.out)["totals"]["instructions"].get<uint64_t>());
}

// Every stack gdb shows at each hit of a breakpoint at `function`, outermost first from the
// first frame named `root` ("main", "start_thread"), as folded writes them.
// `setup`: gdb commands before the run ("handle SIGSEGV nostop noprint pass").
std::set<std::string> GdbStacksAtEachHit(const std::string& script_path,
                                         const std::vector<std::string>& command,
                                         const std::string& function, const std::string& root,
                                         const std::string& setup = "");

// A longjmp to the setjmp of a frame below lands there, not in the innermost frame whose setjmp
// was at the same address: a TRY/FINALLY chain rethrowing level by level, and the C cleanup
// handlers pthread_exit runs (glibc longjmps to each level's pthread_cleanup_push in turn; sweep
// 33a F1: every FINALLY and cleanup ran at the innermost level, "main;level x 5;finally_" for
// each of the five, and every frame the longjmps left stayed). As gdb's stacks at each hit.
TEST_F(QemuEmulateTest, EachLongjmpOfAChainLandsInItsOwnFrame) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_longjmp_frames";
  struct Case {
    std::string mode, function, root;
  };
  for (const Case& c : {Case{"chain", "finally_", "main"}, Case{"cleanup", "cleanup", "worker"}}) {
    SCOPED_TRACE(c.mode);
    Recorded r = Record(c.mode, {program, c.mode, "2"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    std::set<std::string> decoded;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      const std::string stack = line.substr(0, line.rfind(' '));
      if (!stack.ends_with(";" + c.function)) continue;
      const size_t root = stack.find(";" + c.root + ";");
      ASSERT_NE(root, std::string::npos) << line;
      decoded.insert(stack.substr(root + 1));
    }
    const std::set<std::string> gdb =
        GdbStacksAtEachHit(dir_->File(c.mode + ".gdb"), {program, c.mode, "1"}, c.function, c.root);
    EXPECT_EQ(gdb.size(), c.mode == "chain" ? 5u : 6u) << absl::StrJoin(gdb, "\n");
    EXPECT_EQ(decoded, gdb) << folded.out;
    auto parallel = RunCommand({PTDECODE_PATH, "folded", "-j2", "--chunk-size", "512", r.trace});
    ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
    EXPECT_EQ(parallel.out, folded.out);
  }
}

// A pid or tid that comes back within the recording: every run's trace is kept, and the
// workload ends (sweep 34a F1: a child given a pid an earlier child had spun forever waiting
// for room in its ring, whose aux_tail was the earlier child's count; a thread given an
// earlier thread's tid lost its trace; review 35 #2: a thread given the pid of children, one
// of which had exec'd another program, had its process's images for the whole stream of that
// id, so the children were decoded with them).
TEST_F(QemuEmulateTest, AnIdThatComesBackKeepsTheTraceOfEachRun) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const int target = ::ptkit::testing::PidReuseTarget(6000);
  std::string out;
  ExpectDecodedEqualsTruth("pid_reuse", {::ptkit::testing::kPidReuse, std::to_string(target), "4"},
                           0, nullptr, {}, nullptr, &out);
  if (::ptkit::testing::PidReuseCount(out, "child", target) < 2 ||
      ::ptkit::testing::PidReuseCount(out, "thread", target) != 1 ||
      ::ptkit::testing::PidReuseCount(out, "thread", target + 50) < 2) {
    GTEST_SKIP() << "the ids did not come back (another process took them):\n" << out;
  }
  auto info = RunCommand({PTDECODE_PATH, "info", dir_->File("pid_reuse.pt")});
  EXPECT_THAT(info.out, ::testing::HasSubstr("loss:        none recorded"));
  EXPECT_THAT(info.out, ::testing::HasSubstr("present (closed cleanly)"));
  // In chunks too (review 36 H1: the chunks of a stream whose tid went to another process were
  // decoded with the first one's images).
  if (::ptkit::testing::PidReuseCount(out, "thread", target + 100) == 1) {
    uint64_t ran = 0;
    for (const auto& [tid, ips] : ReadTruth(dir_->File("pid_reuse.truth"))) ran += ips.size();
    const nlohmann::json chunked =
        StatsReport(dir_->File("pid_reuse.pt"), {"-j", "2", "--chunk-size", "512"});
    EXPECT_EQ(chunked["totals"]["instructions"], ran);
    EXPECT_EQ(chunked["totals"]["errors"], 0);
  }

  // A thread given a tid a thread had before its process exec'd is a thread, not the one that
  // exec'd: under --exclude-startup it counts whole (review 36 M2: only under main, so its
  // work(5000) was not counted). Oracle: the ground truth's instructions in work (nm).
  Recorded texec = Record("pid_reuse_texec",
                          {::ptkit::testing::kPidReuse, std::to_string(target), "1", "texec"});
  ASSERT_EQ(texec.run.exit_code, 0) << texec.run.err;
  if (::ptkit::testing::PidReuseCount(texec.run.out, "thread", target + 150) == 2) {
    const auto [begin, end] = ::ptkit::testing::NmRange(::ptkit::testing::kPidReuse, "work");
    ASSERT_LT(begin, end);
    uint64_t in_work = 0;  // (e2e_pid_reuse is static: at its link-time addresses)
    for (const auto& [tid, ips] : ReadTruth(texec.truth)) {
      for (uint64_t ip : ips) in_work += ip >= begin && ip < end;
    }
    EXPECT_GT(in_work, 5000u * 3);
    uint64_t counted = 0;
    const nlohmann::json report = StatsReport(texec.trace, {"--exclude-startup"});
    for (const auto& f : report["functions"]) {
      if (f["function"] == "work") counted += f["self"].get<uint64_t>();
    }
    EXPECT_EQ(counted, in_work);
  }

  // A last run on the pid killed (SIGKILL, which qemu's code does not see): the loss is where
  // its stream ends, after every run's bytes (a review: it was at the last run's own ring
  // offset, inside the first runs' trace).
  Recorded killed = Record(
      "pid_reuse_kill", {::ptkit::testing::kPidReuse, std::to_string(target), "2", "kill"}, false);
  ASSERT_EQ(killed.run.exit_code, 0) << killed.run.err;
  if (::ptkit::testing::PidReuseCount(killed.run.out, "killed", target) != 1 ||
      ::ptkit::testing::PidReuseCount(killed.run.out, "child", target) < 1) {
    GTEST_SKIP() << "the pid did not come back:\n" << killed.run.out;
  }
  auto packets = RunCommand({PTDECODE_PATH, "packets", killed.trace});
  // "[stream tid T: pid T (e2e_pid_reuse), N bytes]" ... "[loss: killed at aux offset 0xM]"
  const size_t at = packets.out.find(absl::StrCat("[stream tid ", target, ": "));
  ASSERT_NE(at, std::string::npos) << packets.out.substr(0, 3000);
  const std::string header = packets.out.substr(at, packets.out.find('\n', at) - at);
  ASSERT_TRUE(header.ends_with(" bytes]")) << header;
  const uint64_t bytes = std::stoull(header.substr(header.rfind(", ") + 2));
  const std::string killed_at = "[loss: killed at aux offset 0x";
  const size_t loss = packets.out.find(killed_at, at);
  ASSERT_NE(loss, std::string::npos) << header;
  EXPECT_EQ(std::stoull(packets.out.substr(loss + killed_at.size()), nullptr, 16), bytes);
}

// A SIGSEGV handler that resumes the interrupted flow at a label inside the function (a memory
// probe recovering at `probe_recover`) returns: the flow goes on in the frame it interrupted,
// and falling into a label (`probe_fault`) is no call (sweep 33a F5: a frame "probe_recover
// (signal)" was entered on top of probe's, whose RET then popped both, and probe_fault was
// counted called 120 times). The labels name the code after them, as perf names it; gdb says
// probe: its stacks at each hit of leaf are the decoded ones with the labels read as probe.
TEST_F(QemuEmulateTest, AHandlerResumingAtALabelReturnsToTheInterruptedFrame) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_probe_label";
  // (Not against the ground truth: the jump after each faulting load is counted, as
  // documented: a block that faults is counted whole.)
  const Recorded r = Record("probe_label", {program, "4"}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const std::string& trace = r.trace;
  std::map<std::string, uint64_t> calls;
  const nlohmann::json report = StatsReport(trace, {});
  for (const auto& f : report["functions"]) {
    calls[f["function"].get<std::string>()] += f["calls"].get<uint64_t>();
  }
  EXPECT_EQ(calls["probe"], 120u);
  EXPECT_EQ(calls["scan"], 4u);
  EXPECT_EQ(calls["probe_fault"], 0u);
  EXPECT_EQ(calls["probe_recover"], 0u);
  EXPECT_EQ(calls["leaf"], 160u);  // 120 probes and 40 handler runs
  // A label reached from other code is entered all the same: 10 calls and 10 tail jumps.
  EXPECT_EQ(calls["inner_entry"], 20u);
  EXPECT_EQ(calls["tail"], 10u);
  EXPECT_EQ(calls["outer"], 0u);

  auto folded = RunCommand({PTDECODE_PATH, "folded", trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  std::set<std::string> decoded;
  uint64_t at_leaf = 0;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    std::string stack = line.substr(0, line.rfind(' '));
    if (!stack.ends_with(";leaf")) continue;
    at_leaf += std::stoull(line.substr(line.rfind(' ') + 1));
    for (const std::string label : {"probe_fault", "probe_recover"}) {
      for (size_t at; (at = stack.find(label)) != std::string::npos;) {
        stack.replace(at, label.size(), "probe");
      }
    }
    const size_t root = stack.find(";main;");
    ASSERT_NE(root, std::string::npos) << line;
    decoded.insert(stack.substr(root + 1));
  }
  // leaf runs the same instructions at each of its 160 calls.
  EXPECT_EQ(at_leaf % 160, 0u) << folded.out;
  std::set<std::string> gdb;
  for (std::string stack : GdbStacksAtEachHit(dir_->File("probe_label.gdb"), {program, "1"}, "leaf",
                                              "main", "handle SIGSEGV nostop noprint pass")) {
    for (size_t at; (at = stack.find("<signal>;")) != std::string::npos;) stack.erase(at, 9);
    gdb.insert(stack);
  }
  EXPECT_EQ(gdb, (std::set<std::string>{"main;scan;probe;leaf", "main;scan;probe;on_segv;leaf"}));
  EXPECT_EQ(decoded, gdb) << folded.out;
  auto parallel = RunCommand({PTDECODE_PATH, "folded", "-j2", "--chunk-size", "512", trace});
  ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
  EXPECT_EQ(parallel.out, folded.out);
}

// A C++ exception lands in the frame whose call's call site has its landing pad (the LSDA's
// call-site table), as gdb's backtrace in the handler shows, also in a lower frame of a
// recursion (sweep 30c F2: the innermost parse frame was taken, "main;parse x 10;caught" where
// gdb has main;parse;parse;parse;caught, and an interpreter's error loop grew 7 frames per
// error: 544 MB of folded stacks for 200 errors). At -O2 the landing pads are in the functions'
// cold parts (f.cold), as ptdecode names the frame from there on.
TEST_F(QemuEmulateTest, AnExceptionLandsInTheFrameWhoseCallSiteHasItsLandingPad) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string unstripped = E2E_PROGRAM_DIR "/e2e_exception_frames";
  // Stripped, the pads are in code without a symbol, named by the stack (sweep 33a F8: not
  // taken for landing pads, the catch ran on top of __cxa_throw's frames, every frame between
  // left open); its functions sub_ADDR are named by the unstripped build's symbols.
  for (const std::string& program : {unstripped, unstripped + "_stripped"}) {
    SCOPED_TRACE(program);
    const std::string tag = program == unstripped ? "" : "stripped_";
    const std::map<std::string, std::string> names =
        program == unstripped ? std::map<std::string, std::string>{} : SubNames(unstripped);
    // Each folded line's stack, without "(anonymous namespace)::", "(int)" and the cold parts'
    // " [clone .cold]", and its count.
    auto stacks = [&](const std::string& trace) {
      auto folded = RunCommand({PTDECODE_PATH, "folded", trace});
      EXPECT_EQ(folded.exit_code, 0) << folded.err;
      for (const char* bytes : {"256", "4096"}) {
        auto chunked =
            RunCommand({PTDECODE_PATH, "folded", "-j", "2", "--chunk-size", bytes, trace});
        EXPECT_TRUE(chunked.out == folded.out) << "-j 2 --chunk-size " << bytes << " differs";
      }
      std::vector<std::string> out;
      std::istringstream lines(folded.out);
      for (std::string line; std::getline(lines, line);) {
        std::string stack = NameSubs(line.substr(0, line.rfind(' ')), names);
        for (const std::string cut : {"(anonymous namespace)::", "(int)", " [clone .cold]", "()"}) {
          for (size_t at; (at = stack.find(cut)) != std::string::npos;) stack.erase(at, cut.size());
        }
        out.push_back(stack);
      }
      return out;
    };
    auto count = [](const std::string& stack, const std::string& name) {
      size_t n = 0;
      for (size_t at = 0;
           (at = (";" + stack + ";").find(";" + name + ";", at)) != std::string::npos; ++at) {
        ++n;
      }
      return n;
    };

    // parse(3) catches what parse(10) throws.
    Recorded r = Record(tag + "catch", {program, "catch", "10"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    int caught = 0;
    for (const std::string& stack : stacks(r.trace)) {
      if (!stack.ends_with(";caught")) continue;
      ++caught;
      EXPECT_TRUE(stack.ends_with(";main;parse;parse;parse;caught")) << stack;
    }
    EXPECT_EQ(caught, 1);

    // Destructors run level by level (each landing pad, then _Unwind_Resume to the next).
    r = Record(tag + "cleanup", {program, "cleanup", "6"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    std::set<size_t> levels;
    for (const std::string& stack : stacks(r.trace)) {
      if (!stack.ends_with(";cleaned")) continue;
      EXPECT_TRUE(levels.insert(count(stack, "parse_guarded")).second) << stack;
    }
    EXPECT_EQ(levels, (std::set<size_t>{1, 2, 3, 4, 5, 6}));

    // An interpreter's error loop: eval(3) catches 200 errors thrown by eval(10).
    r = Record(tag + "loop", {program, "loop", "200"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    int reported = 0;
    size_t deepest = 0;
    for (const std::string& stack : stacks(r.trace)) {
      deepest = std::max(deepest, count(stack, "eval"));
      if (!stack.ends_with(";report_error")) continue;
      ++reported;
      EXPECT_TRUE(stack.ends_with(";main;eval;eval;eval;report_error")) << stack;
    }
    EXPECT_EQ(reported, 1);
    EXPECT_EQ(deepest, 10u);
  }
}

// --srcline on a program whose DWARF is zstd-compressed (binutils 2.40's
// --compress-debug-sections=zstd), which elfutils 0.188's libdw cannot read: the warning says
// so and what to do (sweep 33a F3: "has no DWARF line information", where addr2line and gdb
// read it); zlib-compressed, as libdw reads it, the lines are there.
TEST_F(QemuEmulateTest, SrclineSaysWhenItsDwarfIsCompressedBeyondIt) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const std::string kind : {"zstd", "zlib"}) {
    SCOPED_TRACE(kind);
    const std::string program = dir_->File("sleep_" + kind);
    std::filesystem::copy_file(E2E_PROGRAM_DIR "/e2e_sleep_work", program);
    auto objcopy = RunCommand({"/usr/bin/objcopy", "--compress-debug-sections=" + kind, program});
    if (objcopy.exit_code != 0) GTEST_SKIP() << "objcopy: " << objcopy.err;
    Recorded r = Record("srcline_" + kind, {program, "plain"}, false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto insn = RunCommand({PTDECODE_PATH, "insn", "--srcline", r.trace});
    ASSERT_EQ(insn.exit_code, 0) << insn.err;
    if (kind == "zstd") {
      EXPECT_THAT(insn.err, HasSubstr(program + ": its DWARF sections are compressed in a way "
                                                "this ptdecode's libdw cannot read (zstd"))
          << insn.err;
      EXPECT_THAT(insn.err, HasSubstr("objcopy --decompress-debug-sections"));
    } else {
      EXPECT_THAT(insn.err, Not(HasSubstr(program))) << insn.err;
      EXPECT_THAT(insn.out, HasSubstr("sleep_work.c:"));
    }
  }
}

// A handler entered right after a RET waits for its own RET to tell whether a signal ran it;
// the calls inside it count, also one that another signal comes right after (sweep 33b F2:
// such a call was not counted, its callee's RET was taken for the handler's own, and the
// handler's frame was dropped with no word: 4 stacks "worker;mid;hleaf" per run, where only
// the handlers call hleaf, and no warning). What is still lost (a branch right before a
// signal, one instruction) is said.
TEST_F(QemuEmulateTest, HandlersOfTwoSignalSourcesKeepTheirFrames) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("storm", {E2E_PROGRAM_DIR "/e2e_signal_storm"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  size_t impossible = 0, handled = 0;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(";mid;hleaf") != std::string::npos) ++impossible;
    if (line.find(";onprof;hleaf ") != std::string::npos) ++handled;
  }
  EXPECT_GT(handled, 0u) << "no SIGPROF handled: the test tests nothing";
  if (impossible > 0) {
    EXPECT_THAT(r.run.err, HasSubstr(" signals came right after a branch"))
        << impossible << " stacks with hleaf under mid, and no warning";
  }
  EXPECT_LE(impossible, 3u) << folded.out.substr(0, 2000);
}

// --exclude-startup (diff's default) counts what a process forked below main runs until it
// execs: its stack begins inside the fork, and it may never return into main (sweep 33b F1:
// workers that _exit were not counted; a doubled worker gave "no function changed", exit 0).
TEST_F(QemuEmulateTest, ExcludeStartupCountsTheProcessesMainForked) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("forked", {E2E_PROGRAM_DIR "/e2e_fork_worker", "10000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto row = [&](const std::vector<std::string>& options) {
    const nlohmann::json report = StatsReport(r.trace, options);
    for (const auto& f : report["functions"]) {
      if (f["function"] == "cwork") return f;
    }
    return nlohmann::json();
  };
  const nlohmann::json all = row({}), scoped = row({"--exclude-startup"});
  ASSERT_FALSE(scoped.is_null());
  EXPECT_EQ(all["calls"], 4);
  EXPECT_EQ(scoped["calls"], 4);
  EXPECT_EQ(scoped["self"], all["self"]);
}

// --exclude-startup counts a thread other than main whole until it execs, and from there what
// runs under the new program's main, as the leader's exec (sweep 36b F1: the exec'd program's
// start-up and exit were counted, 140,341 instructions of which 36,215 are the thread's and
// main's; diff gave +24.93 % and exit 3 for a longer LD_LIBRARY_PATH). Oracle: the ground
// truth, from each main's entry (emulate_fib's main returns: to its last instruction).
TEST_F(QemuEmulateTest, ExcludeStartupCountsAThreadsExecdProgramUnderItsMain) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = PROGRAM_DIR "/emulate_thread_exec";
  const std::string fib = PROGRAM_DIR "/emulate_fib";  // (both static, not PIE)
  Recorded r = Record("thread_exec", {program, fib});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  const PerThread truth = ReadTruth(r.truth);
  ASSERT_EQ(truth.size(), 2u);
  const auto [main_begin, main_end] = ::ptkit::testing::NmRange(program, "main");
  const std::pair<uint64_t, uint64_t> fib_main_range = ::ptkit::testing::NmRange(fib, "main");
  const uint64_t fib_main = fib_main_range.first, fib_main_end = fib_main_range.second;
  const uint64_t fib_start = ::ptkit::testing::NmRange(fib, "_start").first;
  uint64_t in_program = 0, in_fib = 0;
  for (const auto& [tid, ips] : truth) {
    auto leader_main = std::find(ips.begin(), ips.end(), main_begin);
    if (leader_main != ips.end()) {  // the leader: pause()s under main until the exec
      in_program += static_cast<uint64_t>(ips.end() - leader_main);
      continue;
    }
    auto exec = std::find(ips.begin(), ips.end(), fib_start);
    ASSERT_NE(exec, ips.end());
    in_program += static_cast<uint64_t>(exec - ips.begin());  // the thread, whole
    auto entry = std::find(exec, ips.end(), fib_main);
    auto last = std::find_if(ips.rbegin(), ips.rend(),
                             [&](uint64_t ip) { return ip >= fib_main && ip < fib_main_end; });
    ASSERT_NE(entry, ips.end());
    in_fib += static_cast<uint64_t>(last.base() - entry);
  }
  for (const std::vector<std::string>& options :
       {std::vector<std::string>{"--exclude-startup"},
        {"--exclude-startup", "-j", "2", "--chunk-size", "512"}}) {
    SCOPED_TRACE(absl::StrJoin(options, " "));
    const nlohmann::json report = StatsReport(r.trace, options);
    std::map<std::string, uint64_t> by_image;
    for (const auto& i : report["images"]) {
      by_image[i["image"].get<std::string>()] = i["instructions"].get<uint64_t>();
    }
    EXPECT_EQ(by_image[program], in_program);
    EXPECT_EQ(by_image[fib], in_fib);
  }
}

// `--time` windows that partition a run add up to it, stack by stack (folded) and function by
// function under main (stats --exclude-startup): a window's stacks keep the frames open at its
// start (sweep 36a F1: they began there, `cold 639576` with no main under it, and
// --exclude-startup counted nothing in a window inside main).
TEST_F(QemuEmulateTest, TimeWindowsThatPartitionARunAddUpToIt) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("windows", {PROGRAM_DIR "/emulate_hot_cold", "400000"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  // The trace's time range, from the events' tsc= in insn's output.
  auto insn = RunCommand({PTDECODE_PATH, "insn", r.trace});
  ASSERT_EQ(insn.exit_code, 0) << insn.err;
  uint64_t first = ~uint64_t{0}, last = 0;
  for (size_t at = 0; (at = insn.out.find(" tsc=", at)) != std::string::npos; at += 5) {
    const uint64_t t = std::stoull(insn.out.substr(at + 5));
    first = std::min(first, t);
    last = std::max(last, t);
  }
  ASSERT_LT(first, last);
  std::vector<std::string> windows;
  uint64_t from = 0;
  for (int k = 1; k <= 4; ++k) {
    const uint64_t to = k == 4 ? last + 1 : first + (last - first) * k / 4;
    windows.push_back(absl::StrCat(from, ",", to));
    from = to;
  }
  auto folded_of = [&](const std::vector<std::string>& options) {
    std::vector<std::string> argv = {PTDECODE_PATH, "folded"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(r.trace);
    auto folded = RunCommand(argv);
    EXPECT_TRUE(folded.exit_code == 0 || folded.exit_code == 1) << folded.err;
    std::map<std::string, uint64_t> stacks;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      stacks[line.substr(0, line.rfind(' '))] += std::stoull(line.substr(line.rfind(' ') + 1));
    }
    return stacks;
  };
  using Row = std::tuple<uint64_t, uint64_t, uint64_t>;  // self, calls, inclusive
  auto stats_of = [&](const std::vector<std::string>& options) {
    std::map<std::string, Row> rows;
    std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--json"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(r.trace);
    auto stats = RunCommand(argv);
    // (Exit 1: nothing under main in the window, said.)
    EXPECT_TRUE(stats.exit_code == 0 || stats.exit_code == 1) << stats.err;
    const nlohmann::json report = nlohmann::json::parse(stats.out);
    for (const auto& f : report["functions"]) {
      Row& row = rows[f["function"].get<std::string>()];
      std::get<0>(row) += f["self"].get<uint64_t>();
      std::get<1>(row) += f["calls"].get<uint64_t>();
      std::get<2>(row) += f["inclusive"].get<uint64_t>();
    }
    return rows;
  };
  const auto whole_stacks = folded_of({});
  const auto whole_rows = stats_of({"--exclude-startup"});
  std::map<std::string, uint64_t> stacks;
  std::map<std::string, Row> rows;
  for (const std::string& window : windows) {
    SCOPED_TRACE(window);
    for (const auto& [stack, n] : folded_of({"--time", window})) {
      EXPECT_TRUE(whole_stacks.contains(stack)) << stack;
      stacks[stack] += n;
    }
    for (const auto& [name, row] : stats_of({"--exclude-startup", "--time", window})) {
      std::get<0>(rows[name]) += std::get<0>(row);
      std::get<1>(rows[name]) += std::get<1>(row);
      std::get<2>(rows[name]) += std::get<2>(row);
    }
  }
  EXPECT_TRUE(stacks == whole_stacks);
  EXPECT_GT(std::get<0>(whole_rows.at("cold")), 1000000u);
  // Inclusive counts too: a window in which a function ran none of its own instructions (main,
  // while a callee ran the whole window) has its row (sweep 39b F2: no row, its inclusive
  // count lost).
  for (auto& [name, row] : rows) {
    if (row == Row{0, 0, 0}) continue;
    EXPECT_EQ(row, whole_rows.count(name) ? whole_rows.at(name) : row) << name;
  }
  EXPECT_EQ(rows.size(), whole_rows.size());
}

// A thread that names itself after it starts (prctl(PR_SET_NAME), pthread_setname_np) has
// that name on its timeline track, as perf shows it after the COMM record (sweep 33b L1: the
// name it started with, every worker of a pool its creator's); the process keeps its
// program's.
TEST_F(QemuEmulateTest, ATimelineTrackHasTheNameItsThreadTookLast) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("rename", {E2E_PROGRAM_DIR "/e2e_rename"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto timeline = RunCommand({PTDECODE_PATH, "timeline", r.trace});
  ASSERT_EQ(timeline.exit_code, 0) << timeline.err;
  std::map<std::string, std::string> names;  // "thread_name"/"process_name" -> the last given
  const nlohmann::json doc = nlohmann::json::parse(timeline.out);
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["tid"] != 1) names[e["name"]] = e["args"]["name"];
  }
  EXPECT_TRUE(names["thread_name"].starts_with("renamed-task (tid ")) << names["thread_name"];
  EXPECT_EQ(names["process_name"], "e2e_rename");
}

// The time a system call took is its own: tracing resumes after it with the time of its
// return (sweep 30a F2: the TIP.PGE had the TSC of its entry, so folded --weight=time gave a
// 500 ms nanosleep 12 ms and the 100 iterations after it 483 ms).
// Also behind a signal whose handler never returned (siglongjmp): the plugin holds the events
// after it, and their times with them (review of a149bab: the time was given when the held
// events were written, at the end, and clamped every older one: nanosleep 0.9 ms).
// Also a call whose entry gave no time, the last TSC being under 100 us before it ("again":
// the 300 ms went to the work before it, in 2 of 40 runs of "longjmp" under load).
TEST_F(QemuEmulateTest, ASystemCallsTimeIsItsOwn) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const std::string mode : {"plain", "longjmp", "again", "longjmp_work"}) {
    SCOPED_TRACE(mode);
    // "longjmp_work", PSBs every 2 KiB: the events held after the handler hold PSB+s, whose
    // time was the clock's when they were written, at the end (every older time after it was
    // clamped to it: nanosleep 0 ns in 2 of 3 runs, 2 in 120 of "longjmp" under load).
    const std::vector<std::string> options =
        mode == "longjmp_work" ? std::vector<std::string>{"--event", "intel_pt/psb_period=0/u"}
                               : std::vector<std::string>{};
    Recorded r = Record("sleep_" + mode, {E2E_PROGRAM_DIR "/e2e_sleep_work", mode}, false, options);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto folded = RunCommand({PTDECODE_PATH, "folded", "--weight=time", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    uint64_t asleep = 0, working = 0;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      const std::string stack = line.substr(0, line.rfind(' '));
      const uint64_t ns = std::stoull(line.substr(line.rfind(' ') + 1));
      if (stack.find("nanosleep") != std::string::npos) asleep += ns;
      if (stack.ends_with(";main;work")) working += ns;
    }
    EXPECT_GE(asleep, 250'000'000u) << folded.out;
    // (Under qemu on a loaded machine the work itself takes tens of ms: before, it had the
    // sleep's 483 ms.)
    EXPECT_LT(working, 150'000'000u) << folded.out;
  }
}

// A snapshot recording's overwritten trace is a loss outside the decoded streams: the default
// report's list says so, not "none" under "1 loss point" (sweep 30a F7).
TEST_F(QemuEmulateTest, TheReportSaysLossesOutsideTheDecodedStreams) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r =
      Record("snap", {PROGRAM_DIR "/emulate_hot_cold", "1000000"}, false, {"--snapshot=4K"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto report = RunCommand({PTDECODE_PATH, r.trace});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("\n# 1 stream, 1 loss point, "));
  EXPECT_THAT(report.out, HasSubstr("\nlosses and errors: none in the decoded streams (1 loss "
                                    "point outside them); 1 warning (above)\n"));
}

// A fault that a handler fixes, in a block that ends in RET: the trace stops at the faulting
// store, the handler runs on top of writer(0)'s frame as gdb shows it, and the RET comes after
// (sweep 30c F4: the RET was written before the handler, which ran one writer frame short).
TEST_F(QemuEmulateTest, AFaultInsideABlockStopsTheTraceThere) {
  PTKIT_SKIP_WITHOUT_QEMU();
  Recorded r = Record("fault", {E2E_PROGRAM_DIR "/e2e_fault_block"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, "handled=3 writes=15\n");
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr(";main;writer;writer;writer;writer;writer;on_segv "));
  EXPECT_THAT(folded.out, Not(HasSubstr(";main;writer;writer;writer;writer;on_segv ")));
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& f : report["functions"]) {
    if (f["function"] == "writer") {
      EXPECT_EQ(f["calls"], 15);
    } else if (f["function"] == "on_segv") {
      EXPECT_EQ(f["calls"], 3);
    }
  }

  // The faulting store in a block that ends in a direct call: the call had not run, the
  // handler runs on the storing function's frame (as gdb's bt: store_then_call;<signal
  // handler called>;on_segv), and the call runs once, after it (sweep 33a F2: written as run,
  // "store_then_call;after;on_segv", the store run again above the phantom frame, after
  // called 6 times for 3).
  r = Record("fault_call", {E2E_PROGRAM_DIR "/e2e_fault_block", "call"}, false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, "handled=3 writes=3\n");
  folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr(";main;store_then_call;on_segv "));
  EXPECT_THAT(folded.out, HasSubstr(";main;store_then_call;after "));
  EXPECT_THAT(folded.out, Not(HasSubstr(";after;")));
  stats = RunCommand({PTDECODE_PATH, "stats", "--json", r.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  for (const auto& f : nlohmann::json::parse(stats.out)["functions"]) {
    if (f["function"] == "after" || f["function"] == "on_segv") {
      EXPECT_EQ(f["calls"], 3) << f;
    }
  }
  EXPECT_THAT(r.run.err, Not(HasSubstr("warning")));
}

// The frames of gdb's `bt` in `out`, innermost first ("<signal>" for a signal handler's
// caller), up to the first frame gdb cannot name.
std::vector<std::string> GdbFrames(const std::string& out) {
  std::vector<std::string> frames;
  std::istringstream bt(out);
  for (std::string line; std::getline(bt, line);) {
    if (!line.starts_with("#")) continue;
    std::istringstream fields(line);
    std::string number, name;
    fields >> number >> name;
    if (name.starts_with("0x")) fields >> name >> name;  // "#3  0x... in name (...)"
    if (name == "??") break;
    frames.push_back(name == "<signal" ? "<signal>" : name);
  }
  return frames;
}

std::set<std::string> GdbStacksAtEachHit(const std::string& script_path,
                                         const std::vector<std::string>& command,
                                         const std::string& function, const std::string& root,
                                         const std::string& setup) {
  std::ofstream(script_path) << "set pagination off\n"
                             << setup << "\nbreak " << function
                             << "\ncommands\nsilent\nbt\ncont\nend\nrun\n";
  std::vector<std::string> argv = {"/usr/bin/gdb", "-q",        "-batch", "-nx",
                                   "-x",           script_path, "--args"};
  argv.insert(argv.end(), command.begin(), command.end());
  const std::string out = RunCommand(argv).out;
  std::set<std::string> stacks;
  // Each hit's frames begin at its "#0 ".
  for (size_t at = out.find("#0 "); at != std::string::npos;) {
    const size_t next = out.find("\n#0 ", at);
    const std::string one =
        out.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at);
    std::vector<std::string> frames = GdbFrames(one);  // innermost first
    const auto r = std::find(frames.begin(), frames.end(), root);
    if (r != frames.end()) {
      std::vector<std::string> outward(std::make_reverse_iterator(r + 1), frames.rend());
      stacks.insert(absl::StrJoin(outward, ";"));
    }
    at = next == std::string::npos ? next : next + 1;
  }
  return stacks;
}

TEST_F(QemuEmulateTest, ASignalHandlerGetsAFrameOfItsOwn) {
  const std::string program = E2E_PROGRAM_DIR "/e2e_signal_calls";
  ExpectDecodedEqualsTruth("signal_calls", {program});
  const std::string trace = dir_->File("signal_calls.pt");
  // The handler's entries and the instructions from each to the restorer, in the ground truth.
  auto nm = RunCommand({"/usr/bin/nm", program});
  ASSERT_EQ(nm.exit_code, 0) << nm.err;
  std::map<std::string, uint64_t> address;
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string value, kind, name;
    if (fields >> value >> kind >> name) address[name] = std::stoull(value, nullptr, 16);
  }
  ASSERT_TRUE(address.contains("on_signal") && address.contains("__restore_rt")) << nm.out;
  uint64_t entries = 0, inside = 0;
  for (const auto& [tid, ips] : ReadTruth(dir_->File("signal_calls.truth"))) {
    for (size_t i = 0; i < ips.size(); ++i) {
      if (ips[i] != address["on_signal"]) continue;
      ++entries;
      size_t j = i;
      while (j < ips.size() && ips[j] != address["__restore_rt"]) ++j;
      inside += j - i;
    }
  }
  ASSERT_EQ(entries, 3u);
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  bool found = false;
  const nlohmann::json report = nlohmann::json::parse(stats.out);
  for (const auto& f : report["functions"]) {
    if (f["function"] != "on_signal") continue;
    found = true;
    EXPECT_EQ(f["calls"].get<uint64_t>(), entries);
    EXPECT_EQ(f["inclusive"].get<uint64_t>(), inside);
  }
  EXPECT_TRUE(found) << stats.out;
  // Only what ran under it: the same instructions; its 3 entries and its calls of work and leaf,
  // each returning (the totals' returns were the whole run's, 700 and more).
  stats = RunCommand({PTDECODE_PATH, "stats", "--json", "--only-under", "on_signal", trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json scoped = nlohmann::json::parse(stats.out)["totals"];
  EXPECT_EQ(scoped["instructions"].get<uint64_t>(), inside);
  EXPECT_EQ(scoped["calls"].get<uint64_t>(), 9u);
  EXPECT_EQ(scoped["returns"].get<uint64_t>(), 9u);
  // gdb at leaf: leaf <- on_signal <- <signal handler called> <- the interrupted function.
  auto gdb =
      RunCommand({"/usr/bin/gdb", "-batch", "-nx", "-ex", "handle SIGUSR1 nostop noprint pass",
                  "-ex", "break leaf", "-ex", "run", "-ex", "bt", program});
  const std::vector<std::string> frames = GdbFrames(gdb.out);
  ASSERT_GE(frames.size(), 4u) << gdb.out << gdb.err;
  ASSERT_EQ(frames[0], "leaf") << gdb.out;
  ASSERT_EQ(frames[1], "on_signal") << gdb.out;
  ASSERT_EQ(frames[2], "<signal>") << gdb.out;
  const std::string stack = frames[3] + ";on_signal;leaf ";
  auto folded = RunCommand({PTDECODE_PATH, "folded", trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_NE(folded.out.find(stack), std::string::npos) << stack << " in\n" << folded.out;
  EXPECT_NE(folded.out.find(";main;"), std::string::npos) << folded.out;
  // The calls view names the handler as one ("> on_signal (signal)"), its calls under it.
  auto calls = RunCommand({PTDECODE_PATH, "calls", trace});
  ASSERT_EQ(calls.exit_code, 0) << calls.err;
  const std::vector<std::string> parts = absl::StrSplit(calls.out, "> on_signal (signal)\n");
  EXPECT_EQ(parts.size(), 4u) << calls.out;
}

// --filter with signals: SIGALRMs (40, every 200 us) interrupt main's loop into a handler outside
// the region (the branch before one waits for its frame: the handler's instructions are not in the
// ground truth either), and SIGUSR1's handler is a region of its own.
TEST_F(QemuEmulateTest, FilterWithSignalsDecodesToTheGroundTruth) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const auto& [program, function] :
       {std::pair<std::string, std::string>{E2E_PROGRAM_DIR "/e2e_signal_ret", "main"},
        {PROGRAM_DIR "/emulate_signal", "on_usr1"}}) {
    const PerThread truth =
        ExpectDecodedEqualsTruth("filter_signal_" + function, {program}, 0, nullptr,
                                 {"--filter", absl::StrCat("filter ", function, " @ ", program)});
    ASSERT_EQ(truth.size(), 1u) << program;
    const auto [begin, end] = ::ptkit::testing::NmRange(program, function);
    ASSERT_NE(end, 0u);
    for (uint64_t ip : truth.begin()->second) {
      ASSERT_TRUE(ip >= begin && ip < end) << program << ": 0x" << std::hex << ip;
    }
  }
}

// --filter on a shared library's function (libc under /bin/true, PIE, loaded where QEMU puts
// it): the region is found in the guest's mappings (not qemu's own libc). The trace decodes to
// the ground truth, which starts at the function's entry and stays in its bytes (nm -D -S).
TEST_F(QemuEmulateTest, FilterFindsALibrarysRegionInTheGuestsMappings) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string libc = std::filesystem::canonical("/lib/x86_64-linux-gnu/libc.so.6");
  auto nm = RunCommand({"/usr/bin/nm", "-D", "-S", "--defined-only", libc});
  uint64_t offset = 0, size = 0;
  std::istringstream in(nm.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string address, length, type, symbol;
    if (fields >> address >> length >> type >> symbol && symbol.starts_with("__libc_start_main@")) {
      offset = std::stoull(address, nullptr, 16);
      size = std::stoull(length, nullptr, 16);
    }
  }
  if (size == 0) GTEST_SKIP() << "no __libc_start_main in " << libc;
  const PerThread truth = ExpectDecodedEqualsTruth(
      "filter_libc", {"/bin/true"}, 0, nullptr, {"--filter", "filter __libc_start_main @ " + libc});
  ASSERT_EQ(truth.size(), 1u);
  const std::vector<uint64_t>& ips = truth.begin()->second;
  ASSERT_GT(ips.size(), 10u);
  const uint64_t entry = ips[0];
  EXPECT_EQ(entry % 4096, offset % 4096) << std::hex << entry;  // a page-aligned mapping of it
  for (uint64_t ip : ips) {
    ASSERT_TRUE(ip >= entry && ip < entry + size) << std::hex << "0x" << ip;
  }
}

// With --emulate=qemu or a bare --emulate: --qemu-plugin names the backend (sweep 40b M3: a
// bare --emulate fell back to step, said the plugin was bad, then refused --qemu-plugin).
TEST_F(QemuEmulateTest, APluginThatIsNotThereIsOneLine) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const char* emulate : {"--emulate=qemu", "--emulate"}) {
    auto r = RunCommand({PTRECORD_PATH, emulate, "--qemu-plugin", "/nonexistent.so", "-o",
                         dir_->File("x.pt"), "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 1) << emulate;
    EXPECT_EQ(r.err,
              "ptrecord: the QEMU plugin /nonexistent.so is not there (No such file or "
              "directory): give --qemu-plugin the libptkit_qemu.so built with this ptrecord\n")
        << emulate;
    EXPECT_FALSE(std::filesystem::exists(dir_->File("x.pt")));
  }
}

// Where `cmake --install` puts them (bin/ptrecord, libexec/ptkit/libptkit_qemu.so), --emulate
// finds the plugin; a ptrecord without it says that it single-steps and why (sweep 29a F1: the
// CI example built ptrecord alone and every benchmark single-stepped without a word, 19 s
// instead of 0.05 s), but with -q.
TEST_F(QemuEmulateTest, TheInstalledPluginIsFoundAndAMissingOneIsSaid) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::filesystem::path root = dir_->File("install");
  std::filesystem::create_directories(root / "bin");
  std::filesystem::create_directories(root / "libexec/ptkit");
  std::filesystem::copy_file(PTRECORD_PATH, root / "bin/ptrecord");
  const auto run = [&](std::vector<std::string> options) {
    std::vector<std::string> argv = {(root / "bin/ptrecord").string(), "--emulate",
                                     "--overwrite-existing", "-o", dir_->File("i.pt")};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    return RunCommand(argv);
  };
  auto alone = run({});
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_THAT(alone.err, HasSubstr("ptrecord: --emulate single-steps the command under ptrace "
                                   "(tens of thousands of instructions/s), not under QEMU: the "
                                   "QEMU plugin is neither next to ptrecord (" +
                                   (root / "bin/libptkit_qemu.so").string() +
                                   ": No such file or directory) nor where it is installed (" +
                                   (root / "libexec/ptkit/libptkit_qemu.so").string() + ")"));
  EXPECT_THAT(alone.err, HasSubstr("(emulated)"));
  auto quiet = run({"-q"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  std::filesystem::copy_file(
      std::filesystem::path(PTRECORD_PATH).parent_path() / "libptkit_qemu.so",
      root / "libexec/ptkit/libptkit_qemu.so");
  auto installed = run({});
  EXPECT_EQ(installed.exit_code, 0) << installed.err;
  EXPECT_THAT(installed.err, HasSubstr("(emulated under qemu)"));
  EXPECT_THAT(installed.err, ::testing::Not(HasSubstr("single-steps")));
}

// A file that is not this ptrecord's plugin is refused before qemu runs, in one line naming it:
// not ELF, an ELF shared object that is no QEMU plugin, ptkit's plugin of another ring version
// (a copy with its ptkit_qemu_abi version changed).
TEST_F(QemuEmulateTest, APluginOfAnotherKindIsOneLine) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string text = dir_->File("text.so");
  std::ofstream(text) << "not a plugin\n";
  const std::string other = dir_->File("other.so");
  {
    const std::string plugin =
        std::filesystem::path(PTRECORD_PATH).parent_path() / "libptkit_qemu.so";
    std::string bytes = ::ptkit::testing::ReadWholeFile<std::string>(plugin);
    const std::string tag("ptkit-qemu-abi:\0", 16);
    const size_t at = bytes.find(tag);
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(bytes.find(tag, at + 1), std::string::npos);
    bytes[at + 16] = static_cast<char>(bytes[at + 16] + 1);  // the version's low byte
    std::ofstream(other, std::ios::binary) << bytes;
  }
  for (const auto& [plugin, says] : std::vector<std::pair<std::string, std::string>>{
           {text, "is not an ELF file"},
           {PROGRAM_DIR "/libemulate_plugin.so", "is not a QEMU plugin (no qemu_plugin_install)"},
           {other, "is from another ptkit build (its ring version "}}) {
    auto r = RunCommand({PTRECORD_PATH, "--emulate", "--qemu-plugin", plugin, "-o",
                         dir_->File("x.pt"), "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("ptrecord: the QEMU plugin ", plugin, " ", says)));
    EXPECT_THAT(r.err, HasSubstr("give --qemu-plugin the libptkit_qemu.so built with this "
                                 "ptrecord (the ptkit_qemu target)"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_->File("x.pt")));
  }
}

// ptrecord killed by a signal it does not handle (SIGUSR1, SIGKILL): qemu, running the command
// for it, goes too, instead of running on orphaned and untraced (sweep 29c F5). e2e_tick runs
// until killed; a copy with a name of its own, so that pgrep finds only this one.
TEST_F(QemuEmulateTest, TheCommandGoesWithAKilledPtrecord) {
  PTKIT_SKIP_WITHOUT_QEMU();
  for (const char* signal : {"USR1", "KILL"}) {
    SCOPED_TRACE(signal);
    const std::string tick = dir_->File(std::string("tick_with_") + signal);
    std::filesystem::copy_file(E2E_PROGRAM_DIR "/e2e_tick", tick,
                               std::filesystem::copy_options::overwrite_existing);
    auto r =
        RunCommand({"/bin/sh", "-c",
                    absl::StrCat("'", PTRECORD_PATH, "' --emulate=qemu -q -o '", dir_->File("k.pt"),
                                 "' --overwrite-existing -- '", tick,
                                 // Once qemu runs it (a loaded machine may take a while).
                                 "' & p=$!; i=0; until pgrep -f '^[^ ]*qemu-x86_64 .*", tick,
                                 "' >/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done; ",
                                 "sleep 0.3; kill -", signal,
                                 " $p; wait $p; sleep 0.3; pgrep -f '^[^ ]*qemu-x86_64 .*", tick,
                                 "' || echo gone")});
    EXPECT_EQ(r.out, "gone\n") << r.err;
  }
}

// A workload killed by a real-time signal: qemu-x86_64 dies of the host's number for it (the
// guest's + 2), which ptrecord reported (sweep 29c F1: exit 167 for bash's native 165). The
// native run of the same command is the oracle.
TEST_F(QemuEmulateTest, ARealTimeSignalIsTheGuestsNumber) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::vector<std::string> command = {"/bin/bash", "-c", "kill -s RTMIN+3 $$"};
  // The shell's $? of the native run.
  auto native = RunCommand({"/bin/sh", "-c", "/bin/bash -c 'kill -s RTMIN+3 $$'; echo $?"});
  ASSERT_EQ(native.out, "165\n") << native.err;
  std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=qemu", "-o", dir_->File("rt.pt"),
                                   "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  auto r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 165) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ptrecord: workload killed by signal 37 (exit status 165)"));
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", dir_->File("rt.pt")});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json end = nlohmann::json::parse(info.out)["metadata"]["end"];
  EXPECT_EQ(end["workload_exit_status"], 165) << end;
  EXPECT_EQ(end["workload_signal"], "signal 37") << end;
}

// An AVX-512 instruction, which QEMU's TCG does not implement: the program dies of SIGILL
// there under QEMU. ptrecord says so in one line naming its address (the symbol's, by nm)
// and exits 1; the trace, up to the block that ran into it, decodes to the ground truth.
TEST_F(QemuEmulateTest, AnInstructionQemuDoesNotImplementIsOneLine) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string program = E2E_PROGRAM_DIR "/e2e_qemu_avx512";
  const auto [insn, insn_end] = ::ptkit::testing::NmRange(program, "avx512_insn");
  ASSERT_NE(insn, 0u);
  std::string err;
  ExpectDecodedEqualsTruth("avx512", {program}, 1, &err);
  std::vector<std::string> ours;
  for (const std::string& line : TextLines(err)) {
    if (line.starts_with("ptrecord:")) ours.push_back(line);
  }
  ASSERT_EQ(ours.size(), 1u) << err;
  std::ostringstream at;
  at << "ptrecord: the program died of SIGILL at 0x" << std::hex << insn
     << ", an instruction QEMU's TCG does not implement (bytes 62";
  EXPECT_THAT(ours[0], HasSubstr(at.str()));
  EXPECT_THAT(ours[0], HasSubstr("EVEX, AVX-512"));
  EXPECT_THAT(ours[0], HasSubstr("--emulate=step"));
}

TEST_F(QemuEmulateTest, AMissingQemuNamesThePackage) {
  auto r = RunCommand({"/usr/bin/env", "PATH=/nonexistent", PTRECORD_PATH, "--emulate=qemu", "-o",
                       dir_->File("x.pt"), "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("apt-get install qemu-user"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// gdb's backtrace at `function`'s first run (`run_args`: the program's arguments), innermost
// first, up to the first frame gdb cannot name.
std::vector<std::string> GdbStack(const std::string& program,
                                  const std::vector<std::string>& run_args,
                                  const std::string& function) {
  std::vector<std::string> argv = {"/usr/bin/gdb", "-batch", "-nx", "-ex", "break " + function,
                                   "-ex",          "run",    "-ex", "bt",  "--args",
                                   program};
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  return GdbFrames(RunCommand(argv).out);
}

// Each folded stack through `function` is, from it outwards, the stack gdb shows there for as
// deep as both go (a goroutine's or a coroutine's frames from before its stack was switched to
// are not known to the decode); the deepest has at least `deepest` frames of it, and each at
// least `each`.
void ExpectStacksAsGdbs(const std::string& folded, const std::string& function,
                        const std::vector<std::string>& gdb, size_t deepest, size_t each) {
  ASSERT_GE(gdb.size(), deepest) << function;
  ASSERT_EQ(gdb[0], function);
  size_t most = 0;
  std::istringstream lines(folded);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::vector<std::string> frames = absl::StrSplit(line.substr(0, space), ';');
    const auto it = std::find(frames.rbegin(), frames.rend(), function);
    if (it == frames.rend()) continue;
    std::vector<std::string> inward(it, frames.rend());  // function first
    const size_t n = std::min(inward.size(), gdb.size());
    EXPECT_TRUE(std::equal(inward.begin(), inward.begin() + n, gdb.begin()))
        << line << "\ngdb: " << absl::StrJoin(gdb, ";");
    EXPECT_GE(n, each) << line << "\ngdb: " << absl::StrJoin(gdb, ";");
    most = std::max(most, n);
  }
  EXPECT_GE(most, deepest) << function << " in\n" << folded;
}

// Stacks switched by the program itself: each goroutine's or coroutine's frames are its own
// (sweeps 31a F1, 32a F1, 30c F5: each one's were stacked on the other's, `main.produce;...;
// runtime.chansend;runtime.chanrecv`, `main.workA;main.step;main.leafB` after a preemption,
// `ping;yield_to;pong;leaf_pong`), and a setcontext back to where getcontext returned keeps
// them, also called through the GOT (sweep 32a F2): where gdb's backtrace has main.consume
// under main.fold, so do the folded stacks, serial and parallel alike.
TEST_F(QemuEmulateTest, GoroutinesAndCoroutinesHaveTheirOwnStacks) {
  PTKIT_SKIP_WITHOUT_QEMU();
  struct Function {
    std::string name;
    size_t deepest, each;  // frames gdb and ptkit share: in one stack at least, in every one
  };
  struct Case {
    std::string name, program;
    std::vector<std::string> args, env;
    std::vector<Function> functions;
  };
  std::vector<Case> cases;
  for (const char* program : {"e2e_coroutines", "e2e_coroutines_noplt"}) {
    cases.push_back({program,
                     absl::StrCat(E2E_PROGRAM_DIR, "/", program),
                     {"200"},
                     {},
                     {{"leaf_ping", 2, 1},
                      {"leaf_pong", 2, 1},
                      {"leaf_again", 3, 3},
                      {"leaf_pointer", 3, 3},
                      {"leaf_gogo", 3, 3}}});
  }
  if (std::string(GO_PROGRAM).empty()) {
    std::cerr << "no Go program: the go tool was not installed (scripts/install-deps.sh)\n";
  } else {
    cases.push_back({"goroutines",
                     GO_PROGRAM,
                     {"chan", "300"},
                     {},
                     {{"main.fold", 2, 1}, {"main.square", 2, 1}}});
    // About 50 M instructions: preempted every 10 ms, several times under qemu.
    cases.push_back({"preempted",
                     GO_PROGRAM,
                     {"preempt", "1000000"},
                     {"GOMAXPROCS=1"},
                     {{"main.leafA", 3, 1}, {"main.leafB", 3, 1}}});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> command = {"/usr/bin/env"};
    command.insert(command.end(), c.env.begin(), c.env.end());
    command.push_back(c.program);
    command.insert(command.end(), c.args.begin(), c.args.end());
    Recorded r = Record(c.name, command, /*with_truth=*/false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    for (const Function& f : c.functions) {
      ExpectStacksAsGdbs(folded.out, f.name, GdbStack(c.program, c.args, f.name), f.deepest,
                         f.each);
    }
    // Chunks of 512 bytes (--chunk-size, for tests): these traces are a few KB, and the
    // default chunks of 128 KiB would decode them whole, as -j1 (a review).
    auto parallel = RunCommand({PTDECODE_PATH, "folded", "-j2", "--chunk-size", "512", r.trace});
    ASSERT_EQ(parallel.exit_code, 0) << parallel.err;
    EXPECT_EQ(parallel.out, folded.out);
  }
}

// A stripped Go program (strip, or `go build -ldflags='-s -w'`, the usual release build) keeps
// its functions' entries and names in .gopclntab, which the Go runtime needs: every function it
// ran is named as `go tool addr2line` names it, and its goroutines have their own stacks, as the
// unstripped program's (gdb's backtrace of that). They were all sub_ADDRESS, and the goroutine
// switches, which go by runtime.gogo's and runtime.mcall's names, were not seen (sweep 38a F4).
TEST_F(QemuEmulateTest, AStrippedGoProgramIsNamedFromItsFunctionTable) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (std::string(GO_PROGRAM).empty()) GTEST_SKIP() << "the go tool was not installed";
  const std::vector<std::string> args = {"chan", "300"};
  // Position independent too: its table is in .data.rel.ro.gopclntab (review 39 M1).
  {
    const std::string pie = dir_->File("goroutines_pie");
    ASSERT_EQ(RunCommand({"/usr/bin/objcopy", "--strip-all", GO_PIE_PROGRAM, pie}).exit_code, 0);
    Recorded r = Record("gopie", {pie, args[0], args[1]}, /*with_truth=*/false);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
    ASSERT_EQ(folded.exit_code, 0) << folded.err;
    for (const char* f : {"main.fold", "main.square"}) {
      ExpectStacksAsGdbs(folded.out, f, GdbStack(GO_PROGRAM, args, f), 2, 1);
    }
  }
  const std::string stripped = dir_->File("goroutines");
  ASSERT_EQ(RunCommand({"/usr/bin/objcopy", "--strip-all", GO_PROGRAM, stripped}).exit_code, 0);
  ASSERT_THAT(RunCommand({"/usr/bin/nm", stripped}).err, HasSubstr("no symbols"));
  Recorded r = Record("gostripped", {stripped, args[0], args[1]}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto folded = RunCommand({PTDECODE_PATH, "folded", r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  for (const char* f : {"main.fold", "main.square"}) {
    ExpectStacksAsGdbs(folded.out, f, GdbStack(GO_PROGRAM, args, f), 2, 1);
  }
  // Every address it ran: "TIME tid TID ADDRESS NAME+0xOFFSET".
  auto insn = RunCommand({PTDECODE_PATH, "insn", r.trace});
  ASSERT_EQ(insn.exit_code, 0) << insn.err;
  std::map<uint64_t, std::string> named;
  std::istringstream lines(insn.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string time, tid_word, tid, address, symbol;
    if (!(fields >> time >> tid_word >> tid >> address >> symbol) || tid_word != "tid" ||
        address.size() != 16 ||
        address.find_first_not_of("0123456789abcdef") != std::string::npos) {
      continue;
    }
    named[std::stoull(address, nullptr, 16)] = symbol.substr(0, symbol.rfind('+'));
  }
  ASSERT_GT(named.size(), 1000u);
  std::ofstream(dir_->File("addresses"))
      << absl::StrJoin(named, "\n",
                       [](std::string* out, const auto& a) {
                         absl::StrAppend(out, "0x", absl::Hex(a.first));
                       })
      << "\n";
  // Two lines an address: the function, then FILE:LINE.
  auto oracle = RunCommand({"/bin/sh", "-c",
                            absl::StrCat("GOFLAGS= go tool addr2line '", stripped, "' < '",
                                         dir_->File("addresses"), "'")});
  ASSERT_EQ(oracle.exit_code, 0) << oracle.err;
  std::istringstream answers(oracle.out);
  size_t checked = 0;
  for (const auto& [address, name] : named) {
    std::string function, where;
    ASSERT_TRUE(std::getline(answers, function) && std::getline(answers, where));
    EXPECT_EQ(name, function) << absl::StrCat("0x", absl::Hex(address));
    ++checked;
  }
  EXPECT_EQ(checked, named.size());
}

// A Go program's start-up is its runtime's before main.main: --exclude-startup (diff's default)
// counts everything its process runs from there, every goroutine's work on every thread (sweep
// 32a N1: it counted nothing of the main thread: Go has no `main`, and goroutine switches end
// the frames).
TEST_F(QemuEmulateTest, AGoProgramsStartupEndsAtMainMain) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (std::string(GO_PROGRAM).empty()) GTEST_SKIP() << "the go tool was not installed";
  Recorded r = Record("gostart", {GO_PROGRAM, "chan", "300"}, /*with_truth=*/false);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  auto functions = [&](const std::vector<std::string>& options) {
    const nlohmann::json report = StatsReport(r.trace, options);
    std::map<std::string, uint64_t> self;
    for (const auto& f : report["functions"]) {
      self[f["function"].get<std::string>()] += f["self"].get<uint64_t>();
    }
    return self;
  };
  const std::map<std::string, uint64_t> all = functions({});
  const std::map<std::string, uint64_t> after = functions({"--exclude-startup"});
  for (const char* f : {"main.main", "main.produce", "main.consume", "main.fold", "main.square"}) {
    ASSERT_TRUE(all.contains(f)) << f;
    EXPECT_GT(all.at(f), 0u) << f;
    EXPECT_EQ(after.contains(f) ? after.at(f) : 0, all.at(f)) << f;
  }
  EXPECT_GT(all.at("runtime.schedinit"), 0u);
  EXPECT_FALSE(after.contains("runtime.schedinit"));
  // --only-under main.main is what its frames hold, not the goroutine it started (a review).
  const std::map<std::string, uint64_t> under = functions({"--only-under", "main.main"});
  EXPECT_FALSE(under.contains("main.produce"));
  EXPECT_GT(under.at("main.consume"), 0u);
  // diff's flame graph of it is its stacks, not empty (a review: no frame is named main).
  auto folded = RunCommand({PTDECODE_PATH, "diff", "--format", "folded", r.trace, r.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr("main.fold "));
}

// A pid namespace (unshare --fork --pid, as containers run programs): when its first process
// exits, the kernel kills the rest, which under qemu leaves their slots open. ptrecord waits for
// such a process only while it runs qemu: the slot's pid is the one the namespace gave it, which
// here names another process (sweep 37c H3: it waited for ever for the host's pid 4, a kernel
// thread). (Their pids are the namespace's, not the kernel's: ptrecord(1) says so.)
TEST_F(QemuEmulateTest, AKilledProcessOfAPidNamespaceIsNotWaitedForEver) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (RunCommand({"/usr/bin/unshare", "--fork", "--pid", "/bin/true"}).exit_code != 0) {
    GTEST_SKIP() << "unshare --pid not available here (needs root or user namespaces)";
  }
  const std::string trace = dir_->File("ns.pt");
  auto r = RunCommand({"/usr/bin/timeout", "60", PTRECORD_PATH, "--emulate=qemu", "-q", "-o", trace,
                       "--", "/usr/bin/unshare", "--fork", "--pid", "/bin/sh", "-c",
                       std::string(E2E_PROGRAM_DIR "/e2e_spin & sleep 0.3; exit 0")});
  EXPECT_NE(r.exit_code, 124) << "ptrecord did not end: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("waiting for a process")));
}

// A program run at a path that names another file where ptrecord runs (a bind mount in a
// mount namespace, a container's own file): the plugin reads each mapped file's build-id in
// the guest's namespace and writes it in the MMAP2 record, as the kernel does for perf record
// --buildid-mmap, so the file that ran is identified and decoded (sweep 37c H2: ptrecord read
// the path in its own namespace, and the host's file was identified and decoded in its place).
TEST_F(QemuEmulateTest, AProgramOfAnotherMountNamespaceIsTheFileThatRan) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (RunCommand({"/usr/bin/unshare", "--mount", "/bin/true"}).exit_code != 0) {
    GTEST_SKIP() << "unshare --mount not available here (needs root)";
  }
  const std::string path = dir_->Copy(E2E_PROGRAM_DIR "/e2e_spin", "prog");
  const std::string ran = std::filesystem::canonical("/bin/true").string();
  // The build that ran, found by its build-id in a cache of the test's own (the machine's
  // ~/.debug may or may not hold it: the test passed only where `perf record` had run true).
  const std::string cache = dir_->File("buildid-cache");
  auto add = RunCommand({"/usr/bin/perf", "--buildid-dir", cache, "buildid-cache", "-a", ran});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  Recorded recorded = Record("mountns", {"/usr/bin/unshare", "--mount", "/bin/sh", "-c",
                                         "mount --bind " + ran + " " + path + " && " + path});
  EXPECT_EQ(recorded.run.exit_code, 0) << recorded.run.err;
  ExpectTraceDecodesToTruth("mountns", recorded.trace, recorded.truth, nullptr,
                            {"--buildid-dir", cache});
  const std::string want = testing::ReadelfBuildId(ran);
  ASSERT_FALSE(want.empty()) << ran << ": readelf gives no build-id";
  auto reader = ContainerReader::Open(dir_->File("mountns.pt"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  RecordView rec;
  std::string stored;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kCode) continue;
    auto code = ParseCode(rec.payload);
    if (!code.ok() || code->path != path || !(code->flags & kCodeIdentity)) continue;
    stored = testing::HexBuildId(code->build_id);
  }
  EXPECT_EQ(stored, want);
}

// A process of a pid namespace whose parent is the namespace's init (pid 1) waits for
// ptrecord when its ring is full, as any other does: it took parent 1 for ptrecord gone, gave
// up ("ptrecord stopped draining") and ran on untraced (sweep 37c M1; small rings fill).
TEST_F(QemuEmulateTest, AFullRingInAPidNamespaceIsWaitedFor) {
  PTKIT_SKIP_WITHOUT_QEMU();
  if (RunCommand({"/usr/bin/unshare", "--fork", "--pid", "/bin/true"}).exit_code != 0) {
    GTEST_SKIP() << "unshare --pid not available here (needs root or user namespaces)";
  }
  auto r = RunCommand({"/usr/bin/timeout", "120", PTRECORD_PATH, "--emulate=qemu", "-q", "-m",
                       "64,4", "-o", dir_->File("full.pt"), "--", "/usr/bin/unshare", "--fork",
                       "--pid", "/bin/sh", "-c", "/bin/ls -R /usr/share/doc > /dev/null; true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("stopped draining")));
}

// The pid of the qemu-x86_64 that ptrecord `pid` runs the workload in (a child with -plugin
// among its arguments: not the `qemu --version` it asks first), or -1 after 2 s.
pid_t QemuOf(pid_t pid) {
  for (int i = 0; i < 100; ++i) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/task/", pid, "/children"));
    for (pid_t child = 0; in >> child;) {
      const auto cmdline =
          testing::ReadWholeFile<std::string>(absl::StrCat("/proc/", child, "/cmdline"));
      if (cmdline.find(std::string("-plugin\0", 8)) != std::string::npos) return child;
    }
    usleep(20000);
  }
  return -1;
}

// A loop of about 3.5 M instructions in sh (30 KiB of trace: small rings fill).
constexpr char kShLoop[] = "i=0; while [ $i -lt 300 ]; do i=$((i+1)); done";

// ptrecord --emulate=qemu with small rings (4 AUX pages) on `sh -c script`, whose stdin is the
// pipe `go` (its write end is the caller's); stdout and stderr to /dev/null. Its pid.
pid_t RecordWhenToldTo(const int (&go)[2], const std::string& script, const std::string& trace,
                       const std::string& truth) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(go[0], 0);
    dup2(null, 1);
    dup2(null, 2);
    close(go[1]);
    std::vector<const char*> argv = {PTRECORD_PATH, "--emulate=qemu", "-q", "-m", "64,4"};
    if (!truth.empty()) argv.insert(argv.end(), {"--ground-truth", truth.c_str()});
    argv.insert(argv.end(), {"-o", trace.c_str(), "--", "/bin/sh", "-c", script.c_str(), nullptr});
    execv(PTRECORD_PATH, const_cast<char* const*>(argv.data()));
    _exit(126);
  }
  close(go[0]);
  return pid;
}

// ptrecord stopped (SIGSTOP, a debugger) for longer than 30 s while the workload's ring is full:
// the workload waits for it and the recording is whole. The plugin took 30 s without a drain
// for ptrecord gone: it gave up, the workload ran on untraced and the recording ended "the QEMU
// plugin failed: ptrecord stopped draining", exit 1, no footer (sweep 38b M3).
TEST_F(QemuEmulateTest, AStoppedPtrecordIsWaitedFor) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string trace = dir_->File("stopped.pt"), truth = dir_->File("stopped.truth");
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // The loop starts when the test says so, with ptrecord stopped.
  const pid_t pid = RecordWhenToldTo(go, absl::StrCat("read x; ", kShLoop), trace, truth);
  const pid_t qemu = QemuOf(pid);
  kill(pid, SIGSTOP);
  ASSERT_EQ(write(go[1], "go\n", 3), 3);
  close(go[1]);
  ASSERT_GT(qemu, 0) << "no workload";
  std::this_thread::sleep_for(std::chrono::seconds(32));
  // Waiting, not running on untraced (nor done): alive, and next to no CPU time over half a
  // second (it polls every millisecond; a state read may catch it running, so not the state).
  const auto cpu_ticks = [&]() -> std::optional<uint64_t> {
    const auto stat = testing::ReadWholeFile<std::string>(absl::StrCat("/proc/", qemu, "/stat"));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || stat.substr(paren + 2, 1) == "Z") return std::nullopt;
    std::istringstream fields(stat.substr(paren + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {  // utime and stime: fields 14 and 15
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    return utime + stime;
  };
  const std::optional<uint64_t> before = cpu_ticks();
  usleep(500000);
  const std::optional<uint64_t> after = cpu_ticks();
  ASSERT_TRUE(before && after) << "the workload is gone: it ran on untraced to its end";
  EXPECT_LE(*after - *before, 10u) << "the workload ran on";
  kill(pid, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto d = RunCommand({PTDECODE_PATH, "insn", trace});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_THAT(d.err, Not(HasSubstr("killed or the file is cut")));
  PerThread want = ReadTruth(truth), got = ParseInsn(d.out);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_GT(want.begin()->second.size(), 1000000u);
  EXPECT_EQ(got.begin()->second.size(), want.begin()->second.size());
  EXPECT_TRUE(got == want);
  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_THAT(info.out, HasSubstr("footer:      present")) << info.out;
  EXPECT_THAT(info.out, HasSubstr("loss:        none recorded")) << info.out;
}

// ptrecord killed (SIGKILL) under a subreaper (systemd --user, a container's init, a CI
// runner): a process the workload forked (qemu ends the workload's own with ptrecord) finds
// ptrecord gone within a second or two when its ring fills, and runs on to its end untraced. It
// waited 30 s: the orphan's parent was the subreaper, not init.
TEST_F(QemuEmulateTest, AKilledPtrecordIsNotWaitedFor) {
  PTKIT_SKIP_WITHOUT_QEMU();
  const std::string trace = dir_->File("killed.pt");
  // A subreaper of its own: the test process stays as it is.
  const pid_t reaper = fork();
  if (reaper == 0) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int go[2];
    if (pipe(go) != 0) _exit(3);
    // (dash gives a background list /dev/null as stdin: fd 3 is the pipe.)
    const pid_t pid = RecordWhenToldTo(
        go, absl::StrCat("exec 3<&0; (read x <&3; ", kShLoop, ") & wait"), trace, "");
    if (QemuOf(pid) <= 0) _exit(2);
    usleep(300000);  // the subshell forked
    kill(pid, SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    if (write(go[1], "go\n", 3) != 3) _exit(3);
    close(go[1]);
    int reaped = 0;
    while (waitpid(-1, nullptr, 0) > 0) ++reaped;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (reaped < 3) _exit(4);  // ptrecord, the workload's qemu and the subshell's
    _exit(waited < std::chrono::seconds(15) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(reaper, &status, 0), reaper);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 2) << "no workload";
  EXPECT_NE(WEXITSTATUS(status), 4) << "the subshell was not reaped here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the orphaned subshell waited 15 s or more";
}

// A ground truth that fills its disk is cut, said in a warning; the recording is whole (footer,
// every instruction) and the cut truth is the trace's prefix. The first short write gave "write
// the ground truth: No such file or directory" (a stale errno) and the whole recording was
// abandoned, exit 1, no footer (sweep 38b L2).
TEST_F(QemuEmulateTest, AGroundTruthThatFillsItsDiskIsCutNotTheRecording) {
  PTKIT_SKIP_WITHOUT_QEMU();
  testing::ScopedTmpfs tmpfs(dir_->File("mnt"), "size=64k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  const std::string trace = dir_->File("cut.pt"), truth = dir_->File("mnt/cut.truth");
  // About 520,000 instructions: 10 MB of truth.
  auto r = RunCommand({PTRECORD_PATH, "--emulate=qemu", "--ground-truth", truth, "-o", trace, "--",
                       "/bin/ls", "-R", "/usr/share/doc/libc6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the ground truth " + truth +
                               " is cut where it could not be written (write: No space left on "
                               "device); the trace is whole"));
  auto d = RunCommand({PTDECODE_PATH, "insn", trace});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  PerThread got = ParseInsn(d.out), want = ReadTruth(truth);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GT(got.begin()->second.size(), 400000u);
  ASSERT_EQ(want.size(), 1u);
  const std::vector<uint64_t>& all = got.begin()->second;
  const std::vector<uint64_t>& prefix = want.begin()->second;
  EXPECT_GT(prefix.size(), 1000u);
  EXPECT_LT(prefix.size(), all.size());
  // (The last line of the cut file may be cut within its address.)
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end() - 1, all.begin()));
  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_THAT(info.out, HasSubstr("footer:      present")) << info.out;
}

}  // namespace

}  // namespace ptkit
