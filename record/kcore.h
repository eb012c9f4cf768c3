// `ptrecord --kcore`: what decoding kernel code needs, copied into the container as perf
// record --kcore copies it into a directory: the kernel's text from /proc/kcore (an ELF core
// file whose PT_LOAD segments map kernel virtual addresses; fs/proc/kcore.c), the symbol table
// /proc/kallsyms, the module list /proc/modules and the kernel's build-id (the GNU build-id
// note in /sys/kernel/notes). Stored as code records (ptkit-format(5)): the text with flag
// kCodeKernel at its address, the two tables with kCodeKernelTable, named by their path.
//
// Parsing is split from I/O: ParseBuildIdNote and ReadCoreRange work on given bytes or paths
// (kallsyms parsing: ptkit/kallsyms.h), so tests use fixtures and core files.
#ifndef PTKIT_RECORD_KCORE_H_
#define PTKIT_RECORD_KCORE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/container_writer.h"

namespace ptkit::record {

// The GNU build-id in an ELF note section's bytes (Elf64_Nhdr entries, 4-byte aligned, as
// /sys/kernel/notes holds them). Errors: kNotFound without an NT_GNU_BUILD_ID note "GNU",
// kDataLoss for a note running past the end.
absl::StatusOr<std::vector<uint8_t>> ParseBuildIdNote(std::span<const uint8_t> notes);

// The bytes [address, address + size) of the memory an ELF core file (ET_CORE, 64-bit
// little-endian: /proc/kcore) maps with its PT_LOAD segments. Errors: open/read errors naming
// the file; kInvalidArgument for a file that is no 64-bit ELF core; kNotFound when no single
// PT_LOAD segment holds the whole range (naming the range).
absl::StatusOr<std::vector<uint8_t>> ReadCoreRange(const std::string& core_path, uint64_t address,
                                                   uint64_t size);

// Where the kernel's files are (the defaults are the running kernel's).
struct KcorePaths {
  std::string kcore = "/proc/kcore";
  std::string kallsyms = "/proc/kallsyms";
  std::string modules = "/proc/modules";
  std::string notes = "/sys/kernel/notes";
};

// What --kcore captures.
struct KernelCapture {
  uint64_t text_address = 0;       // _stext
  std::vector<uint8_t> text;       // [_stext, _etext) as /proc/kcore maps it
  std::string kallsyms;            // the file's text
  std::string modules;             // "" when the kernel has none (no /proc/modules)
  std::vector<uint8_t> build_id;   // empty when /sys/kernel/notes has none
  std::vector<std::string> notes;  // what was left out and why
};

// Reads the four files. Errors: kPermissionDenied for /proc/kcore or hidden kallsyms
// addresses (saying: run as root); kNotFound when /proc/kcore does not exist (a kernel without
// CONFIG_PROC_KCORE), naming it; ReadCoreRange's errors.
absl::StatusOr<KernelCapture> CaptureKernel(const KcorePaths& paths = {});

// Appends `capture` as code records: the text in chunks of at most `chunk` bytes at their
// addresses (pid 0, flag kCodeKernel, path "[kernel.kallsyms]", with the build-id), then
// /proc/kallsyms and /proc/modules (flag kCodeKernelTable, address 0). Errors: the writer's.
absl::Status WriteKernelCapture(ContainerWriter& writer, const KernelCapture& capture,
                                uint64_t chunk = uint64_t{8} << 20);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_KCORE_H_
