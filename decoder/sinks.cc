#include "decoder/sinks.h"

#include <Zydis/Zydis.h>
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "decoder/ipt_handles.h"
#include "decoder/srcline.h"
#include "nlohmann/json.hpp"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

using Buffer = fmt::memory_buffer;

// Buffered writes to a FILE*, flushed in 64 KiB chunks.
class Output {
 public:
  explicit Output(std::FILE* file) : file_(file) {}
  Buffer& buf() { return buf_; }
  auto it() { return std::back_inserter(buf_); }
  void MaybeFlush() {
    if (buf_.size() >= (1 << 16)) Flush();
  }
  void Flush() {
    if (buf_.size() != 0 && std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size()) {
      failed_ = true;
    }
    buf_.clear();
  }
  absl::Status Close() {
    Flush();
    if (std::fflush(file_) != 0 || failed_ || std::ferror(file_)) {
      return absl::DataLossError("write error on output");
    }
    return absl::OkStatus();
  }

 private:
  std::FILE* file_;
  Buffer buf_;
  bool failed_ = false;
};

void AppendJsonString(Buffer& buf, std::string_view s) {
  buf.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      buf.push_back('\\');
      buf.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(buf), "\\u{:04x}", static_cast<unsigned>(c));
    } else {
      buf.push_back(c);
    }
  }
  buf.push_back('"');
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The name of code without a symbol: its file's name in brackets ("[libc.so.6]"); a name
// that is bracketed already ("[vdso]") is not bracketed twice.
std::string FileLabel(const std::string& path) {
  const std::string base(Basename(path));
  return base.starts_with('[') ? base : "[" + base + "]";
}

// --srcline: the "file:line" of `ip` when it is known: text `lead` + "(file:line)", JSON
// ,"key":"file:line". Nothing without --srcline (`lines` null).
void AppendSrcline(Buffer& buf, SourceLines* lines, const ProgramImage& image, uint64_t ip,
                   bool json, std::string_view key = "srcline", std::string_view lead = " ") {
  if (lines == nullptr) return;
  const std::string* text = lines->Lookup(image, ip);
  if (text == nullptr) return;
  if (json) {
    fmt::format_to(std::back_inserter(buf), ",\"{}\":", key);
    AppendJsonString(buf, *text);
  } else {
    buf.append(lead);
    buf.push_back('(');
    buf.append(*text);
    buf.push_back(')');
  }
}

std::unique_ptr<SourceLines> MakeSourceLines(const OutputOptions& options) {
  return options.srcline ? std::make_unique<SourceLines>(options.diagnostics) : nullptr;
}

// Names addresses: "symbol+0xoff", "[file]" without a symbol, "[unmapped]".
class Symbolizer {
 public:
  explicit Symbolizer(const ProgramImage& image) : image_(&image) {}
  void SetImage(const ProgramImage* image) {
    if (image == nullptr) return;
    image_ = image;
    begin_ = 1;
    end_ = 0;
  }
  void Append(Buffer& buf, uint64_t ip) {
    if (!(ip >= begin_ && ip < end_)) Lookup(ip);
    if (symbol_ != nullptr) {
      buf.append(std::string_view(symbol_->name));
      fmt::format_to(std::back_inserter(buf), FMT_COMPILE("+{:#x}"), ip - symbol_->begin);
    } else {
      buf.append(std::string_view(label_));
    }
  }
  std::string Name(uint64_t ip) {
    Buffer buf;
    Append(buf, ip);
    return fmt::to_string(buf);
  }

 private:
  void Lookup(uint64_t ip) {
    int s = image_->SymbolAt(ip);
    if (s >= 0) {
      symbol_ = &image_->symbols()[s];
      begin_ = symbol_->begin;
      end_ = symbol_->end;
      return;
    }
    symbol_ = nullptr;
    begin_ = ip;
    end_ = ip + 1;
    int file = image_->FileAt(ip);
    label_ = file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name);
  }

  const ProgramImage* image_;
  const Symbol* symbol_ = nullptr;
  uint64_t begin_ = 1;
  uint64_t end_ = 0;
  std::string label_;
};

const char* EventName(const pt_event& ev) {
  switch (ev.type) {
    case ptev_enabled:
      return ev.variant.enabled.resumed ? "resumed" : "enabled";
    case ptev_disabled:
      return "disabled";
    case ptev_async_disabled:
      return "disabled";
    case ptev_async_branch:
      return "interrupt";
    case ptev_paging:
      return "paging";
    case ptev_async_paging:
      return "paging";
    case ptev_overflow:
      return "overflow";
    case ptev_exec_mode:
      return "exec-mode";
    case ptev_tsx:
      return ev.variant.tsx.aborted       ? "tsx-abort"
             : ev.variant.tsx.speculative ? "tsx-begin"
                                          : "tsx-commit";
    case ptev_stop:
      return "stop";
    case ptev_vmcs:
      return "vmcs";
    case ptev_async_vmcs:
      return "vmcs";
    case ptev_exstop:
      return "exstop";
    case ptev_mwait:
      return "mwait";
    case ptev_pwre:
      return "pwre";
    case ptev_pwrx:
      return "pwrx";
    case ptev_ptwrite:
      return "ptwrite";
    case ptev_tick:
      return "tick";
    case ptev_cbr:
      return "cbr";
    case ptev_mnt:
      return "mnt";
  }
  return "event";
}

// The IP an event names, if any.
bool EventIp(const pt_event& ev, uint64_t* ip) {
  if (ev.ip_suppressed) return false;
  switch (ev.type) {
    case ptev_enabled:
      *ip = ev.variant.enabled.ip;
      return true;
    case ptev_disabled:
      *ip = ev.variant.disabled.ip;
      return true;
    case ptev_async_disabled:
      *ip = ev.variant.async_disabled.at;
      return true;
    case ptev_async_branch:
      *ip = ev.variant.async_branch.from;
      return true;
    case ptev_async_paging:
      *ip = ev.variant.async_paging.ip;
      return true;
    case ptev_overflow:
      *ip = ev.variant.overflow.ip;
      return true;
    case ptev_exec_mode:
      *ip = ev.variant.exec_mode.ip;
      return true;
    case ptev_tsx:
      *ip = ev.variant.tsx.ip;
      return true;
    case ptev_async_vmcs:
      *ip = ev.variant.async_vmcs.ip;
      return true;
    case ptev_exstop:
      *ip = ev.variant.exstop.ip;
      return true;
    case ptev_mwait:
      *ip = ev.variant.mwait.ip;
      return true;
    case ptev_ptwrite:
      *ip = ev.variant.ptwrite.ip;
      return true;
    case ptev_tick:
      *ip = ev.variant.tick.ip;
      return true;
    default:
      return false;
  }
}

