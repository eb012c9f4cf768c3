#include "decoder/tsc_clock.h"

#include "decoder/metadata_config.h"
#include "fmt/format.h"
#include "ptkit/container_reader.h"
#include "ptkit/status.h"

namespace ptkit::decoder {

TscClock TscClockFromMetadata(const RecordingMetadata& metadata) {
  TscClock clock;
  if (std::optional<TscConversion> c = metadata.PerfTimeConversion()) {
    // ns = tsc * time_mult / 2^time_shift (FromJson checked time_shift < 64).
    clock.perf = c;
    clock.tsc_hz = 1e9 * static_cast<double>(uint64_t{1} << c->time_shift) / c->time_mult;
    clock.hz_source = "time_conversion";
    return clock;
  }
  if (metadata.cpu && metadata.cpu->cpuid_15h) {
    // Intel SDM vol. 2A, CPUID leaf 15H: TSC Hz = crystal Hz * EBX / EAX.
    const Cpuid15hMetadata& leaf = *metadata.cpu->cpuid_15h;
    const uint64_t num = leaf.tsc_ratio_numerator.value_or(0);
    const uint64_t den = leaf.tsc_ratio_denominator.value_or(0);
    const uint64_t crystal = leaf.crystal_hz.value_or(0);
    if (num != 0 && den != 0 && crystal != 0) {
      clock.tsc_hz = static_cast<double>(crystal) * static_cast<double>(num) / den;
      clock.hz_source = "cpuid_15h";
      return clock;
    }
  }
  if (metadata.pmu) {
    if (uint64_t hz = metadata.pmu->nominal_frequency_hz.value_or(0); hz != 0) {
      clock.tsc_hz = static_cast<double>(hz);
      clock.hz_source = "nominal_frequency";
    }
  }
  return clock;
}

TscClock TscClockFromConfig(const TraceConfig& config) {
  TscClock clock;
  if (config.nom_freq != 0) {
    clock.tsc_hz = config.nom_freq * 100e6;
    clock.hz_source = "nom_freq";
  }
  return clock;
}

absl::StatusOr<TscClock> ReadTscClock(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader, ContainerReader::Open(path));
  reader.ReadOnly(RecordType::kMetadata);  // the trace is decompressed once, by the decode
  nlohmann::json merged = nlohmann::json::object();
  RecordView record;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(record));
    if (!more) break;
    if (record.type != RecordType::kMetadata) continue;
    // A malformed record is skipped here; DecodeContainer warns about it.
    if (absl::StatusOr<nlohmann::json> j = ParseMetadataRecord(record.payload); j.ok()) {
      MergeMetadata(merged, *j);
    }
  }
  PTKIT_ASSIGN_OR_RETURN(RecordingMetadata metadata, ReadMergedMetadata(path, merged));
  return TscClockFromMetadata(metadata);
}

std::string FormatPerfTime(uint64_t ns) {
  return fmt::format("{}.{:09}", ns / 1000000000, ns % 1000000000);
}

}  // namespace ptkit::decoder
