// Container input: reads a trace.pt recording (ptkit-format(5)) into a Recording
// (decoder/recording.h, which says how streams, pieces, images and tasks are decoded), and the
// path-based entry points `ptdecode` uses.
#ifndef PTKIT_DECODER_CONTAINER_INPUT_H_
#define PTKIT_DECODER_CONTAINER_INPUT_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "decoder/decode.h"
#include "decoder/metadata_config.h"
#include "decoder/recording.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"
#include "decoder/tsc_clock.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"

namespace ptkit::decoder {

// The options of container input are those of any recording.
using ContainerOptions = RecordingOptions;

// Reads every record of `reader` into a Recording: the metadata records merged, the sideband, the
// AUX, loss and snapshot records of the streams `options` may select (the AUX bytes of others
// are not even spooled), captured code. Damage in the file and a missing footer are warnings,
// not errors. Errors: I/O errors of the reader, spool errors.
absl::StatusOr<Recording> ReadRecording(ContainerReader& reader, const RecordingOptions& options);

// Opens the recording at `path` and reads it: a perf.data (recognised by its magic) with
// ReadPerfDataRecording (perf_data_input.h), anything else with ReadRecording. Errors: those
// of ContainerReader::Open (not a container, ...) and of the reader.
absl::StatusOr<Recording> OpenRecording(const std::string& path, const RecordingOptions& options);

// The TSC clock of the recording at `path` (trace.pt: ReadTscClock; perf.data: its metadata).
// Errors: those of opening and reading it.
absl::StatusOr<TscClock> ReadRecordingClock(const std::string& path);

// Decodes every stream of the recording at `path` into `sink` (OpenRecording, then
// DecodeRecording). Errors: theirs. Damage in the file is not an error: what can be read is
// decoded.
absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink);

// What `ptdecode packets` dumped: its bytes of trace, and the recording's warnings (damage, a
// missing footer, ...), which the other sub-commands print.
struct PacketsSummary {
  uint64_t trace_bytes = 0;
  std::vector<std::string> warnings;
};

// `ptdecode packets trace.pt`: OpenRecording, then DumpRecordingPackets; `summary` (optional)
// gets what it dumped.
absl::Status DumpContainerPackets(const std::string& path, const ContainerOptions& options,
                                  std::FILE* out, const OutputOptions& output,
                                  PacketsSummary* summary = nullptr);

// `ptdecode info --decode`: OpenRecording, then DecodeRecordingSummary.
absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CONTAINER_INPUT_H_
