// ElfFile: one ELF file read one way (libelf), for the recorder and the decoder alike: its
// header, PT_LOAD segments, sections, symbols, relocations, GNU build-id and separate debug
// file. Before it, five places read ELF files each their own way, and the recorder and the
// decoder read build-ids differently, so a file whose note is reachable only through its
// PT_NOTE segment got a false "build-id differs" warning.
#ifndef PTKIT_ELF_FILE_H_
#define PTKIT_ELF_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

struct Elf;  // libelf's handle (<libelf.h>: typedef struct Elf Elf)

namespace ptkit {

// A PT_LOAD program header.
struct ElfSegment {
  uint64_t vaddr = 0;   // p_vaddr: the link-time address
  uint64_t offset = 0;  // p_offset
  uint64_t filesz = 0;
  uint64_t memsz = 0;
  uint32_t flags = 0;  // p_flags: PF_X, PF_W, PF_R
};

// A section header. Names and data point into the file and live as long as its ElfFile.
struct ElfSection {
  size_t index = 0;
  std::string_view name;
  uint32_t type = 0;   // sh_type: SHT_PROGBITS, SHT_SYMTAB, ...
  uint64_t flags = 0;  // sh_flags: SHF_ALLOC, SHF_EXECINSTR, ...
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t entsize = 0;
  uint32_t link = 0;
};

// An FDE of .eh_frame: the code [begin, begin + size) it covers, its LSDA's address (0: none),
// link addresses.
struct ElfFde {
  uint64_t begin = 0;
  uint64_t size = 0;
  uint64_t lsda = 0;
};

// A call site of an LSDA: an exception thrown through a call whose return address - 1 lies in
// [begin, end) lands at `landing_pad` (link addresses).
struct ElfCallSite {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t landing_pad = 0;
};

// A defined symbol (st_shndx != SHN_UNDEF) with a name, from .symtab or .dynsym.
struct ElfSymbol {
  std::string_view name;  // as in the file (mangled)
  uint64_t value = 0;     // st_value: the link-time address for code and data
  uint64_t size = 0;
  uint8_t type = 0;      // STT_FUNC, STT_NOTYPE, ...
  uint8_t binding = 0;   // STB_GLOBAL, STB_WEAK, STB_LOCAL
  uint16_t section = 0;  // st_shndx
  bool dynamic = false;  // from an SHT_DYNSYM section, else SHT_SYMTAB
  // An SHT_DYNSYM symbol's version where it is not its name's default one (readelf's
  // "memcpy@GLIBC_2.2.5", not "memcpy@@GLIBC_2.14"): glibc's compatibility symbols, whose
  // names another address has too. Empty otherwise (a .symtab name carries its version).
  std::string_view hidden_version;
};

// An SHT_RELA or SHT_REL entry.
struct ElfRelocation {
  uint64_t offset = 0;  // r_offset
  uint32_t type = 0;    // R_TYPE: R_X86_64_JUMP_SLOT, R_386_JMP_SLOT, ...
  int64_t addend = 0;
  std::string_view symbol;  // the name of its symbol; empty for none (index 0, no name)
};

// An ELF file open for reading. Move-only; what it hands out (names, section data) lives as
// long as it does.
class ElfFile {
 public:
  // Opens the file at `path` (mapped, ELF_C_READ_MMAP). Errors: the errno of open naming it
  // (kNotFound for a missing file); kInvalidArgument "PATH: not an ELF file", or naming a
  // header or program header table that libelf cannot read; kInternal when libelf cannot be
  // initialised.
  static absl::StatusOr<ElfFile> Open(const std::string& path);
  // An ELF image in memory (the vdso captured at record time, a file read whole), named `name`
  // in errors. `bytes` must outlive the result. Errors: as Open's, but for open.
  static absl::StatusOr<ElfFile> FromMemory(const std::string& name,
                                            std::span<const uint8_t> bytes);

  ElfFile(ElfFile&&) noexcept = default;
  ElfFile& operator=(ElfFile&&) noexcept = default;
  ~ElfFile();

  // The path given to Open (or the name given to FromMemory).
  const std::string& path() const { return path_; }
  uint16_t type() const { return type_; }        // e_type: ET_EXEC, ET_DYN, ...
  uint16_t machine() const { return machine_; }  // e_machine: EM_X86_64, ...
  uint64_t entry() const { return entry_; }      // e_entry: the link-time entry point
  bool is_64bit() const { return is_64bit_; }    // ELFCLASS64
  // libelf's handle, for what this class does not read (DWARF through dwarf_begin_elf).
  Elf* elf() const { return elf_.get(); }

  // The PT_LOAD segments, in program header order (those with p_filesz 0 included).
  const std::vector<ElfSegment>& LoadSegments() const { return loads_; }
  // The file offset of link-time address `vaddr` if a PT_LOAD segment's file bytes hold it,
  // else -1.
  int64_t FileOffset(uint64_t vaddr) const;

