#include "ptkit/info.h"

#include <linux/perf_event.h>

#include <filesystem>
#include <fstream>

#include "container_test_util.h"
#include "temp_dir.h"

namespace ptkit {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::HasSubstr;

// Two perf records (COMM, EXIT) framed as the kernel writes them.
std::vector<uint8_t> TwoPerfRecords() {
  std::vector<uint8_t> out;
  // COMM {pid, tid, "" padded to 8}; EXIT {pid, ppid, tid, ptid, time} (perf_event_open(2)).
  for (auto [type, size] :
       {std::pair<uint32_t, uint16_t>{PERF_RECORD_COMM, 24}, {PERF_RECORD_EXIT, 32}}) {
    perf_event_header h{type, 0, size};
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    out.insert(out.end(), p, p + sizeof(h));
    out.resize(out.size() + size - sizeof(h), 0);
  }
  return out;
}

std::string WriteTrace(const testing::TempDir& dir) {
  std::string path = dir.File("info.pt");
  auto w = ContainerWriter::Create(path);
  EXPECT_THAT(w, IsOk());
  std::vector<uint8_t> pt(10000, 0x02), sb = TwoPerfRecords();
  EXPECT_THAT((*w)->AppendMetadata(R"({"host":"box","kernel":"6.1"})"), IsOk());
  EXPECT_THAT((*w)->AppendSideband({.cpu = 1, .records = sb}), IsOk());
  EXPECT_THAT((*w)->AppendAux({.stream = {StreamKind::kCpu, 1}, .data = pt}), IsOk());
  EXPECT_THAT((*w)->AppendAux({.stream = {StreamKind::kCpu, 1},
                               .aux_offset = 10000,
                               .flags = kAuxTruncated,
                               .data = pt}),
              IsOk());
  EXPECT_THAT((*w)->AppendLoss({.stream = {StreamKind::kCpu, 1},
                                .kind = LossKind::kAuxTruncated,
                                .count = 1,
                                .bytes = 4096}),
              IsOk());
  std::vector<CounterValue> c = {{.name = "page-faults", .value = 77}};
  EXPECT_THAT((*w)->AppendCounters(c), IsOk());
  EXPECT_THAT((*w)->Close(), IsOk());
  return path;
}

TEST(InfoTest, SummarisesKindsStreamsLossAndFooter) {
  testing::TempDir dir;
  auto info = ContainerInfo(WriteTrace(dir));
  ASSERT_THAT(info, IsOk());
  const nlohmann::json& j = *info;
  EXPECT_TRUE(j["footer_present"].get<bool>());
  EXPECT_EQ(j["records"], 7);
  EXPECT_EQ(j["metadata"]["host"], "box");
  std::map<std::string, uint64_t> counts;
  for (const auto& k : j["kinds"]) counts[k["kind"]] = k["count"];
  EXPECT_EQ(counts, (std::map<std::string, uint64_t>{{"aux", 2},
                                                     {"counters", 1},
                                                     {"footer", 1},
                                                     {"loss", 1},
                                                     {"metadata", 1},
                                                     {"sideband", 1}}));
  ASSERT_EQ(j["streams"].size(), 1u);
  EXPECT_EQ(j["streams"][0]["stream"], "cpu 1");
  EXPECT_EQ(j["streams"][0]["aux_bytes"], 20000);
  EXPECT_EQ(j["streams"][0]["truncated"], 1);
  EXPECT_EQ(j["sideband"][0]["records"]["COMM"], 1);
  EXPECT_EQ(j["sideband"][0]["records"]["EXIT"], 1);
  EXPECT_EQ(j["loss_totals"]["bytes"], 4096);
  EXPECT_EQ(j["counters"][0]["value"], 77);
  EXPECT_GT(j["totals"]["compression_ratio"].get<double>(), 10.0);  // 0x02 repeated
  EXPECT_TRUE(j["damage"].empty());

  std::string text = FormatInfoText(j);
  EXPECT_THAT(text, HasSubstr("present"));
  EXPECT_THAT(text, HasSubstr("cpu 1: aux 2 records"));
  EXPECT_THAT(text, HasSubstr("aux-truncated"));
  EXPECT_THAT(text, HasSubstr("page-faults = 77"));
}

TEST(InfoTest, ACutFileShowsTheDamageAndTheMissingFooter) {
  testing::TempDir dir;
  std::string path = WriteTrace(dir);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 30);
  auto info = ContainerInfo(path);
  ASSERT_THAT(info, IsOk());
  EXPECT_FALSE((*info)["footer_present"].get<bool>());
  ASSERT_EQ((*info)["damage"].size(), 1u);
  EXPECT_GT((*info)["lost_bytes"].get<uint64_t>(), 0u);
  EXPECT_THAT(FormatInfoText(*info), HasSubstr("MISSING"));
}

TEST(InfoTest, NotAContainerIsAnErrorNamingTheFile) {
  testing::TempDir dir;
  std::string path = dir.File("notes.txt");
  std::ofstream(path) << "hello, this is not a trace\n";
  EXPECT_THAT(ContainerInfo(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("notes.txt")));
}

