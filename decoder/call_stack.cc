#include "decoder/call_stack.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

#include "decoder/output_format.h"

namespace ptkit::decoder {

void CallStack::OnBlock(const pt_block& block) {
  const bool jumped = flowing_;
  if (pending_call_) {
    pending_call_ = false;
    // A call to the next instruction (call/pop, to read the IP) enters no function.
    if (block.ip != pending_return_address_) {
      Enter(CallTarget(block.ip), pending_return_address_, /*implicit=*/false);
    }
  } else if (pending_return_) {
    pending_return_ = false;
    Return(block.ip);
  }
  uint32_t f = FunctionAt(block.ip);
  if (frames_.empty()) {
    // Entered before tracing began (the stream starts here), or the caller that the
    // outermost frame returned to: its callees nest below it.
    Enter(f, 0, /*implicit=*/true);
  } else if (jumped && f != current_) {
    Jump(f, block.ip);
  }
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
  // Anything but a call or a return goes on to the next block by a jump or in sequence (the
  // block decoder leaves the class of an indirect jump unknown: ptic_error); far transfers
  // (syscalls, interrupts) come with events when only user code is traced.
  flowing_ = block.iclass != ptic_call && block.iclass != ptic_return &&
             block.iclass != ptic_far_call && block.iclass != ptic_far_return &&
             block.iclass != ptic_far_jump;
}

void CallStack::OnEvent(const pt_event& event) {
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
          Enter(known ? CallTarget(to) : Untraced(), pending_return_address_, /*implicit=*/false);
        }
      } else if (pending_return_) {
        if (known) {
          Return(to);
        } else {
          ReturnUnmatched();
        }
      }
      pending_call_ = pending_return_ = flowing_ = false;
      break;
    }
    case ptev_enabled:
      // Tracing (re)starts here: no jump led here from the code traced before.
      pending_call_ = pending_return_ = flowing_ = false;
      // Tracing resumed where it stopped (after an interrupt) is no return; otherwise it
      // may come back from untraced code to a caller's frame.
      if (!event.ip_suppressed && !event.variant.enabled.resumed) {
        ReturnMatched(event.variant.enabled.ip);
      }
      break;
    case ptev_overflow:
      // Trace was lost: the call context is unknown from here on.
      pending_call_ = pending_return_ = flowing_ = false;
      while (!frames_.empty()) Pop(true);
      break;
    case ptev_async_branch:  // an interrupt with tracing on
    case ptev_tsx:           // a transaction's abort goes to its fallback
      flowing_ = false;
      break;
    default:
      break;
  }
}

void CallStack::Reset() {
  pending_call_ = pending_return_ = flowing_ = false;
  beyond_ = 0;
  while (!frames_.empty()) Pop(true);
}

std::string CallStack::DepthWarning() const {
  if (totals_.dropped_frames == 0) return "";
  return fmt::format(
      "call stack deeper than {} frames: {} calls got no frame (their callees' instructions "
      "count in the frame below; a program calling itself without returning, e.g. `call .`?)",
      kMaxFrames, totals_.dropped_frames);
}

void CallStack::SetImage(const ProgramImage& image) {
  image_ = &image;
  cache_ = {1, 0};
}

uint32_t CallStack::NewFunction(std::string name, int file, uint64_t address, bool from_address) {
  Function fn;
  fn.name = std::move(name);
  fn.image = image_;
  fn.file = file;
  fn.address = address;
  fn.from_address = from_address;
  functions_.push_back(std::move(fn));
  return static_cast<uint32_t>(functions_.size() - 1);
}

uint32_t CallStack::SymbolFunction(int s) {
  auto [it, inserted] = symbol_function_.try_emplace({image_, s}, 0);
  if (inserted) {
    const Symbol& sym = image_->symbols()[s];
    it->second = NewFunction(sym.name, static_cast<int>(sym.image), sym.begin, false);
  }
  return it->second;
}

uint32_t CallStack::Unknown(int file) {
  auto [it, inserted] = unknown_function_.try_emplace({image_, file}, 0);
  if (inserted) {
    it->second = NewFunction(file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name), file,
                             0, false);
  }
  return it->second;
}

