#include "decoder/parallel_decode.h"

#include <Zydis/Zydis.h>
#include <intel-pt.h>

#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "decoder/fast_block_decoder.h"
#include "decoder/flow_sink.h"
#include "decoder/ipt_handles.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

std::mutex options_mu;
ParallelOptions parallel_options;

constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
// The longest run (in chunks) decoded again after failed stitches; beyond it the rest of the
// trace is decoded serially.
constexpr size_t kMaxRunChunks = 16;
// Chunk summaries in a row that failed on their worker or did not apply to a sink that said
// none would (Sink::summaries_apply), after which the rest of the trace is decoded serially.
constexpr size_t kMaxUnapplied = 4;

// What one decoder gave, in order, each with the decoder's trace offset at the time.
struct Records {
  enum Kind : uint8_t { kSync, kTime, kInsn, kBlock, kEvent, kError };
  struct Entry {
    Kind kind;
    uint64_t position;
    uint64_t value;  // kSync: the offset; kTime: the TSC; else an index into the vector
  };
  struct Error {
    DecodeError error;
    std::string missing_file;  // *error.missing_file (the pointer is into a worker's image)
    bool has_missing_file = false;
  };
  std::vector<Entry> entries;
  std::vector<pt_insn> insns;
  std::vector<pt_block> blocks;
  std::vector<pt_event> events;
  std::vector<Error> errors;
  // Past its budget (RecordSink): recording stopped there, the rest is missing.
  bool overflowed = false;
  // Empties it, keeping the memory (a chunk's recording is hundreds of MB's worth of pages
  // faulted in again otherwise).
  void Clear() {
    entries.clear();
    insns.clear();
    blocks.clear();
    events.clear();
    errors.clear();
    overflowed = false;
  }
};

// Records what DecodeInto gives, for a sink of `like`'s kind.
class RecordSink : public Sink {
 public:
  // `budget`: the bytes it may hold (RecordBudget); past them it records nothing more, says so
  // (Records::overflowed) and stops the decode (kStopDecoding).
  RecordSink(const Sink& like, bool follow_time, Records& out, uint64_t start, uint64_t budget)
      : kind_(like.kind()),
        end_on_call_(like.end_block_on_call()),
        end_on_jump_(like.end_block_on_jump()),
        coarse_(like.coarse_block_class()),
        wants_time_(like.wants_time() || follow_time),
        out_(out),
        position_(start),
        budget_(budget) {}
  DecoderKind kind() const override { return kind_; }
  bool end_block_on_call() const override { return end_on_call_; }
  bool end_block_on_jump() const override { return end_on_jump_; }
  bool wants_time() const override { return wants_time_; }
  bool wants_positions() const override { return true; }
  uint64_t position_limit() const override { return out_.overflowed ? kStopDecoding : 0; }
  void OnPosition(uint64_t offset) override { position_ = offset; }
  void OnSync(uint64_t offset) override { Add(Records::kSync, offset); }
  void OnTime(uint64_t tsc) override { Add(Records::kTime, tsc); }
  void OnInsn(const pt_insn& insn) override {
    if (!Add(Records::kInsn, out_.insns.size(), sizeof(pt_insn))) return;
    out_.insns.push_back(insn);
  }
  void OnBlock(const pt_block& block) override {
    if (!Add(Records::kBlock, out_.blocks.size(), sizeof(pt_block))) return;
    out_.blocks.push_back(block);
    // An indirect jump's block ends in ptic_error or ptic_jump as the decoder's history has it
    // (libipt's block cache, the walk's node), which a sink that reads classes coarsely does not
    // tell apart: recorded alike, so that decodes with other histories stitch.
    if (coarse_ && block.iclass == ptic_jump) out_.blocks.back().iclass = ptic_error;
  }
  void OnEvent(const pt_event& event) override {
    if (!Add(Records::kEvent, out_.events.size(), sizeof(pt_event))) return;
    out_.events.push_back(event);
  }
  void OnError(const DecodeError& error) override {
    if (!Add(Records::kError, out_.errors.size(), sizeof(Records::Error))) return;
    Records::Error e{error, "", error.missing_file != nullptr};
    if (e.has_missing_file) e.missing_file = *error.missing_file;
    out_.errors.push_back(std::move(e));
  }

 private:
  // False (nothing recorded) once past the budget.
  bool Add(Records::Kind kind, uint64_t value, uint64_t more = 0) {
    held_ += sizeof(Records::Entry) + more;
    if (held_ > budget_) out_.overflowed = true;
    if (out_.overflowed) return false;
    out_.entries.push_back({kind, position_, value});
    return true;
  }
  DecoderKind kind_;
  bool end_on_call_, end_on_jump_, coarse_, wants_time_;
  Records& out_;
  uint64_t position_;
  uint64_t budget_, held_ = 0;
};

bool SameInsn(const pt_insn& a, const pt_insn& b) {
  // Not isid: section ids are the worker's image's (no sink shows them).
  return a.ip == b.ip && a.mode == b.mode && a.iclass == b.iclass && a.size == b.size &&
         a.speculative == b.speculative && a.truncated == b.truncated &&
         std::memcmp(a.raw, b.raw, std::min<size_t>(a.size, sizeof(a.raw))) == 0;
}

bool SameBlock(const pt_block& a, const pt_block& b) {
  // Not isid (the worker's image's section ids).
  return a.ip == b.ip && a.end_ip == b.end_ip && a.ninsn == b.ninsn && a.mode == b.mode &&
         a.iclass == b.iclass && a.speculative == b.speculative && a.truncated == b.truncated &&
         (!a.truncated ||
          (a.size == b.size && std::memcmp(a.raw, b.raw, std::min<size_t>(a.size, 15)) == 0));
}

bool SameError(const Records::Error& a, const Records::Error& b) {
  const DecodeError &x = a.error, &y = b.error;
  return x.code == y.code && x.offset == y.offset && x.ip == y.ip &&
         x.during_sync == y.during_sync && x.gap.begin == y.gap.begin && x.gap.end == y.gap.end &&
         a.has_missing_file == b.has_missing_file && a.missing_file == b.missing_file;
}

bool Same(const Records& a, size_t i, const Records& b, size_t j) {
  const Records::Entry &x = a.entries[i], &y = b.entries[j];
  if (x.kind != y.kind || x.position != y.position) return false;
  switch (x.kind) {
    case Records::kSync:
    case Records::kTime:
      return x.value == y.value;
    case Records::kInsn:
      return SameInsn(a.insns[x.value], b.insns[y.value]);
    case Records::kBlock:
      return SameBlock(a.blocks[x.value], b.blocks[y.value]);
    case Records::kEvent:
      // Bytewise: an event that differs in bytes no sink reads only costs a decode again.
      // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): padding too, on purpose (above)
      return std::memcmp(&a.events[x.value], &b.events[y.value], sizeof(pt_event)) == 0;
    case Records::kError:
      return SameError(a.errors[x.value], b.errors[y.value]);
  }
  return false;
}

