#include "record/ring.h"

#include <sys/resource.h>

#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "record/ring_buffer.h"
#include "status_matchers.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

// Every start position (two laps, so free-running positions past the size are covered) and
// every length up to the whole ring, against a byte-by-byte reference.
TEST(RingCopyTest, FromRingEveryAlignmentAndLength) {
  for (size_t size : {8u, 64u}) {
    const std::vector<uint8_t> ring = Pattern(size, 3);
    for (uint64_t from = 0; from < 2 * size; ++from) {
      for (size_t len = 0; len <= size; ++len) {
        std::vector<uint8_t> out(len, 0xee);
        CopyFromRing(ring, from + (uint64_t{1} << 40), out);
        for (size_t i = 0; i < len; ++i) {
          ASSERT_EQ(out[i], ring[(from + i) % size])
              << "size " << size << " from " << from << " len " << len << " i " << i;
        }
      }
    }
  }
}

TEST(RingCopyTest, ToRingEveryAlignmentAndLength) {
  for (size_t size : {8u, 64u}) {
    for (uint64_t at = 0; at < 2 * size; ++at) {
      for (size_t len = 0; len <= size; ++len) {
        std::vector<uint8_t> ring(size, 0xaa);
        const std::vector<uint8_t> in = Pattern(len, static_cast<uint8_t>(at));
        CopyToRing(ring, at, in);
        for (size_t i = 0; i < size; ++i) {
          // Position i holds in[k] where (at + k) % size == i, k < len; else untouched.
          const size_t k = (i + size - at % size) % size;
          const uint8_t want = k < len ? in[k] : 0xaa;
          ASSERT_EQ(ring[i], want) << "size " << size << " at " << at << " len " << len;
        }
      }
    }
  }
}

TEST(RingCopyTest, AppendFromRingRoundTrip) {
  std::vector<uint8_t> ring(4096, 0);
  const std::vector<uint8_t> in = Pattern(3000, 9);
  CopyToRing(ring, 4096 * 5 + 2000, in);
  std::vector<uint8_t> out = {1, 2};
  AppendFromRing(ring, 2000, 3000, out);
  ASSERT_EQ(out.size(), 3002u);
  EXPECT_EQ(std::vector<uint8_t>(out.begin() + 2, out.end()), in);
}

TEST(SnapshotRangeTest, NotWrappedWrappedAndSizes) {
  EXPECT_EQ(SnapshotRange(0, 4096, 4096), (RingRange{0, 0}));
  EXPECT_EQ(SnapshotRange(100, 4096, 4096), (RingRange{0, 100}));  // not wrapped yet
  EXPECT_EQ(SnapshotRange(100, 4096, 50), (RingRange{50, 50}));
  EXPECT_EQ(SnapshotRange(4096, 4096, 1 << 20), (RingRange{0, 4096}));
  EXPECT_EQ(SnapshotRange(10000, 4096, 1 << 20), (RingRange{10000 - 4096, 4096}));
  EXPECT_EQ(SnapshotRange(10000, 4096, 1000), (RingRange{9000, 1000}));
}

TEST(SnapshotRangeAtTest, FreeRunningAndInBufferHeads) {
  // Free-running heads: same as SnapshotRange whatever `wrapped` says.
  EXPECT_EQ(SnapshotRangeAt(10000, 4096, 1000, false), (RingRange{9000, 1000}));
  // In-buffer head, not wrapped: [0, head).
  EXPECT_EQ(SnapshotRangeAt(100, 4096, 4096, false), (RingRange{0, 100}));
  EXPECT_EQ(SnapshotRangeAt(100, 4096, 50, false), (RingRange{50, 50}));
  // In-buffer head, wrapped: the newest bytes end at the head's position, across the end.
  EXPECT_EQ(SnapshotRangeAt(100, 4096, 4096, true), (RingRange{100, 4096}));
  EXPECT_EQ(SnapshotRangeAt(100, 4096, 300, true), (RingRange{4096 + 100 - 300, 300}));
  EXPECT_EQ(SnapshotRangeAt(0, 4096, 4096, true), (RingRange{0, 4096}));
}

