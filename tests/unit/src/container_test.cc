// Round trips, cuts at every byte, damage in every byte, bad files, concurrency and full disks
// for the trace.pt container (man/ptkit-format.5).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "byte_matchers.h"
#include "container_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "read_file.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::BytesAre;
using ::ptkit::testing::FillUntilError;
using ::ptkit::testing::IsOk;
using ::ptkit::testing::Owned;
using ::ptkit::testing::Pattern;
using ::ptkit::testing::ReadAll;
using ::ptkit::testing::ReadBytes;
using ::ptkit::testing::ReadEverything;
using ::ptkit::testing::ReadFile;
using ::ptkit::testing::StatusIs;
using ::ptkit::testing::TempDir;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Payload fixtures, one per record kind.
struct Sample {
  std::string metadata = R"({"host":"test","cpu_family":6,"cpu_model":85})";
  std::vector<uint8_t> sideband = Pattern(300, 1, true);
  std::vector<uint8_t> aux_compressible = Pattern(5000, 2, true);
  std::vector<uint8_t> aux_random = Pattern(3000, 3, false);
  std::vector<uint8_t> snapshot = Pattern(2048, 4, true);
  std::vector<uint8_t> vdso = Pattern(1024, 5, false);
  std::vector<uint8_t> build_id = Pattern(20, 6, false);
  std::vector<CounterValue> counters = {{"task-clock", -1, 123456789, 1000, 900},
                                        {"page-faults", 2, 42, 1000, 1000}};
};

// Writes every record kind; returns the file's bytes.
std::vector<uint8_t> WriteSample(const TempDir& dir, bool compress, const Sample& s = {}) {
  std::string path = dir.File(compress ? "z.pt" : "raw.pt");
  WriterOptions options;
  options.compress = compress;
  options.overwrite = true;
  auto w = ContainerWriter::Create(path, options);
  EXPECT_THAT(w, IsOk());
  ContainerWriter& writer = **w;
  EXPECT_THAT(writer.AppendMetadata(s.metadata), IsOk());
  EXPECT_THAT(writer.AppendSideband({.cpu = 3, .records = s.sideband}), IsOk());
  EXPECT_THAT(writer.AppendAux({.stream = {StreamKind::kCpu, 3},
                                .aux_offset = 4096,
                                .flags = kAuxTruncated | kAuxPartial,
                                .time = 777,
                                .data = s.aux_compressible}),
              IsOk());
  EXPECT_THAT(writer.AppendAux(
                  {.stream = {StreamKind::kThread, 4242}, .aux_offset = 0, .data = s.aux_random}),
              IsOk());
  EXPECT_THAT(writer.AppendLoss({.stream = {StreamKind::kCpu, 1},
                                 .kind = LossKind::kAuxTruncated,
                                 .count = 2,
                                 .bytes = 8192,
                                 .time = 99,
                                 .aux_offset = 65536}),
              IsOk());
  EXPECT_THAT(writer.AppendSnapshot({.stream = {StreamKind::kCpu, 0},
                                     .sequence = 5,
                                     .aux_head = 123456,
                                     .time = 31337,
                                     .data = s.snapshot}),
              IsOk());
  EXPECT_THAT(writer.AppendCode({.pid = 100,
                                 .flags = kCodeVdso,
                                 .address = 0x7fff0000,
                                 .pgoff = 0,
                                 .path = "[vdso]",
                                 .build_id = s.build_id,
                                 .bytes = s.vdso}),
              IsOk());
  EXPECT_THAT(writer.AppendCode({.pid = 100,
                                 .flags = kCodeIdentity,
                                 .address = 0x400000,
                                 .pgoff = 0x1000,
                                 .path = "/usr/bin/true",
                                 .build_id = s.build_id}),
              IsOk());
  EXPECT_THAT(writer.AppendCounters(s.counters), IsOk());
  EXPECT_THAT(writer.Close(), IsOk());
  EXPECT_EQ(writer.stats().records, 9u);
  return ReadFile(path);
}

class RoundTripTest : public ::testing::TestWithParam<bool> {};

TEST_P(RoundTripTest, EveryRecordKindComesBackIntact) {
  const bool compress = GetParam();
  TempDir dir;
  Sample s;
  std::vector<uint8_t> bytes = WriteSample(dir, compress, s);
  ReadAll all = ReadBytes(bytes);
  ASSERT_THAT(all.records, SizeIs(10));
  EXPECT_TRUE(all.report.clean());
  EXPECT_TRUE(all.report.footer_present);
  EXPECT_THAT(all.report.damage, SizeIs(0));
  for (size_t i = 0; i < all.records.size(); ++i) EXPECT_EQ(all.records[i].sequence, i);

  EXPECT_EQ(all.records[0].type, RecordType::kMetadata);
  EXPECT_EQ(std::string(all.records[0].payload.begin(), all.records[0].payload.end()), s.metadata);

  auto sb = ParseSideband(all.records[1].payload);
  ASSERT_THAT(sb, IsOk());
  EXPECT_EQ(sb->cpu, 3);
  EXPECT_THAT(sb->records, ElementsAreArray(s.sideband));

  auto aux = ParseAux(all.records[2].payload);
  ASSERT_THAT(aux, IsOk());
  EXPECT_EQ(aux->stream, (StreamId{StreamKind::kCpu, 3}));
  EXPECT_EQ(aux->aux_offset, 4096u);
  EXPECT_EQ(aux->flags, kAuxTruncated | kAuxPartial);
  EXPECT_EQ(aux->time, 777u);
  EXPECT_THAT(aux->data, BytesAre(s.aux_compressible));
  auto aux2 = ParseAux(all.records[3].payload);
  ASSERT_THAT(aux2, IsOk());
  EXPECT_EQ(aux2->stream, (StreamId{StreamKind::kThread, 4242}));
  EXPECT_THAT(aux2->data, BytesAre(s.aux_random));

  auto loss = ParseLoss(all.records[4].payload);
  ASSERT_THAT(loss, IsOk());
  EXPECT_EQ(loss->stream, (StreamId{StreamKind::kCpu, 1}));
  EXPECT_EQ(loss->kind, LossKind::kAuxTruncated);
  EXPECT_EQ(loss->count, 2u);
  EXPECT_EQ(loss->bytes, 8192u);
  EXPECT_EQ(loss->time, 99u);
  EXPECT_EQ(loss->aux_offset, 65536u);

  auto snap = ParseSnapshot(all.records[5].payload);
  ASSERT_THAT(snap, IsOk());
  EXPECT_EQ(snap->sequence, 5u);
  EXPECT_EQ(snap->aux_head, 123456u);
  EXPECT_EQ(snap->time, 31337u);
  EXPECT_THAT(snap->data, BytesAre(s.snapshot));

  auto vdso = ParseCode(all.records[6].payload);
  ASSERT_THAT(vdso, IsOk());
  EXPECT_EQ(vdso->pid, 100u);
  EXPECT_EQ(vdso->flags, kCodeVdso);
  EXPECT_EQ(vdso->address, 0x7fff0000u);
  EXPECT_EQ(vdso->path, "[vdso]");
  EXPECT_THAT(vdso->build_id, ElementsAreArray(s.build_id));
  EXPECT_THAT(vdso->bytes, BytesAre(s.vdso));
  auto ident = ParseCode(all.records[7].payload);
  ASSERT_THAT(ident, IsOk());
  EXPECT_EQ(ident->path, "/usr/bin/true");
  EXPECT_EQ(ident->pgoff, 0x1000u);
  EXPECT_TRUE(ident->bytes.empty());

  auto counters = ParseCounters(all.records[8].payload);
  ASSERT_THAT(counters, IsOk());
  EXPECT_EQ(*counters, s.counters);

  ASSERT_EQ(all.records[9].type, RecordType::kFooter);
  auto footer = ParseFooter(all.records[9].payload);
  ASSERT_THAT(footer, IsOk());
  EXPECT_EQ(footer->records, 9u);
  uint64_t counted = 0;
  for (const auto& k : footer->kinds) counted += k.count;
  EXPECT_EQ(counted, 9u);
}