// A stitch of `cur` (decoded from before the boundary) to `next` (decoded from the boundary):
// cur's records before `first` are the serial decode's, and next's from `second` on.
struct Stitch {
  size_t first = 0, second = 0;
};

// The stitch at the chunk boundary `boundary` whose overlap ends at the PSB `overlap_end`
// (kNone: the trace's end, where both decoders end): the first record of cur after the
// boundary (not before `from`) from which cur's records up to the overlap's end are next's,
// at the same trace offsets, and next has no more records there. Records at a single offset
// prove nothing (a loop within one packet would match at any repetition), so the overlap must
// reach a later offset; at the trace's end both must end alike.
std::optional<Stitch> FindStitch(const Records& cur, size_t from, uint64_t boundary,
                                 uint64_t overlap_end, const Records& next) {
  const auto& ce = cur.entries;
  const auto& ne = next.entries;
  // (A summary whose tail holds fewer records than its first one's index: nothing to stitch
  // at; decode fuzzer: an offset into an empty tail, UBSan.)
  if (from > ce.size()) return std::nullopt;
  size_t m = ce.size();
  // Next's records end the overlap at e: all of next's records in it, and (but at the trace's
  // end) at least one after it.
  size_t e = ne.size();
  if (overlap_end != kNone) {
    const auto in_overlap = [&](const Records::Entry& r) { return r.position <= overlap_end; };
    m = std::partition_point(ce.begin() + from, ce.end(), in_overlap) - ce.begin();
    e = std::partition_point(ne.begin(), ne.end(), in_overlap) - ne.begin();
    if (e == ne.size()) return std::nullopt;
  }
  const size_t first =
      std::partition_point(ce.begin() + from, ce.begin() + m,
                           [&](const Records::Entry& r) { return r.position <= boundary; }) -
      ce.begin();
  // A stitch at i needs cur's records [i, m) to be next's last ones before e: the first i is
  // where their common suffix begins (linear: comparing from each i was quadratic in the
  // records of a loop within one packet, 73 s for a 6.6 KB fuzzer input).
  size_t common = 0;
  while (common < m - first && common < e && Same(cur, m - 1 - common, next, e - 1 - common)) {
    ++common;
  }
  if (common == 0) return std::nullopt;
  const size_t i = m - common;
  if (overlap_end != kNone && ce[m - 1].position == ce[i].position) return std::nullopt;
  return Stitch{i, e - common};
}

// Gives records to the sink, counting them as the decoder loops do. The time is told when it
// changes (as TimeWatch does): a decoder that synchronised at a chunk's PSB tells it again.
class Replayer {
 public:
  Replayer(Sink& sink, DecodeTotals& totals)
      : sink_(sink), whole_(sink.whole_block_sink()), totals_(totals) {}
  // Records [from, to) of `r`.
  void Replay(const Records& r, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const Records::Entry& e = r.entries[i];
      switch (e.kind) {
        case Records::kSync:
          Sync(e.value);
          break;
        case Records::kTime:
          Time(e.value);
          break;
        case Records::kInsn:
          Insn(r.insns[e.value]);
          break;
        case Records::kBlock:
          Block(r.blocks[e.value]);
          break;
        case Records::kEvent:
          Event(r.events[e.value]);
          break;
        case Records::kError: {
          const Records::Error& err = r.errors[e.value];
          DecodeError error = err.error;
          error.missing_file = err.has_missing_file ? &err.missing_file : nullptr;
          Error(error);
          break;
        }
      }
    }
  }
  void Sync(uint64_t offset) {
    ++totals_.syncs;
    sink_.OnSync(offset);
  }
  void Time(uint64_t tsc) {
    if (tsc == last_time_) return;
    last_time_ = tsc;
    sink_.OnTime(tsc);
  }
  void Insn(const pt_insn& insn) {
    ++totals_.instructions;
    sink_.OnInsn(insn);
  }
  void Block(const pt_block& block) {
    totals_.instructions += block.ninsn;
    ++totals_.blocks;
    sink_.OnBlock(block);
  }
  // A walked block (Sink::OnWholeBlock), to the sink it reaches unchanged.
  void WholeBlock(const pt_block& block, BlockMemo& memo) {
    totals_.instructions += block.ninsn;
    ++totals_.blocks;
    whole_.OnWholeBlock(block, memo);
  }
  // A run of walked blocks (Sink::OnWholeRun), to the sink it reaches unchanged.
  void WholeRun(const WalkedRun& run) {
    totals_.instructions += run.ninsn;
    totals_.blocks += run.blocks.size() * run.repeat;
    whole_.OnWholeRun(run);
  }
  void Event(const pt_event& event) {
    ++totals_.events;
    sink_.OnEvent(event);
  }
  void Error(const DecodeError& error) {
    ++totals_.errors;
    if (error.is_gap()) ++totals_.gaps;
    ++totals_.errors_by_code[error.code];
    sink_.OnError(error);
  }

 private:
  Sink& sink_;
  Sink& whole_;  // sink_.whole_block_sink()
  DecodeTotals& totals_;
  uint64_t last_time_ = ~0ull;
};

// A decode given straight to a Replayer after its first `skip` records (those RecordSink
// would record), which were given already.
class TailSink : public Sink {
 public:
  // `end`: the records after the first `end` are not given either.
  TailSink(const Sink& like, bool follow_time, Replayer& replay, size_t skip,
           size_t end = ~size_t{0})
      : kind_(like.kind()),
        end_on_call_(like.end_block_on_call()),
        end_on_jump_(like.end_block_on_jump()),
        coarse_(like.coarse_block_class()),
        wants_time_(like.wants_time() || follow_time),
        replay_(replay),
        skip_(skip),
        left_(end - skip) {}
  DecoderKind kind() const override { return kind_; }
  bool end_block_on_call() const override { return end_on_call_; }
  bool end_block_on_jump() const override { return end_on_jump_; }
  bool wants_time() const override { return wants_time_; }
  void OnSync(uint64_t offset) override {
    if (Pass()) replay_.Sync(offset);
  }
  void OnTime(uint64_t tsc) override {
    if (Pass()) replay_.Time(tsc);
  }
  void OnInsn(const pt_insn& insn) override {
    if (Pass()) replay_.Insn(insn);
  }
  // The decoder walks for a sink that reads classes coarsely, as on one thread.
  bool coarse_block_class() const override { return coarse_; }
  void OnBlock(const pt_block& block) override {
    if (Pass()) replay_.Block(block);
  }
  void OnWholeBlock(const pt_block& block, BlockMemo& memo) override {
    if (Pass()) replay_.WholeBlock(block, memo);
  }
  // In one step where all its blocks pass, else one by one.
  void OnWholeRun(const WalkedRun& run) override {
    const size_t n = run.blocks.size() * run.repeat;
    if (skip_ != 0 || left_ < n) return Sink::OnWholeRun(run);
    left_ -= n;
    replay_.WholeRun(run);
  }
  void OnEvent(const pt_event& event) override {
    if (Pass()) replay_.Event(event);
  }
  void OnError(const DecodeError& error) override {
    if (Pass()) replay_.Error(error);
  }

