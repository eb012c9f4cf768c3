// Container input: a trace.pt built here with real perf sideband records (MMAP2, COMM,
// ITRACE_START) and software PT for tests/data/decoder/tiny.c, per-CPU and per-thread streams,
// a truncated AUX range and a process whose file is missing.
#include <linux/perf_event.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/packets.h"
#include "decoder/sinks.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "status_matchers.h"
#include "test_container.h"
#include "test_io.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::testing::ExecMmap2;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::NewContainer;
using ::ptkit::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// The typed metadata of `json` (which must be valid).
using ::ptkit::testing::TypedMetadata;

using ::ptkit::decoder::testing::kTiny;
const perf::SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

// The metadata of an intel_pt recording whose sideband has sample_id_all.
const nlohmann::json kPtMetadata = {
    {"attrs",
     {{{"name", "intel_pt"}, {"sample_type", kLayout.sample_type}, {"sample_id_all", true}}}}};

perf::SampleId Id(uint32_t pid, uint32_t tid, uint64_t time, uint32_t cpu) {
  perf::SampleId s;
  s.has_tid = s.has_time = s.has_cpu = s.has_id = true;
  s.pid = pid;
  s.tid = tid;
  s.time = time;
  s.cpu = cpu;
  return s;
}

// Everything a sink sees, in order.
class Recorder : public Sink {
 public:
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  void OnStream(const StreamInfo& s) override {
    streams.push_back(s);
    runs.emplace_back();
    images.push_back(s.image);
    caches.push_back(s.image != nullptr ? s.image->section_cache().get() : nullptr);
  }
  void OnLoss(const LossInfo& l) override {
    losses.push_back(l);
    runs.emplace_back();
  }
  void OnInsn(const pt_insn& insn) override { runs.back().push_back(insn.ip); }
  void OnSync(uint64_t offset) override { syncs.push_back(offset); }
  void OnError(const DecodeError& e) override {
    errors.push_back(e);
    missing.push_back(e.missing_file ? *e.missing_file : "");
  }
  std::vector<uint64_t> syncs;
  // Each OnStream's image and that image's libipt section cache.
  std::vector<const ProgramImage*> images;
  std::vector<const pt_image_section_cache*> caches;
  std::vector<StreamInfo> streams;
  std::vector<LossInfo> losses;
  std::vector<std::vector<uint64_t>> runs{1};
  std::vector<DecodeError> errors;
  std::vector<std::string> missing;
};

// The MMAP2 record of `pid` mapping the page of `code` at `text` from `file`.
std::vector<uint8_t> MmapPage(const ElfCode& code, uint32_t pid, uint64_t text,
                              const std::string& file, const std::vector<uint8_t>& build_id = {},
                              uint64_t time = 6) {
  return ExecMmap2(pid, text, 0x1000, code.FileOffset(text), file, Id(pid, pid, time, 0), kLayout,
                   build_id);
}

// The JSON lines written to `out` (closed).
std::vector<nlohmann::json> JsonLines(std::FILE* out) {
  std::string text = ::ptkit::decoder::testing::ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  std::vector<nlohmann::json> lines;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(nlohmann::json::parse(text.substr(at, nl - at)));
  }
  return lines;
}

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    work_ = code_->Symbol("work").address;
    const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
    const uint64_t text_end =
        (code_->Symbol("_start").address + code_->Symbol("_start").size + 0xfff) & ~0xfffull;

    PtSynth a(*code_), b(*code_), c(*code_);
    auto ta = a.AddSegment({.entry = work_, .seed = 1, .max_insns = 2000});
    auto tb = b.AddSegment({.entry = work_, .seed = 2, .max_insns = 2000});
    auto tc = c.AddSegment({.entry = work_, .seed = 3, .max_insns = 500});
    ASSERT_THAT(ta, IsOk());
    ASSERT_THAT(tb, IsOk());
    ASSERT_THAT(tc, IsOk());
    truth_a_ = *ta;
    truth_b_ = *tb;
    bytes_a_ = a.bytes();
    std::vector<uint8_t> bytes_b = b.bytes(), bytes_c = c.bytes();

    path_ = ::ptkit::decoder::testing::TempPath("decoder_container_test.pt");
    nlohmann::json metadata = {
        {"cpu", {{"vendor", "GenuineIntel"}, {"family", 6}, {"model", 85}, {"stepping", 4}}},
        {"pmu", {{"type", 8}, {"max_nonturbo_ratio", 20}}},
        {"attrs",
         {{{"name", "intel_pt"},
           {"type", 8},
           {"config", (3ull << 14) | 1},
           {"sample_type", kLayout.sample_type},
           {"sample_id_all", true}}}}};
    auto writer = NewContainer(path_, {metadata.dump()});
    ASSERT_THAT(writer, IsOk());

    std::vector<uint8_t> sb;
    auto add = [&](const std::vector<uint8_t>& r) { sb.insert(sb.end(), r.begin(), r.end()); };
    perf::Comm comm;
    comm.pid = comm.tid = 100;
    comm.comm = "tiny";
    comm.exec = true;
    comm.sample_id = Id(100, 100, 5, 0);
    add(perf::EncodeComm(comm, kLayout));
    perf::Mmap2 m;
    m.pid = m.tid = 100;
    m.addr = text;
    m.len = text_end - text;
    m.pgoff = code_->FileOffset(text);
    m.prot = 5;  // PROT_READ | PROT_EXEC
    m.filename = kTiny;
    m.sample_id = Id(100, 100, 6, 0);
    add(perf::EncodeMmap2(m, kLayout));
    perf::Mmap2 gone = m;
    gone.pid = gone.tid = 200;
    gone.filename = "/nonexistent/tiny.elf";
    gone.sample_id = Id(200, 200, 7, 0);
    add(perf::EncodeMmap2(gone, kLayout));
    perf::ItraceStart start;
    start.pid = start.tid = 100;
    start.sample_id = Id(100, 100, 10, 0);
    add(perf::EncodeItraceStart(start, kLayout));
    ASSERT_THAT((*writer)->AppendSideband({0, sb}), IsOk());

    const StreamId cpu0{StreamKind::kCpu, 0}, tid200{StreamKind::kThread, 200};
    ASSERT_THAT((*writer)->AppendAux({cpu0, 0, kAuxTruncated, 20, bytes_a_}), IsOk());
    ASSERT_THAT(
        (*writer)->AppendLoss({cpu0, LossKind::kAuxTruncated, 1, 4096, 21, bytes_a_.size()}),
        IsOk());
    ASSERT_THAT((*writer)->AppendAux({tid200, 0, 0, 25, bytes_c}), IsOk());
    ASSERT_THAT((*writer)->AppendAux({cpu0, bytes_a_.size(), 0, 30, bytes_b}), IsOk());
    ASSERT_THAT((*writer)->Close(), IsOk());
  }
  void TearDown() override { (void)std::remove(path_.c_str()); }

  std::unique_ptr<ElfCode> code_;
  uint64_t work_ = 0;
  std::vector<uint64_t> truth_a_, truth_b_;
  std::vector<uint8_t> bytes_a_;
  std::string path_;
};

TEST_F(ContainerTest, StreamsLossAndMissingFilesAppearWhereTheyHappened) {
  Recorder rec;
  auto totals = DecodeContainer(path_, {}, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.streams, SizeIs(2));
  EXPECT_EQ(rec.streams[0].name, "cpu 0");
  EXPECT_EQ(rec.streams[0].pid, 100u);
  EXPECT_EQ(rec.streams[0].comm, "tiny");
  EXPECT_EQ(rec.streams[1].name, "tid 200");
  EXPECT_EQ(rec.streams[1].pid, 200u);

  // cpu 0: piece A, the truncation (aux offset and bytes from the loss record), piece B.
  ASSERT_THAT(rec.losses, SizeIs(1));
  EXPECT_EQ(rec.losses[0].kind, LossKindName(LossKind::kAuxTruncated));
  EXPECT_EQ(rec.losses[0].aux_offset, bytes_a_.size());
  EXPECT_EQ(rec.losses[0].bytes, 4096u);
  ASSERT_THAT(rec.runs, SizeIs(4));  // before any stream, A, B, tid 200
  EXPECT_THAT(rec.runs[0], SizeIs(0));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(truth_a_));
  EXPECT_THAT(rec.runs[2], ElementsAreArray(truth_b_));

  // tid 200: its file is missing: one gap that names it, no instructions.
  EXPECT_THAT(rec.runs[3], SizeIs(0));
  ASSERT_THAT(rec.errors, SizeIs(1));
  EXPECT_TRUE(rec.errors[0].is_gap());
  EXPECT_EQ(rec.errors[0].ip, work_);
  EXPECT_EQ(rec.missing[0], "/nonexistent/tiny.elf");

  EXPECT_EQ(totals->streams, 2u);
  EXPECT_EQ(totals->losses, 1u);
  EXPECT_EQ(totals->lost_bytes, 4096u);
  EXPECT_EQ(totals->instructions, truth_a_.size() + truth_b_.size());
}

