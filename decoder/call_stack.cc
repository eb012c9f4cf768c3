#include "decoder/call_stack.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "decoder/insn_decode.h"
#include "decoder/output_format.h"

namespace ptkit::decoder {
namespace {

// A function of a chunk with nothing counted there.
bool Unused(const Function& fn) {
  return fn.self == 0 && fn.calls == 0 && fn.inclusive == 0 && fn.active == 0;
}

// The epoch of a chunk's kBaseTop key.
uint32_t BaseTopEpoch(const auto& key) {
  return static_cast<uint32_t>(static_cast<uint64_t>(key.value) >> 32);
}

// Functions that return twice, a jump to where their call returns coming back to the frame
// that called them (longjmp, siglongjmp, setcontext), by name (their PLT entries too).
bool ReturnsTwice(std::string_view name) {
  if (name.ends_with("@plt")) name.remove_suffix(4);
  return name == "setjmp" || name == "_setjmp" || name == "__setjmp" || name == "sigsetjmp" ||
         name == "__sigsetjmp" || name == "getcontext" || name == "__getcontext";
}

// ucontext's functions whose return goes on the stack they load (Function::switches_context).
bool SwitchesContext(std::string_view name) {
  return name == "swapcontext" || name == "__swapcontext" || name == "setcontext" ||
         name == "__setcontext";
}

// Functions a call of which gives up the stack, another context resuming at its return address
// (Function::parks): Go's runtime.mcall, swapcontext (its PLT entry too).
bool Parks(std::string_view name) {
  if (name.ends_with("@plt")) name.remove_suffix(4);
  return name == "runtime.mcall" || name == "swapcontext" || name == "__swapcontext";
}

}  // namespace

// (In chunk mode its callers Touch(f) first: kept out of this hot function.)
inline void CallStack::Count(uint32_t f, uint64_t n) {
  if (!counting_) return;
  Function& fn = functions_[f];
  fn.self += n;
  if (fn.active == 0) fn.inclusive += n;
  totals_.instructions += n;
  if (count_listener_ != nullptr) count_listener_->OnCount(f, n);
}

// Inline: runs' programs (RunOps) enter a function every few blocks.
[[gnu::always_inline]] inline void CallStack::Enter(uint32_t f, uint64_t return_address,
                                                    bool implicit, bool signal) {
  Function& fn = functions_[f];
  if (!implicit) {
    if (counting_) {
      ++fn.calls;
      ++totals_.calls;
    }
    if (fn.returns_twice && beyond_ == 0) {
      if (!frames_.empty()) {
        frames_.back().setjmp_return = return_address;
        frames_.back().setjmp_landed = false;
      } else if (base_) {
        failed_ = true;  // chunk mode: the caller's frame is B's, which this chunk cannot mark
      }
    }
  }
  if (frames_.size() >= kMaxFrames) {
    ++beyond_;
    ++totals_.dropped_frames;
    return;
  }
  if (chunk_) Touch(f);
  if (fn.active++ == 0) fn.active_since = totals_.instructions;
  frames_.push_back({.function = f,
                     .return_address = return_address,
                     .entry_count = totals_.instructions,
                     .implicit = implicit,
                     .signal = signal,
                     .entry_timed = timed_,
                     .entry_tsc = tsc_});
  if (chunk_) max_depth_ = std::max(max_depth_, frames_.size());
  if (listener_ != nullptr) listener_->OnEnter(frames_.back());
}

// Facts that hold for every run of the block: its first instruction's symbol (CallTarget and
// FunctionAt of a symbol's address name it, whatever the stack) is its last one's too (no
// CountSplit). The function is made here, where OnBlock would make it next (CallTarget or
// FunctionAt of block.ip make it first).
// A block without a symbol at its first and last instructions, in one file, is named by the
// stack (Unnamed) at each run, from its first instruction to its last (FunctionAt gives both
// the same function: no CountSplit).
uint64_t CallStack::MemoOf(const pt_block& block) {
  if (block.truncated) return 0;
  // (A retpoline's return is Return's to tell, with the block's return_ip_: no run has it.)
  if (block.iclass == ptic_return &&
      (IsRetpolineReturn(block.end_ip) || IsRetImmReturn(block.end_ip))) {
    return 0;
  }
  const int s = image_->SymbolAt(block.ip);
  const int file = s < 0 ? image_->FileAt(block.ip) : -1;
  if (block.ninsn > 1 &&
      (s >= 0 ? image_->SymbolAt(block.end_ip) != s
              : image_->SymbolAt(block.end_ip) >= 0 || image_->FileAt(block.end_ip) != file ||
                    PassesOtherCode(block))) {
    return 0;
  }
  const uint64_t length = block.iclass == ptic_call ? CallLength(block.end_ip, block.mode) : 0;
  if (s < 0) return 1 | 2 | length << 8 | uint64_t{static_cast<uint32_t>(OneFile(file))} << 32;
  return 1 | length << 8 | uint64_t{SymbolFunction(s)} << 32;
}

// Step's first part: the call or return the block before ended in reaches this block.
template <bool kFacts>
[[gnu::always_inline]] inline void CallStack::Arrive(const pt_block& block, Facts facts) {
  if (pending_call_) {
    pending_call_ = false;
    // A call to the next instruction (call/pop, to read the IP) enters no function.
    if (block.ip != pending_return_address_) {
      Enter(kFacts && !facts.by_stack ? facts.function : CallTarget(block.ip),
            pending_return_address_, /*implicit=*/false);
    }
  } else if (pending_return_) {
    pending_return_ = false;
    Return(block.ip);
  }
}

// Step's second part, where the stack is empty or the flow went on into another function `f`
// at `ip` (`jumped`: by a jump or in sequence). Out of line: Step's common path (a block in the
// function of the one before) stays small.
__attribute__((noinline)) void CallStack::Place(uint32_t f, uint64_t ip, bool jumped) {
  // Go's gogo called by the scheduler (runtime.execute), jumping to a goroutine parked by
  // runtime.mcall or in a function's prologue (preempted, or its stack scanned by the GC), or
  // to a new one's function: its frames are not the ones on the stack (sweeps 31a F1, 32a F1:
  // every goroutine's stack was stacked on the one before, `main.produce;runtime.chansend;
  // runtime.chanrecv`, `main.workA;main.step;main.leafB`). Its other jumps, to the goroutine's
  // own stack (a recover, after morestack grew it), land in a frame as any longjmp does (Jump).
  bool entered = false;
  if (jumped && current_ >= 0 && functions_[current_].gogo && InGoGogo() &&
      (ip == functions_[f].address || AfterCallOf(ip, &Function::parks) || Scheduled())) {
    LeaveStack();
    entered = ip == functions_[f].address;
  }
  if (frames_.empty()) {
    if (!base_) {
      // Entered before tracing began (the stream starts here), or the caller that the
      // outermost frame returned to: its callees nest below it.
      Enter(f, 0, /*implicit=*/true);
      if (entered && counting_) ++functions_[f].calls;  // a goroutine started: as a tail call
    } else {
      nonempty_epoch_ = epoch_;  // chunk mode: B has the frame (checked by the merge)
      if (jumped && f != current_) Jump(f, ip);
    }
  } else if (jumped && f != current_) {
    Jump(f, ip);
  }
}

template <bool kFacts>
[[gnu::always_inline]] inline void CallStack::Step(const pt_block& block, Facts facts,
                                                   uint64_t ninsn) {
  const bool jumped = flowing_;
  const bool returned = pending_return_;
  if (pending_call_ || pending_return_) Arrive<kFacts>(block, facts);
  uint32_t f = !kFacts          ? FunctionAt(block.ip)
               : facts.by_stack ? Unnamed(facts.file)
                                : facts.function;
  if (returned) FellInto(f, block.ip);
  if (jumped && f != current_) {
    Place(f, block.ip, jumped);
    // Code without a symbol where a longjmp or an exception landed, in a frame named by its
    // call target: that frame's code (as Unnamed names it from here).
    if (!frames_.empty() && frames_.back().function != f && RunsIn(frames_.back(), f)) {
      f = frames_.back().function;
    }
  } else if (frames_.empty()) {
    // Chunk mode, code that runs in a frame of B (most blocks of a chunk whose code returns no
    // further than where it began): Place's first case, inline.
    if (base_) {
      nonempty_epoch_ = epoch_;
    } else {
      Place(f, block.ip, jumped);
    }
  }
  current_ = f;
  if (!kFacts && block.ninsn > 1 &&
      ((!(block.end_ip >= cache_.begin && block.end_ip < cache_.end) &&
        FunctionAt(block.end_ip) != f) ||
       (block.ninsn > 2 && cache_symbol_ < 0 && PassesOtherCodeMemo(block)))) {
    CountSplit(block, f);
  } else {
    // Touch's own check inline: most blocks run in a function changed in this epoch already.
    if (chunk_ && epoch_of_[f] != epoch_) Touch(f);
    Count(f, ninsn);
  }
  if (block.iclass == ptic_call) {
    pending_call_ = true;
    const uint64_t size = kFacts            ? facts.call_length
                          : block.truncated ? block.size
                                            : CallLength(block.end_ip, block.mode);
    pending_return_address_ = block.end_ip + size;
  } else if (block.iclass == ptic_return) {
    pending_return_ = true;
    return_ip_ = block.end_ip;
  }
  // Anything but a call or a return goes on to the next block by a jump or in sequence (the
  // block decoder leaves the class of an indirect jump unknown: ptic_error); far transfers
  // (syscalls, interrupts) come with events when only user code is traced.
  flowing_ = block.iclass != ptic_call && block.iclass != ptic_return &&
             block.iclass != ptic_far_call && block.iclass != ptic_far_return &&
             block.iclass != ptic_far_jump;
  if (block.iclass == ptic_far_call) syscall_at_ = block.end_ip;
}

// Out of line: OnWholeBlock's hot path stays small.
__attribute__((noinline)) void CallStack::OnBlock(const pt_block& block) {
  Step<false>(block, Facts{}, block.ninsn);
}

void CallStack::OnWholeBlock(const pt_block& block, BlockMemo& memo) {
  if (memo.owner != memo_owner_ || memo.context != image_) {
    memo = {memo_owner_, image_, MemoOf(block)};
  }
  if (memo.value == 0) return OnBlock(block);
  const auto high = static_cast<uint32_t>(memo.value >> 32);
  Step<true>(block,
             Facts{high, static_cast<uint8_t>(memo.value >> 8), (memo.value & 2) != 0,
                   static_cast<int>(high)},
             block.ninsn);
}

// Where every block ends in a conditional branch and runs in the function of the one before
// (Step places nothing after the first), in a frame (the first one placed it) that no call or
// return changes, Count adds up: the run's Step is its first block's with all its
// instructions. Where blocks go into other functions by the run's calls and returns, the run's
// program does what the blocks' steps after the first would (RunProgram). Code of one file
// without a symbol (a stripped binary), named by the stack (Unnamed), is one step too where
// every block ends in a conditional branch: after the first block's step (which may place the
// function it names) the frame on top runs that function, or one that Unnamed does not name
// (not named by an address in the file), so Unnamed names the same function for each block
// after it. Such code with calls and returns gets a program too, whose ops name the function
// with Unnamed after each call or return (RunOp::by_stack). A jump into another function, or
// between code named by a symbol and code named by the stack, is left to each block's step.
uint64_t CallStack::RunMemoOf(const WalkedRun& run) {
  uint64_t one = 0;   // the first memo's, while every block's is the same and a branch's
  bool fixed = true;  // every memo names its function
  for (size_t i = 0; i < run.blocks.size(); ++i) {
    BlockMemo& m = *run.memos[i];
    if (m.owner != memo_owner_ || m.context != image_) {
      m = {memo_owner_, image_, MemoOf(run.blocks[i])};
    }
    if (i == 0) one = m.value;
    if (m.value != one || run.blocks[i].iclass != ptic_cond_jump) one = 0;
    if (m.value == 0) fixed = false;
  }
  if (one != 0) return one;
  if (!fixed || run.blocks.size() > kRunOps + 1) return 0;
  RunProgram p{};
  // A block's function, or (by_stack) its file.
  auto function = [&](size_t i) { return static_cast<uint32_t>(run.memos[i]->value >> 32); };
  auto by_stack = [&](size_t i) { return (run.memos[i]->value & 2) != 0; };
  auto call_length = [&](size_t i) { return static_cast<uint8_t>(run.memos[i]->value >> 8); };
  p.first = Facts{function(0), call_length(0), by_stack(0), static_cast<int>(function(0))};
  p.first_ninsn = run.blocks[0].ninsn;
  bool in_first = true;  // the blocks so far are the first one's Step
  for (size_t i = 1; i < run.blocks.size(); ++i) {
    const pt_block& before = run.blocks[i - 1];
    const pt_block& block = run.blocks[i];
    const uint32_t f = function(i);
    if (before.iclass == ptic_cond_jump) {
      // A jump into another function (Jump), or from code named one way to code named the other.
      if (f != function(i - 1) || by_stack(i) != by_stack(i - 1)) return 0;
      if (in_first) {
        p.first_ninsn += block.ninsn;
      } else {
        p.ops[p.size - 1].ninsn += block.ninsn;
      }
      continue;
    }
    if (before.iclass == ptic_call) {
      const uint64_t return_address = before.end_ip + call_length(i - 1);
      if (block.ip == return_address) return 0;  // a call to the next instruction: no frame
      // Code without a symbol enters the function its address names (Arrive).
      p.ops[p.size++] = {true, by_stack(i),    by_stack(i) ? CallTarget(block.ip) : f,
                         f,    return_address, block.ninsn};
    } else if (before.iclass == ptic_return) {
      // (A return out of swapcontext goes on another stack: Return's to tell.)
      if (!by_stack(i - 1) && functions_[function(i - 1)].switches_context) {
        return 0;
      }
      p.ops[p.size++] = {false, by_stack(i), f, f, block.ip, block.ninsn};
    } else {
      return 0;
    }
    in_first = false;
  }
  p.deep = p.size != 0 && !p.first.by_stack;
  for (uint32_t k = 0; k < p.size; ++k) {
    const RunOp& op = p.ops[k];
    if (op.by_stack) p.deep = false;
    (op.call ? p.calls : p.returns)++;
    p.ninsn += op.ninsn;
    p.last_function = op.function;
    uint32_t s = 0;
    while (s < p.nsums && p.sums[s].function != op.function) ++s;
    if (s == p.nsums) p.sums[p.nsums++] = {op.function, 0, 0};
    p.sums[s].calls += op.call ? 1 : 0;
    p.sums[s].ninsn += op.ninsn;
  }
  const pt_block& last = run.blocks.back();
  p.pending_call = last.iclass == ptic_call;
  p.pending_return = last.iclass == ptic_return;
  p.flowing = !p.pending_call && !p.pending_return;
  // The last call's (the steps leave it so, pending or not).
  for (size_t i = run.blocks.size(); i-- > 0;) {
    if (run.blocks[i].iclass == ptic_call) {
      p.sets_address = true;
      p.pending_return_address = run.blocks[i].end_ip + call_length(i);
      break;
    }
  }
  if (programs_.size() == kMaxPrograms && !program_of_.contains(run.memo)) {
    // As many as the decoders fed to this model have had runs: forget them all (and every
    // memo made so far, whose values may name them) and start again.
    programs_.clear();
    program_of_.clear();
    memo_owner_ = NewBlockMemoOwner();
    return RunMemoOf(run);
  }
  auto [it, inserted] = program_of_.try_emplace(run.memo, programs_.size());
  if (inserted) {
    programs_.push_back(p);
  } else {
    programs_[it->second] = p;
  }
  return 4 | uint64_t{it->second} << 32;
}

// The state a run's last block leaves (Step's end), after its program's ops.
[[gnu::always_inline]] inline void CallStack::RunLeaves(const RunProgram& program) {
  pending_call_ = program.pending_call;
  pending_return_ = program.pending_return;
  return_ip_ = 0;  // (a run's return is no retpoline's: MemoOf)
  flowing_ = program.flowing;
  if (program.sets_address) pending_return_address_ = program.pending_return_address;
}

// Each op as the steps of the blocks it comes from do it (Arrive; Place where a return left no
// frame; Count), in order.
void CallStack::RunOps(const RunProgram& program) {
  for (uint32_t k = 0; k < program.size; ++k) {
    const RunOp& op = program.ops[k];
    uint32_t f = op.function;
    if (op.call) {
      Enter(op.function, op.address, /*implicit=*/false);
      if (op.by_stack) f = Unnamed(static_cast<int>(op.file));
    } else {
      if (beyond_ == 0 && !frames_.empty() && frames_.back().return_address == op.address) {
        Pop(false);  // Return's most common case: the run's call on top
        return_matched_ = true;
      } else {
        return_ip_ = 0;  // (no retpoline's: MemoOf)
        Return(op.address);
      }
      if (op.by_stack) f = Unnamed(static_cast<int>(op.file));
      FellInto(f, op.address);
      if (frames_.empty()) {
        if (base_) {
          nonempty_epoch_ = epoch_;
        } else {
          Place(f, 0, /*jumped=*/false);
        }
      }
    }
    current_ = f;
    if (chunk_ && epoch_of_[f] != epoch_) Touch(f);
    Count(f, op.ninsn);
  }
  RunLeaves(program);
}

// RunOps beyond kMaxFrames (a recursion deeper than the model keeps: a call gets no frame, and
// a return takes back such a call), where every op only counts: each op as RunOps' with no
// frame pushed or popped (Enter's and Return's cases beyond kMaxFrames, no function's
// returns_twice looked at, no switches_context: RunMemoOf), no FellInto (no return matched a
// frame), no Place (frames stay), and each function's Count with `active` unchanged: the
// program's sums at once.
void CallStack::RunDeep(const RunProgram& program) {
  for (uint32_t s = 0; s < program.nsums; ++s) {
    const RunSum& sum = program.sums[s];
    Function& fn = functions_[sum.function];
    fn.calls += sum.calls;
    fn.self += sum.ninsn;
    if (fn.active == 0) fn.inclusive += sum.ninsn;
  }
  totals_.calls += program.calls;
  totals_.dropped_frames += program.calls;
  totals_.returns += program.returns;
  totals_.instructions += program.ninsn;
  beyond_ += program.calls;
  beyond_ -= program.returns;
  if (program.returns != 0) return_matched_ = false;
  current_ = program.last_function;
  RunLeaves(program);
}

void CallStack::OnWholeRun(const WalkedRun& run) {
  // The common case: a run of conditional branches in one function (its memo's case 1, named
  // by a symbol) that goes on in the function of the block before, in a frame, with no call or
  // return to arrive: Step<true> of its first block with the run's instructions comes to this.
  const BlockMemo& memo = *run.memo;
  if ((memo.value & 7) == 1 && memo.owner == memo_owner_ && memo.context == image_) {
    const auto f = static_cast<uint32_t>(memo.value >> 32);
    if (f == current_ && !pending_call_ && !pending_return_ && !frames_.empty() &&
        !(chunk_ && epoch_of_[f] != epoch_)) {
      flowing_ = true;  // the run's last block ends in a conditional branch
      return Count(f, run.ninsn);
    }
  }
  RunStepped(run);
}

// The first block's Step<true> where RunDeep takes the program after it, and the call or the
// return before it only counts too: the call (not to the next instruction) enters the function
// the block names beyond kMaxFrames (Enter's count, no frame), or the return takes back a call
// given no frame (Return's case beyond kMaxFrames; no switches_context function returning),
// no FellInto (no return matched), no Place (it arrives by the call or the return, and frames
// stay), then its Count. The pending call or return and the block's own are the program's to
// leave (RunLeaves; sets_address covers the first block's call). False, and nothing done,
// elsewhere.
[[gnu::always_inline]] inline bool CallStack::DeepArrival(const pt_block& block,
                                                          const RunProgram& program) {
  if (flowing_ || !RunsDeep(program, uint64_t{program.returns} + 1)) return false;
  const uint32_t f = program.first.function;
  Function& fn = functions_[f];
  if (pending_call_) {
    if (block.ip == pending_return_address_) return false;  // no function entered
    ++fn.calls;
    ++totals_.calls;
    ++beyond_;
    ++totals_.dropped_frames;
  } else if (pending_return_) {
    if (current_ >= 0 && functions_[current_].switches_context) return false;
    --beyond_;
    ++totals_.returns;
    return_matched_ = false;
  } else {
    return false;
  }
  pending_call_ = pending_return_ = false;
  current_ = f;
  fn.self += program.first_ninsn;
  if (fn.active == 0) fn.inclusive += program.first_ninsn;
  totals_.instructions += program.first_ninsn;
  return true;
}

__attribute__((noinline)) void CallStack::RunStepped(const WalkedRun& run) {
  BlockMemo& memo = *run.memo;
  if (memo.owner != memo_owner_ || memo.context != image_) {
    const uint64_t value = RunMemoOf(run);  // (may renew memo_owner_)
    memo = {memo_owner_, image_, value};
  }
  if ((memo.value & 4) != 0 && run.repeat == 1) {
    const RunProgram& program = programs_[memo.value >> 32];
    if (DeepArrival(run.blocks[0], program)) return RunDeep(program);
    Step<true>(run.blocks[0], program.first, program.first_ninsn);
    pending_call_ = pending_return_ = false;  // the program arrives where the first block went
    if (RunsDeep(program, program.returns)) return RunDeep(program);
    return RunOps(program);
  }
  if ((memo.value & 1) == 0) {
    for (uint32_t r = 0; r < run.repeat; ++r) {
      for (size_t i = 0; i < run.blocks.size(); ++i) OnWholeBlock(run.blocks[i], *run.memos[i]);
    }
    return;
  }
  const auto high = static_cast<uint32_t>(memo.value >> 32);
  Step<true>(run.blocks[0], Facts{high, 0, (memo.value & 2) != 0, static_cast<int>(high)},
             run.ninsn);
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
      // Where the kernel may deliver a signal: at an interrupt, or at a system call (the block
      // before ended in a far transfer: no call, return or jump pending), not where the flow
      // went into untraced code by a call, a jump (a PLT entry) or a return.
      disabled_far_ = async || (!pending_call_ && !pending_return_ && !flowing_);
      if (pending_call_) {
        // A call into code that is not traced, or interrupted at its target (e.g. a page
        // fault on its first fetch): the callee is entered all the same.
        if (!known || to != pending_return_address_) {
          Enter(known ? CallTarget(to) : Untraced(), pending_return_address_, /*implicit=*/false);
          // An interrupt at the target is no call into untraced code: what tracing resumes at
          // next may be a signal's handler (SignalTransfer), on top of the callee.
          left_by_call_ = !async;
        }
      } else if (pending_return_) {
        if (known) {
          Return(to);
        } else {
          ReturnUnmatched();
        }
      } else if (flowing_ && async) {
        // Interrupted after a jump, before its target's first instruction (a signal at a tail
        // call's target): the flow went on into the target's function all the same, as it
        // resumes there (was: the frame stayed the jumping function's after the handler, the
        // entry uncounted, 196 of e2e_signal_tail's 2,000,000 calls of t2).
        const uint32_t f = FunctionAt(to);
        if (f != current_) {
          Place(f, to, /*jumped=*/true);
          current_ = f;
        }
      }
      pending_call_ = pending_return_ = flowing_ = false;
      async_disabled_ = async;
      disabled_ = true;
      disabled_at_syscall_ = false;
      if (async) {
        disabled_at_ = event.variant.async_disabled.at;
      } else if (disabled_far_ && syscall_at_ != 0) {
        // At a system call: a signal's handler returns to it (restarted) or after it.
        disabled_at_ = syscall_at_;
        disabled_at_syscall_ = true;
      }
      syscall_at_ = 0;
      break;
    }
    case ptev_enabled: {
      // Tracing (re)starts here: no jump led here from the code traced before.
      pending_call_ = pending_return_ = flowing_ = false;
      // Tracing resumed where an interrupt stopped it is no return. Otherwise it may come back
      // from untraced code to a caller's frame: at its return address (which libipt flags
      // `resumed` too after a call whose target only the TIP.PGD told), or into the middle of
      // a function with a frame below (a longjmp or an exception). Else, where it stopped
      // otherwise than at a call into untraced code (an interrupt, a system call, a return)
      // and resumes elsewhere: a signal's handler, or its return (SignalTransfer).
      const uint64_t ip = event.variant.enabled.ip;
      const bool resumed = event.variant.enabled.resumed;
      if (!event.ip_suppressed && !(resumed && async_disabled_)) {
        const bool elsewhere = disabled_ && disabled_far_ && !resumed && !left_by_call_;
        // Chunk mode with no frame of C: whether a frame of B matches is the merge's to find
        // (kReturnIfFound), so nothing may depend on it not matching.
        const bool of_base = chunk_ && base_ && frames_.empty();
        if (elsewhere && SignalReturnsAt(ip)) {
          // rt_sigreturn to where an interrupt stopped the flow (first: in a recursion that
          // address may also be a frame's return address).
        } else if (!ReturnMatched(ip, /*must=*/false)) {
          if (left_by_call_) {
            EnabledInto(ip);
          } else if (elsewhere && SignalTransfer(ip) && of_base) {
            failed_ = true;
          }
        }
      }
      // (Only between a disable and the enable after it.)
      async_disabled_ = left_by_call_ = disabled_ = disabled_far_ = disabled_at_syscall_ = false;
      break;
    }
    case ptev_overflow:
      // Trace was lost: the call context is unknown from here on.
      pending_call_ = pending_return_ = flowing_ = false;
      LeaveStack();
      break;
    case ptev_async_branch:  // an interrupt with tracing on
    case ptev_tsx:           // a transaction's abort goes to its fallback
      flowing_ = false;
      break;
    default:
      break;
  }
}

