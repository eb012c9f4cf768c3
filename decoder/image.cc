#include "decoder/image.h"

#include <Zydis/Zydis.h>
#include <cxxabi.h>
#include <elf.h>
#include <fmt/format.h>
// libiberty.h (which demangle.h includes) declares basename unless told string.h has.
#define HAVE_DECL_BASENAME 1  // NOLINT(cppcoreguidelines-macro-usage)
#include <libiberty/demangle.h>
#include <lzma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decoder/trace_config.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

constexpr uint64_t kPageSize = 4096;

// Rust's legacy mangling is Itanium's with the path's punctuation escaped ($LT$, $u20$, "..")
// and a last component "h" + 16 hex digits, a hash that changes with every build: a demangled
// name shown as rustc-demangle (and perf) show it, without the hash.
bool RustLegacy(std::string_view mangled) {
  if (!mangled.starts_with("_ZN") || !mangled.ends_with("E") || mangled.size() < 24) return false;
  const std::string_view hash = mangled.substr(mangled.size() - 20, 19);  // 17h + 16 digits
  return hash.starts_with("17h") &&
         hash.substr(3).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string RustUnescape(std::string_view demangled) {
  if (const size_t h = demangled.rfind("::h"); h != std::string_view::npos) {
    demangled = demangled.substr(0, h);
  }
  static constexpr std::pair<std::string_view, std::string_view> kEscapes[] = {
      {"$SP$", "@"}, {"$BP$", "*"}, {"$RF$", "&"}, {"$LT$", "<"},
      {"$GT$", ">"}, {"$LP$", "("}, {"$RP$", ")"}, {"$C$", ","}};
  std::string out;
  for (size_t i = 0; i < demangled.size();) {
    // A path element that begins with '$' is written with a '_' before it, which is no part of
    // the name (rustc-demangle drops it: "_$LT$p..G$u20$as$u20$...$GT$" is "<p::G as ...>";
    // sweep 33a F4: every Rust program's stacks had std::rt::lang_start::_{{closure}}).
    if ((i == 0 || (i >= 2 && demangled.substr(i - 2, 2) == "::")) &&
        demangled.substr(i).starts_with("_$")) {
      ++i;
      continue;
    }
    if (demangled.substr(i).starts_with("..")) {
      out += "::";
      i += 2;
      continue;
    }
    bool escaped = false;
    if (demangled[i] == '$') {
      for (const auto& [from, to] : kEscapes) {
        if (demangled.substr(i).starts_with(from)) {
          out += to;
          i += from.size();
          escaped = true;
          break;
        }
      }
      // $uXX$: the character of that hex code.
      if (const size_t end = demangled.find('$', i + 1);
          !escaped && end != std::string_view::npos && demangled[i + 1] == 'u' && end - i <= 8) {
        const std::string hex(demangled.substr(i + 2, end - i - 2));
        char* stop = nullptr;
        const unsigned long c = std::strtoul(hex.c_str(), &stop, 16);
        if (!hex.empty() && *stop == '\0' && c < 0x80) {
          out += static_cast<char>(c);
          i = end + 1;
          escaped = true;
        }
      }
    }
    if (!escaped) out += demangled[i++];
  }
  return out;
}

std::string Demangle(std::string_view mangled) {
  // LLVM's suffix for a function it cloned or promoted (ThinLTO): no part of the name.
  if (const size_t llvm = mangled.find(".llvm."); llvm != std::string_view::npos) {
    mangled = mangled.substr(0, llvm);
  }
  std::string name(mangled);
  if (name.starts_with("_R")) {
    // Rust's v0 mangling (rustc's standard library since 1.9x, every program's): libiberty's
    // demangler, as binutils' nm -C and c++filt -i name it (no crate disambiguators).
    char* rust = cplus_demangle(name.c_str(), DMGL_PARAMS | DMGL_ANSI | DMGL_RUST);
    if (rust == nullptr) return name;
    std::string result(rust);
    std::free(rust);
    return result;
  }
  if (!name.starts_with("_Z")) return name;
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return RustLegacy(mangled) ? RustUnescape(result) : result;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, "open ", path);
  // 64 KiB reads: a page dump is MiBs, which istreambuf_iterator copies a byte at a time
  // (30 M instructions for 1.7 MB, half of `ptdecode stats` on such an input).
  std::string data;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) data.append(chunk, in.gcount());
  if (in.bad()) return absl::DataLossError(absl::StrCat("read ", path));
  return data;
}

absl::StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat ", path);
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

// Splits "X:NUMBER" at the last ':' when what follows parses as a number.
bool SplitTrailingNumber(std::string_view text, std::string_view* head, uint64_t* number) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  auto value = ParseUint(text.substr(colon + 1), std::numeric_limits<uint64_t>::max(), "number");
  if (!value.ok()) return false;
  *head = text.substr(0, colon);
  *number = *value;
  return true;
}

// The allocated sections of `elf`, by section index: [addr, addr + size) and whether they
// hold code; a zero-size entry for the others.
struct SectionSpan {
  uint64_t begin = 0, end = 0;
  bool code = false;
};
std::vector<SectionSpan> SectionSpans(const ElfFile& elf) {
  std::vector<SectionSpan> out;
  for (const ElfSection& section : elf.Sections()) {
    out.push_back(!(section.flags & SHF_ALLOC)
                      ? SectionSpan{}
                      : SectionSpan{section.addr, section.addr + section.size,
                                    (section.flags & SHF_EXECINSTR) != 0});
  }
  return out;
}

}  // namespace

uint32_t AliasRank(std::string_view name, bool sized, bool label, bool ifunc, bool weak,
                   bool global) {
  const uint32_t underscores =
      static_cast<uint32_t>(std::min<size_t>(name.find_first_not_of('_'), name.size()));
  const bool versioned = name.find('@') != std::string_view::npos;
  return uint32_t{versioned} << 31 | uint32_t{!sized} << 30 | uint32_t{label} << 29 |
         uint32_t{ifunc} << 28 | uint32_t{weak} << 27 | uint32_t{!global} << 26 |
         std::min<uint32_t>(underscores, 7) << 23 |
         (0xffff - static_cast<uint32_t>(std::min<size_t>(name.size(), 0xffff)));
}

