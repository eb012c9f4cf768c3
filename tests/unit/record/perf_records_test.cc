// Tests of include/ptkit/perf_records.h (src/perf_records.cc). Lives under unit/record because
// the recorder work owns the file; tests/unit/src belongs to the container work.
#include "ptkit/perf_records.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::perf {
namespace {

using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr SampleIdLayout kLayout{
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER, true};

// Hand-written bytes, independent of RecordBuilder.
struct Bytes {
  std::vector<uint8_t> v;
  Bytes& u16(uint16_t x) { return put(&x, 2); }
  Bytes& u32(uint32_t x) { return put(&x, 4); }
  Bytes& u64(uint64_t x) { return put(&x, 8); }
  Bytes& str(const char* s, size_t padded) {
    std::vector<uint8_t> b(padded, 0);
    std::memcpy(b.data(), s, strlen(s));
    return put(b.data(), padded);
  }
  Bytes& put(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    v.insert(v.end(), c, c + n);
    return *this;
  }
};

SampleId Sid(uint32_t pid, uint32_t tid, uint64_t time, uint32_t cpu, uint64_t id) {
  SampleId s;
  s.has_tid = s.has_time = s.has_cpu = s.has_id = true;
  s.pid = pid;
  s.tid = tid;
  s.time = time;
  s.cpu = cpu;
  s.id = id;
  return s;
}

TEST(SampleIdLayoutTest, Sizes) {
  EXPECT_EQ(kLayout.size(), 32u);
  EXPECT_EQ((SampleIdLayout{kLayout.sample_type, false}.size()), 0u);
  EXPECT_EQ((SampleIdLayout{PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_IP, true}.size()),
            16u);
}

TEST(ParseMmap2Test, HandBuiltKernelLayout) {
  Bytes b;
  b.u32(PERF_RECORD_MMAP2).u16(0).u16(8 + 64 + 16 + 32);
  b.u32(100).u32(101).u64(0x400000).u64(0x2000).u64(0x1000);
  b.u32(8).u32(1).u64(123456).u64(7).u32(5).u32(2);
  b.str("/bin/true", 16);
  b.u32(100).u32(101).u64(999).u32(1).u32(0).u64(42);
  const RecordView r{PERF_RECORD_MMAP2, 0, b.v};
  PTKIT_ASSERT_OK_AND_ASSIGN(Mmap2 m, ParseMmap2(r, kLayout));
  EXPECT_EQ(m.pid, 100u);
  EXPECT_EQ(m.tid, 101u);
  EXPECT_EQ(m.addr, 0x400000u);
  EXPECT_EQ(m.len, 0x2000u);
  EXPECT_EQ(m.pgoff, 0x1000u);
  EXPECT_EQ(m.maj, 8u);
  EXPECT_EQ(m.min, 1u);
  EXPECT_EQ(m.ino, 123456u);
  EXPECT_EQ(m.ino_generation, 7u);
  EXPECT_TRUE(m.build_id.empty());
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.flags, 2u);
  EXPECT_EQ(m.filename, "/bin/true");
  EXPECT_EQ(m.sample_id.pid, 100u);
  EXPECT_EQ(m.sample_id.tid, 101u);
  EXPECT_EQ(m.sample_id.time, 999u);
  EXPECT_EQ(m.sample_id.cpu, 1u);
  EXPECT_EQ(m.sample_id.id, 42u);
  // RecordBuilder produces the same bytes.
  Mmap2 again = m;
  EXPECT_EQ(EncodeMmap2(again, kLayout), b.v);
}

TEST(ParseMmap2Test, BuildIdVariant) {
  Mmap2 m;
  m.pid = 1;
  m.addr = 0x7f0000000000;
  const std::vector<uint8_t> id = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                   11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  m.build_id = id;
  m.filename = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  m.sample_id = Sid(1, 1, 5, 0, 9);
  const std::vector<uint8_t> bytes = EncodeMmap2(m, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(bytes));
  EXPECT_EQ(r.misc, PERF_RECORD_MISC_MMAP_BUILD_ID);
  PTKIT_ASSERT_OK_AND_ASSIGN(Mmap2 p, ParseMmap2(r, kLayout));
  EXPECT_THAT(std::vector<uint8_t>(p.build_id.begin(), p.build_id.end()), ::testing::Eq(id));
  EXPECT_EQ(p.filename, m.filename);
  EXPECT_EQ(p.maj, 0u);
  // An impossible build_id_size is data loss.
  std::vector<uint8_t> bad = bytes;
  bad[8 + 32] = 21;
  EXPECT_THAT(ParseMmap2(RecordView{r.type, r.misc, bad}, kLayout),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("build_id_size 21")));
}

