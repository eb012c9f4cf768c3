// Golden outputs of every ptdecode output form on a small trace of tests/data/decoder/golden.S
// (three PSB segments; the second has a corrupt packet, so error markers are covered too).
// Regenerate after an intended format change with PTKIT_UPDATE_GOLDEN=1 and review the diff.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/packets.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pt_synth.h"
#include "status_matchers.h"
#include "test_io.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::ReadAll;
using ::ptkit::testing::IsOk;

const std::string kGoldenDir = std::string(PTKIT_SOURCE_DIR) + "/tests/data/decoder/golden/";

struct GoldenCase {
  const char* name;  // file under tests/data/decoder/golden/
  std::function<std::unique_ptr<Sink>(const ProgramImage&, std::FILE*, const OutputOptions&)>
      make;  // null: packets
  bool json;
  bool disasm;
};

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {
 protected:
  static void SetUpTestSuite() {
    // Relative paths keep the build directory out of the outputs.
    ASSERT_EQ(chdir(PTKIT_DECODER_TEST_BINARY_DIR), 0);
    auto code = ElfCode::Load("golden.elf");
    ASSERT_THAT(code, IsOk());
    PtSynth synth(*code);
    ASSERT_THAT(
        synth.AddSegment({.entry = code->Symbol("_start").address, .seed = 7, .max_insns = 200}),
        IsOk());
    ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("main").address,
                                  .seed = 1,
                                  .max_insns = 200,
                                  .corrupt_at_branch = 1}),
                IsOk());
    ASSERT_THAT(synth.AddSegment(
                    {.entry = code->Symbol("_ZN4demo4stepEi").address, .seed = 3, .max_insns = 50}),
                IsOk());
    trace_ = new std::vector<uint8_t>(synth.bytes());
  }
  static void TearDownTestSuite() {
    delete trace_;
    trace_ = nullptr;
  }
  static std::vector<uint8_t>* trace_;
};
std::vector<uint8_t>* GoldenTest::trace_ = nullptr;

TEST_P(GoldenTest, MatchesCheckedInOutput) {
  ASSERT_NE(trace_, nullptr);
  const GoldenCase& c = GetParam();
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  ASSERT_THAT((*image)->AddElf({"golden.elf", 0}), IsOk());
  OutputOptions options;
  options.json = c.json;
  options.disasm = c.disasm;
  options.trace_name = "golden.pt";
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  if (c.make) {
    auto sink = c.make(**image, out, options);
    ASSERT_THAT(DecodeTrace(*trace_, {}, **image, *sink), IsOk());
  } else {
    ASSERT_THAT(DumpPackets(*trace_, {}, out, options), IsOk());
  }
  std::string actual = ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  ASSERT_FALSE(actual.empty());

  const std::string path = kGoldenDir + c.name;
  if (const char* update = std::getenv("PTKIT_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "updated " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; run with PTKIT_UPDATE_GOLDEN=1 to create it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "output differs from " << path;
}

INSTANTIATE_TEST_SUITE_P(
    AllForms, GoldenTest,
    ::testing::Values(GoldenCase{"insn.txt", MakeInsnSink, false, false},
                      GoldenCase{"insn_disasm.txt", MakeInsnSink, false, true},
                      GoldenCase{"insn.jsonl", MakeInsnSink, true, true},
                      GoldenCase{"branches.txt", MakeBranchesSink, false, false},
                      GoldenCase{"branches.jsonl", MakeBranchesSink, true, false},
                      GoldenCase{"calls.txt", MakeCallsSink, false, false},
                      GoldenCase{"calls.jsonl", MakeCallsSink, true, false},
                      GoldenCase{"stats.txt", MakeStatsSink, false, false},
                      GoldenCase{"stats.json", MakeStatsSink, true, false},
                      GoldenCase{"folded.txt", MakeFoldedSink, false, false},
                      GoldenCase{"timeline.json", MakeTimelineSink, true, false},
                      GoldenCase{"packets.txt", nullptr, false, false},
                      GoldenCase{"packets.jsonl", nullptr, true, false}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (ch == '.') ch = '_';
      }
      return name;
    });

// --disasm formats each instruction once and gives the text again where the same instruction
// runs again: the same address with other bytes (another program, code written at run time),
// the same bytes in another mode, and a relative branch's bytes at another address must each
// get their own text.
TEST(InsnDisasmTest, EachInstructionHasTheTextOfItsOwnAddressModeAndBytes) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  OutputOptions options;
  options.disasm = true;
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto sink = MakeInsnSink(**image, out, options);
  auto insn = [](uint64_t ip, pt_exec_mode mode, std::initializer_list<uint8_t> bytes) {
    pt_insn i = {};
    i.ip = ip;
    i.mode = mode;
    i.iclass = ptic_other;
    i.size = static_cast<uint8_t>(bytes.size());
    std::copy(bytes.begin(), bytes.end(), i.raw);
    return i;
  };
  for (const pt_insn& i :
       {insn(0x1000, ptem_64bit, {0x90}), insn(0x1000, ptem_64bit, {0xc3}),
        insn(0x1000, ptem_32bit, {0x48}), insn(0x1000, ptem_64bit, {0x90}),
        insn(0x2000, ptem_64bit, {0xeb, 0xfe}), insn(0x3000, ptem_64bit, {0xeb, 0xfe}),
        insn(0x2000, ptem_64bit, {0xeb, 0xfe})}) {
    sink->OnInsn(i);
  }
  ASSERT_THAT(sink->Finish({}), IsOk());
  std::vector<std::string> lines;
  std::istringstream text(ReadAll(out));
  EXPECT_EQ(std::fclose(out), 0);
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  using ::testing::EndsWith;
  EXPECT_THAT(lines,
              ::testing::ElementsAre(EndsWith("  nop"), EndsWith("  ret"), EndsWith("  dec eax"),
                                     EndsWith("  nop"), EndsWith("  jmp 0x0000000000002000"),
                                     EndsWith("  jmp 0x0000000000003000"),
                                     EndsWith("  jmp 0x0000000000002000")));
}

}  // namespace
}  // namespace ptkit::decoder
