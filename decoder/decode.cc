#include "decoder/decode.h"

#include <Zydis/Zydis.h>
#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <span>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "decoder/decode_bounds.h"
#include "decoder/disassembler.h"
#include "decoder/fast_block_decoder.h"
#include "decoder/ipt_handles.h"
#include "ptkit/errno_text.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

constexpr uint32_t kBlocksPerProgress = 4096;
constexpr uint32_t kInsnsPerProgress = 65536;
// The instruction loop asks the decoder's trace offset (for kErrorLoop) once per this many.
constexpr uint32_t kInsnsPerCheck = 64;

// decode_bounds.h
std::atomic<uint64_t> insns_without_progress{kMaxInsnsWithoutProgress};
std::atomic<uint64_t> bts_walk{kMaxBtsWalk};

// libipt's block decoder (2.0, pt_blk_proceed_no_event_cached) recurses once per direct branch
// it follows through its block cache, until the block's 16-bit instruction count would
// overflow: code that loops through direct branches (`jmp .`) nests 65,535 frames of 208 bytes
// (13.6 MB, measured with gdb), more than the main thread's 8 MB stack. The block loop runs on
// a thread with this much stack (touched only as deep as the recursion goes).
constexpr size_t kBlockLoopStack = size_t{32} << 20;

// Runs `fn` on a new thread with a stack of `stack_bytes` and returns its status; an exception
// it throws is rethrown here. Errors: kResourceExhausted when the thread cannot start.
absl::Status RunWithStack(size_t stack_bytes, absl::FunctionRef<absl::Status()> fn) {
  struct Call {
    absl::FunctionRef<absl::Status()> fn;
    absl::Status status;
    std::exception_ptr exception;
  } call{fn, absl::OkStatus(), nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  int err = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        auto* c = static_cast<Call*>(arg);
        try {
          c->status = c->fn();
        } catch (...) {
          c->exception = std::current_exception();
        }
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot start the block decoder's thread (",
                                                     stack_bytes >> 20,
                                                     " MiB stack): ", ErrnoText(err)));
  }
  pthread_join(thread, nullptr);
  if (call.exception) std::rethrow_exception(call.exception);
  return call.status;
}

// Counts the instructions decoded since the decoder last read further into the trace, for
// kErrorLoop.
class ProgressWatch {
 public:
  // `insns` more were decoded with the decoder at trace `offset`. False past the bound.
  bool Add(uint64_t offset, uint64_t insns) {
    if (offset != offset_) {
      offset_ = offset;
      insns_ = 0;
    }
    insns_ += insns;
    return insns_ <= bound_;
  }
  // How many more Add may take at the last offset and stay within the bound.
  uint64_t room() const { return insns_ <= bound_ ? bound_ - insns_ : 0; }

 private:
  const uint64_t bound_ = insns_without_progress.load(std::memory_order_relaxed);
  uint64_t offset_ = ~0ull;
  uint64_t insns_ = 0;
};

// Shared error bookkeeping for both decoder loops.
class ErrorReporter {
 public:
  ErrorReporter(const ProgramImage& image, Sink& sink, DecodeTotals& totals, uint64_t offset_base)
      : image_(image), sink_(sink), totals_(totals), offset_base_(offset_base) {}

  void Report(int status, uint64_t offset, uint64_t ip, bool during_sync) {
    DecodeError error;
    error.code = -status;
    error.offset = offset_base_ + offset;
    error.ip = ip;
    error.during_sync = during_sync;
    if (error.code == pte_nomap) {
      error.gap = image_.HoleAround(ip);
      error.missing_file = image_.MissingAt(ip);
      ++totals_.gaps;
    }
    ++totals_.errors;
    ++totals_.errors_by_code[error.code];
    sink_.OnError(error);
  }

 private:
  const ProgramImage& image_;
  Sink& sink_;
  DecodeTotals& totals_;
  uint64_t offset_base_;
};

