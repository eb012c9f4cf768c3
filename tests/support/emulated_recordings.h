// Emulated recordings made once per test program and shared by its tests (emulated
// recording is slow, ~17 k instructions/s):
//   ptrecord --emulate=step --ground-truth NAME.truth -o NAME.pt [OPTIONS] -- PROGRAM
#ifndef PTKIT_TESTS_SUPPORT_EMULATED_RECORDINGS_H_
#define PTKIT_TESTS_SUPPORT_EMULATED_RECORDINGS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "run_command.h"
#include "temp_dir.h"

namespace ptkit::testing {

struct EmulatedRecording {
  std::string trace, truth;
  bool ok = false;
  std::string why;  // ptrecord's stderr when not ok
};

class EmulatedRecordings {
 public:
  explicit EmulatedRecordings(std::string ptrecord) : ptrecord_(std::move(ptrecord)) {}

  // The recording `name` (the key and the file stem) of `program` with ptrecord `options`,
  // made at the first call for `name`.
  const EmulatedRecording& Get(const std::string& name, const std::string& program,
                               const std::vector<std::string>& options = {}) {
    auto [it, inserted] = recordings_.try_emplace(name);
    EmulatedRecording& rec = it->second;
    if (!inserted) return rec;
    rec.trace = dir_.File(name + ".pt");
    rec.truth = dir_.File(name + ".truth");
    std::vector<std::string> argv = {ptrecord_, "--emulate=step", "--ground-truth", rec.truth,
                                     "-o",      rec.trace};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.push_back(program);
    CommandResult r = RunCommand(argv);
    rec.ok = r.exit_code == 0;
    rec.why = r.err;
    return rec;
  }
  // A path in the recordings' directory.
  std::string File(const std::string& name) const { return dir_.File(name); }

 private:
  std::string ptrecord_;
  TempDir dir_;
  std::map<std::string, EmulatedRecording> recordings_;
};

}  // namespace ptkit::testing

// In a fixture with a Record(ARGS...) that returns a recording (with `ok` and `why`):
// `const auto& var = Record(ARGS...);`, skipping the test when ptrace or perf_event_open is
// denied and failing it when the recording failed otherwise.
#define PTKIT_RECORD_OR_SKIP(var, ...)                                           \
  const auto& var = Record(__VA_ARGS__);                                         \
  if (!var.ok && var.why.find("Operation not permitted") != std::string::npos) { \
    GTEST_SKIP() << "ptrace or perf_event_open denied";                          \
  }                                                                              \
  ASSERT_TRUE(var.ok) << var.why

#endif  // PTKIT_TESTS_SUPPORT_EMULATED_RECORDINGS_H_
