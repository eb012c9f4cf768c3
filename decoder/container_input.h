// Container input: decodes the AUX streams of a trace.pt recording (ptkit-format(5)) with the
// images its sideband describes.
//
// Per stream (one CPU or one thread), in stream order: the AUX bytes are joined while they are
// contiguous; a discontinuity (an AUX offset jump, a TRUNCATED / COLLISION / PARTIAL flag, a
// loss record) starts a new piece, reported to the sink as OnLoss at that point, and each
// piece is decoded on its own. The process of a stream is its thread's (per-thread streams)
// or the task ITRACE_START / context switches name at the stream's first AUX record (per-CPU).
// Its image: every executable MMAP2 mapping of that process, from the file system (under
// `sysroot`) or from code captured in the container (vdso, archived ranges), which wins.
// A file that cannot be loaded becomes a gap naming it.
//
// Per-CPU streams switch images at context switches when the trace has timing and the
// metadata a time conversion. Not yet:
// snapshots, timing filters.
#ifndef PTKIT_DECODER_CONTAINER_INPUT_H_
#define PTKIT_DECODER_CONTAINER_INPUT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "decoder/decode.h"
#include "decoder/trace_config.h"
#include "nlohmann/json.hpp"

namespace ptkit::decoder {

struct ContainerOptions {
  std::string sysroot;  // prefix for the paths of mapped files
  // Filters: only streams of this CPU; only thread streams of this thread and CPU streams
  // whose first task is it; only this snapshot (0, 1, ...) of each stream.
  std::optional<uint64_t> cpu;
  std::optional<uint32_t> tid;
  std::optional<uint64_t> snapshot;
  std::optional<TraceConfig> config;  // overrides what the metadata says
};

// The decoder configuration a recording's metadata describes: the CPU (Intel only) for
// errata, MTC frequency from the intel_pt attr config (bits 14-17), the nominal frequency
// ratio, CPUID 0x15. Missing members leave defaults.
TraceConfig TraceConfigFromMetadata(const nlohmann::json& metadata);

// Decodes every stream of the container at `path` into `sink`, then calls sink.Finish.
// Errors: those of ContainerReader::Open (not a container, ...), I/O errors, sink.Finish's.
// Damage in the file is not an error: what can be read is decoded.
absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink);

// `ptdecode info --decode`: decodes every stream (counting only) and summarises:
// {"streams", "instructions", "blocks", "syncs", "errors", "gaps", "losses", "lost_bytes",
//  "errors_by_code": {name: count}}. Errors: those of DecodeContainer.
absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CONTAINER_INPUT_H_
