// Issue 12: ptrecord killed with SIGKILL at random moments, and a disk that fills up
// mid-recording. Whatever happened, the file opens, every record before the cut is whole (in
// sequence, checksums valid: the reader verifies them), the only damage is the cut at the end,
// and the decoders say what is missing. The emulated trace that is there decodes to a prefix of
// the recorder's ground truth.
//
// The kill moments are random (seeded by the clock; the seed is printed with each failure).
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "ptkit/errno_text.h"
#include "ptkit/status.h"
#include "record/drain.h"
#include "record/drain_loop.h"
#include "record/event_spec.h"
#include "record/metadata.h"
#include "record/sim_pmu.h"
#include "run_command.h"
#include "scoped_tmpfs.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::ptkit::testing::ScopedTmpfs;
using ::testing::HasSubstr;

using ::ptkit::testing::Denied;
using ::ptkit::testing::HaveQemu;
using ::ptkit::testing::kSpin;

const std::string kTick = std::string(E2E_PROGRAM_DIR) + "/e2e_tick";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

off_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// Starts `args` (ptrecord ...) in its own process group with stderr to `err_file`.
pid_t Start(std::vector<std::string> args, const std::string& err_file) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(PTRECORD_PATH, argv.data());
    _exit(126);
  }
  ::setpgid(pid, pid);
  return pid;
}

// Waits until `path` has more than its file header, then `delay`, then kills ptrecord and its
// workload (the process group) with SIGKILL. Returns false when the file never appeared.
bool KillAfter(pid_t pid, const std::string& path, std::chrono::milliseconds delay) {
  bool appeared = false;
  for (int i = 0; i < 400 && !appeared; ++i) {
    appeared = SizeOf(path) > 64;
    if (!appeared) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(delay);
  ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return appeared;
}

// The trace byte at AUX offset `off` that the simulated PMU's hardware writes: a hash of the
// offset, so a byte stored from the wrong place cannot match by accident.
uint8_t TraceByte(uint64_t off) {
  uint64_t x = off * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 17));
}

struct Contents {
  uint64_t records = 0, aux = 0;
  uint64_t aux_bytes = 0;
  bool aux_is_trace_bytes = true;  // every AUX byte is TraceByte(its offset)
  bool cut_in_a_record = false;    // the file ends in the middle of a record
};

// Every record the reader returns is whole and in sequence (the reader verifies each checksum),
// each stream's AUX records follow each other without a gap or overlap from offset 0, the footer
// is missing and the only damage (if any) is a cut that runs to the end of the file.
Contents ExpectWholeRecordsThenACut(const std::string& path) {
  Contents c;
  auto reader = ContainerReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return c;
  std::map<StreamId, uint64_t> aux_end;  // where each stream's next AUX record must start
  RecordView rec;
  for (;;) {
    absl::StatusOr<bool> more = reader->Next(rec);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    EXPECT_EQ(rec.sequence, c.records) << "a record before the cut is missing";
    ++c.records;
    if (rec.type != RecordType::kAux) continue;
    ++c.aux;
    absl::StatusOr<AuxRecord> a = ParseAux(rec.payload);
    EXPECT_TRUE(a.ok()) << a.status() << " (record " << rec.sequence << ")";
    if (!a.ok()) continue;
    EXPECT_EQ(a->aux_offset, aux_end[a->stream])
        << StreamName(a->stream) << ": record " << rec.sequence << " leaves a gap or overlaps";
    aux_end[a->stream] = a->aux_offset + a->data.size();
    c.aux_bytes += a->data.size();
    for (size_t i = 0; i < a->data.size() && c.aux_is_trace_bytes; ++i) {
      c.aux_is_trace_bytes = a->data[i] == TraceByte(a->aux_offset + i);
    }
  }
  const ReadReport& report = reader->report();
  EXPECT_FALSE(report.footer_present);
  EXPECT_LE(report.damage.size(), 1u);
  for (const Damage& d : report.damage) {
    EXPECT_EQ(d.offset + d.bytes, report.file_size) << "damage before the end: " << d.reason;
  }
  c.cut_in_a_record = !report.damage.empty();
  EXPECT_GT(c.records, 0u) << "not even the metadata";
  return c;
}