namespace {

// Appends the code symbols of `elf` to `out`, at their link-time addresses. Code symbols, as
// perf takes them: functions (STT_FUNC, STT_GNU_IFUNC) and labels (STT_NOTYPE) inside a code
// section (ld.so's _start). A symbol of size 0 ends at the end of its section (SortSymbols
// also ends it at the next symbol).
void LoadSymbolsInto(const ElfFile& elf, std::vector<Symbol>& out) {
  const std::vector<SectionSpan> sections = SectionSpans(elf);
  const std::vector<ElfSymbol> symbols = elf.Symbols();
  // The sized functions' ranges by start, each with the furthest end of those up to it
  // (`reach`): which function a label is inside (Symbol::entry; sweep 33a F5).
  struct Range {
    uint64_t start, end, reach;
  };
  std::vector<Range> functions;
  for (const ElfSymbol& sym : symbols) {
    if ((sym.type == STT_FUNC || sym.type == STT_GNU_IFUNC) && sym.value != 0 && sym.size != 0) {
      functions.push_back({sym.value, sym.value + sym.size, 0});
    }
  }
  std::sort(functions.begin(), functions.end(),
            [](const Range& a, const Range& b) { return a.start < b.start; });
  for (size_t i = 0; i < functions.size(); ++i) {
    functions[i].reach = std::max(functions[i].end, i == 0 ? 0 : functions[i - 1].reach);
  }
  // The dynamic symbols' names that name two addresses: the version of one not its name's
  // default tells it apart (elsewhere the name stays as perf, reading .dynsym, shows it).
  std::map<std::string_view, uint64_t> dynamic_at;
  std::set<std::string_view> two_addresses;
  for (const ElfSymbol& sym : symbols) {
    if (!sym.dynamic) continue;
    auto [at, added] = dynamic_at.try_emplace(sym.name, sym.value);
    if (!added && at->second != sym.value) two_addresses.insert(sym.name);
  }
  // The sized function a label at `address` is inside (the innermost, starting last): its
  // start and end; {0, 0} for none.
  auto inside_a_function = [&functions](uint64_t address) {
    auto f = std::lower_bound(functions.begin(), functions.end(), address,
                              [](const Range& r, uint64_t a) { return r.start < a; });
    while (f != functions.begin() && std::prev(f)->reach > address) {
      --f;
      if (f->end > address) return std::pair<uint64_t, uint64_t>{f->start, f->end};
    }
    return std::pair<uint64_t, uint64_t>{0, 0};
  };
  for (const ElfSymbol& sym : symbols) {
    if (sym.value == 0) continue;
    const SectionSpan section =
        sym.section < sections.size() ? sections[sym.section] : SectionSpan{};
    const bool in_section = sym.value >= section.begin && sym.value < section.end;
    if (sym.type == STT_NOTYPE) {
      // A label, not a linker-defined bound such as _etext at its section's end.
      if (!section.code || !in_section) continue;
    } else if (sym.type != STT_FUNC && sym.type != STT_GNU_IFUNC) {
      continue;
    }
    const uint64_t begin = sym.value;
    uint64_t size = sym.size;
    if (size == 0) size = in_section ? section.end - sym.value : 1;
    // A dynamic symbol of a version not its name's default, whose name another address has,
    // by that version, as .symtab and perf name it (sweep 34b F8: libc's compatibility
    // memcpy@GLIBC_2.2.5 and the memcpy of GLIBC_2.14 were both "memcpy", two rows of one
    // name).
    const std::string version = sym.hidden_version.empty() || !two_addresses.contains(sym.name)
                                    ? std::string()
                                    : fmt::format("@{}", sym.hidden_version);
    const std::string versioned = version.empty() ? std::string() : std::string(sym.name) + version;
    const auto [from, to] = sym.type == STT_NOTYPE && sym.size == 0
                                ? inside_a_function(begin)
                                : std::pair<uint64_t, uint64_t>{0, 0};
    out.push_back({begin, begin + size, Demangle(sym.name) + version, 0,
                   AliasRank(version.empty() ? sym.name : std::string_view(versioned),
                             sym.size != 0, sym.type == STT_NOTYPE, sym.type == STT_GNU_IFUNC,
                             sym.binding == STB_WEAK, sym.binding == STB_GLOBAL),
                   to == 0, static_cast<uint32_t>(begin - from), static_cast<uint32_t>(to - from)});
  }
}

// The name of each PLT entry's GOT slot, from the dynamic relocations: the symbol of a
// JUMP_SLOT or GLOB_DAT relocation. An x86-64 IRELATIVE one (a static program's calls of
// glibc's memcpy, strlen, ...) has the GNU_IFUNC symbol at its addend (the resolver), as perf
// names it since 6.3 ("strlen@plt"); without one, "*ABS*+0xADDEND" as objdump. Objdump's name
// moved with every build (the resolver's address), and `ptdecode diff` saw it as a new
// function and a removed one.
std::map<uint64_t, std::string> GotSlotNames(const ElfFile& elf) {
  std::map<uint64_t, std::string> out;
  const bool i386 = elf.machine() == EM_386;
  const uint32_t irelative = i386 ? R_386_IRELATIVE : R_X86_64_IRELATIVE;
  std::map<uint64_t, std::pair<uint32_t, std::string_view>> ifuncs;  // best ranked by address
  std::vector<ElfSymbol> symbols;                                    // (the names' storage)
  bool read_symbols = false;
  for (const ElfRelocation& rela : elf.Relocations()) {
    if (i386 ? rela.type != R_386_JMP_SLOT && rela.type != R_386_GLOB_DAT &&
                   rela.type != R_386_IRELATIVE
             : rela.type != R_X86_64_JUMP_SLOT && rela.type != R_X86_64_GLOB_DAT &&
                   rela.type != R_X86_64_IRELATIVE) {
      continue;
    }
    std::string name = Demangle(rela.symbol);
    if (name.empty() && rela.type != irelative) continue;
    if (name.empty() && !i386) {
      if (!read_symbols) {
        read_symbols = true;
        symbols = elf.Symbols();
        for (const ElfSymbol& sym : symbols) {
          if (sym.type != STT_GNU_IFUNC) continue;
          const uint32_t rank = AliasRank(sym.name, sym.size != 0, false, true,
                                          sym.binding == STB_WEAK, sym.binding == STB_GLOBAL);
          auto [at, added] = ifuncs.try_emplace(sym.value, rank, sym.name);
          if (!added && rank < at->second.first) at->second = {rank, sym.name};
        }
      }
      if (auto ifunc = ifuncs.find(static_cast<uint64_t>(rela.addend)); ifunc != ifuncs.end()) {
        out.emplace(rela.offset, Demangle(ifunc->second.second));
        continue;
      }
    }
    if (name.empty()) name = "*ABS*";
    if (rela.addend != 0) name += fmt::format("+{:#x}", rela.addend);
    out.emplace(rela.offset, std::move(name));
  }
  return out;
}

// endbr64 and endbr32, the first instruction of IBT code.
constexpr char kEndbr64[] = "\xf3\x0f\x1e\xfa";
constexpr char kEndbr32[] = "\xf3\x0f\x1e\xfb";

// Appends a symbol "X@plt" for each PLT entry of `elf`, as objdump and gdb name them (BFD's
// synthetic symbols): the entries of .plt, .plt.sec (IBT), .plt.bnd (MPX) and .plt.got
// (-z now, -fno-plt) that jump through a GOT slot with a name (GotSlotNames). An entry jumps
// with `[endbr64] [bnd] jmp *disp32(%rip)` at its start; .plt's first entry (the lazy binding
// trampoline) and, with IBT, .plt's lazy entries (which the .plt.sec entries reach through the
// GOT) do not, and stay unnamed as objdump leaves them. i386 (ld's elf_i386 entries): `[endbr32]
// jmp *ADDRESS` (ff 25, absolute) or, in PIC code, `jmp *disp32(%ebx)` (ff a3; %ebx holds
// .got.plt's address, _GLOBAL_OFFSET_TABLE_). At link-time addresses, as LoadSymbolsInto.
void LoadPltSymbolsInto(const ElfFile& elf, std::vector<Symbol>& out) {
  const bool i386 = elf.machine() == EM_386;
  if (elf.machine() != EM_X86_64 && !i386) return;
  uint64_t got_plt = 0;  // i386: what %ebx holds in PIC code
  if (i386) {
    for (const ElfSection& shdr : elf.Sections()) {
      if (shdr.name == ".got.plt" || (got_plt == 0 && shdr.name == ".got")) got_plt = shdr.addr;
    }
  }
  std::map<uint64_t, std::string> slots;
  bool have_slots = false;
  for (const ElfSection& shdr : elf.Sections()) {
    if (shdr.type != SHT_PROGBITS || !(shdr.flags & SHF_EXECINSTR)) continue;
    const std::string_view name = shdr.name;
    if (name != ".plt" && name != ".plt.sec" && name != ".plt.bnd" && name != ".plt.got") {
      continue;
    }
    const std::span<const uint8_t> data = elf.SectionData(shdr);
    if (data.empty()) continue;
    if (!have_slots) {
      slots = GotSlotNames(elf);
      have_slots = true;
    }
    // ld's entries are 16 bytes, but 8 where an entry is only the jump (a .plt.got without
    // IBT, a static program's IRELATIVE .plt, which has no lazy-binding entry 0). sh_entsize
    // says which when it is set; older ld and static links leave it 0: then two 8-byte
    // entries that both start with `jmp *disp32(%rip)` mean 8.
    const uint8_t* bytes = data.data();
    const size_t size = std::min<size_t>(data.size(), shdr.size);
    auto jumps_through_got = [&](size_t offset) {
      return offset + 6 <= size && bytes[offset] == 0xff &&
             (bytes[offset + 1] == 0x25 || (i386 && bytes[offset + 1] == 0xa3));
    };
    uint64_t entry_size = 16;
    if (shdr.entsize == 8 || shdr.entsize == 16) {
      entry_size = shdr.entsize;
    } else if (jumps_through_got(0) && (size < 16 || jumps_through_got(8))) {
      entry_size = 8;
    }
    for (size_t offset = 0; offset + entry_size <= size; offset += entry_size) {
      const uint8_t* p = bytes + offset;
      const uint8_t* end = p + entry_size;
      if (end - p >= 4 && std::memcmp(p, i386 ? kEndbr32 : kEndbr64, 4) == 0) p += 4;
      if (p < end && *p == 0xf2) ++p;  // bnd
      // jmp *disp32(%rip); i386: jmp *ADDRESS, jmp *disp32(%ebx)
      if (end - p < 6 || p[0] != 0xff || (p[1] != 0x25 && !(i386 && p[1] == 0xa3))) continue;
      int32_t disp = 0;
      std::memcpy(&disp, p + 2, 4);
      const uint64_t entry = shdr.addr + offset;
      const uint64_t next_ip = entry + static_cast<uint64_t>(p + 6 - (bytes + offset));
      const uint64_t base = !i386 ? next_ip : p[1] == 0xa3 ? got_plt : 0;
      if (i386 && p[1] == 0xa3 && got_plt == 0) continue;
      auto slot = slots.find(i386 ? static_cast<uint32_t>(base + static_cast<int64_t>(disp))
                                  : base + static_cast<uint64_t>(static_cast<int64_t>(disp)));
      if (slot == slots.end()) continue;
      out.push_back({entry, entry + entry_size, slot->second + "@plt", 0, kLastRank});
    }
  }
}

// The ELF image in `elf`'s .gnu_debugdata, MiniDebugInfo (gdb's name; Fedora's and RHEL's
// programs and libraries have it): xz-compressed, its .symtab holds the functions .dynsym lacks,
// at the same link-time addresses. Empty when there is none or it does not decompress within
// the limits (kMaxMiniDebugInfo bytes, 64 MiB of decoder memory: the section is input).
constexpr size_t kMaxMiniDebugInfo = size_t{256} << 20;
std::vector<uint8_t> MiniDebugInfo(const ElfFile& elf) {
  for (const ElfSection& section : elf.Sections()) {
    if (section.name != ".gnu_debugdata" || section.type != SHT_PROGBITS) continue;
    const std::span<const uint8_t> xz = elf.SectionData(section);
    lzma_stream stream = LZMA_STREAM_INIT;
    if (xz.empty() || lzma_stream_decoder(&stream, uint64_t{64} << 20, 0) != LZMA_OK) return {};
    std::vector<uint8_t> out(std::min(kMaxMiniDebugInfo, xz.size() * 4 + 4096));
    stream.next_in = xz.data();
    stream.avail_in = xz.size();
    stream.next_out = out.data();
    stream.avail_out = out.size();
    lzma_ret ret = LZMA_OK;
    while (ret == LZMA_OK) {
      if (stream.avail_out == 0) {
        if (out.size() == kMaxMiniDebugInfo) break;
        const size_t used = out.size();
        out.resize(std::min(kMaxMiniDebugInfo, used * 2));
        stream.next_out = out.data() + used;
        stream.avail_out = out.size() - used;
      }
      ret = lzma_code(&stream, LZMA_FINISH);
    }
    out.resize(stream.total_out);
    lzma_end(&stream);
    if (ret != LZMA_STREAM_END) return {};
    return out;
  }
  return {};
}

// The functions of a Go program from its .gopclntab (Go 1.16 and later; runtime/symtab.go's
// pcHeader, functab and _func), which the Go runtime needs and `go build -ldflags='-s -w'`, the
// usual release build, keeps when it drops .symtab: every function's entry and name, as `go
// tool addr2line` reads them. Each ends where the next begins (the table is sorted by entry).
// Nothing for another layout (Go 1.2-1.15) or where a field points outside the section. A
// position-independent build (-buildmode=pie) has it in .data.rel.ro.gopclntab (review 39 M1);
// one with cgo merges it into .data.rel.ro, where it is not looked for.
void LoadGoFunctionsInto(const ElfFile& elf, std::vector<Symbol>& out) {
  std::span<const uint8_t> tab;
  for (const ElfSection& section : elf.Sections()) {
    if ((section.name == ".gopclntab" || section.name == ".data.rel.ro.gopclntab") &&
        section.type == SHT_PROGBITS) {
      tab = elf.SectionData(section);
    }
  }
  if (tab.size() < 8) return;
  auto u32 = [&](uint64_t at) -> std::optional<uint32_t> {
    if (at > tab.size() || tab.size() - at < 4) return std::nullopt;
    uint32_t v = 0;
    std::memcpy(&v, tab.data() + at, 4);
    return v;
  };
  const uint32_t magic = *u32(0);
  const uint8_t ptr = tab[7];
  // 0xfffffffa: Go 1.16-1.17 (pointer-sized entries); 0xfffffff0: 1.18-1.19; 0xfffffff1: 1.20+
  // (32-bit offsets from textStart).
  const bool offsets = magic == 0xfffffff0 || magic == 0xfffffff1;
  if ((!offsets && magic != 0xfffffffa) || tab[4] != 0 || tab[5] != 0 || (ptr != 4 && ptr != 8)) {
    return;
  }
  auto word = [&](uint64_t at) -> std::optional<uint64_t> {
    if (at > tab.size() || tab.size() - at < ptr) return std::nullopt;
    uint64_t v = 0;
    std::memcpy(&v, tab.data() + at, ptr);  // little-endian
    return v;
  };
  // nfunc, nfiles, [textStart,] funcnameOffset, cuOffset, filetabOffset, pctabOffset, pclnOffset
  const uint64_t first = offsets ? 3 : 2;
  const std::optional<uint64_t> nfunc = word(8), names = word(8 + first * ptr),
                                pcln = word(8 + (first + 4) * ptr);
  const std::optional<uint64_t> text_start =
      offsets ? word(8 + 2 * ptr) : std::optional<uint64_t>(0);
  // (Go 1.18+'s textStart is the link address also in a PIE; 0 would be a guess, and wrong
  // names are worse than none: review 39 M3.)
  if (!nfunc || !names || !pcln || !text_start || (offsets && *text_start == 0) ||
      *names >= tab.size() || *pcln >= tab.size()) {
    return;
  }
  const uint64_t base = *text_start;
  const uint64_t entry_size = offsets ? 8 : 2 * uint64_t{ptr};
  if (*nfunc == 0 || *nfunc >= (tab.size() - *pcln) / entry_size) return;  // nfunc + 1 entries
  auto entry_at = [&](uint64_t i) -> std::optional<uint64_t> {
    const uint64_t at = *pcln + i * entry_size;
    if (!offsets) return word(at);
    const std::optional<uint32_t> off = u32(at);
    return off ? std::optional<uint64_t>(base + *off) : std::nullopt;
  };
  // The names' bytes, at most 4 times the section's: every function may name the same long
  // name (hostile input: 1.2 MB made 206 MB of copies; review 39 M2); real tables' are within it.
  uint64_t name_bytes = 0;
  for (uint64_t i = 0; i < *nfunc; ++i) {
    const std::optional<uint64_t> begin = entry_at(i), end = entry_at(i + 1);
    const uint64_t at = *pcln + i * entry_size + entry_size / 2;
    // (Not an optional: gcc 12 -O2 takes one made by the conditional for maybe uninitialised.)
    uint64_t func = ~uint64_t{0};
    if (offsets) {
      if (const std::optional<uint32_t> f = u32(at)) func = *f;
    } else if (const std::optional<uint64_t> f = word(at)) {
      func = *f;
    }
    if (!begin || !end || *end <= *begin || func >= tab.size() - *pcln) continue;
    // _func: entryOff (uint32) or entry (uintptr), then nameOff (int32) into funcnametab.
    const std::optional<uint32_t> name_off = u32(*pcln + func + (offsets ? 4 : ptr));
    if (!name_off || *name_off >= tab.size() - *names) continue;
    const char* const name = reinterpret_cast<const char*>(tab.data() + *names + *name_off);
    const size_t length = strnlen(name, tab.size() - *names - *name_off);
    if (length == 0 || length == tab.size() - *names - *name_off) continue;  // unterminated
    if ((name_bytes += length) > 4 * uint64_t{tab.size()}) return;
    const std::string_view view(name, length);
    out.push_back(
        {*begin, *end, std::string(view), 0, AliasRank(view, true, false, false, false, true)});
  }
}

// A symbol "main" for a stripped x86-64 executable, found as Ghidra and radare2 find it: glibc's
// _start (the entry point) loads main's address into %rdi (`lea main(%rip),%rdi` in PIE code,
// `mov $main,%rdi` otherwise) and then calls __libc_start_main. Its extent is its .eh_frame
// FDE's (ElfFile::FdeSize), which GCC and Clang write for every function; without one nothing is
// added, since a symbol of unknown size would name the code after it. Nothing either when the
// entry code is not glibc's (no such load before the first call, or it points outside code).
void LoadEntryMainInto(const ElfFile& elf, std::vector<Symbol>& out) {
  if (elf.machine() != EM_X86_64 || (elf.type() != ET_EXEC && elf.type() != ET_DYN) ||
      elf.entry() == 0) {
    return;
  }
  const std::vector<ElfSection> sections = elf.Sections();
  auto code_at = [&](uint64_t address) -> std::span<const uint8_t> {
    for (const ElfSection& s : sections) {
      if (s.type != SHT_PROGBITS || !(s.flags & SHF_EXECINSTR) || address < s.addr ||
          address >= s.addr + s.size) {
        continue;
      }
      const std::span<const uint8_t> data = elf.SectionData(s);
      const uint64_t at = address - s.addr;
      return at < data.size() ? data.subspan(at) : std::span<const uint8_t>{};
    }
    return {};
  };
  const std::span<const uint8_t> start = code_at(elf.entry());
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  uint64_t main = 0;
  size_t at = 0;
  bool called = false;
  for (int i = 0; i < 24 && at < start.size(); ++i) {
    ZydisDecodedInstruction insn;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    if (!ZYAN_SUCCESS(
            ZydisDecoderDecodeFull(&decoder, start.data() + at, start.size() - at, &insn, ops))) {
      return;
    }
    const uint64_t ip = elf.entry() + at;
    at += insn.length;
    if (insn.meta.category == ZYDIS_CATEGORY_CALL) {
      called = true;
      break;
    }
    if (insn.meta.branch_type != ZYDIS_BRANCH_TYPE_NONE) return;  // not glibc's _start
    for (uint8_t k = 0; k < insn.operand_count_visible; ++k) {
      const ZydisDecodedOperand& op = ops[k];
      if (op.type != ZYDIS_OPERAND_TYPE_REGISTER ||
          !(op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) ||
          ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, op.reg.value) !=
              ZYDIS_REGISTER_RDI) {
        continue;
      }
      main = 0;  // %rdi written: only a load of an address counts
      const ZydisDecodedOperand& src = ops[1];
      if (k != 0 || insn.operand_count_visible != 2) continue;
      ZyanU64 address = 0;
      if (insn.mnemonic == ZYDIS_MNEMONIC_MOV && src.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
        main = src.imm.value.u;
      } else if (insn.mnemonic == ZYDIS_MNEMONIC_LEA && src.type == ZYDIS_OPERAND_TYPE_MEMORY &&
                 src.mem.base == ZYDIS_REGISTER_RIP &&
                 ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &src, ip, &address))) {
        main = address;
      }
    }
  }
  if (!called || main == 0 || code_at(main).empty()) return;
  if (const uint64_t size = elf.FdeSize(main)) out.push_back({main, main + size, "main", 0, 0});
}

}  // namespace