// ReadOnly: the records of one kind, as a whole read returns them, and the others skipped unread
// (a flipped byte in one of them is not even seen).
TEST_P(RoundTripTest, ReadOnlyReturnsOneKindAsAWholeReadDoes) {
  TempDir dir;
  Sample s;
  std::vector<uint8_t> bytes = WriteSample(dir, GetParam(), s);
  const ReadAll all = ReadBytes(bytes);
  for (RecordType type : {RecordType::kMetadata, RecordType::kAux, RecordType::kFooter}) {
    SCOPED_TRACE(RecordTypeName(static_cast<uint16_t>(type)));
    std::vector<Owned> want;
    for (const Owned& r : all.records) {
      if (r.type == type) want.push_back(r);
    }
    ASSERT_FALSE(want.empty());
    auto reader = ContainerReader::Open(MemorySource(bytes, "mem.pt"));
    ASSERT_THAT(reader, IsOk());
    reader->ReadOnly(type);
    const ReadAll only = ReadEverything(*reader);
    ASSERT_EQ(only.records.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(only.records[i].sequence, want[i].sequence);
      EXPECT_EQ(only.records[i].offset, want[i].offset);
      EXPECT_EQ(only.records[i].payload, want[i].payload);
    }
  }
  // The snapshot's payload damaged: a whole read reports it; the metadata alone is read clean.
  const Owned& snapshot = all.records[5];
  ASSERT_EQ(snapshot.type, RecordType::kSnapshot);
  bytes[snapshot.offset + kFrameHeaderSize + snapshot.stored_bytes / 2] ^= 0x40;
  EXPECT_THAT(ReadBytes(bytes).report.damage, SizeIs(1));
  auto reader = ContainerReader::Open(MemorySource(bytes, "mem.pt"));
  ASSERT_THAT(reader, IsOk());
  reader->ReadOnly(RecordType::kMetadata);
  const ReadAll meta = ReadEverything(*reader);
  ASSERT_THAT(meta.records, SizeIs(1));
  EXPECT_EQ(std::string(meta.records[0].payload.begin(), meta.records[0].payload.end()),
            s.metadata);
  EXPECT_THAT(meta.report.damage, SizeIs(0));
}

TEST_P(RoundTripTest, CompressionIsUsedOnlyWhereItPays) {
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, GetParam());
  auto reader = ContainerReader::Open(MemorySource(bytes, "mem.pt"));
  ASSERT_THAT(reader, IsOk());
  RecordView v;
  std::map<uint64_t, bool> compressed;
  while (*reader->Next(v)) compressed[v.sequence] = v.compressed;
  // Record 2 is highly compressible, record 3 is random bytes.
  EXPECT_EQ(compressed[2], GetParam());
  EXPECT_FALSE(compressed[3]);
}

INSTANTIATE_TEST_SUITE_P(Compression, RoundTripTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Zstd" : "Raw"; });

TEST(ContainerReaderTest, CutAtEveryByteKeepsWholeRecordsAndReportsTheRest) {
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, true);
  ReadAll full = ReadBytes(bytes);
  ASSERT_THAT(full.records, SizeIs(10));

  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    SCOPED_TRACE(::testing::Message() << "cut at " << cut);
    std::span<const uint8_t> part(bytes.data(), cut);
    auto reader = ContainerReader::Open(MemorySource(part, "cut.pt"));
    if (cut == 0) {
      EXPECT_THAT(reader, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
      continue;
    }
    if (cut < kFileHeaderSize) {
      EXPECT_THAT(reader, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("file header")));
      continue;
    }
    ASSERT_THAT(reader, IsOk());
    ReadAll got = ReadEverything(*reader);
    size_t whole = 0;
    uint64_t cut_record_start = 0;
    bool at_boundary = cut == kFileHeaderSize;
    for (const Owned& r : full.records) {
      if (r.offset + r.stored_bytes <= cut) {
        ++whole;
        at_boundary = at_boundary || r.offset + r.stored_bytes == cut;
      } else if (r.offset < cut) {
        cut_record_start = r.offset;
      }
    }
    ASSERT_THAT(got.records, SizeIs(whole));
    for (size_t i = 0; i < whole; ++i) {
      EXPECT_EQ(got.records[i].sequence, full.records[i].sequence);
      EXPECT_EQ(got.records[i].payload, full.records[i].payload);
    }
    EXPECT_EQ(got.report.footer_present, cut == bytes.size());
    if (at_boundary) {
      EXPECT_THAT(got.report.damage, SizeIs(0));
    } else {
      ASSERT_THAT(got.report.damage, SizeIs(1));
      EXPECT_EQ(got.report.damage[0].offset, cut_record_start);
      EXPECT_EQ(got.report.damage[0].bytes, cut - cut_record_start);
      EXPECT_EQ(got.report.damage[0].records, 1u);
      EXPECT_THAT(got.report.damage[0].reason, HasSubstr("cut"));
    }
  }
}

// A damaged byte in the 16-byte file header, before an intact first record: every record is
// read and the header is reported as damage (sweep 38b L1: the whole file was refused, "wrong
// magic"). A file whose first record is not one of this format is still refused.
TEST(ContainerReaderTest, ADamagedFileHeaderBeforeIntactRecordsIsReportedNotFatal) {
  TempDir dir;
  const std::string path = dir.File("t.pt");
  {
    auto w = ContainerWriter::Create(path);
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT((*w)->AppendMetadata(R"({"a":1})"), IsOk());
    ASSERT_THAT((*w)->AppendMetadata(R"({"b":2})"), IsOk());
    ASSERT_THAT((*w)->Close(), IsOk());
  }
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  for (size_t at : {size_t{0}, size_t{2}, size_t{7}}) {
    SCOPED_TRACE(at);
    std::vector<uint8_t> damaged = bytes;
    damaged[at] ^= 0x5a;
    const std::string copy = dir.File("damaged.pt");
    std::ofstream(copy, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(damaged.data()),
               static_cast<std::streamsize>(damaged.size()));
    auto reader = ContainerReader::Open(copy);
    ASSERT_THAT(reader, IsOk());
    RecordView rec;
    int records = 0;
    while (reader->Next(rec).value_or(false)) ++records;
    EXPECT_EQ(records, 3);  // metadata twice, footer
    ASSERT_EQ(reader->report().damage.size(), 1u);
    EXPECT_EQ(reader->report().damage[0].offset, 0u);
    EXPECT_THAT(reader->report().damage[0].reason, HasSubstr("damaged file header"));
    damaged[kFileHeaderSize] ^= 0x5a;  // and the first record's header
    std::ofstream(copy, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(damaged.data()),
               static_cast<std::streamsize>(damaged.size()));
    EXPECT_FALSE(ContainerReader::Open(copy).ok());
  }
  // A right magic with another version: a newer format's file, refused as before.
  std::vector<uint8_t> newer = bytes;
  newer[8] = 2;
  const std::string copy = dir.File("newer.pt");
  std::ofstream(copy, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(newer.data()),
             static_cast<std::streamsize>(newer.size()));
  EXPECT_FALSE(ContainerReader::Open(copy).ok());
}

