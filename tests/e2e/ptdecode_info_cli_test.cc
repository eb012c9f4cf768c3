// `ptdecode info` as users run it: output, JSON, and one clear line + exit code on bad input.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "read_file.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::StartsWith;

int LineCount(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

class InfoCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_.File("demo.pt");
    auto r = RunCommand({WRITE_CONTAINER_PATH, trace_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  testing::TempDir dir_;
  std::string trace_;
};

TEST_F(InfoCliTest, PrintsTheSummary) {
  auto r = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("footer:      present"));
  EXPECT_THAT(r.out, HasSubstr("cpu 0: aux 1 records"));
  EXPECT_THAT(r.out, HasSubstr("task-clock = 1234567"));
}

TEST_F(InfoCliTest, JsonIsParseableAndComplete) {
  auto r = RunCommand({PTDECODE_PATH, "info", "--json", trace_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["footer_present"].get<bool>());
  EXPECT_EQ(j["records"], 4);
  EXPECT_EQ(j["streams"][0]["aux_bytes"], 18);
}

TEST_F(InfoCliTest, JsonSurvivesNamesThatAreNotUtf8) {
  // Linux paths (and counter names, comms) are bytes; JSON output must not abort on them.
  std::string odd = dir_.File("odd\xff\xfe.pt");
  ASSERT_EQ(RunCommand({WRITE_CONTAINER_PATH, odd}).exit_code, 0);
  auto r = RunCommand({PTDECODE_PATH, "info", "--json", odd});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.signal, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_THAT(j["file"].get<std::string>(), HasSubstr("odd\xef\xbf\xbd"));  // U+FFFD
}

TEST_F(InfoCliTest, ACutFileStillOpensAndShowsWhatWasLost) {
  std::filesystem::resize_file(trace_, std::filesystem::file_size(trace_) - 10);
  auto r = RunCommand({PTDECODE_PATH, "info", trace_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("MISSING"));
  EXPECT_THAT(r.out, HasSubstr("cut or still being written"));
}

struct BadInput {
  std::vector<std::string> args;
  int exit_code;
  std::string message;
};

// export -o naming its input is refused, and the recording is left as it was: it was
// overwritten by its export, exit 0 (sweep 37a L6).
TEST_F(InfoCliTest, ExportNeverOverwritesItsInput) {
  const std::vector<uint8_t> before = ::ptkit::testing::ReadWholeFile(trace_);
  for (const char* to : {"perf.data", "trace.pt"}) {
    auto r = RunCommand({PTDECODE_PATH, "export", "--to", to, trace_, "-o", trace_});
    EXPECT_EQ(r.exit_code, 2) << to;
    EXPECT_THAT(r.err, HasSubstr("is the input")) << to;
    EXPECT_EQ(::ptkit::testing::ReadWholeFile(trace_), before) << to;
  }
}

TEST_F(InfoCliTest, BadInputIsOneClearLineAndTheRightExitCode) {
  std::string text = dir_.File("notes.txt");
  std::ofstream(text) << "not a trace\n";
  std::string empty = dir_.File("empty.pt");
  { std::ofstream touch(empty); }  // an empty file
  std::vector<BadInput> cases = {
      {{"info", "/nonexistent/trace.pt"}, 1, "/nonexistent/trace.pt: No such file"},
      {{"info", text}, 1, "notes.txt: not a ptkit container"},
      {{"info", empty}, 1, "empty.pt: empty file"},
      {{"info", dir_.path()}, 1, "not a regular file"},
      {{"info"}, 2, "FILE is required"},
      {{"info", "--bogus", trace_}, 2, "--bogus"},
      {{}, 2, "give a trace.pt FILE for the default report, or a sub-command"},
      {{"bogus", "f"}, 2, "unknown sub-command 'bogus' (not a file either); sub-commands: info,"},
      {{dir_.path()}, 2, "unknown sub-command"},  // a directory is no trace.pt
      // A pipe or a device was "unknown sub-command" too (sweep 39b L3).
      {{"/dev/null"}, 2, "/dev/null: not a regular file (a pipe or a device)"},
      {{empty}, 1, "empty.pt: empty file"},  // the default report opens it as info does
      // A file named "-" and a "-.debug" directory were written (sweeps 39a L3, 39b L1).
      {{"export", "--to", "perf.data", trace_, "-o", "-"},
       2,
       "-o -: an export is written to a file"},
      {{"export", "--to", "trace.pt", trace_, "-o", "-"},
       2,
       "-o -: an export is written to a file"},
  };
  for (const BadInput& c : cases) {
    std::vector<std::string> argv = {PTDECODE_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = RunCommand(argv);
    SCOPED_TRACE(r.err);
    EXPECT_EQ(r.exit_code, c.exit_code);
    EXPECT_EQ(r.signal, 0);
    EXPECT_THAT(r.err, StartsWith("ptdecode: "));
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(LineCount(r.err), 1);
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace ptkit