// Follows the decoder's time and swaps the image when the switcher says so. `Dec` has
// Time(uint64_t*) and SetImage(const ProgramImage&).
template <typename Dec>
class TimeWatch {
 public:
  TimeWatch(Dec& dec, ImageSwitcher* switcher, Sink& sink)
      : dec_(dec),
        switcher_(switcher),
        sink_(sink),
        active_(switcher != nullptr || sink.wants_time()) {}
  void Check() {
    if (!active_) return;
    uint64_t tsc = 0;
    if (dec_.Time(&tsc) < 0) return;  // no timing packet yet
    Check(tsc);
  }
  void Check(uint64_t tsc) {
    if (!active_ || tsc == last_) return;
    last_ = tsc;
    if (switcher_ != nullptr) {
      if (const ProgramImage* image = switcher_->ImageAt(tsc)) dec_.SetImage(*image);
    }
    sink_.OnTime(tsc);
  }

 private:
  Dec& dec_;
  ImageSwitcher* switcher_;
  Sink& sink_;
  bool active_;
  uint64_t last_ = ~0ull;
};

// Gives the sink the events pending after a decoder call that returned `status`; returns the
// status of the last Event call (`status` when none was pending).
template <typename Dec>
int DeliverEvents(Dec& dec, int status, TimeWatch<Dec>& time, Sink& sink, DecodeTotals& totals,
                  uint64_t offset_base, bool positions) {
  while (status & pts_event_pending) {
    pt_event event;
    status = dec.Event(&event);
    if (status < 0) break;
    ++totals.events;
    if (positions) {
      uint64_t offset = 0;
      sink.OnPosition(offset_base + (dec.GetOffset(&offset) < 0 ? 0 : offset));
    }
    if (event.has_tsc) time.Check(event.tsc);
    sink.OnEvent(event);
  }
  return status;
}

// The decoder's trace offset, 0 when it has none. Inlined: the loops ask it per block.
template <typename Dec>
[[gnu::always_inline]] inline uint64_t OffsetOf(const Dec& dec) {
  uint64_t offset = 0;
  return dec.GetOffset(&offset) < 0 ? 0 : offset;
}

// The skeleton of every decoder loop: sync forward (a failed sync is reported, and decoding
// stops where a sync makes no progress), tell the sink of each sync and of the events pending
// after each decoder call, and report the error that ends a run until the next sync. `next()`
// is the loop's own part, the decoder call after the events and what the sink gets from it; it
// returns that call's status. `error_ip(status)` is the IP the error report names; `synced()`
// starts a run.
template <typename Dec, typename Synced, typename Next, typename ErrorIp>
void SyncLoop(Dec& dec, TimeWatch<Dec>& time, ErrorReporter& errors, Sink& sink,
              DecodeTotals& totals, uint64_t offset_base, Synced synced, Next next,
              ErrorIp error_ip) {
  const bool positions = sink.wants_positions();
  uint64_t sync = 0;  // the offset of the last failed sync
  for (;;) {
    int status = dec.SyncForward();
    if (status < 0) {
      if (status == -pte_eos) break;
      const uint64_t offset = OffsetOf(dec);
      errors.Report(status, offset, 0, /*during_sync=*/true);
      if (offset <= sync) break;  // no progress: we never will
      sync = offset;
      continue;
    }
    synced();
    uint64_t sync_offset = 0;
    dec.GetSyncOffset(&sync_offset);
    ++totals.syncs;
    sink.OnSync(offset_base + sync_offset);
    time.Check();
    for (;;) {
      if (status & pts_event_pending) {
        status = DeliverEvents(dec, status, time, sink, totals, offset_base, positions);
      }
      if (status < 0) break;
      if (status & pts_eos) {
        status = -pte_eos;
        break;
      }
      status = next();
      if (status < 0) break;
    }
    if (status == -pte_eos) break;
    if (status == 0) status = -pte_internal;
    errors.Report(status, OffsetOf(dec), error_ip(status), /*during_sync=*/false);
  }
}

