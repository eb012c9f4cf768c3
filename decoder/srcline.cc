#include "decoder/srcline.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ptkit/elf_file.h"

namespace ptkit::decoder {
namespace {

// One row of a line-number program: where a line's code begins, or (end) where its sequence
// ends. `file` is the program's file index (dwarf_filesrc's).
struct LineRow {
  uint64_t address = 0;
  uint32_t file = 0;
  int32_t line = 0;
  bool end = false;
};

// A little-endian reader of a line-number program's bytes; false once past the end.
class ByteReader {
 public:
  ByteReader(const uint8_t* at, const uint8_t* end) : at_(at), end_(end) {}
  bool ok() const { return ok_; }
  const uint8_t* at() const { return at_; }
  uint64_t Fixed(size_t n) {
    if (static_cast<size_t>(end_ - at_) < n) return Fail();
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{at_[i]} << (8 * i);
    at_ += n;
    return v;
  }
  uint64_t Uleb() {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (at_ == end_) return Fail();
      const uint8_t byte = *at_++;
      if (shift < 64) v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return v;
    }
  }
  int64_t Sleb() {
    uint64_t v = 0;
    unsigned shift = 0;
    for (;; shift += 7) {
      if (at_ == end_) return static_cast<int64_t>(Fail());
      const uint8_t byte = *at_++;
      if (shift < 64) v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) {
        if (shift + 7 < 64 && (byte & 0x40u) != 0) v |= ~uint64_t{0} << (shift + 7);
        return static_cast<int64_t>(v);
      }
    }
  }
  void Skip(uint64_t n) {
    if (static_cast<uint64_t>(end_ - at_) < n) {
      Fail();
      return;
    }
    at_ += n;
  }

 private:
  uint64_t Fail() {
    ok_ = false;
    at_ = end_;
    return 0;
  }
  const uint8_t* at_;
  const uint8_t* end_;
  bool ok_ = true;
};

// The rows of the line-number program at `offset` of .debug_line (DWARF 2-5), in program
// order: what the DWARF line state machine emits, address, file, line and end of sequence
// (its header's file and directory tables are dwarf_getsrcfiles'). libdw's dwarf_getsrclines
// gives the rows of all sequences sorted by address together, so a sequence of code that the
// linker discarded (relocated to a tombstone: ld's 0, lld's -1 or -2), which in a PIE lies
// over the unit's real code, cannot be told from it there (sweep 34b F5). Empty where the
// program does not read.
std::vector<LineRow> ReadLineProgram(std::span<const uint8_t> section, uint64_t offset) {
  std::vector<LineRow> rows;
  if (offset >= section.size()) return rows;
  ByteReader unit(section.data() + offset, section.data() + section.size());
  uint64_t length = unit.Fixed(4);
  size_t offset_size = 4;
  if (length == 0xffffffff) {
    length = unit.Fixed(8);
    offset_size = 8;
  }
  if (!unit.ok() || length > static_cast<uint64_t>(section.data() + section.size() - unit.at())) {
    return rows;
  }
  const uint8_t* end = unit.at() + length;
  ByteReader r(unit.at(), end);
  const uint64_t version = r.Fixed(2);
  if (version < 2 || version > 5) return rows;
  if (version >= 5) r.Skip(2);  // address_size, segment_selector_size
  const uint64_t header_length = r.Fixed(offset_size);
  const uint8_t* program = r.at();
  const uint64_t min_length = r.Fixed(1);
  if (version >= 4) r.Skip(1);  // maximum_operations_per_instruction (VLIW: not here)
  const bool default_is_stmt = r.Fixed(1) != 0;
  (void)default_is_stmt;
  const auto line_base = static_cast<int8_t>(r.Fixed(1));
  const uint64_t line_range = r.Fixed(1);
  const uint64_t opcode_base = r.Fixed(1);
  std::vector<uint8_t> arguments(opcode_base);  // standard_opcode_lengths
  for (uint64_t i = 1; i < opcode_base; ++i) arguments[i] = static_cast<uint8_t>(r.Fixed(1));
  if (!r.ok() || line_range == 0 || opcode_base == 0 ||
      header_length > static_cast<uint64_t>(end - program)) {
    return rows;
  }
  r = ByteReader(program + header_length, end);
  LineRow state{.address = 0, .file = 1, .line = 1, .end = false};
  auto reset = [&state] { state = {.address = 0, .file = 1, .line = 1, .end = false}; };
  while (r.ok() && r.at() < end) {
    const auto op = static_cast<uint8_t>(r.Fixed(1));
    if (op >= opcode_base) {  // a special opcode
      const uint64_t adjusted = op - opcode_base;
      state.address += adjusted / line_range * min_length;
      // (Wrapping, as unsigned: a line number out of range is hostile input, not UB.)
      state.line = static_cast<int32_t>(
          static_cast<uint32_t>(state.line) +
          static_cast<uint32_t>(line_base + static_cast<int32_t>(adjusted % line_range)));
      rows.push_back(state);
      continue;
    }
    switch (op) {
      case 0: {  // extended
        const uint64_t size = r.Uleb();
        if (size == 0 || !r.ok()) break;
        const uint8_t* next = r.at() + std::min<uint64_t>(size, end - r.at());
        const auto sub = static_cast<uint8_t>(r.Fixed(1));
        if (sub == DW_LNE_end_sequence) {
          state.end = true;
          rows.push_back(state);
          reset();
        } else if (sub == DW_LNE_set_address && size - 1 <= 8) {
          state.address = r.Fixed(size - 1);
        }
        r = ByteReader(next, end);
        break;
      }
      case DW_LNS_copy:
        rows.push_back(state);
        break;
      case DW_LNS_advance_pc:
        state.address += r.Uleb() * min_length;
        break;
      case DW_LNS_advance_line:
        state.line = static_cast<int32_t>(static_cast<uint32_t>(state.line) +
                                          static_cast<uint32_t>(r.Sleb()));
        break;
      case DW_LNS_set_file:
        state.file = static_cast<uint32_t>(r.Uleb());
        break;
      case DW_LNS_const_add_pc:
        state.address += (255 - opcode_base) / line_range * min_length;
        break;
      case DW_LNS_fixed_advance_pc:
        state.address += r.Fixed(2);
        break;
      default:  // column, negate_stmt, basic_block, prologue_end, epilogue_begin, isa, others
        for (uint8_t i = 0; i < arguments[op]; ++i) r.Uleb();
        break;
    }
  }
  return rows;
}

