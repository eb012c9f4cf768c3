#include "decoder/srcline.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ptkit/elf_file.h"

namespace ptkit::decoder {
namespace {

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

  std::optional<ElfFile> elf;
  Dwarf* dbg = nullptr;

 private:
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
  DwarfFile* Open(const std::string& path, const std::string& sysroot, const std::string& name) {
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
        if (f.dbg == nullptr) OpenDebugFile(f, sysroot);
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

  // A stripped file's DWARF is in its separate debug file (FindDebugFile), when there is one.
  static void OpenDebugFile(DwarfFile& f, const std::string& sysroot) {
    const std::string debug_path = f.elf->FindDebugFile(sysroot);
    if (debug_path.empty()) return;
    absl::StatusOr<ElfFile> debug = ElfFile::Open(debug_path);
    if (!debug.ok()) return;
    f.elf = std::move(*debug);
    f.dbg = dwarf_begin_elf(f.elf->elf(), DWARF_C_READ, nullptr);
  }

  int32_t Resolve(const ProgramImage& image, uint64_t ip) {
    const int file_index = image.FileAt(ip);
    if (file_index < 0) return -1;
    const ImageFile& f = image.files()[file_index];
    DwarfFile* file = Open(f.path.empty() ? f.name : f.path, image.sysroot(), f.name);
    if (file->dbg == nullptr) return -1;
    const std::optional<uint64_t> address = image.LinkAddress(ip);
    if (!address.has_value()) return -1;
    Dwarf_Die cu;
    if (!file->UnitAt(*address, cu)) return -1;
    Dwarf_Line* line = dwarf_getsrc_die(&cu, *address);
    int lineno = 0;
    const char* source = line == nullptr ? nullptr : dwarf_linesrc(line, nullptr, nullptr);
    // Line 0: code of no source line (compiler-made), as addr2line's "?" (sweep 28a F3:
    // "stdlib.h:0" was printed).
    if (source == nullptr || dwarf_lineno(line, &lineno) != 0 || lineno == 0) return -1;
    // As addr2line prints it: a relative name joined to the unit's compilation directory (a
    // name relative to where it was built means nothing where it is decoded; sweep 28a F3:
    // "src/inl.c"), a relative one too (sweep 34b F7: glibc's libm units, built in ./math,
    // named ../sysdeps/x86_64/fpu/multiarch/ifunc-fma4.h, a path outside the source tree).
    std::string path = source;
    if (!path.empty() && path[0] != '/') {
      Dwarf_Attribute attr;
      const char* dir = dwarf_formstring(dwarf_attr(&cu, DW_AT_comp_dir, &attr));
      if (dir != nullptr && dir[0] != '\0') {
        path = absl::StrCat(dir, std::string_view(dir).ends_with('/') ? "" : "/", path);
      }
    }
    auto [tit, added] = text_index.try_emplace(fmt::format("{}:{}", path, lineno), 0);
    if (added) {
      tit->second = static_cast<int32_t>(texts.size());
      texts.push_back(tit->first);
    }
    return tit->second;
  }

  std::FILE* diagnostics = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<DwarfFile>> files;
  absl::flat_hash_map<std::pair<const ProgramImage*, uint64_t>, int32_t> cache;
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

const std::vector<std::string>& SourceLines::files_without_lines() const {
  return state_->without_lines;
}

}  // namespace ptkit::decoder
