// Stopping signals under `ptrecord --emulate=step` (sweep 38b M4): a workload that stops itself
// (raise(SIGSTOP)), or is stopped from outside (kill -STOP, every thread) or by job control,
// stays stopped as it would untraced: its threads in a stop state, their CPU time not growing,
// and ptrecord not busy meanwhile. SIGCONT lets it finish, and its trace decodes to its ground
// truth; SIGTERM to ptrecord while it is stopped ends the recording as at any time.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "read_file.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit::emulate_stop_test {
namespace {

using ::ptkit::testing::ParseInsn;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::ReadWholeFile;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

const std::string kStopWork = std::string(E2E_PROGRAM_DIR) + "/e2e_stop_work";

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A task's scheduling state (/proc/.../stat field 3) and CPU time (utime + stime, in ticks).
struct TaskStat {
  char state = '?';
  uint64_t ticks = 0;
};

// From /proc/PID/stat or /proc/PID/task/TID/stat; nothing once the task is gone.
std::optional<TaskStat> ReadStat(const std::string& path) {
  const std::string text = ReadWholeFile<std::string>(path);
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  std::vector<std::string> f;
  for (std::string field; fields >> field;) f.push_back(field);
  if (f.size() < 13) return std::nullopt;  // f[0] is field 3 (state), f[11] and f[12] 14 and 15
  return TaskStat{.state = f[0][0], .ticks = std::stoull(f[11]) + std::stoull(f[12])};
}

// The stat files of the threads of process `pid`.
std::vector<std::string> TaskStatPaths(pid_t pid) {
  std::vector<std::string> paths;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') paths.push_back(dir + "/" + e->d_name + "/stat");
    }
    ::closedir(d);
  }
  return paths;
}

// Stopped: in a job-control stop ('T') or, traced, in its group stop ('t').
bool IsStopState(char state) { return state == 'T' || state == 't'; }

class EmulateStopTest : public ::testing::Test {
 protected:
  ~EmulateStopTest() override {
    if (recorder_ > 0) {
      ::kill(-recorder_, SIGKILL);
      ::waitpid(recorder_, nullptr, 0);
    }
  }

  // Starts `ptrecord --emulate=step ... -- e2e_stop_work MODE PIDFILE` in a process group of
  // its own, and returns the workload's pid once it has written it (0 after 10 s without).
  pid_t Start(const std::string& mode) {
    recorder_ = ::fork();
    if (recorder_ == 0) {
      ::setpgid(0, 0);
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<std::string> args = {
          PTRECORD_PATH, "--emulate=step", "--ground-truth", truth_, "-o", trace_, "--", kStopWork,
          mode,          pid_file_};
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(PTRECORD_PATH, argv.data());
      _exit(126);
    }
    ::setpgid(recorder_, recorder_);
    for (int i = 0; i < 500; ++i) {
      const std::string text = ReadWholeFile<std::string>(pid_file_);
      if (text.ends_with('\n')) return static_cast<pid_t>(std::stol(text));
      int status = 0;
      if (::waitpid(recorder_, &status, WNOHANG) == recorder_) {
        recorder_ = 0;
        return 0;
      }
      SleepMs(20);
    }
    return 0;
  }

  // Whether ptrecord said that ptrace or perf_event_open is denied here.
  bool Denied() const { return ::ptkit::testing::Denied(ReadWholeFile<std::string>(err_)); }