// Appends the event-specific payload as " key=value" pairs (text) or ,"key":value (json).
void AppendEventDetail(Buffer& buf, const pt_event& ev, bool json) {
  auto it = std::back_inserter(buf);
  auto hex = [&](const char* key, uint64_t v) {
    if (json)
      fmt::format_to(it, ",\"{}\":\"{:#x}\"", key, v);
    else
      fmt::format_to(it, " {}={:#x}", key, v);
  };
  auto dec = [&](const char* key, uint64_t v) {
    if (json)
      fmt::format_to(it, ",\"{}\":{}", key, v);
    else
      fmt::format_to(it, " {}={}", key, v);
  };
  switch (ev.type) {
    case ptev_async_disabled:
      hex("ip", ev.variant.async_disabled.ip);
      break;
    case ptev_async_branch:
      hex("to", ev.variant.async_branch.to);
      break;
    case ptev_paging:
      hex("cr3", ev.variant.paging.cr3);
      break;
    case ptev_async_paging:
      hex("cr3", ev.variant.async_paging.cr3);
      break;
    case ptev_exec_mode:
      dec("bits", ev.variant.exec_mode.mode == ptem_64bit   ? 64
                  : ev.variant.exec_mode.mode == ptem_32bit ? 32
                  : ev.variant.exec_mode.mode == ptem_16bit ? 16
                                                            : 0);
      break;
    case ptev_vmcs:
      hex("base", ev.variant.vmcs.base);
      break;
    case ptev_async_vmcs:
      hex("base", ev.variant.async_vmcs.base);
      break;
    case ptev_ptwrite:
      hex("payload", ev.variant.ptwrite.payload);
      break;
    case ptev_cbr:
      dec("ratio", ev.variant.cbr.ratio);
      break;
    case ptev_mnt:
      hex("payload", ev.variant.mnt.payload);
      break;
    default:
      break;
  }
  if (ev.has_tsc) dec("tsc", ev.tsc);
}

void AppendEventLine(Buffer& buf, const pt_event& ev, bool json) {
  auto it = std::back_inserter(buf);
  uint64_t ip = 0;
  bool has_ip = EventIp(ev, &ip);
  if (json) {
    fmt::format_to(it, "{{\"event\":\"{}\"", EventName(ev));
    if (has_ip) fmt::format_to(it, ",\"ip\":\"{:#x}\"", ip);
    AppendEventDetail(buf, ev, true);
    buf.append(std::string_view("}\n"));
  } else {
    fmt::format_to(it, "[{}", EventName(ev));
    if (has_ip) fmt::format_to(it, " {:#x}", ip);
    AppendEventDetail(buf, ev, false);
    buf.append(std::string_view("]\n"));
  }
}

void AppendErrorLine(Buffer& buf, const DecodeError& e, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, "{{\"error\":\"{}\",\"offset\":{},\"ip\":\"{:#x}\"", IptErrorName(e.code),
                   e.offset, e.ip);
    if (e.is_gap()) {
      fmt::format_to(it, ",\"gap\":{{\"begin\":\"{:#x}\",\"end\":\"{:#x}\"}}", e.gap.begin,
                     e.gap.end);
      if (e.missing_file != nullptr) {
        buf.append(std::string_view(",\"missing\":"));
        AppendJsonString(buf, *e.missing_file);
      }
    }
    buf.append(std::string_view("}\n"));
    return;
  }
  if (e.is_gap() && e.missing_file != nullptr) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}: {} could not be loaded]\n",
                   e.offset, e.ip, *e.missing_file);
  } else if (e.is_gap() && e.gap.begin == 0 && e.gap.end == ~0ull) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}; no image is loaded]\n", e.offset,
                   e.ip);
  } else if (e.is_gap()) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}; nothing mapped in {:#x}-{:#x}]\n",
                   e.offset, e.ip, e.gap.begin, e.gap.end);
  } else {
    fmt::format_to(it, "[error at offset {:#x}, ip {:#x}: {}{}]\n", e.offset, e.ip,
                   e.during_sync ? "sync: " : "", pt_errstr(static_cast<pt_error_code>(e.code)));
  }
}

void AppendStreamLine(Buffer& buf, const StreamInfo& s, bool json) {
  if (s.context_switch) {
    if (json) {
      buf.append(std::string_view("{\"switch\":"));
      AppendJsonString(buf, s.name);
      fmt::format_to(std::back_inserter(buf), ",\"pid\":{},\"tid\":{},\"comm\":", s.pid, s.tid);
      AppendJsonString(buf, s.comm);
      buf.append(std::string_view("}\n"));
    } else {
      // The thread too: a switch can be between two threads of one process.
      fmt::format_to(std::back_inserter(buf), "[switch {}: pid {} tid {}{}{}{}]\n", s.name, s.pid,
                     s.tid, s.comm.empty() ? "" : " (", s.comm, s.comm.empty() ? "" : ")");
    }
    return;
  }
  if (json) {
    buf.append(std::string_view("{\"stream\":"));
    AppendJsonString(buf, s.name);
    fmt::format_to(std::back_inserter(buf), ",\"pid\":{},\"comm\":", s.pid);
    AppendJsonString(buf, s.comm);
    fmt::format_to(std::back_inserter(buf), ",\"bytes\":{}}}\n", s.bytes);
  } else {
    fmt::format_to(std::back_inserter(buf), "[stream {}: pid {}{}{}{}, {} bytes]\n", s.name, s.pid,
                   s.comm.empty() ? "" : " (", s.comm, s.comm.empty() ? "" : ")", s.bytes);
  }
}

void AppendLossLine(Buffer& buf, const LossInfo& l, bool json) {
  if (json) {
    fmt::format_to(std::back_inserter(buf), "{{\"loss\":\"{}\",\"aux_offset\":{},\"bytes\":{}}}\n",
                   l.kind, l.aux_offset, l.bytes);
  } else if (l.bytes != 0) {
    fmt::format_to(std::back_inserter(buf), "[loss: {} at aux offset {:#x}, {} bytes]\n", l.kind,
                   l.aux_offset, l.bytes);
  } else {
    fmt::format_to(std::back_inserter(buf), "[loss: {} at aux offset {:#x}]\n", l.kind,
                   l.aux_offset);
  }
}

// Zydis decoders for the three execution modes.
class Disassembler {
 public:
  Disassembler() {
    ZydisDecoderInit(&dec64_, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ZydisDecoderInit(&dec32_, ZYDIS_MACHINE_MODE_LEGACY_32, ZYDIS_STACK_WIDTH_32);
    ZydisDecoderInit(&dec16_, ZYDIS_MACHINE_MODE_LEGACY_16, ZYDIS_STACK_WIDTH_16);
    ZydisFormatterInit(&formatter_, ZYDIS_FORMATTER_STYLE_INTEL);
  }
  const ZydisDecoder* For(pt_exec_mode mode) const {
    switch (mode) {
      case ptem_32bit:
        return &dec32_;
      case ptem_16bit:
        return &dec16_;
      default:
        return &dec64_;
    }
  }
  // Length of the instruction in `bytes`, 0 if it does not decode.
  int Length(pt_exec_mode mode, const uint8_t* bytes, size_t size,
             ZydisDecodedInstruction* insn) const {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(For(mode), nullptr, bytes, size, insn))) {
      return 0;
    }
    return insn->length;
  }
  // Appends Intel-syntax text.
  void Append(Buffer& buf, pt_exec_mode mode, const uint8_t* bytes, size_t size, uint64_t ip) {
    ZydisDecodedInstruction insn;
    ZydisDecodedOperand operands[ZYDIS_MAX_OPERAND_COUNT];
    char text[256];
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(For(mode), bytes, size, &insn, operands)) ||
        !ZYAN_SUCCESS(ZydisFormatterFormatInstruction(&formatter_, &insn, operands,
                                                      insn.operand_count_visible, text,
                                                      sizeof(text), ip, nullptr))) {
      buf.append(std::string_view("(bad)"));
      return;
    }
    buf.append(std::string_view(text));
  }

 private:
  ZydisDecoder dec64_, dec32_, dec16_;
  ZydisFormatter formatter_;
};

