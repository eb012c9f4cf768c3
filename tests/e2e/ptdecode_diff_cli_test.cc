// `ptdecode diff` and the stats profile on real recordings: builds of one program
// (programs/diff_work.c: WORK_ITERATIONS 10 and 30, and EXTRA_CALL), recorded with
//   ptrecord --emulate --ground-truth truth.txt -o trace.pt -- PROGRAM
// The diff's numbers are checked against the recorder's ground truth (every retired
// instruction) and nm's symbol ranges, not against ptdecode. Each side may be a trace.pt, a
// perf.data (ptdecode export of the same recording; perf's own decoder checks those in
// perf_export_cli_test) or a stats --json document.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "decoder/profile.h"
#include "emulated_recordings.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_command.h"

namespace ptkit {
namespace {

using ::ptkit::testing::NmRange;
using ::ptkit::testing::PerThread;
using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

const std::string kBase = DIFF_PROGRAM_DIR "/diff_base/e2e_diff_work";
const std::string kMore = DIFF_PROGRAM_DIR "/diff_more/e2e_diff_work";
const std::string kHalf = DIFF_PROGRAM_DIR "/diff_half/e2e_diff_work";  // +0.50% under main
// The tools for the CI script, as environment assignments for /usr/bin/env.
const std::string kPtrecordEnv = std::string("PTRECORD=") + PTRECORD_PATH;
const std::string kPtdecodeEnv = std::string("PTDECODE=") + PTDECODE_PATH;

// Instructions the ground truth retired in [range.first, range.second), named `name`.
uint64_t TruthWithin(const std::string& truth, std::pair<uint64_t, uint64_t> range,
                     const std::string& name) {
  EXPECT_LT(range.first, range.second) << name;
  uint64_t n = 0;
  for (const auto& [tid, ips] : ReadTruth(truth)) {
    for (uint64_t ip : ips) n += ip >= range.first && ip < range.second;
  }
  return n;
}

// Instructions the ground truth retired inside `name` (by nm's range).
uint64_t TruthSelf(const std::string& program, const std::string& truth, const std::string& name) {
  return TruthWithin(truth, NmRange(program, name), name);
}

uint64_t TruthTotal(const std::string& truth) {
  uint64_t n = 0;
  for (const auto& [tid, ips] : ReadTruth(truth)) n += ips.size();
  return n;
}

// What runs under main (diff's default, --exclude-startup): the program's own functions (main
// calls only them), by the ground truth.
uint64_t TruthOwn(const std::string& program, const std::string& truth) {
  uint64_t n = 0;
  for (const char* name : {"work", "steady", "main"}) n += TruthSelf(program, truth, name);
  return n;
}

struct DiffRun {
  // stats_json: `stats --json --exclude-startup` (what diff counts by default); full_json:
  // `stats --json`, the whole run.
  std::string trace, truth, stats_json, full_json;
  bool ok = false;
  std::string why;
};

class PtdecodeDiffTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    recorded_.clear();
    recordings_.reset();
  }
  // Records `program` once under `name`, with its stats --json next to it.
  static const DiffRun& Record(const std::string& name, const std::string& program,
                               const std::vector<std::string>& extra = {}) {
    auto [it, inserted] = recorded_.try_emplace(name);
    DiffRun& rec = it->second;
    if (!inserted) return rec;
    const testing::EmulatedRecording& r = Recordings().Get(name, program, extra);
    rec.trace = r.trace;
    rec.truth = r.truth;
    rec.why = r.why;
    if (!r.ok) return rec;
    for (bool whole : {false, true}) {
      auto s = whole
                   ? RunCommand({PTDECODE_PATH, "stats", "--json", rec.trace})
                   : RunCommand({PTDECODE_PATH, "stats", "--json", "--exclude-startup", rec.trace});
      rec.why = s.err;
      if (s.exit_code != 0) return rec;
      (whole ? rec.full_json : rec.stats_json) =
          recordings_->File(name + (whole ? ".all.json" : ".json"));
      std::ofstream(whole ? rec.full_json : rec.stats_json) << s.out;
    }
    rec.ok = true;
    return rec;
  }
  static testing::EmulatedRecordings& Recordings() {
    if (!recordings_) recordings_ = std::make_unique<testing::EmulatedRecordings>(PTRECORD_PATH);
    return *recordings_;
  }
  static std::string Dir() { return Recordings().File(""); }
  static std::unique_ptr<testing::EmulatedRecordings> recordings_;
  static std::map<std::string, DiffRun> recorded_;
};
std::unique_ptr<testing::EmulatedRecordings> PtdecodeDiffTest::recordings_;
std::map<std::string, DiffRun> PtdecodeDiffTest::recorded_;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::json* Row(const nlohmann::json& diff, const std::string& function) {
  for (const auto& row : diff["functions"]) {
    if (row["function"] == function) return &row;
  }
  return nullptr;
}

TEST_F(PtdecodeDiffTest, StatsJsonOfARecordingRoundTripsThroughTheProfile) {
  PTKIT_RECORD_OR_SKIP(rec, "base", kBase);
  const std::string text = Slurp(rec.full_json);
  auto profile = decoder::ProfileFromJson(text);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_GT(profile->functions.size(), 5u);
  EXPECT_EQ(profile->totals.instructions, TruthTotal(rec.truth));
  EXPECT_EQ(decoder::ProfileToJson(*profile), text);
  auto again = decoder::ProfileFromJson(decoder::ProfileToJson(*profile));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == *profile);
  // What diff needs of a side: timing (emulated traces have it) and source files, by
  // addr2line.
  ASSERT_TRUE(profile->timing);
  EXPECT_GT(profile->timing->ticks, 0u);
  EXPECT_DOUBLE_EQ(profile->timing->tsc_hz, 1e9);
  EXPECT_TRUE(profile->source_files);
  EXPECT_EQ(profile->only_under, "");
  for (const decoder::ProfileFunction& fn : profile->functions) {
    if (fn.function != "work") continue;
    auto line = RunCommand({"/usr/bin/addr2line", "-e", kBase, fmt::format("{:#x}", fn.address)});
    // The DWARF name (relative to the compilation directory, which addr2line prepends).
    EXPECT_THAT(fn.source, ::testing::EndsWith("tests/e2e/programs/diff_work.c"));
    EXPECT_THAT(line.out, HasSubstr(fn.source.substr(fn.source.rfind("../") + 3) + ":"));
  }
  // --exclude-startup: main's frames only, said in the document.
  auto under = decoder::ProfileFromJson(Slurp(rec.stats_json));
  ASSERT_TRUE(under.ok()) << under.status();
  EXPECT_EQ(under->only_under, "main");
  EXPECT_EQ(under->totals.instructions, TruthOwn(kBase, rec.truth));
  EXPECT_EQ(under->functions.size(), 3u);
}

// Under main (the default), a process's other threads count whole: a worker's stack never
// holds main, and its work was left out, so diff did not see a worker's doubled work (sweep 28c
// F1). examples/programs/threads.c: `work` runs only in two threads.
TEST_F(PtdecodeDiffTest, ThreadsOtherThanMainsCountWholeUnderMain) {
  PTKIT_RECORD_OR_SKIP(rec, "threads", THREADS_PROGRAM);
  auto under = decoder::ProfileFromJson(Slurp(rec.stats_json));
  ASSERT_TRUE(under.ok()) << under.status();
  EXPECT_EQ(under->only_under, "main");
  const uint64_t work = TruthSelf(THREADS_PROGRAM, rec.truth, "work");
  ASSERT_GT(work, 500u);
  uint64_t counted = 0;
  for (const decoder::ProfileFunction& fn : under->functions) {
    if (fn.function == "work") counted += fn.self;
  }
  EXPECT_EQ(counted, work);
  // Each worker thread (not the first) whole: its start in libc, work, its exit.
  const std::map<uint64_t, std::vector<uint64_t>> truth = ReadTruth(rec.truth);
  ASSERT_EQ(truth.size(), 3u);
  uint64_t workers = 0;
  for (auto it = std::next(truth.begin()); it != truth.end(); ++it) workers += it->second.size();
  EXPECT_GT(under->totals.instructions, workers);
  EXPECT_LT(under->totals.instructions, TruthTotal(rec.truth));
}

