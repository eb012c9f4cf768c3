// CallStack (decoder/call_stack.h) on real code: hand-made Intel PT over tiny programs
// (tests/data/decoder/callstack_*.S, built at 0x401000), decoded by libipt's block decoder into
// a CallStack through a minimal Sink, as any user of the model composes it.
#include "decoder/call_stack.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/sinks.h"
#include "gtest/gtest.h"
#include "hand_pt.h"
#include "status_matchers.h"
#include "test_io.h"
#include "test_paths.h"

namespace ptkit::decoder {
namespace {

using ::ptkit::testing::IsOk;

using ::ptkit::decoder::testing::HandBlock;
using ::ptkit::decoder::testing::kDir;

using ::ptkit::decoder::testing::StartAtMain;
using ::ptkit::decoder::testing::TailCallTrace;

// Feeds the decoder's flow to a CallStack.
class ModelSink : public Sink {
 public:
  explicit ModelSink(CallStack& model) : model_(model) {}
  bool end_block_on_call() const override { return true; }
  void OnBlock(const pt_block& block) override { model_.OnBlock(block); }
  void OnEvent(const pt_event& event) override { model_.OnEvent(event); }
  void OnError(const DecodeError& error) override { model_.Reset(); }

 protected:
  CallStack& model_;
};

// The memos of walked blocks (BlockMemo), one per block as the walk's decoder keeps one per
// node, by (ip, end_ip, ninsn, iclass, mode): shared by every decode and image they are given to.
using Memos = std::map<std::tuple<uint64_t, uint64_t, uint16_t, int, int>, BlockMemo>;
BlockMemo& MemoOf(Memos& memos, const pt_block& b) {
  return memos[{b.ip, b.end_ip, b.ninsn, static_cast<int>(b.iclass), static_cast<int>(b.mode)}];
}

// ModelSink giving every block as a walked one (CallStack::OnWholeBlock) with its memo.
class WholeBlockSink : public ModelSink {
 public:
  WholeBlockSink(CallStack& model, Memos& memos) : ModelSink(model), memos_(memos) {}
  void OnBlock(const pt_block& block) override {
    model_.OnWholeBlock(block, MemoOf(memos_, block));
  }

 private:
  Memos& memos_;
};

// Writes every change as a line: "> f ret=0x401005", "< f", "< f (end)", "f 2" (a count),
// "~ f -> g" (the frame on top went on into g).
class Log : public CallStackListener {
 public:
  void OnCount(uint32_t function, uint64_t n) override {
    lines.push_back(fmt::format("{} {}", (*functions)[function].name, n));
  }
  void OnEnter(const Frame& frame) override {
    lines.push_back(fmt::format("> {}{} ret={:#x}", (*functions)[frame.function].name,
                                frame.implicit ? " (implicit)" : "", frame.return_address));
  }
  void OnExit(const Frame& frame, bool at_end) override {
    lines.push_back(
        fmt::format("< {}{}", (*functions)[frame.function].name, at_end ? " (end)" : ""));
  }
  void OnRename(uint32_t from, const Frame& frame) override {
    lines.push_back(
        fmt::format("~ {} -> {}", (*functions)[from].name, (*functions)[frame.function].name));
  }
  const std::vector<Function>* functions = nullptr;
  std::vector<std::string> lines;
};

std::unique_ptr<ProgramImage> Image(const std::string& program) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, IsOk());
  if (!image.ok()) return nullptr;
  EXPECT_THAT((*image)->AddElf({kDir + "/" + program, 0}), IsOk());
  return std::move(*image);
}

// With `memos`, the blocks as walked ones (WholeBlockSink).
void Decode(const std::vector<uint8_t>& trace, const ProgramImage& image, CallStack& model,
            Memos* memos = nullptr) {
  ModelSink plain(model);
  std::optional<WholeBlockSink> whole;
  if (memos != nullptr) whole.emplace(model, *memos);
  Sink& sink = memos != nullptr ? static_cast<Sink&>(*whole) : plain;
  EXPECT_THAT(DecodeTrace(trace, {}, image, sink), IsOk());
  model.Reset();
}

// callstack_signal: main calls m1 (5 bytes at 0x401000), m1 calls g and k, all return
// (TNT 1, 1, 1), main jumps away (TIP.PGD).
std::vector<uint8_t> Call5Trace() {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x1e, 0x01});
  return t;
}

// callstack_call2: main calls f through %rax (2 bytes at 0x401000: TIP 0x401005), f returns
// (TNT), main jumps away.
std::vector<uint8_t> Call2Trace() {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x6d, 0x05, 0x10, 0x40, 0x00, 0x00, 0x00, 0x06, 0x01});
  return t;
}

struct Want {
  std::string name;
  uint64_t self, inclusive, calls;
};

void ExpectFunctions(const std::vector<Function>& functions, const std::vector<Want>& want) {
  ASSERT_EQ(functions.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Function& fn = functions[i];
    EXPECT_EQ(fn.name, want[i].name);
    EXPECT_EQ(fn.self, want[i].self) << fn.name;
    EXPECT_EQ(fn.inclusive, want[i].inclusive) << fn.name;
    EXPECT_EQ(fn.calls, want[i].calls) << fn.name;
  }
}

// Decodes `trace` over `program` into a CallStack: its log lines, and in `result`
// its functions and totals at the end (the stack reset).
struct ModelResult {
  std::vector<Function> functions;
  CallStack::Totals totals;
};
std::vector<std::string> DecodeLogged(const std::string& program, const std::vector<uint8_t>& trace,
                                      ModelResult* result) {
  auto image = Image(program);
  if (image == nullptr) return {};
  Log log;
  CallStack model(*image, &log);
  log.functions = &model.functions();
  Decode(trace, *image, model);
  EXPECT_TRUE(model.frames().empty());
  *result = {model.functions(), model.totals()};
  return log.lines;
}

TEST(CallStackTest, FramesCountsAndTotals) {
  ModelResult r;
  EXPECT_EQ(
      DecodeLogged("callstack_signal.elf", Call5Trace(), &r),
      (std::vector<std::string>{"> main (implicit) ret=0x0", "main 1", "> m1 ret=0x401005", "m1 1",
                                "> g ret=0x40100d", "g 4", "< g", "m1 1", "> k ret=0x401012", "k 2",
                                "< k", "m1 1", "< m1", "main 2", "< main (end)"}));
  EXPECT_EQ(r.totals.instructions, 12u);
  EXPECT_EQ(r.totals.calls, 3u);
  EXPECT_EQ(r.totals.returns, 3u);
  ExpectFunctions(r.functions,
                  {{"main", 3, 12, 0}, {"m1", 3, 9, 1}, {"g", 4, 4, 1}, {"k", 2, 2, 1}});
}

