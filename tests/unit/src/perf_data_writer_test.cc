// perf.data writer, read back with ReadPerfData() (ptkit/perf_data.h, itself checked against
// perf 6.1 in perf_data_test): every attr, record, AUXTRACE and feature written is read back
// the same. perf 6.1 decoding the writer's files: tests/e2e/perf_export_cli_test.cc.
#include "ptkit/perf_data_writer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_data.h"
#include "ptkit/perf_records.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::perf {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

WriterEvent Event(uint32_t type, uint64_t config, std::vector<uint64_t> ids, std::string name) {
  WriterEvent e;
  e.attr.type = type;
  e.attr.config = config;
  e.attr.sample_type = kLayout.sample_type | PERF_SAMPLE_IP;
  e.attr.sample_id_all = 1;
  e.attr.exclude_kernel = 1;
  e.ids = std::move(ids);
  e.name = std::move(name);
  return e;
}

PerfData ReadBack(const std::string& path) {
  auto src = OpenFileSource(path);
  EXPECT_THAT(src.status(), IsOk());
  auto data = ReadPerfData(**src);
  EXPECT_THAT(data.status(), IsOk());
  return *std::move(data);
}

TEST(PerfDataWriterTest, WhatIsWrittenReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.File("out.data");
  PTKIT_ASSERT_OK_AND_ASSIGN(
      PerfDataWriter w, PerfDataWriter::Create(path, {Event(8, 0x2401, {42}, "intel_pt//u"),
                                                      Event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY,
                                                            {100, 101, 102}, "dummy:u")}));
  const AuxtraceInfo info{1, {8, 0, 1, 0, 1, 0x400, 0x800}};
  ASSERT_THAT(w.AddRecord(EncodeAuxtraceInfo(info)), IsOk());
  TimeConv conv;
  conv.time_shift = 10;
  conv.time_mult = 600;
  conv.time_zero = 12345;
  conv.time_cycles = 7;
  conv.time_mask = 0xffff;
  conv.cap_user_time_zero = true;
  ASSERT_THAT(w.AddRecord(EncodeTimeConv(conv)), IsOk());
  // More entries than one 64 KiB record holds: split in two.
  std::vector<IdIndexEntry> index;
  for (uint64_t i = 0; i < 3000; ++i) index.push_back({i + 1, i % 4, i % 4, ~uint64_t{0}});
  const std::vector<std::vector<uint8_t>> index_records = EncodeIdIndex(index);
  ASSERT_EQ(index_records.size(), 2u);
  for (const auto& r : index_records) ASSERT_THAT(w.AddRecord(r), IsOk());
  SampleId sid{.has_tid = true, .has_time = true, .has_id = true, .has_cpu = true};
  sid.pid = sid.tid = 77;
  sid.time = 1000;
  sid.id = 100;
  const std::vector<uint8_t> mmap = EncodeMmap2(Mmap2{.pid = 77,
                                                      .tid = 77,
                                                      .addr = 0x400000,
                                                      .len = 0x1000,
                                                      .prot = 5,
                                                      .filename = "/bin/x",
                                                      .sample_id = sid},
                                                kLayout);
  ASSERT_THAT(w.AddRecord(mmap), IsOk());
  ASSERT_THAT(w.AddRecord(EncodeFinishedRound()), IsOk());
  const std::vector<uint8_t> trace0 = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<uint8_t> trace1 = {0x02, 0x82, 0x02, 0x82};
  PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t at0, w.AddAuxtrace({.size = trace0.size(),
                                                          .offset = 4096,
                                                          .reference = 5,
                                                          .idx = 0,
                                                          .tid = 77,
                                                          .cpu = 0xffffffff}));
  PTKIT_ASSERT_OK_AND_ASSIGN(
      uint64_t at1, w.AddAuxtrace({.size = trace1.size(), .idx = 1, .tid = 78, .cpu = 0xffffffff}));
  // Filled out of order, the second first, the first in two parts.
  ASSERT_THAT(w.WriteAt(at1, trace1), IsOk());
  ASSERT_THAT(w.WriteAt(at0 + 4, std::span(trace0).subspan(4)), IsOk());
  ASSERT_THAT(w.WriteAt(at0, std::span(trace0).first(4)), IsOk());
  EXPECT_THAT(w.WriteAt(at1 + 1, trace1), StatusIs(absl::StatusCode::kInvalidArgument));
  PerfFeatures f;
  f.hostname = "host";
  f.osrelease = "6.1.0";
  f.version = "ptkit test";
  f.arch = "x86_64";
  f.nr_cpus_available = 4;
  f.nr_cpus_online = 3;
  f.cpuid = "GenuineIntel,6,85,4";
  f.cmdline = std::vector<std::string>{"ptrecord", "-e", "intel_pt//u", "--", "./a.out"};
  f.build_ids.push_back({-1, PERF_RECORD_MISC_USER, std::vector<uint8_t>(20, 0xab), "/bin/x"});
  f.build_ids.push_back({-1, PERF_RECORD_MISC_USER, {1, 2, 3, 4, 5, 6, 7, 8}, "[vdso]"});
  // Features kept as bytes go over those made here (NRCPUS), the tracepoint formats are
  // written; one the writer makes from what it wrote (the AUXTRACE index) is not replaced (a
  // review: a trace.pt's perf-feature record of id 18 gave perf a garbage index).
  f.kept = {{kFeatNrCpus, {8, 0, 0, 0, 6, 0, 0, 0}},
            {kFeatTracingData, {1, 2, 3}},
            {kFeatAuxtrace, std::vector<uint8_t>(24, 0xee)}};
  ASSERT_THAT(w.Finish(f), IsOk());

  const PerfData d = ReadBack(path);
  EXPECT_EQ(d.features.nr_cpus_available, 8u);
  EXPECT_EQ(d.features.nr_cpus_online, 6u);
  ASSERT_EQ(d.features.kept.size(), 2u);  // TRACING_DATA and NRCPUS, in bit order
  EXPECT_EQ(d.features.kept[0].id, kFeatTracingData);
  EXPECT_THAT(d.features.kept[0].bytes, ElementsAre(1, 2, 3));

  EXPECT_TRUE(d.clean()) << d.damage.front().reason;
  EXPECT_FALSE(d.pipe);
  ASSERT_EQ(d.attrs.size(), 2u);
  EXPECT_EQ(d.attrs[0].attr.type, 8u);
  EXPECT_EQ(d.attrs[0].attr.config, 0x2401u);
  EXPECT_EQ(d.attrs[0].size, kWrittenAttrSize);
  EXPECT_THAT(d.attrs[0].ids, ElementsAre(42));
  EXPECT_EQ(d.attrs[1].attr.config, uint64_t{PERF_COUNT_SW_DUMMY});
  EXPECT_THAT(d.attrs[1].ids, ElementsAre(100, 101, 102));
  // The MMAP2's sample id names the dummy event.
  std::vector<uint32_t> types;
  for (size_t i = 0; i < d.records.size(); ++i) types.push_back(d.records[i].type);
  EXPECT_THAT(types, ElementsAre(kRecordAuxtraceInfo, kRecordTimeConv, kRecordIdIndex,
                                 kRecordIdIndex, PERF_RECORD_MMAP2, kRecordFinishedRound,
                                 kRecordAuxtrace, kRecordAuxtrace));
  const RecordView m = d.View(4);
  EXPECT_THAT(std::vector<uint8_t>(m.bytes.begin(), m.bytes.end()), ElementsAreArray(mmap));
  ASSERT_NE(d.AttrOf(m), nullptr);
  EXPECT_EQ(d.AttrOf(m), &d.attrs[1]);

  ASSERT_EQ(d.auxtrace_info.size(), 1u);
  EXPECT_EQ(d.auxtrace_info[0].type, info.type);
  EXPECT_THAT(d.auxtrace_info[0].priv, ElementsAreArray(info.priv));
  ASSERT_TRUE(d.time_conv.has_value());
  EXPECT_EQ(d.time_conv->time_shift, 10u);
  EXPECT_EQ(d.time_conv->time_mult, 600u);
  EXPECT_EQ(d.time_conv->time_zero, 12345u);
  EXPECT_TRUE(d.time_conv->extended);
  EXPECT_EQ(d.time_conv->time_cycles, 7u);
  EXPECT_EQ(d.time_conv->time_mask, 0xffffu);
  EXPECT_TRUE(d.time_conv->cap_user_time_zero);
  EXPECT_FALSE(d.time_conv->cap_user_time_short);
  ASSERT_EQ(d.id_index.size(), index.size());
  for (size_t i = 0; i < index.size(); ++i) {
    EXPECT_EQ(d.id_index[i].id, index[i].id);
    EXPECT_EQ(d.id_index[i].idx, index[i].idx);
    EXPECT_EQ(d.id_index[i].cpu, index[i].cpu);
    EXPECT_EQ(d.id_index[i].tid, index[i].tid);
  }

  ASSERT_EQ(d.auxtrace.size(), 2u);
  EXPECT_EQ(d.auxtrace[0].offset, 4096u);
  EXPECT_EQ(d.auxtrace[0].reference, 5u);
  EXPECT_EQ(d.auxtrace[0].tid, 77u);
  EXPECT_EQ(d.auxtrace[0].cpu, 0xffffffffu);
  EXPECT_EQ(d.auxtrace[1].idx, 1u);
  EXPECT_EQ(d.auxtrace[1].data_offset, at1);
  auto src = OpenFileSource(path);
  ASSERT_THAT(src.status(), IsOk());
  EXPECT_THAT(*ReadAuxtraceData(**src, d.auxtrace[0]), ElementsAreArray(trace0));
  EXPECT_THAT(*ReadAuxtraceData(**src, d.auxtrace[1]), ElementsAreArray(trace1));
  // The index points at the AUXTRACE records, with their header size (as perf writes it).
  ASSERT_EQ(d.features.auxtrace_index.size(), 2u);
  EXPECT_EQ(d.features.auxtrace_index[0].file_offset, d.auxtrace[0].record_offset);
  EXPECT_EQ(d.features.auxtrace_index[1].file_offset, d.auxtrace[1].record_offset);
  EXPECT_EQ(d.features.auxtrace_index[0].size, 48u);

  EXPECT_EQ(d.features.hostname, "host");
  EXPECT_EQ(d.features.osrelease, "6.1.0");
  EXPECT_EQ(d.features.version, "ptkit test");
  EXPECT_EQ(d.features.arch, "x86_64");
  EXPECT_EQ(d.features.cpuid, "GenuineIntel,6,85,4");
  EXPECT_EQ(d.features.cmdline, f.cmdline);
  ASSERT_EQ(d.features.build_ids.size(), 2u);
  EXPECT_EQ(d.features.build_ids[0].filename, "/bin/x");
  EXPECT_EQ(d.features.build_ids[0].build_id, f.build_ids[0].build_id);
  EXPECT_EQ(d.features.build_ids[0].pid, -1);
  EXPECT_EQ(d.features.build_ids[1].filename, "[vdso]");
  EXPECT_EQ(d.features.build_ids[1].build_id, f.build_ids[1].build_id);
  EXPECT_THAT(
      d.features.present,
      ElementsAre(kFeatTracingData, kFeatBuildId, kFeatHostname, kFeatOsRelease, kFeatVersion,
                  kFeatArch, kFeatNrCpus, kFeatCpuId, kFeatCmdline, kFeatEventDesc, kFeatAuxtrace));
}