// A recording cut short (ptrecord killed by a CI timeout, an artifact truncated) decodes to a
// part of the run: diff names the new side incomplete with the reader's damage and missing
// footer, and --fail-on-loss fails (a file cut to 6,000 of 8,121 bytes showed -85% with no
// word, exit 0: sweep 28c F3).
// Its stats --json says how many of its warnings are the input's.
TEST_F(PtdecodeDiffTest, ARecordingCutShortIsIncompleteAndFailsOnLoss) {
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  const std::string cut = Dir() + "cut.pt";
  {
    std::ifstream in(base.trace, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 4000u);
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 200);
  }
  auto r = RunCommand({PTDECODE_PATH, "diff", base.trace, cut, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_TRUE(doc["base"]["incomplete"].empty());
  const std::string said = doc["new"]["incomplete"].dump();
  EXPECT_THAT(said, HasSubstr(cut + ": no footer"));
  r = RunCommand({PTDECODE_PATH, "diff", base.trace, cut, "--fail-on-loss"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("# warning: new side incomplete: " + cut + ": no footer"));
  // JUnit: the cut run is one case with one failure, whose text says what is missing (sweep
  // 40b M5: two failures, each saying "no decode error or loss"); the whole run is another.
  r = RunCommand({PTDECODE_PATH, "diff", base.trace, cut, "--fail-on-loss", "--format", "junit"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const size_t at = r.out.find("<testcase classname=\"complete\" name=\"" + cut + "\">");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string one = r.out.substr(at, r.out.find("</testcase>", at) - at);
  EXPECT_EQ(one.find("<failure"), one.rfind("<failure")) << one;
  EXPECT_THAT(one, HasSubstr("<failure message=\"" + cut + ": "));
  EXPECT_THAT(one, HasSubstr(cut + ": no footer"));
  EXPECT_THAT(one, Not(HasSubstr("no decode error or loss")));
  EXPECT_THAT(r.out, HasSubstr("<testcase classname=\"complete\" name=\"" + base.trace +
                               "\"><system-out>no decode error or loss</system-out>"));
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--json", cut});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  auto profile = decoder::ProfileFromJson(stats.out);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_GE(profile->totals.input_warnings, 1u);
  EXPECT_EQ(decoder::ProfileToJson(*profile), stats.out);
  // Cut before main was called (a recording of small AUX records, cut after each): the reason
  // is the cut, not a stripped program (sweep 28c F6).
  PTKIT_RECORD_OR_SKIP(small, "base_small_aux", kBase, {"-m", "64,1"});
  std::ifstream in(small.trace, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Stats of each cut says which kind it is (one decode); diff is checked on the first of each.
  int before_main = 0, no_instructions = 0;
  for (size_t size = 500; size < bytes.size(); size += 100) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << bytes.substr(0, size);
    auto st = RunCommand({PTDECODE_PATH, "stats", "--exclude-startup", cut});
    if (st.err.find("no instructions decoded") != std::string::npos) {
      // Not "the recording holds no trace": it had one (sweep 29b M1).
      EXPECT_THAT(st.err,
                  ::testing::MatchesRegex(".*the input is incomplete \\([12] warnings? "
                                          "above\\): its trace may be in what is missing.*"));
      if (no_instructions++ > 0) continue;
      auto d = RunCommand({PTDECODE_PATH, "diff", cut, small.trace});
      EXPECT_THAT(d.err, HasSubstr("; the input is incomplete: " + cut + ": "));
    } else if (st.out.find("no call to a function of that name") != std::string::npos) {
      EXPECT_THAT(st.out, HasSubstr("the trace may end before main was called"));
      if (before_main++ > 0) continue;
      auto d = RunCommand({PTDECODE_PATH, "diff", cut, small.trace});
      EXPECT_EQ(d.exit_code, 1);
      EXPECT_THAT(d.err, ::testing::MatchesRegex(".*the input is incomplete \\([12] warnings?\\): "
                                                 "the trace may end before main was called.*"));
      EXPECT_THAT(d.err, ::testing::Not(HasSubstr("stripped")));
    }
  }
  EXPECT_GT(before_main, 0) << "no cut of " << bytes.size() << " bytes ends before main";
  EXPECT_GT(no_instructions, 0) << "no cut of " << bytes.size() << " bytes has no trace";
}

TEST_F(PtdecodeDiffTest, MoreWorkInOneFunctionIsThatFunctionsRegression) {
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  PTKIT_RECORD_OR_SKIP(more, "more", kMore);
  auto r = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--format", "json",
                       "--fail-function", "10", "--min-instructions", "100"});
  ASSERT_EQ(r.exit_code, 3) << r.err << r.out;
  auto diff = nlohmann::json::parse(r.out);
  EXPECT_EQ(diff["schema"], "ptkit-diff/1");
  // The ground truth of each recording, by nm's symbol ranges.
  const uint64_t work_base = TruthSelf(kBase, base.truth, "work");
  const uint64_t work_more = TruthSelf(kMore, more.truth, "work");
  ASSERT_GT(work_more, work_base);
  const nlohmann::json* work = Row(diff, "work");
  ASSERT_NE(work, nullptr);
  EXPECT_EQ((*work)["image"], "e2e_diff_work");
  EXPECT_EQ((*work)["base"]["self"].get<uint64_t>(), work_base);
  EXPECT_EQ((*work)["new"]["self"].get<uint64_t>(), work_more);
  EXPECT_EQ((*work)["change"].get<int64_t>(), static_cast<int64_t>(work_more - work_base));
  EXPECT_TRUE((*work)["regression"].get<bool>());
  const nlohmann::json* steady = Row(diff, "steady");
  ASSERT_NE(steady, nullptr);
  EXPECT_EQ((*steady)["base"]["self"].get<uint64_t>(), TruthSelf(kBase, base.truth, "steady"));
  EXPECT_EQ((*steady)["change"].get<int64_t>(), 0);
  EXPECT_FALSE((*steady)["regression"].get<bool>());
  // By default only what runs under main counts (--exclude-startup), as gungraun measures only
  // the benchmark: the program's own three functions.
  EXPECT_EQ(diff["only_under"], "main");
  EXPECT_EQ(diff["functions"].size(), 3u);
  EXPECT_EQ(diff["total"]["base"].get<uint64_t>(), TruthOwn(kBase, base.truth));
  EXPECT_EQ(diff["total"]["new"].get<uint64_t>(), TruthOwn(kMore, more.truth));
  // --include-startup: every instruction, glibc's start-up and exit too.
  auto all =
      RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--format", "json",
                  "--include-startup", "--fail-function", "10", "--min-instructions", "100"});
  ASSERT_EQ(all.exit_code, 3) << all.err;
  auto all_doc = nlohmann::json::parse(all.out);
  EXPECT_TRUE(all_doc["only_under"].is_null());
  EXPECT_EQ(all_doc["total"]["base"].get<uint64_t>(), TruthTotal(base.truth));
  EXPECT_EQ(all_doc["total"]["new"].get<uint64_t>(), TruthTotal(more.truth));
  EXPECT_GT(all_doc["functions"].size(), 20u);
  EXPECT_EQ((*Row(all_doc, "work"))["change"], (*work)["change"]);
  // The regressions are work's only: main's own code did not change (its inclusive count did).
  ASSERT_EQ(diff["regressions"].size(), 1u) << diff["regressions"];
  EXPECT_THAT(diff["regressions"][0].get<std::string>(), HasSubstr("work [e2e_diff_work]"));
  const nlohmann::json* main_row = Row(diff, "main");
  ASSERT_NE(main_row, nullptr);
  EXPECT_EQ((*main_row)["change"].get<int64_t>(), 0);
  EXPECT_EQ((*main_row)["new"]["inclusive"].get<int64_t>() -
                (*main_row)["base"]["inclusive"].get<int64_t>(),
            static_cast<int64_t>(work_more - work_base));

  // The same numbers from the two stats --json documents (made with --exclude-startup), and
  // from the whole-run ones with --include-startup. A whole-run document cannot be cut to main
  // after the fact: said, with what to do.
  // `diff BASE NEW --format json` with the limits above (exit 3: work's regression) and `more`.
  auto regressing = [](const std::string& a, const std::string& b,
                       const std::vector<std::string>& more_flags = {}) {
    std::vector<std::string> args = {
        PTDECODE_PATH,        "diff", a, b, "--format", "json", "--fail-function", "10",
        "--min-instructions", "100"};
    args.insert(args.end(), more_flags.begin(), more_flags.end());
    auto r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 3) << a << " " << b << ": " << r.err;
    return r.exit_code == 3 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  auto from_json = regressing(base.stats_json, more.stats_json);
  EXPECT_EQ(from_json["functions"], diff["functions"]);
  EXPECT_EQ(from_json["total"], diff["total"]);
  EXPECT_EQ(regressing(base.full_json, more.full_json, {"--include-startup"})["functions"],
            all_doc["functions"]);
  auto whole_json = RunCommand({PTDECODE_PATH, "diff", base.full_json, more.stats_json});
  EXPECT_EQ(whole_json.exit_code, 1);
  EXPECT_THAT(whole_json.err,
              HasSubstr("counts everything, start-up included, the diff only what ran under "
                        "main: make it with `ptdecode stats --json --exclude-startup` or give "
                        "--include-startup"));

  // perf.data sides: the same recordings exported (ptdecode export --to perf.data) give the same
  // diff, alone or against the trace.pt of the other side.
  const std::string base_perf = Dir() + "base.perf.data", more_perf = Dir() + "more.perf.data";
  for (auto [rec, perf] : {std::pair{&base, &base_perf}, std::pair{&more, &more_perf}}) {
    auto e = RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", rec->trace, "-o", *perf});
    ASSERT_EQ(e.exit_code, 0) << e.err;
  }
  auto from_perf = regressing(base_perf, more_perf);
  EXPECT_EQ(from_perf["functions"], diff["functions"]);
  EXPECT_EQ(from_perf["total"], diff["total"]);
  EXPECT_EQ(regressing(base.trace, more_perf, {"--include-startup"})["functions"],
            all_doc["functions"]);
  auto same = RunCommand({PTDECODE_PATH, "diff", base.trace, base_perf, "--include-startup",
                          "--fail-total", "0", "--fail-function", "0"});
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_THAT(same.out, HasSubstr("(no function changed)"));
  auto folded_pt =
      RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--format", "folded"});
  auto folded_perf =
      RunCommand({PTDECODE_PATH, "diff", base_perf, more_perf, "--format", "folded"});
  ASSERT_EQ(folded_perf.exit_code, 0) << folded_perf.err;
  EXPECT_EQ(folded_perf.out, folded_pt.out);

  // Text: work first (largest change), marked; exit 3.
  auto t = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function", "10",
                       "--min-instructions", "100"});
  EXPECT_EQ(t.exit_code, 3);
  EXPECT_THAT(t.out, HasSubstr(fmt::format("{:>12} {:>12} {:>12}", work_base, work_more,
                                           "+" + std::to_string(work_more - work_base))));
  EXPECT_THAT(t.out, HasSubstr("REGRESSION beyond --fail-function 10%"));
  EXPECT_EQ(t.out.find('\x1b'), std::string::npos);  // not a terminal: no colour
  auto colored = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function", "10",
                             "--min-instructions", "100", "--color=always"});
  EXPECT_THAT(colored.out, HasSubstr("\x1b[1;31mREGRESSION beyond --fail-function 10%"));

  // Accepted by --allow; not checked under --min-instructions; inclusive shows main too.
  EXPECT_EQ(RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function", "10",
                        "--allow", "work"})
                .exit_code,
            0);
  EXPECT_EQ(RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function", "10",
                        "--min-instructions", std::to_string(work_more + 1)})
                .exit_code,
            0);
  auto incl =
      RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--metric", "inclusive",
                  "--fail-function", "10", "--min-instructions", "100", "--format", "json"});
  EXPECT_EQ(incl.exit_code, 3);
  auto incl_doc = nlohmann::json::parse(incl.out);
  std::vector<std::string> regressed;
  for (const auto& row : incl_doc["functions"]) {
    if (row["regression"].get<bool>()) regressed.push_back(row["function"]);
  }
  EXPECT_THAT(regressed, ::testing::IsSupersetOf({"work", "main"}));

  // A limits file: work's hard limit at the ground truth's count passes, one below fails.
  for (uint64_t hard : {work_more, work_more - 1}) {
    const std::string limits = Dir() + "limits.json";
    std::ofstream(limits) << fmt::format(
        R"({{"schema": "ptkit-diff-limits/1",
            "functions": [{{"function": "work", "image": "e2e_diff_work", "hard": {}}}]}})",
        hard);
    auto l =
        RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--limits", limits});
    EXPECT_EQ(l.exit_code, hard == work_more ? 0 : 3) << l.err << l.out;
    if (hard != work_more) {
      EXPECT_THAT(l.out, HasSubstr(fmt::format("work [e2e_diff_work]: self {} > hard limit {}",
                                               work_more, hard)));
    }
  }
  // The file's default and total soft limits are named as the file's, not as options that
  // were not given (sweep 28c F6: "> --fail-function 5%" with no --fail-function).
  {
    const std::string limits = Dir() + "soft_limits.json";
    std::ofstream(limits) << R"({"schema": "ptkit-diff-limits/1",
                                 "default": {"soft_pct": 5}, "total": {"soft_pct": 1}})";
    auto l =
        RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--limits", limits});
    EXPECT_EQ(l.exit_code, 3) << l.err << l.out;
    EXPECT_THAT(l.out, ::testing::Not(HasSubstr("--fail-")));
    EXPECT_THAT(l.out, HasSubstr("> default soft limit 5% (" + limits + ")"));
    EXPECT_THAT(l.out, HasSubstr("> total soft limit 1% (" + limits + ")"));
    // Options given win, and are named as options.
    auto o = RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--limits",
                         limits, "--fail-function", "6"});
    EXPECT_EQ(o.exit_code, 3) << o.err << o.out;
    EXPECT_THAT(o.out, HasSubstr("> --fail-function 6%"));
    EXPECT_THAT(o.out, HasSubstr("> total soft limit 1% (" + limits + ")"));
  }
  const std::string bad = Dir() + "bad_limits.json";
  std::ofstream(bad) << R"({"schema": "ptkit-diff-limits/1", "functions": [{"hard": 3}]})";
  auto b = RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--limits", bad});
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_THAT(b.err, HasSubstr("functions[0].function: expected a name"));

  // JUnit XML, read by Python's XML parser: a case per function checked, work's failed.
  const std::string junit = Dir() + "diff.xml";
  auto x = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function", "10",
                       "--min-instructions", "100", "--format", "junit"});
  EXPECT_EQ(x.exit_code, 3);
  std::ofstream(junit) << x.out;
  auto parsed = RunCommand(
      {"/usr/bin/python3", "-c",
       "import sys, xml.etree.ElementTree as E\n"
       "cases = E.parse(sys.argv[1]).getroot().iter('testcase')\n"
       "for c in cases: print(c.get('classname'), c.get('name'), len(c.findall('failure')))\n",
       junit});
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err;
  EXPECT_THAT(parsed.out, HasSubstr("e2e_diff_work work 1\n"));
  EXPECT_THAT(parsed.out, HasSubstr("e2e_diff_work steady 0\n"));
  EXPECT_EQ(std::count(parsed.out.begin(), parsed.out.end(), '\n'),
            std::count_if(diff["functions"].begin(), diff["functions"].end(),
                          [](const nlohmann::json& row) { return row["checked"].get<bool>(); }));

  // Differential folded stacks (difffolded.pl's format): under main, work's stack carries the
  // ground truth of both builds; all of the base's stacks add up to its total.
  auto folded = RunCommand(
      {PTDECODE_PATH, "diff", base.trace, more.trace, "--format", "folded", "--exclude-startup"});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_THAT(folded.out, HasSubstr(fmt::format("\nmain;work {} {}\n", work_base, work_more)));
  EXPECT_THAT(folded.out, ::testing::StartsWith("main "));
  auto whole = RunCommand(
      {PTDECODE_PATH, "diff", base.trace, more.trace, "--format", "folded", "--include-startup"});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  uint64_t base_sum = 0, more_sum = 0;
  std::istringstream folded_lines(whole.out);
  for (std::string line; std::getline(folded_lines, line);) {
    std::istringstream fields(line.substr(line.rfind(' ', line.rfind(' ') - 1) + 1));
    uint64_t b = 0, n = 0;
    fields >> b >> n;
    base_sum += b;
    more_sum += n;
  }
  EXPECT_EQ(base_sum, TruthTotal(base.truth));
  EXPECT_EQ(more_sum, TruthTotal(more.truth));

  // Markdown for $GITHUB_STEP_SUMMARY.
  auto md = RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.stats_json, "--format",
                        "markdown", "--fail-total", "1"});
  EXPECT_EQ(md.exit_code, 3);
  EXPECT_THAT(md.out, HasSubstr("### ptdecode diff: regression\n"));
  EXPECT_THAT(md.out, HasSubstr("| `work` | e2e_diff_work | "));
}

