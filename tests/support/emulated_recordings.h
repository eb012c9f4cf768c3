// Emulated recordings made once and shared by the tests (emulated recording is slow, ~17 k
// instructions/s):
//   ptrecord --emulate=step --ground-truth NAME.truth -o NAME.pt [OPTIONS] -- PROGRAM
// ctest runs every test case in its own process, so a recording is kept in the build tree
// ($PTKIT_BINARY_DIR/test-recordings/NAME-KEY.{pt,truth}) for the other processes: KEY hashes
// the ptrecord and program files (path, size, mtime) and the options, so a rebuilt tool or
// program is recorded again. Processes that want the same recording at once wait on a lock;
// a failed recording is never kept. Tests read the files, they must not change them.
#ifndef PTKIT_TESTS_SUPPORT_EMULATED_RECORDINGS_H_
#define PTKIT_TESTS_SUPPORT_EMULATED_RECORDINGS_H_

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
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
    const std::string stem = CacheDir() + "/" + name + "-" + Key(program, options);
    rec.trace = stem + ".pt";
    rec.truth = stem + ".truth";
    // One process records, the others wait for it here and then find the files.
    int lock = ::open((stem + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0) ::flock(lock, LOCK_EX);
    std::error_code ec;
    if (std::filesystem::exists(stem + ".done", ec)) {
      rec.ok = true;
    } else {
      // What a killed or failed attempt left (ptrecord does not overwrite a file).
      std::filesystem::remove(rec.trace + "~", ec);
      std::filesystem::remove(rec.truth + "~", ec);
      std::vector<std::string> argv = {
          ptrecord_, "--emulate=step", "--ground-truth", rec.truth + "~", "-o", rec.trace + "~"};
      argv.insert(argv.end(), options.begin(), options.end());
      argv.push_back("--");
      argv.push_back(program);
      CommandResult r = RunCommand(argv);
      rec.ok = r.exit_code == 0;
      rec.why = r.err;
      if (rec.ok) {
        std::filesystem::rename(rec.trace + "~", rec.trace, ec);
        if (!ec) std::filesystem::rename(rec.truth + "~", rec.truth, ec);
        if (ec) {
          rec.ok = false;
          rec.why = "keeping the recording: " + ec.message();
        } else if (std::FILE* done = std::fopen((stem + ".done").c_str(), "w")) {
          (void)std::fclose(done);  // without the marker, the next run records again
        }
      }
    }
    if (lock >= 0) ::close(lock);  // releases the lock
    return rec;
  }
  // A path in the recordings' directory.
  std::string File(const std::string& name) const { return dir_.File(name); }

 private:
  static std::string CacheDir() {
    std::string dir = std::string(PTKIT_BINARY_DIR) + "/test-recordings";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return dir;
  }
  // What the recording depends on: the two files as they are now, and the options.
  std::string Key(const std::string& program, const std::vector<std::string>& options) const {
    std::string what;
    for (const std::string& file : {ptrecord_, program}) {
      std::error_code ec;
      what +=
          file + "\n" + std::to_string(std::filesystem::file_size(file, ec)) + "\n" +
          std::to_string(std::filesystem::last_write_time(file, ec).time_since_epoch().count()) +
          "\n";
    }
    for (const std::string& option : options) what += option + "\n";
    char hex[17];
    (void)std::snprintf(hex, sizeof(hex), "%016zx", std::hash<std::string>{}(what));
    return hex;
  }

  std::string ptrecord_;
  TempDir dir_;
  std::map<std::string, EmulatedRecording> recordings_;
};

#ifdef PTRECORD_PATH
// A fixture whose tests share the recordings of one EmulatedRecordings, made with the ptrecord
// at PTRECORD_PATH: `class MyTest : public testing::SharedRecordingsTest<MyTest> {};`, then
// PTKIT_RECORD_OR_SKIP(rec, NAME, PROGRAM[, OPTIONS]) in its tests. Suite: the fixture, so
// that each suite has its own names.
template <typename Suite>
class SharedRecordingsTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { recordings_.reset(); }
  // Records `program` once (name: the key and the file stem); PTKIT_RECORD_OR_SKIP skips the
  // test when ptrace or perf_event_open is denied.
  static const EmulatedRecording& Record(const std::string& name, const std::string& program,
                                         const std::vector<std::string>& options = {}) {
    if (!recordings_) recordings_ = std::make_unique<EmulatedRecordings>(PTRECORD_PATH);
    return recordings_->Get(name, program, options);
  }

 private:
  inline static std::unique_ptr<EmulatedRecordings> recordings_;
};
#endif  // PTRECORD_PATH

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
