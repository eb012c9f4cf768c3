// AUX sampling on a machine without Intel PT, as users run it:
//   ptrecord --emulate=step --aux-sample[=SIZE] -c N --ground-truth truth -o trace.pt -- PROGRAM
//   ptdecode samples [--json --instructions] trace.pt
// The oracle is the recorder's ground truth: the k-th sample of a thread is taken before its
// (k*N)-th instruction retires, so its IP is that instruction, and the instructions its
// snippet decodes to are exactly the ones the thread ran just before, ending there.
#include <linux/perf_event.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "aux_samples.h"
#include "e2e_programs.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/aux_sample.h"
#include "ptkit/container_reader.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::ReadTruth;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;

using ::ptkit::testing::kThreads;

struct SampledRun {
  std::string trace, truth;
  ::ptkit::testing::CommandResult result;
};

class AuxSampleCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new ::ptkit::testing::TempDir(); }
  static void TearDownTestSuite() {
    delete dir_;
    recordings_.clear();
  }
  // One emulated recording per option set, shared by the tests (emulation is slow).
  static const SampledRun& Record(const std::vector<std::string>& options) {
    std::string key;
    for (const std::string& o : options) key += o + " ";
    auto [it, fresh] = recordings_.try_emplace(key);
    SampledRun& r = it->second;
    if (!fresh) return r;
    const std::string stem = dir_->File("r" + std::to_string(recordings_.size()));
    r.trace = stem + ".pt";
    r.truth = stem + ".truth";
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=step", "--ground-truth", r.truth,
                                     "-o",          r.trace};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.push_back(kThreads);
    r.result = RunCommand(argv);
    return r;
  }
  static ::ptkit::testing::TempDir* dir_;
  static std::map<std::string, SampledRun> recordings_;
};
::ptkit::testing::TempDir* AuxSampleCliTest::dir_ = nullptr;
std::map<std::string, SampledRun> AuxSampleCliTest::recordings_;

#define RECORD_OR_SKIP(var, ...)                                             \
  const SampledRun& var = Record(__VA_ARGS__);                               \
  if (var.result.err.find("Operation not permitted") != std::string::npos) { \
    GTEST_SKIP() << "ptrace or perf_event_open denied";                      \
  }                                                                          \
  ASSERT_EQ(var.result.exit_code, 0) << var.result.err

constexpr uint64_t kSamplePeriod = 500;

