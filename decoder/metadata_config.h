// What decoding takes from a recording's metadata (ptkit/recording_metadata.h): the libipt
// configuration, whether the trace is BTS, the sideband's sample_id layout, and the metadata
// of a container read with the merge rule.
#ifndef PTKIT_DECODER_METADATA_CONFIG_H_
#define PTKIT_DECODER_METADATA_CONFIG_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/trace_config.h"
#include "nlohmann/json.hpp"
#include "ptkit/perf_records.h"
#include "ptkit/recording_metadata.h"

namespace ptkit::decoder {

// The decoder configuration a recording's metadata describes: the CPU (Intel only) for
// errata; the MTC frequency from the trace PMU's attr config, at the bits of the recorded
// pmu.formats.mtc_period (perf's sysfs format/mtc_period), else at config:14-17 (Intel SDM:
// IA32_RTIT_CTL.MTCFreq); the nominal frequency ratio; CPUID 0x15. Missing members leave
// defaults.
TraceConfig TraceConfigFromMetadata(const RecordingMetadata& metadata);

// Whether a recording's AUX data is intel_bts branch records rather than Intel PT packets:
// the kernel path names its PMU ("pmu": {"name": "intel_bts"}), an emulated recording has no
// PMU and says "emulation": {"format": "bts"}.
bool IsBtsRecording(const RecordingMetadata& metadata);

// The sample_id trailer of the sideband records: that of the first attr with sample_id_all
// set; none (sample_id_all true, no fields) without one.
perf::SampleIdLayout LayoutFromMetadata(const RecordingMetadata& metadata);

// Merges the metadata record `payload`, at `offset` in the container at `path`, into `merged`
// (ParseMetadataRecord, MergeMetadata); a record that cannot be read is ignored, with a line in
// `warnings` saying where and why.
void MergeMetadataRecord(const std::string& path, uint64_t offset, std::span<const uint8_t> payload,
                         nlohmann::json& merged, std::vector<std::string>& warnings);

// Reads the merged metadata JSON of the container at `path` (`merged`, as ParseMetadataRecord
// and MergeMetadata made it). Errors: RecordingMetadata::FromJson's, prefixed with `path`.
absl::StatusOr<RecordingMetadata> ReadMergedMetadata(const std::string& path,
                                                     const nlohmann::json& merged);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_METADATA_CONFIG_H_
