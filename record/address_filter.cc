#include "record/address_filter.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ptkit/status.h"

namespace ptkit::record {
namespace {

struct Symbol {
  std::string name;
  uint64_t value = 0;
  uint64_t size = 0;
  bool global = false;
};

// What a filter needs from an ELF file: its symbols and where its PT_LOAD segments come from.
struct ElfFile {
  std::vector<Symbol> symbols;  // defined, by address
  std::vector<GElf_Phdr> loads;

  // The file offset of virtual address `vaddr`, if a PT_LOAD segment holds it.
  std::optional<uint64_t> FileOffset(uint64_t vaddr) const {
    for (const GElf_Phdr& ph : loads) {
      if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
        return vaddr - ph.p_vaddr + ph.p_offset;
      }
    }
    return std::nullopt;
  }
};

absl::StatusOr<ElfFile> ReadElf(const std::string& path) {
  static const bool init = elf_version(EV_CURRENT) != EV_NONE;
  if (!init) return absl::InternalError("libelf: elf_version failed");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  auto close_all = [fd](Elf* e) {
    elf_end(e);
    close(fd);
  };
  std::unique_ptr<Elf, decltype(close_all)> elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr), close_all);
  if (elf == nullptr || elf_kind(elf.get()) != ELF_K_ELF) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an ELF file"));
  }
  ElfFile out;
  size_t phnum = 0;
  if (elf_getphdrnum(elf.get(), &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf.get(), static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_LOAD) {
        out.loads.push_back(ph);
      }
    }
  }
  // .symtab when present (it holds .dynsym's symbols too), else .dynsym.
  for (int want : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf.get(), scn)) != nullptr;) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || static_cast<int>(sh.sh_type) != want) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      const size_t n = sh.sh_entsize == 0 ? 0 : sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; data != nullptr && i < n; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
        const int type = GELF_ST_TYPE(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || type == STT_SECTION || type == STT_FILE) continue;
        const char* name = elf_strptr(elf.get(), sh.sh_link, sym.st_name);
        if (name == nullptr || *name == '\0') continue;
        out.symbols.push_back(
            {name, sym.st_value, sym.st_size, GELF_ST_BIND(sym.st_info) != STB_LOCAL});
      }
    }
    if (!out.symbols.empty()) break;
  }
  std::sort(out.symbols.begin(), out.symbols.end(), [](const Symbol& a, const Symbol& b) {
    return a.value != b.value ? a.value < b.value : a.name < b.name;
  });
  return out;
}

std::optional<uint64_t> ParseNumber(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

// Finds "name", "name#N" (N-th in address order, from 1) or "name#0|g|G" (the global one).
absl::StatusOr<Symbol> FindSymbol(const ElfFile& elf, const std::string& spec,
                                  const std::string& file, const std::string& filter) {
  std::string name = spec;
  std::string select;
  if (size_t hash = spec.rfind('#'); hash != std::string::npos && hash > 0) {
    name = spec.substr(0, hash);
    select = spec.substr(hash + 1);
  }
  std::vector<const Symbol*> found;
  for (const Symbol& s : elf.symbols) {
    // Aliases of one address (e.g. a symbol and its versioned name) count once.
    if (s.name == name && (found.empty() || found.back()->value != s.value)) found.push_back(&s);
  }
  auto where = [&] { return absl::StrCat(" in filter '", filter, "'"); };
  if (found.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no symbol '", name, "' in ", file, where()));
  }
  if (select == "0" || select == "g" || select == "G") {
    std::erase_if(found, [](const Symbol* s) { return !s->global; });
    if (found.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(found.size(), " global symbols '", name, "' in ", file, where()));
    }
  } else if (!select.empty()) {
    std::optional<uint64_t> n = ParseNumber(select);
    if (!n || *n == 0 || *n > found.size()) {
      return absl::InvalidArgumentError(absl::StrCat("'", spec, "': ", file, " has ", found.size(),
                                                     " symbols '", name, "'", where()));
    }
    return *found[*n - 1];
  } else if (found.size() > 1) {
    std::vector<std::string> at;
    for (const Symbol* s : found) at.push_back(absl::StrCat("0x", absl::Hex(s->value)));
    return absl::InvalidArgumentError(absl::StrCat("symbol '", name, "' is ambiguous in ", file,
                                                   " (at ", absl::StrJoin(at, ", "),
                                                   "): select one with '", name, " #N'", where()));
  }
  return *found[0];
}

