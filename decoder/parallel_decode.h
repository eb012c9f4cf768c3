// Parallel decoding (`ptdecode -j N`): one Intel PT stream split at PSB boundaries into chunks
// that threads decode at once, merged in trace order so that the sink sees exactly what
// DecodeInto would have given it.
//
// Each chunk's decoder starts at its PSB and goes on two PSBs into the next chunk. What it
// decodes is recorded (instructions, events, errors, syncs, time, each with the decoder's trace
// offset); the merge replays the recordings into the sink in order. Where chunk k's decoder
// (which came from the trace before the boundary) and chunk k+1's (which synchronised at it)
// give the same records at the same trace offsets over the whole overlap, the decoders are in
// the same state and chunk k+1's records replace chunk k's from there: the stitch. Where they
// do not agree (what came before the PSB still matters: an error, a return compressed across
// it, a decoder that never synchronised), chunk k is decoded again on the merging thread
// through chunk k+1, as the serial decode would, and the merge goes on from there. So the
// result is the serial one always; only its speed depends on the trace.
//
// A sink that can summarise a chunk (Sink::NewChunkSummary: stats, folded, calls) is given each
// chunk's summary, made on the worker thread that decoded it, instead of its records: the call
// stack at a chunk's start is unknown there, so the chunk's model records the returns past it
// and the counts that depend on the frames below it, and the merging thread resolves them against
// the stack the chunks before left (CallStack::BeginChunk). A summary covers the chunk's records
// from the first after the overlap at its start to the first after the overlap at its end; the
// stitch still decides, and where a stitch or a summary fails the chunk's records are given.
//
// Block sinks (stats, calls, folded, timeline, diff) are decoded in parallel too, through
// CanonicalBlocks, with one thread as with many: libipt's block decoder (and FastBlockDecoder,
// which gives its answer) cuts blocks where its block cache, filled by everything decoded
// before, says, so a chunk decoded with another history gives other blocks; joined where
// nothing but the cache cut them, every decode of the same flow gives the same blocks, and the
// same time updates between them.
#ifndef PTKIT_DECODER_PARALLEL_DECODE_H_
#define PTKIT_DECODER_PARALLEL_DECODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/disassembler.h"
#include "decoder/forwarding_sink.h"
#include "decoder/image.h"
#include "decoder/pt_packet_loop.h"
#include "decoder/trace_config.h"

namespace ptkit::decoder {

// A block sink's decode with libipt's blocks joined where they were cut for no reason of the
// flow (the block cache, a section's end, fill limits): a block that ends at an instruction
// that needs no trace (not a branch, a direct jump, or a direct call when the sink does not end
// blocks at calls) is joined to the next one where that is the instruction's successor, no event,
// error or sync comes between them and the sum stays below 65,536 instructions. Blocks then end
// only at conditional and indirect branches, returns, calls, far transfers, truncated instructions
// and events, whatever the decoder's history. Time updates between joined blocks are told once,
// after the joined block, with the last value (the decoder tells the time after each block). The
// sink sees the same callbacks in the same order with any -j; `ptdecode stats` counts these blocks.
class CanonicalBlocks : public ForwardingSink {
 public:
  // Reads the code of blocks from `image` until SetImage (or a stream with an image).
  CanonicalBlocks(Sink& inner, const ProgramImage& image)
      : ForwardingSink(inner),
        image_(&image),
        positions_(inner.wants_positions()),
        whole_(&inner.whole_block_sink()) {}
  ~CanonicalBlocks() override = default;
  void SetImage(const ProgramImage& image);
  // Gives the held block and time to the sink: at the end of every decode.
  void Flush();
  // The blocks joined to the one before since the last call (subtract from the decoder's
  // DecodeTotals::blocks).
  uint64_t TakeJoined() { return std::exchange(joined_, 0); }

