// perf.data input: a `perf record` file (file or pipe mode, read by ptkit/perf_data.h) as the
// same Recording a trace.pt gives (decoder/recording.h), so every sub-command, filter and
// option works on it unchanged.
//
//  - Streams: each PERF_RECORD_AUXTRACE is a piece of its CPU's stream, or of its thread's
//    when perf recorded per thread (cpu = -1); in snapshot mode (AUXTRACE_INFO) each is a
//    snapshot. PERF_RECORD_AUX flags (TRUNCATED, COLLISION, PARTIAL) and PERF_RECORD_LOST are
//    loss points where they happened.
//  - Sideband: MMAP2, MMAP (ptkit/perf_records.h: ParseMmap), COMM, FORK, EXIT, ITRACE_START,
//    SWITCH(_CPU_WIDE), each record's sample_id trailer read with its own attr's layout; a
//    record's CPU from its trailer, else from ID_INDEX.
//  - Metadata (in trace.pt's schema, so the decoder configuration, the TSC clock and `info`
//    read it the same way): the CPU from the CPUID feature (vendor, family, model, stepping ->
//    errata), the PMU from AUXTRACE_INFO (type 1 intel_pt, 2 intel_bts; PMU type, TSC
//    conversion, TSC/CTC ratio, max non-turbo ratio), the attrs (MTC frequency from the PT
//    config), the time conversion from AUXTRACE_INFO's words as perf's intel-pt decoder takes
//    it, else from TIME_CONV; host, kernel, machine and command line from the features; every
//    attr (named intel_pt / intel_bts / dummy where it is one, with what `ptdecode export`
//    needs to write it back as perf wrote it: "perf_attr", its bytes in hex; "ids", its sample
//    ids; "perf_name", its EVENT_DESC name); AUXTRACE_INFO's own words ("auxtrace_info":
//    {"type", "words"}), which `ptdecode export` writes back.
//    The kernel records, samples of every event included, are kept verbatim in
//    Recording::sideband, for export.
//  - Build-ids: those of the BUILD_ID feature, by file name, for the build-id cache.
#ifndef PTKIT_DECODER_PERF_DATA_INPUT_H_
#define PTKIT_DECODER_PERF_DATA_INPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "decoder/recording.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_reader.h"
#include "ptkit/perf_data.h"

namespace ptkit::decoder {

// Whether the file at `path` starts with the perf.data magic (file and pipe mode). Errors:
// open and read failures, naming the path.
absl::StatusOr<bool> IsPerfDataFile(const std::string& path);

// The recording's metadata in trace.pt's schema (see above), plus "source": "perf.data".
nlohmann::json PerfDataMetadata(const perf::PerfData& data);

// Reads the perf.data of `source` into a Recording (the AUX bytes of streams `options` cannot
// select are not spooled). Damage in the file becomes warnings. Errors: those of ReadPerfData
// (not a perf.data, I/O), spool errors.
absl::StatusOr<Recording> ReadPerfDataRecording(ByteSource& source,
                                                const RecordingOptions& options);

// `ptdecode info perf.data`: {"format": "perf.data", "file", "file_size", "pipe", "events":
// [{"type", "config", "sample_type", "ids"}], "records": {name: count}, "auxtrace":
// [{"stream", "records", "bytes"}], "auxtrace_info": {"type", "pmu", "words"}, "loss":
// {"aux_truncated", "aux_collision", "aux_partial", "lost_records", "lost_events"},
// "features": {...}, "metadata", "damage": [{"offset", "bytes", "reason"}], "warnings"}.
// Errors: those of ReadPerfData.
absl::StatusOr<nlohmann::json> PerfDataInfo(const std::string& path);

// Renders PerfDataInfo's JSON as the text `ptdecode info` prints.
std::string FormatPerfDataInfoText(const nlohmann::json& info);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PERF_DATA_INPUT_H_