// `ptdecode info` says the recording was not closed cleanly.
void ExpectInfoSaysTheFooterIsMissing(const std::string& trace) {
  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("footer:      MISSING (not closed cleanly"));
}

// The instruction addresses in `text`, in order, and the threads they ran on: `ptdecode insn`
// lines ("[TIME] tid TID ADDRESS symbol+offset"; marker lines in brackets skipped) or ground
// truth lines ("TID 0xADDRESS"). (ParseInsn's and ReadTruth's string streams take seconds on the
// million lines QEMU runs in a second.)
std::vector<uint64_t> Addresses(std::string_view text, std::set<uint64_t>& tids) {
  std::vector<uint64_t> ips;
  while (!text.empty()) {
    const size_t nl = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(std::min(nl + 1, text.size()));
    if (line.empty() || line.front() == '[') continue;
    if (const size_t tid = line.find("tid "); tid != std::string_view::npos) {
      line.remove_prefix(tid + 4);
    }
    const char* p = line.data();
    const char* const end = p + line.size();
    uint64_t t = 0, ip = 0;
    p = std::from_chars(p, end, t).ptr;
    while (p < end && *p == ' ') ++p;
    if (end - p > 2 && p[0] == '0' && p[1] == 'x') p += 2;
    if (std::from_chars(p, end, ip, 16).ec != std::errc()) continue;
    tids.insert(t);
    ips.push_back(ip);
  }
  return ips;
}

// ptdecode says the recording is cut and what that means; the emulated trace decodes to a
// prefix of the ground truth (which the recorder wrote alongside, cut as well).
void ExpectDecodeSaysWhatIsMissing(const std::string& trace, const std::string& truth,
                                   const Contents& c) {
  ExpectInfoSaysTheFooterIsMissing(trace);
  // Without a ground truth to compare with, the counts say the same (and the output is small).
  auto dec = RunCommand({PTDECODE_PATH, truth.empty() ? "stats" : "insn", trace});
  if (c.aux == 0) {
    // Killed before any trace was written: an empty result that says why.
    EXPECT_NE(dec.exit_code, 0);
    EXPECT_FALSE(dec.err.empty());
    return;
  }
  EXPECT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_THAT(dec.err, HasSubstr("no footer: the recording did not finish cleanly"));
  if (truth.empty()) return;
  std::set<uint64_t> got_tids, want_tids;
  const std::vector<uint64_t> a = Addresses(dec.out, got_tids);
  const std::vector<uint64_t> b = Addresses(ReadAll(truth), want_tids);
  ASSERT_EQ(got_tids.size(), 1u) << dec.out.substr(0, 500);
  ASSERT_EQ(want_tids, got_tids);
  const size_t n = std::min(a.size(), b.size());
  EXPECT_GT(n, 0u);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], b[i]) << "instruction " << i << " of " << a.size() << " decoded";
  }
}

