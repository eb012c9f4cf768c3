#include <fmt/compile.h>
#include <fmt/format.h>

#include <memory>

#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {
namespace {

class BranchesSink : public Sink {
 public:
  BranchesSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : image_(&image),
        symbols_(image),
        out_(out),
        options_(options),
        lines_(MakeSourceLines(options)) {}
  DecoderKind kind() const override { return DecoderKind::kInsn; }

  void OnInsn(const pt_insn& insn) override {
    if (have_prev_) {
      const char* kind = BranchKind(prev_.iclass);
      if (kind != nullptr && (prev_.iclass != ptic_cond_jump || insn.ip != prev_.ip + prev_.size)) {
        Emit(prev_.ip, insn.ip, true, kind);
      }
    }
    prev_ = insn;
    have_prev_ = true;
  }
  void OnEvent(const pt_event& event) override {
    if (event.status_update) return;
    if (event.type == ptev_async_branch) {
      Emit(event.variant.async_branch.from, event.variant.async_branch.to, true, "interrupt");
      have_prev_ = false;
    } else if (event.type == ptev_disabled || event.type == ptev_async_disabled) {
      // A branch out of the traced code: its target is the disable IP when known.
      const char* kind = have_prev_ ? BranchKind(prev_.iclass) : nullptr;
      if (kind != nullptr) {
        uint64_t to = 0;
        bool known = EventIp(event, &to) && event.type == ptev_disabled;
        Emit(prev_.ip, to, known, kind);
      }
      have_prev_ = false;
    } else if (event.type == ptev_overflow) {
      have_prev_ = false;
    }
  }
  void OnError(const DecodeError& error) override {
    have_prev_ = false;
    AppendErrorLine(out_.buf(), error, options_.json);
  }
  void OnStream(const StreamInfo& stream) override {
    have_prev_ = false;
    symbols_.SetImage(stream.image);
    if (stream.image != nullptr) image_ = stream.image;
    AppendStreamLine(out_.buf(), stream, options_.json);
  }
  void OnLoss(const LossInfo& loss) override {
    have_prev_ = false;
    AppendLossLine(out_.buf(), loss, options_.json);
  }
  absl::Status Finish(const DecodeTotals& totals) override { return out_.Close(); }

 private:
  void Emit(uint64_t from, uint64_t to, bool to_known, const char* kind) {
    Buffer& buf = out_.buf();
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"from\":\"{:#x}\",\"from_sym\":"), from);
      Buffer name;
      symbols_.Append(name, from);
      AppendJsonString(buf, std::string_view(name.data(), name.size()));
      AppendSrcline(buf, lines_.get(), *image_, from, true, "from_srcline");
      if (to_known) {
        fmt::format_to(out_.it(), FMT_COMPILE(",\"to\":\"{:#x}\",\"to_sym\":"), to);
        name.clear();
        symbols_.Append(name, to);
        AppendJsonString(buf, std::string_view(name.data(), name.size()));
        AppendSrcline(buf, lines_.get(), *image_, to, true, "to_srcline");
      } else {
        buf.append(std::string_view(",\"to\":null,\"to_sym\":null"));
      }
      fmt::format_to(out_.it(), FMT_COMPILE(",\"kind\":\"{}\"}}\n"), kind);
    } else {
      AppendHex(buf, from, 16);
      buf.push_back(' ');
      symbols_.Append(buf, from);
      AppendSrcline(buf, lines_.get(), *image_, from, false);
      if (to_known) {
        AppendText(buf, " -> ");
        AppendHex(buf, to, 16);
        buf.push_back(' ');
        symbols_.Append(buf, to);
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
  Symbolizer symbols_;
  Output out_;
  OutputOptions options_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
  pt_insn prev_{};
  bool have_prev_ = false;
};

}  // namespace

std::unique_ptr<Sink> MakeBranchesSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options) {
  return std::make_unique<BranchesSink>(image, out, options);
}

}  // namespace ptkit::decoder