 private:
  bool Pass() {
    if (skip_ == 0) return left_ > 0 && left_-- > 0;
    --skip_;
    return false;
  }
  DecoderKind kind_;
  bool end_on_call_, end_on_jump_, coarse_, wants_time_;
  Replayer& replay_;
  size_t skip_;
  size_t left_;
};

// A chunk's decode given to a ChunkSummary (on a worker thread): its head, the records at
// offsets up to `head_end` (kNone: the first chunk, no head), sets the summary's state; the
// records after it up to the first past `tail_end` (kNone: all) are summarised and counted as
// Replayer counts them. The head (with the first record after it) and the tail, the records past
// `boundary` (the next chunk's start) up to there, are recorded for the stitches.
class SummaryTap : public Sink {
 public:
  SummaryTap(ChunkSummary& summary, uint64_t start, uint64_t head_end, uint64_t boundary,
             uint64_t tail_end, Records& head, Records& tail)
      : summary_(summary),
        sink_(summary.sink()),
        flow_(dynamic_cast<FlowSink*>(&sink_)),
        head_end_(head_end),
        boundary_(boundary),
        tail_end_(tail_end),
        head_(sink_, false, head, start, ~uint64_t{0}),
        tail_(sink_, false, tail, start, ~uint64_t{0}),
        in_head_(head_end != kNone) {
    if (!in_head_) summary_.BeginSummary();
  }
  DecoderKind kind() const override { return sink_.kind(); }
  bool end_block_on_call() const override { return sink_.end_block_on_call(); }
  bool end_block_on_jump() const override { return sink_.end_block_on_jump(); }
  // So that the decoder walks (FastBlockDecoder::SetWalk) for a summary that reads classes so,
  // as it does for the sink on one thread; the head and the tail record walked blocks as blocks.
  bool coarse_block_class() const override { return sink_.coarse_block_class(); }
  bool wants_time() const override { return sink_.wants_time(); }
  bool wants_positions() const override { return true; }
  void OnPosition(uint64_t offset) override {
    position_ = offset;
    summarising_ = body_ && position_ <= boundary_;
  }
  // In the chunk's body only its end matters (the head and the tail record every position);
  // past the tail nothing: the decode ends there (the rest of its span is the next chunk's,
  // decoded there; its first record past the tail is all the stitch needs, and it is the tail's).
  uint64_t position_limit() const override { return body_ ? boundary_ : past_ ? kStopDecoding : 0; }
  void OnSync(uint64_t offset) override {
    if (Step([&](Sink& s) { s.OnSync(offset); })) ++counted_.syncs;
  }
  // Blocks and runs in the chunk's body (most of them) go straight to the summary, numbered
  // only: what they count is the decode's totals less what was not summarised (Done), and
  // whether the summary failed is asked at each OnProgress. (Counting each run here, and asking
  // at every 1024th record, took 4 % of the CPU time of `stats -j2` on one core.)
  void OnWholeBlock(const pt_block& block, BlockMemo& memo) override {
    if (summarising_) [[likely]] {
      ++index_;
      if (flow_ != nullptr) [[likely]]
        return flow_->OnWholeBlock(block, memo);
      sink_.OnWholeBlock(block, memo);
      return;
    }
    WholeBlockAtEdge(block, memo);
  }
  // A run in the chunk's body (the block loop gives one only where no position is told within
  // it): in one step to the summary, numbered as its blocks one by one would be.
  void OnWholeRun(const WalkedRun& run) override {
    if (!summarising_) [[unlikely]]
      return RunAtEdge(run);
    index_ += run.blocks.size() * run.repeat;
    if (flow_ != nullptr) [[likely]]
      return flow_->OnWholeRun(run);
    sink_.OnWholeRun(run);
  }
  // Every kBlocksPerProgress blocks or runs of the decode.
  void OnProgress(uint64_t offset) override {
    if (body_ && summary_.failed()) {
      failed_ = true;
      end_ = index_;
      body_ = summarising_ = false;
    }
  }
  void OnTime(uint64_t tsc) override {
    Step([&](Sink& s) { s.OnTime(tsc); });
  }
  void OnInsn(const pt_insn& insn) override {
    if (!Step([&](Sink& s) { s.OnInsn(insn); })) ++unsummarised_.instructions;
  }
  void OnBlock(const pt_block& block) override {
    if (!Step([&](Sink& s) { s.OnBlock(block); })) {
      unsummarised_.instructions += block.ninsn;
      ++unsummarised_.blocks;
    }
  }
  void OnEvent(const pt_event& event) override {
    if (Step([&](Sink& s) { s.OnEvent(event); })) ++counted_.events;
  }
  void OnError(const DecodeError& error) override {
    if (Step([&](Sink& s) { s.OnError(error); })) {
      ++counted_.errors;
      if (error.is_gap()) ++counted_.gaps;
      ++counted_.errors_by_code[error.code];
    }
  }

  // After Done: records [first(), end()) were summarised; the tail's first record is record
  // tail_base().
  size_t first() const { return first_; }
  size_t end() const { return end_; }
  size_t tail_base() const { return tail_base_; }
  const DecodeTotals& counted() const { return counted_; }
  // After the decode, given its totals (DecodeIntoCanonical's: every block given to this
  // sink): a chunk with nothing after its head summarised nothing.
  void Done(const DecodeTotals& decoded) {
    if (in_head_) first_ = end_ = index_;
    if (body_) end_ = index_;
    counted_.instructions = decoded.instructions - unsummarised_.instructions;
    counted_.blocks = decoded.blocks - unsummarised_.blocks;
  }

