// `ptdecode samples` on containers written here: samples whose snippet cannot be synchronised
// are counted and said, malformed sample records are counted, a recording without samples
// says how to get them. (Snippets decoded against real code and the recorder's ground truth:
// tests/e2e/aux_sample_cli_test.cc.)
#include "decoder/samples.h"

#include <cstdio>

#include "decoder/container_input.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/aux_sample.h"
#include "ptkit/container_writer.h"
#include "ptkit/status.h"
#include "status_matchers.h"
#include "temp_dir.h"
#include "test_container.h"
#include "test_io.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_AUX;

class SamplesTest : public ::testing::Test {
 protected:
  // A container with the given sample records (perf record bytes, sample_type).
  std::string Write(const std::vector<std::pair<std::vector<uint8_t>, uint64_t>>& samples) {
    std::string path = dir_.File("trace.pt");
    auto writer = ::ptkit::testing::NewContainer(path, {R"({"tool":"samples_test"})"});
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (const auto& [record, type] : samples) {
      EXPECT_TRUE(
          (*writer)
              ->AppendSample(SampleRecord{
                  .stream = {StreamKind::kThread, 7}, .sample_type = type, .record = record})
              .ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
    return path;
  }
  absl::StatusOr<SamplesTotals> Print(const std::string& path, bool json, std::string& text) {
    PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, RecordingOptions{}));
    std::FILE* out = std::tmpfile();
    absl::StatusOr<SamplesTotals> t =
        PrintSamples(r, RecordingOptions{}, SamplesOptions{.json = json}, out);
    text = testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    return t;
  }
  ::ptkit::testing::TempDir dir_;
};

TEST_F(SamplesTest, SnippetWithoutPsbIsCountedAndSaid) {
  const std::vector<uint8_t> zeros(256, 0);  // PAD packets only: nowhere to synchronise
  const std::vector<uint8_t> rec = perf::EncodeSample(
      perf::Sample{.ip = 0x401000, .pid = 7, .tid = 7, .time = 5, .aux = zeros}, kType);
  // A record that says RAW, which ptkit does not read: malformed.
  const std::string path = Write({{rec, kType}, {rec, kType | PERF_SAMPLE_RAW}});
  std::string text;
  PTKIT_ASSERT_OK_AND_ASSIGN(SamplesTotals t, Print(path, false, text));
  EXPECT_EQ(t.samples, 1u);
  EXPECT_EQ(t.unsynced, 1u);
  EXPECT_EQ(t.malformed, 1u);
  EXPECT_THAT(text, HasSubstr("sample time 5 cpu - pid 7 tid 7 ip 0x0000000000401000"));
  EXPECT_THAT(text, HasSubstr("snippet of 256 bytes: no PSB to synchronise at"));
  EXPECT_THAT(text, HasSubstr("1 samples: 0 decoded to the sampled IP, 1 could not be "
                              "synchronised"));
  EXPECT_THAT(text, HasSubstr("1 malformed (skipped)"));

  PTKIT_ASSERT_OK_AND_ASSIGN(t, Print(path, true, text));
  nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_EQ(j["samples"].size(), 1u);
  EXPECT_EQ(j["samples"][0]["ip"], 0x401000);
  EXPECT_EQ(j["samples"][0]["cpu"], nullptr);
  EXPECT_EQ(j["samples"][0]["synced"], false);
  EXPECT_EQ(j["samples"][0]["snippet_bytes"], 256);
  EXPECT_EQ(j["totals"]["unsynced"], 1);
  EXPECT_EQ(j["totals"]["malformed"], 1);
}

// ptrecord -g: the kernel's call chain of each sample, innermost first, without its context
// markers, in text and JSON.
TEST_F(SamplesTest, TheCallchainIsShown) {
  const std::vector<uint8_t> zeros(64, 0);
  const uint64_t type = kType | PERF_SAMPLE_CALLCHAIN;
  const std::vector<uint8_t> rec = perf::EncodeSample(
      perf::Sample{.ip = 0x401000,
                   .pid = 7,
                   .tid = 7,
                   .time = 5,
                   .callchain = {static_cast<uint64_t>(PERF_CONTEXT_USER), 0x401000, 0x402abc},
                   .aux = zeros},
      type);
  const std::string path = Write({{rec, type}});
  std::string text;
  PTKIT_ASSERT_OK_AND_ASSIGN(SamplesTotals t, Print(path, false, text));
  EXPECT_EQ(t.malformed, 0u);
  const size_t at = text.find("\n  callchain: 0x401000 ");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  EXPECT_THAT(line, HasSubstr(" 0x402abc ")) << line;
  EXPECT_EQ(line.find("0xfffffffffffffe00"), std::string::npos) << "the context marker";
  PTKIT_ASSERT_OK_AND_ASSIGN(t, Print(path, true, text));
  nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_EQ(j["samples"].size(), 1u);
  ASSERT_EQ(j["samples"][0]["callchain"].size(), 2u) << text;
  EXPECT_EQ(j["samples"][0]["callchain"][0]["ip"], 0x401000);
  EXPECT_EQ(j["samples"][0]["callchain"][1]["ip"], 0x402abc);
}

TEST_F(SamplesTest, NoSamplesSaysHowToRecordThem) {
  const std::string path = Write({});
  std::string text;
  EXPECT_THAT(Print(path, false, text),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ptrecord --aux-sample")));
}

}  // namespace
}  // namespace ptkit::decoder