// ---------------------------------------------------------------------------------------------
// insn

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
        Buffer text;
        disasm_.Append(text, insn.mode, insn.raw, insn.size, insn.ip);
        buf.append(std::string_view(",\"insn\":"));
        AppendJsonString(buf, std::string_view(text.data(), text.size()));
      }
      AppendSrcline(buf, lines_.get(), *image_, insn.ip, true);
      buf.append(std::string_view("}\n"));
    } else {
      buf.append(std::string_view(time_));
      buf.append(std::string_view(prefix_));
      fmt::format_to(out_.it(), FMT_COMPILE("{:016x}  "), insn.ip);
      if (insn.speculative) buf.append(std::string_view("? "));
      size_t start = buf.size();
      symbols_.Append(buf, insn.ip);
      if (options_.disasm) {
        size_t width = buf.size() - start;
        for (; width < 32; ++width) buf.push_back(' ');
        buf.append(std::string_view("  "));
        disasm_.Append(buf, insn.mode, insn.raw, insn.size, insn.ip);
      }
      AppendSrcline(buf, lines_.get(), *image_, insn.ip, false, "", "  ");
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
  const ProgramImage* image_;  // of the current stream
  Symbolizer symbols_;
  Output out_;
  OutputOptions options_;
  Disassembler disasm_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
  std::string prefix_;  // stream columns (container input); JSON: the opening brace and them
  std::string time_;    // the time column (JSON: members) once the decoder has a time
};

// ---------------------------------------------------------------------------------------------
// branches

const char* BranchKind(pt_insn_class iclass) {
  switch (iclass) {
    case ptic_call:
      return "call";
    case ptic_return:
      return "ret";
    case ptic_jump:
      return "jmp";
    case ptic_cond_jump:
      return "jcc";
    case ptic_far_call:
      return "far_call";
    case ptic_far_return:
      return "far_ret";
    case ptic_far_jump:
      return "far_jmp";
    default:
      return nullptr;
  }
}

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
      fmt::format_to(out_.it(), FMT_COMPILE("{:016x} "), from);
      symbols_.Append(buf, from);
      AppendSrcline(buf, lines_.get(), *image_, from, false);
      if (to_known) {
        fmt::format_to(out_.it(), FMT_COMPILE(" -> {:016x} "), to);
        symbols_.Append(buf, to);
        AppendSrcline(buf, lines_.get(), *image_, to, false);
      } else {
        buf.append(std::string_view(" -> ? [untraced]"));
      }
      fmt::format_to(out_.it(), FMT_COMPILE(" {}\n"), kind);
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

// ---------------------------------------------------------------------------------------------
// Call-stack tracking over blocks that end at calls (stats, calls, folded, timeline).

struct Function {
  std::string name;
  const ProgramImage* image = nullptr;  // whose files() `file` indexes
  int file = -1;                        // index into ProgramImage::files(), -1 unmapped
  uint64_t address = 0;                 // symbol start or call target
  uint64_t self = 0;
  uint64_t inclusive = 0;
  uint64_t calls = 0;
  uint32_t active = 0;  // frames on the stack
  uint64_t active_since = 0;
  bool from_address = false;  // named by its call target (no symbol)
};

struct Frame {
  uint32_t function = 0;
  uint64_t return_address = 0;
  uint64_t entry_count = 0;  // instructions executed before the call
  bool implicit = false;     // a caller entered before tracing began (no call seen)
  bool entry_timed = false;  // entry_tsc is known
  uint64_t entry_tsc = 0;    // the decoder's time at the call
};

class FlowSink : public Sink {
 public:
  explicit FlowSink(const ProgramImage& image) : image_(&image) {}
  DecoderKind kind() const override { return DecoderKind::kBlock; }
  bool end_block_on_call() const override { return true; }
  bool wants_time() const override { return wants_time_; }
  void OnTime(uint64_t tsc) override {
    tsc_ = tsc;
    timed_ = true;
  }

  void OnBlock(const pt_block& block) override {
    if (pending_call_) {
      pending_call_ = false;
      // A call to the next instruction (call/pop, to read the IP) enters no function.
      if (block.ip != pending_return_address_) Push(CallTarget(block.ip), pending_return_address_);
    } else if (pending_return_) {
      pending_return_ = false;
      Return(block.ip);
    }
    uint32_t f = FunctionAt(block.ip);
    current_ = f;
    if (block.ninsn > 1 && !(block.end_ip >= cache_.begin && block.end_ip < cache_.end) &&
        FunctionAt(block.end_ip) != f) {
      CountSplit(block, f);
    } else {
      Count(f, block.ninsn);
    }
    if (block.iclass == ptic_call) {
      pending_call_ = true;
      uint64_t size = block.truncated ? block.size : CallLength(block.end_ip, block.mode);
      pending_return_address_ = block.end_ip + size;
    } else if (block.iclass == ptic_return) {
      pending_return_ = true;
    }
  }

  void OnEvent(const pt_event& event) override {
    switch (event.type) {
      case ptev_disabled:
      case ptev_async_disabled: {
        // Where the flow went: the instruction an interrupt stopped before (async), or the
        // untraced code it entered (sync, when the IP is not suppressed).
        const bool async = event.type == ptev_async_disabled;
        const bool known = async || !event.ip_suppressed;
        const uint64_t to = async ? event.variant.async_disabled.at : event.variant.disabled.ip;
        if (pending_call_) {
          // A call into code that is not traced, or interrupted at its target (e.g. a page
          // fault on its first fetch): the callee is entered all the same.
          if (!known || to != pending_return_address_) {
            Push(known ? CallTarget(to) : Untraced(), pending_return_address_);
          }
        } else if (pending_return_) {
          if (known) {
            Return(to);
          } else {
            ReturnUnmatched();
          }
        }
        pending_call_ = pending_return_ = false;
        break;
      }
      case ptev_enabled:
        pending_call_ = pending_return_ = false;
        // Tracing resumed where it stopped (after an interrupt) is no return; otherwise it
        // may come back from untraced code to a caller's frame.
        if (!event.ip_suppressed && !event.variant.enabled.resumed) {
          ReturnMatched(event.variant.enabled.ip);
        }
        break;
      case ptev_overflow:
        // Trace was lost: the call context is unknown from here on.
        pending_call_ = pending_return_ = false;
        while (!stack_.empty()) Pop(true);
        break;
      default:
        break;
    }
  }
  // Decoding resumes at the next PSB with an unknown call context.
  void OnError(const DecodeError& error) override { ResetContext(); }
  // Another stream (another thread or CPU), or lost trace: the call context starts afresh.
  void OnStream(const StreamInfo& stream) override {
    ResetContext();
    if (!stream.context_switch) timed_ = false;  // another decoder: no time yet
    if (stream.image != nullptr) image_ = stream.image;
    cache_ = {1, 0};
  }
  void OnLoss(const LossInfo& loss) override {
    ResetContext();
    timed_ = false;  // the next piece is decoded afresh
  }

  absl::Status Finish(const DecodeTotals& totals) override {
    while (!stack_.empty()) Pop(true);
    return Report(totals);
  }

