// SPDX-License-Identifier: Apache-2.0
//
// ptrecord's answers to the QEMU plugin's questions about pids, on a /proc fixture tree: a
// process of ptrecord's namespace that made two pid namespaces, each with its own pid 1 (sweep
// 37c H1: both were "pid 1" in the recording), and the question asked and answered through a
// slot of the shared region.
#include "record/emulate/guest_pids.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "temp_dir.h"

namespace ptkit::emulate {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(GuestPidsTest, ParsesStatusLinesAndNamespaceLinks) {
  EXPECT_THAT(ParseNsPids("Name:\tmt\nTgid:\t4210\nPPid:\t4200\nNSpid:\t4210\t7\t1\nVmPeak: 1\n"),
              ElementsAre(4210, 7, 1));
  EXPECT_THAT(ParseNsPids("NSpid:\t12\n"), ElementsAre(12));
  EXPECT_THAT(ParseNsPids("Name:\tmt\nPid:\t12\n"), IsEmpty());
  EXPECT_THAT(ParseNsPids("NSpid:\t12\tx\n"), IsEmpty());
  EXPECT_EQ(ParseParentPid("Name:\tmt\nPPid:\t4200\n"), 4200u);
  EXPECT_EQ(ParseParentPid("Name:\tmt\n"), std::nullopt);
  EXPECT_EQ(ParseNamespaceLink("pid:[4026531836]"), 4026531836u);
  EXPECT_EQ(ParseNamespaceLink("pid:[]"), 0u);
  EXPECT_EQ(ParseNamespaceLink("/proc/1/ns/pid"), 0u);
}

// A /proc of ptrecord's pid namespace (inode 1): process 100 (the shell) and its children 200
// and 300, each pid 1 of a namespace of its own (inodes 7 and 8); 200 has a second thread (2
// inside) and a child (3 inside).
class GuestPidsProcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Task("100", 1, 100, "100");
    Task("200", 100, 7, "200\t1");
    Task("200/task/200", 100, 7, "200\t1");
    Task("200/task/205", 100, 7, "205\t2");
    Task("210", 200, 7, "210\t3");
    Task("300", 100, 8, "300\t1");
  }
  // Directory `dir` under the fixture with a status of `ns_pids` and parent `parent` and an
  // ns/pid link to namespace `pidns`.
  void Task(const std::string& dir, uint32_t parent, uint64_t pidns, const std::string& ns_pids) {
    const std::filesystem::path at = std::filesystem::path(proc_.path()) / dir;
    std::filesystem::create_directories(at / "ns");
    std::ofstream(at / "status") << "Name:\tx\nPPid:\t" << parent << "\nNSpid:\t" << ns_pids
                                 << "\n";
    std::filesystem::create_symlink("pid:[" + std::to_string(pidns) + "]", at / "ns" / "pid");
  }
  QemuPidAnswer Ask(QemuPidQuestion q) { return AnswerPidQuestion(q, proc_.path()); }

  testing::TempDir proc_;
};

TEST_F(GuestPidsProcTest, AThreadIsFoundByItsNamespaceAndItsPidsThere) {
  QemuPidAnswer a = Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 2, .pidns = 7});
  EXPECT_EQ(a.pid, 200u);
  EXPECT_EQ(a.tid, 205u);
  // The other namespace's pid 1.
  a = Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 1, .pidns = 8});
  EXPECT_EQ(a.pid, 300u);
  EXPECT_EQ(a.tid, 300u);
  // A hint that is not the process (a fork child's parent) is passed over.
  a = Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 2, .hint = 300, .pidns = 7});
  EXPECT_EQ(a.pid, 200u);
  EXPECT_EQ(a.tid, 205u);
  a = Ask({.kind = kAskThread, .ns_pid = 3, .ns_tid = 3, .hint = 200, .pidns = 7});
  EXPECT_EQ(a.pid, 210u);
}