uint32_t Seed() {
  return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Kills per test: PTKIT_KILL_RUNS=N, or `fallback` (a few, for the default run). The long loop:
//   PTKIT_KILL_RUNS=50 ctest --preset ci -R PtrecordKillTest\|KillTest
int KillRuns(int fallback) {
  const char* n = std::getenv("PTKIT_KILL_RUNS");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : fallback;
}

// --emulate: the backend (the ptrace stepper, or QEMU with ptkit's plugin), the encoder and the
// writer thread, killed up to 1.5 s (QEMU: 0.5 s) after the first records reached the file (the
// writer flushes every second, or every 64 KiB). The stepper (~17 k instructions/s) runs the spin
// loop; QEMU runs a loop that sleeps 10 ms per 500 iterations (its ~10^7 instructions/s of a spin
// loop would make millions of instructions to compare).
class EmulatedKillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EmulatedKillTest, KilledAtRandomMomentsKeepsEveryWholeRecord) {
  const std::string backend = GetParam();
  if (backend == "qemu" && !HaveQemu()) {
    GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)";
  }
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int run = 0, runs = KillRuns(backend == "step" ? 2 : 1); run < runs; ++run) {
    testing::TempDir dir;
    const std::string trace = dir.File("trace.pt"), truth = dir.File("truth.txt");
    const auto delay = std::chrono::milliseconds(rng() % (backend == "step" ? 1500 : 500));
    SCOPED_TRACE(::testing::Message() << "killed " << delay.count() << " ms in");
    std::vector<std::string> args = {
        PTRECORD_PATH, "--emulate=" + backend, "--ground-truth", truth, "-o", trace};
    args.insert(args.end(), {"--", backend == "step" ? kSpin : kTick});
    const pid_t pid = Start(args, dir.File("err"));
    const bool appeared = KillAfter(pid, trace, delay);
    const std::string err = ReadAll(dir.File("err"));
    if (Denied(err)) GTEST_SKIP() << "ptrace or perf_event_open denied: " << err;
    ASSERT_TRUE(appeared) << err;
    const Contents c = ExpectWholeRecordsThenACut(trace);
    ExpectDecodeSaysWhatIsMissing(trace, truth, c);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EmulatedKillTest, ::testing::Values("step", "qemu"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

// A workload that makes sideband all the time: a FORK, COMM, MMAP2s and an EXIT per /bin/true.
const std::vector<std::string> kForkLoop = {"/bin/sh", "-c", "while :; do /bin/true; done"};

std::vector<std::string> SidebandOnly(const std::string& trace) {
  std::vector<std::string> args = {PTRECORD_PATH, "--sideband-only", "-o", trace, "--"};
  args.insert(args.end(), kForkLoop.begin(), kForkLoop.end());
  return args;
}

bool PerfDenied(const std::string& err) {
  return Denied(err) || err.find("perf_event_paranoid") != std::string::npos;
}

// The kernel path: real perf events (sideband of a workload that forks all the time, from a
// dummy event), the drain loop and the writer thread, killed mid-run. Needs perf_event_open
// (root in CI).
TEST(PtrecordKillTest, KernelRecordingKilledAtRandomMomentsKeepsEveryWholeRecord) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int run = 0, runs = KillRuns(2); run < runs; ++run) {
    testing::TempDir dir;
    const std::string trace = dir.File("trace.pt");
    const auto delay = std::chrono::milliseconds(rng() % 600);
    SCOPED_TRACE(::testing::Message() << "killed " << delay.count() << " ms in");
    const pid_t pid = Start(SidebandOnly(trace), dir.File("err"));
    const bool appeared = KillAfter(pid, trace, delay);
    const std::string err = ReadAll(dir.File("err"));
    if (PerfDenied(err)) GTEST_SKIP() << "perf_event_open denied: " << err;
    ASSERT_TRUE(appeared) << err;
    ExpectWholeRecordsThenACut(trace);
    ExpectInfoSaysTheFooterIsMissing(trace);
  }
}

// Waits up to `seconds` for `pid` to end (then kills its process group). False when it had to.
bool WaitFor(pid_t pid, int seconds, int& status) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return false;
}

// After a recording on a full disk: it ended by itself with exit 1 and an error naming the file
// and ENOSPC, and the file holds whole records up to where the writer cut it back.
Contents ExpectStoppedByTheFullDisk(bool ended, int status, const std::string& err,
                                    const std::string& trace) {
  EXPECT_TRUE(ended) << "still recording long after the disk filled up";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << " " << err;
  EXPECT_THAT(err, HasSubstr("write " + trace + ": No space left on device"));
  const Contents c = ExpectWholeRecordsThenACut(trace);
  EXPECT_FALSE(c.cut_in_a_record)
      << "the writer did not cut the file back to its last whole record";
  return c;
}

