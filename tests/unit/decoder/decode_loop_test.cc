// decode.cc's decoder loops on hand-made packets (issue 12): a pt_insn_next that fails before
// it decodes anything, and the work bounds (decode_bounds.h).
#include <intel-pt.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "decoder/decode.h"
#include "decoder/decode_bounds.h"
#include "decoder/fast_block_decoder.h"
#include "decoder/image.h"
#include "decoder/trace_config.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pt_synth.h"
#include "status_matchers.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::decoder::testing::ElfCode;
using ::ptkit::decoder::testing::PtSynth;
using ::ptkit::decoder::testing::TakenTnt;
using ::ptkit::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kLoopCode = 0x1000;
constexpr uint64_t kJumpTarget = 0x2000;
// nop; jmp *%rax
const std::vector<uint8_t> kNopJmpRax = {0x90, 0xff, 0xe0};

// PSB, MODE.exec 64-bit, PSBEND, TIP.PGE kLoopCode, then `more`.
std::vector<uint8_t> TraceFromKCode(const std::vector<pt_packet>& more) {
  ElfCode none;
  PtSynth synth(none);
  synth.AddPsbPlusPge(kLoopCode);
  for (const pt_packet& m : more) synth.AddPacket(m);
  return synth.bytes();
}

// TIP.PGD with the jump's target (it binds to the indirect jump: tracing stops there, as when
// code leaves an IP filter range), then a TNT-8 while tracing is off, which is no event, so
// libipt's next call is pt_insn_next with tracing disabled.
std::vector<uint8_t> DisabledThenTntTrace() {
  pt_packet pgd{};
  pgd.type = ppt_tip_pgd;
  pgd.payload.ip.ipc = pt_ipc_update_16;
  pgd.payload.ip.ip = kJumpTarget;
  return TraceFromKCode({pgd, TakenTnt()});
}
constexpr uint64_t kAfterPge = PtSynth::kPsbPlusPgeSize;
constexpr uint64_t kTntAfterPgd = kAfterPge + 3;  // TIP.PGD with a 16-bit IP

// Every callback, as text, in order.
class LogSink : public Sink {
 public:
  explicit LogSink(DecoderKind kind) : kind_(kind) {}
  DecoderKind kind() const override { return kind_; }
  void OnSync(uint64_t offset) override { log.push_back(fmt::format("sync {}", offset)); }
  void OnInsn(const pt_insn& insn) override {
    log.push_back(fmt::format("insn {:#x} class {}", insn.ip, static_cast<int>(insn.iclass)));
  }
  void OnBlock(const pt_block& block) override {
    log.push_back(fmt::format("block {:#x}-{:#x} {}", block.ip, block.end_ip, block.ninsn));
  }
  void OnEvent(const pt_event& event) override {
    log.push_back(fmt::format("event {}", static_cast<int>(event.type)));
  }
  void OnError(const DecodeError& error) override {
    log.push_back(fmt::format("error {} at {}", DecodeErrorText(error.code), error.offset));
  }
  std::vector<std::string> log;

 private:
  DecoderKind kind_;
};

