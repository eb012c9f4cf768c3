// The base of the sinks that show call stacks (stats, calls, folded, timeline): a Sink that
// feeds a CallStack (decoder/call_stack.h) and hears its changes. Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_FLOW_SINK_H_
#define PTKIT_DECODER_FLOW_SINK_H_

#include <intel-pt.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "decoder/call_stack.h"
#include "decoder/decode.h"
#include "decoder/image.h"

namespace ptkit::decoder {

class FlowSink : public Sink, public CallStackListener {
 public:
  explicit FlowSink(const ProgramImage& image) : model_(image, this) {}
  DecoderKind kind() const override { return DecoderKind::kBlock; }
  bool end_block_on_call() const override { return true; }
  bool coarse_block_class() const override { return true; }  // CallStack::OnBlock's reading
  bool wants_time() const override { return wants_time_; }
  // A sink that does not use the time (wants_time) ignores it when told anyway (a decode that
  // follows tasks by time): no output reads the model's time then, and a chunk's summary,
  // which has none, applies (CallStack::CheckChunk).
  void OnTime(uint64_t tsc) override {
    if (wants_time_) model_.OnTime(tsc);
  }
  void OnBlock(const pt_block& block) override { model_.OnBlock(block); }
  // Final, so that a caller that holds a FlowSink (SummaryTap) calls the model directly.
  void OnWholeBlock(const pt_block& block, BlockMemo& memo) final {
    model_.OnWholeBlock(block, memo);
  }
  void OnWholeRun(const WalkedRun& run) final { model_.OnWholeRun(run); }
  // Outside a --time window the model follows the flow and counts nothing (CallStack
  // counting): the sinks whose output is the model's counts (stats, folded) say so.
  void OnWindow(bool in) override { model_.set_counting(in); }
  void OnEvent(const pt_event& event) override { model_.OnEvent(event); }
  // Decoding resumes at the next PSB with an unknown call context.
  void OnError(const DecodeError& error) override { model_.Reset(); }
  // Another stream (another thread or CPU), or lost trace: the call context starts afresh.
  void OnStream(const StreamInfo& stream) override {
    model_.Reset();
    if (!stream.context_switch) model_.ForgetTime();  // another decoder: no time yet
    if (stream.image != nullptr) model_.SetImage(*stream.image);
  }
  void OnImage(const ProgramImage& image) override {
    model_.SetImage(image, /*same_program=*/true);
  }
  void OnLoss(const LossInfo& loss) override {
    model_.Reset();
    model_.ForgetTime();  // the next piece is decoded afresh
  }
  // Reports with the model's own warning (a call stack too deep) added to the decoder's.
  absl::Status Finish(const DecodeTotals& totals) override {
    model_.Reset();
    std::string warning = model_.DepthWarning();
    if (warning.empty()) return Report(totals);
    DecodeTotals with_warning = totals;
    with_warning.warnings.push_back(std::move(warning));
    return Report(with_warning);
  }

  // Applies the model of a chunk (FlowChunk) to this sink's model (CallStack::ApplyChunk);
  // false, having changed nothing, when it does not apply. `map`: this model's function for
  // each of the chunk's; `plan`: how the chunk's returns past its start resolved.
  bool summaries_apply() const override { return model_.chunks_apply(); }
  bool ApplyChunkModel(const CallStack& chunk, std::vector<uint32_t>* map = nullptr,
                       CallStack::ChunkPlan* plan = nullptr) {
    CallStack::ChunkPlan local;
    CallStack::ChunkPlan& p = plan != nullptr ? *plan : local;
    if (!model_.CheckChunk(chunk, p)) return false;
    std::vector<uint32_t> m = model_.ApplyChunk(chunk, p);
    if (map != nullptr) *map = std::move(m);
    return true;
  }

 protected:
  // Writes the output at the end (every frame has been popped).
  virtual absl::Status Report(const DecodeTotals& totals) = 0;
  // The decoder's time, when timed().
  bool timed() const { return model_.timed(); }
  uint64_t tsc() const { return model_.tsc(); }
  void ForgetTime() { model_.ForgetTime(); }

  CallStack model_;
  // The model's state, under the names the sinks use.
  const std::vector<Function>& functions_ = model_.functions();
  const std::vector<Frame>& stack_ = model_.frames();
  const uint64_t& count_ = model_.totals().instructions;  // instructions so far
  const uint64_t& calls_ = model_.totals().calls;
  const uint64_t& returns_ = model_.totals().returns;
  bool wants_time_ = false;  // set by a subclass that uses the decoder's time
};

// A FlowSink's summary of a chunk (ChunkSummary, decoder/decode.h): the chunk's call-stack model
// (CallStack::BeginChunk), applied by the sink that made it (ApplyTo).
class FlowChunk : public FlowSink, public ChunkSummary {
 public:
  // `wants_time`: the sink's, so that the chunk sees the time records the sink would.
  FlowChunk(const ProgramImage& image, bool wants_time) : FlowSink(image) {
    wants_time_ = wants_time;
  }
  Sink& sink() override { return *this; }
  void BeginSummary() override { model_.BeginChunk(); }
  bool failed() const override { return model_.chunk_failed(); }
  const CallStack& model() const { return model_; }

 protected:
  absl::Status Report(const DecodeTotals& totals) override { return absl::OkStatus(); }
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_FLOW_SINK_H_
