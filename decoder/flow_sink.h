// The call/return model that stats, calls, folded and timeline share: blocks that end at
// calls, a stack of frames, per-function instruction counts. Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_FLOW_SINK_H_
#define PTKIT_DECODER_FLOW_SINK_H_

#include <Zydis/Zydis.h>
#include <intel-pt.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/disassembler.h"
#include "decoder/image.h"
#include "decoder/output_format.h"

namespace ptkit::decoder {

// Call-stack tracking over blocks that end at calls (stats, calls, folded, timeline).

struct Function {
  std::string name;
  const ProgramImage* image = nullptr;  // whose files() `file` indexes
  int file = -1;                        // index into ProgramImage::files(), -1 unmapped
  uint64_t address = 0;                 // symbol start or call target
  uint64_t self = 0;
  uint64_t inclusive = 0;
  uint64_t calls = 0;
  uint32_t active = 0;  // frames on the stack
  uint64_t active_since = 0;
  bool from_address = false;  // named by its call target (no symbol)
};

struct Frame {
  uint32_t function = 0;
  uint64_t return_address = 0;
  uint64_t entry_count = 0;  // instructions executed before the call
  bool implicit = false;     // a caller entered before tracing began (no call seen)
  bool entry_timed = false;  // entry_tsc is known
  uint64_t entry_tsc = 0;    // the decoder's time at the call
};

class FlowSink : public Sink {
 public:
  explicit FlowSink(const ProgramImage& image) : image_(&image) {}
  DecoderKind kind() const override { return DecoderKind::kBlock; }
  bool end_block_on_call() const override { return true; }
  bool wants_time() const override { return wants_time_; }
  void OnTime(uint64_t tsc) override {
    tsc_ = tsc;
    timed_ = true;
  }

  void OnBlock(const pt_block& block) override {
    if (pending_call_) {
      pending_call_ = false;
      // A call to the next instruction (call/pop, to read the IP) enters no function.
      if (block.ip != pending_return_address_) Push(CallTarget(block.ip), pending_return_address_);
    } else if (pending_return_) {
      pending_return_ = false;
      Return(block.ip);
    }
    uint32_t f = FunctionAt(block.ip);
    current_ = f;
    if (block.ninsn > 1 && !(block.end_ip >= cache_.begin && block.end_ip < cache_.end) &&
        FunctionAt(block.end_ip) != f) {
      CountSplit(block, f);
    } else {
      Count(f, block.ninsn);
    }
    if (block.iclass == ptic_call) {
      pending_call_ = true;
      uint64_t size = block.truncated ? block.size : CallLength(block.end_ip, block.mode);
      pending_return_address_ = block.end_ip + size;
    } else if (block.iclass == ptic_return) {
      pending_return_ = true;
    }
  }

  void OnEvent(const pt_event& event) override {
    switch (event.type) {
      case ptev_disabled:
      case ptev_async_disabled: {
        // Where the flow went: the instruction an interrupt stopped before (async), or the
        // untraced code it entered (sync, when the IP is not suppressed).
        const bool async = event.type == ptev_async_disabled;
        const bool known = async || !event.ip_suppressed;
        const uint64_t to = async ? event.variant.async_disabled.at : event.variant.disabled.ip;
        if (pending_call_) {
          // A call into code that is not traced, or interrupted at its target (e.g. a page
          // fault on its first fetch): the callee is entered all the same.
          if (!known || to != pending_return_address_) {
            Push(known ? CallTarget(to) : Untraced(), pending_return_address_);
          }
        } else if (pending_return_) {
          if (known) {
            Return(to);
          } else {
            ReturnUnmatched();
          }
        }
        pending_call_ = pending_return_ = false;
        break;
      }
      case ptev_enabled:
        pending_call_ = pending_return_ = false;
        // Tracing resumed where it stopped (after an interrupt) is no return; otherwise it
        // may come back from untraced code to a caller's frame.
        if (!event.ip_suppressed && !event.variant.enabled.resumed) {
          ReturnMatched(event.variant.enabled.ip);
        }
        break;
      case ptev_overflow:
        // Trace was lost: the call context is unknown from here on.
        pending_call_ = pending_return_ = false;
        while (!stack_.empty()) Pop(true);
        break;
      default:
        break;
    }
  }
  // Decoding resumes at the next PSB with an unknown call context.
  void OnError(const DecodeError& error) override { ResetContext(); }
  // Another stream (another thread or CPU), or lost trace: the call context starts afresh.
  void OnStream(const StreamInfo& stream) override {
    ResetContext();
    if (!stream.context_switch) timed_ = false;  // another decoder: no time yet
    if (stream.image != nullptr) image_ = stream.image;
    cache_ = {1, 0};
  }
  void OnLoss(const LossInfo& loss) override {
    ResetContext();
    timed_ = false;  // the next piece is decoded afresh
  }

