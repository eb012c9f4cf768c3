// perf.data reader against perf 6.1 itself (/usr/bin/perf) as the oracle.
//
// Built twice (tests/unit/src/CMakeLists.txt): perf_data_test (label unit) reads the real Intel
// PT recordings in ../shared/testdata/perf-data and cuts them; perf_data_record_test (label
// privileged, PTKIT_PERF_DATA_RECORD_TESTS) has perf 6.1 record here without PT, in file mode,
// pipe mode and with -z, and compares with what perf reports about its own files.
#include "ptkit/perf_data.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "read_file.h"
#include "run_command.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::perf {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;  // NOLINT(misc-unused-using-decls): used; clang-tidy 14 misses it
using ::testing::IsEmpty;

constexpr char kPerf[] = "/usr/bin/perf";

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

absl::StatusOr<PerfData> ReadFile(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, OpenFileSource(path));
  return ReadPerfData(*src);
}

// perf reads a pipe-mode file from a real pipe: with a seekable stdin (`-i - < FILE`) perf 6.1
// loses its place after the first AUXTRACE record ("bad event header size").
testing::CommandResult Perf(const std::string& args, const std::string& file, bool pipe) {
  const std::string cmd = pipe ? absl::StrCat("cat '", file, "' | ", kPerf, " ", args, " -i -")
                               : absl::StrCat(kPerf, " ", args, " -i '", file, "'");
  return testing::RunCommand({"/bin/sh", "-c", cmd});
}

// `perf report --stats`: the "Aggregated stats" block, NAME -> events.
std::map<std::string, uint64_t> PerfStats(const std::string& file, bool pipe) {
  testing::CommandResult r = Perf("report --stats", file, pipe);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, uint64_t> n;
  bool in_block = false;
  static const std::regex kLine(R"(^\s*(\S+) events:\s+(\d+))");
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StrContains(line, "Aggregated stats")) {
      in_block = true;
      continue;
    }
    if (absl::StrContains(line, " stats:")) in_block = false;
    std::cmatch m;
    const std::string l(line);
    if (in_block && std::regex_search(l.c_str(), m, kLine) && m[1] != "TOTAL") {
      n[m[1]] = std::stoull(m[2]);
    }
  }
  return n;
}

std::map<std::string, uint64_t> OurStats(const PerfData& d) {
  std::map<std::string, uint64_t> n;
  for (const auto& [type, count] : d.CountByType()) n[PerfStatsName(type)] = count;
  return n;
}

// `perf script --show-task-events --show-mmap-events`: the PERF_RECORD_* lines, "TYPE detail".
std::vector<std::string> PerfSideband(const std::string& file, bool pipe) {
  testing::CommandResult r = Perf("script --show-task-events --show-mmap-events", file, pipe);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    size_t at = line.find("PERF_RECORD_");
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + 12);
    std::string type(rest.substr(0, rest.find_first_of(" :(")));
    if (type == "MMAP2" || type == "MMAP") {
      // The file name ends the line, after the protection ("]: r-xp /usr/bin/true").
      size_t sp = rest.rfind("]: ");
      absl::string_view tail = rest.substr(sp + 3);
      tail = tail.substr(tail.find(' ') + 1);
      out.push_back(absl::StrCat(type, " ", tail));
    } else {
      out.push_back(type);
    }
  }
  return out;
}

std::vector<std::string> OurSideband(const PerfData& d) {
  std::vector<std::string> out;
  for (size_t i = 0; i < d.records.size(); ++i) {
    RecordView r = d.View(i);
    const PerfAttr* attr = d.AttrOf(r);
    SampleIdLayout layout = attr ? attr->layout() : SampleIdLayout{0, false};
    switch (r.type) {
      case PERF_RECORD_MMAP2: {
        absl::StatusOr<Mmap2> m = ParseMmap2(r, layout);
        EXPECT_THAT(m, IsOk());
        if (m.ok()) out.push_back("MMAP2 " + std::string(m->filename));
        break;
      }
      case PERF_RECORD_COMM:
        out.push_back("COMM");
        break;
      case PERF_RECORD_EXIT:
        out.push_back("EXIT");
        break;
      case PERF_RECORD_FORK:
        out.push_back("FORK");
        break;
      default:
        break;
    }
  }
  return out;
}

// perf script prints in time order (its ordered-events queue), ptkit keeps file order: compare
// the lines as multisets. MMAP (v1) lines have another layout and are left out.
std::vector<std::string> Comparable(std::vector<std::string> v) {
  std::erase_if(v, [](const std::string& s) { return s.starts_with("MMAP "); });
  std::sort(v.begin(), v.end());
  return v;
}