// libipt's block decoder under the calls BlockLoop makes (those of FastBlockDecoder).
class LibiptBlockDecoder {
 public:
  explicit LibiptBlockDecoder(pt_block_decoder* dec) : dec_(dec) {}
  int SyncForward() { return pt_blk_sync_forward(dec_); }
  int Next(pt_block* block) { return pt_blk_next(dec_, block, sizeof(*block)); }
  bool walked() const { return false; }
  BlockMemo& memo() { return memo_; }               // never walked: unused
  const WalkedRun* run() const { return nullptr; }  // never a run
  void set_run_room(uint64_t) {}
  void set_ahead_limit(uint64_t) {}
  uint64_t run_offset() const { return 0; }
  uint64_t run_tail_ninsn() const { return 0; }
  int Event(pt_event* event) { return pt_blk_event(dec_, event, sizeof(*event)); }
  int Time(uint64_t* tsc) const { return pt_blk_time(dec_, tsc, nullptr, nullptr); }
  int GetOffset(uint64_t* offset) const { return pt_blk_get_offset(dec_, offset); }
  int GetSyncOffset(uint64_t* offset) const { return pt_blk_get_sync_offset(dec_, offset); }
  void SetImage(const ProgramImage& image) { pt_blk_set_image(dec_, image.image()); }

 private:
  pt_block_decoder* dec_;
  BlockMemo memo_;
};

// libipt's instruction decoder under the same calls.
class LibiptInsnDecoder {
 public:
  explicit LibiptInsnDecoder(pt_insn_decoder* dec) : dec_(dec) {}
  int SyncForward() { return pt_insn_sync_forward(dec_); }
  int Next(pt_insn* insn) { return pt_insn_next(dec_, insn, sizeof(*insn)); }
  int Event(pt_event* event) { return pt_insn_event(dec_, event, sizeof(*event)); }
  int Time(uint64_t* tsc) const { return pt_insn_time(dec_, tsc, nullptr, nullptr); }
  int GetOffset(uint64_t* offset) const { return pt_insn_get_offset(dec_, offset); }
  int GetSyncOffset(uint64_t* offset) const { return pt_insn_get_sync_offset(dec_, offset); }
  void SetImage(const ProgramImage& image) { pt_insn_set_image(dec_, image.image()); }

 private:
  pt_insn_decoder* dec_;
};

std::atomic<BlockDecoderImpl> block_decoder_impl{BlockDecoderImpl::kFast};

// A run (Sink::OnWholeRun) for a sink told positions, where one is due within it: block by
// block, each told the position it has when walked alone (all but the run's last block ran at
// `first`, the run's offset; the last at `last`) where that passes the sink's limit. Returns
// the limit after it.
uint64_t GiveRunTold(Sink& sink, const WalkedRun& run, uint64_t first, uint64_t last,
                     uint64_t limit) {
  const size_t n = run.blocks.size();
  for (uint32_t r = 0; r < run.repeat; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t at = r + 1 == run.repeat && i + 1 == n ? last : first;
      const bool told = at > limit;
      if (told) sink.OnPosition(at);
      sink.OnWholeBlock(run.blocks[i], *run.memos[i]);
      if (told) limit = sink.position_limit();
    }
  }
  return limit;
}

