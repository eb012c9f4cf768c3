#include "ptkit/perf_records.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ptkit/container_format.h"

namespace ptkit::perf {
namespace {

// The record bodies as documented in <linux/perf_event.h> ("enum perf_event_type"); the
// kernel writes them field by field (kernel/events/core.c perf_event_*_output), so these
// mirrors exist only to pin offsets and sizes.
struct Mmap2Body {
  uint32_t pid, tid;
  uint64_t addr, len, pgoff;
  uint32_t maj, min;
  uint64_t ino, ino_generation;
  uint32_t prot, flags;
};
static_assert(sizeof(Mmap2Body) == 64 && offsetof(Mmap2Body, maj) == 32 &&
              offsetof(Mmap2Body, prot) == 56);
constexpr size_t kMmap2BuildIdSize = 32;  // u8 size, u8, u16, u8 build_id[20] at offset 32
constexpr size_t kMmap2BuildIdMax = 20;
struct TaskBody {
  uint32_t pid, ppid, tid, ptid;
  uint64_t time;
};
static_assert(sizeof(TaskBody) == 24);
struct AuxBody {
  uint64_t aux_offset, aux_size, flags;
};
static_assert(sizeof(AuxBody) == 24);

static_assert(sizeof(perf_event_header) == 8 && offsetof(perf_event_header, misc) == 4 &&
              offsetof(perf_event_header, size) == 6);
static_assert(PERF_RECORD_MMAP == 1 && PERF_RECORD_LOST == 2 && PERF_RECORD_COMM == 3 &&
              PERF_RECORD_EXIT == 4 && PERF_RECORD_FORK == 7 && PERF_RECORD_MMAP2 == 10 &&
              PERF_RECORD_AUX == 11 && PERF_RECORD_ITRACE_START == 12 && PERF_RECORD_SWITCH == 14 &&
              PERF_RECORD_SWITCH_CPU_WIDE == 15);
static_assert(PERF_RECORD_MISC_COMM_EXEC == (1 << 13) && PERF_RECORD_MISC_SWITCH_OUT == (1 << 13) &&
              PERF_RECORD_MISC_SWITCH_OUT_PREEMPT == (1 << 14) &&
              PERF_RECORD_MISC_MMAP_BUILD_ID == (1 << 14));
// The container's AUX flag constants are the kernel's.
static_assert(PERF_AUX_FLAG_TRUNCATED == kAuxTruncated &&
              PERF_AUX_FLAG_OVERWRITE == kAuxOverwrite && PERF_AUX_FLAG_PARTIAL == kAuxPartial &&
              PERF_AUX_FLAG_COLLISION == kAuxCollision);

template <typename T>
T Load(std::span<const uint8_t> b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

absl::Status Short(const RecordView& r, std::string_view what, size_t need) {
  return absl::DataLossError(absl::StrCat(
      "perf ", RecordTypeName(r.type), " record of ", r.bytes.size(), " bytes too short for ",
      absl::string_view(what.data(), what.size()), " (needs ", need, ")"));
}

absl::Status CheckType(const RecordView& r, std::initializer_list<uint32_t> types) {
  for (uint32_t t : types) {
    if (r.type == t) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("expected a perf ", RecordTypeName(*types.begin()),
                                                 " record, got ", RecordTypeName(r.type)));
}

// Body bytes before the trailer, checked to hold at least `fixed` bytes.
absl::StatusOr<std::span<const uint8_t>> Body(const RecordView& r, const SampleIdLayout& layout,
                                              size_t fixed, SampleId* id) {
  const size_t trailer = layout.size();
  if (r.bytes.size() < kHeaderSize + fixed + trailer) {
    return Short(r, "its fields", kHeaderSize + fixed + trailer);
  }
  absl::StatusOr<SampleId> s = ParseSampleId(r, layout);
  if (!s.ok()) return s.status();
  *id = *s;
  return r.bytes.subspan(kHeaderSize, r.bytes.size() - kHeaderSize - trailer);
}

std::string_view CString(std::span<const uint8_t> b) {
  const char* p = reinterpret_cast<const char*>(b.data());
  return std::string_view(p, strnlen(p, b.size()));
}

}  // namespace

std::string RecordTypeName(uint32_t type) {
  switch (type) {
    case PERF_RECORD_MMAP:
      return "mmap";
    case PERF_RECORD_LOST:
      return "lost";
    case PERF_RECORD_COMM:
      return "comm";
    case PERF_RECORD_EXIT:
      return "exit";
    case PERF_RECORD_THROTTLE:
      return "throttle";
    case PERF_RECORD_UNTHROTTLE:
      return "unthrottle";
    case PERF_RECORD_FORK:
      return "fork";
    case PERF_RECORD_READ:
      return "read";
    case PERF_RECORD_SAMPLE:
      return "sample";
    case PERF_RECORD_MMAP2:
      return "mmap2";
    case PERF_RECORD_AUX:
      return "aux";
    case PERF_RECORD_ITRACE_START:
      return "itrace_start";
    case PERF_RECORD_LOST_SAMPLES:
      return "lost_samples";
    case PERF_RECORD_SWITCH:
      return "switch";
    case PERF_RECORD_SWITCH_CPU_WIDE:
      return "switch_cpu_wide";
    case PERF_RECORD_NAMESPACES:
      return "namespaces";
    case PERF_RECORD_KSYMBOL:
      return "ksymbol";
    case PERF_RECORD_BPF_EVENT:
      return "bpf_event";
    case PERF_RECORD_CGROUP:
      return "cgroup";
    case PERF_RECORD_TEXT_POKE:
      return "text_poke";
    case PERF_RECORD_AUX_OUTPUT_HW_ID:
      return "aux_output_hw_id";
    default:
      return absl::StrCat("type-", type);
  }
}

absl::StatusOr<RecordView> ReadRecord(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) {
    return absl::DataLossError(
        absl::StrCat("perf record header cut: ", bytes.size(), " bytes left, need 8"));
  }
  const auto h = Load<perf_event_header>(bytes, 0);
  if (h.size < kHeaderSize || h.size > bytes.size()) {
    return absl::DataLossError(absl::StrCat("perf ", RecordTypeName(h.type), " record size ",
                                            h.size, " invalid (", bytes.size(), " bytes left)"));
  }
  return RecordView{h.type, h.misc, bytes.first(h.size)};
}

absl::StatusOr<std::optional<RecordView>> RecordReader::Next() {
  if (offset_ == bytes_.size() && !failed_) return std::optional<RecordView>();
  absl::StatusOr<RecordView> r = ReadRecord(bytes_.subspan(offset_));
  if (!r.ok()) {
    failed_ = true;
    return absl::DataLossError(absl::StrCat(r.status().message(), " at offset ", offset_));
  }
  offset_ += r->bytes.size();
  return std::optional<RecordView>(*r);
}

size_t SampleIdLayout::size() const {
  if (!sample_id_all) return 0;
  size_t n = 0;
  if (sample_type & PERF_SAMPLE_TID) n += 8;
  if (sample_type & PERF_SAMPLE_TIME) n += 8;
  if (sample_type & PERF_SAMPLE_ID) n += 8;
  if (sample_type & PERF_SAMPLE_STREAM_ID) n += 8;
  if (sample_type & PERF_SAMPLE_CPU) n += 8;
  if (sample_type & PERF_SAMPLE_IDENTIFIER) n += 8;
  return n;
}

// kernel/events/core.c __perf_event__output_id_sample(): TID, TIME, ID, STREAM_ID, CPU,
// IDENTIFIER, in that order, at the very end of the record.
absl::StatusOr<SampleId> ParseSampleId(const RecordView& r, const SampleIdLayout& layout) {
  const size_t n = layout.size();
  if (r.bytes.size() < kHeaderSize + n) return Short(r, "its sample_id trailer", kHeaderSize + n);
  SampleId s;
  if (n == 0) return s;
  size_t off = r.bytes.size() - n;
  const uint64_t t = layout.sample_type;
  if (t & PERF_SAMPLE_TID) {
    s.has_tid = true;
    s.pid = Load<uint32_t>(r.bytes, off);
    s.tid = Load<uint32_t>(r.bytes, off + 4);
    off += 8;
  }
  if (t & PERF_SAMPLE_TIME) {
    s.has_time = true;
    s.time = Load<uint64_t>(r.bytes, off);
    off += 8;
  }
  if (t & PERF_SAMPLE_ID) {
    s.has_id = true;
    s.id = Load<uint64_t>(r.bytes, off);
    off += 8;
  }
  if (t & PERF_SAMPLE_STREAM_ID) {
    s.has_stream_id = true;
    s.stream_id = Load<uint64_t>(r.bytes, off);
    off += 8;
  }
  if (t & PERF_SAMPLE_CPU) {
    s.has_cpu = true;
    s.cpu = Load<uint32_t>(r.bytes, off);
    off += 8;
  }
  if (t & PERF_SAMPLE_IDENTIFIER) {
    s.has_id = true;
    s.id = Load<uint64_t>(r.bytes, off);
  }
  return s;
}

absl::StatusOr<Mmap2> ParseMmap2(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_MMAP2}); !s.ok()) return s;
  Mmap2 m;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, sizeof(Mmap2Body), &m.sample_id);
  if (!body.ok()) return body.status();
  const std::span<const uint8_t> b = *body;
  m.pid = Load<uint32_t>(b, offsetof(Mmap2Body, pid));
  m.tid = Load<uint32_t>(b, offsetof(Mmap2Body, tid));
  m.addr = Load<uint64_t>(b, offsetof(Mmap2Body, addr));
  m.len = Load<uint64_t>(b, offsetof(Mmap2Body, len));
  m.pgoff = Load<uint64_t>(b, offsetof(Mmap2Body, pgoff));
  if (r.misc & PERF_RECORD_MISC_MMAP_BUILD_ID) {
    const uint8_t size = b[kMmap2BuildIdSize];
    if (size > kMmap2BuildIdMax) {
      return absl::DataLossError(
          absl::StrCat("perf mmap2 record build_id_size ", size, " above 20"));
    }
    m.build_id = b.subspan(kMmap2BuildIdSize + 4, size);
  } else {
    m.maj = Load<uint32_t>(b, offsetof(Mmap2Body, maj));
    m.min = Load<uint32_t>(b, offsetof(Mmap2Body, min));
    m.ino = Load<uint64_t>(b, offsetof(Mmap2Body, ino));
    m.ino_generation = Load<uint64_t>(b, offsetof(Mmap2Body, ino_generation));
  }
  m.prot = Load<uint32_t>(b, offsetof(Mmap2Body, prot));
  m.flags = Load<uint32_t>(b, offsetof(Mmap2Body, flags));
  m.filename = CString(b.subspan(sizeof(Mmap2Body)));
  return m;
}

