#include <fmt/compile.h>
#include <fmt/format.h>

#include <array>
#include <memory>
#include <string_view>

#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {
namespace {

class BranchesSink : public Sink {
 public:
  BranchesSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : image_(&image),
        from_names_(image),
        to_names_(image),
        out_(out),
        options_(options),
        lines_(MakeSourceLines(options)) {
    for (size_t i = 0; i < kinds_.size(); ++i) {
      const char* kind = BranchKind(static_cast<pt_insn_class>(i));
      if (kind != nullptr) kinds_[i] = kind;
    }
  }
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  // Every branch ends a block, so only a block's first and last instructions need be seen.
  bool end_block_on_call() const override { return true; }
  bool end_block_on_jump() const override { return true; }
  bool branches_only() const override { return true; }

  // Every instruction comes here: the previous one, if it branches, is emitted when this one
  // shows where it went (a conditional jump only when taken).
  void OnInsn(const pt_insn& insn) override {
    if (!prev_kind_.empty() && (!prev_cond_ || insn.ip != prev_next_)) {
      Emit(prev_ip_, insn.ip, true, prev_kind_);
    }
    const auto iclass = static_cast<size_t>(insn.iclass);
    prev_kind_ = iclass < kinds_.size() ? kinds_[iclass] : std::string_view();
    prev_cond_ = insn.iclass == ptic_cond_jump;
    prev_ip_ = insn.ip;
    prev_next_ = insn.ip + insn.size;
  }
  void OnEvent(const pt_event& event) override {
    if (event.status_update) return;
    if (event.type == ptev_async_branch) {
      Emit(event.variant.async_branch.from, event.variant.async_branch.to, true, "interrupt");
      prev_kind_ = {};
    } else if (event.type == ptev_async_disabled) {
      // An interrupt out of the traced code (a signal or an interrupt, the kernel untraced) at
      // `at`, before the instruction there ran: where a branch before it went, then the
      // interrupt (perf's "tr end async").
      const uint64_t at = event.variant.async_disabled.at;
      if (!prev_kind_.empty() && (!prev_cond_ || at != prev_next_)) {
        Emit(prev_ip_, at, true, prev_kind_);
      }
      Emit(at, 0, false, "interrupt");
      prev_kind_ = {};
    } else if (event.type == ptev_disabled) {
      // A branch out of the traced code: its target is the disable IP when known.
      if (!prev_kind_.empty()) {
        uint64_t to = 0;
        bool known = EventIp(event, &to);
        Emit(prev_ip_, to, known, prev_kind_);
      }
      prev_kind_ = {};
    } else if (event.type == ptev_overflow) {
      prev_kind_ = {};
    }
  }
  void OnError(const DecodeError& error) override {
    prev_kind_ = {};
    AppendErrorLine(out_.buf(), error, options_.json);
  }
  void OnImage(const ProgramImage& image) override {
    from_names_.SetImage(&image);
    to_names_.SetImage(&image);
    image_ = &image;
  }
  void OnStream(const StreamInfo& stream) override {
    prev_kind_ = {};
    from_names_.SetImage(stream.image);
    to_names_.SetImage(stream.image);
    if (stream.image != nullptr) image_ = stream.image;
    AppendStreamLine(out_.buf(), stream, options_.json);
  }
  void OnLoss(const LossInfo& loss) override {
    prev_kind_ = {};
    AppendLossLine(out_.buf(), loss, options_.json);
  }
  absl::Status Finish(const DecodeTotals& totals) override { return out_.Close(); }

 private:
  void Emit(uint64_t from, uint64_t to, bool to_known, std::string_view kind) {
    Buffer& buf = out_.buf();
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"from\":\"{:#x}\",\"from_sym\":"), from);
      Buffer name;
      from_names_.Append(name, from);
      AppendJsonString(buf, std::string_view(name.data(), name.size()));
      AppendSrcline(buf, lines_.get(), *image_, from, true, "from_srcline");
      if (to_known) {
        fmt::format_to(out_.it(), FMT_COMPILE(",\"to\":\"{:#x}\",\"to_sym\":"), to);
        name.clear();
        to_names_.Append(name, to);
        AppendJsonString(buf, std::string_view(name.data(), name.size()));
        AppendSrcline(buf, lines_.get(), *image_, to, true, "to_srcline");
      } else {
        buf.append(std::string_view(",\"to\":null,\"to_sym\":null"));
      }
      fmt::format_to(out_.it(), FMT_COMPILE(",\"kind\":\"{}\"}}\n"), kind);
    } else if (lines_ == nullptr) {
      // The whole line is written into room reserved once (the common case: no --srcline).
      constexpr std::string_view kArrow = " -> ";
      constexpr std::string_view kUntraced = " -> ? [untraced]";
      const size_t room = 16 + 1 + from_names_.Prepare(from) + kUntraced.size() + 16 + 1 +
                          (to_known ? to_names_.Prepare(to) : 0) + 1 + kind.size() + 1;
      char* p = Reserve(buf, room);
      p = WriteHex(p, from, 16);
      *p++ = ' ';
      p = from_names_.Write(p, from);
      if (to_known) {
        p = WriteText(p, kArrow);
        p = WriteHex(p, to, 16);
        *p++ = ' ';
        p = to_names_.Write(p, to);
      } else {
        p = WriteText(p, kUntraced);
      }
      *p++ = ' ';
      p = WriteText(p, kind);
      *p++ = '\n';
      Commit(buf, p);
    } else {
      AppendHex(buf, from, 16);
      buf.push_back(' ');
      from_names_.Append(buf, from);
      AppendSrcline(buf, lines_.get(), *image_, from, false);
      if (to_known) {
        AppendText(buf, " -> ");
        AppendHex(buf, to, 16);
        buf.push_back(' ');
        to_names_.Append(buf, to);
        AppendSrcline(buf, lines_.get(), *image_, to, false);
      } else {
        buf.append(std::string_view(" -> ? [untraced]"));
      }
      buf.push_back(' ');
      AppendText(buf, kind);
      buf.push_back('\n');
    }
    out_.MaybeFlush();
  }

  const ProgramImage* image_;  // of the current stream
  // Names of branch sources and of targets, each with its own cache (a call's source and
  // target are in different functions).
  Symbolizer from_names_;
  Symbolizer to_names_;
  Output out_;
  OutputOptions options_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
  // BranchKind by instruction class, empty for the classes that do not branch.
  std::array<std::string_view, ptic_ptwrite + 1> kinds_{};
  // The previous instruction: its branch kind (empty when it does not branch, or when nothing
  // before is known), whether it is a conditional jump, its IP and the IP after it.
  std::string_view prev_kind_;
  bool prev_cond_ = false;
  uint64_t prev_ip_ = 0;
  uint64_t prev_next_ = 0;
};

}  // namespace

std::unique_ptr<Sink> MakeBranchesSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options) {
  return std::make_unique<BranchesSink>(image, out, options);
}

}  // namespace ptkit::decoder