// The loop over a block decoder: libipt's (LibiptBlockDecoder) or FastBlockDecoder, which
// answer the same calls the same way. `positions`: the sink's wants_positions(), a loop for
// each (the one without, one thread's, asks nothing of them; the one with, a -j chunk's, asks
// the decoder's offset once a block).
template <bool positions, typename Dec>
absl::Status BlockLoopOf(Dec& dec, const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                         uint64_t offset_base, ImageSwitcher* switcher) {
  ErrorReporter errors(image, sink, totals, offset_base);
  TimeWatch<Dec> time(dec, switcher, sink);
  uint32_t progress = kBlocksPerProgress;
  ProgressWatch watch;
  uint64_t limit = positions ? sink.position_limit() : 0;
  // A run across packets ends before a position is due (FastBlockDecoder::set_ahead_limit).
  const auto set_ahead_limit = [&] {
    if (positions) dec.set_ahead_limit(limit >= offset_base ? limit - offset_base : 0);
  };
  set_ahead_limit();
  pt_block block;
  SyncLoop(
      dec, time, errors, sink, totals, offset_base,
      [&] {
        block.ip = 0;
        block.ninsn = 0;
      },
      [&] {
        int status = dec.Next(&block);
        // Even on error, some instructions may have been decoded.
        if (block.ninsn != 0) {
          const WalkedRun* run = dec.walked() ? dec.run() : nullptr;
          const uint64_t ninsn = run != nullptr ? run->ninsn : block.ninsn;
          totals.instructions += ninsn;
          totals.blocks += run != nullptr ? run->blocks.size() * run->repeat : 1;
          bool told = false;
          // Where the decoder is, for a sink told positions (the loop watch's below too: the
          // sinks between do not move the decoder).
          const uint64_t at = positions ? offset_base + OffsetOf(dec) : 0;
          if (run != nullptr && positions && at > limit) {
            limit = GiveRunTold(sink, *run, offset_base + dec.run_offset(), at, limit);
            if (limit == Sink::kStopDecoding) [[unlikely]]
              return -pte_eos;
            set_ahead_limit();
          } else if (run != nullptr) {
            sink.OnWholeRun(*run);
          } else {
            if (positions && at > limit) {
              sink.OnPosition(at);
              told = true;
            }
            if (dec.walked()) {
              sink.OnWholeBlock(block, dec.memo());
            } else {
              sink.OnBlock(block);
            }
          }
          if (told) {
            limit = sink.position_limit();
            if (limit == Sink::kStopDecoding) [[unlikely]]
              return -pte_eos;
            set_ahead_limit();
          }
          if (--progress == 0) {
            progress = kBlocksPerProgress;
            sink.OnProgress(offset_base + OffsetOf(dec));
          }
          if (status >= 0) {
            // A run's blocks ran at the offset before it (within the room given) but those from
            // the last TNT packet it read on (run_tail_ninsn), at this one: all are counted here
            // where this is that offset, else only those (an earlier offset's count would be
            // reset by the blocks after it).
            const uint64_t offset = positions ? at - offset_base : OffsetOf(dec);
            uint64_t here = block.ninsn;
            if (run != nullptr) here = dec.run_offset() == offset ? ninsn : dec.run_tail_ninsn();
            if (!watch.Add(offset, here)) status = -kErrorLoop;
            dec.set_run_room(watch.room());
          }
        }
        if (status >= 0) time.Check();
        return status;
      },
      [&](int status) {
        // As ptxed: the IP of the block, or the next IP after its last instruction.
        if (block.ninsn == 0) return block.ip;
        if (status == -pte_nomap || status == -pte_bad_insn) {
          return NextIpAfter(image, block.end_ip, block.mode);
        }
        return block.end_ip;
      });
  return absl::OkStatus();
}

template <typename Dec>
absl::Status BlockLoop(Dec& dec, const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                       uint64_t offset_base, ImageSwitcher* switcher) {
  if (sink.wants_positions()) {
    return BlockLoopOf<true>(dec, image, sink, totals, offset_base, switcher);
  }
  return BlockLoopOf<false>(dec, image, sink, totals, offset_base, switcher);
}