  // Expects every thread of `pid` (`threads` of them) to be stopped and stay so: waits up to
  // 5 s until two looks 100 ms apart find them all in a stop state with the same CPU time,
  // then checks that for 0.5 s nothing of theirs ran and ptrecord used no CPU either.
  void ExpectStopped(pid_t pid, size_t threads) {
    auto look = [&] {
      std::vector<std::optional<TaskStat>> stats;
      for (const std::string& path : TaskStatPaths(pid)) stats.push_back(ReadStat(path));
      return stats;
    };
    auto all_stopped = [](const std::vector<std::optional<TaskStat>>& stats) {
      for (const auto& s : stats) {
        if (!s || !IsStopState(s->state)) return false;
      }
      return !stats.empty();
    };
    auto same_time = [](const std::vector<std::optional<TaskStat>>& a,
                        const std::vector<std::optional<TaskStat>>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i] || !b[i] || a[i]->ticks != b[i]->ticks) return false;
      }
      return true;
    };
    std::vector<std::optional<TaskStat>> before = look();
    for (int i = 0; i < 50; ++i) {
      SleepMs(100);
      std::vector<std::optional<TaskStat>> now = look();
      const bool settled = all_stopped(before) && all_stopped(now) && same_time(before, now);
      before = std::move(now);
      if (settled) break;
    }
    const std::string recorder_stat = "/proc/" + std::to_string(recorder_) + "/stat";
    const std::optional<TaskStat> recorder_before = ReadStat(recorder_stat);
    SleepMs(500);
    const std::vector<std::optional<TaskStat>> after = look();
    const std::optional<TaskStat> recorder_after = ReadStat(recorder_stat);
    ASSERT_EQ(after.size(), threads);
    ASSERT_EQ(before.size(), threads);
    for (size_t i = 0; i < threads; ++i) {
      SCOPED_TRACE(::testing::Message() << "thread " << i);
      ASSERT_TRUE(before[i] && after[i]);
      EXPECT_TRUE(IsStopState(before[i]->state)) << before[i]->state;
      EXPECT_TRUE(IsStopState(after[i]->state)) << after[i]->state;
      EXPECT_EQ(after[i]->ticks, before[i]->ticks) << "it ran while stopped";
    }
    ASSERT_TRUE(recorder_before && recorder_after);
    // (One tick of slack: the clock may tick over while it handles the last stops.)
    EXPECT_LE(recorder_after->ticks, recorder_before->ticks + 1) << "ptrecord busy meanwhile";
  }

  // ptrecord's wait status once it exits (it is killed after 20 s: SIGKILL).
  int WaitRecorder() {
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(recorder_, &status, WNOHANG) == recorder_) {
        recorder_ = 0;
        return status;
      }
      SleepMs(20);
    }
    ::kill(-recorder_, SIGKILL);
    ::waitpid(recorder_, &status, 0);
    recorder_ = 0;
    return status;
  }

  // `ptdecode insn` of the trace equals the ground truth, thread by thread, with no gap or
  // error marker.
  void CheckDecode(size_t threads) {
    auto dec = RunCommand({PTDECODE_PATH, "insn", trace_});
    EXPECT_EQ(dec.exit_code, 0) << dec.err;
    for (const char* marker : {"[gap", "[error"}) {
      const size_t at = dec.out.find(marker);
      EXPECT_EQ(at, std::string::npos) << dec.out.substr(at, dec.out.find('\n', at) - at);
    }
    const PerThread expected = ReadTruth(truth_);
    PerThread got = ParseInsn(dec.out);
    EXPECT_EQ(expected.size(), threads);
    EXPECT_EQ(got.size(), expected.size());
    for (const auto& [tid, ips] : expected) {
      SCOPED_TRACE(::testing::Message() << "tid " << tid);
      EXPECT_GT(ips.size(), 1000u);
      EXPECT_EQ(got[tid].size(), ips.size());
      EXPECT_TRUE(got[tid] == ips);
    }
  }

  // After SIGCONT: ptrecord exits 0 once the program has finished (it says "continued"), and
  // the trace of its `threads` threads decodes to the ground truth.
  void ExpectFinished(size_t threads) {
    const int status = WaitRecorder();
    ASSERT_TRUE(WIFEXITED(status)) << "ptrecord killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << Err();
    EXPECT_EQ(Out(), "continued\n");
    CheckDecode(threads);
  }

  std::string Out() const { return ReadWholeFile<std::string>(out_); }
  std::string Err() const { return ReadWholeFile<std::string>(err_); }

  ::ptkit::testing::TempDir dir_;
  std::string trace_ = dir_.File("trace.pt"), truth_ = dir_.File("truth.txt");
  std::string pid_file_ = dir_.File("pid"), out_ = dir_.File("out"), err_ = dir_.File("err");
  pid_t recorder_ = 0;  // ptrecord, the leader of its process group
};

// raise(SIGSTOP): the program stops there until SIGCONT (before, it ran on at once).
TEST_F(EmulateStopTest, AProgramThatStopsItselfStaysStoppedUntilSigcont) {
  const pid_t workload = Start("raise");
  if (workload == 0 && Denied()) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_GT(workload, 0) << Err();
  ExpectStopped(workload, 1);
  ::kill(workload, SIGCONT);
  ExpectFinished(1);
}

