// perf.data reader: the files `perf record` writes, in file mode (PERFILE2 header, attr, data
// and feature sections) and in pipe mode (`perf record -o -`: a 16-byte header, then
// HEADER_ATTR / HEADER_FEATURE and the other user records in the stream).
//
// ReadPerfData() walks the whole file once and returns the attrs with their sample ids, every
// record in file order (kernel records and perf's user records, the records inside
// PERF_RECORD_COMPRESSED included), the AUXTRACE records with where their trace bytes are,
// AUXTRACE_INFO, TIME_CONV, ID_INDEX and the features. The trace bytes of AUXTRACE records are
// not loaded: ReadAuxtraceData() reads one on demand.
//
// Hostile input: every length is checked against what is left before anything is sized from
// it; a record is at most 64 KiB (its u16 size), a decompressed COMPRESSED record at most
// kMaxDecompressedBytes. A cut or damaged file is not an error: the result holds every whole
// record before the damage and `damage` says where and what was lost. Errors are I/O failures
// and files that are not perf.data at all.
//
// Usage:
//   PTKIT_ASSIGN_OR_RETURN(auto src, OpenFileSource(path));
//   PTKIT_ASSIGN_OR_RETURN(perf::PerfData data, perf::ReadPerfData(*src));
//   for (size_t i = 0; i < data.records.size(); ++i) {
//     perf::RecordView r = data.View(i);
//     if (r.type == PERF_RECORD_MMAP2) {
//       const perf::PerfAttr* attr = data.AttrOf(r);  // its sample_id_all layout
//       ...
//     }
//   }
#ifndef PTKIT_PERF_DATA_H_
#define PTKIT_PERF_DATA_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"

