#include "decoder/container_input.h"

#include <memory>
#include <utility>

#include "decoder/perf_data_input.h"
#include "decoder/tsc_clock.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "ptkit/sideband.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

perf::SampleIdLayout LayoutFromMetadata(const nlohmann::json& metadata) {
  perf::SampleIdLayout layout;
  if (metadata.contains("attrs") && metadata["attrs"].is_array()) {
    for (const auto& a : metadata["attrs"]) {
      if (a.value("sample_id_all", false)) {
        layout.sample_type = a.value("sample_type", uint64_t{0});
        layout.sample_id_all = true;
        return layout;
      }
    }
  }
  return layout;
}

std::optional<TscConversion> TimeConversionFromMetadata(const nlohmann::json& metadata) {
  if (!metadata.contains("time_conversion") || !metadata["time_conversion"].is_object()) {
    return std::nullopt;
  }
  const auto& tc = metadata["time_conversion"];
  if (!tc.value("cap_user_time_zero", false)) return std::nullopt;
  TscConversion c;
  c.time_zero = tc.value("time_zero", uint64_t{0});
  c.time_mult = tc.value("time_mult", 0u);
  c.time_shift = static_cast<uint16_t>(tc.value("time_shift", 0u));
  if (c.time_mult == 0) return std::nullopt;
  return c;
}

}  // namespace

TraceConfig TraceConfigFromMetadata(const nlohmann::json& metadata) {
  TraceConfig config;
  if (!metadata.is_object()) return config;
  if (metadata.contains("cpu") && metadata["cpu"].is_object()) {
    const auto& cpu = metadata["cpu"];
    if (cpu.value("vendor", std::string()) == "GenuineIntel") {
      pt_cpu c = {};
      c.vendor = pcv_intel;
      c.family = static_cast<uint16_t>(cpu.value("family", 0u));
      c.model = static_cast<uint8_t>(cpu.value("model", 0u));
      c.stepping = static_cast<uint8_t>(cpu.value("stepping", 0u));
      pt_errata errata;
      if (pt_cpu_errata(&errata, &c) >= 0) config.cpu = c;
    }
    if (cpu.contains("cpuid_15h") && cpu["cpuid_15h"].is_object()) {
      config.cpuid_0x15_eax = cpu["cpuid_15h"].value("tsc_ratio_denominator", 0u);
      config.cpuid_0x15_ebx = cpu["cpuid_15h"].value("tsc_ratio_numerator", 0u);
    }
  }
  if (metadata.contains("pmu") && metadata["pmu"].is_object()) {
    const auto& pmu = metadata["pmu"];
    config.nom_freq = static_cast<uint8_t>(pmu.value("max_nonturbo_ratio", 0u));
    uint64_t type = pmu.value("type", uint64_t{0});
    if (metadata.contains("attrs") && metadata["attrs"].is_array()) {
      for (const auto& a : metadata["attrs"]) {
        if (a.value("type", uint64_t{~0ull}) == type) {
          config.mtc_freq = static_cast<uint8_t>((a.value("config", uint64_t{0}) >> 14) & 0xf);
          break;
        }
      }
    }
  }
  return config;
}

bool IsBtsRecording(const nlohmann::json& metadata) {
  if (!metadata.is_object()) return false;
  auto named = [&](const char* object, const char* key, const char* value) {
    auto it = metadata.find(object);
    return it != metadata.end() && it->is_object() && it->value(key, std::string()) == value;
  };
  return named("pmu", "name", "intel_bts") || named("emulation", "format", "bts");
}