// kill -STOP from outside stops both threads of a program; SIGCONT lets both go on.
TEST_F(EmulateStopTest, SigstopFromOutsideStopsEveryThread) {
  const pid_t workload = Start("threads");
  if (workload == 0 && Denied()) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_GT(workload, 0) << Err();
  SleepMs(200);  // both threads spin meanwhile
  ::kill(workload, SIGSTOP);
  ExpectStopped(workload, 2);
  ::kill(workload, SIGCONT);
  ExpectFinished(2);
}

// Ctrl-Z (SIGTSTP to ptrecord's process group, which stops ptrecord too) and `fg` (SIGCONT to
// the group): the program stops with it and goes on with it.
TEST_F(EmulateStopTest, JobControlStopsAndContinuesTheProgram) {
  const pid_t workload = Start("threads");
  if (workload == 0 && Denied()) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_GT(workload, 0) << Err();
  SleepMs(200);
  ::kill(-recorder_, SIGTSTP);
  ExpectStopped(workload, 2);
  ::kill(-recorder_, SIGCONT);
  ExpectFinished(2);
}

// SIGTERM to ptrecord while the program is stopped ends the recording cleanly (exit 143, the
// footer written, the workload killed), and the trace decodes to the ground truth up to there.
TEST_F(EmulateStopTest, SigtermWhileStoppedEndsTheRecording) {
  const pid_t workload = Start("raise");
  if (workload == 0 && Denied()) GTEST_SKIP() << "ptrace or perf_event_open denied";
  ASSERT_GT(workload, 0) << Err();
  ExpectStopped(workload, 1);
  ::kill(recorder_, SIGTERM);
  const int status = WaitRecorder();
  ASSERT_TRUE(WIFEXITED(status)) << "ptrecord killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << Err();
  EXPECT_THAT(Err(), HasSubstr("stopped by SIGTERM"));
  EXPECT_EQ(Out(), "");
  // The workload is gone (or a zombie for whoever reaps orphans).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    const std::optional<TaskStat> s = ReadStat("/proc/" + std::to_string(workload) + "/stat");
    gone = !s || s->state == 'Z' || s->state == 'X';
    if (!gone) SleepMs(20);
  }
  EXPECT_TRUE(gone);
  auto info = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_THAT(info.out, HasSubstr("footer:      present (closed cleanly)"));
  CheckDecode(1);
}

// A signal that reaches the workload between ptrecord's PTRACE_SEIZE and its execve (a terminal
// resize, Ctrl-C, Ctrl-Z in the first milliseconds) goes as it would untraced, and the recording
// goes on: such a stop was taken for a failed execve, and ptrecord read the exec-error pipe that
// the stopped child held open, for good, SIGINT and SIGTERM ignored (review 39 H1). SIGWINCH to
// the process group as soon as the workload exists, a few times (the window is milliseconds).
TEST(EmulateStartTest, ASignalBeforeTheWorkloadsExecveDoesNotHangTheRecorder) {
  testing::TempDir dir;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    const std::string trace = dir.File("start" + std::to_string(round) + ".pt");
    const pid_t recorder = ::fork();
    if (recorder == 0) {
      ::setsid();
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execl(PTRECORD_PATH, PTRECORD_PATH, "--emulate=step", "-q", "-o", trace.c_str(), "--",
              "/bin/true", static_cast<char*>(nullptr));
      ::_exit(126);
    }
    ASSERT_GT(recorder, 0);
    const std::string children =
        "/proc/" + std::to_string(recorder) + "/task/" + std::to_string(recorder) + "/children";
    for (int i = 0; i < 20000; ++i) {
      if (!::ptkit::testing::ReadWholeFile<std::string>(children).empty()) break;
    }
    ::kill(-recorder, SIGWINCH);
    int status = 0;
    bool ended = false;
    // Stepping /bin/true (about 100,000 instructions at 16-22 k steps a second) takes 5-6 s
    // alone, and over 10 s beside a full test run and a build: a hang is one that lasts a minute.
    for (int i = 0; i < 3000 && !ended; ++i) {
      ended = ::waitpid(recorder, &status, WNOHANG) == recorder;
      if (!ended) SleepMs(20);
    }
    if (!ended) {
      ::kill(-recorder, SIGKILL);
      ::waitpid(recorder, &status, 0);
    }
    ASSERT_TRUE(ended) << "ptrecord hung for 60 s";
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
}

}  // namespace
}  // namespace ptkit::emulate_stop_test