// An address range of a compilation unit (its DIE's offset).
struct UnitRange {
  Dwarf_Addr begin = 0;
  Dwarf_Addr end = 0;
  Dwarf_Off die = 0;
};

// One ELF file's DWARF, opened once; dbg is null when it has none.
struct DwarfFile {
  ~DwarfFile() {
    if (dbg != nullptr) dwarf_end(dbg);  // before the ElfFile it reads
  }
  // The compilation unit whose code holds `address`: .debug_aranges' answer (dwarf_addrdie),
  // else the units' own ranges. Files built by clang have no .debug_aranges unless asked
  // (-gdwarf-aranges), and elfutils 0.188's dwarf_addrdie reads only that section.
  bool UnitAt(Dwarf_Addr address, Dwarf_Die& cu) {
    if (dwarf_addrdie(dbg, address, &cu) != nullptr) return true;
    if (!ranges_read) ReadUnitRanges();
    auto it = std::upper_bound(ranges.begin(), ranges.end(), address,
                               [](Dwarf_Addr a, const UnitRange& r) { return a < r.begin; });
    if (it == ranges.begin() || address >= (--it)->end) return false;
    return dwarf_offdie(dbg, it->die, &cu) != nullptr;
  }

  // The line of `address` in unit `cu`'s line table: the last row at or before it of the
  // sequence that holds it, as dwarf_getsrc_die answers but without the sequences whose first
  // address is in no executable section (code the linker discarded; gdb and llvm-addr2line
  // leave them out too). Null where no sequence holds it.
  // std::nullopt where the unit's line program could not be read here (then libdw's answer
  // stands: dwarf_getsrc_die).
  std::optional<const LineRow*> LineAt(Dwarf_Die& cu, Dwarf_Addr address) {
    Dwarf_Attribute attr;
    Dwarf_Word offset = 0;
    if (dwarf_formudata(dwarf_attr(&cu, DW_AT_stmt_list, &attr), &offset) != 0) {
      return std::nullopt;
    }
    auto [it, added] = tables.try_emplace(offset);
    if (added) it->second = LiveRows(offset);
    if (!it->second) return std::nullopt;
    const std::vector<LineRow>& table = *it->second;
    auto after = std::upper_bound(table.begin(), table.end(), address,
                                  [](Dwarf_Addr a, const LineRow& row) { return a < row.address; });
    if (after == table.begin() || std::prev(after)->end) return nullptr;
    return &*std::prev(after);
  }

  std::optional<ElfFile> elf;
  Dwarf* dbg = nullptr;

