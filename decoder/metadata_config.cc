#include "decoder/metadata_config.h"

#include "fmt/format.h"
#include "intel-pt.h"

namespace ptkit::decoder {

TraceConfig TraceConfigFromMetadata(const RecordingMetadata& metadata) {
  TraceConfig config;
  if (const std::optional<CpuMetadata>& cpu = metadata.cpu) {
    if (cpu->vendor == "GenuineIntel") {
      pt_cpu c = {};
      c.vendor = pcv_intel;
      // FromJson checked the ranges (family 16 bits, model and stepping 8).
      c.family = static_cast<uint16_t>(cpu->family.value_or(0));
      c.model = static_cast<uint8_t>(cpu->model.value_or(0));
      c.stepping = static_cast<uint8_t>(cpu->stepping.value_or(0));
      pt_errata errata;
      if (pt_cpu_errata(&errata, &c) >= 0) config.cpu = c;
    }
    if (cpu->cpuid_15h) {
      config.cpuid_0x15_eax = cpu->cpuid_15h->tsc_ratio_denominator.value_or(0);
      config.cpuid_0x15_ebx = cpu->cpuid_15h->tsc_ratio_numerator.value_or(0);
    }
  }
  if (metadata.pmu) {
    config.nom_freq = static_cast<uint8_t>(metadata.pmu->max_nonturbo_ratio.value_or(0));
    if (const AttrMetadata* attr = metadata.TraceAttr()) {
      // IA32_RTIT_CTL.MTCFreq is config:14-17 in every kernel so far; a recorded format says
      // where this one put it.
      PmuFormatMetadata mtc{.word = 0, .mask = uint64_t{0xf} << 14};
      if (metadata.pmu->formats) {
        if (auto it = metadata.pmu->formats->find("mtc_period");
            it != metadata.pmu->formats->end()) {
          mtc = it->second;
        }
      }
      config.mtc_freq = static_cast<uint8_t>(mtc.Extract(attr->ToAttr()).value_or(0) & 0xf);
    }
  }
  return config;
}

bool IsBtsRecording(const RecordingMetadata& metadata) {
  return (metadata.pmu && metadata.pmu->name == "intel_bts") ||
         (metadata.emulation && metadata.emulation->format == "bts");
}

perf::SampleIdLayout LayoutFromMetadata(const RecordingMetadata& metadata) {
  perf::SampleIdLayout layout;
  if (!metadata.attrs) return layout;
  for (const AttrMetadata& a : *metadata.attrs) {
    if (a.sample_id_all.value_or(false)) {
      layout.sample_type = a.sample_type.value_or(0);
      layout.sample_id_all = true;
      return layout;
    }
  }
  return layout;
}

void MergeMetadataRecord(const std::string& path, uint64_t offset, std::span<const uint8_t> payload,
                         nlohmann::json& merged, std::vector<std::string>& warnings) {
  absl::StatusOr<nlohmann::json> j = ParseMetadataRecord(payload);
  if (j.ok()) {
    MergeMetadata(merged, *j);
    return;
  }
  warnings.push_back(fmt::format("{}: the metadata record at offset {} is ignored: {}", path,
                                 offset, std::string(j.status().message())));
}

absl::StatusOr<RecordingMetadata> ReadMergedMetadata(const std::string& path,
                                                     const nlohmann::json& merged) {
  absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson(merged);
  if (!m.ok()) {
    return absl::DataLossError(
        fmt::format("{}: {}: decoding needs it (ptdecode info {} shows the metadata)", path,
                    std::string(m.status().message()), path));
  }
  return m;
}

}  // namespace ptkit::decoder
