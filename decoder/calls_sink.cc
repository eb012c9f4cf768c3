#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {
namespace {

// Text lines are indented two spaces per depth up to kMaxIndentDepth. A deeper line is
// indented as at kMaxIndentDepth and says its depth ("[depth 1234] > f"): code that calls
// itself without end fills the call stack (CallStack::kMaxFrames deep), and full indentation
// would print 131 KB of spaces a line, gigabytes for a trace of a few bytes.
constexpr size_t kMaxIndentDepth = 100;

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

 protected:
  void OnEnter(const Frame& frame) override {
    const Function& fn = functions_[frame.function];
    size_t depth = stack_.size() - 1;
    if (frame.implicit) {
      // The function that was running when tracing began, shown as the tree's root.
      if (options_.json) {
        fmt::format_to(out_.it(), FMT_COMPILE("{{\"at\":{},\"depth\":{},\"running\":"), count_,
                       depth);
        AppendJsonString(out_.buf(), fn.name);
        out_.buf().append(std::string_view("}\n"));
      } else {
        // Bracketed like a fallback name ("[libc.so.6]"), which already has its brackets.
        const bool bracketed = fn.name.starts_with('[');
        char* p = BeginLine(depth, fn.name.size() + 3);
        if (!bracketed) *p++ = '[';
        p = WriteText(p, fn.name);
        if (!bracketed) *p++ = ']';
        *p++ = '\n';
        Commit(out_.buf(), p);
      }
      return;
    }
    // --srcline: where the called function starts (functions are named by their entry).
    const bool srcline = lines_ != nullptr && fn.address != 0 && fn.image != nullptr;
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"at\":{},\"depth\":{},\"call\":"), count_, depth);
      AppendJsonString(out_.buf(), fn.name);
      fmt::format_to(out_.it(), FMT_COMPILE(",\"address\":\"{:#x}\""), fn.address);
      if (frame.signal) out_.buf().append(std::string_view(",\"signal\":true"));
      if (srcline) AppendSrcline(out_.buf(), lines_.get(), *fn.image, fn.address, true);
      out_.buf().append(std::string_view("}\n"));
    } else {
      // A signal's handler: "> h (signal)" (entered by the kernel, not called).
      char* p = WriteText(BeginLine(depth, 2 + fn.name.size() + 10), "> ");
      p = WriteText(p, fn.name);
      if (frame.signal) p = WriteText(p, " (signal)");
      if (srcline) {
        Commit(out_.buf(), p);
        AppendSrcline(out_.buf(), lines_.get(), *fn.image, fn.address, false);
        out_.buf().push_back('\n');
      } else {
        *p++ = '\n';
        Commit(out_.buf(), p);
      }
    }
    out_.MaybeFlush();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    if (at_end || frame.implicit) return;
    const Function& fn = functions_[frame.function];
    size_t depth = stack_.size();
    uint64_t insns = count_ - frame.entry_count;
    // Elapsed TSC ticks: the decoder's time at the return minus at the call, when both are
    // known (TSC is monotonic; a smaller value cannot be a duration).
    const bool has_ticks = frame.entry_timed && timed() && tsc() >= frame.entry_tsc;
    const uint64_t ticks = has_ticks ? tsc() - frame.entry_tsc : 0;
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"at\":{},\"depth\":{},\"return\":"), count_, depth);
      AppendJsonString(out_.buf(), fn.name);
      fmt::format_to(out_.it(), FMT_COMPILE(",\"insns\":{}"), insns);
      if (has_ticks) fmt::format_to(out_.it(), FMT_COMPILE(",\"ticks\":{}"), ticks);
      out_.buf().append(std::string_view("}\n"));
    } else {
      // "< f (N insns)" or "< f (N insns, T ticks)".
      char* p = WriteText(BeginLine(depth, fn.name.size() + 64), "< ");
      p = WriteText(p, fn.name);
      p = WriteDecimal(WriteText(p, " ("), insns);
      if (has_ticks) p = WriteDecimal(WriteText(p, " insns, "), ticks);
      p = WriteText(p, has_ticks ? " ticks)\n" : " insns)\n");
      Commit(out_.buf(), p);
    }
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
  // A text line's start, with room for `rest` more bytes reserved after it (Commit the line's
  // end): the instruction count, then the indentation of `depth`.
  char* BeginLine(size_t depth, size_t rest) {
    const size_t indent = 2 * std::min(depth, kMaxIndentDepth);
    // The count (10 or up to 20 digits), a space, the indentation, "[depth N] ".
    char* p = Reserve(out_.buf(), 21 + indent + 29 + rest);
    p = WriteDecimal(p, count_, 10);
    *p++ = ' ';
    std::memset(p, ' ', indent);
    p += indent;
    if (depth > kMaxIndentDepth) p = WriteText(WriteDecimal(WriteText(p, "[depth "), depth), "] ");
    return p;
  }

  Output out_;
  OutputOptions options_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
};

}  // namespace

std::unique_ptr<Sink> MakeCallsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  return std::make_unique<CallsSink>(image, out, options);
}

}  // namespace ptkit::decoder
