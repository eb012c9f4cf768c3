// Fuzzes the Intel PT decoder on a raw trace against code from the input (fuzz_code_input.h):
// DecodeTrace into the insn (with disassembly), calls and stats sinks, and the packet dump.
// Nothing may crash, hang or read outside its buffers; decode errors are data.
#include <cstddef>
#include <cstdint>

#include "decoder/decode.h"
#include "decoder/packets.h"
#include "fuzz_code_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ptkit::fuzz::LowerDecodeBounds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ptkit::fuzz::CodeInput in = ptkit::fuzz::ReadCodeInput(data, size);
  if (!in.image) return 0;
  ptkit::fuzz::DecodeIntoSinks(in, [&](ptkit::decoder::Sink& sink) {
    (void)ptkit::decoder::DecodeTrace(in.trace, {}, *in.image, sink);
  });
  (void)ptkit::decoder::DumpPackets(in.trace, {}, ptkit::fuzz::DevNull(),
                                    ptkit::fuzz::FuzzOutput());
  return 0;
}
