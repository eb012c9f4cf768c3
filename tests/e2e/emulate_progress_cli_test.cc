// `ptrecord --emulate` shows its progress on a terminal (stderr a tty, stdout not one: steps,
// instructions, rate, about once a second, on one line cleared at the end).
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// About 90,000 steps: 3 to 6 s.
const std::vector<std::string> kWorkload = {std::string(PROGRAM_DIR) + "/emulate_fork_exec",
                                            std::string(PROGRAM_DIR) + "/emulate_fib", "x"};

// Runs argv with stdin, stdout and stderr on a new pseudo-terminal; returns what it wrote.
std::string RunOnTerminal(const std::vector<std::string>& argv, int* status) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(126);
  }
  std::string out;
  if (pid < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child side is closed
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  ::waitpid(pid, status, 0);
  return out;
}

// On a terminal where the command's output is not: stdout to a file. Where stdout is the
// terminal too, nothing (the line, rewritten each second, wrote over the command's output: an
// interactive program's prompt was erased; sweep 34a L2), nor with --quiet.
TEST(EmulateProgressCliTest, ProgressOnATerminalOnlyWhereTheCommandsOutputIsNot) {
  ::ptkit::testing::TempDir dir;
  int status = 0;
  std::vector<std::string> record = {PTRECORD_PATH, "--emulate=step", "-o", dir.File("a.pt"), "--"};
  record.insert(record.end(), kWorkload.begin(), kWorkload.end());
  // sh -c 'exec "$0" "$@" > FILE' PTRECORD ARGS...
  auto to_file = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" > " + dir.File("out.txt")});
    return argv;
  };
  const std::string tty = RunOnTerminal(to_file(record), &status);
  if (tty.find("Operation not permitted") != std::string::npos) GTEST_SKIP() << tty;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << tty;
  EXPECT_THAT(tty, HasSubstr("\rptrecord: "));
  EXPECT_THAT(tty, HasSubstr(" steps, "));
  EXPECT_THAT(tty, HasSubstr(" instructions, "));
  EXPECT_THAT(tty, HasSubstr(" steps/s\033[K"));
  EXPECT_THAT(tty, HasSubstr("\r\033[Kptrecord: wrote "));  // cleared before the summary
  // Not into a pipe: emulated_clock_cli_test checks that on its recording.

  record.insert(record.begin() + 1, "--overwrite-existing");
  const std::string shared = RunOnTerminal(record, &status);
  EXPECT_THAT(shared, Not(HasSubstr(" steps/s\033[K")));
  EXPECT_THAT(shared, HasSubstr("ptrecord: wrote "));
  record.insert(record.begin() + 1, "-q");
  const std::string quiet = RunOnTerminal(to_file(record), &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << quiet;
  EXPECT_THAT(quiet, Not(HasSubstr(" steps/s\033[K")));
}

}  // namespace
}  // namespace ptkit
