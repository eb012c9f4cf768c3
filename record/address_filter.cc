#include "record/address_filter.h"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ptkit/elf_file.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"

namespace ptkit::record {
namespace {

struct Symbol {
  std::string name;
  uint64_t value = 0;
  uint64_t size = 0;
  bool global = false;
  bool ifunc = false;  // STT_GNU_IFUNC: its address is the resolver's
};

// What a filter needs from an ELF file: its symbols and where its PT_LOAD segments come from.
struct FilterElf {
  ElfFile file;
  std::vector<Symbol> symbols;  // defined, by address
  bool stripped = false;        // no .symtab, and no debug file has one

  // The file offset of virtual address `vaddr`, if a PT_LOAD segment holds it.
  std::optional<uint64_t> FileOffset(uint64_t vaddr) const {
    const int64_t offset = file.FileOffset(vaddr);
    return offset < 0 ? std::nullopt : std::optional<uint64_t>(offset);
  }
};

// Appends the symbols of `elf` from .symtab (`dynamic` false) or .dynsym, but sections and
// files; whether it has such a table.
bool AddSymbols(const ElfFile& elf, bool dynamic, std::vector<Symbol>& out) {
  bool found = false;
  for (const ElfSection& section : elf.Sections()) {
    found |= section.type == (dynamic ? SHT_DYNSYM : SHT_SYMTAB);
  }
  for (const ElfSymbol& sym : elf.Symbols()) {
    if (sym.dynamic != dynamic || sym.type == STT_SECTION || sym.type == STT_FILE) continue;
    out.push_back({std::string(sym.name), sym.value, sym.size, sym.binding != STB_LOCAL,
                   sym.type == STT_GNU_IFUNC});
  }
  return found;
}

absl::StatusOr<FilterElf> ReadElf(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(ElfFile file, ElfFile::Open(path));
  FilterElf out{std::move(file)};
  // .symtab when present (it holds .dynsym's symbols too); else .dynsym and the .symtab of
  // the separate debug file, found as the decoder (and gdb, perf) find it.
  if (!AddSymbols(out.file, false, out.symbols)) {
    AddSymbols(out.file, true, out.symbols);
    const std::string debug_path = out.file.FindDebugFile("");
    absl::StatusOr<ElfFile> debug =
        debug_path.empty() ? absl::NotFoundError("no debug file") : ElfFile::Open(debug_path);
    out.stripped = !(debug.ok() && AddSymbols(*debug, false, out.symbols));
  }
  std::sort(out.symbols.begin(), out.symbols.end(), [](const Symbol& a, const Symbol& b) {
    return a.value != b.value ? a.value < b.value : a.name < b.name;
  });
  return out;
}

// A number in a filter, decimal or 0x hex as perf writes them (never octal: "010" is ten), or
// nullopt for a symbol name (which cannot start with a digit). Errors: a token that starts with
// a digit but is no such number (e.g. "0x", "12k", beyond 64 bits), naming `filter`.
absl::StatusOr<std::optional<uint64_t>> ParseNumber(const std::string& s,
                                                    const std::string& filter) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  uint64_t v = 0;
  if (!ParseUnsigned(s, &v, 0)) {
    return absl::InvalidArgumentError(absl::StrCat("bad number '", s, "' in filter '", filter,
                                                   "' (decimal or 0x hex, at most 64 bits)"));
  }
  return v;
}

// Levenshtein distance of `a` and `b`, case-insensitive.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// What there is instead of the unknown symbol `name`: "; similar: a, b" (names within a few
// edits, or containing it), or why there is nothing to offer.
std::string WhatThereIs(const FilterElf& elf, const std::string& name, const std::string& file) {
  const std::string stripped =
      elf.stripped ? absl::StrCat("; ", file,
                                  " is stripped (no .symtab) and no debug file was found by "
                                  "build-id or .gnu_debuglink")
                   : "";
  if (elf.symbols.empty()) return absl::StrCat(stripped, ": give a file offset");
  const std::string lower = absl::AsciiStrToLower(name);
  const size_t max_edits = std::max<size_t>(1, name.size() / 4);
  std::vector<std::pair<size_t, std::string>> near;  // (distance, name)
  for (const Symbol& s : elf.symbols) {
    const size_t d = EditDistance(name, s.name);
    if (d <= max_edits || absl::StrContains(absl::AsciiStrToLower(s.name), lower)) {
      near.emplace_back(d, s.name);
    }
  }
  std::sort(near.begin(), near.end());
  near.erase(std::unique(near.begin(), near.end()), near.end());
  if (near.empty()) {
    return absl::StrCat(stripped, "; none of its ", elf.symbols.size(), " symbols is similar (nm ",
                        file, " lists them)");
  }
  constexpr size_t kShown = 8;
  std::vector<std::string> names;
  for (size_t i = 0; i < near.size() && i < kShown; ++i) names.push_back(near[i].second);
  return absl::StrCat(
      stripped, "; similar: ", absl::StrJoin(names, ", "),
      near.size() > kShown ? absl::StrCat(" (and ", near.size() - kShown, " more)") : "");
}

// Finds "name", "name#N" (N-th in address order, from 1) or "name#0|g|G" (the global one).
// `s`, unless it is an IFUNC symbol: its address is the resolver's, which runs once, at load, to
// pick the implementation that runs at each call (sweep 30a F6: --trigger uprobe:cos@libm
// took 4 snapshots in the resolver for 8 calls of cos). Errors: the implementations to name.
absl::StatusOr<Symbol> IfuncChecked(const FilterElf& elf, const Symbol& s, const std::string& file,
                                    const std::string& filter) {
  if (!s.ifunc) return s;
  std::vector<std::string> like;
  for (const Symbol& o : elf.symbols) {
    // glibc's implementations: __cos_fma, __memcpy_avx_unaligned_erms, ...
    const bool named = o.name.starts_with(absl::StrCat("__", s.name, "_")) ||
                       o.name.starts_with(absl::StrCat(s.name, "_"));
    if (!o.ifunc && o.size != 0 && named && like.size() < 6 &&
        std::find(like.begin(), like.end(), o.name) == like.end()) {
      like.push_back(o.name);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", s.name, "' in ", file,
                   " is an IFUNC symbol: its address is its resolver's, which runs "
                   "once at load to pick the code each call runs; name that code instead",
                   like.empty() ? std::string(" (nm lists the symbols)")
                                : absl::StrCat(" (perhaps ", absl::StrJoin(like, ", "), ")"),
                   " in filter '", filter, "'"));
}

absl::StatusOr<Symbol> FindSymbol(const FilterElf& elf, const std::string& spec,
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
    return absl::InvalidArgumentError(
        absl::StrCat("no symbol '", name, "' in ", file, where(), WhatThereIs(elf, name, file)));
  }
  if (select == "0" || select == "g" || select == "G") {
    std::erase_if(found, [](const Symbol* s) { return !s->global; });
    if (found.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(found.size(), " global symbols '", name, "' in ", file, where()));
    }
  } else if (!select.empty()) {
    PTKIT_ASSIGN_OR_RETURN(std::optional<uint64_t> n, ParseNumber(select, filter));
    if (!n || *n == 0 || *n > found.size()) {
      return absl::InvalidArgumentError(absl::StrCat("'", spec, "': ", file, " has ", found.size(),
                                                     " symbols '", name, "'", where()));
    }
    return IfuncChecked(elf, *found[*n - 1], file, filter);
  } else if (found.size() > 1) {
    std::vector<std::string> at;
    at.reserve(found.size());
    for (const Symbol* s : found) at.push_back(absl::StrCat("0x", absl::Hex(s->value)));
    return absl::InvalidArgumentError(absl::StrCat("symbol '", name, "' is ambiguous in ", file,
                                                   " (at ", absl::StrJoin(at, ", "),
                                                   "): select one with '", name, " #N'", where()));
  }
  return IfuncChecked(elf, *found[0], file, filter);
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
  PTKIT_ASSIGN_OR_RETURN(std::optional<uint64_t> start_number, ParseNumber(start, filter));
  PTKIT_ASSIGN_OR_RETURN(std::optional<uint64_t> size_number, ParseNumber(size, filter));
  auto overflow = [&](uint64_t from, uint64_t bytes) {
    return absl::InvalidArgumentError(absl::StrCat("filter '", filter, "': 0x", absl::Hex(from),
                                                   " + size 0x", absl::Hex(bytes),
                                                   " is beyond the 64-bit address space"));
  };
  if (!size.empty() && !size_number && f.file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", size, "' in filter '", filter,
                                                   "' (symbols need a file: '@FILE')"));
  }
  if (start_number && (size.empty() || size_number)) {
    f.offset = *start_number;
    f.size = size_number.value_or(0);
    if (f.size > UINT64_MAX - f.offset) return overflow(f.offset, f.size);
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
  PTKIT_ASSIGN_OR_RETURN(FilterElf elf, ReadElf(f.file));
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
      if (*size_number > UINT64_MAX - vstart) return overflow(vstart, *size_number);
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
