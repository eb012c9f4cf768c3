#include "ptkit/container_format.h"

#include <xxhash.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytes.h"
#include "ptkit/status.h"

namespace ptkit {
namespace {

using internal::ByteReader;
using internal::ByteWriter;
using internal::Load;
using internal::Store;

constexpr size_t kHeaderCheckedBytes = 44;

uint32_t HeaderCheck(const uint8_t* p) {
  return static_cast<uint32_t>(XXH3_64bits(p, kHeaderCheckedBytes));
}

absl::Status Malformed(const std::string& kind, const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed ", kind, " record: ", what));
}

void PutStream(ByteWriter& w, const StreamId& s) { w.Put<uint32_t>(static_cast<uint32_t>(s.kind)); }

absl::StatusOr<StreamKind> ParseStreamKind(uint32_t v, const std::string& kind) {
  if (v > static_cast<uint32_t>(StreamKind::kThread)) {
    return Malformed(kind, absl::StrCat("unknown stream kind ", v));
  }
  return static_cast<StreamKind>(v);
}

}  // namespace

std::string RecordTypeName(uint16_t type) {
  switch (static_cast<RecordType>(type)) {
    case RecordType::kMetadata:
      return "metadata";
    case RecordType::kSideband:
      return "sideband";
    case RecordType::kAux:
      return "aux";
    case RecordType::kLoss:
      return "loss";
    case RecordType::kSnapshot:
      return "snapshot";
    case RecordType::kCode:
      return "code";
    case RecordType::kCounters:
      return "counters";
    case RecordType::kFooter:
      return "footer";
    case RecordType::kSample:
      return "sample";
    case RecordType::kPerfFeature:
      return "perf-feature";
  }
  return absl::StrCat("unknown-", type);
}

std::string StreamName(const StreamId& s) {
  return absl::StrCat(s.kind == StreamKind::kCpu ? "cpu " : "tid ", s.id);
}

std::string LossKindName(LossKind k) {
  switch (k) {
    case LossKind::kLostSideband:
      return "lost-sideband";
    case LossKind::kAuxTruncated:
      return "aux-truncated";
    case LossKind::kAuxCollision:
      return "aux-collision";
    case LossKind::kAuxPartial:
      return "aux-partial";
    case LossKind::kAuxOverwritten:
      return "aux-overwritten";
    case LossKind::kKilled:
      return "killed";
    case LossKind::kOther:
      return "other";
  }
  return absl::StrCat("loss-", static_cast<uint32_t>(k));
}

void EncodeFileHeader(std::span<uint8_t, kFileHeaderSize> out) {
  std::copy(kFileMagic.begin(), kFileMagic.end(), out.begin());
  Store<uint32_t>(out.data() + 8, kFormatVersion);
  Store<uint32_t>(out.data() + 12, kFileHeaderSize);
}

absl::Status CheckFileHeader(std::span<const uint8_t, kFileHeaderSize> in) {
  if (!std::equal(kFileMagic.begin(), kFileMagic.end(), in.begin())) {
    return absl::InvalidArgumentError("not a ptkit container (wrong magic)");
  }
  uint32_t version = Load<uint32_t>(in.data() + 8);
  if (version > kFormatVersion) {
    return absl::UnimplementedError(
        absl::StrFormat("container format version %u is newer than this ptkit reads (%u): "
                        "use a newer ptkit",
                        version, kFormatVersion));
  }
  if (version == 0 || Load<uint32_t>(in.data() + 12) != kFileHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("not a ptkit container (version %u, header size %u)", version,
                        Load<uint32_t>(in.data() + 12)));
  }
  return absl::OkStatus();
}

void EncodeFrameHeader(const FrameHeader& h, std::span<uint8_t, kFrameHeaderSize> out) {
  uint8_t* p = out.data();
  Store<uint32_t>(p + 0, kFrameSync);
  Store<uint16_t>(p + 4, h.type);
  Store<uint16_t>(p + 6, h.flags);
  Store<uint64_t>(p + 8, h.sequence);
  Store<uint64_t>(p + 16, h.stored_size);
  Store<uint64_t>(p + 24, h.raw_size);
  Store<uint64_t>(p + 32, h.checksum);
  Store<uint32_t>(p + 40, 0);
  Store<uint32_t>(p + 44, HeaderCheck(p));
}

