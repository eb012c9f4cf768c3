#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/parallel_decode.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {
namespace {

// Text lines are indented two spaces per depth up to kMaxIndentDepth. A deeper line is
// indented as at kMaxIndentDepth and says its depth ("[depth 1234] > f"): code that calls
// itself without end fills the call stack (CallStack::kMaxFrames deep), and full indentation
// would print 131 KB of spaces a line, gigabytes for a trace of a few bytes.
constexpr size_t kMaxIndentDepth = 100;

// A line is its prefix, which says where it is (the instructions before it, the depth), and
// its tail, what happened there: a chunk's tails are written on its worker thread, the prefixes
// by the merge, which knows where the chunk is.

// Text: the instruction count, then the indentation of `depth` ("[depth N] " past
// kMaxIndentDepth). JSON: the object's "at" and "depth".
void AppendPrefix(Buffer& buf, bool json, uint64_t count, size_t depth) {
  if (json) {
    fmt::format_to(std::back_inserter(buf), FMT_COMPILE("{{\"at\":{},\"depth\":{},"), count, depth);
    return;
  }
  const size_t indent = 2 * std::min(depth, kMaxIndentDepth);
  // The count (10 or up to 20 digits), a space, the indentation, "[depth N] ".
  char* p = Reserve(buf, 21 + indent + 29);
  p = WriteDecimal(p, count, 10);
  *p++ = ' ';
  std::memset(p, ' ', indent);
  p += indent;
  if (depth > kMaxIndentDepth) p = WriteText(WriteDecimal(WriteText(p, "[depth "), depth), "] ");
  Commit(buf, p);
}

// A frame pushed: "> f", "> h (signal)" (a handler entered by the kernel, not called) or, for
// the function that was running when tracing began (implicit), "[f]". `lines`: --srcline.
void AppendEnterTail(Buffer& buf, bool json, const Function& fn, const Frame& frame,
                     SourceLines* lines) {
  if (frame.implicit) {
    if (json) {
      buf.append(std::string_view("\"running\":"));
      AppendJsonString(buf, fn.name);
      buf.append(std::string_view("}\n"));
    } else {
      // Bracketed like a fallback name ("[libc.so.6]"), which already has its brackets.
      const bool bracketed = fn.name.starts_with('[');
      char* p = Reserve(buf, fn.name.size() + 3);
      if (!bracketed) *p++ = '[';
      p = WriteText(p, fn.name);
      if (!bracketed) *p++ = ']';
      *p++ = '\n';
      Commit(buf, p);
    }
    return;
  }
  // --srcline: where the called function starts (functions are named by their entry).
  const bool srcline = lines != nullptr && fn.address != 0 && fn.image != nullptr;
  if (json) {
    buf.append(std::string_view("\"call\":"));
    AppendJsonString(buf, fn.name);
    fmt::format_to(std::back_inserter(buf), FMT_COMPILE(",\"address\":\"{:#x}\""), fn.address);
    if (frame.signal) buf.append(std::string_view(",\"signal\":true"));
    if (srcline) AppendSrcline(buf, lines, *fn.image, fn.address, true);
    buf.append(std::string_view("}\n"));
    return;
  }
  char* p = WriteText(Reserve(buf, 2 + fn.name.size() + 11), "> ");
  p = WriteText(p, fn.name);
  if (frame.signal) p = WriteText(p, " (signal)");
  if (srcline) {
    Commit(buf, p);
    AppendSrcline(buf, lines, *fn.image, fn.address, false);
    buf.push_back('\n');
  } else {
    *p++ = '\n';
    Commit(buf, p);
  }
}

// A frame popped by a return (or left by a jump to a frame below): "< f (N insns)" or
// "< f (N insns, T ticks)". Elapsed TSC ticks: the decoder's time at the return minus at the
// call, when both are known (TSC is monotonic; a smaller value cannot be a duration).
void AppendExitTail(Buffer& buf, bool json, const Function& fn, const Frame& frame, uint64_t count,
                    bool timed, uint64_t tsc) {
  const uint64_t insns = count - frame.entry_count;
  const bool has_ticks = frame.entry_timed && timed && tsc >= frame.entry_tsc;
  const uint64_t ticks = has_ticks ? tsc - frame.entry_tsc : 0;
  if (json) {
    buf.append(std::string_view("\"return\":"));
    AppendJsonString(buf, fn.name);
    fmt::format_to(std::back_inserter(buf), FMT_COMPILE(",\"insns\":{}"), insns);
    if (has_ticks) fmt::format_to(std::back_inserter(buf), FMT_COMPILE(",\"ticks\":{}"), ticks);
    buf.append(std::string_view("}\n"));
    return;
  }
  char* p = WriteText(Reserve(buf, fn.name.size() + 64), "< ");
  p = WriteText(p, fn.name);
  p = WriteDecimal(WriteText(p, " ("), insns);
  if (has_ticks) p = WriteDecimal(WriteText(p, " insns, "), ticks);
  p = WriteText(p, has_ticks ? " ticks)\n" : " insns)\n");
  Commit(buf, p);
}

// A chunk's lines (CallsSink::Chunk): each line's tail and where it is in the chunk. The tails
// are written to segments of about kSegmentBytes, not one buffer that grows: nothing is copied
// as they grow, and kept for the next chunk they hold their memory.
struct ChunkLines {
  static constexpr uint32_t kWhole = ~uint32_t{0};  // a line with no prefix
  static constexpr size_t kSegmentBytes = size_t{1} << 20;
  struct Line {
    uint64_t count;  // the chunk's instructions before it
    uint32_t depth;  // above B's frames in its epoch; kWhole: a whole line
    uint32_t epoch;
    // Its tail ends at `end` in `segment`; it starts where the line before's ends (0 in
    // another segment).
    uint32_t segment;
    uint32_t end;
  };
  std::vector<Line> lines;
  std::vector<std::unique_ptr<Buffer>> segments;  // the first `used` are this chunk's
  size_t used = 0;
  Buffer& text() { return *segments[used - 1]; }
  // Lines are added to the segment after this.
  void NextSegment() {
    if (used == segments.size()) {
      segments.push_back(std::make_unique<Buffer>());
      segments.back()->reserve(kSegmentBytes + (kSegmentBytes >> 4));
    }
    ++used;
  }
  void Clear() {
    lines.clear();
    for (size_t i = 0; i < used; ++i) segments[i]->clear();
    used = 0;
    NextSegment();
  }
  // What the lines hold (the segments before the last one whole).
  size_t bytes() {
    return (used - 1) * kSegmentBytes + text().size() + lines.size() * sizeof(Line);
  }
};

class CallsSink : public FlowSink {
 public:
  CallsSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options), lines_(MakeSourceLines(options)) {
    wants_time_ = true;
    model_.set_tell_counts(false);  // no OnCount
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    AppendErrorLine(out_.buf(), error, options_.json);
  }
  void OnEvent(const pt_event& event) override {
    FlowSink::OnEvent(event);
    if (event.type == ptev_overflow) AppendEventLine(out_.buf(), event, options_.json);
  }
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    AppendStreamLine(out_.buf(), stream, options_.json);
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    AppendLossLine(out_.buf(), loss, options_.json);
  }
  // A chunk's lines, their tails written on its worker thread (not with --srcline, whose
  // source files are read on this one).
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    if (lines_ != nullptr) return nullptr;
    return std::make_unique<Chunk>(image, *this);
  }

 protected:
  void OnEnter(const Frame& frame) override {
    AppendPrefix(out_.buf(), options_.json, count_, stack_.size() - 1);
    AppendEnterTail(out_.buf(), options_.json, functions_[frame.function], frame, lines_.get());
    out_.MaybeFlush();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    if (at_end || frame.implicit) return;
    AppendPrefix(out_.buf(), options_.json, count_, stack_.size());
    AppendExitTail(out_.buf(), options_.json, functions_[frame.function], frame, count_, timed(),
                   tsc());
    out_.MaybeFlush();
  }
  absl::Status Report(const DecodeTotals& totals) override {
    if (const std::string warning = model_.DepthWarning(); !warning.empty()) {
      if (options_.json) {
        out_.buf().append(std::string_view("{\"warning\":"));
        AppendJsonString(out_.buf(), warning);
        out_.buf().append(std::string_view("}\n"));
      } else {
        fmt::format_to(out_.it(), "[warning: {}]\n", warning);
      }
    }
    return out_.Close();
  }

 private:
  // A chunk's lines (ChunkSummary): each line's tail and where it is in the chunk (its
  // instructions before it, its depth above the stack B its epoch starts on: CallStack's chunk
  // mode), which the merge turns into the line's prefix; with the lines of B's frames that the
  // chunk's returns pop (CallStack::ChunkOp) written by the merge, which has those frames.
  class Chunk : public FlowChunk {
   public:
    Chunk(const ProgramImage& image, CallsSink& to)
        : FlowChunk(image, /*wants_time=*/true),
          to_(to),
          json_(to.options_.json),
          budget_(GetParallelOptions().record_budget != 0
                      ? GetParallelOptions().record_budget
                      : RecordBudget(GetParallelOptions().jobs)),
          parts_(to.TakeParts()) {
      model_.set_tell_counts(false);
    }
    ~Chunk() override { to_.GiveParts(std::move(parts_)); }
    void BeginSummary() override {
      FlowChunk::BeginSummary();
      parts_->Clear();  // the head's lines are the chunk before's
      over_ = false;
    }
    // Failed too where its lines pass the budget of a chunk's records (RecordBudget: a trace
    // byte may stand for any number of calls), or name code only the merge can name.
    bool failed() const override { return over_ || FlowChunk::failed(); }
    void OnError(const DecodeError& error) override {
      FlowSink::OnError(error);
      AppendErrorLine(parts_->text(), error, json_);
      Add(kWhole, 0);
    }
    void OnEvent(const pt_event& event) override {
      FlowSink::OnEvent(event);
      if (event.type != ptev_overflow) return;
      AppendEventLine(parts_->text(), event, json_);
      Add(kWhole, 0);
    }
    void OnStream(const StreamInfo& stream) override {
      FlowSink::OnStream(stream);
      AppendStreamLine(parts_->text(), stream, json_);
      Add(kWhole, 0);
    }
    void OnLoss(const LossInfo& loss) override {
      FlowSink::OnLoss(loss);
      AppendLossLine(parts_->text(), loss, json_);
      Add(kWhole, 0);
    }
    bool ApplyTo() override;

   protected:
    void OnEnter(const Frame& frame) override {
      if (model_.named_by_base(frame.function)) over_ = true;
      AppendEnterTail(parts_->text(), json_, functions_[frame.function], frame, nullptr);
      Add(stack_.size() - 1, count_);
    }
    void OnExit(const Frame& frame, bool at_end) override {
      if (at_end || frame.implicit) return;
      if (model_.named_by_base(frame.function)) over_ = true;
      AppendExitTail(parts_->text(), json_, functions_[frame.function], frame, count_, timed(),
                     tsc());
      Add(stack_.size(), count_);
    }

   private:
    static constexpr uint32_t kWhole = ChunkLines::kWhole;
    using Line = ChunkLines::Line;
    void Add(size_t depth, uint64_t count) {
      ChunkLines& p = *parts_;
      if (over_) {  // failed: what is written goes
        p.text().clear();
        return;
      }
      const size_t end = p.text().size();
      p.lines.push_back({count, static_cast<uint32_t>(depth), model_.chunk_epoch(),
                         static_cast<uint32_t>(p.used - 1), static_cast<uint32_t>(end)});
      if (p.bytes() > budget_) over_ = true;
      if (end >= ChunkLines::kSegmentBytes) p.NextSegment();
    }

    CallsSink& to_;
    const bool json_;
    const uint64_t budget_;
    std::unique_ptr<ChunkLines> parts_;
    bool over_ = false;
  };

  // Chunks' lines, kept for the next chunks: their memory is not faulted in anew for each
  // (`calls -j2` of a call-heavy recording, 172 MB of lines: 52,000 page faults against 4,000
  // at -j1, and the buffers' growth copied).
  std::unique_ptr<ChunkLines> TakeParts() {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_.empty()) {
      auto parts = std::make_unique<ChunkLines>();
      parts->Clear();
      return parts;
    }
    std::unique_ptr<ChunkLines> parts = std::move(pool_.back());
    pool_.pop_back();
    return parts;
  }
  void GiveParts(std::unique_ptr<ChunkLines> parts) {
    parts->Clear();
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_.push_back(std::move(parts));
  }

  Output out_;
  OutputOptions options_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<ChunkLines>> pool_;
};