  bool wants_positions() const override { return positions_; }
  // The inner sink's: a held block's position is the last one told, which stands for it.
  uint64_t position_limit() const override { return inner().position_limit(); }
  bool takes_walked_blocks() const override { return inner().coarse_block_class(); }
  void OnPosition(uint64_t offset) override;
  void OnBlock(const pt_block& block) override;
  void OnWholeBlock(const pt_block& block, BlockMemo& memo) override;
  void OnWholeRun(const WalkedRun& run) override;
  void OnTime(uint64_t tsc) override;
  void OnImage(const ProgramImage& image) override;
  void OnStream(const StreamInfo& stream) override;
  void OnLoss(const LossInfo& loss) override;
  void OnSync(uint64_t offset) override;
  void OnEvent(const pt_event& event) override;
  void OnError(const DecodeError& error) override;
  void OnInsn(const pt_insn& insn) override;
  absl::Status Finish(const DecodeTotals& totals) override;

 private:
  // Where the instruction at `ip` goes without trace, if it needs none: the next instruction,
  // a direct jump's or call's target (ip 0: it needs trace, or does not decode).
  struct Next {
    uint64_t ip = 0;
    bool call = false;
  };
  Next Successor(uint64_t ip, pt_exec_mode mode);
  bool Joins(const pt_block& next);