uint32_t CallStack::Untraced() {
  if (untraced_ < 0) untraced_ = static_cast<int32_t>(NewFunction("[untraced]", -1, 0, false));
  return static_cast<uint32_t>(untraced_);
}

// The function a call to `ip` enters: its symbol, else one named by the address.
uint32_t CallStack::CallTarget(uint64_t ip) {
  TargetSlot& slot = target_slots_[(ip ^ (ip >> 10)) % kSlots];
  if (slot.ip == ip && slot.image == image_) return slot.function;
  uint32_t f;
  if (int s = image_->SymbolAt(ip); s >= 0) {
    f = SymbolFunction(s);
  } else {
    auto [it, inserted] = address_function_.try_emplace({image_, ip}, 0);
    if (inserted) {
      it->second = NewFunction(fmt::format("sub_{:x}", ip), image_->FileAt(ip), ip, true);
    }
    f = it->second;
  }
  slot = TargetSlot{image_, ip, f};
  return f;
}

// The function executing at `ip`: its symbol; without one, the current frame's function
// when that was named by its address in the same file; else "[file]".
uint32_t CallStack::FunctionAt(uint64_t ip) {
  if (!(ip >= cache_.begin && ip < cache_.end)) {
    cache_symbol_ = image_->SymbolAt(ip, &cache_);
    cache_function_ = cache_symbol_ >= 0 ? SymbolFunction(cache_symbol_) : 0;
    cache_file_ = cache_symbol_ >= 0 ? static_cast<int>(image_->symbols()[cache_symbol_].image)
                                     : image_->FileAt(ip);
    cache_unknown_ = -1;
  }
  if (cache_symbol_ >= 0) return cache_function_;
  if (!frames_.empty()) {
    const Function& top = functions_[frames_.back().function];
    if (top.from_address && top.image == image_ && top.file == cache_file_) {
      return frames_.back().function;
    }
  }
  if (cache_unknown_ < 0) cache_unknown_ = Unknown(cache_file_);
  return static_cast<uint32_t>(cache_unknown_);
}

// Call sites repeat: their lengths are cached, per image (the same address in another
// program is another instruction).
uint64_t CallStack::CallLength(uint64_t ip, pt_exec_mode mode) {
  LengthSlot& slot = length_slots_[(ip ^ (ip >> 10)) % kSlots];
  if (slot.ip == ip && slot.image == image_) return slot.length;
  auto [it, inserted] = call_length_.try_emplace({image_, ip}, 0);
  if (inserted) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = image_->Read(ip, bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    it->second = n == 0 ? 0 : static_cast<uint8_t>(disasm_.Length(mode, bytes, n, &insn));
  }
  slot = LengthSlot{image_, ip, it->second};
  return it->second;
}

void CallStack::Count(uint32_t f, uint64_t n) {
  Function& fn = functions_[f];
  fn.self += n;
  if (fn.active == 0) fn.inclusive += n;
  totals_.instructions += n;
  if (listener_ != nullptr) listener_->OnCount(f, n);
}