 protected:
  void ResetContext() {
    pending_call_ = pending_return_ = false;
    while (!stack_.empty()) Pop(true);
  }
  virtual void OnCount(uint32_t function, uint64_t n) {}
  virtual void OnEnter(const Frame& frame) {}
  virtual void OnExit(const Frame& frame, bool at_end) {}
  virtual absl::Status Report(const DecodeTotals& totals) = 0;

  const ProgramImage* image_;  // of the current stream
  std::vector<Function> functions_;
  std::vector<Frame> stack_;
  uint64_t count_ = 0;  // instructions so far
  uint64_t calls_ = 0;
  uint64_t returns_ = 0;
  bool wants_time_ = false;  // set by a subclass that uses the decoder's time
  bool timed_ = false;       // tsc_ is the decoder's current time
  uint64_t tsc_ = 0;

 private:
  uint32_t NewFunction(std::string name, int file, uint64_t address, bool from_address) {
    Function fn;
    fn.name = std::move(name);
    fn.image = image_;
    fn.file = file;
    fn.address = address;
    fn.from_address = from_address;
    functions_.push_back(std::move(fn));
    return static_cast<uint32_t>(functions_.size() - 1);
  }
  uint32_t SymbolFunction(int s) {
    auto [it, inserted] = symbol_function_.try_emplace({image_, s}, 0);
    if (inserted) {
      const Symbol& sym = image_->symbols()[s];
      it->second = NewFunction(sym.name, static_cast<int>(sym.image), sym.begin, false);
    }
    return it->second;
  }
  uint32_t Unknown(int file) {
    auto [it, inserted] = unknown_function_.try_emplace({image_, file}, 0);
    if (inserted) {
      it->second = NewFunction(file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name),
                               file, 0, false);
    }
    return it->second;
  }
  uint32_t Untraced() {
    if (untraced_ < 0) untraced_ = static_cast<int32_t>(NewFunction("[untraced]", -1, 0, false));
    return static_cast<uint32_t>(untraced_);
  }
  // The function a call to `ip` enters: its symbol, else one named by the address.
  uint32_t CallTarget(uint64_t ip) {
    int s = image_->SymbolAt(ip);
    if (s >= 0) return SymbolFunction(s);
    auto [it, inserted] = address_function_.try_emplace({image_, ip}, 0);
    if (inserted) {
      it->second = NewFunction(fmt::format("sub_{:x}", ip), image_->FileAt(ip), ip, true);
    }
    return it->second;
  }
  // The function executing at `ip`: its symbol; without one, the current frame's function
  // when that was named by its address in the same file; else "[file]".
  uint32_t FunctionAt(uint64_t ip) {
    if (!(ip >= cache_.begin && ip < cache_.end)) {
      cache_symbol_ = image_->SymbolAt(ip, &cache_);
      cache_function_ = cache_symbol_ >= 0 ? SymbolFunction(cache_symbol_) : 0;
      cache_file_ = cache_symbol_ >= 0 ? static_cast<int>(image_->symbols()[cache_symbol_].image)
                                       : image_->FileAt(ip);
    }
    if (cache_symbol_ >= 0) return cache_function_;
    if (!stack_.empty()) {
      const Function& top = functions_[stack_.back().function];
      if (top.from_address && top.image == image_ && top.file == cache_file_) {
        return stack_.back().function;
      }
    }
    return Unknown(cache_file_);
  }
  uint64_t InsnLength(uint64_t ip, pt_exec_mode mode) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = image_->Read(ip, bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    return n == 0 ? 0 : static_cast<uint64_t>(disasm_.Length(mode, bytes, n, &insn));
  }
  // Call sites repeat: their lengths are cached.
  uint64_t CallLength(uint64_t ip, pt_exec_mode mode) {
    auto [it, inserted] = call_length_.try_emplace(ip, 0);
    if (inserted) it->second = static_cast<uint8_t>(InsnLength(ip, mode));
    return it->second;
  }
  void Count(uint32_t f, uint64_t n) {
    Function& fn = functions_[f];
    fn.self += n;
    if (fn.active == 0) fn.inclusive += n;
    count_ += n;
    OnCount(f, n);
  }
  // A block that crosses into another function (fall-through, direct jump): walk it.
  void CountSplit(const pt_block& block, uint32_t first) {
    uint64_t ip = block.ip;
    uint32_t current = first;
    uint64_t run = 0;
    for (uint32_t i = 0; i < block.ninsn; ++i) {
      uint32_t f = FunctionAt(ip);
      if (f != current) {
        if (run != 0) Count(current, run);
        current = f;
        run = 0;
      }
      ++run;
      if (i + 1 == block.ninsn) break;
      uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
      size_t n = image_->Read(ip, bytes, sizeof(bytes));
      ZydisDecodedInstruction insn;
      int len = n == 0 ? 0 : disasm_.Length(block.mode, bytes, n, &insn);
      if (len == 0) {  // cannot follow: the rest goes to the current function
        run += block.ninsn - i - 1;
        break;
      }
      ip += len;
      // Inside a block only direct jumps (and calls, which end our blocks) change the flow.
      if (insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR && insn.raw.imm[0].is_relative) {
        ip += static_cast<uint64_t>(insn.raw.imm[0].value.s);
      }
    }
    if (run != 0) Count(current, run);
  }
  void Push(uint32_t f, uint64_t return_address) {
    if (stack_.empty() && current_ >= 0) {
      // The caller was entered before tracing began: give it an implicit frame so stacks
      // read caller;callee. It is left through a return that matches no frame.
      Enter(static_cast<uint32_t>(current_), 0, /*implicit=*/true);
    }
    Enter(f, return_address, /*implicit=*/false);
  }
  void Enter(uint32_t f, uint64_t return_address, bool implicit) {
    Function& fn = functions_[f];
    if (!implicit) {
      ++fn.calls;
      ++calls_;
    }
    if (fn.active++ == 0) fn.active_since = count_;
    stack_.push_back({f, return_address, count_, implicit, timed_, tsc_});
    OnEnter(stack_.back());
  }
  void Pop(bool at_end) {
    Frame frame = stack_.back();
    stack_.pop_back();
    Function& fn = functions_[frame.function];
    if (--fn.active == 0) fn.inclusive += count_ - fn.active_since;
    if (!at_end && !frame.implicit) ++returns_;
    OnExit(frame, at_end);
  }
  // A return to `target`: unwind to the frame that expects it, if one does.
  bool ReturnMatched(uint64_t target) {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i].return_address == target) {
        while (stack_.size() > i) Pop(false);
        return true;
      }
    }
    return false;
  }
  void Return(uint64_t target) {
    if (!ReturnMatched(target)) ReturnUnmatched();
  }
  // A return that no frame expects: the returning function leaves through its own topmost
  // frame; code reached by a jump from a caller entered before tracing began returns for that
  // caller's implicit frame. Anything else (a signal handler returning to the kernel's
  // restorer, say) leaves the stack as it is: popping some frame would misplace every later
  // return.
  void ReturnUnmatched() {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (static_cast<int64_t>(stack_[i].function) == current_) {
        while (stack_.size() > i) Pop(false);
        return;
      }
    }
    if (!stack_.empty() && stack_.back().implicit) Pop(false);
  }

  Disassembler disasm_;
  using Key = std::pair<const ProgramImage*, int64_t>;
  absl::flat_hash_map<Key, uint32_t> symbol_function_;   // (image, symbol index)
  absl::flat_hash_map<Key, uint32_t> unknown_function_;  // (image, file index)
  absl::flat_hash_map<std::pair<const ProgramImage*, uint64_t>, uint32_t> address_function_;
  absl::flat_hash_map<uint64_t, uint8_t> call_length_;
  int32_t untraced_ = -1;
  int64_t current_ = -1;  // function of the last block
  // The last symbol lookup: addresses in cache_ have the same symbol (or none) and file.
  AddressRange cache_{1, 0};
  int cache_symbol_ = -1;
  int cache_file_ = -1;
  uint32_t cache_function_ = 0;
  bool pending_call_ = false;
  bool pending_return_ = false;
  uint64_t pending_return_address_ = 0;
};

