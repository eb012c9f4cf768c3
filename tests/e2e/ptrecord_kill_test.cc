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

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

using ::ptkit::testing::kSpin;

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

struct Contents {
  uint64_t records = 0, aux = 0;
};

// Every record the reader returns is whole and in sequence, the footer is missing and the only
// damage (if any) is a cut that runs to the end of the file.
Contents ExpectWholeRecordsThenACut(const std::string& path) {
  Contents c;
  auto reader = ContainerReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return c;
  RecordView rec;
  for (;;) {
    absl::StatusOr<bool> more = reader->Next(rec);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    EXPECT_EQ(rec.sequence, c.records) << "a record before the cut is missing";
    ++c.records;
    c.aux += rec.type == RecordType::kAux;
  }
  const ReadReport& report = reader->report();
  EXPECT_FALSE(report.footer_present);
  EXPECT_LE(report.damage.size(), 1u);
  for (const Damage& d : report.damage) {
    EXPECT_EQ(d.offset + d.bytes, report.file_size) << "damage before the end: " << d.reason;
  }
  EXPECT_GT(c.records, 0u) << "not even the metadata";
  return c;
}

// ptdecode says the recording is cut and what that means; the emulated trace decodes to a
// prefix of the ground truth (which the recorder wrote alongside, cut as well).
void ExpectDecodeSaysWhatIsMissing(const std::string& trace, const std::string& truth,
                                   const Contents& c) {
  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("footer:      MISSING (not closed cleanly"));
  auto dec = RunCommand({PTDECODE_PATH, "insn", trace});
  if (c.aux == 0) {
    // Killed before any trace was written: an empty result that says why.
    EXPECT_NE(dec.exit_code, 0);
    EXPECT_FALSE(dec.err.empty());
    return;
  }
  EXPECT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_THAT(dec.err, HasSubstr("no footer: the recording did not finish cleanly"));
  if (truth.empty()) return;
  const PerThread got = ParseInsn(dec.out), want = ReadTruth(truth);
  ASSERT_EQ(got.size(), 1u) << dec.out.substr(0, 500);
  ASSERT_EQ(want.size(), 1u);
  const std::vector<uint64_t>& a = got.begin()->second;
  const std::vector<uint64_t>& b = want.begin()->second;
  const size_t n = std::min(a.size(), b.size());
  EXPECT_GT(n, 0u);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], b[i]) << "instruction " << i << " of " << a.size() << " decoded";
  }
}

uint32_t Seed() {
  return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

using ::ptkit::testing::Denied;

// --emulate: the ptrace stepper, the encoder and the writer thread, killed mid-run.
TEST(PtrecordKillTest, EmulatedRecordingKilledAtRandomMomentsKeepsEveryWholeRecord) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int run = 0; run < 2; ++run) {
    testing::TempDir dir;
    const std::string trace = dir.File("trace.pt"), truth = dir.File("truth.txt");
    const auto delay = std::chrono::milliseconds(rng() % 1500);
    SCOPED_TRACE(::testing::Message() << "killed " << delay.count() << " ms in");
    const pid_t pid =
        Start({PTRECORD_PATH, "--emulate=step", "--ground-truth", truth, "-o", trace, "--", kSpin},
              dir.File("err"));
    const bool appeared = KillAfter(pid, trace, delay);
    const std::string err = ReadAll(dir.File("err"));
    if (Denied(err)) GTEST_SKIP() << "ptrace or perf_event_open denied: " << err;
    ASSERT_TRUE(appeared) << err;
    const Contents c = ExpectWholeRecordsThenACut(trace);
    ExpectDecodeSaysWhatIsMissing(trace, truth, c);
  }
}

// The kernel path: real perf events (sideband of the workload from a dummy event), the drain
// loop and the writer thread, killed mid-run. Needs perf_event_open (root in CI).
TEST(PtrecordKillTest, KernelRecordingKilledAtRandomMomentsKeepsEveryWholeRecord) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int run = 0; run < 2; ++run) {
    testing::TempDir dir;
    const std::string trace = dir.File("trace.pt");
    const auto delay = std::chrono::milliseconds(rng() % 600);
    SCOPED_TRACE(::testing::Message() << "killed " << delay.count() << " ms in");
    const pid_t pid =
        Start({PTRECORD_PATH, "--sideband-only", "-o", trace, "--", kSpin}, dir.File("err"));
    const bool appeared = KillAfter(pid, trace, delay);
    const std::string err = ReadAll(dir.File("err"));
    if (Denied(err) || err.find("perf_event_paranoid") != std::string::npos) {
      GTEST_SKIP() << "perf_event_open denied: " << err;
    }
    ASSERT_TRUE(appeared) << err;
    ExpectWholeRecordsThenACut(trace);
    auto info = RunCommand({PTDECODE_PATH, "info", trace});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_THAT(info.out, HasSubstr("footer:      MISSING (not closed cleanly"));
  }
}

// A 128 KiB tmpfs fills up mid-recording: ptrecord stops with the error (exit 1) instead of
// tracing on for ever, and the file keeps every record it could write whole. Both emulated
// backends: the stepper (the disk is full in about 3 s) and QEMU (at once; its ground truth is
// too large to write here, so only the decode's own account is checked). Needs root to mount.
class DiskFullTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DiskFullTest, DiskFullMidRecordingKeepsEveryWholeRecord) {
  const std::string backend = GetParam();
  if (backend == "qemu" && ::access("/usr/bin/qemu-x86_64", X_OK) != 0) {
    GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)";
  }
  testing::TempDir dir;
  const std::string mnt = dir.File("small");
  std::filesystem::create_directory(mnt);
  if (::mount("ptkit-test", mnt.c_str(), "tmpfs", 0, "size=128k") != 0) {
    GTEST_SKIP() << "cannot mount a 128 KiB tmpfs: " << std::strerror(errno)
                 << " (needs root / CAP_SYS_ADMIN)";
  }
  const std::string trace = mnt + "/trace.pt";
  const std::string truth = backend == "step" ? dir.File("truth.txt") : "";
  // AUX rings of 4 pages: AUX records of 16 KiB at most, so some fit before the disk is full.
  std::vector<std::string> args = {
      PTRECORD_PATH, "--emulate=" + backend, "--no-compress", "-m", "16,4", "-o", trace};
  if (!truth.empty()) args.insert(args.end(), {"--ground-truth", truth});
  args.insert(args.end(), {"--", kSpin});
  const pid_t pid = Start(args, dir.File("err"));
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 600 && !ended; ++i) {  // 30 s
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!ended) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  const std::string err = ReadAll(dir.File("err"));
  if (Denied(err)) {
    ::umount2(mnt.c_str(), MNT_DETACH);
    GTEST_SKIP() << "ptrace denied: " << err;
  }
  EXPECT_TRUE(ended) << "still tracing 30 s after the disk filled up";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << " " << err;
  EXPECT_THAT(err, HasSubstr("No space left on device"));
  const Contents c = ExpectWholeRecordsThenACut(trace);
  EXPECT_GT(c.aux, 0u);
  ExpectDecodeSaysWhatIsMissing(trace, truth, c);
  ::umount2(mnt.c_str(), MNT_DETACH);
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskFullTest, ::testing::Values("step", "qemu"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace ptkit