absl::StatusOr<Mmap2> ParseMmap(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_MMAP}); !s.ok()) return s;
  constexpr size_t kFields = 4 + 4 + 8 + 8 + 8;  // pid, tid, addr, len, pgoff
  Mmap2 m;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, kFields, &m.sample_id);
  if (!body.ok()) return body.status();
  const std::span<const uint8_t> b = *body;
  m.pid = Load<uint32_t>(b, 0);
  m.tid = Load<uint32_t>(b, 4);
  m.addr = Load<uint64_t>(b, 8);
  m.len = Load<uint64_t>(b, 16);
  m.pgoff = Load<uint64_t>(b, 24);
  m.prot = PROT_READ | ((r.misc & PERF_RECORD_MISC_MMAP_DATA) ? 0 : PROT_EXEC);
  m.flags = MAP_PRIVATE;
  m.filename = CString(b.subspan(kFields));
  return m;
}

absl::StatusOr<Comm> ParseComm(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_COMM}); !s.ok()) return s;
  Comm c;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, 8, &c.sample_id);
  if (!body.ok()) return body.status();
  c.pid = Load<uint32_t>(*body, 0);
  c.tid = Load<uint32_t>(*body, 4);
  c.comm = CString(body->subspan(8));
  c.exec = (r.misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
  return c;
}