TEST_F(ContainerTest, StatsUseTheMappedFilesSymbols) {
  std::FILE* out = std::tmpfile();
  OutputOptions options;
  options.json = true;
  auto empty = ProgramImage::Create();
  ASSERT_THAT(empty, IsOk());
  auto sink = MakeStatsSink(**empty, out, options);
  ASSERT_THAT(DecodeContainer(path_, {}, *sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  EXPECT_EQ(std::fclose(out), 0);
  auto doc = nlohmann::json::parse(text);
  const ElfCode::Sym work = code_->Symbol("work");
  uint64_t expected = 0;
  for (uint64_t ip : truth_a_) expected += ip >= work.address && ip < work.address + work.size;
  for (uint64_t ip : truth_b_) expected += ip >= work.address && ip < work.address + work.size;
  bool found = false;
  for (const auto& fn : doc["functions"]) {
    if (fn["function"] == "work") {
      found = true;
      EXPECT_EQ(fn["self"].get<uint64_t>(), expected);
      EXPECT_EQ(fn["image"], kTiny);
    }
  }
  EXPECT_TRUE(found) << text;
  EXPECT_EQ(doc["totals"]["losses"].get<uint64_t>(), 1u);
  EXPECT_EQ(doc["totals"]["gaps"].get<uint64_t>(), 1u);
}

// Decodes the container at `path` into `rec`, then removes the file.
absl::StatusOr<DecodeTotals> DecodeAndRemove(const std::string& path, Recorder& rec,
                                             const ContainerOptions& options = {}) {
  absl::StatusOr<DecodeTotals> totals = DecodeContainer(path, options, rec);
  (void)std::remove(path.c_str());
  return totals;
}

std::string DecodeToText(const std::string& path, Sink& sink, std::FILE* out) {
  EXPECT_THAT(DecodeContainer(path, {}, sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  EXPECT_EQ(std::fclose(out), 0);
  return text;
}

TEST_F(ContainerTest, CallsAndTimelineShowStreamsLossAndGapsOnly) {
  auto empty = ProgramImage::Create();
  ASSERT_THAT(empty, IsOk());
  std::FILE* out = std::tmpfile();
  auto calls = MakeCallsSink(**empty, out, {});
  std::string text = DecodeToText(path_, *calls, out);
  EXPECT_THAT(text, ::testing::HasSubstr("[stream cpu 0: pid 100 (tiny)"));
  EXPECT_THAT(text, ::testing::HasSubstr("[loss: aux-truncated at aux offset"));
  EXPECT_THAT(text, ::testing::HasSubstr("[stream tid 200: pid 200"));
  EXPECT_THAT(text, ::testing::HasSubstr("/nonexistent/tiny.elf could not be loaded]"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("[error")));
  EXPECT_THAT(text, ::testing::HasSubstr("  > collatz\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("  < fib (11 insns)\n"));

  out = std::tmpfile();
  OutputOptions options;
  options.trace_name = "t.pt";
  auto timeline = MakeTimelineSink(**empty, out, options);
  auto doc = nlohmann::json::parse(DecodeToText(path_, *timeline, out));
  std::map<int, int> depth;  // tid -> open slices
  std::vector<std::string> names;
  int gaps = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") names.push_back(e["args"]["name"]);
    if (e["ph"] == "B") ++depth[e["tid"].get<int>()];
    if (e["ph"] == "E") {
      EXPECT_GE(--depth[e["tid"].get<int>()], 0);
    }
    if (e["ph"] == "i") gaps += e["name"] == "gap";
  }
  EXPECT_THAT(names, ElementsAreArray({"t.pt", "tiny", "tiny (tid 100)", "tid 200"}));
  EXPECT_EQ(gaps, 1);
  for (const auto& [tid, d] : depth) EXPECT_EQ(d, 0) << "tid " << tid;
}

TEST_F(ContainerTest, SysrootPrefixesMappedPaths) {
  Recorder rec;
  ContainerOptions options;
  options.sysroot = "/no/such/root";
  ASSERT_THAT(DecodeContainer(path_, options, rec), IsOk());
  ASSERT_FALSE(rec.errors.empty());
  EXPECT_EQ(rec.missing[0], "/no/such/root" + kTiny);
}

// The metadata of an intel_bts recording as the kernel path writes it (the PMU it opened, its
// AUX area of one 4 KiB page), and as --emulate --bts does (no PMU: the emulation's format).
struct BtsMetadata {  // NOLINT(bugprone-exception-escape): ~json may allocate, nothing else throws
  nlohmann::json kernel, emulated;
};
BtsMetadata MakeBtsMetadata() {
  const nlohmann::json attr = {{"sample_type", kLayout.sample_type}, {"sample_id_all", true}};
  nlohmann::json kernel_attr = attr;
  kernel_attr["name"] = "intel_bts";
  kernel_attr["type"] = 9;
  BtsMetadata m;
  m.kernel = {{"pmu", {{"name", "intel_bts"}, {"type", 9}}},
              {"attrs", {kernel_attr}},
              {"mode", "full-trace"},
              {"page_size", 4096},
              {"aux_pages", 1}};
  m.emulated = {{"emulated", "step"}, {"emulation", {{"format", "bts"}, {"streams", "per-thread"}}},
                {"attrs", {attr}},    {"mode", "full-trace"},
                {"page_size", 4096},  {"aux_pages", 1}};
  return m;
}

// A BTS recording of thread 300 running tiny.elf: `data` as AUX records that end at `splits`.
// It must decode to `flow`.
void ExpectBtsDecodesTo(const ElfCode& code, const nlohmann::json& metadata,
                        std::span<const uint8_t> data, const std::vector<size_t>& splits,
                        std::span<const uint64_t> flow) {
  SCOPED_TRACE(metadata.dump());
  EXPECT_TRUE(IsBtsRecording(TypedMetadata(metadata)));
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_bts.pt");
  auto writer = NewContainer(path, {metadata.dump()});
  ASSERT_THAT(writer, IsOk());
  const uint64_t text = code.Symbol("leaf").address & ~0xfffull;
  ASSERT_THAT((*writer)->AppendSideband({-1, MmapPage(code, 300, text, kTiny)}), IsOk());
  size_t from = 0;
  for (size_t to : splits) {
    ASSERT_THAT(
        (*writer)->AppendAux(
            {{StreamKind::kThread, 300}, from, 0, 10 + from, data.subspan(from, to - from)}),
        IsOk());
    from = to;
  }
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.runs, SizeIs(2));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(flow));
}

TEST_F(ContainerTest, BtsRecordingsDecodeTheirBranchRecords) {
  // The same sideband, an intel_bts recording of one thread.
  PtSynth walk(*code_);
  auto ips = walk.AddSegment({.entry = work_, .seed = 21, .max_insns = 3000});
  ASSERT_THAT(ips, IsOk());
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = testing::BtsFromWalk(*code_, *ips, &branches);
  ASSERT_GE(branches.size(), 5u);
  ASSERT_LT(bts.size(), 4096u);  // within the AUX area
  const BtsMetadata meta = MakeBtsMetadata();
  nlohmann::json older = meta.emulated;  // the stepper's older form
  older["emulated"] = true;
  nlohmann::json no_size = meta.kernel;  // the AUX area's size unknown
  no_size.erase("aux_pages");
  const std::span<const uint64_t> flow(ips->data() + branches.front(),
                                       branches.back() - branches.front() + 1);
  for (const nlohmann::json& m : {meta.kernel, meta.emulated, older, no_size}) {
    ExpectBtsDecodesTo(*code_, m, bts, {bts.size()}, flow);
  }
  EXPECT_FALSE(IsBtsRecording(TypedMetadata({{"emulation", {{"format", "pt"}}}})));
  EXPECT_FALSE(IsBtsRecording(TypedMetadata({{"pmu", {{"name", "intel_pt"}}}})));
}

// The kernel's intel_bts skips the end of its AUX ring (issue 12 item 5): the recording's AUX
// size (aux_pages x page_size) says where, for the kernel path only; emulated BTS has no ring.
TEST_F(ContainerTest, KernelBtsRecordingsSkipTheEndOfTheirRing) {
  constexpr uint64_t kRing = 4096;
  const testing::BtsWalks walks = testing::LongBtsFromWalks(*code_, work_, 2 * kRing);
  const BtsMetadata meta = MakeBtsMetadata();
  // Two AUX records, the first ending inside the ring's second lap.
  const std::vector<uint8_t> laid = testing::KernelBtsLayout(walks.records, kRing, 0);
  ExpectBtsDecodesTo(*code_, meta.kernel, laid, {kRing + 1000, laid.size()}, walks.flow);
  ExpectBtsDecodesTo(*code_, meta.emulated, walks.records, {kRing + 1000, walks.records.size()},
                     walks.flow);
}

TEST_F(ContainerTest, FiltersSelectStreams) {
  Recorder by_cpu;
  ContainerOptions options;
  options.cpu = 0;
  ASSERT_THAT(DecodeContainer(path_, options, by_cpu), IsOk());
  ASSERT_THAT(by_cpu.streams, SizeIs(1));
  EXPECT_EQ(by_cpu.streams[0].name, "cpu 0");
  Recorder by_tid;
  options = {};
  options.tid = 200;
  ASSERT_THAT(DecodeContainer(path_, options, by_tid), IsOk());
  ASSERT_THAT(by_tid.streams, SizeIs(1));
  EXPECT_EQ(by_tid.streams[0].name, "tid 200");
  // No time conversion in this recording: a CPU stream cannot be split by task, so it is
  // decoded whole when its first task is the thread.
  Recorder first_task;
  options.tid = 100;
  auto whole = DecodeContainer(path_, options, first_task);
  ASSERT_THAT(whole, IsOk());
  ASSERT_THAT(first_task.streams, SizeIs(1));
  EXPECT_EQ(first_task.streams[0].name, "cpu 0");
  EXPECT_EQ(whole->instructions, truth_a_.size() + truth_b_.size());
  EXPECT_EQ(whole->losses, 1u);
}

TEST_F(ContainerTest, FiltersThatSelectNothingSayWhatTheRecordingHas) {
  struct Case {
    ContainerOptions options;
    std::string message;
  };
  std::vector<Case> cases(4);
  cases[0].options.cpu = 7;
  cases[0].message = ": no stream of CPU 7; CPUs in this recording: 0";
  cases[1].options.tid = 999;
  cases[1].message = ": no stream matches --tid 999; streams in this recording: cpu 0, tid 200";
  cases[2].options.snapshot = 3;
  cases[2].message =
      ": no snapshot 3: this recording has no snapshots (it was not recorded with --snapshot)";
  cases[3].options.cpu = 7;
  cases[3].options.snapshot = 0;
  cases[3].message =
      ": no stream of CPU 7; CPUs in this recording: 0; no snapshot 0: this "
      "recording has no snapshots (it was not recorded with --snapshot)";
  for (const Case& c : cases) {
    Recorder none;
    auto totals = DecodeContainer(path_, c.options, none);
    EXPECT_THAT(totals, StatusIs(absl::StatusCode::kNotFound, path_ + c.message));
    EXPECT_THAT(none.streams, SizeIs(0));
    std::FILE* out = std::tmpfile();
    EXPECT_THAT(DumpContainerPackets(path_, c.options, out, {}),
                StatusIs(absl::StatusCode::kNotFound, path_ + c.message));
    EXPECT_EQ(std::fclose(out), 0);
  }
}

TEST_F(ContainerTest, SnapshotsDecodeEachOnItsOwn) {
  // (Three walks that differ: a snapshot that begins with the end of the one before is joined
  // to it, PerfExportTest.OverlappingSnapshotsAreDecodedOnceAsPerfDoes.)
  PtSynth s0(*code_), s1(*code_), s2(*code_);
  auto w0 = s0.AddSegment({.entry = work_, .seed = 8, .max_insns = 800});
  auto w1 = s1.AddSegment({.entry = work_, .seed = 9, .max_insns = 800});
  auto w2 =
      s2.AddSegment({.entry = code_->Symbol("collatz").address, .seed = 10, .max_insns = 800});
  ASSERT_THAT(w0, IsOk());
  ASSERT_THAT(w1, IsOk());
  ASSERT_THAT(w2, IsOk());
  const std::vector<uint8_t> d2 = s2.bytes();
  ASSERT_NE(*w1, *w2);
  // A snapshot starts wherever the ring's oldest byte was: here, mid-packet garbage.
  std::vector<uint8_t> d0 = {0x02, 0x82, 0x99, 0x13}, d1 = s1.bytes();
  std::vector<uint8_t> b0 = s0.bytes();
  d0.insert(d0.end(), b0.begin(), b0.end());
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_snap.pt");
  auto writer = NewContainer(path, {kPtMetadata.dump()});
  ASSERT_THAT(writer, IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  std::vector<uint8_t> sb = MmapPage(*code_, 100, text, kTiny);
  perf::ItraceStart st;
  st.pid = st.tid = 100;
  st.sample_id = Id(100, 100, 7, 0);
  std::vector<uint8_t> r = perf::EncodeItraceStart(st, kLayout);
  sb.insert(sb.end(), r.begin(), r.end());
  ASSERT_THAT((*writer)->AppendSideband({0, sb}), IsOk());
  const StreamId cpu0{StreamKind::kCpu, 0};
  ASSERT_THAT((*writer)->AppendSnapshot({cpu0, 0, d0.size() + 100000, 50, d0}), IsOk());
  ASSERT_THAT((*writer)->AppendSnapshot({cpu0, 1, d1.size() + 200000, 60, d1}), IsOk());
  // An in-buffer head (Intel PT) that has wrapped: smaller than the snapshot.
  ASSERT_THAT((*writer)->AppendSnapshot({cpu0, 2, 10, 70, d2}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());

  Recorder all;
  ASSERT_THAT(DecodeContainer(path, {}, all), IsOk());
  ASSERT_THAT(all.streams, SizeIs(3));
  EXPECT_EQ(all.streams[0].name, "cpu 0 snapshot 0");
  EXPECT_EQ(all.streams[1].name, "cpu 0 snapshot 1");
  EXPECT_THAT(all.errors, SizeIs(0));
  ASSERT_THAT(all.runs, SizeIs(4));
  EXPECT_THAT(all.runs[1], ElementsAreArray(*w0));
  EXPECT_THAT(all.runs[2], ElementsAreArray(*w1));
  EXPECT_THAT(all.runs[3], ElementsAreArray(*w2));

  Recorder one;
  ContainerOptions options;
  options.snapshot = 1;
  ASSERT_THAT(DecodeContainer(path, options, one), IsOk());
  (void)std::remove(path.c_str());
  ASSERT_THAT(one.streams, SizeIs(1));
  EXPECT_EQ(one.streams[0].name, "cpu 0 snapshot 1");
  EXPECT_THAT(one.runs[1], ElementsAreArray(*w1));
  // The in-buffer one: its offsets count from 0, not from 10 - size wrapped round 2^64.
  ASSERT_THAT(all.syncs, SizeIs(3));
  EXPECT_LT(all.syncs[2], d2.size());
}

// One CPU that runs a sequence of tasks, each a PSB segment with its own TSC: processes 100
// (tiny.elf, threads 100 and 101) and 200 (golden.elf), both at 0x401000, so only the right
// image per task gives the walked instructions. Context switches halfway between segments;
// perf time == TSC.
class SwitchingCpu {
 public:
  struct Run {
    uint32_t pid = 0, tid = 0;
    uint64_t tsc = 0;
    uint32_t seed = 1;
    bool truncated_before = false;     // the AUX data before this run ends TRUNCATED (4096 lost)
    bool lost_records_before = false;  // PERF_RECORD_LOST (3 records) before this run
    int more_truncations = 0;  // with truncated_before: zero-size TRUNCATED records after it
    // The process exec'd golden.elf before this run (COMM_EXEC, then its MMAP2, at the same
    // address as tiny.elf): the run is golden's code.
    bool exec_golden = false;
  };
  static std::string Golden() { return std::string(PTKIT_DECODER_TEST_BINARY_DIR) + "/golden.elf"; }

  // Writes the container to `path`; truths() gives each run's instructions. The AUX records
  // have perf time `aux_time` (when the data was drained) and belong to `stream` (cpu 0 by
  // default; a thread's stream for a per-thread recording).
  void Write(const std::string& path, const std::vector<Run>& runs, uint64_t aux_time = 30,
             StreamId stream = {StreamKind::kCpu, 0}) {
    auto tiny = ElfCode::Load(kTiny);
    auto gold = ElfCode::Load(Golden());
    ASSERT_THAT(tiny, IsOk());
    ASSERT_THAT(gold, IsOk());
    ASSERT_EQ(tiny->Symbol("leaf").address & ~0xfffull, 0x401000u);
    ASSERT_EQ(gold->Symbol("_start").address, 0x401000u);
    nlohmann::json metadata = kPtMetadata;
    metadata["time_conversion"] = {
        {"cap_user_time_zero", true}, {"time_zero", 0}, {"time_mult", 1}, {"time_shift", 0}};
    auto writer = NewContainer(path, {metadata.dump()});
    ASSERT_THAT(writer, IsOk());
    std::vector<uint8_t> sb;
    auto add = [&](const std::vector<uint8_t>& r) { sb.insert(sb.end(), r.begin(), r.end()); };
    add(MmapPage(*tiny, 100, 0x401000, kTiny));
    add(MmapPage(*gold, 200, 0x401000, Golden()));
    perf::ItraceStart start;
    start.pid = runs[0].pid;
    start.tid = runs[0].tid;
    start.sample_id = Id(runs[0].pid, runs[0].tid, 10, 0);
    add(perf::EncodeItraceStart(start, kLayout));
    // Each thread's name, as ptrecord's synthesized COMM records give it before the trace.
    std::set<std::pair<uint32_t, uint32_t>> named;
    for (const Run& r : runs) {
      if (!named.emplace(r.pid, r.tid).second) continue;
      perf::Comm comm;
      comm.pid = r.pid;
      comm.tid = r.tid;
      comm.comm = r.pid == 200 ? "golden" : "tiny";
      comm.sample_id = Id(r.pid, r.tid, 5, 0);
      add(perf::EncodeComm(comm, kLayout));
    }
    const StreamId cpu0 = stream;
    std::vector<uint8_t> aux;
    uint64_t aux_offset = 0;
    bool exec_done = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      exec_done |= r.exec_golden;
      const bool golden = r.pid == 200 || exec_done;
      PtSynth synth(golden ? *gold : *tiny);
      auto truth = synth.AddSegment(
          {.entry = golden ? gold->Symbol("_start").address : tiny->Symbol("work").address,
           .seed = r.seed,
           .max_insns = golden ? 200u : 600u,
           .tsc = r.tsc});
      ASSERT_THAT(truth, IsOk());
      truths_.push_back(*truth);
      if (r.exec_golden) {
        const uint64_t t = (runs[i - 1].tsc + r.tsc) / 2;
        perf::Comm exec;
        exec.pid = r.pid;
        exec.tid = r.tid;
        exec.comm = "golden";
        exec.exec = true;
        exec.sample_id = Id(r.pid, r.tid, t, 0);
        add(perf::EncodeComm(exec, kLayout));
        add(MmapPage(*gold, r.pid, 0x401000, Golden(), {}, t + 1));
      } else if (i > 0) {
        const Run& prev = runs[i - 1];
        const uint64_t t = (prev.tsc + r.tsc) / 2;
        perf::Switch out;
        out.out = true;
        out.cpu_wide = true;
        out.next_prev_pid = r.pid;
        out.next_prev_tid = r.tid;
        out.sample_id = Id(prev.pid, prev.tid, t, 0);
        add(perf::EncodeSwitch(out, kLayout));
        perf::Switch in;
        in.cpu_wide = true;
        in.next_prev_pid = prev.pid;
        in.next_prev_tid = prev.tid;
        in.sample_id = Id(r.pid, r.tid, t, 0);
        add(perf::EncodeSwitch(in, kLayout));
      }
      if (r.lost_records_before) {  // the AUX bytes go on: the drain copies up to aux_head
        ASSERT_THAT((*writer)->AppendAux({cpu0, aux_offset, 0, aux_time, aux}), IsOk());
        aux_offset += aux.size();
        ASSERT_THAT((*writer)->AppendLoss({cpu0, LossKind::kLostSideband, 3, 0, 22, 0}), IsOk());
        aux.clear();
      }
      if (r.truncated_before) {
        ASSERT_THAT((*writer)->AppendAux({cpu0, aux_offset, kAuxTruncated, aux_time, aux}), IsOk());
        aux_offset += aux.size();
        ASSERT_THAT((*writer)->AppendLoss({cpu0, LossKind::kAuxTruncated, 1, 4096, 21, aux_offset}),
                    IsOk());
        for (int k = 0; k < r.more_truncations; ++k) {  // no AUX bytes: only the loss records
          ASSERT_THAT((*writer)->AppendLoss({cpu0, LossKind::kAuxTruncated, 1, 0, 21, aux_offset}),
                      IsOk());
        }
        aux.clear();
      }
      std::vector<uint8_t> bytes = synth.bytes();
      aux.insert(aux.end(), bytes.begin(), bytes.end());
    }
    ASSERT_THAT((*writer)->AppendAux({cpu0, aux_offset, 0, aux_time, aux}), IsOk());
    ASSERT_THAT((*writer)->AppendSideband({0, sb}), IsOk());
    ASSERT_THAT((*writer)->Close(), IsOk());
  }
  const std::vector<std::vector<uint64_t>>& truths() const { return truths_; }

 private:
  std::vector<std::vector<uint64_t>> truths_;
};

TEST(ContainerSwitchTest, AContextSwitchBetweenTwoProcessesSwitchesImages) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_switch.pt");
  SwitchingCpu cpu;
  // The AUX record is written after the switch, but the stream starts with 100 (by its TSC).
  cpu.Write(path,
            {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 21},
             {.pid = 200, .tid = 200, .tsc = 3000, .seed = 7}},
            /*aux_time=*/5000);
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.streams, SizeIs(2));
  EXPECT_EQ(rec.streams[0].pid, 100u);
  EXPECT_FALSE(rec.streams[0].context_switch);
  EXPECT_EQ(rec.streams[1].pid, 200u);
  EXPECT_TRUE(rec.streams[1].context_switch);
  ASSERT_THAT(rec.runs, SizeIs(3));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(cpu.truths()[0]));
  EXPECT_THAT(rec.runs[2], ElementsAreArray(cpu.truths()[1]));
  // Each process has an image of its own, and every image of the recording shares its one
  // libipt section cache (as ptxed's): a file both map is read once.
  ASSERT_THAT(rec.caches, SizeIs(2));
  EXPECT_NE(rec.images[0], rec.images[1]);
  EXPECT_NE(rec.caches[0], nullptr);
  EXPECT_EQ(rec.caches[0], rec.caches[1]);
}

