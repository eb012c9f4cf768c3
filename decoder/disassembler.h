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
  // Where the instruction in `bytes` at `ip` goes when it needs no trace: the next instruction,
  // a direct jump's or call's target (`*call` says which was a call); 0 when it is another
  // branch (it needs trace) or does not decode. The rule by which blocks are joined
  // (CanonicalBlocks) and walked whole (FastBlockDecoder::SetWalk).
  uint64_t Successor(pt_exec_mode mode, const uint8_t* bytes, size_t size, uint64_t ip,
                     bool* call) const {
    *call = false;
    ZydisDecodedInstruction insn;
    const int length = size == 0 ? 0 : Length(mode, bytes, size, &insn);
    if (length == 0) return 0;
    const uint64_t after = ip + length;
    switch (insn.meta.category) {
      case ZYDIS_CATEGORY_UNCOND_BR:
      case ZYDIS_CATEGORY_CALL:
        if (!insn.raw.imm[0].is_relative) return 0;
        *call = insn.meta.category == ZYDIS_CATEGORY_CALL;
        return after + static_cast<uint64_t>(insn.raw.imm[0].value.s);
      case ZYDIS_CATEGORY_COND_BR:
      case ZYDIS_CATEGORY_RET:
      case ZYDIS_CATEGORY_SYSCALL:
      case ZYDIS_CATEGORY_SYSRET:
      case ZYDIS_CATEGORY_INTERRUPT:
      case ZYDIS_CATEGORY_SYSTEM:
        return 0;
      default:
        return insn.meta.branch_type == ZYDIS_BRANCH_TYPE_NONE ? after : 0;
    }
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
