#include "record/swpt/synth_container.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::swpt {
namespace {

using ::ptkit::testing::IsOk;

TEST(SwptSynthContainerTest, WritesMetadataSidebandAndTheWholeTrace) {
  const std::string elf = std::string(PTKIT_SWPT_PROGRAM_DIR) + "/sorts_O2_pie";
  PTKIT_ASSERT_OK_AND_ASSIGN(Synthesizer synth, Synthesizer::Create(elf));
  SynthOptions options;
  options.max_insns = 200000;
  options.seed = 11;
  options.pt.tsc = true;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  const std::string path =
      ::testing::TempDir() + "/swpt_container_" + std::to_string(getpid()) + ".pt";
  SynthContainerOptions copts;
  copts.aux_chunk = 4096;  // Several AUX records.
  ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r, copts), IsOk());

  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(path));
  RecordView view;
  nlohmann::json meta;
  std::vector<uint8_t> aux;
  std::vector<uint32_t> sideband_types;
  uint64_t mmap_addr = 0, aux_records = 0;
  std::string mmap_file;
  for (;;) {
    PTKIT_ASSERT_OK_AND_ASSIGN(bool more, reader.Next(view));
    if (!more) break;
    if (view.type == RecordType::kMetadata) {
      meta = nlohmann::json::parse(view.payload.begin(), view.payload.end());
    } else if (view.type == RecordType::kAux) {
      PTKIT_ASSERT_OK_AND_ASSIGN(AuxRecord a, ParseAux(view.payload));
      EXPECT_EQ(a.stream.kind, StreamKind::kThread);
      EXPECT_EQ(a.stream.id, copts.tid);
      EXPECT_EQ(a.aux_offset, aux.size());
      aux.insert(aux.end(), a.data.begin(), a.data.end());
      ++aux_records;
    } else if (view.type == RecordType::kSideband) {
      PTKIT_ASSERT_OK_AND_ASSIGN(SidebandRecord sb, ParseSideband(view.payload));
      EXPECT_EQ(sb.cpu, -1);
      for (size_t off = 0; off + sizeof(perf_event_header) <= sb.records.size();) {
        perf_event_header h;
        std::memcpy(&h, sb.records.data() + off, sizeof(h));
        ASSERT_GE(h.size, sizeof(h));
        ASSERT_EQ(h.size % 8, 0);
        sideband_types.push_back(h.type);
        if (h.type == PERF_RECORD_MMAP2) {
          std::memcpy(&mmap_addr, sb.records.data() + off + sizeof(h) + 8, 8);
          mmap_file = reinterpret_cast<const char*>(sb.records.data() + off + sizeof(h) + 64);
        }
        off += h.size;
      }
    }
  }
  EXPECT_EQ(aux, r.pt);
  EXPECT_EQ(aux_records, (r.pt.size() + 4095) / 4096);
  EXPECT_EQ(meta["emulated"], "synthesized");
  EXPECT_EQ(meta["mode"], "full-trace");
  EXPECT_EQ(meta["pmu"]["name"], "intel_pt");
  EXPECT_EQ(meta["synthesizer"]["insns"], r.insns);
  // The intel_pt attr says what the encoder did: pt, branch, tsc, psb_period 0, retcomp on.
  uint64_t config = meta["attrs"][0]["config"];
  EXPECT_EQ(config & ((1u << 0) | (1u << 10) | (1u << 11) | (1u << 13)),
            (1u << 0) | (1u << 10) | (1u << 13));
  ASSERT_GE(sideband_types.size(), 5u);
  EXPECT_EQ(sideband_types[0], PERF_RECORD_COMM);
  EXPECT_EQ(sideband_types[1], PERF_RECORD_MMAP2);
  EXPECT_EQ(sideband_types[2], PERF_RECORD_ITRACE_START);
  EXPECT_EQ(sideband_types.back(), PERF_RECORD_EXIT);
  EXPECT_EQ(mmap_addr, synth.image().exec_base());
  EXPECT_EQ(mmap_file.front(), '/');
  EXPECT_FALSE(reader.report().lost_bytes());
  unlink(path.c_str());
}

TEST(SwptSynthContainerTest, BtsRecording) {
  const std::string elf = std::string(PTKIT_SWPT_PROGRAM_DIR) + "/interp_O0_nopie";
  PTKIT_ASSERT_OK_AND_ASSIGN(Synthesizer synth, Synthesizer::Create(elf));
  SynthOptions options;
  options.max_insns = 20000;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult no_bts, synth.Walk(options));
  const std::string path = ::testing::TempDir() + "/swpt_bts_" + std::to_string(getpid()) + ".pt";
  SynthContainerOptions copts;
  copts.bts = true;
  EXPECT_THAT(WriteSynthContainer(path, synth.image(), options, no_bts, copts),
              ::ptkit::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  options.bts = true;
  PTKIT_ASSERT_OK_AND_ASSIGN(SynthResult r, synth.Walk(options));
  ASSERT_FALSE(r.bts.empty());
  ASSERT_THAT(WriteSynthContainer(path, synth.image(), options, r, copts), IsOk());
  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(path));
  RecordView view;
  std::vector<uint8_t> aux;
  nlohmann::json meta;
  for (;;) {
    PTKIT_ASSERT_OK_AND_ASSIGN(bool more, reader.Next(view));
    if (!more) break;
    if (view.type == RecordType::kMetadata) {
      meta = nlohmann::json::parse(view.payload.begin(), view.payload.end());
    } else if (view.type == RecordType::kAux) {
      PTKIT_ASSERT_OK_AND_ASSIGN(AuxRecord a, ParseAux(view.payload));
      aux.insert(aux.end(), a.data.begin(), a.data.end());
    }
  }
  EXPECT_EQ(aux, r.bts);
  EXPECT_EQ(meta["pmu"]["name"], "intel_bts");
  EXPECT_EQ(meta["attrs"][0]["name"], "intel_bts");
  unlink(path.c_str());
}

}  // namespace
}  // namespace ptkit::swpt
