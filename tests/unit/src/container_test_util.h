// Helpers shared by the container tests.
#ifndef PTKIT_TESTS_UNIT_SRC_CONTAINER_TEST_UTIL_H_
#define PTKIT_TESTS_UNIT_SRC_CONTAINER_TEST_UTIL_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/container_writer.h"
#include "read_file.h"
#include "status_matchers.h"

namespace ptkit::testing {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  return ::ptkit::testing::ReadWholeFile(path);
}

inline std::vector<uint8_t> Pattern(size_t n, uint32_t seed, bool compressible) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) v[i] = compressible ? static_cast<uint8_t>((i / 7) % 5) : rng();
  return v;
}

struct Owned {
  RecordType type;
  uint64_t sequence;
  uint64_t offset;
  uint64_t stored_bytes;
  std::vector<uint8_t> payload;
};

struct ReadAll {
  std::vector<Owned> records;
  ReadReport report;
};

inline ReadAll ReadEverything(ContainerReader& reader) {
  ReadAll all;
  RecordView v;
  for (;;) {
    auto more = reader.Next(v);
    EXPECT_THAT(more, IsOk());
    if (!more.ok() || !*more) break;
    all.records.push_back(
        {v.type, v.sequence, v.offset, v.stored_bytes, {v.payload.begin(), v.payload.end()}});
  }
  all.report = reader.report();
  return all;
}

inline ReadAll ReadBytes(std::span<const uint8_t> bytes) {
  auto reader = ContainerReader::Open(MemorySource(bytes, "mem.pt"));
  EXPECT_THAT(reader, IsOk());
  if (!reader.ok()) return {};
  return ReadEverything(*reader);
}

// Fills a size-limited place and checks the error and what survives.
// `setup` runs in a forked child before writing; returns the writer's final error message.
// Appends uncompressed AUX records of `record_size` bytes, each followed by a Flush(), until
// the writer fails.
inline void FillUntilError(const std::string& path, const std::function<void()>& setup,
                           const std::string& expected_error, size_t record_size = 3000) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    setup();
    WriterOptions o;
    o.compress = false;
    auto w = ContainerWriter::Create(path, o);
    if (!w.ok()) _exit(3);
    uint32_t confirmed = 0;
    absl::Status s;
    for (uint32_t i = 0; i < 100000 && s.ok(); ++i) {
      std::vector<uint8_t> data = Pattern(record_size, i, false);
      s = (*w)->AppendAux({.aux_offset = i, .data = data});
      if (s.ok()) s = (*w)->Flush();
      if (s.ok()) confirmed = i + 1;
    }
    absl::Status closed = (*w)->Close();
    std::string msg = std::string(s.message()) + "|" + std::string(closed.message());
    if (::write(fds[1], &confirmed, sizeof(confirmed)) != sizeof(confirmed)) _exit(4);
    if (::write(fds[1], msg.data(), msg.size()) < 0) _exit(4);
    _exit(s.ok() ? 5 : 0);
  }
  ::close(fds[1]);
  uint32_t confirmed = 0;
  ASSERT_EQ(::read(fds[0], &confirmed, sizeof(confirmed)), ssize_t{sizeof(confirmed)});
  std::string msg(4096, '\0');
  ssize_t n = ::read(fds[0], msg.data(), msg.size());
  msg.resize(n > 0 ? n : 0);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << msg;
  EXPECT_THAT(msg, HasSubstr(expected_error));
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_GT(confirmed, 3u);

  // Everything confirmed before the error is there and intact; nothing is damaged.
  auto r = ContainerReader::Open(path);
  ASSERT_THAT(r, IsOk());
  ReadAll got = ReadEverything(*r);
  EXPECT_FALSE(got.report.footer_present);
  EXPECT_THAT(got.report.damage, SizeIs(0));
  ASSERT_EQ(got.records.size(), confirmed);
  for (uint32_t i = 0; i < confirmed; ++i) {
    auto aux = ParseAux(got.records[i].payload);
    ASSERT_THAT(aux, IsOk());
    EXPECT_EQ(aux->aux_offset, i);
    EXPECT_THAT(aux->data, ElementsAreArray(Pattern(record_size, i, false)));
  }
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_UNIT_SRC_CONTAINER_TEST_UTIL_H_