// Tracing enabled elsewhere than where it stopped (not after a call into untraced code, and
// where no frame returns), with frames on the stack: the kernel ran a signal's handler, or
// returned from one (rt_sigreturn) to where its signal stopped the flow (the interrupted
// instruction, or at or after the system call the signal came at: where the handler's entry
// was not told). A handler's entry: a function's entry, or code without a symbol (a stripped
// program's static handler, named as a call to it is) where no handler's frame is gone (none
// runs, or the running one is still in its frame: a signal nested in it), or where one is gone
// and that code was entered as a handler before (the kernel delivered the next signal at the
// rt_sigreturn); elsewhere code without a symbol is the return of the handler whose frame is
// gone (sweep 35a F1: a stripped program's handler got no frame, its return to the restorer
// popped every frame, and the rest of the thread ran on a truncated stack), unless that one's
// resume is known (SignalReturnsAt did not match: the next signal's handler, delivered at its
// rt_sigreturn; a review). The handler runs in
// a frame of its own on top of the frames it interrupted, as gdb shows it (its return to the
// signal's restorer matches no frame and pops it: ReturnUnmatched), entered as by a call;
// returning from the handler pops what is left above the interrupted frames.
bool CallStack::SignalTransfer(uint64_t ip) {
  if (image_ == nullptr) return false;
  const int s = image_->SymbolAt(ip);
  // (Not at a label inside a function: a handler that moved the interrupted flow there, to
  // recover from a fault, returned (sweep 33a F5: "probe_recover (signal)" on top of probe).)
  bool handler = s >= 0 && image_->symbols()[s].begin == ip && image_->symbols()[s].entry;
  if (s < 0 && (!frames_.empty() || base_)) {
    // Chunk mode: that depends on the handlers of B and those entered before; the merge
    // decodes the chunk.
    if (chunk_) failed_ = true;
    const bool returned = !signals_.empty() && frames_.size() <= signals_.back().depth;
    // (Not where the one whose frame is gone resumes: SignalReturnsAt came first.)
    handler = !returned || signals_.back().resume_known || unnamed_handlers_.contains({image_, ip});
    if (handler) unnamed_handlers_.insert({image_, ip});
  }
  if (handler && (!frames_.empty() || base_)) {
    // Chunk mode with no handler of C running: no handler of B resumes at ip (the merge checks).
    if (chunk_ && base_ && signals_.empty()) base_signal_entries_.push_back(ip);
    if (frames_.empty()) nonempty_epoch_ = epoch_;  // chunk mode: B has the frames
    Signal next{disabled_at_, async_disabled_ || disabled_at_syscall_, frames_.size(),
                disabled_at_syscall_};
    if (!signals_.empty() && !async_disabled_ && frames_.size() == signals_.back().depth) {
      // The running handler's frame is gone (it returned to its restorer) and tracing stopped
      // at a system call: its rt_sigreturn, at which the kernel delivered the next signal, over
      // the flow the last one interrupted (not nested in its handler): this handler's return
      // resumes that flow where the last one's would have.
      next.resume = signals_.back().resume;
      next.resume_known = signals_.back().resume_known;
      next.at_syscall = signals_.back().at_syscall;
      signals_.pop_back();
    }
    signals_.push_back(next);
    Enter(s >= 0 ? SymbolFunction(s) : CallTarget(ip), 0, /*implicit=*/false, /*signal=*/true);
    return true;
  }
  if (signals_.empty()) {
    if (chunk_ && base_) no_base_signal_ = true;  // chunk mode: no handler of B runs
    return false;
  }
  LeaveSignal();
  return true;
}

