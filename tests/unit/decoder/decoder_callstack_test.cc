// The call stacks of the flow sinks (calls, stats, folded, timeline) on hand-made Intel PT
// over tiny programs (tests/data/decoder/callstack_*.S, built at 0x401000): a call to the
// next instruction, a signal handler that interrupts a callee, and an interrupt at a call's
// target. Each case's folded stacks are what ran.
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
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

using ::ptkit::decoder::testing::kDir;

using ::ptkit::decoder::testing::StartAtMain;
using ::ptkit::decoder::testing::TailCallTrace;

using MakeSink = std::unique_ptr<Sink> (*)(const ProgramImage&, std::FILE*, const OutputOptions&);

// The output of the sink `make` makes, for `trace` over `program`.
std::string Decoded(MakeSink make, const std::string& program, const std::vector<uint8_t>& trace) {
  auto image = ProgramImage::Create();
  EXPECT_THAT(image, IsOk());
  if (!image.ok()) return "";
  EXPECT_THAT((*image)->AddElf({kDir + "/" + program, 0}), IsOk());
  std::FILE* out = std::tmpfile();
  auto sink = make(**image, out, {});
  EXPECT_THAT(DecodeTrace(trace, {}, **image, *sink), IsOk());
  std::string text = ::ptkit::decoder::testing::ReadAll(out);
  EXPECT_EQ(std::fclose(out), 0);
  return text;
}

std::string Folded(const std::string& program, const std::vector<uint8_t>& trace) {
  return Decoded(MakeFoldedSink, program, trace);
}

// main: call 1f; 1: pop %rax; call f; nop; jmp *%rbx. The first call reads the IP and enters
// no function: main's 5 instructions are its own, and f is called once from main.
TEST(CallStackTest, ACallToTheNextInstructionIsNoCall) {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x06, 0x01});  // TNT (f's compressed return), TIP.PGD (jmp *%rbx)
  EXPECT_EQ(Folded("callstack_pic.elf", t), "main 5\nmain;f 2\n");
}

// main calls m1, m1 calls g. An interrupt in g (FUP 0x401014, TIP.PGD) runs a handler (TIP.PGE
// 0x401019) that returns to the restorer (TIP 0x40101b), which leaves (TIP.PGD); tracing
// resumes in g (TIP.PGE 0x401014), g returns to m1 (TIP 0x40100d), m1 calls k, k returns
// (TIP 0x401012), m1 returns to main (TIP 0x401005). The handler's return matches no frame:
// it must not pop g, or g's own return would pop m1 and k would land under main.
TEST(CallStackTest, ASignalHandlerReturningDoesNotUnwindTheInterruptedCalls) {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x7d, 0x14, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01, 0x71, 0x19, 0x10, 0x40, 0x00,
                     0x00, 0x00, 0x6d, 0x1b, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01, 0x71, 0x14, 0x10,
                     0x40, 0x00, 0x00, 0x00, 0x6d, 0x0d, 0x10, 0x40, 0x00, 0x00, 0x00, 0x6d, 0x12,
                     0x10, 0x40, 0x00, 0x00, 0x00, 0x6d, 0x05, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  EXPECT_EQ(Folded("callstack_signal.elf", t),
            "main 3\nmain;m1 3\nmain;m1;g 4\nmain;m1;g;handler 2\nmain;m1;g;restorer 1\n"
            "main;m1;k 2\n");
}

// main calls m1 and an interrupt comes at m1's first instruction (FUP 0x401008, TIP.PGD),
// as a page fault on its first fetch does; tracing resumes there (TIP.PGE 0x401008), then
// g and k run and return (TNT) and m1 returns (TIP 0x401005). m1 is entered all the same,
// not an "[untraced]" callee.
TEST(CallStackTest, AnInterruptAtACallTargetStillEntersTheCallee) {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x7d, 0x08, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01, 0x71, 0x08, 0x10, 0x40,
                     0x00, 0x00, 0x00, 0x0e, 0x6d, 0x05, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  EXPECT_EQ(Folded("callstack_signal.elf", t), "main 3\nmain;m1 3\nmain;m1;g 4\nmain;m1;k 2\n");
}

// main calls m1 and a signal comes at m1's first instruction (FUP 0x401008, TIP.PGD: an
// interrupt at the call's target, not a call into untraced code): its handler (TIP.PGE
// 0x401019) runs on top of m1, returns to the restorer (TIP 0x40101b), which leaves (TIP.PGD);
// m1 resumes at its entry (TIP.PGE 0x401008), g and k return (TNT), m1 returns (TIP
// 0x401005). (Sweep 26 N3: the handler was taken for a callback from untraced code m1 had
// called, and m1's resumption for a signal's handler.)
TEST(CallStackTest, ASignalAtACallTargetRunsItsHandlerOnTopOfTheCallee) {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x7d, 0x08, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01, 0x71, 0x19, 0x10, 0x40, 0x00,
                     0x00, 0x00, 0x6d, 0x1b, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01, 0x71, 0x08, 0x10,
                     0x40, 0x00, 0x00, 0x00, 0x0e, 0x6d, 0x05, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  EXPECT_EQ(Folded("callstack_signal.elf", t),
            "main 3\nmain;m1 3\nmain;m1;g 4\nmain;m1;handler 2\nmain;m1;k 2\n"
            "main;m1;restorer 1\n");
  const std::string calls = Decoded(&MakeCallsSink, "callstack_signal.elf", t);
  EXPECT_THAT(calls, ::testing::HasSubstr("> handler (signal)"));
  EXPECT_THAT(calls, ::testing::Not(::testing::HasSubstr("> m1 (signal)")));
}

