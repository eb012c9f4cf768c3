// Decoding software-generated PT for a real compiled program (tests/data/decoder/tiny.c):
// the walk that produced the trace is the ground truth, instruction by instruction.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "decoder/decode.h"
#include "decoder/progress.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pt_synth.h"
#include "recording_sink.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::RecordingSink;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using ::ptkit::decoder::testing::kTiny;

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto code = ElfCode::Load(kTiny);
    ASSERT_THAT(code, IsOk());
    code_ = std::make_unique<ElfCode>(std::move(*code));
    work_ = code_->Symbol("work");
    leaf_ = code_->Symbol("leaf");
    fib_ = code_->Symbol("fib");
    collatz_ = code_->Symbol("collatz");
    ASSERT_NE(work_.address, 0u);
    ASSERT_NE(leaf_.address, 0u);
    ASSERT_NE(fib_.address, 0u);
    ASSERT_NE(collatz_.address, 0u);
  }
  std::unique_ptr<ProgramImage> ElfImage() {
    auto image = ProgramImage::Create();
    EXPECT_THAT(image, IsOk());
    EXPECT_THAT((*image)->AddElf({kTiny, 0}), IsOk());
    return std::move(*image);
  }
  std::unique_ptr<ElfCode> code_;
  ElfCode::Sym work_, leaf_, fib_, collatz_;
};

TEST_F(SynthTest, InstructionFlowIsExactForManySeeds) {
  auto image = ElfImage();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    PtSynth synth(*code_);
    auto truth = synth.AddSegment({.entry = work_.address, .seed = seed, .max_insns = 5000});
    ASSERT_THAT(truth, IsOk());
    std::vector<uint8_t> trace = synth.bytes();
    RecordingSink rec;
    auto totals = DecodeTrace(trace, {}, *image, rec);
    ASSERT_THAT(totals, IsOk());
    EXPECT_THAT(rec.errors, SizeIs(0)) << "seed " << seed;
    ASSERT_THAT(rec.runs, SizeIs(1));
    EXPECT_THAT(rec.runs[0], ElementsAreArray(*truth)) << "seed " << seed;

    CountSink blocks(DecoderKind::kBlock);
    ASSERT_THAT(DecodeTrace(trace, {}, *image, blocks), IsOk());
    EXPECT_EQ(blocks.instructions(), truth->size()) << "seed " << seed;
    EXPECT_EQ(blocks.errors(), 0u);
  }
}

TEST_F(SynthTest, StatsCountCallsAndInstructionsPerFunction) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  auto truth = synth.AddSegment({.entry = work_.address, .seed = 3, .max_insns = 20000});
  ASSERT_THAT(truth, IsOk());
  std::vector<uint8_t> trace = synth.bytes();
  std::FILE* out = std::tmpfile();
  OutputOptions options;
  options.json = true;
  auto sink = MakeStatsSink(*image, out, options);
  ASSERT_THAT(DecodeTrace(trace, {}, *image, *sink), IsOk());
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  EXPECT_EQ(std::fclose(out), 0);
  auto doc = nlohmann::json::parse(text);

  // Expected from the ground truth: instructions inside each symbol, entries of each callee.
  auto in = [&](const ElfCode::Sym& s, uint64_t ip) {
    return ip >= s.address && ip < s.address + s.size;
  };
  std::map<std::string, ElfCode::Sym> syms = {
      {"work", work_}, {"leaf", leaf_}, {"fib", fib_}, {"collatz", collatz_}};
  for (const auto& [name, sym_binding] : syms) {
    const ElfCode::Sym& sym = sym_binding;  // clang 14 cannot capture a structured binding
    uint64_t self =
        std::count_if(truth->begin(), truth->end(), [&](uint64_t ip) { return in(sym, ip); });
    uint64_t entries = std::count(truth->begin(), truth->end(), sym.address);
    const nlohmann::json* found = nullptr;
    for (const auto& fn : doc["functions"]) {
      if (fn["function"] == name) found = &fn;
    }
    if (self == 0) {
      EXPECT_EQ(found, nullptr) << name;
      continue;
    }
    ASSERT_NE(found, nullptr) << name;
    EXPECT_EQ((*found)["self"].get<uint64_t>(), self) << name;
    // work is the walk's entry (no call); the others are entered only through calls.
    EXPECT_EQ((*found)["calls"].get<uint64_t>(), name == "work" ? 0 : entries) << name;
  }
  EXPECT_EQ(doc["totals"]["instructions"].get<uint64_t>(), truth->size());
}