TEST(ParseCommTest, ExecFlagAndPadding) {
  Bytes b;
  b.u32(PERF_RECORD_COMM).u16(PERF_RECORD_MISC_COMM_EXEC).u16(8 + 8 + 8 + 32);
  b.u32(7).u32(8).str("true", 8);
  b.u32(7).u32(8).u64(1000).u32(3).u32(0).u64(11);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(b.v));
  PTKIT_ASSERT_OK_AND_ASSIGN(Comm c, ParseComm(r, kLayout));
  EXPECT_EQ(c.pid, 7u);
  EXPECT_EQ(c.tid, 8u);
  EXPECT_EQ(c.comm, "true");
  EXPECT_TRUE(c.exec);
  EXPECT_EQ(c.sample_id.cpu, 3u);
  EXPECT_EQ(EncodeComm(c, kLayout), b.v);
  // A 7-character comm needs exactly 8 bytes with its NUL; 8 characters need 16.
  c.comm = "1234567";
  EXPECT_EQ(EncodeComm(c, kLayout).size(), 8u + 8 + 8 + 32);
  c.comm = "12345678";
  EXPECT_EQ(EncodeComm(c, kLayout).size(), 8u + 8 + 16 + 32);
}

TEST(ParseTaskTest, ForkAndExit) {
  Bytes b;
  b.u32(PERF_RECORD_EXIT).u16(0).u16(8 + 24 + 32);
  b.u32(10).u32(1).u32(11).u32(10).u64(5555);
  b.u32(10).u32(11).u64(5555).u32(0).u32(0).u64(3);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(b.v));
  PTKIT_ASSERT_OK_AND_ASSIGN(Task t, ParseTask(r, kLayout));
  EXPECT_TRUE(t.exit);
  EXPECT_EQ(t.pid, 10u);
  EXPECT_EQ(t.ppid, 1u);
  EXPECT_EQ(t.tid, 11u);
  EXPECT_EQ(t.ptid, 10u);
  EXPECT_EQ(t.time, 5555u);
  EXPECT_EQ(EncodeTask(t, kLayout), b.v);
  t.exit = false;
  const std::vector<uint8_t> fork_bytes = EncodeTask(t, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView f, ReadRecord(fork_bytes));
  EXPECT_EQ(f.type, static_cast<uint32_t>(PERF_RECORD_FORK));
}

TEST(ParseAuxTest, FlagsAndTrailer) {
  Bytes b;
  b.u32(PERF_RECORD_AUX).u16(0).u16(8 + 24 + 32);
  b.u64(0x10000).u64(0x800).u64(PERF_AUX_FLAG_TRUNCATED | PERF_AUX_FLAG_COLLISION);
  b.u32(1).u32(2).u64(77).u32(5).u32(0).u64(6);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(b.v));
  PTKIT_ASSERT_OK_AND_ASSIGN(Aux a, ParseAux(r, kLayout));
  EXPECT_EQ(a.aux_offset, 0x10000u);
  EXPECT_EQ(a.aux_size, 0x800u);
  EXPECT_TRUE(a.truncated());
  EXPECT_TRUE(a.collision());
  EXPECT_FALSE(a.partial());
  EXPECT_FALSE(a.overwrite());
  EXPECT_EQ(a.sample_id.time, 77u);
  EXPECT_EQ(a.sample_id.cpu, 5u);
  EXPECT_EQ(EncodeAux(a, kLayout), b.v);
}

TEST(ParseItraceStartLostSwitchTest, RoundTrip) {
  ItraceStart s{.pid = 3, .tid = 4, .sample_id = Sid(3, 4, 10, 1, 2)};
  const std::vector<uint8_t> r1_bytes = EncodeItraceStart(s, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r1, ReadRecord(r1_bytes));
  EXPECT_EQ(r1.bytes.size(), 8u + 8 + 32);
  PTKIT_ASSERT_OK_AND_ASSIGN(ItraceStart s2, ParseItraceStart(r1, kLayout));
  EXPECT_EQ(s2.pid, 3u);
  EXPECT_EQ(s2.tid, 4u);
  EXPECT_EQ(s2.sample_id.time, 10u);

  Lost l{.id = 9, .lost = 12345, .sample_id = Sid(0, 0, 11, 1, 9)};
  const std::vector<uint8_t> r2_bytes = EncodeLost(l, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r2, ReadRecord(r2_bytes));
  PTKIT_ASSERT_OK_AND_ASSIGN(Lost l2, ParseLost(r2, kLayout));
  EXPECT_EQ(l2.id, 9u);
  EXPECT_EQ(l2.lost, 12345u);

  Switch w{.out = true, .preempt = true, .sample_id = Sid(5, 5, 12, 0, 1)};
  const std::vector<uint8_t> r3_bytes = EncodeSwitch(w, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r3, ReadRecord(r3_bytes));
  EXPECT_EQ(r3.bytes.size(), 8u + 32);
  PTKIT_ASSERT_OK_AND_ASSIGN(Switch w2, ParseSwitch(r3, kLayout));
  EXPECT_TRUE(w2.out && w2.preempt);
  EXPECT_FALSE(w2.cpu_wide);
  EXPECT_EQ(w2.sample_id.pid, 5u);

  Switch cw{.out = false, .cpu_wide = true, .next_prev_pid = 8, .next_prev_tid = 9};
  const std::vector<uint8_t> r4_bytes = EncodeSwitch(cw, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r4, ReadRecord(r4_bytes));
  PTKIT_ASSERT_OK_AND_ASSIGN(Switch cw2, ParseSwitch(r4, kLayout));
  EXPECT_TRUE(cw2.cpu_wide);
  EXPECT_FALSE(cw2.out || cw2.preempt);
  EXPECT_EQ(cw2.next_prev_pid, 8u);
  EXPECT_EQ(cw2.next_prev_tid, 9u);
}

