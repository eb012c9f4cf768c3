#include "record/swpt/code_image.h"

#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "ptkit/elf_file.h"
#include "ptkit/status.h"

namespace ptkit::swpt {
namespace {

absl::Status ElfError(const std::string& path, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what, ": ", elf_errmsg(-1)));
}

}  // namespace

absl::StatusOr<CodeImage> CodeImage::Load(const std::string& path, uint64_t pie_base) {
  CodeImage image;
  image.path_ = path;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return ErrnoStatus(errno, "open ", path);
    image.file_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (elf_version(EV_CURRENT) == EV_NONE) return absl::InternalError("libelf too old");
  ElfPtr elf(elf_memory(reinterpret_cast<char*>(image.file_.data()), image.file_.size()));
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) return ElfError(path, "not an ELF file");
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(elf.get(), &ehdr)) return ElfError(path, "no ELF header");
  if (ehdr.e_machine != EM_X86_64 || ehdr.e_ident[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an x86-64 ELF file"));
  }
  if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an executable"));
  }
  image.pie_ = ehdr.e_type == ET_DYN;

  size_t phnum = 0;
  if (elf_getphdrnum(elf.get(), &phnum) != 0) return ElfError(path, "program headers");
  uint64_t lowest = UINT64_MAX;
  std::vector<GElf_Phdr> loads;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf.get(), static_cast<int>(i), &ph)) return ElfError(path, "phdr");
    if (ph.p_type != PT_LOAD) continue;
    if (ph.p_offset + ph.p_filesz > image.file_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": PT_LOAD beyond end of file"));
    }
    loads.push_back(ph);
    lowest = std::min<uint64_t>(lowest, ph.p_vaddr & ~uint64_t{0xfff});
  }
  if (loads.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no PT_LOAD"));
  image.bias_ = image.pie_ ? (pie_base & ~uint64_t{0xfff}) - lowest : 0;
  image.load_base_ = lowest + image.bias_;
  bool any_exec = false;
  for (const GElf_Phdr& ph : loads) {
    LoadSegment seg;
    seg.vaddr = ph.p_vaddr + image.bias_;
    seg.file_offset = ph.p_offset;
    seg.filesz = ph.p_filesz;
    seg.memsz = ph.p_memsz;
    seg.exec = (ph.p_flags & PF_X) != 0;
    any_exec |= seg.exec && seg.filesz > 0;
    image.segments_.push_back(seg);
  }
  if (!any_exec) return absl::InvalidArgumentError(absl::StrCat(path, ": no executable code"));

  // Sections: GOT ranges and the symbol table (.symtab, else .dynsym).
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf.get(), &shstrndx) != 0) return ElfError(path, "shstrndx");
  Elf_Scn* symtab = nullptr;
  Elf_Scn* dynsym = nullptr;
  for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn; scn = elf_nextscn(elf.get(), scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char* name = elf_strptr(elf.get(), shstrndx, sh.sh_name);
    std::string_view n = name ? name : "";
    if (n == ".got" || n == ".got.plt") {
      image.got_.push_back({sh.sh_addr + image.bias_, sh.sh_addr + image.bias_ + sh.sh_size});
    }
    if (sh.sh_type == SHT_SYMTAB) symtab = scn;
    if (sh.sh_type == SHT_DYNSYM) dynsym = scn;
  }
  Elf_Scn* syms = symtab ? symtab : dynsym;
  if (syms) {
    GElf_Shdr sh;
    gelf_getshdr(syms, &sh);
    Elf_Data* data = elf_getdata(syms, nullptr);
    size_t count = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
    for (size_t i = 0; data && i < count; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym)) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 || sym.st_shndx == SHN_UNDEF)
        continue;
      const char* name = elf_strptr(elf.get(), sh.sh_link, sym.st_name);
      image.functions_.push_back({name ? name : "", sym.st_value + image.bias_, sym.st_size});
    }
  }
  std::sort(image.functions_.begin(), image.functions_.end(),
            [](const Function& a, const Function& b) {
              return a.addr != b.addr ? a.addr < b.addr : a.name < b.name;
            });
  image.functions_.erase(
      std::unique(image.functions_.begin(), image.functions_.end(),
                  [](const Function& a, const Function& b) { return a.addr == b.addr; }),
      image.functions_.end());
  return image;
}

const uint8_t* CodeImage::Read(uint64_t addr, size_t* avail) const {
  for (const LoadSegment& seg : segments_) {
    if (addr >= seg.vaddr && addr < seg.vaddr + seg.filesz) {
      *avail = seg.vaddr + seg.filesz - addr;
      return file_.data() + seg.file_offset + (addr - seg.vaddr);
    }
  }
  *avail = 0;
  return nullptr;
}

uint64_t CodeImage::exec_base() const {
  uint64_t base = UINT64_MAX;
  for (const LoadSegment& seg : segments_) {
    if (seg.exec) base = std::min(base, seg.vaddr);
  }
  return base;
}

bool CodeImage::IsCode(uint64_t addr) const {
  for (const LoadSegment& seg : segments_) {
    if (seg.exec && addr >= seg.vaddr && addr < seg.vaddr + seg.filesz) return true;
  }
  return false;
}

bool CodeImage::IsGot(uint64_t addr) const {
  for (const auto& [begin, end] : got_) {
    if (addr >= begin && addr < end) return true;
  }
  return false;
}

const Function* CodeImage::FunctionAt(uint64_t addr) const {
  auto it = std::upper_bound(functions_.begin(), functions_.end(), addr,
                             [](uint64_t a, const Function& f) { return a < f.addr; });
  if (it == functions_.begin()) return nullptr;
  --it;
  return addr < it->addr + it->size ? &*it : nullptr;
}

std::optional<uint64_t> CodeImage::FunctionAddress(const std::string& name) const {
  for (const Function& f : functions_) {
    if (f.name == name) return f.addr;
  }
  return std::nullopt;
}

}  // namespace ptkit::swpt