 private:
  // Gives the record to the summary, the head and the tail as they want it; whether it was
  // summarised.
  // OnWholeBlock in the head, the tail or past it (out of line: the body's path saves no
  // registers).
  [[gnu::noinline]] void WholeBlockAtEdge(const pt_block& block, BlockMemo& memo) {
    if (!Step([&](Sink& s) { s.OnWholeBlock(block, memo); })) {
      unsummarised_.instructions += block.ninsn;
      ++unsummarised_.blocks;
    }
  }
  // OnWholeRun where OnWholeBlock would not take the body's path: block by block (out of line,
  // as WholeBlockAtEdge, so that the body's path ends in a tail call).
  [[gnu::noinline]] void RunAtEdge(const WalkedRun& run) { Sink::OnWholeRun(run); }
  template <typename Give>
  bool Step(Give give) {
    const bool summarised = StepIn(give);
    body_ = !in_head_ && !past_ && !failed_;
    summarising_ = body_ && position_ <= boundary_;
    return summarised;
  }
  template <typename Give>
  bool StepIn(Give give) {
    if (body_) end_ = index_;  // the body's blocks and runs before this record were summarised
    const size_t k = index_++;
    // The chunk's body: summarised (a summary that failed is not asked every record).
    if (!in_head_ && position_ <= boundary_ && !past_) [[likely]] {
      end_ = k + 1;
      if ((k & 1023) == 0 && summary_.failed()) failed_ = true;
      if (failed_) return false;
      give(sink_);
      return true;
    }
    if (in_head_) {
      head_.OnPosition(position_);
      give(head_);  // the head, and the first record after it
      if (position_ <= head_end_) {
        give(sink_);
        return false;
      }
      in_head_ = false;
      first_ = end_ = k;
      summary_.BeginSummary();
    }
    if (position_ > boundary_ && !past_) {
      if (!tailing_) tail_base_ = k;
      tailing_ = true;
      tail_.OnPosition(position_);
      give(tail_);
    }
    if (past_ || (tail_end_ != kNone && position_ > tail_end_)) {
      past_ = true;
      return false;
    }
    end_ = k + 1;
    if (failed_ || summary_.failed()) return false;  // its records will be given instead
    give(sink_);
    return true;
  }

  ChunkSummary& summary_;
  Sink& sink_;
  // The summary's sink when it is a FlowSink (stats', folded's and calls' are: FlowChunk), whose
  // model the body's blocks and runs are given to directly, not through a virtual call (perf
  // cpu-clock samples of `stats -j2` on an emulated recording: OnWholeRun here 2.8 % of all with
  // it, 1.5 % without).
  FlowSink* flow_;
  const uint64_t head_end_, boundary_, tail_end_;
  RecordSink head_, tail_;
  bool in_head_;
  bool body_ = !in_head_;  // neither in the head nor past the tail, nor failed
  // body_, and the position is in the chunk (not in the tail): a block or run goes to the
  // summary (kept as one flag: the body's runs ask it, some 28 M times for a 56 MB trace).
  bool summarising_ = body_;
  bool failed_ = false;
  bool tailing_ = false;
  bool past_ = false;
  uint64_t position_ = 0;
  size_t index_ = 0;
  size_t first_ = 0, end_ = 0;
  size_t tail_base_ = 0;
  DecodeTotals counted_;  // of the records summarised; instructions and blocks by Done
  struct {
    uint64_t instructions = 0, blocks = 0;
  } unsummarised_;  // of the records given that were not summarised
};

// The first PSB at or after `offset` of the packet decoder's trace, or kNone.
uint64_t PsbAtOrAfter(pt_packet_decoder* dec, uint64_t offset) {
  // pt_pkt_sync_forward looks from the position after the last sync: from `offset` with the
  // decoder set to offset - 1 (it backs up to find a PSB the last packet cut into).
  int status = 0;
  if (offset == 0) {
    status = pt_pkt_sync_set(dec, 0);
    if (status >= 0) {
      // A fresh search from the trace's start.
      status = pt_pkt_sync_forward(dec);
      uint64_t sync = 0;
      if (status >= 0 && pt_pkt_get_sync_offset(dec, &sync) >= 0 && sync == 0) return 0;
    }
  }
  status = pt_pkt_sync_set(dec, offset == 0 ? 0 : offset - 1);
  if (status < 0) return kNone;
  if (pt_pkt_sync_forward(dec) < 0) return kNone;
  uint64_t sync = 0;
  if (pt_pkt_get_sync_offset(dec, &sync) < 0 || sync < offset) return kNone;
  return sync;
}

}  // namespace

void AddFlowTotals(DecodeTotals& to, const DecodeTotals& from) {
  to.instructions += from.instructions;
  to.blocks += from.blocks;
  to.events += from.events;
  to.syncs += from.syncs;
  to.errors += from.errors;
  to.gaps += from.gaps;
  for (const auto& [code, n] : from.errors_by_code) to.errors_by_code[code] += n;
}

std::unique_ptr<ChunkSummary> Sink::NewChunkSummary(const ProgramImage& image) { return nullptr; }

void SetParallelOptions(const ParallelOptions& options) {
  std::lock_guard<std::mutex> lock(options_mu);
  parallel_options = options;
}

uint64_t RecordBudget(size_t workers) {
  return std::max<uint64_t>(uint64_t{16} << 20, (uint64_t{256} << 20) / (workers + 1));
}

ParallelOptions GetParallelOptions() {
  std::lock_guard<std::mutex> lock(options_mu);
  return parallel_options;
}

void CanonicalBlocks::SetImage(const ProgramImage& image) {
  if (&image == image_) return;
  Flush();
  image_ = &image;
  successor_.clear();
}

CanonicalBlocks::Next CanonicalBlocks::Successor(uint64_t ip, pt_exec_mode mode) {
  auto [it, inserted] = successor_.try_emplace({ip, static_cast<int>(mode)}, Next{});
  if (!inserted) return it->second;
  uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
  const size_t n = image_->Read(ip, bytes, sizeof(bytes));
  bool call = false;
  const uint64_t to = disasm_.Successor(mode, bytes, n, ip, &call);
  if (to != 0) it->second = {to, call};
  return it->second;
}

bool CanonicalBlocks::Joins(const pt_block& next) {
  const pt_block& b = block_;
  if (b.truncated || next.mode != b.mode || b.ninsn + uint32_t{next.ninsn} > 0xffff) return false;
  switch (b.iclass) {
    case ptic_other:
    case ptic_jump:
    case ptic_error:  // the block decoder leaves an indirect jump's class unknown
      break;
    case ptic_call:  // a direct call ends libipt's block the first time only
      if (inner().end_block_on_call()) return false;
      break;
    default:  // needs trace
      return false;
  }
  const Next to = Successor(b.end_ip, b.mode);
  return to.ip != 0 && to.ip == next.ip && (!to.call || !inner().end_block_on_call());
}

void CanonicalBlocks::OnBlock(const pt_block& block) {
  if (held_ && Joins(block)) {
    const uint64_t ip = block_.ip;
    const uint32_t isid = block_.isid;
    const uint16_t ninsn = block_.ninsn;
    const uint32_t speculative = block_.speculative;
    block_ = block;
    block_.ip = ip;
    block_.isid = isid;
    block_.ninsn = static_cast<uint16_t>(ninsn + block.ninsn);
    block_.speculative |= speculative;
    block_position_ = position_;
    ++joined_;
    return;
  }
  Flush();
  held_ = true;
  block_ = block;
  block_position_ = position_;
}