TEST(SampleIdTest, AllFieldsInKernelOrder) {
  const SampleIdLayout layout{
      PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU,
      true};
  Bytes b;
  b.u32(PERF_RECORD_SWITCH).u16(0).u16(8 + 40);
  b.u32(1).u32(2).u64(3).u64(4).u64(5).u32(6).u32(0);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(b.v));
  PTKIT_ASSERT_OK_AND_ASSIGN(SampleId s, ParseSampleId(r, layout));
  EXPECT_EQ(s.pid, 1u);
  EXPECT_EQ(s.tid, 2u);
  EXPECT_EQ(s.time, 3u);
  EXPECT_EQ(s.id, 4u);
  EXPECT_EQ(s.stream_id, 5u);
  EXPECT_EQ(s.cpu, 6u);
  EXPECT_TRUE(s.has_stream_id);
  PTKIT_ASSERT_OK_AND_ASSIGN(SampleId none, ParseSampleId(r, SampleIdLayout{~0ull, false}));
  EXPECT_FALSE(none.has_tid || none.has_time || none.has_cpu || none.has_id);
}

TEST(RecordReaderTest, WalksAndStopsAtExactEnd) {
  std::vector<uint8_t> all;
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> r = EncodeLost(Lost{.id = uint64_t(i), .lost = 1}, kLayout);
    all.insert(all.end(), r.begin(), r.end());
  }
  // Unaligned storage: start at an odd address.
  std::vector<uint8_t> storage(all.size() + 1);
  std::memcpy(storage.data() + 1, all.data(), all.size());
  RecordReader reader(std::span<const uint8_t>(storage).subspan(1));
  std::vector<uint64_t> ids;
  while (true) {
    PTKIT_ASSERT_OK_AND_ASSIGN(std::optional<RecordView> r, reader.Next());
    if (!r) break;
    PTKIT_ASSERT_OK_AND_ASSIGN(Lost l, ParseLost(*r, kLayout));
    ids.push_back(l.id);
  }
  EXPECT_THAT(ids, ElementsAre(0, 1, 2));
  EXPECT_EQ(reader.offset(), all.size());
}

TEST(RecordReaderTest, MalformedHeaders) {
  std::vector<uint8_t> r = EncodeLost(Lost{}, kLayout);
  // Cut in the middle of the second record.
  std::vector<uint8_t> two = r;
  two.insert(two.end(), r.begin(), r.begin() + 12);
  RecordReader reader(two);
  EXPECT_TRUE(reader.Next().ok());
  EXPECT_THAT(reader.Next(), StatusIs(absl::StatusCode::kDataLoss,
                                      HasSubstr("at offset " + std::to_string(r.size()))));
  EXPECT_THAT(reader.Next(), StatusIs(absl::StatusCode::kDataLoss));  // sticky
  // size < 8 would loop forever if accepted.
  std::vector<uint8_t> zero = r;
  zero[6] = 0;
  zero[7] = 0;
  EXPECT_THAT(ReadRecord(zero), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("size 0")));
  EXPECT_THAT(ReadRecord(std::span<const uint8_t>(r).first(5)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("5 bytes left")));
}

TEST(ParseErrorsTest, ShortAndWrongType) {
  std::vector<uint8_t> aux = EncodeAux(Aux{}, kLayout);
  PTKIT_ASSERT_OK_AND_ASSIGN(RecordView r, ReadRecord(aux));
  EXPECT_THAT(ParseComm(r, kLayout),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a perf comm")));
  // Same bytes read with a larger trailer than they have.
  const SampleIdLayout big{kLayout.sample_type | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID, true};
  EXPECT_THAT(ParseAux(r, big), ::testing::Not(::ptkit::testing::IsOk()));
  RecordView cut{r.type, r.misc, r.bytes.first(16)};
  EXPECT_THAT(ParseAux(cut, kLayout),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("aux record of 16 bytes")));
  EXPECT_THAT(ParseMmap2(RecordView{PERF_RECORD_MMAP2, 0, r.bytes}, kLayout),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(RecordTypeNameTest, Names) {
  EXPECT_EQ(RecordTypeName(PERF_RECORD_MMAP2), "mmap2");
  EXPECT_EQ(RecordTypeName(PERF_RECORD_ITRACE_START), "itrace_start");
  EXPECT_EQ(RecordTypeName(9999), "type-9999");
}

}  // namespace
}  // namespace ptkit::perf