// callstack_tail (hand_pt.h): the frame is named after the function running in it, as gdb's
// bt and perf's call chains name it: the call enters stub, the indirect jump (a block that
// ends in a jump) goes on into target, the direct jump (inside a block) into tail, and tail's
// return ends that frame. The calls stay counted where they were; inclusive instructions
// follow the frame.
TEST(CallStackTest, AJumpIntoAnotherFunctionRenamesTheFrameOnTop) {
  ModelResult r;
  EXPECT_EQ(DecodeLogged("callstack_tail.elf", TailCallTrace(), &r),
            (std::vector<std::string>{
                "> main (implicit) ret=0x0", "main 1", "> stub ret=0x401005", "stub 1",
                "~ stub -> target", "target 1", "> leaf ret=0x40100f", "leaf 1", "< leaf",
                "target 1", "~ target -> tail", "tail 2", "< tail", "main 2", "< main (end)"}));
  EXPECT_EQ(r.totals.instructions, 9u);
  EXPECT_EQ(r.totals.calls, 2u);
  EXPECT_EQ(r.totals.returns, 2u);
  // target and tail, entered at their first instruction by the frame's jumps (a PLT entry's,
  // a tail call), count a call each, as callgrind counts them (the totals count call
  // instructions).
  ExpectFunctions(r.functions, {{"main", 3, 9, 0},
                                {"stub", 1, 1, 1},
                                {"target", 2, 3, 1},
                                {"leaf", 1, 1, 1},
                                {"tail", 2, 2, 1}});
}

// A stream that begins inside g (TIP.PGE 0x401014, as a forked child's begins inside _Fork):
// g gets its frame at its first instruction. g returns to m1 (TIP 0x40100d), a caller entered
// before tracing began: m1's frame opens there, not at its next call; m1 calls k, k returns
// (TNT), m1 returns to main (TIP 0x401005), whose frame opens there, and main jumps away.
TEST(CallStackTest, AStreamThatBeginsInsideAFunctionGivesItAFrameAtOnce) {
  std::vector<uint8_t> t = StartAtMain();
  t[t.size() - 6] = 0x14;
  t.insert(t.end(), {0x6d, 0x0d, 0x10, 0x40, 0x00, 0x00, 0x00, 0x06, 0x6d, 0x05, 0x10, 0x40, 0x00,
                     0x00, 0x00, 0x01});
  ModelResult r;
  EXPECT_EQ(
      DecodeLogged("callstack_signal.elf", t, &r),
      (std::vector<std::string>{"> g (implicit) ret=0x0", "g 3", "< g", "> m1 (implicit) ret=0x0",
                                "m1 1", "> k ret=0x401012", "k 2", "< k", "m1 1", "< m1",
                                "> main (implicit) ret=0x0", "main 2", "< main (end)"}));
  EXPECT_EQ(r.totals.calls, 1u);
  EXPECT_EQ(r.totals.returns, 1u);  // k's: the others return for implicit frames
  ExpectFunctions(r.functions,
                  {{"g", 3, 3, 0}, {"m1", 2, 4, 0}, {"k", 2, 2, 1}, {"main", 2, 2, 0}});
}

// callstack_tail's catcher calls thrower, thrower calls unwinder, and unwinder jumps (TIP
// 0x40101a) into the middle of catcher, which has a frame below: as an exception reaches its
// landing pad (or a longjmp its setjmp), thrower's and unwinder's frames end there without a
// return, and catcher goes on in its own frame (gdb: main;catcher), not in a renamed one
// above them.
TEST(CallStackTest, AJumpIntoTheMiddleOfAFunctionBelowLeavesTheFramesAbove) {
  std::vector<uint8_t> t = StartAtMain();
  t[t.size() - 6] = 0x14;
  t.insert(t.end(), {0x6d, 0x1a, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  ModelResult r;
  EXPECT_EQ(DecodeLogged("callstack_tail.elf", t, &r),
            (std::vector<std::string>{"> catcher (implicit) ret=0x0", "catcher 1",
                                      "> thrower ret=0x401019", "thrower 1",
                                      "> unwinder ret=0x401022", "unwinder 1", "< unwinder",
                                      "< thrower", "catcher 2", "< catcher (end)"}));
  EXPECT_EQ(r.totals.calls, 2u);
  EXPECT_EQ(r.totals.returns, 0u);
}

// callstack_tail's code without a symbol (0x401025, "[callstack_tail.elf]", the stream's
// first function) calls stub2, which jumps (direct) on into more code without a symbol, which
// jumps (TIP 0x401011) on into leaf; leaf returns (TNT). Code without a symbol has no entry:
// jumping into it renames stub2's frame, as into any other function, and does not return to
// the frame below that runs such code too (as a stripped program's PLT entry jumps to PLT0).
TEST(CallStackTest, AJumpIntoCodeWithoutASymbolRenamesTheFrame) {
  std::vector<uint8_t> t = StartAtMain();
  t[t.size() - 6] = 0x25;
  t.insert(t.end(), {0x6d, 0x11, 0x10, 0x40, 0x00, 0x00, 0x00, 0x06, 0x01});
  ModelResult r;
  EXPECT_EQ(DecodeLogged("callstack_tail.elf", t, &r),
            (std::vector<std::string>{"> [callstack_tail.elf] (implicit) ret=0x0",
                                      "[callstack_tail.elf] 1", "> stub2 ret=0x40102a", "stub2 1",
                                      "~ stub2 -> [callstack_tail.elf]", "[callstack_tail.elf] 1",
                                      "~ [callstack_tail.elf] -> leaf", "leaf 1", "< leaf",
                                      "[callstack_tail.elf] 1", "< [callstack_tail.elf] (end)"}));
  EXPECT_EQ(r.totals.returns, 1u);
}

// Two programs, each with a call at 0x401000 but of another length: after the first, the
// second's call must still return to the instruction after its own call (0x401002), not after
// the first program's (0x401005, which is f's entry there: the call would enter nothing).
TEST(CallStackTest, ACallSiteAtTheSameAddressInAnotherProgramHasItsOwnLength) {
  auto call5 = Image("callstack_signal.elf");
  auto call2 = Image("callstack_call2.elf");
  ASSERT_NE(call5, nullptr);
  ASSERT_NE(call2, nullptr);
  Log log;
  CallStack model(*call5, &log);
  log.functions = &model.functions();
  Decode(Call5Trace(), *call5, model);
  log.lines.clear();
  model.SetImage(*call2);
  Decode(Call2Trace(), *call2, model);
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{"> main (implicit) ret=0x0", "main 1", "> f ret=0x401002",
                                      "f 2", "< f", "main 2", "< main (end)"}));
  EXPECT_EQ(model.totals().calls, 4u);
  EXPECT_EQ(model.totals().returns, 4u);
}

