// The perf ring-buffer protocol as pure functions: copies in and out of a power-of-two ring
// with wrap-around, head/tail loads and stores with the kernel's ordering rules, and the view
// of one mapped event (user page, data ring, AUX ring) that the drain loop works on, whether
// the kernel or the simulated PMU produced it.
#ifndef PTKIT_RECORD_RING_H_
#define PTKIT_RECORD_RING_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <span>
#include <vector>

namespace ptkit::record {

// True for a non-zero power of two.
constexpr bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Copies out.size() bytes that start at the free-running position `from` of `ring` (size a
// power of two, out.size() <= ring.size()) into `out`, wrapping at the ring end.
void CopyFromRing(std::span<const uint8_t> ring, uint64_t from, std::span<uint8_t> out);
// The same, appending to `out`.
void AppendFromRing(std::span<const uint8_t> ring, uint64_t from, uint64_t len,
                    std::vector<uint8_t>& out);
// Copies `in` (in.size() <= ring.size()) into `ring` at free-running position `at`, wrapping.
void CopyToRing(std::span<uint8_t> ring, uint64_t at, std::span<const uint8_t> in);

// Head/tail accessors with the ordering <linux/perf_event.h> prescribes: the reader loads
// *_head with acquire before reading data, and stores *_tail with release after it is done
// with the data (tools/include/linux/ring_buffer.h: ring_buffer_read_head /
// ring_buffer_write_tail). The producer side (simulated PMU) uses the mirror operations.
uint64_t LoadDataHead(const perf_event_mmap_page* page);
void StoreDataTail(perf_event_mmap_page* page, uint64_t tail);
uint64_t LoadAuxHead(const perf_event_mmap_page* page);
void StoreAuxTail(perf_event_mmap_page* page, uint64_t tail);
// Producer side.
uint64_t LoadDataTail(const perf_event_mmap_page* page);
void StoreDataHead(perf_event_mmap_page* page, uint64_t head);
uint64_t LoadAuxTail(const perf_event_mmap_page* page);
void StoreAuxHead(perf_event_mmap_page* page, uint64_t head);

// The newest `want` bytes of an overwrite-mode AUX ring whose free-running head is `head`:
// [from, from + len) in chronological order. len = min(want, ring_size, head), so a ring that
// has not wrapped yet gives [0, head). `ring_size` must be a power of two.
struct RingRange {
  uint64_t from = 0;
  uint64_t len = 0;
  friend bool operator==(const RingRange&, const RingRange&) = default;
};
RingRange SnapshotRange(uint64_t head, uint64_t ring_size, uint64_t want);

// perf's intel_pt_first_wrap() heuristic for an overwrite ring whose head is an offset
// inside the buffer (the PT driver reports aux_head that way in snapshot mode): the kernel
// hands out a zeroed buffer, so any non-zero byte in its last 4096 bytes (all of a smaller
// ring) means the hardware has wrapped at least once, as perf's intel_pt_first_wrap() decides.
// A snapshot taken while the first lap is inside that tail region is misread as wrapped, as
// in perf.
bool AuxRingWrapped(std::span<const uint8_t> ring);

// The snapshot range for an aux_head that is either free-running (>= ring size once
// wrapped; the simulated PMU and older kernels) or an in-buffer offset (Intel PT): the
// head's ring position is `head & (size - 1)`; when `wrapped`, the newest min(want, size)
// bytes end there, else the bytes [0, position) are all there is.
RingRange SnapshotRangeAt(uint64_t head, uint64_t ring_size, uint64_t want, bool wrapped);

// One mapped event as the drain loop sees it. `data` and `aux` are the rings (sizes powers
// of two; `aux` empty for an event without AUX area). In overwrite mode the AUX area is
// read-only: the reader never stores aux_tail.
struct RingView {
  perf_event_mmap_page* page = nullptr;
  std::span<uint8_t> data;
  std::span<uint8_t> aux;
  bool aux_overwrite = false;
  // Overwrite mode: aux_head is an offset inside the AUX buffer (what the Intel PT and BTS
  // drivers publish: pt_event_stop()/bts_event_stop() set handle.head = buf->data_size)
  // rather than a free-running byte count.
  bool aux_head_in_buffer = false;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_RING_H_
