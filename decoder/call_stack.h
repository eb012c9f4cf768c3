// The call/return model: from the decoder's blocks (ending at calls) and events, the stack of
// frames of the traced thread and per-function instruction counts (self, inclusive, calls).
// stats, calls, folded and timeline are built on it (decoder/flow_sink.h); anything that needs
// call stacks from a decode can use it the same way.
#ifndef PTKIT_DECODER_CALL_STACK_H_
#define PTKIT_DECODER_CALL_STACK_H_

#include <intel-pt.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "decoder/disassembler.h"
#include "decoder/image.h"

namespace ptkit::decoder {

// A function as the model knows it: a symbol of an image, code named by its call target
// (no symbol: "sub_ADDRESS"), or the code of a file without a symbol ("[file]").
struct Function {
  std::string name;
  const ProgramImage* image = nullptr;  // whose files() `file` indexes
  int file = -1;                        // index into ProgramImage::files(), -1 unmapped
  uint64_t address = 0;                 // symbol start or call target (0: neither)
  uint64_t self = 0;                    // instructions executed in it
  uint64_t inclusive = 0;               // instructions while it had a frame (or ran)
  uint64_t calls = 0;                   // calls to it
  uint32_t active = 0;                  // frames on the stack
  uint64_t active_since = 0;
  bool from_address = false;  // named by its call target (no symbol)
};

// One frame of the stack: a call seen in the trace, or (implicit) a function entered before
// tracing began. A frame is named after the function running in it, as gdb's and perf's
// stacks name it: the callee, or the function it went on to by a jump (a tail call, a PLT
// entry jumping to its target).
struct Frame {
  uint32_t function = 0;  // index into CallStack::functions(): the function running in it
  uint64_t return_address = 0;
  uint64_t entry_count = 0;  // instructions executed before the call
  bool implicit = false;     // entered before tracing began (no call seen)
  bool entry_timed = false;  // entry_tsc is known
  uint64_t entry_tsc = 0;    // the decoder's time at the call
};

// Told of every change of a CallStack, as it happens.
class CallStackListener {
 public:
  virtual ~CallStackListener() = default;
  // `n` instructions ran in `function` (in the frame on top of the stack, if any).
  virtual void OnCount(uint32_t function, uint64_t n) {}
  // `frame` was pushed (it is frames().back()).
  virtual void OnEnter(const Frame& frame) {}
  // The frame on top (`frame`, frames().back()) ran `from` and went on into another function
  // by a jump: it is `frame.function`'s now (its entry count and time stay the call's).
  virtual void OnRename(uint32_t from, const Frame& frame) {}
  // `frame` was popped: by a return (or left without one: a longjmp or an exception jumped
  // to a frame below), or (at_end) because the call context ends (end of the trace, an
  // error, lost trace, another stream).
  virtual void OnExit(const Frame& frame, bool at_end) {}
};

class CallStack {
 public:
  // The most frames kept (about 2.6 MB of them). A call beyond gets no frame: its callee's
  // instructions count in the frame on top, and its return leaves no frame. A program cannot
  // nest deeper with an 8 MiB stack and more than 128 bytes per frame; code that calls
  // itself in a loop (`call .`, hostile input) would otherwise grow the stack without end.
  static constexpr size_t kMaxFrames = size_t{1} << 16;

  struct Totals {
    uint64_t instructions = 0;
    uint64_t calls = 0;           // calls seen (frames pushed, and calls beyond kMaxFrames)
    uint64_t returns = 0;         // frames popped by returns
    uint64_t dropped_frames = 0;  // calls beyond kMaxFrames, given no frame
  };

  // Looks code up in `image` (until SetImage); tells `listener` (may be null) of changes.
  explicit CallStack(const ProgramImage& image, CallStackListener* listener = nullptr)
      : image_(&image), listener_(listener) {}
  CallStack(const CallStack&) = delete;
  CallStack& operator=(const CallStack&) = delete;

