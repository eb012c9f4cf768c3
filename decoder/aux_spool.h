// AuxSpool: where decoding keeps a recording's AUX bytes and captured code, so memory stays
// bounded however long the trace is. The bytes go to an unlinked temporary file (O_TMPFILE), so
// resident trace bytes are page cache the kernel can reclaim, not anonymous memory; each piece of a
// stream is mapped read-only while it decodes, and the pages behind the decoder are dropped as it
// goes.
#ifndef PTKIT_DECODER_AUX_SPOOL_H_
#define PTKIT_DECODER_AUX_SPOOL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::decoder {

// A run of bytes appended to an AuxSpool: the extents of the file it occupies, in order.
struct SpoolRun {
  struct Extent {
    uint64_t file_offset = 0;  // page aligned
    uint64_t capacity = 0;     // a multiple of the page size
  };
  std::vector<Extent> extents;
  uint64_t size = 0;
};

// A read-only contiguous mapping of a SpoolRun. Move-only.
class SpoolView {
 public:
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(map_.get()), map_.valid() ? size_ : 0};
  }
  // The bytes of a view mapped copy-on-write (AuxSpool::Map's `private_copy`), writable
  // without changing the spool; empty for a read-only view.
  std::span<uint8_t> private_bytes() {
    return {static_cast<uint8_t*>(map_.get()), map_.valid() && private_ ? size_ : 0};
  }
  // Drops the mapped pages before `offset` from this process's memory (they stay in the page
  // cache and fault back in if read again), once there are enough of them to be worth it. An
  // offset behind the last one starts another pass (a decode after a scan ahead of it).
  void ReleaseBefore(uint64_t offset);

 private:
  friend class AuxSpool;
  SpoolView() = default;  // an empty run's
  SpoolView(ScopedMmap map, size_t size, bool private_copy)
      : map_(std::move(map)), size_(size), private_(private_copy) {}
  ScopedMmap map_;        // size_ rounded up to a page
  size_t size_ = 0;       // bytes of the run
  bool private_ = false;  // mapped copy-on-write
  size_t released_ = 0;   // bytes at the start already dropped
};

// Where decoding keeps AUX bytes: one unlinked temporary file however many streams. libipt
// wants one contiguous buffer per decoder: runs grow in extents (1 MiB doubling to 64 MiB,
// never written beyond their fill, so the file is sparse) and Map() stitches a run's extents
// into one contiguous read-only mapping. Move-only.
class AuxSpool {
 public:
  // Where to try: `dir`, or $TMPDIR when `dir` is empty; then /tmp.
  static std::vector<std::string> Dirs(const std::string& dir);
  // Creates the file in the first of `dirs` where it can be, with O_TMPFILE (or mkstemp +
  // unlink where the file system lacks it).
  // Errors: kFailedPrecondition naming each directory tried and why, and what to do.
  static absl::StatusOr<AuxSpool> Create(const std::vector<std::string>& dirs);

  // Appends `bytes` to `run`. Errors: write failures (no space left, ...) naming the directory.
  absl::Status Append(SpoolRun& run, std::span<const uint8_t> bytes);
  // Maps `run` as one contiguous read-only span; with `private_copy`, copy-on-write instead
  // (for libraries that may write into their input; the pages written become private
  // memory). Errors: mmap failures.
  absl::StatusOr<SpoolView> Map(const SpoolRun& run, bool private_copy = false) const;
  const std::string& dir() const { return dir_; }
  // File size (address space of the sparse file, not the disk it uses).
  uint64_t size() const { return end_; }

 private:
  AuxSpool(ScopedFd fd, std::string dir);
  ScopedFd fd_;
  std::string dir_;
  uint64_t end_ = 0;
  uint64_t page_ = 4096;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_AUX_SPOOL_H_
