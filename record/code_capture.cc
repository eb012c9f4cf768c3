#include "record/code_capture.h"

#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ptkit/errno_text.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"
#include "record/proc_maps.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<std::vector<uint8_t>> ReadOwnVdso() {
  const uintptr_t ehdr = getauxval(AT_SYSINFO_EHDR);
  if (ehdr == 0) return absl::NotFoundError("this process has no vdso (AT_SYSINFO_EHDR)");
  absl::StatusOr<std::vector<ProcMapping>> maps = ReadProcMaps("self");
  if (maps.ok()) {
    for (const ProcMapping& m : *maps) {
      if (m.path != "[vdso]") continue;
      if (m.start != ehdr || m.end <= m.start) break;
      const auto* p = reinterpret_cast<const uint8_t*>(ehdr);
      return std::vector<uint8_t>(p, p + (m.end - m.start));
    }
  }
  return absl::NotFoundError("no [vdso] line in /proc/self/maps at AT_SYSINFO_EHDR");
}

absl::StatusOr<std::vector<uint8_t>> ReadProcessMemory(uint32_t pid, uint64_t addr, uint64_t len) {
  std::vector<uint8_t> out(len);
  iovec local{out.data(), out.size()};
  iovec remote{reinterpret_cast<void*>(addr), out.size()};
  const ssize_t n = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(len)) {
    return ErrnoStatus(n < 0 ? errno : EIO, "read ", len, " bytes at 0x", absl::Hex(addr),
                       " of process ", pid);
  }
  return out;
}

void CodeCapture::OnRecord(const perf::RecordView& record, const perf::SampleIdLayout& layout) {
  if (record.type == PERF_RECORD_FORK) {
    absl::StatusOr<perf::Task> fork = perf::ParseTask(record, layout);
    if (!fork.ok() || fork->pid == fork->ppid) return;  // a thread: its process's memory
    // A new process is a copy of its parent's memory (FORK comes after the parent's MMAP2s),
    // the vdso included, which is in no file: 8 KiB per process. (Archived file ranges are
    // not copied: a fork-heavy workload would store its libraries once per process.)
    std::vector<std::pair<uint32_t, uint64_t>> vdso;
    for (const auto& [pid, addr] : vdso_) {
      if (pid == fork->ppid) vdso.emplace_back(fork->pid, addr);
    }
    vdso_.insert(vdso.begin(), vdso.end());
    for (const auto& [pid, addr] : vdso) {
      auto image = vdso_image_.find({fork->ppid, addr});
      if (image != vdso_image_.end()) vdso_image_[{pid, addr}] = image->second;
    }
    return;
  }
  if (record.type != PERF_RECORD_MMAP2) return;
  absl::StatusOr<perf::Mmap2> m = perf::ParseMmap2(record, layout);
  if (!m.ok() || !(m->prot & PROT_EXEC)) return;
  if (m->filename == "[vdso]") {
    const std::pair<uint32_t, uint64_t> key(m->pid, m->addr);
    vdso_.insert(key);
    vdso_image_.erase(key);  // (an exec: the new program's)
    if (!own_vdso_) own_vdso_ = ReadOwnVdso();
    absl::StatusOr<std::vector<uint8_t>> bytes = read_(m->pid, m->addr, m->len);
    if (bytes.ok() && (!own_vdso_->ok() || *bytes != **own_vdso_)) {
      other_vdsos_[m->len] = *std::move(bytes);
      vdso_image_[key] = m->len;
    } else if (!bytes.ok() && other_vdsos_.contains(m->len) &&
               (!own_vdso_->ok() || (*own_vdso_)->size() != m->len)) {
      vdso_image_[key] = m->len;  // gone already: the image of that size seen before
    }
    return;
  }
  // Anonymous memory (perf's "//anon", JIT code), [stack], ..., files no path names (a memfd,
  // "/memfd:NAME (deleted)"; a deleted file), shared memory and devices: no file to identify. (The
  // qemu backend captures the code of both as it runs; the decoder says a gap where nothing has
  // it.)
  if (m->filename.empty() || m->filename.front() != '/' || m->filename.starts_with("//") ||
      m->filename.starts_with("/memfd:") || m->filename.ends_with(" (deleted)") ||
      m->filename.starts_with("/dev/")) {
    return;
  }
  auto [it, first] = files_.emplace(std::string(m->filename), FileMap{m->pid, m->addr, m->pgoff});
  if (first) {
    // Its identity now, not at the end: a file replaced while the command runs (a library
    // reinstalled, a plugin written over) was stored as the new file, and decoded as it with no
    // warning (sweep 31a F3).
    if (!m->build_id.empty()) {
      it->second.mapped.bytes.assign(m->build_id.begin(), m->build_id.end());
      // --archive: the file with that build-id, which the path may not name here (another
      // mount namespace's file: sweep 37c M2, nothing was archived, "changed while the command
      // ran"); read through the process's root while it runs, and held open until Write.
      if (archive_) {
        absl::StatusOr<std::vector<uint8_t>> here = ReadBuildId(it->first);
        if (!here.ok() || *here != it->second.mapped.bytes) {
          const std::string there = absl::StrCat("/proc/", m->pid, "/root", it->first);
          absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(there);
          auto fd = std::make_shared<ScopedFd>(open(there.c_str(), O_RDONLY | O_CLOEXEC));
          if (id.ok() && *id == it->second.mapped.bytes && fd->valid()) {
            it->second.read_from = absl::StrCat("/proc/self/fd/", fd->get());
            it->second.held = std::move(fd);
            // Its debug file as that root has it (ElfFile::FindDebugFile under the root).
            const std::string root = absl::StrCat("/proc/", m->pid, "/root");
            if (absl::StatusOr<ElfFile> elf = ElfFile::Open(there); elf.ok()) {
              it->second.stripped = !elf->HasSymtab();
              const std::string debug = elf->FindDebugFile(root);
              auto debug_fd = std::make_shared<ScopedFd>(
                  debug.empty() ? -1 : open(debug.c_str(), O_RDONLY | O_CLOEXEC));
              if (debug_fd->valid()) {
                it->second.debug_path =
                    debug.starts_with(root + "/") ? debug.substr(root.size()) : debug;
                it->second.debug_held = std::move(debug_fd);
              }
            }
          }
        }
      }
    } else {
      it->second.mapped = IdentityOf(it->first);
    }
  }
  if (archive_) ranges_.insert(Range{std::string(m->filename), m->pid, m->addr, m->pgoff, m->len});
}