  absl::Status Finish(const DecodeTotals& totals) override {
    while (!stack_.empty()) Pop(true);
    return Report(totals);
  }

 protected:
  void ResetContext() {
    pending_call_ = pending_return_ = false;
    while (!stack_.empty()) Pop(true);
  }
  virtual void OnCount(uint32_t function, uint64_t n) {}
  virtual void OnEnter(const Frame& frame) {}
  virtual void OnExit(const Frame& frame, bool at_end) {}
  virtual absl::Status Report(const DecodeTotals& totals) = 0;

  const ProgramImage* image_;  // of the current stream
  std::vector<Function> functions_;
  std::vector<Frame> stack_;
  uint64_t count_ = 0;  // instructions so far
  uint64_t calls_ = 0;
  uint64_t returns_ = 0;
  bool wants_time_ = false;  // set by a subclass that uses the decoder's time
  bool timed_ = false;       // tsc_ is the decoder's current time
  uint64_t tsc_ = 0;

 private:
  uint32_t NewFunction(std::string name, int file, uint64_t address, bool from_address) {
    Function fn;
    fn.name = std::move(name);
    fn.image = image_;
    fn.file = file;
    fn.address = address;
    fn.from_address = from_address;
    functions_.push_back(std::move(fn));
    return static_cast<uint32_t>(functions_.size() - 1);
  }
  uint32_t SymbolFunction(int s) {
    auto [it, inserted] = symbol_function_.try_emplace({image_, s}, 0);
    if (inserted) {
      const Symbol& sym = image_->symbols()[s];
      it->second = NewFunction(sym.name, static_cast<int>(sym.image), sym.begin, false);
    }
    return it->second;
  }
  uint32_t Unknown(int file) {
    auto [it, inserted] = unknown_function_.try_emplace({image_, file}, 0);
    if (inserted) {
      it->second = NewFunction(file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name),
                               file, 0, false);
    }
    return it->second;
  }
  uint32_t Untraced() {
    if (untraced_ < 0) untraced_ = static_cast<int32_t>(NewFunction("[untraced]", -1, 0, false));
    return static_cast<uint32_t>(untraced_);
  }
  // The function a call to `ip` enters: its symbol, else one named by the address.
  uint32_t CallTarget(uint64_t ip) {
    int s = image_->SymbolAt(ip);
    if (s >= 0) return SymbolFunction(s);
    auto [it, inserted] = address_function_.try_emplace({image_, ip}, 0);
    if (inserted) {
      it->second = NewFunction(fmt::format("sub_{:x}", ip), image_->FileAt(ip), ip, true);
    }
    return it->second;
  }
  // The function executing at `ip`: its symbol; without one, the current frame's function
  // when that was named by its address in the same file; else "[file]".
  uint32_t FunctionAt(uint64_t ip) {
    if (!(ip >= cache_.begin && ip < cache_.end)) {
      cache_symbol_ = image_->SymbolAt(ip, &cache_);
      cache_function_ = cache_symbol_ >= 0 ? SymbolFunction(cache_symbol_) : 0;
      cache_file_ = cache_symbol_ >= 0 ? static_cast<int>(image_->symbols()[cache_symbol_].image)
                                       : image_->FileAt(ip);
    }
    if (cache_symbol_ >= 0) return cache_function_;
    if (!stack_.empty()) {
      const Function& top = functions_[stack_.back().function];
      if (top.from_address && top.image == image_ && top.file == cache_file_) {
        return stack_.back().function;
      }
    }
    return Unknown(cache_file_);
  }
  uint64_t InsnLength(uint64_t ip, pt_exec_mode mode) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = image_->Read(ip, bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    return n == 0 ? 0 : static_cast<uint64_t>(disasm_.Length(mode, bytes, n, &insn));
  }
  // Call sites repeat: their lengths are cached.
  uint64_t CallLength(uint64_t ip, pt_exec_mode mode) {
    auto [it, inserted] = call_length_.try_emplace(ip, 0);
    if (inserted) it->second = static_cast<uint8_t>(InsnLength(ip, mode));
    return it->second;
  }
  void Count(uint32_t f, uint64_t n) {
    Function& fn = functions_[f];
    fn.self += n;
    if (fn.active == 0) fn.inclusive += n;
    count_ += n;
    OnCount(f, n);
  }
  // A block that crosses into another function (fall-through, direct jump): walk it.
  void CountSplit(const pt_block& block, uint32_t first) {
    uint64_t ip = block.ip;
    uint32_t current = first;
    uint64_t run = 0;
    for (uint32_t i = 0; i < block.ninsn; ++i) {
      uint32_t f = FunctionAt(ip);
      if (f != current) {
        if (run != 0) Count(current, run);
        current = f;
        run = 0;
      }
      ++run;
      if (i + 1 == block.ninsn) break;
      uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
      size_t n = image_->Read(ip, bytes, sizeof(bytes));
      ZydisDecodedInstruction insn;
      int len = n == 0 ? 0 : disasm_.Length(block.mode, bytes, n, &insn);
      if (len == 0) {  // cannot follow: the rest goes to the current function
        run += block.ninsn - i - 1;
        break;
      }
      ip += len;
      // Inside a block only direct jumps (and calls, which end our blocks) change the flow.
      if (insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR && insn.raw.imm[0].is_relative) {
        ip += static_cast<uint64_t>(insn.raw.imm[0].value.s);
      }
    }
    if (run != 0) Count(current, run);
  }
  void Push(uint32_t f, uint64_t return_address) {
    if (stack_.empty() && current_ >= 0) {
      // The caller was entered before tracing began: give it an implicit frame so stacks
      // read caller;callee. It is left through a return that matches no frame.
      Enter(static_cast<uint32_t>(current_), 0, /*implicit=*/true);
    }
    Enter(f, return_address, /*implicit=*/false);
  }
  void Enter(uint32_t f, uint64_t return_address, bool implicit) {
    Function& fn = functions_[f];
    if (!implicit) {
      ++fn.calls;
      ++calls_;
    }
    if (fn.active++ == 0) fn.active_since = count_;
    stack_.push_back({f, return_address, count_, implicit, timed_, tsc_});
    OnEnter(stack_.back());
  }
  void Pop(bool at_end) {
    Frame frame = stack_.back();
    stack_.pop_back();
    Function& fn = functions_[frame.function];
    if (--fn.active == 0) fn.inclusive += count_ - fn.active_since;
    if (!at_end && !frame.implicit) ++returns_;
    OnExit(frame, at_end);
  }
  // A return to `target`: unwind to the frame that expects it, if one does.
  bool ReturnMatched(uint64_t target) {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i].return_address == target) {
        while (stack_.size() > i) Pop(false);
        return true;
      }
    }
    return false;
  }
  void Return(uint64_t target) {
    if (!ReturnMatched(target)) ReturnUnmatched();
  }
  // A return that no frame expects: the returning function leaves through its own topmost
  // frame; code reached by a jump from a caller entered before tracing began returns for that
  // caller's implicit frame. Anything else (a signal handler returning to the kernel's
  // restorer, say) leaves the stack as it is: popping some frame would misplace every later
  // return.
  void ReturnUnmatched() {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (static_cast<int64_t>(stack_[i].function) == current_) {
        while (stack_.size() > i) Pop(false);
        return;
      }
    }
    if (!stack_.empty() && stack_.back().implicit) Pop(false);
  }

  Disassembler disasm_;
  using Key = std::pair<const ProgramImage*, int64_t>;
  absl::flat_hash_map<Key, uint32_t> symbol_function_;   // (image, symbol index)
  absl::flat_hash_map<Key, uint32_t> unknown_function_;  // (image, file index)
  absl::flat_hash_map<std::pair<const ProgramImage*, uint64_t>, uint32_t> address_function_;
  absl::flat_hash_map<uint64_t, uint8_t> call_length_;
  int32_t untraced_ = -1;
  int64_t current_ = -1;  // function of the last block
  // The last symbol lookup: addresses in cache_ have the same symbol (or none) and file.
  AddressRange cache_{1, 0};
  int cache_symbol_ = -1;
  int cache_file_ = -1;
  uint32_t cache_function_ = 0;
  bool pending_call_ = false;
  bool pending_return_ = false;
  uint64_t pending_return_address_ = 0;
};

// ---------------------------------------------------------------------------------------------

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_FLOW_SINK_H_
