#include "decoder/tsc_clock.h"

#include "fmt/format.h"
#include "ptkit/container_reader.h"
#include "ptkit/status.h"

namespace ptkit::decoder {

TscClock TscClockFromMetadata(const nlohmann::json& metadata) {
  TscClock clock;
  if (!metadata.is_object()) return clock;
  if (auto tc = metadata.find("time_conversion"); tc != metadata.end() && tc->is_object()) {
    TscConversion c;
    c.time_zero = tc->value("time_zero", uint64_t{0});
    c.time_mult = tc->value("time_mult", 0u);
    c.time_shift = static_cast<uint16_t>(tc->value("time_shift", 0u));
    // The kernel sets cap_user_time_zero when time_zero is valid (<linux/perf_event.h>); a
    // shift of 64 or more would be undefined in ToPerfTime.
    if (tc->value("cap_user_time_zero", false) && c.time_mult != 0 && c.time_shift < 64) {
      clock.perf = c;
      // ns = tsc * time_mult / 2^time_shift.
      clock.tsc_hz = 1e9 * static_cast<double>(uint64_t{1} << c.time_shift) / c.time_mult;
      clock.hz_source = "time_conversion";
      return clock;
    }
  }
  if (auto cpu = metadata.find("cpu"); cpu != metadata.end() && cpu->is_object()) {
    if (auto leaf = cpu->find("cpuid_15h"); leaf != cpu->end() && leaf->is_object()) {
      // Intel SDM vol. 2A, CPUID leaf 15H: TSC Hz = crystal Hz * EBX / EAX.
      const uint64_t num = leaf->value("tsc_ratio_numerator", uint64_t{0});
      const uint64_t den = leaf->value("tsc_ratio_denominator", uint64_t{0});
      const uint64_t crystal = leaf->value("crystal_hz", uint64_t{0});
      if (num != 0 && den != 0 && crystal != 0) {
        clock.tsc_hz = static_cast<double>(crystal) * static_cast<double>(num) / den;
        clock.hz_source = "cpuid_15h";
        return clock;
      }
    }
  }
  if (auto pmu = metadata.find("pmu"); pmu != metadata.end() && pmu->is_object()) {
    if (uint64_t hz = pmu->value("nominal_frequency_hz", uint64_t{0}); hz != 0) {
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
  RecordView record;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(record));
    if (!more) return TscClock{};
    if (record.type == RecordType::kMetadata) {
      auto json = nlohmann::json::parse(record.payload.begin(), record.payload.end(), nullptr,
                                        /*allow_exceptions=*/false);
      return TscClockFromMetadata(json);
    }
    // The recorder writes the metadata before any trace data.
    if (record.type == RecordType::kAux || record.type == RecordType::kSnapshot) {
      return TscClock{};
    }
  }
}

std::string FormatPerfTime(uint64_t ns) {
  return fmt::format("{}.{:09}", ns / 1000000000, ns % 1000000000);
}

}  // namespace ptkit::decoder
