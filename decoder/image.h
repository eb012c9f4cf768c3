// ProgramImage: the memory a trace ran in, for libipt and for ptkit's sinks.
//
// Sources, as in ptxed: ELF files (PT_LOAD segments with p_filesz > 0, through libipt's section
// cache so each file is read once), raw files placed at an address, and page dumps (a .addr
// list of page addresses plus a .dump of 4 KiB pages, served through pt_image_set_callback).
// Symbols come from the ELF files' .symtab and .dynsym, C++ names demangled; for a file
// without .symtab, also from the .symtab of its separate debug file (FindDebugFile). PLT
// entries are named "X@plt" as objdump and gdb name them (from the PLT sections and the
// dynamic relocations).
#ifndef PTKIT_DECODER_IMAGE_H_
#define PTKIT_DECODER_IMAGE_H_

#include <intel-pt.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decoder/ipt_handles.h"
#include "ptkit/elf_file.h"

namespace ptkit::decoder {

// "FILE[:BASE]": BASE is where the lowest PT_LOAD segment goes; 0 = the ELF's own addresses.
struct ElfSpec {
  std::string path;
  uint64_t base = 0;
};
// "FILE[:FROM[-TO]]:ADDRESS": file bytes [FROM, TO) (default: all) mapped at ADDRESS.
struct RawSpec {
  std::string path;
  uint64_t from = 0;
  uint64_t to = 0;  // 0 = end of file
  uint64_t address = 0;
};
// "ADDR_FILE,DUMP_FILE" or "DIR" (DIR/data.addr + DIR/data.dump).
struct PageDumpSpec {
  std::string addr_path;
  std::string dump_path;
};

// Errors: kInvalidArgument naming the text and the expected syntax.
absl::StatusOr<ElfSpec> ParseElfSpec(std::string_view text);
absl::StatusOr<RawSpec> ParseRawSpec(std::string_view text);
PageDumpSpec ParsePageDumpSpec(std::string_view text);

struct Symbol {
  uint64_t begin = 0;
  uint64_t end = 0;    // exclusive: begin + size, or for size 0 the end of its section; never
                       // past the next symbol
  std::string name;    // demangled
  uint32_t image = 0;  // index into ProgramImage::files()
  uint32_t rank = 0;   // among symbols of one start, the lowest is kept (see SortSymbols)
  // False for a label inside a function (STT_NOTYPE, size 0, within a sized function's range:
  // `.globl probe_recover` in inline asm): it names the code after it, as perf names it, but
  // flow that reaches it from that function enters no function there (no call counted, no
  // signal handler's entry). `within`, `within_size`: that function's range, as the bytes from
  // its start to the label and its size (0, 0 for an entry).
  bool entry = true;
  uint32_t within = 0, within_size = 0;
};

// The rank (Symbol::rank) of a name among the names of one address, as perf 6.1's
// choose_best_symbol() orders them: one with a size before one without, a function before a
// label (perf since 6.14), not weak before weak, global before local, then the fewest leading
// underscores, then the longest name (memmove, not memcpy; strchr, not index). But first a name
// without a symbol version before one with (glibc's free, where perf 6.1 shows its compatibility
// alias cfree@GLIBC_2.2.5), and a function before an IFUNC symbol: the IFUNC's address is its
// resolver's, which objdump and gdb name by the resolver's own symbol (resolve_add, libc's
// strlen_ifunc), not by the IFUNC (perf 6.1 shows the IFUNC's name: a call to `add` that is the
// resolver's one run at relocation; sweep 36b L1).
uint32_t AliasRank(std::string_view name, bool sized, bool label, bool ifunc, bool weak,
                   bool global);
// The rank of a name that every other name of its address replaces (X@plt, made by ptkit).
inline constexpr uint32_t kLastRank = 0xffffffff;

// A source added to the image.
struct ImageFile {
  std::string name;    // the path as given (AddFileMapping: the name given)
  std::string kind;    // "elf", "raw" or "pages"
  uint64_t bytes = 0;  // mapped bytes
  std::string path;    // where its bytes and DWARF were read, when not `name`
  bool elf32 = false;  // an ELFCLASS32 file (i386 code)
  // A separate debug file of another build, left aside (ElfFile::FindDebugFile's `refused`).
  std::string refused_debug;
};

struct AddressRange {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive
};

struct FastDecoderGraphs;  // decoder/fast_block_decoder.cc

class ProgramImage {
 public:
  // A libipt section cache that images share (as ptxed's), so a file mapped by many processes
  // is read once. Errors: kResourceExhausted.
  static absl::StatusOr<std::shared_ptr<pt_image_section_cache>> CreateSectionCache();
  // An image whose ELF and raw files go into `iscache` (null: a cache of its own).
  // Errors: kResourceExhausted when libipt cannot allocate its image or section cache.
  static absl::StatusOr<std::unique_ptr<ProgramImage>> Create(
      std::shared_ptr<pt_image_section_cache> iscache = nullptr);
  // Where separate debug files are looked for: SYSROOT/usr/lib/debug (default: "").
  void set_sysroot(std::string sysroot) { sysroot_ = std::move(sysroot); }
  // perf's build-id cache, where separate debug files are also looked for (ptdecode
  // --buildid-dir; ElfFile::FindDebugFile).
  void set_buildid_dir(std::string dir) { buildid_dir_ = std::move(dir); }
  const std::string& buildid_dir() const { return buildid_dir_; }
  // The symbol tables of the ELF files mapped (by path, read once), which the images of one
  // recording's processes share, all with one sysroot (a file mapped by many processes, e.g.
  // cc1 by each compile of a build, is read and kept once: sweep 31b F1). Each image has one
  // of its own until given a shared one, before its first mapping.
  struct LinkSymbolCache;
  static std::shared_ptr<LinkSymbolCache> NewLinkSymbolCache();
  void set_link_symbol_cache(std::shared_ptr<LinkSymbolCache> cache) {
    link_symbols_ = std::move(cache);
  }
  const std::shared_ptr<LinkSymbolCache>& link_symbol_cache() const { return link_symbols_; }
  // The ELF files' symbol tables read so far, by every image of the process (tests).
  static uint64_t LinkSymbolTablesRead();
  const std::string& sysroot() const { return sysroot_; }
  ~ProgramImage();
  ProgramImage(const ProgramImage&) = delete;
  ProgramImage& operator=(const ProgramImage&) = delete;