TEST(ContainerReaderTest, AFlippedByteDamagesOnlyItsOwnRecord) {
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, true);
  ReadAll full = ReadBytes(bytes);
  ASSERT_THAT(full.records, SizeIs(10));

  for (const Owned& victim : full.records) {
    for (uint64_t at = victim.offset; at < victim.offset + victim.stored_bytes; ++at) {
      SCOPED_TRACE(::testing::Message() << "record " << victim.sequence << ", byte " << at);
      std::vector<uint8_t> damaged = bytes;
      damaged[at] ^= 0x40;
      ReadAll got = ReadBytes(damaged);
      std::vector<uint64_t> expected;
      for (const Owned& r : full.records) {
        if (r.sequence != victim.sequence) expected.push_back(r.sequence);
      }
      std::vector<uint64_t> seqs;
      for (const Owned& r : got.records) seqs.push_back(r.sequence);
      ASSERT_EQ(seqs, expected);
      for (const Owned& r : got.records) EXPECT_EQ(r.payload, full.records[r.sequence].payload);
      ASSERT_THAT(got.report.damage, SizeIs(1));
      EXPECT_EQ(got.report.damage[0].offset, victim.offset);
      EXPECT_EQ(got.report.damage[0].bytes, victim.stored_bytes);
      EXPECT_EQ(got.report.damage[0].records, 1u);
      EXPECT_EQ(got.report.footer_present, victim.type != RecordType::kFooter);
    }
  }
}

// A frame that appears twice (a copied block of the file) is returned once; the copy is
// damage that loses no record.
TEST(ContainerReaderTest, ARepeatedRecordIsReturnedOnce) {
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, true);
  ReadAll full = ReadBytes(bytes);
  ASSERT_THAT(full.records, SizeIs(10));
  for (const Owned& victim : full.records) {
    if (victim.type == RecordType::kFooter)
      continue;  // reading ends there (bytes after: a warning)
    SCOPED_TRACE(::testing::Message() << "record " << victim.sequence);
    const auto begin = bytes.begin() + static_cast<ptrdiff_t>(victim.offset);
    const auto end = begin + static_cast<ptrdiff_t>(victim.stored_bytes);
    std::vector<uint8_t> twice(bytes.begin(), end);
    twice.insert(twice.end(), begin, end);
    twice.insert(twice.end(), end, bytes.end());
    ReadAll got = ReadBytes(twice);
    std::vector<uint64_t> seqs;
    for (const Owned& r : got.records) seqs.push_back(r.sequence);
    ASSERT_EQ(seqs.size(), full.records.size());
    for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i);
    ASSERT_THAT(got.report.damage, SizeIs(1));
    EXPECT_EQ(got.report.damage[0].offset, victim.offset + victim.stored_bytes);
    EXPECT_EQ(got.report.damage[0].bytes, victim.stored_bytes);
    EXPECT_EQ(got.report.damage[0].records, 0u);
    EXPECT_THAT(got.report.damage[0].reason, HasSubstr("repeats an earlier sequence number"));
  }
}

// Damage followed by a copy of an earlier record (issue 12: 64 bytes of 0xAA, then a copy of
// an AUX record): the resynchronisation lands on the copy, which is skipped as a repeat; every
// record comes back once and the junk loses no record.
TEST(ContainerReaderTest, ACopyOfAnEarlierRecordAfterDamageIsSkipped) {
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, true);
  ReadAll full = ReadBytes(bytes);
  ASSERT_THAT(full.records, SizeIs(10));
  for (size_t v = 0; v + 1 < full.records.size(); ++v) {  // the footer ends reading
    const Owned& victim = full.records[v];
    const Owned& next = full.records[v + 1];
    SCOPED_TRACE(::testing::Message() << "copy of record " << victim.sequence);
    const auto begin = bytes.begin() + static_cast<ptrdiff_t>(victim.offset);
    const auto end = begin + static_cast<ptrdiff_t>(victim.stored_bytes);
    std::vector<uint8_t> file(bytes.begin(), end);
    file.insert(file.end(), 64, 0xAA);
    file.insert(file.end(), begin, end);
    file.insert(file.end(), end, bytes.end());
    ReadAll got = ReadBytes(file);
    std::vector<uint64_t> seqs;
    for (const Owned& r : got.records) seqs.push_back(r.sequence);
    ASSERT_EQ(seqs.size(), full.records.size());
    for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i);
    for (const Owned& r : got.records) EXPECT_EQ(r.payload, full.records[r.sequence].payload);
    ASSERT_THAT(got.report.damage, SizeIs(2));
    EXPECT_EQ(got.report.damage[0].offset, next.offset);
    EXPECT_EQ(got.report.damage[0].bytes, 64u);
    EXPECT_EQ(got.report.damage[0].records, 0u);
    EXPECT_THAT(got.report.damage[1].reason, HasSubstr("repeats an earlier sequence number"));
    EXPECT_EQ(got.report.damage[1].records, 0u);
    EXPECT_EQ(got.report.lost_records(), 0u);
  }
}

// A copy of an AUX record written under a new sequence number (issue 12 item 5: a copy of the
// first one passed for a restart of the stream at offset 0 and was decoded twice): skipped as
// damage, whether or not the copy is stored compressed. A restart with other bytes is kept.
TEST(ContainerReaderTest, ACopiedTraceRecordUnderANewSequenceNumberIsSkipped) {
  TempDir dir;
  const std::vector<uint8_t> first = Pattern(3000, 1, /*compressible=*/true);
  const std::vector<uint8_t> other = Pattern(3000, 2, /*compressible=*/false);
  for (bool compress : {false, true}) {
    SCOPED_TRACE(compress ? "compressed" : "stored");
    const std::string path = dir.File("copy.pt");
    WriterOptions options;
    options.compress = compress;
    options.overwrite = true;
    auto w = ContainerWriter::Create(path, options);
    ASSERT_THAT(w, IsOk());
    const AuxRecord aux{
        .stream = {StreamKind::kThread, 7}, .aux_offset = 0, .time = 5, .data = first};
    ASSERT_THAT((*w)->AppendAux(aux), IsOk());  // record 0
    ASSERT_THAT((*w)->AppendAux(aux), IsOk());  // record 1: the copy
    AuxRecord restart = aux;                    // record 2: a restart at 0, other bytes
    restart.data = other;
    ASSERT_THAT((*w)->AppendAux(restart), IsOk());
    ASSERT_THAT((*w)->Close(), IsOk());
    ReadAll got = ReadBytes(ReadFile(path));
    std::vector<uint64_t> seqs;
    for (const Owned& r : got.records) seqs.push_back(r.sequence);
    EXPECT_THAT(seqs, ElementsAreArray({0u, 2u, 3u}));  // 3: the footer
    ASSERT_THAT(got.report.damage, SizeIs(1));
    EXPECT_EQ(got.report.damage[0].offset, got.records[0].offset + got.records[0].stored_bytes);
    EXPECT_EQ(got.report.damage[0].records, 0u);
    EXPECT_THAT(got.report.damage[0].reason,
                HasSubstr(absl::StrCat("record 1 (aux) at offset ", got.report.damage[0].offset,
                                       " is a copy of the record at offset ", got.records[0].offset,
                                       ": skipped")));
  }
}

// Frames built by hand (valid checksums) for the problems a writer never makes.
void AppendFrame(std::vector<uint8_t>& file, RecordType type, uint64_t sequence,
                 const std::vector<uint8_t>& payload) {
  FrameHeader h{.type = static_cast<uint16_t>(type),
                .sequence = sequence,
                .stored_size = payload.size(),
                .raw_size = payload.size(),
                .checksum = XXH3_64bits(payload.data(), payload.size())};
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(h, header);
  file.insert(file.end(), header, header + kFrameHeaderSize);
  file.insert(file.end(), payload.begin(), payload.end());
}