std::pair<std::string, std::string> CodeCapture::DebugFileOf(const std::string& path,
                                                             bool& stripped) const {
  auto it = files_.find(path);
  if (it != files_.end() && it->second.held) {
    stripped = it->second.stripped;
    if (!it->second.debug_held) return {"", ""};
    return {it->second.debug_path, absl::StrCat("/proc/self/fd/", it->second.debug_held->get())};
  }
  absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
  if (!elf.ok()) return {"", ""};
  stripped = !elf->HasSymtab();
  std::string debug = elf->FindDebugFile("");
  return {debug, debug};
}

CodeCapture::Identity CodeCapture::IdentityOf(const std::string& path) {
  Identity out;
  absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(path);
  if (!id.ok()) {
    out.error = std::string(id.status().message());
    return out;
  }
  out.bytes = *id;
  if (out.bytes.empty()) {
    // No build-id (linked with --build-id=none, Go's linker, ...): the hash of its bytes, so
    // that a decode tells a file rebuilt since from the one that ran (sweep 29b S1).
    if (absl::StatusOr<uint64_t> hash = ContentHash(path); hash.ok()) {
      out.bytes = EncodeContentHash(*hash);
      out.flags |= kCodeContentHash;
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CodeCapture::Write(ContainerWriter& writer) const {
  std::vector<std::string> warnings;
  std::set<std::string> changed;  // files not as they were mapped: not archived
  for (const auto& [path, map] : files_) {
    const Identity now = IdentityOf(map.read_from.empty() ? path : map.read_from);
    Identity stored = map.mapped;
    if (stored.bytes.empty() && stored.error.empty()) stored = now;  // (not read: no file then)
    if (stored.bytes.empty()) {
      warnings.push_back(absl::StrCat("no build-id stored for ", path, ": ",
                                      stored.error.empty() ? now.error : stored.error));
    } else if (now.error.empty() && (now.bytes != stored.bytes || now.flags != stored.flags)) {
      changed.insert(path);
      warnings.push_back(absl::StrCat(
          path,
          " changed while the command ran (replaced or written again), or is another file "
          "here than where the command ran it (another mount namespace: a container's file, a "
          "bind mount): the identity of the file it mapped is stored, so a decode with the file "
          "as it is here says it is not the file that was recorded",
          archive_ ? "; its code is not archived" : "",
          " (keep the file as it ran until the recording ends, or record a copy of it; decode "
          "with --sysroot naming the root it ran in)"));
    }
    PTKIT_RETURN_IF_ERROR(writer.AppendCode(CodeRecord{.pid = map.pid,
                                                       .flags = stored.flags,
                                                       .address = map.address,
                                                       .pgoff = map.pgoff,
                                                       .path = path,
                                                       .build_id = stored.bytes}));
  }
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  std::vector<uint8_t> buf;
  // Where each file's bytes are read: its path, or where its build-id was found.
  auto source = [this](const std::string& path) {
    auto it = files_.find(path);
    return it == files_.end() || it->second.read_from.empty() ? path : it->second.read_from;
  };
  for (const Range& r : ranges_) {
    if (changed.contains(r.path)) continue;
    const ScopedFd fd(open(source(r.path).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      warnings.push_back(absl::StrCat("not archived: ", r.path, ": ", ErrnoText(errno)));
      continue;
    }
    absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(source(r.path));
    const std::vector<uint8_t> build_id = id.ok() ? *id : std::vector<uint8_t>{};
    absl::Status st;
    for (uint64_t done = 0; done < r.len;) {
      buf.resize(std::min(kPiece, r.len - done));
      const ssize_t n = pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(r.pgoff + done));
      if (n < 0) {
        warnings.push_back(absl::StrCat("not archived: ", r.path, ": ", ErrnoText(errno)));
        break;
      }
      if (n == 0) break;  // the mapping extends past the end of the file
      buf.resize(static_cast<size_t>(n));
      st = writer.AppendCode(CodeRecord{.pid = r.pid,
                                        .flags = 0,
                                        .address = r.address + done,
                                        .pgoff = r.pgoff + done,
                                        .path = r.path,
                                        .build_id = build_id,
                                        .bytes = buf});
      if (!st.ok()) break;
      done += static_cast<uint64_t>(n);
    }
    PTKIT_RETURN_IF_ERROR(st);
  }
  // Each archived file whole once: its symbols and line tables, for names where it is not.
  // And its separate debug file once, where it has one (a stripped file's symbols and lines
  // are there: sweep 38a F2, sub_ADDRESS and no lines on another machine).
  std::set<std::string> whole, debug_files;
  std::vector<std::string> stripped;  // stripped files archived without a debug file
  for (const Range& r : ranges_) {
    if (changed.contains(r.path) || !whole.insert(r.path).second) continue;
    absl::StatusOr<std::vector<uint8_t>> id = ReadBuildId(source(r.path));
    // (A writer's error comes back at its Close too.)
    absl::Status st =
        AppendArchivedFile(writer, r.path, source(r.path), id.ok() ? *id : std::vector<uint8_t>{});
    if (!st.ok()) {
      warnings.push_back(absl::StrCat("symbols not archived: ", st.message()));
      continue;
    }
    bool no_symtab = false;
    const auto [debug_path, debug_from] = DebugFileOf(r.path, no_symtab);
    if (debug_path.empty()) {
      if (no_symtab) stripped.push_back(r.path);
      continue;
    }
    if (!debug_files.insert(debug_path).second) continue;
    absl::StatusOr<std::vector<uint8_t>> debug_id = ReadBuildId(debug_from);
    st = AppendArchivedFile(writer, debug_path, debug_from,
                            debug_id.ok() ? *debug_id : std::vector<uint8_t>{},
                            /*debug_file=*/true);
    if (!st.ok()) {
      warnings.push_back(
          absl::StrCat("the debug file of ", r.path, " is not archived: ", st.message()));
    }
  }
  if (!stripped.empty()) {
    warnings.push_back(absl::StrCat(
        stripped.size(), " archived file", stripped.size() == 1 ? " is" : "s are",
        " stripped (no .symtab) and no separate debug file was found for ",
        stripped.size() == 1 ? "it" : "them",
        " here (/usr/lib/debug/.build-id, .gnu_debuglink), so the recording holds only ",
        stripped.size() == 1 ? "its" : "their",
        " exported symbols: where the files are not, ptdecode names the other functions "
        "sub_ADDRESS, with no source lines (install the debug files, e.g. Debian's -dbgsym "
        "packages, and record again): ",
        absl::StrJoin(stripped, ", ")));
  }
  if (!vdso_.empty()) {
    absl::StatusOr<std::vector<uint8_t>> vdso = ReadOwnVdso();
    bool said = false;
    for (const auto& [pid, addr] : vdso_) {
      auto other = vdso_image_.find({pid, addr});
      if (other == vdso_image_.end() && !vdso.ok()) {
        if (!std::exchange(said, true)) {
          warnings.push_back(absl::StrCat("vdso not stored: ", vdso.status().message()));
        }
        continue;
      }
      const std::vector<uint8_t>& bytes =
          other != vdso_image_.end() ? other_vdsos_.at(other->second) : *vdso;
      PTKIT_RETURN_IF_ERROR(writer.AppendCode(CodeRecord{
          .pid = pid, .flags = kCodeVdso, .address = addr, .path = "[vdso]", .bytes = bytes}));
    }
  }
  return warnings;
}

}  // namespace ptkit::record