  // Adds the loadable segments and function symbols of an ELF file. Errors: kNotFound /
  // kPermissionDenied (open), kInvalidArgument (not an ELF file, no loadable segment), each
  // naming the file.
  absl::Status AddElf(const ElfSpec& spec);
  // Adds a file range at an address. Errors: open/stat failures and an empty or out-of-file
  // range, naming the file.
  absl::Status AddRaw(const RawSpec& spec);
  // Adds a file mapping as the kernel makes it (perf MMAP2): file bytes [pgoff, pgoff + len)
  // at `start`; symbols of an ELF file are relocated to where its segments landed.
  // Errors: the file cannot be opened or is shorter than pgoff, naming the file. `name`: what
  // the file is called (ImageFile::name) when not `path` (the recorded build of a file found
  // in a build-id cache is named by the path it ran from).
  absl::Status AddFileMapping(const std::string& path, uint64_t start, uint64_t len, uint64_t pgoff,
                              const std::string& name = "");
  // Adds bytes captured at record time (e.g. the vdso); they are copied. An ELF image's
  // symbols (the vdso's) are loaded too.
  void AddBytes(const std::string& name, uint64_t address, std::span<const uint8_t> bytes);
  // As AddBytes, without a copy: `bytes` stay valid while `owner` lives, and the image holds
  // it. libelf may write into them (an ELF image's symbols are read in place).
  void AddBytes(const std::string& name, uint64_t address, std::span<uint8_t> bytes,
                std::shared_ptr<void> owner);
  // Bytes of the file `path` archived at record time (ptrecord --archive: its file range
  // [pgoff, pgoff + size) mapped at `address`), as AddBytes; with `symbols`, that file found
  // on this machine (the caller checks its build-id), or the recording's copy of it written
  // out, its symbols are placed and its ELF addresses known as for AddFileMapping. With
  // `debug`, the separate debug file of `symbols` (the recording's, written out): DebugFileOf
  // gives it for `symbols` from then on.
  void AddArchivedBytes(const std::string& path, uint64_t address, std::span<uint8_t> bytes,
                        std::shared_ptr<void> owner, uint64_t pgoff, const std::string& symbols,
                        const std::string& debug = "");
  // The separate debug file of `elf` (a file of this image: its .symtab and DWARF where it is
  // stripped), the one place symbols and --srcline look it up: the one AddArchivedBytes was
  // given for its path (the recording's: it is the same build, so a decode of an archived
  // recording names the same everywhere, as perf reads its build-id cache before
  // /usr/lib/debug), else ElfFile::FindDebugFile's under the sysroot and in the build-id
  // cache; "" when there is none. `refused` as FindDebugFile's.
  std::string DebugFileOf(const ElfFile& elf, std::string* refused = nullptr) const;
  // Adds function symbols of code already in the image (the kernel's, from kallsyms): each
  // symbol's `image` becomes the file mapping its start (a symbol outside every mapping is
  // dropped); an `end` of 0 runs to the next symbol, at most to the end of the mapped code.
  void AddSymbols(std::span<const Symbol> symbols);
  // Records that [start, end) held `path`, which could not be loaded: gaps there name it.
  void AddMissing(const std::string& path, uint64_t start, uint64_t end);
  // The missing file recorded for `ip`, or null.
  const std::string* MissingAt(uint64_t ip) const;
  // Adds a page dump (format in man/ptdecode.1). Errors: unreadable files, a .addr size that
  // is not a multiple of 8, a .dump shorter than the .addr list says.
  absl::Status AddPageDump(const PageDumpSpec& spec);