 private:
  // The rows of the line-number program at `offset`, without the discarded sequences, by
  // address (stably: of one address, the last row in program order is the one libdw gives).
  std::optional<std::vector<LineRow>> LiveRows(uint64_t offset) {
    if (!debug_line_read) {
      debug_line_read = true;
      debug_line = DebugLine();
      for (const ElfSection& section : elf->Sections()) {
        if ((section.flags & SHF_EXECINSTR) != 0 && section.size != 0) {
          code.emplace_back(section.addr, section.addr + section.size);
        }
      }
    }
    const std::vector<LineRow> rows = ReadLineProgram(debug_line, offset);
    if (rows.empty()) return std::nullopt;
    std::vector<LineRow> live;
    for (size_t start = 0; start < rows.size();) {
      size_t end = start;
      while (end < rows.size() && !rows[end].end) ++end;
      if (end == rows.size()) break;  // (a sequence without its end: not one)
      const uint64_t first = rows[start].address;
      if (std::any_of(code.begin(), code.end(),
                      [first](const auto& c) { return first >= c.first && first < c.second; })) {
        live.insert(live.end(), rows.begin() + static_cast<ptrdiff_t>(start),
                    rows.begin() + static_cast<ptrdiff_t>(end) + 1);
      }
      start = end + 1;
    }
    // (At one address a sequence's end before the next one's rows, as libdw sorts them.)
    std::stable_sort(live.begin(), live.end(), [](const LineRow& a, const LineRow& b) {
      return a.address != b.address ? a.address < b.address : a.end && !b.end;
    });
    return live;
  }

  // .debug_line's bytes as libdw reads them (dwarf_begin_elf inflated a compressed one).
  std::span<const uint8_t> DebugLine() const {
    Elf* e = dwarf_getelf(dbg);
    size_t strings = 0;
    if (e == nullptr || elf_getshdrstrndx(e, &strings) != 0) return {};
    for (Elf_Scn* scn = elf_nextscn(e, nullptr); scn != nullptr; scn = elf_nextscn(e, scn)) {
      GElf_Shdr shdr;
      const char* name =
          gelf_getshdr(scn, &shdr) == nullptr ? nullptr : elf_strptr(e, strings, shdr.sh_name);
      // (.zdebug_line: GNU's compressed section, which libdw inflated under that name.)
      if (name == nullptr ||
          (std::string_view(name) != ".debug_line" && std::string_view(name) != ".zdebug_line")) {
        continue;
      }
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || data->d_buf == nullptr) return {};
      return {static_cast<const uint8_t*>(data->d_buf), data->d_size};
    }
    return {};
  }

  bool debug_line_read = false;
  std::span<const uint8_t> debug_line;
  std::vector<std::pair<uint64_t, uint64_t>> code;  // the executable sections' addresses
  // By .debug_line offset; nullopt: not read here.
  absl::flat_hash_map<uint64_t, std::optional<std::vector<LineRow>>> tables;
  // DW_AT_low_pc/high_pc or DW_AT_ranges of every unit, by address.
  void ReadUnitRanges() {
    ranges_read = true;
    Dwarf_Off offset = 0, next = 0;
    size_t header_size = 0;
    while (dwarf_nextcu(dbg, offset, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
      Dwarf_Die die;
      if (dwarf_offdie(dbg, offset + header_size, &die) != nullptr) {
        Dwarf_Addr base = 0, begin = 0, end = 0;
        for (ptrdiff_t at = 0; (at = dwarf_ranges(&die, at, &base, &begin, &end)) > 0;) {
          if (begin < end) ranges.push_back({begin, end, dwarf_dieoffset(&die)});
        }
      }
      offset = next;
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const UnitRange& a, const UnitRange& b) { return a.begin < b.begin; });
  }

  bool ranges_read = false;
  std::vector<UnitRange> ranges;
};

// Whether `elf` has a DWARF section compressed with zstd (ELFCOMPRESS_ZSTD), which libdw 0.188
// cannot read (it inflates zlib).
bool ZstdDwarf(const ElfFile& elf) {
  constexpr uint32_t kElfCompressZstd = 2;  // (elf.h of glibc 2.36 lacks ELFCOMPRESS_ZSTD)
  Elf* e = elf.elf();
  size_t strings = 0;
  if (e == nullptr || elf_getshdrstrndx(e, &strings) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(e, nullptr); scn != nullptr; scn = elf_nextscn(e, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || (shdr.sh_flags & SHF_COMPRESSED) == 0) continue;
    const char* name = elf_strptr(e, strings, shdr.sh_name);
    GElf_Chdr chdr;
    if (name != nullptr && std::string_view(name).starts_with(".debug_") &&
        gelf_getchdr(scn, &chdr) != nullptr && chdr.ch_type == kElfCompressZstd) {
      return true;
    }
  }
  return false;
}