// libipt 2.0.5's pt_insn_next returns -pte_no_enable at once while tracing is disabled and
// leaves the caller's pt_insn as it was: the loop looked at `insn.iclass` after the error and
// counted the instruction before it a second time (fixed in ddb0906).
TEST(DecodeLoopTest, AFailedInsnNextBeforeDecodingCountsNothing) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("nop_jmp_rax", kLoopCode, kNopJmpRax);
  const std::vector<uint8_t> trace = DisabledThenTntTrace();

  LogSink insns(DecoderKind::kInsn);
  auto totals = DecodeTrace(trace, {}, **image, insns);
  ASSERT_THAT(totals, IsOk());
  // Two instructions, once each; then the error where tracing is off (the TNT).
  EXPECT_THAT(
      insns.log,
      ElementsAre("sync 0", fmt::format("event {}", static_cast<int>(ptev_exec_mode)),
                  fmt::format("event {}", static_cast<int>(ptev_enabled)),
                  fmt::format("insn {:#x} class {}", kLoopCode, static_cast<int>(ptic_other)),
                  fmt::format("insn {:#x} class {}", kLoopCode + 1, static_cast<int>(ptic_jump)),
                  fmt::format("event {}", static_cast<int>(ptev_disabled)),
                  fmt::format("error {} at {}", pt_errstr(pte_no_enable), kTntAfterPgd)));
  EXPECT_EQ(totals->instructions, 2u);
  EXPECT_EQ(totals->errors, 1u);
  EXPECT_EQ(totals->errors_by_code[pte_no_enable], 1u);

  // Each block decoder counts the same two instructions.
  for (BlockDecoderImpl impl :
       {BlockDecoderImpl::kLibipt, BlockDecoderImpl::kFast, BlockDecoderImpl::kFastLibiptPackets}) {
    SCOPED_TRACE(static_cast<int>(impl));
    SetBlockDecoderImpl(impl);
    LogSink blocks(DecoderKind::kBlock);
    auto block_totals = DecodeTrace(trace, {}, **image, blocks);
    ASSERT_THAT(block_totals, IsOk());
    EXPECT_EQ(block_totals->instructions, 2u) << ::testing::PrintToString(blocks.log);
    EXPECT_EQ(block_totals->errors_by_code[pte_no_enable], 1u);
  }
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
}

// `jmp .` at kLoopCode needs no trace: the loops stop at the bound (lowered here as the fuzz
// targets lower it) with kErrorLoop at the TNT, whatever the decoder.
TEST(DecodeLoopTest, TheLoopBoundCanBeLowered) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("jmp_self", kLoopCode, std::vector<uint8_t>{0xeb, 0xfe});
  const std::vector<uint8_t> trace = TraceFromKCode({TakenTnt()});
  ASSERT_EQ(GetDecodeBounds().insns_without_progress, kMaxInsnsWithoutProgress);
  constexpr uint64_t kBound = 5000;
  SetDecodeBounds({.insns_without_progress = kBound, .bts_walk = kMaxBtsWalk});
  for (DecoderKind kind : {DecoderKind::kInsn, DecoderKind::kBlock}) {
    for (BlockDecoderImpl impl : {BlockDecoderImpl::kLibipt, BlockDecoderImpl::kFast}) {
      SCOPED_TRACE(::testing::Message()
                   << "kind " << static_cast<int>(kind) << " impl " << static_cast<int>(impl));
      SetBlockDecoderImpl(impl);
      LogSink sink(kind);
      auto totals = DecodeTrace(trace, {}, **image, sink);
      ASSERT_THAT(totals, IsOk());
      EXPECT_EQ(totals->errors_by_code[kErrorLoop], 1u);
      // Past the bound by at most one check (64 instructions) or one block (65,535).
      EXPECT_GT(totals->instructions, kBound);
      EXPECT_LE(totals->instructions, kBound + (kind == DecoderKind::kInsn ? 64 : 65535));
      ASSERT_FALSE(sink.log.empty());
      EXPECT_EQ(sink.log.back(),
                fmt::format("error {} at {}", DecodeErrorText(kErrorLoop), kAfterPge));
    }
  }
  // The texts name the bounds in force (they said 1048576 and 65536 whatever the bound was).
  SetDecodeBounds({.insns_without_progress = kBound, .bts_walk = 300});
  EXPECT_THAT(DecodeErrorText(kErrorLoop), HasSubstr(" over 5000 instructions decoded "));
  EXPECT_THAT(DecodeErrorText(kErrorBtsWalk), HasSubstr(" in 300 instructions "));
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  SetDecodeBounds({});
  EXPECT_THAT(DecodeErrorText(kErrorLoop), HasSubstr(" over 1048576 instructions decoded "));
  EXPECT_THAT(DecodeErrorText(kErrorBtsWalk), HasSubstr(" in 65536 instructions "));
}

