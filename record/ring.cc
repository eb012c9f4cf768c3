#include "record/ring.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ptkit::record {

// Ring sizes are powers of two (the kernel refuses other data sizes in perf_mmap() and other
// AUX sizes in rb_alloc_aux()), so a free-running position maps to `pos & (size - 1)`.
void CopyFromRing(std::span<const uint8_t> ring, uint64_t from, std::span<uint8_t> out) {
  assert(IsPowerOfTwo(ring.size()) && out.size() <= ring.size());
  if (out.empty()) return;  // memcpy must not see the null data() of an empty span
  const size_t start = static_cast<size_t>(from & (ring.size() - 1));
  const size_t first = std::min(out.size(), ring.size() - start);
  std::memcpy(out.data(), ring.data() + start, first);
  if (first < out.size()) std::memcpy(out.data() + first, ring.data(), out.size() - first);
}

void AppendFromRing(std::span<const uint8_t> ring, uint64_t from, uint64_t len,
                    std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + len);
  CopyFromRing(ring, from, std::span<uint8_t>(out).subspan(at));
}

void CopyToRing(std::span<uint8_t> ring, uint64_t at, std::span<const uint8_t> in) {
  assert(IsPowerOfTwo(ring.size()) && in.size() <= ring.size());
  if (in.empty()) return;
  const size_t start = static_cast<size_t>(at & (ring.size() - 1));
  const size_t first = std::min(in.size(), ring.size() - start);
  std::memcpy(ring.data() + start, in.data(), first);
  if (first < in.size()) std::memcpy(ring.data(), in.data() + first, in.size() - first);
}

// <linux/perf_event.h>, perf_event_mmap_page::data_head: "User-space reading the @data_head
// value should issue an smp_rmb(), after reading this value" -> load-acquire. data_tail:
// "user-space should issue an smp_mb() before writing data_tail" (all reads of the data done)
// -> store-release suffices, as tools/include/linux/ring_buffer.h does. aux_head/aux_tail
// follow the same rules. The kernel side pairs with smp_wmb() before publishing the head.
uint64_t LoadDataHead(const perf_event_mmap_page* page) {
  return __atomic_load_n(&page->data_head, __ATOMIC_ACQUIRE);
}
void StoreDataTail(perf_event_mmap_page* page, uint64_t tail) {
  __atomic_store_n(&page->data_tail, tail, __ATOMIC_RELEASE);
}
uint64_t LoadAuxHead(const perf_event_mmap_page* page) {
  return __atomic_load_n(&page->aux_head, __ATOMIC_ACQUIRE);
}
void StoreAuxTail(perf_event_mmap_page* page, uint64_t tail) {
  __atomic_store_n(&page->aux_tail, tail, __ATOMIC_RELEASE);
}
uint64_t LoadDataTail(const perf_event_mmap_page* page) {
  return __atomic_load_n(&page->data_tail, __ATOMIC_ACQUIRE);
}
void StoreDataHead(perf_event_mmap_page* page, uint64_t head) {
  __atomic_store_n(&page->data_head, head, __ATOMIC_RELEASE);
}
uint64_t LoadAuxTail(const perf_event_mmap_page* page) {
  return __atomic_load_n(&page->aux_tail, __ATOMIC_ACQUIRE);
}
void StoreAuxHead(perf_event_mmap_page* page, uint64_t head) {
  __atomic_store_n(&page->aux_head, head, __ATOMIC_RELEASE);
}

RingRange SnapshotRange(uint64_t head, uint64_t ring_size, uint64_t want) {
  const uint64_t len = std::min({want, ring_size, head});
  return RingRange{head - len, len};
}

bool AuxRingWrapped(std::span<const uint8_t> ring) {
  const size_t check = std::min<size_t>(4096, ring.size());  // perf: the last 512 u64s
  const std::span<const uint8_t> tail = ring.subspan(ring.size() - check);
  return std::any_of(tail.begin(), tail.end(), [](uint8_t b) { return b != 0; });
}

RingRange SnapshotRangeAt(uint64_t head, uint64_t ring_size, uint64_t want, bool wrapped) {
  if (head >= ring_size) return SnapshotRange(head, ring_size, want);  // free-running
  if (!wrapped) return SnapshotRange(head, ring_size, want);
  // Wrapped with an in-buffer head: continue the count one lap further so `from` stays
  // non-negative; CopyFromRing masks it.
  return SnapshotRange(head + ring_size, ring_size, want);
}

}  // namespace ptkit::record
