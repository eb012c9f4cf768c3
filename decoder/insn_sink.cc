#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "decoder/disassembler.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {
namespace {

class InsnSink : public Sink {
 public:
  InsnSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : image_(&image),
        symbols_(image),
        out_(out),
        options_(options),
        lines_(MakeSourceLines(options)),
        prefix_(options.json ? "{" : "") {}
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  // Without timing packets the decoder never calls OnTime and lines have no time column.
  bool wants_time() const override { return true; }
  void OnTime(uint64_t tsc) override {
    // Formatted once per time update, not per instruction.
    time_.clear();
    auto it = std::back_inserter(time_);
    const std::optional<TscConversion>& perf = options_.clock.perf;
    if (options_.json) {
      fmt::format_to(it, FMT_COMPILE("\"tsc\":{},"), tsc);
      if (perf) fmt::format_to(it, FMT_COMPILE("\"time_ns\":{},"), perf->ToPerfTime(tsc));
    } else if (perf) {
      fmt::format_to(it, FMT_COMPILE("{:>20} "), FormatPerfTime(perf->ToPerfTime(tsc)));
    } else {
      fmt::format_to(it, FMT_COMPILE("{:>16} "), tsc);
    }
  }

  void OnInsn(const pt_insn& insn) override {
    Buffer& buf = out_.buf();
    if (options_.json) {
      buf.append(std::string_view(prefix_));
      buf.append(std::string_view(time_));
      fmt::format_to(out_.it(), FMT_COMPILE("\"ip\":\"{:#x}\",\"sym\":"), insn.ip);
      Buffer name;
      symbols_.Append(name, insn.ip);
      AppendJsonString(buf, std::string_view(name.data(), name.size()));
      if (insn.speculative) buf.append(std::string_view(",\"speculative\":true"));
      if (options_.disasm) {
        buf.append(std::string_view(",\"insn\":"));
        AppendJsonString(buf, Disasm(insn));
      }
      AppendSrcline(buf, lines_.get(), *image_, insn.ip, true);
      buf.append(std::string_view("}\n"));
    } else if (!options_.disasm && !lines_) {
      // The whole line is written into room reserved once (the common case).
      const size_t room =
          time_.size() + prefix_.size() + 16 + 2 + 2 + symbols_.Prepare(insn.ip) + 1;
      char* p = Reserve(buf, room);
      p = WriteText(p, time_);
      p = WriteText(p, prefix_);
      p = WriteHex(p, insn.ip, 16);
      *p++ = ' ';
      *p++ = ' ';
      if (insn.speculative) {
        *p++ = '?';
        *p++ = ' ';
      }
      p = symbols_.Write(p, insn.ip);
      *p++ = '\n';
      Commit(buf, p);
    } else {
      AppendText(buf, time_);
      AppendText(buf, prefix_);
      AppendHex(buf, insn.ip, 16);
      AppendText(buf, "  ");
      if (insn.speculative) AppendText(buf, "? ");
      size_t start = buf.size();
      symbols_.Append(buf, insn.ip);
      if (options_.disasm) {
        size_t width = buf.size() - start;
        for (; width < 32; ++width) buf.push_back(' ');
        buf.append(std::string_view("  "));
        AppendText(buf, Disasm(insn));
      }
      if (lines_) AppendSrcline(buf, lines_.get(), *image_, insn.ip, false, "", "  ");
      buf.push_back('\n');
    }
    out_.MaybeFlush();
  }
  void OnEvent(const pt_event& event) override {
    if (event.status_update) return;
    AppendEventLine(out_.buf(), event, options_.json);
  }
  void OnError(const DecodeError& error) override {
    AppendErrorLine(out_.buf(), error, options_.json);
  }
  void OnImage(const ProgramImage& image) override {
    symbols_.SetImage(&image);
    image_ = &image;
  }
  void OnStream(const StreamInfo& stream) override {
    symbols_.SetImage(stream.image);
    if (stream.image != nullptr) image_ = stream.image;
    if (!stream.context_switch) time_.clear();  // another decoder: its time is not known yet
    AppendStreamLine(out_.buf(), stream, options_.json);
    // Container input: every line says which CPU or thread stream and which thread.
    std::string where = stream.name;
    if (size_t snap = where.find(" snapshot"); snap != std::string::npos) where.resize(snap);
    if (options_.json) {
      prefix_ = fmt::format("{{\"stream\":\"{}\",\"tid\":{},", where, stream.tid);
    } else if (where.rfind("tid ", 0) == 0) {
      prefix_ = fmt::format("{:<8} ", where);
    } else {
      prefix_ = fmt::format("{:<6} tid {:<7} ", where, stream.tid);
    }
  }
  void OnLoss(const LossInfo& loss) override { AppendLossLine(out_.buf(), loss, options_.json); }
  absl::Status Finish(const DecodeTotals& totals) override { return out_.Close(); }

 private:
  // --disasm: an instruction's text, formatted once per address, mode and bytes (Zydis takes
  // some 4,000 Ir an instruction; code runs its instructions again and again). Cleared when it
  // holds kMaxTexts, so that its memory stays bounded whatever the code.
  static constexpr size_t kMaxTexts = size_t{1} << 20;
  using TextKey = std::pair<uint64_t, std::array<uint8_t, sizeof(pt_insn::raw) + 2>>;
  std::string_view Disasm(const pt_insn& insn) {
    TextKey key{insn.ip, {}};
    std::memcpy(key.second.data(), insn.raw, std::min<size_t>(insn.size, sizeof(insn.raw)));
    key.second[sizeof(insn.raw)] = insn.size;
    key.second[sizeof(insn.raw) + 1] = static_cast<uint8_t>(insn.mode);
    if (texts_.size() >= kMaxTexts) texts_.clear();
    auto [it, inserted] = texts_.try_emplace(key);
    if (inserted) {
      Buffer text;
      disasm_.Append(text, insn.mode, insn.raw, insn.size, insn.ip);
      it->second.assign(text.data(), text.size());
    }
    return it->second;
  }

  const ProgramImage* image_;  // of the current stream
  Symbolizer symbols_;
  Output out_;
  OutputOptions options_;
  Disassembler disasm_;
  absl::flat_hash_map<TextKey, std::string> texts_;  // Disasm's
  std::unique_ptr<SourceLines> lines_;               // --srcline
  std::string prefix_;  // stream columns (container input); JSON: the opening brace and them
  std::string time_;    // the time column (JSON: members) once the decoder has a time
};

}  // namespace

std::unique_ptr<Sink> MakeInsnSink(const ProgramImage& image, std::FILE* out,
                                   const OutputOptions& options) {
  return std::make_unique<InsnSink>(image, out, options);
}

}  // namespace ptkit::decoder
