// Decoding a raw Intel PT stream with libipt into a Sink.
//
// Setup failures (bad configuration, no memory) are errors; everything met while decoding is
// data: each libipt error is reported to the sink with the trace offset and IP, the decoder
// resynchronises at the next PSB, and totals per error code are kept.
#ifndef PTKIT_DECODER_DECODE_H_
#define PTKIT_DECODER_DECODE_H_

#include <intel-pt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decoder/image.h"
#include "decoder/trace_config.h"

namespace ptkit::decoder {

enum class DecoderKind {
  kBlock,  // pt_blk_*: fastest; a sink sees pt_block runs
  kInsn,   // pt_insn_*: a sink sees each instruction
};

// Which block decoder DecodeInto uses for block sinks.
enum class BlockDecoderImpl {
  // decoder/fast_block_decoder.h: libipt's answer from a persistent graph of decoded code; a
  // trace with what it does not model (FastPathCovers) goes to libipt. The default.
  kFast,
  kLibipt,  // libipt's pt_blk_* always
  // kFast with libipt's query decoder instead of ptkit's packet loop (decoder/pt_packet_loop.h)
  // for every trace: for tests and benchmarks (not a ptdecode choice).
  kFastLibiptPackets,
  // kFast without the walk of canonical blocks (FastBlockDecoder::SetWalk), which kFast takes
  // for the sinks that allow it (Sink::takes_walked_blocks): for tests and benchmarks.
  kFastNoWalk,
  // kFast walking one block at a time, without runs of walked blocks (FastBlockDecoder::
  // SetRuns): for tests and benchmarks.
  kFastNoRuns,
};
// Sets the block decoder for every later DecodeInto (process-wide; `ptdecode --decoder`).
void SetBlockDecoderImpl(BlockDecoderImpl impl);
BlockDecoderImpl GetBlockDecoderImpl();

// ptkit's own decode error codes, numbered after libipt's pt_error_code values. IptErrorName
// names them ("loop") and DecodeErrorText says what they mean.
enum DecodeErrorCode : int {
  // More instructions decoded than kMaxInsnsWithoutProgress without the decoder reading any
  // further into the trace: the code loops through direct branches (`jmp .`), which needs no
  // trace, or the trace does not belong to the code. Decoding resumes at the next PSB.
  kErrorLoop = 1000,
  // BTS: the walk from one record's `to` met no taken branch within kMaxBtsWalk instructions,
  // so it never reached the next record's `from` (records of other code). The walk restarts at
  // that record's `to`.
  kErrorBtsWalk = 1001,
  // BTS: the bytes at the end of a piece are not a whole 24-byte record (and not the kernel's
  // zero padding): they are lost.
  kErrorBtsPartial = 1002,
};

// The bound of kErrorBtsWalk: straight-line code (no jump, call or return, no taken
// conditional branch) of this many instructions does not occur in programs.
inline constexpr uint64_t kMaxBtsWalk = 1 << 16;

// The bound of kErrorLoop. perf's decoder stops after 100,000 direct branches without a packet
// ("Never-ending loop"); this counts instructions, which a block holds without naming its
// branches. No real trace comes near it: a TNT packet holds at most 47 branch outcomes.
inline constexpr uint64_t kMaxInsnsWithoutProgress = 1 << 20;

// What a decode error code means: libipt's pt_errstr, or the text of a DecodeErrorCode (which
// names the bound in force, decode_bounds.h).
std::string DecodeErrorText(int code);

// One decode error. `code` is a positive pt_error_code or a DecodeErrorCode.
struct DecodeError {
  int code = 0;
  uint64_t offset = 0;  // trace offset where the decoder stood
  uint64_t ip = 0;      // the IP where decoding failed, 0 when unknown
  bool during_sync = false;
  // For pte_nomap (code that cannot be found): the unmapped address range around `ip`.
  AddressRange gap;
  const std::string* missing_file = nullptr;  // the file that held `ip`, if it is known
  bool is_gap() const { return code == pte_nomap; }
};

// Container input: which stream the following callbacks belong to.
struct StreamInfo {
  std::string name;  // "cpu 3", "tid 1234"
  uint32_t pid = 0;  // the process whose images decode it (0: unknown)
  uint32_t tid = 0;  // the thread running (0: unknown)
  std::string comm;
  // The name the thread has last in this program (before the process's next exec): a worker
  // names itself after it starts (pthread_setname_np); "" when unknown.
  std::string last_comm;
  uint64_t bytes = 0;
  const ProgramImage* image = nullptr;  // the images (and symbols) of this stream
  bool context_switch = false;          // not a new stream: another thread now runs on the CPU
  // The process runs the program another traced process forked it with (no exec since): all
  // it runs is in that program's main, whose frames it does not see (--exclude-startup).
  bool forked = false;
  // A thread other than its process's first that exec'd (a per-thread stream keeps its tid, as
  // perf shows it): the new program's only thread, which runs its main (--exclude-startup).
  bool exec_leader = false;
};
// LossInfo::kind of a jump in a stream's AUX offsets (no container loss record says why).
inline constexpr char kLossDiscontinuity[] = "discontinuity";

// Trace known to be lost at this point of the stream (container loss records, AUX gaps).
struct LossInfo {
  // The container's name of the loss (LossKindName: "aux-truncated", "aux-collision", ...;
  // an AUX record's flag is named as its loss record), or kLossDiscontinuity.
  std::string kind;
  uint64_t aux_offset = 0;
  uint64_t bytes = 0;  // 0 when unknown
};

struct DecodeTotals {
  uint64_t trace_bytes = 0;
  uint64_t instructions = 0;
  uint64_t blocks = 0;  // blocks (block decoder) as libipt returns them
  uint64_t events = 0;
  uint64_t syncs = 0;                      // PSBs the decoder synchronised at
  uint64_t errors = 0;                     // all decode errors, gaps included
  uint64_t gaps = 0;                       // pte_nomap errors
  uint64_t streams = 0;                    // container input: streams decoded
  uint64_t losses = 0;                     // loss points reported (container input)
  uint64_t unknown_size_losses = 0;        // of them, those whose size is unknown (bytes 0)
  uint64_t lost_bytes = 0;                 // bytes those say were lost, when known
  std::map<int, uint64_t> errors_by_code;  // DecodeError::code -> count
  std::vector<std::string> warnings;       // e.g. a build-id mismatch, naming the file
};

class ChunkSummary;

// What a sink derives from a walked block (Sink::OnWholeBlock), kept by the block decoder with
// the node of its graph the block was walked from, for as long as the decoder lives, and handed
// back with every walk of that node: the sink looks a block's code up once per node, not once
// per block. Only its owner reads it; `context` is the owner's too (e.g. the image it looked the
// block up in): a memo of another owner or context is filled again.
struct BlockMemo {
  uint64_t owner = 0;  // who filled it, by a number unique in the process; 0: nobody yet
  const void* context = nullptr;
  uint64_t value = 0;  // in the owner's encoding
};
// A BlockMemo::owner no other caller gets.
uint64_t NewBlockMemoOwner();

// A run of walked blocks given in one step (Sink::OnWholeRun): blocks that each end in a
// conditional branch, a direct call or a compressed return (a repeated run: only conditional
// branches), the answers taken from one TNT packet at once (for a sink not told positions,
// from TNT-8 packets that follow it byte for byte too), from a memo the block decoder keeps of
// (block, the next answers) -> the blocks they lead through. Nothing happens between them: no
// event, no time, and for a sink told positions no change of trace position.
struct WalkedRun {
  std::span<const pt_block> blocks;   // in order; two or more, each with ninsn > 0
  std::span<BlockMemo* const> memos;  // each block's memo (OnWholeBlock's)
  // The blocks come this many times over, one after another (a loop whose answers repeat).
  uint32_t repeat = 1;
  uint64_t ninsn = 0;  // the instructions of all of them, repeats included
  // What a sink derives from the whole run, as BlockMemo is for a block: the same for every
  // step of the same run while the decoder keeps it (it may forget it: filled again then).
  BlockMemo* memo = nullptr;
};

// Receives the decoded flow in trace order.
class Sink {
 public:
  virtual ~Sink() = default;
  // Which libipt decoder this sink needs, and block decoder flags.
  virtual DecoderKind kind() const { return DecoderKind::kBlock; }
  virtual bool end_block_on_call() const { return false; }
  virtual bool end_block_on_jump() const { return false; }
  // Whether OnBlock reads of a block's class only whether it is a call, a return or a far
  // transfer (an indirect jump's block may end in ptic_error or ptic_jump alike).
  virtual bool coarse_block_class() const { return false; }
  // Whether OnInsn may be given only the first and the last instruction of a block of the fast
  // decoder (with ends at calls and jumps, so that every branch ends a block) where those between
  // are no branch and nothing else happens at them: for a sink that looks only at branches and
  // where they went (`branches`). A sink that counts or shows every instruction must say no, and
  // so must one between the decoder and such a sink that does (the default).
  virtual bool branches_only() const { return false; }
  // Whether the block decoder may give this sink whole canonical blocks (the walk,
  // FastBlockDecoder::SetWalk): it joins blocks as CanonicalBlocks does, and its inner sink
  // reads block classes coarsely.
  virtual bool takes_walked_blocks() const { return false; }
  // Whether OnTime is wanted (it costs a pt_*_time call per block or instruction).
  virtual bool wants_time() const { return false; }
  // `--time FROM,TO` (TimeFilterSink): whether this sink follows the flow outside the window
  // too, counting only inside it (OnWindow says which): a call stack's frames opened before
  // the window are its stacks' roots in it, as perf's. Else only the window's flow is given.
  virtual bool follows_outside_window() const { return false; }
  virtual void OnWindow(bool in) {}