// Threads 100 and 101 of process 100 and thread 200 of process 200 take turns on CPU 0; the
// trace is truncated while 200 runs.
class TidFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::ptkit::decoder::testing::TempPath("decoder_container_tid.pt");
    cpu_.Write(path_, {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
                       {.pid = 200, .tid = 200, .tsc = 3000, .seed = 2},
                       {.pid = 200, .tid = 200, .tsc = 5000, .seed = 3, .truncated_before = true},
                       {.pid = 100, .tid = 101, .tsc = 7000, .seed = 4},
                       {.pid = 100, .tid = 100, .tsc = 9000, .seed = 5}});
  }
  void TearDown() override { (void)std::remove(path_.c_str()); }
  uint64_t Insns(std::initializer_list<size_t> runs) const {
    uint64_t n = 0;
    for (size_t r : runs) n += cpu_.truths()[r].size();
    return n;
  }
  SwitchingCpu cpu_;
  std::string path_;
};

TEST_F(TidFilterTest, SwitchLinesNameTheProcessAndTheThread) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  for (bool json : {false, true}) {
    std::FILE* out = std::tmpfile();
    auto sink = MakeInsnSink(**image, out, {.json = json});
    ASSERT_THAT(DecodeContainer(path_, {}, *sink), IsOk());
    const std::string text = ::ptkit::decoder::testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    if (json) {
      EXPECT_THAT(text, ::testing::HasSubstr("{\"switch\":\"cpu 0\",\"pid\":100,\"tid\":101,"));
    } else {
      EXPECT_THAT(text, ::testing::HasSubstr("[switch cpu 0: pid 100 tid 101"));
      EXPECT_THAT(text, ::testing::HasSubstr("[switch cpu 0: pid 200 tid 200"));
    }
  }
}