// ---------------------------------------------------------------------------------------------
// stats

class StatsSink : public FlowSink {
 public:
  StatsSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options) {}
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    if (options_.list_problems && !stream.context_switch) stream_ = stream.name;
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    if (options_.list_problems) Problem([&](Buffer& b) { AppendErrorLine(b, error, false); });
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    if (options_.list_problems) Problem([&](Buffer& b) { AppendLossLine(b, loss, false); });
  }

 protected:
  absl::Status Report(const DecodeTotals& totals) override {
    // One row per function of a file, as perf report's default keys (comm, dso, sym) give for
    // a program that forks: the function's counts in every process (and program image) that
    // ran it are added up. --tid selects one thread's.
    auto image_name = [&](const Function& fn) {
      return fn.file < 0 ? std::string("[unmapped]") : fn.image->files()[fn.file].name;
    };
    std::vector<Function> rows;
    std::map<std::pair<std::string, std::string>, size_t> row_of;  // (image, name) -> row
    for (const Function& fn : functions_) {
      if (fn.self == 0 && fn.calls == 0) continue;
      auto [it, inserted] = row_of.try_emplace({image_name(fn), fn.name}, rows.size());
      if (inserted) {
        rows.push_back(fn);
        continue;
      }
      Function& row = rows[it->second];
      row.self += fn.self;
      row.inclusive += fn.inclusive;
      row.calls += fn.calls;
      row.address = std::min(row.address, fn.address);
    }
    std::vector<uint32_t> order(rows.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const Function& x = rows[a];
      const Function& y = rows[b];
      if (x.self != y.self) return x.self > y.self;
      if (x.inclusive != y.inclusive) return x.inclusive > y.inclusive;
      return x.name < y.name;
    });
    struct ImageTotals {
      uint64_t instructions = 0, calls = 0, functions = 0;
    };
    std::map<std::string, ImageTotals> images;
    for (const Function& fn : rows) {
      ImageTotals& t = images[image_name(fn)];
      t.instructions += fn.self;
      t.calls += fn.calls;
      ++t.functions;
    }
    Buffer& buf = out_.buf();
    auto it = out_.it();
    if (options_.json) {
      nlohmann::ordered_json doc;
      doc["schema"] = "ptkit-stats/1";
      doc["trace"] = options_.trace_name;
      doc["totals"] = {{"trace_bytes", totals.trace_bytes},
                       {"instructions", totals.instructions},
                       {"blocks", totals.blocks},
                       {"calls", calls_},
                       {"returns", returns_},
                       {"syncs", totals.syncs},
                       {"errors", totals.errors},
                       {"gaps", totals.gaps},
                       {"streams", totals.streams},
                       {"losses", totals.losses},
                       {"lost_bytes", totals.lost_bytes}};
      nlohmann::ordered_json errors = nlohmann::ordered_json::object();
      for (const auto& [code, count] : totals.errors_by_code) errors[IptErrorName(code)] = count;
      doc["errors"] = errors;
      nlohmann::ordered_json imgs = nlohmann::ordered_json::array();
      for (const auto& [name, t] : images) {
        imgs.push_back({{"image", name},
                        {"instructions", t.instructions},
                        {"calls", t.calls},
                        {"functions", t.functions}});
      }
      doc["images"] = imgs;
      nlohmann::ordered_json fns = nlohmann::ordered_json::array();
      for (uint32_t i : order) {
        const Function& fn = rows[i];
        fns.push_back({{"function", fn.name},
                       {"image", image_name(fn)},
                       {"address", fmt::format("{:#x}", fn.address)},
                       {"self", fn.self},
                       {"inclusive", fn.inclusive},
                       {"calls", fn.calls}});
      }
      doc["functions"] = fns;
      doc["warnings"] = totals.warnings;
      std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      buf.append(text);
      buf.push_back('\n');
      return out_.Close();
    }
    fmt::format_to(it, "# {}: {}, {}, {}, {}, {}, {} ({})\n", options_.trace_name,
                   Counted(totals.trace_bytes, "byte"), Counted(totals.instructions, "instruction"),
                   Counted(totals.blocks, "block"), Counted(calls_, "call"),
                   Counted(returns_, "return"), Counted(totals.errors, "error"),
                   Counted(totals.gaps, "gap"));
    for (const auto& [code, count] : totals.errors_by_code) {
      fmt::format_to(it, "# error {}: {}\n", IptErrorName(code), count);
    }
    for (const std::string& w : totals.warnings) fmt::format_to(it, "# warning: {}\n", w);
    if (totals.streams != 0 || totals.losses != 0) {
      fmt::format_to(it, "# {}, {}, {} lost\n", Counted(totals.streams, "stream"),
                     Counted(totals.losses, "loss point"), Counted(totals.lost_bytes, "byte"));
    }
    const double total = totals.instructions == 0 ? 1.0 : static_cast<double>(totals.instructions);
    fmt::format_to(it, "\n{:>12} {:>7} {:>12} {:>7} {:>9}  {}\n", "self", "self%", "inclusive",
                   "incl%", "calls", "function [image]");
    const size_t shown =
        options_.top_functions == 0 ? order.size() : std::min(order.size(), options_.top_functions);
    for (size_t k = 0; k < shown; ++k) {
      const Function& fn = rows[order[k]];
      // Code without a symbol is named "[image]" already: no second "[image]" after it.
      const std::string image = FileLabel(image_name(fn));
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>12} {:>6.2f}% {:>9}  {}{}{}\n", fn.self,
                     100.0 * fn.self / total, fn.inclusive, 100.0 * fn.inclusive / total, fn.calls,
                     fn.name, fn.name == image ? "" : " ", fn.name == image ? "" : image);
      out_.MaybeFlush();
    }
    if (shown < order.size()) {
      fmt::format_to(it, "{:>12} ({} more functions: ptdecode stats shows them all)\n", "...",
                     order.size() - shown);
    }
    fmt::format_to(it, "\n{:>12} {:>7} {:>9} {:>9}  {}\n", "instructions", "%", "calls",
                   "functions", "image");
    for (const auto& [name, t] : images) {
      fmt::format_to(it, "{:>12} {:>6.2f}% {:>9} {:>9}  {}\n", t.instructions,
                     100.0 * t.instructions / total, t.calls, t.functions, name);
    }
    if (options_.list_problems) {
      fmt::format_to(
          it, "\nlosses and errors: {}\n",
          problems_count_ == 0 ? std::string("none") : fmt::format("{}", problems_count_));
      buf.append(std::string_view(problems_.data(), problems_.size()));
    }
    return out_.Close();
  }

 private:
  // One line "  STREAM: [what]" of the losses and errors list.
  template <typename F>
  void Problem(F append) {
    ++problems_count_;
    fmt::format_to(std::back_inserter(problems_), "  {}{}", stream_, stream_.empty() ? "" : ": ");
    append(problems_);
  }

  Output out_;
  OutputOptions options_;
  std::string stream_;  // the current stream's name (container input)
  Buffer problems_;     // list_problems: the lines, in trace order
  uint64_t problems_count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// calls

