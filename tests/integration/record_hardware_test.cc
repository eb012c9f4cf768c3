// Needs Intel PT: records /bin/true with the real intel_pt PMU and checks that trace data and
// ITRACE_START arrive. Skips, saying why, where the PMU is absent (AMD, most VMs).
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"
#include "record/event_spec.h"
#include "record/session.h"
#include "status_matchers.h"
#include "temp_dir.h"

namespace ptkit::record {
namespace {

using ::ptkit::testing::IsOk;

TEST(RecordHardwareTest, IntelPtOfBinTrue) {
  const std::string pmu = std::string(kDefaultSysfsRoot) + "/intel_pt";
  if (!std::filesystem::exists(pmu)) GTEST_SKIP() << "no intel_pt PMU here (" << pmu << ")";
  ::ptkit::testing::TempDir dir;
  SessionOptions o;
  o.command = {"/bin/true"};
  o.trace_event = "intel_pt//u";
  o.output = dir.File("pt.pt");
  o.aux_pages = 64;
  absl::StatusOr<SessionResult> r = RunSession(o);
  if (r.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << r.status();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->workload_exit_code, 0);
  EXPECT_GT(r->totals.aux_bytes, 0u);
  EXPECT_EQ(r->totals.truncated, 0u);

  PTKIT_ASSERT_OK_AND_ASSIGN(ContainerReader reader, ContainerReader::Open(o.output));
  RecordView rv;
  uint64_t aux_bytes = 0, itrace_start = 0;
  const perf::SampleIdLayout layout{kSampleIdType, true};
  while (*reader.Next(rv)) {
    if (rv.type == RecordType::kAux) aux_bytes += ParseAux(rv.payload)->data.size();
    if (rv.type != RecordType::kSideband) continue;
    PTKIT_ASSERT_OK_AND_ASSIGN(SidebandRecord sb, ParseSideband(rv.payload));
    perf::RecordReader rr(sb.records);
    while (true) {
      PTKIT_ASSERT_OK_AND_ASSIGN(std::optional<perf::RecordView> rec, rr.Next());
      if (!rec) break;
      if (rec->type == PERF_RECORD_ITRACE_START) {
        PTKIT_ASSERT_OK_AND_ASSIGN(perf::ItraceStart s, perf::ParseItraceStart(*rec, layout));
        EXPECT_GT(s.pid, 0u);
        ++itrace_start;
      }
    }
  }
  EXPECT_EQ(aux_bytes, r->totals.aux_bytes);
  EXPECT_GT(itrace_start, 0u);
}

}  // namespace
}  // namespace ptkit::record