TEST_F(GuestPidsProcTest, WhatIsNotThereIsNotFound) {
  EXPECT_EQ(Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 9, .pidns = 7}).pid, 0u);
  EXPECT_EQ(Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 1, .pidns = 9}).pid, 0u);
  EXPECT_EQ(Ask({.kind = kAskThread, .ns_pid = 1, .ns_tid = 1, .pidns = 0}).pid, 0u);
  EXPECT_EQ(Ask({.kind = kAskChild, .ns_pid = 4, .hint = 200}).pid, 0u);
  EXPECT_EQ(Ask({.kind = kAskChild, .ns_pid = 3, .hint = 999}).pid, 0u);
  EXPECT_EQ(Ask({.kind = 0, .ns_pid = 1, .ns_tid = 1, .pidns = 7}).pid, 0u);
  EXPECT_EQ(AnswerPidQuestion({.kind = kAskThread, .ns_pid = 1, .ns_tid = 1, .pidns = 7},
                              proc_.File("none"))
                .pid,
            0u);
  EXPECT_EQ(AnswerPidQuestion({.kind = kAskThread, .ns_pid = 1, .ns_tid = 1, .pidns = 7}, "").pid,
            0u);
}

// A /proc whose "self" is not the caller's pid is another pid namespace's (ptrecord in a pid
// namespace of its own with the host's /proc): its pids are not ptrecord's.
TEST_F(GuestPidsProcTest, AProcOfAnotherNamespaceIsToldApart) {
  EXPECT_TRUE(ProcHasOwnPids("/proc"));
  EXPECT_FALSE(ProcHasOwnPids(proc_.path()));
  std::filesystem::create_symlink(std::to_string(getpid() + 1), proc_.File("self"));
  EXPECT_FALSE(ProcHasOwnPids(proc_.path()));
}

TEST_F(GuestPidsProcTest, AForkedChildIsFoundAmongItsParentsChildren) {
  // 200 is pid 1 of namespace 7, where its fork returned 3.
  EXPECT_EQ(Ask({.kind = kAskChild, .ns_pid = 3, .hint = 200}).pid, 210u);
  // 100's fork returned 300 (its namespace is ptrecord's), the child's pid 1 of its own.
  EXPECT_EQ(Ask({.kind = kAskChild, .ns_pid = 300, .hint = 100}).pid, 300u);
}

// The plugin's side (AskPids) waits in its slot while ptrecord answers (AnswerPidQuestions).
TEST_F(GuestPidsProcTest, AQuestionIsAnsweredThroughTheSlot) {
  std::vector<uint8_t> bytes(QemuRegionSize(2, 1, 1) + kQemuPage);
  auto* base = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(bytes.data()) + kQemuPage - 1) & ~(kQemuPage - 1));
  InitQemuRegion(base, 2, 1, 1);
  std::optional<QemuPidAnswer> got;
  std::thread plugin([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    got = AskPids(*SlotControl(base, 1), {.kind = kAskThread, .ns_pid = 1, .ns_tid = 2, .pidns = 7},
                  [&] {
                    std::this_thread::sleep_for(std::chrono::microseconds(50));
                    return std::chrono::steady_clock::now() < give_up;
                  });
  });
  while (SlotControl(base, 1)->answered.load() == 0) {
    AnswerPidQuestions(base, 2, proc_.path());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  plugin.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->pid, 200u);
  EXPECT_EQ(got->tid, 205u);
  // Nothing was asked in slot 0; asked again, slot 1 gets a new answer.
  EXPECT_EQ(SlotControl(base, 0)->answered.load(), 0u);
  std::thread again([&] {
    got = AskPids(*SlotControl(base, 1), {.kind = kAskChild, .ns_pid = 9, .hint = 200},
                  [] { return true; });
  });
  while (SlotControl(base, 1)->answered.load() != 2) AnswerPidQuestions(base, 2, proc_.path());
  again.join();
  EXPECT_EQ(got, std::nullopt);  // no such child
}

}  // namespace
}  // namespace ptkit::emulate
