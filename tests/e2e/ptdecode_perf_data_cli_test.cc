// perf.data input, against perf 6.1 (the Debian package linux-perf) as the oracle:
//  - the real Intel PT recordings of ../shared/testdata/perf-data (Skylake, kernel 4.14, file
//    and pipe mode; their binaries are not public): `info` gives the AUXTRACE bytes per CPU
//    `perf report -D` shows, `packets` dumps every packet with no decode error, decoding
//    names each missing binary in its gaps and nothing crashes;
//  - perf.data files perf records here without PT (`perf record -e dummy,task-clock`, file
//    and pipe mode, -z): the sideband ptkit reads equals `perf script --show-task-events
//    --show-mmap-events`.
#include <linux/perf_event.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/perf_data_input.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"
#include "ptkit/perf_data.h"
#include "ptkit/perf_data_writer.h"
#include "ptkit/perf_records.h"
#include "read_file.h"
#include "run_command.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kData = std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/perf-data/";
const std::string kPerf = "/usr/bin/perf";

std::vector<std::string> RealRecordings() {
  return {kData + "perf.data.intel_pt-4.14", kData + "perf.data.piped.intel_pt-4.14"};
}

#define PTKIT_NEED(path)                                                        \
  if (!std::filesystem::exists((path))) GTEST_SKIP() << (path) << " is absent"; \
  if (!std::filesystem::exists(kPerf)) GTEST_SKIP() << kPerf << " is absent (linux-perf)"

// AUXTRACE bytes per stream as `perf report -D` prints the records ("cpu 3" / "tid N").
std::map<std::string, uint64_t> PerfAuxtraceBytes(const std::string& file) {
  auto r = RunCommand({kPerf, "report", "-D", "-i", file});
  std::map<std::string, uint64_t> bytes;
  static const std::regex kLine(
      R"(PERF_RECORD_AUXTRACE size: 0x([0-9a-f]+) .* tid: (-?\d+)\s+cpu: (-?\d+))");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kLine)) continue;
    const std::string stream = m[3] == "-1" ? "tid " + m[2].str() : "cpu " + m[3].str();
    bytes[stream] += std::stoull(m[1], nullptr, 16);
  }
  return bytes;
}

TEST(PtdecodePerfDataTest, InfoGivesTheAuxtraceBytesPerfReportShows) {
  for (const std::string& file : RealRecordings()) {
    PTKIT_NEED(file);
    auto r = RunCommand({PTDECODE_PATH, "info", "--json", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json info = nlohmann::json::parse(r.out);
    std::map<std::string, uint64_t> ours;
    for (const auto& a : info["auxtrace"]) ours[a["stream"]] = a["bytes"];
    const std::map<std::string, uint64_t> perf = PerfAuxtraceBytes(file);
    EXPECT_FALSE(perf.empty());
    if (!info["pipe"].get<bool>()) {
      EXPECT_EQ(ours, perf) << file;
    } else {
      // perf 6.1 stops reading a pipe-mode file after its first AUXTRACE ("bad event header
      // size", in report -D, script and inject alike): what it shows, and the rest as the
      // file-mode recording of the same command has it (both CPUs).
      for (const auto& [stream, bytes] : perf) EXPECT_EQ(ours[stream], bytes) << stream;
      EXPECT_EQ(ours.size(), 2u);
      EXPECT_TRUE(ours.contains("cpu 3"));
    }
    EXPECT_EQ(info["auxtrace_info"]["pmu"], "intel_pt");
    EXPECT_EQ(info["metadata"]["cpu"]["model"], 78);  // Skylake m7-6Y75: errata apply
  }
}

TEST(PtdecodePerfDataTest, PacketsDumpsEveryStreamWithNoDecodeError) {
  for (const std::string& file : RealRecordings()) {
    PTKIT_NEED(file);
    auto r = RunCommand({PTDECODE_PATH, "packets", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("[stream cpu 0:"));
    EXPECT_THAT(r.out, HasSubstr("[stream cpu 3:"));
    EXPECT_THAT(r.out, Not(HasSubstr("error")));
    EXPECT_GT(std::count(r.out.begin(), r.out.end(), '\n'), 100000);
  }
}

TEST(PtdecodePerfDataTest, EachMissingBinaryIsAGapNamingIt) {
  testing::TempDir empty;
  for (const std::string& file : RealRecordings()) {
    PTKIT_NEED(file);
    auto r = RunCommand({PTDECODE_PATH, "insn", "--sysroot", empty.path(), file});
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.exit_code, 1) << r.err;  // no binary: no instruction
    EXPECT_THAT(r.err, HasSubstr("no instructions decoded"));
    // Every gap in user space (the files MMAP2 names after `echo` exec'd) names its file; in
    // the kernel (the recording traced it, without --kcore), says so (sweep 29b M2: "no image
    // is loaded").
    static const std::regex kGap(R"(\[gap at offset 0x[0-9a-f]+: no code at 0x([0-9a-f]+)(.*)\])");
    std::set<std::string> named;
    int user_gaps = 0, kernel_gaps = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, kGap)) continue;
      if (m[1].str().size() == 16) {
        ++kernel_gaps;
        EXPECT_EQ(m[2].str(),
                  ": kernel code, not in the recording (ptrecord --kcore, perf record "
                  "--kcore)")
            << line;
        continue;
      }
      ++user_gaps;
      EXPECT_THAT(m[2].str(), HasSubstr("could not be loaded")) << line;
      std::smatch f;
      if (std::regex_search(line, f, std::regex(empty.path() + R"((\S+) could not)"))) {
        named.insert(f[1]);
      }
    }
    EXPECT_GT(user_gaps, 0) << file;
    EXPECT_GT(kernel_gaps, 0) << file;
    EXPECT_TRUE(named.contains("/lib64/ld-2.23.so")) << file;
  }
}