// Every sample ends exactly where the ground truth says it was taken, and its decoded
// instructions are the ones the thread retired right before; counts and sizes are exact.
TEST_F(AuxSampleCliTest, SnippetsEndAtTheSampledInstruction) {
  RECORD_OR_SKIP(rec, {"--aux-sample", "-c", std::to_string(kSamplePeriod)});
  EXPECT_THAT(rec.result.err, HasSubstr("AUX samples of 4096 bytes"));
  const testing::PerThread truth = ReadTruth(rec.truth);
  ASSERT_EQ(truth.size(), 3u);  // main and two workers

  auto dec = RunCommand(
      {PTDECODE_PATH, "samples", "--json", "--instructions", "--branches", "0", rec.trace});
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  const nlohmann::json j = nlohmann::json::parse(dec.out);
  uint64_t expected_total = 0;
  size_t longest = 0;
  ::ptkit::testing::ExpectSamplesMatchTruth(j, truth, kSamplePeriod, 4096, &expected_total,
                                            &longest);
  if (HasFatalFailure()) return;
  RecordProperty("samples", static_cast<int>(expected_total));
  RecordProperty("longest_snippet_insns", static_cast<int>(longest));

  // The container holds the samples as their own records and no AUX stream (AUX-sample mode
  // overwrites the ring, as perf's); info says so.
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", rec.trace});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json ji = nlohmann::json::parse(info.out);
  EXPECT_EQ(ji["samples"]["count"], expected_total);
  EXPECT_EQ(ji["samples"]["aux_bytes"], expected_total * 4096);
  EXPECT_EQ(ji["metadata"]["mode"], "aux-sample");
  for (const nlohmann::json& k : ji["kinds"]) EXPECT_NE(k["kind"], "aux");
  // The attrs say what took the samples (ptkit-format(5)): instructions:u every kSamplePeriod, with
  // the samples' sample_type and 4096 AUX bytes each; export writes them (perf_export_cli_test).
  const nlohmann::json* sampler = nullptr;
  for (const nlohmann::json& a : ji["metadata"]["attrs"]) {
    if (a.value("name", "") == "aux-sample") sampler = &a;
  }
  ASSERT_NE(sampler, nullptr) << ji["metadata"]["attrs"].dump();
  EXPECT_EQ((*sampler)["type"], PERF_TYPE_HARDWARE);
  EXPECT_EQ((*sampler)["config"], PERF_COUNT_HW_INSTRUCTIONS);
  EXPECT_EQ((*sampler)["exclude_kernel"], true);
  EXPECT_EQ((*sampler)["freq"], false);
  EXPECT_EQ((*sampler)["sample_period"], kSamplePeriod);
  EXPECT_EQ((*sampler)["aux_sample_size"], 4096);
  const uint64_t sample_type = (*sampler)["sample_type"];
  EXPECT_NE(sample_type & PERF_SAMPLE_AUX, 0u);
  EXPECT_EQ(sample_type & PERF_SAMPLE_CPU, 0u);  // the emulated samples have no CPU

  // Text: one header line per sample, the last branches, the summary.
  auto text = RunCommand({PTDECODE_PATH, "samples", "--branches", "4", rec.trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(" work+0x"));
  EXPECT_THAT(text.out, HasSubstr(std::to_string(expected_total) + " samples: " +
                                  std::to_string(expected_total) + " decoded to the sampled IP"));
  // A negative count is a usage error (CLI11 read -2 as 2^64-2: every branch; sweep 40b M1).
  auto negative = RunCommand({PTDECODE_PATH, "samples", "--branches", "-2", rec.trace});
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_THAT(negative.err, HasSubstr("--branches: expected a number of 0 or more, not -2"));
  // --snapshot selects no sample: refused, not ignored (sweep 40b M2).
  auto snapshot = RunCommand({PTDECODE_PATH, "samples", "--snapshot", "1", rec.trace});
  EXPECT_EQ(snapshot.exit_code, 2);
  EXPECT_THAT(snapshot.err, HasSubstr("--snapshot selects one snapshot's trace; samples shows"));
}

// Every function symbol of a static program by `nm -S` (the oracle): start -> [end, names]
// (aliases share a range); a symbol without a size ends at the next one (as gdb and ptkit end
// it).
struct NmFunction {
  uint64_t end = 0;
  std::vector<std::string> names;
};
std::map<uint64_t, NmFunction> NmFunctions(const std::string& program) {
  auto r = RunCommand({"/usr/bin/nm", "-S", "--defined-only", program});
  std::map<uint64_t, NmFunction> functions;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream split(line);
    std::vector<std::string> fields;
    for (std::string f; split >> f;) fields.push_back(f);
    if (fields.size() != 3 && fields.size() != 4) continue;
    const std::string& type = fields[fields.size() - 2];
    if (type != "T" && type != "t" && type != "W" && type != "i") continue;
    const uint64_t begin = std::stoull(fields[0], nullptr, 16);
    NmFunction& f = functions[begin];
    if (fields.size() == 4) {
      f.end = std::max<uint64_t>(f.end, begin + std::stoull(fields[1], nullptr, 16));
    }
    f.names.push_back(fields.back());
  }
  for (auto it = functions.begin(); it != functions.end(); ++it) {
    auto next = std::next(it);
    if (it->second.end == 0 && next != functions.end()) it->second.end = next->first;
  }
  return functions;
}

