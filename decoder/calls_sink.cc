#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
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
void AppendEnterTail(Buffer& buf, bool json, const Function& fn, bool implicit, bool signal,
                     SourceLines* lines) {
  if (implicit) {
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
    if (signal) buf.append(std::string_view(",\"signal\":true"));
    if (srcline) AppendSrcline(buf, lines, *fn.image, fn.address, true);
    buf.append(std::string_view("}\n"));
    return;
  }
  char* p = WriteText(Reserve(buf, 2 + fn.name.size() + 11), "> ");
  p = WriteText(p, fn.name);
  if (signal) p = WriteText(p, " (signal)");
  if (srcline) {
    Commit(buf, p);
    AppendSrcline(buf, lines, *fn.image, fn.address, false);
    buf.push_back('\n');
  } else {
    *p++ = '\n';
    Commit(buf, p);
  }
}

// What a frame popped at instruction `count` and time (`timed`, `tsc`) ran: its instructions,
// and its elapsed TSC ticks, the decoder's time at the return minus at the call, when both are
// known (TSC is monotonic; a smaller value cannot be a duration).
struct Exit {
  uint64_t insns = 0;
  bool has_ticks = false;
  uint64_t ticks = 0;
};
Exit ExitOf(const Frame& frame, uint64_t count, bool timed, uint64_t tsc) {
  const bool has_ticks = frame.entry_timed && timed && tsc >= frame.entry_tsc;
  return {count - frame.entry_count, has_ticks, has_ticks ? tsc - frame.entry_tsc : 0};
}