absl::StatusOr<Task> ParseTask(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_FORK, PERF_RECORD_EXIT}); !s.ok()) return s;
  Task t;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, sizeof(TaskBody), &t.sample_id);
  if (!body.ok()) return body.status();
  t.exit = r.type == PERF_RECORD_EXIT;
  t.pid = Load<uint32_t>(*body, offsetof(TaskBody, pid));
  t.ppid = Load<uint32_t>(*body, offsetof(TaskBody, ppid));
  t.tid = Load<uint32_t>(*body, offsetof(TaskBody, tid));
  t.ptid = Load<uint32_t>(*body, offsetof(TaskBody, ptid));
  t.time = Load<uint64_t>(*body, offsetof(TaskBody, time));
  return t;
}

absl::StatusOr<Aux> ParseAux(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_AUX}); !s.ok()) return s;
  Aux a;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, sizeof(AuxBody), &a.sample_id);
  if (!body.ok()) return body.status();
  a.aux_offset = Load<uint64_t>(*body, offsetof(AuxBody, aux_offset));
  a.aux_size = Load<uint64_t>(*body, offsetof(AuxBody, aux_size));
  a.flags = Load<uint64_t>(*body, offsetof(AuxBody, flags));
  return a;
}

absl::StatusOr<ItraceStart> ParseItraceStart(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_ITRACE_START}); !s.ok()) return s;
  ItraceStart i;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, 8, &i.sample_id);
  if (!body.ok()) return body.status();
  i.pid = Load<uint32_t>(*body, 0);
  i.tid = Load<uint32_t>(*body, 4);
  return i;
}