// The traces of the tests above, each over its program.
std::vector<std::pair<std::string, std::vector<uint8_t>>> Cases() {
  std::vector<uint8_t> in_g = StartAtMain();
  in_g[in_g.size() - 6] = 0x14;
  std::vector<uint8_t> unwind = in_g;
  in_g.insert(in_g.end(), {0x6d, 0x0d, 0x10, 0x40, 0x00, 0x00, 0x00, 0x06, 0x6d, 0x05, 0x10, 0x40,
                           0x00, 0x00, 0x00, 0x01});
  unwind.insert(unwind.end(), {0x6d, 0x1a, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  std::vector<uint8_t> nosym = StartAtMain();
  nosym[nosym.size() - 6] = 0x25;
  nosym.insert(nosym.end(), {0x6d, 0x11, 0x10, 0x40, 0x00, 0x00, 0x00, 0x06, 0x01});
  return {{"callstack_signal.elf", Call5Trace()},  {"callstack_call2.elf", Call2Trace()},
          {"callstack_tail.elf", TailCallTrace()}, {"callstack_signal.elf", in_g},
          {"callstack_tail.elf", unwind},          {"callstack_tail.elf", nosym}};
}

// Walked blocks (CallStack::OnWholeBlock) with their memos give what OnBlock gives, where a
// memo holds (a block in one function with a symbol) and where it must not be used: a block
// that goes on into another function by a direct jump (callstack_tail's target jumping to
// tail), a jump into the middle of a caller below, code without a symbol, and the same
// addresses in another program (one model through every case, its image set to each case's,
// the memos kept by address across them: the call at 0x401000 is 5 bytes in callstack_signal,
// 2 in callstack_call2). Each case twice: memos filled, then used.
TEST(CallStackTest, WalkedBlocksWithMemosGiveWhatBlocksGive) {
  std::map<std::string, std::unique_ptr<ProgramImage>> images;
  for (const auto& [program, trace] : Cases()) {
    if (!images.contains(program)) images[program] = Image(program);
    ASSERT_NE(images[program], nullptr);
  }
  const ProgramImage& first = *images["callstack_signal.elf"];
  Log want_log, got_log;
  CallStack want(first, &want_log), got(first, &got_log);
  want_log.functions = &want.functions();
  got_log.functions = &got.functions();
  Memos memos;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [program, trace] : Cases()) {
      SCOPED_TRACE(program);
      want.SetImage(*images[program]);
      got.SetImage(*images[program]);
      Decode(trace, *images[program], want);
      Decode(trace, *images[program], got, &memos);
      EXPECT_EQ(got_log.lines, want_log.lines);
      want_log.lines.clear();
      got_log.lines.clear();
    }
  }
  EXPECT_GT(memos.size(), 10u);
  ASSERT_EQ(got.functions().size(), want.functions().size());
  for (size_t i = 0; i < want.functions().size(); ++i) {
    const Function &g = got.functions()[i], &w = want.functions()[i];
    EXPECT_EQ(std::tie(g.name, g.self, g.inclusive, g.calls),
              std::tie(w.name, w.self, w.inclusive, w.calls));
  }
  EXPECT_EQ(got.totals().instructions, want.totals().instructions);
  EXPECT_EQ(got.totals().calls, want.totals().calls);
  EXPECT_EQ(got.totals().returns, want.totals().returns);
}

// Code without symbols (raw memory pages, a stripped library) is named by the frame on top
// when a call named that frame by its address: a walked block there is memoised as named by
// the stack, not by the function of its first run, so the same block (0x5000, reached by a
// jump from two call targets) counts in sub_2000 and then in sub_3000, as OnBlock counts it.
TEST(CallStackTest, AWalkedBlockWithoutASymbolIsNamedByTheStackAtEachRun) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  std::vector<uint8_t> code(0x5010);
  for (size_t i = 0; i < code.size(); i += 5) code[i] = 0xe8;  // call rel32: 5 bytes each
  (*image)->AddBytes("nosym.bin", 0x1000, code);
  const std::vector<pt_block> blocks = {
      HandBlock(0x1000, 0x1000, 1, ptic_call),   HandBlock(0x2000, 0x2000, 1, ptic_jump),
      HandBlock(0x5000, 0x5005, 2, ptic_return), HandBlock(0x1005, 0x1005, 1, ptic_call),
      HandBlock(0x3000, 0x3000, 1, ptic_jump),   HandBlock(0x5000, 0x5005, 2, ptic_return),
      HandBlock(0x100a, 0x100a, 1, ptic_jump)};
  Log want_log, got_log;
  CallStack want(**image, &want_log), got(**image, &got_log);
  want_log.functions = &want.functions();
  got_log.functions = &got.functions();
  Memos memos;
  for (int pass = 0; pass < 2; ++pass) {  // memos filled, then used
    for (const pt_block& b : blocks) {
      want.OnBlock(b);
      got.OnWholeBlock(b, MemoOf(memos, b));
    }
    want.Reset();
    got.Reset();
    EXPECT_EQ(got_log.lines, want_log.lines);
    EXPECT_EQ(
        got_log.lines,
        (std::vector<std::string>{
            "> [nosym.bin] (implicit) ret=0x0", "[nosym.bin] 1", "> sub_2000 ret=0x1005",
            "sub_2000 1", "sub_2000 2", "< sub_2000", "[nosym.bin] 1", "> sub_3000 ret=0x100a",
            "sub_3000 1", "sub_3000 2", "< sub_3000", "[nosym.bin] 1", "< [nosym.bin] (end)"}));
    want_log.lines.clear();
    got_log.lines.clear();
  }
  EXPECT_NE(MemoOf(memos, blocks[2]).value, 0u);  // the walk took the memo, not OnBlock
}