// Determinism, as CI needs it: 5 recordings of one build give the same per-function counts,
// start-up included. Two come from examples/ci/perf-regression.sh comparing the build with
// itself (exit 0, nothing changed, in $GITHUB_STEP_SUMMARY too); three more are recorded as the
// script records, from its run/a and run/b directories under env -i, but with address-space
// randomisation on (the script turns it off where it can).
// A base recorded before its program was rebuilt in place is decoded with the recorded build
// from perf's build-id cache ($PERF_BUILDID_DIR, or --buildid-dir), as every other sub-command
// decodes it: diff never looked there, decoded the base with the new program and said 1
// instruction under main, a false regression; info --decode the same (sweep 39a F1).
TEST_F(PtdecodeDiffTest, ABaseWhoseProgramWasRebuiltInPlaceIsDecodedFromTheBuildIdCache) {
  if (!std::filesystem::exists("/usr/bin/perf"))
    GTEST_SKIP() << "perf (linux-perf) is not installed";
  const std::string dir = Dir() + "inplace", cache = dir + "/cache";
  const std::string program = dir + "/e2e_diff_work";
  std::filesystem::create_directories(dir);
  const auto record = [&](const std::string& build, const std::string& name) {
    // A new file, as the linker makes it: perf's cache may hold the old one by a hard link.
    std::filesystem::remove(program);
    std::filesystem::copy_file(build, program);
    return RunCommand({PTRECORD_PATH, "--emulate=step", "--ground-truth",
                       dir + "/" + name + ".truth", "-o", dir + "/" + name + ".pt",
                       "--overwrite-existing", "--", program});
  };
  auto old_run = record(kBase, "old");
  if (old_run.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_EQ(old_run.exit_code, 0) << old_run.err;
  // As perf record does for the files a recording maps.
  auto cached =
      RunCommand({"/usr/bin/perf", "--buildid-dir", cache, "buildid-cache", "-a", program});
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  auto new_run = record(kMore, "new");
  ASSERT_EQ(new_run.exit_code, 0) << new_run.err;
  const uint64_t work_old = TruthSelf(kBase, dir + "/old.truth", "work");
  const uint64_t work_new = TruthSelf(kMore, dir + "/new.truth", "work");
  ASSERT_GT(work_old, 0u);
  for (const bool by_env : {true, false}) {
    SCOPED_TRACE(by_env ? "PERF_BUILDID_DIR" : "--buildid-dir");
    std::vector<std::string> argv = {"/usr/bin/env", "-u", "PERF_BUILDID_DIR"};
    if (by_env) argv.push_back("PERF_BUILDID_DIR=" + cache);
    argv.insert(argv.end(), {PTDECODE_PATH, "diff", dir + "/old.pt", dir + "/new.pt", "--format",
                             "json", "--min-instructions", "100"});
    if (!by_env) argv.insert(argv.end(), {"--buildid-dir", cache});
    auto r = RunCommand(argv);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
    auto diff = nlohmann::json::parse(r.out);
    EXPECT_EQ(diff["total"]["base"].get<uint64_t>(), TruthOwn(kBase, dir + "/old.truth"));
    EXPECT_EQ(diff["total"]["new"].get<uint64_t>(), TruthOwn(kMore, dir + "/new.truth"));
    const nlohmann::json* work = Row(diff, "work");
    ASSERT_NE(work, nullptr) << r.out;
    EXPECT_EQ((*work)["base"]["self"].get<uint64_t>(), work_old);
    EXPECT_EQ((*work)["new"]["self"].get<uint64_t>(), work_new);
  }
  auto info = RunCommand({"/usr/bin/env", "PERF_BUILDID_DIR=" + cache, PTDECODE_PATH, "info",
                          "--decode", "--json", dir + "/old.pt"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto doc = nlohmann::json::parse(info.out);
  EXPECT_EQ(doc["decode"]["errors"].get<uint64_t>(), 0u) << doc["decode"];
  EXPECT_EQ(doc["decode"]["instructions"].get<uint64_t>(), TruthTotal(dir + "/old.truth"));
}

TEST_F(PtdecodeDiffTest, FiveRunsOfOneBuildGiveEqualCounts) {
  const std::string out = Dir() + "same";
  const std::string summary = Dir() + "same.md";
  auto r =
      RunCommand({"/usr/bin/env", kPtrecordEnv, kPtdecodeEnv, "PTKIT_OUT=" + out,
                  "PTKIT_EMULATE=step", "GITHUB_STEP_SUMMARY=" + summary, "/bin/sh", CI_SCRIPT,
                  kBase, kBase, "--fail-total", "0", "--fail-function", "0", "--fail-on-loss"});
  if (r.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("(no function changed)"));
  const std::string md = Slurp(summary);
  EXPECT_THAT(md, ::testing::StartsWith("### ptdecode diff: no regression\n"));
  EXPECT_THAT(md, HasSubstr("| (no function changed) |"));
  EXPECT_THAT(md, HasSubstr("no regression beyond --fail-total 0%"));
  std::vector<std::string> runs = {out + "/base.pt", out + "/new.pt"};
  for (const char* dir : {"a", "b", "a"}) {
    runs.push_back(fmt::format("{}/run{}.pt", out, runs.size() + 1));
    auto rec = RunCommand(
        {"/bin/sh", "-c",
         fmt::format("cd '{}/run/{}' && exec /usr/bin/env -i '{}' --emulate=step -q -o '{}' -- "
                     "./e2e_diff_work",
                     out, dir, PTRECORD_PATH, runs.back())});
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
  }
  // Every function's counts (self, inclusive, calls) under main, by stats --json. Not of the
  // whole run: with ASLR on, the loader's and libc's start-up code scans strings at random stack
  // addresses, and __strlen_evex's count varies with their alignment (12592 against 12589 in one
  // run of five).
  std::vector<std::string> counts;
  for (const std::string& run : runs) {
    auto s = RunCommand({PTDECODE_PATH, "stats", "--json", "--exclude-startup", run});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto doc = nlohmann::json::parse(s.out);
    EXPECT_EQ(doc["totals"]["errors"], 0);
    EXPECT_EQ(doc["totals"]["losses"], 0);
    std::string text = doc["totals"]["instructions"].dump();
    for (const auto& fn : doc["functions"]) {
      text += fmt::format("\n{} {} {} {}", fn["function"].get<std::string>(), fn["self"].dump(),
                          fn["inclusive"].dump(), fn["calls"].dump());
    }
    counts.push_back(text);
  }
  EXPECT_GE(std::count(counts[0].begin(), counts[0].end(), '\n'), 3);  // main, work, steady
  for (size_t i = 1; i < counts.size(); ++i) EXPECT_EQ(counts[i], counts[0]) << runs[i];
  // The same as a diff of 2 runs against 3 (medians), and under main (the default).
  for (const char* startup : {"--include-startup", "--exclude-startup"}) {
    auto d = RunCommand({PTDECODE_PATH, "diff", "--base", runs[0], "--base", runs[1], "--new",
                         runs[2], "--new", runs[3], "--new", runs[4], startup, "--fail-total", "0",
                         "--fail-function", "0"});
    EXPECT_EQ(d.exit_code, 0) << d.out;
    EXPECT_THAT(d.out, HasSubstr("(3 runs, medians)"));
    EXPECT_THAT(d.out, HasSubstr("(no function changed)"));
  }
  // Runs of a side may mix inputs: a trace.pt and a stats --json document.
  const std::string doc = Dir() + "run3.json";
  std::ofstream(doc)
      << RunCommand({PTDECODE_PATH, "stats", "--json", "--exclude-startup", runs[2]}).out;
  auto mixed = RunCommand({PTDECODE_PATH, "diff", "--base", runs[0], "--base", doc, "--new",
                           runs[3], "--fail-total", "0"});
  EXPECT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_THAT(mixed.out, HasSubstr("(2 runs, medians)"));
}

// --group-by source-file and image; the source file of each function by addr2line.
TEST_F(PtdecodeDiffTest, GroupedBySourceFileAndImage) {
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  PTKIT_RECORD_OR_SKIP(more, "more", kMore);
  auto r = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--group-by", "source-file",
                       "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto diff = nlohmann::json::parse(r.out);
  EXPECT_EQ(diff["group_by"], "source-file");
  // The program's own functions are in diff_work.c (addr2line says so; glibc's static code
  // has no line tables), and only work changed.
  uint64_t own = 0;
  for (const char* name : {"work", "steady", "main"}) {
    auto line = RunCommand(
        {"/usr/bin/addr2line", "-e", kBase, fmt::format("{:#x}", NmRange(kBase, name).first)});
    EXPECT_THAT(line.out, HasSubstr("diff_work.c:")) << name;
    own += TruthSelf(kBase, base.truth, name);
  }
  const nlohmann::json* file = Row(diff, "diff_work.c");
  ASSERT_NE(file, nullptr) << r.out;
  EXPECT_EQ((*file)["image"], "e2e_diff_work");
  EXPECT_EQ((*file)["base"]["self"].get<uint64_t>(), own);
  EXPECT_EQ((*file)["change"].get<int64_t>(),
            static_cast<int64_t>(TruthSelf(kMore, more.truth, "work") -
                                 TruthSelf(kBase, base.truth, "work")));
  // One image (the program is static): its change is the total's.
  auto i = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--group-by", "image",
                       "--format", "json", "--include-startup"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  auto images = nlohmann::json::parse(i.out);
  const nlohmann::json* image = Row(images, "e2e_diff_work");
  ASSERT_NE(image, nullptr) << i.out;
  EXPECT_EQ((*image)["base"]["self"].get<uint64_t>(), TruthTotal(base.truth));
  EXPECT_EQ((*image)["new"]["self"].get<uint64_t>(), TruthTotal(more.truth));
  // A stats --json document has the source files: the same rows from it.
  auto j = RunCommand({PTDECODE_PATH, "diff", base.stats_json, more.trace, "--group-by",
                       "source-file", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["functions"], diff["functions"]);
  // One of an older ptdecode, without them: said.
  auto old = nlohmann::json::parse(Slurp(base.stats_json));
  old.erase("source_files");
  for (auto& fn : old["functions"]) fn.erase("source");
  const std::string old_path = Dir() + "old.json";
  std::ofstream(old_path) << old.dump(2);
  auto o = RunCommand({PTDECODE_PATH, "diff", old_path, more.trace, "--group-by", "source-file"});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.err, HasSubstr("a stats --json document without source files"));
}

// Two static functions of one name in one program (e2e_same_name: same_name_a.c's helper called
// 10 times, same_name_b.c's 3; its _more build: 9) are rows of their own, named by their source
// files (addr2line's), so the one that changed is the regression, with its own figures (sweep
// 28c F4: one row "helper" of both, +50% where b's grew +200%); --allow helper names both.
TEST_F(PtdecodeDiffTest, FunctionsOfOneNameAreToldApartByTheirSourceFiles) {
  const std::string base_prog = DIFF_PROGRAM_DIR "/e2e_same_name";
  const std::string more_prog = DIFF_PROGRAM_DIR "/same_name_more/e2e_same_name";
  PTKIT_RECORD_OR_SKIP(base, "same_name", base_prog);
  PTKIT_RECORD_OR_SKIP(more, "same_name_more", more_prog);
  // The source file of each helper by nm and addr2line.
  auto files = [](const std::string& prog) {
    std::map<std::string, uint64_t> out;  // file name -> address
    std::istringstream lines(RunCommand({"/usr/bin/nm", prog}).out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.ends_with(" t helper")) continue;
      const uint64_t at = std::stoull(line, nullptr, 16);
      std::string where =
          RunCommand({"/usr/bin/addr2line", "-e", prog, fmt::format("{:#x}", at)}).out;
      where = where.substr(0, where.rfind(':'));
      out[where.substr(where.rfind('/') + 1)] = at;
    }
    return out;
  };
  const std::map<std::string, uint64_t> at = files(base_prog);
  ASSERT_EQ(at.size(), 2u);
  ASSERT_TRUE(at.contains("same_name_a.c") && at.contains("same_name_b.c"));
  for (const std::string& side : {base.trace, base.stats_json}) {
    auto r = RunCommand({PTDECODE_PATH, "diff", side, more.trace, "--format", "json",
                         "--fail-function", "100", "--metric", "calls"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    auto diff = nlohmann::json::parse(r.out);
    const nlohmann::json* a = Row(diff, "helper (same_name_a.c)");
    const nlohmann::json* b = Row(diff, "helper (same_name_b.c)");
    ASSERT_TRUE(a != nullptr && b != nullptr) << r.out;
    EXPECT_EQ(Row(diff, "helper"), nullptr);
    EXPECT_EQ((*a)["base"]["calls"], 10);
    EXPECT_EQ((*a)["new"]["calls"], 10);
    EXPECT_EQ((*a)["regression"], false);
    EXPECT_EQ((*b)["base"]["calls"], 3);
    EXPECT_EQ((*b)["new"]["calls"], 9);
    EXPECT_EQ((*b)["regression"], true);
    EXPECT_EQ(diff["regressions"].size(), 1u) << r.out;
  }
  // A run that ran only one of them (e2e_same_name_none: b.c's never) names it as the run that
  // ran both (a review: "helper" removed, "helper (a.c)" new, a.c's never compared).
  const std::string none_prog = DIFF_PROGRAM_DIR "/same_name_none/e2e_same_name";
  PTKIT_RECORD_OR_SKIP(none, "same_name_none", none_prog);
  for (const std::string& side : {none.trace, none.stats_json}) {
    auto r = RunCommand(
        {PTDECODE_PATH, "diff", base.trace, side, "--format", "json", "--metric", "calls"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto diff = nlohmann::json::parse(r.out);
    const nlohmann::json* a = Row(diff, "helper (same_name_a.c)");
    const nlohmann::json* b = Row(diff, "helper (same_name_b.c)");
    ASSERT_TRUE(a != nullptr && b != nullptr) << r.out;
    EXPECT_EQ(Row(diff, "helper"), nullptr) << r.out;
    EXPECT_EQ((*a)["new"]["calls"], 10) << side;
    EXPECT_EQ((*a)["change"], 0) << side;
    EXPECT_EQ((*b)["base"]["calls"], 3) << side;
    EXPECT_EQ((*b)["status"], "removed") << *b;
  }
  // --allow and a limits file name the function as the source says it.
  auto allowed = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--fail-function",
                             "100", "--metric", "calls", "--allow", "helper"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;
  EXPECT_THAT(allowed.out, HasSubstr("helper (same_name_b.c) [e2e_same_name]"));
}

// Rebuilds that rename functions the code of which did not change, or changed (sweep 34b):
// - with -flto, GCC numbers two static `helper`s of lto_a.c and lto_b.c helper.lto_priv.0 and
//   .1 in link order: linked in the other order, the names swap (F1: a false +72% regression,
//   exit 3); each is matched by its source file, unchanged;
// - `work` becomes a clone work.constprop.0 (F2: "removed" and "new", never checked: a real
//   2.7x passed, exit 0, even a limits file's hard limit on work); a clone is its function.
// The instructions of each by the ground truth within nm's ranges.
TEST_F(PtdecodeDiffTest, FunctionsRenamedByTheCompilerAreMatched) {
  const std::string lto = DIFF_PROGRAM_DIR "/e2e_lto";
  const std::string lto_ba = DIFF_PROGRAM_DIR "/lto_ba/e2e_lto";
  PTKIT_RECORD_OR_SKIP(ab, "lto", lto);
  PTKIT_RECORD_OR_SKIP(ba, "lto_ba", lto_ba);
  const uint64_t ab0 = TruthSelf(lto, ab.truth, "helper.lto_priv.0");
  const uint64_t ab1 = TruthSelf(lto, ab.truth, "helper.lto_priv.1");
  ASSERT_NE(ab0, ab1);
  // (The names swapped: else this build of GCC does not test it.)
  ASSERT_EQ(TruthSelf(lto_ba, ba.truth, "helper.lto_priv.0"), ab1);
  ASSERT_EQ(TruthSelf(lto_ba, ba.truth, "helper.lto_priv.1"), ab0);
  for (const std::string& side : {ab.trace, ab.stats_json}) {
    auto r = RunCommand(
        {PTDECODE_PATH, "diff", side, ba.trace, "--format", "json", "--fail-function", "5"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto diff = nlohmann::json::parse(r.out);
    const nlohmann::json* a = Row(diff, "helper (lto_a.c)");
    const nlohmann::json* b = Row(diff, "helper (lto_b.c)");
    ASSERT_TRUE(a != nullptr && b != nullptr) << r.out;
    EXPECT_EQ((*a)["base"]["self"], ab0);  // lto_a.c's, linked first
    EXPECT_EQ((*b)["base"]["self"], ab1);
    EXPECT_EQ((*a)["change"], 0);
    EXPECT_EQ((*b)["change"], 0);
  }

  const std::string clone_old = DIFF_PROGRAM_DIR "/e2e_clone_work";
  const std::string clone_new = DIFF_PROGRAM_DIR "/clone_new/e2e_clone_work";
  PTKIT_RECORD_OR_SKIP(before, "clone_old", clone_old);
  PTKIT_RECORD_OR_SKIP(after, "clone_new", clone_new);
  const uint64_t was = TruthSelf(clone_old, before.truth, "work");
  const uint64_t now = TruthSelf(clone_new, after.truth, "work.constprop.0");
  ASSERT_GT(now, 2 * was);
  ASSERT_EQ(NmRange(clone_new, "work").first, NmRange(clone_new, "work").second)
      << "a build with work itself: this build of GCC does not test it";
  auto r = RunCommand({PTDECODE_PATH, "diff", before.trace, after.trace, "--format", "json",
                       "--fail-function", "10"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  auto diff = nlohmann::json::parse(r.out);
  const nlohmann::json* work = Row(diff, "work");
  ASSERT_NE(work, nullptr) << r.out;
  EXPECT_EQ((*work)["base"]["self"], was);
  EXPECT_EQ((*work)["new"]["self"], now);
  EXPECT_EQ((*work)["regression"], true);
  EXPECT_EQ(Row(diff, "work.constprop.0"), nullptr);
  // A limits file's hard limit on work applies to its clone.
  const std::string limits = Dir() + "clone_limits.json";
  std::ofstream(limits) << fmt::format(
      R"({{"schema":"ptkit-diff-limits/1","functions":[{{"function":"work","hard":{}}}]}})",
      (was + now) / 2);
  auto hard = RunCommand({PTDECODE_PATH, "diff", before.trace, after.trace, "--limits", limits});
  EXPECT_EQ(hard.exit_code, 3) << hard.out << hard.err;
  EXPECT_THAT(hard.out, HasSubstr("hard limit"));
}

// A lambda added before others (or removed) renumbers them: each is paired with the same code
// numbered otherwise (sweep 34b F3: paired by name, the cheap lambda's apply<> against the dear
// one's gave +1942% and +133% regressions, exit 3). Each count by the ground truth within nm's
// range of the function of that build.
TEST_F(PtdecodeDiffTest, LambdasNumberedOtherwiseAreMatchedByTheirCode) {
  const std::string plain = DIFF_PROGRAM_DIR "/e2e_lambdas";
  const std::string more = DIFF_PROGRAM_DIR "/lambdas_more/e2e_lambdas";
  PTKIT_RECORD_OR_SKIP(one, "lambdas", plain);
  PTKIT_RECORD_OR_SKIP(two, "lambdas_more", more);
  // (diff names a clone as its function: GCC makes apply<> a clone with its constant vector.)
  auto truth = [](const std::string& program, const std::string& file, const std::string& name) {
    auto range = ::ptkit::testing::NmRangeDemangled(program, name);
    if (range.first == range.second) {
      range = ::ptkit::testing::NmRangeDemangled(program, name + " [clone .constprop.0]");
    }
    return TruthWithin(file, range, name);
  };
  // `name` with each lambda numbered `by` more ("#1}" -> "#2}").
  auto renumbered = [](std::string name, int by) {
    for (size_t at = name.find('#'); at != std::string::npos; at = name.find('#', at + 1)) {
      const size_t end = name.find('}', at);
      name.replace(at + 1, end - at - 1, std::to_string(std::stoi(name.substr(at + 1)) + by));
    }
    return name;
  };
  // Removed (the base has the extra lambda), then added.
  for (bool removed : {true, false}) {
    const DiffRun& base = removed ? two : one;
    const DiffRun& now = removed ? one : two;
    // (printf's own functions differ: the extra lambda's sum has digits to print.)
    auto r = RunCommand({PTDECODE_PATH, "diff", base.trace, now.trace, "--format", "json",
                         "--fail-function", "10", "--min-instructions", "1000"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto diff = nlohmann::json::parse(r.out);
    int applies = 0;
    for (const auto& row : diff["functions"]) {
      const std::string name = row["function"];
      if (name.find("{lambda(") == std::string::npos) continue;
      EXPECT_FALSE(row["regression"].get<bool>()) << name;
      if (row["status"] == "removed" || row["status"] == "new") {
        // The lambda only one build has: x & 1's apply<>, numbered #1.
        EXPECT_THAT(name, HasSubstr("apply<main::{lambda(int)#1}>"));
        EXPECT_EQ(row["status"], removed ? "removed" : "new");
        continue;
      }
      EXPECT_EQ(row["change"], 0) << name;
      if (name.starts_with("long apply<")) {
        ++applies;
        // Rows have the new side's names; the build with one more lambda numbered the same
        // code one more.
        const std::string in_plain = removed ? name : renumbered(name, -1);
        const std::string in_more = removed ? renumbered(name, 1) : name;
        EXPECT_EQ(row[removed ? "new" : "base"]["self"], truth(plain, one.truth, in_plain)) << name;
        EXPECT_EQ(row[removed ? "base" : "new"]["self"], truth(more, two.truth, in_more)) << name;
      }
    }
    EXPECT_EQ(applies, 2) << r.out;  // the cheap and the dear lambda's
  }
}

// Emulated recordings carry CLOCK_MONOTONIC nanoseconds as their TSC: --metric time and, with
// cyc=1 (one cycle per nanosecond), --metric ipc.
TEST_F(PtdecodeDiffTest, TimeAndIpcOfEmulatedRecordings) {
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  PTKIT_RECORD_OR_SKIP(more, "more", kMore);
  auto r = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--metric", "time",
                       "--format", "json", "--fail-function", "1", "--include-startup"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;  // one run a side: no change beyond the noise
  auto diff = nlohmann::json::parse(r.out);
  EXPECT_EQ(diff["metric"], "time");
  // Every tick is given to a function: the rows add up to the total.
  double sum = 0;
  for (const auto& row : diff["functions"]) {
    if (!row["base"].is_null()) sum += row["base"]["time_ns"].get<double>();
  }
  const double total = diff["total"]["base"].get<double>();
  EXPECT_GT(total, 0);
  EXPECT_NEAR(sum, total, 1e-6 * total);
  // folded --weight=time splits the same ticks (1 GHz: ticks are ns).
  auto folded = RunCommand({PTDECODE_PATH, "folded", "--weight", "time", base.trace});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  uint64_t folded_ticks = 0;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    folded_ticks += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(static_cast<uint64_t>(std::llround(total)), folded_ticks);
  // Single-stepped time is noisy (ptrace, a loaded machine): only that work has some.
  const nlohmann::json* work = Row(diff, "work");
  ASSERT_NE(work, nullptr);
  EXPECT_GT((*work)["new"]["time_ns"].get<double>(), 0);
  EXPECT_GT((*work)["base"]["time_ns"].get<double>(), 0);
  ASSERT_TRUE((*work)["noise"].is_object());
  EXPECT_EQ((*work)["noise"]["p"].get<double>(), 1.0);
  EXPECT_FALSE((*work)["regression"].get<bool>());
  // Under main (the default) only main's time counts: what `folded --weight time` gives the
  // stacks from main (its split of each interval is over the stacks, not the functions).
  uint64_t under_main = 0;
  std::istringstream main_lines(folded.out);
  for (std::string line; std::getline(main_lines, line);) {
    const std::string stack = ";" + line.substr(0, line.rfind(' ')) + ";";
    if (stack.find(";main;") != std::string::npos) {
      under_main += std::stoull(line.substr(line.rfind(' ') + 1));
    }
  }
  ASSERT_GT(under_main, 0u);
  auto m = RunCommand(
      {PTDECODE_PATH, "diff", base.trace, more.trace, "--metric", "time", "--format", "json"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  auto m_doc = nlohmann::json::parse(m.out);
  EXPECT_NEAR(m_doc["total"]["base"].get<double>(), static_cast<double>(under_main), 4.0);
  // A stats --json document has the time: the same values from it.
  auto j = RunCommand(
      {PTDECODE_PATH, "diff", base.stats_json, more.trace, "--metric", "time", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  auto j_doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(j_doc["functions"], m_doc["functions"]);
  EXPECT_EQ(j_doc["total"], m_doc["total"]);
  // IPC: the run's cycles are its CYC packets' (ptdecode packets --json lists them).
  auto no_cyc = RunCommand({PTDECODE_PATH, "diff", base.trace, more.trace, "--metric", "ipc"});
  EXPECT_EQ(no_cyc.exit_code, 1);
  EXPECT_THAT(no_cyc.err, HasSubstr("no CYC packets for --metric ipc"));
  PTKIT_RECORD_OR_SKIP(cyc, "cyc", kBase, {"--event", "intel_pt/cyc=1/u"});
  auto ipc = RunCommand({PTDECODE_PATH, "diff", cyc.trace, cyc.trace, "--metric", "ipc", "--format",
                         "json", "--include-startup"});
  ASSERT_EQ(ipc.exit_code, 0) << ipc.err;
  auto packets = RunCommand({PTDECODE_PATH, "packets", "--json", cyc.trace});
  ASSERT_EQ(packets.exit_code, 0) << packets.err;
  uint64_t cycles = 0;
  std::istringstream packet_lines(packets.out);
  for (std::string line; std::getline(packet_lines, line);) {
    auto p = nlohmann::json::parse(line, nullptr, false);
    if (p.is_object() && p.contains("cyc")) cycles += p["cyc"].get<uint64_t>();
  }
  ASSERT_GT(cycles, 0u);
  auto ipc_doc = nlohmann::json::parse(ipc.out);
  EXPECT_NEAR(ipc_doc["total"]["base"].get<double>(),
              static_cast<double>(TruthTotal(cyc.truth)) / static_cast<double>(cycles), 1e-9);
}

// Determinism: glibc's start-up walks the environment and copies the program's directory
// (readlink /proc/self/exe, for $ORIGIN), so two runs of one build from other directories or
// environments differ before main. Two remedies, both checked here: the recipe (the same
// absolute path, run as ./NAME under env -i) and --exclude-startup (count only under main).
TEST_F(PtdecodeDiffTest, RunsFromOtherPathsAndEnvironmentsGiveTheSameCounts) {
  const std::string short_dir = Dir() + "d";
  const std::string long_dir = Dir() + "a_directory_with_a_much_longer_name";
  const std::string run_dir = Dir() + "run";
  for (const std::string& dir : {short_dir, long_dir, run_dir}) {
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(kBase, dir + "/e2e_diff_work",
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::vector<std::string> ci_env = {"/usr/bin/env", "-i"};  // small: a quicker recording
  for (int i = 0; i < 40; ++i) ci_env.push_back(fmt::format("CI_VARIABLE_{}=value {}", i, i));
  // As a CI job might: the build's absolute path, and an environment of its own.
  std::vector<std::string> plain = ci_env;
  // (setarch -R, as the recipe: with ASLR, strlen's and memmove's counts follow where in its
  // page a string lands, and two runs differ now and then: a full ctest failed once so.)
  plain.insert(plain.end(), {"/usr/bin/setarch", "-R", PTRECORD_PATH, "--emulate=step", "-q", "-o",
                             Dir() + "plain.pt", "--", long_dir + "/e2e_diff_work"});
  auto r = RunCommand(plain);
  if (r.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The recipe, once from that environment and once from the test's.
  for (bool from_ci : {true, false}) {
    std::vector<std::string> recipe = from_ci ? ci_env : std::vector<std::string>{};
    recipe.insert(recipe.end(),
                  {"/bin/sh", "-c",
                   fmt::format("cd '{}' && exec /usr/bin/env -i /usr/bin/setarch -R '{}' "
                               "--emulate=step -q -o {}.pt -- ./e2e_diff_work",
                               run_dir, PTRECORD_PATH, from_ci ? "recipe_ci" : "recipe")});
    r = RunCommand(recipe);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::vector<std::string> zero = {"--fail-total", "0",    "--fail-function",  "0",
                                         "--format",     "json", "--include-startup"};
  auto diff = [&](const std::string& a, const std::string& b, std::vector<std::string> more) {
    std::vector<std::string> args = {PTDECODE_PATH, "diff", a, b};
    args.insert(args.end(), more.begin(), more.end());
    return RunCommand(args);
  };
  auto recipe = diff(run_dir + "/recipe_ci.pt", run_dir + "/recipe.pt", zero);
  EXPECT_EQ(recipe.exit_code, 0) << recipe.out;
  EXPECT_EQ(nlohmann::json::parse(recipe.out)["total"]["change"].get<int64_t>(), 0);
  // Without either remedy the start-up counts differ (getenv walks 40 more variables).
  auto differ = diff(run_dir + "/recipe.pt", Dir() + "plain.pt", zero);
  EXPECT_EQ(differ.exit_code, 3);
  auto differ_doc = nlohmann::json::parse(differ.out);
  EXPECT_NE(differ_doc["total"]["change"].get<int64_t>(), 0);
  const nlohmann::json* getenv_row = Row(differ_doc, "getenv");
  ASSERT_NE(getenv_row, nullptr);
  EXPECT_GT((*getenv_row)["change"].get<int64_t>(), 0);
  // --exclude-startup (the default): the same counts, and they are the program's own (ground
  // truth of work, steady and main, from the cached recording of the same build).
  auto same = diff(run_dir + "/recipe.pt", Dir() + "plain.pt",
                   {"--fail-total", "0", "--fail-function", "0", "--format", "json"});
  EXPECT_EQ(same.exit_code, 0) << same.out;
  auto same_doc = nlohmann::json::parse(same.out);
  for (const auto& row : same_doc["functions"]) EXPECT_EQ(row["status"], "same") << row.dump();
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  EXPECT_EQ(same_doc["total"]["base"].get<uint64_t>(), TruthOwn(kBase, base.truth));
  EXPECT_EQ(same_doc["functions"].size(), 3u);
  // Nothing ran under a function that does not exist: said.
  auto none = diff(Dir() + "plain.pt", Dir() + "plain.pt", {"--only-under", "no_such_function"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("nothing ran under no_such_function"));
}

// The command of a CI job file: the line that runs examples/ci/perf-regression.sh and the lines
// it continues on (a shell "\\" in GitHub's `run: |`; a folded plain scalar in GitLab's).
std::string JobCommand(const std::string& file) {
  const std::string text = Slurp(file);
  size_t at = text.find("examples/ci/perf-regression.sh");
  if (at == std::string::npos) return "";
  at = text.rfind('\n', at) + 1;
  std::string command;
  for (size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    std::string line = text.substr(at, end - at);
    line.erase(0, line.find_first_not_of(' '));
    if (command.empty() && line.starts_with("- ")) line.erase(0, 2);  // a list item
    if (line.empty() || line.back() == ':') break;                    // the next key
    const bool continued = line.back() == '\\';
    if (continued) line.pop_back();
    command += line + (continued ? "" : " ");
    if (!continued && file.ends_with("github-actions.yml")) break;
  }
  while (!command.empty() && command.back() == ' ') command.pop_back();
  return command;
}

// examples/ci/github-actions.yml's "Record and compare" command, run as the job runs it (from
// the workspace with the base and the new checkout, BENCH set) on the two builds: exit 3 naming
// work, the markdown table in $GITHUB_STEP_SUMMARY, the text one on stdout. GitLab's job runs
// the same script with the same limits.
TEST_F(PtdecodeDiffTest, TheCiScriptFailsOnTheRegression) {
  const std::string command = JobCommand(PTKIT_SOURCE_DIR "/examples/ci/github-actions.yml");
  ASSERT_THAT(command, ::testing::StartsWith("ptkit/examples/ci/perf-regression.sh "
                                             "\"base/$BENCH\" \"new/$BENCH\" "));
  const std::string limits = command.substr(command.find("--"));
  ASSERT_EQ(limits, "--fail-function 2 --min-instructions 1000 --fail-total 1");
  EXPECT_EQ(JobCommand(PTKIT_SOURCE_DIR "/examples/ci/gitlab-ci.yml"),
            "examples/ci/perf-regression.sh \"../base/$BENCH\" \"$BENCH\" " + limits);
  // The workspace: ptkit's checkout (the script) and the two checkouts' builds.
  const std::string ws = Dir() + "workspace";
  for (const char* dir : {"/ptkit/examples/ci", "/base/build", "/new/build"}) {
    std::filesystem::create_directories(ws + dir);
  }
  std::filesystem::create_symlink(CI_SCRIPT, ws + "/ptkit/examples/ci/perf-regression.sh");
  std::filesystem::create_symlink(kBase, ws + "/base/build/e2e_diff_work");
  std::filesystem::create_symlink(kMore, ws + "/new/build/e2e_diff_work");
  const std::string summary = Dir() + "summary.md";
  std::ofstream(summary) << "# earlier step\n";
  auto r = RunCommand({"/usr/bin/env", kPtrecordEnv, kPtdecodeEnv, "PTKIT_EMULATE=step",
                       "BENCH=build/e2e_diff_work", "GITHUB_STEP_SUMMARY=" + summary, "/bin/sh",
                       "-c", "cd '" + ws + "' && " + command});
  if (r.err.find("Operation not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace or perf_event_open denied";
  }
  ASSERT_EQ(r.exit_code, 3) << command << "\n" << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("work [e2e_diff_work]  REGRESSION"));
  EXPECT_THAT(r.out, HasSubstr("REGRESSION beyond --fail-total 1%, --fail-function 2% "
                               "(--min-instructions 1000)"));
  EXPECT_EQ(r.out.find("incomplete"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(ws + "/perf-regression/report.md"));  // the artifact
  const std::string md = Slurp(summary);
  EXPECT_THAT(md, ::testing::StartsWith("# earlier step\n### ptdecode diff: regression\n"));
  EXPECT_THAT(md, HasSubstr("| `work` **regression** | e2e_diff_work | "));
  // Under main only (--exclude-startup): work, steady and main, by the ground truth.
  PTKIT_RECORD_OR_SKIP(base, "base", kBase);
  PTKIT_RECORD_OR_SKIP(more, "more", kMore);
  uint64_t own_base = 0, own_more = 0;
  for (const char* name : {"work", "steady", "main"}) {
    own_base += TruthSelf(kBase, base.truth, name);
    own_more += TruthSelf(kMore, more.truth, name);
  }
  EXPECT_THAT(r.out, HasSubstr(fmt::format("# total instructions: {} -> {}", own_base, own_more)));
  // A change of 0.5% (EXTRA_CALL: 9 instructions more under main) passes a 1% limit, shown in
  // the summary; the same recordings fail a limit of 0.25% (exit 3, as gungraun's).
  const std::string half_summary = Dir() + "half.md";
  auto h = RunCommand({"/usr/bin/env", kPtrecordEnv, kPtdecodeEnv, "PTKIT_OUT=" + Dir() + "ci_half",
                       "PTKIT_EMULATE=step", "GITHUB_STEP_SUMMARY=" + half_summary, "/bin/sh",
                       CI_SCRIPT, kBase, kHalf, "--fail-total", "1"});
  ASSERT_EQ(h.exit_code, 0) << h.err << h.out;
  const std::string half_md = Slurp(half_summary);
  EXPECT_THAT(half_md, ::testing::StartsWith("### ptdecode diff: no regression\n"));
  EXPECT_THAT(half_md, HasSubstr(fmt::format("Total instructions: {} → {} (+9, +0.50%)", own_base,
                                             own_base + 9)));
  EXPECT_THAT(half_md, HasSubstr("| `work` | e2e_diff_work | "));
  EXPECT_THAT(half_md, HasSubstr("no regression beyond --fail-total 1%."));
  auto quarter = RunCommand({PTDECODE_PATH, "diff", Dir() + "ci_half/base.pt",
                             Dir() + "ci_half/new.pt", "--fail-total", "0.25"});
  EXPECT_EQ(quarter.exit_code, 3) << quarter.out;
  EXPECT_THAT(quarter.out, HasSubstr("REGRESSION beyond --fail-total 0.25%"));
  EXPECT_THAT(quarter.out, HasSubstr(fmt::format("total instructions {} -> {} (+0.50%) > "
                                                 "--fail-total 0.25%",
                                                 own_base, own_base + 9)));
  // PTKIT_FILTER: one --filter with its spaces (PTRECORD_OPTIONS split it into words: sweep 29a
  // F2), and the diff counts what was recorded (main is not in it): work's self by the truth.
  auto f = RunCommand({"/usr/bin/env", kPtrecordEnv, kPtdecodeEnv, "PTKIT_OUT=" + Dir() + "ci_f",
                       "PTKIT_EMULATE=step", "PTKIT_FILTER=filter work @ ./e2e_diff_work",
                       "/bin/sh", CI_SCRIPT, kBase, kMore, "--fail-function", "2"});
  EXPECT_EQ(f.exit_code, 3) << f.err << f.out;
  EXPECT_THAT(f.out, HasSubstr(fmt::format("# total instructions: {} -> {}",
                                           TruthSelf(kBase, base.truth, "work"),
                                           TruthSelf(kMore, more.truth, "work"))));
  EXPECT_THAT(f.out, HasSubstr("work [e2e_diff_work]  REGRESSION"));
  // Not an executable: a usage error.
  auto u =
      RunCommand({"/usr/bin/env", kPtrecordEnv, "/bin/sh", CI_SCRIPT, Dir() + "nothing", kMore});
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_THAT(u.err, HasSubstr("not an executable program"));
}

// Real hardware perf.data (Skylake, perf record -e intel_pt//, ../shared/testdata/perf-data):
// read as a diff side, but its programs are not public, so nothing decodes; said with the
// decode errors by code. The trace bytes are those `perf report -D` gives (its README).
TEST_F(PtdecodeDiffTest, RealPerfDataWithoutItsFilesIsSaid) {
  const std::string dir = PTKIT_SOURCE_DIR "/../shared/testdata/perf-data/";
  if (!std::filesystem::exists(dir + "perf.data.intel_pt-4.14")) {
    GTEST_SKIP() << dir << " is absent (the shared test data is not part of the repository)";
  }
  for (const char* startup : {"--exclude-startup", "--include-startup"}) {
    auto r = RunCommand({PTDECODE_PATH, "diff", dir + "perf.data.intel_pt-4.14",
                         dir + "perf.data.piped.intel_pt-4.14", startup});
    EXPECT_EQ(r.exit_code, 1) << r.out;
    // 0x2fd0 bytes on cpu 0 and 0x21a00 on cpu 3.
    EXPECT_THAT(r.err, HasSubstr("perf.data.intel_pt-4.14: no instructions decoded (2 streams, "
                                 "149968 bytes of trace, 10 decode errors: nomap 10, 0 loss "
                                 "points); nomap: the code at the traced addresses was not "
                                 "found (are the recording's files under --sysroot DIR?"));
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(PtdecodeDiffTest, BadInputsAreNamed) {
  PTKIT_RECORD_OR_SKIP(a, "base", kBase);
  const std::string future = Dir() + "future.json";
  std::ofstream(future) << R"({"schema": "ptkit-stats/9", "functions": []})";
  auto r = RunCommand({PTDECODE_PATH, "diff", a.stats_json, future});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("schema \"ptkit-stats/9\" is not one this ptdecode reads"));
  EXPECT_EQ(r.out, "");
  // The same program named otherwise (every row's image renamed; the program is static, so
  // it is the only image on each side): compared as one, and said.
  std::string other = Slurp(a.stats_json);
  for (size_t at = other.find("e2e_diff_work"); at != std::string::npos;
       at = other.find("e2e_diff_work", at)) {
    other.replace(at, 13, "something_els");
  }
  const std::string renamed_path = Dir() + "renamed.json";
  std::ofstream(renamed_path) << other;
  auto same = RunCommand({PTDECODE_PATH, "diff", a.stats_json, renamed_path});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_THAT(same.out, HasSubstr("something_els of the new side is compared as e2e_diff_work"));
  EXPECT_THAT(same.out, HasSubstr("(0 changed), 0 new, 0 removed"));
  // Another program (its functions named otherwise too): no function in common, a usage error.
  for (size_t at = other.find("\"function\": \""); at != std::string::npos;
       at = other.find("\"function\": \"", at + 1)) {
    other.insert(at + 13, "other_");
  }
  const std::string other_path = Dir() + "other.json";
  std::ofstream(other_path) << other;
  auto o = RunCommand({PTDECODE_PATH, "diff", a.stats_json, other_path});
  EXPECT_EQ(o.exit_code, 2) << o.out;
  EXPECT_THAT(o.err, HasSubstr("have no function in common"));
  auto u = RunCommand({PTDECODE_PATH, "diff", a.stats_json});
  EXPECT_EQ(u.exit_code, 2);
  // --base takes every file after it (sweep 40b L16: not said).
  u = RunCommand({PTDECODE_PATH, "diff", "--base", a.stats_json, a.stats_json});
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_THAT(u.err, HasSubstr("every file after --base is a run of that side: give the other "
                               "side with --new FILE"));
  // A negative limit is a usage error, said in a line: CLI11 read --min-instructions -5 as
  // 2^64-5, which turned --fail-function off with exit 0 (sweep 40b M1).
  for (const char* option : {"--min-instructions", "--fail-function", "--fail-total"}) {
    for (const std::string value : {"-5", " -5"}) {  // (CLI11 reads " -5" as -5 too)
      auto n = RunCommand({PTDECODE_PATH, "diff", a.stats_json, a.stats_json, "--fail-function",
                           "1", option, value});
      EXPECT_EQ(n.exit_code, 2) << option << ": " << n.out;
      EXPECT_EQ(n.err, fmt::format("ptdecode: {}: expected a number of 0 or more, not {} (see "
                                   "ptdecode --help)\n",
                                   option, value));
    }
  }
}

// Several runs a side: a function that ran in fewer than half the base runs has a base median
// of 0; growing from there is beyond any percentage (sweep 32b F3: 0 -> 100,005 instructions
// passed --fail-function 10 and a limits file naming it, exit 0). e2e_same_name_none calls b.c's
// helper once per argument.
TEST_F(PtdecodeDiffTest, AFunctionGrownFromABaseMedianOfZeroIsARegression) {
  const std::string program = DIFF_PROGRAM_DIR "/same_name_none/e2e_same_name";
  const std::string dir = Dir() + "/from_zero";
  std::filesystem::create_directories(dir);
  std::vector<std::string> base, now;
  auto record = [&](const std::string& name, int args) {
    std::string trace = dir + "/" + name + ".pt";
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate", "-q", "--overwrite-existing",
                                     "-o",          trace,       "--", program};
    for (int i = 0; i < args; ++i) argv.push_back("x");
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return trace;
  };
  base = {record("b1", 0), record("b2", 0), record("b3", 1)};
  now = {record("n1", 40), record("n2", 40), record("n3", 40)};
  std::vector<std::string> argv = {PTDECODE_PATH, "diff", "--base"};
  argv.insert(argv.end(), base.begin(), base.end());
  argv.push_back("--new");
  argv.insert(argv.end(), now.begin(), now.end());
  argv.insert(argv.end(), {"--fail-function", "10", "--min-instructions", "1"});
  auto r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("helper (same_name_b.c) [e2e_same_name]: self 0 -> "));
  EXPECT_THAT(r.out + r.err, HasSubstr("(from 0) > "));
}

}  // namespace
}  // namespace ptkit
