// The Zydis decoders and Intel-syntax formatter for the three execution modes. Internal to
// ptkit_decoder.
#ifndef PTKIT_DECODER_DISASSEMBLER_H_
#define PTKIT_DECODER_DISASSEMBLER_H_

#include <Zydis/Zydis.h>
#include <intel-pt.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "decoder/output_format.h"

namespace ptkit::decoder {

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

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_DISASSEMBLER_H_