// Tracing enabled at `ip`, where the interrupt the running handler's signal came at stopped
// the flow: its rt_sigreturn.
bool CallStack::SignalReturnsAt(uint64_t ip) {
  if (signals_.empty()) {
    // Chunk mode: no handler of B resumes at ip (the merge checks).
    if (chunk_ && base_) base_signal_entries_.push_back(ip);
    return false;
  }
  if (!signals_.back().Resumes(ip)) return false;
  LeaveSignal();
  return true;
}

// The running handler's signal returns: the frames above the ones it interrupted end.
void CallStack::LeaveSignal() {
  const size_t depth = signals_.back().depth;
  signals_.pop_back();
  while (frames_.size() > depth) Pop(/*at_end=*/false, /*by_return=*/false);
}

void CallStack::Reset() {
  pending_call_ = pending_return_ = flowing_ = async_disabled_ = left_by_call_ = false;
  disabled_ = disabled_far_ = disabled_at_syscall_ = false;
  syscall_at_ = 0;
  signals_.clear();
  // Nothing reads the function that ran last until a block runs (no return is pending): as a
  // model just made, so that a chunk at another stream's start applies (CheckChunk).
  current_ = -1;
  beyond_ = 0;
  while (!frames_.empty()) Pop(true);
  if (base_) {
    Underflow(ChunkOp::kClear, 0);
    base_ = false;
  }
}

