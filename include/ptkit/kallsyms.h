// /proc/kallsyms text ("ffffffff81000000 T _stext [module]" per line), as ptrecord --kcore
// stores it and ptdecode names kernel code with it. Pure functions over text.
#ifndef PTKIT_KALLSYMS_H_
#define PTKIT_KALLSYMS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit {

struct KallsymsEntry {
  uint64_t address = 0;
  char type = 0;       // nm's letter: T/t text, W/w weak, D/d data, ...
  std::string name;    // without the module
  std::string module;  // "" for the kernel image itself
};

// The entries of a kallsyms text, in its order (lines that do not parse are skipped).
std::vector<KallsymsEntry> ParseKallsyms(std::string_view text);

// Whether an entry of this type letter is code (T, t, W, w).
bool IsKallsymsText(char type);

// [_stext, _etext) of the kernel image. Errors: kNotFound when either symbol is missing,
// kPermissionDenied when every address is 0 (kptr_restrict hides them from this user: run as
// root, or sysctl kernel.kptr_restrict=0).
struct KernelText {
  uint64_t begin = 0, end = 0;
};
absl::StatusOr<KernelText> KernelTextRange(std::span<const KallsymsEntry> symbols);

}  // namespace ptkit

#endif  // PTKIT_KALLSYMS_H_
