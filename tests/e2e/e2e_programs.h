// The programs the end-to-end tests run: examples/ (PROGRAM_DIR) and tests/e2e/programs
// (E2E_PROGRAM_DIR), as tests/e2e/CMakeLists.txt builds them.
#ifndef PTKIT_TESTS_E2E_E2E_PROGRAMS_H_
#define PTKIT_TESTS_E2E_E2E_PROGRAMS_H_

#include <unistd.h>

#include <cstdio>
#include <string>

namespace ptkit::testing {

#ifdef PROGRAM_DIR
inline const std::string kFib = std::string(PROGRAM_DIR) + "/emulate_fib";
inline const std::string kThreads = std::string(PROGRAM_DIR) + "/emulate_threads";
inline const std::string kFork = std::string(PROGRAM_DIR) + "/emulate_fork";
#endif
#ifdef E2E_PROGRAM_DIR
inline const std::string kSpin = std::string(E2E_PROGRAM_DIR) + "/e2e_spin";
#endif

#ifdef E2E_PROGRAM_DIR
inline const std::string kPidReuse = std::string(E2E_PROGRAM_DIR) + "/e2e_pid_reuse";
// A pid for e2e_pid_reuse to give its children again and again: `below` under pid_max, away
// from the pids the system hands out (each test its own, so that two at once do not meet).
inline int PidReuseTarget(int below) {
  int pid_max = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/pid_max", "r")) {
    if (std::fscanf(f, "%d", &pid_max) != 1) pid_max = 32768;
    std::fclose(f);
  }
  return pid_max - below;
}
// How many of e2e_pid_reuse's output lines are "WHAT ID" (WHAT: child, thread).
inline int PidReuseCount(const std::string& out, const std::string& what, int id) {
  const std::string line = what + " " + std::to_string(id) + "\n";
  int n = 0;
  for (size_t at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) {
    n += at == 0 || out[at - 1] == '\n';
  }
  return n;
}
#endif

// --emulate=qemu's tests need Debian's qemu-user.
inline bool HaveQemu() { return access("/usr/bin/qemu-x86_64", X_OK) == 0; }
#define PTKIT_SKIP_WITHOUT_QEMU()    \
  if (!::ptkit::testing::HaveQemu()) \
  GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)"

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_E2E_E2E_PROGRAMS_H_
