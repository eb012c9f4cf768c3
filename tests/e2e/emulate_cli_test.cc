// The whole pipeline as users run it, on a machine without Intel PT:
//   ptrecord --emulate --ground-truth truth.txt -o trace.pt -- PROGRAM ...
//   ptdecode insn trace.pt
// The decoded instructions of every thread equal the instructions the workload retired.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"
#include "read_file.h"
#include "run_command.h"
#include "scoped_tmpfs.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kE2e = E2E_PROGRAM_DIR;

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;

// The metadata of a container, merged in record order (as ptkit-format(5) says).
nlohmann::json ReadMetadata(const std::string& path) {
  nlohmann::json merged = nlohmann::json::object();
  auto reader = ContainerReader::Open(path);
  if (!reader.ok()) return merged;
  RecordView rec;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type != RecordType::kMetadata) continue;
    auto j = nlohmann::json::parse(rec.payload.begin(), rec.payload.end(), nullptr, false);
    if (j.is_object()) merged.update(j);
  }
  return merged;
}

class EmulateCliTest : public ::testing::Test {
 protected:
  // Records `argv` emulated (with `extra` ptrecord options) and checks the decode against the
  // ground truth; returns ptrecord's result.
  ::ptkit::testing::CommandResult Record(const std::vector<std::string>& workload,
                                         const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=step", "--ground-truth",      truth_,
                                     "-o",          trace_,           "--overwrite-existing"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), workload.begin(), workload.end());
    auto rec = RunCommand(argv);
    if (rec.err.find("Operation not permitted") != std::string::npos) skipped_ = true;
    return rec;
  }
  // `ptdecode insn` of the trace equals the ground truth, thread by thread, with no gap or
  // error marker; returns ptdecode's stderr.
  // Every instruction of `insn --json` has a time, and no time is before the one before it.
  void ExpectTimeNeverGoesBack() {
    auto insn = RunCommand({PTDECODE_PATH, "insn", "--json", trace_});
    ASSERT_EQ(insn.exit_code, 0) << insn.err;
    uint64_t last = 0, timed = 0, backwards = 0;
    std::istringstream lines(insn.out);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("ip") || !j.contains("tsc")) continue;
      const uint64_t tsc = j["tsc"];
      backwards += tsc < last;
      last = tsc;
      ++timed;
    }
    EXPECT_GT(timed, 1000u);
    EXPECT_EQ(backwards, 0u);
  }

  std::string CheckDecode(size_t threads) {
    auto dec = RunCommand({PTDECODE_PATH, "insn", trace_});
    EXPECT_EQ(dec.exit_code, 0) << dec.err;
    for (const char* marker : {"[gap", "[error"}) {
      const size_t at = dec.out.find(marker);
      EXPECT_EQ(at, std::string::npos) << dec.out.substr(at, dec.out.find('\n', at) - at);
    }
    PerThread expected = ReadTruth(truth_);
    PerThread got = ParseInsn(dec.out);
    EXPECT_EQ(expected.size(), threads);
    EXPECT_EQ(got.size(), expected.size());
    for (const auto& [tid, ips] : expected) {
      SCOPED_TRACE(::testing::Message() << "tid " << tid);
      EXPECT_EQ(got[tid].size(), ips.size());
      EXPECT_TRUE(got[tid] == ips);
    }
    return dec.err;
  }
  int RecordAndCheck(const std::vector<std::string>& workload, size_t threads,
                     const std::string& filter = "") {
    auto rec = Record(workload, filter.empty() ? std::vector<std::string>{}
                                               : std::vector<std::string>{"--filter", filter});
    if (skipped_) return rec.exit_code;
    CheckDecode(threads);
    return rec.exit_code;
  }
  testing::TempDir dir_;
  std::string trace_ = dir_.File("trace.pt"), truth_ = dir_.File("truth.txt");
  bool skipped_ = false;
};

TEST_F(EmulateCliTest, ARecursiveProgramAndItsExitCode) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_fib", "x"}, 1), 3);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