// As perf's intel_pt_first_wrap(): the last 512 u64s of the buffer, all of a smaller one.
TEST(AuxRingWrappedTest, LooksAtTheLast4096Bytes) {
  std::vector<uint8_t> ring(16384, 0);
  EXPECT_FALSE(AuxRingWrapped(ring));
  ring[16384 - 4097] = 1;  // just before the last 4096 bytes
  EXPECT_FALSE(AuxRingWrapped(ring));
  ring[16384 - 4096] = 1;
  EXPECT_TRUE(AuxRingWrapped(ring));
  std::vector<uint8_t> small(256, 0);
  EXPECT_FALSE(AuxRingWrapped(small));
  small[0] = 1;
  EXPECT_TRUE(AuxRingWrapped(small));
}

TEST(HeadTailTest, LoadsAndStores) {
  perf_event_mmap_page page{};
  StoreDataHead(&page, 123);
  StoreAuxHead(&page, 456);
  EXPECT_EQ(LoadDataHead(&page), 123u);
  EXPECT_EQ(LoadAuxHead(&page), 456u);
  StoreDataTail(&page, 100);
  StoreAuxTail(&page, 400);
  EXPECT_EQ(LoadDataTail(&page), 100u);
  EXPECT_EQ(LoadAuxTail(&page), 400u);
  EXPECT_EQ(page.data_tail, 100u);
  EXPECT_EQ(page.aux_tail, 400u);
}

TEST(MlockTest, LargestFittingPagesHalvesAuxFirst) {
  MlockLimits l{
      .perf_event_mlock_kb = 516, .rlimit_memlock = 0, .online_cpus = 2, .page_size = 4096};
  // 516 KiB * 2 CPUs = 258 pages.
  EXPECT_EQ(LargestFittingPages(l, {128, 128}, 1), (MmapPages{128, 128}));  // 257 pages
  EXPECT_EQ(LargestFittingPages(l, {128, 1024}, 1), (MmapPages{128, 128}));
  EXPECT_EQ(LargestFittingPages(l, {128, 1024}, 2), (MmapPages{64, 64}));  // 2 * 129
  EXPECT_EQ(LargestFittingPages(l, {1024, 0}, 1), (MmapPages{256, 0}));
  l.perf_event_mlock_kb = 0;
  EXPECT_EQ(LargestFittingPages(l, {1, 1}, 1), (MmapPages{}));
  l.rlimit_memlock = RLIM_INFINITY;
  EXPECT_EQ(LargestFittingPages(l, {1 << 20, 1 << 20}, 64), (MmapPages{1 << 20, 1 << 20}));
}

TEST(MlockTest, PermissionErrorNamesEverything) {
  MlockLimits l{
      .perf_event_mlock_kb = 516, .rlimit_memlock = 64 * 1024, .online_cpus = 2, .page_size = 4096};
  EXPECT_THAT(
      MmapPermissionError("AUX area of intel_pt (cpu 1)", l, {128, 1024}, 2),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("mmap AUX area of intel_pt (cpu 1)"),
                     HasSubstr(std::to_string(2 * (1 + 128 + 1024) * 4096) + " bytes"),
                     HasSubstr("perf_event_mlock_kb (516 KiB per CPU x 2 CPUs)"),
                     HasSubstr("RLIMIT_MEMLOCK (64 KiB)"), HasSubstr("-m 64,64 would fit"))));
  l.perf_event_mlock_kb = 0;
  l.rlimit_memlock = 0;
  EXPECT_THAT(MmapPermissionError("data ring of x", l, {4, 0}, 1),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("no -m fits")));
}

TEST(MlockTest, ReadMlockLimitsUsesReader) {
  const MlockLimits l = ReadMlockLimits([](const std::string& p) -> absl::StatusOr<std::string> {
    if (p == "/proc/sys/kernel/perf_event_mlock_kb") return std::string("1024\n");
    return absl::NotFoundError(p);
  });
  EXPECT_EQ(l.perf_event_mlock_kb, 1024u);
  EXPECT_GE(l.online_cpus, 1u);
  EXPECT_GE(l.page_size, 4096u);
}

}  // namespace
}  // namespace ptkit::record