bool PerfWorks() { return Exists(kPerf); }

#ifndef PTKIT_PERF_DATA_RECORD_TESTS

std::vector<uint8_t> ReadAll(const std::string& path) {
  return ::ptkit::testing::ReadWholeFile(path);
}

// `perf report -D`: every "PERF_RECORD_AUXTRACE size: ..." line, as ptkit would print it.
std::vector<std::string> PerfAuxtraceLines(const std::string& file, bool pipe) {
  testing::CommandResult r = Perf("report -D", file, pipe);
  std::vector<std::string> out;
  static const std::regex kLine(
      R"(PERF_RECORD_AUXTRACE size: (0x[0-9a-f]+)\s+offset: (0x[0-9a-f]+|0)\s+ref: (0x[0-9a-f]+)\s+idx: (\d+)\s+tid: (-?\d+)\s+cpu: (-?\d+))");
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    std::cmatch m;
    const std::string l(line);
    if (std::regex_search(l.c_str(), m, kLine)) {
      out.push_back(absl::StrCat(m[1].str(), " ", m[2].str(), " ", m[3].str(), " ", m[4].str(), " ",
                                 m[5].str(), " ", m[6].str()));
    }
  }
  return out;
}

std::vector<std::string> OurAuxtraceLines(const PerfData& d) {
  std::vector<std::string> out;
  for (const Auxtrace& a : d.auxtrace) {
    out.push_back(absl::StrFormat("%#x %#x %#x %u %d %d", a.size, a.offset, a.reference, a.idx,
                                  static_cast<int32_t>(a.tid), static_cast<int32_t>(a.cpu)));
  }
  return out;
}

std::string TestData() {
  for (const char* rel : {"/../shared/testdata/perf-data", "/../../shared/testdata/perf-data"}) {
    std::string d = std::string(PTKIT_SOURCE_DIR) + rel;
    if (Exists(d + "/README.md")) return d;
  }
  return "";
}

class RealRecordingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const std::string dir = TestData();
    if (dir.empty()) {
      GTEST_SKIP() << PTKIT_SOURCE_DIR
                   << "/../shared/testdata/perf-data is absent (the shared test data is not part "
                      "of the repo)";
    }
    pipe_ = GetParam();
    path_ = dir + (pipe_ ? "/perf.data.piped.intel_pt-4.14" : "/perf.data.intel_pt-4.14");
    absl::StatusOr<PerfData> d = ReadFile(path_);
    ASSERT_THAT(d, IsOk());
    data_ = std::move(*d);
  }
  bool pipe_ = false;
  std::string path_;
  PerfData data_;
};

TEST_P(RealRecordingTest, WholeAndClean) {
  EXPECT_EQ(data_.pipe, pipe_);
  EXPECT_THAT(data_.damage, IsEmpty());
  EXPECT_THAT(data_.warnings, IsEmpty());
  ASSERT_EQ(data_.attrs.size(), 4u);        // intel_pt//, cycles, dummy:u, dummy:u
  EXPECT_EQ(data_.attrs[0].attr.type, 6u);  // intel_pt's PMU type on that laptop
  EXPECT_EQ(data_.attrs[0].attr.config, 0x300e601u);
  EXPECT_EQ(data_.attrs[0].size, 112u);
  ASSERT_EQ(data_.auxtrace_info.size(), 1u);
  EXPECT_EQ(data_.auxtrace_info[0].type, 1u);  // PERF_AUXTRACE_INTEL_PT
  EXPECT_EQ(data_.auxtrace_info[0].priv.size(), 17u);
  EXPECT_EQ(data_.auxtrace_info[0].priv[0], 6u);  // INTEL_PT_PMU_TYPE
  ASSERT_TRUE(data_.time_conv.has_value());
  EXPECT_FALSE(data_.time_conv->extended);  // the 32-byte record of kernel 4.14's perf
  EXPECT_EQ(*data_.features.hostname, "localhost");
  EXPECT_EQ(*data_.features.cpuid, "GenuineIntel,6,78,3");
  EXPECT_EQ(*data_.features.nr_cpus_online, 4u);
}

