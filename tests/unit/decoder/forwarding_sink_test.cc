// ForwardingSink passes every Sink callback and property on; the decorators built on it
// (ProgressSink, TimeFilterSink in its window) do too.
#include "decoder/forwarding_sink.h"

#include <memory>
#include <string>
#include <vector>

#include "decoder/progress.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptkit::decoder {
namespace {

using ::testing::ElementsAreArray;

// Logs each callback by name; its properties differ from Sink's defaults.
class LogSink : public Sink {
 public:
  explicit LogSink(std::vector<std::string>* log) : log_(log) {}
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  bool end_block_on_call() const override { return true; }
  bool end_block_on_jump() const override { return true; }
  bool wants_time() const override { return true; }
  void OnStream(const StreamInfo& stream) override { log_->push_back("stream " + stream.name); }
  void OnLoss(const LossInfo& loss) override { log_->push_back("loss " + loss.kind); }
  void OnSync(uint64_t offset) override { log_->push_back("sync " + std::to_string(offset)); }
  void OnTime(uint64_t tsc) override { log_->push_back("time " + std::to_string(tsc)); }
  void OnProgress(uint64_t offset) override {
    log_->push_back("progress " + std::to_string(offset));
  }
  void OnBlock(const pt_block& block) override {
    log_->push_back("block " + std::to_string(block.ninsn));
  }
  void OnInsn(const pt_insn& insn) override { log_->push_back("insn " + std::to_string(insn.ip)); }
  void OnEvent(const pt_event& event) override {
    log_->push_back("event " + std::to_string(event.type));
  }
  void OnError(const DecodeError& error) override {
    log_->push_back("error " + std::to_string(error.code));
  }
  absl::Status Finish(const DecodeTotals& totals) override {
    log_->push_back("finish " + std::to_string(totals.instructions));
    return absl::DataLossError("finish failed");
  }