TEST_F(TidFilterTest, EveryThreadSwitchIsAStreamChange) {
  Recorder rec;
  auto totals = DecodeContainer(path_, {}, rec);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.streams, SizeIs(4));
  std::vector<uint32_t> tids;
  for (const StreamInfo& s : rec.streams) tids.push_back(s.tid);
  EXPECT_THAT(tids, ElementsAreArray({100u, 200u, 101u, 100u}));
  ASSERT_THAT(rec.runs, SizeIs(6));  // before, 100, 200, (loss) 200, 101, 100
  for (size_t i = 0; i < 5; ++i) EXPECT_THAT(rec.runs[i + 1], ElementsAreArray(cpu_.truths()[i]));
  EXPECT_EQ(totals->instructions, Insns({0, 1, 2, 3, 4}));
}

TEST_F(TidFilterTest, ATidShowsOnlyWhatThatThreadRanOnTheCpu) {
  Recorder t100;
  ContainerOptions options;
  options.tid = 100;
  auto totals = DecodeContainer(path_, options, t100);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(t100.streams, SizeIs(2));
  EXPECT_EQ(t100.streams[0].name, "cpu 0");
  EXPECT_FALSE(t100.streams[0].context_switch);
  EXPECT_EQ(t100.streams[1].tid, 100u);
  EXPECT_TRUE(t100.streams[1].context_switch);
  EXPECT_THAT(t100.losses, SizeIs(0));  // the truncation happened while 200 ran
  ASSERT_THAT(t100.runs, SizeIs(3));
  EXPECT_THAT(t100.runs[1], ElementsAreArray(cpu_.truths()[0]));
  EXPECT_THAT(t100.runs[2], ElementsAreArray(cpu_.truths()[4]));
  EXPECT_EQ(totals->instructions, Insns({0, 4}));
  EXPECT_EQ(totals->streams, 1u);
  EXPECT_EQ(totals->losses, 0u);

  Recorder t200;
  options.tid = 200;
  totals = DecodeContainer(path_, options, t200);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(t200.streams, SizeIs(1));  // announced when 200 first runs
  EXPECT_EQ(t200.streams[0].pid, 200u);
  EXPECT_FALSE(t200.streams[0].context_switch);
  ASSERT_THAT(t200.losses, SizeIs(1));
  EXPECT_EQ(t200.losses[0].kind, LossKindName(LossKind::kAuxTruncated));
  ASSERT_THAT(t200.runs, SizeIs(3));
  EXPECT_THAT(t200.runs[1], ElementsAreArray(cpu_.truths()[1]));
  EXPECT_THAT(t200.runs[2], ElementsAreArray(cpu_.truths()[2]));
  EXPECT_EQ(totals->instructions, Insns({1, 2}));
  EXPECT_EQ(totals->losses, 1u);
  EXPECT_EQ(totals->lost_bytes, 4096u);

  Recorder t101;  // a thread of the same process as 100: same image, its own stretch
  options.tid = 101;
  totals = DecodeContainer(path_, options, t101);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(t101.streams, SizeIs(1));
  EXPECT_EQ(t101.streams[0].pid, 100u);
  ASSERT_THAT(t101.runs, SizeIs(2));
  EXPECT_THAT(t101.runs[1], ElementsAreArray(cpu_.truths()[3]));
  EXPECT_EQ(totals->instructions, Insns({3}));

  Recorder none;  // a thread that never ran: nothing at all, and an error saying so
  options.tid = 999;
  totals = DecodeContainer(path_, options, none);
  EXPECT_THAT(totals, StatusIs(absl::StatusCode::kNotFound,
                               path_ + ": thread 999 did not run while the CPU streams traced; "
                                       "processes in this recording: 100, 200"));
  EXPECT_THAT(none.streams, SizeIs(0));
}

