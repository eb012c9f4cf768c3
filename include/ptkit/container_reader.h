// ContainerReader: streams the records of a trace.pt file.
//
// It never loads the whole file and never sizes an allocation from a length it has not
// checked. Every checksum is verified. A cut or damaged file still opens: Next() returns every
// whole, valid record and report() says exactly what was lost (offset, bytes, records, why).
#ifndef PTKIT_CONTAINER_READER_H_
#define PTKIT_CONTAINER_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/container_format.h"

namespace ptkit {

// Random-access bytes: a file (pread) or memory. Injected so tests and the fuzzer need no files.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads up to out.size() bytes at `offset`; returns how many (fewer only at the end).
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) = 0;
  virtual const std::string& name() const = 0;
};
// Fails with the errno of open/fstat, naming the path.
absl::StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path);
// `bytes` must outlive the source.
std::unique_ptr<ByteSource> MemorySource(std::span<const uint8_t> bytes, std::string name);

// One record, valid until the next call to Next().
struct RecordView {
  RecordType type;
  uint64_t sequence = 0;
  uint64_t offset = 0;        // file offset of the frame header
  uint64_t stored_bytes = 0;  // frame header + stored payload
  bool compressed = false;
  std::span<const uint8_t> payload;  // uncompressed
};

// A stretch of the file whose records could not be used.
struct Damage {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t records = 0;  // records lost: exact when known from sequence numbers, else a minimum
  std::string reason;
};

struct ReadReport {
  uint64_t file_size = 0;
  uint64_t records = 0;  // valid records returned (footer included)
  bool footer_present = false;
  std::vector<Damage> damage;
  std::map<uint16_t, uint64_t> unknown_types;  // record type -> count, skipped
  std::vector<std::string> warnings;
  uint64_t lost_bytes() const;
  uint64_t lost_records() const;
  bool clean() const { return damage.empty() && footer_present; }
};

class ContainerReader {
 public:
  // Checks the file header. Errors: kNotFound/kPermissionDenied/... from open (naming the
  // path), kInvalidArgument "not a ptkit container" (empty, too short, wrong magic),
  // kUnimplemented for a newer format version.
  static absl::StatusOr<ContainerReader> Open(const std::string& path);
  static absl::StatusOr<ContainerReader> Open(std::unique_ptr<ByteSource> source);

  ContainerReader(ContainerReader&&) noexcept;
  ContainerReader& operator=(ContainerReader&&) noexcept;
  ~ContainerReader();

  // Reads the next valid record into `out` and returns true, or returns false at the end.
  // Damage is not an error: it is skipped and added to report(). Errors are I/O failures only.
  absl::StatusOr<bool> Next(RecordView& out);
  // From here on Next returns records of `type` only and skips the others unread (neither
  // checksummed nor decompressed; their damage is not reported): for a reader that wants one
  // kind, such as the metadata, without decompressing the trace.
  void ReadOnly(RecordType type);
  // From the next Next() on, a second thread reads, checks and decompresses the records ahead
  // of Next() (up to 8 MiB of payloads, or one record), so that the caller's work on each record
  // overlaps the reading of the next ones. The records and the report are the same. Call
  // ReadOnly before it, if at all.
  void ReadAhead();

  // With ReadAhead, complete once Next() has returned false (asked before, it stops the second
  // thread: the records it had not read are read by Next() on the caller's thread).
  const ReadReport& report() const;
  const std::string& name() const;

 private:
  struct State;
  explicit ContainerReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ptkit

#endif  // PTKIT_CONTAINER_READER_H_
