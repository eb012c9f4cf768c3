// ELF facts both the recorder and the decoder need, read one way (libelf): the GNU build-id
// and the separate debug file. Before this, the recorder and the decoder read build-ids
// differently, so a file whose note is reachable only through its PT_NOTE segment got a false
// "build-id differs" warning.
#ifndef PTKIT_ELF_FILE_H_
#define PTKIT_ELF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

struct Elf;  // libelf's handle (<libelf.h>: typedef struct Elf Elf)

namespace ptkit {

// libelf's handle, ended (elf_end) on destruction.
struct ElfCloser {
  void operator()(Elf* elf) const;
};
using ElfPtr = std::unique_ptr<Elf, ElfCloser>;

// An ELF file open for reading: the descriptor and libelf's handle over it, released together
// (the handle first).
struct OpenedElf {
  ScopedFd fd;
  ElfPtr elf;
};
// Opens `path` with libelf (ELF_C_READ_MMAP). Errors: the errno of open naming it (kNotFound
// for a missing file); kInvalidArgument "PATH: not an ELF file"; kInternal when libelf cannot
// be initialised.
absl::StatusOr<OpenedElf> OpenElf(const std::string& path);

// The NT_GNU_BUILD_ID note of `elf`, looked for in its PT_NOTE segments (what the loader and
// the kernel see; present even without section headers), then its SHT_NOTE sections. Empty
// when it has none.
std::vector<uint8_t> ElfBuildId(Elf* elf);

// The build-id of the ELF file at `path` (empty when it has none). Errors: the errno of open
// (kNotFound for a missing file) naming it; kInvalidArgument "PATH: not an ELF file".
absl::StatusOr<std::vector<uint8_t>> ReadBuildId(const std::string& path);

// The separate debug file of the ELF `elf` (read from `path`), found as gdb and perf find it:
// SYSROOT/usr/lib/debug/.build-id/NN/REST.debug by its build-id; else through its
// .gnu_debuglink name in the file's directory, in its .debug/ and under
// SYSROOT/usr/lib/debug/ plus the directory (without SYSROOT). A candidate whose build-id
// differs from the file's is skipped. Empty when there is none.
std::string FindDebugFile(Elf* elf, const std::string& path, const std::string& sysroot);

}  // namespace ptkit

#endif  // PTKIT_ELF_FILE_H_