// The sideband of perf script's view: one line per record, as ptkit's timeline must have it.
struct Side {
  std::multiset<std::string> mmaps;                           // "pid start len pgoff path"
  std::map<uint32_t, std::pair<uint32_t, std::string>> comm;  // tid -> pid, last name
  int forks = 0, exits = 0, comms = 0, execs = 0;
};

Side PerfScriptSideband(const std::string& file) {
  auto r = RunCommand({kPerf, "script", "--show-task-events", "--show-mmap-events", "-i", file});
  Side s;
  static const std::regex kMmap2(
      R"(PERF_RECORD_MMAP2 (\d+)/(\d+): \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|\d+) .*\]: \S+ (.*)$)");
  static const std::regex kComm(R"(PERF_RECORD_COMM( exec)?: (.*):(\d+)/(\d+))");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, kMmap2)) {
      s.mmaps.insert(m[1].str() + " " + std::to_string(std::stoull(m[3], nullptr, 16)) + " " +
                     std::to_string(std::stoull(m[4], nullptr, 16)) + " " +
                     std::to_string(std::stoull(m[5], nullptr, 0)) + " " + m[6].str());
    } else if (std::regex_search(line, m, kComm)) {
      ++s.comms;
      s.execs += m[1].matched ? 1 : 0;
      s.comm[std::stoul(m[4])] = {std::stoul(m[3]), m[2]};
    } else if (line.find("PERF_RECORD_FORK(") != std::string::npos) {
      ++s.forks;
    } else if (line.find("PERF_RECORD_EXIT(") != std::string::npos) {
      ++s.exits;
    }
  }
  return s;
}

Side PtkitSideband(const std::string& file) {
  Side s;
  auto src = OpenFileSource(file);
  EXPECT_THAT(src.status(), IsOk());
  if (!src.ok()) return s;
  auto r = ReadPerfDataRecording(**src, {});
  EXPECT_THAT(r.status(), IsOk());
  if (!r.ok()) return s;
  const Sideband& t = r->timeline;
  EXPECT_EQ(t.stats().malformed, 0u) << (t.problems().empty() ? "" : t.problems()[0]);
  s.forks = static_cast<int>(t.stats().forks);
  s.exits = static_cast<int>(t.stats().exits);
  s.comms = static_cast<int>(t.stats().comms);
  s.execs = static_cast<int>(t.stats().execs);
  for (uint32_t pid : t.Pids()) {
    for (const Mapping* m : t.MappingsDuring(pid)) {
      s.mmaps.insert(std::to_string(pid) + " " + std::to_string(m->start) + " " +
                     std::to_string(m->end - m->start) + " " + std::to_string(m->pgoff) + " " +
                     m->path);
    }
  }
  return s;
}

class PerfRecordTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PerfRecordTest, SidebandEqualsPerfScript) {
  if (!std::filesystem::exists(kPerf)) GTEST_SKIP() << kPerf << " is absent (linux-perf)";
  testing::TempDir dir;
  const std::string file = dir.File("perf.data");
  // sh forks and execs true: FORK, COMM exec, MMAP2 of both programs, EXIT.
  std::vector<std::string> record = {kPerf, "record", "-q", "-e", "dummy,task-clock"};
  if (GetParam() == "zstd") record.push_back("-z");
  // A tracepoint event: pipe mode writes its formats as a TRACING_DATA record whose bytes
  // follow it outside its size (sweep 39a F2: read as records, every record after them lost).
  if (GetParam() == "pipe-tracepoint")
    record.insert(record.end(), {"-e", "sched:sched_process_exec"});
  const bool pipe = GetParam().starts_with("pipe");
  record.insert(record.end(), {"-o", pipe ? "-" : file, "--", "/bin/sh", "-c", "/bin/true; :"});
  auto r = RunCommand(record);
  if (r.exit_code != 0 && r.err.find("ermission") != std::string::npos) {
    GTEST_SKIP() << "perf_event_open denied: " << r.err;
  }
  if (r.exit_code != 0 && GetParam() == "pipe-tracepoint") {
    GTEST_SKIP() << "no tracepoint events here (tracefs): " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (pipe) {
    std::ofstream(file, std::ios::binary) << r.out;
  }
  const Side perf = PerfScriptSideband(file);
  const Side ours = PtkitSideband(file);
  ASSERT_FALSE(perf.mmaps.empty());
  EXPECT_EQ(ours.forks, perf.forks);
  EXPECT_EQ(ours.exits, perf.exits);
  EXPECT_EQ(ours.comms, perf.comms);
  EXPECT_EQ(ours.execs, perf.execs);
  EXPECT_GE(perf.execs, 1);
  // Every MMAP2 perf shows is a mapping of its process in ptkit's timeline.
  for (const std::string& m : perf.mmaps) {
    EXPECT_TRUE(ours.mmaps.contains(m)) << "perf script's MMAP2 " << m << " is missing";
  }
  auto src = OpenFileSource(file);
  ASSERT_THAT(src.status(), IsOk());
  auto rec = ReadPerfDataRecording(**src, {});
  ASSERT_THAT(rec.status(), IsOk());
  for (const auto& [tid, pc] : perf.comm) {
    EXPECT_EQ(rec->timeline.PidOfTid(tid), pc.first) << "tid " << tid;
    EXPECT_EQ(rec->timeline.CommAt(tid, ~0ull), pc.second) << "tid " << tid;
  }
  // No trace: decoding says so.
  auto d = RunCommand({PTDECODE_PATH, "stats", file});
  EXPECT_EQ(d.exit_code, 1) << d.err;
  EXPECT_THAT(d.err, HasSubstr("no instructions decoded (0 streams"));
  EXPECT_THAT(d.err, HasSubstr("the recording holds no trace (record an intel_pt or intel_bts"));
}

INSTANTIATE_TEST_SUITE_P(Modes, PerfRecordTest,
                         ::testing::Values("file", "pipe", "zstd", "pipe-tracepoint"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A group perf 6.1 records here (`perf record -e '{dummy,task-clock}'`, its HEADER_GROUP_DESC):
// ptdecode info shows its leader and members as `perf evlist -g` does, and the export of the
// file keeps it, so perf shows the same group there.
// A hardware recording whose CPU is not known decodes without errata workarounds, and says so
// with what to do (sweep 29b S7: a garbled CPUID feature said nothing); --cpu names it.
TEST(PtdecodePerfDataTest, AnUnknownCpuIsSaidWithWhatToDo) {
  const std::string file = kData + "perf.data.intel_pt-4.14";
  PTKIT_NEED(file);
  auto r = RunCommand({PTDECODE_PATH, "stats", file});
  EXPECT_THAT(r.err, Not(HasSubstr("CPU is not known"))) << "it has GenuineIntel,6,78,3";
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find("GenuineIntel,6,78,3");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 19, std::string(19, '?'));
  testing::TempDir dir;
  const std::string garbled = dir.File("garbled.data");
  std::ofstream(garbled, std::ios::binary) << bytes;
  r = RunCommand({PTDECODE_PATH, "stats", garbled});
  EXPECT_THAT(r.err, HasSubstr("garbled.data: the recording CPU is not known (it names "
                               "\"???????????????????\", not a CPU's vendor, family and model): "
                               "decoded without the workarounds for its Intel PT errata"))
      << r.err;
  EXPECT_THAT(r.err, HasSubstr("give it: --cpu FAMILY/MODEL[/STEPPING]"));
  r = RunCommand({PTDECODE_PATH, "stats", "--cpu", "6/78/3", garbled});
  EXPECT_THAT(r.err, Not(HasSubstr("CPU is not known"))) << r.err;
}

// An export keeps the recording's CPU description (perf's HEADER_CPUDESC), which `perf data
// convert --to-json` reads without a check: it died of SIGSEGV on every export, none had one
// (sweep 39a F4).
TEST(PtdecodePerfDataTest, AnExportKeepsTheCpuDescriptionPerfDataConvertNeeds) {
  if (!std::filesystem::exists(kPerf)) GTEST_SKIP() << kPerf << " is absent (linux-perf)";
  testing::TempDir dir;
  const std::string file = dir.File("clock.data"), exported = dir.File("exported.data");
  auto r = RunCommand({kPerf, "record", "-q", "-e", "task-clock", "-o", file, "--", "/bin/true"});
  if (r.exit_code != 0 && r.err.find("ermission") != std::string::npos) {
    GTEST_SKIP() << "perf_event_open denied: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto e = RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", file, "-o", exported});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto cpudesc = [](const std::string& data) {
    const std::string header = RunCommand({kPerf, "report", "--header-only", "-i", data}).out;
    const size_t at = header.find("# cpudesc : ");
    return at == std::string::npos ? std::string() : header.substr(at, header.find('\n', at) - at);
  };
  ASSERT_FALSE(cpudesc(file).empty());
  EXPECT_EQ(cpudesc(exported), cpudesc(file));
  auto json = RunCommand(
      {kPerf, "data", "convert", "-i", exported, "--to-json", dir.File("exported.json")});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto doc = nlohmann::json::parse(
      testing::ReadWholeFile<std::string>(dir.File("exported.json")), nullptr, false);
  ASSERT_TRUE(doc.is_object());
  EXPECT_TRUE(doc["headers"].contains("cpu-desc")) << doc["headers"];
}

TEST(PtdecodePerfDataTest, InfoAndExportKeepTheEventGroup) {
  if (!std::filesystem::exists(kPerf)) GTEST_SKIP() << kPerf << " is absent (linux-perf)";
  testing::TempDir dir;
  const std::string file = dir.File("group.data"), exported = dir.File("exported.data");
  auto r = RunCommand(
      {kPerf, "record", "-q", "-e", "{dummy,task-clock}", "-o", file, "--", "/bin/true"});
  if (r.exit_code != 0 && r.err.find("ermission") != std::string::npos) {
    GTEST_SKIP() << "perf_event_open denied: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto groups = RunCommand({kPerf, "evlist", "-g", "-i", file});
  ASSERT_EQ(groups.out, "{dummy,task-clock}\n") << "perf wrote no group: " << groups.err;
  for (const std::string& f : {file, exported}) {
    SCOPED_TRACE(f);
    if (f == exported) {
      auto e = RunCommand({PTDECODE_PATH, "export", "--to", "perf.data", file, "-o", exported});
      ASSERT_EQ(e.exit_code, 0) << e.err;
      EXPECT_EQ(RunCommand({kPerf, "evlist", "-g", "-i", exported}).out, groups.out);
    }
    auto info = RunCommand({PTDECODE_PATH, "info", "--json", f});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    const nlohmann::json j = nlohmann::json::parse(info.out);
    ASSERT_EQ(j["groups"].size(), 1u) << j.dump();
    EXPECT_EQ(j["groups"][0]["leader"], 0);
    EXPECT_EQ(j["groups"][0]["events"], 2);
    EXPECT_EQ(j["groups"][0]["names"], nlohmann::json({"dummy", "task-clock"}));
    EXPECT_EQ(j["groups"][0]["missing"], 0);
    auto text = RunCommand({PTDECODE_PATH, "info", f});
    EXPECT_THAT(text.out, HasSubstr("group {anon_group}: {dummy,task-clock}, leader event 0, "
                                    "2 events\n"));
    EXPECT_THAT(text.out, HasSubstr("  dummy: type 1 config 0x9 "));
  }
}

// A HEADER_GROUP_DESC from another machine may claim 2^32 - 1 members of a group whose leader
// is any index: the members past the attrs are counted, not walked. A fuzzed perf.data with
// such a group took 30 s per decode (tests/fuzz/corpus/decode/group_desc_huge.data); 1,000 of
// them would take hours walked one by one.
TEST(PtdecodePerfDataTest, AGroupOfBillionsOfMissingEventsIsCountedNotWalked) {
  testing::TempDir dir;
  const std::string file = dir.File("groups.data");
  perf::WriterEvent dummy;
  dummy.attr.type = PERF_TYPE_SOFTWARE;
  dummy.attr.config = PERF_COUNT_SW_DUMMY;
  dummy.ids = {7};
  dummy.name = "dummy:u";
  PTKIT_ASSERT_OK_AND_ASSIGN(perf::PerfDataWriter w,
                             perf::PerfDataWriter::Create(file, {dummy, dummy}));
  ASSERT_THAT(w.AddRecord(perf::EncodeFinishedRound()), IsOk());  // a data section
  perf::PerfFeatures f;
  f.groups.push_back({"{anon_group}", 1, 0xffffffff});
  for (int i = 0; i < 1000; ++i) f.groups.push_back({"huge", 0xfffffffe, 0xffffffff});
  ASSERT_THAT(w.Finish(f), IsOk());
  const auto start = std::chrono::steady_clock::now();
  auto info = RunCommand({PTDECODE_PATH, "info", "--json", file});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_LT(seconds, 20.0);
  const nlohmann::json j = nlohmann::json::parse(info.out);
  ASSERT_EQ(j["groups"].size(), 1001u);
  EXPECT_EQ(j["groups"][0]["names"], nlohmann::json({"dummy:u"}));
  EXPECT_EQ(j["groups"][0]["missing"], 0xfffffffeu);
  EXPECT_EQ(j["groups"][1000]["names"], nlohmann::json::array());
  EXPECT_EQ(j["groups"][1000]["missing"], 0xffffffffu);
}

// A mapped file that is gone is found in perf's build-id cache by the build-id its MMAP2
// record carries, as perf finds it (DIR/.build-id/xx/yyyy.../elf).
TEST(PtdecodeBuildIdCacheTest, AMissingFileIsFoundByItsBuildId) {
  testing::TempDir dir;
  const std::string prog = dir.File("tiny");
  auto cc = RunCommand({"/usr/bin/gcc", "-nostdlib", "-static", "-no-pie", "-Wl,--build-id", "-o",
                        prog, std::string(PTKIT_SOURCE_DIR) + "/tests/fuzz/decode_seed_tiny.S"});
  if (cc.exit_code != 0) GTEST_SKIP() << "gcc: " << cc.err;
  const std::string trace = dir.File("tiny.pt");
  auto rec = RunCommand({PTRECORD_PATH, "--emulate=step", "-o", trace, "--", prog});
  if (rec.exit_code != 0 && rec.err.find("not permitted") != std::string::npos) {
    GTEST_SKIP() << "ptrace denied: " << rec.err;
  }
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  // The build-id readelf gives (the oracle), and the file moved into a build-id cache.
  auto id = RunCommand({"/bin/sh", "-c", "readelf -n " + prog + " | sed -n 's/.*Build ID: //p'"});
  std::string hex = id.out.substr(0, id.out.find('\n'));
  ASSERT_EQ(hex.size(), 40u) << id.out;
  const std::string cached = dir.File("cache/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2));
  std::filesystem::create_directories(cached);
  std::filesystem::rename(prog, cached + "/elf");

  auto missing = RunCommand({PTDECODE_PATH, "stats", "--buildid-dir", dir.File("none"), trace});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no instructions decoded"));
  auto insn = RunCommand({PTDECODE_PATH, "insn", "--buildid-dir", dir.File("none"), trace});
  EXPECT_THAT(insn.out, HasSubstr(prog + " could not be loaded"));

  auto found =
      RunCommand({PTDECODE_PATH, "stats", "--json", "--buildid-dir", dir.File("cache"), trace});
  ASSERT_EQ(found.exit_code, 0) << found.err;
  const nlohmann::json stats = nlohmann::json::parse(found.out);
  EXPECT_EQ(stats["totals"]["instructions"], 37) << found.out;  // the recorder's count
  EXPECT_EQ(stats["totals"]["errors"], 0) << found.out;
}

}  // namespace
}  // namespace ptkit::decoder
