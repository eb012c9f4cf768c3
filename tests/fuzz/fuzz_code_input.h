// The input of the trace fuzzers (raw_pt_fuzz, bts_fuzz): code and a trace that ran in it.
//   u64 address, u32 code size, code size bytes of code (mapped at address), then the trace.
// A code size beyond the input takes what is left. Seeds: scripts/fuzz.sh's corpus folders,
// made from the decode fuzzer's emulated recordings (their archived code and AUX bytes).
// DecodeIntoSinks runs a decoder into each of the sinks both fuzz. LowerDecodeBounds (for
// LLVMFuzzerInitialize) lowers the decoders' work bounds.
#ifndef PTKIT_TESTS_FUZZ_FUZZ_CODE_INPUT_H_
#define PTKIT_TESTS_FUZZ_FUZZ_CODE_INPUT_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>

#include "decoder/decode_bounds.h"
#include "decoder/image.h"
#include "decoder/sinks.h"

namespace ptkit::fuzz {

struct CodeInput {
  std::unique_ptr<decoder::ProgramImage> image;
  std::span<const uint8_t> trace;
};

// The image holds the code (copied); null image when the input is too short or libipt fails.
inline CodeInput ReadCodeInput(const uint8_t* data, size_t size) {
  CodeInput in;
  if (size < 12) return in;
  uint64_t address = 0;
  uint32_t code_size = 0;
  std::memcpy(&address, data, 8);
  std::memcpy(&code_size, data + 8, 4);
  std::span<const uint8_t> rest(data + 12, size - 12);
  const size_t n = code_size < rest.size() ? code_size : rest.size();
  auto image = decoder::ProgramImage::Create();
  if (!image.ok()) return in;
  (*image)->AddBytes("fuzz", address, rest.first(n));
  in.image = std::move(*image);
  in.trace = rest.subspan(n);
  return in;
}

// Fuzzed code that loops through a direct branch needs no trace: every decode of it ran to the
// loop bound, 2^20 instructions (2^16 per BTS record), each through the disassembler, and such
// inputs were most of the trace fuzzers' time. The error paths are the same at these bounds.
inline void LowerDecodeBounds() {
  decoder::SetDecodeBounds({.insns_without_progress = 1 << 12, .bts_walk = 1 << 10});
}

inline std::FILE* DevNull() {
  static std::FILE* null = std::fopen("/dev/null", "w");
  return null;
}

// What the trace fuzzers print: text with disassembly and every problem, to /dev/null.
inline decoder::OutputOptions FuzzOutput() {
  decoder::OutputOptions out;
  out.disasm = true;
  out.diagnostics = DevNull();
  out.list_problems = true;
  return out;
}

// decode(sink) into a fresh insn, calls and stats sink each, over `in`'s code.
template <typename Decode>
void DecodeIntoSinks(const CodeInput& in, Decode decode) {
  const decoder::OutputOptions out = FuzzOutput();
  for (auto make : {decoder::MakeInsnSink, decoder::MakeCallsSink, decoder::MakeStatsSink}) {
    std::unique_ptr<decoder::Sink> sink = make(*in.image, DevNull(), out);
    decode(*sink);
  }
}

}  // namespace ptkit::fuzz

#endif  // PTKIT_TESTS_FUZZ_FUZZ_CODE_INPUT_H_
