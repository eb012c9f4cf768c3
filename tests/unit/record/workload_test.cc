#include "record/workload.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WorkloadTest, RunsAndReportsExitCodes) {
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload t, Workload::Start({"true"}));  // PATH lookup
  EXPECT_GT(t.pid(), 0);
  ASSERT_THAT(t.Go(), IsOk());
  EXPECT_EQ(Workload::ExitCode(t.Wait()), 0);
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload f, Workload::Start({"/bin/sh", "-c", "exit 7"}));
  ASSERT_THAT(f.Go(), IsOk());
  EXPECT_EQ(Workload::ExitCode(f.Wait()), 7);
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload k, Workload::Start({"/bin/sh", "-c", "kill -9 $$"}));
  ASSERT_THAT(k.Go(), IsOk());
  EXPECT_EQ(Workload::ExitCode(k.Wait()), 128 + 9);
}

TEST(WorkloadTest, WaitsForGo) {
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload w, Workload::Start({"/bin/true"}));
  usleep(20000);
  EXPECT_FALSE(w.TryReap().has_value());  // still parked at the pipe
  ASSERT_THAT(w.Go(), IsOk());
  std::optional<int> st;
  for (int i = 0; i < 1000 && !st; ++i) {
    st = w.TryReap();
    if (!st) usleep(1000);
  }
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(Workload::ExitCode(*st), 0);
}

TEST(WorkloadTest, ProgramNotFound) {
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload w, Workload::Start({"no-such-program-ptkit"}));
  EXPECT_THAT(w.Go(), StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("program not found: no-such-program-ptkit")));
  PTKIT_ASSERT_OK_AND_ASSIGN(Workload d, Workload::Start({"/etc"}));
  EXPECT_THAT(d.Go(), StatusIs(absl::StatusCode::kPermissionDenied,
                               HasSubstr("/etc: cannot execute: Permission denied")));
  EXPECT_THAT(Workload::Start({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkloadTest, DestructorKillsUnstartedChild) {
  pid_t pid;
  {
    PTKIT_ASSERT_OK_AND_ASSIGN(Workload w, Workload::Start({"/bin/true"}));
    pid = w.pid();
  }
  EXPECT_EQ(kill(pid, 0), -1);  // reaped: no such process
}

// A workload that goes away unreaped (a recording that failed) takes what it started with it:
// its children and theirs (sweep 31c F2: they ran on, untraced, while ptrecord said the
// command was killed). The oracle: /proc says they are gone (or zombies of init).
TEST(WorkloadTest, DestructorKillsTheChildsDescendants) {
  std::vector<pid_t> started;
  {
    PTKIT_ASSERT_OK_AND_ASSIGN(
        Workload w, Workload::Start({"/bin/sh", "-c", "sleep 60 & (sleep 60 & wait) & wait"}));
    ASSERT_THAT(w.Go(), IsOk());
    for (int i = 0; i < 500 && started.size() < 3; ++i) {  // a subshell, two sleeps
      usleep(10000);
      started = Descendants(w.pid());
    }
    ASSERT_EQ(started.size(), 3u);
  }
  for (pid_t pid : started) {
    // Gone, or a zombie until init reaps it (the SIGKILL is sent; under load a process may
    // take a moment to die of it: up to 5 s).
    std::string text;
    for (int i = 0; i < 500; ++i, usleep(10000)) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      text.clear();
      std::getline(stat, text);
      const size_t close = text.rfind(')');
      if (close == std::string::npos || text.substr(close + 2, 1) == "Z") break;
    }
    const size_t close = text.rfind(')');
    EXPECT_TRUE(close == std::string::npos || text.substr(close + 2, 1) == "Z")
        << pid << ": " << text;
  }
}

// The descriptors this process has open.
int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Whether `pid` is a child of this process not reaped yet (running or a zombie).
bool Unreaped(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

TEST(WorkloadTest, MoveAssignmentEndsTheChildItReplaces) {
  const int fds = OpenFds();
  pid_t first;
  {
    PTKIT_ASSERT_OK_AND_ASSIGN(Workload a, Workload::Start({"/bin/true"}));
    first = a.pid();
    PTKIT_ASSERT_OK_AND_ASSIGN(Workload b, Workload::Start({"/bin/true"}));
    const pid_t second = b.pid();
    EXPECT_EQ(OpenFds(), fds + 4);  // two pipe ends per workload
    a = std::move(b);
    EXPECT_EQ(a.pid(), second);
    EXPECT_EQ(OpenFds(), fds + 2) << "the replaced workload's pipes are still open";
    EXPECT_FALSE(Unreaped(first)) << "the replaced workload was not killed and reaped";
    ASSERT_THAT(a.Go(), IsOk());
    EXPECT_EQ(Workload::ExitCode(a.Wait()), 0);
  }
  EXPECT_EQ(OpenFds(), fds);
  if (Unreaped(first)) kill(first, SIGKILL);  // without the fix: do not leave it behind
}

// FindOnPath, the lookup of the qemu backend (qemu-x86_64, the workload) and of --trigger's
// program, finds what execvp would run: the first executable DIR/name on PATH.
TEST(WorkloadTest, FindOnPathFindsTheFirstExecutableOnPath) {
  ::ptkit::testing::TempDir tmp;
  const std::string a = tmp.File("a"), b = tmp.File("b");
  std::filesystem::create_directory(a);
  std::filesystem::create_directory(b);
  auto make = [](const std::string& path, mode_t mode) {
    std::ofstream(path) << "#!/bin/sh\n";
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  };
  make(a + "/prog", 0644);  // not executable: passed over
  make(b + "/prog", 0755);
  make(a + "/only", 0755);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path != nullptr ? old_path : "";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs (nor below)
  ASSERT_EQ(::setenv("PATH", (a + ":" + b).c_str(), 1), 0);
  EXPECT_EQ(FindOnPath("prog"), b + "/prog");
  EXPECT_EQ(FindOnPath("only"), a + "/only");
  EXPECT_EQ(FindOnPath("absent"), "");
  // A name with a '/' is not looked up.
  EXPECT_EQ(FindOnPath(b + "/prog"), b + "/prog");
  EXPECT_EQ(FindOnPath(a + "/prog"), "");
  // An empty PATH entry is the current directory.
  const std::filesystem::path cwd = std::filesystem::current_path();
  ASSERT_EQ(::setenv("PATH", (":" + b).c_str(), 1), 0);  // NOLINT(concurrency-mt-unsafe)
  std::filesystem::current_path(a);
  EXPECT_EQ(FindOnPath("only"), "./only");
  EXPECT_EQ(FindOnPath("prog"), b + "/prog");
  std::filesystem::current_path(cwd);
  ASSERT_EQ(::setenv("PATH", saved.c_str(), 1), 0);  // NOLINT(concurrency-mt-unsafe)
}

}  // namespace
}  // namespace ptkit::record
