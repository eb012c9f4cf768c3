// The programs the end-to-end tests run: examples/ (PROGRAM_DIR) and tests/e2e/programs
// (E2E_PROGRAM_DIR), as tests/e2e/CMakeLists.txt builds them.
#ifndef PTKIT_TESTS_E2E_E2E_PROGRAMS_H_
#define PTKIT_TESTS_E2E_E2E_PROGRAMS_H_

#include <unistd.h>

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

// --emulate=qemu's tests need Debian's qemu-user.
inline bool HaveQemu() { return access("/usr/bin/qemu-x86_64", X_OK) == 0; }
#define PTKIT_SKIP_WITHOUT_QEMU()    \
  if (!::ptkit::testing::HaveQemu()) \
  GTEST_SKIP() << "qemu-user is not installed (apt-get install qemu-user)"

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_E2E_E2E_PROGRAMS_H_