// Whether any compilation unit of `dbg` has a line table with lines.
bool HasLines(Dwarf* dbg) {
  Dwarf_Off offset = 0, next = 0;
  size_t header_size = 0;
  while (dwarf_nextcu(dbg, offset, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    Dwarf_Lines* lines = nullptr;
    size_t count = 0;
    if (dwarf_offdie(dbg, offset + header_size, &cu) != nullptr &&
        dwarf_getsrclines(&cu, &lines, &count) == 0 && count > 0) {
      return true;
    }
    offset = next;
  }
  return false;
}

}  // namespace

struct SourceLines::State {
  // `path`: where to read it; `name`: what to call it (a written-out archived file's path is
  // /proc/self/fd/N).
  DwarfFile* Open(const std::string& path, const ProgramImage& image, const std::string& name) {
    auto [it, inserted] = files.try_emplace(path, nullptr);
    if (inserted) {
      it->second = std::make_unique<DwarfFile>();
      DwarfFile& f = *it->second;
      auto drop_without_lines = [&f] {
        if (f.dbg != nullptr && !HasLines(f.dbg)) {
          dwarf_end(f.dbg);
          f.dbg = nullptr;
        }
      };
      absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
      bool compressed = false;  // its (or its debug file's) DWARF sections are zstd-compressed
      if (elf.ok()) {
        f.elf = std::move(*elf);
        compressed = ZstdDwarf(*f.elf);
        f.dbg = dwarf_begin_elf(f.elf->elf(), DWARF_C_READ, nullptr);
        drop_without_lines();
        // Stripped: the line tables are in its separate debug file, if there is one.
        if (f.dbg == nullptr) OpenDebugFile(f, image);
        compressed = compressed || ZstdDwarf(*f.elf);  // (the debug file's, if opened)
        drop_without_lines();
      }
      if (f.dbg == nullptr) {
        without_lines.push_back(name);
        if (diagnostics != nullptr && compressed) {
          // (libdw inflates zlib; elfutils 0.188 cannot read zstd: sweep 33a F3, the warning
          // said the file had no line information where addr2line and gdb read it.)
          std::fprintf(diagnostics,
                       "ptdecode: warning: --srcline: %s: its DWARF sections are compressed in a "
                       "way this ptdecode's libdw cannot read (zstd: ld or objcopy "
                       "--compress-debug-sections=zstd), so no file:line for its code; "
                       "objcopy --decompress-debug-sections (or =zlib) makes it readable\n",
                       name.c_str());
        } else if (diagnostics != nullptr) {
          std::fprintf(diagnostics,
                       "ptdecode: warning: --srcline: %s has no DWARF line information (no "
                       "file:line for its code)\n",
                       name.c_str());
        }
      }
    }
    return it->second.get();
  }

  // A stripped file's DWARF is in its separate debug file (ProgramImage::DebugFileOf: an
  // archived one too), when there is one.
  static void OpenDebugFile(DwarfFile& f, const ProgramImage& image) {
    const std::string debug_path = image.DebugFileOf(*f.elf);
    if (debug_path.empty()) return;
    absl::StatusOr<ElfFile> debug = ElfFile::Open(debug_path);
    if (!debug.ok()) return;
    f.elf = std::move(*debug);
    f.dbg = dwarf_begin_elf(f.elf->elf(), DWARF_C_READ, nullptr);
  }

  // The DWARF file, link-time address and compilation unit of the code at `ip`; null where
  // there is none.
  DwarfFile* UnitOf(const ProgramImage& image, uint64_t ip, Dwarf_Addr& address, Dwarf_Die& cu) {
    const int file_index = image.FileAt(ip);
    if (file_index < 0) return nullptr;
    const ImageFile& f = image.files()[file_index];
    DwarfFile* file = Open(f.path.empty() ? f.name : f.path, image, f.name);
    if (file->dbg == nullptr) return nullptr;
    const std::optional<uint64_t> link = image.LinkAddress(ip);
    if (!link.has_value() || !file->UnitAt(*link, cu)) return nullptr;
    address = *link;
    return file;
  }