  // Container input: a new stream (or, with context_switch, a new task on the same CPU).
  // The callbacks that follow belong to it and use its image.
  virtual void OnStream(const StreamInfo& stream) {}
  // The stream's images changed, its task and program did not (code mapped over other code:
  // a library dlopen'd where a dlclose'd one was): the callbacks that follow use `image`.
  virtual void OnImage(const ProgramImage& image) {}
  // Trace lost at this point (container input); decoding restarts at the next PSB.
  virtual void OnLoss(const LossInfo& loss) {}
  // The decoder synchronised at the PSB at this trace offset (first sync, after errors).
  virtual void OnSync(uint64_t offset) {}
  // The decoder's time (TSC units, from TSC/MTC/CYC packets) changed to `tsc`; it applies
  // to the blocks / instructions that follow. Only when wants_time().
  virtual void OnTime(uint64_t tsc) {}
  // Called now and then (every few thousand blocks) with the decoder's trace offset.
  virtual void OnProgress(uint64_t offset) {}
  // A pass over the trace ahead of decoding (the fast path's check of its packets, the search
  // for -j's chunk starts) has read it up to `offset` (plus the offset base), every few MiB;
  // decoding reads it again from where it starts. So that the pages behind can be dropped.
  virtual void OnScanned(uint64_t offset) {}
  // Block decoder: a run of instructions (pt_block; ninsn > 0).
  virtual void OnBlock(const pt_block& block) {}
  // A block that ends where nothing is joined to it, given where nothing joins it to the block
  // before (a walked block, FastBlockDecoder::SetWalk): what OnBlock gets, by default through
  // it; CanonicalBlocks passes it on without holding it. `memo` is the same for every walk of
  // the same block (BlockMemo).
  virtual void OnWholeBlock(const pt_block& block, BlockMemo& memo) { OnBlock(block); }
  // Walked blocks in a run (WalkedRun), each as OnWholeBlock would get it (the default gives
  // them so), where nothing comes between them. A sink told positions gets a run only where no
  // position is told within it (all its blocks' positions within position_limit); else the
  // block loop gives its blocks one by one with their positions.
  virtual void OnWholeRun(const WalkedRun& run) {
    for (uint32_t r = 0; r < run.repeat; ++r) {
      for (size_t i = 0; i < run.blocks.size(); ++i) OnWholeBlock(run.blocks[i], *run.memos[i]);
    }
  }
  // The sink a whole block given to this one reaches unchanged: this one, or, for a layer that
  // passes blocks on as they are (and nothing else on a block), its inner sink's. CanonicalBlocks
  // gives walked blocks straight to its inner sink's. Must not change while a decode runs.
  virtual Sink& whole_block_sink() { return *this; }
  // Instruction decoder: one instruction.
  virtual void OnInsn(const pt_insn& insn) {}
  // A libipt event (enabled, disabled, overflow, exec mode, paging, tsx, ...), in order.
  virtual void OnEvent(const pt_event& event) {}
  // A decode error (data, not a failure); a gap when error.is_gap().
  virtual void OnError(const DecodeError& error) {}
  // Called once after the last callback. Errors: output failures.
  virtual absl::Status Finish(const DecodeTotals& totals) { return absl::OkStatus(); }
  // After Finish: why the output counts nothing though the decode gave instructions (a selection
  // of the sink's own: stats --only-under a function never called); "" when it counts some.
  virtual std::string EmptyResult() const { return ""; }