// Sideband counts use the perf record reader and its names; a batch whose last record is cut
// (here: 5 stray bytes, less than a header) is reported, not silently dropped.
TEST(InfoTest, SidebandRecordsAreNamedAndACutBatchIsMalformed) {
  testing::TempDir dir;
  std::string path = dir.File("sb.pt");
  std::vector<uint8_t> sb = TwoPerfRecords();
  perf_event_header odd{9999, 0, 8};
  const auto* p = reinterpret_cast<const uint8_t*>(&odd);
  sb.insert(sb.end(), p, p + sizeof(odd));
  sb.insert(sb.end(), 5, 0xEE);
  auto w = ContainerWriter::Create(path);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT((*w)->AppendSideband({.cpu = 2, .records = sb}), IsOk());
  ASSERT_THAT((*w)->Close(), IsOk());
  absl::StatusOr<nlohmann::json> info = ContainerInfo(path);
  ASSERT_THAT(info, IsOk());
  const nlohmann::json& records = (*info)["sideband"][0]["records"];
  EXPECT_EQ(records["COMM"], 1);
  EXPECT_EQ(records["EXIT"], 1);
  EXPECT_EQ(records["TYPE-9999"], 1);
  ASSERT_EQ((*info)["malformed"].size(), 1u);
  EXPECT_THAT((*info)["malformed"][0]["error"].get<std::string>(), HasSubstr("sideband of cpu 2"));
}

// Writes a container at `path` whose metadata records are `records`, verbatim.
void WriteMetadata(const std::string& path, const std::vector<std::string>& records) {
  auto w = ContainerWriter::Create(path);
  ASSERT_THAT(w, IsOk());
  for (const std::string& r : records) ASSERT_THAT((*w)->AppendMetadata(r), IsOk());
  ASSERT_THAT((*w)->Close(), IsOk());
}

// Issue 12 item 3: metadata nested 100,000 levels deep (3.7 KB) crashed the JSON serializer.
// It is not read: a malformed record, and the other records are shown.
TEST(InfoTest, DeeplyNestedMetadataIsMalformedNotACrash) {
  testing::TempDir dir;
  const std::string path = dir.File("deep.pt");
  const std::string deep = R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  WriteMetadata(path, {R"({"host":"box"})", deep});
  if (::testing::Test::HasFatalFailure()) return;
  absl::StatusOr<nlohmann::json> info = ContainerInfo(path);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ((*info)["metadata"], nlohmann::json({{"host", "box"}}));
  ASSERT_EQ((*info)["malformed"].size(), 1u);
  EXPECT_EQ((*info)["malformed"][0]["error"],
            "metadata record nested deeper than 64 levels: not read");
  EXPECT_THAT(FormatInfoText(*info), HasSubstr("nested deeper than 64 levels"));
}

// The metadata records merged in order (a later member replaces an earlier one), read as the
// decoders read them: a member of the wrong type is shown as it is, with what decoding will
// say about it; members ptkit does not know are shown too.
TEST(InfoTest, MetadataIsMergedAndMistypedMembersAreNamed) {
  testing::TempDir dir;
  const std::string path = dir.File("typed.pt");
  WriteMetadata(path, {R"({"host":"box","cpu":{"family":6},"future":{"x":1}})",
                       R"({"cpu":{"vendor":"GenuineIntel","family":"6"},"page_size":"4k"})"});
  if (::testing::Test::HasFatalFailure()) return;
  absl::StatusOr<nlohmann::json> info = ContainerInfo(path);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ((*info)["metadata"], nlohmann::json::parse(R"({"host":"box","future":{"x":1},
      "cpu":{"vendor":"GenuineIntel","family":"6"},"page_size":"4k"})"));
  EXPECT_THAT((*info)["warnings"].get<std::vector<std::string>>(),
              ::testing::Contains(R"(metadata: "cpu.family" must be a number, got string "6": )"
                                  "the decoding sub-commands stop on it"));
  const std::string text = FormatInfoText(*info);
  EXPECT_THAT(text, HasSubstr("future"));
  EXPECT_THAT(text, HasSubstr(R"(warning:     metadata: "cpu.family" must be a number)"));

  // Once the decoding member is right, the informational one is a warning only.
  const std::string path2 = dir.File("typed2.pt");
  WriteMetadata(path2, {R"({"cpu":{"family":6},"page_size":"4k"})"});
  if (::testing::Test::HasFatalFailure()) return;
  info = ContainerInfo(path2);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ((*info)["metadata"]["page_size"], "4k");
  EXPECT_THAT(
      (*info)["warnings"].get<std::vector<std::string>>(),
      ::testing::Contains(R"(metadata: "page_size" must be a number, got string "4k": ignored)"));
}

// What the recorder warned of at the end (the end metadata's "warnings") is said as every
// decode says it (sweep 35a L1: "60 guest threads were not traced" was only inside the
// metadata dump, cut at 97 characters; the JSON "warnings" was empty).
TEST(InfoTest, TheRecordersWarningsAreSaid) {
  testing::TempDir dir;
  const std::string path = dir.File("warned.pt");
  WriteMetadata(path, {R"({"host":"box"})",
                       R"({"end":{"threads":64,"warnings":["60 guest threads were not traced: )"
                       R"(the ring has 64 streams", 3]}})"});
  if (::testing::Test::HasFatalFailure()) return;
  absl::StatusOr<nlohmann::json> info = ContainerInfo(path);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ((*info)["warnings"].get<std::vector<std::string>>(),
            std::vector<std::string>{"recorded with a warning: 60 guest threads were not traced: "
                                     "the ring has 64 streams"});
  EXPECT_THAT(FormatInfoText(*info),
              HasSubstr("warning:     recorded with a warning: 60 guest threads were not traced: "
                        "the ring has 64 streams\n"));
}

}  // namespace
}  // namespace ptkit