absl::StatusOr<ElfSpec> ParseElfSpec(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("bad --elf '': expected FILE[:BASE]");
  ElfSpec spec;
  std::string_view head;
  if (SplitTrailingNumber(text, &head, &spec.base)) {
    spec.path = std::string(head);
  } else {
    spec.path = std::string(text);
    // FILE:BASE whose BASE is no number, where FILE is there and FILE:BASE is not: a usage error
    // naming BASE (sweep 40b L8: "open ELF file sapp:0xzz: No such file", exit 1).
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos && colon > 0 && access(spec.path.c_str(), F_OK) != 0 &&
        access(std::string(text.substr(0, colon)).c_str(), F_OK) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad --elf '", std::string(text), "': BASE '", std::string(text.substr(colon + 1)),
          "' is not a number (expected FILE[:BASE], BASE the load address, e.g. 0x400000)"));
    }
  }
  return spec;
}

absl::StatusOr<RawSpec> ParseRawSpec(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --raw '", std::string(text), "': expected FILE[:FROM[-TO]]:ADDRESS"));
  };
  RawSpec spec;
  std::string_view head;
  if (!SplitTrailingNumber(text, &head, &spec.address)) return bad();
  // Optional ":FROM[-TO]" before the address.
  size_t colon = head.rfind(':');
  if (colon != std::string_view::npos && colon > 0) {
    std::string_view range = head.substr(colon + 1);
    size_t dash = range.find('-');
    auto from = ParseUint(range.substr(0, dash), std::numeric_limits<uint64_t>::max(), "from");
    if (from.ok()) {
      spec.from = *from;
      if (dash != std::string_view::npos) {
        auto to = ParseUint(range.substr(dash + 1), std::numeric_limits<uint64_t>::max(), "to");
        if (!to.ok() || *to <= *from) return bad();
        spec.to = *to;
      }
      head = head.substr(0, colon);
    } else if (dash != std::string_view::npos &&
               range.find_first_not_of("0123456789abcdefABCDEFxX-") == std::string_view::npos) {
      return bad();
    }
  }
  if (head.empty()) return bad();
  spec.path = std::string(head);
  return spec;
}