  // For parallel decoding (decoder/parallel_decode.h): whether OnPosition is wanted, and the
  // decoder's trace offset (plus the offset base) just before each OnInsn, OnBlock and OnEvent
  // (libipt's decoders; not BTS).
  virtual bool wants_positions() const { return false; }
  virtual void OnPosition(uint64_t offset) {}
  // With wants_positions: the block decoder may leave OnPosition out before a block while its
  // offset is at most this (the last position told stands for it then: for a sink that only
  // compares positions with this bound); asked again after each block whose position was told.
  // 0 (the default): every position is told. kStopDecoding: the sink wants nothing more of
  // this decode, which the block decoder's loop ends there as at the trace's end.
  virtual uint64_t position_limit() const { return 0; }
  static constexpr uint64_t kStopDecoding = ~uint64_t{0} - 1;
  // For parallel decoding: a summary of one chunk, to be made on a worker thread that decodes
  // with `image` (equal to this sink's), or null (the default) when this sink cannot summarise.
  // Must be safe to call from several threads at once.
  virtual std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image);
  // For parallel decoding: false when this sink is in a state no chunk's summary applies to
  // (ChunkSummary::ApplyTo would say no), and will likely stay in (a call stack deeper than
  // CallStack::kMaxFrames): the rest of the trace is decoded on one thread then.
  virtual bool summaries_apply() const { return true; }
};