// ptrecord's error also says what became of the command and of the file (sweep 28b F5: it
// said only the write's).
void ExpectSaysTheCommandStoppedAndTheFileKeepsItsRecords(const std::string& err,
                                                          const std::string& trace) {
  EXPECT_THAT(err, HasSubstr("No space left on device; the recording stopped there, and the "
                             "command with it (killed): " +
                             trace + " keeps every record written before"));
}

// The kernel path on a 16 KiB tmpfs that the sideband fills up: ptrecord stops (exit 1) with an
// error naming the file and ENOSPC, ends the workload, and the file keeps every whole record.
TEST(PtrecordKillTest, KernelRecordingOnAFullDiskStopsAndKeepsEveryWholeRecord) {
  testing::TempDir dir;
  const std::string mnt = dir.File("small");
  ScopedTmpfs tmpfs(mnt, "size=16k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  const std::string trace = mnt + "/trace.pt";
  const pid_t pid = Start(SidebandOnly(trace), dir.File("err"));
  int status = 0;
  const bool ended = WaitFor(pid, 20, status);
  const std::string err = ReadAll(dir.File("err"));
  if (PerfDenied(err)) GTEST_SKIP() << "perf_event_open denied: " << err;
  // How many records fit before the cut depends on what the writer had batched when the disk
  // filled (a loaded machine batches more): at least the first is whole.
  const Contents c = ExpectStoppedByTheFullDisk(ended, status, err, trace);
  EXPECT_GE(c.records, 1u);
  ExpectSaysTheCommandStoppedAndTheFileKeepsItsRecords(err, trace);
  ExpectInfoSaysTheFooterIsMissing(trace);
}

// The recorder's kernel path on the simulated PMU (record/sim_pmu.h), in a child process: a
// producer thread plays the hardware and the kernel (TraceByte(offset) into the AUX ring at
// about 4 MB/s, PERF_RECORD_ITRACE_START into the data ring) while RunDrainLoop, the Drainer and
// the ContainerWriter's threads move it into `path`, as ptrecord's session does with the
// kernel's rings (the drain cannot tell the two apart). Every 20 ms it flushes the writer and
// reports on `report_fd` how many records are then in the file. It runs until it is killed or
// a write fails; then it prints the error as ptrecord does and exits 1.
[[noreturn]] void RecordOnSimulatedPmu(const std::string& path, int report_fd) {
  const absl::Status status = [&]() -> absl::Status {
    record::SignalWatcher signals;  // before any thread, as in the session
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ContainerWriter> writer, ContainerWriter::Create(path));
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<record::SimulatedPmu> sim,
                           record::SimulatedPmu::Create({.data_pages = 8, .aux_pages = 16}));
    record::MetadataInput meta;
    meta.command_line = {"ptrecord_kill_test", "simulated PMU"};
    meta.attrs.emplace_back("tracking", record::BuildTrackingAttr({}));
    meta.time = record::ReadTimeConversion(sim->ring().page);
    meta.page_size = 4096;
    meta.mode = "full-trace";
    meta.cpus = {0};
    meta.data_pages = 8;
    meta.aux_pages = 16;
    PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(record::BuildMetadata(meta).dump()));
    record::Drainer drainer(writer.get());
    std::atomic<bool> stop{false};
    std::thread hardware([&] {
      std::mt19937_64 rng(1);
      std::vector<uint8_t> bytes;
      for (uint64_t at = 0; !stop;) {
        bytes.resize(1 + rng() % 16384);
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = TraceByte(at + i);
        at += sim->WriteTrace(bytes);  // the AUX offset only moves by what reached the ring
        if (rng() % 4 == 0) sim->WriteItraceStart(1000, 1000);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    record::LoopOptions lo;
    lo.poll_timeout_ms = 5;
    auto last_report = std::chrono::steady_clock::now();
    absl::Status flushed;
    lo.should_stop = [&] {
      if (std::chrono::steady_clock::now() - last_report < std::chrono::milliseconds(20)) {
        return false;
      }
      last_report = std::chrono::steady_clock::now();
      flushed = writer->Flush();  // this thread is the only producer: nothing is queued after
      const uint64_t records = writer->stats().records;
      if (flushed.ok() && ::write(report_fd, &records, sizeof(records)) != sizeof(records)) {
        flushed = absl::InternalError("report pipe");
      }
      return !flushed.ok();
    };
    record::TraceSource* sources[] = {sim.get()};
    absl::StatusOr<record::LoopResult> loop = RunDrainLoop(sources, drainer, signals, lo);
    stop = true;
    hardware.join();
    PTKIT_RETURN_IF_ERROR(loop.status());
    return flushed;
  }();
  std::fprintf(stderr, "ptrecord: %s\n", std::string(status.message()).c_str());
  (void)std::fflush(stderr);  // nowhere to report its failure
  ::_exit(1);
}

// Forks RecordOnSimulatedPmu in its own process group, stderr to `err_file`. `report_fd` is the
// read end of its report pipe.
pid_t StartSimulated(const std::string& path, const std::string& err_file, int& report_fd) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::close(fds[0]);
    const int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    RecordOnSimulatedPmu(path, fds[1]);
  }
  ::setpgid(pid, pid);
  ::close(fds[1]);
  report_fd = fds[0];
  return pid;
}