namespace ptkit::perf {

// perf's user record types (tools/lib/perf/include/perf/event.h, enum perf_user_event_type).
enum PerfUserRecordType : uint32_t {
  kRecordHeaderAttr = 64,
  kRecordHeaderEventType = 65,
  kRecordHeaderTracingData = 66,
  kRecordHeaderBuildId = 67,
  kRecordFinishedRound = 68,
  kRecordIdIndex = 69,
  kRecordAuxtraceInfo = 70,
  kRecordAuxtrace = 71,
  kRecordAuxtraceError = 72,
  kRecordThreadMap = 73,
  kRecordCpuMap = 74,
  kRecordStatConfig = 75,
  kRecordStat = 76,
  kRecordStatRound = 77,
  kRecordEventUpdate = 78,
  kRecordTimeConv = 79,
  kRecordHeaderFeature = 80,
  kRecordCompressed = 81,
  kRecordFinishedInit = 82,
};

// The name `perf report --stats` prints for a record type: "MMAP2", "AUXTRACE_INFO",
// "FEATURE", ... or "type-N".
std::string PerfStatsName(uint32_t type);

// Feature ids (tools/perf/util/header.h, HEADER_*): the bit in the file header's bitmap and
// the id of a pipe-mode HEADER_FEATURE record.
enum PerfFeature : uint32_t {
  kFeatTracingData = 1,
  kFeatBuildId = 2,
  kFeatHostname = 3,
  kFeatOsRelease = 4,
  kFeatVersion = 5,
  kFeatArch = 6,
  kFeatNrCpus = 7,
  kFeatCpuDesc = 8,
  kFeatCpuId = 9,
  kFeatTotalMem = 10,
  kFeatCmdline = 11,
  kFeatEventDesc = 12,
  kFeatCpuTopology = 13,
  kFeatNumaTopology = 14,
  kFeatBranchStack = 15,
  kFeatPmuMappings = 16,
  kFeatGroupDesc = 17,
  kFeatAuxtrace = 18,
  kFeatCache = 20,
  kFeatSampleTime = 21,
  kFeatMemTopology = 22,
  kFeatClockId = 23,
  kFeatBpfProgInfo = 25,
  kFeatBpfBtf = 26,
  kFeatCompressed = 27,
  kFeatCpuPmuCaps = 28,
  kFeatClockData = 29,
  kFeatHybridTopology = 30,
  kFeatPmuCaps = 31,
};

// perf's name of feature `id` as `perf report --header-only` says it ("TRACING_DATA",
// "CLOCK_DATA", ...), or "feature-N".
std::string PerfFeatureName(uint32_t id);

// A feature section kept as its bytes (PerfFeatures::kept), for an export to write back as
// perf wrote it.
struct KeptFeature {
  uint32_t id = 0;
  std::vector<uint8_t> bytes;
  friend bool operator==(const KeptFeature&, const KeptFeature&) = default;
};
// Whether feature `id` is kept as its bytes: those perf needs to open or show a file and
// whose bytes do not depend on where records are (HEADER_TRACING_DATA: the tracepoint
// formats, without which perf opens no file with a tracepoint event; NRCPUS, TOTAL_MEM, the
// CPU, NUMA, cache, memory and hybrid topologies, PMU_MAPPINGS, BRANCH_STACK, SAMPLE_TIME,
// CLOCKID, CLOCK_DATA, the BPF program and BTF data, the PMU capabilities). Not those an
// export writes anew (BUILD_ID, EVENT_DESC, GROUP_DESC, AUXTRACE, ...), nor COMPRESSED, STAT
// or DIR_FORMAT, which describe records or files the export does not write.
bool KeptAsBytes(uint32_t id);

// The largest decompressed payload of one PERF_RECORD_COMPRESSED (perf's own limit is its
// mmap size, at most a few MiB); more is reported as damage. All COMPRESSED records of a file
// together decompress to at most max(kMaxDecompressedBytes, 64 x the file size).
inline constexpr uint64_t kMaxDecompressedBytes = 64ull << 20;

// One event: perf_event_attr as the file has it and the sample ids that name it.
struct PerfAttr {
  // The file's bytes, up to sizeof(perf_event_attr); fields the file's (older) attr lacks are
  // zero, fields of a newer attr beyond ours are dropped (`raw` keeps them).
  perf_event_attr attr{};
  uint32_t size = 0;         // attr.size as written (0 in the file means PERF_ATTR_SIZE_VER0)
  std::vector<uint8_t> raw;  // the attr bytes as in the file
  std::vector<uint64_t> ids;
  SampleIdLayout layout() const { return {attr.sample_type, attr.sample_id_all != 0}; }
};

// One record of the data section (or stream), in file order.
struct PerfRecordRef {
  uint32_t type = 0;
  uint16_t misc = 0;
  uint64_t offset = 0;  // file offset; for a record inside COMPRESSED, that record's offset
  bool in_compressed = false;
  uint64_t begin = 0;  // into PerfData::record_bytes
  uint32_t size = 0;   // header.size
};

// PERF_RECORD_AUXTRACE: `size` trace bytes follow the record in the file, outside header.size.
struct Auxtrace {
  uint64_t size = 0, offset = 0, reference = 0;
  uint32_t idx = 0, tid = 0, cpu = 0;  // cpu = -1 (0xffffffff) when recorded per thread
  uint64_t record_offset = 0;          // file offset of the record header
  uint64_t data_offset = 0;            // file offset of the trace bytes
  uint64_t available = 0;              // trace bytes present in the file (< size when cut)
};

// PERF_RECORD_AUXTRACE_INFO: type 1 intel_pt, 2 intel_bts; the PMU's private u64 words.
struct AuxtraceInfo {
  uint32_t type = 0;
  std::vector<uint64_t> priv;
};

// PERF_RECORD_TIME_CONV; the fields after time_zero exist only in the newer 56-byte record.
struct TimeConv {
  uint64_t time_shift = 0, time_mult = 0, time_zero = 0;
  bool extended = false;
  uint64_t time_cycles = 0, time_mask = 0;
  bool cap_user_time_zero = false, cap_user_time_short = false;
};

// PERF_RECORD_ID_INDEX entry: sample id -> the mmap it was read from.
struct IdIndexEntry {
  uint64_t id = 0, idx = 0, cpu = 0, tid = 0;
};

// HEADER_BUILD_ID entry (feature section or pipe-mode HEADER_BUILD_ID record).
struct BuildIdEntry {
  int32_t pid = 0;
  uint16_t misc = 0;              // PERF_RECORD_MISC_KERNEL / _USER / ... (cpumode)
  std::vector<uint8_t> build_id;  // 20 bytes, or the size the record gives
  std::string filename;
};

// HEADER_AUXTRACE index entry: an AUXTRACE record at `file_offset`, `size` bytes with data.
struct AuxtraceIndexEntry {
  uint64_t file_offset = 0, size = 0;
};

// HEADER_EVENT_DESC entry: an event's name ("intel_pt//u", "cycles") and its sample ids.
struct EventDescEntry {
  std::string name;
  std::vector<uint64_t> ids;
};

// HEADER_GROUP_DESC entry (perf's write_group_desc()): an event group, named "{anon_group}"
// when perf was given `-e '{a,b}'`, by the index of its leader among the attrs (its members
// follow it) and its number of events.
struct GroupDescEntry {
  std::string name;
  uint32_t leader_idx = 0;
  uint32_t nr_members = 0;
};

struct PerfFeatures {
  std::vector<uint32_t> present;  // feature ids found (file bitmap or pipe records)
  std::optional<std::string> hostname, osrelease, version, arch, cpudesc, cpuid;
  std::optional<uint32_t> nr_cpus_available, nr_cpus_online;
  std::optional<uint64_t> total_mem_kib;
  std::optional<std::vector<std::string>> cmdline;
  std::vector<BuildIdEntry> build_ids;
  std::vector<AuxtraceIndexEntry> auxtrace_index;
  std::vector<EventDescEntry> event_desc;
  std::vector<GroupDescEntry> groups;  // as in the file: not checked against the attrs
  // The features KeptAsBytes() (pipe mode's TRACING_DATA record gives feature 1's), in the
  // file's order; a PerfDataWriter writes them in place of its own of the same id.
  std::vector<KeptFeature> kept;
};

struct PerfData {
  bool pipe = false;
  uint64_t file_size = 0;
  std::vector<PerfAttr> attrs;
  std::map<uint64_t, size_t> attr_of_id;  // sample id -> index in attrs
  std::vector<PerfRecordRef> records;
  std::vector<uint8_t> record_bytes;  // the bytes of every record, back to back
  std::vector<Auxtrace> auxtrace;
  std::vector<AuxtraceInfo> auxtrace_info;
  std::optional<TimeConv> time_conv;
  std::vector<IdIndexEntry> id_index;
  PerfFeatures features;
  std::vector<Damage> damage;  // offset, bytes lost (0 when unknown), reason
  std::vector<std::string> warnings;

