// The fast block decoder (decoder/fast_block_decoder.h) against libipt's pt_blk_*: on every trace
// the suite has, every callback a block sink gets (blocks with all their fields, events, errors,
// syncs, time) and the stats, folded and calls outputs are the same through both.
#include "decoder/fast_block_decoder.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pt_synth.h"
#include "record/swpt/synth_container.h"
#include "record/swpt/synthesizer.h"
#include "status_matchers.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::testing::IsOk;

// Every callback as a line, every field a block sink can read.
class TranscriptSink : public Sink {
 public:
  TranscriptSink(bool on_call, bool on_jump, bool time)
      : on_call_(on_call), on_jump_(on_jump), time_(time) {}
  bool end_block_on_call() const override { return on_call_; }
  bool end_block_on_jump() const override { return on_jump_; }
  bool wants_time() const override { return time_; }
  void OnStream(const StreamInfo& s) override {
    lines.push_back(absl::StrCat("stream ", s.name, " ", s.pid, " ", s.tid, " ", s.context_switch));
  }
  void OnLoss(const LossInfo& l) override {
    lines.push_back(absl::StrCat("loss ", l.kind, " ", l.aux_offset, " ", l.bytes));
  }
  void OnSync(uint64_t offset) override { lines.push_back(absl::StrCat("sync ", offset)); }
  void OnTime(uint64_t tsc) override { lines.push_back(absl::StrCat("time ", tsc)); }
  void OnProgress(uint64_t offset) override { lines.push_back(absl::StrCat("progress ", offset)); }
  void OnBlock(const pt_block& b) override {
    std::string raw;
    if (b.truncated) raw = std::string(reinterpret_cast<const char*>(b.raw), b.size);
    lines.push_back(absl::StrCat("block ", absl::Hex(b.ip), "-", absl::Hex(b.end_ip),
                                 " n=", b.ninsn, " c=", b.iclass, " m=", b.mode, " s=", b.isid,
                                 " sp=", b.speculative, " t=", b.truncated, " ", raw));
  }
  void OnEvent(const pt_event& e) override {
    std::string bytes(reinterpret_cast<const char*>(&e.variant), sizeof(e.variant));
    lines.push_back(absl::StrCat("event ", e.type, " ", e.ip_suppressed, e.status_update, e.has_tsc,
                                 " ", e.tsc, " ", absl::CHexEscape(bytes)));
  }
  void OnError(const DecodeError& e) override {
    lines.push_back(absl::StrCat("error ", e.code, " ", e.offset, " ", absl::Hex(e.ip), " ",
                                 e.during_sync, " ", e.gap.begin, "-", e.gap.end));
  }
  std::vector<std::string> lines;

 private:
  bool on_call_, on_jump_, time_;
};

// Decodes a trace into the sink made for the image it decodes against: a fresh image each time,
// since libipt's block cache lives with the image's section cache and changes libipt's blocks.
using MakeSink = std::function<Sink&(const ProgramImage&)>;
using Runner = std::function<void(const MakeSink&)>;

std::vector<std::string> Transcript(BlockDecoderImpl impl, bool on_call, bool on_jump, bool time,
                                    const Runner& run) {
  SetBlockDecoderImpl(impl);
  TranscriptSink sink(on_call, on_jump, time);
  run([&](const ProgramImage&) -> Sink& { return sink; });
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  return sink.lines;
}

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

// stats (text and JSON), folded and calls through `impl`.
std::vector<std::string> Outputs(BlockDecoderImpl impl, const Runner& run) {
  SetBlockDecoderImpl(impl);
  std::vector<std::string> outputs;
  for (int kind = 0; kind < 4; ++kind) {
    std::FILE* out = std::tmpfile();
    OutputOptions options;
    options.json = kind == 1;
    std::unique_ptr<Sink> sink;
    run([&](const ProgramImage& image) -> Sink& {
      sink = kind <= 1   ? MakeStatsSink(image, out, options)
             : kind == 2 ? MakeFoldedSink(image, out, options)
                         : MakeCallsSink(image, out, options);
      return *sink;
    });
    sink.reset();
    outputs.push_back(ReadAll(out));
  }
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  return outputs;
}