std::vector<uint8_t> FileHeader() {
  std::vector<uint8_t> file(kFileHeaderSize);
  EncodeFileHeader(std::span<uint8_t, kFileHeaderSize>(file.data(), kFileHeaderSize));
  return file;
}

// Issue 12 item 6: what the reader knew but only warned about, or not at all, is damage now
// (info's damage section; the decoders print the damage as warnings).
TEST(ContainerReaderTest, ARecordingAppendedAfterTheFooterIsDamage) {
  TempDir dir;
  std::vector<uint8_t> a = WriteSample(dir, true);
  std::vector<uint8_t> both = a;  // cat a.pt a.pt
  both.insert(both.end(), a.begin(), a.end());
  ReadAll got = ReadBytes(both);
  EXPECT_THAT(got.records, SizeIs(10));
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_EQ(got.report.damage[0].offset, a.size());
  EXPECT_EQ(got.report.damage[0].bytes, a.size());
  EXPECT_THAT(got.report.damage[0].reason,
              HasSubstr(absl::StrCat(a.size(), " bytes after the footer at offset ")));
  EXPECT_THAT(got.report.damage[0].reason, HasSubstr("another recording appended?"));
}

TEST(ContainerReaderTest, AFooterWhoseCountsDisagreeIsDamage) {
  const std::vector<uint8_t> aux =
      EncodeAux({.stream = {StreamKind::kCpu, 0}, .data = Pattern(100, 3, false)});
  std::vector<uint8_t> file = FileHeader();
  AppendFrame(file, RecordType::kAux, 0, aux);
  FooterRecord footer{.records = 1,
                      .kinds = {{.type = static_cast<uint16_t>(RecordType::kAux),
                                 .count = 3,
                                 .raw_bytes = 3 * aux.size()}}};
  const uint64_t footer_at = file.size();
  AppendFrame(file, RecordType::kFooter, 1, EncodeFooter(footer));
  ReadAll got = ReadBytes(file);
  EXPECT_THAT(got.records, SizeIs(2));
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_EQ(got.report.damage[0].offset, footer_at);
  EXPECT_EQ(got.report.damage[0].records, 2u);
  EXPECT_EQ(got.report.damage[0].reason,
            "the footer's record counts disagree with the file: aux 3 (read 1)");

  // Records lost to damage the reader saw already explain the footer's count: no second entry.
  TempDir dir;
  std::vector<uint8_t> bytes = WriteSample(dir, false);
  ReadAll full = ReadBytes(bytes);
  const Owned& victim = full.records[3];
  bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(victim.offset),
              bytes.begin() + static_cast<ptrdiff_t>(victim.offset + victim.stored_bytes));
  got = ReadBytes(bytes);
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_EQ(got.report.lost_records(), 1u);
}

// Found by container_reader_fuzz with the structure-aware mutator: a footer with a valid
// checksum whose body does not parse was reported as damage (all its bytes) and returned as a
// record as well, so its bytes counted twice. It is damage only now.
TEST(ContainerReaderTest, AFooterThatDoesNotParseIsDamageNotARecord) {
  std::vector<uint8_t> file = FileHeader();
  AppendFrame(file, RecordType::kAux, 0,
              EncodeAux({.stream = {StreamKind::kCpu, 0}, .data = Pattern(100, 3, false)}));
  const uint64_t footer_at = file.size();
  AppendFrame(file, RecordType::kFooter, 1, {1, 2, 3, 4, 5});
  ReadAll got = ReadBytes(file);
  ASSERT_THAT(got.records, SizeIs(1));
  EXPECT_EQ(got.records[0].type, RecordType::kAux);
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_EQ(got.report.damage[0].offset, footer_at);
  EXPECT_EQ(got.report.damage[0].bytes, file.size() - footer_at);
  EXPECT_THAT(got.report.damage[0].reason, HasSubstr("footer at offset"));
  EXPECT_EQ(got.records[0].stored_bytes + got.report.lost_bytes(), file.size() - kFileHeaderSize);
}

// A record whose header (its check holds: forged, or damaged by chance) numbers it 2^64 - 2
// records past the one expected, directly or where the reader resynchronises after junk: the
// file cannot have held that many records, so its sequence field is damaged. It is read as the
// expected record and the records after it are read too (they were skipped as repeats of an
// earlier number), and no absurd loss is counted (ptdecode info said "18446744073709551614
// records lost").
TEST(ContainerReaderTest, AnImplausibleSequenceJumpIsADamagedHeaderNotLostRecords) {
  for (bool junk : {false, true}) {
    SCOPED_TRACE(junk ? "after junk" : "in order");
    std::vector<uint8_t> file = FileHeader();
    std::vector<std::vector<uint8_t>> payloads;
    for (uint32_t i = 0; i < 4; ++i) {
      payloads.push_back(
          EncodeAux({.stream = {StreamKind::kCpu, 0}, .data = Pattern(100, i + 1, false)}));
    }
    AppendFrame(file, RecordType::kAux, 0, payloads[0]);
    if (junk) file.insert(file.end(), 64, 0xAA);
    const uint64_t forged_at = file.size();
    AppendFrame(file, RecordType::kAux, ~uint64_t{0} - 1, payloads[1]);
    AppendFrame(file, RecordType::kAux, 2, payloads[2]);
    AppendFrame(file, RecordType::kAux, 3, payloads[3]);
    ReadAll got = ReadBytes(file);
    ASSERT_THAT(got.records, SizeIs(4));
    for (uint64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(got.records[i].sequence, i);
      EXPECT_EQ(got.records[i].payload, payloads[i]);
    }
    EXPECT_EQ(got.report.lost_records(), 0u);
    ASSERT_THAT(got.report.damage, SizeIs(junk ? 2 : 1));
    const Damage& d = got.report.damage.back();
    EXPECT_EQ(d.offset, forged_at);
    EXPECT_EQ(d.records, 0u);
    EXPECT_THAT(d.reason,
                HasSubstr(absl::StrCat("record 18446744073709551614 (aux) at offset ", forged_at,
                                       ": a sequence number "
                                       "18446744073709551613 past the expected 1")));
    EXPECT_THAT(d.reason, HasSubstr("(a damaged header): read as record 1"));
  }
}

TEST(ContainerReaderTest, LostRecordsSaturateInsteadOfWrapping) {
  ReadReport report;
  report.damage.push_back({.records = ~uint64_t{0} - 1});
  report.damage.push_back({.records = 5});
  EXPECT_EQ(report.lost_records(), ~uint64_t{0});
}

// The fuzzer's accounting check over its corpus (findings included): every byte of a file is
// in a record returned or in the damage, never in both.
TEST(ContainerReaderTest, NoByteOfTheFuzzCorpusIsCountedTwice) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(PTKIT_SOURCE_DIR) +
                                                           "/tests/fuzz/corpus/container_reader")) {
    SCOPED_TRACE(e.path().string());
    const std::vector<uint8_t> bytes = ReadFile(e.path().string());
    ReadAll got = ReadBytes(bytes);
    uint64_t returned = 0;
    for (const Owned& r : got.records) returned += r.stored_bytes;
    EXPECT_LE(returned + got.report.lost_bytes(), bytes.size());
    ++files;
  }
  EXPECT_GE(files, 4);
}

// A source that notes the threads it is read on.
class ThreadNotingSource final : public ByteSource {
 public:
  explicit ThreadNotingSource(std::span<const uint8_t> bytes)
      : inner_(MemorySource(bytes, "noted.pt")) {}
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::StatusOr<size_t> ReadAt(uint64_t offset, std::span<uint8_t> out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads_.insert(std::this_thread::get_id());
    }
    return inner_->ReadAt(offset, out);
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.clear();
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  std::unique_ptr<ByteSource> inner_;
  mutable std::mutex mu_;
  std::set<std::thread::id> threads_;
};