std::string CallStack::DepthWarning() const {
  if (totals_.dropped_frames == 0) return "";
  return fmt::format(
      "call stack deeper than {} frames: {} calls got no frame (their callees' instructions "
      "count in the frame below: a recursion that deep, or code calling itself without returning, "
      "e.g. `call .`)",
      kMaxFrames, totals_.dropped_frames);
}

void CallStack::SetImage(const ProgramImage& image, bool same_program) {
  if (same_program && image_ != nullptr && image_ != &image) followed_.try_emplace(&image, image_);
  image_ = &image;
  cache_ = {1, 0};
}

int64_t CallStack::CarriedSymbol(const Symbol& sym) const {
  const std::string& file = image_->files()[sym.image].name;
  for (auto p = followed_.find(image_); p != followed_.end(); p = followed_.find(p->second)) {
    const ProgramImage& before = *p->second;
    const int o = before.SymbolAt(sym.begin);
    if (o < 0) continue;
    const Symbol& old = before.symbols()[o];
    if (old.begin != sym.begin || old.name != sym.name || before.files()[old.image].name != file) {
      continue;
    }
    if (auto f = symbol_function_.find({&before, o}); f != symbol_function_.end()) return f->second;
  }
  return -1;
}

int64_t CallStack::CarriedAddress(uint64_t ip) const {
  const int file = image_->FileAt(ip);
  for (auto p = followed_.find(image_); p != followed_.end(); p = followed_.find(p->second)) {
    const ProgramImage& before = *p->second;
    const int old = before.FileAt(ip);
    if (file < 0 || old < 0 || before.files()[old].name != image_->files()[file].name) continue;
    if (auto f = address_function_.find({&before, ip}); f != address_function_.end()) {
      return f->second;
    }
  }
  return -1;
}

int64_t CallStack::CarriedUnknown(int file) const {
  if (file < 0) return -1;
  const std::string& name = image_->files()[file].name;
  for (auto p = followed_.find(image_); p != followed_.end(); p = followed_.find(p->second)) {
    const ProgramImage& before = *p->second;
    for (size_t i = 0; i < before.files().size(); ++i) {
      if (before.files()[i].name != name) continue;
      if (auto f = unknown_function_.find({&before, static_cast<int64_t>(i)});
          f != unknown_function_.end()) {
        return f->second;
      }
    }
  }
  return -1;
}

uint32_t CallStack::NewFunction(std::string name, int file, uint64_t address, bool from_address,
                                FunctionKey key) {
  keys_.push_back(key);
  // Made in a later epoch: its first change tells its inclusive count (0) at that epoch.
  epoch_of_.push_back(epoch_ == 0 ? 0 : ~uint32_t{0});
  Function fn;
  fn.name = std::move(name);
  fn.image = image_;
  fn.file = file;
  fn.address = address;
  fn.from_address = from_address;
  fn.returns_twice = ReturnsTwice(fn.name);
  fn.gogo = fn.name == "gogo" || fn.name == "runtime.gogo";  // (runtime.gogo.abi0 jumps to gogo)
  fn.switches_context = SwitchesContext(fn.name);
  fn.parks = Parks(fn.name);
  fn.schedules = fn.name == "runtime.execute";
  functions_.push_back(std::move(fn));
  return static_cast<uint32_t>(functions_.size() - 1);
}

uint32_t CallStack::SymbolFunction(int s) {
  auto [it, inserted] = symbol_function_.try_emplace({image_, s}, 0);
  if (inserted) {
    const Symbol& sym = image_->symbols()[s];
    const int64_t carried = followed_.empty() ? -1 : CarriedSymbol(sym);
    it->second = carried >= 0 ? static_cast<uint32_t>(carried)
                              : NewFunction(sym.name, static_cast<int>(sym.image), sym.begin, false,
                                            {FunctionKey::kSymbol, s});
    Function& fn = functions_[it->second];
    fn.label = !sym.entry;
    fn.within_start = sym.begin - sym.within;
    fn.within_end = fn.within_start + sym.within_size;
  }
  return it->second;
}

uint32_t CallStack::Unknown(int file) {
  if (image_ == unknown_image_ && file == unknown_file_) return unknown_;
  auto [it, inserted] = unknown_function_.try_emplace({image_, file}, 0);
  if (inserted) {
    const int64_t carried = followed_.empty() ? -1 : CarriedUnknown(file);
    it->second = carried >= 0
                     ? static_cast<uint32_t>(carried)
                     : NewFunction(file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name),
                                   file, 0, false, {FunctionKey::kUnknown, file});
  }
  unknown_image_ = image_;
  unknown_file_ = file;
  unknown_ = it->second;
  return unknown_;
}

uint32_t CallStack::Untraced() {
  if (untraced_ < 0) {
    untraced_ =
        static_cast<int32_t>(NewFunction("[untraced]", -1, 0, false, {FunctionKey::kUntraced, 0}));
  }
  return static_cast<uint32_t>(untraced_);
}

// The function a call to `ip` enters: its symbol, else one named by the address.
uint32_t CallStack::CallTarget(uint64_t ip) {
  if (!target_slots_) target_slots_ = std::make_unique<TargetSlot[]>(kSlots);  // zeroed
  TargetSlot& slot = target_slots_[(ip ^ (ip >> 10)) % kSlots];
  if (slot.ip == ip && slot.image == image_) return slot.function;
  uint32_t f;
  if (int s = image_->SymbolAt(ip); s >= 0) {
    f = SymbolFunction(s);
  } else {
    f = AddressFunction(ip);
  }
  slot = TargetSlot{image_, ip, f};
  return f;
}

uint32_t CallStack::AddressFunction(uint64_t ip) {
  auto [it, inserted] = address_function_.try_emplace({image_, ip}, 0);
  if (inserted) {
    // Named by its address in its ELF file (as objdump, addr2line and perf report show it; the
    // same in every run of a PIE program), else by its run-time address.
    const int64_t carried = followed_.empty() ? -1 : CarriedAddress(ip);
    it->second = carried >= 0
                     ? static_cast<uint32_t>(carried)
                     : NewFunction(fmt::format("sub_{:x}", image_->LinkAddress(ip).value_or(ip)),
                                   OneFile(image_->FileAt(ip)), ip, true,
                                   {FunctionKey::kAddress, static_cast<int64_t>(ip)});
  }
  return it->second;
}

// The function executing at `ip`: its symbol; without one, the current frame's function
// when that was named by its address in the same file; else "[file]".
uint32_t CallStack::FunctionAt(uint64_t ip) {
  if (!(ip >= cache_.begin && ip < cache_.end)) {
    cache_symbol_ = image_->SymbolAt(ip, &cache_);
    cache_function_ = cache_symbol_ >= 0 ? SymbolFunction(cache_symbol_) : 0;
    cache_file_ = cache_symbol_ >= 0 ? static_cast<int>(image_->symbols()[cache_symbol_].image)
                                     : OneFile(image_->FileAt(ip));
  }
  if (cache_symbol_ >= 0) return cache_function_;
  return Unnamed(cache_file_);
}

// One file however many pieces it came in (sweep 31a F4: each block of JIT code captured on its
// own was [anon], not the function its frame was named by): the file Unnamed and the functions
// named by an address are given, once per lookup (the memo's, FunctionAt's cache), not per block.
int CallStack::OneFile(int file) const {
  return file < 0 ? file : static_cast<int>(image_->FirstOfName(static_cast<uint32_t>(file)));
}

uint32_t CallStack::Unnamed(int file) {
  if (!frames_.empty()) {
    const Function& top = functions_[frames_.back().function];
    if (top.from_address && top.image == image_ && top.file == file) {
      return frames_.back().function;
    }
  } else if (base_) {
    return BaseTop(file);  // chunk mode: named by B's frame on top, perhaps
  }
  return Unknown(file);
}

uint32_t CallStack::BaseTop(int file) {
  const int64_t value = static_cast<int64_t>(uint64_t{epoch_} << 32 | static_cast<uint32_t>(file));
  // As Unknown: the last answer first (stripped code asks at every block; the map's lookup took
  // 2 % of a -j2 stats of gzip).
  if (value == base_top_value_) return base_top_;
  auto [it, inserted] = base_top_function_.try_emplace(value, 0);
  if (inserted) {
    it->second = NewFunction("[B's top]", file, 0, false, {FunctionKey::kBaseTop, value});
  }
  base_top_value_ = value;
  base_top_ = it->second;
  return base_top_;
}