  // The flow, in trace order: blocks of the block decoder (with end_block_on_call, so a call
  // ends its block) and its events. Code that runs with no frame (at the start of a stream,
  // after the outermost function returned) gets an implicit frame: the stack holds the
  // function running from its first instruction, and the callers each return reaches. A jump
  // into another function (a block that ends in a jump, or crosses into another function by
  // a direct jump or falling through) renames the frame on top, or returns to the frame below
  // that runs the function jumped into the middle of (longjmp, an exception's landing pad); a
  // call, a return, tracing enabled or an interrupt does not.
  void OnBlock(const pt_block& block);
  void OnEvent(const pt_event& event);
  // The decoder's time (TSC units); frames pushed from now on carry it.
  void OnTime(uint64_t tsc) {
    tsc_ = tsc;
    timed_ = true;
  }
  // The time is unknown until the next OnTime (another decoder, lost trace).
  void ForgetTime() { timed_ = false; }
  // The call context is unknown from here (an error, lost trace, another stream, the end):
  // every frame is popped (at_end).
  void Reset();
  // Code is looked up in `image` from now on (another process's stream). Functions and their
  // counts are kept, per image.
  void SetImage(const ProgramImage& image);

  const std::vector<Function>& functions() const { return functions_; }
  const std::vector<Frame>& frames() const { return frames_; }
  const Totals& totals() const { return totals_; }
  bool timed() const { return timed_; }
  uint64_t tsc() const { return tsc_; }
  // The warning to show when frames were dropped (totals().dropped_frames), else "".
  std::string DepthWarning() const;

 private:
  uint32_t NewFunction(std::string name, int file, uint64_t address, bool from_address);
  uint32_t SymbolFunction(int s);
  uint32_t Unknown(int file);
  uint32_t Untraced();
  uint32_t CallTarget(uint64_t ip);
  uint32_t FunctionAt(uint64_t ip);
  uint64_t CallLength(uint64_t ip, pt_exec_mode mode);
  void Count(uint32_t f, uint64_t n);
  void CountSplit(const pt_block& block, uint32_t first);
  void Jump(uint32_t f, uint64_t ip);
  void Enter(uint32_t f, uint64_t return_address, bool implicit);
  void Pop(bool at_end, bool by_return = true);
  bool ReturnMatched(uint64_t target);
  void Return(uint64_t target);
  void ReturnUnmatched();

  const ProgramImage* image_;  // of the current stream
  CallStackListener* listener_;
  std::vector<Function> functions_;
  std::vector<Frame> frames_;
  Totals totals_;
  bool timed_ = false;  // tsc_ is the decoder's current time
  uint64_t tsc_ = 0;

  Disassembler disasm_;
  using Key = std::pair<const ProgramImage*, int64_t>;
  using AddressKey = std::pair<const ProgramImage*, uint64_t>;
  absl::flat_hash_map<Key, uint32_t> symbol_function_;          // (image, symbol index)
  absl::flat_hash_map<Key, uint32_t> unknown_function_;         // (image, file index)
  absl::flat_hash_map<AddressKey, uint32_t> address_function_;  // (image, call target)
  absl::flat_hash_map<AddressKey, uint8_t> call_length_;        // (image, call site)
  // CountSplit's runs (function, instructions) of a block all of whose code has symbols.
  using SplitKey = std::tuple<const ProgramImage*, uint64_t, uint64_t, uint16_t, int>;
  // One function's run inside a split block; `jumped`: entered at `entry` by Jump().
  struct SplitRun {
    uint32_t function;
    uint64_t instructions;
    uint64_t entry;
    bool jumped;
  };
  absl::flat_hash_map<SplitKey, std::vector<SplitRun>> split_;
  uint64_t beyond_ = 0;  // calls without a frame above the top one (depth past kMaxFrames)
  int32_t untraced_ = -1;
  int64_t current_ = -1;  // function of the last instruction counted
  // The last symbol lookup: addresses in cache_ have the same symbol (or none) and file.
  AddressRange cache_{1, 0};
  int cache_symbol_ = -1;
  int cache_file_ = -1;
  uint32_t cache_function_ = 0;
  int64_t cache_unknown_ = -1;  // Unknown(cache_file_), once asked
  // The last call targets and call sites (the hash maps behind them), by address.
  struct TargetSlot {
    const ProgramImage* image = nullptr;
    uint64_t ip = 0;
    uint32_t function = 0;
  };
  struct LengthSlot {
    const ProgramImage* image = nullptr;
    uint64_t ip = 0;
    uint8_t length = 0;
  };
  static constexpr size_t kSlots = 1024;
  std::vector<TargetSlot> target_slots_ = std::vector<TargetSlot>(kSlots);
  std::vector<LengthSlot> length_slots_ = std::vector<LengthSlot>(kSlots);
  bool pending_call_ = false;
  bool pending_return_ = false;
  // The last block ended in a jump or an instruction that falls through (not a call or
  // return), and no event came after it: the next block is reached by that jump.
  bool flowing_ = false;
  uint64_t pending_return_address_ = 0;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CALL_STACK_H_