// The trace is truncated while 200 runs and resumes with 100, switched in during the lost
// stretch: the loss may hold 100's start, so --tid 100 shows it (and --tid 200 too).
TEST(TidFilterLossTest, ALossBeforeTheThreadResumesIsShownToIt) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_tidloss.pt");
  SwitchingCpu cpu;
  cpu.Write(path, {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
                   {.pid = 200, .tid = 200, .tsc = 3000, .seed = 2},
                   {.pid = 100, .tid = 100, .tsc = 5000, .seed = 3, .truncated_before = true}});
  for (uint32_t tid : {100u, 200u}) {
    SCOPED_TRACE(tid);
    Recorder rec;
    ContainerOptions options;
    options.tid = tid;
    auto totals = DecodeContainer(path, options, rec);
    ASSERT_THAT(totals, IsOk());
    ASSERT_THAT(rec.losses, SizeIs(1));
    EXPECT_EQ(rec.losses[0].kind, LossKindName(LossKind::kAuxTruncated));
    EXPECT_EQ(totals->losses, 1u);
  }
  (void)std::remove(path.c_str());
}

// PERF_RECORD_LOST: the lost records may have said TRUNCATED, so the decode shows the loss
// and resyncs there instead of joining the bytes on either side.
TEST(ContainerLossTest, LostPerfRecordsAreALossPointAndABreak) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_lost.pt");
  SwitchingCpu cpu;
  cpu.Write(path, {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
                   {.pid = 100, .tid = 100, .tsc = 3000, .seed = 2, .lost_records_before = true}});
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.losses, SizeIs(1));
  EXPECT_EQ(rec.losses[0].kind, LossKindName(LossKind::kLostSideband));
  EXPECT_EQ(totals->losses, 1u);
  EXPECT_THAT(rec.errors, SizeIs(0));
  EXPECT_EQ(totals->instructions, cpu.truths()[0].size() + cpu.truths()[1].size());
  // What was lost and what it does is said (sweep 29b M3: only "1 loss point" of 3 records).
  EXPECT_THAT(totals->warnings,
              Contains(HasSubstr(": 3 sideband records lost by the kernel, its data ring full "
                                 "once: mappings, comms, exits or context switches among them "
                                 "are missing")));
}

// Each loss record is a loss point: truncations with no AUX bytes between them (the event
// re-enabled into a still-full buffer) are not merged into one.
TEST(ContainerLossTest, EveryTruncationCounts) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_trunc3.pt");
  SwitchingCpu cpu;
  cpu.Write(path, {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
                   {.pid = 100,
                    .tid = 100,
                    .tsc = 3000,
                    .seed = 2,
                    .truncated_before = true,
                    .more_truncations = 2}});
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.losses, SizeIs(3));
  for (const LossInfo& l : rec.losses) {
    EXPECT_EQ(l.kind, LossKindName(LossKind::kAuxTruncated));
  }
  EXPECT_EQ(rec.losses[0].bytes, 4096u);
  EXPECT_EQ(totals->losses, 3u);
}