absl::StatusOr<FrameHeader> ParseFrameHeader(std::span<const uint8_t, kFrameHeaderSize> in) {
  const uint8_t* p = in.data();
  if (Load<uint32_t>(p) != kFrameSync) return absl::DataLossError("no record sync word");
  if (Load<uint32_t>(p + 44) != HeaderCheck(p)) {
    return absl::DataLossError("record header check mismatch");
  }
  FrameHeader h;
  h.type = Load<uint16_t>(p + 4);
  h.flags = Load<uint16_t>(p + 6);
  h.sequence = Load<uint64_t>(p + 8);
  h.stored_size = Load<uint64_t>(p + 16);
  h.raw_size = Load<uint64_t>(p + 24);
  h.checksum = Load<uint64_t>(p + 32);
  return h;
}

// --- Payloads --------------------------------------------------------------------------------

std::vector<uint8_t> EncodeSideband(const SidebandRecord& r, std::vector<uint8_t> reuse) {
  ByteWriter w(8 + r.records.size(), std::move(reuse));
  w.Put<int32_t>(r.cpu);
  w.Put<uint32_t>(0);
  w.PutBytes(r.records);
  return w.Take();
}

absl::StatusOr<SidebandRecord> ParseSideband(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  SidebandRecord s;
  s.cpu = r.Get<int32_t>();
  r.Get<uint32_t>();
  if (!r.ok()) return Malformed("sideband", "payload shorter than its 8-byte header");
  s.records = r.Rest();
  return s;
}

std::vector<uint8_t> EncodeAux(const AuxRecord& a, std::vector<uint8_t> reuse) {
  ByteWriter w(48 + a.data.size(), std::move(reuse));
  PutStream(w, a.stream);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(a.stream.id);
  w.Put<uint64_t>(a.aux_offset);
  w.Put<uint64_t>(a.flags);
  w.Put<uint64_t>(a.time);
  w.Put<uint64_t>(a.data.size());
  w.PutBytes(a.data);
  return w.Take();
}

absl::StatusOr<AuxRecord> ParseAux(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  AuxRecord a;
  uint32_t kind = r.Get<uint32_t>();
  r.Get<uint32_t>();
  a.stream.id = r.Get<uint64_t>();
  a.aux_offset = r.Get<uint64_t>();
  a.flags = r.Get<uint64_t>();
  a.time = r.Get<uint64_t>();
  uint64_t size = r.Get<uint64_t>();
  if (!r.ok()) return Malformed("aux", "payload shorter than its 48-byte header");
  PTKIT_ASSIGN_OR_RETURN(a.stream.kind, ParseStreamKind(kind, "aux"));
  if (size != r.remaining()) {
    return Malformed("aux",
                     absl::StrCat("size field ", size, " but ", r.remaining(), " data bytes"));
  }
  a.data = r.Rest();
  return a;
}

std::vector<uint8_t> EncodeLoss(const LossRecord& l, std::vector<uint8_t> reuse) {
  ByteWriter w(48, std::move(reuse));
  PutStream(w, l.stream);
  w.Put<uint32_t>(static_cast<uint32_t>(l.kind));
  w.Put<uint64_t>(l.stream.id);
  w.Put<uint64_t>(l.count);
  w.Put<uint64_t>(l.bytes);
  w.Put<uint64_t>(l.time);
  w.Put<uint64_t>(l.aux_offset);
  return w.Take();
}

absl::StatusOr<LossRecord> ParseLoss(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  LossRecord l;
  uint32_t kind = r.Get<uint32_t>();
  l.kind = static_cast<LossKind>(r.Get<uint32_t>());
  l.stream.id = r.Get<uint64_t>();
  l.count = r.Get<uint64_t>();
  l.bytes = r.Get<uint64_t>();
  l.time = r.Get<uint64_t>();
  l.aux_offset = r.Get<uint64_t>();
  if (!r.ok()) return Malformed("loss", "payload shorter than 48 bytes");
  PTKIT_ASSIGN_OR_RETURN(l.stream.kind, ParseStreamKind(kind, "loss"));
  return l;
}

std::vector<uint8_t> EncodeSnapshot(const SnapshotRecord& s, std::vector<uint8_t> reuse) {
  ByteWriter w(48 + s.data.size(), std::move(reuse));
  PutStream(w, s.stream);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(s.stream.id);
  w.Put<uint64_t>(s.sequence);
  w.Put<uint64_t>(s.aux_head);
  w.Put<uint64_t>(s.time);
  w.Put<uint64_t>(s.data.size());
  w.PutBytes(s.data);
  return w.Take();
}