void ExpectSameReading(const ReadAll& got, const ReadAll& want) {
  ASSERT_EQ(got.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    EXPECT_EQ(got.records[i].type, want.records[i].type) << i;
    EXPECT_EQ(got.records[i].sequence, want.records[i].sequence) << i;
    EXPECT_EQ(got.records[i].offset, want.records[i].offset) << i;
    EXPECT_EQ(got.records[i].stored_bytes, want.records[i].stored_bytes) << i;
    EXPECT_EQ(got.records[i].payload, want.records[i].payload) << i;
  }
  EXPECT_EQ(got.report.records, want.report.records);
  EXPECT_EQ(got.report.footer_present, want.report.footer_present);
  EXPECT_EQ(got.report.unknown_types, want.report.unknown_types);
  EXPECT_EQ(got.report.warnings, want.report.warnings);
  ASSERT_EQ(got.report.damage.size(), want.report.damage.size());
  for (size_t i = 0; i < want.report.damage.size(); ++i) {
    EXPECT_EQ(got.report.damage[i].offset, want.report.damage[i].offset) << i;
    EXPECT_EQ(got.report.damage[i].bytes, want.report.damage[i].bytes) << i;
    EXPECT_EQ(got.report.damage[i].records, want.report.damage[i].records) << i;
    EXPECT_EQ(got.report.damage[i].reason, want.report.damage[i].reason) << i;
  }
}

// ReadAhead (ptdecode -j N > 1): the records are read on another thread, and they and the
// report are exactly those of a reading on the caller's thread: for whole files, cut ones,
// ones with a flipped byte in every record, and the fuzz corpus's damaged files. A report asked
// before the end stops the thread; the rest is read on the caller's thread, nothing twice.
TEST(ContainerReaderTest, ReadAheadReadsOnAnotherThreadAndGivesTheSameRecordsAndReport) {
  TempDir dir;
  std::vector<std::vector<uint8_t>> files;
  for (bool compress : {true, false}) {
    const std::vector<uint8_t> bytes = WriteSample(dir, compress);
    files.push_back(bytes);
    const ReadAll whole = ReadBytes(bytes);
    for (const Owned& r : whole.records) {
      files.emplace_back(bytes.begin(), bytes.begin() + r.offset + r.stored_bytes / 2);  // cut
      std::vector<uint8_t> flipped = bytes;
      flipped[r.offset + r.stored_bytes - 1] ^= 0x10;
      files.push_back(std::move(flipped));
    }
  }
  for (const auto& e : std::filesystem::directory_iterator(std::string(PTKIT_SOURCE_DIR) +
                                                           "/tests/fuzz/corpus/container_reader")) {
    files.push_back(ReadFile(e.path().string()));
  }
  size_t damaged = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    SCOPED_TRACE(::testing::Message() << "file " << f);
    const ReadAll want = ReadBytes(files[f]);
    damaged += want.report.damage.empty() ? 0 : 1;

    auto source = std::make_unique<ThreadNotingSource>(files[f]);
    ThreadNotingSource* noted = source.get();
    auto reader = ContainerReader::Open(std::move(source));
    if (!reader.ok()) continue;  // refused alike: the header is read before either way
    noted->Forget();             // Open read the file header here
    reader->ReadAhead();
    ExpectSameReading(ReadEverything(*reader), want);
    EXPECT_FALSE(noted->threads().contains(std::this_thread::get_id()));
    if (!want.records.empty()) {
      EXPECT_THAT(noted->threads(), SizeIs(1));
    }

    // The report asked after two records, then the rest.
    auto early = ContainerReader::Open(MemorySource(files[f], "early.pt"));
    ASSERT_THAT(early, IsOk());
    early->ReadAhead();
    ReadAll got;
    RecordView v;
    for (int i = 0;; ++i) {
      if (i == 2) (void)early->report();
      auto more = early->Next(v);
      ASSERT_THAT(more, IsOk());
      if (!*more) break;
      got.records.push_back(
          {v.type, v.sequence, v.offset, v.stored_bytes, {v.payload.begin(), v.payload.end()}});
    }
    got.report = early->report();
    ExpectSameReading(got, want);
  }
  EXPECT_GE(damaged, 20u);
}

TEST(ContainerReaderTest, AValidChecksumOverAMalformedPayloadIsDamage) {
  std::vector<uint8_t> aux =
      EncodeAux({.stream = {StreamKind::kCpu, 0}, .data = Pattern(100, 3, false)});
  aux.pop_back();  // the size field says 100 data bytes: 99 follow
  std::vector<uint8_t> file = FileHeader();
  AppendFrame(file, RecordType::kAux, 0, aux);
  ReadAll got = ReadBytes(file);
  EXPECT_THAT(got.records, SizeIs(0));
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_EQ(got.report.damage[0].offset, kFileHeaderSize);
  EXPECT_EQ(got.report.damage[0].bytes, kFrameHeaderSize + aux.size());
  EXPECT_EQ(got.report.damage[0].records, 1u);
  EXPECT_THAT(got.report.damage[0].reason,
              HasSubstr("record 0 (aux) at offset 16: malformed payload: "));
  EXPECT_THAT(got.report.damage[0].reason, HasSubstr("size field 100 but 99 data bytes"));
}

// A perf.data's feature section kept for export (kind 10): its id and bytes come back; an id
// outside perf's 256-bit feature bitmap (or its reserved bit 0) is a malformed payload.
TEST(ContainerReaderTest, APerfFeatureComesBackAndABadIdIsDamage) {
  const std::vector<uint8_t> formats = Pattern(300, 5, false);
  std::vector<uint8_t> file = FileHeader();
  AppendFrame(file, RecordType::kPerfFeature, 0, EncodePerfFeature({.id = 1, .bytes = formats}));
  AppendFrame(file, RecordType::kPerfFeature, 1, EncodePerfFeature({.id = 256, .bytes = formats}));
  AppendFrame(file, RecordType::kPerfFeature, 2, EncodePerfFeature({.id = 0, .bytes = {}}));
  ReadAll got = ReadBytes(file);
  ASSERT_THAT(got.records, SizeIs(1));
  auto f = ParsePerfFeature(got.records[0].payload);
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->id, 1u);
  EXPECT_THAT(f->bytes, BytesAre(formats));
  EXPECT_EQ(RecordTypeName(10), "perf-feature");
  ASSERT_THAT(got.report.damage, SizeIs(2));
  EXPECT_THAT(got.report.damage[0].reason,
              HasSubstr("(perf-feature) at offset 372: malformed payload: "));
  EXPECT_THAT(got.report.damage[0].reason, HasSubstr("feature id 256 is not 1 to 255"));
  EXPECT_THAT(got.report.damage[1].reason, HasSubstr("feature id 0 is not 1 to 255"));
}

