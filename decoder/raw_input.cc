#include "decoder/raw_input.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "decoder/ipt_handles.h"
#include "ptkit/container_format.h"
#include "ptkit/perf_data.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/status.h"

namespace ptkit::decoder {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "open ", path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat ", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return MappedFile(ScopedMmap());
  void* data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (data == MAP_FAILED) return ErrnoStatus(errno, "mmap ", path);
  madvise(data, size, MADV_SEQUENTIAL);
  return MappedFile(ScopedMmap(data, size));
}

std::string UnusedTimingWarning(const std::string& name, std::span<const uint8_t> trace,
                                const TraceConfig& config) {
  const bool mtc_usable =
      config.mtc_freq != 0 && config.cpuid_0x15_eax != 0 && config.cpuid_0x15_ebx != 0;
  if (mtc_usable || config.nom_freq != 0 || trace.empty()) return "";
  absl::StatusOr<pt_config> pt = MakePtConfig(trace, config);
  if (!pt.ok()) return "";
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&*pt));
  if (!dec) return "";
  uint64_t mtc = 0, cyc = 0;
  pt_packet packet;
  while (pt_pkt_sync_forward(dec.get()) >= 0) {
    while (pt_pkt_next(dec.get(), &packet, sizeof(packet)) >= 0) {
      mtc += packet.type == ppt_mtc;
      cyc += packet.type == ppt_cyc;
    }
  }
  if (mtc == 0 && cyc == 0) return "";
  return absl::StrCat(name, ": ", mtc, " MTC and ", cyc,
                      " CYC packets are not used: without --mtc-freq and --cpuid-0x15.eax/ebx "
                      "(MTC) or --nom-freq (CYC) of the recording CPU, every instruction between "
                      "two TSC packets has the first one's time");
}

absl::StatusOr<RawInput> LoadRawInput(const RawInputSpec& spec) {
  PTKIT_ASSIGN_OR_RETURN(MappedFile trace, MappedFile::Open(spec.pt_path));
  if (trace.bytes().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.pt_path, ": empty file (0 bytes): no trace to decode"));
  }
  // A recording given as raw trace (--pt, --bts): say what it is (sweep 27 T6: "no PSB", or
  // a perf.data, whose AUX bytes hold PSBs, decoded as one stream of gaps).
  const std::span<const uint8_t> b = trace.bytes();
  const bool container =
      b.size() >= kFileMagic.size() && std::equal(kFileMagic.begin(), kFileMagic.end(), b.begin());
  if (container || perf::IsPerfData(b)) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.pt_path, ": ", container ? "a ptkit trace.pt container" : "a perf.data file",
        ", not a raw trace: give it without --pt/--bts (its sideband names the code)"));
  }
  if (spec.bts && trace.bytes().size() % 24 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.pt_path, ": ", trace.bytes().size(),
                     " bytes: not a multiple of the 24-byte BTS record"));
  }
  if (!spec.bts) {
    PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace.bytes(), spec.config));
    PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
    if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a packet decoder");
    if (pt_pkt_sync_forward(dec.get()) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.pt_path, ": no PSB packet: not an Intel PT stream"));
    }
  }
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ProgramImage> image, ProgramImage::Create());
  for (const ElfSpec& elf : spec.elfs) PTKIT_RETURN_IF_ERROR(image->AddElf(elf));
  for (const RawSpec& raw : spec.raws) PTKIT_RETURN_IF_ERROR(image->AddRaw(raw));
  for (const PageDumpSpec& pages : spec.page_dumps) {
    PTKIT_RETURN_IF_ERROR(image->AddPageDump(pages));
  }
  return RawInput{std::move(trace), std::move(image), spec.config};
}

}  // namespace ptkit::decoder
