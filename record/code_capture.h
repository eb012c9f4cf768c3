// What a decoder needs from this machine besides the trace: the identity (path + GNU
// build-id) of every file the workload mapped, and the bytes of the vdso (which exists in no
// file). Collected from the MMAP2 sideband while draining, written as code records at the
// end of the run.
#ifndef PTKIT_RECORD_CODE_CAPTURE_H_
#define PTKIT_RECORD_CODE_CAPTURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/container_writer.h"
#include "ptkit/elf_file.h"  // ReadBuildId
#include "ptkit/perf_records.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::record {

// The vdso of this process (the kernel maps the same image into every process): the bytes of
// the [vdso] mapping found through getauxval(AT_SYSINFO_EHDR) and /proc/self/maps.
// Errors: kNotFound when there is no vdso.
absl::StatusOr<std::vector<uint8_t>> ReadOwnVdso();

// `len` bytes at `addr` in process `pid` (process_vm_readv). Errors: the errno's status.
absl::StatusOr<std::vector<uint8_t>> ReadProcessMemory(uint32_t pid, uint64_t addr, uint64_t len);

class CodeCapture {
 public:
  using MemoryReader = std::function<absl::StatusOr<std::vector<uint8_t>>(
      uint32_t pid, uint64_t addr, uint64_t len)>;
  // With `archive`, Write() also stores the bytes of every executable file mapping
  // (ptrecord --archive), so decoding needs no file from this machine. `read` reads a
  // process's [vdso] when its MMAP2 is seen (an i386 process has another vdso than this one).
  explicit CodeCapture(bool archive = false, MemoryReader read = ReadProcessMemory)
      : archive_(archive), read_(std::move(read)) {}

  // Feed every sideband record; keeps MMAP2 records of executable mappings. A FORK of a new
  // process gives it its parent's vdso, which it has without an MMAP2 record of its own. The
  // bytes of a [vdso] are read from the process then (the kernel maps its 64-bit image into
  // x86-64 programs and its i386 one into i386 programs); when it cannot be read (gone
  // already), from another process's [vdso] of that size read before, else this process's.
  void OnRecord(const perf::RecordView& record, const perf::SampleIdLayout& layout);

  // One kCodeIdentity record per distinct mapped file (path + build-id, or content hash, of
  // the file as it was mapped: the MMAP2's build-id, or the file read when its first mapping
  // was seen; empty when unreadable: a warning is returned for each such file; a file that
  // changed since is said, and not archived) and one kCodeVdso
  // record per process that mapped a [vdso], with the bytes of its vdso (see OnRecord) at
  // that process's address. With `archive`, one record (flags 0, build-id set) per distinct
  // executable mapping holding the file bytes [pgoff, pgoff + len) at its address, split in
  // 16 MiB pieces; a file shorter than the mapping gives what the file has; and each such
  // file whole (AppendArchivedFile: its symbols and line tables), and once each the separate
  // debug file (ElfFile::FindDebugFile on this machine: a stripped file's .symtab and DWARF)
  // of each archived file that has one, flag kCodeDebugFile. Returns the warnings (unreadable
  // files, files or debug files too large to archive, and once, the stripped files archived
  // without a debug file); errors are the writer's.
  absl::StatusOr<std::vector<std::string>> Write(ContainerWriter& writer) const;

  size_t files() const { return files_.size(); }

 private:
  // What identifies a file (kCodeIdentity's flags and bytes: its build-id, or its content
  // hash when it has none; empty when unreadable), or the error reading it.
  struct Identity {
    uint32_t flags = kCodeIdentity;
    std::vector<uint8_t> bytes;
    std::string error;
  };
  static Identity IdentityOf(const std::string& path);
  struct FileMap {
    uint32_t pid = 0;
    uint64_t address = 0;
    uint64_t pgoff = 0;
    // The mapped file's identity: the MMAP2's build-id, else read when the mapping was seen.
    Identity mapped;
    // With --archive, where the file with the MMAP2's build-id was found when its path here
    // names another file (another mount namespace's: a container's file, a bind mount):
    // /proc/self/fd/N of `held`, opened through /proc/PID/root/PATH while the process ran.
    // Empty: the path.
    std::string read_from;
    std::shared_ptr<ScopedFd> held;
    // With `held`: its separate debug file, looked for under /proc/PID/root while the process
    // ran, as that root names it, and held open too (`debug_held` null: none).
    std::string debug_path;
    std::shared_ptr<ScopedFd> debug_held;
    bool stripped = false;  // (with `held`) it has no .symtab
  };
  // Archived file `path`'s separate debug file: where the recording machine has it, and where
  // to read it ("", "": none); `stripped` is set when the file has no .symtab.
  std::pair<std::string, std::string> DebugFileOf(const std::string& path, bool& stripped) const;
  struct Range {
    std::string path;
    uint32_t pid = 0;
    uint64_t address = 0, pgoff = 0, len = 0;
    auto operator<=>(const Range&) const = default;  // NOLINT(modernize-use-nullptr)
  };
  bool archive_ = false;
  MemoryReader read_;
  std::map<std::string, FileMap> files_;          // path -> first executable mapping
  std::set<std::pair<uint32_t, uint64_t>> vdso_;  // (pid, [vdso] address)
  // Vdso images read from processes other than this one's (by size: the i386 image), and
  // which of them each such process has.
  std::map<uint64_t, std::vector<uint8_t>> other_vdsos_;
  // (pid, [vdso] address) -> key of other_vdsos_ (an exec into an i386 program and back has
  // both in one pid).
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> vdso_image_;
  std::optional<absl::StatusOr<std::vector<uint8_t>>> own_vdso_;  // read at the first [vdso]
  std::set<Range> ranges_;  // every executable file mapping (archive)
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_CODE_CAPTURE_H_