TEST_P(RealRecordingTest, RecordCountsAreThoseOfPerfReportStats) {
  // Without perf, the figures perf 6.1 printed for `perf report --stats -i FILE` (file) and
  // `cat FILE | perf report --stats -i -` (pipe).
  std::map<std::string, uint64_t> expected =
      pipe_ ? std::map<std::string, uint64_t>{{"MMAP", 56},         {"COMM", 3},
                                              {"EXIT", 1},          {"SAMPLE", 11},
                                              {"MMAP2", 10},        {"AUX", 8},
                                              {"ITRACE_START", 2},  {"SWITCH_CPU_WIDE", 552},
                                              {"ATTR", 4},          {"FINISHED_ROUND", 4},
                                              {"AUXTRACE_INFO", 1}, {"AUXTRACE", 2},
                                              {"TIME_CONV", 1},     {"FEATURE", 12}}
            : std::map<std::string, uint64_t>{{"MMAP", 56},          {"COMM", 3},
                                              {"EXIT", 1},           {"SAMPLE", 15},
                                              {"MMAP2", 10},         {"AUX", 10},
                                              {"ITRACE_START", 2},   {"SWITCH_CPU_WIDE", 152},
                                              {"FINISHED_ROUND", 4}, {"AUXTRACE_INFO", 1},
                                              {"AUXTRACE", 2},       {"TIME_CONV", 1}};
  if (PerfWorks()) expected = PerfStats(path_, pipe_);
  EXPECT_EQ(OurStats(data_), expected);
}

TEST_P(RealRecordingTest, AuxtraceRecordsAreThoseOfPerfReportDump) {
  std::vector<std::string> expected =
      pipe_ ? std::vector<std::string>{"0x12a70 0 0x3a717781f00 0 3587 0",
                                       "0x12cb0 0 0x3a71778a48c 3 3587 3"}
            : std::vector<std::string>{"0x2fd0 0 0xbc4cd519a6 0 3174 0",
                                       "0x21a00 0 0xbc4cd584c2 3 3174 3"};
  if (PerfWorks()) expected = PerfAuxtraceLines(path_, pipe_);
  std::vector<std::string> ours = OurAuxtraceLines(data_);
  for (std::string& s : ours) absl::StrReplaceAll({{" 0x0 ", " 0 "}}, &s);
  EXPECT_EQ(ours, expected);
  // The trace bytes are there and are PT: a PSB (02 82 x8) near the start.
  auto src = OpenFileSource(path_);
  ASSERT_THAT(src, IsOk());
  for (const Auxtrace& a : data_.auxtrace) {
    EXPECT_EQ(a.available, a.size);
    absl::StatusOr<std::vector<uint8_t>> bytes = ReadAuxtraceData(**src, a);
    ASSERT_THAT(bytes, IsOk());
    ASSERT_EQ(bytes->size(), a.size);
    const std::vector<uint8_t> psb = {2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82};
    auto end = bytes->begin() + std::min<size_t>(bytes->size(), 4096);
    EXPECT_NE(std::search(bytes->begin(), end, psb.begin(), psb.end()), end) << "cpu " << a.cpu;
  }
}

TEST_P(RealRecordingTest, SidebandIsThatOfPerfScript) {
  if (!PerfWorks()) GTEST_SKIP() << kPerf << " is absent";
  std::vector<std::string> perf = Comparable(PerfSideband(path_, pipe_));
  std::erase_if(perf, [](const std::string& s) {
    return !(s.starts_with("MMAP2") || s == "COMM" || s == "EXIT" || s == "FORK");
  });
  EXPECT_EQ(Comparable(OurSideband(data_)), perf);
}

