#include "ptkit/perf_data_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytes.h"
#include "ptkit/perf_data_format.h"
#include "ptkit/status.h"

namespace ptkit::perf {
namespace {

using internal::ByteWriter;

constexpr size_t kFlushBytes = 1 << 20;
constexpr size_t kMaxRecord = 0xffff;

static_assert(sizeof(perf_event_attr) >= kWrittenAttrSize);

// perf's do_write_string(): u32 length (the string, its NUL and padding to 64 bytes), bytes.
void PutString(ByteWriter& w, const std::string& s) {
  const size_t len = (s.size() + 1 + kNameAlign - 1) / kNameAlign * kNameAlign;
  w.Put<uint32_t>(static_cast<uint32_t>(len));
  w.PutBytes(s);
  w.PutBytes(std::vector<uint8_t>(len - s.size(), 0));
}

// HEADER_BUILD_ID: struct perf_record_header_build_id per file, the name padded to 64 bytes
// (perf's write_buildid()).
std::vector<uint8_t> EncodeBuildIds(const std::vector<BuildIdEntry>& ids) {
  ByteWriter w(4096);
  for (const BuildIdEntry& e : ids) {
    const size_t name = (e.filename.size() + 1 + kNameAlign - 1) / kNameAlign * kNameAlign;
    const size_t n = std::min<size_t>(e.build_id.size(), 20);
    perf_event_header h{0, static_cast<uint16_t>(e.misc | kBuildIdSizeMisc),
                        static_cast<uint16_t>(sizeof(perf_event_header) + 4 + 24 + name)};
    w.PutBytes(std::span(reinterpret_cast<const uint8_t*>(&h), sizeof(h)));
    w.Put<int32_t>(e.pid);
    uint8_t id[24] = {};
    std::memcpy(id, e.build_id.data(), n);
    id[20] = static_cast<uint8_t>(n);
    w.PutBytes(std::span<const uint8_t>(id, 24));
    w.PutBytes(e.filename);
    w.PutBytes(std::vector<uint8_t>(name - e.filename.size(), 0));
  }
  return w.Take();
}

}  // namespace

std::vector<uint8_t> EncodeAuxtraceInfo(const AuxtraceInfo& info) {
  RecordBuilder b(kRecordAuxtraceInfo, 0);
  b.U32(info.type).U32(0);
  for (uint64_t word : info.priv) b.U64(word);
  return b.Finish();
}

std::vector<uint8_t> EncodeTimeConv(const TimeConv& t) {
  const uint8_t caps[8] = {t.cap_user_time_zero ? uint8_t{1} : uint8_t{0},
                           t.cap_user_time_short ? uint8_t{1} : uint8_t{0}};
  return RecordBuilder(kRecordTimeConv, 0)
      .U64(t.time_shift)
      .U64(t.time_mult)
      .U64(t.time_zero)
      .U64(t.time_cycles)
      .U64(t.time_mask)
      .Bytes(caps)
      .Finish();
}

std::vector<std::vector<uint8_t>> EncodeIdIndex(std::span<const IdIndexEntry> entries) {
  constexpr size_t kPerRecord = (kMaxRecord - 16) / 32;
  std::vector<std::vector<uint8_t>> out;
  for (size_t at = 0; at < entries.size(); at += kPerRecord) {
    const size_t n = std::min(kPerRecord, entries.size() - at);
    RecordBuilder b(kRecordIdIndex, 0);
    b.U64(n);
    for (const IdIndexEntry& e : entries.subspan(at, n))
      b.U64(e.id).U64(e.idx).U64(e.cpu).U64(e.tid);
    out.push_back(b.Finish());
  }
  return out;
}

std::vector<uint8_t> EncodeFinishedRound() {
  return RecordBuilder(kRecordFinishedRound, 0).Finish();
}

absl::StatusOr<PerfDataWriter> PerfDataWriter::Create(const std::string& path,
                                                      std::vector<WriterEvent> events) {
  if (events.empty()) return absl::InvalidArgumentError("a perf.data needs at least one event");
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoStatus(errno, "create ", path);
  PerfDataWriter w(path, std::move(fd));
  // Header (zeros until Finish), the ids of every event, the attr section, then data.
  uint64_t at = kFileHeaderSize;
  w.buffer_.assign(kFileHeaderSize, 0);
  std::vector<uint64_t> id_offsets;
  for (WriterEvent& e : events) {
    e.attr.size = kWrittenAttrSize;
    id_offsets.push_back(at);
    for (uint64_t id : e.ids) {
      w.buffer_.resize(w.buffer_.size() + 8);
      internal::Store<uint64_t>(w.buffer_.data() + w.buffer_.size() - 8, id);
    }
    at += 8 * e.ids.size();
  }
  w.attrs_offset_ = at;
  for (size_t i = 0; i < events.size(); ++i) {
    const uint8_t* attr = reinterpret_cast<const uint8_t*>(&events[i].attr);
    w.buffer_.insert(w.buffer_.end(), attr, attr + kWrittenAttrSize);
    w.buffer_.resize(w.buffer_.size() + kFileSectionSize);
    uint8_t* s = w.buffer_.data() + w.buffer_.size() - kFileSectionSize;
    internal::Store<uint64_t>(s, id_offsets[i]);
    internal::Store<uint64_t>(s + 8, 8 * events[i].ids.size());
  }
  w.data_offset_ = w.attrs_offset_ + events.size() * (kWrittenAttrSize + kFileSectionSize);
  w.pos_ = w.data_offset_;
  w.events_ = std::move(events);
  return w;
}

absl::Status PerfDataWriter::PWrite(uint64_t offset, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return ErrnoStatus(errno, "write ", path_);
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status PerfDataWriter::Flush() {
  PTKIT_RETURN_IF_ERROR(PWrite(buffer_at_, buffer_));
  buffer_at_ += buffer_.size();
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status PerfDataWriter::AddRecord(std::span<const uint8_t> record) {
  if (record.size() < sizeof(perf_event_header) ||
      internal::Load<perf_event_header>(record.data()).size != record.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("perf record of ", record.size(), " bytes: its header size differs"));
  }
  buffer_.insert(buffer_.end(), record.begin(), record.end());
  pos_ += record.size();
  if (buffer_.size() >= kFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PerfDataWriter::AddAuxtrace(const Auxtrace& a) {
  const std::vector<uint8_t> r = RecordBuilder(kRecordAuxtrace, 0)
                                     .U64(a.size)
                                     .U64(a.offset)
                                     .U64(a.reference)
                                     .U32(a.idx)
                                     .U32(a.tid)
                                     .U32(a.cpu)
                                     .U32(0)
                                     .Finish();
  // perf's auxtrace index: the record's file offset and its header size.
  index_.push_back({pos_, kAuxtraceRecordSize});
  PTKIT_RETURN_IF_ERROR(AddRecord(r));
  PTKIT_RETURN_IF_ERROR(Flush());
  const uint64_t data = pos_;
  reserved_.emplace_back(data, data + a.size);
  pos_ += a.size;
  buffer_at_ = pos_;
  return data;
}

absl::Status PerfDataWriter::WriteAt(uint64_t offset, std::span<const uint8_t> bytes) {
  auto it = std::upper_bound(reserved_.begin(), reserved_.end(), offset,
                             [](uint64_t o, const auto& r) { return o < r.first; });
  if (it == reserved_.begin() || offset + bytes.size() > std::prev(it)->second) {
    return absl::InvalidArgumentError(absl::StrCat(bytes.size(), " bytes at offset ", offset,
                                                   " lie outside the AUXTRACE data reserved"));
  }
  return PWrite(offset, bytes);
}

absl::Status PerfDataWriter::Finish(const PerfFeatures& f) {
  // Features in bit order: a table of {offset, size} sections, then their bodies.
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> features;
  auto string = [&](uint32_t id, const std::optional<std::string>& s) {
    if (!s) return;
    ByteWriter w(128);
    PutString(w, *s);
    features.emplace_back(id, w.Take());
  };
  if (!f.build_ids.empty()) features.emplace_back(kFeatBuildId, EncodeBuildIds(f.build_ids));
  string(kFeatHostname, f.hostname);
  string(kFeatOsRelease, f.osrelease);
  string(kFeatVersion, f.version);
  string(kFeatArch, f.arch);
  if (f.nr_cpus_available && f.nr_cpus_online) {
    ByteWriter w(8);
    w.Put<uint32_t>(*f.nr_cpus_available);
    w.Put<uint32_t>(*f.nr_cpus_online);
    features.emplace_back(kFeatNrCpus, w.Take());
  }
  string(kFeatCpuDesc, f.cpudesc);
  string(kFeatCpuId, f.cpuid);
  if (f.total_mem_kib) {
    ByteWriter w(8);
    w.Put<uint64_t>(*f.total_mem_kib);
    features.emplace_back(kFeatTotalMem, w.Take());
  }
  if (f.cmdline) {
    ByteWriter w(256);
    w.Put<uint32_t>(static_cast<uint32_t>(f.cmdline->size()));
    for (const std::string& arg : *f.cmdline) PutString(w, arg);
    features.emplace_back(kFeatCmdline, w.Take());
  }
  if (std::all_of(events_.begin(), events_.end(),
                  [](const WriterEvent& e) { return !e.name.empty(); })) {
    // perf's write_event_desc(): u32 events, u32 attr size, per event the attr, u32 ids,
    // the name, the ids.
    ByteWriter w(1024);
    w.Put<uint32_t>(static_cast<uint32_t>(events_.size()));
    w.Put<uint32_t>(kWrittenAttrSize);
    for (const WriterEvent& e : events_) {
      w.PutBytes(std::span(reinterpret_cast<const uint8_t*>(&e.attr), kWrittenAttrSize));
      w.Put<uint32_t>(static_cast<uint32_t>(e.ids.size()));
      PutString(w, e.name);
      for (uint64_t id : e.ids) w.Put<uint64_t>(id);
    }
    features.emplace_back(kFeatEventDesc, w.Take());
  }
  if (!f.groups.empty()) {
    // perf's write_group_desc(): u32 groups, per group its name, u32 leader index, u32 events.
    ByteWriter w(128);
    w.Put<uint32_t>(static_cast<uint32_t>(f.groups.size()));
    for (const GroupDescEntry& g : f.groups) {
      PutString(w, g.name);
      w.Put<uint32_t>(g.leader_idx);
      w.Put<uint32_t>(g.nr_members);
    }
    features.emplace_back(kFeatGroupDesc, w.Take());
  }
  if (!index_.empty()) {
    ByteWriter w(8 + 16 * index_.size());
    w.Put<uint64_t>(index_.size());
    for (const AuxtraceIndexEntry& e : index_) {
      w.Put<uint64_t>(e.file_offset);
      w.Put<uint64_t>(e.size);
    }
    features.emplace_back(kFeatAuxtrace, w.Take());
  }
  // A perf.data's own features, kept as its bytes, go over those made here (its NRCPUS is the
  // machine's, not the CPUs its records name).
  for (const KeptFeature& k : f.kept) {
    // Only those whose bytes do not depend on where records are (a review: a trace.pt's
    // perf-feature record of id 18 replaced the AUXTRACE index with garbage).
    if (!KeptAsBytes(k.id)) continue;
    std::erase_if(features, [&](const auto& e) { return e.first == k.id; });
    features.emplace_back(k.id, k.bytes);
  }
  std::sort(features.begin(), features.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  PTKIT_RETURN_IF_ERROR(Flush());
  const uint64_t data_end = pos_;
  // Reserved AUXTRACE bytes never written read as zeros.
  if (::ftruncate(fd_.get(), static_cast<off_t>(data_end)) != 0) {
    return ErrnoStatus(errno, "ftruncate ", path_);
  }
  uint64_t body = data_end + kFileSectionSize * features.size();
  ByteWriter table(kFileSectionSize * features.size());
  uint8_t bitmap[32] = {};
  for (const auto& [id, bytes] : features) {
    table.Put<uint64_t>(body);
    table.Put<uint64_t>(bytes.size());
    body += bytes.size();
    bitmap[id / 8] |= static_cast<uint8_t>(1u << (id % 8));
  }
  std::vector<uint8_t> tail = table.Take();
  for (const auto& [id, bytes] : features) tail.insert(tail.end(), bytes.begin(), bytes.end());
  PTKIT_RETURN_IF_ERROR(PWrite(data_end, tail));

  ByteWriter h(kFileHeaderSize);
  h.PutBytes(std::span(reinterpret_cast<const uint8_t*>(kMagic), 8));
  h.Put<uint64_t>(kFileHeaderSize);
  h.Put<uint64_t>(kWrittenAttrSize + kFileSectionSize);
  h.Put<uint64_t>(attrs_offset_);
  h.Put<uint64_t>(events_.size() * (kWrittenAttrSize + kFileSectionSize));
  h.Put<uint64_t>(data_offset_);
  h.Put<uint64_t>(data_end - data_offset_);
  h.Put<uint64_t>(0);  // event_types: unused since perf 2.6.x
  h.Put<uint64_t>(0);
  h.PutBytes(std::span<const uint8_t>(bitmap, sizeof(bitmap)));
  PTKIT_RETURN_IF_ERROR(PWrite(0, h.Take()));
  if (::close(fd_.release()) != 0) return ErrnoStatus(errno, "close ", path_);
  return absl::OkStatus();
}

}  // namespace ptkit::perf
