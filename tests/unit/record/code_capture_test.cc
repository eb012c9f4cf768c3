#include "record/code_capture.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/status.h"
#include "read_file.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

// This executable's build-id as the dynamic loader sees it in memory: an independent way to
// the same bytes ReadBuildId() finds in the file.
std::vector<uint8_t> OwnBuildIdFromMemory() {
  std::vector<uint8_t> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 0;  // main only
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const uint8_t* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const uint8_t* name = p + sizeof(*n);
            const uint8_t* desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && std::memcmp(name, "GNU", 4) == 0) {
              static_cast<std::vector<uint8_t>*>(data)->assign(desc, desc + n->n_descsz);
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &out);
  return out;
}

TEST(ReadBuildIdTest, MatchesTheLoadedImage) {
  const std::vector<uint8_t> want = OwnBuildIdFromMemory();
  if (want.empty()) GTEST_SKIP() << "this test binary was linked without --build-id";
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> got, ReadBuildId("/proc/self/exe"));
  EXPECT_EQ(got, want);
}

TEST(ReadBuildIdTest, Errors) {
  EXPECT_THAT(ReadBuildId("/nonexistent/file"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("open /nonexistent/file")));
  const std::string text = std::string(PTKIT_SOURCE_DIR) + "/tests/data/sysfs/intel_pt/type";
  EXPECT_THAT(ReadBuildId(text),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an ELF file")));
}

TEST(ReadOwnVdsoTest, IsAnElfImage) {
  absl::StatusOr<std::vector<uint8_t>> v = ReadOwnVdso();
  if (v.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << v.status();
  ASSERT_THAT(v, IsOk());
  ASSERT_GE(v->size(), 4096u);
  EXPECT_EQ(v->size() % 4096, 0u);
  EXPECT_EQ(std::memcmp(v->data(), ELFMAG, SELFMAG), 0);
}

TEST(CodeCaptureTest, IdentitiesOfExecutableFilesAndTheVdso) {
  const perf::SampleIdLayout layout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, true};
  CodeCapture capture;
  auto feed = [&](uint32_t pid, uint64_t addr, uint32_t prot, std::string_view name) {
    const std::vector<uint8_t> bytes = perf::EncodeMmap2(
        perf::Mmap2{.pid = pid, .addr = addr, .len = 4096, .prot = prot, .filename = name}, layout);
    capture.OnRecord(*perf::ReadRecord(bytes), layout);
  };
  feed(10, 0x1000, PROT_READ | PROT_EXEC, "/proc/self/exe");
  feed(10, 0x9000, PROT_READ | PROT_EXEC, "/proc/self/exe");  // same file again: one record
  feed(10, 0x5000, PROT_READ, "/etc/passwd");                 // not executable: ignored
  feed(10, 0x7000, PROT_READ | PROT_EXEC, "//anon");          // anonymous memory (JIT): no file
  feed(10, 0x7fff0000, PROT_READ | PROT_EXEC, "[vdso]");
  feed(10, 0x6000, PROT_READ | PROT_EXEC, "/nonexistent/lib.so");
  EXPECT_EQ(capture.files(), 2u);

  ::ptkit::testing::TempDir dir;
  PTKIT_ASSERT_OK_AND_ASSIGN(auto writer, ContainerWriter::Create(dir.File("c.pt")));
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> warnings, capture.Write(*writer));
  ASSERT_THAT(writer->Close(), IsOk());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("no build-id stored for /nonexistent/lib.so"));

  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(dir.File("c.pt")));
  RecordView rv;
  int identities = 0, vdsos = 0;
  while (*reader.Next(rv)) {
    if (rv.type != RecordType::kCode) continue;
    PTKIT_ASSERT_OK_AND_ASSIGN(CodeRecord c, ParseCode(rv.payload));
    EXPECT_EQ(c.pid, 10u);
    if (c.flags == kCodeVdso) {
      ++vdsos;
      EXPECT_EQ(c.address, 0x7fff0000u);
      EXPECT_EQ(std::vector<uint8_t>(c.bytes.begin(), c.bytes.end()), *ReadOwnVdso());
    } else {
      ++identities;
      EXPECT_EQ(c.flags, kCodeIdentity);
      if (c.path == "/proc/self/exe") {
        EXPECT_EQ(c.address, 0x1000u);
        EXPECT_EQ(std::vector<uint8_t>(c.build_id.begin(), c.build_id.end()),
                  ReadBuildId("/proc/self/exe").value_or(std::vector<uint8_t>{}));
      }
    }
  }
  EXPECT_EQ(identities, 2);  // the program and /nonexistent/lib.so (no build-id)
  EXPECT_EQ(vdsos, ReadOwnVdso().ok() ? 1 : 0);
}

