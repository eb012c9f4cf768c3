#include "ptkit/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"

namespace ptkit {
namespace {

bool LibelfReady() {
  static const bool ready = elf_version(EV_CURRENT) != EV_NONE;
  return ready;
}

// Searches one note buffer for NT_GNU_BUILD_ID owned by "GNU".
bool FindBuildIdNote(Elf_Data* data, std::vector<uint8_t>* out) {
  GElf_Nhdr nhdr;
  size_t name_off = 0, desc_off = 0, off = 0;
  while (data != nullptr && data->d_buf != nullptr &&
         (off = gelf_getnote(data, off, &nhdr, &name_off, &desc_off)) > 0) {
    const char* base = static_cast<const char*>(data->d_buf);
    if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 &&
        std::memcmp(base + name_off, "GNU", 4) == 0) {
      out->assign(base + desc_off, base + desc_off + nhdr.n_descsz);
      return true;
    }
  }
  return false;
}

// The file name in .gnu_debuglink (NUL-terminated, then padding and a CRC); empty when none or
// when it is not a plain file name.
std::string DebugLinkOf(Elf* elf) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return "";
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name == nullptr || std::strcmp(name, ".gnu_debuglink") != 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr) return "";
    const char* link = static_cast<const char*>(data->d_buf);
    const size_t n = strnlen(link, data->d_size);
    if (n == 0 || n == data->d_size || std::memchr(link, '/', n) != nullptr) return "";
    return std::string(link, n);
  }
  return "";
}

}  // namespace

void ElfCloser::operator()(Elf* elf) const { elf_end(elf); }

absl::StatusOr<OpenedElf> OpenElf(const std::string& path) {
  if (!LibelfReady()) return absl::InternalError("libelf: elf_version failed");
  OpenedElf out;
  out.fd.reset(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!out.fd.valid()) return ErrnoStatus(absl::StrCat("open ", path));
  out.elf.reset(elf_begin(out.fd.get(), ELF_C_READ_MMAP, nullptr));
  if (out.elf == nullptr || elf_kind(out.elf.get()) != ELF_K_ELF) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an ELF file"));
  }
  return out;
}

std::vector<uint8_t> ElfBuildId(Elf* elf) {
  std::vector<uint8_t> id;
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum && id.empty(); ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_NOTE) continue;
      FindBuildIdNote(
          elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_NHDR),
          &id);
    }
  }
  for (Elf_Scn* scn = nullptr; id.empty() && (scn = elf_nextscn(elf, scn)) != nullptr;) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) != nullptr && sh.sh_type == SHT_NOTE) {
      FindBuildIdNote(elf_getdata(scn, nullptr), &id);
    }
  }
  return id;
}

absl::StatusOr<std::vector<uint8_t>> ReadBuildId(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(OpenedElf file, OpenElf(path));
  return ElfBuildId(file.elf.get());
}

std::string FindDebugFile(Elf* elf, const std::string& path, const std::string& sysroot) {
  const std::vector<uint8_t> id = ElfBuildId(elf);
  const std::string debug_root = sysroot + "/usr/lib/debug";
  // The debug file must be the same build: its build-id equals the file's when both have one.
  auto usable = [&id](const std::string& candidate) {
    absl::StatusOr<std::vector<uint8_t>> debug_id = ReadBuildId(candidate);
    return debug_id.ok() && (id.empty() || debug_id->empty() || *debug_id == id);
  };
  if (id.size() >= 2) {
    std::string hex;
    for (uint8_t b : id) hex += fmt::format("{:02x}", b);
    std::string candidate =
        fmt::format("{}/.build-id/{}/{}.debug", debug_root, hex.substr(0, 2), hex.substr(2));
    if (usable(candidate)) return candidate;
  }
  const std::string link = DebugLinkOf(elf);
  if (link.empty()) return "";
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  // The file's directory as the workload saw it (without the sysroot), for the global dir.
  const std::string seen_dir = dir.starts_with(sysroot) ? dir.substr(sysroot.size()) : dir;
  for (const std::string& candidate :
       {dir + "/" + link, dir + "/.debug/" + link, debug_root + seen_dir + "/" + link}) {
    if (candidate != path && usable(candidate)) return candidate;
  }
  return "";
}

}  // namespace ptkit