PageDumpSpec ParsePageDumpSpec(std::string_view text) {
  size_t comma = text.find(',');
  if (comma != std::string_view::npos) {
    return {std::string(text.substr(0, comma)), std::string(text.substr(comma + 1))};
  }
  std::string dir(text);
  return {dir + "/data.addr", dir + "/data.dump"};
}

ProgramImage::ProgramImage(ImagePtr image, std::shared_ptr<pt_image_section_cache> iscache)
    : image_(std::move(image)), iscache_(std::move(iscache)), link_symbols_(NewLinkSymbolCache()) {}
ProgramImage::~ProgramImage() = default;

absl::StatusOr<std::shared_ptr<pt_image_section_cache>> ProgramImage::CreateSectionCache() {
  std::shared_ptr<pt_image_section_cache> iscache(pt_iscache_alloc("ptdecode"), IptDeleter());
  if (!iscache) return absl::ResourceExhaustedError("libipt: cannot allocate a section cache");
  return iscache;
}

absl::StatusOr<std::unique_ptr<ProgramImage>> ProgramImage::Create(
    std::shared_ptr<pt_image_section_cache> iscache) {
  ImagePtr image(pt_image_alloc("ptdecode"));
  if (!iscache) iscache.reset(pt_iscache_alloc("ptdecode"), IptDeleter());
  if (!image || !iscache) return absl::ResourceExhaustedError("libipt: cannot allocate an image");
  auto result =
      std::unique_ptr<ProgramImage>(new ProgramImage(std::move(image), std::move(iscache)));
  int err = pt_image_set_callback(result->image_.get(), &ProgramImage::ReadMemory, result.get());
  if (err < 0)
    return absl::InternalError(absl::StrCat("pt_image_set_callback: ", pt_errstr(pt_errcode(err))));
  return result;
}

