#include "ptkit/kallsyms.h"

#include <algorithm>

#include "ptkit/numbers.h"

namespace ptkit {

std::vector<KallsymsEntry> ParseKallsyms(std::string_view text) {
  std::vector<KallsymsEntry> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    std::vector<std::string_view> f;  // fields separated by spaces or tabs
    for (size_t at = 0; at < line.size();) {
      const size_t begin = line.find_first_not_of(" \t", at);
      if (begin == std::string_view::npos) break;
      const size_t end = std::min(line.find_first_of(" \t", begin), line.size());
      f.push_back(line.substr(begin, end - begin));
      at = end;
    }
    if (f.size() < 3 || f[1].size() != 1) continue;
    KallsymsEntry e;
    if (!ParseUnsigned(f[0], &e.address, 16)) continue;
    e.type = f[1][0];
    e.name = std::string(f[2]);
    if (f.size() >= 4 && f[3].size() > 2 && f[3].front() == '[' && f[3].back() == ']') {
      e.module = std::string(f[3].substr(1, f[3].size() - 2));
    }
    out.push_back(std::move(e));
  }
  return out;
}

bool IsKallsymsText(char type) { return type == 'T' || type == 't' || type == 'W' || type == 'w'; }

absl::StatusOr<KernelText> KernelTextRange(std::span<const KallsymsEntry> symbols) {
  KernelText text;
  bool any_address = false, stext = false, etext = false;
  for (const KallsymsEntry& e : symbols) {
    any_address |= e.address != 0;
    if (!e.module.empty()) continue;
    if (e.name == "_stext") {
      text.begin = e.address;
      stext = true;
    } else if (e.name == "_etext") {
      text.end = e.address;
      etext = true;
    }
  }
  if (!symbols.empty() && !any_address) {
    return absl::PermissionDeniedError(
        "/proc/kallsyms shows every address as 0 (kernel.kptr_restrict hides them): run as "
        "root, or sysctl kernel.kptr_restrict=0");
  }
  if (!stext || !etext || text.end <= text.begin) {
    return absl::NotFoundError("kallsyms has no _stext and _etext of the kernel image");
  }
  return text;
}

}  // namespace ptkit