void CanonicalBlocks::OnWholeBlock(const pt_block& block, BlockMemo& memo) {
  // The block held (if any) joins nothing, and nothing joins this one: as if held and flushed
  // by what comes next, with the time that comes after it told as it comes. (The inner sink was
  // told this block's position: by Flush, or by OnPosition with nothing held.)
  if (held_) Flush();
  whole_->OnWholeBlock(block, memo);
}

namespace {
// CanonicalBlocks::OnWholeRun with a block held (out of line: the common path saves no
// registers and ends in a tail call).
[[gnu::noinline]] void FlushAndGiveRun(CanonicalBlocks& blocks, Sink& whole, const WalkedRun& run) {
  blocks.Flush();
  whole.OnWholeRun(run);
}
}  // namespace

void CanonicalBlocks::OnWholeRun(const WalkedRun& run) {
  if (held_) [[unlikely]]
    return FlushAndGiveRun(*this, *whole_, run);  // as OnWholeBlock
  whole_->OnWholeRun(run);
}

void CanonicalBlocks::OnPosition(uint64_t offset) {
  position_ = offset;
  if (!held_ && positions_) inner().OnPosition(offset);
}

void CanonicalBlocks::OnTime(uint64_t tsc) {
  if (!held_) {
    told_ = tsc;
    inner().OnTime(tsc);
    return;
  }
  time_held_ = true;
  time_ = tsc;
}

void CanonicalBlocks::Flush() {
  if (!held_) return;
  held_ = false;
  const bool positions = wants_positions();
  if (positions) inner().OnPosition(block_position_);
  inner().OnBlock(block_);
  // The decoder tells only changes; joined, the last one may be the time told before.
  if (time_held_) {
    time_held_ = false;
    if (time_ != told_) {
      told_ = time_;
      inner().OnTime(time_);
    }
  }
  if (positions) inner().OnPosition(position_);
}

// The blocks held were read from the image before.
void CanonicalBlocks::OnImage(const ProgramImage& image) {
  Flush();
  SetImage(image);
  inner().OnImage(image);
}
// A new decoder (which tells the time again) follows a sync, a loss or a new stream.
void CanonicalBlocks::OnStream(const StreamInfo& stream) {
  Flush();
  told_ = kNone;
  if (stream.image != nullptr) SetImage(*stream.image);
  inner().OnStream(stream);
}
void CanonicalBlocks::OnLoss(const LossInfo& loss) {
  Flush();
  told_ = kNone;
  inner().OnLoss(loss);
}
void CanonicalBlocks::OnSync(uint64_t offset) {
  Flush();
  told_ = kNone;
  inner().OnSync(offset);
}
void CanonicalBlocks::OnEvent(const pt_event& event) {
  Flush();
  inner().OnEvent(event);
}
void CanonicalBlocks::OnError(const DecodeError& error) {
  Flush();
  inner().OnError(error);
}
void CanonicalBlocks::OnInsn(const pt_insn& insn) {
  Flush();
  inner().OnInsn(insn);
}
absl::Status CanonicalBlocks::Finish(const DecodeTotals& totals) {
  Flush();
  return inner().Finish(totals);
}

absl::Status DecodeIntoCanonical(std::span<const uint8_t> trace, const TraceConfig& config,
                                 const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                                 uint64_t offset_base, const FastPathCoverage* coverage) {
  if (sink.kind() != DecoderKind::kBlock) {
    return DecodeInto(trace, config, image, sink, totals, offset_base, nullptr, coverage);
  }
  CanonicalBlocks canonical(sink, image);
  absl::Status status =
      DecodeInto(trace, config, image, canonical, totals, offset_base, nullptr, coverage);
  canonical.Flush();
  totals.blocks -= canonical.TakeJoined();
  return status;
}

absl::StatusOr<std::vector<uint64_t>> ChunkStarts(std::span<const uint8_t> trace,
                                                  const TraceConfig& config, uint64_t chunk_bytes,
                                                  const ScanProgress& scanned) {
  std::vector<uint64_t> starts = {0};
  if (trace.empty()) return starts;
  PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace, config));
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
  if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a packet decoder");
  for (;;) {
    const uint64_t start = starts.back();
    const uint64_t psb = PsbAtOrAfter(dec.get(), start + 1);  // the chunk's second PSB
    if (psb == kNone) break;
    const uint64_t next = PsbAtOrAfter(dec.get(), std::max(psb, start + chunk_bytes));
    if (next == kNone) break;
    starts.push_back(next);
    if (scanned && next / kScanReportBytes != start / kScanReportBytes) scanned(next);
  }
  return starts;
}

