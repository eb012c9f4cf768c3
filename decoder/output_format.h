// Shared pieces of the output sinks (decoder/*_sink.cc, decoder/packets.cc): buffered output,
// JSON strings, the names of addresses, and the lines for events, errors, streams and losses.
// Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_OUTPUT_FORMAT_H_
#define PTKIT_DECODER_OUTPUT_FORMAT_H_

#include <fmt/compile.h>
#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"

namespace ptkit::decoder {

using Buffer = fmt::memory_buffer;

// Appends `v` in lowercase hex with at least `digits` digits (zero-padded), as fmt's "{:0Nx}"
// without its format-spec machinery: the per-instruction hot path of insn and branches.
inline void AppendHex(Buffer& buf, uint64_t v, int digits = 1) {
  // Two digits per step from a table of the 256 byte values.
  static constexpr auto kPairs = [] {
    std::array<char, 512> t{};
    for (int i = 0; i < 256; ++i) {
      t[2 * i] = "0123456789abcdef"[i >> 4];
      t[2 * i + 1] = "0123456789abcdef"[i & 0xf];
    }
    return t;
  }();
  const int needed = v == 0 ? 1 : (67 - std::countl_zero(v)) / 4;
  const int n = needed > digits ? needed : digits;
  const size_t at = buf.size();
  buf.try_resize(at + n);
  char* p = buf.data() + at + n;
  int i = 0;
  for (; i + 2 <= n; i += 2, v >>= 8) {
    p -= 2;
    std::memcpy(p, &kPairs[2 * (v & 0xff)], 2);
  }
  if (i < n) *--p = "0123456789abcdef"[v & 0xf];
}

// Appends `s`: one resize and one memcpy, without fmt's general append loop (hot paths).
inline void AppendText(Buffer& buf, std::string_view s) {
  const size_t at = buf.size();
  buf.try_resize(at + s.size());
  std::memcpy(buf.data() + at, s.data(), s.size());
}

// Buffered writes to a FILE*, flushed in 1 MiB chunks (one write(2) each: a line per
// instruction makes hundreds of MB). The buffer grows as output comes (a sink that writes
// little allocates little: under ASan a 1 MiB allocation up front was most of a fuzz
// execution's time) and keeps its size across flushes.
class Output {
 public:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  explicit Output(std::FILE* file) : file_(file) {}
  Buffer& buf() { return buf_; }
  auto it() { return std::back_inserter(buf_); }
  void MaybeFlush() {
    if (buf_.size() >= kFlushBytes) Flush();
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

void AppendJsonString(Buffer& buf, std::string_view s);
std::string_view Basename(std::string_view path);
// The name of code without a symbol: its file's name in brackets ("[libc.so.6]"); a name
// that is bracketed already ("[vdso]") is not bracketed twice.
std::string FileLabel(const std::string& path);
// --srcline: the "file:line" of `ip` when it is known: text `lead` + "(file:line)", JSON
// ,"key":"file:line". Nothing without --srcline (`lines` null).
void AppendSrcline(Buffer& buf, SourceLines* lines, const ProgramImage& image, uint64_t ip,
                   bool json, std::string_view key = "srcline", std::string_view lead = " ");
std::unique_ptr<SourceLines> MakeSourceLines(const OutputOptions& options);

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
      AppendText(buf, symbol_->name);
      AppendText(buf, "+0x");
      AppendHex(buf, ip - symbol_->begin);
    } else {
      AppendText(buf, label_);
    }
  }
  std::string Name(uint64_t ip) {
    Buffer buf;
    Append(buf, ip);
    return fmt::to_string(buf);
  }

 private:
  // The answer holds for the addresses around `ip` with the same symbol and file (code
  // without symbols, page dumps: one lookup per run of such code, not one per instruction).
  void Lookup(uint64_t ip) {
    AddressRange range;
    int s = image_->SymbolAt(ip, &range);
    begin_ = range.begin;
    end_ = range.end;
    if (s >= 0) {
      symbol_ = &image_->symbols()[s];
      return;
    }
    symbol_ = nullptr;
    int file = image_->FileAt(ip);
    label_ = file < 0 ? "[unmapped]" : FileLabel(image_->files()[file].name);
  }

  const ProgramImage* image_;
  const Symbol* symbol_ = nullptr;
  uint64_t begin_ = 1;
  uint64_t end_ = 0;
  std::string label_;
};

// The kind of a branch instruction ("jcc", "jmp", "call", "ret", "far_call", "far_ret",
// "far_jmp"); null for an instruction that does not branch.
const char* BranchKind(pt_insn_class iclass);
const char* EventName(const pt_event& ev);
// The IP an event names, if any.
bool EventIp(const pt_event& ev, uint64_t* ip);
void AppendEventLine(Buffer& buf, const pt_event& ev, bool json);
void AppendErrorLine(Buffer& buf, const DecodeError& e, bool json);
void AppendStreamLine(Buffer& buf, const StreamInfo& s, bool json);
void AppendLossLine(Buffer& buf, const LossInfo& l, bool json);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_OUTPUT_FORMAT_H_
