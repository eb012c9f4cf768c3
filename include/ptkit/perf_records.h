// Views of the perf records ptkit stores as sideband (<linux/perf_event.h>, "enum
// perf_event_type"): pure functions over bytes, shared by the recorder and the decoder.
//
// Records are perf_event_header-framed: {u32 type; u16 misc; u16 size} then the body; `size`
// includes the header and is a multiple of 8 in a kernel ring. Bytes may sit at any alignment
// (e.g. inside a container payload): every field is read with memcpy.
//
// Usage:
//   perf::SampleIdLayout layout{attr.sample_type, attr.sample_id_all};
//   for (perf::RecordReader r(bytes); ;) {
//     PTKIT_ASSIGN_OR_RETURN(std::optional<perf::RecordView> rec, r.Next());
//     if (!rec) break;
//     if (rec->type == PERF_RECORD_MMAP2) { PTKIT_ASSIGN_OR_RETURN(auto m, perf::ParseMmap2(*rec,
//     layout)); ... }
//   }
// Every parser fails with kDataLoss naming the record and field when the record is shorter
// than its fields, and kInvalidArgument when handed a record of another type.
#ifndef PTKIT_PERF_RECORDS_H_
#define PTKIT_PERF_RECORDS_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::perf {

inline constexpr size_t kHeaderSize = sizeof(perf_event_header);  // 8

// One record: `bytes` covers the whole record, header included.
struct RecordView {
  uint32_t type = 0;
  uint16_t misc = 0;
  std::span<const uint8_t> bytes;
  std::span<const uint8_t> body() const { return bytes.subspan(kHeaderSize); }
};

// "mmap2", "comm", "aux", ... or "type-N".
std::string RecordTypeName(uint32_t type);

// Reads the header at the start of `bytes`: kDataLoss when fewer than 8 bytes are left, or
// `size` is below 8 or larger than what is left.
absl::StatusOr<RecordView> ReadRecord(std::span<const uint8_t> bytes);

// Walks consecutive records. Next() returns nullopt at the exact end, kDataLoss (with the
// offset) on a malformed header; after an error it keeps returning the error.
class RecordReader {
 public:
  explicit RecordReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  absl::StatusOr<std::optional<RecordView>> Next();
  size_t offset() const { return offset_; }  // of the next record

 private:
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
  bool failed_ = false;
};

// Which fields the sample_id_all trailer has: the attr's sample_type bits TID, TIME, ID,
// STREAM_ID, CPU, IDENTIFIER (in that order in the record, kernel's perf_event__id_header_size
// / __perf_event_header__init_id). Empty when sample_id_all is false.
struct SampleIdLayout {
  uint64_t sample_type = 0;
  bool sample_id_all = true;
  size_t size() const;  // trailer bytes
};

// The trailer's fields; `has_*` say which were present.
struct SampleId {
  bool has_tid = false, has_time = false, has_id = false, has_stream_id = false, has_cpu = false;
  uint32_t pid = 0, tid = 0;
  uint64_t time = 0;
  uint64_t id = 0;  // from PERF_SAMPLE_ID or PERF_SAMPLE_IDENTIFIER
  uint64_t stream_id = 0;
  uint32_t cpu = 0;
};

