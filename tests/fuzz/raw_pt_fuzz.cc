// Fuzzes the Intel PT decoder on a raw trace against code from the input (fuzz_code_input.h):
// DecodeTrace into the insn (with disassembly), calls and stats sinks, and the packet dump.
// Nothing may crash, hang or read outside its buffers; decode errors are data.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "decoder/decode.h"
#include "decoder/packets.h"
#include "decoder/sinks.h"
#include "fuzz_code_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dec = ::ptkit::decoder;
  ptkit::fuzz::CodeInput in = ptkit::fuzz::ReadCodeInput(data, size);
  if (!in.image) return 0;
  dec::OutputOptions out;
  out.disasm = true;
  out.diagnostics = ptkit::fuzz::DevNull();
  out.list_problems = true;
  std::FILE* null = ptkit::fuzz::DevNull();
  for (auto make : {dec::MakeInsnSink, dec::MakeCallsSink, dec::MakeStatsSink}) {
    std::unique_ptr<dec::Sink> sink = make(*in.image, null, out);
    (void)dec::DecodeTrace(in.trace, {}, *in.image, *sink);
  }
  (void)dec::DumpPackets(in.trace, {}, null, out);
  return 0;
}