namespace {

// [begin, end) of `m` as a mapping of its own (memory bytes from there on).
template <typename M>
M Part(const M& m, uint64_t begin, uint64_t end) {
  M part = m;
  if (part.memory != nullptr) part.memory += begin - m.begin;
  part.begin = begin;
  part.end = end;
  return part;
}

// Puts `m` into `list` (sorted by begin, no two overlapping) in place of what it overlaps:
// the mappings it covers go, one it covers in part keeps the rest. Calls `replaced(old, begin,
// end)` for each part it takes. O(log n + k) for k overlapped, plus the insertion's move.
template <typename M, typename F>
void Overlay(std::vector<M>& list, const M& m, F&& replaced) {
  auto first =
      std::partition_point(list.begin(), list.end(), [&](const M& e) { return e.end <= m.begin; });
  auto last = first;
  while (last != list.end() && last->begin < m.end) ++last;
  std::vector<M> in{};
  if (first != last && first->begin < m.begin) in.push_back(Part(*first, first->begin, m.begin));
  for (auto it = first; it != last; ++it) {
    replaced(*it, std::max(it->begin, m.begin), std::min(it->end, m.end));
  }
  in.push_back(m);
  if (first != last && std::prev(last)->end > m.end) {
    in.push_back(Part(*std::prev(last), m.end, std::prev(last)->end));
  }
  const auto at = list.erase(first, last);
  list.insert(at, in.begin(), in.end());
}

}  // namespace

// The rule of libipt's image (pt_image_add: sections that the new one overlaps are shrunk or
// split; the read callback serves only addresses no section holds), kept here too so that the
// fast decoder and symbols see the same code as libipt's decoders: a file section replaces
// what it overlaps, captured bytes fill only what no file section holds and replace older
// captured bytes.
void ProgramImage::AddMapping(const Mapping& m) {
  if (m.begin >= m.end) return;
  fast_decoder_graphs_.reset();  // made of the code before
  // (By index: a file may be listed in files_ only after its mappings are added, AddElf.)
  auto note = [&](const Mapping& old, uint64_t begin, uint64_t end) {
    if (old.file != m.file) overlaps_.push_back({begin, end, old.file, m.file});
  };
  if (m.memory == nullptr) {
    // (The callback's runs under it stay in memory_mappings_: libipt no longer asks for them.)
    Overlay(mappings_, m, note);
    return;
  }
  Overlay(memory_mappings_, m, [](const Mapping&, uint64_t, uint64_t) {});
  // In mappings_, only the parts of m outside every file section.
  uint64_t from = m.begin;
  std::vector<Mapping> holes;
  auto it = std::partition_point(mappings_.begin(), mappings_.end(),
                                 [&](const Mapping& e) { return e.end <= m.begin; });
  for (; it != mappings_.end() && it->begin < m.end; ++it) {
    if (it->memory != nullptr) continue;
    if (it->begin > from) holes.push_back(Part(m, from, it->begin));
    from = std::max(from, it->end);
  }
  if (from < m.end) holes.push_back(Part(m, from, m.end));
  for (const Mapping& h : holes) Overlay(mappings_, h, note);
}

absl::Status ProgramImage::AddElf(const ElfSpec& spec) {
  absl::StatusOr<ElfFile> opened = ElfFile::Open(spec.path);
  if (!opened.ok()) {
    const absl::Status& st = opened.status();
    // The errno of open: say which option's file it was.
    const std::string message(st.message());
    if (message.starts_with("open ")) {
      return absl::Status(st.code(), "open ELF file " + message.substr(5));
    }
    return st;
  }
  const ElfFile& elf = *opened;
  // As ptxed's load_elf.c: BASE is where the lowest executable PT_LOAD segment goes.
  uint64_t bias = 0;
  if (spec.base != 0) {
    uint64_t min_vaddr = std::numeric_limits<uint64_t>::max();
    for (const ElfSegment& segment : elf.LoadSegments()) {
      if (segment.flags & PF_X) min_vaddr = std::min(min_vaddr, segment.vaddr);
    }
    if (min_vaddr != std::numeric_limits<uint64_t>::max()) bias = spec.base - min_vaddr;
  }
  const uint32_t file_index = static_cast<uint32_t>(files_.size());
  ImageFile file{spec.path, "elf", 0};
  file.elf32 = !elf.is_64bit();
  int loaded = 0;
  for (size_t i = 0; i < elf.LoadSegments().size(); ++i) {
    const ElfSegment& segment = elf.LoadSegments()[i];
    if (segment.filesz == 0) continue;
    uint64_t vaddr = segment.vaddr + bias;
    int isid = pt_iscache_add_file(iscache_.get(), spec.path.c_str(), segment.offset,
                                   segment.filesz, vaddr);
    if (isid < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ": cannot add segment ", i, ": ", pt_errstr(pt_errcode(isid))));
    }
    int err = pt_image_add_cached(image_.get(), iscache_.get(), isid, nullptr);
    if (err < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ": cannot map segment ", i, ": ", pt_errstr(pt_errcode(err))));
    }
    AddMapping({vaddr, vaddr + segment.filesz, file_index, isid, nullptr});
    AddElfSegment({vaddr, vaddr + segment.filesz, bias, file_index});
    file.bytes += segment.filesz;
    ++loaded;
  }
  if (loaded == 0) {
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": no loadable segment"));
  }
  files_.push_back(std::move(file));

  // Function symbols from .symtab and .dynsym, all at the one bias.
  const Placement everywhere{0, std::numeric_limits<uint64_t>::max(), bias};
  const LinkSymbols* table = LinkSymbolsOf(spec.path, &elf);
  files_[file_index].refused_debug = table->refused_debug;
  PlaceSymbols(*table, file_index, {&everywhere, 1});
  return absl::OkStatus();
}