// libipt and the fast decoder (with ptkit's packet loop where it models the trace, and with
// libipt's query decoder), every block-ending flavour, and the sinks' outputs.
void ExpectSame(const Runner& run) {
  for (BlockDecoderImpl fast_impl :
       {BlockDecoderImpl::kFast, BlockDecoderImpl::kFastLibiptPackets}) {
    SCOPED_TRACE(fast_impl == BlockDecoderImpl::kFast ? "fast" : "fast, libipt's packets");
    for (int flags = 0; flags < 4; ++flags) {
      const bool on_call = flags & 1, on_jump = flags & 2;
      SCOPED_TRACE(absl::StrCat("end_on_call ", on_call, " end_on_jump ", on_jump));
      auto libipt = Transcript(BlockDecoderImpl::kLibipt, on_call, on_jump, flags == 1, run);
      auto fast = Transcript(fast_impl, on_call, on_jump, flags == 1, run);
      ASSERT_FALSE(libipt.empty());
      for (size_t i = 0; i < std::min(libipt.size(), fast.size()); ++i) {
        ASSERT_EQ(libipt[i], fast[i]) << "callback " << i << " after " << (i ? libipt[i - 1] : "");
      }
      ASSERT_EQ(libipt.size(), fast.size());
    }
    EXPECT_EQ(Outputs(BlockDecoderImpl::kLibipt, run), Outputs(fast_impl, run));
  }
}

// The fast path takes `trace` (else the comparison would only test libipt against itself), and
// with its own packet loop when `packets`.
void ExpectCovered(std::span<const uint8_t> trace, const TraceConfig& config, bool packets = true) {
  auto pt = MakePtConfig(trace, config);
  ASSERT_THAT(pt, IsOk());
  EXPECT_TRUE(FastPathCovers(*pt).blocks);
  EXPECT_EQ(FastPathCovers(*pt).packets, packets);
}

const std::string kTiny = std::string(PTKIT_DECODER_TEST_BINARY_DIR) + "/tiny.elf";

TEST(FastBlockDecoderTest, SameAsLibiptOnSynthesizedTraces) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    PtSynth synth(*code);
    // Segments: plain, with an overflow, with a corrupt packet (a decode error and a resync),
    // with time.
    ASSERT_THAT(
        synth.AddSegment({.entry = code->Symbol("work").address, .seed = seed, .max_insns = 3000}),
        IsOk());
    ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("fib").address,
                                  .seed = seed + 100,
                                  .max_insns = 2000,
                                  .overflow_at_branch = 7}),
                IsOk());
    ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("collatz").address,
                                  .seed = seed + 200,
                                  .max_insns = 2000,
                                  .corrupt_at_branch = 11}),
                IsOk());
    ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("work").address,
                                  .seed = seed + 300,
                                  .max_insns = 2000,
                                  .tsc = 1000 + seed}),
                IsOk());
    std::vector<uint8_t> trace = synth.bytes();
    ExpectCovered(trace, {});
    ExpectSame([&](const MakeSink& make) {
      auto image = ProgramImage::Create();
      ASSERT_THAT(image, IsOk());
      ASSERT_THAT((*image)->AddElf({kTiny, 0}), IsOk());
      ASSERT_THAT(DecodeTrace(trace, {}, **image, make(**image)), IsOk());
    });
  }
}

// FastPathCovers reads a trace with PacketLoop's own parser first: its answer is the one
// libipt's packet decoder gives, on every prefix of a trace (packets cut anywhere) and with
// bytes changed at random (unknown opcodes, bad IP compression, stray PSBs, ...).
TEST(FastBlockDecoderTest, CoverageAsLibiptPacketDecoderSays) {
  auto code = ElfCode::Load(kTiny);
  ASSERT_THAT(code, IsOk());
  PtSynth synth(*code);
  ASSERT_THAT(
      synth.AddSegment({.entry = code->Symbol("work").address, .seed = 3, .max_insns = 300}),
      IsOk());
  ASSERT_THAT(synth.AddSegment({.entry = code->Symbol("fib").address,
                                .seed = 4,
                                .max_insns = 300,
                                .tsc = 77,
                                .overflow_at_branch = 3}),
              IsOk());
  const std::vector<uint8_t> trace = synth.bytes();
  auto check = [](std::span<const uint8_t> bytes, pt_errata errata) {
    auto pt = MakePtConfig(bytes, {});
    ASSERT_THAT(pt, IsOk());
    pt->errata = errata;
    const FastPathCoverage fast = FastPathCovers(*pt), libipt = FastPathCoversByLibipt(*pt);
    ASSERT_EQ(fast.blocks, libipt.blocks) << bytes.size() << " bytes";
    ASSERT_EQ(fast.packets, libipt.packets) << bytes.size() << " bytes";
  };
  pt_errata none{}, skd010{};
  skd010.skd010 = 1;
  for (size_t n = 0; n <= trace.size(); ++n) {
    check(std::span(trace).first(n), none);
    check(std::span(trace).first(n), skd010);
  }
  std::mt19937 rng(16);
  int modelled = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bytes = trace;
    for (int k = 0; k < 1 + i % 3; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    check(bytes, none);
    auto pt = MakePtConfig(bytes, {});
    modelled += FastPathCovers(*pt).packets;
  }
  EXPECT_GT(modelled, 100);   // the changes left many traces readable
  EXPECT_LT(modelled, 2900);  // and made many not
}