TEST_P(RealRecordingTest, AttrsIdsAndHeaderAreThoseOfPerfHeaderOnly) {
  if (!PerfWorks()) GTEST_SKIP() << kPerf << " is absent";
  testing::CommandResult r = Perf("report --header-only", path_, pipe_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> perf_ids, perf_names;
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (!absl::ConsumePrefix(&line, "# ")) continue;
    if (absl::ConsumePrefix(&line, "event : ")) {
      size_t a = line.find("id = { "), b = line.find(" }", a);
      if (a != absl::string_view::npos) perf_ids.emplace_back(line.substr(a + 7, b - a - 7));
      if (absl::ConsumePrefix(&line, "name = ")) {
        perf_names.emplace_back(line.substr(0, line.find(',')));
      }
      continue;
    }
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(" : ", 1));
    fields[std::string(absl::StripAsciiWhitespace(kv.first))] = kv.second;
  }
  std::vector<std::string> ours;
  for (const PerfAttr& a : data_.attrs) ours.push_back(absl::StrJoin(a.ids, ", "));
  EXPECT_EQ(ours, perf_ids);
  // The names of EVENT_DESC (a file-mode feature): intel_pt//, cycles, dummy:u, dummy:u.
  if (!pipe_) {
    std::vector<std::string> names;
    for (size_t i = 0; i < data_.attrs.size(); ++i) names.push_back(data_.NameOf(i));
    EXPECT_EQ(names, perf_names);
    EXPECT_EQ(names.size(), 4u);
  }
  EXPECT_EQ(*data_.features.hostname, fields["hostname"]);
  EXPECT_EQ(*data_.features.osrelease, fields["os release"]);
  EXPECT_EQ(*data_.features.arch, fields["arch"]);
  EXPECT_EQ(*data_.features.cpudesc, fields["cpudesc"]);
  EXPECT_EQ(*data_.features.cpuid, fields["cpuid"]);
  EXPECT_EQ(absl::StrCat(*data_.features.nr_cpus_online), fields["nrcpus online"]);
  EXPECT_EQ(absl::StrCat(*data_.features.nr_cpus_available), fields["nrcpus avail"]);
  EXPECT_EQ(absl::StrCat(*data_.features.total_mem_kib, " kB"), fields["total memory"]);
  EXPECT_EQ(absl::StrCat(absl::StrJoin(*data_.features.cmdline, " "), " "), fields["cmdline"]);
  // Every sample and every sideband record maps to an attr by its id.
  for (size_t i = 0; i < data_.records.size(); ++i) {
    RecordView rec = data_.View(i);
    if (rec.type >= PERF_RECORD_MAX) continue;
    const PerfAttr* attr = data_.AttrOf(rec);
    ASSERT_NE(attr, nullptr) << PerfStatsName(rec.type) << " at " << data_.records[i].offset;
    if (rec.type == PERF_RECORD_SAMPLE) {
      EXPECT_EQ(attr, &data_.attrs[1]);  // cycles
    }
  }
}

TEST_P(RealRecordingTest, BuildIdsAreThoseOfPerfBuildidList) {
  // perf.data.intel_pt-4.14.buildids is `perf buildid-list -i perf.data.intel_pt-4.14`.
  if (pipe_) GTEST_SKIP() << "the pipe-mode recording carries no build-id list";
  std::ifstream f(TestData() + "/perf.data.intel_pt-4.14.buildids");
  std::vector<std::string> expected;
  for (std::string line; std::getline(f, line);) expected.push_back(line);
  std::vector<std::string> ours;
  for (const BuildIdEntry& b : data_.features.build_ids) {
    std::string hex;
    for (uint8_t c : b.build_id) absl::StrAppendFormat(&hex, "%02x", c);
    ours.push_back(absl::StrCat(hex, " ", b.filename));
  }
  EXPECT_EQ(ours, expected);
}

INSTANTIATE_TEST_SUITE_P(Modes, RealRecordingTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Pipe" : "File"; });

// Cut at many offsets: whole records are kept exactly, what is cut is reported, no crash.
TEST_P(RealRecordingTest, CutFileKeepsWholeRecordsAndReportsTheCut) {
  const std::vector<uint8_t> bytes = ReadAll(path_);
  ASSERT_EQ(bytes.size(), data_.file_size);
  std::set<uint64_t> cuts;
  for (uint64_t c = 0; c < bytes.size(); c += 611) cuts.insert(c);
  for (const PerfRecordRef& r : data_.records) {
    for (uint64_t d : {0, 1, 7, 8, 9})
      cuts.insert(std::min<uint64_t>(r.offset + d, bytes.size() - 1));
  }
  for (const Auxtrace& a : data_.auxtrace) cuts.insert(a.data_offset + a.size / 2);
  for (uint64_t cut : cuts) {
    SCOPED_TRACE(absl::StrCat("cut at ", cut));
    auto src = MemorySource(std::span<const uint8_t>(bytes).first(cut), "cut");
    absl::StatusOr<PerfData> d = ReadPerfData(*src);
    if (cut < 16) {
      EXPECT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument));
      continue;
    }
    ASSERT_THAT(d, IsOk());
    ASSERT_LE(d->records.size(), data_.records.size());
    bool at_boundary = cut == 16;
    for (size_t i = 0; i < d->records.size(); ++i) {
      const PerfRecordRef& r = d->records[i];
      ASSERT_EQ(r.offset, data_.records[i].offset);
      ASSERT_LE(r.offset + r.size, cut);
      ASSERT_TRUE(std::ranges::equal(d->View(i).bytes, data_.View(i).bytes));
      if (r.offset + r.size == cut) at_boundary = true;
    }
    for (const Auxtrace& a : d->auxtrace) {
      if (a.data_offset + a.size == cut) at_boundary = true;
    }
    // A pipe cut exactly between records looks like the end of the stream; anything else is
    // damage. A file has its data size in the header: every cut is damage.
    if (!pipe_ || !at_boundary) {
      EXPECT_THAT(d->damage, Not(IsEmpty()));
    }
  }
}