class CallsSink : public FlowSink {
 public:
  CallsSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options), lines_(MakeSourceLines(options)) {
    wants_time_ = true;
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
        fmt::format_to(out_.it(), FMT_COMPILE("{:>10} {:{}}{}{}{}\n"), count_, "", 2 * depth,
                       bracketed ? "" : "[", fn.name, bracketed ? "" : "]");
      }
      return;
    }
    // --srcline: where the called function starts (functions are named by their entry).
    const bool srcline = lines_ != nullptr && fn.address != 0 && fn.image != nullptr;
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"at\":{},\"depth\":{},\"call\":"), count_, depth);
      AppendJsonString(out_.buf(), fn.name);
      fmt::format_to(out_.it(), FMT_COMPILE(",\"address\":\"{:#x}\""), fn.address);
      if (srcline) AppendSrcline(out_.buf(), lines_.get(), *fn.image, fn.address, true);
      out_.buf().append(std::string_view("}\n"));
    } else {
      fmt::format_to(out_.it(), FMT_COMPILE("{:>10} {:{}}> {}"), count_, "", 2 * depth, fn.name);
      if (srcline) AppendSrcline(out_.buf(), lines_.get(), *fn.image, fn.address, false);
      out_.buf().push_back('\n');
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
    const bool timed = frame.entry_timed && timed_ && tsc_ >= frame.entry_tsc;
    const uint64_t ticks = timed ? tsc_ - frame.entry_tsc : 0;
    if (options_.json) {
      fmt::format_to(out_.it(), FMT_COMPILE("{{\"at\":{},\"depth\":{},\"return\":"), count_, depth);
      AppendJsonString(out_.buf(), fn.name);
      fmt::format_to(out_.it(), FMT_COMPILE(",\"insns\":{}"), insns);
      if (timed) fmt::format_to(out_.it(), FMT_COMPILE(",\"ticks\":{}"), ticks);
      out_.buf().append(std::string_view("}\n"));
    } else if (timed) {
      fmt::format_to(out_.it(), FMT_COMPILE("{:>10} {:{}}< {} ({} insns, {} ticks)\n"), count_, "",
                     2 * depth, fn.name, insns, ticks);
    } else {
      fmt::format_to(out_.it(), FMT_COMPILE("{:>10} {:{}}< {} ({} insns)\n"), count_, "", 2 * depth,
                     fn.name, insns);
    }
    out_.MaybeFlush();
  }
  absl::Status Report(const DecodeTotals& totals) override { return out_.Close(); }

 private:
  Output out_;
  OutputOptions options_;
  std::unique_ptr<SourceLines> lines_;  // --srcline
};

// ---------------------------------------------------------------------------------------------
// folded

class FoldedSink : public FlowSink {
 public:
  FoldedSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), by_time_(options.weight == FoldedWeight::kTime) {
    nodes_.push_back({0, 0, 0});
    wants_time_ = by_time_;
  }
  // --weight=time: the interval since the last time update ends here.
  void OnTime(uint64_t tsc) override {
    if (by_time_) {
      if (timed_ && tsc >= tsc_) CloseInterval(tsc - tsc_);
      ClearInterval();
      ever_timed_ = true;
    }
    FlowSink::OnTime(tsc);
  }
  // The time across an error, another stream or lost trace is not the program's: the open
  // interval is dropped (FlowSink forgets the time on new streams and loss).
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    timed_ = false;
    ClearInterval();
  }
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    if (!stream.context_switch) ClearInterval();
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    ClearInterval();
  }

 protected:
  void OnCount(uint32_t function, uint64_t n) override {
    uint32_t node = path_.empty() ? 0 : path_.back();
    if (node == 0 || nodes_[node].function != function) node = Child(node, function);
    top_ = node;
    if (!by_time_) {
      nodes_[node].count += n;
      return;
    }
    if (interval_insns_.size() < nodes_.size()) interval_insns_.resize(nodes_.size());
    if (interval_insns_[node] == 0) touched_.push_back(node);
    interval_insns_[node] += n;
  }
  void OnEnter(const Frame& frame) override {
    path_.push_back(Child(path_.empty() ? 0 : path_.back(), frame.function));
    top_ = path_.back();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    path_.pop_back();
    top_ = path_.empty() ? 0 : path_.back();
  }
  absl::Status Report(const DecodeTotals& totals) override {
    if (by_time_ && !ever_timed_) {
      return absl::FailedPreconditionError(
          "folded --weight=time: the trace has no timing packets (TSC, MTC or CYC), so there "
          "is no time to weigh stacks by; record with tsc=1 (ptrecord's default) or use "
          "--weight=insn");
    }
    // Sorted output: every node's path with its own count.
    std::vector<std::pair<std::string, uint64_t>> lines;
    std::vector<std::string> names(nodes_.size());
    for (uint32_t i = 1; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];  // parents come before children
      std::string name = functions_[n.function].name;
      std::replace(name.begin(), name.end(), ';', ':');
      names[i] = n.parent == 0 ? name : names[n.parent] + ";" + name;
      if (n.count != 0) lines.emplace_back(names[i], n.count);
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& [path, count] : lines) {
      fmt::format_to(out_.it(), "{} {}\n", path, count);
      out_.MaybeFlush();
    }
    return out_.Close();
  }

 private:
  struct Node {
    uint32_t parent;
    uint32_t function;
    uint64_t count;
  };
  uint32_t Child(uint32_t parent, uint32_t function) {
    auto [it, inserted] = children_.try_emplace({parent, function}, 0);
    if (inserted) {
      nodes_.push_back({parent, function, 0});
      it->second = static_cast<uint32_t>(nodes_.size() - 1);
    }
    return it->second;
  }
  // Splits `ticks` over the stacks that ran in the interval, by instructions; the rounding
  // remainder goes to the last one. No instructions: all to the stack on top now.
  void CloseInterval(uint64_t ticks) {
    uint64_t insns = 0;
    for (uint32_t node : touched_) insns += interval_insns_[node];
    if (insns == 0) {
      if (top_ != 0) nodes_[top_].count += ticks;
      return;
    }
    uint64_t given = 0;
    for (uint32_t node : touched_) {
      const auto share = static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) *
                                               interval_insns_[node] / insns);
      nodes_[node].count += share;
      given += share;
    }
    nodes_[touched_.back()].count += ticks - given;
  }
  void ClearInterval() {
    for (uint32_t node : touched_) interval_insns_[node] = 0;
    touched_.clear();
  }

  Output out_;
  const bool by_time_;  // --weight=time
  bool ever_timed_ = false;
  uint32_t top_ = 0;                      // the node on top of the stack (0: none)
  std::vector<uint64_t> interval_insns_;  // per node: instructions since the last time update
  std::vector<uint32_t> touched_;         // the nodes with interval_insns_ != 0
  std::vector<Node> nodes_;
  std::vector<uint32_t> path_;
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint32_t> children_;
};

