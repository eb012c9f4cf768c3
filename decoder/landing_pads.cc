#include "decoder/landing_pads.h"

#include <algorithm>

namespace ptkit::decoder {

const LandingPads::FileSites* LandingPads::SitesAt(const ProgramImage& image, uint64_t ip,
                                                   uint64_t& bias) {
  const int file = image.FileAt(ip);
  const std::optional<uint64_t> link = file < 0 ? std::nullopt : image.LinkAddress(ip);
  if (!link) return nullptr;
  bias = ip - *link;
  const ImageFile& f = image.files()[file];
  const std::string& path = f.path.empty() ? f.name : f.path;
  auto [it, inserted] = files_.try_emplace(path);
  if (inserted) {
    absl::StatusOr<ElfFile> elf = ElfFile::Open(path);
    if (elf.ok()) {
      it->second.sites = elf->CallSites();
      for (const ElfCallSite& s : it->second.sites) it->second.pads.push_back(s.landing_pad);
      std::sort(it->second.pads.begin(), it->second.pads.end());
    }
  }
  return &it->second;
}

bool LandingPads::IsPad(const ProgramImage& image, uint64_t ip) {
  uint64_t bias = 0;
  const FileSites* sites = SitesAt(image, ip, bias);
  return sites != nullptr && std::binary_search(sites->pads.begin(), sites->pads.end(), ip - bias);
}

uint64_t LandingPads::PadOf(const ProgramImage& image, uint64_t return_address) {
  uint64_t bias = 0;
  const FileSites* sites = SitesAt(image, return_address - 1, bias);
  if (sites == nullptr) return 0;
  const uint64_t at = return_address - 1 - bias;
  auto it = std::upper_bound(sites->sites.begin(), sites->sites.end(), at,
                             [](uint64_t v, const ElfCallSite& s) { return v < s.begin; });
  if (it == sites->sites.begin() || at >= (--it)->end) return 0;
  return it->landing_pad + bias;
}

}  // namespace ptkit::decoder