  RecordView View(size_t i) const;
  std::map<uint32_t, uint64_t> CountByType() const;
  // The attr a record belongs to: by its sample id (SAMPLE: PERF_SAMPLE_IDENTIFIER first or
  // PERF_SAMPLE_ID at its position; other records: the sample_id_all trailer), as perf's
  // evlist__event2evsel: the first attr when there is one only, when attrs have no
  // sample_id_all (non-SAMPLE records), or for id 0 (records perf synthesized). nullptr when
  // the id is unknown or the record too short to hold it.
  const PerfAttr* AttrOf(const RecordView& r) const;
  // The name EVENT_DESC gives attrs[i] (by its ids; else the i-th entry), "" when none.
  std::string NameOf(size_t i) const;
  bool clean() const { return damage.empty(); }
};

// The sample id of record `r` where events of `sample_type` put it (SAMPLE:
// PERF_SAMPLE_IDENTIFIER first, PERF_SAMPLE_ID after IP, TID, TIME and ADDR; other records
// with `sample_id_all`: in the trailer), as perf's evlist__event2evsel finds it; nullopt when
// there is none or the record is too short to hold it.
std::optional<uint64_t> RecordSampleId(const RecordView& r, uint64_t sample_type,
                                       bool sample_id_all);

// True when `bytes` start with the perf.data magic "PERFILE2".
bool IsPerfData(std::span<const uint8_t> bytes);

// Reads a perf.data. Errors: kInvalidArgument when the source is not a perf.data (too short,
// wrong magic, or a byte-swapped file, which is not supported), or an I/O error of the source.
// Everything else (cut, damaged, unknown records) lands in damage / warnings.
absl::StatusOr<PerfData> ReadPerfData(ByteSource& source);

// The trace bytes of one AUXTRACE record (its `available` bytes). I/O errors only.
absl::StatusOr<std::vector<uint8_t>> ReadAuxtraceData(ByteSource& source, const Auxtrace& a);

}  // namespace ptkit::perf

#endif  // PTKIT_PERF_DATA_H_