absl::Status InsnLoop(pt_config& pt, const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                      uint64_t offset_base, ImageSwitcher* switcher) {
  InsnDecoderPtr insn_decoder(pt_insn_alloc_decoder(&pt));
  if (!insn_decoder) {
    return absl::ResourceExhaustedError("libipt: cannot allocate an instruction decoder");
  }
  int err = pt_insn_set_image(insn_decoder.get(), image.image());
  if (err < 0)
    return absl::InternalError(absl::StrCat("pt_insn_set_image: ", pt_errstr(pt_errcode(err))));
  LibiptInsnDecoder dec(insn_decoder.get());
  ErrorReporter errors(image, sink, totals, offset_base);
  TimeWatch<LibiptInsnDecoder> time(dec, switcher, sink);
  uint32_t progress = kInsnsPerProgress;
  ProgressWatch watch;
  uint32_t check = kInsnsPerCheck;
  const bool positions = sink.wants_positions();
  pt_insn insn{};
  SyncLoop(
      dec, time, errors, sink, totals, offset_base, [&] { insn = pt_insn{}; },
      [&] {
        // A call that fails before it decodes anything leaves `insn` as it was: never count the
        // previous instruction (or uninitialised bytes) again.
        insn.iclass = ptic_error;
        const int status = dec.Next(&insn);
        if (status < 0) {
          // The instruction may still have been decoded.
          if (insn.iclass != ptic_error) {
            if (positions) sink.OnPosition(offset_base + OffsetOf(dec));
            ++totals.instructions;
            sink.OnInsn(insn);
          }
          return status;
        }
        if (positions) sink.OnPosition(offset_base + OffsetOf(dec));
        ++totals.instructions;
        sink.OnInsn(insn);
        time.Check();
        if (--progress == 0) {
          progress = kInsnsPerProgress;
          sink.OnProgress(offset_base + OffsetOf(dec));
        }
        if (--check == 0) {
          check = kInsnsPerCheck;
          if (!watch.Add(OffsetOf(dec), kInsnsPerCheck)) return -kErrorLoop;
          // A sink that wants nothing more (a parallel chunk's recording past its budget).
          if (positions && sink.position_limit() == Sink::kStopDecoding) [[unlikely]] {
            return -pte_eos;
          }
        }
        return status;
      },
      [&](int) { return insn.ip; });
  return absl::OkStatus();
}

// InsnLoop's callbacks, positions, error reports and bounds, from FastBlockDecoder's blocks
// (with the instruction decoder's binding of disables, FastBlockDecoder::SetInsnBinding): each
// block's instructions are listed from its graph (FastBlockDecoder::Insns) where libipt's
// instruction decoder decodes every instruction again. A block reads trace only at its last
// instruction, so what InsnLoop sees after each instruction (time, trace offset) is what it saw
// after the block before, until the block's last instruction.
absl::Status FastInsnLoop(FastBlockDecoder& dec, const ProgramImage& image, Sink& sink,
                          DecodeTotals& totals, uint64_t offset_base, ImageSwitcher* switcher) {
  ErrorReporter errors(image, sink, totals, offset_base);
  TimeWatch<FastBlockDecoder> time(dec, switcher, sink);
  uint32_t progress = kInsnsPerProgress;
  ProgressWatch watch;
  uint32_t check = kInsnsPerCheck;
  const bool positions = sink.wants_positions();
  const bool branches_only = sink.branches_only() && !positions;
  uint64_t ip = 0;  // pt_insn_next's instruction: InsnLoop's error IP
  SyncLoop(
      dec, time, errors, sink, totals, offset_base, [&] { ip = 0; },
      [&] {
        // The offset and time while the block's code runs (InsnLoop sees its time after the
        // first instruction: an event fetched after the last block or event changed it).
        const uint64_t before = OffsetOf(dec);
        uint64_t start_tsc = 0;
        const bool start_timed = dec.Time(&start_tsc) >= 0;
        pt_block block;
        int status = dec.Next(&block);
        // pt_insn_next fails reading code after the block's last instruction, or (any other
        // error) on its last instruction, which it still gives.
        const bool code_error = status == -pte_nomap || status == -pte_bad_insn;
        std::span<const pt_insn> insns;
        if (block.ninsn != 0) insns = dec.Insns(block);
        const size_t whole = status >= 0 || code_error ? insns.size() : insns.size() - 1;
        // A block reads trace (a branch's query, the events fetched after it) only at its last
        // instruction, as pt_insn_next does for that instruction.
        const uint64_t after = positions && !insns.empty() ? OffsetOf(dec) : 0;
        // A sink that sees only branches gets the first and the last instruction of a whole
        // block whose inner instructions are no branch, where no bound or progress report
        // falls inside it: what the loop below does for them, without the ones between.
        const size_t n = insns.size();
        if (branches_only && status >= 0 && n > 2 && n < check && n < progress &&
            std::all_of(insns.begin() + 1, insns.end() - 1,
                        [](const pt_insn& insn) { return insn.iclass == ptic_other; })) {
          totals.instructions += n;
          sink.OnInsn(insns.front());
          if (start_timed) time.Check(start_tsc);
          sink.OnInsn(insns.back());
          time.Check();
          ip = insns.back().ip;
          progress -= static_cast<uint32_t>(n);
          check -= static_cast<uint32_t>(n);
          return status;
        }
        for (size_t i = 0; i < insns.size(); ++i) {
          const pt_insn& insn = insns[i];
          ip = insn.ip;
          if (positions) sink.OnPosition(offset_base + (i + 1 == insns.size() ? after : before));
          ++totals.instructions;
          sink.OnInsn(insn);
          if (i == whole) break;  // the failing one
          const bool last = i + 1 == insns.size();
          if (last) {
            time.Check();
          } else if (i == 0 && start_timed) {
            time.Check(start_tsc);
          }
          if (--progress == 0) {
            progress = kInsnsPerProgress;
            sink.OnProgress(offset_base + (last ? OffsetOf(dec) : before));
          }
          if (--check == 0) {
            check = kInsnsPerCheck;
            if (!watch.Add(last ? OffsetOf(dec) : before, kInsnsPerCheck)) return -kErrorLoop;
          }
        }
        // pt_insn_next gives no instruction when tracing is disabled; else the IP it stands at.
        if (status < 0 &&
            (code_error || (block.ninsn == 0 && status != -pte_no_enable && status != -pte_eos))) {
          ip = dec.ip();
        }
        return status;
      },
      [&](int) { return ip; });
  return absl::OkStatus();
}

}  // namespace