TEST(FastBlockDecoderTest, SameAsLibiptOnSynthesizedContainers) {
  for (const char* program : {"sorts_O2_pie", "interp_O0_nopie"}) {
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(absl::StrCat(program, " variant ", variant));
      auto synth = swpt::Synthesizer::Create(std::string(PTKIT_SWPT_PROGRAM_DIR) + "/" + program);
      ASSERT_THAT(synth, IsOk());
      swpt::SynthOptions options;
      options.max_insns = 30000;
      options.seed = 5 + variant;
      options.pt.ret_compression = variant != 1;
      options.pt.tsc = variant != 0;
      options.signal_every = variant == 2 ? 3001 : 0;
      options.overflow_every = variant == 1 ? 7001 : 0;
      options.entry = variant == 2 ? "*" : "main";
      auto r = synth->Walk(options);
      ASSERT_THAT(r, IsOk());
      ExpectCovered(r->pt, {});
      const std::string path = ::testing::TempDir() + "/fast_block_decoder_" +
                               std::to_string(getpid()) + "_" + program + ".pt";
      ASSERT_THAT(swpt::WriteSynthContainer(path, synth->image(), options, *r), IsOk());
      ExpectSame([&](const MakeSink& make) {
        auto image = ProgramImage::Create();  // the sinks' image; streams bring their own
        ASSERT_THAT(image, IsOk());
        ASSERT_THAT(DecodeContainer(path, {}, make(**image)), IsOk());
      });
      unlink(path.c_str());
    }
  }
}

std::string TestData() { return std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata"; }

TEST(FastBlockDecoderTest, SameAsLibiptOnRealHardwareTraces) {
  if (access(TestData().c_str(), R_OK) != 0) GTEST_SKIP() << TestData() << " absent";
  std::vector<RawInputSpec> specs;
  for (const char* set : {"Unzip", "foo"}) {
    const std::string dir = TestData() + "/libxdc-experiments/" + set;
    RawInputSpec spec;
    spec.pt_path = dir + "/trace";
    spec.page_dumps.push_back(ParsePageDumpSpec(dir));
    specs.push_back(spec);
  }
  {
    const std::string dir = TestData() + "/dynamorio-drpt2trace";
    RawInputSpec spec;
    spec.pt_path = dir + "/pt.bin";
    spec.elfs.push_back({dir + "/hello", 0});
    spec.config.cpu = *ParseCpu("6/85/4");
    spec.config.mtc_freq = 3;
    spec.config.nom_freq = 37;
    spec.config.cpuid_0x15_eax = 2;
    spec.config.cpuid_0x15_ebx = 308;
    specs.push_back(spec);
  }
  for (const RawInputSpec& spec : specs) {
    SCOPED_TRACE(spec.pt_path);
    {
      auto input = LoadRawInput(spec);
      ASSERT_THAT(input, IsOk());
      // drpt2trace's trace has MTC and CYC: libipt's query decoder reads it.
      ExpectCovered(input->trace.bytes(), input->config,
                    /*packets=*/spec.pt_path.find("drpt2trace") == std::string::npos);
    }
    ExpectSame([&](const MakeSink& make) {
      auto input = LoadRawInput(spec);
      ASSERT_THAT(input, IsOk());
      ASSERT_THAT(
          DecodeTrace(input->trace.bytes(), input->config, *input->image, make(*input->image)),
          IsOk());
    });
  }
  // perf.data of a machine whose binaries are absent: gaps (pte_nomap) all along.
  const std::string perf = TestData() + "/perf-data/perf.data.intel_pt-4.14";
  ExpectSame([&](const MakeSink& make) {
    auto image = ProgramImage::Create();
    ASSERT_THAT(image, IsOk());
    ASSERT_THAT(DecodeContainer(perf, {}, make(**image)), IsOk());
  });
}

}  // namespace
}  // namespace ptkit::decoder