// The fast path reads the whole trace once before it decodes (FastPathCovers): the sink is told
// how far that pass has read, every 4 MiB and before anything is decoded, so that the pages
// behind it can be dropped (a recording's spool: StreamSink). libipt's decoders make no pass.
TEST(DecodeLoopTest, ThePassAheadOfTheFastPathTellsHowFarItRead) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("nop_jmp_rax", kLoopCode, kNopJmpRax);
  std::vector<uint8_t> trace = TraceFromKCode({});
  trace.resize(trace.size() + (uint64_t{9} << 20), 0x00);  // PAD packets
  class ScanLog : public LogSink {
   public:
    using LogSink::LogSink;
    void OnScanned(uint64_t offset) override { log.push_back(fmt::format("scanned {}", offset)); }
  };
  constexpr uint64_t kBase = 1000;
  for (DecoderKind kind : {DecoderKind::kInsn, DecoderKind::kBlock}) {
    for (BlockDecoderImpl impl : {BlockDecoderImpl::kLibipt, BlockDecoderImpl::kFast,
                                  BlockDecoderImpl::kFastLibiptPackets}) {
      SCOPED_TRACE(::testing::Message()
                   << "kind " << static_cast<int>(kind) << " impl " << static_cast<int>(impl));
      SetBlockDecoderImpl(impl);
      ScanLog sink(kind);
      DecodeTotals totals;
      ASSERT_THAT(DecodeInto(trace, {}, **image, sink, totals, kBase), IsOk());
      std::vector<std::string> scans(sink.log.begin(),
                                     sink.log.begin() + std::min<size_t>(2, sink.log.size()));
      if (impl == BlockDecoderImpl::kLibipt) {
        EXPECT_THAT(sink.log, ::testing::Not(::testing::Contains(HasSubstr("scanned"))));
      } else {
        EXPECT_THAT(scans, ElementsAre(fmt::format("scanned {}", kBase + (uint64_t{4} << 20)),
                                       fmt::format("scanned {}", kBase + (uint64_t{8} << 20))));
        EXPECT_EQ(std::count_if(sink.log.begin(), sink.log.end(),
                                [](const std::string& s) { return s.starts_with("scanned"); }),
                  2);
      }
    }
  }
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
  // libipt's packet decoder's pass (for what PacketLoop's parser does not read) tells it too.
  auto pt = MakePtConfig(trace, {});
  ASSERT_THAT(pt, IsOk());
  std::vector<uint64_t> told;
  EXPECT_TRUE(FastPathCoversByLibipt(*pt, [&](uint64_t offset) { told.push_back(offset); }).blocks);
  EXPECT_THAT(told, ElementsAre(uint64_t{4} << 20, uint64_t{8} << 20));
}