TEST(ContainerReaderTest, RejectsFilesThatAreNotContainers) {
  std::vector<uint8_t> empty;
  EXPECT_THAT(ContainerReader::Open(MemorySource(empty, "e.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("e.pt: empty file")));
  std::string text = "#!/bin/sh\necho this is a shell script\n";
  std::vector<uint8_t> script(text.begin(), text.end());
  EXPECT_THAT(ContainerReader::Open(MemorySource(script, "s.sh")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a ptkit container")));
  std::vector<uint8_t> future(kFileHeaderSize);
  EncodeFileHeader(std::span<uint8_t, kFileHeaderSize>(future.data(), kFileHeaderSize));
  future[8] = kFormatVersion + 1;
  EXPECT_THAT(ContainerReader::Open(MemorySource(future, "f.pt")),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("newer")));
  EXPECT_THAT(ContainerReader::Open("/nonexistent/trace.pt"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/trace.pt")));
}

// Builds a file with one authentic frame header (valid header check) claiming `h` sizes.
std::vector<uint8_t> FileWithHeader(const FrameHeader& h, size_t payload_bytes) {
  std::vector<uint8_t> bytes(kFileHeaderSize + kFrameHeaderSize + payload_bytes, 0xAB);
  EncodeFileHeader(std::span<uint8_t, kFileHeaderSize>(bytes.data(), kFileHeaderSize));
  EncodeFrameHeader(
      h, std::span<uint8_t, kFrameHeaderSize>(bytes.data() + kFileHeaderSize, kFrameHeaderSize));
  return bytes;
}

TEST(ContainerReaderTest, HugeLengthFieldsAreDamageNotAllocations) {
  for (uint64_t stored : {uint64_t{1} << 63, ~uint64_t{0}, kMaxPayloadSize + 1, kMaxPayloadSize}) {
    for (uint16_t flags : {uint16_t{0}, kFrameZstd}) {
      SCOPED_TRACE(::testing::Message() << "stored " << stored << " flags " << flags);
      FrameHeader h{.type = 3, .flags = flags, .stored_size = stored, .raw_size = stored};
      std::vector<uint8_t> bytes = FileWithHeader(h, 100);
      ReadAll got = ReadBytes(bytes);
      EXPECT_THAT(got.records, SizeIs(0));
      ASSERT_THAT(got.report.damage, SizeIs(1));
      EXPECT_EQ(got.report.damage[0].offset, kFileHeaderSize);
      EXPECT_EQ(got.report.damage[0].bytes, kFrameHeaderSize + 100);
    }
  }
  // A compressed record whose raw size is absurd (its header is authentic: header check and
  // payload checksum are right), and one whose zstd frame does not match its header.
  std::vector<uint8_t> stored(64, 0x11);
  FrameHeader h{.type = 3,
                .flags = kFrameZstd,
                .stored_size = stored.size(),
                .raw_size = uint64_t{1} << 63,
                .checksum = XXH3_64bits(stored.data(), stored.size())};
  std::vector<uint8_t> bytes = FileWithHeader(h, stored.size());
  std::copy(stored.begin(), stored.end(), bytes.end() - stored.size());
  ReadAll got = ReadBytes(bytes);
  EXPECT_THAT(got.records, SizeIs(0));
  EXPECT_THAT(got.report.damage, SizeIs(1));
  h.raw_size = 1000;  // in range, but the stored bytes are no zstd frame of that size
  bytes = FileWithHeader(h, stored.size());
  std::copy(stored.begin(), stored.end(), bytes.end() - stored.size());
  got = ReadBytes(bytes);
  EXPECT_THAT(got.records, SizeIs(0));
  ASSERT_THAT(got.report.damage, SizeIs(1));
  EXPECT_THAT(got.report.damage[0].reason, HasSubstr("zstd"));
}

TEST(ContainerReaderTest, UnknownRecordKindsAreSkippedWithAWarning) {
  TempDir dir;
  std::string path = dir.File("u.pt");
  {
    auto w = ContainerWriter::Create(path);
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT((*w)->AppendMetadata("{}"), IsOk());
    ASSERT_THAT((*w)->Append(static_cast<RecordType>(77), {1, 2, 3}), IsOk());
    ASSERT_THAT((*w)->Append(static_cast<RecordType>(77), {4, 5}), IsOk());
    ASSERT_THAT((*w)->AppendLoss({.kind = LossKind::kLostSideband, .count = 1}), IsOk());
    ASSERT_THAT((*w)->Close(), IsOk());
  }
  auto reader = ContainerReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  ReadAll got = ReadEverything(*reader);
  ASSERT_THAT(got.records, SizeIs(3));
  EXPECT_EQ(got.records[0].type, RecordType::kMetadata);
  EXPECT_EQ(got.records[1].type, RecordType::kLoss);
  EXPECT_EQ(got.records[2].type, RecordType::kFooter);
  EXPECT_EQ(got.report.unknown_types.at(77), 2u);
  EXPECT_THAT(got.report.warnings, ::testing::Contains(HasSubstr("kind 77")));
  EXPECT_TRUE(got.report.clean());
}

TEST(ContainerWriterTest, RefusesToReplaceAFileUnlessAsked) {
  TempDir dir;
  std::string path = dir.File("t.pt");
  ASSERT_THAT((*ContainerWriter::Create(path))->Close(), IsOk());
  EXPECT_THAT(ContainerWriter::Create(path),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(path)));
  WriterOptions o;
  o.overwrite = true;
  EXPECT_THAT(ContainerWriter::Create(path, o), IsOk());
}

// A file that --overwrite-existing is to replace stays as it was until the recording starts
// (Publish; Close publishes too): a failed start (Discard) leaves it and no other file, a
// second writer to the same path does not cut the first's file (sweep 31c F1, F3: a failed
// start removed it, and -o /dev/null; two recordings at once both said they wrote it, the
// file held the second followed by the first's tail). A device is written as it is.
TEST(ContainerWriterTest, AFileToReplaceStaysUntilTheRecordingStarts) {
  TempDir dir;
  const std::string path = dir.File("t.pt");
  std::ofstream(path) << "old";
  auto in_dir = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      names.insert(e.path().filename().string());
    }
    return names;
  };
  WriterOptions o;
  o.overwrite = true;
  auto failed = ContainerWriter::Create(path, o);
  ASSERT_THAT(failed, IsOk());
  ASSERT_THAT((*failed)->AppendMetadata("{}"), IsOk());
  (*failed)->Discard();
  EXPECT_EQ(ReadFile(path), std::vector<uint8_t>({'o', 'l', 'd'}));
  EXPECT_EQ(in_dir(), std::set<std::string>{"t.pt"});
  failed->reset();
  EXPECT_EQ(in_dir(), std::set<std::string>{"t.pt"});

  // Two at once: each its own file until it starts, the last started one's at the end.
  auto first = ContainerWriter::Create(path, o);
  auto second = ContainerWriter::Create(path, o);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  ASSERT_THAT((*first)->AppendMetadata(R"({"who":"first"})"), IsOk());
  ASSERT_THAT((*second)->AppendMetadata(R"({"who":"second"})"), IsOk());
  ASSERT_THAT((*first)->Flush(), IsOk());
  ASSERT_THAT((*second)->Flush(), IsOk());
  EXPECT_EQ(ReadFile(path), std::vector<uint8_t>({'o', 'l', 'd'}));  // neither started yet
  ASSERT_THAT((*first)->Publish(), IsOk());
  ASSERT_THAT((*first)->Close(), IsOk());
  ASSERT_THAT((*second)->Close(), IsOk());
  EXPECT_EQ(in_dir(), std::set<std::string>{"t.pt"});
  auto reader = ContainerReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  RecordView rec;
  std::string metadata;
  while (reader->Next(rec).value_or(false)) {
    if (rec.type == RecordType::kMetadata) metadata.assign(rec.payload.begin(), rec.payload.end());
  }
  EXPECT_EQ(metadata, R"({"who":"second"})");
  EXPECT_TRUE(reader->report().clean());

  // A device: written (no file to overwrite), never removed.
  auto device = ContainerWriter::Create("/dev/null");
  ASSERT_THAT(device, IsOk());
  (*device)->Discard();
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// A FIFO is written as it is; one that no process opens for reading within 2 s is refused, not
// waited for without end (sweep 38b M5: ptrecord hung in open(2) with SIGINT and SIGTERM held
// off).
TEST(ContainerWriterTest, AFifoWithoutAReaderIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ContainerWriter::Create(fifo),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no process opened")));
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  auto w = ContainerWriter::Create(fifo);
  ASSERT_THAT(w, IsOk());
  (*w)->Discard();
  ::close(reader);
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);  // never removed
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(ContainerWriterTest, RejectsWorkAfterCloseAndOversizedRecords) {
  TempDir dir;
  auto w = ContainerWriter::Create(dir.File("t.pt"));
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT((*w)->Append(RecordType::kFooter, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*w)->Append(RecordType::kAux, std::vector<uint8_t>(kMaxPayloadSize + 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("split")));
  ASSERT_THAT((*w)->Close(), IsOk());
  EXPECT_THAT((*w)->Close(), IsOk());
  EXPECT_THAT((*w)->AppendMetadata("{}"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ContainerWriterTest, AWriterThatIsNotClosedLeavesNoFooter) {
  // Error paths drop or Abandon() the writer: the file must not claim a clean close.
  TempDir dir;
  for (bool explicit_abandon : {false, true}) {
    std::string path = dir.File(explicit_abandon ? "abandoned.pt" : "dropped.pt");
    {
      auto w = ContainerWriter::Create(path);
      ASSERT_THAT(w, IsOk());
      ASSERT_THAT((*w)->AppendMetadata("{}"), IsOk());
      ASSERT_THAT((*w)->AppendLoss({.kind = LossKind::kOther, .count = 1}), IsOk());
      if (explicit_abandon) {
        ASSERT_THAT((*w)->Abandon(), IsOk());
        EXPECT_THAT((*w)->Close(), IsOk());  // no-op afterwards: still no footer
      }
    }
    auto r = ContainerReader::Open(path);
    ASSERT_THAT(r, IsOk());
    ReadAll got = ReadEverything(*r);
    EXPECT_THAT(got.records, SizeIs(2));  // everything queued was written
    EXPECT_FALSE(got.report.footer_present);
    EXPECT_THAT(got.report.damage, SizeIs(0));
  }
}

TEST(ContainerWriterTest, FlushAndThePeriodicFlushMakeRecordsReadableBeforeClose) {
  TempDir dir;
  std::string path = dir.File("t.pt");
  WriterOptions o;
  o.flush_interval = absl::Milliseconds(20);
  auto w = ContainerWriter::Create(path, o);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT((*w)->AppendMetadata(R"({"a":1})"), IsOk());
  ASSERT_THAT((*w)->Flush(), IsOk());
  {
    auto r = ContainerReader::Open(path);
    ASSERT_THAT(r, IsOk());
    ReadAll got = ReadEverything(*r);
    EXPECT_THAT(got.records, SizeIs(1));
    EXPECT_FALSE(got.report.footer_present);
    EXPECT_THAT(got.report.damage, SizeIs(0));
  }
  ASSERT_THAT((*w)->AppendMetadata(R"({"b":2})"), IsOk());
  // No Flush(): the writer thread flushes on its own within flush_interval.
  size_t seen = 0;
  for (int i = 0; i < 500 && seen < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    auto r = ContainerReader::Open(path);
    ASSERT_THAT(r, IsOk());
    seen = ReadEverything(*r).records.size();
  }
  EXPECT_EQ(seen, 2u);
  ASSERT_THAT((*w)->Close(), IsOk());
}

TEST(ContainerWriterTest, SmallAndLargeRecordsKeepTheirOrder) {
  // Records are written from where they are up to a 64 KiB boundary of the file and the rest
  // is copied into a buffer: the file order must not change.
  TempDir dir;
  std::string path = dir.File("mixed.pt");
  const std::vector<size_t> sizes = {10, (32 << 10) - 100, 20, 32 << 10, 30, 3 << 20, 40, 100000};
  {
    auto w = ContainerWriter::Create(path);
    ASSERT_THAT(w, IsOk());
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> data = Pattern(sizes[i], i, i % 2 == 0);
      ASSERT_THAT((*w)->AppendAux({.aux_offset = i, .data = data}), IsOk());
    }
    ASSERT_THAT((*w)->Close(), IsOk());
  }
  auto r = ContainerReader::Open(path);
  ASSERT_THAT(r, IsOk());
  ReadAll got = ReadEverything(*r);
  EXPECT_TRUE(got.report.clean());
  ASSERT_EQ(got.records.size(), sizes.size() + 1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto aux = ParseAux(got.records[i].payload);
    ASSERT_THAT(aux, IsOk());
    EXPECT_EQ(aux->aux_offset, i);
    EXPECT_THAT(aux->data, BytesAre(Pattern(sizes[i], i, i % 2 == 0)));
  }
}

// The writer ends each write on a multiple of 64 KiB of the file (but for a flush) and keeps
// the rest: a boundary inside a frame header, after an unaligned flush, inside an empty
// record's header, exactly at a record's end, and a flush while a large record's tail waits.
TEST(ContainerWriterTest, RecordsCutAtTheWritersBoundariesComeBackWhole) {
  constexpr size_t kBoundary = 64 << 10;
  constexpr size_t kFirst = kBoundary - kFileHeaderSize - kFrameHeaderSize;  // ends on it
  struct Case {
    const char* name;
    std::vector<size_t> sizes;
    std::set<size_t> flush_after;
  };
  const Case cases[] = {
      {"boundary 20 bytes into a header", {kFirst - 20, 10}, {}},
      {"boundary in a header after a flush", {100, kFirst - 100 - kFrameHeaderSize - 20, 10}, {0}},
      {"boundary at a record's end", {kFirst, 10}, {}},
      {"boundary in an empty record's header", {0, kFirst - kFrameHeaderSize - 20, 0, 0}, {}},
      {"flush while a large record's tail waits", {100000, 10}, {0}},
  };
  TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.File("cut.pt");
    WriterOptions o;
    o.compress = false;
    o.overwrite = true;
    auto w = ContainerWriter::Create(path, o);
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT((*w)->Publish(), IsOk());  // the last case's file goes: read this one's there
    for (size_t i = 0; i < c.sizes.size(); ++i) {
      ASSERT_THAT((*w)->Append(RecordType::kMetadata, Pattern(c.sizes[i], i, false)), IsOk());
      if (!c.flush_after.contains(i)) continue;
      ASSERT_THAT((*w)->Flush(), IsOk());
      auto r = ContainerReader::Open(path);
      ASSERT_THAT(r, IsOk());
      ReadAll flushed = ReadEverything(*r);
      EXPECT_EQ(flushed.records.size(), i + 1);
      EXPECT_THAT(flushed.report.damage, ::testing::SizeIs(0));
    }
    ASSERT_THAT((*w)->Close(), IsOk());
    auto r = ContainerReader::Open(path);
    ASSERT_THAT(r, IsOk());
    ReadAll got = ReadEverything(*r);
    EXPECT_TRUE(got.report.clean());
    ASSERT_EQ(got.records.size(), c.sizes.size() + 1);
    for (size_t i = 0; i < c.sizes.size(); ++i) {
      EXPECT_THAT(got.records[i].payload, BytesAre(Pattern(c.sizes[i], i, false)));
    }
    EXPECT_EQ(got.records.back().type, RecordType::kFooter);
  }
}

TEST(ContainerWriterTest, FourThreadsEveryRecordArrivesOnceIntact) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 1500;
  TempDir dir;
  std::string path = dir.File("mt.pt");
  WriterOptions o;
  o.queue_bytes = 64 << 10;  // small, so producers have to wait for the writer
  auto w = ContainerWriter::Create(path, o);
  ASSERT_THAT(w, IsOk());
  auto data_for = [](int t, int i) {
    return Pattern(16 + (i * 37 + t * 101) % 4000, t * 100000 + i, i % 3 == 0);
  };
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<uint8_t> data = data_for(t, i);
        ASSERT_THAT((*w)->AppendAux({.stream = {StreamKind::kThread, static_cast<uint64_t>(t)},
                                     .aux_offset = static_cast<uint64_t>(i),
                                     .data = data}),
                    IsOk());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_THAT((*w)->Close(), IsOk());
  EXPECT_GT((*w)->stats().producer_waits, 0u);

  auto r = ContainerReader::Open(path);
  ASSERT_THAT(r, IsOk());
  ReadAll got = ReadEverything(*r);
  EXPECT_TRUE(got.report.clean());
  std::vector<int> next(kThreads, 0);
  for (const Owned& rec : got.records) {
    if (rec.type == RecordType::kFooter) continue;
    auto aux = ParseAux(rec.payload);
    ASSERT_THAT(aux, IsOk());
    int t = static_cast<int>(aux->stream.id);
    int i = static_cast<int>(aux->aux_offset);
    ASSERT_LT(t, kThreads);
    // Each producer's records arrive in its order, each exactly once.
    ASSERT_EQ(i, next[t]);
    ++next[t];
    ASSERT_THAT(aux->data, BytesAre(data_for(t, i)));
  }
  EXPECT_THAT(next, ::testing::Each(kPerThread));
}

// The compression helper changes who compresses, not what is written: one producer's records
// give the same file byte for byte with one or two compression threads.
TEST(ContainerWriterTest, TwoCompressionThreadsWriteTheSameFileAsOne) {
  TempDir dir;
  std::vector<std::string> files;
  for (int threads : {1, 2}) {
    files.push_back(dir.File("z" + std::to_string(threads) + ".pt"));
    WriterOptions o;
    o.compress_threads = threads;
    auto w = ContainerWriter::Create(files.back(), o);
    ASSERT_THAT(w, IsOk());
    for (int i = 0; i < 400; ++i) {
      // Compressible and incompressible, small and large.
      std::vector<uint8_t> data = Pattern(i % 3 == 0 ? 100 + i : (20 << 10) + 97 * i, i, i % 2);
      ASSERT_THAT((*w)->AppendAux({.aux_offset = static_cast<uint64_t>(i), .data = data}), IsOk());
    }
    ASSERT_THAT((*w)->Close(), IsOk());
    EXPECT_GT((*w)->stats().raw_bytes, (*w)->stats().stored_bytes);  // some did compress
  }
  auto slurp = [](const std::string& path) {
    return ::ptkit::testing::ReadWholeFile<std::vector<char>>(path);
  };
  const std::vector<char> one = slurp(files[0]);
  EXPECT_GT(one.size(), 1000u);
  EXPECT_TRUE(one == slurp(files[1]));
}

size_t ThreadCount() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return static_cast<size_t>(std::distance(begin(tasks), end(tasks)));
}

// The default compress_threads: a helper only when the creating thread may use a second CPU
// (taskset -c 0 ptrecord ... gets none).
TEST(ContainerWriterTest, TheDefaultHasACompressionHelperOnlyWithASecondUsableCpu) {
  TempDir dir;
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  for (bool pinned : {true, false}) {
    if (!pinned && CPU_COUNT(&all) < 2) GTEST_SKIP() << "one usable CPU: no helper to see";
    ASSERT_EQ(sched_setaffinity(0, sizeof(cpu_set_t), pinned ? &one : &all), 0);
    const size_t before = ThreadCount();
    auto w = ContainerWriter::Create(dir.File(pinned ? "one.pt" : "all.pt"), {});
    const size_t during = ThreadCount();
    ASSERT_EQ(sched_setaffinity(0, sizeof(cpu_set_t), &all), 0);
    ASSERT_THAT(w, IsOk());
    EXPECT_EQ(during - before, pinned ? 1u : 2u) << (pinned ? "pinned" : "not pinned");
    ASSERT_THAT((*w)->Close(), IsOk());
  }
}

TEST(ContainerWriterTest, FileSizeLimitSurfacesAsAnErrorAndLeavesAReadableFile) {
  TempDir dir;
  FillUntilError(
      dir.File("limited.pt"),
      [] {
        (void)::signal(SIGXFSZ, SIG_IGN);
        rlimit lim{64 << 10, 64 << 10};
        ::setrlimit(RLIMIT_FSIZE, &lim);
      },
      "File too large");
}

// In a child whose file size limit is `limit`: writes uncompressed records of `sizes`
// (Pattern(sizes[i], i)) without a Flush() and closes; the limit must stop it.
void WriteUnderFileLimit(const std::string& path, rlim_t limit, const std::vector<size_t>& sizes) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    (void)::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    WriterOptions o;
    o.compress = false;
    auto w = ContainerWriter::Create(path, o);
    if (!w.ok()) _exit(3);
    for (uint32_t i = 0; i < sizes.size(); ++i) {
      if (!(*w)->Append(RecordType::kMetadata, Pattern(sizes[i], i, false)).ok()) break;
    }
    _exit((*w)->Close().ok() ? 4 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "3: cannot create " << path << ", 4: no write failed";
}

// A large record is written up to the last 64 KiB boundary of the file it reaches and its
// tail waits in the buffer for the next write. When the file cannot grow, it is cut back to
// the last whole record, not to the last byte written (which is inside a record).
TEST(ContainerWriterTest, FileSizeLimitDuringLargeRecordsLeavesWholeRecordsOnly) {
  TempDir dir;
  FillUntilError(
      dir.File("limited-large.pt"),
      [] {
        (void)::signal(SIGXFSZ, SIG_IGN);
        rlimit lim{(512 << 10) + 1000, (512 << 10) + 1000};  // not on a page or record boundary
        ::setrlimit(RLIMIT_FSIZE, &lim);
      },
      "File too large", 40 << 10);
  // Without a Flush() between records, a record's tail is still buffered when the next
  // record's bytes are written and the limit is hit.
  const std::string path = dir.File("limited-unflushed.pt");
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 40; ++i) sizes.push_back((40 << 10) + 100 * i);
  WriteUnderFileLimit(path, (512 << 10) + 1000, sizes);
  auto r = ContainerReader::Open(path);
  ASSERT_THAT(r, IsOk());
  ReadAll got = ReadEverything(*r);
  EXPECT_THAT(got.report.damage, ::testing::SizeIs(0));
  EXPECT_EQ(got.report.lost_bytes(), 0u);
  ASSERT_GT(got.records.size(), 5u);
  for (uint32_t i = 0; i < got.records.size(); ++i) {
    EXPECT_THAT(got.records[i].payload, BytesAre(Pattern(sizes[i], i, false)));
  }
}

// A write that the file limit cuts short has still completed the records before the limit:
// they stay. The first write here ends on 64 KiB with 7 records of 10 KiB in it; the limit
// lets 40 KiB through, which holds 3 of them whole.
TEST(ContainerWriterTest, AWriteCutShortKeepsTheRecordsItCompleted) {
  TempDir dir;
  const std::string path = dir.File("short.pt");
  constexpr size_t kRecord = 10 << 10;
  constexpr rlim_t kLimit = 40 << 10;
  WriteUnderFileLimit(path, kLimit, std::vector<size_t>(20, kRecord));
  auto r = ContainerReader::Open(path);
  ASSERT_THAT(r, IsOk());
  ReadAll got = ReadEverything(*r);
  EXPECT_THAT(got.report.damage, ::testing::SizeIs(0));
  EXPECT_EQ(got.report.lost_bytes(), 0u);
  const size_t whole = (kLimit - kFileHeaderSize) / (kFrameHeaderSize + kRecord);
  ASSERT_EQ(got.records.size(), whole);
  for (uint32_t i = 0; i < whole; ++i) {
    EXPECT_THAT(got.records[i].payload, BytesAre(Pattern(kRecord, i, false)));
  }
}

}  // namespace
}  // namespace ptkit