// `call .` (E8 FB FF FF FF at 0x1000) run 70,000 times, as the block decoder reports it: one
// block per call. The stack stops at kMaxFrames (the first call's caller, the implicit frame,
// is one of them); the calls beyond are counted and said once.
constexpr uint8_t kCallSelf[] = {0xe8, 0xfb, 0xff, 0xff, 0xff};
constexpr uint64_t kCalls = 70000;

pt_block CallSelfBlock() { return HandBlock(0x1000, 0x1000, 1, ptic_call); }

TEST(CallStackTest, ACallToItselfStopsGrowingTheStackAtTheLimit) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("callself.bin", 0x1000, kCallSelf);
  CallStack model(**image);
  for (uint64_t i = 0; i < kCalls; ++i) model.OnBlock(CallSelfBlock());
  // The same with a symbol, as walked blocks with their memo.
  auto named = ProgramImage::Create();
  ASSERT_THAT(named, IsOk());
  (*named)->AddBytes("callself.bin", 0x1000, kCallSelf);
  (*named)->AddSymbols(std::vector<Symbol>{{0x1000, 0x1005, "self"}});
  CallStack walked(**named);
  BlockMemo memo;
  for (uint64_t i = 0; i < kCalls; ++i) walked.OnWholeBlock(CallSelfBlock(), memo);
  EXPECT_EQ(memo.value >> 32, 0u);  // the function "self", the call 5 bytes
  EXPECT_EQ(memo.value & 0xff00, 0x500u);
  EXPECT_EQ(walked.frames().size(), CallStack::kMaxFrames);
  EXPECT_EQ(walked.totals().calls, kCalls - 1);
  EXPECT_EQ(walked.totals().dropped_frames, kCalls - CallStack::kMaxFrames);
  EXPECT_EQ(walked.frames().back().return_address, 0x1005u);
  EXPECT_EQ(model.frames().size(), CallStack::kMaxFrames);
  EXPECT_EQ(model.totals().calls, kCalls - 1);  // the last call's callee never ran
  EXPECT_EQ(model.totals().dropped_frames, kCalls - CallStack::kMaxFrames);
  EXPECT_EQ(model.DepthWarning(),
            "call stack deeper than 65536 frames: 4464 calls got no frame (their callees' "
            "instructions count in the frame below: a recursion that deep, or code calling "
            "itself without returning, e.g. `call .`)");
  model.Reset();
  EXPECT_TRUE(model.frames().empty());
}

// calls (text and JSON) and timeline say so once too.
TEST(CallStackTest, CallsAndTimelineWarnOnceOfDroppedFrames) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("callself.bin", 0x1000, kCallSelf);
  const std::string warning = "call stack deeper than 65536 frames: 4464 calls got no frame";
  for (int kind = 0; kind < 3; ++kind) {
    std::FILE* out = std::tmpfile();
    OutputOptions options;
    options.json = kind == 1;
    auto sink =
        kind == 2 ? MakeTimelineSink(**image, out, options) : MakeCallsSink(**image, out, options);
    for (uint64_t i = 0; i < kCalls; ++i) sink->OnBlock(CallSelfBlock());
    ASSERT_THAT(sink->Finish(DecodeTotals{}), IsOk());
    const std::string text = ::ptkit::decoder::testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    const std::string want = kind == 0   ? "[warning: " + warning
                             : kind == 1 ? "{\"warning\":\"" + warning
                                         : "\"otherData\":{\"warning\":\"" + warning;
    EXPECT_NE(text.find(want), std::string::npos) << kind;
    EXPECT_EQ(text.find(warning), text.rfind(warning)) << kind;
  }
}

// stats says so once, in text and JSON.
TEST(CallStackTest, StatsWarnsOnceOfDroppedFrames) {
  auto image = ProgramImage::Create();
  ASSERT_THAT(image, IsOk());
  (*image)->AddBytes("callself.bin", 0x1000, kCallSelf);
  for (bool json : {false, true}) {
    std::FILE* out = std::tmpfile();
    OutputOptions options;
    options.json = json;
    auto sink = MakeStatsSink(**image, out, options);
    for (uint64_t i = 0; i < kCalls; ++i) sink->OnBlock(CallSelfBlock());
    ASSERT_THAT(sink->Finish(DecodeTotals{}), IsOk());
    const std::string text = ::ptkit::decoder::testing::ReadAll(out);
    EXPECT_EQ(std::fclose(out), 0);
    const std::string warning = "call stack deeper than 65536 frames: 4464 calls got no frame";
    EXPECT_NE(text.find(json ? "\"warnings\": [\n    \"" + warning : "# warning: " + warning),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find(warning), text.rfind(warning)) << text;
  }
}

}  // namespace

namespace {

// Chunk mode (CallStack::BeginChunk, for parallel decoding): R at 0x1000 is 64 calls of 5
// bytes, to G (0x2000, a leaf) and to R itself, alternately; a random walk of calls and
// returns over it that recurses ~60 frames deep, so that R has many frames at once while G
// runs, and chunks return past their start.
constexpr uint64_t kChunkR = 0x1000, kChunkG = 0x2000;

// `symbols`: R and G named by symbols; without, stripped code (named by the addresses calls
// enter, and in frames of B by B's top: the chunk's kBaseTop functions).
std::unique_ptr<ProgramImage> ChunkImage(bool symbols = true) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, IsOk());
  std::vector<uint8_t> r;
  for (int i = 0; i < 64; ++i) {
    const uint64_t at = kChunkR + 5 * i;
    const uint64_t to = i % 2 == 0 ? kChunkG : kChunkR;
    const auto rel = static_cast<uint32_t>(to - (at + 5));
    r.insert(r.end(), {0xe8, static_cast<uint8_t>(rel), static_cast<uint8_t>(rel >> 8),
                       static_cast<uint8_t>(rel >> 16), static_cast<uint8_t>(rel >> 24)});
  }
  std::vector<uint8_t> g(16, 0x90);
  g.back() = 0xc3;
  (*image)->AddBytes("r.bin", kChunkR, r);
  (*image)->AddBytes("g.bin", kChunkG, g);
  const Symbol named[] = {{kChunkR, kChunkR + r.size(), "R"}, {kChunkG, kChunkG + 16, "G"}};
  if (symbols) (*image)->AddSymbols(named);
  return std::move(*image);
}

