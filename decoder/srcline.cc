#include "decoder/srcline.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"

namespace ptkit::decoder {
namespace {

// One ELF file's DWARF, opened once; dbg is null when it has none.
struct DwarfFile {
  ~DwarfFile() {
    if (dbg != nullptr) dwarf_end(dbg);
    if (fd >= 0) close(fd);
  }
  int fd = -1;
  Dwarf* dbg = nullptr;
  bool have_entries = false;
  absl::flat_hash_set<uint64_t> entries;  // link-time entry addresses of its functions
};

int AddEntry(Dwarf_Die* func, void* arg) {
  Dwarf_Addr low = 0;
  if (dwarf_lowpc(func, &low) == 0 && low != 0) static_cast<DwarfFile*>(arg)->entries.insert(low);
  return DWARF_CB_OK;
}

// The entry addresses of every function the DWARF describes (DW_TAG_subprogram with a low_pc).
void LoadEntries(DwarfFile& file) {
  file.have_entries = true;
  Dwarf_Off offset = 0, next = 0;
  size_t header_size = 0;
  while (dwarf_nextcu(file.dbg, offset, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(file.dbg, offset + header_size, &cu) != nullptr) {
      dwarf_getfuncs(&cu, AddEntry, &file, 0);
    }
    offset = next;
  }
}

}  // namespace

struct SourceLines::State {
  // Where file `file` of an image lies: its DWARF and the bias from link-time addresses.
  struct Placement {
    DwarfFile* file = nullptr;
    bool known = false;
    uint64_t bias = 0;
  };

  DwarfFile* Open(const std::string& path, const std::string& sysroot) {
    auto [it, inserted] = files.try_emplace(path, nullptr);
    if (inserted) {
      it->second = std::make_unique<DwarfFile>();
      DwarfFile& f = *it->second;
      f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (f.fd >= 0) f.dbg = dwarf_begin(f.fd, DWARF_C_READ);
      if (f.fd >= 0 && f.dbg == nullptr) OpenDebugFile(f, path, sysroot);
      if (f.dbg == nullptr) {
        without_lines.push_back(path);
        if (diagnostics != nullptr) {
          std::fprintf(diagnostics,
                       "ptdecode: warning: --srcline: %s has no DWARF line information (no "
                       "file:line for its code)\n",
                       path.c_str());
        }
      }
    }
    return it->second.get();
  }

  // A stripped file's DWARF is in its separate debug file (FindDebugFile), when there is one.
  static void OpenDebugFile(DwarfFile& f, const std::string& path, const std::string& sysroot) {
    if (elf_version(EV_CURRENT) == EV_NONE) return;
    Elf* elf = elf_begin(f.fd, ELF_C_READ, nullptr);
    if (elf == nullptr) return;
    const std::string debug_path = FindDebugFile(elf, path, sysroot);
    elf_end(elf);
    if (debug_path.empty()) return;
    const int fd = open(debug_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    close(f.fd);
    f.fd = fd;
    f.dbg = dwarf_begin(f.fd, DWARF_C_READ);
  }

  // The bias is the one that puts the most of the image's symbols of this file on function
  // entries the DWARF knows; on a tie, the smallest.
  Placement Place(const ProgramImage& image, int file_index) {
    Placement p;
    p.file = Open(image.files()[file_index].name, image.sysroot());
    if (p.file->dbg == nullptr) return p;
    if (!p.file->have_entries) LoadEntries(*p.file);
    std::vector<uint64_t> samples;
    for (const Symbol& s : image.symbols()) {
      if (static_cast<int>(s.image) == file_index) samples.push_back(s.begin);
    }
    if (samples.empty() || p.file->entries.empty()) return p;
    constexpr size_t kSamples = 16;
    if (samples.size() > kSamples) {
      std::vector<uint64_t> spread;
      for (size_t i = 0; i < kSamples; ++i)
        spread.push_back(samples[i * samples.size() / kSamples]);
      samples = std::move(spread);
    }
    size_t best_score = 0;
    for (uint64_t entry : p.file->entries) {
      const uint64_t bias = samples[0] - entry;
      size_t score = 0;
      for (uint64_t s : samples) score += p.file->entries.contains(s - bias) ? 1 : 0;
      const auto magnitude = [](uint64_t b) { return std::min(b, 0 - b); };
      if (score > best_score || (score == best_score && magnitude(bias) < magnitude(p.bias))) {
        best_score = score;
        p.bias = bias;
        p.known = true;
      }
    }
    return p;
  }

  int32_t Resolve(const ProgramImage& image, uint64_t ip) {
    const int file_index = image.FileAt(ip);
    if (file_index < 0) return -1;
    auto [pit, inserted] = placements.try_emplace({&image, file_index});
    if (inserted) pit->second = Place(image, file_index);
    const Placement& p = pit->second;
    if (!p.known) return -1;
    const uint64_t address = ip - p.bias;
    Dwarf_Die cu;
    if (dwarf_addrdie(p.file->dbg, address, &cu) == nullptr) return -1;
    Dwarf_Line* line = dwarf_getsrc_die(&cu, address);
    int lineno = 0;
    const char* source = line == nullptr ? nullptr : dwarf_linesrc(line, nullptr, nullptr);
    if (source == nullptr || dwarf_lineno(line, &lineno) != 0) return -1;
    auto [tit, added] = text_index.try_emplace(fmt::format("{}:{}", source, lineno), 0);
    if (added) {
      tit->second = static_cast<int32_t>(texts.size());
      texts.push_back(tit->first);
    }
    return tit->second;
  }

  std::FILE* diagnostics = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<DwarfFile>> files;
  absl::flat_hash_map<std::pair<const ProgramImage*, int>, Placement> placements;
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
