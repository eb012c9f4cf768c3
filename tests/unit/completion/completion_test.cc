// The generated completion run in bash: the completion function's answers for a small CLI11
// definition, and for ptdecode and ptrecord those answers against each tool's own --help (what
// CLI11 parses), so a flag or sub-command added to a tool is completed without more work.
#include "completion/completion.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "run_command.h"
#include "temp_dir.h"

namespace ptkit::completion {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

// What bash's completion function offers for `words` (the last one being completed) after
// sourcing `script`; `function` is its name.
std::vector<std::string> Complete(const std::string& script, const std::string& function,
                                  const std::vector<std::string>& words) {
  ptkit::testing::TempDir dir;
  const std::string path = dir.File("completion.bash");
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(std::fwrite(script.data(), 1, script.size(), f), script.size());
  EXPECT_EQ(std::fclose(f), 0);
  std::vector<std::string> quoted;
  quoted.reserve(words.size());
  for (const std::string& w : words) quoted.push_back("'" + w + "'");
  std::string driver = "cd " + dir.path() + " && source " + path + " && COMP_WORDS=(" +
                       absl::StrJoin(quoted, " ") +
                       ") && COMP_CWORD=" + std::to_string(words.size() - 1) + " && " + function +
                       "; printf '%s\\n' \"${COMPREPLY[@]}\"";
  ptkit::testing::CommandResult r = ptkit::testing::RunCommand({"/bin/bash", "-c", driver});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  std::sort(out.begin(), out.end());
  return out;
}

// A tool with a sub-command, a flag with fixed values and one with a file.
struct Tool {
  CLI::App app{"a tool", "my-tool"};
  std::string mode, file, out;
  bool verbose = false;
  Tool() {
    app.add_flag("-v,--verbose", verbose, "More");
    CLI::App* run = app.add_subcommand("run", "Run it");
    run->add_option("--mode", mode, "How")->check(CLI::IsMember({"fast", "slow"}));
    run->add_option("-o,--output", out, "Where");
    run->add_option("FILE", file, "Input");
    app.add_subcommand("show", "Show it");
    app.add_option("--secret", file, "Hidden")->group("");
  }
};

TEST(BashCompletion, SubCommandsFlagsAndValues) {
  Tool t;
  const std::string script = BashCompletion(t.app);
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", ""}),
              ElementsAre("completion.bash", "run", "show"))
      << "the sub-commands and the files (the test's directory holds only the script)";
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "-"}),
              ElementsAre("--help", "--verbose", "-h", "-v"))
      << "the hidden --secret is left out";
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "-v", "run", "--"}),
              ElementsAre("--help", "--mode", "--output"));
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "run", "--mode", ""}),
              ElementsAre("fast", "slow"));
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "run", "--mode", "f"}), ElementsAre("fast"));
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "run", "-o", "comp"}),
              ElementsAre("completion.bash"));
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "run", "x", "c"}),
              ElementsAre("completion.bash"));
  EXPECT_THAT(Complete(script, "_my_tool", {"my-tool", "run", "--", "--m"}), IsEmpty())
      << "after --, no flags";
}

TEST(ZshCompletion, IsTheBashOneThroughBashcompinit) {
  Tool t;
  const std::string zsh = ZshCompletion(t.app);
  EXPECT_NE(zsh.find("bashcompinit"), std::string::npos);
  EXPECT_NE(zsh.find(BashCompletion(t.app)), std::string::npos);
}

// The flags a tool's --help lists for a command: first column of its two-space-indented
// option lines.
std::vector<std::string> FlagsInHelp(const std::string& help) {
  std::set<std::string> flags;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("  -")) continue;
    std::string first = line.substr(2, line.find(' ', 2) - 2);
    for (absl::string_view name : absl::StrSplit(first, ',')) {
      if (absl::StartsWith(name, "-")) flags.insert(std::string(name.substr(0, name.find('{'))));
    }
  }
  return {flags.begin(), flags.end()};
}

