// Fuzzes the image loader on an ELF file (the input, in a memfd): ProgramImage::AddElf,
// AddFileMapping (MMAP2-style, symbols relocated through the segments) and AddBytes (captured
// code: an ELF image's symbols read in place), then symbol lookups, link addresses, code
// reads and exceptions' landing pads (ElfFile::CallSites: .eh_frame and the LSDAs) over what
// was loaded. Bad files must be errors, never crashes or reads outside the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "decoder/image.h"
#include "decoder/landing_pads.h"
#include "ptkit/elf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dec = ::ptkit::decoder;
  const int fd = memfd_create("elf_image_fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto image = dec::ProgramImage::Create();
  if (image.ok()) {
    dec::ProgramImage& im = **image;
    (void)im.AddElf({path, 0});
    (void)im.AddElf({path, 0x500000});
    (void)im.AddFileMapping(path, 0x7f0000000000, size + 0x1000, 0);
    (void)im.AddFileMapping(path, 0x7f1000000000, 0x1000, 0x1000);
    im.AddBytes("fuzz", 0x7f2000000000, std::span<const uint8_t>(data, size));
    uint8_t buf[16];
    dec::LandingPads pads;
    for (const dec::Symbol& s : im.symbols()) {
      for (uint64_t ip : {s.begin, s.end - 1, s.end}) {
        dec::AddressRange range;
        (void)im.SymbolAt(ip, &range);
        (void)im.LinkAddress(ip);
        (void)im.Read(ip, buf, sizeof(buf));
        (void)im.HoleAround(ip);
        (void)im.FileAt(ip);
        (void)pads.IsPad(im, ip);
        (void)pads.PadOf(im, ip);
      }
    }
  }
  absl::StatusOr<ptkit::ElfFile> elf = ptkit::ElfFile::Open(path);
  if (elf.ok()) {
    uint64_t last = 0;
    for (const ptkit::ElfCallSite& site : elf->CallSites()) {
      if (site.begin >= site.end || site.begin < last) __builtin_trap();  // sorted ranges
      last = site.begin;
    }
  }
  close(fd);
  return 0;
}