absl::StatusOr<TextPoke> ParseTextPoke(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_TEXT_POKE}); !s.ok()) return s;
  TextPoke t;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, 12, &t.sample_id);
  if (!body.ok()) return body.status();
  t.addr = Load<uint64_t>(*body, 0);
  const size_t old_len = Load<uint16_t>(*body, 8);
  const size_t new_len = Load<uint16_t>(*body, 10);
  if (body->size() < 12 + old_len + new_len) {
    return Short(r, "its old and new bytes", kHeaderSize + 12 + old_len + new_len + layout.size());
  }
  t.old_bytes = body->subspan(12, old_len);
  t.new_bytes = body->subspan(12 + old_len, new_len);
  return t;
}

absl::StatusOr<Lost> ParseLost(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_LOST}); !s.ok()) return s;
  Lost l;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, 16, &l.sample_id);
  if (!body.ok()) return body.status();
  l.id = Load<uint64_t>(*body, 0);
  l.lost = Load<uint64_t>(*body, 8);
  return l;
}

absl::StatusOr<Switch> ParseSwitch(const RecordView& r, const SampleIdLayout& layout) {
  if (absl::Status s = CheckType(r, {PERF_RECORD_SWITCH, PERF_RECORD_SWITCH_CPU_WIDE}); !s.ok()) {
    return s;
  }
  Switch w;
  w.cpu_wide = r.type == PERF_RECORD_SWITCH_CPU_WIDE;
  absl::StatusOr<std::span<const uint8_t>> body = Body(r, layout, w.cpu_wide ? 8 : 0, &w.sample_id);
  if (!body.ok()) return body.status();
  w.out = (r.misc & PERF_RECORD_MISC_SWITCH_OUT) != 0;
  w.preempt = (r.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) != 0;
  if (w.cpu_wide) {
    w.next_prev_pid = Load<uint32_t>(*body, 0);
    w.next_prev_tid = Load<uint32_t>(*body, 4);
  }
  return w;
}

RecordBuilder::RecordBuilder(uint32_t type, uint16_t misc) {
  perf_event_header h{type, misc, 0};
  out_.resize(kHeaderSize);
  std::memcpy(out_.data(), &h, sizeof(h));
}

RecordBuilder& RecordBuilder::U32(uint32_t v) {
  const size_t at = out_.size();
  out_.resize(at + 4);
  std::memcpy(out_.data() + at, &v, 4);
  return *this;
}

RecordBuilder& RecordBuilder::U64(uint64_t v) {
  const size_t at = out_.size();
  out_.resize(at + 8);
  std::memcpy(out_.data() + at, &v, 8);
  return *this;
}

RecordBuilder& RecordBuilder::Bytes(std::span<const uint8_t> b) {
  out_.insert(out_.end(), b.begin(), b.end());
  return *this;
}

RecordBuilder& RecordBuilder::String(std::string_view s) {
  out_.insert(out_.end(), s.begin(), s.end());
  out_.push_back(0);
  out_.resize((out_.size() + 7) & ~size_t{7}, 0);
  return *this;
}

RecordBuilder& RecordBuilder::Trailer(const SampleIdLayout& layout, const SampleId& id) {
  if (!layout.sample_id_all) return *this;
  const uint64_t t = layout.sample_type;
  if (t & PERF_SAMPLE_TID) U32(id.pid).U32(id.tid);
  if (t & PERF_SAMPLE_TIME) U64(id.time);
  if (t & PERF_SAMPLE_ID) U64(id.id);
  if (t & PERF_SAMPLE_STREAM_ID) U64(id.stream_id);
  if (t & PERF_SAMPLE_CPU) U32(id.cpu).U32(0);
  if (t & PERF_SAMPLE_IDENTIFIER) U64(id.id);
  return *this;
}

