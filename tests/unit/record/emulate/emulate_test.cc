// ptrecord --emulate's backend end to end: a real program is stepped, its software PT goes
// through the simulated AUX ring and the Drainer into a container together with the kernel's
// real sideband; ptkit's decoder then gives exactly the ground-truth instructions per thread.
#include "record/emulate/emulate.h"

#include <filesystem>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "gmock/gmock.h"
#include "ground_truth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::emulate {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::ReadTruth;
using ::testing::Contains;
using ::testing::HasSubstr;

std::string Program(const std::string& name) {
  return std::string(EMULATE_PROGRAM_DIR) + "/emulate_" + name;
}

struct Recording {  // NOLINT(bugprone-exception-escape): ~json may allocate, nothing else throws
  nlohmann::json metadata;
  std::map<uint64_t, std::vector<uint8_t>> aux;  // tid -> trace bytes
  std::vector<std::string> sideband;             // perf record type names, in file order
  std::vector<std::string> mmap_files;
  bool clean = false;
};

Recording Load(const std::string& path) {
  Recording r;
  auto reader = ContainerReader::Open(path);
  EXPECT_THAT(reader, IsOk());
  if (!reader.ok()) return r;
  RecordView v;
  while (*reader->Next(v)) {
    if (v.type == RecordType::kMetadata) {
      r.metadata = nlohmann::json::parse(v.payload.begin(), v.payload.end());
    } else if (v.type == RecordType::kAux) {
      auto a = ParseAux(v.payload);
      EXPECT_THAT(a, IsOk());
      EXPECT_EQ(a->stream.kind, StreamKind::kThread);
      auto& bytes = r.aux[a->stream.id];
      EXPECT_EQ(a->aux_offset, bytes.size()) << "AUX records are contiguous, nothing lost";
      bytes.insert(bytes.end(), a->data.begin(), a->data.end());
    } else if (v.type == RecordType::kSideband) {
      auto sb = ParseSideband(v.payload);
      EXPECT_THAT(sb, IsOk());
      perf::RecordReader rr(sb->records);
      while (true) {
        auto rec = rr.Next();
        EXPECT_THAT(rec, IsOk());
        if (!rec.ok() || !rec->has_value()) break;
        r.sideband.push_back(perf::RecordTypeName((*rec)->type));
        if ((*rec)->type == PERF_RECORD_MMAP2) {
          auto m = perf::ParseMmap2(**rec, {});
          r.mmap_files.push_back(std::string(m->filename));
        }
      }
    }
  }
  r.clean = reader->report().clean();
  return r;
}

class CollectIps : public decoder::Sink {
 public:
  decoder::DecoderKind kind() const override { return decoder::DecoderKind::kInsn; }
  void OnInsn(const pt_insn& insn) override { ips.push_back(insn.ip); }
  void OnError(const decoder::DecodeError& e) override { ++errors; }
  std::vector<uint64_t> ips;
  int errors = 0;
};

TEST(EmulateTest, RecordsAndDecodesExactlyWhatEachThreadRan) {
  ::ptkit::testing::TempDir dir;
  EmulateOptions o;
  o.argv = {Program("threads")};
  o.output = dir.File("t.pt");
  o.ground_truth = dir.File("truth.txt");
  o.aux_pages = 4;  // 16 KiB: the trace wraps the simulated ring many times
  auto r = RecordEmulated(o);
  if (r.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << r.status();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->threads, 3u);
  EXPECT_EQ(r->totals.truncated, 0u);
  EXPECT_EQ(r->totals.lost_records, 0u);

  Recording rec = Load(o.output);
  EXPECT_TRUE(rec.clean);
  EXPECT_EQ(rec.metadata["emulated"], "step");
  // Real kernel sideband for the workload.
  EXPECT_THAT(rec.sideband, Contains("comm"));
  EXPECT_THAT(rec.sideband, Contains("exit"));
  EXPECT_THAT(rec.sideband, Contains("fork"));
  EXPECT_THAT(rec.mmap_files, Contains(HasSubstr("emulate_threads")));

  auto truth = ReadTruth(o.ground_truth);
  ASSERT_EQ(truth.size(), 3u);
  ASSERT_EQ(rec.aux.size(), 3u);
  auto image = decoder::ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  ASSERT_THAT((*image)->AddElf({Program("threads"), 0}), IsOk());
  for (auto& [tid, bytes] : rec.aux) {
    SCOPED_TRACE(::testing::Message() << "tid " << tid);
    CollectIps sink;
    auto totals = decoder::DecodeTrace(bytes, {}, **image, sink);
    ASSERT_THAT(totals, IsOk());
    EXPECT_EQ(sink.errors, 0);
    ASSERT_EQ(sink.ips.size(), truth[tid].size());
    EXPECT_TRUE(sink.ips == truth[tid]);
  }
}