// Splits "action start[/size][@file]" (tokens already joined without blanks) and resolves it.
absl::StatusOr<AddressFilter> ResolveOne(const std::string& action, const std::string& rest,
                                         const std::string& filter) {
  AddressFilter f;
  if (action == "filter") {
    f.action = AddressFilter::Action::kFilter;
  } else if (action == "start") {
    f.action = AddressFilter::Action::kStart;
  } else if (action == "stop") {
    f.action = AddressFilter::Action::kStop;
  } else {
    f.action = AddressFilter::Action::kTraceStop;
  }
  std::string range = rest;
  if (size_t at = rest.find('@'); at != std::string::npos) {
    range = rest.substr(0, at);
    std::string path = rest.substr(at + 1);
    char resolved[PATH_MAX];
    if (path.empty() || realpath(path.c_str(), resolved) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("file '", path, "' of filter '", filter, "' not found"));
    }
    f.file = resolved;
  }
  std::string start = range, size;
  if (size_t slash = range.find('/'); slash != std::string::npos) {
    start = range.substr(0, slash);
    size = range.substr(slash + 1);
  }
  if (start.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("filter '", filter, "' has no start address"));
  }
  const bool region =
      f.action == AddressFilter::Action::kFilter || f.action == AddressFilter::Action::kTraceStop;
  std::optional<uint64_t> start_number = ParseNumber(start);
  std::optional<uint64_t> size_number = ParseNumber(size);
  if (!size.empty() && !size_number && f.file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", size, "' in filter '", filter,
                                                   "' (symbols need a file: '@FILE')"));
  }
  if (start_number && (size.empty() || size_number)) {
    f.offset = *start_number;
    f.size = size_number.value_or(0);
    if (region && f.size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter '", filter, "' needs a size: '", action, " START/SIZE'"));
    }
    return f;
  }
  if (f.file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("symbol '", start, "' in filter '", filter,
                                                   "' needs a file ('@FILE'); kernel filters "
                                                   "take addresses"));
  }
  PTKIT_ASSIGN_OR_RETURN(ElfFile elf, ReadElf(f.file));
  uint64_t vstart = 0, vend = 0;
  if (start == "*") {
    bool any = false;
    for (const Symbol& s : elf.symbols) {
      if (!elf.FileOffset(s.value)) continue;
      vstart = any ? std::min(vstart, s.value) : s.value;
      vend = std::max(vend, s.value + std::max<uint64_t>(s.size, 1));
      any = true;
    }
    if (!any) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.file, " has no symbols for '*' in filter '", filter, "'"));
    }
  } else if (start_number) {
    return absl::InvalidArgumentError(
        absl::StrCat("filter '", filter, "': a numeric start takes a numeric size"));
  } else {
    PTKIT_ASSIGN_OR_RETURN(Symbol s, FindSymbol(elf, start, f.file, filter));
    vstart = s.value;
    vend = s.value + s.size;
  }
  if (!size.empty() && start != "*") {
    if (size_number) {
      vend = vstart + *size_number;
    } else {
      PTKIT_ASSIGN_OR_RETURN(Symbol e, FindSymbol(elf, size, f.file, filter));
      vend = e.value + e.size;
    }
  } else if (!region) {
    vend = vstart;  // start/stop: one address
  }
  std::optional<uint64_t> offset = elf.FileOffset(vstart);
  if (!offset) {
    return absl::InvalidArgumentError(absl::StrCat("0x", absl::Hex(vstart), " (", start,
                                                   ") is in no loadable segment of ", f.file,
                                                   " (filter '", filter, "')"));
  }
  if (vend < vstart || (region && vend == vstart)) {
    return absl::InvalidArgumentError(
        absl::StrCat("filter '", filter, "' covers no bytes (symbol of size 0?)"));
  }
  f.offset = *offset;
  f.size = vend - vstart;
  return f;
}

}  // namespace

absl::StatusOr<std::vector<AddressFilter>> ParseAddressFilters(std::string_view text) {
  std::vector<std::string> tokens;
  std::string token;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == ',') {
      if (!token.empty()) tokens.push_back(std::move(token));
      token.clear();
    } else {
      token += c;
    }
  }
  if (!token.empty()) tokens.push_back(std::move(token));
  auto is_action = [](const std::string& t) {
    return t == "filter" || t == "start" || t == "stop" || t == "tracestop";
  };
  if (tokens.empty()) return absl::InvalidArgumentError("empty address filter");
  std::vector<AddressFilter> out;
  for (size_t i = 0; i < tokens.size();) {
    if (!is_action(tokens[i])) {
      return absl::InvalidArgumentError(absl::StrCat("address filter '", std::string(text),
                                                     "': expected filter, start, stop or ",
                                                     "tracestop, got '", tokens[i], "'"));
    }
    const std::string action = tokens[i++];
    std::string rest, shown = action;
    for (; i < tokens.size() && !is_action(tokens[i]); ++i) {
      rest += tokens[i];
      absl::StrAppend(&shown, " ", tokens[i]);
    }
    PTKIT_ASSIGN_OR_RETURN(AddressFilter f, ResolveOne(action, rest, shown));
    out.push_back(std::move(f));
  }
  return out;
}

std::string KernelFilterString(const std::vector<AddressFilter>& filters) {
  std::vector<std::string> parts;
  for (const AddressFilter& f : filters) {
    static constexpr const char* kNames[] = {"filter", "start", "stop", "tracestop"};
    std::string s = absl::StrCat(kNames[static_cast<int>(f.action)], " 0x", absl::Hex(f.offset));
    if (f.size != 0) absl::StrAppend(&s, "/0x", absl::Hex(f.size));
    if (!f.file.empty()) absl::StrAppend(&s, "@", f.file);
    parts.push_back(std::move(s));
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace ptkit::record