// `stats --samples` of `rec`: per function, the samples taken in it (self) are exactly the
// ground truth's sampled IPs that nm puts in its range; `work` calls nothing, so its total
// equals its self; per thread (--tid) the samples are that thread's.
void CheckSampledStats(const SampledRun& rec) {
  const testing::PerThread truth = ReadTruth(rec.truth);
  const std::map<uint64_t, NmFunction> nm = NmFunctions(kThreads);
  ASSERT_FALSE(nm.empty());
  std::map<uint64_t, uint64_t> want;  // nm range start -> samples taken in it
  uint64_t total = 0;
  for (const auto& [tid, ips] : truth) {
    for (uint64_t k = 1; k * kSamplePeriod <= ips.size(); ++k) {
      const uint64_t ip = ips[k * kSamplePeriod - 1];
      auto f = nm.upper_bound(ip);
      ASSERT_NE(f, nm.begin()) << std::hex << ip;
      --f;
      ASSERT_LT(ip, f->second.end) << std::hex << ip << " is in no nm function";
      ++want[f->first];
      ++total;
    }
  }
  auto stats = RunCommand({PTDECODE_PATH, "stats", "--samples", "--json", rec.trace});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const nlohmann::json j = nlohmann::json::parse(stats.out);
  EXPECT_EQ(j["schema"], "ptkit-sample-stats/1");
  EXPECT_EQ(j["totals"]["samples"], total);
  EXPECT_EQ(j["totals"]["unsynced"], 0);
  std::map<uint64_t, uint64_t> got;
  for (const nlohmann::json& f : j["functions"]) {
    const std::string name = f["function"];
    EXPECT_GE(f["total"].get<uint64_t>(), f["self"].get<uint64_t>()) << name;
    EXPECT_LE(f["total"].get<uint64_t>(), total) << name;
    if (f["self"] == 0) continue;
    auto range = std::find_if(nm.begin(), nm.end(), [&](const auto& e) {
      return std::find(e.second.names.begin(), e.second.names.end(), name) != e.second.names.end();
    });
    ASSERT_NE(range, nm.end()) << name << " is no nm function";
    got[range->first] += f["self"].get<uint64_t>();
    if (name == "work") {
      EXPECT_EQ(f["total"], f["self"]);
    }
  }
  EXPECT_EQ(got, want);

  // Text: the header and one row per function.
  auto text = RunCommand({PTDECODE_PATH, "stats", "--samples", rec.trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(": " + std::to_string(total) + " samples (" +
                                  std::to_string(total) + " with a stack rebuilt"));
  EXPECT_THAT(text.out, HasSubstr("%  work\n"));

  const uint64_t tid = truth.rbegin()->first;
  auto one = RunCommand(
      {PTDECODE_PATH, "stats", "--samples", "--json", "--tid", std::to_string(tid), rec.trace});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(nlohmann::json::parse(one.out)["totals"]["samples"],
            truth.at(tid).size() / kSamplePeriod);
}

// The sampled profile (`samples --folded`, `folded --samples`, and per function `stats
// --samples`, CheckSampledStats): one folded stack per distinct stack, the counts summing to the
// samples; each stack's leaf is the function nm says holds the sampled IP, so the samples in `work`
// (by the ground truth's IPs and nm's range of work) are exactly those whose stack ends in it,
// and their stack is the worker threads' entry path.
TEST_F(AuxSampleCliTest, FoldedStacksFromTheSnippets) {
  RECORD_OR_SKIP(rec, {"--aux-sample", "-c", std::to_string(kSamplePeriod)});
  const testing::PerThread truth = ReadTruth(rec.truth);
  const auto [work_begin, work_end] = testing::NmRange(kThreads, "work");
  ASSERT_LT(work_begin, work_end);
  uint64_t in_work = 0, total = 0;
  for (const auto& [tid, ips] : truth) {
    for (uint64_t k = 1; k * kSamplePeriod <= ips.size(); ++k) {
      const uint64_t ip = ips[k * kSamplePeriod - 1];
      in_work += ip >= work_begin && ip < work_end;
      ++total;
    }
  }
  ASSERT_GT(in_work, 0u);
  // `samples --folded` and `folded --samples` are the same profile.
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"samples", "--folded"}, {"folded", "--samples"}}) {
    std::vector<std::string> argv = {PTDECODE_PATH};
    argv.insert(argv.end(), command.begin(), command.end());
    argv.push_back(rec.trace);
    auto folded = RunCommand(argv);
    ASSERT_EQ(folded.exit_code, 0) << command[0] << ": " << folded.err;
    uint64_t sum = 0, work_leaf = 0;
    std::istringstream lines(folded.out);
    for (std::string line; std::getline(lines, line);) {
      const size_t space = line.rfind(' ');
      ASSERT_NE(space, std::string::npos) << line;
      const std::string stack = line.substr(0, space);
      const uint64_t n = std::stoull(line.substr(space + 1));
      sum += n;
      if (stack == "work" || stack.ends_with(";work")) {
        work_leaf += n;
        // clone3 starts the thread in start_thread, which calls work: nothing else is open (a
        // SYSCALL that returned is no call, a return pops).
        EXPECT_EQ(stack, "__clone3;start_thread;work") << line;
      }
    }
    EXPECT_EQ(sum, total) << command[0];
    EXPECT_EQ(work_leaf, in_work) << command[0];
  }
  CheckSampledStats(rec);
}