  // The libipt image; valid while this object lives.
  pt_image* image() const { return image_.get(); }

  // Copies up to `size` bytes of code at `ip` into `out`; returns how many (0: unmapped).
  size_t Read(uint64_t ip, uint8_t* out, size_t size) const;
  // Index into files() of the source mapping `ip`, or -1.
  int FileAt(uint64_t ip) const;
  // The mode of the code at `ip` by its file's ELF class, for traces that do not say it (BTS):
  // ptem_32bit in an ELFCLASS32 file (i386), else ptem_64bit.
  pt_exec_mode ElfModeAt(uint64_t ip) const;
  // The libipt section id of the code at `ip` as the image's decoders see it (pt_insn.isid):
  // > 0 for a file section in the cache, 0 for bytes served by the read callback (page dumps,
  // captured bytes), -1 when `ip` is unmapped. `range`, if given, is set to the mapping's
  // addresses.
  int SectionAt(uint64_t ip, AddressRange* range = nullptr) const;
  // The libipt section cache the image's file sections are in.
  const std::shared_ptr<pt_image_section_cache>& section_cache() const { return iscache_; }
  // What FastBlockDecoder keeps of the image's code across its decoders (the code decoded
  // and its blocks: made once per image, not once per decoder, e.g. per -j chunk); made by the
  // first decoder that wants it, dropped when a mapping is added. Used from one thread at a
  // time, as libipt's decoders use the image.
  std::shared_ptr<FastDecoderGraphs>& fast_decoder_graphs() const { return fast_decoder_graphs_; }
  // The unmapped range around `ip` (bounded by the neighbouring mappings); {ip, ip+1} when
  // `ip` is mapped.
  AddressRange HoleAround(uint64_t ip) const;

  const std::vector<ImageFile>& files() const { return files_; }
  // The first of files() with the name of `file`: the same file mapped, archived or captured in
  // pieces (JIT code, a block at a time) is one file to name its code by.
  uint32_t FirstOfName(uint32_t file) const {
    while (first_of_name_.size() < files_.size()) {
      const auto i = static_cast<uint32_t>(first_of_name_.size());
      first_of_name_.push_back(index_of_name_.try_emplace(files_[i].name, i).first->second);
    }
    return first_of_name_[file];
  }
  // Where a mapping replaced part of an earlier mapping of another source (the code there is
  // the later one's, for every decoder: AddMapping), in the order added; sources of one file
  // name (the same file mapped again) are listed too.
  struct Overlap {
    uint64_t begin = 0, end = 0;
    uint32_t replaced = 0, by = 0;  // indexes into files()
  };
  const std::vector<Overlap>& overlaps() const { return overlaps_; }
  // Function symbols sorted by address, without overlaps of equal start. Like SymbolAt, the
  // first call after symbols were added sorts them (once for all the files added, not once per
  // file), so an image must not be read from two threads while it is being built. Each file's
  // symbols are read once however often it is mapped: M mappings of a file of S symbols cost
  // O(S log S + M log S + N log N) for the N = O(M S) symbols placed.
  const std::vector<Symbol>& symbols() const {
    SortSymbols();
    return symbols_;
  }
  // Index into symbols() of the symbol containing `ip`, or -1.
  int SymbolAt(uint64_t ip) const;
  // As SymbolAt, and sets `range` to the addresses around `ip` with the same answer and the
  // same FileAt (for callers that cache lookups).
  int SymbolAt(uint64_t ip, AddressRange* range) const;
  // The link-time address of `ip` (as the file's symbol tables and DWARF give it) when `ip`
  // lies in a loadable segment of the ELF file FileAt(ip), added with AddElf or
  // AddFileMapping; nullopt otherwise (raw files, page dumps, captured bytes, unmapped).
  std::optional<uint64_t> LinkAddress(uint64_t ip) const;
  // Whether `ip` is the entry point (e_entry) of an ELF file placed in the image: where a
  // program's loader starts it, on the process's initial stack.
  bool IsEntryPoint(uint64_t ip) const {
    return std::find(entry_points_.begin(), entry_points_.end(), ip) != entry_points_.end();
  }