// A pid or tid that comes back within the recording (children given one pid, threads one tid,
// again and again, and a thread given the children's pid): every run's trace is kept (sweep
// 34a F1: only the first run of each was decoded, 859 of 4,113 instructions of the pid, with
// "loss: none recorded"), each with its own process's images (review 35 #2: the thread's
// process's for the whole stream of that id).
TEST_F(EmulateCliTest, AnIdThatComesBackKeepsTheTraceOfEachRun) {
  const int target = ::ptkit::testing::PidReuseTarget(3000);
  auto rec = Record({::ptkit::testing::kPidReuse, std::to_string(target), "4"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  if (::ptkit::testing::PidReuseCount(rec.out, "child", target) < 2 ||
      ::ptkit::testing::PidReuseCount(rec.out, "thread", target) != 1 ||
      ::ptkit::testing::PidReuseCount(rec.out, "thread", target + 50) < 2) {
    GTEST_SKIP() << "the ids did not come back (another process took them):\n" << rec.out;
  }
  CheckDecode(ReadTruth(truth_).size());
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("loss:        none recorded"));
}

// A ground truth that fills its disk is cut, said in a warning; the recording is whole (footer,
// every instruction) and the cut truth is the trace's prefix. It failed the whole recording:
// "write FILE: No space left on device", exit 1, no footer (sweep 38b L2, as under qemu).
TEST_F(EmulateCliTest, AGroundTruthThatFillsItsDiskIsCutNotTheRecording) {
  testing::ScopedTmpfs tmpfs(dir_.File("mnt"), "size=64k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  truth_ = dir_.File("mnt/truth.txt");  // about 35,000 lines: 770 KB
  auto rec = Record({PROGRAM_DIR "/emulate_fib"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_THAT(rec.err, HasSubstr("the ground truth " + truth_ +
                                 " is cut where it could not be written (write: No space left on "
                                 "device); the trace is whole"));
  auto dec = RunCommand({PTDECODE_PATH, "insn", trace_});
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  PerThread got = ParseInsn(dec.out), want = ReadTruth(truth_);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  const std::vector<uint64_t>& all = got.begin()->second;
  const std::vector<uint64_t>& prefix = want.begin()->second;
  EXPECT_GT(prefix.size(), 1000u);
  EXPECT_LT(prefix.size(), all.size());
  EXPECT_GT(all.size(), 30000u);
  // (The last line of the cut file may be cut within its address.)
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end() - 1, all.begin()));
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("footer:      present")) << info.out;
}

TEST_F(EmulateCliTest, AProgramWithThreads) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_threads"}, 3), 0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

TEST_F(EmulateCliTest, AProgramWithASignalHandler) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_signal"}, 1), 0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

// An unprivileged user records with the step backend at perf_event_paranoid 2 (most
// distributions' default), as `perf record -e dummy:u` works for them: the sideband event is
// user space only (sweep 38b M2: "Permission denied ... run as root").
TEST_F(EmulateCliTest, AnUnprivilegedUserRecordsAtParanoid2) {
  std::ifstream paranoid_file("/proc/sys/kernel/perf_event_paranoid");
  int paranoid = 99;
  paranoid_file >> paranoid;
  if (paranoid != 2) GTEST_SKIP() << "perf_event_paranoid is " << paranoid << ", not 2";
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
    GTEST_SKIP() << "needs root and setpriv(1) to run ptrecord as nobody";
  }
  testing::TempDir open_dir;
  ASSERT_EQ(chmod(open_dir.path().c_str(), 0777), 0);
  const std::string trace = open_dir.File("nobody.pt");
  auto rec = RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         PTRECORD_PATH, "--emulate=step", "-o", trace, "--", "/bin/true"});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  auto stats = RunCommand({PTDECODE_PATH, "stats", trace});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr("[ld-linux-x86-64.so.2]"));
}

// The ground truth is ptrecord's file, not the command's: the command does not inherit a
// descriptor of it (sweep 38b L6: a writable fd 4).
TEST_F(EmulateCliTest, TheGroundTruthIsNotInheritedByTheCommand) {
  // The shell's open descriptors (its glob's directory among them), the same as natively.
  const std::vector<std::string> command = {"/bin/sh", "-c", "cd /proc/$$/fd && echo *"};
  auto rec = Record(command);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_EQ(rec.out, RunCommand(command).out);
}

// ptrecord started with its stderr closed (`2>&-`): the container is not descriptor 2, so
// ptrecord's own messages do not go into it (sweep 38b H1: they were written over the recording,
// 47 KB of trace lost with exit 0 and no word); the command finds its stderr closed, as natively.
TEST_F(EmulateCliTest, AClosedStderrIsNotTheContainer) {
  const std::string script =
      "exec \"$0\" --emulate=step -o \"$1\" -- "
      "/bin/sh -c 'kill -USR2 $PPID; echo err >&2 || echo closed' 2>&-";
  auto rec = RunCommand({"/bin/sh", "-c", script, PTRECORD_PATH, trace_});
  EXPECT_EQ(rec.exit_code, 0);
  // (ptrecord's notice of the SIGUSR2 the command sends it, "SIGUSR2 ignored: not recording
  // with --snapshot", went into the container mid-run; dash says why it cannot echo on its
  // stderr: closed.)
  EXPECT_EQ(rec.out, "closed\n");
  // Every instruction the recorder counted is decoded (else a warning says how many).
  auto stats = RunCommand({PTDECODE_PATH, "stats", trace_});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(stats.err, "");
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("(closed cleanly)"));
  EXPECT_THAT(info.out, HasSubstr("damage:      none"));
}

// JIT code (e2e_qemu_jit: machine code written at run time into an RWX mapping and into one
// made RX by mprotect; with "fork" run by a child too; with "memfd" and "shm" also from a
// memfd and from POSIX shared memory, files the decoder cannot read): the stepper sends the
// bytes of each instruction it runs from memory no program file backs as text pokes, so the
// decode equals the ground truth with no gap (sweep 37b L1: before, 34,732 of 52,755
// instructions, gaps "no code at ...: //anon could not be loaded").
TEST_F(EmulateCliTest, JitCodeDecodesToTheGroundTruth) {
  for (const std::string mode : {"", "fork", "memfd", "shm"}) {
    SCOPED_TRACE(mode);
    std::vector<std::string> workload = {E2E_PROGRAM_DIR "/e2e_qemu_jit"};
    if (!mode.empty()) workload.push_back(mode);
    EXPECT_EQ(RecordAndCheck(workload, mode == "fork" ? 2 : 1), 0);
    if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
    auto info = RunCommand({PTDECODE_PATH, "info", trace_});
    EXPECT_THAT(info.out, HasSubstr("TEXT_POKE"));
    auto stats = RunCommand({PTDECODE_PATH, "stats", trace_});
    EXPECT_THAT(stats.out, HasSubstr(" [anon]\n"));  // sum and its caller, named as perf does
  }
}