// A block that crosses into another function (fall-through, direct jump): walk it. A block
// whose every instruction has a symbol splits the same way each time: its runs (and the jumps
// between them) are cached and replayed.
void CallStack::CountSplit(const pt_block& block, uint32_t first) {
  const SplitKey key{image_, block.ip, block.end_ip, block.ninsn, block.mode};
  if (auto it = split_.find(key); it != split_.end()) {
    for (const SplitRun& r : it->second) {
      if (r.jumped) {
        Jump(r.function, r.entry);
        current_ = r.function;
      }
      Count(r.function, r.instructions);
    }
    return;
  }
  std::vector<SplitRun> runs;
  bool symbols = true;
  uint64_t ip = block.ip;
  SplitRun now{first, 0, block.ip, false};
  auto close = [&] {
    if (now.instructions == 0) return;
    Count(now.function, now.instructions);
    runs.push_back(now);
  };
  for (uint32_t i = 0; i < block.ninsn; ++i) {
    uint32_t f = FunctionAt(ip);
    if (cache_symbol_ < 0) symbols = false;
    if (f != now.function) {  // a direct jump or a fall-through into another function
      close();
      Jump(f, ip);
      current_ = f;
      now = SplitRun{f, 0, ip, true};
    }
    ++now.instructions;
    if (i + 1 == block.ninsn) break;
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = image_->Read(ip, bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    int len = n == 0 ? 0 : disasm_.Length(block.mode, bytes, n, &insn);
    if (len == 0) {  // cannot follow: the rest goes to the current function
      now.instructions += block.ninsn - i - 1;
      symbols = false;
      break;
    }
    ip += len;
    // Inside a block only direct jumps (and calls, which end our blocks) change the flow.
    if (insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR && insn.raw.imm[0].is_relative) {
      ip += static_cast<uint64_t>(insn.raw.imm[0].value.s);
    }
  }
  close();
  if (symbols && !runs.empty()) split_.emplace(key, std::move(runs));
}

// Control went on into `f` at `ip` by a jump (a tail call, a PLT entry jumping to its
// target): the frame on top is f's from here, as gdb and perf name it. Its calls stay where
// they were counted; its inclusive instructions count for f from here. A jump into the middle
// of a function that has a frame below (longjmp, an exception's landing pad) returns to that
// frame instead: the frames above it were left without returning. A call beyond kMaxFrames
// got no frame: the frame on top is not the running function's then.
void CallStack::Jump(uint32_t f, uint64_t ip) {
  if (frames_.empty() || beyond_ != 0 || frames_.back().function == f) return;
  // (Code without a symbol, "[file]", has no entry to tell its middle by: it is renamed to.)
  if (functions_[f].active != 0 && functions_[f].address != 0 && ip != functions_[f].address) {
    while (frames_.back().function != f) Pop(/*at_end=*/false, /*by_return=*/false);
    return;
  }
  Frame& top = frames_.back();
  const uint32_t from = top.function;
  Function& old = functions_[from];
  if (--old.active == 0) old.inclusive += totals_.instructions - old.active_since;
  Function& fn = functions_[f];
  if (fn.active++ == 0) fn.active_since = totals_.instructions;
  top.function = f;
  if (listener_ != nullptr) listener_->OnRename(from, top);
}

void CallStack::Enter(uint32_t f, uint64_t return_address, bool implicit) {
  Function& fn = functions_[f];
  if (!implicit) {
    ++fn.calls;
    ++totals_.calls;
  }
  if (frames_.size() >= kMaxFrames) {
    ++beyond_;
    ++totals_.dropped_frames;
    return;
  }
  if (fn.active++ == 0) fn.active_since = totals_.instructions;
  frames_.push_back({f, return_address, totals_.instructions, implicit, timed_, tsc_});
  if (listener_ != nullptr) listener_->OnEnter(frames_.back());
}

void CallStack::Pop(bool at_end, bool by_return) {
  Frame frame = frames_.back();
  frames_.pop_back();
  Function& fn = functions_[frame.function];
  if (--fn.active == 0) fn.inclusive += totals_.instructions - fn.active_since;
  if (!at_end && by_return && !frame.implicit) ++totals_.returns;
  if (listener_ != nullptr) listener_->OnExit(frame, at_end);
}

// A return to `target`: unwind to the frame that expects it, if one does.
bool CallStack::ReturnMatched(uint64_t target) {
  for (size_t i = frames_.size(); i-- > 0;) {
    if (frames_[i].return_address == target) {
      while (frames_.size() > i) Pop(false);
      return true;
    }
  }
  return false;
}

void CallStack::Return(uint64_t target) {
  if (beyond_ != 0) {  // the return of a call given no frame (the innermost one)
    --beyond_;
    ++totals_.returns;
    return;
  }
  if (!ReturnMatched(target)) ReturnUnmatched();
}

// A return that no frame expects: the returning function leaves through its own topmost
// frame; code reached by a jump from a caller entered before tracing began returns for that
// caller's implicit frame. Anything else (a signal handler returning to the kernel's
// restorer, say) leaves the stack as it is: popping some frame would misplace every later
// return.
void CallStack::ReturnUnmatched() {
  for (size_t i = frames_.size(); i-- > 0;) {
    if (static_cast<int64_t>(frames_[i].function) == current_) {
      while (frames_.size() > i) Pop(false);
      return;
    }
  }
  if (!frames_.empty() && frames_.back().implicit) Pop(false);
}

}  // namespace ptkit::decoder
