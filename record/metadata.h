// The metadata record of a recording: who, where, what CPU and PMU, every perf_event_attr,
// and the TSC/perf-time conversion (ptkit/recording_metadata.h; schema: man/ptkit-format.5,
// "METADATA").
#ifndef PTKIT_RECORD_METADATA_H_
#define PTKIT_RECORD_METADATA_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "ptkit/recording_metadata.h"
#include "record/pmu_registry.h"

namespace ptkit::record {

struct CpuId {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  uint32_t family = 0, model = 0, stepping = 0;
  // CPUID leaf 0x15: TSC / core crystal clock ratio (EBX/EAX) and crystal Hz (ECX); 0 when
  // the leaf is absent.
  uint32_t tsc_ratio_numerator = 0, tsc_ratio_denominator = 0, crystal_hz = 0;
};
// Executes CPUID on this machine (x86; other architectures give an empty vendor).
CpuId ReadCpuId();

// The perf-time <-> TSC conversion fields of a user page (perf_event_mmap_page).
using TimeConversion = TimeConversionMetadata;
// Reads them with the seqlock protocol of <linux/perf_event.h> (retry while `lock` changes).
TimeConversion ReadTimeConversion(const perf_event_mmap_page* page);

struct MetadataInput {
  std::vector<std::string> command_line;  // ptrecord's argv
  std::vector<std::string> workload;      // the traced command, if any
  CpuId cpu;
  std::optional<Pmu> pmu;  // the trace PMU; absent in sideband-only mode
  std::string event;       // the resolved trace event string
  std::vector<std::pair<std::string, perf_event_attr>> attrs;  // name -> attr
  std::optional<TimeConversion> time;
  uint64_t page_size = 0;
  std::string mode;       // "full-trace", "snapshot", "sideband-only"
  std::vector<int> cpus;  // traced CPUs, empty for per-thread
  uint64_t data_pages = 0, aux_pages = 0;
};

// Builds the metadata: inputs plus host name and kernel release (uname) and the tool version.
// The nominal frequency is max_nonturbo_ratio x 100 MHz when the PMU gives it.
RecordingMetadata BuildRecordingMetadata(const MetadataInput& in);
// BuildRecordingMetadata(in).ToJson().
nlohmann::json BuildMetadata(const MetadataInput& in);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_METADATA_H_
