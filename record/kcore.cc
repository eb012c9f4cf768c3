#include "record/kcore.h"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ptkit/container_format.h"
#include "ptkit/kallsyms.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "record/perf_event.h"

namespace ptkit::record {
namespace {

constexpr std::string_view kKernelName = "[kernel.kallsyms]";  // perf's name for it

// pread of exactly out.size() bytes at `offset`. /proc/kcore reads can be short.
absl::Status ReadAt(int fd, uint64_t offset, std::span<uint8_t> out, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read ", path, " at offset ", offset + done);
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path, ": ends at offset ", offset + done, ", ",
                                              out.size() - done,
                                              " bytes short of what its program headers say"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A whole (small) file's text; "" when it does not exist.
absl::StatusOr<std::string> ReadOptional(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return std::string();
  return ReadSystemFile(path);
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> ParseBuildIdNote(std::span<const uint8_t> notes) {
  size_t at = 0;
  auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
  while (at + sizeof(Elf64_Nhdr) <= notes.size()) {
    Elf64_Nhdr h;
    std::memcpy(&h, notes.data() + at, sizeof(h));
    const size_t name_at = at + sizeof(h);
    const size_t desc_at = name_at + align4(h.n_namesz);
    const size_t next = desc_at + align4(h.n_descsz);
    if (h.n_namesz > notes.size() || h.n_descsz > notes.size() || next > notes.size() + 3 ||
        desc_at + h.n_descsz > notes.size()) {
      return absl::DataLossError(
          absl::StrCat("ELF note at byte ", at, " runs past the end (", notes.size(), " bytes)"));
    }
    if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 &&
        std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
      return std::vector<uint8_t>(notes.begin() + desc_at, notes.begin() + desc_at + h.n_descsz);
    }
    at = next;
  }
  return absl::NotFoundError("no GNU build-id note");
}

absl::StatusOr<std::vector<uint8_t>> ReadCoreRange(const std::string& core_path, uint64_t address,
                                                   uint64_t size) {
  ScopedFd fd(::open(core_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "open ", core_path);
  Elf64_Ehdr eh;
  PTKIT_RETURN_IF_ERROR(
      ReadAt(fd.get(), 0, std::span(reinterpret_cast<uint8_t*>(&eh), sizeof(eh)), core_path));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_type != ET_CORE ||
      eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(core_path, " is no 64-bit little-endian ELF core file"));
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  PTKIT_RETURN_IF_ERROR(
      ReadAt(fd.get(), eh.e_phoff,
             std::span(reinterpret_cast<uint8_t*>(phdrs.data()), phdrs.size() * sizeof(Elf64_Phdr)),
             core_path));
  for (const Elf64_Phdr& p : phdrs) {
    if (p.p_type != PT_LOAD || address < p.p_vaddr || address - p.p_vaddr > p.p_filesz ||
        size > p.p_filesz - (address - p.p_vaddr)) {
      continue;
    }
    std::vector<uint8_t> bytes(size);
    PTKIT_RETURN_IF_ERROR(ReadAt(fd.get(), p.p_offset + (address - p.p_vaddr), bytes, core_path));
    return bytes;
  }
  return absl::NotFoundError(absl::StrCat("no PT_LOAD segment of ", core_path, " holds 0x",
                                          absl::Hex(address), "-0x", absl::Hex(address + size)));
}

absl::StatusOr<KernelCapture> CaptureKernel(const KcorePaths& paths) {
  KernelCapture c;
  // Before the slow read of kallsyms; a path this user may not look at (EACCES) is read below,
  // where the error says that root is needed.
  if (::access(paths.kcore.c_str(), F_OK) != 0 && errno == ENOENT) {
    return absl::NotFoundError(absl::StrCat(
        "--kcore: ", paths.kcore,
        " does not exist (a kernel built without CONFIG_PROC_KCORE): the kernel text cannot be "
        "copied; record without --kcore"));
  }
  PTKIT_ASSIGN_OR_RETURN(c.kallsyms, ReadSystemFile(paths.kallsyms));
  const std::vector<KallsymsEntry> symbols = ParseKallsyms(c.kallsyms);
  PTKIT_ASSIGN_OR_RETURN(KernelText text, KernelTextRange(symbols));
  absl::StatusOr<std::vector<uint8_t>> bytes =
      ReadCoreRange(paths.kcore, text.begin, text.end - text.begin);
  if (absl::IsPermissionDenied(bytes.status())) {
    return absl::PermissionDeniedError(absl::StrCat("--kcore: ", bytes.status().message(),
                                                    ": reading the kernel text needs root"));
  }
  if (!bytes.ok()) return bytes.status();
  c.text_address = text.begin;
  c.text = *std::move(bytes);
  PTKIT_ASSIGN_OR_RETURN(c.modules, ReadOptional(paths.modules));
  if (c.modules.empty()) c.notes.push_back(paths.modules + ": none (no loadable modules)");
  PTKIT_ASSIGN_OR_RETURN(std::string notes, ReadOptional(paths.notes));
  absl::StatusOr<std::vector<uint8_t>> id =
      ParseBuildIdNote(std::span(reinterpret_cast<const uint8_t*>(notes.data()), notes.size()));
  if (id.ok()) {
    c.build_id = *std::move(id);
  } else {
    c.notes.push_back(absl::StrCat(paths.notes, ": ", id.status().message()));
  }
  return c;
}

absl::Status WriteKernelCapture(ContainerWriter& writer, const KernelCapture& capture,
                                uint64_t chunk) {
  for (uint64_t at = 0; at < capture.text.size(); at += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, capture.text.size() - at);
    PTKIT_RETURN_IF_ERROR(writer.AppendCode({.pid = 0,
                                             .flags = kCodeKernel,
                                             .address = capture.text_address + at,
                                             .pgoff = at,
                                             .path = kKernelName,
                                             .build_id = capture.build_id,
                                             .bytes = std::span(capture.text).subspan(at, n)}));
  }
  for (const auto& [path, text] :
       {std::pair<std::string_view, const std::string&>{"/proc/kallsyms", capture.kallsyms},
        {"/proc/modules", capture.modules}}) {
    if (text.empty()) continue;
    PTKIT_RETURN_IF_ERROR(writer.AppendCode(
        {.pid = 0,
         .flags = kCodeKernelTable,
         .path = path,
         .bytes = std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())}));
  }
  return absl::OkStatus();
}

}  // namespace ptkit::record