  const ProgramImage* image_;
  const bool positions_;  // the inner sink's wants_positions()
  Sink* whole_;           // the inner sink's whole_block_sink()
  Disassembler disasm_;
  absl::flat_hash_map<std::pair<uint64_t, int>, Next> successor_;  // (ip, mode)
  bool held_ = false;
  pt_block block_{};
  uint64_t block_position_ = 0;
  bool time_held_ = false;
  uint64_t time_ = 0;
  uint64_t told_ = ~uint64_t{0};  // the last time told since the decoder synchronised
  uint64_t position_ = 0;
  uint64_t joined_ = 0;
};

// DecodeInto without an ImageSwitcher; a block sink's blocks through CanonicalBlocks
// (totals.blocks counts those). With a switcher, give it the CanonicalBlocks as its sink.
// Errors: those of DecodeInto.
absl::Status DecodeIntoCanonical(std::span<const uint8_t> trace, const TraceConfig& config,
                                 const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                                 uint64_t offset_base = 0,
                                 const FastPathCoverage* coverage = nullptr);

// The trace bytes of a chunk, at least (it ends at the first PSB after them). A chunk's
// recording takes about 64 bytes per instruction; at some 8 instructions per trace byte a
// chunk of 32 KiB records about 17 MB, and jobs + 1 chunks are held at most (measured: 146 MB
// peak RSS at -j2 for a 7 MB synthesized trace, 18 MB at -j1). Each chunk's decoder also reads
// two PSB periods into the next chunk (at 2 KiB PSBs, 12% more trace decoded).
inline constexpr uint64_t kDefaultChunkBytes = uint64_t{32} << 10;
// The chunk size for a sink that summarises chunks (Sink::NewChunkSummary), by default: a
// summarised chunk records only the overlaps at its edges, and those and each chunk's set-up
// (its decoder, its runs and the summary's memos made anew) cost less the longer the chunk, so
// a trace is cut into up to 8 chunks per thread (enough to keep the threads busy to the end),
// each at least kMinPsbsPerSummaryChunk PSB periods (`psb_spacing`, 0 when not known) and
// 128 KiB, at most 4 MiB or twice that least, whichever is more. callgrind Ir of `stats -j2`
// on an emulated recording, 755 M instructions, 37 MB of trace (-j1 10.19 G): 13.95 G at
// 128 KiB (285 chunks), 11.93 G at 1 MiB. A summary that fails on its worker is not recorded
// there but decoded again by the merging thread (DecodeInParallel).
inline constexpr uint64_t kMinSummaryChunkBytes = uint64_t{128} << 10;
inline constexpr uint64_t kMaxSummaryChunkBytes = uint64_t{4} << 20;
// The edges of a chunk (the PSB period before its start and two after its end, decoded by both
// chunks beside them and recorded block by block) cost ~4x the instructions of its body per
// block: chunks of fewer PSB periods lose to one thread. An emulated recording (150 M
// instructions, 2 KiB PSB periods, two streams of 3.7 MB) at -j 2: 16 chunks a stream 1.08x
// -j 1's speed, 4 chunks 1.20x, 2 chunks (of ~900 PSB periods) 1.31x.
inline constexpr uint64_t kMinPsbsPerSummaryChunk = 512;
uint64_t SummaryChunkBytes(uint64_t trace_bytes, unsigned jobs, uint64_t psb_spacing = 0);
// The mean distance between the first 17 PSBs of `trace` (0: fewer than two).
uint64_t PsbSpacing(std::span<const uint8_t> trace, const TraceConfig& config);

struct ParallelOptions {
  // Decoding threads; 1: DecodeInto on the caller's thread (the default here; ptdecode's
  // without -j is the CPUs it may run on, with jobs_for_records false).
  unsigned jobs = 1;
  // Whether sinks that do not summarise chunks decode with `jobs` threads too (where their
  // chunk size below is not 0): `ptdecode -j N`. Without -j, ptdecode's default (the CPUs it may
  // run on) is for the sinks that summarise only.
  bool jobs_for_records = true;
  // For sinks that do not summarise. 0 (the default): kDefaultChunkBytes with libipt's
  // decoders; with the fast decoder such a sink decodes on one thread whatever `jobs` is (the
  // merging thread replays every block to it, block by block where one thread walks: calls
  // (before it summarised) of a 755 M instruction emulated recording took 8.9 s at -j 2 against
  // 0.82 s at -j 1, insn 24 s against 22 s). ptdecode's --chunk-size (tests) sets it for every
  // decoder.
  uint64_t chunk_bytes = 0;
  // For sinks that summarise; 0: SummaryChunkBytes of the trace.
  uint64_t summary_chunk_bytes = 0;
  // Tests and measurements (ptdecode's hidden --chunk-stats): each parallel decode prints its
  // ParallelStats to stderr.
  bool print_stats = false;
  // The bytes a recorded chunk may hold (tests); 0: RecordBudget's.
  uint64_t record_budget = 0;
};
// What a chunk's recording (its records for a sink that does not summarise) may hold, with
// `workers` threads: 256 MiB shared by the jobs + 1 chunks held at once, at least 16 MiB each.
// The instructions a trace byte stands for are not bounded (a TNT bit per loop iteration of any
// length: 590 a byte for a loop of 100 adds), and a chunk was bounded by its bytes only: insn
// --decoder libipt -j2 held 5.4 GB for 1.7 MB of trace and died of bad_alloc (sweep 39b F1). A
// chunk past it stops, and the rest of the trace is decoded on the merging thread, straight
// into the sink.
uint64_t RecordBudget(size_t workers);
// Sets the options of every later parallel decode (process-wide; `ptdecode -j`).
void SetParallelOptions(const ParallelOptions& options);
ParallelOptions GetParallelOptions();

// Where the chunks of `trace` start: 0, then PSB offsets at least `chunk_bytes` apart (the
// next PSB after that many bytes). `scanned` (if set) is told how far the search has read,
// every few MiB.
// Errors: kInvalidArgument for a configuration libipt rejects.
absl::StatusOr<std::vector<uint64_t>> ChunkStarts(std::span<const uint8_t> trace,
                                                  const TraceConfig& config, uint64_t chunk_bytes,
                                                  const ScanProgress& scanned = {});

// What a parallel decode did (for tests and measurements).
struct ParallelStats {
  uint64_t chunks = 0;
  uint64_t stitched = 0;      // chunk boundaries where the next chunk's decode was taken
  uint64_t redecoded = 0;     // boundaries where the chunk was decoded again through the next
  uint64_t summarised = 0;    // chunks given to the sink as their summary (ChunkSummary)
  uint64_t unsummarised = 0;  // summarised chunks whose summary did not apply (decoded again)
  // Trace bytes given to every decoder, overlaps included: an upper bound of what they read, as
  // a summarised chunk's decode ends once past its tail (Sink::kStopDecoding).
  uint64_t bytes_decoded = 0;
  uint64_t overflowed = 0;  // recordings past their budget (RecordBudget): the rest serial
};

// As DecodeIntoCanonical without an ImageSwitcher, with
// `worker_images.size()` threads: worker i decodes with worker_images[i], the merging (calling)
// thread with `image`. Each thread needs images of its own, equal to `image` (libipt's pt_image
// is not thread-safe: pt_image_find reorders its section list). The sink is called on the
// calling thread only, in trace order. With `follow_time`, as DecodeInto with an ImageSwitcher
// that never switches: the sink is told the time (OnTime) even when it does not want it.
// Errors: those of DecodeInto.
absl::Status DecodeInParallel(std::span<const uint8_t> trace, const TraceConfig& config,
                              const ProgramImage& image,
                              std::span<const ProgramImage* const> worker_images, Sink& sink,
                              DecodeTotals& totals, uint64_t offset_base,
                              uint64_t chunk_bytes = kDefaultChunkBytes,
                              ParallelStats* stats = nullptr, bool follow_time = false);

// One thread's decode of a trace that the fast decoder does not model all of (FastPathCovers:
// a transaction, a PTWRITE, ... somewhere in it), for a sink that summarises chunks: as
// DecodeInParallel with no worker, the calling thread decoding each chunk when the merge needs
// it. Each chunk goes to the fast decoder where it models the chunk and to libipt where it does
// not, so libipt decodes from the PSB that starts the chunk, not the whole trace; the merge
// (stitches, summaries, chunks decoded again) gives what DecodeIntoCanonical would, as with
// threads. `chunk_bytes`: PlanOneThread's.
// Errors: those of DecodeInto.
absl::Status DecodeInChunksAlone(std::span<const uint8_t> trace, const TraceConfig& config,
                                 const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                                 uint64_t offset_base, uint64_t chunk_bytes,
                                 ParallelStats* stats = nullptr, bool follow_time = false);
// How one thread decodes a trace for `sink`: in chunks (DecodeInChunksAlone, `chunk_bytes`: the
// summary chunk size of one thread) where the fast decoder is chosen (GetBlockDecoderImpl),
// `sink` summarises chunks decoded with `image`, the trace is longer than a chunk and the fast
// decoder does not model all of it (FastPathCovers, whose answer is kept in `coverage` for
// DecodeInto when it was asked); else whole (chunk_bytes 0).
struct OneThread {
  uint64_t chunk_bytes = 0;
  std::optional<FastPathCoverage> coverage;
};
OneThread PlanOneThread(std::span<const uint8_t> trace, const TraceConfig& config, Sink& sink,
                        const ProgramImage& image, uint64_t offset_base = 0);

// Adds the counts of the flow (instructions, blocks, events, syncs, errors, gaps and errors by
// code) of `from` to `to`.
void AddFlowTotals(DecodeTotals& to, const DecodeTotals& from);

// Whether GetParallelOptions() decodes with more than one thread.
bool DecodesInParallel();

// The chunk size of `options` for `sink` and `trace`: summary_chunk_bytes (or SummaryChunkBytes
// with the trace's PsbSpacing) for a block sink that summarises chunks decoded with `image` (it
// makes a summary to know), else chunk_bytes (if 0: kDefaultChunkBytes with libipt's decoders,
// 0 with the fast one) where jobs_for_records, else 0. 0: decode on one thread.
uint64_t ChunkBytesFor(Sink& sink, const ProgramImage& image, const ParallelOptions& options,
                       std::span<const uint8_t> trace, const TraceConfig& config);

// Makes an image equal to the caller's, for a worker thread.
using ImageLoader = std::function<absl::StatusOr<std::unique_ptr<ProgramImage>>()>;

// DecodeTrace with GetParallelOptions() and DecodeIntoCanonical: DecodeInParallel with `jobs`
// threads, each with an image from `load_image`, when jobs > 1 (and `blocks` for a block sink)
// and the trace is longer than a chunk.
// Errors: those of DecodeTrace and load_image.
absl::StatusOr<DecodeTotals> DecodeTraceWithJobs(std::span<const uint8_t> trace,
                                                 const TraceConfig& config,
                                                 const ProgramImage& image,
                                                 const ImageLoader& load_image, Sink& sink);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PARALLEL_DECODE_H_