// A second signal delivered as the first one's handler leaves (at its restorer's rt_sigreturn
// system call, before the interrupted code resumes): the kernel runs the next handler over the
// same interrupted flow. An interrupt at g's entry (FUP 0x401013, TIP.PGD, after m1's call);
// the handler (TIP.PGE 0x401019) returns to the restorer `sigreturn` (TIP 0x40101d), whose
// system call leaves (TIP.PGD); the handler again (TIP.PGE 0x401019, TIP 0x40101d, TIP.PGD); g
// resumes at its entry (TIP.PGE 0x401013) and returns (TIP 0x40100d), k returns (TIP
// 0x401012), m1 returns (TIP 0x401005). Both handlers run on top of g; neither nests in the
// other, and g's resumption at its entry is no handler. (Sweep 26 N3, variant B: "> t2
// (signal)" at the resumption.)
TEST(CallStackTest, ASignalDeliveredAtTheLastOnesReturnRunsOverTheSameFlow) {
  std::vector<uint8_t> t = StartAtMain();
  const std::vector<uint8_t> handler = {0x71, 0x19, 0x10, 0x40, 0x00, 0x00, 0x00,  // TIP.PGE
                                        0x6d, 0x1d, 0x10, 0x40, 0x00, 0x00, 0x00,  // TIP
                                        0x01};                                     // TIP.PGD
  t.insert(t.end(), {0x7d, 0x13, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  t.insert(t.end(), handler.begin(), handler.end());
  t.insert(t.end(), handler.begin(), handler.end());
  t.insert(t.end(), {0x71, 0x13, 0x10, 0x40, 0x00, 0x00, 0x00, 0x6d, 0x0d, 0x10,
                     0x40, 0x00, 0x00, 0x00, 0x6d, 0x12, 0x10, 0x40, 0x00, 0x00,
                     0x00, 0x6d, 0x05, 0x10, 0x40, 0x00, 0x00, 0x00, 0x01});
  EXPECT_EQ(Folded("callstack_signal.elf", t),
            "main 3\nmain;m1 3\nmain;m1;g 4\nmain;m1;g;handler 4\nmain;m1;g;sigreturn 2\n"
            "main;m1;k 2\n");
  const std::string calls = Decoded(&MakeCallsSink, "callstack_signal.elf", t);
  EXPECT_THAT(calls, ::testing::Not(::testing::HasSubstr("> g (signal)")));
}

// callstack_tail (hand_pt.h): stub jumps on into target, target into tail. Each output
// names the frame after the function running in it from the jump on, as gdb's bt and perf's
// call chains do: folded reads main;target;leaf and main;tail, the timeline ends stub's slice
// and begins target's at the jump, and calls shows the call as made (to stub), as
// `perf script --call-trace` does, and its return from the function that returns (tail).
TEST(CallStackTest, AJumpIntoAnotherFunctionRenamesTheFrameInEveryOutput) {
  EXPECT_EQ(Folded("callstack_tail.elf", TailCallTrace()),
            "main 3\nmain;stub 1\nmain;tail 2\nmain;target 2\nmain;target;leaf 1\n");
  EXPECT_EQ(Decoded(MakeCallsSink, "callstack_tail.elf", TailCallTrace()),
            "         0 [main]\n"
            "         1   > stub\n"
            "         3     > leaf\n"
            "         4     < leaf (1 insns)\n"
            "         7   < tail (6 insns)\n");
  const std::string timeline = Decoded(MakeTimelineSink, "callstack_tail.elf", TailCallTrace());
  // Without timing, "ts" counts instructions.
  const std::regex event("\"ph\":\"([BE])\",\"pid\":1,\"tid\":1,\"ts\":(\\d+),\"name\":\"(\\w+)\"");
  std::string events;
  for (auto it = std::sregex_iterator(timeline.begin(), timeline.end(), event);
       it != std::sregex_iterator(); ++it) {
    events += (*it)[1].str() + " " + (*it)[3].str() + " " + (*it)[2].str() + "\n";
  }
  EXPECT_EQ(events,
            "B main 0\nB stub 1\nE stub 2\nB target 2\nB leaf 3\nE leaf 4\nE target 5\n"
            "B tail 5\nE tail 7\nE main 9\n")
      << timeline;
}

}  // namespace
}  // namespace ptkit::decoder