ProgramImage::LinkSymbols ProgramImage::ReadLinkSymbols(const ElfFile& elf) const {
  LinkSymbols table;
  table.loads = elf.LoadSegments();
  table.entry = elf.entry();
  table.elf32 = !elf.is_64bit();
  LoadSymbolsInto(elf, table.symbols);
  LoadPltSymbolsInto(elf, table.symbols);
  // Stripped: the .symtab of its separate debug file (same link-time addresses). So too where
  // the .symtab kept has no local function (strip -x, ld --discard-all: the globals only), as
  // gdb and perf then name the static functions from it (sweep 38a F8).
  const std::vector<ElfSymbol> kept = elf.Symbols();
  const bool locals = std::any_of(kept.begin(), kept.end(), [](const ElfSymbol& sym) {
    return !sym.dynamic && sym.binding == STB_LOCAL && sym.type == STT_FUNC;
  });
  if (!elf.HasSymtab() || !locals) {
    const std::string debug_path = DebugFileOf(elf, &table.refused_debug);
    absl::StatusOr<ElfFile> debug =
        debug_path.empty() ? absl::NotFoundError("no debug file") : ElfFile::Open(debug_path);
    if (debug.ok()) {
      LoadSymbolsInto(*debug, table.symbols);
    } else if (const std::vector<uint8_t> mini = MiniDebugInfo(elf); !mini.empty()) {
      // Without a debug file, MiniDebugInfo's, as gdb (sweep 38a F6: Fedora's static functions
      // were sub_ADDRESS).
      absl::StatusOr<ElfFile> embedded =
          ElfFile::FromMemory(elf.path() + " [.gnu_debugdata]", mini);
      if (embedded.ok()) LoadSymbolsInto(*embedded, table.symbols);
    } else if (!elf.HasSymtab()) {
      // A stripped Go program: its own function table (sweep 38a F4: every function was
      // sub_ADDRESS, and the goroutine switches, which go by name, were not seen).
      LoadGoFunctionsInto(elf, table.symbols);
    }
  }
  if (std::none_of(table.symbols.begin(), table.symbols.end(),
                   [](const Symbol& s) { return s.name == "main"; })) {
    LoadEntryMainInto(elf, table.symbols);
  }
  // Stable: among symbols of one start, the order found (SortSymbols keeps the first of equal
  // rank), so placing a table gives what placing the symbols one by one did.
  std::stable_sort(table.symbols.begin(), table.symbols.end(),
                   [](const Symbol& a, const Symbol& b) { return a.begin < b.begin; });
  return table;
}

struct ProgramImage::LinkSymbolCache {
  std::unordered_map<std::string, std::optional<LinkSymbols>> by_path;
};

std::shared_ptr<ProgramImage::LinkSymbolCache> ProgramImage::NewLinkSymbolCache() {
  return std::make_shared<LinkSymbolCache>();
}

namespace {
std::atomic<uint64_t> link_symbol_tables_read{0};
}  // namespace

uint64_t ProgramImage::LinkSymbolTablesRead() {
  return link_symbol_tables_read.load(std::memory_order_relaxed);
}

const ProgramImage::LinkSymbols* ProgramImage::LinkSymbolsOf(const std::string& path,
                                                             const ElfFile* opened) {
  auto [it, inserted] = link_symbols_->by_path.try_emplace(path);
  if (inserted) {
    link_symbol_tables_read.fetch_add(1, std::memory_order_relaxed);
    if (opened != nullptr) {
      it->second = ReadLinkSymbols(*opened);
    } else if (absl::StatusOr<ElfFile> elf = ElfFile::Open(path); elf.ok()) {
      it->second = ReadLinkSymbols(*elf);
    }
  }
  return it->second.has_value() ? &*it->second : nullptr;
}

void ProgramImage::PlaceSymbols(const LinkSymbols& table, uint32_t file_index,
                                std::span<const Placement> placements) {
  auto by_begin = [](const Symbol& s, uint64_t v) { return s.begin < v; };
  for (size_t p = 0; p < placements.size(); ++p) {
    const Placement& place = placements[p];
    if (table.entry != 0 && table.entry >= place.from && table.entry < place.to &&
        !IsEntryPoint(table.entry + place.bias)) {
      entry_points_.push_back(table.entry + place.bias);
    }
    for (auto it =
             std::lower_bound(table.symbols.begin(), table.symbols.end(), place.from, by_begin);
         it != table.symbols.end() && it->begin < place.to; ++it) {
      // A link address is placed by the first range that holds it.
      auto holds = [v = it->begin](const Placement& q) { return v >= q.from && v < q.to; };
      if (std::any_of(placements.begin(), placements.begin() + p, holds)) continue;
      Symbol& s = symbols_.emplace_back(*it);
      s.begin += place.bias;
      s.end += place.bias;
      s.image = file_index;
    }
  }
  symbols_sorted_ = false;
}

void ProgramImage::SortSymbols() const {
  if (symbols_sorted_) return;
  symbols_sorted_ = true;
  // One pass for every file added since the last: the same result as a pass after each file,
  // since ends only shrink to the next start and the stable sort keeps the first of equals.
  // Sort, drop duplicates of the same start (the best ranked wins; among equals the first,
  // .symtab before .dynsym), and end each symbol at the next one: a symbol of size 0 (which
  // LoadSymbolsInto ends at its section's end) never covers code with a name of its own, and
  // the symbol of an address is always the closest one before it (SymbolAt).
  std::stable_sort(symbols_.begin(), symbols_.end(), [](const Symbol& a, const Symbol& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.rank < b.rank;
  });
  symbols_.erase(std::unique(symbols_.begin(), symbols_.end(),
                             [](const Symbol& a, const Symbol& b) { return a.begin == b.begin; }),
                 symbols_.end());
  // A symbol whose code a later mapping of another file replaced (AddMapping) names that
  // file's code no more.
  if (!overlaps_.empty()) {
    std::erase_if(symbols_, [this](const Symbol& s) {
      const int file = FileAt(s.begin);
      return file >= 0 && files_[static_cast<size_t>(file)].name != files_[s.image].name;
    });
  }
  for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
    symbols_[i].end = std::min(symbols_[i].end, symbols_[i + 1].begin);
  }
}