std::vector<pt_block> ChunkWalk(uint32_t seed, size_t steps) {
  std::vector<pt_block> blocks;
  auto block = [&](uint64_t ip, uint16_t ninsn, pt_insn_class iclass) {
    pt_block b = {};
    b.ip = ip;
    b.end_ip = ip + (iclass == ptic_return && ip >= kChunkG ? ninsn - 1 : 0);
    b.ninsn = ninsn;
    b.iclass = iclass;
    b.mode = ptem_64bit;
    blocks.push_back(b);
  };
  uint32_t x = seed;
  auto next = [&] {
    x = x * 1103515245 + 12345;
    return (x >> 16) & 0x7fff;
  };
  std::vector<uint64_t> returns;  // the walk's return addresses
  uint64_t pc = kChunkR;
  for (size_t s = 0; s < steps; ++s) {
    const size_t depth = returns.size();
    const bool deeper = depth < 8 || (depth < 60 && next() % 100 < 52);
    if ((pc - kChunkR) / 5 >= 62 || !deeper) {
      if (returns.empty()) break;
      block(pc, 1 + next() % 3, ptic_return);  // a ret after straight-line code, in R
      blocks.back().end_ip = pc;
      pc = returns.back();
      returns.pop_back();
      continue;
    }
    block(pc, 1, ptic_call);
    returns.push_back(pc + 5);
    if ((pc - kChunkR) / 5 % 2 == 0) {  // G runs and returns
      block(kChunkG, static_cast<uint16_t>(2 + next() % 14), ptic_return);
      pc = returns.back();
      returns.pop_back();
    } else {
      pc = kChunkR;
    }
  }
  return blocks;
}

struct ChunkCounts {
  std::map<std::string, std::tuple<uint64_t, uint64_t, uint64_t>> functions;  // self, incl, calls
  uint64_t instructions, calls, returns;
  bool operator==(const ChunkCounts&) const = default;
};

ChunkCounts CountsOf(CallStack& model) {
  model.Reset();
  ChunkCounts c{{}, model.totals().instructions, model.totals().calls, model.totals().returns};
  for (const Function& fn : model.functions()) {
    c.functions[fn.name] = {fn.self, fn.inclusive, fn.calls};
  }
  return c;
}

}  // namespace

// The walk cut into chunks at random blocks: each chunk modelled alone from its head (the 20
// blocks before it), then applied to the serial model, gives the serial model's frames and
// counts exactly: the inclusive count of a function with several frames below the chunk's
// start, returns resolved against the stack the chunks before left.
TEST(CallStackTest, ChunksAppliedInOrderGiveTheSerialModel) {
  for (const bool symbols : {true, false}) {
    SCOPED_TRACE(symbols ? "with symbols" : "stripped");
    auto image = ChunkImage(symbols);
    size_t applied = 0, tried = 0, ops = 0;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::vector<pt_block> blocks = ChunkWalk(seed, 4000);
      ASSERT_GT(blocks.size(), 3000u);
      CallStack all(*image);
      for (const pt_block& b : blocks) all.OnBlock(b);
      const std::vector<Frame> all_frames = all.frames();
      const ChunkCounts want = CountsOf(all);
      // The same as walked blocks with their memos, serial and in chunks.
      Memos memos;
      CallStack walked(*image);
      for (const pt_block& b : blocks) walked.OnWholeBlock(b, MemoOf(memos, b));
      EXPECT_TRUE(CountsOf(walked) == want) << "seed " << seed;

      CallStack merged(*image);
      size_t at = 0;
      uint32_t x = seed;
      while (at < blocks.size()) {
        x = x * 1103515245 + 12345;
        const size_t end = std::min(blocks.size(), at + 50 + (x >> 16) % 400);
        CallStack chunk(*image);
        for (size_t i = at >= 20 ? at - 20 : 0; i < at; ++i) chunk.OnBlock(blocks[i]);
        chunk.BeginChunk();
        for (size_t i = at; i < end; ++i) {
          if (i % 2 == 0) {
            chunk.OnBlock(blocks[i]);
          } else {
            chunk.OnWholeBlock(blocks[i], MemoOf(memos, blocks[i]));
          }
        }
        ++tried;
        CallStack::ChunkPlan plan;
        if (merged.CheckChunk(chunk, plan)) {
          ++applied;
          ops += chunk.chunk_ops().size();
          merged.ApplyChunk(chunk, plan);
        } else {
          for (size_t i = at; i < end; ++i) merged.OnBlock(blocks[i]);
        }
        at = end;
      }
      ASSERT_EQ(merged.frames().size(), all_frames.size()) << "seed " << seed;
      for (size_t i = 0; i < all_frames.size(); ++i) {
        EXPECT_EQ(merged.functions()[merged.frames()[i].function].name,
                  all.functions()[all_frames[i].function].name);
        EXPECT_EQ(merged.frames()[i].return_address, all_frames[i].return_address);
        EXPECT_EQ(merged.frames()[i].entry_count, all_frames[i].entry_count);
        EXPECT_EQ(merged.frames()[i].implicit, all_frames[i].implicit);
      }
      EXPECT_TRUE(CountsOf(merged) == want) << "seed " << seed;
    }
    // Nearly every chunk is a summary, and they returned past their starts.
    EXPECT_GT(applied, tried * 9 / 10);
    EXPECT_GT(ops, applied);
    std::printf("%s: %zu of %zu chunks applied, %zu returns past a chunk's start\n",
                symbols ? "with symbols" : "stripped", applied, tried, ops);
  }
}