using VdsoRecords = std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>>;

// The vdso records `capture` writes: (pid, address) -> bytes.
VdsoRecords WrittenVdsos(const CodeCapture& capture) {
  ::ptkit::testing::TempDir dir;
  VdsoRecords vdso;
  auto writer = ContainerWriter::Create(dir.File("c.pt"));
  EXPECT_THAT(writer, IsOk());
  if (!writer.ok()) return vdso;
  EXPECT_THAT(capture.Write(**writer), IsOk());
  EXPECT_THAT((*writer)->Close(), IsOk());
  auto reader = ContainerReader::Open(dir.File("c.pt"));
  EXPECT_THAT(reader, IsOk());
  RecordView rv;
  while (reader.ok() && reader->Next(rv).value_or(false)) {
    if (rv.type != RecordType::kCode) continue;
    absl::StatusOr<CodeRecord> c = ParseCode(rv.payload);
    EXPECT_THAT(c, IsOk());
    if (c.ok() && c->flags == kCodeVdso) {
      vdso[{c->pid, c->address}].assign(c->bytes.begin(), c->bytes.end());
    }
  }
  return vdso;
}

// A forked child has its parent's vdso without an MMAP2 of its own; a new thread is no new
// process.
TEST(CodeCaptureTest, AForkedProcessGetsItsParentsVdso) {
  if (!ReadOwnVdso().ok()) GTEST_SKIP() << ReadOwnVdso().status();
  const perf::SampleIdLayout layout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, true};
  CodeCapture capture;
  auto feed = [&](const std::vector<uint8_t>& bytes) {
    capture.OnRecord(*perf::ReadRecord(bytes), layout);
  };
  feed(perf::EncodeMmap2(perf::Mmap2{.pid = 10,
                                     .addr = 0x7fff0000,
                                     .len = 8192,
                                     .prot = PROT_READ | PROT_EXEC,
                                     .filename = "[vdso]"},
                         layout));
  feed(perf::EncodeTask(perf::Task{.pid = 11, .ppid = 10, .tid = 11, .ptid = 10}, layout));
  feed(perf::EncodeTask(perf::Task{.pid = 10, .ppid = 10, .tid = 12, .ptid = 10}, layout));
  std::set<std::pair<uint32_t, uint64_t>> vdso;  // (pid, address)
  for (const auto& [key, bytes] : WrittenVdsos(capture)) vdso.insert(key);
  EXPECT_EQ(vdso, (std::set<std::pair<uint32_t, uint64_t>>{{10, 0x7fff0000}, {11, 0x7fff0000}}));
}