// The last record count the recorder reported (0 when none), once it has ended.
uint64_t LastReport(int report_fd) {
  uint64_t last = 0, value = 0;
  while (::read(report_fd, &value, sizeof(value)) == sizeof(value)) last = value;
  ::close(report_fd);
  return last;
}

// The kernel path with the simulated PMU, killed at random moments: every record the writer
// had reported written is there, whole, and every AUX byte is the one the hardware wrote at its
// offset.

TEST(PtrecordKillTest, SimulatedPmuRecordingKilledAtRandomMomentsKeepsEveryWrittenRecord) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int run = 0, runs = KillRuns(3); run < runs; ++run) {
    testing::TempDir dir;
    const std::string trace = dir.File("trace.pt");
    const auto delay = std::chrono::milliseconds(rng() % 400);
    SCOPED_TRACE(::testing::Message() << "killed " << delay.count() << " ms in");
    int report_fd = -1;
    const pid_t pid = StartSimulated(trace, dir.File("err"), report_fd);
    ASSERT_GT(pid, 0);
    const bool appeared = KillAfter(pid, trace, delay);
    const uint64_t reported = LastReport(report_fd);
    ASSERT_TRUE(appeared) << ReadAll(dir.File("err"));
    const Contents c = ExpectWholeRecordsThenACut(trace);
    EXPECT_GE(c.records, reported) << "records the writer had written are missing";
    EXPECT_TRUE(c.aux_is_trace_bytes) << "an AUX byte is not the one written at its offset";
    ExpectInfoSaysTheFooterIsMissing(trace);
  }
}