// A run of conditional branches in the function the block before ran (OnWholeRun's common
// case) after a far transfer, then a jump into the middle of the caller: the run leaves the flow
// going on by a jump, as its blocks do, so that the jump ends the callee's frame (a longjmp).
TEST(CallStackTest, AOneFunctionRunGoesOnAsItsBlocks) {
  auto image = ChunkImage();
  const pt_block call = HandBlock(kChunkR, kChunkR, 1, ptic_call);
  const pt_block syscall = HandBlock(kChunkG, kChunkG + 1, 2, ptic_far_call);
  const std::array<pt_block, 2> branches = {HandBlock(kChunkG + 2, kChunkG + 3, 2, ptic_cond_jump),
                                            HandBlock(kChunkG + 4, kChunkG + 4, 1, ptic_cond_jump)};
  const pt_block back = HandBlock(kChunkR + 10, kChunkR + 10, 1, ptic_call);
  Memos memos;
  BlockMemo run_memo;
  std::array<BlockMemo*, 2> m = {&MemoOf(memos, branches[0]), &MemoOf(memos, branches[1])};
  WalkedRun run;
  run.blocks = branches;
  run.memos = m;
  run.ninsn = 3;
  run.memo = &run_memo;
  CallStack by_run(*image), by_blocks(*image);
  by_run.OnWholeBlock(call, MemoOf(memos, call));
  by_blocks.OnWholeBlock(call, MemoOf(memos, call));
  for (int pass = 0; pass < 2; ++pass) {  // the run's memo made, then read
    by_run.OnWholeBlock(syscall, MemoOf(memos, syscall));
    by_blocks.OnWholeBlock(syscall, MemoOf(memos, syscall));
    by_run.OnWholeRun(run);
    for (const pt_block& b : branches) by_blocks.OnWholeBlock(b, MemoOf(memos, b));
  }
  by_run.OnWholeBlock(back, MemoOf(memos, back));
  by_blocks.OnWholeBlock(back, MemoOf(memos, back));
  ASSERT_EQ(by_blocks.frames().size(), 1u);  // R's: the jump back into R ended G's frame
  EXPECT_EQ(by_run.frames().size(), 1u);
  EXPECT_TRUE(CountsOf(by_run) == CountsOf(by_blocks));
}

}  // namespace ptkit::decoder

namespace ptkit::decoder {

// A stream's first chunk (a model given nothing before BeginChunk) is modelled from an empty
// stack, as the serial model is after another stream (Reset): it applies there, and gives what
// the serial model gives; it does not apply to a model with frames.
TEST(CallStackTest, AStreamsFirstChunkAppliesAfterAnotherStream) {
  auto image = ChunkImage();
  const std::vector<pt_block> first = ChunkWalk(1, 2000), second = ChunkWalk(2, 2000);
  ASSERT_GT(second.size(), 1000u);
  CallStack all(*image);
  for (const pt_block& b : first) all.OnBlock(b);
  all.Reset();  // another stream (FlowSink::OnStream)
  for (const pt_block& b : second) all.OnBlock(b);
  const std::vector<Frame> all_frames = all.frames();
  const ChunkCounts want = CountsOf(all);

  CallStack chunk(*image);
  chunk.BeginChunk();
  for (size_t i = 0; i < 500; ++i) chunk.OnBlock(second[i]);
  CallStack::ChunkPlan plan;
  CallStack with_frames(*image);
  for (const pt_block& b : first) with_frames.OnBlock(b);
  ASSERT_FALSE(with_frames.frames().empty());
  EXPECT_FALSE(with_frames.CheckChunk(chunk, plan));

  CallStack merged(*image);
  for (const pt_block& b : first) merged.OnBlock(b);
  merged.Reset();
  ASSERT_TRUE(merged.CheckChunk(chunk, plan));
  merged.ApplyChunk(chunk, plan);
  for (size_t i = 500; i < second.size(); ++i) merged.OnBlock(second[i]);
  ASSERT_EQ(merged.frames().size(), all_frames.size());
  for (size_t i = 0; i < all_frames.size(); ++i) {
    EXPECT_EQ(merged.frames()[i].return_address, all_frames[i].return_address);
    EXPECT_EQ(merged.frames()[i].entry_count, all_frames[i].entry_count);
    EXPECT_EQ(merged.frames()[i].implicit, all_frames[i].implicit);
  }
  EXPECT_TRUE(CountsOf(merged) == want);
}

// Tracing stopped (a system call) and enabled again with a frame of the chunk on the stack and
// none of them expecting a return there: the chunk applies where no frame below its start
// expects one either (tracing resumed after the system call: the serial model's counts), and
// not where one does (the serial model unwinds to it: the chunk's records are given instead).
TEST(CallStackTest, AChunkWithTracingEnabledOverItsFramesAppliesWhereNoFrameBelowReturnsThere) {
  auto image = ChunkImage();
  pt_event disabled = {}, enabled = {};
  disabled.type = ptev_disabled;
  disabled.ip_suppressed = 1;
  enabled.type = ptev_enabled;
  // Before the chunk: R calls G (a frame returning to R + 5).
  const std::array<pt_block, 2> before = {HandBlock(kChunkR, kChunkR, 1, ptic_call),
                                          HandBlock(kChunkG, kChunkG + 3, 4, ptic_cond_jump)};
  // In it: G calls R (a frame returning to G + 5), which makes a system call at R + 10.
  const std::array<pt_block, 2> in = {HandBlock(kChunkG + 4, kChunkG + 4, 1, ptic_call),
                                      HandBlock(kChunkR + 10, kChunkR + 10, 1, ptic_far_call)};
  for (const uint64_t resume : {kChunkR + 12, kChunkR + 5}) {
    SCOPED_TRACE(resume);
    auto feed = [&](CallStack& m) {
      for (const pt_block& b : in) m.OnBlock(b);
      m.OnEvent(disabled);
      enabled.variant.enabled.ip = resume;
      m.OnEvent(enabled);
    };
    CallStack all(*image);
    for (const pt_block& b : before) all.OnBlock(b);
    feed(all);
    const size_t depth = all.frames().size();
    EXPECT_EQ(depth, resume == kChunkR + 5 ? 1u : 3u);  // R's implicit frame below
    const ChunkCounts want = CountsOf(all);

    CallStack chunk(*image);
    for (const pt_block& b : before) chunk.OnBlock(b);
    chunk.BeginChunk();
    feed(chunk);
    EXPECT_FALSE(chunk.chunk_failed());
    CallStack merged(*image);
    for (const pt_block& b : before) merged.OnBlock(b);
    CallStack::ChunkPlan plan;
    const bool applies = merged.CheckChunk(chunk, plan);
    // R + 5 is where G's frame, below the chunk, returns: the serial model unwinds to it.
    EXPECT_EQ(applies, resume != kChunkR + 5);
    if (applies) {
      merged.ApplyChunk(chunk, plan);
    } else {
      feed(merged);
    }
    EXPECT_EQ(merged.frames().size(), depth);
    EXPECT_TRUE(CountsOf(merged) == want);
  }
}

}  // namespace ptkit::decoder