  // As addr2line prints a source file: a relative name joined to the unit's compilation
  // directory (a name relative to where it was built means nothing where it is decoded; sweep
  // 28a F3: "src/inl.c"), a relative one too (sweep 34b F7: glibc's libm units, built in
  // ./math, named ../sysdeps/x86_64/fpu/multiarch/ifunc-fma4.h, a path outside the source
  // tree), unless the name holds it already (libdw joins it in DWARF 4 units; sweep 38a F7:
  // "././a.cc" where addr2line prints "./a.cc").
  static std::string Joined(Dwarf_Die& cu, const char* source) {
    std::string path = source;
    if (!path.empty() && path[0] != '/') {
      Dwarf_Attribute attr;
      const char* dir = dwarf_formstring(dwarf_attr(&cu, DW_AT_comp_dir, &attr));
      if (dir != nullptr && dir[0] != '\0') {
        const std::string prefix =
            absl::StrCat(dir, std::string_view(dir).ends_with('/') ? "" : "/");
        if (!path.starts_with(prefix)) path = prefix + path;
      }
    }
    return path;
  }

  int32_t Text(const std::string& text) {
    auto [tit, added] = text_index.try_emplace(text, 0);
    if (added) {
      tit->second = static_cast<int32_t>(texts.size());
      texts.push_back(tit->first);
    }
    return tit->second;
  }

  // The file of the function the code at `ip` belongs to: the outermost subprogram there (not
  // a function inlined into it), its DW_AT_decl_file (through its abstract origin or
  // specification), else its unit's name.
  int32_t ResolveFunction(const ProgramImage& image, uint64_t ip) {
    Dwarf_Addr address = 0;
    Dwarf_Die cu;
    if (UnitOf(image, ip, address, cu) == nullptr) return -1;
    const char* source = nullptr;
    Dwarf_Die* scopes = nullptr;
    const int n = dwarf_getscopes(&cu, address, &scopes);
    for (int i = n - 1; i >= 0 && source == nullptr; --i) {
      if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) source = dwarf_decl_file(&scopes[i]);
    }
    std::free(scopes);
    if (source == nullptr) source = dwarf_diename(&cu);
    if (source == nullptr) return -1;
    return Text(Joined(cu, source));
  }

  int32_t Resolve(const ProgramImage& image, uint64_t ip) {
    Dwarf_Addr address = 0;
    Dwarf_Die cu;
    DwarfFile* file = UnitOf(image, ip, address, cu);
    if (file == nullptr) return -1;
    const char* source = nullptr;
    int lineno = 0;
    if (const std::optional<const LineRow*> ours = file->LineAt(cu, address)) {
      const LineRow* line = *ours;
      Dwarf_Files* files = nullptr;
      size_t count = 0;
      if (line != nullptr && dwarf_getsrcfiles(&cu, &files, &count) == 0 && line->file < count) {
        source = dwarf_filesrc(files, line->file, nullptr, nullptr);
        lineno = line->line;
      }
    } else if (Dwarf_Line* line = dwarf_getsrc_die(&cu, address); line != nullptr) {
      source = dwarf_linesrc(line, nullptr, nullptr);
      if (dwarf_lineno(line, &lineno) != 0) lineno = 0;
    }
    // Line 0: code of no source line (compiler-made), as addr2line's "?" (sweep 28a F3:
    // "stdlib.h:0" was printed).
    if (source == nullptr || lineno == 0) return -1;
    return Text(fmt::format("{}:{}", Joined(cu, source), lineno));
  }

  std::FILE* diagnostics = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<DwarfFile>> files;
  absl::flat_hash_map<std::pair<const ProgramImage*, uint64_t>, int32_t> cache;
  absl::flat_hash_map<std::pair<const ProgramImage*, uint64_t>, int32_t> function_cache;
  absl::flat_hash_map<std::string, int32_t> text_index;
  std::deque<std::string> texts;  // stable addresses
  std::vector<std::string> without_lines;
};

SourceLines::SourceLines(std::FILE* diagnostics) : state_(std::make_unique<State>()) {
  state_->diagnostics = diagnostics;
}

SourceLines::~SourceLines() = default;

const std::string* SourceLines::Lookup(const ProgramImage& image, uint64_t ip) {
  auto [it, inserted] = state_->cache.try_emplace({&image, ip}, -1);
  if (inserted) it->second = state_->Resolve(image, ip);
  return it->second < 0 ? nullptr : &state_->texts[it->second];
}

const std::string* SourceLines::FunctionSource(const ProgramImage& image, uint64_t ip) {
  auto [it, inserted] = state_->function_cache.try_emplace({&image, ip}, -1);
  if (inserted) it->second = state_->ResolveFunction(image, ip);
  return it->second < 0 ? nullptr : &state_->texts[it->second];
}

const std::vector<std::string>& SourceLines::files_without_lines() const {
  return state_->without_lines;
}

}  // namespace ptkit::decoder