// Parses the trailer at the end of a non-SAMPLE record. kDataLoss when the record is shorter
// than header + trailer.
absl::StatusOr<SampleId> ParseSampleId(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_MMAP2. With PERF_RECORD_MISC_MMAP_BUILD_ID in misc, the maj/min/ino fields are
// replaced by a build id (`build_id` non-empty, device fields 0).
struct Mmap2 {
  uint32_t pid = 0, tid = 0;
  uint64_t addr = 0, len = 0, pgoff = 0;
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0, ino_generation = 0;
  std::span<const uint8_t> build_id;
  uint32_t prot = 0, flags = 0;
  std::string_view filename;  // up to the first NUL
  SampleId sample_id;
};
absl::StatusOr<Mmap2> ParseMmap2(const RecordView& r, const SampleIdLayout& layout);
// PERF_RECORD_MMAP {u32 pid, tid; u64 addr, len, pgoff; char filename[]} (kernels before
// 3.16; perf's kernel and module maps) as the mapping an MMAP2 record would give, as perf's
// machine__process_mmap_event takes it: no device, inode or build-id; executable unless
// PERF_RECORD_MISC_MMAP_DATA says it is data (attr.mmap_data); private.
absl::StatusOr<Mmap2> ParseMmap(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_COMM; `exec` is PERF_RECORD_MISC_COMM_EXEC (the comm changed by execve).
struct Comm {
  uint32_t pid = 0, tid = 0;
  std::string_view comm;
  bool exec = false;
  SampleId sample_id;
};
absl::StatusOr<Comm> ParseComm(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_FORK and PERF_RECORD_EXIT (same body).
struct Task {
  bool exit = false;
  uint32_t pid = 0, ppid = 0, tid = 0, ptid = 0;
  uint64_t time = 0;
  SampleId sample_id;
};
absl::StatusOr<Task> ParseTask(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_AUX: AUX bytes [aux_offset, aux_offset + aux_size) are new (offsets grow
// forever; the ring position is offset mod AUX size). Flags: PERF_AUX_FLAG_*.
struct Aux {
  uint64_t aux_offset = 0, aux_size = 0, flags = 0;
  bool truncated() const { return flags & PERF_AUX_FLAG_TRUNCATED; }
  bool overwrite() const { return flags & PERF_AUX_FLAG_OVERWRITE; }
  bool partial() const { return flags & PERF_AUX_FLAG_PARTIAL; }
  bool collision() const { return flags & PERF_AUX_FLAG_COLLISION; }
  SampleId sample_id;
};
absl::StatusOr<Aux> ParseAux(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_ITRACE_START: the task running when tracing started on this CPU.
struct ItraceStart {
  uint32_t pid = 0, tid = 0;
  SampleId sample_id;
};
absl::StatusOr<ItraceStart> ParseItraceStart(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_LOST: `lost` records of event `id` were dropped because the ring was full.
struct Lost {
  uint64_t id = 0, lost = 0;
  SampleId sample_id;
};
absl::StatusOr<Lost> ParseLost(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_SWITCH (the trailer says who) and PERF_RECORD_SWITCH_CPU_WIDE (the body names
// the next task on switch-out, the previous one on switch-in).
struct Switch {
  bool out = false;      // PERF_RECORD_MISC_SWITCH_OUT
  bool preempt = false;  // PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (out while runnable)
  bool cpu_wide = false;
  uint32_t next_prev_pid = 0, next_prev_tid = 0;  // cpu_wide only
  SampleId sample_id;
};
absl::StatusOr<Switch> ParseSwitch(const RecordView& r, const SampleIdLayout& layout);

// PERF_RECORD_TEXT_POKE: the code at `addr` changed from `old_bytes` to `new_bytes` (the
// kernel's, for its own text; ptkit's QEMU plugin writes one for code the guest runs from no
// file, JIT code, with no old bytes). Views into the record.
struct TextPoke {
  uint64_t addr = 0;
  std::span<const uint8_t> old_bytes, new_bytes;
  SampleId sample_id;
};
absl::StatusOr<TextPoke> ParseTextPoke(const RecordView& r, const SampleIdLayout& layout);

// Builds records the way the kernel lays them out: body fields in order, strings NUL-padded
// to 8 bytes, then the sample_id trailer for `layout`, header size filled in by Finish().
// Used by the simulated PMU and by tests.
class RecordBuilder {
 public:
  RecordBuilder(uint32_t type, uint16_t misc);
  RecordBuilder& U32(uint32_t v);
  RecordBuilder& U64(uint64_t v);
  RecordBuilder& Bytes(std::span<const uint8_t> b);
  // The string, a NUL, then zero padding to the next multiple of 8 bytes of the record.
  RecordBuilder& String(std::string_view s);
  RecordBuilder& Trailer(const SampleIdLayout& layout, const SampleId& id);
  std::vector<uint8_t> Finish();  // pads to 8 bytes and writes the header size

 private:
  std::vector<uint8_t> out_;
};

std::vector<uint8_t> EncodeAux(const Aux& a, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeItraceStart(const ItraceStart& s, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeLost(const Lost& l, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeComm(const Comm& c, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeTask(const Task& t, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeMmap2(const Mmap2& m, const SampleIdLayout& layout);
std::vector<uint8_t> EncodeSwitch(const Switch& s, const SampleIdLayout& layout);
// At most 65,535 bytes each of old_bytes and new_bytes (u16 lengths): longer ones are cut.
std::vector<uint8_t> EncodeTextPoke(const TextPoke& t, const SampleIdLayout& layout);

}  // namespace ptkit::perf

#endif  // PTKIT_PERF_RECORDS_H_
