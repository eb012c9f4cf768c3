#include "record/emulate/step_events.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status_matchers.h"

namespace ptkit::emulate {
namespace {

using ::ptkit::testing::IsOk;
using swpt::EventKind;

InsnInfo Decode(std::vector<uint8_t> bytes, uint64_t ip = 0x1000) {
  auto info = DecodeInsn(bytes, ip);
  EXPECT_THAT(info, IsOk());
  return info.ok() ? *info : InsnInfo{};
}

TEST(DecodeInsnTest, ClassifiesTheFlowChangingInstructions) {
  InsnInfo jcc = Decode({0x74, 0x10});  // je +0x10
  EXPECT_EQ(jcc.cls, InsnClass::kCondBranch);
  EXPECT_EQ(jcc.size, 2);
  EXPECT_EQ(jcc.target, 0x1012u);
  EXPECT_EQ(Decode({0xe2, 0xfe}).cls, InsnClass::kCondBranch);  // loop
  InsnInfo call = Decode({0xe8, 0x00, 0x01, 0x00, 0x00});       // call +0x100
  EXPECT_EQ(call.cls, InsnClass::kDirectCall);
  EXPECT_EQ(call.target, 0x1105u);
  EXPECT_EQ(Decode({0xff, 0xd0}).cls, InsnClass::kIndirectCall);              // call rax
  EXPECT_EQ(Decode({0xff, 0x25, 0, 0, 0, 0}).cls, InsnClass::kIndirectJump);  // jmp [rip]
  EXPECT_EQ(Decode({0xeb, 0xfe}).cls, InsnClass::kDirectJump);                // jmp $
  EXPECT_EQ(Decode({0xc3}).cls, InsnClass::kReturn);
  EXPECT_EQ(Decode({0xc2, 0x08, 0x00}).cls, InsnClass::kReturn);  // ret 8
  EXPECT_EQ(Decode({0x0f, 0x05}).cls, InsnClass::kSyscall);
  EXPECT_EQ(Decode({0xcd, 0x80}).cls, InsnClass::kSyscall);    // int 0x80
  EXPECT_EQ(Decode({0x48, 0xcf}).cls, InsnClass::kFarBranch);  // iretq
  EXPECT_EQ(Decode({0xcb}).cls, InsnClass::kFarBranch);        // retf
  InsnInfo rep = Decode({0xf3, 0xa4});                         // rep movsb
  EXPECT_EQ(rep.cls, InsnClass::kOther);
  EXPECT_TRUE(rep.rep);
  EXPECT_EQ(Decode({0x48, 0x89, 0xe5}).cls, InsnClass::kOther);  // mov rbp, rsp
}

TEST(DecodeInsnTest, DecodesIn32BitModeWhereAsked) {
  // In compatibility mode 0x40-0x4f are INC/DEC, not REX prefixes (sweep 37b H1: the heaven's
  // gate loop `inc edx; dec ecx; jnz` was taken as one REX-prefixed JNZ).
  const std::vector<uint8_t> loop = {0x42, 0x49, 0x75, 0xfc};
  auto as64 = DecodeInsn(loop, 0x1000);
  ASSERT_THAT(as64, IsOk());
  EXPECT_EQ(as64->cls, InsnClass::kCondBranch);
  auto as32 = DecodeInsn(loop, 0x1000, swpt::ExecMode::k32Bit);
  ASSERT_THAT(as32, IsOk());
  EXPECT_EQ(as32->cls, InsnClass::kOther);
  EXPECT_EQ(as32->size, 1);
  EXPECT_EQ(as32->mode, swpt::ExecMode::k32Bit);
  // call rel32 and ret $0xc (i386 lazy binding's way into an imported function).
  const std::vector<uint8_t> call = {0xe8, 0x00, 0x01, 0x00, 0x00};
  auto call32 = DecodeInsn(call, 0xf7fd0000, swpt::ExecMode::k32Bit);
  ASSERT_THAT(call32, IsOk());
  EXPECT_EQ(call32->cls, InsnClass::kDirectCall);
  EXPECT_EQ(call32->target, 0xf7fd0105u);
  const std::vector<uint8_t> ret = {0xc2, 0x0c, 0x00};
  EXPECT_EQ(DecodeInsn(ret, 0x1000, swpt::ExecMode::k32Bit)->cls, InsnClass::kReturn);
  // Which syscall table the kernel uses.
  const std::vector<uint8_t> syscall = {0x0f, 0x05}, int80 = {0xcd, 0x80}, sysenter = {0x0f, 0x34};
  EXPECT_FALSE(DecodeInsn(syscall, 0x1000)->ia32_syscall);
  EXPECT_TRUE(DecodeInsn(int80, 0x1000)->ia32_syscall);
  EXPECT_TRUE(DecodeInsn(int80, 0x1000, swpt::ExecMode::k32Bit)->ia32_syscall);
  EXPECT_TRUE(DecodeInsn(sysenter, 0x1000, swpt::ExecMode::k32Bit)->ia32_syscall);
}

TEST(ExecModeOfCsTest, LinuxUserSegments) {
  EXPECT_EQ(*ExecModeOfCs(0x33), swpt::ExecMode::k64Bit);
  EXPECT_EQ(*ExecModeOfCs(0x23), swpt::ExecMode::k32Bit);
  EXPECT_THAT(ExecModeOfCs(0x0f), ::ptkit::testing::StatusIs(absl::StatusCode::kUnimplemented,
                                                             ::testing::HasSubstr("0xf")));
}

TEST(DecodeInsnTest, GarbageIsAnErrorNamingTheAddress) {
  std::vector<uint8_t> bad = {0x0f, 0xff};  // ud0 without its ModRM... then nothing
  EXPECT_THAT(DecodeInsn(std::span<const uint8_t>(bad.data(), 1), 0xabc),
              ::ptkit::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::HasSubstr("0xabc")));
}

TEST(AppendStepEventsTest, BranchesBecomeTheirEvents) {
  std::vector<swpt::Event> ev;
  InsnInfo jcc{InsnClass::kCondBranch, 2, false, 0x2000};
  AppendStepEvents(0x1000, jcc, 0x2000, ev);
  AppendStepEvents(0x1000, jcc, 0x1002, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, EventKind::kCondBranch);
  EXPECT_TRUE(ev[0].taken);
  EXPECT_FALSE(ev[1].taken);

  ev.clear();
  AppendStepEvents(0x1000, {InsnClass::kIndirectCall, 2}, 0x5000, ev);
  AppendStepEvents(0x5000, {InsnClass::kReturn, 1}, 0x1002, ev);
  AppendStepEvents(0x1002, {InsnClass::kOther, 3}, 0x1005, ev);  // nothing
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, EventKind::kIndirectCall);
  EXPECT_EQ(ev[0].target, 0x5000u);
  EXPECT_EQ(ev[0].size, 2);
  EXPECT_EQ(ev[1].kind, EventKind::kReturn);
  EXPECT_EQ(ev[1].target, 0x1002u);
}