int64_t CallStack::BaseTopFunction(const FunctionKey& key, size_t depth) const {
  const auto file = static_cast<int32_t>(static_cast<uint32_t>(key.value));
  if (depth > 0) {
    const uint32_t f = frames_[depth - 1].function;
    const Function& top = functions_[f];
    if (top.from_address && top.image == image_ && top.file == file) return f;
  }
  return FindFunction({FunctionKey::kUnknown, file});
}

// Call sites repeat: their lengths are cached, per image (the same address in another
// program is another instruction).
uint64_t CallStack::CallLength(uint64_t ip, pt_exec_mode mode) {
  if (!length_slots_) length_slots_ = std::make_unique<LengthSlot[]>(kSlots);  // zeroed
  LengthSlot& slot = length_slots_[(ip ^ (ip >> 10)) % kSlots];
  if (slot.ip == ip && slot.image == image_) return slot.length;
  auto [it, inserted] = call_length_.try_emplace({image_, ip}, 0);
  if (inserted) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = image_->Read(ip, bytes, sizeof(bytes));
    DecodedInsn insn;
    it->second = DecodeInsn(disasm_, ip, mode, bytes, n, &insn) < 0 ? 0 : insn.size;
  }
  slot = LengthSlot{image_, ip, it->second};
  return it->second;
}

// A block that crosses into another function (fall-through, direct jump): walk it. A block
// splits the same way each time: its runs (and the jumps between them) are cached and replayed,
// the runs of code without a symbol named by the stack at each replay as the walk names them
// (a review: stripped code tail-jumping through an exported wrapper was walked at each run,
// 6x the decode time of its unstripped twin).
void CallStack::CountSplit(const pt_block& block, uint32_t first) {
  const SplitKey key{image_, block.ip, block.end_ip, block.ninsn, block.mode};
  if (auto it = split_.find(key); it != split_.end()) {
    for (const SplitRun& r : it->second) {
      uint32_t f = first;
      if (r.jumped) {
        // (Code without a symbol: named by the stack as the walk found it, Unnamed.)
        f = r.by_stack ? Unnamed(r.file) : r.function;
        Jump(f, r.entry);
        current_ = f;
      }
      if (chunk_) Touch(f);
      Count(f, r.instructions);
    }
    return;
  }
  std::vector<SplitRun> runs;
  bool followed = true;
  uint64_t ip = block.ip;
  SplitRun now{first, 0, block.ip, false};
  auto close = [&] {
    if (now.instructions == 0) return;
    if (chunk_) Touch(now.function);
    Count(now.function, now.instructions);
    runs.push_back(now);
  };
  for (uint32_t i = 0; i < block.ninsn; ++i) {
    uint32_t f = FunctionAt(ip);
    if (f != now.function) {  // a direct jump or a fall-through into another function
      close();
      Jump(f, ip);
      current_ = f;
      now = SplitRun{f, 0, ip, true, cache_symbol_ < 0 ? cache_file_ : 0, cache_symbol_ < 0};
    }
    ++now.instructions;
    if (i + 1 == block.ninsn) break;
    ip = NextInBlock(ip, block.mode);
    if (ip == 0) {  // cannot follow: the rest goes to the current function
      now.instructions += block.ninsn - i - 1;
      followed = false;
      break;
    }
  }
  close();
  if (followed && !runs.empty()) split_.emplace(key, std::move(runs));
}

uint64_t CallStack::NextInBlock(uint64_t ip, pt_exec_mode mode) {
  uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
  const size_t n = image_->Read(ip, bytes, sizeof(bytes));
  DecodedInsn insn;
  if (DecodeInsn(disasm_, ip, mode, bytes, n, &insn) < 0) return 0;
  ip += insn.size;
  // Inside a block only direct jumps (and calls, which end our blocks) change the flow.
  if (insn.iclass == ptic_jump && insn.is_direct) {
    ip += static_cast<uint64_t>(static_cast<int64_t>(insn.displacement));
  }
  return ip;
}

bool CallStack::PassesOtherCode(const pt_block& block) {
  const int file = OneFile(image_->FileAt(block.ip));
  uint64_t ip = block.ip;
  for (uint32_t i = 1; i + 1 < block.ninsn; ++i) {
    ip = NextInBlock(ip, block.mode);
    if (ip == 0) return false;
    if (image_->SymbolAt(ip) >= 0 || OneFile(image_->FileAt(ip)) != file) return true;
  }
  return false;
}

bool CallStack::PassesOtherCodeMemo(const pt_block& block) {
  // Direct-mapped, a hash of the block's key and its answer in the low bit: the libipt
  // decoder's blocks of stripped code each look here (a hash map took 5-13 % of a stripped
  // CPython's decode).
  if (passes_other_.empty()) passes_other_.resize(kPassesSlots);
  const uint64_t hash = absl::HashOf(image_, block.ip, block.end_ip, block.ninsn, block.mode) | 1;
  uint64_t& slot = passes_other_[block.ip & (kPassesSlots - 1)];
  if ((slot | 1) != hash) slot = PassesOtherCode(block) ? hash & ~uint64_t{1} : hash;
  return (slot & 1) == 0;
}

// Control went on into `f` at `ip` by a jump (a tail call, a PLT entry jumping to its
// target): the frame on top is f's from here, as gdb and perf name it. Its calls stay where
// they were counted; its inclusive instructions count for f from here. A jump into the middle
// of a function that has a frame below (longjmp, an exception's landing pad) returns to that
// frame instead: the frames above it were left without returning; but not a jump back into the
// function the frame ran before its last jump (a compiler's cold part of f, `f.cold`, jumping
// back into f, in a recursive f too): that renames it back. A call beyond kMaxFrames got no
// frame: the frame on top is not the running function's then.
void CallStack::Jump(uint32_t f, uint64_t ip) {
  if (frames_.empty()) {
    if (base_) failed_ = true;  // chunk mode: renames (or returns to) a frame of B
    return;
  }
  // A jump to a program's entry point: its loader starts it on the process's initial stack
  // (glibc's ld.so: jmp *%r12 from _start, its only frame; musl's: mov %rsi,%rsp; jmp *%rdi,
  // two calls deep), so the loader's frames below end; the jump renames the outermost one
  // (sweep 37b L5: every stack of a dynamic musl program began _dlstart;_dlstart_c, frames
  // no debugger shows).
  if (frames_.size() > 1 && image_ != nullptr && image_->IsEntryPoint(ip)) {
    if (base_) {
      failed_ = true;  // chunk mode: B's frames end too (the merge decodes the chunk)
      return;
    }
    while (frames_.size() > 1) Pop(/*at_end=*/false, /*by_return=*/false);
  }
  // (Code without a symbol, "[file]", has no entry to tell its middle by: it is renamed to,
  // unless a longjmp or an exception lands there: where a frame called setjmp, or a landing pad
  // (sweep 33a F7, F8: a stripped C++ program's catch in its .cold part, a stripped static
  // function's setjmp, ran on top of every frame the throw or longjmp left, __cxa_throw's).)
  const Function& to = functions_[f];
  const bool middle =
      to.address != 0
          ? ip != to.address && frames_.back().renamed_from != f
          : !to.from_address && frames_.back().renamed_from != f &&
                ((base_ && AfterSomeCall(ip)) ||  // (chunk mode: B's frame's setjmp, maybe)
                 std::any_of(frames_.begin(), frames_.end(),
                             [ip](const Frame& fr) { return fr.setjmp_return == ip; }) ||
                 landing_pads_.IsPad(*image_, ip));
  if (beyond_ != 0) {
    // Calls beyond kMaxFrames got no frame, so the frame on top is not the running function's:
    // only a longjmp to where a frame called setjmp ends them all (a runaway recursion left by
    // longjmp; sweep 30c F3: everything after stayed 65,536 deep), not a cold part's jump back
    // into its function (review: it ended them, and their returns popped real frames).
    if (!middle || functions_[f].active == 0 ||
        std::none_of(frames_.begin(), frames_.end(),
                     [ip](const Frame& fr) { return fr.setjmp_return == ip; })) {
      return;
    }
    beyond_ = 0;
  }
  if (frames_.back().function == f) return;
  if (middle) {
    // Into a frame below (a longjmp, an exception): the frames above it were left.
    const size_t target = LandingFrame(f, ip);
    if (failed_) return;
    if (target < frames_.size()) {
      while (frames_.size() > target + 1) Pop(/*at_end=*/false, /*by_return=*/false);
      // (A landing pad in the function's cold part, f.cold: the frame is renamed to it below.)
      if (RunsIn(frames_.back(), f)) return;
    }
    if (base_ && to.address == 0) {
      // Chunk mode: code without a symbol entered from another function, no frame of C landed
      // in: a longjmp to a setjmp that B's frame called (through the GOT, -fno-plt, as
      // AfterCallOf cannot tell; a review), or no landing: the merge cannot check which.
      failed_ = true;
      return;
    }
    if (base_ && functions_[f].active == 0)
      absent_.push_back({f, epoch_});  // chunk mode: as if f had no frame in B
  }
  if (chunk_) Touch(f);
  Frame& top = frames_.back();
  const uint32_t from = top.function;
  Function& old = functions_[from];
  if (--old.active == 0) old.inclusive += totals_.instructions - old.active_since;
  Function& fn = functions_[f];
  if (fn.active++ == 0) fn.active_since = totals_.instructions;
  // Entered at its first instruction: a call of it that went on in the caller's frame (a tail
  // call, a PLT entry's jump to its function), counted as callgrind counts it (sweep 30b F3:
  // every library function called through its PLT entry had 0 calls, memcmp@plt all of them).
  top.entered = ip == fn.address &&
                (!fn.label || old.address < fn.within_start || old.address >= fn.within_end);
  if (top.entered && counting_) ++fn.calls;
  top.function = f;
  top.renamed_from = from;
  if (listener_ != nullptr) listener_->OnRename(from, top);
}

