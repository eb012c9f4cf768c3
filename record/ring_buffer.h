// RingBuffer: the mmap of one perf event: user page + data ring (2^n pages) + optional AUX
// area (2^m pages), unmapped on destruction. Hands out a RingView; copies live in ring.h.
#ifndef PTKIT_RECORD_RING_BUFFER_H_
#define PTKIT_RECORD_RING_BUFFER_H_

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"
#include "record/perf_event.h"
#include "record/ring.h"

namespace ptkit::record {

// The limits the kernel checks when an event is mmapped (kernel/events/core.c perf_mmap()
// and rb_alloc_aux()): each user may lock perf_event_mlock_kb * online CPUs without
// privilege, plus RLIMIT_MEMLOCK on top; CAP_IPC_LOCK lifts both.
struct MlockLimits {
  uint64_t perf_event_mlock_kb = 516;
  uint64_t rlimit_memlock = 8 << 20;  // bytes; RLIM_INFINITY when unlimited
  uint64_t online_cpus = 1;
  uint64_t page_size = 4096;
};
// Reads /proc/sys/kernel/perf_event_mlock_kb (via `read_file`), getrlimit(RLIMIT_MEMLOCK),
// the online CPU count and the page size. Unreadable values keep their defaults.
MlockLimits ReadMlockLimits(const FileReader& read_file = ReadSystemFile);

// The largest "-m DATA,AUX" (both powers of two, data >= 1, aux kept >= 1 if asked for)
// no bigger than the request such that `events` mappings fit in the limits, halving AUX
// first (as it is the big one), then data. Returns {0, 0} when even -m 1,1 does not fit.
struct MmapPages {
  uint64_t data_pages = 0;
  uint64_t aux_pages = 0;
  friend bool operator==(const MmapPages&, const MmapPages&) = default;
};
MmapPages LargestFittingPages(const MlockLimits& limits, MmapPages asked, uint64_t events);

// The kPermissionDenied text for an mmap EPERM: names `what`, the bytes asked, RLIMIT_MEMLOCK,
// perf_event_mlock_kb and the -m that would fit `events` mappings. Pure.
absl::Status MmapPermissionError(std::string_view what, const MlockLimits& limits, MmapPages asked,
                                 uint64_t events);

// The most pages a data ring or an AUX area may have (16 GiB of 4 KiB pages). Larger
// counts are refused before any size is computed from them, so no product overflows.
inline constexpr uint64_t kMaxMmapPages = uint64_t{1} << 22;

class RingBuffer {
 public:
  // Maps `event`: 1 + data_pages pages, then (aux_pages > 0) sets aux_offset/aux_size in the
  // user page and maps the AUX area writable (full-trace) or read-only (`aux_overwrite`,
  // snapshot mode). `events` is how many events will be mapped in total (for the -m hint).
  // Errors: kInvalidArgument when a page count is not a power of two or exceeds
  // kMaxMmapPages; mmap failures name
  // the area ("data ring" / "AUX area") and the event; EPERM gives MmapPermissionError();
  // EOPNOTSUPP on the AUX area says the event's PMU has no AUX support.
  static absl::StatusOr<RingBuffer> Map(const PerfEvent& event, uint64_t data_pages,
                                        uint64_t aux_pages, bool aux_overwrite, uint64_t events = 1,
                                        const MlockLimits& limits = ReadMlockLimits());

  RingBuffer(RingBuffer&& other) noexcept { *this = std::move(other); }
  RingBuffer& operator=(RingBuffer&& other) noexcept;

  RingView view() const { return view_; }
  perf_event_mmap_page* page() const { return view_.page; }

 private:
  RingBuffer() = default;

  ScopedMmap base_;  // user page + data ring
  ScopedMmap aux_;   // unmapped before base_ (members are destroyed in reverse order)
  RingView view_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_RING_BUFFER_H_