absl::StatusOr<SnapshotRecord> ParseSnapshot(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  SnapshotRecord s;
  uint32_t kind = r.Get<uint32_t>();
  r.Get<uint32_t>();
  s.stream.id = r.Get<uint64_t>();
  s.sequence = r.Get<uint64_t>();
  s.aux_head = r.Get<uint64_t>();
  s.time = r.Get<uint64_t>();
  uint64_t size = r.Get<uint64_t>();
  if (!r.ok()) return Malformed("snapshot", "payload shorter than its 48-byte header");
  PTKIT_ASSIGN_OR_RETURN(s.stream.kind, ParseStreamKind(kind, "snapshot"));
  if (size != r.remaining()) {
    return Malformed("snapshot",
                     absl::StrCat("size field ", size, " but ", r.remaining(), " data bytes"));
  }
  s.data = r.Rest();
  return s;
}

std::vector<uint8_t> EncodeSample(const SampleRecord& s, std::vector<uint8_t> reuse) {
  ByteWriter w(24 + s.record.size(), std::move(reuse));
  PutStream(w, s.stream);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(s.stream.id);
  w.Put<uint64_t>(s.sample_type);
  w.PutBytes(s.record);
  return w.Take();
}

absl::StatusOr<SampleRecord> ParseSample(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  SampleRecord s;
  uint32_t kind = r.Get<uint32_t>();
  r.Get<uint32_t>();
  s.stream.id = r.Get<uint64_t>();
  s.sample_type = r.Get<uint64_t>();
  if (!r.ok()) return Malformed("sample", "payload shorter than its 24-byte header");
  PTKIT_ASSIGN_OR_RETURN(s.stream.kind, ParseStreamKind(kind, "sample"));
  s.record = r.Rest();
  // perf_event_header {u32 type; u16 misc; u16 size}: one whole PERF_RECORD_SAMPLE (9).
  if (s.record.size() < 8) return Malformed("sample", "no perf record header");
  const uint32_t type = Load<uint32_t>(s.record.data());
  const uint16_t size = Load<uint16_t>(s.record.data() + 6);
  if (type != 9 || size != s.record.size()) {
    return Malformed("sample", absl::StrCat("perf record of type ", type, " and size ", size,
                                            " in ", s.record.size(),
                                            " bytes (expected one "
                                            "PERF_RECORD_SAMPLE filling the payload)"));
  }
  return s;
}

std::vector<uint8_t> EncodePerfFeature(const PerfFeatureRecord& f, std::vector<uint8_t> reuse) {
  ByteWriter w(8 + f.bytes.size(), std::move(reuse));
  w.Put<uint32_t>(f.id);
  w.Put<uint32_t>(0);
  w.PutBytes(f.bytes);
  return w.Take();
}

absl::StatusOr<PerfFeatureRecord> ParsePerfFeature(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  PerfFeatureRecord f;
  f.id = r.Get<uint32_t>();
  r.Get<uint32_t>();
  if (!r.ok()) return Malformed("perf-feature", "payload shorter than its 8-byte header");
  // perf's feature bitmap has 256 bits; bit 0 is reserved.
  if (f.id == 0 || f.id > 255) {
    return Malformed("perf-feature", absl::StrCat("feature id ", f.id, " is not 1 to 255"));
  }
  f.bytes = r.Rest();
  return f;
}

std::vector<uint8_t> EncodeContentHash(uint64_t hash) {
  std::vector<uint8_t> out(sizeof(hash));
  Store<uint64_t>(out.data(), hash);
  return out;
}

std::optional<uint64_t> DecodeContentHash(std::span<const uint8_t> bytes) {
  if (bytes.size() != sizeof(uint64_t)) return std::nullopt;
  return Load<uint64_t>(bytes.data());
}

std::vector<uint8_t> EncodeCode(const CodeRecord& c, std::vector<uint8_t> reuse) {
  ByteWriter w(40 + c.path.size() + c.build_id.size() + c.bytes.size(), std::move(reuse));
  w.Put<uint32_t>(c.pid);
  w.Put<uint32_t>(c.flags);
  w.Put<uint64_t>(c.address);
  w.Put<uint64_t>(c.pgoff);
  w.Put<uint32_t>(static_cast<uint32_t>(c.path.size()));
  w.Put<uint32_t>(static_cast<uint32_t>(c.build_id.size()));
  w.Put<uint64_t>(c.bytes.size());
  w.PutBytes(c.path);
  w.PutBytes(c.build_id);
  w.PutBytes(c.bytes);
  return w.Take();
}