absl::Status ProgramImage::AddRaw(const RawSpec& spec) {
  PTKIT_ASSIGN_OR_RETURN(uint64_t size, FileSize(spec.path));
  if (access(spec.path.c_str(), R_OK) != 0) return ErrnoStatus(errno, "open ", spec.path);
  uint64_t to = spec.to == 0 ? size : spec.to;
  if (spec.from >= to || to > size) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: range [{:#x}, {:#x}) is outside the file ({} bytes)", spec.path, spec.from, to, size));
  }
  int isid = pt_iscache_add_file(iscache_.get(), spec.path.c_str(), spec.from, to - spec.from,
                                 spec.address);
  if (isid < 0) {
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": ", pt_errstr(pt_errcode(isid))));
  }
  int err = pt_image_add_cached(image_.get(), iscache_.get(), isid, nullptr);
  if (err < 0) {
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": ", pt_errstr(pt_errcode(err))));
  }
  uint32_t file_index = static_cast<uint32_t>(files_.size());
  files_.push_back({spec.path, "raw", to - spec.from});
  AddMapping({spec.address, spec.address + (to - spec.from), file_index, isid, nullptr});
  return absl::OkStatus();
}

absl::Status ProgramImage::AddPageDump(const PageDumpSpec& spec) {
  PTKIT_ASSIGN_OR_RETURN(std::string addr, ReadWholeFile(spec.addr_path));
  PTKIT_ASSIGN_OR_RETURN(std::string dump, ReadWholeFile(spec.dump_path));
  if (addr.size() % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(spec.addr_path, ": size ", addr.size(),
                                                   " is not a multiple of 8 (u64 page addresses)"));
  }
  size_t slots = addr.size() / 8;
  if (dump.size() < slots * kPageSize) {
    return absl::InvalidArgumentError(absl::StrCat(spec.dump_path, ": ", dump.size(),
                                                   " bytes, but ", spec.addr_path, " lists ", slots,
                                                   " pages of 4096 bytes"));
  }
  // Page address -> slot; entries with any of the low 12 bits set are unmapped slots.
  std::map<uint64_t, size_t> pages;
  for (size_t i = 0; i < slots; ++i) {
    uint64_t va = 0;
    std::memcpy(&va, addr.data() + i * 8, 8);  // little-endian host (x86-64)
    if (va & (kPageSize - 1)) continue;
    pages.emplace(va, i);
  }
  if (pages.empty()) {
    return absl::InvalidArgumentError(spec.addr_path + ": no mapped page");
  }
  uint32_t file_index = static_cast<uint32_t>(files_.size());
  files_.push_back({spec.dump_path, "pages", pages.size() * kPageSize});
  // Merge pages with consecutive addresses into one run so instructions can cross pages.
  for (auto it = pages.begin(); it != pages.end();) {
    uint64_t begin = it->first;
    auto run_end = it;
    size_t count = 0;
    while (run_end != pages.end() && run_end->first == begin + count * kPageSize) {
      ++run_end;
      ++count;
    }
    auto bytes = std::make_unique<uint8_t[]>(count * kPageSize);
    size_t k = 0;
    for (auto p = it; p != run_end; ++p, ++k) {
      std::memcpy(bytes.get() + k * kPageSize, dump.data() + p->second * kPageSize, kPageSize);
    }
    AddMemoryRun(file_index, begin, std::move(bytes), count * kPageSize);
    it = run_end;
  }
  return absl::OkStatus();
}

void ProgramImage::AddMemoryRun(uint32_t file, uint64_t address, std::unique_ptr<uint8_t[]> bytes,
                                size_t size) {
  AddMapping({address, address + size, file, 0, bytes.get()});
  memory_.push_back(std::move(bytes));
}

void ProgramImage::AddBytes(const std::string& name, uint64_t address,
                            std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  std::shared_ptr<uint8_t[]> copy(new uint8_t[bytes.size()]);
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  const std::span<uint8_t> mine(copy.get(), bytes.size());  // before `copy` is moved from
  AddBytes(name, address, mine, std::move(copy));
}

void ProgramImage::AddBytes(const std::string& name, uint64_t address, std::span<uint8_t> bytes,
                            std::shared_ptr<void> owner) {
  if (bytes.empty()) return;
  uint32_t file_index = static_cast<uint32_t>(files_.size());
  files_.push_back({name, "bytes", bytes.size()});
  AddMapping({address, address + bytes.size(), file_index, 0, bytes.data()});
  owners_.push_back(std::move(owner));
  LoadCapturedSymbols(name, file_index, address, bytes);
}

void ProgramImage::LoadCapturedSymbols(const std::string& name, uint32_t file_index,
                                       uint64_t address, std::span<uint8_t> bytes) {
  if (bytes.size() < SELFMAG || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0) return;
  absl::StatusOr<ElfFile> elf = ElfFile::FromMemory(name, bytes);
  if (!elf.ok()) return;
  files_[file_index].elf32 = !elf->is_64bit();
  std::vector<Placement> placements;
  for (const ElfSegment& segment : elf->LoadSegments()) {
    if (segment.offset + segment.filesz > bytes.size()) continue;
    placements.push_back(
        {segment.vaddr, segment.vaddr + segment.filesz, address + segment.offset - segment.vaddr});
  }
  // Not kept in link_symbols_: captured bytes are named, not identified, by `name`.
  PlaceSymbols(ReadLinkSymbols(*elf), file_index, placements);
}

void ProgramImage::AddSymbols(std::span<const Symbol> symbols) {
  // A symbol may span several mappings (the kernel text comes in chunks): without a size it
  // ends at the next symbol (SortSymbols), at most at the end of the mapped code.
  const uint64_t top = mappings_.empty() ? 0 : mappings_.back().end;
  for (Symbol s : symbols) {
    if (SectionAt(s.begin) < 0) continue;
    s.image = static_cast<uint32_t>(FileAt(s.begin));
    if (s.end <= s.begin) s.end = top;
    symbols_.push_back(std::move(s));
    symbols_sorted_ = false;
  }
}

void ProgramImage::AddMissing(const std::string& path, uint64_t start, uint64_t end) {
  missing_.push_back({start, end, path});
}

const std::string* ProgramImage::MissingAt(uint64_t ip) const {
  for (const Missing& m : missing_) {
    if (ip >= m.start && ip < m.end) return &m.path;
  }
  return nullptr;
}

absl::Status ProgramImage::AddFileMapping(const std::string& path, uint64_t start, uint64_t len,
                                          uint64_t pgoff, const std::string& name) {
  PTKIT_ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
  if (pgoff >= size) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: mapped at file offset {:#x}, but the file has {} bytes", path, pgoff, size));
  }
  const uint64_t to = std::min(size, pgoff + len);
  PTKIT_RETURN_IF_ERROR(AddRaw({path, pgoff, to, start}));
  files_.back().kind = "file";
  if (!name.empty() && name != path) {
    files_.back().path = path;
    files_.back().name = name;
  }
  PlaceFileSymbols(path, static_cast<uint32_t>(files_.size() - 1), start, pgoff, to);
  return absl::OkStatus();
}

void ProgramImage::AddArchivedBytes(const std::string& path, uint64_t address,
                                    std::span<uint8_t> bytes, std::shared_ptr<void> owner,
                                    uint64_t pgoff, const std::string& symbols,
                                    const std::string& debug) {
  if (bytes.empty()) return;
  if (!symbols.empty() && !debug.empty()) debug_files_[symbols] = debug;
  AddBytes(path, address, bytes, std::move(owner));
  if (!symbols.empty() && symbols != path) files_.back().path = symbols;  // its DWARF too
  if (!symbols.empty()) {
    PlaceFileSymbols(symbols, static_cast<uint32_t>(files_.size() - 1), address, pgoff,
                     pgoff + bytes.size());
  }
}

