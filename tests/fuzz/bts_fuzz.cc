// Fuzzes the BTS decoder: intel_bts records ({from, to, flags}, 24 bytes each) against code
// from the input (fuzz_code_input.h), into the insn (with disassembly), calls and stats sinks.
// Nothing may crash, hang or read outside its buffers; a partial record or a long walk between
// records is a decode error.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "decoder/bts.h"
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
  for (auto make : {dec::MakeInsnSink, dec::MakeCallsSink, dec::MakeStatsSink}) {
    std::unique_ptr<dec::Sink> sink = make(*in.image, ptkit::fuzz::DevNull(), out);
    (void)dec::DecodeBts(in.trace, *in.image, *sink);
  }
  return 0;
}
