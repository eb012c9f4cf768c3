#include "decoder/aux_spool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "decoder/trace_config.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

// Spool extents: the first of a run, and the largest (bounds the mappings per piece).
constexpr uint64_t kFirstExtent = uint64_t{1} << 20;
constexpr uint64_t kMaxExtent = uint64_t{64} << 20;
// Pages behind the decoder are dropped in batches of at least this many bytes.
constexpr uint64_t kReleaseBatch = uint64_t{16} << 20;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// An unlinked file in `dir`: O_TMPFILE, or mkstemp + unlink where the file system lacks it.
absl::StatusOr<ScopedFd> OpenUnlinkedFile(const std::string& dir) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) return ScopedFd(fd);
  if (errno != EOPNOTSUPP && errno != EISDIR) return ErrnoStatus(errno, "open(O_TMPFILE) in ", dir);
  std::string name = dir + "/ptdecode-aux-XXXXXX";
  fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "mkstemp in ", dir);
  unlink(name.c_str());
  return ScopedFd(fd);
}

}  // namespace

AuxSpool::AuxSpool(ScopedFd fd, std::string dir) : fd_(std::move(fd)), dir_(std::move(dir)) {
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) page_ = static_cast<uint64_t>(page);
}

std::vector<std::string> AuxSpool::Dirs(const std::string& dir) {
  std::vector<std::string> dirs;
  if (!dir.empty()) {
    dirs.push_back(dir);
  } else if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') {
    dirs.push_back(tmp);
  }
  if (dirs.empty() || dirs.front() != "/tmp") dirs.push_back("/tmp");
  return dirs;
}

absl::StatusOr<AuxSpool> AuxSpool::Create(const std::vector<std::string>& dirs) {
  std::string why;
  for (const std::string& d : dirs) {
    absl::StatusOr<ScopedFd> fd = OpenUnlinkedFile(d);
    if (fd.ok()) return AuxSpool(std::move(*fd), d);
    absl::StrAppend(&why, why.empty() ? "" : "; ", fd.status().message());
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot create a temporary file to hold the AUX trace and captured code while they decode (",
      why, "); set TMPDIR to a writable directory with room for the trace"));
}

absl::Status AuxSpool::Append(SpoolRun& run, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    uint64_t filled = run.size;
    for (size_t i = 0; i + 1 < run.extents.size(); ++i) filled -= run.extents[i].capacity;
    if (run.extents.empty() || filled == run.extents.back().capacity) {
      // A new extent at the end of the file; the file is sized to hold it so that a mapping
      // of its last partial page never reaches past the end (SIGBUS).
      const uint64_t capacity = run.extents.empty()
                                    ? kFirstExtent
                                    : std::min(run.extents.back().capacity * 2, kMaxExtent);
      const uint64_t aligned = RoundUp(capacity, page_);
      if (ftruncate(fd_.get(), static_cast<off_t>(end_ + aligned)) != 0) {
        return ErrnoStatus(errno, "growing the temporary AUX file in ", dir_);
      }
      run.extents.push_back({end_, aligned});
      end_ += aligned;
      filled = 0;
    }
    const SpoolRun::Extent& e = run.extents.back();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), e.capacity - filled));
    ssize_t done = pwrite(fd_.get(), bytes.data(), n, static_cast<off_t>(e.file_offset + filled));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) {
      if (done == 0) errno = EIO;
      return ErrnoStatus(errno, "writing the AUX trace to a temporary file in ", dir_,
                         " (set TMPDIR to a directory with more room)");
    }
    run.size += static_cast<uint64_t>(done);
    bytes = bytes.subspan(static_cast<size_t>(done));
  }
  return absl::OkStatus();
}

absl::StatusOr<SpoolView> AuxSpool::Map(const SpoolRun& run, bool private_copy) const {
  if (run.size == 0) return SpoolView();
  const size_t length = static_cast<size_t>(RoundUp(run.size, page_));
  // Reserve the address range, then map each extent over its part of it.
  ScopedMmap reserved(
      mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), length);
  if (!reserved.valid()) return ErrnoStatus(errno, "mmap ", length, " bytes for an AUX piece");
  auto* base = static_cast<uint8_t*>(reserved.get());
  uint64_t at = 0;
  for (const SpoolRun::Extent& e : run.extents) {
    if (at >= length) break;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(e.capacity, length - at));
    void* p = mmap(base + at, n, private_copy ? PROT_READ | PROT_WRITE : PROT_READ,
                   (private_copy ? MAP_PRIVATE : MAP_SHARED) | MAP_FIXED, fd_.get(),
                   static_cast<off_t>(e.file_offset));
    if (p == MAP_FAILED) return ErrnoStatus(errno, "mmap the temporary AUX file in ", dir_);
    at += n;
  }
  madvise(base, length, MADV_SEQUENTIAL);
  return SpoolView(std::move(reserved), static_cast<size_t>(run.size), private_copy);
}

void SpoolView::ReleaseBefore(uint64_t offset) {
  // MADV_DONTNEED on a shared file mapping only unmaps: a later read faults the page back in
  // from the page cache, so this can never change what is read. (On a private one it would
  // drop what was written: not done.)
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t end = static_cast<size_t>(std::min<uint64_t>(offset, size_)) / page * page;
  // Behind what was dropped: another pass over the bytes (decoding after a scan ahead of it,
  // OnScanned), which maps them again as it reads them: drop them again behind it.
  if (end < released_) released_ = 0;
  if (!map_.valid() || private_ || end < released_ + kReleaseBatch) return;
  madvise(static_cast<uint8_t*>(map_.get()) + released_, end - released_, MADV_DONTNEED);
  released_ = end;
}

}  // namespace ptkit::decoder
