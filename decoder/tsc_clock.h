// How the output forms turn the trace's time (TSC units, Sink::OnTime) into wall time.
//
// A recording's metadata can give two things: the kernel's perf-time conversion
// (time_conversion: time_zero, time_mult, time_shift), which maps a TSC value to perf time in
// nanoseconds exactly as `perf script` prints it, and the TSC frequency, from that conversion
// (2^time_shift * 1e9 / time_mult), else from CPUID 0x15 (crystal Hz * EBX / EAX), else from
// the nominal frequency (PMU max_nonturbo_ratio * 100 MHz; the TSC runs at it on CPUs with an
// invariant TSC). A raw trace has only --nom-freq.
#ifndef PTKIT_DECODER_TSC_CLOCK_H_
#define PTKIT_DECODER_TSC_CLOCK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "decoder/trace_config.h"
#include "nlohmann/json.hpp"
#include "ptkit/recording_metadata.h"
#include "ptkit/sideband.h"

namespace ptkit::decoder {

struct TscClock {
  std::optional<TscConversion> perf;  // TSC -> perf time (ns); absent: unknown
  double tsc_hz = 0;                  // TSC ticks per second; 0: unknown
  std::string hz_source;              // where tsc_hz came from ("time_conversion", ...)
};

// The clock a recording's metadata describes (missing members: unknown).
TscClock TscClockFromMetadata(const RecordingMetadata& metadata);

// The clock of a raw trace: the TSC frequency from config.nom_freq (x 100 MHz) when set.
TscClock TscClockFromConfig(const TraceConfig& config);

// Reads the metadata records of the trace.pt at `path` (every one, merged: the file is read
// to its end) and returns their clock. A container without metadata gives an unknown clock.
// Errors: those of ContainerReader (open, not a container, I/O) and ReadMergedMetadata (a
// member of the wrong type or range).
absl::StatusOr<TscClock> ReadTscClock(const std::string& path);

// Perf time in nanoseconds as `perf script` prints it: "seconds.nanoseconds" (9 digits).
std::string FormatPerfTime(uint64_t ns);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_TSC_CLOCK_H_