TEST(AppendStepEventsTest, ASyscallLeavesAndReentersUserTracing) {
  std::vector<swpt::Event> ev;
  AppendStepEvents(0x1000, {InsnClass::kSyscall, 2}, 0x1002, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, EventKind::kDisable);
  EXPECT_TRUE(ev[0].suppress_ip);
  EXPECT_EQ(ev[1].kind, EventKind::kEnable);
  EXPECT_EQ(ev[1].target, 0x1002u);
}

TEST(AppendStepEventsTest, AFarBranchIntoAnotherModeIsPrecededByAModeChange) {
  std::vector<swpt::Event> ev;
  InsnInfo retf{InsnClass::kFarBranch, 1};
  AppendStepEvents(0x401040, retf, 0x401048, swpt::ExecMode::k32Bit, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, EventKind::kModeChange);
  EXPECT_EQ(ev[0].mode, swpt::ExecMode::k32Bit);
  EXPECT_EQ(ev[1].kind, EventKind::kFarBranch);
  EXPECT_EQ(ev[1].target, 0x401048u);
  ev.clear();
  AppendStepEvents(0x401040, retf, 0x401048, ev);  // same mode: no MODE.Exec
  ASSERT_EQ(ev.size(), 1u);
  // A syscall returns to user in the mode the thread is in then (an exec of an i386 program).
  ev.clear();
  AppendStepEvents(0x1000, {InsnClass::kSyscall, 2}, 0x8049000, swpt::ExecMode::k32Bit, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind, EventKind::kEnable);
  EXPECT_EQ(ev[1].mode, swpt::ExecMode::k32Bit);
}

TEST(AppendFilteredStepEventsTest, LeavingIsTipPgdWithTheTargetAndEnteringIsTipPge) {
  std::vector<swpt::Event> ev;
  const InsnInfo jcc{InsnClass::kCondBranch, 2, false, 0x9000};
  AppendFilteredStepEvents(0x1000, jcc, 0x1002, true, true, ev);  // inside: a TNT bit only
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, EventKind::kCondBranch);

  for (InsnClass cls : {InsnClass::kCondBranch, InsnClass::kDirectCall, InsnClass::kIndirectJump,
                        InsnClass::kReturn}) {
    SCOPED_TRACE(static_cast<int>(cls));
    ev.clear();
    AppendFilteredStepEvents(0x1000, {cls, 5, false, 0x7000}, 0x7000, true, false, ev);
    ASSERT_EQ(ev.size(), 1u);  // the branch itself is the TIP.PGD (no TNT bit for a Jcc)
    EXPECT_EQ(ev[0].kind, EventKind::kDisable);
    EXPECT_FALSE(ev[0].suppress_ip);
    EXPECT_EQ(ev[0].target, 0x7000u);
    // A CALL's TIP.PGD pushes its return address for RET compression, as decoders push it.
    EXPECT_EQ(ev[0].size, cls == InsnClass::kDirectCall ? 5 : 0);
  }
  ev.clear();
  AppendFilteredStepEvents(0x1000, {InsnClass::kIndirectCall, 2}, 0x7000, true, false, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, EventKind::kDisable);
  EXPECT_EQ(ev[0].size, 2);

  // Linear code crossing a region's edge keeps the state until the next branch.
  ev.clear();
  AppendFilteredStepEvents(0x1000, {InsnClass::kOther, 5}, 0x1005, true, false, ev);
  AppendFilteredStepEvents(0x7000, {InsnClass::kOther, 5}, 0x7005, false, true, ev);
  EXPECT_TRUE(ev.empty());

  ev.clear();
  AppendFilteredStepEvents(0x1000, {InsnClass::kSyscall, 2}, 0x1002, true, false, ev);
  ASSERT_EQ(ev.size(), 1u);  // the kernel entry disables; the return lands outside
  EXPECT_EQ(ev[0].kind, EventKind::kDisable);
  EXPECT_TRUE(ev[0].suppress_ip);

  ev.clear();
  AppendFilteredStepEvents(0x7000, {InsnClass::kReturn, 1}, 0x1005, false, true, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, EventKind::kEnable);
  EXPECT_EQ(ev[0].target, 0x1005u);

  ev.clear();
  AppendFilteredStepEvents(0x7000, {InsnClass::kIndirectCall, 2}, 0x7100, false, false, ev);
  EXPECT_TRUE(ev.empty());
}

}  // namespace
}  // namespace ptkit::emulate