absl::StatusOr<CodeRecord> ParseCode(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  CodeRecord c;
  c.pid = r.Get<uint32_t>();
  c.flags = r.Get<uint32_t>();
  c.address = r.Get<uint64_t>();
  c.pgoff = r.Get<uint64_t>();
  uint32_t path_len = r.Get<uint32_t>();
  uint32_t build_id_len = r.Get<uint32_t>();
  uint64_t size = r.Get<uint64_t>();
  if (!r.ok()) return Malformed("code", "payload shorter than its 40-byte header");
  auto path = r.GetBytes(path_len);
  c.build_id = r.GetBytes(build_id_len);
  if (!r.ok() || r.remaining() != size) {
    return Malformed("code", absl::StrCat("lengths (path ", path_len, ", build-id ", build_id_len,
                                          ", bytes ", size, ") do not match the payload"));
  }
  c.path = std::string_view(reinterpret_cast<const char*>(path.data()), path.size());
  c.bytes = r.Rest();
  return c;
}

std::vector<uint8_t> EncodeCounters(std::span<const CounterValue> values,
                                    std::vector<uint8_t> reuse) {
  ByteWriter w(4 + values.size() * 40, std::move(reuse));
  w.Put<uint32_t>(static_cast<uint32_t>(values.size()));
  for (const CounterValue& v : values) {
    w.Put<uint32_t>(static_cast<uint32_t>(v.name.size()));
    w.Put<int32_t>(v.cpu);
    w.Put<uint64_t>(v.value);
    w.Put<uint64_t>(v.time_enabled);
    w.Put<uint64_t>(v.time_running);
    w.PutBytes(v.name);
  }
  return w.Take();
}

absl::StatusOr<std::vector<CounterValue>> ParseCounters(std::span<const uint8_t> payload) {
  constexpr size_t kEntryFixed = 32;
  ByteReader r(payload);
  uint32_t count = r.Get<uint32_t>();
  if (!r.ok() || count > r.remaining() / kEntryFixed) {
    return Malformed("counters", absl::StrCat("count ", count, " does not fit the payload"));
  }
  std::vector<CounterValue> values(count);
  for (CounterValue& v : values) {
    uint32_t name_len = r.Get<uint32_t>();
    v.cpu = r.Get<int32_t>();
    v.value = r.Get<uint64_t>();
    v.time_enabled = r.Get<uint64_t>();
    v.time_running = r.Get<uint64_t>();
    auto name = r.GetBytes(name_len);
    if (!r.ok()) return Malformed("counters", "entry runs past the payload");
    v.name.assign(name.begin(), name.end());
  }
  if (r.remaining() != 0) return Malformed("counters", "trailing bytes");
  return values;
}

std::vector<uint8_t> EncodeFooter(const FooterRecord& f, std::vector<uint8_t> reuse) {
  ByteWriter w(16 + f.kinds.size() * 24, std::move(reuse));
  w.Put<uint64_t>(f.records);
  w.Put<uint32_t>(static_cast<uint32_t>(f.kinds.size()));
  w.Put<uint32_t>(0);
  for (const FooterRecord::Kind& k : f.kinds) {
    w.Put<uint16_t>(k.type);
    w.Put<uint16_t>(0);
    w.Put<uint32_t>(0);
    w.Put<uint64_t>(k.count);
    w.Put<uint64_t>(k.raw_bytes);
  }
  return w.Take();
}

absl::StatusOr<FooterRecord> ParseFooter(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  FooterRecord f;
  f.records = r.Get<uint64_t>();
  uint32_t n = r.Get<uint32_t>();
  r.Get<uint32_t>();
  if (!r.ok() || r.remaining() != uint64_t{n} * 24) {
    return Malformed("footer", "kind table does not match the payload size");
  }
  f.kinds.resize(n);
  for (FooterRecord::Kind& k : f.kinds) {
    k.type = r.Get<uint16_t>();
    r.Get<uint16_t>();
    r.Get<uint32_t>();
    k.count = r.Get<uint64_t>();
    k.raw_bytes = r.Get<uint64_t>();
  }
  return f;
}

}  // namespace ptkit