 private:
  std::vector<std::string>* log_;
};

// Every callback once, in order; the time is 100.
absl::Status Drive(Sink& sink) {
  StreamInfo stream;
  stream.name = "cpu 0";
  sink.OnStream(stream);
  LossInfo loss;
  loss.kind = "aux-truncated";
  sink.OnLoss(loss);
  sink.OnSync(8);
  sink.OnTime(100);
  sink.OnProgress(16);
  pt_block block{};
  block.ninsn = 3;
  sink.OnBlock(block);
  pt_insn insn{};
  insn.ip = 0x401000;
  sink.OnInsn(insn);
  pt_event event{};
  event.type = ptev_enabled;
  sink.OnEvent(event);
  DecodeError error;
  error.code = -7;
  sink.OnError(error);
  DecodeTotals totals;
  totals.instructions = 4;
  return sink.Finish(totals);
}

const std::vector<std::string> kAll = {"stream cpu 0", "loss aux-truncated",
                                       "sync 8",       "time 100",
                                       "progress 16",  "block 3",
                                       "insn 4198400", "event " + std::to_string(ptev_enabled),
                                       "error -7",     "finish 4"};

void ExpectProperties(const Sink& sink) {
  EXPECT_EQ(sink.kind(), DecoderKind::kInsn);
  EXPECT_TRUE(sink.end_block_on_call());
  EXPECT_TRUE(sink.end_block_on_jump());
  EXPECT_TRUE(sink.wants_time());
}

TEST(ForwardingSink, ForwardsEverythingToAReference) {
  std::vector<std::string> log;
  LogSink inner(&log);
  ForwardingSink sink(inner);
  ExpectProperties(sink);
  EXPECT_EQ(Drive(sink).code(), absl::StatusCode::kDataLoss) << "Finish's status is the inner's";
  EXPECT_THAT(log, ElementsAreArray(kAll));
}

TEST(ForwardingSink, ForwardsEverythingToAnOwnedSink) {
  std::vector<std::string> log;
  ForwardingSink sink(std::make_unique<LogSink>(&log));
  ExpectProperties(sink);
  EXPECT_EQ(Drive(sink).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log, ElementsAreArray(kAll));
}

TEST(ForwardingSink, ProgressSinkForwardsEverything) {
  std::vector<std::string> log;
  ProgressSink sink(std::make_unique<LogSink>(&log), stderr, /*enabled=*/false, 0,
                    [] { return uint64_t{0}; });
  ExpectProperties(sink);
  EXPECT_EQ(Drive(sink).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log, ElementsAreArray(kAll));
}

TEST(ForwardingSink, TimeFilterSinkForwardsEverythingInItsWindow) {
  std::vector<std::string> log;
  TimeFilterSink sink(std::make_unique<LogSink>(&log), 100, 200);
  ExpectProperties(sink);
  EXPECT_EQ(Drive(sink).code(), absl::StatusCode::kDataLoss);
  std::vector<std::string> kept = kAll;
  kept.back() = "finish 4";  // the block's 3 and the instruction: what it forwarded
  EXPECT_THAT(log, ElementsAreArray(kept));
}

TEST(ForwardingSink, TimeFilterSinkDropsTheFlowOutsideItsWindow) {
  std::vector<std::string> log;
  TimeFilterSink sink(std::make_unique<LogSink>(&log), 200, 300);
  EXPECT_EQ(Drive(sink).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      log, ElementsAreArray(std::vector<std::string>{"stream cpu 0", "loss aux-truncated", "sync 8",
                                                     "progress 16", "error -7", "finish 0"}));
  EXPECT_EQ(sink.instructions(), 0u);
}

// What ran in a window until time passed its end ran until the end at least: the sink is told
// the end's time before the flow goes out (sweep 40a F3: that time was dropped).
TEST(ForwardingSink, TimeFilterSinkEndsItsWindowAtItsEnd) {
  std::vector<std::string> log;
  TimeFilterSink sink(std::make_unique<LogSink>(&log), 100, 200);
  pt_block block{};
  block.ninsn = 3;
  sink.OnTime(50);
  sink.OnBlock(block);  // before the window: dropped
  sink.OnTime(150);
  sink.OnBlock(block);
  sink.OnTime(250);  // past the end: told as 200
  sink.OnBlock(block);
  sink.OnTime(120);  // back in (a later stream's time)
  EXPECT_THAT(log, ElementsAreArray(
                       std::vector<std::string>{"time 150", "block 3", "time 200", "time 120"}));
  EXPECT_EQ(sink.instructions(), 3u);
}

// Whole blocks (Sink::whole_block_sink, which CanonicalBlocks gives walked blocks to): a
// ProgressSink passes them on unchanged, so they go straight to its inner sink's; a plain
// ForwardingSink or a TimeFilterSink takes them itself, through OnBlock (the filter's window).
TEST(ForwardingSink, WholeBlocksGoPastAProgressSinkOnly) {
  std::vector<std::string> log;
  LogSink inner(&log);
  ProgressSink progress(std::make_unique<ForwardingSink>(inner), stderr, /*enabled=*/false, 0,
                        [] { return uint64_t{0}; });
  EXPECT_NE(&progress.whole_block_sink(), &progress);
  EXPECT_NE(&progress.whole_block_sink(), &inner);  // the ForwardingSink, which takes them
  ProgressSink direct(std::make_unique<LogSink>(&log), stderr, false, 0,
                      [] { return uint64_t{0}; });
  ForwardingSink plain(static_cast<Sink&>(direct));
  EXPECT_EQ(&plain.whole_block_sink(), &plain);
  TimeFilterSink window(std::make_unique<ProgressSink>(std::make_unique<LogSink>(&log), stderr,
                                                       false, 0, [] { return uint64_t{0}; }),
                        200, 300);
  EXPECT_EQ(&window.whole_block_sink(), &window);
  pt_block block{};
  block.ninsn = 2;
  BlockMemo memo;
  window.OnWholeBlock(block, memo);  // before its window: dropped
  EXPECT_TRUE(log.empty());
  direct.whole_block_sink().OnWholeBlock(block, memo);
  EXPECT_THAT(log, ElementsAreArray(std::vector<std::string>{"block 2"}));
}

}  // namespace
}  // namespace ptkit::decoder
