// Writes a synthesized walk (synthesizer.h) as a complete trace.pt: what `ptrecord -e
// intel_pt//u` in per-thread mode would have written for one thread that ran the walked image.
//
// Records: metadata (record/metadata.h schema, plus "emulated": "synthesized" and the walk
// parameters), one sideband record with COMM, MMAP2 (each executable PT_LOAD segment of the
// image), ITRACE_START, one PERF_RECORD_AUX per AUX chunk and EXIT, and the PT bytes as AUX
// records of stream "tid <tid>" (or the BTS records, for an intel_bts recording). perf time equals
// the TSC (time_mult 1, time_shift 0, time_zero 0). The CPU is "GenuineIntel" family 6 model 0 so
// that no errata apply.
#ifndef PTKIT_RECORD_SWPT_SYNTH_CONTAINER_H_
#define PTKIT_RECORD_SWPT_SYNTH_CONTAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ptkit/container_writer.h"
#include "record/swpt/code_image.h"
#include "record/swpt/synthesizer.h"

namespace ptkit::swpt {

struct SynthContainerOptions {
  uint32_t pid = 4242;
  uint32_t tid = 4242;
  std::vector<std::string> command_line;  // recorded as the tool's command line
  size_t aux_chunk = size_t{1} << 20;     // bytes per AUX record
  bool overwrite = true;
  // Write the walk's BTS records (SynthOptions::bts) as an `intel_bts//u` recording instead of
  // the PT bytes.
  bool bts = false;
  // False: no MMAP2 for the image (its code reaches the decoder otherwise, e.g. as kernel text
  // captured by ptrecord --kcore that `more_records` writes).
  bool map_image = true;
  // Called with the writer after the trace records, before the footer. May be empty.
  std::function<absl::Status(ContainerWriter&)> more_records;
};

// Writes `result` (a walk of `image` with `options`) to `path`. Fails with kInvalidArgument
// when `container.bts` is set but the walk kept no BTS records, and with the container
// writer's errors (kAlreadyExists without overwrite, errno of open/write).
absl::Status WriteSynthContainer(const std::string& path, const CodeImage& image,
                                 const SynthOptions& options, const SynthResult& result,
                                 const SynthContainerOptions& container = {});

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_SYNTH_CONTAINER_H_
