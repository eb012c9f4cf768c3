#include "record/swpt/code_image.h"

#include <elf.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "ptkit/elf_file.h"
#include "ptkit/status.h"

namespace ptkit::swpt {

absl::StatusOr<CodeImage> CodeImage::Load(const std::string& path, uint64_t pie_base) {
  CodeImage image;
  image.path_ = path;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return ErrnoStatus(errno, "open ", path);
    image.file_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  PTKIT_ASSIGN_OR_RETURN(ElfFile elf, ElfFile::FromMemory(path, image.file_));
  if (elf.machine() != EM_X86_64 || !elf.is_64bit()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an x86-64 ELF file"));
  }
  if (elf.type() != ET_EXEC && elf.type() != ET_DYN) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an executable"));
  }
  image.pie_ = elf.type() == ET_DYN;

  uint64_t lowest = UINT64_MAX;
  for (const ElfSegment& ph : elf.LoadSegments()) {
    if (ph.offset + ph.filesz > image.file_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": PT_LOAD beyond end of file"));
    }
    lowest = std::min<uint64_t>(lowest, ph.vaddr & ~uint64_t{0xfff});
  }
  if (elf.LoadSegments().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no PT_LOAD"));
  }
  image.bias_ = image.pie_ ? (pie_base & ~uint64_t{0xfff}) - lowest : 0;
  image.load_base_ = lowest + image.bias_;
  bool any_exec = false;
  for (const ElfSegment& ph : elf.LoadSegments()) {
    LoadSegment seg;
    seg.vaddr = ph.vaddr + image.bias_;
    seg.file_offset = ph.offset;
    seg.filesz = ph.filesz;
    seg.memsz = ph.memsz;
    seg.exec = (ph.flags & PF_X) != 0;
    any_exec |= seg.exec && seg.filesz > 0;
    image.segments_.push_back(seg);
  }
  if (!any_exec) return absl::InvalidArgumentError(absl::StrCat(path, ": no executable code"));

  // GOT ranges, and the functions of .symtab (else .dynsym).
  for (const ElfSection& section : elf.Sections()) {
    if (section.name == ".got" || section.name == ".got.plt") {
      image.got_.push_back({section.addr + image.bias_, section.addr + image.bias_ + section.size});
    }
  }
  const bool dynamic = !elf.HasSymtab();
  for (const ElfSymbol& sym : elf.Symbols()) {
    if (sym.dynamic != dynamic || sym.type != STT_FUNC || sym.size == 0) continue;
    image.functions_.push_back({std::string(sym.name), sym.value + image.bias_, sym.size});
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