bool CallStack::RunsIn(const Frame& frame, uint32_t f) const {
  if (frame.function == f) return true;
  const Function& fn = functions_[f];
  if (fn.address != 0 || fn.from_address) return false;
  const Function& runs = functions_[frame.function];
  return runs.from_address && runs.image == fn.image && runs.file == fn.file;
}

size_t CallStack::LandingFrame(uint32_t f, uint64_t ip) {
  const size_t n = frames_.size();
  // (Code without a symbol runs in a frame named by its call target: RunsIn.)
  if (functions_[f].active != 0 || functions_[f].address == 0) {
    // A longjmp to where setjmp returned lands in the frame that called it (sweep 30c F2: in a
    // recursive function, the innermost frame of it was taken, the frames between left open,
    // 7 more per longjmp of an interpreter's error loop): the innermost one no longjmp landed in
    // since its setjmp (sweep 33a F1: a TRY/FINALLY chain's rethrow to the level below, and C
    // cleanup handlers under pthread_exit, each longjmp to the next frame's setjmp at the same
    // address, all landed in the innermost: "main;level x 5;finally_" for every level).
    for (size_t i = n; i-- > 0;) {
      if (frames_[i].setjmp_return == ip && !frames_[i].setjmp_landed) {
        if (!RunsIn(frames_[i], f)) break;
        frames_[i].setjmp_landed = true;
        return i;
      }
    }
    if (base_ && AfterCallOf(ip, &Function::returns_twice)) {
      failed_ = true;  // chunk mode: the frame that called setjmp may be B's
      return n;
    }
    // Else where one landed before (setjmp once, longjmp again and again).
    for (size_t i = n; i-- > 0;) {
      if (frames_[i].setjmp_return == ip) {
        if (RunsIn(frames_[i], f)) return i;
        break;
      }
    }
  }
  // An exception lands in the innermost frame whose call's call site has that landing pad, as
  // the personality routine found it (sweep 30c F2: caught in parse(3) of a recursion 10 deep,
  // the innermost parse frame was taken; destructors run at each level the same). A pad may
  // be in the function's cold part (f.cold), not the frame's function.
  if (landing_pads_.IsPad(*image_, ip)) {
    for (size_t i = n; i-- > 0;) {
      if (landing_pads_.PadOf(*image_, frames_[i].return_address) != ip) continue;
      if (i > 0) return i - 1;
      if (base_) failed_ = true;  // chunk mode: the frame is B's top
      return n;
    }
    if (base_) {
      failed_ = true;  // chunk mode: the frame may be B's
      return n;
    }
  }
  // Else the innermost frame of f (an exception whose call sites are not known).
  if (functions_[f].active == 0) return n;
  for (size_t i = n; i-- > 0;) {
    if (frames_[i].function == f) return i;
  }
  return n;
}

bool CallStack::Scheduled() {
  if (frames_.size() >= 2) return functions_[frames_[frames_.size() - 2].function].schedules;
  if (base_) failed_ = true;  // chunk mode: the caller's frame may be B's
  return false;
}

bool CallStack::InGoGogo() {
  // runtime.gogo (before Go 1.17), or gogo jumped to from runtime.gogo.abi0: not a C function
  // of that name (a review: one that returned or tail-called ended every frame).
  if (functions_[current_].name != "gogo") return true;
  if (frames_.empty()) {
    if (base_) failed_ = true;  // chunk mode: the frame is B's
    return false;
  }
  const uint32_t from = frames_.back().renamed_from;
  return from != Frame::kNone && functions_[from].name.starts_with("runtime.gogo");
}

bool CallStack::ContextReturn(uint64_t target) {
  // To where getcontext returned (setcontext as a longjmp): the frames above the one that
  // called it are left, also from a deeper function (a review: they stayed, growing each round).
  for (size_t i = frames_.size(); i-- > 0;) {
    if (frames_[i].setjmp_return != target) continue;
    while (frames_.size() > i + 1) Pop(/*at_end=*/false, /*by_return=*/false);
    return true;
  }
  if (AfterCallOf(target, &Function::returns_twice)) {
    if (base_) failed_ = true;  // chunk mode: the frame that called it may be B's
    return false;               // (else its frame is gone: an ordinary return, as before)
  }
  // Chunk mode: a frame of B may have called getcontext there (through a pointer, the GOT),
  // unless it is where a swapcontext call returns (a coroutine resumed) or a function's entry
  // (a makecontext one started).
  if (base_ && !AfterCallOf(target, &Function::parks)) {
    const int s = image_->SymbolAt(target);  // (not FunctionAt: it may make B's top function)
    if (s < 0 || image_->symbols()[s].begin != target) {
      failed_ = true;
      return true;
    }
  }
  LeaveStack();
  return true;
}

void CallStack::LeaveStack() {
  signals_.clear();
  beyond_ = 0;
  while (!frames_.empty()) Pop(true);
  if (base_) {
    Underflow(ChunkOp::kClear, 0);
    base_ = false;
  }
}

bool CallStack::AfterSomeCall(uint64_t ip) {
  uint8_t b[7];
  if (ip < sizeof(b) || image_->Read(ip - sizeof(b), b, sizeof(b)) != sizeof(b)) return false;
  // b[7 - n] begins the n bytes before ip. ModRM of FF /2: reg field 2.
  auto call_modrm = [](uint8_t modrm, int mod) {
    return (modrm & 0x38) == 0x10 && modrm >> 6 == mod;
  };
  return b[2] == 0xe8 ||                           // call rel32
         (b[1] == 0xff && b[2] == 0x15) ||         // call [rip + disp32]
         (b[5] == 0xff && call_modrm(b[6], 3)) ||  // call reg
         (b[5] == 0xff && call_modrm(b[6], 0) && (b[6] & 7) != 4 && (b[6] & 7) != 5) ||  // [reg]
         (b[4] == 0xff && call_modrm(b[5], 1) && (b[5] & 7) != 4) ||  // call [reg + disp8]
         (b[1] == 0xff && call_modrm(b[2], 2) && (b[2] & 7) != 4);    // call [reg + disp32]
}

bool CallStack::AfterCallOf(uint64_t ip, bool Function::*is) {
  uint8_t call[5];
  if (ip < sizeof(call) || image_->Read(ip - sizeof(call), call, sizeof(call)) != sizeof(call) ||
      call[0] != 0xe8) {
    return false;
  }
  int32_t rel = 0;
  std::memcpy(&rel, call + 1, sizeof(rel));
  return functions_[CallTarget(ip + static_cast<int64_t>(rel))].*is;
}

void CallStack::Pop(bool at_end, bool by_return) {
  Frame frame = frames_.back();
  frames_.pop_back();
  // A handler's frame left without returning (siglongjmp, an exception): no rt_sigreturn comes.
  if (frame.signal && !by_return && !signals_.empty() && signals_.back().depth == frames_.size()) {
    signals_.pop_back();
  }
  Function& fn = functions_[frame.function];
  if (--fn.active == 0) fn.inclusive += totals_.instructions - fn.active_since;
  if (!at_end && by_return && !frame.implicit && counting_) ++totals_.returns;
  if (listener_ != nullptr) listener_->OnExit(frame, at_end);
}

// A return to `target`: unwind to the frame that expects it, if one does.
bool CallStack::ReturnMatched(uint64_t target, bool must) {
  for (size_t i = frames_.size(); i-- > 0;) {
    if (frames_[i].return_address == target) {
      while (frames_.size() > i) Pop(false);
      return true;
    }
  }
  if (!base_) return false;
  // Chunk mode: a frame of B may expect it. A return goes there (checked by the merge); tracing
  // enabled there pops what it finds, which leaves C as it is only when C is empty, so over
  // frames of C the merge checks that none of B does (after a syscall, say: nothing returns
  // there).
  if (must) {
    // With C empty, the merge also returns as ReturnUnmatched would when no frame expects it.
    const int64_t returning = !frames_.empty() ? -1 : current_ < 0 ? -2 : current_;
    while (!frames_.empty()) Pop(false);
    Underflow(ChunkOp::kReturn, target, returning);
    return true;
  }
  if (frames_.empty()) {
    Underflow(ChunkOp::kReturnIfFound, target);
  } else {
    if (unexpected_.empty() || unexpected_.back().target != target ||
        unexpected_.back().epoch != epoch_) {
      unexpected_.push_back({target, epoch_});  // checked by the merge (CheckChunk)
      if (unexpected_.size() > kMaxUnexpected) failed_ = true;
    }
  }
  return false;
}

void CallStack::EnabledInto(uint64_t ip) {
  if (image_ == nullptr || beyond_ != 0 || failed_) return;
  if (frames_.empty()) {
    // Chunk mode: into the middle of a function, which may have a frame in B (not modelled),
    // or at its entry, which has a frame of its own where B has frames (below).
    if (base_ && functions_[FunctionAt(ip)].address != 0) failed_ = true;
    return;
  }
  const uint32_t f = FunctionAt(ip);
  const Function& fn = functions_[f];
  if (fn.address == 0 || frames_.back().function == f) return;
  if (ip == fn.address && !fn.label) {
    // An entry: the untraced code called it (a callback: qsort's comparator; recursion across
    // the regions' edge): a frame of its own, as gdb's stack has, no call seen (sweep 27 T4: it
    // ran in the untraced callee's frame, and its return out closed its function's outermost
    // frame, with every frame above it).
    Enter(f, 0, /*implicit=*/true, /*signal=*/false);
    return;
  }
  const size_t target = LandingFrame(f, ip);
  if (failed_) return;
  if (target < frames_.size()) {
    while (frames_.size() > target + 1) Pop(/*at_end=*/false, /*by_return=*/false);
  } else if (base_) {
    failed_ = true;  // chunk mode: a frame of B may run it
  }
}