// Losses of a stream with no trace bytes (snapshot mode keeps its trace in snapshot records)
// are counted and said, not dropped.
TEST(ContainerLossTest, LossesOutsideAnyTraceAreCountedAndSaid) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_unplaced.pt");
  {
    auto writer = NewContainer(path, {kPtMetadata.dump()});
    ASSERT_THAT(writer, IsOk());
    const StreamId cpu1{StreamKind::kCpu, 1};
    ASSERT_THAT((*writer)->AppendLoss({cpu1, LossKind::kAuxCollision, 1, 100, 5, 0}), IsOk());
    ASSERT_THAT((*writer)->AppendLoss({cpu1, LossKind::kLostSideband, 2, 0, 6, 0}), IsOk());
    ASSERT_THAT((*writer)->Close(), IsOk());
  }
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->losses, 2u);
  EXPECT_EQ(totals->lost_bytes, 100u);
  EXPECT_THAT(totals->warnings,
              Contains(HasSubstr("cpu 1: 2 loss point(s) outside the decoded trace (1 "
                                 "aux-collision, 1 lost-sideband)")));
}

// Damage in the file and a missing footer reach the decode's warnings (stderr, stats --json),
// not only `ptdecode info`.
TEST(ContainerLossTest, DamageAndAMissingFooterAreWarnings) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_damaged.pt");
  SwitchingCpu cpu;
  cpu.Write(path, {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
                   {.pid = 200, .tid = 200, .tsc = 3000, .seed = 2}});
  Recorder clean;
  auto totals = DecodeContainer(path, {}, clean);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(totals->warnings, SizeIs(0));
  // Cut the footer off: the file ends inside it.
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 8);
  Recorder cut;
  totals = DecodeContainer(path, {}, cut);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(totals->warnings, Contains(HasSubstr("no footer")));
  EXPECT_THAT(totals->warnings, Contains(HasSubstr("damaged bytes at offset")));
  (void)std::remove(path.c_str());
}

// The timeline's metadata events and every slice's (pid, tid), in order.
struct TimelineTracks {
  std::vector<std::tuple<std::string, uint32_t, uint32_t, std::string>> names;  // ph "M"
  std::set<std::pair<uint32_t, uint32_t>> slices;                               // B and E
  // The last name of `what` ("thread_name", "process_name") given to (pid, tid).
  std::string Last(const std::string& what, uint32_t pid, uint32_t tid) const {
    std::string last;
    for (const auto& [w, p, t, name] : names) {
      if (w == what && p == pid && t == tid) last = name;
    }
    return last;
  }
};
TimelineTracks DecodeTimeline(const std::string& path) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, IsOk());
  std::FILE* out = std::tmpfile();
  auto sink = MakeTimelineSink(**image, out, {});
  const std::string text = DecodeToText(path, *sink, out);
  TimelineTracks tracks;
  const nlohmann::json doc = nlohmann::json::parse(text);
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M") {
      tracks.names.emplace_back(e["name"], e["pid"], e["tid"], e["args"]["name"]);
    } else if (ph == "B" || ph == "E") {
      tracks.slices.emplace(e["pid"], e["tid"]);
    }
  }
  return tracks;
}

// A process that execs another program at the same address: the trace before the exec is
// decoded against the first program, after it against the second (by the trace's time), in a
// per-CPU stream and in a per-thread one.
TEST(ContainerExecTest, CodeBeforeAndAfterAnExecUsesEachProgram) {
  for (StreamId stream : {StreamId{StreamKind::kCpu, 0}, StreamId{StreamKind::kThread, 100}}) {
    SCOPED_TRACE(StreamName(stream));
    const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_exec.pt");
    SwitchingCpu cpu;
    cpu.Write(path,
              {{.pid = 100, .tid = 100, .tsc = 1000, .seed = 1},
               {.pid = 100, .tid = 100, .tsc = 3000, .seed = 2, .exec_golden = true}},
              30, stream);
    // The timeline names the process and its thread by the program it exec'd (their last
    // names, which the viewers show).
    const TimelineTracks tracks = DecodeTimeline(path);
    ASSERT_THAT(tracks.names, SizeIs(5));             // the trace; before the exec and after it
    EXPECT_EQ(std::get<3>(tracks.names[1]), "tiny");  // the process before the exec
    EXPECT_EQ(tracks.Last("thread_name", 100, 100), "golden (tid 100)");
    EXPECT_EQ(tracks.Last("process_name", 100, 100), "golden");
    Recorder rec;
    auto totals = DecodeAndRemove(path, rec);
    ASSERT_THAT(totals, IsOk());
    EXPECT_THAT(rec.errors, SizeIs(0));
    ASSERT_THAT(rec.streams, SizeIs(2));
    EXPECT_EQ(rec.streams[1].comm, "golden");  // the exec shows as a change of program
    ASSERT_THAT(rec.runs, SizeIs(3));
    EXPECT_THAT(rec.runs[1], ElementsAreArray(cpu.truths()[0]));
    EXPECT_THAT(rec.runs[2], ElementsAreArray(cpu.truths()[1]));
  }
}

// Perfetto groups a trace-event file's tracks by "pid": each thread's track is in its process,
// which is named.
TEST_F(TidFilterTest, TimelineTracksAreThreadsOfTheirProcesses) {
  const TimelineTracks tracks = DecodeTimeline(path_);
  using Track = std::pair<uint32_t, uint32_t>;
  EXPECT_THAT(tracks.slices, ElementsAreArray({Track{100, 100}, Track{100, 101}, Track{200, 200}}));
  EXPECT_EQ(tracks.Last("process_name", 100, 100), "tiny");
  EXPECT_EQ(tracks.Last("process_name", 200, 200), "golden");
  EXPECT_EQ(tracks.Last("thread_name", 100, 100), "tiny (tid 100)");
  EXPECT_EQ(tracks.Last("thread_name", 100, 101), "tiny (tid 101)");
  EXPECT_EQ(tracks.Last("thread_name", 200, 200), "golden (tid 200)");
}

