// ForwardingSink: a Sink that passes every callback and property to another sink. Decorators
// (progress, --time, a stream's filter) derive from it and override only what they change, so
// a callback added to Sink is forwarded by all of them.
#ifndef PTKIT_DECODER_FORWARDING_SINK_H_
#define PTKIT_DECODER_FORWARDING_SINK_H_

#include <memory>
#include <utility>

#include "decoder/decode.h"

namespace ptkit::decoder {

class ForwardingSink : public Sink {
 public:
  // Forwards to `inner`, which must outlive this sink.
  explicit ForwardingSink(Sink& inner) : inner_(&inner) {}
  // Forwards to `inner`, owned.
  explicit ForwardingSink(std::unique_ptr<Sink> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  DecoderKind kind() const override { return inner_->kind(); }
  bool end_block_on_call() const override { return inner_->end_block_on_call(); }
  bool end_block_on_jump() const override { return inner_->end_block_on_jump(); }
  bool coarse_block_class() const override { return inner_->coarse_block_class(); }
  bool wants_time() const override { return inner_->wants_time(); }
  void OnStream(const StreamInfo& stream) override { inner_->OnStream(stream); }
  void OnImage(const ProgramImage& image) override { inner_->OnImage(image); }
  void OnLoss(const LossInfo& loss) override { inner_->OnLoss(loss); }
  void OnSync(uint64_t offset) override { inner_->OnSync(offset); }
  void OnTime(uint64_t tsc) override { inner_->OnTime(tsc); }
  void OnProgress(uint64_t offset) override { inner_->OnProgress(offset); }
  void OnScanned(uint64_t offset) override { inner_->OnScanned(offset); }
  void OnBlock(const pt_block& block) override { inner_->OnBlock(block); }
  void OnInsn(const pt_insn& insn) override { inner_->OnInsn(insn); }
  void OnEvent(const pt_event& event) override { inner_->OnEvent(event); }
  void OnError(const DecodeError& error) override { inner_->OnError(error); }
  absl::Status Finish(const DecodeTotals& totals) override { return inner_->Finish(totals); }
  std::string EmptyResult() const override { return inner_->EmptyResult(); }
  bool summaries_apply() const override { return inner_->summaries_apply(); }

 protected:
  Sink& inner() const { return *inner_; }

 private:
  std::unique_ptr<Sink> owned_;  // null when not owned
  Sink* inner_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_FORWARDING_SINK_H_