  // Every section header, indexed by section number (entry 0 is SHN_UNDEF's, all zero).
  // Empty when the file has no section header table.
  std::vector<ElfSection> Sections() const;
  // The bytes of `section` in the file (empty for SHT_NOBITS or when unreadable).
  std::span<const uint8_t> SectionData(const ElfSection& section) const;
  // Whether the file has an SHT_SYMTAB section (stripped files have only .dynsym).
  bool HasSymtab() const;
  // The defined, named symbols of every SHT_SYMTAB and SHT_DYNSYM section, in section order,
  // each table in its own order.
  std::vector<ElfSymbol> Symbols() const;
  // The FDEs of .eh_frame, in its order. A scan of the section (a static program has no
  // .eh_frame_hdr table), each FDE's start decoded by its CIE's pointer encoding (augmentation
  // "z...R...": absolute or pc-relative, 2, 4 or 8 bytes, as GCC, Clang and the assemblers write
  // them; an FDE of another encoding is passed over).
  std::vector<ElfFde> Fdes() const;
  // The size of the code that the .eh_frame FDE starting at link address `pc` covers (its
  // pc_range); 0 when no FDE starts there.
  uint64_t FdeSize(uint64_t pc) const;
  // The call sites of every FDE's LSDA (C++ exceptions: the call-site tables of
  // .gcc_except_table, as the personality routine reads them) that have a landing pad, sorted
  // by start. An LSDA of an encoding other than absolute or pc-relative is passed over.
  std::vector<ElfCallSite> CallSites() const;
  // The entries of every SHT_RELA and SHT_REL section, in section order (an SHT_REL entry's
  // addend is 0: it is in the relocated word).
  std::vector<ElfRelocation> Relocations() const;

  // The NT_GNU_BUILD_ID note, looked for in the PT_NOTE segments (what the loader and the
  // kernel see; present even without section headers), then the SHT_NOTE sections. Empty
  // when it has none.
  std::vector<uint8_t> BuildId() const;
  // The separate debug file, found as gdb and perf find it:
  // SYSROOT/usr/lib/debug/.build-id/NN/REST.debug by its build-id; else through its
  // .gnu_debuglink name in the file's directory, in its .debug/ and under
  // SYSROOT/usr/lib/debug/ plus the directory (without SYSROOT). A candidate whose build-id
  // differs from the file's is skipped, and so is one found by the .gnu_debuglink name whose
  // CRC-32 is not the one .gnu_debuglink gives where the file or the candidate has no build-id
  // (as gdb checks it: another build's debug file left in place); `refused` (if given) is told
  // the first candidate skipped. With `buildid_dir` (perf's build-id cache), its
  // .build-id/NN/REST/debug (perf's copy of the debug file) is looked for after the
  // build-id's under SYSROOT. Empty when there is none.
  std::string FindDebugFile(const std::string& sysroot, std::string* refused = nullptr,
                            const std::string& buildid_dir = "") const;
  // The .gnu_debuglink section: the debug file's name (empty when there is none or it is not
  // a plain file name) and its CRC-32 (nullopt when the section holds none).
  struct DebugLink {
    std::string name;
    std::optional<uint32_t> crc;
  };
  DebugLink GnuDebugLink() const;

 private:
  struct ElfCloser {
    void operator()(Elf* elf) const;
  };
  ElfFile() = default;
  // Reads the header and program headers of elf_. Errors: kInvalidArgument naming path_.
  absl::Status Init();

  std::string path_;
  ScopedFd fd_;  // released after elf_ (declared first, destroyed last)
  std::unique_ptr<Elf, ElfCloser> elf_;
  uint16_t type_ = 0;
  uint16_t machine_ = 0;
  uint64_t entry_ = 0;
  bool is_64bit_ = false;
  std::vector<ElfSegment> loads_;
};

// The build-id of the ELF file at `path` (empty when it has none): ElfFile::Open(path) then
// BuildId(). Errors: Open's.
absl::StatusOr<std::vector<uint8_t>> ReadBuildId(const std::string& path);

// The CRC-32 (zlib's crc32, which .gnu_debuglink holds) of the file at `path`. Errors: the
// open's or read's.
absl::StatusOr<uint32_t> FileCrc32(const std::string& path);
// The same CRC-32 of bytes in memory (an archived debug file).
uint32_t Crc32(std::span<const uint8_t> bytes);

// The XXH3 64-bit hash of every byte of the file at `path`: what identifies a file without a
// build-id (kCodeContentHash). Errors: kNotFound / kInvalidArgument naming the path and errno.
absl::StatusOr<uint64_t> ContentHash(const std::string& path);

}  // namespace ptkit

#endif  // PTKIT_ELF_FILE_H_
