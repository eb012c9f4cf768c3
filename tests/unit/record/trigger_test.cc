// The pure parts of --trigger, --snapshot-on-crash and --kcore: trigger specs, /proc/PID/stat
// and status fields, which signals kill, kallsyms text and ELF build-id notes.
#include "record/trigger.h"

#include <elf.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/kallsyms.h"
#include "record/crash.h"
#include "record/kcore.h"

namespace ptkit::record {
namespace {

using ::testing::HasSubstr;

TEST(TriggerTest, SpecsThatAreNoUprobeSayTheForm) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"work", "not a uprobe trigger"},
           {"uprobe:", "no FUNC"},
           {"uprobe:work@", "empty FILE"},
       }) {
    absl::StatusOr<TriggerSpec> t = ParseTrigger(text, "/bin/true");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(says));
    EXPECT_THAT(t.status().message(), HasSubstr("uprobe:FUNC@FILE"));
  }
  EXPECT_THAT(ParseTrigger("uprobe:main", "").status().message(), HasSubstr("name the file"));
  // A function the file has not: said of the trigger, not of the filter it is resolved as
  // (sweep 30a F9: "... in filter 'start nosuchfn @ /bin/true'").
  const std::string unknown(ParseTrigger("uprobe:no_such_fn@/bin/true", "").status().message());
  EXPECT_THAT(unknown,
              HasSubstr("--trigger 'uprobe:no_such_fn@/bin/true': no symbol 'no_such_fn'"));
  EXPECT_THAT(unknown, ::testing::Not(HasSubstr("filter")));
}

TEST(TriggerTest, StatParentSkipsACommWithSpacesAndParentheses) {
  EXPECT_EQ(*ParseStatParent("1234 (a (b) c) S 77 1234 1234 0 -1"), 77u);
  EXPECT_EQ(*ParseStatParent("1 (systemd) S 0 1 1"), 0u);
  EXPECT_FALSE(ParseStatParent("1234 (x").ok());
  EXPECT_FALSE(ParseStatParent("").ok());
}

TEST(TriggerTest, ThisProcessDescendsFromItsParentNotFromItsChildren) {
  const uint32_t self = static_cast<uint32_t>(getpid());
  EXPECT_TRUE(IsDescendant(self, self));
  EXPECT_TRUE(IsDescendant(self, static_cast<uint32_t>(getppid())));
  EXPECT_FALSE(IsDescendant(static_cast<uint32_t>(getppid()), self));
  EXPECT_FALSE(IsDescendant(0x7ffffff0, self));  // no such process
}

TEST(CrashTest, WhichSignalsKillByDefault) {
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE, SIGTERM, SIGKILL, SIGUSR1, SIGPIPE}) {
    EXPECT_TRUE(KillsByDefault(sig)) << sig;
  }
  for (int sig : {SIGCHLD, SIGCONT, SIGURG, SIGWINCH, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, 0}) {
    EXPECT_FALSE(KillsByDefault(sig)) << sig;
  }
}

TEST(CrashTest, WhichSignalsStopByDefault) {
  for (int sig : {SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU}) EXPECT_TRUE(StopsByDefault(sig)) << sig;
  for (int sig : {SIGTRAP, SIGCONT, SIGCHLD, SIGSEGV, SIGKILL, 0}) {
    EXPECT_FALSE(StopsByDefault(sig)) << sig;
  }
}

TEST(CrashTest, SignalMasksOfAStatusText) {
  const std::string status = "Name:\tx\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001001\n";
  EXPECT_EQ(*ParseStatusSignalMask(status, "SigIgn:"), 0x1001u);
  EXPECT_EQ(ParseStatusSignalMask(status, "SigCgt:").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseStatusSignalMask("SigIgn:\tzz\n", "SigIgn:").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SignalIgnored(static_cast<uint32_t>(getpid()), SIGSEGV));
}

TEST(KcoreTest, KallsymsLinesAndTheTextRange) {
  const std::vector<KallsymsEntry> e = ParseKallsyms(
      "ffffffff81000000 T _stext\n"
      "ffffffff81000010 t helper\n"
      "bad line\n"
      "ffffffffc0000000 t mod_fn\t[kvm]\n"
      "ffffffff82209988 T _etext\n");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[1].address, 0xffffffff81000010u);
  EXPECT_EQ(e[1].type, 't');
  EXPECT_EQ(e[1].name, "helper");
  EXPECT_EQ(e[2].module, "kvm");
  absl::StatusOr<KernelText> text = KernelTextRange(e);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->begin, 0xffffffff81000000u);
  EXPECT_EQ(text->end, 0xffffffff82209988u);
  // kptr_restrict: every address 0.
  const std::vector<KallsymsEntry> hidden =
      ParseKallsyms("0000000000000000 T _stext\n0000000000000000 T _etext\n");
  EXPECT_EQ(KernelTextRange(hidden).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(KernelTextRange(std::vector<KallsymsEntry>(e.begin(), e.begin() + 2)).status().code(),
            absl::StatusCode::kNotFound);
}

std::vector<uint8_t> Note(uint32_t type, const std::string& name, std::vector<uint8_t> desc) {
  std::vector<uint8_t> out(sizeof(Elf64_Nhdr));
  Elf64_Nhdr h{static_cast<Elf64_Word>(name.size() + 1), static_cast<Elf64_Word>(desc.size()),
               type};
  std::memcpy(out.data(), &h, sizeof(h));
  out.insert(out.end(), name.begin(), name.end());
  out.push_back(0);
  while (out.size() % 4) out.push_back(0);
  out.insert(out.end(), desc.begin(), desc.end());
  while (out.size() % 4) out.push_back(0);
  return out;
}

TEST(KcoreTest, TheBuildIdNoteAmongOthers) {
  std::vector<uint8_t> notes = Note(6, "Linux", {1, 2, 3, 4, 5});
  const std::vector<uint8_t> id = {0x48, 0xdc, 0x54, 0x0c, 0x8b, 0x76, 0x39, 0x38, 0x04, 0xca,
                                   0x80, 0x88, 0xdb, 0xfa, 0x7d, 0x42, 0x91, 0x1a, 0x94, 0x44};
  const std::vector<uint8_t> gnu = Note(NT_GNU_BUILD_ID, "GNU", id);
  notes.insert(notes.end(), gnu.begin(), gnu.end());
  EXPECT_EQ(*ParseBuildIdNote(notes), id);
  EXPECT_EQ(ParseBuildIdNote(Note(6, "Linux", {1})).status().code(), absl::StatusCode::kNotFound);
  std::vector<uint8_t> cut(gnu.begin(), gnu.end() - 8);
  EXPECT_EQ(ParseBuildIdNote(cut).status().code(), absl::StatusCode::kDataLoss);
}

TEST(KcoreTest, ACoreFileThatIsNoCoreIsRejected) {
  EXPECT_EQ(ReadCoreRange("/proc/self/exe", 0x1000, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ReadCoreRange("/nonexistent/kcore", 0, 1).ok());
}

}  // namespace
}  // namespace ptkit::record