TEST_F(SynthTest, MissingCodeIsAGapNamingTheRangeAndDecodingResumesAtTheNextPsb) {
  // Image: tiny.elf's text without leaf(), as two raw ranges around it.
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  const uint64_t text = code_->Symbol("leaf").address;  // lowest function
  const uint64_t text_end = code_->Symbol("_start").address + code_->Symbol("_start").size;
  ASSERT_LT(text, text_end);
  const uint64_t leaf_end = leaf_.address + leaf_.size;
  if (leaf_.address > text) {
    ASSERT_THAT(
        (*image)->AddRaw({kTiny, code_->FileOffset(text), code_->FileOffset(leaf_.address), text}),
        IsOk());
  } else {
    // leaf() starts the text: map 16 (never executed) bytes right below it so the hole is
    // bounded on both sides.
    ASSERT_THAT((*image)->AddRaw({kTiny, 0, 16, leaf_.address - 16}), IsOk());
  }
  ASSERT_THAT(
      (*image)->AddRaw({kTiny, code_->FileOffset(leaf_end), code_->FileOffset(text_end), leaf_end}),
      IsOk());

  // The first seed whose walk reaches leaf() (deterministic: mt19937).
  uint32_t seed = 1;
  for (;; ++seed) {
    ASSERT_LT(seed, 100u) << "no walk reaches leaf()";
    PtSynth probe(*code_);
    auto walk = probe.AddSegment({.entry = work_.address, .seed = seed, .max_insns = 5000});
    ASSERT_THAT(walk, IsOk());
    if (std::find(walk->begin(), walk->end(), leaf_.address) != walk->end()) break;
  }
  PtSynth synth(*code_);
  auto first = synth.AddSegment({.entry = work_.address, .seed = seed, .max_insns = 5000});
  ASSERT_THAT(first, IsOk());
  auto leaf_at = std::find(first->begin(), first->end(), leaf_.address);
  ASSERT_NE(leaf_at, first->end());
  const uint64_t second_offset = synth.offset();
  auto second = synth.AddSegment({.entry = fib_.address, .seed = 9, .max_insns = 300});
  ASSERT_THAT(second, IsOk());
  ASSERT_EQ(std::count(second->begin(), second->end(), leaf_.address), 0);

  RecordingSink rec;
  auto totals = DecodeTrace(synth.bytes(), {}, **image, rec);
  ASSERT_THAT(totals, IsOk());
  ASSERT_THAT(rec.errors, SizeIs(1));
  const DecodeError& gap = rec.errors[0];
  EXPECT_TRUE(gap.is_gap());
  EXPECT_EQ(gap.ip, leaf_.address);
  EXPECT_EQ(gap.gap.begin, leaf_.address);
  EXPECT_EQ(gap.gap.end, leaf_end);
  EXPECT_LE(gap.offset, second_offset);
  EXPECT_EQ(totals->gaps, 1u);
  EXPECT_EQ(totals->errors_by_code.at(pte_nomap), 1u);
  ASSERT_THAT(rec.runs, SizeIs(2));
  EXPECT_THAT(rec.runs[0], ElementsAreArray(first->begin(), leaf_at));
  EXPECT_THAT(rec.runs[1], ElementsAreArray(*second));
}

TEST_F(SynthTest, DecodeErrorIsReportedAndTheDecoderResyncsAtTheNextPsb) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  auto bad = synth.AddSegment(
      {.entry = work_.address, .seed = 2, .max_insns = 5000, .corrupt_at_branch = 7});
  ASSERT_THAT(bad, IsOk());
  const uint64_t second_offset = synth.offset();
  auto good = synth.AddSegment({.entry = work_.address, .seed = 4, .max_insns = 3000});
  ASSERT_THAT(good, IsOk());

  for (DecoderKind kind : {DecoderKind::kInsn, DecoderKind::kBlock}) {
    RecordingSink rec;
    CountSink count(kind);
    Sink& sink = kind == DecoderKind::kInsn ? static_cast<Sink&>(rec) : count;
    auto totals = DecodeTrace(synth.bytes(), {}, *image, sink);
    ASSERT_THAT(totals, IsOk());
    EXPECT_EQ(totals->errors, 1u);
    EXPECT_EQ(totals->errors_by_code.count(pte_bad_query), 1u);
    EXPECT_EQ(totals->syncs, 2u);
    if (kind == DecoderKind::kInsn) {
      ASSERT_THAT(rec.errors, SizeIs(1));
      EXPECT_LE(rec.errors[0].offset, second_offset);
      ASSERT_THAT(rec.runs, SizeIs(2));
      // Up to the corrupt packet the flow is the walk's (the conditional branch whose TNT bit
      // is missing still executed); after the next PSB it is exact again.
      EXPECT_THAT(rec.runs[0], ElementsAreArray(*bad));
      EXPECT_THAT(rec.runs[1], ElementsAreArray(*good));
    } else {
      EXPECT_EQ(count.instructions(), bad->size() + good->size());
    }
  }
}

