// Container input: a trace.pt built here with real perf sideband records (MMAP2, COMM,
// ITRACE_START) and software PT for tests/data/decoder/tiny.c, per-CPU and per-thread streams,
// a truncated AUX range and a process whose file is missing.
#include <linux/perf_event.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::SizeIs;

const std::string kTiny = std::string(PTKIT_DECODER_TEST_BINARY_DIR) + "/tiny.elf";
const perf::SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

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
  }
  void OnLoss(const LossInfo& l) override {
    losses.push_back(l);
    runs.emplace_back();
  }
  void OnInsn(const pt_insn& insn) override { runs.back().push_back(insn.ip); }
  void OnError(const DecodeError& e) override {
    errors.push_back(e);
    missing.push_back(e.missing_file ? *e.missing_file : "");
  }
  std::vector<StreamInfo> streams;
  std::vector<LossInfo> losses;
  std::vector<std::vector<uint64_t>> runs{1};
  std::vector<DecodeError> errors;
  std::vector<std::string> missing;
};

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
    WriterOptions options;
    options.overwrite = true;
    auto writer = ContainerWriter::Create(path_, options);
    ASSERT_THAT(writer, IsOk());
    nlohmann::json metadata = {
        {"cpu", {{"vendor", "GenuineIntel"}, {"family", 6}, {"model", 85}, {"stepping", 4}}},
        {"pmu", {{"type", 8}, {"max_nonturbo_ratio", 20}}},
        {"attrs",
         {{{"name", "intel_pt"},
           {"type", 8},
           {"config", (3ull << 14) | 1},
           {"sample_type", kLayout.sample_type},
           {"sample_id_all", true}}}}};
    ASSERT_THAT((*writer)->AppendMetadata(metadata.dump()), IsOk());

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
  void TearDown() override { std::remove(path_.c_str()); }

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
  EXPECT_EQ(rec.losses[0].kind, "truncated");
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
  std::fclose(out);
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