// An i386 process has the kernel's i386 vdso, not ptrecord's (sweep 37b H1: every syscall
// through __kernel_vsyscall was decoded against the 64-bit image, "trace stream does not
// match query"): its bytes are read from the process when its [vdso] is mapped; a process
// gone before that has the image of its size seen before.
TEST(CodeCaptureTest, AProcessWithAnotherVdsoGetsItsOwn) {
  if (!ReadOwnVdso().ok()) GTEST_SKIP() << ReadOwnVdso().status();
  const std::vector<uint8_t> i386(12288, 0x90);  // another size than any x86-64 vdso here
  ASSERT_NE(ReadOwnVdso()->size(), i386.size());
  const perf::SampleIdLayout layout{PERF_SAMPLE_TID | PERF_SAMPLE_TIME, true};
  CodeCapture capture(
      false,
      [&](uint32_t pid, uint64_t addr, uint64_t len) -> absl::StatusOr<std::vector<uint8_t>> {
        if ((pid == 10 || pid == 20) && addr == 0xf7ffc000 && len == i386.size()) return i386;
        if (pid == 10) return *ReadOwnVdso();
        return absl::NotFoundError("gone");
      });
  auto feed = [&](uint32_t pid, uint64_t addr, uint64_t len) {
    capture.OnRecord(*perf::ReadRecord(perf::EncodeMmap2(perf::Mmap2{.pid = pid,
                                                                     .addr = addr,
                                                                     .len = len,
                                                                     .prot = PROT_READ | PROT_EXEC,
                                                                     .filename = "[vdso]"},
                                                         layout)),
                     layout);
  };
  feed(10, 0x7fff0000, ReadOwnVdso()->size());  // x86-64
  feed(20, 0xf7ffc000, i386.size());            // i386
  feed(30, 0xf7ffc000, i386.size());            // i386, gone before it was read
  feed(40, 0x7ffe0000, ReadOwnVdso()->size());  // x86-64, gone
  feed(10, 0xf7ffc000, i386.size());            // 10 execs an i386 program: both are kept
  capture.OnRecord(*perf::ReadRecord(perf::EncodeTask(
                       perf::Task{.pid = 21, .ppid = 20, .tid = 21, .ptid = 20}, layout)),
                   layout);
  VdsoRecords vdso = WrittenVdsos(capture);
  ASSERT_EQ(vdso.size(), 6u);
  EXPECT_EQ(vdso[std::make_pair(10u, uint64_t{0x7fff0000})], *ReadOwnVdso());
  EXPECT_EQ(vdso[std::make_pair(10u, uint64_t{0xf7ffc000})], i386);
  EXPECT_EQ(vdso[std::make_pair(20u, uint64_t{0xf7ffc000})], i386);
  EXPECT_EQ(vdso[std::make_pair(21u, uint64_t{0xf7ffc000})], i386);  // forked from 20
  EXPECT_EQ(vdso[std::make_pair(30u, uint64_t{0xf7ffc000})], i386);
  EXPECT_EQ(vdso[std::make_pair(40u, uint64_t{0x7ffe0000})], *ReadOwnVdso());
}

TEST(CodeCaptureTest, ArchiveStoresTheMappedFileBytes) {
  const perf::SampleIdLayout layout{PERF_SAMPLE_TID, true};
  CodeCapture capture(/*archive=*/true);
  auto feed = [&](uint64_t addr, uint64_t pgoff, uint64_t len, std::string_view name) {
    const std::vector<uint8_t> bytes = perf::EncodeMmap2(perf::Mmap2{.pid = 7,
                                                                     .addr = addr,
                                                                     .len = len,
                                                                     .pgoff = pgoff,
                                                                     .prot = PROT_READ | PROT_EXEC,
                                                                     .filename = name},
                                                         layout);
    capture.OnRecord(*perf::ReadRecord(bytes), layout);
  };
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const uint64_t size = std::filesystem::file_size(exe);
  feed(0x400000, 0, 4096, exe);
  feed(0x500000, 4096, 8192, exe);
  feed(0x900000, size - 100, 4096, exe);  // the mapping runs past the end of the file
  ::ptkit::testing::TempDir dir;
  PTKIT_ASSERT_OK_AND_ASSIGN(auto writer, ContainerWriter::Create(dir.File("a.pt")));
  PTKIT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> warnings, capture.Write(*writer));
  ASSERT_THAT(writer->Close(), IsOk());
  EXPECT_TRUE(warnings.empty());

  std::vector<uint8_t> file = ::ptkit::testing::ReadWholeFile(exe);
  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(dir.File("a.pt")));
  RecordView rv;
  std::map<uint64_t, std::vector<uint8_t>> by_address;
  while (*reader.Next(rv)) {
    if (rv.type != RecordType::kCode) continue;
    PTKIT_ASSERT_OK_AND_ASSIGN(CodeRecord c, ParseCode(rv.payload));
    if (c.flags != 0) continue;
    EXPECT_EQ(c.path, exe);
    EXPECT_EQ(c.address - c.pgoff, c.address == 0x400000   ? 0x400000u
                                   : c.address == 0x500000 ? 0x500000u - 4096
                                                           : 0x900000u - (size - 100));
    by_address[c.address].assign(c.bytes.begin(), c.bytes.end());
  }
  ASSERT_EQ(by_address.size(), 3u);
  EXPECT_EQ(by_address[0x400000], std::vector<uint8_t>(file.begin(), file.begin() + 4096));
  EXPECT_EQ(by_address[0x500000],
            std::vector<uint8_t>(file.begin() + 4096, file.begin() + 4096 + 8192));
  EXPECT_EQ(by_address[0x900000], std::vector<uint8_t>(file.end() - 100, file.end()));
}

}  // namespace
}  // namespace ptkit::record
