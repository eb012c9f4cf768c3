// Shared pieces of the output sinks (decoder/*_sink.cc, decoder/packets.cc): buffered output,
// JSON strings, the names of addresses, and the lines for events, errors, streams and losses.
// Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_OUTPUT_FORMAT_H_
#define PTKIT_DECODER_OUTPUT_FORMAT_H_

#include <fmt/compile.h>
#include <fmt/format.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/sinks.h"
#include "decoder/srcline.h"
#include "ptkit/errno_text.h"

namespace ptkit::decoder {

using Buffer = fmt::memory_buffer;

// Writes `v` in lowercase hex with at least `digits` digits (zero-padded, at most 16) at `p`
// and returns the end: fmt's "{:0Nx}" without its format-spec machinery, for the
// per-instruction hot paths of insn and branches.
inline char* WriteHex(char* p, uint64_t v, int digits = 1) {
  if (digits == 16) {
    // An address: each half's eight nibbles spread to one byte each, turned into digits
    // all at once (no loop, no table).
    auto eight = [](uint32_t half) {
      uint64_t n = half;
      n = ((n & 0xffff0000u) << 16) | (n & 0xffffu);
      n = ((n & 0x0000ff000000ff00u) << 8) | (n & 0x000000ff000000ffu);
      n = ((n & 0x00f000f000f000f0u) << 4) | (n & 0x000f000f000f000fu);
      // Byte i holds nibble i; a nibble of 10 or more gets 'a' - '0' - 10 more than '0'.
      const uint64_t letters = ((n + 0x0606060606060606u) >> 4) & 0x0101010101010101u;
      n += 0x3030303030303030u + letters * ('a' - '0' - 10);
      // The most significant nibble first in memory.
      return std::endian::native == std::endian::little ? __builtin_bswap64(n) : n;
    };
    const uint64_t high = eight(static_cast<uint32_t>(v >> 32));
    const uint64_t low = eight(static_cast<uint32_t>(v));
    std::memcpy(p, &high, 8);
    std::memcpy(p + 8, &low, 8);
    return p + 16;
  }
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
  char* const end = p + n;
  p = end;
  int i = 0;
  for (; i + 2 <= n; i += 2, v >>= 8) {
    p -= 2;
    std::memcpy(p, &kPairs[2 * (v & 0xff)], 2);
  }
  if (i < n) *--p = "0123456789abcdef"[v & 0xf];
  return end;
}

// Writes `s` at `p` and returns the end.
inline char* WriteText(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// Writes `v` in decimal, right-aligned in `width` characters (padded with spaces before it), at
// `p` and returns the end: fmt's "{:>N}" without its format-spec machinery (per-line hot paths),
// the digits written in place two at a time (fmt::format_int writes them to itself, to copy).
inline char* WriteDecimal(char* p, uint64_t v, size_t width = 0) {
  // 10^n, but 0 for n = 0: the digits of v are n + (v >= kPowers[n]) for n the estimate of
  // log10 from v's bit width (1233 / 4096 ~ log10(2)), and 1 for v = 0.
  static constexpr std::array<uint64_t, 20> kPowers = [] {
    std::array<uint64_t, 20> powers{};
    uint64_t power = 1;
    for (size_t i = 1; i < powers.size(); ++i) powers[i] = power *= 10;
    return powers;
  }();
  static constexpr char kPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  const auto guess = static_cast<size_t>((std::bit_width(v | 1) * 1233) >> 12);
  const size_t n = guess + (v >= kPowers[guess] ? 1 : 0);
  if (n < width) {
    std::memset(p, ' ', width - n);
    p += width - n;
  }
  char* const end = p + n;
  char* q = end;
  while (v >= 100) {
    q -= 2;
    std::memcpy(q, &kPairs[(v % 100) * 2], 2);
    v /= 100;
  }
  if (v >= 10) {
    std::memcpy(q - 2, &kPairs[v * 2], 2);
  } else {
    q[-1] = static_cast<char>('0' + v);
  }
  return end;
}

// Room for `n` more bytes at the end of `buf`; Commit(buf, end) then takes what was written
// up to `end`. One capacity check for a whole line instead of one per piece.
inline char* Reserve(Buffer& buf, size_t n) {
  buf.try_reserve(buf.size() + n);
  return buf.data() + buf.size();
}
inline void Commit(Buffer& buf, const char* end) {
  buf.try_resize(static_cast<size_t>(end - buf.data()));
}

// Appends `v` in lowercase hex with at least `digits` digits (zero-padded, at most 16).
inline void AppendHex(Buffer& buf, uint64_t v, int digits = 1) {
  Commit(buf, WriteHex(Reserve(buf, 16), v, digits));
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
    if (buf_.size() != 0 && std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size() &&
        error_ == 0) {
      error_ = errno != 0 ? errno : EIO;
    }
    buf_.clear();
  }
  absl::Status Close() {
    Flush();
    if (std::fflush(file_) != 0 && error_ == 0) error_ = errno != 0 ? errno : EIO;
    if (error_ != 0 || std::ferror(file_)) return WriteError(error_ != 0 ? error_ : EIO);
    return absl::OkStatus();
  }
  // The error of a write to the output that failed with `err` (errno).
  static absl::Status WriteError(int err) {
    return absl::DataLossError(absl::StrCat("write error on output: ", ErrnoText(err)));
  }

 private:
  std::FILE* file_;
  Buffer buf_;
  int error_ = 0;  // errno of the first write that failed
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
  void Append(Buffer& buf, uint64_t ip) { Commit(buf, Write(Reserve(buf, Prepare(ip)), ip)); }
  // Looks `ip` up and returns the room Write needs for its name.
  size_t Prepare(uint64_t ip) {
    if (!(ip >= begin_ && ip < end_)) Lookup(ip);
    return symbol_ != nullptr ? symbol_->name.size() + 3 + 16 : label_.size();
  }
  // Writes the name of `ip`, the address Prepare was given last, at `p`; returns the end.
  char* Write(char* p, uint64_t ip) const {
    if (symbol_ == nullptr) return WriteText(p, label_);
    p = WriteText(p, symbol_->name);
    p = WriteText(p, "+0x");
    return WriteHex(p, ip - symbol_->begin);
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