std::string DecodeToText(const std::string& path, Sink& sink, std::FILE* out) {
  EXPECT_THAT(DecodeContainer(path, {}, sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  std::fclose(out);
  return text;
}

TEST_F(ContainerTest, CallsAndTimelineShowStreamsLossAndGapsOnly) {
  auto empty = ProgramImage::Create();
  ASSERT_THAT(empty, IsOk());
  std::FILE* out = std::tmpfile();
  auto calls = MakeCallsSink(**empty, out, {});
  std::string text = DecodeToText(path_, *calls, out);
  EXPECT_THAT(text, ::testing::HasSubstr("[stream cpu 0: pid 100 (tiny)"));
  EXPECT_THAT(text, ::testing::HasSubstr("[loss: truncated at aux offset"));
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
  int names = 0, gaps = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") ++names;
    if (e["ph"] == "B") ++depth[e["tid"].get<int>()];
    if (e["ph"] == "E") {
      EXPECT_GE(--depth[e["tid"].get<int>()], 0);
    }
    if (e["ph"] == "i") gaps += e["name"] == "gap";
  }
  EXPECT_EQ(names, 3);  // the trace, thread 100, thread 200
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

TEST_F(ContainerTest, BtsRecordingsDecodeTheirBranchRecords) {
  // The same sideband, an intel_bts recording of one thread.
  PtSynth walk(*code_);
  auto ips = walk.AddSegment({.entry = work_, .seed = 21, .max_insns = 3000});
  ASSERT_THAT(ips, IsOk());
  std::vector<size_t> branches;
  std::vector<uint8_t> bts = testing::BtsFromWalk(*code_, *ips, &branches);
  ASSERT_GE(branches.size(), 5u);
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_bts.pt");
  WriterOptions options;
  options.overwrite = true;
  auto writer = ContainerWriter::Create(path, options);
  ASSERT_THAT(writer, IsOk());
  nlohmann::json metadata = {{"pmu", {{"name", "intel_bts"}, {"type", 9}}},
                             {"attrs",
                              {{{"name", "intel_bts"},
                                {"type", 9},
                                {"sample_type", kLayout.sample_type},
                                {"sample_id_all", true}}}}};
  ASSERT_THAT((*writer)->AppendMetadata(metadata.dump()), IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  perf::Mmap2 m;
  m.pid = m.tid = 300;
  m.addr = text;
  m.len = 0x1000;
  m.pgoff = code_->FileOffset(text);
  m.prot = 5;
  m.filename = kTiny;
  m.sample_id = Id(300, 300, 6, 0);
  std::vector<uint8_t> sb = perf::EncodeMmap2(m, kLayout);
  ASSERT_THAT((*writer)->AppendSideband({-1, sb}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({{StreamKind::kThread, 300}, 0, 0, 10, bts}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());

  Recorder rec;
  auto totals = DecodeContainer(path, {}, rec);
  std::remove(path.c_str());
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.runs, SizeIs(2));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(ips->begin() + branches.front(),
                                            ips->begin() + branches.back() + 1));
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
  Recorder none;
  options = {};
  options.cpu = 7;
  auto totals = DecodeContainer(path_, options, none);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->streams, 0u);
  EXPECT_EQ(totals->instructions, 0u);
}

TEST_F(ContainerTest, SnapshotsDecodeEachOnItsOwn) {
  PtSynth s0(*code_), s1(*code_);
  auto w0 = s0.AddSegment({.entry = work_, .seed = 8, .max_insns = 800});
  auto w1 = s1.AddSegment({.entry = work_, .seed = 9, .max_insns = 800});
  ASSERT_THAT(w0, IsOk());
  ASSERT_THAT(w1, IsOk());
  // A snapshot starts wherever the ring's oldest byte was: here, mid-packet garbage.
  std::vector<uint8_t> d0 = {0x02, 0x82, 0x99, 0x13}, d1 = s1.bytes();
  std::vector<uint8_t> b0 = s0.bytes();
  d0.insert(d0.end(), b0.begin(), b0.end());
  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_snap.pt");
  WriterOptions wo;
  wo.overwrite = true;
  auto writer = ContainerWriter::Create(path, wo);
  ASSERT_THAT(writer, IsOk());
  nlohmann::json metadata = {
      {"attrs",
       {{{"name", "intel_pt"}, {"sample_type", kLayout.sample_type}, {"sample_id_all", true}}}}};
  ASSERT_THAT((*writer)->AppendMetadata(metadata.dump()), IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  perf::Mmap2 m;
  m.pid = m.tid = 100;
  m.addr = text;
  m.len = 0x1000;
  m.pgoff = code_->FileOffset(text);
  m.prot = 5;
  m.filename = kTiny;
  m.sample_id = Id(100, 100, 6, 0);
  std::vector<uint8_t> sb = perf::EncodeMmap2(m, kLayout);
  perf::ItraceStart st;
  st.pid = st.tid = 100;
  st.sample_id = Id(100, 100, 7, 0);
  std::vector<uint8_t> r = perf::EncodeItraceStart(st, kLayout);
  sb.insert(sb.end(), r.begin(), r.end());
  ASSERT_THAT((*writer)->AppendSideband({0, sb}), IsOk());
  const StreamId cpu0{StreamKind::kCpu, 0};
  ASSERT_THAT((*writer)->AppendSnapshot({cpu0, 0, d0.size() + 100000, 50, d0}), IsOk());
  ASSERT_THAT((*writer)->AppendSnapshot({cpu0, 1, d1.size() + 200000, 60, d1}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());

  Recorder all;
  ASSERT_THAT(DecodeContainer(path, {}, all), IsOk());
  ASSERT_THAT(all.streams, SizeIs(2));
  EXPECT_EQ(all.streams[0].name, "cpu 0 snapshot 0");
  EXPECT_EQ(all.streams[1].name, "cpu 0 snapshot 1");
  EXPECT_THAT(all.errors, SizeIs(0));
  ASSERT_THAT(all.runs, SizeIs(3));
  EXPECT_THAT(all.runs[1], ElementsAreArray(*w0));
  EXPECT_THAT(all.runs[2], ElementsAreArray(*w1));

  Recorder one;
  ContainerOptions options;
  options.snapshot = 1;
  ASSERT_THAT(DecodeContainer(path, options, one), IsOk());
  std::remove(path.c_str());
  ASSERT_THAT(one.streams, SizeIs(1));
  EXPECT_EQ(one.streams[0].name, "cpu 0 snapshot 1");
  EXPECT_THAT(one.runs[1], ElementsAreArray(*w1));
}

TEST(ContainerSwitchTest, AContextSwitchBetweenTwoProcessesSwitchesImages) {
  // One CPU runs process 100 (tiny.elf) then process 200 (golden.elf), both at 0x401000: only
  // the right image per task gives the walked instructions.
  const std::string golden = std::string(PTKIT_DECODER_TEST_BINARY_DIR) + "/golden.elf";
  auto tiny = ElfCode::Load(kTiny);
  auto gold = ElfCode::Load(golden);
  ASSERT_THAT(tiny, IsOk());
  ASSERT_THAT(gold, IsOk());
  ASSERT_EQ(tiny->Symbol("leaf").address & ~0xfffull, 0x401000u);
  ASSERT_EQ(gold->Symbol("_start").address, 0x401000u);
  PtSynth synth_a(*tiny), synth_b(*gold);
  auto a = synth_a.AddSegment(
      {.entry = tiny->Symbol("work").address, .seed = 21, .max_insns = 1000, .tsc = 1000});
  auto b = synth_b.AddSegment(
      {.entry = gold->Symbol("_start").address, .seed = 7, .max_insns = 200, .tsc = 3000});
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  std::vector<uint8_t> trace = synth_a.bytes(), tb = synth_b.bytes();
  trace.insert(trace.end(), tb.begin(), tb.end());

  const std::string path = ::ptkit::decoder::testing::TempPath("decoder_container_switch.pt");
  WriterOptions options;
  options.overwrite = true;
  auto writer = ContainerWriter::Create(path, options);
  ASSERT_THAT(writer, IsOk());
  nlohmann::json metadata = {
      {"attrs",
       {{{"name", "intel_pt"}, {"sample_type", kLayout.sample_type}, {"sample_id_all", true}}}},
      // perf time == TSC
      {"time_conversion",
       {{"cap_user_time_zero", true}, {"time_zero", 0}, {"time_mult", 1}, {"time_shift", 0}}}};
  ASSERT_THAT((*writer)->AppendMetadata(metadata.dump()), IsOk());
  std::vector<uint8_t> sb;
  auto add = [&](const std::vector<uint8_t>& r) { sb.insert(sb.end(), r.begin(), r.end()); };
  auto mmap = [&](uint32_t pid, const ElfCode& code, const std::string& file) {
    perf::Mmap2 m;
    m.pid = m.tid = pid;
    m.addr = 0x401000;
    m.len = 0x1000;
    m.pgoff = code.FileOffset(0x401000);
    m.prot = 5;
    m.filename = file;
    m.sample_id = Id(pid, pid, 5, 0);
    add(perf::EncodeMmap2(m, kLayout));
  };
  mmap(100, *tiny, kTiny);
  mmap(200, *gold, golden);
  perf::ItraceStart start;
  start.pid = start.tid = 100;
  start.sample_id = Id(100, 100, 10, 0);
  add(perf::EncodeItraceStart(start, kLayout));
  perf::Switch out;
  out.out = true;
  out.cpu_wide = true;
  out.next_prev_pid = out.next_prev_tid = 200;
  out.sample_id = Id(100, 100, 2000, 0);
  add(perf::EncodeSwitch(out, kLayout));
  perf::Switch in;
  in.cpu_wide = true;
  in.next_prev_pid = in.next_prev_tid = 100;
  in.sample_id = Id(200, 200, 2000, 0);
  add(perf::EncodeSwitch(in, kLayout));
  ASSERT_THAT((*writer)->AppendSideband({0, sb}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({{StreamKind::kCpu, 0}, 0, 0, 20, trace}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());

  Recorder rec;
  auto totals = DecodeContainer(path, {}, rec);
  std::remove(path.c_str());
  ASSERT_THAT(totals, IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  ASSERT_THAT(rec.streams, SizeIs(2));
  EXPECT_EQ(rec.streams[0].pid, 100u);
  EXPECT_FALSE(rec.streams[0].context_switch);
  EXPECT_EQ(rec.streams[1].pid, 200u);
  EXPECT_TRUE(rec.streams[1].context_switch);
  ASSERT_THAT(rec.runs, SizeIs(3));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(*a));
  EXPECT_THAT(rec.runs[2], ElementsAreArray(*b));
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
  WriterOptions wo;
  wo.overwrite = true;
  auto writer = ContainerWriter::Create(path, wo);
  ASSERT_THAT(writer, IsOk());
  nlohmann::json metadata = {
      {"attrs",
       {{{"name", "intel_pt"}, {"sample_type", kLayout.sample_type}, {"sample_id_all", true}}}}};
  ASSERT_THAT((*writer)->AppendMetadata(metadata.dump()), IsOk());
  const uint64_t text = code_->Symbol("leaf").address & ~0xfffull;
  const std::vector<uint8_t> recorded_id = {0xde, 0xad, 0xbe, 0xef, 1,  2,  3,  4,  5,  6,
                                            7,    8,    9,    10,   11, 12, 13, 14, 15, 16};
  perf::Mmap2 m;
  m.pid = m.tid = 300;
  m.addr = text;
  m.len = 0x1000;
  m.pgoff = code_->FileOffset(text);
  m.prot = 5;
  m.filename = kTiny;
  m.build_id = recorded_id;
  m.sample_id = Id(300, 300, 6, 0);
  ASSERT_THAT((*writer)->AppendSideband({-1, perf::EncodeMmap2(m, kLayout)}), IsOk());
  ASSERT_THAT((*writer)->AppendAux({{StreamKind::kThread, 300}, 0, 0, 10, bytes_a_}), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
  Recorder rec;
  auto totals = DecodeContainer(path, {}, rec);
  std::remove(path.c_str());
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(totals->warnings, SizeIs(1));
  EXPECT_THAT(totals->warnings[0], ::testing::HasSubstr(kTiny));
  EXPECT_THAT(totals->warnings[0], ::testing::HasSubstr("deadbeef0102"));
  // It still decodes with the file it has.
  EXPECT_THAT(rec.runs[1], ElementsAreArray(truth_a_));

  Recorder clean;  // the fixture's recording has no build-ids: no warning
  auto ok = DecodeContainer(path_, {}, clean);
  ASSERT_THAT(ok, IsOk());
  EXPECT_THAT(ok->warnings, SizeIs(0));
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
  TraceConfig c = TraceConfigFromMetadata(metadata);
  ASSERT_TRUE(c.cpu.has_value());
  EXPECT_EQ(c.cpu->model, 61);
  EXPECT_EQ(c.mtc_freq, 5);
  EXPECT_EQ(c.nom_freq, 24);
  EXPECT_EQ(c.cpuid_0x15_eax, 2u);
  EXPECT_EQ(c.cpuid_0x15_ebx, 84u);
  metadata["cpu"]["vendor"] = "AuthenticAMD";
  EXPECT_FALSE(TraceConfigFromMetadata(metadata).cpu.has_value());
}

TEST(ContainerInput, NotAContainerIsAnError) {
  Recorder rec;
  EXPECT_THAT(DecodeContainer(kTiny, {}, rec), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(DecodeContainer(kTiny + ".missing", {}, rec).ok());
}

}  // namespace
}  // namespace ptkit::decoder