// Damaged bytes: never a crash, never a huge allocation (run under ASan in CI).
TEST_P(RealRecordingTest, FlippedBytesNeverCrash) {
  std::vector<uint8_t> bytes = ReadAll(path_);
  uint64_t seed = 0x9e3779b97f4a7c15;
  for (int round = 0; round < 300; ++round) {
    std::vector<uint8_t> b = bytes;
    for (int k = 0; k < 4; ++k) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      // Most hits go to the first 64 KiB, where the headers, attrs and sideband are.
      const uint64_t at = (seed >> 33) % (k < 3 ? std::min<size_t>(b.size(), 65536) : b.size());
      b[at] ^= static_cast<uint8_t>(1u << ((seed >> 20) % 8));
    }
    auto src = MemorySource(b, "flipped");
    absl::StatusOr<PerfData> d = ReadPerfData(*src);
    if (d.ok()) {
      EXPECT_LE(d->record_bytes.size(), b.size());
    }
  }
}

std::vector<uint8_t> PipeHeader() {
  return {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2', 16, 0, 0, 0, 0, 0, 0, 0};
}

TEST(PerfDataTest, HostileLengthsAreDamageNotAllocations) {
  // A pipe stream: an AUXTRACE record claiming 2^63 trace bytes, then an ID_INDEX claiming 2^60
  // entries in a 24-byte record.
  std::vector<uint8_t> f = PipeHeader();
  std::vector<uint8_t> idx = RecordBuilder(kRecordIdIndex, 0).U64(1ull << 60).U64(7).Finish();
  std::vector<uint8_t> aux = RecordBuilder(kRecordAuxtrace, 0)
                                 .U64(1ull << 63)
                                 .U64(0)
                                 .U64(0)
                                 .U32(0)
                                 .U32(1)
                                 .U32(2)
                                 .U32(0)
                                 .Finish();
  f.insert(f.end(), idx.begin(), idx.end());
  f.insert(f.end(), aux.begin(), aux.end());
  f.insert(f.end(), {1, 2, 3, 4});
  auto src = MemorySource(f, "hostile");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->pipe);
  ASSERT_EQ(d->records.size(), 2u);
  ASSERT_EQ(d->auxtrace.size(), 1u);
  EXPECT_EQ(d->auxtrace[0].available, 4u);
  ASSERT_EQ(d->damage.size(), 2u);
  EXPECT_THAT(d->damage[0].reason, ::testing::HasSubstr("ID_INDEX claims"));
  EXPECT_THAT(d->damage[1].reason, ::testing::HasSubstr("AUXTRACE trace bytes cut"));
  EXPECT_EQ(d->damage[1].offset, f.size());

  // A pipe-mode EVENT_DESC feature whose attr size is 2^32 - 8 (size + 8 wraps in 32 bits).
  std::vector<uint8_t> g = PipeHeader();
  std::vector<uint8_t> desc = RecordBuilder(kRecordHeaderFeature, 0)
                                  .U64(kFeatEventDesc)
                                  .U32(1)
                                  .U32(0xfffffff8)
                                  .U64(0)
                                  .Finish();
  g.insert(g.end(), desc.begin(), desc.end());
  auto src3 = MemorySource(g, "hostile-event-desc");
  d = ReadPerfData(*src3);
  ASSERT_THAT(d, IsOk());
  EXPECT_THAT(d->features.event_desc, IsEmpty());
  ASSERT_EQ(d->damage.size(), 1u);
  EXPECT_THAT(d->damage[0].reason, ::testing::HasSubstr("EVENT_DESC feature"));

  // A file header whose data section lies far past the end.
  std::vector<uint8_t> h(104, 0);
  std::memcpy(h.data(), "PERFILE2", 8);
  h[8] = 104;
  h[16] = 136;       // attr_size
  h[40 + 7] = 0x40;  // data.offset = 2^62
  h[48 + 7] = 0x40;  // data.size = 2^62
  auto src2 = MemorySource(h, "hostile-file");
  d = ReadPerfData(*src2);
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->pipe);
  EXPECT_THAT(d->records, IsEmpty());
  ASSERT_EQ(d->damage.size(), 1u);
  EXPECT_THAT(d->damage[0].reason, ::testing::HasSubstr("past the end of the file"));
}