absl::StatusOr<Recording> ReadRecording(ContainerReader& reader, const RecordingOptions& options) {
  const std::string& path = reader.name();
  RecordingBuilder builder(path, options);
  Recording& r = builder.recording();
  std::unique_ptr<SidebandBuilder> sideband;
  RecordView rec;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(rec));
    if (!more) break;
    switch (rec.type) {
      case RecordType::kMetadata: {
        auto j = nlohmann::json::parse(rec.payload.begin(), rec.payload.end(), nullptr, false);
        if (j.is_object()) r.metadata = std::move(j);
        break;
      }
      case RecordType::kSideband: {
        auto sb = ParseSideband(rec.payload);
        if (!sb.ok()) break;  // info reports malformed records; decoding goes on
        if (!sideband) sideband = std::make_unique<SidebandBuilder>(LayoutFromMetadata(r.metadata));
        sideband->Add(sb->cpu, sb->records);
        break;
      }
      case RecordType::kAux: {
        auto aux = ParseAux(rec.payload);
        if (!aux.ok()) break;
        PTKIT_RETURN_IF_ERROR(
            builder.AddAux(aux->stream, aux->aux_offset, aux->time, aux->data, aux->flags));
        break;
      }
      case RecordType::kLoss: {
        auto loss = ParseLoss(rec.payload);
        if (!loss.ok()) break;
        if (loss->kind == LossKind::kLostSideband) {
          builder.AddLostSideband(loss->stream, LossKindName(loss->kind));
        } else {
          builder.AddLoss(loss->stream, LossKindName(loss->kind), loss->aux_offset, loss->bytes);
        }
        break;
      }
      case RecordType::kSnapshot: {
        auto snap = ParseSnapshot(rec.payload);
        if (!snap.ok()) break;
        PTKIT_RETURN_IF_ERROR(builder.AddSnapshot(snap->stream, snap->sequence, snap->aux_head,
                                                  snap->time, snap->data));
        break;
      }
      case RecordType::kCode: {
        auto code = ParseCode(rec.payload);
        if (!code.ok() || code->bytes.empty()) break;
        r.captured[code->pid].push_back(
            {code->address, std::string(code->path),
             std::vector<uint8_t>(code->bytes.begin(), code->bytes.end())});
        break;
      }
      default:
        break;
    }
  }
  if (sideband) r.timeline = sideband->Build();
  // Damage in the file: whatever it held (trace, sideband) is missing from the decode.
  const ReadReport& report = reader.report();
  for (const Damage& d : report.damage) {
    r.warnings.push_back(fmt::format(
        "{}: {} damaged bytes at offset {} ({}; {} record(s) lost): what they held is missing "
        "from this decode (ptdecode info {} shows the damage)",
        path, d.bytes, d.offset, d.reason, d.records, path));
  }
  for (const std::string& p : r.timeline.problems()) {
    r.warnings.push_back(fmt::format("{}: malformed sideband record: {}: skipped", path, p));
  }
  r.time = TimeConversionFromMetadata(r.metadata);
  r.bts = IsBtsRecording(r.metadata);
  r.config = TraceConfigFromMetadata(r.metadata);
  Recording done = builder.Finish();
  if (!report.footer_present) {
    done.warnings.push_back(fmt::format(
        "{}: no footer: the recording did not finish cleanly (ptrecord was killed or the file "
        "is cut), so what it had not written yet is missing",
        path));
  }
  return done;
}

absl::StatusOr<Recording> OpenRecording(const std::string& path, const RecordingOptions& options) {
  // An unreadable file gets the container reader's error.
  if (absl::StatusOr<bool> perf = IsPerfDataFile(path); perf.ok() && *perf) {
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenFileSource(path));
    return ReadPerfDataRecording(*source, options);
  }
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader, ContainerReader::Open(path));
  return ReadRecording(reader, options);
}

absl::StatusOr<TscClock> ReadRecordingClock(const std::string& path) {
  if (absl::StatusOr<bool> perf = IsPerfDataFile(path); perf.ok() && *perf) {
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenFileSource(path));
    PTKIT_ASSIGN_OR_RETURN(perf::PerfData data, perf::ReadPerfData(*source));
    return TscClockFromMetadata(PerfDataMetadata(data));
  }
  return ReadTscClock(path);
}

absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  return DecodeRecording(r, options, sink);
}

absl::Status DumpContainerPackets(const std::string& path, const ContainerOptions& options,
                                  std::FILE* out, const OutputOptions& output) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  return DumpRecordingPackets(r, options, out, output);
}

absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  return DecodeRecordingSummary(r, options);
}

}  // namespace ptkit::decoder