TEST_F(SynthTest, OverflowIsAnEventAndDecodingResumesAtTheFupIp) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  auto truth = synth.AddSegment(
      {.entry = work_.address, .seed = 21, .max_insns = 3000, .overflow_at_branch = 3});
  ASSERT_THAT(truth, IsOk());
  // The overflow hits at the 4th conditional branch (seed 21 walks past many).
  class Rec : public RecordingSink {
   public:
    void OnEvent(const pt_event& e) override {
      if (e.type == ptev_overflow) {
        overflow_ip = e.variant.overflow.ip;
        ++overflows;
        runs.emplace_back();
      }
    }
    uint64_t overflow_ip = 0;
    int overflows = 0;
  } rec;
  auto totals = DecodeTrace(synth.bytes(), {}, *image, rec);
  ASSERT_THAT(totals, IsOk());
  for (const DecodeError& e : rec.errors) {
    ADD_FAILURE() << "error " << IptErrorName(e.code) << " at offset " << e.offset << " ip "
                  << std::hex << e.ip << " overflow ip " << rec.overflow_ip;
  }
  ASSERT_EQ(rec.overflows, 1);
  ASSERT_THAT(rec.runs, SizeIs(2));
  // After the overflow: exactly the walk from the FUP IP on.
  auto resume = truth->end() - static_cast<ptrdiff_t>(rec.runs[1].size());
  ASSERT_FALSE(rec.runs[1].empty());
  EXPECT_EQ(rec.runs[1].front(), rec.overflow_ip);
  EXPECT_THAT(rec.runs[1], ElementsAreArray(resume, truth->end()));
  // Before it: a prefix of the walk that stops at the branch whose outcome was lost.
  ASSERT_LE(rec.runs[0].size(), truth->size());
  EXPECT_THAT(rec.runs[0], ElementsAreArray(truth->begin(), truth->begin() + rec.runs[0].size()));
  // What ran between the last decodable branch and the overflow is lost (the TNT bits before
  // an OVF are dropped with it), so the two runs may leave out part of the walk, never add.
  EXPECT_LE(rec.runs[0].size() + rec.runs[1].size(), truth->size());

  // stats (block decoder): the call stack restarts at the overflow; the same instructions.
  std::FILE* out = std::tmpfile();
  auto stats = MakeStatsSink(*image, out, {});
  auto st = DecodeTrace(synth.bytes(), {}, *image, *stats);
  EXPECT_EQ(std::fclose(out), 0);
  ASSERT_THAT(st, IsOk());
  EXPECT_EQ(st->instructions, rec.runs[0].size() + rec.runs[1].size());
}

TEST_F(SynthTest, ProgressOnlyOnATerminalAndForwardsEverything) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  // Enough blocks for several progress points (every 4096 blocks): long recursive walks.
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    ASSERT_THAT(
        synth.AddSegment(
            {.entry = fib_.address, .seed = seed, .max_insns = 20000, .taken_per_256 = 200}),
        IsOk());
  }
  std::vector<uint8_t> trace = synth.bytes();
  for (bool terminal : {false, true}) {
    char* text = nullptr;
    size_t size = 0;
    std::FILE* err = open_memstream(&text, &size);
    uint64_t clock = 0;
    auto inner = std::make_unique<CountSink>(DecoderKind::kBlock);
    CountSink* count = inner.get();
    ProgressSink progress(std::move(inner), err, terminal, trace.size(),
                          [&] { return clock += 300; });
    auto totals = DecodeTrace(trace, {}, *image, progress);
    ASSERT_THAT(totals, IsOk());
    EXPECT_EQ(std::fclose(err), 0);
    std::string printed(text, size);
    std::free(text);
    EXPECT_EQ(count->instructions(), totals->instructions);
    ASSERT_GT(totals->blocks, 3 * 4096u);
    if (terminal) {
      EXPECT_THAT(printed, ::testing::HasSubstr("ptdecode: "));
      EXPECT_THAT(printed, ::testing::HasSubstr("% of "));
    } else {
      EXPECT_EQ(printed, "");
    }
  }
}

// A signal that ends ptdecode while its status line is shown erases the line first, then ends
// it as it would have (sweep 39b L2: ^C, a `| head` that closed the pipe or a timeout left
// "ptdecode: 21.6 MiB decoded" before the shell's prompt). A child shows a line on a pipe and
// is ended by each signal.
TEST(ProgressLineTest, ASignalThatEndsPtdecodeErasesTheLine) {
  for (const int signal : {SIGINT, SIGTERM, SIGPIPE}) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(fds[0]);
      std::FILE* err = fdopen(fds[1], "w");
      uint64_t clock = 0;
      ProgressLine line(err, true, [&] { return clock += 300; });
      line.Update(1, 2);
      (void)raise(signal);
      _exit(0);  // not reached
    }
    close(fds[1]);
    std::string got;
    char buffer[256];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) got.append(buffer, n);
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << signal << ": " << status;
    EXPECT_EQ(got, "\rptdecode:  50% of 2.0 B \r" + std::string(40, ' ') + "\r") << signal;
  }
}