void CallStack::Return(uint64_t target) {
  return_matched_ = false;
  // swapcontext and setcontext return on the stack they load: to where another context called
  // swapcontext, or a makecontext function's entry; not to a frame of this stack (sweep 30c F5),
  // unless to where getcontext returned (a longjmp, as such).
  if (current_ >= 0 && functions_[current_].switches_context && ContextReturn(target)) return;
  if (beyond_ != 0) {  // the return of a call given no frame (the innermost one)
    --beyond_;
    if (counting_) ++totals_.returns;
    return;
  }
  return_matched_ = ReturnMatched(target, /*must=*/true);
  if (!return_matched_ && !RetpolineReturn(target) && !ResolverReturn(target)) ReturnUnmatched();
}

bool CallStack::IsRetImmReturn(uint64_t ret_ip) const {
  uint8_t b = 0;
  return image_->Read(ret_ip, &b, 1) == 1 && b == 0xc2;
}

// i386 lazy binding: the PLT entry jumps to ld.so's _dl_runtime_resolve, which enters the
// function it resolved by returning to it (`mov %eax, (%esp); mov 4(%esp), %eax; ret $0xc`;
// x86-64's jumps: jmp *%r11) (sweep 37b H1: every imported function had 0 calls at its first
// call, which ran in the caller's frame, the call's frame popped). A `ret $imm16` that no frame
// expects, to a function's entry, is such a jump: the frame of the call that reached the PLT
// entry goes on as the target's, entered by a tail call as Jump counts it. Such a block is not
// in a run (MemoOf). Chunk mode leaves it to the merge.
bool CallStack::ResolverReturn(uint64_t target) {
  if (frames_.empty() || beyond_ != 0 || !IsRetImmReturn(return_ip_)) return false;
  const uint32_t f = CallTarget(target);
  if (functions_[f].address != target) return false;
  if (chunk_) {
    failed_ = true;
    return false;
  }
  Jump(f, target);
  current_ = f;
  return true;
}

bool CallStack::IsRetpolineReturn(uint64_t ret_ip) const {
  // mov %REG, (%rsp): REX.W (R for r8-r15), 89, ModRM mod 00 r/m 100 (SIB), SIB 24 ([rsp]).
  uint8_t b[4];
  return ret_ip >= 4 && image_->Read(ret_ip - 4, b, sizeof(b)) == sizeof(b) &&
         (b[0] == 0x48 || b[0] == 0x4c) && b[1] == 0x89 && (b[2] & 0xc7) == 0x04 && b[3] == 0x24;
}

// A retpoline's return (gcc -mindirect-branch=thunk or thunk-inline, clang -mretpoline): the
// thunk (`call 1f; 2: pause; lfence; jmp 2b; 1: mov %REG, (%rsp); ret`) makes an indirect jump
// to `target` by returning there, for the call that reached it (sweep 36a F3: no frame expected
// that return, so the target was never entered: every function called through a retpoline had
// 0 calls, and the thunk's call into its own middle counted a call of it, or of the caller with
// thunk-inline). The inner call's frame goes, uncounted; the frame of the call that reached the
// thunk (uncounted too when it was the caller's inlined one, into its own middle) goes on as
// the target's, entered by a tail call as Jump counts it.
bool CallStack::RetpolineReturn(uint64_t target) {
  if (frames_.size() < 2 || beyond_ != 0 || !IsRetpolineReturn(return_ip_)) return false;
  if (chunk_) {
    failed_ = true;  // (uncounting a call counted in another chunk: the merge decodes it)
    return false;
  }
  // (Not below 0: a call made before a --time window, not counted, taken back in it.)
  auto uncount = [this](const Frame& frame) {
    if (frame.implicit || !counting_ || functions_[frame.function].calls == 0) return;
    --functions_[frame.function].calls;
    --totals_.calls;
    if (listener_ != nullptr) listener_->OnUncall(frame);
  };
  uncount(frames_.back());
  Pop(/*at_end=*/false, /*by_return=*/false);
  if (frames_.size() >= 2 && frames_.back().function == frames_[frames_.size() - 2].function) {
    uncount(frames_.back());
  }
  const uint32_t f = CallTarget(target);
  Jump(f, target);
  current_ = f;
  return true;
}

// After a return to the frame that expected it, at `ip`, in `f`: where the call was its
// function's last instruction (ld.so's _start calling _dl_start, then going on in
// _dl_start_user), the flow goes on into the next function in sequence, which names the frame
// as any fall-through does. Chunk mode with no frame of C: B's top, which the chunk cannot
// rename (failed).
void CallStack::FellInto(uint32_t f, uint64_t ip) {
  const Function& fn = functions_[f];
  if (!return_matched_ || fn.address != ip || fn.from_address) return;
  if (frames_.empty()) {
    if (base_) failed_ = true;
    return;
  }
  if (frames_.back().function != f) Jump(f, ip);
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
  if (base_) {
    failed_ = true;  // chunk mode: a frame of B may run it
    return;
  }
  if (!frames_.empty() && frames_.back().implicit) Pop(false);
}

// Out of line: the serial model's Count stays small.
__attribute__((noinline)) void CallStack::Touch(uint32_t f) {
  if (epoch_of_[f] == epoch_) return;
  epoch_of_[f] = epoch_;
  entries_.push_back({f, epoch_, functions_[f].inclusive});
}

void CallStack::Underflow(ChunkOp::Kind kind, uint64_t target, int64_t returning) {
  if (!signals_.empty()) failed_ = true;  // a handler's frames below C's: not modelled
  ops_.push_back({kind, target, totals_.instructions, returning, tsc_, timed_});
  ++epoch_;
}

void CallStack::BeginChunk() {
  const bool fresh = functions_.empty() && frames_.empty() && totals_.instructions == 0 &&
                     !pending_call_ && !pending_return_ && !flowing_ && current_ < 0;
  chunk_ = true;
  base_ = !fresh;
  failed_ = false;
  frames_.clear();
  for (Function& fn : functions_) {
    fn.self = fn.inclusive = fn.calls = 0;
    fn.active = 0;
    fn.active_since = 0;
  }
  totals_ = {};
  beyond_ = 0;
  epoch_ = 0;
  std::fill(epoch_of_.begin(), epoch_of_.end(), 0);
  entries_.clear();
  ops_.clear();
  nonempty_epoch_ = -1;
  absent_.clear();
  unexpected_.clear();
  base_signal_entries_.clear();
  no_base_signal_ = false;
  max_depth_ = 0;
  head_functions_ = functions_.size();
  // A function the head may have named by its own stack (code without a symbol: named by an
  // address, or the file) is, at the chunk's start, what B's top names (checked by the merge):
  // the code after it, named by the stack, runs in the same function as far as Step can tell.
  if (base_ && current_ >= 0 &&
      (functions_[current_].from_address || keys_[current_].kind == FunctionKey::kUnknown)) {
    current_ = BaseTop(functions_[current_].file);
  }
  start_ = {!base_,          pending_call_,           pending_return_, flowing_,
            async_disabled_, left_by_call_,           disabled_,       disabled_far_,
            timed_,          pending_return_address_, current_,        timed_ ? tsc_ : 0};
  signals_.clear();  // B's
}

// This model's function for `key`, or -1 (none made yet).
int64_t CallStack::FindFunction(const FunctionKey& key) const {
  switch (key.kind) {
    case FunctionKey::kSymbol:
      if (auto it = symbol_function_.find({image_, key.value}); it != symbol_function_.end()) {
        return it->second;
      }
      return -1;
    case FunctionKey::kUnknown:
      if (auto it = unknown_function_.find({image_, key.value}); it != unknown_function_.end()) {
        return it->second;
      }
      return -1;
    case FunctionKey::kAddress:
      if (auto it = address_function_.find({image_, static_cast<uint64_t>(key.value)});
          it != address_function_.end()) {
        return it->second;
      }
      return -1;
    case FunctionKey::kUntraced:
      return untraced_;
    case FunctionKey::kBaseTop:  // another chunk's (CheckChunk and ApplyChunk resolve them)
      return -1;
  }
  return -1;
}

uint32_t CallStack::FunctionFor(const FunctionKey& key) {
  switch (key.kind) {
    case FunctionKey::kSymbol:
      return SymbolFunction(static_cast<int>(key.value));
    case FunctionKey::kUnknown:
      return Unknown(static_cast<int>(key.value));
    case FunctionKey::kAddress:
      return AddressFunction(static_cast<uint64_t>(key.value));
    case FunctionKey::kUntraced:
      break;
    case FunctionKey::kBaseTop:  // (ApplyChunk resolves a chunk's first) Unnamed's with no frame
      return Unknown(static_cast<int32_t>(static_cast<uint32_t>(key.value)));
  }
  return Untraced();
}

