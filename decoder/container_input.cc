#include "decoder/container_input.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "decoder/metadata_config.h"
#include "decoder/parallel_decode.h"
#include "decoder/perf_data_input.h"
#include "decoder/tsc_clock.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "ptkit/sideband.h"
#include "ptkit/status.h"

namespace ptkit::decoder {

absl::StatusOr<Recording> ReadRecording(ContainerReader& reader, const RecordingOptions& options) {
  const std::string& path = reader.name();
  RecordingBuilder builder(path, options);
  Recording& r = builder.recording();
  std::unique_ptr<SidebandBuilder> sideband;
  perf::SampleIdLayout layout{0, false};
  nlohmann::json metadata = nlohmann::json::object();  // the records so far, merged
  RecordView rec;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(rec));
    if (!more) break;
    switch (rec.type) {
      case RecordType::kMetadata: {
        MergeMetadataRecord(path, rec.offset, rec.payload, metadata, r.warnings);
        break;
      }
      case RecordType::kSideband: {
        auto sb = ParseSideband(rec.payload);
        if (!sb.ok()) break;  // info reports malformed records; decoding goes on
        if (!sideband) {
          // The recorder writes the metadata first: the layout is that of the attrs so far.
          PTKIT_ASSIGN_OR_RETURN(RecordingMetadata m, ReadMergedMetadata(path, metadata));
          layout = LayoutFromMetadata(m);
          sideband = std::make_unique<SidebandBuilder>(layout);
        }
        sideband->Add(sb->cpu, sb->records);
        PTKIT_RETURN_IF_ERROR(builder.AddTextPokes(sb->records, layout));
        r.sideband.push_back(
            {sb->cpu, layout, std::vector<uint8_t>(sb->records.begin(), sb->records.end())});
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
          builder.CountLostSideband(loss->count);
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
      case RecordType::kSample: {
        auto sample = ParseSample(rec.payload);
        if (!sample.ok()) break;
        PTKIT_RETURN_IF_ERROR(
            builder.AddSample(sample->stream, sample->sample_type, sample->record));
        break;
      }
      case RecordType::kPerfFeature: {
        auto f = ParsePerfFeature(rec.payload);
        if (!f.ok()) break;
        if (!perf::KeptAsBytes(f->id)) {
          r.warnings.push_back(absl::StrCat("a perf-feature record of ",
                                            perf::PerfFeatureName(f->id),
                                            ", which an export writes itself: left out"));
          break;
        }
        std::erase_if(r.perf_features, [&](const perf::KeptFeature& k) { return k.id == f->id; });
        r.perf_features.push_back({f->id, std::vector<uint8_t>(f->bytes.begin(), f->bytes.end())});
        break;
      }
      case RecordType::kCode: {
        auto code = ParseCode(rec.payload);
        if (!code.ok()) break;
        if (code->flags & kCodeArchivedFile) {
          PTKIT_RETURN_IF_ERROR(builder.AddArchivedFile(
              std::string(code->path),
              std::vector<uint8_t>(code->build_id.begin(), code->build_id.end()), code->bytes,
              (code->flags & kCodeDebugFile) != 0));
          break;
        }
        if (code->flags & kCodeKernelTable) {
          r.kernel_tables[std::string(code->path)] =
              std::string(code->bytes.begin(), code->bytes.end());
          break;
        }
        if (code->bytes.empty()) {
          // A file's identity: its build-id finds it in the build-id cache, as perf.data's; a
          // file without one has the hash of its bytes.
          if (code->flags & kCodeContentHash) {
            if (std::optional<uint64_t> hash = DecodeContentHash(code->build_id)) {
              r.content_hashes.emplace(std::string(code->path), *hash);
            }
          } else if (!code->build_id.empty()) {
            r.build_ids.emplace(std::string(code->path),
                                std::vector<uint8_t>(code->build_id.begin(), code->build_id.end()));
          }
          break;
        }
        PTKIT_RETURN_IF_ERROR(builder.AddCode(
            code->pid, code->address, std::string(code->path), code->bytes, code->pgoff,
            code->flags, std::vector<uint8_t>(code->build_id.begin(), code->build_id.end())));
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
  // Records of a kind this ptdecode does not know (a newer ptkit's), skipped.
  for (const std::string& w : report.warnings) {
    r.warnings.push_back(fmt::format(
        "{}: {}: what it held is not in this decode (a newer ptdecode may read it)", path, w));
  }
  for (const std::string& p : r.timeline.problems()) {
    r.warnings.push_back(fmt::format("{}: malformed sideband record: {}: skipped", path, p));
  }
  PTKIT_ASSIGN_OR_RETURN(r.metadata, ReadMergedMetadata(path, metadata));
  for (const std::string& w : r.metadata.warnings)
    r.warnings.push_back(absl::StrCat(path, ": ", w));
  r.time = r.metadata.PerfTimeConversion();
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
  // With -j N > 1, the records are read and decompressed on a second thread while this one
  // spools them: it is the serial start of every parallel decode.
  if (GetParallelOptions().jobs > 1) reader.ReadAhead();
  return ReadRecording(reader, options);
}

absl::StatusOr<TscClock> ReadRecordingClock(const std::string& path) {
  if (absl::StatusOr<bool> perf = IsPerfDataFile(path); perf.ok() && *perf) {
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenFileSource(path));
    PTKIT_ASSIGN_OR_RETURN(perf::PerfData data, perf::ReadPerfData(*source));
    PTKIT_ASSIGN_OR_RETURN(RecordingMetadata metadata,
                           ReadMergedMetadata(path, PerfDataMetadata(data)));
    return TscClockFromMetadata(metadata);
  }
  return ReadTscClock(path);
}

absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  return DecodeRecording(r, options, sink);
}

absl::Status DumpContainerPackets(const std::string& path, const ContainerOptions& options,
                                  std::FILE* out, const OutputOptions& output,
                                  PacketsSummary* summary) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  uint64_t bytes = 0;
  PTKIT_RETURN_IF_ERROR(DumpRecordingPackets(r, options, out, output, &bytes));
  if (summary != nullptr) *summary = {bytes, r.warnings};
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options) {
  PTKIT_ASSIGN_OR_RETURN(Recording r, OpenRecording(path, options));
  return DecodeRecordingSummary(r, options);
}

}  // namespace ptkit::decoder