// ---------------------------------------------------------------------------------------------
// timeline

class TimelineSink : public FlowSink {
 public:
  TimelineSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options) {
    wants_time_ = true;
    out_.buf().append(std::string_view("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"));
    ThreadName(options.trace_name.empty() ? "trace" : options.trace_name);
  }
  void OnTime(uint64_t tsc) override {
    FlowSink::OnTime(tsc);
    last_tsc_ = tsc;
    ever_timed_ = true;
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    fmt::format_to(out_.it(),
                   FMT_COMPILE(",\n{{\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":{},\"ts\":"), tid_);
    AppendTs();
    fmt::format_to(out_.it(),
                   FMT_COMPILE(",\"name\":\"{}\",\"args\":{{\"offset\":{},\"ip\":\"{:#x}\"}}}}"),
                   error.is_gap() ? "gap" : IptErrorName(error.code), error.offset, error.ip);
  }
  // Container input: one track per thread.
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);  // closes the open slices on the old track
    uint32_t tid = stream.tid != 0 ? stream.tid : 1000000 + ++unnamed_;
    if (tid == tid_) return;
    tid_ = tid;
    out_.buf().append(std::string_view(",\n"));
    ThreadName(stream.comm.empty() ? stream.name
                                   : fmt::format("{} ({})", stream.comm, stream.name));
  }

 protected:
  void OnEnter(const Frame& frame) override {
    fmt::format_to(out_.it(), FMT_COMPILE(",\n{{\"ph\":\"B\",\"pid\":1,\"tid\":{},\"ts\":"), tid_);
    AppendTs();
    out_.buf().append(std::string_view(",\"name\":"));
    AppendJsonString(out_.buf(), functions_[frame.function].name);
    out_.buf().push_back('}');
    out_.MaybeFlush();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    // Named as the "B" it closes: speedscope matches ends by name (Perfetto by nesting).
    fmt::format_to(out_.it(), FMT_COMPILE(",\n{{\"ph\":\"E\",\"pid\":1,\"tid\":{},\"ts\":"), tid_);
    AppendTs();
    out_.buf().append(std::string_view(",\"name\":"));
    AppendJsonString(out_.buf(), functions_[frame.function].name);
    out_.buf().push_back('}');
    out_.MaybeFlush();
  }
  absl::Status Report(const DecodeTotals& totals) override {
    if (clock_ == Clock::kUndecided) clock_ = ever_timed_ ? Clock::kTsc : Clock::kInstructions;
    // Trace-event format: "otherData" holds free-form metadata about the trace.
    out_.buf().append(std::string_view("\n],\"otherData\":{\"ts_unit\":"));
    const TscClock& c = options_.clock;
    if (clock_ == Clock::kInstructions) {
      out_.buf().append(std::string_view("\"instructions\"}}\n"));
    } else if (c.perf) {
      out_.buf().append(std::string_view("\"us\",\"ts_clock\":\"perf_time\"}}\n"));
    } else if (c.tsc_hz > 0) {
      fmt::format_to(out_.it(),
                     "\"us\",\"ts_clock\":\"tsc\",\"tsc_hz\":{:.0f},\"tsc_hz_source\":", c.tsc_hz);
      AppendJsonString(out_.buf(), c.hz_source);
      out_.buf().append(std::string_view("}}\n"));
    } else {
      out_.buf().append(std::string_view("\"tsc_ticks\",\"ts_clock\":\"tsc\"}}\n"));
    }
    return out_.Close();
  }

 private:
  void ThreadName(const std::string& name) {
    fmt::format_to(
        out_.it(),
        "{{\"ph\":\"M\",\"pid\":1,\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":", tid_);
    AppendJsonString(out_.buf(), name);
    out_.buf().append(std::string_view("}}"));
  }

  // Which clock "ts" uses is settled at the first event written: the trace's time if the
  // decoder has reported one by then, else instructions, for the whole output.
  enum class Clock { kUndecided, kInstructions, kTsc };
  void AppendTs() {
    if (clock_ == Clock::kUndecided) clock_ = ever_timed_ ? Clock::kTsc : Clock::kInstructions;
    auto it = out_.it();
    const TscClock& c = options_.clock;
    if (clock_ == Clock::kInstructions) {
      fmt::format_to(it, FMT_COMPILE("{}"), count_);
    } else if (c.perf) {  // microseconds of perf time, to the nanosecond
      const uint64_t ns = c.perf->ToPerfTime(last_tsc_);
      fmt::format_to(it, FMT_COMPILE("{}.{:03}"), ns / 1000, ns % 1000);
    } else if (c.tsc_hz > 0) {
      fmt::format_to(it, FMT_COMPILE("{:.3f}"), static_cast<double>(last_tsc_) * 1e6 / c.tsc_hz);
    } else {
      fmt::format_to(it, FMT_COMPILE("{}"), last_tsc_);
    }
  }

  Output out_;
  OutputOptions options_;
  uint32_t tid_ = 1;
  uint32_t unnamed_ = 0;
  Clock clock_ = Clock::kUndecided;
  bool ever_timed_ = false;
  uint64_t last_tsc_ = 0;  // the latest decoder time (kept across streams)
};

// ---------------------------------------------------------------------------------------------
// packets

void AppendIp(Buffer& buf, const pt_packet_ip& ip, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, ",\"ipc\":{}", static_cast<int>(ip.ipc));
    if (ip.ipc != pt_ipc_suppressed) fmt::format_to(it, ",\"ip\":\"{:#x}\"", ip.ip);
  } else if (ip.ipc == pt_ipc_suppressed) {
    buf.append(std::string_view(" <suppressed>"));
  } else {
    fmt::format_to(it, " {}: {:#x}", static_cast<int>(ip.ipc), ip.ip);
  }
}

const char* PacketName(pt_packet_type type) {
  switch (type) {
    case ppt_invalid:
      return "invalid";
    case ppt_unknown:
      return "unknown";
    case ppt_pad:
      return "pad";
    case ppt_psb:
      return "psb";
    case ppt_psbend:
      return "psbend";
    case ppt_fup:
      return "fup";
    case ppt_tip:
      return "tip";
    case ppt_tip_pge:
      return "tip.pge";
    case ppt_tip_pgd:
      return "tip.pgd";
    case ppt_tnt_8:
      return "tnt.8";
    case ppt_tnt_64:
      return "tnt.64";
    case ppt_mode:
      return "mode";
    case ppt_pip:
      return "pip";
    case ppt_vmcs:
      return "vmcs";
    case ppt_cbr:
      return "cbr";
    case ppt_tsc:
      return "tsc";
    case ppt_tma:
      return "tma";
    case ppt_mtc:
      return "mtc";
    case ppt_cyc:
      return "cyc";
    case ppt_stop:
      return "stop";
    case ppt_ovf:
      return "ovf";
    case ppt_mnt:
      return "mnt";
    case ppt_exstop:
      return "exstop";
    case ppt_mwait:
      return "mwait";
    case ppt_pwre:
      return "pwre";
    case ppt_pwrx:
      return "pwrx";
    case ppt_ptw:
      return "ptw";
  }
  return "?";
}

