// The trace.pt container format (man/ptkit-format.5): constants, record kinds, and pure
// functions that encode and parse record frames and payloads. No I/O here.
//
// Layout: a 16-byte file header, then framed records. Every frame is a 48-byte header followed
// by `stored_size` payload bytes. All integers are little-endian.
#ifndef PTKIT_CONTAINER_FORMAT_H_
#define PTKIT_CONTAINER_FORMAT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit {

inline constexpr std::array<uint8_t, 8> kFileMagic = {'P', 'T', 'K', 'I', 'T', 0, '\r', '\n'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kFileHeaderSize = 16;
inline constexpr uint32_t kFrameSync = 0x52544b50;  // "PKTR" on disk
inline constexpr size_t kFrameHeaderSize = 48;
// No record payload (stored or uncompressed) is larger than this; writers split bigger data.
inline constexpr uint64_t kMaxPayloadSize = uint64_t{256} << 20;

// Record kinds. A reader skips kinds it does not know (with a warning).
enum class RecordType : uint16_t {
  kMetadata = 1,      // UTF-8 JSON object
  kSideband = 2,      // raw perf records from a data ring, verbatim
  kAux = 3,           // AUX area bytes (trace data) of one stream
  kLoss = 4,          // data known to be lost
  kSnapshot = 5,      // AUX snapshot, bytes in chronological order
  kCode = 6,          // captured code or file identity (vdso, build-ids, --archive ranges)
  kCounters = 7,      // final counter values
  kFooter = 8,        // written once at clean close; the last record
  kSample = 9,        // a PERF_RECORD_SAMPLE of an AUX-sampling event, with its AUX snippet
  kPerfFeature = 10,  // a perf.data feature section, verbatim (a perf.data's, for export)
};
// "metadata", "sideband", ... or "unknown-N".
std::string RecordTypeName(uint16_t type);

// Frame flags.
inline constexpr uint16_t kFrameZstd = 0x1;  // payload is one zstd frame

// One frame header as stored. `header_check` covers the 44 bytes before it.
struct FrameHeader {
  uint16_t type = 0;
  uint16_t flags = 0;
  uint64_t sequence = 0;  // 0, 1, 2, ... in file order; gaps reveal lost records
  uint64_t stored_size = 0;
  uint64_t raw_size = 0;  // payload size after decompression
  uint64_t checksum = 0;  // XXH3-64 of the stored payload bytes
};

void EncodeFileHeader(std::span<uint8_t, kFileHeaderSize> out);
// Errors: kInvalidArgument (not a ptkit container), kUnimplemented (newer format version).
absl::Status CheckFileHeader(std::span<const uint8_t, kFileHeaderSize> in);

void EncodeFrameHeader(const FrameHeader& h, std::span<uint8_t, kFrameHeaderSize> out);
// Fails with kDataLoss when the sync word or the header check do not match. Does not check
// sizes against the file; callers do.
absl::StatusOr<FrameHeader> ParseFrameHeader(std::span<const uint8_t, kFrameHeaderSize> in);

// --- Payloads -------------------------------------------------------------------------------

// A trace stream: the AUX area of one CPU (per-CPU recording) or of one thread (per-thread).
enum class StreamKind : uint32_t { kCpu = 0, kThread = 1 };
struct StreamId {
  StreamKind kind = StreamKind::kCpu;
  uint64_t id = 0;  // CPU number or TID
  friend bool operator==(const StreamId&, const StreamId&) = default;
  friend auto operator<=>(const StreamId&, const StreamId&) = default;  // NOLINT
};
std::string StreamName(const StreamId& s);  // "cpu 3" or "tid 1234"

// Same bit values as PERF_AUX_FLAG_* in <linux/perf_event.h>.
inline constexpr uint64_t kAuxTruncated = 0x01;
inline constexpr uint64_t kAuxOverwrite = 0x02;
inline constexpr uint64_t kAuxPartial = 0x04;
inline constexpr uint64_t kAuxCollision = 0x08;

// Views: spans and string_views point into the payload they were parsed from.
struct SidebandRecord {
  int32_t cpu = -1;  // the CPU whose ring held these records; -1 for a per-thread ring
  std::span<const uint8_t> records;  // perf_event_header-framed records, verbatim
};
struct AuxRecord {
  StreamId stream;
  uint64_t aux_offset = 0;  // offset of data[0] in the AUX stream (PERF_RECORD_AUX aux_offset)
  uint64_t flags = 0;       // kAux* flags from PERF_RECORD_AUX
  uint64_t time = 0;        // perf time of the PERF_RECORD_AUX, 0 when unknown
  std::span<const uint8_t> data;
};
enum class LossKind : uint32_t {
  kLostSideband = 1,    // PERF_RECORD_LOST: `count` sideband records dropped by the kernel
  kAuxTruncated = 2,    // AUX buffer was full; trace stopped until drained
  kAuxCollision = 3,    // trace data collided with the hardware (PERF_AUX_FLAG_COLLISION)
  kAuxPartial = 4,      // PERF_AUX_FLAG_PARTIAL: a record covering an incomplete snapshot
  kAuxOverwritten = 5,  // snapshot ring wrapped: older bytes than the snapshot are gone
  // The stream's last bytes are missing: its process died of a signal while the thread ran
  // its own code (ptrecord --emulate=qemu: qemu-user runs no plugin code then; up to 20 ms).
  kKilled = 6,
  kOther = 15,
};
std::string LossKindName(LossKind k);
struct LossRecord {
  StreamId stream;
  LossKind kind = LossKind::kOther;
  uint64_t count = 0;       // events (records, truncations, ...)
  uint64_t bytes = 0;       // bytes known lost, 0 when unknown
  uint64_t time = 0;        // perf time, 0 when unknown
  uint64_t aux_offset = 0;  // where in the AUX stream, when it applies
};
struct SnapshotRecord {
  StreamId stream;
  uint64_t sequence = 0;          // 0, 1, ... per stream
  uint64_t aux_head = 0;          // aux_head when the snapshot was taken
  uint64_t time = 0;              // perf time of the snapshot
  std::span<const uint8_t> data;  // oldest byte first
};
inline constexpr uint32_t kCodeVdso = 0x1;      // bytes of the [vdso] mapping
inline constexpr uint32_t kCodeIdentity = 0x2;  // path and build-id only, no bytes
// Kernel text (ptrecord --kcore), pid 0: mapped in every process.
inline constexpr uint32_t kCodeKernel = 0x4;
// A kernel table (ptrecord --kcore): bytes are the text of the file named by path
// (/proc/kallsyms, /proc/modules), address 0.
inline constexpr uint32_t kCodeKernelTable = 0x8;
// Not in code records: ptdecode's flag for code from a sideband PERF_RECORD_TEXT_POKE of a
// user address (ptrecord --emulate=qemu's JIT code), which covers no file's mapping.
inline constexpr uint32_t kCodeTextPoke = 0x10;
// An archived file whole (ptrecord --archive): bytes are the file named by path (its symbols and
// debug information; its executable mappings are records of their own), pid 0, address 0.
inline constexpr uint32_t kCodeArchivedFile = 0x20;
// With kCodeIdentity, for a file that has no build-id: `build_id` holds ContentHash's 8 bytes
// (little-endian) of the file as it was recorded, not a build-id, so that a decode can tell
// whether the file at the path is still that one.
inline constexpr uint32_t kCodeContentHash = 0x40;
// With kCodeArchivedFile: the bytes are the separate debug file (its .symtab and DWARF) of an
// archived stripped file, named by its own path where it was recorded, with its own build-id
// (the file's, which a debug file carries; empty for a file without one, found by its
// .gnu_debuglink name and CRC-32). Older readers take it for one more archived file.
inline constexpr uint32_t kCodeDebugFile = 0x80;
// A content hash as kCodeContentHash stores it, and back (nullopt: not 8 bytes).
std::vector<uint8_t> EncodeContentHash(uint64_t hash);
std::optional<uint64_t> DecodeContentHash(std::span<const uint8_t> bytes);
struct CodeRecord {
  uint32_t pid = 0;
  uint32_t flags = 0;
  uint64_t address = 0;  // where `bytes` were mapped
  uint64_t pgoff = 0;    // file offset of `bytes`
  std::string_view path;
  std::span<const uint8_t> build_id;
  std::span<const uint8_t> bytes;
};
struct CounterValue {
  std::string name;
  int32_t cpu = -1;
  uint64_t value = 0;
  uint64_t time_enabled = 0;
  uint64_t time_running = 0;
  friend bool operator==(const CounterValue&, const CounterValue&) = default;
};
struct SampleRecord {
  StreamId stream;                  // the ring the sample was drained from (CPU or thread)
  uint64_t sample_type = 0;         // of the sampling event's perf_event_attr
  std::span<const uint8_t> record;  // the PERF_RECORD_SAMPLE, header included, verbatim
};
struct PerfFeatureRecord {
  uint32_t id = 0;                 // perf's HEADER_* feature number (1: HEADER_TRACING_DATA)
  std::span<const uint8_t> bytes;  // the section as perf wrote it
};
struct FooterRecord {
  uint64_t records = 0;  // records before the footer
  struct Kind {
    uint16_t type = 0;
    uint64_t count = 0;
    uint64_t raw_bytes = 0;
    friend bool operator==(const Kind&, const Kind&) = default;
  };
  std::vector<Kind> kinds;
};

// Each encoder returns the payload; it is built in `reuse` (cleared first) so callers can
// recycle buffers.
std::vector<uint8_t> EncodeSideband(const SidebandRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeAux(const AuxRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeLoss(const LossRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeSnapshot(const SnapshotRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeCode(const CodeRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeCounters(std::span<const CounterValue> values,
                                    std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeFooter(const FooterRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodeSample(const SampleRecord& r, std::vector<uint8_t> reuse = {});
std::vector<uint8_t> EncodePerfFeature(const PerfFeatureRecord& r, std::vector<uint8_t> reuse = {});

// Each parser checks every length against the payload and fails with kDataLoss naming the
// record kind and field when the payload is malformed.
absl::StatusOr<SidebandRecord> ParseSideband(std::span<const uint8_t> payload);
absl::StatusOr<AuxRecord> ParseAux(std::span<const uint8_t> payload);
absl::StatusOr<LossRecord> ParseLoss(std::span<const uint8_t> payload);
absl::StatusOr<SnapshotRecord> ParseSnapshot(std::span<const uint8_t> payload);
absl::StatusOr<CodeRecord> ParseCode(std::span<const uint8_t> payload);
absl::StatusOr<std::vector<CounterValue>> ParseCounters(std::span<const uint8_t> payload);
absl::StatusOr<FooterRecord> ParseFooter(std::span<const uint8_t> payload);
// Checks the frame of the perf record too (its header's size is the rest of the payload);
// the sample's fields are parsed with perf::ParseSample (ptkit/aux_sample.h).
absl::StatusOr<SampleRecord> ParseSample(std::span<const uint8_t> payload);
absl::StatusOr<PerfFeatureRecord> ParsePerfFeature(std::span<const uint8_t> payload);

}  // namespace ptkit

#endif  // PTKIT_CONTAINER_FORMAT_H_
