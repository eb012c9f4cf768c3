// Real hardware traces (../shared/testdata/libxdc-experiments): ptkit must report exactly what
// libipt 2.0.5 reports (README table there). Skips when the folder is absent.
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "decoder/decode.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "status_matchers.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;

struct RealTrace {
  const char* name;
  uint64_t instructions;
  uint64_t blocks;
};

class RealTraceTest : public ::testing::TestWithParam<RealTrace> {
 protected:
  void SetUp() override {
    dir_ =
        std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments/" + GetParam().name;
    struct stat st;
    if (stat((dir_ + "/trace").c_str(), &st) != 0) {
      GTEST_SKIP() << dir_ << "/trace is absent (the shared test data is not part of the repo)";
    }
    RawInputSpec spec;
    spec.pt_path = dir_ + "/trace";
    spec.page_dumps.push_back(ParsePageDumpSpec(dir_));
    auto input = LoadRawInput(spec);
    ASSERT_THAT(input, IsOk());
    input_ = std::make_unique<RawInput>(std::move(*input));
  }
  std::string dir_;
  std::unique_ptr<RawInput> input_;
};

TEST_P(RealTraceTest, BlockDecoderMatchesLibiptTable) {
  CountSink sink(DecoderKind::kBlock);
  auto totals = DecodeTrace(input_->trace.bytes(), input_->config, *input_->image, sink);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(sink.instructions(), GetParam().instructions);
  EXPECT_EQ(sink.blocks(), GetParam().blocks);
  EXPECT_EQ(totals->instructions, GetParam().instructions);
  EXPECT_EQ(totals->blocks, GetParam().blocks);
  EXPECT_EQ(totals->errors, 0u);
  EXPECT_TRUE(totals->errors_by_code.empty());
}

TEST_P(RealTraceTest, InstructionDecoderMatchesLibiptTable) {
  CountSink sink(DecoderKind::kInsn);
  auto totals = DecodeTrace(input_->trace.bytes(), input_->config, *input_->image, sink);
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(sink.instructions(), GetParam().instructions);
  EXPECT_EQ(totals->errors, 0u);
}

TEST_P(RealTraceTest, StatsAccountForEveryInstruction) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  OutputOptions options;
  options.json = true;
  auto sink = MakeStatsSink(*input_->image, out, options);
  ASSERT_THAT(DecodeTrace(input_->trace.bytes(), input_->config, *input_->image, *sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  EXPECT_EQ(std::fclose(out), 0);
  auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["schema"], "ptkit-stats/1");
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), GetParam().instructions);
  EXPECT_EQ(doc["totals"]["errors"].get<uint64_t>(), 0u);
  uint64_t self = 0, image_total = 0;
  for (const auto& fn : doc["functions"]) {
    self += fn["self"].get<uint64_t>();
    EXPECT_GE(fn["inclusive"].get<uint64_t>(), fn["self"].get<uint64_t>()) << fn.dump();
  }
  for (const auto& img : doc["images"]) image_total += img["instructions"].get<uint64_t>();
  EXPECT_EQ(self, GetParam().instructions);
  EXPECT_EQ(image_total, GetParam().instructions);
  // Calls balance returns in these traces except for frames still open at the end.
  EXPECT_GE(doc["totals"]["calls"].get<uint64_t>(), doc["totals"]["returns"].get<uint64_t>());
}

INSTANTIATE_TEST_SUITE_P(Libxdc, RealTraceTest,
                         ::testing::Values(RealTrace{"Unzip", 149576, 46230},
                                           RealTrace{"foo", 117967, 25350}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ptkit::decoder