std::vector<uint8_t> Compressed(std::span<const uint8_t> zstd) {
  std::vector<uint8_t> r = RecordBuilder(kRecordCompressed, 0).Finish();  // 8-byte header
  r.insert(r.end(), zstd.begin(), zstd.end());
  const uint16_t size = static_cast<uint16_t>(r.size());
  std::memcpy(r.data() + 6, &size, 2);
  return r;
}

std::vector<uint8_t> Zstd(std::span<const uint8_t> in) {
  std::vector<uint8_t> z(ZSTD_compressBound(in.size()));
  z.resize(ZSTD_compress(z.data(), z.size(), in.data(), in.size(), 1));
  return z;
}

// perf writes one zstd stream; a record may continue in the next COMPRESSED record.
// Pipe mode's TRACING_DATA (tracepoint formats after the record, outside its size) is kept as
// feature 1 for export: once, the last one read (a review: 40 of them were each kept), and not
// past kMaxDecompressedBytes in all (a warning says what was left out).
TEST(PerfDataTest, TracingDataIsKeptOnceAndBounded) {
  std::vector<uint8_t> f = PipeHeader();
  for (uint8_t fill : {0xa1, 0xb2, 0xc3}) {
    std::vector<uint8_t> rec = RecordBuilder(kRecordHeaderTracingData, 0).U32(13).U32(0).Finish();
    f.insert(f.end(), rec.begin(), rec.end());
    f.insert(f.end(), 13, fill);
    f.insert(f.end(), 3, 0);  // padded to 8
  }
  auto src = MemorySource(f, "tracing-data");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->clean()) << d->damage[0].reason;
  ASSERT_EQ(d->features.kept.size(), 1u);
  EXPECT_EQ(d->features.kept[0].id, kFeatTracingData);
  EXPECT_EQ(d->features.kept[0].bytes, std::vector<uint8_t>(13, 0xc3));
  // One too many bytes to keep: left out, said.
  std::vector<uint8_t> g = PipeHeader();
  const uint32_t big = static_cast<uint32_t>(kMaxDecompressedBytes) + 1;
  std::vector<uint8_t> rec = RecordBuilder(kRecordHeaderTracingData, 0).U32(big).U32(0).Finish();
  g.insert(g.end(), rec.begin(), rec.end());
  g.resize(g.size() + ((big + 7) & ~7u), 0x5a);
  auto src2 = MemorySource(g, "tracing-data-big");
  d = ReadPerfData(*src2);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->features.kept.empty());
  EXPECT_THAT(d->features.present,
              ::testing::ElementsAre(kFeatTracingData));  // (info names it; a review)
  ASSERT_EQ(d->warnings.size(), 1u);
  EXPECT_THAT(d->warnings[0], ::testing::HasSubstr("too many to keep"));
}

// A feature section kept only for export (not read by ptkit) that is too large to keep is a
// warning, not damage: the file's records are whole (a review: it was reported as damage).
TEST(PerfDataTest, AKeptFeatureTooLargeToKeepIsAWarningNotDamage) {
  std::vector<uint8_t> f(104, 0);
  std::memcpy(f.data(), "PERFILE2", 8);
  auto put = [&](size_t at, uint64_t v) { std::memcpy(f.data() + at, &v, 8); };
  put(8, 104);   // header size
  put(16, 136);  // attr size
  put(40, 104);  // data section: one FINISHED_ROUND record
  put(48, 8);
  f[72] = 1u << kFeatTracingData;  // the feature bitmap
  const std::vector<uint8_t> round = RecordBuilder(kRecordFinishedRound, 0).Finish();
  f.insert(f.end(), round.begin(), round.end());
  const uint64_t big = kMaxDecompressedBytes + 1;
  f.resize(f.size() + 16);
  put(112, 128);  // the feature table: TRACING_DATA's section
  put(120, big);
  f.resize(128 + big, 0x5a);
  auto src = MemorySource(f, "big-tracing-data");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->clean()) << d->damage[0].reason;
  EXPECT_EQ(d->records.size(), 1u);
  EXPECT_TRUE(d->features.kept.empty());
  ASSERT_EQ(d->warnings.size(), 1u);
  EXPECT_THAT(d->warnings[0], ::testing::HasSubstr("(TRACING_DATA) is too large to keep"));
}