TEST(PerfDataWriterTest, UnfinishedFileIsNoPerfData) {
  testing::TempDir dir;
  const std::string path = dir.File("cut.data");
  {
    PTKIT_ASSERT_OK_AND_ASSIGN(PerfDataWriter w,
                               PerfDataWriter::Create(path, {Event(8, 1, {1}, "intel_pt//u")}));
    ASSERT_THAT(w.AddRecord(EncodeFinishedRound()), IsOk());
    PTKIT_ASSERT_OK_AND_ASSIGN(uint64_t at, w.AddAuxtrace({.size = 3}));
    (void)at;
  }  // no Finish: the header stays zeros
  auto src = OpenFileSource(path);
  ASSERT_THAT(src.status(), IsOk());
  EXPECT_THAT(ReadPerfData(**src).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PerfDataWriterTest, RejectsWhatIsNoRecord) {
  testing::TempDir dir;
  EXPECT_THAT(PerfDataWriter::Create(dir.File("x"), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  PTKIT_ASSERT_OK_AND_ASSIGN(PerfDataWriter w,
                             PerfDataWriter::Create(dir.File("y"), {Event(8, 1, {1}, "")}));
  std::vector<uint8_t> bad = EncodeFinishedRound();
  bad.push_back(0);  // one byte more than its header says
  EXPECT_THAT(w.AddRecord(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(w.AddRecord(std::vector<uint8_t>(4, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(w.WriteAt(0, std::vector<uint8_t>(1, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ptkit::perf