TEST_F(SynthTest, TimeFilterKeepsWhatRanInTheWindow) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  auto first =
      synth.AddSegment({.entry = work_.address, .seed = 21, .max_insns = 800, .tsc = 1000});
  auto second =
      synth.AddSegment({.entry = work_.address, .seed = 4, .max_insns = 800, .tsc = 3000});
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  std::vector<uint8_t> trace = synth.bytes();
  struct Window {
    uint64_t from, to;
    std::vector<uint64_t> expected;
  };
  std::vector<uint64_t> both = *first;
  both.insert(both.end(), second->begin(), second->end());
  for (const Window& w : {Window{0, 2000, *first}, Window{2000, 4000, *second},
                          Window{0, 5000, both}, Window{4000, 9000, {}}}) {
    for (DecoderKind kind : {DecoderKind::kInsn, DecoderKind::kBlock}) {
      auto rec = std::make_unique<RecordingSink>();
      RecordingSink* r = rec.get();
      auto count = std::make_unique<CountSink>(kind);
      CountSink* c = count.get();
      std::unique_ptr<Sink> inner;
      if (kind == DecoderKind::kInsn) {
        inner = std::move(rec);
      } else {
        inner = std::move(count);
      }
      TimeFilterSink filter(std::move(inner), w.from, w.to);
      ASSERT_THAT(DecodeTrace(trace, {}, *image, filter), IsOk());
      if (kind == DecoderKind::kInsn) {
        EXPECT_THAT(r->runs[0], ElementsAreArray(w.expected)) << w.from << "," << w.to;
      } else {
        EXPECT_EQ(c->instructions(), w.expected.size()) << w.from << "," << w.to;
      }
    }
  }
}

TEST_F(SynthTest, BytesBeforeTheFirstPsbAreSkipped) {
  auto image = ElfImage();
  PtSynth synth(*code_);
  pt_packet pad = {};
  pad.type = ppt_pad;
  for (int i = 0; i < 5; ++i) synth.AddPacket(pad);
  auto truth = synth.AddSegment({.entry = work_.address, .seed = 11, .max_insns = 500});
  ASSERT_THAT(truth, IsOk());
  std::vector<uint8_t> trace = synth.bytes();
  trace[0] = 0x19;  // not a valid packet start: garbage before the PSB
  RecordingSink rec;
  ASSERT_THAT(DecodeTrace(trace, {}, *image, rec), IsOk());
  EXPECT_THAT(rec.errors, SizeIs(0));
  EXPECT_THAT(rec.runs[0], ElementsAreArray(*truth));
}

TEST_F(SynthTest, LoadRawInputRejectsAFileWithoutPsb) {
  std::string path = ::ptkit::decoder::testing::TempPath("not_pt.bin");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("hello, this is not Intel PT at all", f);
  EXPECT_EQ(std::fclose(f), 0);
  RawInputSpec spec;
  spec.pt_path = path;
  EXPECT_THAT(LoadRawInput(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an Intel PT stream")));
  spec.pt_path = path + ".missing";
  EXPECT_THAT(LoadRawInput(spec), StatusIs(absl::StatusCode::kNotFound, HasSubstr(".missing")));
  (void)std::remove(path.c_str());
}

TEST_F(SynthTest, AddElfRejectsAFileThatIsNotElf) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  std::string path = ::ptkit::decoder::testing::TempPath("not_elf.bin");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("plain text", f);
  EXPECT_EQ(std::fclose(f), 0);
  EXPECT_THAT((*image)->AddElf({path, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
  EXPECT_THAT((*image)->AddElf({path + ".missing", 0}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(".missing")));
  (void)std::remove(path.c_str());
}

TEST_F(SynthTest, ElfBaseRelocatesCodeAndSymbols) {
  // Place tiny.elf 0x10000000 higher: the trace walked at the original addresses, shifted.
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  const uint64_t shift = 0x10000000;
  const uint64_t lowest = code_->Symbol("leaf").address & ~0xfffull;  // text segment start
  ASSERT_THAT((*image)->AddElf({kTiny, lowest + shift}), IsOk());
  int s = (*image)->SymbolAt(work_.address + shift + 1);
  ASSERT_GE(s, 0);
  EXPECT_EQ((*image)->symbols()[s].name, "work");
  uint8_t a[16], b[16];
  ASSERT_EQ((*image)->Read(work_.address + shift, a, sizeof(a)), sizeof(a));
  ASSERT_EQ(code_->Read(work_.address, b, sizeof(b)), sizeof(b));
  EXPECT_EQ(0, std::memcmp(a, b, sizeof(a)));
}

}  // namespace
}  // namespace ptkit::decoder