 private:
  struct Mapping {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint32_t file = 0;
    int isid = 0;                     // > 0: a section in the cache
    const uint8_t* memory = nullptr;  // page dumps: bytes in memory_
  };
  ProgramImage(ImagePtr image, std::shared_ptr<pt_image_section_cache> iscache);
  void AddMapping(const Mapping& m);
  // The code symbols of one ELF file at its link-time addresses, sorted by begin, and its
  // PT_LOAD segments. Read once per file (LinkSymbolsOf), placed for each of its mappings
  // (PlaceSymbols): M mappings of a file of S symbols cost one read, O(S log S), then
  // O(log S + k) per mapping placing k symbols, and one O(N log N) sort of the N placed
  // (SortSymbols), where every mapping read and demangled the whole file before.
  struct LinkSymbols {
    std::vector<ElfSegment> loads;
    std::vector<Symbol> symbols;  // image unset
    uint64_t entry = 0;           // e_entry, 0 when none
    bool elf32 = false;
    std::string refused_debug;  // ImageFile::refused_debug
  };
  LinkSymbols ReadLinkSymbols(const ElfFile& elf) const;
  // The table of the file at `path` (read from `opened` when given, else opened), kept in
  // link_symbols_; null when it is not an ELF file.
  const LinkSymbols* LinkSymbolsOf(const std::string& path, const ElfFile* opened);
  // Link-time addresses [from, to) placed at address + bias (modulo 2^64).
  struct Placement {
    uint64_t from = 0;
    uint64_t to = 0;
    uint64_t bias = 0;
  };
  // Appends to symbols_ the symbols of `table` in `placements` (a symbol in two: the first),
  // as file `file_index`; SortSymbols sorts them before the next read.
  void PlaceSymbols(const LinkSymbols& table, uint32_t file_index,
                    std::span<const Placement> placements);
  void SortSymbols() const;
  // The symbols and ELF segments of the ELF file `path` whose file range [pgoff, to) is mapped
  // at `start`, as file `file_index` (nothing when it is not ELF).
  void PlaceFileSymbols(const std::string& path, uint32_t file_index, uint64_t start,
                        uint64_t pgoff, uint64_t to);
  void AddMemoryRun(uint32_t file, uint64_t address, std::unique_ptr<uint8_t[]> bytes, size_t size);
  // The symbols of captured bytes that are an ELF image (the vdso's .dynsym), placed through
  // its PT_LOAD segments as laid out at `address`. Nothing for other bytes.
  void LoadCapturedSymbols(const std::string& name, uint32_t file_index, uint64_t address,
                           std::span<uint8_t> bytes);
  struct Missing {
    uint64_t start, end;
    std::string path;
  };
  std::vector<Missing> missing_;
  static int ReadMemory(uint8_t* buffer, size_t size, const pt_asid* asid, uint64_t ip,
                        void* context);
  const Mapping* MappingAt(uint64_t ip) const;
  // Where a loadable segment of an ELF file lies: runtime [begin, end) = link-time + bias.
  struct PlacedSegment {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint64_t bias = 0;  // modulo 2^64
    uint32_t file = 0;
  };
  void AddElfSegment(const PlacedSegment& segment);

  ImagePtr image_;
  std::shared_ptr<pt_image_section_cache> iscache_;
  std::vector<ImageFile> files_;
  mutable std::vector<uint32_t> first_of_name_;                      // FirstOfName's, by file
  mutable std::unordered_map<std::string, uint32_t> index_of_name_;  // the first file of a name
  std::vector<Mapping> mappings_;         // sorted by begin, no two overlapping (AddMapping)
  std::vector<Mapping> memory_mappings_;  // the bytes in memory, sorted, for the callback
  std::vector<Overlap> overlaps_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;
  std::shared_ptr<LinkSymbolCache> link_symbols_;
  std::vector<std::shared_ptr<void>> owners_;  // what keeps AddBytes' bytes valid
  mutable std::vector<Symbol> symbols_;        // sorted when symbols_sorted_
  std::vector<uint64_t> entry_points_;         // IsEntryPoint (a few: one per ELF file)
  mutable bool symbols_sorted_ = true;
  std::vector<PlacedSegment> elf_segments_;  // sorted by begin
  std::string sysroot_;
  std::string buildid_dir_;
  std::unordered_map<std::string, std::string> debug_files_;  // AddArchivedBytes' `debug`
  mutable std::atomic<size_t> last_run_{0};  // ReadMemory's last hit in memory_mappings_
  mutable std::shared_ptr<FastDecoderGraphs> fast_decoder_graphs_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_IMAGE_H_
