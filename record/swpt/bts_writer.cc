#include "record/swpt/bts_writer.h"

#include <cstring>

namespace ptkit::swpt {

void BtsWriter::Put(uint64_t from, uint64_t to) {
  BtsRecord record{from, to, 0};
  size_t at = out_.size();
  out_.resize(at + sizeof(record));
  std::memcpy(out_.data() + at, &record, sizeof(record));  // x86-64: little-endian.
  ++records_;
}

void BtsWriter::Add(const Event& e) {
  switch (e.kind) {
    case EventKind::kCondBranch:
      if (e.taken) Put(e.ip, e.target);
      return;
    case EventKind::kDirectJump:
    case EventKind::kDirectCall:
    case EventKind::kIndirectJump:
    case EventKind::kIndirectCall:
    case EventKind::kReturn:
    case EventKind::kFarBranch:
    case EventKind::kInterrupt:
      Put(e.ip, e.target);
      return;
    case EventKind::kDisable:
      Put(e.ip, e.suppress_ip ? 0 : e.target);
      return;
    case EventKind::kEnable:
      Put(0, e.target);
      return;
    case EventKind::kAsyncDisable:
    case EventKind::kModeChange:
    case EventKind::kTick:
    case EventKind::kTime:
    case EventKind::kOverflow:
      return;
  }
}

std::vector<uint8_t> BtsWriter::TakeBytes() {
  std::vector<uint8_t> result;
  result.swap(out_);
  return result;
}

std::vector<BtsRecord> BtsWriter::Parse(const uint8_t* data, size_t size) {
  std::vector<BtsRecord> records(size / sizeof(BtsRecord));
  if (!records.empty()) std::memcpy(records.data(), data, records.size() * sizeof(BtsRecord));
  return records;
}

}  // namespace ptkit::swpt