TEST(EmulateTest, BtsRecordsAreTheTakenBranchesOfTheGroundTruthInOrder) {
  ::ptkit::testing::TempDir dir;
  EmulateOptions o;
  o.argv = {Program("fib")};
  o.output = dir.File("bts.pt");
  o.ground_truth = dir.File("truth.txt");
  o.bts = true;
  auto r = RecordEmulated(o);
  if (r.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << r.status();
  ASSERT_THAT(r, IsOk());
  Recording rec = Load(o.output);
  EXPECT_EQ(rec.metadata["emulation"]["format"], "bts");
  auto truth = ReadTruth(o.ground_truth);
  ASSERT_EQ(rec.aux.size(), 1u);
  const std::vector<uint64_t>& ips = truth.begin()->second;
  const std::vector<uint8_t>& bytes = rec.aux.begin()->second;
  ASSERT_EQ(bytes.size() % 24, 0u);
  auto records = swpt::BtsWriter::Parse(bytes.data(), bytes.size());
  ASSERT_FALSE(records.empty());
  // The first record enables at the entry; each later one is a transition of the ground truth
  // (or a syscall leaving user space, to 0), in order; no transition that skips more than
  // an instruction's length is missing.
  EXPECT_EQ(records[0].from, 0u);
  EXPECT_EQ(records[0].to, ips[0]);
  size_t next = 1;
  for (size_t i = 0; i + 1 < ips.size(); ++i) {
    bool jumped = ips[i + 1] <= ips[i] || ips[i + 1] - ips[i] > 15;
    bool covered = false;
    if (next < records.size() && records[next].from == ips[i]) {
      if (records[next].to == ips[i + 1]) {
        covered = true;
        ++next;
      } else if (records[next].to == 0 && next + 1 < records.size() &&
                 records[next + 1].from == 0 && records[next + 1].to == ips[i + 1]) {
        covered = true;  // a syscall: out of user space and back in
        next += 2;
      }
    }
    if (jumped) {
      ASSERT_TRUE(covered) << "transition " << i << ": 0x" << std::hex << ips[i] << " -> 0x"
                           << ips[i + 1];
    }
  }
  // The last instruction is the exit syscall: its {from, 0} is the last record.
  EXPECT_EQ(next + 1, records.size());
  EXPECT_EQ(records.back().from, ips.back());
  EXPECT_EQ(records.back().to, 0u);
}

// Collects instruction addresses per stream ("tid N") as DecodeContainer reports them.
class PerStreamIps : public decoder::Sink {
 public:
  decoder::DecoderKind kind() const override { return decoder::DecoderKind::kInsn; }
  void OnStream(const decoder::StreamInfo& s) override { current = &ips[s.name]; }
  void OnInsn(const pt_insn& insn) override { current->push_back(insn.ip); }
  void OnError(const decoder::DecodeError& e) override { ++errors; }
  void OnLoss(const decoder::LossInfo& l) override { ++losses; }
  std::map<std::string, std::vector<uint64_t>> ips;
  std::vector<uint64_t>* current = nullptr;
  int errors = 0, losses = 0;
};

TEST(EmulateTest, ADynamicProgramThatDlopensDecodesFromTheContainerAlone) {
  ::ptkit::testing::TempDir dir;
  EmulateOptions o;
  o.argv = {Program("dlopen"), std::string(EMULATE_PROGRAM_DIR) + "/libemulate_plugin.so"};
  o.output = dir.File("dl.pt");
  o.ground_truth = dir.File("truth.txt");
  auto r = RecordEmulated(o);
  if (r.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << r.status();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 0);
  Recording rec = Load(o.output);
  EXPECT_THAT(rec.mmap_files, Contains(HasSubstr("ld-linux")));
  EXPECT_THAT(rec.mmap_files, Contains(HasSubstr("libc.so")));
  EXPECT_THAT(rec.mmap_files, Contains(HasSubstr("libemulate_plugin.so")));

  // The decoder finds every image through the MMAP2 sideband: loader, libc, the dlopen()ed
  // library, the program.
  PerStreamIps sink;
  auto totals = decoder::DecodeContainer(o.output, {}, sink);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(sink.errors, 0);
  EXPECT_EQ(sink.losses, 0);
  auto truth = ReadTruth(o.ground_truth);
  ASSERT_EQ(truth.size(), 1u);
  const auto& [tid, expected] = *truth.begin();
  const std::vector<uint64_t>& got = sink.ips[absl::StrCat("tid ", tid)];
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
}

TEST(EmulateTest, AMissingProgramIsNotFoundAndLeavesNoHalfWrittenSurprise) {
  ::ptkit::testing::TempDir dir;
  EmulateOptions o;
  o.argv = {"/nonexistent/app"};
  o.output = dir.File("t.pt");
  EXPECT_THAT(RecordEmulated(o), ::ptkit::testing::StatusIs(absl::StatusCode::kNotFound,
                                                            HasSubstr("/nonexistent/app")));
  EXPECT_FALSE(std::filesystem::exists(o.output)) << "nothing ran, so no file is left";
}

}  // namespace
}  // namespace ptkit::emulate