bool CallsSink::Chunk::ApplyTo() {
  if (over_) return false;
  CallStack::ChunkPlan plan;
  if (!to_.model_.CheckChunk(model_, plan)) return false;
  const bool json = json_;
  Output& out = to_.out_;
  const uint64_t base = to_.count_;  // the instructions before the chunk
  // B, the stack at the chunk's start: the lines of the frames each return pops, as the serial
  // model pops them, from the top (CallStack::Pop: the depth is the stack's size after it).
  const std::vector<Frame>& frames = to_.stack_;
  const std::vector<CallStack::ChunkOp>& ops = model_.chunk_ops();
  size_t top = plan.start_depth;
  uint32_t popped = 0;  // the ops whose lines are written
  auto pop_until = [&](uint32_t epoch) {
    for (; popped < epoch; ++popped) {
      const CallStack::ChunkOp& op = ops[popped];
      if (op.kind != CallStack::ChunkOp::kClear) {  // the end of the call context: no lines
        for (size_t i = top; i-- > plan.tops[popped];) {
          if (frames[i].implicit) continue;
          AppendPrefix(out.buf(), json, base + op.at, i);
          AppendExitTail(out.buf(), json, to_.functions_[frames[i].function], frames[i],
                         base + op.at, op.timed, op.tsc);
          out.MaybeFlush();
        }
      }
      top = plan.tops[popped];
    }
  };
  uint32_t segment = 0, begin = 0;
  for (const Line& line : parts_->lines) {
    pop_until(line.epoch);
    if (line.depth != kWhole) {
      AppendPrefix(out.buf(), json, base + line.count, plan.DepthIn(line.epoch) + line.depth);
    }
    if (line.segment != segment) begin = 0;
    const char* text = parts_->segments[line.segment]->data();
    out.buf().append(text + begin, text + line.end);
    segment = line.segment;
    begin = line.end;
    out.MaybeFlush();
  }
  pop_until(static_cast<uint32_t>(ops.size()));
  to_.model_.ApplyChunk(model_, plan);
  return true;
}

}  // namespace

std::unique_ptr<Sink> MakeCallsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  return std::make_unique<CallsSink>(image, out, options);
}

}  // namespace ptkit::decoder
