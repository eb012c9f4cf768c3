// perf.data writer: the file-mode layout `perf record` writes (tools/perf/Documentation/
// perf.data-file-format.txt) and ReadPerfData() (ptkit/perf_data.h) reads: a PERFILE2 header,
// the ids of every event, the attr section, the data section (records in the order they are
// added; PERF_RECORD_AUXTRACE records with their trace bytes after them) and the feature
// sections (HEADER_BUILD_ID, HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS, CPUDESC, CPUID,
// TOTAL_MEM, CMDLINE, EVENT_DESC, GROUP_DESC and the HEADER_AUXTRACE index of every AUXTRACE
// record).
//
// Usage:
//   PTKIT_ASSIGN_OR_RETURN(perf::PerfDataWriter w, perf::PerfDataWriter::Create(path, events));
//   PTKIT_RETURN_IF_ERROR(w.AddRecord(perf::EncodeTimeConv(conv)));
//   PTKIT_ASSIGN_OR_RETURN(uint64_t at, w.AddAuxtrace(aux));  // aux.size bytes reserved at `at`
//   PTKIT_RETURN_IF_ERROR(w.WriteAt(at, trace_bytes));
//   PTKIT_RETURN_IF_ERROR(w.Finish(features));
// Nothing is valid perf.data before Finish() writes the header (a failed export leaves a file
// that readers reject: its header is zeros).
#ifndef PTKIT_PERF_DATA_WRITER_H_
#define PTKIT_PERF_DATA_WRITER_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/perf_data.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::perf {

// The perf_event_attr size the writer stores: PERF_ATTR_SIZE_VER7, the largest perf 6.1 reads
// (it refuses a file whose attrs are larger than its own struct).
inline constexpr uint32_t kWrittenAttrSize = PERF_ATTR_SIZE_VER7;

// One event of the attr section.
struct WriterEvent {
  perf_event_attr attr{};  // attr.size is set to kWrittenAttrSize
  std::vector<uint64_t> ids;
  std::string name;  // for HEADER_EVENT_DESC ("intel_pt//u", "dummy:u"); none written if empty
};

class PerfDataWriter {
 public:
  // Creates (or truncates) `path` and lays out the header, ids and attrs of `events`.
  // Errors: kInvalidArgument without events; the errno of open/write naming the path.
  static absl::StatusOr<PerfDataWriter> Create(const std::string& path,
                                               std::vector<WriterEvent> events);
  PerfDataWriter(PerfDataWriter&&) noexcept = default;
  PerfDataWriter& operator=(PerfDataWriter&&) noexcept = default;

  // Appends one perf_event_header-framed record (kernel or perf user record). Errors:
  // kInvalidArgument when `record` is not one whole record; write errors.
  absl::Status AddRecord(std::span<const uint8_t> record);
  // Appends a PERF_RECORD_AUXTRACE for `a` (a.size, a.offset, a.reference, a.idx, a.tid,
  // a.cpu) and reserves a.size bytes after it, zero until WriteAt() fills them; the record
  // goes into the HEADER_AUXTRACE index. Returns the file offset of the reserved bytes.
  absl::StatusOr<uint64_t> AddAuxtrace(const Auxtrace& a);
  // Writes `bytes` at `offset` inside bytes reserved by AddAuxtrace(). Errors:
  // kInvalidArgument outside them; write errors.
  absl::Status WriteAt(uint64_t offset, std::span<const uint8_t> bytes);
  // Writes the feature sections for what `features` holds (its auxtrace_index and `present`
  // are ignored: the index is the writer's own) and then the header. The writer is done.
  absl::Status Finish(const PerfFeatures& features);

  uint64_t data_bytes() const { return pos_ - data_offset_; }

 private:
  PerfDataWriter(std::string path, ScopedFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  absl::Status Flush();
  absl::Status PWrite(uint64_t offset, std::span<const uint8_t> bytes);

  std::string path_;
  ScopedFd fd_;
  std::vector<WriterEvent> events_;
  uint64_t attrs_offset_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t pos_ = 0;  // end of the data written or reserved so far
  std::vector<uint8_t> buffer_;
  uint64_t buffer_at_ = 0;  // file offset of buffer_[0]
  std::vector<AuxtraceIndexEntry> index_;
  std::vector<std::pair<uint64_t, uint64_t>> reserved_;  // [offset, offset + size)
};

// perf's user records, as perf writes them (tools/lib/perf/include/perf/event.h).
std::vector<uint8_t> EncodeAuxtraceInfo(const AuxtraceInfo& info);
// The 56-byte record of perf >= 5.11 (time_cycles, time_mask, the two capability bytes).
std::vector<uint8_t> EncodeTimeConv(const TimeConv& t);
// As many ID_INDEX records as the entries need (a record is at most 64 KiB).
std::vector<std::vector<uint8_t>> EncodeIdIndex(std::span<const IdIndexEntry> entries);
std::vector<uint8_t> EncodeFinishedRound();

}  // namespace ptkit::perf

#endif  // PTKIT_PERF_DATA_WRITER_H_