// The sub-commands ptdecode --help lists.
std::vector<std::string> SubcommandsInHelp(const std::string& help) {
  std::vector<std::string> names;
  size_t at = help.find("Subcommands:\n");
  if (at == std::string::npos) return names;
  std::istringstream lines(help.substr(at + 13));
  for (std::string line; std::getline(lines, line) && line.starts_with("  ");) {
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ToolCompletion, PtdecodeCompletesWhatItsHelpLists) {
  ptkit::testing::CommandResult script =
      ptkit::testing::RunCommand({PTDECODE_PATH, "--completion", "bash"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  ptkit::testing::CommandResult help = ptkit::testing::RunCommand({PTDECODE_PATH, "--help"});
  ASSERT_EQ(help.exit_code, 0);
  std::vector<std::string> subs = SubcommandsInHelp(help.out);
  ASSERT_GE(subs.size(), 11u) << help.out;
  std::vector<std::string> top = FlagsInHelp(help.out);
  EXPECT_THAT(Complete(script.out, "_ptdecode", {"ptdecode", "-"}), UnorderedElementsAreArray(top));
  std::vector<std::string> first_words = subs;
  first_words.push_back("completion.bash");  // `ptdecode FILE` is the default report
  EXPECT_THAT(Complete(script.out, "_ptdecode", {"ptdecode", ""}),
              UnorderedElementsAreArray(first_words));
  for (const std::string& sub : subs) {
    ptkit::testing::CommandResult sub_help =
        ptkit::testing::RunCommand({PTDECODE_PATH, sub, "--help"});
    ASSERT_EQ(sub_help.exit_code, 0) << sub;
    std::vector<std::string> flags = FlagsInHelp(sub_help.out);
    ASSERT_THAT(flags, ::testing::Contains("--help")) << sub;
    EXPECT_THAT(Complete(script.out, "_ptdecode", {"ptdecode", sub, "-"}),
                UnorderedElementsAreArray(flags))
        << sub;
  }
  EXPECT_THAT(Complete(script.out, "_ptdecode", {"ptdecode", "insn", "--decoder", ""}),
              ElementsAre("fast", "fast-blocks", "libipt"));
  EXPECT_THAT(Complete(script.out, "_ptdecode", {"ptdecode", "--completion", ""}),
              ElementsAre("bash", "zsh"));
  ptkit::testing::CommandResult zsh =
      ptkit::testing::RunCommand({PTDECODE_PATH, "--completion", "zsh"});
  ASSERT_EQ(zsh.exit_code, 0);
  EXPECT_NE(zsh.out.find(script.out), std::string::npos);
  ptkit::testing::CommandResult fish =
      ptkit::testing::RunCommand({PTDECODE_PATH, "--completion", "fish"});
  EXPECT_EQ(fish.exit_code, 2);
}

// `--completion` into a full disk is a runtime error that says so, for both tools (it exited 0).
TEST(ToolCompletion, AScriptThatCannotBeWrittenIsAnError) {
  for (const std::string tool : {PTDECODE_PATH, PTRECORD_PATH}) {
    ptkit::testing::CommandResult r =
        ptkit::testing::RunCommand({"/bin/sh", "-c", tool + " --completion bash >/dev/full"});
    EXPECT_EQ(r.exit_code, 1) << tool << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::HasSubstr("--completion: write error on standard output"))
        << tool;
  }
}

TEST(ToolCompletion, PtrecordCompletesWhatItsHelpLists) {
  ptkit::testing::CommandResult script =
      ptkit::testing::RunCommand({PTRECORD_PATH, "--completion", "bash"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  ptkit::testing::CommandResult help = ptkit::testing::RunCommand({PTRECORD_PATH, "--help"});
  ASSERT_EQ(help.exit_code, 0);
  std::vector<std::string> flags = FlagsInHelp(help.out);
  ASSERT_GE(flags.size(), 30u) << help.out;
  EXPECT_THAT(Complete(script.out, "_ptrecord", {"ptrecord", "-"}),
              UnorderedElementsAreArray(flags));
  EXPECT_THAT(Complete(script.out, "_ptrecord", {"ptrecord", "-a", "--", "-"}), IsEmpty())
      << "the command's own arguments are not ptrecord's flags";
}

// Every long flag a tool's --help lists (each sub-command's for ptdecode) is in its man page,
// written as roff writes it ("\-\-trigger\-count"), so a flag added without its man entry
// fails here.
std::vector<std::string> UndocumentedFlags(const std::string& help, const std::string& man_path,
                                           const std::string& where) {
  std::ifstream in(man_path);
  std::stringstream man;
  man << in.rdbuf();
  std::vector<std::string> missing;
  for (const std::string& flag : FlagsInHelp(help)) {
    if (!flag.starts_with("--")) continue;
    std::string roff;
    for (char c : flag) roff += c == '-' ? std::string("\\-") : std::string(1, c);
    if (man.str().find(roff) == std::string::npos) missing.push_back(where + flag);
  }
  return missing;
}

TEST(ToolDocs, TheManPagesDocumentEveryFlagTheHelpLists) {
  ptkit::testing::CommandResult help = ptkit::testing::RunCommand({PTRECORD_PATH, "--help"});
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_THAT(UndocumentedFlags(help.out, PTKIT_SOURCE_DIR "/man/ptrecord.1", "ptrecord "),
              IsEmpty());
  ptkit::testing::CommandResult top = ptkit::testing::RunCommand({PTDECODE_PATH, "--help"});
  ASSERT_EQ(top.exit_code, 0);
  for (const std::string& sub : SubcommandsInHelp(top.out)) {
    ptkit::testing::CommandResult sub_help =
        ptkit::testing::RunCommand({PTDECODE_PATH, sub, "--help"});
    ASSERT_EQ(sub_help.exit_code, 0) << sub;
    EXPECT_THAT(UndocumentedFlags(sub_help.out, PTKIT_SOURCE_DIR "/man/ptdecode.1",
                                  "ptdecode " + sub + " "),
                IsEmpty());
  }
}

}  // namespace
}  // namespace ptkit::completion