namespace ptkit::decoder {

// Runs' programs are kept per run memo, at most CallStack::kMaxPrograms: past that every one is
// forgotten and made again (with every memo). 9,000 runs of three blocks (R calls G, G returns,
// R calls R: the stack grows by one a run), each with a memo of its own and G's length its own,
// twice over: the counts and frames of one block at a time.
TEST(CallStackTest, RunsPastTheProgramsKeptGiveWhatBlocksGive) {
  auto image = ChunkImage();
  constexpr size_t kRuns = 9000;
  std::vector<std::array<pt_block, 3>> runs;
  for (size_t i = 0; i < kRuns; ++i) {
    const auto g = static_cast<uint16_t>(2 + i % 14);
    runs.push_back({HandBlock(kChunkR, kChunkR, 1, ptic_call),
                    HandBlock(kChunkG, kChunkG + g - 1, g, ptic_return),
                    HandBlock(kChunkR + 5, kChunkR + 5, 1, ptic_call)});
  }
  Memos memos;
  std::vector<BlockMemo> run_memos(kRuns);
  CallStack by_runs(*image), by_blocks(*image);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < kRuns; ++i) {
      std::array<BlockMemo*, 3> m;
      for (size_t k = 0; k < 3; ++k) m[k] = &MemoOf(memos, runs[i][k]);
      WalkedRun run;
      run.blocks = runs[i];
      run.memos = m;
      run.ninsn = runs[i][0].ninsn + runs[i][1].ninsn + runs[i][2].ninsn;
      run.memo = &run_memos[i];
      by_runs.OnWholeRun(run);
      for (const pt_block& b : runs[i]) by_blocks.OnBlock(b);
    }
  }
  ASSERT_EQ(by_runs.frames().size(), by_blocks.frames().size());
  EXPECT_EQ(by_runs.frames().size(),
            2 * kRuns);  // R entered before, then each call of R but the last
  EXPECT_TRUE(CountsOf(by_runs) == CountsOf(by_blocks));
}

// Past kMaxFrames a run's program only counts (RunOps' deep case: its sums at once): 70,000
// runs of R calling G, G returning and R calling R (two calls and a return a run, the stack one
// deeper each, beyond the frames kept from about the 65,536th on) give the frames, the calls
// given no frame and the counts of one block at a time.
TEST(CallStackTest, RunsBeyondTheFramesKeptGiveWhatBlocksGive) {
  auto image = ChunkImage();
  constexpr size_t kRuns = 70000;
  const std::array<pt_block, 3> blocks = {HandBlock(kChunkR, kChunkR, 1, ptic_call),
                                          HandBlock(kChunkG, kChunkG + 3, 4, ptic_return),
                                          HandBlock(kChunkR + 5, kChunkR + 5, 1, ptic_call)};
  Memos memos;
  std::array<BlockMemo*, 3> m;
  for (size_t k = 0; k < 3; ++k) m[k] = &MemoOf(memos, blocks[k]);
  BlockMemo run_memo;
  CallStack by_runs(*image), by_blocks(*image);
  for (size_t i = 0; i < kRuns; ++i) {
    WalkedRun run;
    run.blocks = blocks;
    run.memos = m;
    run.ninsn = blocks[0].ninsn + blocks[1].ninsn + blocks[2].ninsn;
    run.memo = &run_memo;
    by_runs.OnWholeRun(run);
    for (const pt_block& b : blocks) by_blocks.OnBlock(b);
  }
  EXPECT_EQ(by_runs.frames().size(), CallStack::kMaxFrames);
  EXPECT_EQ(by_blocks.frames().size(), CallStack::kMaxFrames);
  EXPECT_GT(by_runs.totals().dropped_frames, 0u);
  EXPECT_EQ(by_runs.totals().dropped_frames, by_blocks.totals().dropped_frames);
  EXPECT_EQ(by_runs.DepthWarning(), by_blocks.DepthWarning());
  EXPECT_TRUE(CountsOf(by_runs) == CountsOf(by_blocks));
}

}  // namespace ptkit::decoder