namespace {

// DecodeInParallel, and with `alone` DecodeInChunksAlone: the merging thread decodes each chunk
// itself, as a worker would, when it needs it (worker_images is empty then).
absl::Status DecodeChunks(std::span<const uint8_t> trace, const TraceConfig& config,
                          const ProgramImage& image,
                          std::span<const ProgramImage* const> worker_images, Sink& sink,
                          DecodeTotals& totals, uint64_t offset_base, uint64_t chunk_bytes,
                          ParallelStats* stats, bool follow_time, bool alone) {
  ParallelStats local;
  ParallelStats& st = stats != nullptr ? *stats : local;
  // Prints what this decode did, however it ends.
  struct Printer {
    const ParallelStats& st;
    uint64_t bytes;
    ~Printer() {
      if (!GetParallelOptions().print_stats) return;
      std::fprintf(stderr,
                   "ptdecode: -j: %" PRIu64 " chunks, %" PRIu64 " stitched, %" PRIu64
                   " decoded again, %" PRIu64 " summarised, %" PRIu64
                   " summaries not applied, %" PRIu64 " bytes decoded for %" PRIu64 ", %" PRIu64
                   " recordings past their budget\n",
                   st.chunks, st.stitched, st.redecoded, st.summarised, st.unsummarised,
                   st.bytes_decoded, bytes, st.overflowed);
    }
  } printer{st, trace.size()};
  // Both searches below read near every chunk start (and the kernel maps the pages around what
  // is read): the pages behind them may go.
  const ScanProgress scanned = [&sink, offset_base](uint64_t offset) {
    sink.OnScanned(offset_base + offset);
  };
  PTKIT_ASSIGN_OR_RETURN(std::vector<uint64_t> starts,
                         ChunkStarts(trace, config, chunk_bytes, scanned));
  const size_t n = starts.size();
  st.chunks += n;
  if (n == 1 || (worker_images.empty() && !alone)) {
    st.bytes_decoded += trace.size();
    if (!follow_time) return DecodeIntoCanonical(trace, config, image, sink, totals, offset_base);
    Replayer replay(sink, totals);
    TailSink all(sink, follow_time, replay, 0);
    DecodeTotals ignored;
    totals.trace_bytes += trace.size();
    return DecodeIntoCanonical(trace, config, image, all, ignored, offset_base);
  }
  // Boundary c (the start of chunk c > 0): the overlap the decoder of chunk c - 1 checks ends
  // at the next PSB (kNone: the trace's end), and that decoder ends at the PSB after it.
  std::vector<uint64_t> overlap_end(n, kNone), span_end(n, trace.size());
  {
    PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace, config));
    PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
    if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a packet decoder");
    for (size_t c = 1; c < n; ++c) {
      overlap_end[c] = PsbAtOrAfter(dec.get(), starts[c] + 1);
      const uint64_t after =
          overlap_end[c] == kNone ? kNone : PsbAtOrAfter(dec.get(), overlap_end[c] + 1);
      span_end[c - 1] = after == kNone ? trace.size() : after;
      if (starts[c] / kScanReportBytes != starts[c - 1] / kScanReportBytes) scanned(starts[c]);
    }
  }

  // Block sinks that summarise chunks (ChunkSummary) are given each chunk's summary, made on the
  // worker thread, instead of its records: the records from the first past the overlap at its
  // start (`first`) to the first past the overlap at its end (`end`). Where a summary does not
  // apply, the chunk's records are given: decoded again on the merging thread.
  // With `follow_time` the sink is told the time: a sink that ignores it (FlowSink without
  // wants_time) ignores it in its summaries too, and one that wants it (calls) models it there
  // (CallStack::CheckChunk: a chunk applies where its head left the sink's time).
  const bool summaries = sink.kind() == DecoderKind::kBlock;
  // Whether records hold the time the sink does not want. Not with summaries: the records of a
  // chunk, its summary's and its decode's again, are numbered alike (SummaryTap tells the time
  // only to a summary that wants it, as the sink does).
  const bool told_time = follow_time && !summaries;
  // What a recording may hold (RecordBudget); a failed summary's chunk is recorded whole (its
  // records are given from the summary's first on).
  const uint64_t budget = GetParallelOptions().record_budget != 0
                              ? GetParallelOptions().record_budget
                              : RecordBudget(worker_images.size());
  constexpr uint64_t kWhole = ~uint64_t{0};
  // Decodes the trace from chunk `c`'s start to span_end[last] with `img`.
  auto decode = [&](size_t c, size_t last, const ProgramImage& img, Records& out, uint64_t limit) {
    RecordSink rec(sink, told_time, out, offset_base + starts[c], limit);
    DecodeTotals ignored;  // counted when replayed
    return DecodeIntoCanonical(trace.subspan(starts[c], span_end[last] - starts[c]), config, img,
                               rec, ignored, offset_base + starts[c]);
  };

  struct Result {
    bool done = false;
    absl::Status status;
    std::unique_ptr<Records> records;  // all of the chunk's, or its head (with a summary)
    std::unique_ptr<ChunkSummary> summary;
    std::unique_ptr<Records> tail;
    size_t first = 0, end = 0, tail_base = 0;
    DecodeTotals counted;
    uint64_t bytes = 0;
  };
  std::vector<Result> results(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t next_chunk = 0, merged = 0;
  bool stop = false;
  const size_t window = worker_images.size() + 1;  // one being merged
  // Recordings merged, kept for the next chunks.
  std::vector<std::unique_ptr<Records>> pool;
  auto reuse = [&]() -> std::unique_ptr<Records> {
    std::lock_guard<std::mutex> lock(mu);
    if (pool.empty()) return std::make_unique<Records>();
    std::unique_ptr<Records> r = std::move(pool.back());
    pool.pop_back();
    r->Clear();
    return r;
  };
  auto recycle = [&](std::unique_ptr<Records> r) {
    if (r == nullptr) return;
    std::lock_guard<std::mutex> lock(mu);
    pool.push_back(std::move(r));
  };
  // Chunk c on a worker: summarised if the sink can (and summaries did not fail for the last
  // chunks), else recorded.
  auto work = [&](size_t c, const ProgramImage& img) {
    Result r;
    r.bytes = span_end[c] - starts[c];
    r.records = reuse();
    if (summaries) r.summary = sink.NewChunkSummary(img);
    if (r.summary != nullptr) {
      r.tail = reuse();
      const uint64_t boundary = c + 1 < n ? offset_base + starts[c + 1] : kNone;
      const uint64_t tail_end =
          c + 1 < n && overlap_end[c + 1] != kNone ? offset_base + overlap_end[c + 1] : kNone;
      SummaryTap tap(*r.summary, offset_base + starts[c],
                     c == 0 ? kNone : offset_base + overlap_end[c], boundary, tail_end, *r.records,
                     *r.tail);
      DecodeTotals decoded;
      r.status = DecodeIntoCanonical(trace.subspan(starts[c], span_end[c] - starts[c]), config, img,
                                     tap, decoded, offset_base + starts[c]);
      tap.Done(decoded);
      r.first = tap.first();
      r.end = tap.end();
      r.tail_base = tap.tail_base();
      r.counted = tap.counted();
      // A summary that failed here is given as one that does not apply: its records decoded
      // again by the merging thread (not recorded here: a chunk's records are some 70 MB).
      if (r.status.ok()) return r;
      r.summary.reset();
      recycle(std::move(r.tail));
      r.records->Clear();
      r.status = decode(c, c, img, *r.records, kWhole);
      return r;
    }
    r.status = decode(c, c, img, *r.records, budget);
    return r;
  };
  std::vector<std::thread> threads;
  threads.reserve(worker_images.size());
  for (const ProgramImage* img : worker_images) {
    threads.emplace_back([&, img] {
      for (;;) {
        size_t c;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || next_chunk >= n || next_chunk < merged + window; });
          if (stop || next_chunk >= n) return;
          c = next_chunk++;
        }
        Result r = work(c, *img);
        std::lock_guard<std::mutex> lock(mu);
        r.done = true;
        results[c] = std::move(r);
        cv.notify_all();
      }
    });
  }
  // Joins the threads however the merge ends.
  struct Joiner {
    std::vector<std::thread>& threads;
    std::mutex& mu;
    std::condition_variable& cv;
    bool& stop;
    ~Joiner() {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      cv.notify_all();
      for (std::thread& t : threads) t.join();
    }
  } joiner{threads, mu, cv, stop};
  auto take = [&](size_t c) -> Result {
    if (alone) return work(c, image);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return results[c].done; });
    Result r = std::move(results[c]);
    merged = c + 1;
    cv.notify_all();
    return r;
  };

  totals.trace_bytes += trace.size();
  Replayer replay(sink, totals);
  // Chunk `c`'s summary given to the sink (its records, decoded again, when it does not apply).
  // After kMaxUnapplied summaries in a row that failed on their worker (what the chunk held is
  // not modelled: e.g. a jump with no frame of the chunk's own, common in optimised code with
  // tail calls) or did not apply to a sink in a state no summary applies to
  // (Sink::summaries_apply: a call stack deeper than CallStack::kMaxFrames), the rest of the
  // trace is decoded on this thread (`rest_decoded`): chunks decoded twice cost more than one
  // thread (stats of a synthesized walk 2,000 M instructions deep, 66 MB: 39.0 CPU s at -j2,
  // every chunk decoded again, against 8.5 s at -j1; now 9.6 s).
  size_t unapplied_in_a_row = 0;
  bool rest_decoded = false;
  auto apply = [&](size_t c, Result& r) -> absl::Status {
    if (r.summary->ApplyTo()) {
      ++st.summarised;
      unapplied_in_a_row = 0;
      AddFlowTotals(totals, r.counted);
    } else if ((r.summary->failed() || !sink.summaries_apply()) &&
               ++unapplied_in_a_row >= kMaxUnapplied) {
      ++st.unsummarised;
      TailSink rest(sink, told_time, replay, r.first);
      DecodeTotals ignored;
      PTKIT_RETURN_IF_ERROR(DecodeIntoCanonical(trace.subspan(starts[c]), config, image, rest,
                                                ignored, offset_base + starts[c]));
      st.bytes_decoded += trace.size() - starts[c];
      rest_decoded = true;
    } else {
      // Its records [first, end), decoded again straight into the sink.
      ++st.unsummarised;
      TailSink range(sink, told_time, replay, r.first, r.end);
      DecodeTotals ignored;
      PTKIT_RETURN_IF_ERROR(DecodeIntoCanonical(trace.subspan(starts[c], span_end[c] - starts[c]),
                                                config, image, range, ignored,
                                                offset_base + starts[c]));
      st.bytes_decoded += span_end[c] - starts[c];
    }
    recycle(std::move(r.records));
    recycle(std::move(r.tail));
    r.summary.reset();
    return absl::OkStatus();
  };
  // Merging either a summarised chunk (`summarised`, chunk `run_start`) or a run of records:
  // `cur`, decoded from chunk `run_start` through chunk `run_last`, whose records before `skip`
  // were given already.
  Result first = take(0);
  PTKIT_RETURN_IF_ERROR(first.status);
  st.bytes_decoded += first.bytes;
  Result summarised;
  std::unique_ptr<Records> cur;
  if (first.summary != nullptr) {
    summarised = std::move(first);
  } else {
    cur = std::move(first.records);
  }
  size_t run_start = 0, run_last = 0, skip = 0;
  // A recording past its budget: the rest of the trace from the run's start, on this thread,
  // straight into the sink (its records before `skip` were given).
  auto rest_serially = [&]() -> absl::Status {
    ++st.overflowed;
    TailSink tail(sink, told_time, replay, skip);
    DecodeTotals ignored;
    PTKIT_RETURN_IF_ERROR(DecodeIntoCanonical(trace.subspan(starts[run_start]), config, image, tail,
                                              ignored, offset_base + starts[run_start]));
    st.bytes_decoded += trace.size() - starts[run_start];
    return absl::OkStatus();
  };
  if (cur != nullptr && cur->overflowed) return rest_serially();
  for (size_t c = 1; c < n; ++c) {
    Result next = take(c);
    PTKIT_RETURN_IF_ERROR(next.status);
    st.bytes_decoded += next.bytes;
    if (cur != nullptr && c <= run_last) {  // the run holds it
      recycle(std::move(next.records));
      continue;
    }
    // Cut short: no stitch (after a summary, decoded again below from the summary's chunk).
    const bool next_cut = next.records != nullptr && next.records->overflowed;
    if (cur != nullptr && next_cut) {
      return rest_serially();  // (cur's records from `skip` on are decoded again there)
    }
    const uint64_t boundary = offset_base + starts[c];
    const uint64_t end = overlap_end[c] == kNone ? kNone : offset_base + overlap_end[c];
    // The stitch, and the first record of `next` that is the serial decode's after cur's (or
    // the summary's) last, at the first record past the overlap.
    const Records& before = cur != nullptr ? *cur : *summarised.tail;
    const size_t base = cur != nullptr ? 0 : summarised.tail_base;
    const size_t from = cur != nullptr ? skip : std::max(summarised.first, base) - base;
    std::optional<Stitch> stitch =
        next_cut ? std::nullopt : FindStitch(before, from, boundary, end, *next.records);
    size_t cut = 0, resume = 0;
    if (stitch) {
      cut = stitch->first;
      while (cut < before.entries.size() && (end == kNone || before.entries[cut].position <= end)) {
        ++cut;
      }
      resume = stitch->second + (cut - stitch->first);
      cut += base;
      // A summary covers what it covers: the stitch must be at its edges.
      if ((cur == nullptr && cut != summarised.end) ||
          (next.summary != nullptr && resume != next.first)) {
        stitch.reset();
      }
    }
    if (stitch) {
      ++st.stitched;
      if (cur != nullptr) {
        replay.Replay(*cur, skip, cut);
        recycle(std::exchange(cur, nullptr));
      } else {
        PTKIT_RETURN_IF_ERROR(apply(run_start, summarised));
        if (rest_decoded) return absl::OkStatus();
      }
      run_start = run_last = c;
      if (next.summary != nullptr) {
        summarised = std::move(next);
      } else {
        cur = std::move(next.records);
        skip = resume;
      }
      sink.OnProgress(boundary);
      continue;
    }
    ++st.redecoded;
    if (cur == nullptr) {  // the summarised chunk's records, from its summary's first
      skip = summarised.first;
      recycle(std::move(summarised.records));
      recycle(std::move(summarised.tail));
      summarised.summary.reset();
    }
    if (c - run_start >= kMaxRunChunks) {
      // Boundaries that do not stitch, one after the other: the rest decoded serially, on
      // this thread, straight into the sink.
      TailSink tail(sink, told_time, replay, skip);
      DecodeTotals ignored;
      PTKIT_RETURN_IF_ERROR(DecodeIntoCanonical(trace.subspan(starts[run_start]), config, image,
                                                tail, ignored, offset_base + starts[run_start]));
      st.bytes_decoded += trace.size() - starts[run_start];
      return absl::OkStatus();
    }
    // Decoded again from the run's start on this thread, through twice as many chunks: a trace
    // where no boundary stitches costs a few serial decodes, not one per chunk.
    run_last = std::min(n - 1, c + (c - run_start));
    recycle(std::move(next.records));
    recycle(std::move(next.tail));
    std::unique_ptr<Records> again = reuse();
    PTKIT_RETURN_IF_ERROR(decode(run_start, run_last, image, *again, budget));
    st.bytes_decoded += span_end[run_last] - starts[run_start];
    recycle(std::move(cur));
    cur = std::move(again);
    if (cur->overflowed) return rest_serially();
  }
  if (cur != nullptr) {
    replay.Replay(*cur, skip, cur->entries.size());
  } else {
    PTKIT_RETURN_IF_ERROR(apply(run_start, summarised));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeInParallel(std::span<const uint8_t> trace, const TraceConfig& config,
                              const ProgramImage& image,
                              std::span<const ProgramImage* const> worker_images, Sink& sink,
                              DecodeTotals& totals, uint64_t offset_base, uint64_t chunk_bytes,
                              ParallelStats* stats, bool follow_time) {
  return DecodeChunks(trace, config, image, worker_images, sink, totals, offset_base, chunk_bytes,
                      stats, follow_time, /*alone=*/false);
}

absl::Status DecodeInChunksAlone(std::span<const uint8_t> trace, const TraceConfig& config,
                                 const ProgramImage& image, Sink& sink, DecodeTotals& totals,
                                 uint64_t offset_base, uint64_t chunk_bytes, ParallelStats* stats,
                                 bool follow_time) {
  return DecodeChunks(trace, config, image, {}, sink, totals, offset_base, chunk_bytes, stats,
                      follow_time, /*alone=*/true);
}

OneThread PlanOneThread(std::span<const uint8_t> trace, const TraceConfig& config, Sink& sink,
                        const ProgramImage& image, uint64_t offset_base) {
  OneThread plan;
  const ParallelOptions options = GetParallelOptions();
  const uint64_t chunk_bytes = options.summary_chunk_bytes != 0
                                   ? options.summary_chunk_bytes
                                   : SummaryChunkBytes(trace.size(), 1);
  if (trace.size() <= chunk_bytes || GetBlockDecoderImpl() == BlockDecoderImpl::kLibipt ||
      sink.kind() != DecoderKind::kBlock || sink.NewChunkSummary(image) == nullptr) {
    return plan;
  }
  absl::StatusOr<pt_config> pt = MakePtConfig(trace, config);
  if (!pt.ok()) return plan;  // DecodeInto says why
  plan.coverage = FastPathCovers(
      *pt, [&sink, offset_base](uint64_t offset) { sink.OnScanned(offset_base + offset); });
  if (!plan.coverage->blocks) plan.chunk_bytes = chunk_bytes;
  return plan;
}

bool DecodesInParallel() { return GetParallelOptions().jobs > 1; }

uint64_t SummaryChunkBytes(uint64_t trace_bytes, unsigned jobs, uint64_t psb_spacing) {
  const uint64_t threads = std::max(jobs, 1u);
  const uint64_t least = std::max(kMinSummaryChunkBytes, kMinPsbsPerSummaryChunk * psb_spacing);
  const uint64_t per_thread = std::clamp<uint64_t>(trace_bytes / (threads * least), 1, 8);
  const uint64_t bytes = std::max(trace_bytes / (threads * per_thread), least);
  return std::min(bytes, std::max(kMaxSummaryChunkBytes, 2 * least));
}

uint64_t PsbSpacing(std::span<const uint8_t> trace, const TraceConfig& config) {
  absl::StatusOr<pt_config> pt = MakePtConfig(trace, config);
  if (!pt.ok()) return 0;
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&*pt));
  if (!dec) return 0;
  const uint64_t first = PsbAtOrAfter(dec.get(), 0);
  if (first == kNone) return 0;
  uint64_t last = first;
  int n = 0;
  for (; n < 16; ++n) {
    const uint64_t next = PsbAtOrAfter(dec.get(), last + 1);
    if (next == kNone) break;
    last = next;
  }
  return n == 0 ? 0 : (last - first) / n;
}

