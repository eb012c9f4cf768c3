#include "record/status_line.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptkit::record {
namespace {

using ::testing::HasSubstr;

TEST(StatusLineTest, FormatSaysTimeRateStoredAndLoss) {
  StreamStats t;
  t.aux_bytes = 3'000'000;
  t.snapshot_bytes = 1'000'000;
  t.sample_aux_bytes = 2'000'000;
  EXPECT_EQ(TraceBytes(t), 6'000'000u);
  EXPECT_EQ(FormatStatusLine(2000, t, 41'000'000),
            "ptrecord: 2.0 s, 3.0 MB/s of trace, 41.0 MB stored, no loss");
  t.truncated = 2;
  t.collisions = 1;
  t.lost_records = 5;
  EXPECT_EQ(FormatStatusLine(500, StreamStats{}, 999),
            "ptrecord: 0.5 s, 0 B/s of trace, 999 B "
            "stored, no loss");
  EXPECT_THAT(FormatStatusLine(1000, t, 0),
              HasSubstr(", loss: 2 truncations, 1 collision, 5 lost records"));
}

// A line about once per interval, rewritten in place, erased by Clear(); nothing at all when
// the output is no terminal.
TEST(StatusLineTest, DrawsEveryIntervalOnATerminalOnly) {
  for (const bool terminal : {true, false}) {
    SCOPED_TRACE(terminal ? "terminal" : "no terminal");
    char* buffer = nullptr;
    size_t size = 0;
    std::FILE* out = open_memstream(&buffer, &size);
    ASSERT_NE(out, nullptr);
    uint64_t now = 10'000;
    {
      StatusLine line(
          out, terminal, [&now] { return now; }, 1000);
      StreamStats t;
      t.aux_bytes = 1'000'000;
      line.Update(t, 100);  // no second passed yet
      now += 999;
      line.Update(t, 100);
      EXPECT_EQ(line.lines(), 0u);
      now += 1;
      line.Update(t, 2'000);
      now += 500;
      line.Update(t, 2'000);  // half an interval after the first line
      now += 500;
      t.aux_bytes = 4'000'000;
      line.Update(t, 3'000'000);
      EXPECT_EQ(line.lines(), terminal ? 2u : 0u);
      line.Clear();
      line.Clear();  // once only
    }
    EXPECT_EQ(std::fclose(out), 0);
    const std::string text(buffer, size);
    std::free(buffer);
    if (!terminal) {
      EXPECT_EQ(text, "");
      continue;
    }
    EXPECT_EQ(text,
              "\rptrecord: 1.0 s, 1.0 MB/s of trace, 2.0 kB stored, no loss\033[K"
              "\rptrecord: 2.0 s, 2.0 MB/s of trace, 3.0 MB stored, no loss\033[K"
              "\r\033[K");
  }
}

}  // namespace
}  // namespace ptkit::record
