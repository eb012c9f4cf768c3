// Fuzzes ContainerReader and every payload parser with arbitrary files. The reader must never
// crash, never allocate from an unchecked length, and account every byte it skips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "ptkit/container_reader.h"
#include "ptkit/recording_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto reader = ptkit::ContainerReader::Open(
      ptkit::MemorySource(std::span<const uint8_t>(data, size), "fuzz.pt"));
  if (!reader.ok()) return 0;
  ptkit::RecordView v;
  uint64_t returned_bytes = 0;
  for (;;) {
    auto more = reader->Next(v);
    if (!more.ok() || !*more) break;
    returned_bytes += v.stored_bytes;
    switch (v.type) {
      case ptkit::RecordType::kSideband:
        (void)ptkit::ParseSideband(v.payload);
        break;
      case ptkit::RecordType::kAux:
        (void)ptkit::ParseAux(v.payload);
        break;
      case ptkit::RecordType::kLoss:
        (void)ptkit::ParseLoss(v.payload);
        break;
      case ptkit::RecordType::kSnapshot:
        (void)ptkit::ParseSnapshot(v.payload);
        break;
      case ptkit::RecordType::kCode:
        (void)ptkit::ParseCode(v.payload);
        break;
      case ptkit::RecordType::kCounters:
        (void)ptkit::ParseCounters(v.payload);
        break;
      case ptkit::RecordType::kSample:
        (void)ptkit::ParseSample(v.payload);
        break;
      case ptkit::RecordType::kPerfFeature:
        (void)ptkit::ParsePerfFeature(v.payload);
        break;
      case ptkit::RecordType::kFooter:
        (void)ptkit::ParseFooter(v.payload);
        break;
      case ptkit::RecordType::kMetadata:
        // The typed reader: what it writes it reads back the same (the older "emulated": true
        // is written in the newer form, so the first ToJson may differ from the input).
        if (auto json = ptkit::ParseMetadataRecord(v.payload); json.ok()) {
          if (auto m = ptkit::RecordingMetadata::FromJson(*json); m.ok()) {
            const nlohmann::json once = m->ToJson();
            auto again = ptkit::RecordingMetadata::FromJson(once);
            if (!again.ok() || again->ToJson() != once) std::abort();
          }
        }
        break;
    }
  }
  // Every byte is either in a returned record, in a skipped record, or reported as damage.
  const ptkit::ReadReport& r = reader->report();
  if (returned_bytes + r.lost_bytes() > size) std::abort();
  return 0;
}