void AppendPacket(Buffer& buf, uint64_t offset, const pt_packet& p, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, FMT_COMPILE("{{\"offset\":{},\"size\":{},\"packet\":\"{}\""), offset, p.size,
                   PacketName(p.type));
  } else {
    fmt::format_to(it, FMT_COMPILE("{:016x}  {:<8}"), offset, PacketName(p.type));
  }
  auto field = [&](const char* key, uint64_t v, bool hex) {
    if (json) {
      if (hex)
        fmt::format_to(it, ",\"{}\":\"{:#x}\"", key, v);
      else
        fmt::format_to(it, ",\"{}\":{}", key, v);
    } else if (hex) {
      fmt::format_to(it, " {}={:#x}", key, v);
    } else {
      fmt::format_to(it, " {}={}", key, v);
    }
  };
  // A counter (TSC, CTC, CYC): hex in text as ptdump shows it, a number in JSON (as the
  // "tsc" of insn --json; nlohmann and most readers take 64-bit integers exactly).
  auto counter = [&](const char* key, uint64_t v) {
    if (json) {
      fmt::format_to(it, ",\"{}\":{}", key, v);
    } else {
      fmt::format_to(it, " {}={:#x}", key, v);
    }
  };
  switch (p.type) {
    case ppt_fup:
    case ppt_tip:
    case ppt_tip_pge:
    case ppt_tip_pgd:
      AppendIp(buf, p.payload.ip, json);
      break;
    case ppt_tnt_8:
    case ppt_tnt_64: {
      std::string bits;
      for (int i = p.payload.tnt.bit_size - 1; i >= 0; --i) {
        bits.push_back((p.payload.tnt.payload >> i) & 1 ? '!' : '.');
      }
      if (json)
        fmt::format_to(it, ",\"tnt\":\"{}\"", bits);
      else
        fmt::format_to(it, " {}", bits);
      break;
    }
    case ppt_mode:
      if (p.payload.mode.leaf == pt_mol_exec) {
        pt_exec_mode mode = pt_get_exec_mode(&p.payload.mode.bits.exec);
        field("exec",
              mode == ptem_64bit   ? 64
              : mode == ptem_32bit ? 32
              : mode == ptem_16bit ? 16
                                   : 0,
              false);
      } else {
        field("intx", p.payload.mode.bits.tsx.intx, false);
        field("abrt", p.payload.mode.bits.tsx.abrt, false);
      }
      break;
    case ppt_pip:
      field("cr3", p.payload.pip.cr3, true);
      if (p.payload.pip.nr) field("nr", 1, false);
      break;
    case ppt_vmcs:
      field("base", p.payload.vmcs.base, true);
      break;
    case ppt_cbr:
      field("ratio", p.payload.cbr.ratio, false);
      break;
    case ppt_tsc:
      counter("tsc", p.payload.tsc.tsc);
      break;
    case ppt_tma:
      counter("ctc", p.payload.tma.ctc);
      counter("fc", p.payload.tma.fc);
      break;
    case ppt_mtc:
      counter("ctc", p.payload.mtc.ctc);
      break;
    case ppt_cyc:
      counter("cyc", p.payload.cyc.value);
      break;
    case ppt_mnt:
      field("payload", p.payload.mnt.payload, true);
      break;
    case ppt_exstop:
      field("ip", p.payload.exstop.ip, false);
      break;
    case ppt_mwait:
      field("hints", p.payload.mwait.hints, true);
      field("ext", p.payload.mwait.ext, true);
      break;
    case ppt_pwre:
      field("state", p.payload.pwre.state, false);
      field("sub_state", p.payload.pwre.sub_state, false);
      break;
    case ppt_pwrx:
      field("last", p.payload.pwrx.last, false);
      field("deepest", p.payload.pwrx.deepest, false);
      break;
    case ppt_ptw:
      field("payload", p.payload.ptw.payload, true);
      field("ip", p.payload.ptw.ip, false);
      break;
    default:
      break;
  }
  buf.append(json ? std::string_view("}\n") : std::string_view("\n"));
}

}  // namespace

std::unique_ptr<Sink> MakeInsnSink(const ProgramImage& image, std::FILE* out,
                                   const OutputOptions& options) {
  return std::make_unique<InsnSink>(image, out, options);
}
std::unique_ptr<Sink> MakeBranchesSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options) {
  return std::make_unique<BranchesSink>(image, out, options);
}
std::unique_ptr<Sink> MakeCallsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  return std::make_unique<CallsSink>(image, out, options);
}
std::string Counted(uint64_t n, std::string_view noun, std::string_view plural) {
  if (n == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", n, noun) : fmt::format("{} {}", n, plural);
}

std::unique_ptr<Sink> MakeStatsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options) {
  return std::make_unique<StatsSink>(image, out, options);
}
std::unique_ptr<Sink> MakeFoldedSink(const ProgramImage& image, std::FILE* out,
                                     const OutputOptions& options) {
  return std::make_unique<FoldedSink>(image, out, options);
}
std::unique_ptr<Sink> MakeTimelineSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options) {
  return std::make_unique<TimelineSink>(image, out, options);
}

absl::Status DumpPackets(std::span<const uint8_t> trace, const TraceConfig& config, std::FILE* file,
                         const OutputOptions& options, const PacketContext& context) {
  PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace, config));
  Output out(file);
  const bool lazy_header = context.keep && context.stream_shown != nullptr;
  auto show_stream = [&] {
    if (context.stream == nullptr || (lazy_header && *context.stream_shown)) return;
    AppendStreamLine(out.buf(), *context.stream, options.json);
    if (lazy_header) *context.stream_shown = true;
  };
  if (!lazy_header) show_stream();
  for (const LossInfo& loss : context.losses) AppendLossLine(out.buf(), loss, options.json);
  if (trace.empty()) return out.Close();
  const uint64_t base = context.offset_base;
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
  if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a packet decoder");
  uint64_t last_sync = 0;
  bool first = true;
  for (;;) {
    int status = pt_pkt_sync_forward(dec.get());
    if (status < 0) {
      if (status == -pte_eos) break;
      return absl::InternalError(
          fmt::format("pt_pkt_sync_forward: {}", pt_errstr(pt_errcode(status))));
    }
    uint64_t sync = 0;
    pt_pkt_get_sync_offset(dec.get(), &sync);
    if (!first && sync <= last_sync) break;
    if (first && sync != 0) {
      if (options.json)
        fmt::format_to(out.it(), "{{\"skipped\":{},\"offset\":{}}}\n", sync, base);
      else
        fmt::format_to(out.it(), "[{} bytes before the first psb skipped]\n", sync);
    }
    first = false;
    last_sync = sync;
    for (;;) {
      uint64_t offset = 0;
      pt_pkt_get_offset(dec.get(), &offset);
      pt_packet packet;
      status = pt_pkt_next(dec.get(), &packet, sizeof(packet));
      if (status < 0) {
        if (status != -pte_eos) {
          if (options.json) {
            fmt::format_to(out.it(), "{{\"error\":\"{}\",\"offset\":{}}}\n", IptErrorName(-status),
                           base + offset);
          } else {
            fmt::format_to(out.it(), "[error at offset {:#x}: {}]\n", base + offset,
                           pt_errstr(pt_errcode(status)));
          }
        }
        break;
      }
      if (context.keep && !context.keep(packet)) continue;
      if (lazy_header) show_stream();
      AppendPacket(out.buf(), base + offset, packet, options.json);
      out.MaybeFlush();
    }
    if (status == -pte_eos) break;
  }
  return out.Close();
}

}  // namespace ptkit::decoder