std::string DecodeErrorText(int code) {
  // The bounds in force (decode_bounds.h: the fuzz targets and tests lower them).
  switch (code) {
    case kErrorLoop:
      return fmt::format(
          "no trace progress: over {} instructions decoded without reading trace (code that "
          "loops through direct branches, or a trace of other code)",
          insns_without_progress.load());
    case kErrorBtsWalk:
      return fmt::format(
          "no taken branch in {} instructions from the previous BTS record's target: this "
          "record's source is not reached (records of other code?)",
          bts_walk.load());
    case kErrorBtsPartial:
      return "the piece ends in a partial 24-byte BTS record: its bytes are lost";
    default:
      return pt_errstr(static_cast<pt_error_code>(code));
  }
}

void SetDecodeBounds(const DecodeBounds& bounds) {
  insns_without_progress.store(std::max<uint64_t>(bounds.insns_without_progress, 1));
  bts_walk.store(std::max<uint64_t>(bounds.bts_walk, 1));
}
DecodeBounds GetDecodeBounds() { return {insns_without_progress.load(), bts_walk.load()}; }

uint64_t NewBlockMemoOwner() {
  static std::atomic<uint64_t> owners{0};
  return owners.fetch_add(1, std::memory_order_relaxed) + 1;
}

void SetBlockDecoderImpl(BlockDecoderImpl impl) { block_decoder_impl.store(impl); }
BlockDecoderImpl GetBlockDecoderImpl() { return block_decoder_impl.load(); }

uint64_t NextIpAfter(const ProgramImage& image, uint64_t ip, pt_exec_mode mode) {
  static const Disassembler disassembler;
  uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
  size_t n = image.Read(ip, bytes, sizeof(bytes));
  if (n == 0) return ip;
  ZydisDecodedInstruction insn;
  if (disassembler.Length(mode, bytes, n, &insn) == 0) return ip;
  uint64_t next = ip + insn.length;
  if (insn.meta.category == ZYDIS_CATEGORY_COND_BR ||
      insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR || insn.meta.category == ZYDIS_CATEGORY_CALL) {
    for (int i = 0; i < 2; ++i) {
      if (insn.raw.imm[i].is_relative) next += static_cast<uint64_t>(insn.raw.imm[i].value.s);
    }
  }
  return next;
}