TEST(PerfDataTest, RecordSplitAcrossCompressedRecordsIsJoined) {
  const SampleIdLayout none{0, false};
  Mmap2 m;
  m.pid = m.tid = 42;
  m.addr = 0x400000;
  m.len = 0x1000;
  m.filename = "/usr/bin/split-across";
  Comm c;
  c.pid = c.tid = 42;
  c.comm = "split";
  std::vector<uint8_t> plain = EncodeMmap2(m, none);
  const std::vector<uint8_t> comm = EncodeComm(c, none);
  plain.insert(plain.end(), comm.begin(), comm.end());
  // One zstd stream, flushed in the middle of the MMAP2 record: the first COMPRESSED record
  // decompresses to a record's first half.
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::vector<uint8_t> f = PipeHeader();
  const size_t half = 20;
  for (auto [part, op] : {std::pair{std::span<const uint8_t>(plain).first(half), ZSTD_e_flush},
                          std::pair{std::span<const uint8_t>(plain).subspan(half), ZSTD_e_end}}) {
    std::vector<uint8_t> z(ZSTD_compressBound(part.size()) + 64);
    ZSTD_inBuffer in{part.data(), part.size(), 0};
    ZSTD_outBuffer out{z.data(), z.size(), 0};
    ASSERT_EQ(ZSTD_compressStream2(cctx.get(), &out, &in, op), 0u);
    z.resize(out.pos);
    const std::vector<uint8_t> r = Compressed(z);
    f.insert(f.end(), r.begin(), r.end());
  }
  auto src = MemorySource(f, "split");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  EXPECT_THAT(d->damage, IsEmpty());
  ASSERT_EQ(d->records.size(), 4u);  // COMPRESSED, COMPRESSED, MMAP2, COMM
  EXPECT_EQ(d->records[2].type, PERF_RECORD_MMAP2);
  EXPECT_TRUE(d->records[2].in_compressed);
  EXPECT_EQ(d->records[2].offset, d->records[1].offset);  // completed by the second one
  absl::StatusOr<Mmap2> got = ParseMmap2(d->View(2), none);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->filename, "/usr/bin/split-across");
  EXPECT_TRUE(std::ranges::equal(d->View(3).bytes, comm));
}

TEST(PerfDataTest, CompressedBombIsDamageNotMemory) {
  // 80 MiB of FINISHED_ROUND records compress to a few KiB.
  std::vector<uint8_t> plain(80u << 20, 0);
  for (size_t i = 0; i < plain.size(); i += 8) {
    plain[i] = kRecordFinishedRound;
    plain[i + 6] = 8;
  }
  const std::vector<uint8_t> z = Zstd(plain);
  ASSERT_LT(z.size(), 60000u);
  std::vector<uint8_t> f = PipeHeader();
  const std::vector<uint8_t> r = Compressed(z);
  f.insert(f.end(), r.begin(), r.end());
  auto src = MemorySource(f, "bomb");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->records.size(), 1u);  // the COMPRESSED record only
  ASSERT_EQ(d->damage.size(), 1u);
  EXPECT_THAT(d->damage[0].reason, ::testing::HasSubstr("decompresses to more than"));
}

TEST(PerfDataTest, AttrIdsCannotClaimTheFileTwice) {
  // Two attrs whose ids both cover the whole 264-byte file: 33 ids, then damage, not 66.
  std::vector<uint8_t> f(104 + 2 * 80, 0);
  auto put = [&](size_t at, uint64_t v) { std::memcpy(f.data() + at, &v, 8); };
  std::memcpy(f.data(), "PERFILE2", 8);
  put(8, 104);
  put(16, 80);  // attr_size: a 64-byte attr and its ids section
  put(24, 104);
  put(32, 160);
  put(40, f.size());  // empty data section at the end
  for (size_t at : {104, 184}) {
    f[at + 4] = PERF_ATTR_SIZE_VER0;
    put(at + 64, 0);         // ids.offset
    put(at + 72, f.size());  // ids.size
  }
  auto src = MemorySource(f, "ids");
  absl::StatusOr<PerfData> d = ReadPerfData(*src);
  ASSERT_THAT(d, IsOk());
  ASSERT_EQ(d->attrs.size(), 2u);
  EXPECT_EQ(d->attrs[0].ids.size(), 33u);
  EXPECT_THAT(d->attrs[1].ids, IsEmpty());
  ASSERT_EQ(d->damage.size(), 1u);
  EXPECT_THAT(d->damage[0].reason, ::testing::HasSubstr("overlap"));
}