TEST_F(TidFilterTest, PacketsOfATidAreThoseWhileItRuns) {
  // By the TSC packets: each segment's PSB+ has its run's TSC.
  auto tscs = [&](const ContainerOptions& options) {
    std::FILE* out = std::tmpfile();
    OutputOptions json;
    json.json = true;
    EXPECT_THAT(DumpContainerPackets(path_, options, out, json), IsOk());
    std::vector<uint64_t> seen;
    for (const auto& j : JsonLines(out)) {
      if (j.value("packet", "") == "tsc") {
        seen.push_back(j["tsc"].get<uint64_t>());  // a number, as in insn --json
      }
    }
    return seen;
  };
  EXPECT_THAT(tscs({}), ElementsAreArray({1000u, 3000u, 5000u, 7000u, 9000u}));
  ContainerOptions options;
  options.tid = 100;
  EXPECT_THAT(tscs(options), ElementsAreArray({1000u, 9000u}));
  options.tid = 200;
  EXPECT_THAT(tscs(options), ElementsAreArray({3000u, 5000u}));
  // The stream's header comes with the thread's first packet, once, or not at all.
  auto headers = [&](const ContainerOptions& options) {
    std::FILE* out = std::tmpfile();
    EXPECT_THAT(DumpContainerPackets(path_, options, out, {}), IsOk());
    const std::string text = ::ptkit::decoder::testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    size_t n = 0;
    for (size_t at = text.find("[stream "); at != std::string::npos;
         at = text.find("[stream ", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(headers(options), 1u);
  options.tid = 999;  // never ran
  EXPECT_EQ(headers(options), 0u);
}

// The JSON lines of `ptdecode packets` on `path`.
std::vector<nlohmann::json> PacketLines(const std::string& path, const ContainerOptions& options) {
  std::FILE* out = std::tmpfile();
  OutputOptions json;
  json.json = true;
  EXPECT_THAT(DumpContainerPackets(path, options, out, json), IsOk());
  return JsonLines(out);
}

// The JSON lines of DumpPackets over raw bytes.
std::vector<nlohmann::json> RawPacketLines(std::span<const uint8_t> bytes) {
  std::FILE* out = std::tmpfile();
  OutputOptions json;
  json.json = true;
  EXPECT_THAT(DumpPackets(bytes, {}, out, json), IsOk());
  return JsonLines(out);
}

TEST_F(ContainerTest, PacketsOfEveryStreamWithStreamOffsetsAndLoss) {
  std::vector<nlohmann::json> lines = PacketLines(path_, {});
  // Piece A dumps as the raw bytes do (it starts at AUX offset 0).
  auto a = RawPacketLines(bytes_a_);
  ASSERT_FALSE(a.empty());
  size_t i = 0;
  ASSERT_GT(lines.size(), a.size() + 3);
  EXPECT_EQ(lines[i]["stream"], "cpu 0");
  EXPECT_EQ(lines[i]["pid"], 100);
  ++i;
  for (const auto& p : a) EXPECT_EQ(lines[i++], p);
  EXPECT_EQ(lines[i]["loss"], LossKindName(LossKind::kAuxTruncated));
  EXPECT_EQ(lines[i]["aux_offset"], bytes_a_.size());
  EXPECT_EQ(lines[i]["bytes"], 4096);
  ++i;
  // Piece B starts at AUX offset bytes_a_.size(): its first packet is a PSB there.
  EXPECT_EQ(lines[i]["packet"], "psb");
  EXPECT_EQ(lines[i]["offset"], bytes_a_.size());
  size_t b = i;
  while (i < lines.size() && !lines[i].contains("stream")) ++i;
  ASSERT_LT(i, lines.size());
  EXPECT_EQ(lines[i]["stream"], "tid 200");
  // B's packets are those of the raw bytes of B, AUX-offset based.
  std::vector<nlohmann::json> b_lines(lines.begin() + b, lines.begin() + i);
  for (size_t k = 1; k < b_lines.size(); ++k) {
    EXPECT_GT(b_lines[k]["offset"].get<uint64_t>(), b_lines[k - 1]["offset"].get<uint64_t>());
  }

  ContainerOptions only_tid;
  only_tid.tid = 200;
  std::vector<nlohmann::json> tid = PacketLines(path_, only_tid);
  ASSERT_FALSE(tid.empty());
  EXPECT_EQ(tid[0]["stream"], "tid 200");
  for (size_t k = 1; k < tid.size(); ++k) EXPECT_FALSE(tid[k].contains("stream"));
}

TEST_F(ContainerTest, PacketsAsText) {
  std::FILE* out = std::tmpfile();
  ASSERT_THAT(DumpContainerPackets(path_, {}, out, {}), IsOk());
  std::string text = ::ptkit::decoder::testing::ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  EXPECT_THAT(text, ::testing::StartsWith("[stream cpu 0: pid 100 (tiny), "));
  EXPECT_THAT(text, ::testing::HasSubstr(fmt::format("[loss: aux-truncated at aux offset {:#x}, "
                                                     "4096 bytes]\n{:016x}  psb",
                                                     bytes_a_.size(), bytes_a_.size())));
  EXPECT_THAT(text, ::testing::HasSubstr("[stream tid 200: pid 200, "));
}

TEST(ContainerInput, AFlaggedAuxRecordAndItsLossRecordAreOneLossPoint) {
  // Both name the loss the container's way (LossKindName), so the record's flag and the loss
  // record meet at one point, with the loss record's bytes.
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_loss.pt");
  auto writer = NewContainer(path, {"{}"});
  ASSERT_THAT(writer, IsOk());
  const StreamId cpu1{StreamKind::kCpu, 1};
  const std::vector<uint8_t> pad(64, 0);
  for (auto [flag, kind] : {std::pair{kAuxCollision, LossKind::kAuxCollision},
                            std::pair{kAuxTruncated, LossKind::kAuxTruncated},
                            std::pair{kAuxPartial, LossKind::kAuxPartial}}) {
    ASSERT_THAT((*writer)->AppendAux({cpu1, 0, flag, 10, pad}), IsOk());
    ASSERT_THAT((*writer)->AppendLoss({cpu1, kind, 1, 777, 11, pad.size()}), IsOk());
  }
  ASSERT_THAT((*writer)->AppendAux({cpu1, 0, 0, 10, pad}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({cpu1, 1000, 0, 10, pad}), IsOk());  // a jump
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.losses, SizeIs(4));
  EXPECT_EQ(rec.losses[0].kind, LossKindName(LossKind::kAuxCollision));
  EXPECT_EQ(rec.losses[1].kind, LossKindName(LossKind::kAuxTruncated));
  EXPECT_EQ(rec.losses[2].kind, LossKindName(LossKind::kAuxPartial));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rec.losses[i].bytes, 777u);
  EXPECT_EQ(rec.losses[3].kind, kLossDiscontinuity);
  EXPECT_EQ(rec.losses[3].bytes, 1000u - pad.size());
  EXPECT_EQ(totals->lost_bytes, 3 * 777u + 1000u - pad.size());
}

// --- The AUX spool ---------------------------------------------------------------------------

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST(AuxSpoolTest, InterleavedRunsMapBackContiguous) {
  auto spool = AuxSpool::Create(AuxSpool::Dirs(""));
  ASSERT_THAT(spool, IsOk());
  // Two streams written in turns, in odd-sized chunks, so each run has several extents that
  // are not next to each other in the file.
  std::vector<uint8_t> a = Pattern(5 * 1000 * 1000 + 123, 1), b = Pattern(3 * 1000 * 1000, 2);
  SpoolRun ra, rb;
  const size_t chunk = 333331;
  for (size_t ia = 0, ib = 0; ia < a.size() || ib < b.size(); ia += chunk, ib += chunk) {
    if (ia < a.size()) {
      ASSERT_THAT(spool->Append(ra, std::span(a).subspan(ia, std::min(chunk, a.size() - ia))),
                  IsOk());
    }
    if (ib < b.size()) {
      ASSERT_THAT(spool->Append(rb, std::span(b).subspan(ib, std::min(chunk, b.size() - ib))),
                  IsOk());
    }
  }
  EXPECT_EQ(ra.size, a.size());
  EXPECT_GE(ra.extents.size(), 3u);
  for (size_t i = 1; i < ra.extents.size(); ++i) {
    EXPECT_NE(ra.extents[i].file_offset, ra.extents[i - 1].file_offset + ra.extents[i - 1].capacity)
        << "extent " << i << " follows the previous one: the test would not test stitching";
  }
  auto va = spool->Map(ra);
  auto vb = spool->Map(rb);
  ASSERT_THAT(va, IsOk());
  ASSERT_THAT(vb, IsOk());
  ASSERT_EQ(va->bytes().size(), a.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), va->bytes().begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), vb->bytes().begin(), vb->bytes().end()));
  // Dropping pages from the process never changes what is read.
  va->ReleaseBefore(a.size() - 1);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), va->bytes().begin()));
  // An empty run maps to nothing.
  auto empty = spool->Map(SpoolRun{});
  ASSERT_THAT(empty, IsOk());
  EXPECT_TRUE(empty->bytes().empty());
}

// This process's resident pages of mapped files (/proc/self/status RssFile), in KiB.
uint64_t RssFileKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("RssFile:")) return std::stoull(line.substr(8));
  }
  return 0;
}

// Reads every page of `bytes`.
uint64_t Touch(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 4096) sum += bytes[i];
  return sum;
}

// ReleaseBefore drops the pages behind the reader; a second pass over the bytes (the decode
// after the fast path's scan of the whole trace) maps them again, and they are dropped again
// behind it.
TEST(AuxSpoolTest, PagesBehindASecondPassAreDroppedToo) {
  auto spool = AuxSpool::Create(AuxSpool::Dirs(""));
  ASSERT_THAT(spool, IsOk());
  const std::vector<uint8_t> bytes = Pattern(size_t{48} << 20, 3);
  SpoolRun run;
  ASSERT_THAT(spool->Append(run, bytes), IsOk());
  auto view = spool->Map(run);
  ASSERT_THAT(view, IsOk());
  const uint64_t before = RssFileKib();
  const uint64_t sum = Touch(view->bytes());
  EXPECT_GE(RssFileKib(), before + (40 << 10));  // 48 MiB mapped
  view->ReleaseBefore(bytes.size());
  EXPECT_LE(RssFileKib(), before + (8 << 10));
  // The second pass.
  EXPECT_EQ(Touch(view->bytes()), sum);
  EXPECT_GE(RssFileKib(), before + (40 << 10));
  view->ReleaseBefore(size_t{32} << 20);
  EXPECT_LE(RssFileKib(), before + (24 << 10));  // the last 16 MiB
  view->ReleaseBefore(bytes.size());
  EXPECT_LE(RssFileKib(), before + (8 << 10));
}