// The same recorder on a 256 KiB tmpfs that fills up: it stops with an error that names the
// file and ENOSPC (exit 1) instead of tracing on, and the file keeps every record written whole,
// cut back to the last one; the AUX bytes are the hardware's. Needs root to mount.
TEST(PtrecordKillTest, SimulatedPmuRecordingOnAFullDiskStopsAndKeepsEveryWholeRecord) {
  testing::TempDir dir;
  const std::string mnt = dir.File("small");
  ScopedTmpfs tmpfs(mnt, "size=256k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  const std::string trace = mnt + "/trace.pt";
  int report_fd = -1;
  const pid_t pid = StartSimulated(trace, dir.File("err"), report_fd);
  ASSERT_GT(pid, 0);
  int status = 0;
  const bool ended = WaitFor(pid, 10, status);  // the disk is full in about 70 ms
  const uint64_t reported = LastReport(report_fd);
  const std::string err = ReadAll(dir.File("err"));
  const Contents c = ExpectStoppedByTheFullDisk(ended, status, err, trace);
  EXPECT_GE(c.records, reported);
  EXPECT_GT(c.aux, 0u);
  EXPECT_TRUE(c.aux_is_trace_bytes) << "an AUX byte is not the one written at its offset";
  EXPECT_GT(SizeOf(trace), 128 << 10) << "the file was cut back further than the last record";
  ExpectInfoSaysTheFooterIsMissing(trace);
}

// A 128 KiB tmpfs fills up mid-recording: ptrecord stops with the error (exit 1) instead of
// tracing on for ever, and the file keeps every record it could write whole. Both emulated
// backends: the stepper (the disk is full in about 3 s) and QEMU (at once; its ground truth is
// too large to write here, so only the decode's own account is checked). Needs root to mount.
class DiskFullTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DiskFullTest, DiskFullMidRecordingKeepsEveryWholeRecord) {
  const std::string backend = GetParam();
  if (backend == "qemu" && !HaveQemu()) {
    GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)";
  }
  testing::TempDir dir;
  const std::string mnt = dir.File("small");
  ScopedTmpfs tmpfs(mnt, "size=128k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  const std::string trace = mnt + "/trace.pt";
  const std::string truth = backend == "step" ? dir.File("truth.txt") : "";
  // AUX rings of 4 pages: AUX records of 16 KiB at most, so some fit before the disk is full.
  std::vector<std::string> args = {
      PTRECORD_PATH, "--emulate=" + backend, "--no-compress", "-m", "16,4", "-o", trace};
  if (!truth.empty()) args.insert(args.end(), {"--ground-truth", truth});
  args.insert(args.end(), {"--", kSpin});
  const pid_t pid = Start(args, dir.File("err"));
  int status = 0;
  const bool ended = WaitFor(pid, 30, status);
  const std::string err = ReadAll(dir.File("err"));
  if (Denied(err)) GTEST_SKIP() << "ptrace denied: " << err;
  const Contents c = ExpectStoppedByTheFullDisk(ended, status, err, trace);
  EXPECT_GT(c.aux, 0u);
  ExpectSaysTheCommandStoppedAndTheFileKeepsItsRecords(err, trace);
  ExpectDecodeSaysWhatIsMissing(trace, truth, c);
}

// A disk that fills up only once the command has ended (--archive's files, written at the end,
// do not fit) says so, not that the command was killed with the recording (sweep 31c F6).
TEST(PtrecordKillTest, ADiskFullOnceTheCommandEndedSaysItHadEnded) {
  if (!HaveQemu()) GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)";
  testing::TempDir dir;
  const std::string mnt = dir.File("small");
  ScopedTmpfs tmpfs(mnt, "size=256k");
  if (!tmpfs.skipped().empty()) GTEST_SKIP() << tmpfs.skipped();
  const std::string trace = mnt + "/trace.pt";
  const pid_t pid =
      Start({PTRECORD_PATH, "--emulate=qemu", "--archive", "-o", trace, "--", "/bin/true"},
            dir.File("err"));
  int status = 0;
  const bool ended = WaitFor(pid, 30, status);
  const std::string err = ReadAll(dir.File("err"));
  ExpectStoppedByTheFullDisk(ended, status, err, trace);
  EXPECT_THAT(err, HasSubstr("No space left on device; the recording stopped there (the command "
                             "had ended): " +
                             trace + " keeps every record written before"));
  EXPECT_THAT(err, Not(HasSubstr("killed")));
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskFullTest, ::testing::Values("step", "qemu"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace ptkit
