// Time per function from the decoder's time updates (Sink::OnTime): each interval between two
// updates is split over the functions that executed instructions in it, in proportion to
// their instructions (the rounding remainder to the last one; an interval without
// instructions goes to the function that ran last). Instructions that are nobody's (OnOutside:
// outside the code counted) take their share of an interval, which is given to no function.
// While tracing is stopped in the kernel (OnDisabled until OnEnabled: a system call, an
// interrupt), no instruction of the program runs: the time that passes then is the function's
// that ran last (the stack on top), whole, not split over the instructions before the disable
// that share the old time.
// Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_TICK_SPLITTER_H_
#define PTKIT_DECODER_TICK_SPLITTER_H_

#include <cstdint>
#include <vector>

namespace ptkit::decoder {

class TickSplitter {
 public:
  // `n` instructions ran in function `f` (any dense index) since the last time update.
  void OnCount(uint32_t f, uint64_t n) {
    if (interval_.size() <= f) interval_.resize(f + 1);
    if (ticks_.size() <= f) ticks_.resize(f + 1);
    if (interval_[f] == 0) touched_.push_back(f);
    interval_[f] += n;
    last_ = static_cast<int64_t>(f);
  }
  // `n` instructions ran outside what is counted since the last time update.
  void OnOutside(uint64_t n) {
    outside_ += n;
    last_ = -1;
  }
  // The time changed from `then` (known when `was_timed`) to `now`: the interval ends.
  void OnTime(bool was_timed, uint64_t then, uint64_t now) {
    timed_ = true;
    if (was_timed && now >= then) {
      if (disabled_) {
        Give(now - then);
      } else {
        Split(now - then);
      }
    }
    Drop();
  }
  // Tracing stops in the kernel (a disabled event at a system call or an interrupt) or resumes
  // (an enabled event, after the time update of its own time stamp).
  void OnDisabled() { disabled_ = true; }
  void OnEnabled() { disabled_ = false; }
  // The open interval is not the program's time (an error, another stream, lost trace).
  void Drop() {
    for (uint32_t f : touched_) interval_[f] = 0;
    touched_.clear();
    outside_ = 0;
  }
  // Another decoded piece (a new stream, an error, lost trace): the open interval is dropped,
  // and the flow is no longer known to be disabled.
  void Restart() {
    Drop();
    disabled_ = false;
  }
  // Whether any time update came.
  bool timed() const { return timed_; }
  uint64_t ticks(uint32_t f) const { return f < ticks_.size() ? ticks_[f] : 0; }
  // The ticks of every interval split, outside shares included.
  uint64_t all_ticks() const { return all_ticks_; }

 private:
  void Split(uint64_t ticks) {
    all_ticks_ += ticks;
    uint64_t insns = outside_;
    for (uint32_t f : touched_) insns += interval_[f];
    if (touched_.empty()) {
      if (outside_ == 0 && last_ >= 0) ticks_[last_] += ticks;
      return;
    }
    uint64_t given = 0;
    for (uint32_t f : touched_) {
      const auto share =
          static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) * interval_[f] / insns);
      ticks_[f] += share;
      given += share;
    }
    // The rounding remainder, less the outside share.
    const auto outside =
        static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) * outside_ / insns);
    ticks_[touched_.back()] += ticks - given - outside;
  }

  // The whole interval to the function that ran last (none when that was outside).
  void Give(uint64_t ticks) {
    all_ticks_ += ticks;
    if (last_ >= 0) ticks_[last_] += ticks;
  }

  std::vector<uint64_t> interval_;  // per function: instructions since the last time update
  std::vector<uint32_t> touched_;   // the functions with interval_ != 0
  std::vector<uint64_t> ticks_;
  uint64_t outside_ = 0;  // instructions outside since the last time update
  uint64_t all_ticks_ = 0;
  int64_t last_ = -1;
  bool timed_ = false;
  bool disabled_ = false;  // between OnDisabled and OnEnabled
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_TICK_SPLITTER_H_
