// One instruction decoded as libipt decodes it (its instruction length decoder, pt_ild: the
// size, the class, a direct branch's displacement), for the fast block decoder, whose answer
// must be libipt's. Zydis decodes (fast); where Zydis rejects bytes pt_ild sizes (reserved
// opcodes, illegal prefixes: a damaged trace that returns into the middle of an instruction
// reaches them) or sizes them otherwise (UD0 and UD1, whose ModRM pt_ild does not read; XOP,
// which pt_ild reads as POP; VIA's 0F A7), libipt itself is asked, through a trace of one
// instruction. Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_INSN_DECODE_H_
#define PTKIT_DECODER_INSN_DECODE_H_

#include <intel-pt.h>

#include <cstddef>
#include <cstdint>

#include "decoder/disassembler.h"

namespace ptkit::decoder {

struct DecodedInsn {
  uint8_t size = 0;
  pt_insn_class iclass = ptic_error;
  bool is_direct = false;    // a direct call or jump, or a conditional jump
  int32_t displacement = 0;  // then its target minus the next instruction's IP
  // Known from Zydis' decoding only (libipt does not say): false where libipt was asked.
  bool changes_cr3 = false;  // MOV to CR3
  bool vmlaunch = false;     // VMLAUNCH or VMRESUME (erratum SKD022)
};

// The instruction in `bytes` (`size` of them; at most 15 are read) at `ip` in `mode`, as libipt
// decodes it: 0 with *out, or -pte_bad_insn where libipt does not decode it either.
int DecodeInsn(const Disassembler& disasm, uint64_t ip, pt_exec_mode mode, const uint8_t* bytes,
               size_t size, DecodedInsn* out);

// libipt's decoding alone (pt_insn_next on a trace of PSB, MODE.Exec, TIP.PGE to `ip`, and one
// taken TNT bit for a conditional jump): 0 with *out, or a negative libipt status. It makes a
// libipt decoder per call (about 1 us): for the rare instruction, not for every one.
int IptDecodeInsn(uint64_t ip, pt_exec_mode mode, const uint8_t* bytes, size_t size,
                  DecodedInsn* out);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_INSN_DECODE_H_
