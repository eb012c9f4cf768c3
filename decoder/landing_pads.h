// Where a C++ exception lands: the landing pads of the call sites of each file's LSDAs
// (ElfFile::CallSites), read from a file when first asked about it and kept by its path.
#ifndef PTKIT_DECODER_LANDING_PADS_H_
#define PTKIT_DECODER_LANDING_PADS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "decoder/image.h"
#include "ptkit/elf_file.h"

namespace ptkit::decoder {

class LandingPads {
 public:
  // Whether `ip` is the landing pad of a call site of the ELF file `image` maps there.
  bool IsPad(const ProgramImage& image, uint64_t ip);
  // Where an exception thrown through the call that returns to `return_address` lands: the
  // landing pad of the call site holding return_address - 1 (as the personality routine looks
  // it up), 0 when that call has none (or the code is not an ELF file's).
  uint64_t PadOf(const ProgramImage& image, uint64_t return_address);

 private:
  struct FileSites {
    std::vector<ElfCallSite> sites;  // sorted by begin
    std::vector<uint64_t> pads;      // sorted
  };
  // The call sites of the file mapping `ip`, and `bias` (runtime - link address); null when
  // `ip` is not in an ELF file's loadable segment.
  const FileSites* SitesAt(const ProgramImage& image, uint64_t ip, uint64_t& bias);
  std::map<std::string, FileSites> files_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_LANDING_PADS_H_
