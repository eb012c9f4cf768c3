// ContainerWriter: appends records to a trace.pt file from any thread.
//
// Producers hand records to a bounded queue; one writer thread compresses (zstd, where it
// pays), checksums and writes them. A full queue makes producers wait: nothing is dropped.
// The first write error (ENOSPC, EIO, EFBIG, ...) is sticky: every later call returns it, and
// the file is cut back to the last whole record so it stays readable.
#ifndef PTKIT_CONTAINER_WRITER_H_
#define PTKIT_CONTAINER_WRITER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ptkit/container_format.h"

namespace ptkit {

struct WriterOptions {
  bool compress = true;  // zstd per record when it saves at least 1/16 of the bytes
  int zstd_level = 1;
  bool overwrite = false;                            // replace an existing file instead of failing
  size_t queue_bytes = size_t{64} << 20;             // producers wait when this much is queued
  absl::Duration flush_interval = absl::Seconds(1);  // buffered bytes reach the file this often
  // Threads that compress: the writer thread, plus one helper when 2 (records are still
  // written in order, each its own zstd frame). The default uses the helper when the creating
  // thread may run on more than one CPU (sched_getaffinity).
  int compress_threads = 0;  // 0: 2 when more than one CPU is usable, else 1
};

struct WriterStats {
  uint64_t records = 0;         // records written, footer excluded
  uint64_t raw_bytes = 0;       // payload bytes before compression
  uint64_t stored_bytes = 0;    // bytes written to the file, headers included
  uint64_t producer_waits = 0;  // times a producer waited for queue space
};

class ContainerWriter;

// --archive: the whole file `read_from` as one code record with kCodeArchivedFile (pid 0,
// address 0) named `path` with `build_id`, so that a decoder without the file has its symbols
// and line tables. With `debug_file`, the record is the separate debug file `path` of an
// archived file (flag kCodeDebugFile too). Errors: kResourceExhausted for a file larger than a
// record holds, the file's (open, read, naming it), the writer's.
absl::Status AppendArchivedFile(ContainerWriter& writer, const std::string& path,
                                const std::string& read_from, const std::vector<uint8_t>& build_id,
                                bool debug_file = false);

class ContainerWriter {
 public:
  // Creates `path` and writes the file header. Fails (kAlreadyExists) when the file exists
  // and `options.overwrite` is false, or with the errno of open/write. With
  // `options.overwrite`, a file (or symbolic link) at `path` stays until Publish(): the
  // recording is written to a new file beside it, which takes its place then. A character
  // device or FIFO is written as it is, with or without `options.overwrite`.
  static absl::StatusOr<std::unique_ptr<ContainerWriter>> Create(const std::string& path,
                                                                 const WriterOptions& options = {});
  // The recording started: the file Create() made takes its path (a file there is replaced).
  // Errors: rename's. A no-op for CreateFromFd's writers and after Publish() or Discard().
  absl::Status Publish();
  // The recording did not start: Abandon(), and the file Create() made is removed (what was
  // at the path before stays). A no-op for the file after Publish().
  void Discard();
  // Writes to an already open file descriptor (taken over, closed by the writer).
  static absl::StatusOr<std::unique_ptr<ContainerWriter>> CreateFromFd(
      int fd, const std::string& name, const WriterOptions& options = {});

  // Abandon()s if neither Close() nor Abandon() was called: a writer that goes away on an
  // error path leaves a file without footer, which readers report as not closed cleanly (but
  // Discard()s a file that was to replace another and was not published).
  ~ContainerWriter();
  ContainerWriter(const ContainerWriter&) = delete;
  ContainerWriter& operator=(const ContainerWriter&) = delete;

  // Queues one record. Thread-safe; blocks while the queue is full. Fails with the sticky
  // write error, kFailedPrecondition after Close(), kInvalidArgument for a payload larger
  // than kMaxPayloadSize or a type that is reserved (kFooter).
  absl::Status Append(RecordType type, std::vector<uint8_t> payload);
  absl::Status AppendMetadata(std::string_view json);
  // Typed appends encode into a recycled buffer (no allocation or page fault per record once
  // the writer runs).
  absl::Status AppendSideband(const SidebandRecord& r) {
    return Append(RecordType::kSideband, EncodeSideband(r, RecycledBuffer()));
  }
  absl::Status AppendAux(const AuxRecord& r) {
    return Append(RecordType::kAux, EncodeAux(r, RecycledBuffer()));
  }
  absl::Status AppendLoss(const LossRecord& r) { return Append(RecordType::kLoss, EncodeLoss(r)); }
  absl::Status AppendSample(const SampleRecord& r) {
    return Append(RecordType::kSample, EncodeSample(r, RecycledBuffer()));
  }
  absl::Status AppendSnapshot(const SnapshotRecord& r) {
    return Append(RecordType::kSnapshot, EncodeSnapshot(r, RecycledBuffer()));
  }
  absl::Status AppendCode(const CodeRecord& r) { return Append(RecordType::kCode, EncodeCode(r)); }
  absl::Status AppendPerfFeature(const PerfFeatureRecord& r) {
    return Append(RecordType::kPerfFeature, EncodePerfFeature(r));
  }
  absl::Status AppendCounters(std::span<const CounterValue> v) {
    return Append(RecordType::kCounters, EncodeCounters(v));
  }

  // Waits until every record queued before the call is written to the file (write(2); not
  // fsync). Returns the sticky error if any.
  absl::Status Flush();
  // Drains the queue, writes the footer, closes the file and joins the writer thread; then
  // Publish(). Idempotent; returns the first error seen.
  absl::Status Close();
  // As Close() but without the footer: for recordings that failed. Everything queued is still
  // written. Idempotent (and a no-op after Close()).
  absl::Status Abandon();

  WriterStats stats() const;

 private:
  struct State;
  explicit ContainerWriter(std::unique_ptr<State> state);
  // A payload buffer the writer thread has finished with (empty, capacity kept), or a new one.
  std::vector<uint8_t> RecycledBuffer();
  absl::Status Finish(bool footer);
  std::unique_ptr<State> state_;
};

}  // namespace ptkit

#endif  // PTKIT_CONTAINER_WRITER_H_
