// The clock of emulated traces, as users see it: `ptrecord --emulate` stamps each thread's
// software PT with CLOCK_MONOTONIC nanoseconds in TSC packets and opens the sideband event with
// the same clock, so every time view of ptdecode works and trace and sideband order exactly.
// Checked on a program that forks and whose child execs another program at the same addresses
// (both are static, non-PIE): the child's stream must switch images at the exec's time.
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Program(const std::string& name) {
  return std::string(PROGRAM_DIR) + "/emulate_" + name;
}

struct Insn {
  uint64_t ns = 0;  // the time column, "seconds.nanoseconds"
  uint64_t ip = 0;
  std::string symbol;
};
using TimedPerThread = std::map<uint64_t, std::vector<Insn>>;

// `ptdecode insn` lines: "SECONDS.NANOSECONDS tid TID ADDRESS symbol+offset"; markers in [].
TimedPerThread ParseTimedInsn(const std::string& out) {
  TimedPerThread insns;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string time, tid_word, address, symbol;
    uint64_t tid = 0;
    if (!(fields >> time >> tid_word >> tid >> address) || tid_word != "tid") continue;
    if (time.empty() || time[0] == '[') continue;
    fields >> symbol;
    // Without a time conversion the column is the raw TSC.
    const size_t dot = time.find('.');
    Insn insn;
    insn.ns = dot == std::string::npos ? std::stoull(time)
                                       : std::stoull(time.substr(0, dot)) * 1000000000 +
                                             std::stoull(time.substr(dot + 1));
    insn.ip = std::stoull(address, nullptr, 16);
    insn.symbol = symbol.substr(0, symbol.find('+'));
    insns[tid].push_back(insn);
  }
  return insns;
}

TEST(EmulatedClockCliTest, TimeViewsWorkAndAForkedChildExecsIntoTheRightImages) {
  ::ptkit::testing::TempDir dir;
  const std::string trace = dir.File("trace.pt"), truth_file = dir.File("truth.txt");
  auto rec = RunCommand({PTRECORD_PATH, "--emulate=step", "--ground-truth", truth_file, "-o", trace,
                         "--", Program("fork_exec"), Program("fib"), "x"});
  if (rec.err.find("Operation not permitted") != std::string::npos) GTEST_SKIP() << rec.err;
  ASSERT_EQ(rec.exit_code, 3) << rec.err;  // fib's exit code, through the parent
  EXPECT_THAT(rec.err, Not(HasSubstr("\r"))) << "no progress line into a pipe";

  auto info = RunCommand({PTDECODE_PATH, "info", trace});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("CLOCK_MONOTONIC"));

  // insn: exactly what ran, thread by thread, with non-zero, non-decreasing times; the child's
  // stream runs fork_exec's code, then fib's (the exec's sideband time splits it).
  auto insn = RunCommand({PTDECODE_PATH, "insn", trace});
  ASSERT_EQ(insn.exit_code, 0) << insn.err;
  const TimedPerThread got = ParseTimedInsn(insn.out);
  const auto truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), 2u);
  ASSERT_EQ(got.size(), 2u);
  uint64_t spans = 0;
  int threads_in_fib = 0;
  for (const auto& [tid, ips] : truth) {
    SCOPED_TRACE(::testing::Message() << "tid " << tid);
    const std::vector<Insn>& insns = got.at(tid);
    ASSERT_EQ(insns.size(), ips.size());
    size_t same = 0, ordered = 0, changes = 0;
    bool in_fib = false;
    for (size_t i = 0; i < insns.size(); ++i) {
      same += insns[i].ip == ips[i];
      EXPECT_GT(insns[i].ns, 0u);
      if (i > 0) {
        ordered += insns[i].ns >= insns[i - 1].ns;
        changes += insns[i].ns != insns[i - 1].ns;
      }
      in_fib |= insns[i].symbol == "fib";
    }
    EXPECT_EQ(same, ips.size());
    EXPECT_EQ(ordered, insns.size() - 1);
    EXPECT_GT(changes, insns.size() / 20) << "a time for every few instructions";
    threads_in_fib += in_fib;
    spans += insns.back().ns - insns.front().ns;
  }
  EXPECT_EQ(threads_in_fib, 1);  // the child, after its exec

  // calls: every returned call took time.
  auto calls = RunCommand({PTDECODE_PATH, "calls", trace});
  ASSERT_EQ(calls.exit_code, 0) << calls.err;
  std::istringstream call_lines(calls.out);
  std::string line;
  int returns = 0;
  while (std::getline(call_lines, line)) {
    const size_t insns_at = line.find(" insns, ");
    if (insns_at == std::string::npos) continue;
    ++returns;
    const uint64_t ticks = std::stoull(line.substr(insns_at + 8));
    EXPECT_GT(ticks, 0u) << line;
  }
  EXPECT_GT(returns, 50);

  // folded --weight=time: the stacks' times add up to the threads' spans.
  auto folded = RunCommand({PTDECODE_PATH, "folded", "--weight=time", trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  std::istringstream folded_lines(folded.out);
  uint64_t total = 0;
  int stacks = 0;
  while (std::getline(folded_lines, line)) {
    total += std::stoull(line.substr(line.rfind(' ') + 1));
    ++stacks;
  }
  EXPECT_GT(stacks, 10);
  EXPECT_EQ(total, spans);

  // timeline: each thread's B/E events nest with real, non-negative durations.
  auto timeline = RunCommand({PTDECODE_PATH, "timeline", trace});
  ASSERT_EQ(timeline.exit_code, 0) << timeline.err;
  const auto json = nlohmann::json::parse(timeline.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << timeline.out.substr(0, 200);
  std::map<uint64_t, std::vector<double>> open;  // tid -> begin times
  int positive = 0, negative = 0;
  for (const auto& e : json["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph != "B" && ph != "E") continue;
    const uint64_t tid = e.value("tid", uint64_t{0});
    const double ts = e.value("ts", 0.0);
    if (ph == "B") {
      open[tid].push_back(ts);
    } else if (!open[tid].empty()) {
      const double duration = ts - open[tid].back();
      open[tid].pop_back();
      positive += duration > 0;
      negative += duration < 0;
    }
  }
  EXPECT_GT(positive, 50);
  EXPECT_EQ(negative, 0);
}

}  // namespace
}  // namespace ptkit