bool CallStack::CheckChunk(const CallStack& chunk, ChunkPlan& plan) const {
  if (!chunk.chunk_ || chunk.failed_ || chunk_ || beyond_ != 0) return false;
  const Start& s = chunk.start_;
  if (s.empty_base && !frames_.empty()) return false;
  // The chunk's frames and returns carry the time its head left (a chunk with no time in its
  // head has none until told).
  if (timed_ != s.timed || (timed_ && tsc_ != s.tsc)) return false;
  if (pending_call_ != s.pending_call || pending_return_ != s.pending_return ||
      flowing_ != s.flowing || async_disabled_ != s.async_disabled ||
      left_by_call_ != s.left_by_call || disabled_ != s.disabled ||
      disabled_far_ != s.disabled_far ||
      (pending_call_ && pending_return_address_ != s.pending_return_address)) {
    return false;
  }
  if ((current_ < 0) != (s.current < 0)) return false;
  if (current_ >= 0) {
    const FunctionKey& key = chunk.keys_[s.current];
    if (key.kind == FunctionKey::kBaseTop ? BaseTopFunction(key, frames_.size()) != current_
                                          : !(keys_[current_] == key)) {
      return false;
    }
  }
  if (frames_.size() + chunk.max_depth_ > kMaxFrames) return false;
  plan.start_depth = frames_.size();
  plan.tops.clear();
  size_t top = frames_.size();
  for (const ChunkOp& op : chunk.ops_) {
    if (op.kind == ChunkOp::kClear) {
      top = 0;
    } else {
      size_t i = top;
      while (i > 0 && frames_[i - 1].return_address != op.target) --i;
      if (i > 0) {
        top = i - 1;
      } else if (op.kind == ChunkOp::kReturn) {
        if (op.returning == -1) return false;  // the serial model would have kept C's frames
        // ReturnUnmatched: the returning function leaves through its topmost frame, else an
        // implicit frame on top is left.
        int64_t f = -1;
        if (op.returning >= 0) {
          const FunctionKey& key = chunk.keys_[op.returning];
          f = key.kind == FunctionKey::kBaseTop
                  ? BaseTopFunction(key, plan.DepthIn(BaseTopEpoch(key)))
                  : FindFunction(key);
        }
        i = top;
        while (i > 0 && (f < 0 || frames_[i - 1].function != f)) --i;
        if (i > 0) {
          top = i - 1;
        } else if (top > 0 && frames_[top - 1].implicit) {
          --top;
        }
      }
    }
    plan.tops.push_back(top);
  }
  auto depth_in = [&](uint32_t epoch) { return plan.DepthIn(epoch); };
  if (chunk.nonempty_epoch_ >= 0 && depth_in(static_cast<uint32_t>(chunk.nonempty_epoch_)) == 0) {
    return false;
  }
  for (const Absent& a : chunk.absent_) {
    const int64_t f = FindFunction(chunk.keys_[a.function]);
    if (f < 0) continue;
    for (size_t i = 0; i < depth_in(a.epoch); ++i) {
      if (frames_[i].function == f) return false;
    }
  }
  if (!signals_.empty() &&
      (chunk.no_base_signal_ ||
       std::any_of(chunk.base_signal_entries_.begin(), chunk.base_signal_entries_.end(),
                   [&](uint64_t ip) { return signals_.back().Resumes(ip); }))) {
    return false;
  }
  for (const Unexpected& u : chunk.unexpected_) {
    for (size_t i = 0; i < depth_in(u.epoch); ++i) {
      if (frames_[i].return_address == u.target) return false;
    }
  }
  return true;
}

std::vector<uint32_t> CallStack::ApplyChunk(const CallStack& chunk, const ChunkPlan& plan) {
  const uint64_t t0 = totals_.instructions;
  const uint64_t n = chunk.totals_.instructions;
  std::vector<uint32_t> map(chunk.functions_.size());
  // This model's function -> the chunk's. Code named by B's top (kBaseTop) names a function the
  // chunk may have under its own key too, or under another epoch's: such functions' counts add
  // up, as their instructions are apart (one counts only with no frame of C, and never has one;
  // the other's instructions, its own and under its frames of C, come with frames of C or
  // while it runs).
  absl::flat_hash_map<uint32_t, uint32_t> local;
  std::vector<std::pair<uint32_t, uint32_t>> more;  // (this model's, the chunk's) after the first
  // A function of the chunk with nothing counted (made by its head, which may have named code
  // without a symbol otherwise than this model) is made here only where the chunk still uses it.
  std::vector<bool> used(map.size());
  for (uint32_t i = 0; i < map.size(); ++i) used[i] = !Unused(chunk.functions_[i]);
  if (chunk.current_ >= 0) used[chunk.current_] = true;
  for (const Frame& frame : chunk.frames_) {
    used[frame.function] = true;
    if (frame.renamed_from != Frame::kNone) used[frame.renamed_from] = true;
  }
  for (uint32_t i = 0; i < map.size(); ++i) {
    const FunctionKey& key = chunk.keys_[i];
    if (!used[i]) {
      const int64_t f = key.kind == FunctionKey::kBaseTop ? -1 : FindFunction(key);
      map[i] = f >= 0 ? static_cast<uint32_t>(f) : kNoFunction;
      continue;
    }
    if (key.kind == FunctionKey::kBaseTop) {
      const int64_t f = BaseTopFunction(key, plan.DepthIn(BaseTopEpoch(key)));
      map[i] = f >= 0 ? static_cast<uint32_t>(f) : FunctionFor(key);
    } else {
      map[i] = FunctionFor(key);
    }
    if (!local.emplace(map[i], i).second) more.emplace_back(map[i], i);
  }
  // The chunk's inclusive count of function i at its end, and after op u (C was empty then).
  auto at_end = [&](uint32_t i) {
    const Function& fn = chunk.functions_[i];
    return fn.inclusive + (fn.active > 0 ? n - fn.active_since : 0);
  };
  std::vector<uint32_t> order(chunk.entries_.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return chunk.entries_[a].function < chunk.entries_[b].function;
  });
  auto after_op = [&](uint32_t i, size_t u) {
    auto it = std::lower_bound(order.begin(), order.end(), std::pair<uint32_t, uint32_t>(i, u + 1),
                               [&](uint32_t k, const std::pair<uint32_t, uint32_t>& key) {
                                 const EpochEntry& e = chunk.entries_[k];
                                 return std::pair(e.function, e.epoch) < key;
                               });
    if (it != order.end() && chunk.entries_[*it].function == i)
      return chunk.entries_[*it].inclusive;
    return at_end(i);
  };
  // Every function with a frame in B (S, the stack at the chunk's start) or a count in the
  // chunk: its inclusive count closed at t0, its frames recounted at the end.
  absl::flat_hash_map<uint32_t, size_t> lowest;  // function -> its lowest frame in S
  for (size_t i = 0; i < plan.start_depth; ++i) lowest.try_emplace(frames_[i].function, i);
  auto close = [&](uint32_t f) {
    Function& fn = functions_[f];
    if (fn.active > 0) fn.inclusive += t0 - fn.active_since;
    fn.active = 0;
  };
  for (const auto& [f, at] : lowest) close(f);
  for (uint32_t i = 0; i < map.size(); ++i) {
    if (!used[i]) continue;
    close(map[i]);
    Function& fn = functions_[map[i]];
    const Function& c = chunk.functions_[i];
    fn.self += c.self;
    fn.calls += c.calls;
    fn.inclusive += at_end(i);
  }
  // While a function had a frame in B, it ran the chunk's every instruction: until the op that
  // popped its lowest frame (tops fall), else to the end.
  for (const auto& [f, at] : lowest) {
    const auto u =
        static_cast<size_t>(std::partition_point(plan.tops.begin(), plan.tops.end(),
                                                 [at = at](size_t t) { return t > at; }) -
                            plan.tops.begin());
    const uint64_t until = u < plan.tops.size() ? chunk.ops_[u].at : n;
    uint64_t counted = 0;
    auto count = [&](uint32_t i) { counted += u < plan.tops.size() ? after_op(i, u) : at_end(i); };
    if (const auto it = local.find(f); it != local.end()) count(it->second);
    for (const auto& [g, i] : more) {
      if (g == f) count(i);
    }
    functions_[f].inclusive += until - counted;
  }
  // B's frames popped by returns, then C's frames on top of what is left.
  size_t top = plan.start_depth;
  for (size_t u = 0; u < plan.tops.size(); ++u) {
    if (chunk.ops_[u].kind != ChunkOp::kClear) {
      for (size_t i = plan.tops[u]; i < top; ++i) totals_.returns += frames_[i].implicit ? 0 : 1;
    }
    top = plan.tops[u];
  }
  frames_.resize(top);
  for (Frame frame : chunk.frames_) {
    frame.function = map[frame.function];
    if (frame.renamed_from != Frame::kNone) frame.renamed_from = map[frame.renamed_from];
    frame.entry_count += t0;
    frames_.push_back(frame);
  }
  for (const Frame& frame : frames_) {
    Function& fn = functions_[frame.function];
    if (fn.active++ == 0) fn.active_since = t0 + n;
  }
  totals_.instructions += n;
  totals_.calls += chunk.totals_.calls;
  totals_.returns += chunk.totals_.returns;
  totals_.dropped_frames += chunk.totals_.dropped_frames;
  pending_call_ = chunk.pending_call_;
  pending_return_ = chunk.pending_return_;
  return_ip_ = chunk.return_ip_;
  flowing_ = chunk.flowing_;
  async_disabled_ = chunk.async_disabled_;
  left_by_call_ = chunk.left_by_call_;
  disabled_ = chunk.disabled_;
  disabled_far_ = chunk.disabled_far_;
  disabled_at_ = chunk.disabled_at_;
  disabled_at_syscall_ = chunk.disabled_at_syscall_;
  syscall_at_ = chunk.syscall_at_;
  // The serial model forgot its handlers where the chunk cleared the stack (an overflow, an
  // error, another stream).
  for (const ChunkOp& op : chunk.ops_) {
    if (op.kind == ChunkOp::kClear) signals_.clear();
  }
  for (Signal signal : chunk.signals_) {  // C's, above what is left of B (no op after them)
    signal.depth += top;
    signals_.push_back(signal);
  }
  pending_return_address_ = chunk.pending_return_address_;
  timed_ = chunk.timed_;
  tsc_ = chunk.tsc_;
  current_ = chunk.current_ < 0 ? -1 : map[chunk.current_];
  beyond_ = chunk.beyond_;
  return map;
}

}  // namespace ptkit::decoder
