// Progress on a terminal for long decodes: a Sink decorator that forwards everything to the
// real sink and, as decoding advances (Sink::OnProgress), rewrites one status line on `err`
// ("ptdecode: 45% of 2.1 GiB") at most every 250 ms. Nothing is printed unless `enabled` (main
// passes isatty(stderr)), so piped output is unchanged. The line is cleared at Finish.
#ifndef PTKIT_DECODER_PROGRESS_H_
#define PTKIT_DECODER_PROGRESS_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "decoder/decode.h"
#include "decoder/forwarding_sink.h"

namespace ptkit::decoder {

// The status line itself, for the commands that walk a trace or a recording without a Sink
// (packets, samples, export): Update() rewrites "ptdecode: 45% of 2.1 GiB" (`noun` empty:
// bytes) or "ptdecode: 45% of 1200 samples" at most every 250 ms; with `total` 0 the count
// done ("ptdecode: 1.5 MiB decoded", "ptdecode: 300 samples"). Nothing unless `enabled`;
// Clear() erases a line that was shown (also at destruction).
// Where a command that makes no ProgressSink itself shows its progress (RecordingOptions::
// progress, the export options): on `err` (null: nowhere), by the clock `now_ms` (empty:
// MonotonicMs; tests inject one).
struct ProgressOutput {
  std::FILE* err = nullptr;
  std::function<uint64_t()> now_ms;
};

class ProgressLine {
 public:
  ProgressLine(std::FILE* err, bool enabled, std::function<uint64_t()> now_ms);
  explicit ProgressLine(const ProgressOutput& to);
  ~ProgressLine() { Clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void Update(uint64_t done, uint64_t total, const std::string& noun = "");
  void Clear();

 private:
  std::FILE* err_;
  bool enabled_;
  std::function<uint64_t()> now_ms_;
  uint64_t last_ms_ = 0;
  bool shown_ = false;
};

class ProgressSink : public ForwardingSink {
 public:
  // `total_bytes`: the trace size for a percentage (0: unknown, bytes are shown instead).
  // `now_ms`: a monotonic clock in milliseconds (injected for tests).
  ProgressSink(std::unique_ptr<Sink> inner, std::FILE* err, bool enabled, uint64_t total_bytes,
               std::function<uint64_t()> now_ms);

  bool branches_only() const override { return inner().branches_only(); }
  void OnStream(const StreamInfo& stream) override;
  void OnProgress(uint64_t offset) override;
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    return inner().NewChunkSummary(image);
  }
  Sink& whole_block_sink() override { return inner().whole_block_sink(); }
  absl::Status Finish(const DecodeTotals& totals) override;

 private:
  ProgressLine line_;
  bool enabled_;
  uint64_t total_;
  uint64_t done_before_ = 0;  // bytes of finished streams
  uint64_t stream_bytes_ = 0;
  uint64_t offset_ = 0;
};

// A ProgressSink around `inner` on `to` (RecordingOptions::progress) when it has a stream,
// else `inner` itself: the decodes of diff and info --decode. `total_bytes` as ProgressSink's.
std::unique_ptr<Sink> WithProgress(std::unique_ptr<Sink> inner, const ProgressOutput& to,
                                   uint64_t total_bytes = 0);

// A monotonic clock in milliseconds (CLOCK_MONOTONIC).
uint64_t MonotonicMs();

// `--time FROM,TO`: forwards blocks, instructions and events only while the decoder's time
// (TSC units) is in [from, to); everything else (streams, loss, errors, Finish) always.
// Before the first timing packet the time is unknown and nothing is forwarded. The totals
// given to the inner sink's Finish count the instructions and blocks forwarded, so that a
// report's totals agree with its rows. An inner sink that follows_outside_window() is given
// the flow outside the window too, told by OnWindow when it goes in and out (sweep 36a F1:
// stacks in a window began there, without the frames open at its start; --exclude-startup
// counted nothing).
class TimeFilterSink : public ForwardingSink {
 public:
  TimeFilterSink(std::unique_ptr<Sink> inner, uint64_t from, uint64_t to)
      : ForwardingSink(std::move(inner)),
        from_(from),
        to_(to),
        follow_(this->inner().follows_outside_window()) {
    if (follow_) this->inner().OnWindow(false);
  }
  bool wants_time() const override { return true; }
  void OnTime(uint64_t tsc) override {
    first_ = std::min(first_, tsc);
    last_ = std::max(last_, tsc);
    const bool in = tsc >= from_ && tsc < to_;
    // Leaving past its end: the time since the last timing packet, up to the window's end, is
    // the window's (its instructions were counted in it): told as the end's time (sweep 40a
    // F3: the time of what ran last in a window was dropped, its instructions counted).
    if (in_ && tsc >= to_) inner().OnTime(to_);
    if (follow_ && in != in_) inner().OnWindow(in);
    in_ = in;
    if (in_) inner().OnTime(tsc);
  }
  void OnBlock(const pt_block& block) override {
    if (in_) {
      instructions_ += block.ninsn;
      ++blocks_;
    } else if (!follow_) {
      return;
    }
    inner().OnBlock(block);
  }
  void OnInsn(const pt_insn& insn) override {
    if (in_) {
      ++instructions_;
    } else if (!follow_) {
      return;
    }
    inner().OnInsn(insn);
  }
  void OnEvent(const pt_event& event) override {
    if (in_ || follow_) inner().OnEvent(event);
  }
  absl::Status Finish(const DecodeTotals& totals) override {
    DecodeTotals kept = totals;
    kept.instructions = instructions_;
    kept.blocks = blocks_;
    return inner().Finish(kept);
  }

  // Instructions forwarded (in the window).
  uint64_t instructions() const { return instructions_; }
  // Why nothing was kept, for a message: the window and the decoder times seen ("the trace
  // has no timing packets" when none).
  std::string DescribeEmpty() const;

 private:
  uint64_t from_, to_;
  bool follow_;
  bool in_ = false;
  uint64_t instructions_ = 0;
  uint64_t blocks_ = 0;
  uint64_t first_ = ~0ull;  // the earliest and latest decoder time seen
  uint64_t last_ = 0;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PROGRESS_H_
