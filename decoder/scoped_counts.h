// Per-function counts of only what runs while one function (the root, e.g. main) has a frame on
// the call stack: the program's own work without the start-up before main and the exit after
// it, which depend on the program's path, environment and auxv. Under main, a process's other
// threads (started by it) count whole: their stacks never hold main (the owner tells each
// thread with OnThread; sweep 28c F1: a worker's doubled work was not in `ptdecode diff`).
// Fed by a CallStackListener's hooks (decoder/call_stack.h) with the same rules as CallStack's
// own counts. Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_SCOPED_COUNTS_H_
#define PTKIT_DECODER_SCOPED_COUNTS_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "decoder/call_stack.h"

namespace ptkit::decoder {

class ScopedCounts {
 public:
  struct Counts {
    uint64_t self = 0, inclusive = 0, calls = 0;
  };

  // Counts under the frames of the function named `root` in `functions` (CallStack's).
  ScopedCounts(std::string root, const std::vector<Function>& functions)
      : root_(std::move(root)), functions_(functions) {}

  void OnCount(uint32_t f, uint64_t n) {
    if (!active()) return;
    Counts& c = At(f);
    c.self += n;
    if (active_[f] == 0) c.inclusive += n;
    instructions_ += n;
  }
  void OnEnter(const Frame& frame) {
    const uint32_t f = frame.function;
    const bool root = IsRoot(f);
    if (root && depth_++ == 0) RootEntered(f);
    frames_.push_back({active(), root});
    if (!active()) return;
    Counts& c = At(f);
    if (!frame.implicit && counting_) {
      ++c.calls;
      ++calls_;
    }
    if (active_[f]++ == 0) since_[f] = instructions_;
  }
  // The frame on top went on into another function by a jump (a PLT entry into the library's
  // function, a tail call): its counts go on as that function's, as CallStack's do. A frame
  // that becomes the root's (qsort entered through qsort@plt) is a root frame from here; a
  // root frame stays one until it returns, whatever it jumps to (--only-under qsort@plt).
  void OnRename(uint32_t from, const Frame& frame) {
    if (frames_.empty()) return;
    FrameState& top = frames_.back();
    const uint32_t f = frame.function;
    if (!top.root && IsRoot(f)) {
      top.root = true;
      if (depth_++ == 0) RootEntered(f);
    }
    if (top.under) Leave(from);
    top.under = active();
    if (!top.under) return;
    Counts& c = At(f);
    if (frame.entered && counting_) ++c.calls;  // as CallStack counts it (not in calls_)
    if (active_[f]++ == 0) since_[f] = instructions_;
  }
  // CallStackListener::OnUncall: the call that pushed the frame on top is taken back.
  void OnUncall(const Frame& frame) {
    if (frames_.empty() || !frames_.back().under || !counting_) return;
    Counts& c = At(frame.function);
    if (c.calls > 0) --c.calls;
    if (calls_ > 0) --calls_;
  }
  // `returns`: the returns the model counted since the last call (this frame's, when a return
  // popped it).
  void OnExit(const Frame& frame, uint64_t returns) {
    if (frames_.empty()) return;
    const FrameState top = frames_.back();
    frames_.pop_back();
    if (top.under) {
      Leave(frame.function);
      returns_ += returns;
    }
    if (top.root && depth_ > 0) --depth_;
  }

  // Whether what runs now is counted: a root frame is on the stack, or the thread counts whole,
  // or its process is a Go program whose main.main began.
  bool active() const { return depth_ != 0 || whole_thread_ || go_main_; }
  // The thread of process `pid` runs from now on; `whole`: it counts whole.
  void OnThread(uint32_t pid, bool whole) {
    whole_thread_ = whole;
    pid_ = pid;
    go_main_ = go_main_pids_.contains(pid);
  }
  // As CallStack::set_counting: off, calls are not counted (nor instructions: no OnCount).
  void set_counting(bool on) { counting_ = on; }
  // Whether the root ever had a frame.
  bool root_seen() const { return root_seen_; }
  const std::string& root() const { return root_; }
  Counts counts(uint32_t f) const { return f < counts_.size() ? counts_[f] : Counts{}; }
  uint64_t instructions() const { return instructions_; }
  uint64_t calls() const { return calls_; }
  uint64_t returns() const { return returns_; }

 private:
  // Per frame on the stack: entered (or renamed) under the root; the root's own frame.
  struct FrameState {
    bool under = false;
    bool root = false;
  };
  // One frame of `f` under the root ends (a return, or a jump into another function).
  void Leave(uint32_t f) {
    if (f < active_.size() && active_[f] > 0 && --active_[f] == 0) {
      At(f).inclusive += instructions_ - since_[f];
    }
  }
  Counts& At(uint32_t f) {
    if (counts_.size() <= f) {
      counts_.resize(f + 1);
      active_.resize(f + 1);
      since_.resize(f + 1);
    }
    return counts_[f];
  }
  // The root, or (root "main": --exclude-startup) a Go program's main.main.
  bool IsRoot(uint32_t f) {
    if (is_root_.size() <= f) is_root_.resize(functions_.size(), -1);
    if (is_root_[f] < 0) {
      const std::string& name = functions_[f].name;
      is_root_[f] = name == root_ || (root_ == "main" && name == kGoMain) ? 1 : 0;
    }
    return is_root_[f] == 1;
  }
  // A Go program's goroutines run on its threads in turn, each switch ending the frames there
  // (CallStack::LeaveStack): once its main.main began, everything its process runs counts
  // (sweep 32a N1: --exclude-startup, diff's default, counted nothing of a Go program).
  void RootEntered(uint32_t f) {
    root_seen_ = true;
    // (Only as --exclude-startup's root: --only-under main.main counts what is under it.)
    if (root_ == "main" && functions_[f].name == kGoMain && !go_main_) {
      go_main_ = true;
      go_main_pids_.insert(pid_);
    }
  }
  static constexpr std::string_view kGoMain = "main.main";

  std::string root_;
  const std::vector<Function>& functions_;
  std::vector<Counts> counts_;
  std::vector<uint32_t> active_;  // per function: its frames under the root
  std::vector<uint64_t> since_;   // instructions_ when the first of them was entered
  std::vector<int8_t> is_root_;   // per function: -1 unknown, 0, 1
  std::vector<FrameState> frames_;
  uint32_t depth_ = 0;  // root frames on the stack
  bool whole_thread_ = false;
  bool counting_ = true;  // set_counting
  bool root_seen_ = false;
  uint32_t pid_ = 0;
  bool go_main_ = false;             // pid_'s
  std::set<uint32_t> go_main_pids_;  // Go programs whose main.main began
  uint64_t instructions_ = 0;
  uint64_t calls_ = 0;
  uint64_t returns_ = 0;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_SCOPED_COUNTS_H_