// What --samples cannot do is a usage error that says why.
TEST_F(AuxSampleCliTest, SampledProfileFlagErrors) {
  const SampledRun rec{.trace = dir_->File("any.pt")};  // the flags are checked before the file
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"stats", "--samples", "--time", "1,2", rec.trace}, "--time selects or weighs"},
           {{"stats", "--samples", "--exclude-startup", rec.trace}, "--exclude-startup"},
           // The option given, not the one it stands for (sweep 40b L19).
           {{"stats", "--samples", "--only-under", "main", rec.trace}, "--only-under selects"},
           {{"folded", "--samples", "--weight", "time", rec.trace}, "--weight time"},
           {{"folded", "--samples", "--pt", rec.trace}, "not a raw trace"},
       }) {
    std::vector<std::string> argv = {PTDECODE_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(says)) << args[2];
  }
}

// A snippet smaller than the PSB period mostly holds no PSB: those samples are counted and
// said, not dropped.
TEST_F(AuxSampleCliTest, SnippetsWithoutPsbAreCountedAndSaid) {
  RECORD_OR_SKIP(rec, {"--aux-sample=64", "-c", "2000"});
  auto dec = RunCommand({PTDECODE_PATH, "samples", "--json", rec.trace});
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  const nlohmann::json j = nlohmann::json::parse(dec.out);
  uint64_t unsynced = 0;
  for (const nlohmann::json& s : j["samples"]) {
    EXPECT_EQ(s["snippet_bytes"], 64);
    unsynced += s["synced"] == false;
  }
  EXPECT_GT(unsynced, 0u);
  EXPECT_EQ(j["totals"]["unsynced"], unsynced);
  auto text = RunCommand({PTDECODE_PATH, "samples", rec.trace});
  EXPECT_THAT(text.out, HasSubstr(std::to_string(unsynced) + " could not be synchronised"));
}

TEST_F(AuxSampleCliTest, BadOptionsAreUsageErrors) {
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--aux-sample=100000"}, "from 8 to 61440 bytes"},
           {{"--aux-sample=12"}, "multiple of 8"},
           {{"-c", "5"}, "need --aux-sample"},
           {{"-g"}, "--callchain need --aux-sample"},
           {{"--aux-sample", "-g"}, "--callchain does not apply to --emulate"},
           {{"--aux-sample", "-c", "0"}, "expected 1 or more"},
           {{"--aux-sample", "--bts"}, "needs intel_pt"},
           {{"--aux-sample=65536", "-m", "64,8"}, "from 8 to 61440"},
           {{"--aux-sample=32768", "-m", "64,4"}, "larger than the AUX area"},
       }) {
    std::vector<std::string> argv = {PTRECORD_PATH, "--emulate=step", "-o", dir_->File("bad.pt")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--");
    argv.push_back(kThreads);
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(says)) << args[0];
  }
}

}  // namespace
}  // namespace ptkit