TEST(PerfDataTest, NotPerfDataIsAnError) {
  const std::vector<uint8_t> junk(200, 'x');
  auto src = MemorySource(junk, "junk");
  EXPECT_THAT(ReadPerfData(*src), StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<uint8_t> swapped(200, 0);
  std::memcpy(swapped.data(), "2ELIFREP", 8);
  auto src2 = MemorySource(swapped, "swapped");
  absl::StatusOr<PerfData> d = ReadPerfData(*src2);
  ASSERT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("byte order"));
}

#else  // PTKIT_PERF_DATA_RECORD_TESTS

// Has perf 6.1 record /bin/true into `path` in `mode` (file, pipe, file_z, pipe_z); the error
// output when it cannot.
std::optional<std::string> PerfRecord(const std::string& mode, const std::string& path) {
  const bool pipe = mode.starts_with("pipe");
  const std::string cmd =
      absl::StrCat(kPerf, " record -q -e dummy -e task-clock ", mode.ends_with("_z") ? "-z " : "",
                   "-o ", pipe ? "- " : absl::StrCat("'", path, "' "), "-- /bin/true",
                   pipe ? absl::StrCat(" > '", path, "'") : "");
  testing::CommandResult r = testing::RunCommand({"/bin/sh", "-c", cmd});
  if (r.exit_code != 0 || !Exists(path)) return r.err;
  return std::nullopt;
}

// perf 6.1 records /bin/true here (no PT needed) and is the oracle on its own files.
class PerfRecordTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!PerfWorks()) GTEST_SKIP() << kPerf << " is absent (Debian package linux-perf)";
    pipe_ = GetParam().starts_with("pipe");
    path_ = dir_.File("perf.data");
    if (std::optional<std::string> err = PerfRecord(GetParam(), path_)) {
      GTEST_SKIP() << "perf record cannot record here (perf_event_open denied?): " << *err;
    }
    absl::StatusOr<PerfData> d = ReadFile(path_);
    ASSERT_THAT(d, IsOk());
    data_ = std::move(*d);
  }
  testing::TempDir dir_;
  bool pipe_ = false;
  std::string path_;
  PerfData data_;
};

TEST_P(PerfRecordTest, CountsAndSidebandAreThoseOfPerf) {
  EXPECT_EQ(data_.pipe, pipe_);
  EXPECT_THAT(data_.damage, IsEmpty());
  std::vector<std::string> ours = Comparable(OurSideband(data_));
  if (GetParam() == "pipe_z") {
    // perf 6.1 cannot read its own `-z -o -` output ("Couldn't decompress data ... failed to
    // process type: 81"): the oracle is perf on a file-mode recording of the same command.
    const std::string file = dir_.File("oracle.data");
    std::optional<std::string> err = PerfRecord("file", file);
    ASSERT_FALSE(err.has_value()) << *err;
    EXPECT_EQ(ours, Comparable(PerfSideband(file, false)));
  } else {
    EXPECT_EQ(OurStats(data_), PerfStats(path_, pipe_));
    EXPECT_EQ(ours, Comparable(PerfSideband(path_, pipe_)));
  }
  EXPECT_THAT(ours, ::testing::Contains("MMAP2 /usr/bin/true"));
  EXPECT_EQ(data_.attrs.size(), 2u);
  if (GetParam().ends_with("_z")) {
    EXPECT_GT(data_.CountByType()[kRecordCompressed], 0u);
    EXPECT_TRUE(
        std::ranges::any_of(data_.records, [](const PerfRecordRef& r) { return r.in_compressed; }));
  }
  ASSERT_TRUE(data_.features.osrelease.has_value());
  EXPECT_FALSE(data_.features.osrelease->empty());
  ASSERT_TRUE(data_.features.cmdline.has_value());
  EXPECT_THAT(*data_.features.cmdline, ::testing::Contains("/bin/true"));
}

INSTANTIATE_TEST_SUITE_P(Modes, PerfRecordTest,
                         ::testing::Values("file", "pipe", "file_z", "pipe_z"),
                         [](const auto& info) { return info.param; });

#endif  // PTKIT_PERF_DATA_RECORD_TESTS

}  // namespace
}  // namespace ptkit::perf
