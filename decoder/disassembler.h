// The Zydis decoders and Intel-syntax formatter for the three execution modes. Internal to
// ptkit_decoder.
#ifndef PTKIT_DECODER_DISASSEMBLER_H_
#define PTKIT_DECODER_DISASSEMBLER_H_

#include <Zydis/Zydis.h>
#include <intel-pt.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
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
  // A hash (64-bit FNV-1a, the same in every process and build of ptkit) of the code in
  // `bytes` at `ip`, instruction by instruction, with the fields that name addresses left out:
  // relative branch targets, RIP-relative displacements, and 32- and 64-bit immediates and
  // displacements within 16 MiB of `ip` and not below 1 MiB (a program that is not
  // position-independent names its data so, from 4 MiB up; smaller values are constants and
  // offsets, which tell code apart: a review). The same code placed at another address, or whose
  // callees and data moved, gives the same hash: what `diff` pairs the functions of two builds by
  // where the compiler numbered them otherwise (a lambda's {lambda(int)#2}). Bytes that do not
  // decode are hashed as they are, one at a time.
  uint64_t ShapeHash(pt_exec_mode mode, const uint8_t* bytes, size_t size, uint64_t ip) const {
    uint64_t hash = 0xcbf29ce484222325;
    auto mix = [&hash](uint8_t byte) {
      hash ^= byte;
      hash *= 0x100000001b3;
    };
    auto near = [ip](uint64_t value) {
      return value >= (1u << 20) && value - (ip - (1u << 24)) < (2u << 24);
    };
    size_t at = 0;
    while (at < size) {
      ZydisDecodedInstruction insn;
      const int length = Length(mode, bytes + at, size - at, &insn);
      if (length == 0) {
        mix(bytes[at++]);
        continue;
      }
      uint8_t copy[ZYDIS_MAX_INSTRUCTION_LENGTH];
      std::memcpy(copy, bytes + at, static_cast<size_t>(length));
      auto clear = [&copy, length](uint8_t offset, uint8_t bits) {
        for (size_t k = offset; k < offset + bits / 8u && k < static_cast<size_t>(length); ++k) {
          copy[k] = 0;
        }
      };
      const bool rip_relative = mode == ptem_64bit && (insn.attributes & ZYDIS_ATTRIB_HAS_MODRM) &&
                                insn.raw.modrm.mod == 0 && insn.raw.modrm.rm == 5;
      if (insn.raw.disp.size != 0 &&
          (rip_relative ||
           (insn.raw.disp.size >= 32 && near(static_cast<uint64_t>(insn.raw.disp.value))))) {
        clear(insn.raw.disp.offset, insn.raw.disp.size);
      }
      for (const auto& imm : insn.raw.imm) {
        if (imm.size != 0 && (imm.is_relative || (imm.size >= 32 && near(imm.value.u)))) {
          clear(imm.offset, imm.size);
        }
      }
      for (int k = 0; k < length; ++k) mix(copy[k]);
      at += static_cast<size_t>(length);
    }
    return hash;
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
