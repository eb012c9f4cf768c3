// Shell completion generated from a tool's CLI11 definition, so it offers exactly the
// sub-commands and flags the tool parses: `ptdecode --completion bash|zsh`, `ptrecord
// --completion bash|zsh` (installation: README, "Shell completion").
#ifndef PTKIT_COMPLETION_COMPLETION_H_
#define PTKIT_COMPLETION_COMPLETION_H_

#include <string>

#include "CLI/CLI.hpp"

namespace ptkit::completion {

// A bash script defining _TOOL (TOOL: `app`'s name, '-' as '_') and registering it with
// `complete` for the tool: the first word completes to the sub-commands and the top-level
// flags, a word after a sub-command to that sub-command's flags, the word after a flag with a
// fixed set of values (CLI::IsMember) to those values, anything else to file names. After
// "--" (a command to run) only file names. Hidden options (no group) are left out.
std::string BashCompletion(const CLI::App& app);

// The same for zsh: the bash script run through zsh's bashcompinit.
std::string ZshCompletion(const CLI::App& app);

// Adds `--completion SHELL` (bash or zsh) to `app`: prints the script on stdout and ends the
// parse as --help does (CLI::Success, exit 0); when stdout cannot take it, with a
// CLI::RuntimeError (exit code 1) that says so.
void AddCompletionFlag(CLI::App& app);

}  // namespace ptkit::completion

#endif  // PTKIT_COMPLETION_COMPLETION_H_
