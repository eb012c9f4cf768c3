// Raw-mode input: a PT byte stream from a file plus the images it ran in (ptxed conventions).
#ifndef PTKIT_DECODER_RAW_INPUT_H_
#define PTKIT_DECODER_RAW_INPUT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/image.h"
#include "decoder/trace_config.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::decoder {

// A read-only memory mapping of a whole file. Move-only.
class MappedFile {
 public:
  // Errors: open/fstat/mmap failures (errno), naming the path; a directory.
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(map_.get()), map_.size()};
  }

 private:
  explicit MappedFile(ScopedMmap map) : map_(std::move(map)) {}
  ScopedMmap map_;  // empty for an empty file
};

struct RawInputSpec {
  std::string pt_path;
  bool bts = false;  // pt_path holds intel_bts records (24 bytes each), not Intel PT
  std::vector<ElfSpec> elfs;
  std::vector<RawSpec> raws;
  std::vector<PageDumpSpec> page_dumps;
  TraceConfig config;
};

struct RawInput {
  MappedFile trace;
  std::unique_ptr<ProgramImage> image;
  TraceConfig config;
};

// Maps the trace, loads the images and checks that the trace has a PSB to start from (BTS:
// that its size is a multiple of 24 bytes).
// Errors: those of MappedFile::Open and the ProgramImage::Add* functions; kInvalidArgument
// "<path>: empty file (0 bytes): no trace to decode", "<path>: no PSB packet: not an Intel PT
// stream" for a file without one, and "<path>: N bytes: not a multiple of the 24-byte BTS
// record" for BTS.
absl::StatusOr<RawInput> LoadRawInput(const RawInputSpec& spec);

// A raw trace's timing packets that `config` cannot use: MTC and CYC packets when neither MTC's
// parameters (mtc_freq and CPUID 0x15) nor CYC's (nom_freq) are given, so every instruction
// between two TSC packets gets the first one's time. "" when there are none, or they are usable.
std::string UnusedTimingWarning(const std::string& name, std::span<const uint8_t> trace,
                                const TraceConfig& config);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_RAW_INPUT_H_
