// Fuzzes the BTS decoder: intel_bts records ({from, to, flags}, 24 bytes each) against code
// from the input (fuzz_code_input.h), into the insn (with disassembly), calls and stats sinks.
// Nothing may crash, hang or read outside its buffers; a partial record or a long walk between
// records is a decode error.
#include <cstddef>
#include <cstdint>

#include "decoder/bts.h"
#include "fuzz_code_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ptkit::fuzz::LowerDecodeBounds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ptkit::fuzz::CodeInput in = ptkit::fuzz::ReadCodeInput(data, size);
  if (!in.image) return 0;
  ptkit::fuzz::DecodeIntoSinks(in, [&](ptkit::decoder::Sink& sink) {
    (void)ptkit::decoder::DecodeBts(in.trace, *in.image, sink);
    // Also as a piece of a kernel recording that runs over the end of a 4 KiB AUX ring.
    ptkit::decoder::DecodeTotals totals;
    (void)ptkit::decoder::DecodeBtsInto(in.trace, *in.image, sink, totals, 4096 - 24 * 8, 4096);
  });
  return 0;
}