absl::Status DecodeInto(std::span<const uint8_t> trace, const TraceConfig& config,
                        const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                        uint64_t offset_base, ImageSwitcher* switcher,
                        const FastPathCoverage* coverage) {
  PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace, config));
  totals.trace_bytes += trace.size();
  if (trace.empty()) return absl::OkStatus();
  // The fast path's check reads the whole trace before decoding: the pages behind it may go.
  const ScanProgress scanned = [&sink, offset_base](uint64_t offset) {
    sink.OnScanned(offset_base + offset);
  };
  if (sink.kind() == DecoderKind::kBlock) {
    pt.flags.variant.block.end_on_call = sink.end_block_on_call() ? 1 : 0;
    pt.flags.variant.block.end_on_jump = sink.end_block_on_jump() ? 1 : 0;
    FastPathCoverage fast;
    const BlockDecoderImpl impl = block_decoder_impl.load(std::memory_order_relaxed);
    if (impl != BlockDecoderImpl::kLibipt) {
      fast = coverage != nullptr ? *coverage : FastPathCovers(pt, scanned);
    }
    if (impl == BlockDecoderImpl::kFastLibiptPackets) fast.packets = false;
    if (fast.blocks) {
      std::unique_ptr<FastBlockDecoder> dec = FastBlockDecoder::Create(pt, image, fast.packets);
      if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a query decoder");
      dec->SetWalk((impl == BlockDecoderImpl::kFast || impl == BlockDecoderImpl::kFastNoRuns) &&
                   fast.packets && fast.walk && sink.takes_walked_blocks());
      dec->SetRuns(impl == BlockDecoderImpl::kFast);
      return BlockLoop(*dec, image, sink, totals, offset_base, switcher);
    }
    return RunWithStack(kBlockLoopStack, [&]() -> absl::Status {
      BlockDecoderPtr dec(pt_blk_alloc_decoder(&pt));
      if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a block decoder");
      int err = pt_blk_set_image(dec.get(), image.image());
      if (err < 0) {
        return absl::InternalError(absl::StrCat("pt_blk_set_image: ", pt_errstr(pt_errcode(err))));
      }
      LibiptBlockDecoder libipt(dec.get());
      return BlockLoop(libipt, image, sink, totals, offset_base, switcher);
    });
  }
  // Instruction sinks: listed from the block graph (about twice libipt's instruction decoder's
  // speed) where the fast path models the trace, else libipt's instruction decoder.
  const BlockDecoderImpl impl = block_decoder_impl.load(std::memory_order_relaxed);
  if (impl != BlockDecoderImpl::kLibipt) {
    // Blocks that end at every branch, for a sink that sees only branches (FastInsnLoop).
    if (sink.branches_only()) {
      pt.flags.variant.block.end_on_call = 1;
      pt.flags.variant.block.end_on_jump = 1;
    }
    FastPathCoverage fast = coverage != nullptr ? *coverage : FastPathCovers(pt, scanned);
    if (impl == BlockDecoderImpl::kFastLibiptPackets) fast.packets = false;
    if (fast.blocks) {
      std::unique_ptr<FastBlockDecoder> dec = FastBlockDecoder::Create(pt, image, fast.packets);
      if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a query decoder");
      dec->SetInsnBinding(true);
      return FastInsnLoop(*dec, image, sink, totals, offset_base, switcher);
    }
  }
  return InsnLoop(pt, image, sink, totals, offset_base, switcher);
}

absl::StatusOr<DecodeTotals> DecodeTrace(std::span<const uint8_t> trace, const TraceConfig& config,
                                         const ProgramImage& image, Sink& sink) {
  DecodeTotals totals;
  PTKIT_RETURN_IF_ERROR(DecodeInto(trace, config, image, sink, totals));
  PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
  return totals;
}

}  // namespace ptkit::decoder