// A program whose first instruction is a jump (Go's entry is one) runs it once, also when
// exec'd by another: the kernel's trap at execve's return, before the entry ran, is no step
// (sweep 31a F6: the entry was counted twice, in ptrecord's count and the ground truth, and
// every decode warned that the recorder counted one instruction more than the trace holds).
TEST_F(EmulateCliTest, AnEntryThatIsAJumpRunsOnce) {
  const std::string program = kE2e + "/e2e_jmp_first";
  for (const std::vector<std::string>& workload :
       {std::vector<std::string>{program}, {"/bin/sh", "-c", "exec " + program}}) {
    SCOPED_TRACE(workload.back());
    auto rec = Record(workload);
    if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    const std::string err = CheckDecode(1);
    EXPECT_THAT(err, Not(HasSubstr("the recorder counted"))) << err;
    const PerThread truth = ReadTruth(truth_);
    ASSERT_EQ(truth.size(), 1u);
    const std::vector<uint64_t>& ips = truth.begin()->second;
    ASSERT_GE(ips.size(), 4u);
    // The program's four instructions end the thread, each once.
    const std::vector<uint64_t> tail(ips.end() - 4, ips.end());
    EXPECT_EQ(std::set<uint64_t>(tail.begin(), tail.end()).size(), 4u);
    EXPECT_EQ(std::count(ips.begin(), ips.end(), tail[0]), 1);
    EXPECT_THAT(rec.err, HasSubstr(absl::StrCat(" ", ips.size(), " instructions"))) << rec.err;
  }
}

