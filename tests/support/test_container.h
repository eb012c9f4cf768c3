// Writing trace.pt containers in tests: a new container with its metadata records, and the
// MMAP2 record of an executable mapping of a file.
#ifndef PTKIT_TESTS_SUPPORT_TEST_CONTAINER_H_
#define PTKIT_TESTS_SUPPORT_TEST_CONTAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptkit/container_writer.h"
#include "ptkit/perf_records.h"
#include "ptkit/recording_metadata.h"
#include "ptkit/status.h"

namespace ptkit::testing {

// `json` read as RecordingMetadata; a test failure (and empty metadata) when it is not valid.
inline RecordingMetadata TypedMetadata(const nlohmann::json& json) {
  absl::StatusOr<RecordingMetadata> m = RecordingMetadata::FromJson(json);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : RecordingMetadata{};
}

// A new container at `path` (replacing a file there) whose first records are `metadata`, as
// given (JSON text). Errors: ContainerWriter's.
inline absl::StatusOr<std::unique_ptr<ContainerWriter>> NewContainer(
    const std::string& path, const std::vector<std::string>& metadata) {
  WriterOptions options;
  options.overwrite = true;
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ContainerWriter> writer,
                         ContainerWriter::Create(path, options));
  for (const std::string& m : metadata) PTKIT_RETURN_IF_ERROR(writer->AppendMetadata(m));
  return writer;
}

// The MMAP2 record (encoded with `layout`) of thread `pid` of process `pid` mapping
// [addr, addr + len) of `file` from `pgoff`, readable and executable, with `sample_id`.
inline std::vector<uint8_t> ExecMmap2(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff,
                                      const std::string& file, const perf::SampleId& sample_id,
                                      const perf::SampleIdLayout& layout,
                                      const std::vector<uint8_t>& build_id = {}) {
  perf::Mmap2 m;
  m.build_id = build_id;
  m.pid = m.tid = pid;
  m.addr = addr;
  m.len = len;
  m.pgoff = pgoff;
  m.prot = 5;  // PROT_READ | PROT_EXEC
  m.filename = file;
  m.sample_id = sample_id;
  return perf::EncodeMmap2(m, layout);
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_TEST_CONTAINER_H_