std::vector<uint8_t> RecordBuilder::Finish() {
  out_.resize((out_.size() + 7) & ~size_t{7}, 0);
  const uint16_t size = static_cast<uint16_t>(out_.size());
  std::memcpy(out_.data() + offsetof(perf_event_header, size), &size, 2);
  return std::move(out_);
}

std::vector<uint8_t> EncodeAux(const Aux& a, const SampleIdLayout& layout) {
  return RecordBuilder(PERF_RECORD_AUX, 0)
      .U64(a.aux_offset)
      .U64(a.aux_size)
      .U64(a.flags)
      .Trailer(layout, a.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeItraceStart(const ItraceStart& s, const SampleIdLayout& layout) {
  return RecordBuilder(PERF_RECORD_ITRACE_START, 0)
      .U32(s.pid)
      .U32(s.tid)
      .Trailer(layout, s.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeTextPoke(const TextPoke& t, const SampleIdLayout& layout) {
  const std::span<const uint8_t> old_bytes =
      t.old_bytes.first(std::min<size_t>(t.old_bytes.size(), 0xffff));
  const std::span<const uint8_t> new_bytes =
      t.new_bytes.first(std::min<size_t>(t.new_bytes.size(), 0xffff));
  // The bytes padded to 8 with the two lengths before them (perf_event_text_poke_output).
  const size_t tot = 4 + old_bytes.size() + new_bytes.size();
  const std::vector<uint8_t> pad((8 - tot % 8) % 8, 0);
  return RecordBuilder(PERF_RECORD_TEXT_POKE, 0)
      .U64(t.addr)
      .U32(static_cast<uint32_t>(old_bytes.size()) | static_cast<uint32_t>(new_bytes.size()) << 16)
      .Bytes(old_bytes)
      .Bytes(new_bytes)
      .Bytes(pad)
      .Trailer(layout, t.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeLost(const Lost& l, const SampleIdLayout& layout) {
  return RecordBuilder(PERF_RECORD_LOST, 0)
      .U64(l.id)
      .U64(l.lost)
      .Trailer(layout, l.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeComm(const Comm& c, const SampleIdLayout& layout) {
  return RecordBuilder(PERF_RECORD_COMM, c.exec ? PERF_RECORD_MISC_COMM_EXEC : 0)
      .U32(c.pid)
      .U32(c.tid)
      .String(c.comm)
      .Trailer(layout, c.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeTask(const Task& t, const SampleIdLayout& layout) {
  return RecordBuilder(t.exit ? PERF_RECORD_EXIT : PERF_RECORD_FORK, 0)
      .U32(t.pid)
      .U32(t.ppid)
      .U32(t.tid)
      .U32(t.ptid)
      .U64(t.time)
      .Trailer(layout, t.sample_id)
      .Finish();
}

std::vector<uint8_t> EncodeMmap2(const Mmap2& m, const SampleIdLayout& layout) {
  const bool has_build_id = !m.build_id.empty();
  RecordBuilder b(PERF_RECORD_MMAP2, has_build_id ? PERF_RECORD_MISC_MMAP_BUILD_ID : 0);
  b.U32(m.pid).U32(m.tid).U64(m.addr).U64(m.len).U64(m.pgoff);
  if (has_build_id) {
    uint8_t area[24] = {};
    const size_t n = std::min(m.build_id.size(), kMmap2BuildIdMax);
    area[0] = static_cast<uint8_t>(n);
    std::memcpy(area + 4, m.build_id.data(), n);
    b.Bytes(area);
  } else {
    b.U32(m.maj).U32(m.min).U64(m.ino).U64(m.ino_generation);
  }
  return b.U32(m.prot).U32(m.flags).String(m.filename).Trailer(layout, m.sample_id).Finish();
}

std::vector<uint8_t> EncodeSwitch(const Switch& s, const SampleIdLayout& layout) {
  uint16_t misc = 0;
  if (s.out) misc |= PERF_RECORD_MISC_SWITCH_OUT;
  if (s.out && s.preempt) misc |= PERF_RECORD_MISC_SWITCH_OUT_PREEMPT;
  RecordBuilder b(s.cpu_wide ? PERF_RECORD_SWITCH_CPU_WIDE : PERF_RECORD_SWITCH, misc);
  if (s.cpu_wide) b.U32(s.next_prev_pid).U32(s.next_prev_tid);
  return b.Trailer(layout, s.sample_id).Finish();
}

}  // namespace ptkit::perf