// A sink that sees only branches (Sink::branches_only, `branches`) is given the first and the
// last instruction of a whole block whose inner instructions are no branch, by the fast path
// only; the instruction count is the same.
TEST(DecodeLoopTest, ABranchSinkGetsAWholeBlocksFirstAndLastInstructions) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  // nop; nop; nop; jmp *%rax
  (*image)->AddBytes("nops_jmp_rax", kLoopCode, std::vector<uint8_t>{0x90, 0x90, 0x90, 0xff, 0xe0});
  pt_packet tip{};
  tip.type = ppt_tip;
  tip.payload.ip.ipc = pt_ipc_update_16;
  tip.payload.ip.ip = kLoopCode;
  const std::vector<uint8_t> trace = TraceFromKCode({tip});
  class BranchLog : public LogSink {
   public:
    using LogSink::LogSink;
    bool branches_only() const override { return true; }
  };
  const std::string first =
      fmt::format("insn {:#x} class {}", kLoopCode, static_cast<int>(ptic_other));
  const std::string jump =
      fmt::format("insn {:#x} class {}", kLoopCode + 3, static_cast<int>(ptic_jump));
  for (BlockDecoderImpl impl : {BlockDecoderImpl::kLibipt, BlockDecoderImpl::kFast}) {
    SCOPED_TRACE(static_cast<int>(impl));
    SetBlockDecoderImpl(impl);
    LogSink every(DecoderKind::kInsn);
    BranchLog branches(DecoderKind::kInsn);
    auto all = DecodeTrace(trace, {}, **image, every);
    auto some = DecodeTrace(trace, {}, **image, branches);
    ASSERT_THAT(all, IsOk());
    ASSERT_THAT(some, IsOk());
    EXPECT_EQ(some->instructions, all->instructions);
    auto insns = [](const std::vector<std::string>& log) {
      std::vector<std::string> out;
      for (const std::string& line : log) {
        if (line.starts_with("insn ")) out.push_back(line);
      }
      return out;
    };
    // The first pass through the code (the second ends at the trace's end: every instruction).
    ASSERT_GE(insns(every.log).size(), 4u);
    EXPECT_EQ(insns(every.log)[1],
              fmt::format("insn {:#x} class {}", kLoopCode + 1, static_cast<int>(ptic_other)));
    ASSERT_GE(insns(branches.log).size(), 2u);
    EXPECT_EQ(insns(branches.log)[0], first);
    if (impl == BlockDecoderImpl::kLibipt) {
      EXPECT_EQ(insns(branches.log), insns(every.log));
    } else {
      EXPECT_EQ(insns(branches.log)[1], jump);
      EXPECT_EQ(insns(branches.log).size() + 2, insns(every.log).size());
    }
  }
  SetBlockDecoderImpl(BlockDecoderImpl::kFast);
}

// NextIpAfter (the resync address after an instruction libipt cannot map or decode) on bytes
// whose lengths and targets objdump gives: length, plus a direct branch's displacement; `ip`
// for what does not decode or is not in the image. The three modes decode the same bytes to
// different lengths.
TEST(DecodeLoopTest, NextIpAfterIsLengthPlusADirectBranchsDisplacement) {
  constexpr uint64_t kLengthsAt = 0x1000;
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("lengths", kLengthsAt,
                     std::vector<uint8_t>{
                         0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00,  // 1000: mov 0x10(%rip),%rax
                         0xe8, 0x00, 0x01, 0x00, 0x00,              // 1007: call 0x110c
                         0x75, 0xf0,                                // 100c: jne 0xffe
                         0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00,        // 100e: nopw 0(%rax,%rax)
                         0xff, 0xe0,                                // 1014: jmp *%rax
                         0x06,                                      // 1016: (bad) in 64-bit
                     });
  EXPECT_EQ(NextIpAfter(**image, 0x1000, ptem_64bit), 0x1007u);
  EXPECT_EQ(NextIpAfter(**image, 0x1007, ptem_64bit), 0x110cu);
  EXPECT_EQ(NextIpAfter(**image, 0x100c, ptem_64bit), 0xffeu);
  EXPECT_EQ(NextIpAfter(**image, 0x100e, ptem_64bit), 0x1014u);
  EXPECT_EQ(NextIpAfter(**image, 0x1014, ptem_64bit), 0x1016u);
  EXPECT_EQ(NextIpAfter(**image, 0x1016, ptem_64bit), 0x1016u);
  EXPECT_EQ(NextIpAfter(**image, 0x5000, ptem_64bit), 0x5000u);  // not in the image

  // 66 b8 01 00 00 00: mov $0x1,%ax in 64- and 32-bit mode, mov $0x1,%eax in 16-bit mode.
  (*image)->AddBytes("modes", 0x3000, std::vector<uint8_t>{0x66, 0xb8, 0x01, 0x00, 0x00, 0x00});
  EXPECT_EQ(NextIpAfter(**image, 0x3000, ptem_64bit), 0x3004u);
  EXPECT_EQ(NextIpAfter(**image, 0x3000, ptem_32bit), 0x3004u);
  EXPECT_EQ(NextIpAfter(**image, 0x3000, ptem_16bit), 0x3006u);
  EXPECT_EQ(NextIpAfter(**image, 0x3000, ptem_unknown), 0x3004u);
}

}  // namespace
}  // namespace ptkit::decoder