namespace ptkit::decoder {
namespace {

// IP filtering (review of be4d497). main calls untraced code (sub_500000, the TIP.PGD's target),
// which calls back into g (tracing enabled at g's entry, not resumed); g returns into the untraced
// code; tracing resumes at main's return address 0x401005: the untraced frame must be popped.
TEST(CallStackTest, ACallbackFromUntracedCodeIsNoSignalHandler) {
  auto image = Image("callstack_signal.elf");
  ASSERT_NE(image, nullptr);
  CallStack m(*image);
  pt_event dis = {}, en = {};
  dis.type = ptev_disabled;
  en.type = ptev_enabled;
  m.OnBlock(HandBlock(0x401000, 0x401000, 1, ptic_call));  // main: call (into untraced code)
  dis.variant.disabled.ip = 0x500000;
  m.OnEvent(dis);
  ASSERT_EQ(m.frames().size(), 2u);  // main (implicit), sub_500000
  en.variant.enabled.ip = 0x401013;  // the callback g
  m.OnEvent(en);
  m.OnBlock(HandBlock(0x401013, 0x401016, 4, ptic_return));
  dis.variant.disabled.ip = 0x500010;  // back into the untraced code
  m.OnEvent(dis);
  en.variant.enabled.ip = 0x401005;  // the untraced code returns to main
  m.OnEvent(en);
  m.OnBlock(HandBlock(0x401005, 0x401005, 1, ptic_cond_jump));
  EXPECT_EQ(m.frames().size(), 1u)
      << "frames left: " << m.frames().size() << ", returns " << m.totals().returns;
  for (const Frame& f : m.frames()) EXPECT_FALSE(f.signal) << m.functions()[f.function].name;
}

// The same through a PLT entry: its jump (not a call) takes the flow into untraced code, which
// calls back into g: no signal (they come at an interrupt or a system call), no "(signal)" frame.
TEST(CallStackTest, ACallbackAfterAJumpIntoUntracedCodeIsNoSignalHandler) {
  auto image = Image("callstack_signal.elf");
  ASSERT_NE(image, nullptr);
  CallStack m(*image);
  pt_event dis = {}, en = {};
  dis.type = ptev_disabled;
  en.type = ptev_enabled;
  m.OnBlock(HandBlock(0x401000, 0x401000, 1, ptic_call));  // main calls m1
  m.OnBlock(HandBlock(0x401008, 0x401008, 1, ptic_jump));  // m1 jumps into untraced code
  dis.variant.disabled.ip = 0x500000;
  m.OnEvent(dis);
  en.variant.enabled.ip = 0x401013;  // which calls g
  m.OnEvent(en);
  m.OnBlock(HandBlock(0x401013, 0x401016, 4, ptic_return));
  ASSERT_FALSE(m.frames().empty());
  for (const Frame& f : m.frames()) EXPECT_FALSE(f.signal) << m.functions()[f.function].name;
  EXPECT_EQ(m.totals().calls, 1u);
}

// A chunk with a kClear (overflow) applied over a model with a signal handler
// running: the serial model forgets the signal, the merged one keeps it.
TEST(CallStackTest, AChunkThatClearsTheStackClearsTheSignals) {
  auto image = Image("callstack_signal.elf");
  ASSERT_NE(image, nullptr);
  pt_event adis = {}, dis = {}, en = {}, ovf = {};
  adis.type = ptev_async_disabled;
  adis.variant.async_disabled.at = 0x401005;
  dis.type = ptev_disabled;
  dis.ip_suppressed = 1;
  en.type = ptev_enabled;
  ovf.type = ptev_overflow;
  auto head = [&](CallStack& m) {
    m.OnBlock(HandBlock(0x401005, 0x401005, 1, ptic_cond_jump));  // main (implicit)
    m.OnEvent(adis);
    en.variant.enabled.ip = 0x401019;  // handler's entry
    m.OnEvent(en);
  };
  auto body = [&](CallStack& m) {
    m.OnBlock(HandBlock(0x401019, 0x401019, 1, ptic_cond_jump));
    m.OnEvent(ovf);
    m.OnBlock(HandBlock(0x401000, 0x401000, 1, ptic_call));  // main calls m1
    m.OnBlock(HandBlock(0x401008, 0x401008, 1, ptic_call));  // m1 calls g
    m.OnBlock(HandBlock(0x401013, 0x401013, 1, ptic_cond_jump));
  };
  CallStack all(*image);
  head(all);
  ASSERT_EQ(all.frames().size(), 2u);
  body(all);
  CallStack chunk(*image);
  head(chunk);
  chunk.BeginChunk();
  body(chunk);
  ASSERT_FALSE(chunk.chunk_failed());
  CallStack merged(*image);
  head(merged);
  CallStack::ChunkPlan plan;
  ASSERT_TRUE(merged.CheckChunk(chunk, plan));
  merged.ApplyChunk(chunk, plan);
  ASSERT_EQ(merged.frames().size(), all.frames().size());
  // Tracing enabled where a frame returns (0x40100d, after m1's call of g), not resumed.
  all.OnEvent(dis);
  merged.OnEvent(dis);
  en.variant.enabled.ip = 0x40100d;
  all.OnEvent(en);
  merged.OnEvent(en);
  EXPECT_EQ(merged.frames().size(), all.frames().size());
  EXPECT_EQ(merged.totals().returns, all.totals().returns);
}

}  // namespace
}  // namespace ptkit::decoder

namespace ptkit::decoder {

// Chunk mode with the time (calls' summaries): the walk told a new time every 7th block, cut
// into chunks. A chunk's frames carry the time of their calls and each return past its start
// the time it came at (ChunkOp::tsc), so that the merged model's frames have the serial model's
// times; a chunk applies only where its head left the time the serial model has.
TEST(CallStackTest, ChunksCarryTheTime) {
  auto image = ChunkImage();
  const std::vector<pt_block> blocks = ChunkWalk(3, 4000);
  ASSERT_GT(blocks.size(), 3000u);
  auto give = [&](CallStack& model, size_t i) {
    if (i % 7 == 0) model.OnTime(100 * (i + 1));
    model.OnBlock(blocks[i]);
  };
  CallStack all(*image);
  for (size_t i = 0; i < blocks.size(); ++i) give(all, i);
  CallStack merged(*image);
  size_t applied = 0, ops = 0;
  for (size_t at = 0; at < blocks.size(); at += 300) {
    const size_t end = std::min(blocks.size(), at + 300);
    CallStack chunk(*image);
    for (size_t i = at >= 20 ? at - 20 : 0; i < at; ++i) give(chunk, i);
    chunk.BeginChunk();
    for (size_t i = at; i < end; ++i) give(chunk, i);
    for (const CallStack::ChunkOp& op : chunk.chunk_ops()) {
      EXPECT_TRUE(op.timed);
      EXPECT_GE(op.tsc, 100u);
    }
    CallStack::ChunkPlan plan;
    if (merged.CheckChunk(chunk, plan)) {
      ++applied;
      ops += chunk.chunk_ops().size();
      merged.ApplyChunk(chunk, plan);
    } else {
      for (size_t i = at; i < end; ++i) give(merged, i);
    }
  }
  EXPECT_GE(applied, 10u);
  EXPECT_GT(ops, 0u);
  ASSERT_EQ(merged.frames().size(), all.frames().size());
  for (size_t i = 0; i < all.frames().size(); ++i) {
    EXPECT_EQ(merged.frames()[i].entry_tsc, all.frames()[i].entry_tsc);
    EXPECT_EQ(merged.frames()[i].entry_timed, all.frames()[i].entry_timed);
  }
  EXPECT_EQ(merged.tsc(), all.tsc());
  EXPECT_TRUE(merged.timed());

  // A chunk whose head left no time, or another one, than the serial model has: not applied.
  CallStack serial(*image);
  for (size_t i = 0; i < 600; ++i) give(serial, i);
  ASSERT_TRUE(serial.timed());
  CallStack untimed(*image), other(*image);
  for (size_t i = 580; i < 600; ++i) {
    untimed.OnBlock(blocks[i]);
    other.OnBlock(blocks[i]);
  }
  other.OnTime(serial.tsc() + 1);
  untimed.BeginChunk();
  other.BeginChunk();
  for (size_t i = 600; i < 900; ++i) {
    untimed.OnBlock(blocks[i]);
    other.OnBlock(blocks[i]);
  }
  CallStack::ChunkPlan plan;
  EXPECT_FALSE(serial.CheckChunk(untimed, plan));
  EXPECT_FALSE(serial.CheckChunk(other, plan));
  serial.ForgetTime();
  EXPECT_TRUE(serial.CheckChunk(untimed, plan));
}

}  // namespace ptkit::decoder