// A jump to the program's entry point from frames of "loader" code (as musl's dynamic loader
// starts a program: mov %rsi,%rsp; jmp *%rdi, two calls deep) starts it on the initial stack:
// the loader's frames end there (sweep 37b L5: every stack of a dynamic musl program began
// _dlstart;_dlstart_c, frames no debugger shows).
TEST_F(EmulateCliTest, AJumpToTheEntryPointEndsTheLoadersFrames) {
  auto rec = Record({kE2e + "/e2e_restart_entry"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  CheckDecode(1);
  auto folded = RunCommand({PTDECODE_PATH, "folded", trace_});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr("\n_start;start_c;work "));
  EXPECT_THAT(folded.out, HasSubstr("\n_start;start_c;stage1;stage2 "));
  // (Before: _start;start_c;stage1;_start;start_c;work, stage2's frame renamed by the jump.)
  EXPECT_THAT(folded.out, Not(HasSubstr(";_start"))) << folded.out;
}

// The trace's PERF_RECORD_AUX records are on the sideband's clock (CLOCK_MONOTONIC ns), as a
// kernel's are on its events' clock: perf 6.1 reads the export's (`perf script -D`: "CPU TIME
// OFFSET [SIZE]: PERF_RECORD_AUX") after the workload's exec and before its exit (they counted
// 1, 2, 3... before, so perf ordered every AUX record before all the sideband).
// With MTC packets (intel_pt/mtc=1/u), the metadata gives the encoder's crystal clock ratio
// (CPUID.15H: TSC = CTC * 100 / 1), which its MTC and TMA packets count, not this CPU's (sweep
// 40a F5: the host's, 0 here, left MTC unused; an Intel host's gave time running backwards),
// and the time decoded with it never goes backwards.
TEST_F(EmulateCliTest, MtcPacketsAreTimedByTheEncodersCrystal) {
  auto rec = Record({PROGRAM_DIR "/emulate_fib", "x"}, {"--event", "intel_pt/mtc=1/u"});
  if (skipped_) GTEST_SKIP() << "ptrace denied";
  ASSERT_EQ(rec.exit_code, 3) << rec.err;
  CheckDecode(1);
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", trace_});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json cpu = nlohmann::json::parse(info.out)["metadata"]["cpu"];
  EXPECT_EQ(cpu["cpuid_15h"]["tsc_ratio_numerator"], 100) << cpu.dump();
  EXPECT_EQ(cpu["cpuid_15h"]["tsc_ratio_denominator"], 1) << cpu.dump();
  ExpectTimeNeverGoesBack();
}

// With CYC packets too (intel_pt/mtc=1,cyc=1/u), each MTC and TSC packet has a CYC before it
// with the cycles up to it, as the SDM's cycle-accurate mode sends them: before, a CYC's
// cycles spanned the MTCs and TSCs before it, libipt's estimate between two of them overshot
// the next one, and the time decoded ran backwards (73 times in a single-stepped /bin/true,
// by up to 18 us; sweep 40a F5).
TEST_F(EmulateCliTest, CycPacketsKeepTheDecodedTimeGoingForward) {
  auto rec = Record({PROGRAM_DIR "/emulate_fib", "x"}, {"--event", "intel_pt/mtc=1,cyc=1/u"});
  if (skipped_) GTEST_SKIP() << "ptrace denied";
  ASSERT_EQ(rec.exit_code, 3) << rec.err;
  CheckDecode(1);
  ExpectTimeNeverGoesBack();
}

TEST_F(EmulateCliTest, TheAuxRecordsAreOnTheSidebandsClock) {
  if (access("/usr/bin/perf", X_OK) != 0) GTEST_SKIP() << "perf (linux-perf) is not installed";
  auto rec = Record({PROGRAM_DIR "/emulate_fib", "x"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  const std::string data = dir_.File("t.data");
  ASSERT_EQ(
      RunCommand({PTDECODE_PATH, "export", trace_, "--to", "perf.data", "-o", data}).exit_code, 0);
  auto dump = RunCommand({"/usr/bin/perf", "script", "-i", data, "-D"});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  uint64_t exec = 0, exit = 0;
  std::vector<uint64_t> aux;
  std::istringstream lines(dump.out);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long cpu = 0, time = 0;
    if (std::sscanf(line.c_str(), "%llu %llu 0x", &cpu, &time) != 2) continue;
    if (line.find("PERF_RECORD_COMM exec") != std::string::npos) exec = time;
    if (line.find("PERF_RECORD_EXIT") != std::string::npos) exit = time;
    if (line.find("PERF_RECORD_AUX ") != std::string::npos) aux.push_back(time);
  }
  ASSERT_GT(exec, 0u) << dump.out.substr(0, 3000);
  ASSERT_FALSE(aux.empty());
  for (uint64_t t : aux) {
    EXPECT_GT(t, exec);
    if (exit != 0) {
      EXPECT_LE(t, exit + 1000000000u);
    }
  }
}

TEST_F(EmulateCliTest, ADynamicProgramThatDlopensALibrary) {
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_dlopen", PROGRAM_DIR "/libemulate_plugin.so"}, 1),
            0);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
}

// A library dlclose'd and another dlopen'd where it was: code of two files at one address in
// one program. The decode switches images where the second is mapped (the sideband's MMAP2
// over the first's code), so it equals the ground truth and stats names both; before, one
// image held both and the first library's instructions were decoded as the second's (stats
// had no work of it; fast and libipt disagreed until a75249e's one rule).
TEST_F(EmulateCliTest, ALibraryLoadedWhereAnotherWasDecodesToTheGroundTruth) {
  const std::string first = PROGRAM_DIR "/libemulate_plugin.so";
  const std::string second = E2E_PROGRAM_DIR "/libe2e_dl_swap_other.so";
  auto rec = Record({E2E_PROGRAM_DIR "/e2e_dl_swap", first, second});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  // Each line: where that library was loaded, plugin_work's result.
  std::istringstream lines(rec.out);
  std::string at_first, at_second, result;
  lines >> at_first >> result >> at_second >> result;
  if (at_first != at_second) {
    GTEST_SKIP() << "the second library was not mapped where the first was: " << rec.out;
  }
  EXPECT_THAT(CheckDecode(1), Not(HasSubstr("was mapped at")));
  // main's inclusive count by the ground truth: from its first instruction to its last (its
  // addresses: those insn names main+N). The frames on the stack when the images change count
  // on as the same functions (main counted 25 more with a second "main" of the new images).
  auto insn = RunCommand({PTDECODE_PATH, "insn", trace_});
  std::set<uint64_t> main_ips;
  std::istringstream insn_lines(insn.out);
  for (std::string line; std::getline(insn_lines, line);) {
    double time = 0;
    uint64_t tid = 0, ip = 0;
    char symbol[256] = {};
    if (std::sscanf(line.c_str(), "%lf tid %" SCNu64 " %" SCNx64 " %255s", &time, &tid, &ip,
                    symbol) == 4 &&
        std::string_view(symbol).starts_with("main+")) {
      main_ips.insert(ip);
    }
  }
  const std::vector<uint64_t> ran = ReadTruth(truth_).begin()->second;
  size_t first_main = ran.size(), last_main = 0;
  for (size_t i = 0; i < ran.size(); ++i) {
    if (!main_ips.contains(ran[i])) continue;
    first_main = std::min(first_main, i);
    last_main = i;
  }
  ASSERT_LT(first_main, ran.size());
  for (const std::vector<std::string>& decoder :
       {std::vector<std::string>{}, std::vector<std::string>{"--decoder", "libipt"},
        std::vector<std::string>{"-j", "2"}}) {
    std::vector<std::string> argv = {PTDECODE_PATH, "stats", "--json", trace_};
    argv.insert(argv.begin() + 2, decoder.begin(), decoder.end());
    auto stats = RunCommand(argv);
    ASSERT_EQ(stats.exit_code, 0) << stats.err;
    std::set<std::string> images;
    const nlohmann::json json = nlohmann::json::parse(stats.out);
    for (const auto& f : json["functions"]) {
      if (f["function"] == "plugin_work") images.insert(f["image"].get<std::string>());
      if (f["function"] == "main") {
        EXPECT_EQ(f["inclusive"], last_main - first_main + 1);
      }
    }
    EXPECT_EQ(images, (std::set<std::string>{first, second})) << stats.out.substr(0, 2000);
  }
}

TEST_F(EmulateCliTest, AnAddressFilterTracesOnlyItsRegion) {
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  EXPECT_EQ(RecordAndCheck({fib, "x"}, 1, "filter fib @ " + fib), 3);
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  // A library that the program dlopen()s, by symbol.
  const std::string lib = PROGRAM_DIR "/libemulate_plugin.so";
  EXPECT_EQ(RecordAndCheck({PROGRAM_DIR "/emulate_dlopen", lib}, 1, "filter plugin_work @ " + lib),
            0);
}

TEST_F(EmulateCliTest, AFilterThatCannotBeEmulatedIsAnErrorNamingIt) {
  const std::string fib = PROGRAM_DIR "/emulate_fib";
  auto r = RunCommand({PTRECORD_PATH, "--emulate=step", "--filter", "start main @ " + fib, "-o",
                       dir_.File("t.pt"), "--", fib});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'filter' regions"));
  r = RunCommand({PTRECORD_PATH, "--emulate=step", "--filter", "filter no_such_function @ " + fib,
                  "-o", dir_.File("t.pt"), "--", fib});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no_such_function"));
}

// clock_gettime() and gettimeofday() run in the vDSO, which is in no file: its bytes are in
// the container (also for the forked child, which has no MMAP2 of it), so the decode goes
// through them.
// A daemon (fork, setsid, fork) outlives the command: every process is stepped to its end, and
// ptrecord says once that it waits (as the qemu backend does; it said nothing), but not with -q.
TEST_F(EmulateCliTest, ADaemonStartedByTheCommandIsSteppedToItsEndAndSaid) {
  const std::string done = dir_.File("daemon.done");
  auto rec = Record({E2E_PROGRAM_DIR "/e2e_daemon", done});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  EXPECT_EQ(rec.exit_code, 0) << rec.err;
  CheckDecode(3);
  EXPECT_EQ(testing::ReadWholeFile<std::string>(done), "1249975000\n");
  EXPECT_THAT(rec.err, HasSubstr("ptrecord: the command exited; waiting for "));
  EXPECT_THAT(rec.err, HasSubstr("it started that still run"));
  EXPECT_THAT(rec.err, HasSubstr("(SIGINT or SIGTERM stop the recording and keep it)"));
  // -q: no notice (qemu's the same: the notice is the backends' one WaitingNotice).
  const std::string daemon = E2E_PROGRAM_DIR "/e2e_daemon";
  auto quiet = RunCommand(
      {PTRECORD_PATH, "--emulate=qemu", "-q", "-o", dir_.File("q.pt"), "--", daemon, done});
  if (quiet.err.find("qemu-x86_64") == std::string::npos) {  // (no qemu: nothing to check)
    EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
    EXPECT_EQ(quiet.err, "");
  }
}

// `nohup ptrecord -- cmd`: SIGHUP ignored on entry stays ignored by ptrecord and by the
// command, in every backend and on the kernel path (sweep 29c F2: ptrecord installed its
// handler anyway, so the command started with SIGHUP at its default action and a hangup
// stopped the recording and killed it, exit 129). The command hangs up itself and its parent
// (ptrecord): under nohup and a shell instead of ptrecord (the oracle) it prints "alive" and
// exits 0.
TEST_F(EmulateCliTest, SignalsIgnoredOnEntryStayIgnored) {
  const std::string script = "kill -HUP $$; kill -HUP $PPID; sleep 0.2; echo alive";
  auto native = RunCommand({"/usr/bin/nohup", "/bin/sh", "-c", "/bin/sh -c '" + script + "'"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  ASSERT_EQ(native.out, "alive\n");
  for (const char* mode : {"--emulate=step", "--emulate=qemu", "--sideband-only"}) {
    SCOPED_TRACE(mode);
    // (Single-stepped, ptrecord sees the signal before the next instruction: no sleep, an
    // exec that would take seconds more.)
    const bool step = std::string_view(mode) == "--emulate=step";
    auto r = RunCommand({"/usr/bin/nohup", PTRECORD_PATH, mode, "-q", "--overwrite-existing", "-o",
                         dir_.File("hup.pt"), "--", "/bin/sh", "-c",
                         step ? "kill -HUP $$; kill -HUP $PPID; echo alive" : script});
    if (r.err.find("qemu-x86_64, which is not installed") != std::string::npos ||
        r.err.find("perf_event_open") != std::string::npos) {
      continue;
    }
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "alive\n") << r.err;
  }
}

// The kernel path (--sideband-only: the same session as intel_pt//) says a command that died of
// a signal, in a line and in the end metadata, as --emulate does (sweep 29c F3: only the exit
// status said it), and a recording stopped by SIGTERM says so. e2e_crash dies of SIGSEGV (the
// shell's $? is the oracle).
TEST_F(EmulateCliTest, TheKernelPathSaysACommandKilledByASignal) {
  const std::string crash = kE2e + "/e2e_crash";
  auto native = RunCommand({"/bin/sh", "-c", crash + "; echo $?"});
  ASSERT_EQ(native.out, "139\n");
  auto r =
      RunCommand({PTRECORD_PATH, "--sideband-only", "-q", "-o", dir_.File("segv.pt"), "--", crash});
  if (r.err.find("perf_event_open") != std::string::npos) GTEST_SKIP() << r.err;
  EXPECT_EQ(r.exit_code, 139) << r.err;
  EXPECT_EQ(r.err, "ptrecord: workload killed by SIGSEGV (exit status 139)\n");
  const auto end = [this](const std::string& name) {
    auto info = RunCommand({PTDECODE_PATH, "info", "--json", dir_.File(name)});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    return nlohmann::json::parse(info.out)["metadata"]["end"];
  };
  EXPECT_EQ(end("segv.pt"), nlohmann::json::parse(
                                R"({"workload_exit_status": 139, "workload_signal": "SIGSEGV"})"));
  auto ok = RunCommand(
      {PTRECORD_PATH, "--sideband-only", "-q", "-o", dir_.File("true.pt"), "--", "/bin/true"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err, "");
  EXPECT_EQ(end("true.pt"), nlohmann::json::parse(R"({"workload_exit_status": 0})"));
  // Stopped by SIGTERM (ptrecord's own, sent by the command): the command is sent SIGTERM,
  // which is not its death to report.
  auto stopped = RunCommand({PTRECORD_PATH, "--sideband-only", "-o", dir_.File("term.pt"), "--",
                             "/bin/sh", "-c", "kill -TERM $PPID; exec sleep 5"});
  EXPECT_EQ(stopped.exit_code, 143) << stopped.err;
  EXPECT_THAT(stopped.err, HasSubstr("; stopped by SIGTERM (the command was sent SIGTERM)"));
  EXPECT_THAT(stopped.err, Not(HasSubstr("workload killed")));
  EXPECT_EQ(end("term.pt"),
            nlohmann::json::parse(R"({"workload_exit_status": 143, "stopped_by": "SIGTERM"})"));
}

TEST_F(EmulateCliTest, AProgramReadingTheClockThroughTheVdso) {
  EXPECT_EQ(RecordAndCheck({kE2e + "/e2e_vdso"}, 2), 0);  // the program and its child
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, Not(HasSubstr("code:        0 B captured"))) << info.out;
}

// The container names the build that ran: decoding against another file is a warning naming
// it and what to do. The recorded build in a build-id cache (perf buildid-cache -a puts it
// there) is decoded instead of the file at the path, named by that path, as perf does (sweep
// 29b S2: the rebuilt file was decoded, 2 errors and 17k instructions short, though the cache
// had the recorded one).
TEST_F(EmulateCliTest, ARebuiltProgramIsAWarningNamingIt) {
  const std::string prog = dir_.File("prog");
  std::filesystem::copy_file(PROGRAM_DIR "/emulate_fib", prog);
  auto rec = Record({prog, "x"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 3) << rec.err;
  EXPECT_THAT(CheckDecode(1), Not(HasSubstr("build-id")));
  if (access("/usr/bin/perf", X_OK) != 0) GTEST_SKIP() << "perf is not installed";
  const std::string cache = dir_.File("cache");
  auto add = RunCommand({"/usr/bin/perf", "--buildid-dir", cache, "buildid-cache", "-a", prog});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  auto before = RunCommand({PTDECODE_PATH, "stats", "--buildid-dir", cache, trace_});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  // Rebuilt: another build-id at the same path.
  std::filesystem::copy_file(kE2e + "/e2e_fib_rebuilt", prog,
                             std::filesystem::copy_options::overwrite_existing);
  auto dec = RunCommand({PTDECODE_PATH, "stats", "--buildid-dir", dir_.File("empty"), trace_});
  EXPECT_THAT(dec.err, HasSubstr(prog + ": build-id "));
  EXPECT_THAT(dec.err, HasSubstr("differs from the recorded"));
  EXPECT_THAT(dec.err, HasSubstr("put the recorded build in a build-id cache"));
  auto cached = RunCommand({PTDECODE_PATH, "stats", "--buildid-dir", cache, trace_});
  EXPECT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_EQ(cached.err, "");
  EXPECT_EQ(cached.out, before.out);
  EXPECT_THAT(cached.out, HasSubstr(" fib [prog]"));
}

// A program without a build-id is known by the hash of its bytes: decoding against another
// file at its path is a warning naming it (sweep 29b S1: a rebuilt program's profile was wrong
// with no word), the same file none, and an export to trace.pt keeps the hash.
TEST_F(EmulateCliTest, ARebuiltProgramWithoutBuildIdIsAWarningNamingIt) {
  const std::string prog = dir_.File("prog");
  std::filesystem::copy_file(kE2e + "/e2e_fib_noid", prog);
  auto rec = Record({prog, "x"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 3) << rec.err;
  EXPECT_THAT(CheckDecode(1), Not(HasSubstr("not the file that was recorded")));
  const std::string again = dir_.File("again.pt");
  auto exported = RunCommand({PTDECODE_PATH, "export", "--to", "trace.pt", trace_, "-o", again});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::filesystem::copy_file(kE2e + "/e2e_fib_noid_rebuilt", prog,
                             std::filesystem::copy_options::overwrite_existing);
  for (const std::string& trace : {trace_, again}) {
    auto dec = RunCommand({PTDECODE_PATH, "stats", trace});
    EXPECT_THAT(dec.err, HasSubstr(prog + ": not the file that was recorded (it has no build-id"))
        << trace;
    EXPECT_THAT(dec.err, HasSubstr("put the recorded file under --sysroot DIR")) << trace;
  }
  // The recorded file under --sysroot: no warning.
  const std::string root = dir_.File("root");
  std::filesystem::create_directories(root + dir_.File(""));
  std::filesystem::copy_file(kE2e + "/e2e_fib_noid", root + prog);
  auto rooted = RunCommand({PTDECODE_PATH, "stats", "--sysroot", root, trace_});
  EXPECT_EQ(rooted.exit_code, 0) << rooted.err;
  EXPECT_EQ(rooted.err, "");
  // info --decode finds it as the decodes do (sweep 40b L5: it had no --sysroot), and says
  // that the option is its.
  auto summary = RunCommand({PTDECODE_PATH, "info", "--decode", trace_});
  EXPECT_THAT(summary.out + summary.err, HasSubstr(prog + ": not the file that was recorded"));
  summary = RunCommand({PTDECODE_PATH, "info", "--decode", "--sysroot", root, trace_});
  EXPECT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_THAT(summary.out + summary.err, Not(HasSubstr("not the file that was recorded")));
  summary = RunCommand({PTDECODE_PATH, "info", "--sysroot", root, trace_});
  EXPECT_EQ(summary.exit_code, 2);
  EXPECT_THAT(summary.err, HasSubstr("--sysroot is for info --decode"));
}

// --archive stores the mapped code: the recording decodes exactly without the program.
TEST_F(EmulateCliTest, AnArchivedRecordingNeedsNotTheProgram) {
  const std::string prog = dir_.File("prog");
  std::filesystem::copy_file(PROGRAM_DIR "/emulate_fib", prog);
  auto rec = Record({prog, "x"}, {"--archive"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_EQ(rec.exit_code, 3) << rec.err;
  // Names and source lines as where the program is (from its file), also without it: the
  // archive holds the file whole (sweep 29b S8: every function was sub_ADDRESS).
  const auto names = [](const std::string& trace) {
    return RunCommand({PTDECODE_PATH, "stats", trace}).out +
           RunCommand({PTDECODE_PATH, "calls", "--srcline", trace}).out;
  };
  const std::string here = names(trace_);
  // An export to trace.pt keeps the archived files (with their names).
  const std::string again = dir_.File("again.pt");
  auto exported = RunCommand({PTDECODE_PATH, "export", "--to", "trace.pt", trace_, "-o", again});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_THAT(here, HasSubstr(" fib [prog]"));
  EXPECT_THAT(here, HasSubstr("fib.c:"));
  // Replaced by other code: the archived bytes are decoded, not the file.
  std::filesystem::copy_file(kE2e + "/e2e_crash", prog,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THAT(CheckDecode(1), Not(HasSubstr("build-id")));
  EXPECT_EQ(names(trace_), here);
  std::filesystem::remove(prog);
  CheckDecode(1);
  EXPECT_EQ(names(trace_), here);
  const std::string from_export = names(again);
  EXPECT_EQ(from_export.substr(from_export.find('\n')), here.substr(here.find('\n')));
}

// A workload that dies of a signal is said on stderr (even with -q) and in the metadata;
// ptrecord exits 128 + the signal, as the shell reports the workload.
TEST_F(EmulateCliTest, AWorkloadKilledByASignalIsSaid) {
  auto rec = Record({kE2e + "/e2e_crash"}, {"-q"});
  if (skipped_) GTEST_SKIP() << "ptrace or perf_event_open denied";
  EXPECT_EQ(rec.exit_code, 128 + SIGSEGV);
  EXPECT_THAT(rec.err, HasSubstr("workload killed by SIGSEGV (exit status 139)"));
  CheckDecode(1);
  const nlohmann::json end = ReadMetadata(trace_).value("end", nlohmann::json::object());
  EXPECT_EQ(end.value("workload_signal", ""), "SIGSEGV") << end.dump();
  EXPECT_EQ(end.value("workload_exit_status", 0), 139);
  EXPECT_FALSE(end.contains("stopped_by"));
}

// Starts ptrecord --emulate on the endless e2e_spin in its own process group, waits until it
// has traced a while (its ground truth grows past `truth_bytes`; 0: for 0.5 s), sends it the
// signals (to the group when `group`, as a terminal's Ctrl-C does) and returns its wait
// status and stderr. A ptrecord still running 20 s later is killed (status: SIGKILL).
struct Stopped {
  int status = 0;
  std::string err;
};
Stopped RecordSpinUntil(const std::string& trace, const std::string& truth,
                        const std::vector<int>& signals, bool group, const std::string& filter = "",
                        off_t truth_bytes = 64 << 10, const std::vector<std::string>& extra = {}) {
  const std::string err_file = truth + ".stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    std::vector<std::string> args = {
        PTRECORD_PATH, "--emulate=step",      "--ground-truth", truth, "-o",
        trace,         "--overwrite-existing"};
    if (!filter.empty()) args.insert(args.end(), {"--filter", filter});
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", kE2e + "/e2e_spin"});
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(PTRECORD_PATH, argv.data());
    _exit(126);
  }
  ::setpgid(pid, pid);
  // 64 KiB of ground truth: some 4,000 instructions after the start.
  for (int i = 0; i < 600; ++i) {
    struct stat st;
    if (truth_bytes == 0 ? i == 10 : ::stat(truth.c_str(), &st) == 0 && st.st_size > truth_bytes) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int sig : signals) {
    ::kill(group ? -pid : pid, sig);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Stopped s;
  for (int i = 0; i < 400 && ::waitpid(pid, &s.status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (::waitpid(pid, &s.status, WNOHANG) == 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &s.status, 0);
  }
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  s.err = ss.str();
  return s;
}

// SIGTERM to ptrecord (SIGUSR2 before it: ignored, said once) ends the recording cleanly: exit
// 143, footer written, and everything traced up to there decodes to the ground truth.
TEST_F(EmulateCliTest, SigtermStopsTheRecordingAndKeepsTheTrace) {
  Stopped s = RecordSpinUntil(trace_, truth_, {SIGUSR2, SIGUSR2, SIGTERM}, false);
  if (s.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_TRUE(WIFEXITED(s.status)) << "ptrecord died of signal " << WTERMSIG(s.status);
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGTERM) << s.err;
  EXPECT_THAT(s.err, HasSubstr("stopped by SIGTERM"));
  EXPECT_THAT(s.err, HasSubstr("(emulated): 1 thread, "));
  const std::string usr2 = "SIGUSR2 ignored: not recording with --snapshot";
  EXPECT_THAT(s.err, HasSubstr(usr2));
  EXPECT_EQ(s.err.find(usr2), s.err.rfind(usr2)) << "said more than once: " << s.err;
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("footer:      present (closed cleanly)"));
  const PerThread truth = ReadTruth(truth_);
  ASSERT_EQ(truth.size(), 1u);
  EXPECT_GT(truth.begin()->second.size(), 4000u);
  CheckDecode(1);
  EXPECT_EQ(ReadMetadata(trace_)["end"].value("stopped_by", ""), "SIGTERM");
}

// --snapshot with the step backend: each SIGUSR2 snapshots the thread's overwritten 4 KiB
// ring, the end once more; every snapshot decodes to a run of what the thread executed, the
// last one to the end of the ground truth exactly.
TEST_F(EmulateCliTest, SnapshotsOfTheEmulatedRing) {
  Stopped s = RecordSpinUntil(trace_, truth_, {SIGUSR2, SIGUSR2, SIGTERM}, false, "", 64 << 10,
                              {"--snapshot", "-m", "64,1"});
  if (s.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_TRUE(WIFEXITED(s.status)) << "ptrecord died of signal " << WTERMSIG(s.status);
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGTERM) << s.err;
  EXPECT_THAT(s.err, HasSubstr("; 3 snapshots; stopped by SIGTERM"));
  EXPECT_THAT(s.err, Not(HasSubstr("SIGUSR2 ignored")));
  EXPECT_EQ(ReadMetadata(trace_).value("mode", ""), "snapshot");
  const PerThread truth = ReadTruth(truth_);
  ASSERT_EQ(truth.size(), 1u);
  const std::vector<uint64_t>& ran = truth.begin()->second;
  for (int k = 0; k < 3; ++k) {
    auto dec = RunCommand({PTDECODE_PATH, "insn", "--snapshot", std::to_string(k), trace_});
    ASSERT_EQ(dec.exit_code, 0) << dec.err;
    EXPECT_EQ(dec.out.find("[error"), std::string::npos) << k;
    const PerThread got = ParseInsn(dec.out);
    ASSERT_EQ(got.size(), 1u) << k;
    const std::vector<uint64_t>& insns = got.begin()->second;
    ASSERT_GT(insns.size(), 100u) << k;        // 4 KiB of PT holds hundreds of instructions
    ASSERT_LT(insns.size(), ran.size()) << k;  // and not the whole run
    if (k == 2) {
      EXPECT_TRUE(std::equal(insns.begin(), insns.end(), ran.end() - insns.size())) << k;
    } else {
      EXPECT_NE(std::search(ran.begin(), ran.end(), insns.begin(), insns.end()), ran.end()) << k;
    }
  }
}

// Ctrl-C reaches ptrecord and the workload (one process group): exit 130, the trace is kept.
TEST_F(EmulateCliTest, CtrlCStopsTheRecordingAndKeepsTheTrace) {
  Stopped s = RecordSpinUntil(trace_, truth_, {SIGINT}, true);
  if (s.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_TRUE(WIFEXITED(s.status)) << "ptrecord died of signal " << WTERMSIG(s.status);
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGINT) << s.err;
  EXPECT_THAT(s.err, HasSubstr("stopped by SIGINT"));
  EXPECT_THAT(s.err, Not(HasSubstr("workload killed")));
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("footer:      present (closed cleanly)"));
  CheckDecode(1);
}

// With --filter outside the region, the workload runs at full speed and stops nowhere:
// SIGTERM interrupts ptrecord's wait, which ends the run.
TEST_F(EmulateCliTest, SigtermStopsARunAtFullSpeed) {
  Stopped s = RecordSpinUntil(trace_, truth_, {SIGTERM}, false,
                              "filter never_called @ " + kE2e + "/e2e_spin", 0);
  if (s.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_TRUE(WIFEXITED(s.status)) << "ptrecord did not stop: signal " << WTERMSIG(s.status);
  EXPECT_EQ(WEXITSTATUS(s.status), 128 + SIGTERM) << s.err;
  EXPECT_THAT(s.err, HasSubstr("0 instructions"));
  EXPECT_THAT(s.err, HasSubstr("stopped by SIGTERM"));
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("footer:      present (closed cleanly)"));
}

TEST_F(EmulateCliTest, AMissingProgramExits127NamingIt) {
  auto r = RunCommand(
      {PTRECORD_PATH, "--emulate=step", "-o", dir_.File("t.pt"), "--", "/nonexistent/app"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/app"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// The workload runs as execvp runs it, and what cannot run fails as env(1) says it, with
// every recorder: the kernel's path (--sideband-only here, no PT) and both emulations. A file
// without #! that the kernel refuses (ENOEXEC) runs as a /bin/sh script (under qemu it was
// refused, exit 126); a file without x is 126 "Permission denied" (it was 127, "program not
// found" under qemu); a script whose interpreter is missing, 127 saying so.
TEST_F(EmulateCliTest, EveryRecorderRunsWhatExecvpRunsAndFailsAsEnvDoes) {
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_.File(name);
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  };
  const std::string text = write("text", "echo \"ran $0 $1\"\n", 0755);
  const std::string noexec = write("noexec", "#!/bin/sh\necho no\n", 0644);
  const std::string missing = write("missing", "#!/nonexistent/interpreter\n", 0755);
  auto env = [](const std::string& path) { return RunCommand({"/usr/bin/env", path, "arg"}); };
  const auto native = env(text);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  ASSERT_EQ(native.out, "ran " + text + " arg\n");
  EXPECT_EQ(env(noexec).exit_code, 126);
  EXPECT_EQ(env(missing).exit_code, 127);
  for (const std::string recorder : {"--sideband-only", "--emulate=step", "--emulate=qemu"}) {
    SCOPED_TRACE(recorder);
    if (recorder == "--emulate=qemu" && access("/usr/bin/qemu-x86_64", X_OK) != 0) continue;
    auto run = [&](const std::string& path) {
      return RunCommand(
          {PTRECORD_PATH, recorder, "-o", trace_, "--overwrite-existing", "--", path, "arg"});
    };
    auto r = run(text);
    if (r.err.find("Operation not permitted") != std::string::npos) GTEST_SKIP() << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, native.out);
    // A start that fails leaves the recording --overwrite-existing was to replace, and no
    // other file (sweep 31c F1: it was removed).
    const std::string recorded = ::ptkit::testing::ReadWholeFile<std::string>(trace_);
    auto kept = [&] {
      EXPECT_TRUE(::ptkit::testing::ReadWholeFile<std::string>(trace_) == recorded);
      for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
        EXPECT_EQ(e.path().string().find(".ptrecord-"), std::string::npos) << e.path();
      }
    };
    r = run(noexec);
    EXPECT_EQ(r.exit_code, 126) << r.err;
    EXPECT_EQ(r.err, "ptrecord: " + noexec + ": cannot execute: Permission denied\n");
    kept();
    r = run(missing);
    EXPECT_EQ(r.exit_code, 127) << r.err;
    EXPECT_THAT(r.err, HasSubstr(missing + ": cannot execute: its interpreter"));
    kept();
    r = run(dir_.File("nonexistent"));
    EXPECT_EQ(r.exit_code, 127) << r.err;
    EXPECT_EQ(r.err, "ptrecord: program not found: " + dir_.File("nonexistent") + "\n");
    kept();
  }
}

TEST_F(EmulateCliTest, AnEventThatCannotBeEmulatedIsAUsageError) {
  auto r = RunCommand({PTRECORD_PATH, "--emulate=step", "--event", "intel_pt//k", "-o",
                       dir_.File("t.pt"), "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("user space only"));
}

}  // namespace
}  // namespace ptkit