uint64_t ChunkBytesFor(Sink& sink, const ProgramImage& image, const ParallelOptions& options,
                       std::span<const uint8_t> trace, const TraceConfig& config) {
  if (sink.kind() == DecoderKind::kBlock && sink.NewChunkSummary(image) != nullptr) {
    if (options.summary_chunk_bytes != 0) return options.summary_chunk_bytes;
    // A trace of one chunk at most needs no PSB spacing (its PSBs may be all of it).
    if (trace.size() <= kMinSummaryChunkBytes) return kMinSummaryChunkBytes;
    return SummaryChunkBytes(trace.size(), options.jobs, PsbSpacing(trace, config));
  }
  if (!options.jobs_for_records) return 0;
  if (options.chunk_bytes != 0) return options.chunk_bytes;
  return GetBlockDecoderImpl() == BlockDecoderImpl::kLibipt ? kDefaultChunkBytes : 0;
}

absl::StatusOr<DecodeTotals> DecodeTraceWithJobs(std::span<const uint8_t> trace,
                                                 const TraceConfig& config,
                                                 const ProgramImage& image,
                                                 const ImageLoader& load_image, Sink& sink) {
  const ParallelOptions options = GetParallelOptions();
  // 0: one thread (ChunkBytesFor makes a summary to ask, which one thread does not need).
  const uint64_t chunk_bytes =
      DecodesInParallel() ? ChunkBytesFor(sink, image, options, trace, config) : 0;
  if (chunk_bytes == 0 || trace.size() <= chunk_bytes) {
    DecodeTotals totals;
    const OneThread plan = PlanOneThread(trace, config, sink, image);
    if (plan.chunk_bytes != 0) {
      PTKIT_RETURN_IF_ERROR(
          DecodeInChunksAlone(trace, config, image, sink, totals, 0, plan.chunk_bytes));
    } else {
      PTKIT_RETURN_IF_ERROR(DecodeIntoCanonical(trace, config, image, sink, totals, 0,
                                                plan.coverage ? &*plan.coverage : nullptr));
    }
    PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
    return totals;
  }
  std::vector<std::unique_ptr<ProgramImage>> owned;
  std::vector<const ProgramImage*> images;
  for (unsigned i = 0; i < options.jobs; ++i) {
    PTKIT_ASSIGN_OR_RETURN(owned.emplace_back(), load_image());
    images.push_back(owned.back().get());
  }
  DecodeTotals totals;
  PTKIT_RETURN_IF_ERROR(
      DecodeInParallel(trace, config, image, images, sink, totals, 0, chunk_bytes));
  PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
  return totals;
}

}  // namespace ptkit::decoder