std::string ProgramImage::DebugFileOf(const ElfFile& elf, std::string* refused) const {
  if (auto it = debug_files_.find(elf.path()); it != debug_files_.end()) return it->second;
  return elf.FindDebugFile(sysroot_, refused, buildid_dir_);
}

void ProgramImage::PlaceFileSymbols(const std::string& path, uint32_t file_index, uint64_t start,
                                    uint64_t pgoff, uint64_t to) {
  // Symbols, when the file is ELF: a symbol at link address v in a segment whose file bytes
  // are mapped lies at start + (p_offset + v - p_vaddr - pgoff).
  // The file's symbols are read once, for its first mapping.
  const LinkSymbols* table = LinkSymbolsOf(path, nullptr);
  if (table == nullptr) return;  // not an ELF file
  files_[file_index].elf32 = table->elf32;
  files_[file_index].refused_debug = table->refused_debug;
  std::vector<Placement> placements;
  for (const ElfSegment& phdr : table->loads) {
    if (phdr.filesz == 0) continue;
    if (phdr.offset + phdr.filesz <= pgoff || phdr.offset >= to) continue;
    const uint64_t bias = start + phdr.offset - pgoff - phdr.vaddr;
    // The part of the segment inside the mapping, and only its symbols: a mapping of the page
    // a segment shares with its neighbour in the file (lld lays segments out in one file page,
    // a virtual page apart) would place every symbol of that neighbour a page off.
    const uint64_t begin = std::max(phdr.vaddr + bias, start);
    const uint64_t end = std::min(phdr.vaddr + phdr.filesz + bias, start + (to - pgoff));
    if (begin >= end) continue;
    placements.push_back({begin - bias, end - bias, bias});
    AddElfSegment({begin, end, bias, file_index});
  }
  PlaceSymbols(*table, file_index, placements);
}

int ProgramImage::ReadMemory(uint8_t* buffer, size_t size, const pt_asid* /*asid*/, uint64_t ip,
                             void* context) {
  const auto* self = static_cast<const ProgramImage*>(context);
  const auto& runs = self->memory_mappings_;
  // libipt reads instruction by instruction, mostly from the run it read last.
  size_t last = self->last_run_.load(std::memory_order_relaxed);
  if (last < runs.size() && ip >= runs[last].begin && ip < runs[last].end) {
    size_t n = std::min<uint64_t>(size, runs[last].end - ip);
    std::memcpy(buffer, runs[last].memory + (ip - runs[last].begin), n);
    return static_cast<int>(n);
  }
  auto it = std::upper_bound(runs.begin(), runs.end(), ip,
                             [](uint64_t v, const Mapping& m) { return v < m.begin; });
  if (it == runs.begin()) return -pte_nomap;
  --it;
  if (ip >= it->end) return -pte_nomap;
  self->last_run_.store(static_cast<size_t>(it - runs.begin()), std::memory_order_relaxed);
  size_t n = std::min<uint64_t>(size, it->end - ip);
  std::memcpy(buffer, it->memory + (ip - it->begin), n);
  return static_cast<int>(n);
}

const ProgramImage::Mapping* ProgramImage::MappingAt(uint64_t ip) const {
  auto it = std::upper_bound(mappings_.begin(), mappings_.end(), ip,
                             [](uint64_t v, const Mapping& m) { return v < m.begin; });
  if (it == mappings_.begin()) return nullptr;
  --it;  // mappings_ never overlap (AddMapping)
  return ip < it->end ? &*it : nullptr;
}

size_t ProgramImage::Read(uint64_t ip, uint8_t* out, size_t size) const {
  const Mapping* m = MappingAt(ip);
  if (m == nullptr) return 0;
  size_t n = std::min<uint64_t>(size, m->end - ip);
  if (m->memory != nullptr) {
    std::memcpy(out, m->memory + (ip - m->begin), n);
    return n;
  }
  int got = pt_iscache_read(iscache_.get(), out, n, m->isid, ip);
  return got < 0 ? 0 : static_cast<size_t>(got);
}

int ProgramImage::SectionAt(uint64_t ip, AddressRange* range) const {
  const Mapping* m = MappingAt(ip);
  if (m == nullptr) return -1;
  if (range != nullptr) *range = {m->begin, m->end};
  return m->memory != nullptr ? 0 : m->isid;
}

int ProgramImage::FileAt(uint64_t ip) const {
  const Mapping* m = MappingAt(ip);
  return m == nullptr ? -1 : static_cast<int>(m->file);
}

pt_exec_mode ProgramImage::ElfModeAt(uint64_t ip) const {
  const Mapping* m = MappingAt(ip);
  return m != nullptr && files_[m->file].elf32 ? ptem_32bit : ptem_64bit;
}

AddressRange ProgramImage::HoleAround(uint64_t ip) const {
  if (MappingAt(ip) != nullptr) return {ip, ip + 1};
  AddressRange hole{0, std::numeric_limits<uint64_t>::max()};
  for (const Mapping& m : mappings_) {
    if (m.end <= ip) hole.begin = std::max(hole.begin, m.end);
    if (m.begin > ip) hole.end = std::min(hole.end, m.begin);
  }
  return hole;
}

int ProgramImage::SymbolAt(uint64_t ip, AddressRange* range) const {
  SortSymbols();
  const Mapping* m = MappingAt(ip);
  AddressRange r = m != nullptr ? AddressRange{m->begin, m->end} : HoleAround(ip);
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), ip,
                             [](uint64_t v, const Symbol& s) { return v < s.begin; });
  int result = -1;
  if (it != symbols_.end()) r.end = std::min(r.end, it->begin);
  if (it != symbols_.begin()) {
    const Symbol& prev = *std::prev(it);
    if (ip < prev.end) {
      result = static_cast<int>(std::prev(it) - symbols_.begin());
      r.begin = std::max(r.begin, prev.begin);
      r.end = std::min(r.end, prev.end);
    } else {
      r.begin = std::max(r.begin, prev.end);
    }
  }
  *range = r;
  return result;
}

void ProgramImage::AddElfSegment(const PlacedSegment& segment) {
  auto less = [](const PlacedSegment& a, const PlacedSegment& b) { return a.begin < b.begin; };
  elf_segments_.insert(std::upper_bound(elf_segments_.begin(), elf_segments_.end(), segment, less),
                       segment);
}

std::optional<uint64_t> ProgramImage::LinkAddress(uint64_t ip) const {
  const int file = FileAt(ip);
  if (file < 0) return std::nullopt;
  auto it = std::upper_bound(elf_segments_.begin(), elf_segments_.end(), ip,
                             [](uint64_t v, const PlacedSegment& s) { return v < s.begin; });
  // The segment of FileAt's file: segments of different files may overlap where their
  // mappings do.
  while (it != elf_segments_.begin()) {
    --it;
    if (ip < it->end && static_cast<int>(it->file) == file) return ip - it->bias;
  }
  return std::nullopt;
}

int ProgramImage::SymbolAt(uint64_t ip) const {
  SortSymbols();
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), ip,
                             [](uint64_t v, const Symbol& s) { return v < s.begin; });
  if (it == symbols_.begin()) return -1;
  --it;
  if (ip >= it->end) return -1;
  return static_cast<int>(it - symbols_.begin());
}

}  // namespace ptkit::decoder