TEST(AuxSpoolTest, DirectoriesAndTheErrorWhenNoneIsWritable) {
  EXPECT_THAT(AuxSpool::Dirs("/some/dir"), ElementsAreArray({"/some/dir", "/tmp"}));
  const char* old = std::getenv("TMPDIR");
  std::string saved = old ? old : "";
  setenv("TMPDIR", "/from/env", 1);  // NOLINT(concurrency-mt-unsafe): no other thread runs
  EXPECT_THAT(AuxSpool::Dirs(""), ElementsAreArray({"/from/env", "/tmp"}));
  unsetenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): no other thread runs
  EXPECT_THAT(AuxSpool::Dirs(""), ElementsAreArray({"/tmp"}));
  if (old) setenv("TMPDIR", saved.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): as above

  auto fallback = AuxSpool::Create({"/nonexistent/ptkit", "/tmp"});
  ASSERT_THAT(fallback, IsOk());
  EXPECT_EQ(fallback->dir(), "/tmp");
  auto none = AuxSpool::Create({"/nonexistent/a", "/nonexistent/b"});
  EXPECT_THAT(none, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(
      std::string(none.status().message()),
      ::testing::AllOf(::testing::HasSubstr("/nonexistent/a"),
                       ::testing::HasSubstr("/nonexistent/b"), ::testing::HasSubstr("TMPDIR")));
}

TEST_F(ContainerTest, APieceAcrossSpoolExtentsDecodesExactly) {
  // cpu 0 holds padding that ends just before the first spool extent does, then a trace that
  // goes on in the next extent, after the extent another stream took meanwhile.
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_extents.pt");
  auto writer = NewContainer(path, {"{}"});
  ASSERT_THAT(writer, IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  ASSERT_THAT((*writer)->AppendSideband({-1, MmapPage(*code_, 300, text, kTiny)}), IsOk());
  // The first extent (1 MiB) ends 3 bytes after the split, inside the first PSB.
  const size_t split = 7;
  std::vector<uint8_t> first((1 << 20) - split - 3, 0);  // PAD packets
  first.insert(first.end(), bytes_a_.begin(), bytes_a_.begin() + split);
  const std::vector<uint8_t> rest(bytes_a_.begin() + split, bytes_a_.end());
  const StreamId t300{StreamKind::kThread, 300}, t301{StreamKind::kThread, 301};
  ASSERT_THAT((*writer)->AppendAux({t300, 0, 0, 10, first}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({t301, 0, 0, 10, std::vector<uint8_t>(5000, 0)}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({t300, first.size(), 0, 10, rest}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  ContainerOptions options;
  options.tid = 300;
  auto totals = DecodeAndRemove(path, rec, options);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.runs, SizeIs(2));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(truth_a_));
}

// AUX records whose offsets overlap what the stream has already: the repeated bytes are
// dropped (and said), so the trace is decoded once, exactly.
TEST_F(ContainerTest, OverlappingAuxBytesAreDecodedOnce) {
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_overlap.pt");
  auto writer = NewContainer(path, {"{}"});
  ASSERT_THAT(writer, IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  ASSERT_THAT((*writer)->AppendSideband({-1, MmapPage(*code_, 300, text, kTiny)}), IsOk());
  const StreamId t300{StreamKind::kThread, 300};
  const size_t half = bytes_a_.size() / 2, quarter = bytes_a_.size() / 4;
  const std::vector<uint8_t> first(bytes_a_.begin(), bytes_a_.begin() + half);
  const std::vector<uint8_t> again(bytes_a_.begin() + quarter, bytes_a_.begin() + half);
  const std::vector<uint8_t> rest(bytes_a_.begin() + quarter, bytes_a_.end());
  ASSERT_THAT((*writer)->AppendAux({t300, 0, 0, 10, first}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({t300, quarter, 0, 10, again}), IsOk());  // all seen
  ASSERT_THAT((*writer)->AppendAux({t300, quarter, 0, 10, rest}), IsOk());   // half seen
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  EXPECT_THAT(rec.losses, SizeIs(0));
  ASSERT_THAT(rec.runs, SizeIs(2));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(truth_a_));
  EXPECT_THAT(totals->warnings,
              Contains(HasSubstr(
                  fmt::format("tid 300: {} AUX bytes repeat offsets", 2 * (half - quarter)))));
}

TEST(ContainerInput, ReadBuildIdReadsTheGnuNote) {
  auto none = ReadBuildId(kTiny);  // linked with --build-id=none
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
  auto self = ReadBuildId("/proc/self/exe");  // the test binary, linked with a build-id
  ASSERT_THAT(self, IsOk());
  EXPECT_THAT(*self, SizeIs(20));
  EXPECT_FALSE(ReadBuildId(kTiny + ".missing").ok());
}

TEST_F(ContainerTest, ABuildIdMismatchIsAWarningNamingTheFile) {
  // The fixture's recording, plus process 300 whose MMAP2 names tiny.elf with a build-id the
  // file does not have.
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_buildid.pt");
  auto writer = NewContainer(path, {kPtMetadata.dump()});
  ASSERT_THAT(writer, IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  const std::vector<uint8_t> recorded_id = {0xde, 0xad, 0xbe, 0xef, 1,  2,  3,  4,  5,  6,
                                            7,    8,    9,    10,   11, 12, 13, 14, 15, 16};
  ASSERT_THAT((*writer)->AppendSideband({-1, MmapPage(*code_, 300, text, kTiny, recorded_id)}),
              IsOk());
  ASSERT_THAT((*writer)->AppendAux({{StreamKind::kThread, 300}, 0, 0, 10, bytes_a_}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  auto totals = DecodeAndRemove(path, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(totals->warnings, SizeIs(1));
  EXPECT_THAT(totals->warnings[0], ::testing::HasSubstr(kTiny));
  EXPECT_THAT(totals->warnings[0], ::testing::HasSubstr("deadbeef0102"));
  // It still decodes with the file it has.
  EXPECT_THAT(rec.runs[1], ElementsAreArray(truth_a_));

  Recorder clean;  // the fixture's recording has no build-ids: no build-id warning
  auto ok = DecodeContainer(path_, {}, clean);
  ASSERT_THAT(ok, IsOk());
  EXPECT_THAT(ok->warnings, ::testing::Each(::testing::Not(::testing::HasSubstr("build-id"))));
  // (Its mapping of a file this machine does not have is said: sweep 27 S3.)
  EXPECT_THAT(ok->warnings,
              ::testing::Contains(::testing::HasSubstr("could not be loaded (stat ")));
}

TEST(ContainerInput, MetadataGivesTheDecoderConfiguration) {
  nlohmann::json metadata = {
      {"cpu",
       {{"vendor", "GenuineIntel"},
        {"family", 6},
        {"model", 61},
        {"stepping", 4},
        {"cpuid_15h", {{"tsc_ratio_numerator", 84}, {"tsc_ratio_denominator", 2}}}}},
      {"pmu", {{"type", 8}, {"max_nonturbo_ratio", 24}}},
      {"attrs", {{{"type", 1}, {"config", 0}}, {{"type", 8}, {"config", (5ull << 14) | 1}}}}};
  TraceConfig c = TraceConfigFromMetadata(TypedMetadata(metadata));
  ASSERT_TRUE(c.cpu.has_value());
  EXPECT_EQ(c.cpu->model, 61);
  EXPECT_EQ(c.mtc_freq, 5);
  EXPECT_EQ(c.nom_freq, 24);
  EXPECT_EQ(c.cpuid_0x15_eax, 2u);
  EXPECT_EQ(c.cpuid_0x15_ebx, 84u);
  metadata["cpu"]["vendor"] = "AuthenticAMD";
  EXPECT_FALSE(TraceConfigFromMetadata(TypedMetadata(metadata)).cpu.has_value());
}

TEST(ContainerInput, NotAContainerIsAnError) {
  Recorder rec;
  EXPECT_THAT(DecodeContainer(kTiny, {}, rec), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(DecodeContainer(kTiny + ".missing", {}, rec).ok());
}

}  // namespace
}  // namespace ptkit::decoder