// A chunk of a trace summarised on a worker thread and applied to its sink on the merging
// thread (decoder/parallel_decode.h): what a sink needs to give the serial decode's answer
// without being given the chunk's blocks.
class ChunkSummary {
 public:
  virtual ~ChunkSummary() = default;
  // Where the chunk's records go, on the worker thread.
  virtual Sink& sink() = 0;
  // The records given so far were the chunk's head (the chunk before gives them to the sink):
  // they set the state the rest starts from. What is given from here on is summarised.
  virtual void BeginSummary() = 0;
  // The chunk met what the summary does not model: its records must be given instead.
  virtual bool failed() const = 0;
  // On the merging thread, once the sink that made this summary was given every record before
  // the summarised ones: the sink as if it had been given those too. False, having changed
  // nothing, when the sink is not in a state the summary applies to (give it the records).
  virtual bool ApplyTo() = 0;
};

// Decodes `trace` against `image` into `sink` and returns the totals (also given to
// sink.Finish). Errors: kInvalidArgument for a configuration libipt rejects (unknown cpu),
// kResourceExhausted when a decoder cannot be allocated, and sink.Finish's error.
absl::StatusOr<DecodeTotals> DecodeTrace(std::span<const uint8_t> trace, const TraceConfig& config,
                                         const ProgramImage& image, Sink& sink);

// Container input, per-CPU streams: picks the images for the task running at a trace time.
class ImageSwitcher {
 public:
  virtual ~ImageSwitcher() = default;
  // The image for trace time `tsc` (TSC units, as the trace's timing packets), or null to
  // keep the current one. Called when the decoder's time changes; may notify the sink.
  virtual const ProgramImage* ImageAt(uint64_t tsc) = 0;
};

// What the fast decoder models of a trace (FastPathCovers, decoder/fast_block_decoder.h).
struct FastPathCoverage {
  bool blocks = false;   // FastBlockDecoder decodes it as libipt's block decoder does
  bool packets = false;  // only with `blocks`: with ptkit's packet loop
  // Only with `packets`: FastBlockDecoder::SetWalk may walk it (no TIP with a suppressed IP,
  // which libipt's block decoder answers by its block cache's history).
  bool walk = false;
};

// As DecodeTrace, without calling sink.Finish: adds to `totals`. Error offsets are reported
// as `offset_base` + the offset in `trace` (for a piece of a longer stream). `coverage`:
// FastPathCovers' answer for `trace` and `config` where the caller has it already (it reads
// the whole trace).
absl::Status DecodeInto(std::span<const uint8_t> trace, const TraceConfig& config,
                        const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                        uint64_t offset_base = 0, ImageSwitcher* switcher = nullptr,
                        const FastPathCoverage* coverage = nullptr);

// The address of the instruction after the one at `ip` as ptxed computes it for error
// reports (length plus the displacement of a direct branch); `ip` when it cannot be decoded.
uint64_t NextIpAfter(const ProgramImage& image, uint64_t ip, pt_exec_mode mode);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_DECODE_H_