// A frame popped by a return (or left by a jump to a frame below): "< f (N insns)" or
// "< f (N insns, T ticks)".
void AppendExitTail(Buffer& buf, bool json, const Function& fn, const Exit& exit) {
  const auto [insns, has_ticks, ticks] = exit;
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

// A chunk's lines (CallsSink::Chunk): where each is in the chunk and what it says, in segments
// of about kSegmentBytes (not one buffer that grows: nothing is copied as they grow, and kept
// for the next chunk they hold their memory). A line is varint(kind), with kind 0: not a line,
// the epoch goes on to varint(epoch); kWhole: a line the merge copies (an error, a loss), its
// text's length in 4 bytes, then the text; 2 + depth: a frame's line at `depth` above B's
// frames in its epoch, then varint(its instruction count less the last such line's),
// varint(function << 3 | has ticks << 2 | what), and for a return varint(its instructions),
// then varint(its ticks) if it has them. The merge writes the frames' lines from these few
// bytes: as text (~35 bytes a line) written by a worker and read back by the merge on the other
// CPU, their memory traffic cost more than their formatting on the merge (`calls -j2` of a
// 150,000-round emulated recording, 6.0 M lines: CPU 4 % less than with text, where keeping no
// lines at all saves 8 %; gzip's recording, 3.6 M lines: -j2 598 -> 521 ms).
class ChunkLines {
 public:
  static constexpr size_t kSegmentBytes = size_t{1} << 20;
  static constexpr uint64_t kWhole = 1;  // kind
  enum What : uint8_t { kCall, kSignal, kRunning, kReturn };
  struct Line {
    uint64_t kind = 0;
    uint64_t count = 0;  // not for kWhole
    uint32_t function = 0;
    What what = kCall;
    Exit exit;              // kReturn
    std::string_view text;  // kWhole
  };

  ChunkLines() { Clear(); }
  // A whole line: its text goes to the buffer returned, then EndWhole.
  Buffer& BeginWhole(uint32_t epoch) {
    char* p = Varint(Epoch(Reserve(text(), 3 * 10 + 4), epoch), kWhole);
    length_at_ = static_cast<size_t>(p - text().data());
    Commit(text(), p + 4);
    return text();
  }
  void EndWhole() {
    Buffer& t = text();
    const auto length = static_cast<uint32_t>(t.size() - length_at_ - 4);
    std::memcpy(t.data() + length_at_, &length, 4);
    Next();
  }
  // A frame's line at `depth` above B, instruction `count`: `what` of `function`, which ran
  // `exit` for kReturn.
  [[gnu::always_inline]] void Add(uint32_t epoch, size_t depth, uint64_t count, uint32_t function,
                                  What what, const Exit& exit = {}) {
    char* p = Varint(Epoch(Reserve(text(), 7 * 10), epoch), 2 + uint64_t{depth});
    p = Varint(Varint(p, count - count_), uint64_t{function} << 3 | exit.has_ticks << 2 | what);
    count_ = count;
    if (what == kReturn) p = Varint(p, exit.insns);
    if (exit.has_ticks) p = Varint(p, exit.ticks);
    Commit(text(), p);
    Next();
  }
  void Clear() {
    for (size_t i = 0; i < used_; ++i) segments_[i]->clear();
    used_ = 0;
    closed_ = 0;
    epoch_ = 0;
    count_ = 0;
    length_at_ = 0;
    NextSegment();
  }
  // What the lines hold.
  size_t bytes() { return closed_ + text().size(); }

  // Reads the lines back in order: `line(epoch, const Line&)`.
  template <typename Visit>
  void Read(Visit line) const {
    uint64_t epoch = 0;
    Line l;
    for (size_t s = 0; s < used_; ++s) {
      const char* p = segments_[s]->data();
      const char* end = p + segments_[s]->size();
      while (p < end) {
        p = ReadVarint(p, l.kind);
        if (l.kind == 0) {
          p = ReadVarint(p, epoch);
          continue;
        }
        if (l.kind == kWhole) {
          uint32_t length;
          std::memcpy(&length, p, 4);
          l.text = std::string_view(p + 4, length);
          p += 4 + length;
        } else {
          uint64_t delta, fn;
          p = ReadVarint(ReadVarint(p, delta), fn);
          l.count += delta;
          l.function = static_cast<uint32_t>(fn >> 3);
          l.what = static_cast<What>(fn & 3);
          l.exit.has_ticks = (fn & 4) != 0;
          if (l.what == kReturn) p = ReadVarint(p, l.exit.insns);
          if (l.exit.has_ticks) p = ReadVarint(p, l.exit.ticks);
        }
        line(static_cast<uint32_t>(epoch), l);
      }
    }
  }

 private:
  Buffer& text() { return *segments_[used_ - 1]; }
  // The epoch's marker at `p` where it changes.
  char* Epoch(char* p, uint32_t epoch) {
    if (epoch == epoch_) return p;
    epoch_ = epoch;
    return Varint(Varint(p, 0), epoch);
  }
  static char* Varint(char* p, uint64_t v) {
    while (v >= 0x80) {
      *p++ = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    return p;
  }
  static const char* ReadVarint(const char* p, uint64_t& v) {
    if (static_cast<uint8_t>(*p) < 0x80) {  // most: a line's fields are small
      v = static_cast<uint8_t>(*p);
      return p + 1;
    }
    v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<uint8_t>(*p++);
      v |= uint64_t{b & 0x7fu} << shift;
      if (b < 0x80) return p;
    }
  }
  // After a line: the next goes to a new segment once this one holds kSegmentBytes (it passes
  // them by its last line, a long whole line).
  void Next() {
    if (text().size() < kSegmentBytes) return;
    closed_ += text().size();
    NextSegment();
  }
  void NextSegment() {
    if (used_ == segments_.size()) {
      segments_.push_back(std::make_unique<Buffer>());
      segments_.back()->reserve(kSegmentBytes + (kSegmentBytes >> 4));
    }
    ++used_;
  }

  std::vector<std::unique_ptr<Buffer>> segments_;  // the first `used_` are this chunk's
  size_t used_ = 0;
  size_t closed_ = 0;     // the bytes of the segments before the last
  uint32_t epoch_ = 0;    // the last line's
  uint64_t count_ = 0;    // the last frame's line's
  size_t length_at_ = 0;  // in text(): the length of the whole line begun
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
  // A chunk's lines, kept by its worker thread and written out by the merge (not with
  // --srcline: a chunk's functions are in its worker's images, which the merge leaves alone).
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    if (lines_ != nullptr) return nullptr;
    return std::make_unique<Chunk>(image, *this);
  }

 protected:
  void OnEnter(const Frame& frame) override {
    AppendPrefix(out_.buf(), options_.json, count_, stack_.size() - 1);
    AppendEnterTail(out_.buf(), options_.json, functions_[frame.function], frame.implicit,
                    frame.signal, lines_.get());
    out_.MaybeFlush();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    if (at_end || frame.implicit) return;
    AppendPrefix(out_.buf(), options_.json, count_, stack_.size());
    AppendExitTail(out_.buf(), options_.json, functions_[frame.function],
                   ExitOf(frame, count_, timed(), tsc()));
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
  // A chunk's lines (ChunkSummary): what each says and where it is in the chunk (its
  // instructions before it, its depth above the stack B its epoch starts on: CallStack's chunk
  // mode), which the merge writes; with the lines of B's frames that the chunk's returns pop
  // (CallStack::ChunkOp), which the merge has.
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
      AppendErrorLine(BeginWhole(), error, json_);
      EndWhole();
    }
    void OnEvent(const pt_event& event) override {
      FlowSink::OnEvent(event);
      if (event.type != ptev_overflow) return;
      AppendEventLine(BeginWhole(), event, json_);
      EndWhole();
    }
    void OnStream(const StreamInfo& stream) override {
      FlowSink::OnStream(stream);
      AppendStreamLine(BeginWhole(), stream, json_);
      EndWhole();
    }
    void OnLoss(const LossInfo& loss) override {
      FlowSink::OnLoss(loss);
      AppendLossLine(BeginWhole(), loss, json_);
      EndWhole();
    }
    bool ApplyTo() override;

   protected:
    void OnEnter(const Frame& frame) override {
      if (model_.named_by_base(frame.function)) over_ = true;
      if (over_) return;
      parts_->Add(model_.chunk_epoch(), stack_.size() - 1, count_, frame.function,
                  frame.implicit ? ChunkLines::kRunning
                                 : (frame.signal ? ChunkLines::kSignal : ChunkLines::kCall));
      Check();
    }
    void OnExit(const Frame& frame, bool at_end) override {
      if (at_end || frame.implicit) return;
      if (model_.named_by_base(frame.function)) over_ = true;
      if (over_) return;
      parts_->Add(model_.chunk_epoch(), stack_.size(), count_, frame.function, ChunkLines::kReturn,
                  ExitOf(frame, count_, timed(), tsc()));
      Check();
    }

   private:
    // A whole line (ChunkLines): its text goes to the buffer returned, then EndWhole. Once
    // failed, nothing is kept.
    Buffer& BeginWhole() {
      if (over_) return scratch_;
      return parts_->BeginWhole(model_.chunk_epoch());
    }
    void EndWhole() {
      if (over_) {
        scratch_.clear();
        return;
      }
      parts_->EndWhole();
      Check();
    }
    void Check() {
      if (parts_->bytes() > budget_) over_ = true;
    }

    CallsSink& to_;
    const bool json_;
    const uint64_t budget_;
    std::unique_ptr<ChunkLines> parts_;
    Buffer scratch_;  // a whole line once failed
    bool over_ = false;
  };

  // Chunks' lines, kept for the next chunks: their memory is not faulted in anew for each
  // (`calls -j2` of a call-heavy recording, 172 MB of lines: 52,000 page faults against 4,000
  // at -j1, and the buffers' growth copied).
  std::unique_ptr<ChunkLines> TakeParts() {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_.empty()) return std::make_unique<ChunkLines>();
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
          AppendExitTail(out.buf(), json, to_.functions_[frames[i].function],
                         ExitOf(frames[i], base + op.at, op.timed, op.tsc));
          out.MaybeFlush();
        }
      }
      top = plan.tops[popped];
    }
  };
  parts_->Read([&](uint32_t epoch, const ChunkLines::Line& line) {
    if (popped < epoch) pop_until(epoch);
    if (line.kind == ChunkLines::kWhole) {
      out.buf().append(line.text);
    } else {
      AppendPrefix(out.buf(), json, base + line.count, plan.DepthIn(epoch) + (line.kind - 2));
      const Function& fn = functions_[line.function];
      if (line.what == ChunkLines::kReturn) {
        AppendExitTail(out.buf(), json, fn, line.exit);
      } else {
        AppendEnterTail(out.buf(), json, fn, line.what == ChunkLines::kRunning,
                        line.what == ChunkLines::kSignal, nullptr);
      }
    }
    out.MaybeFlush();
  });
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
