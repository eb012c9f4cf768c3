#include "decoder/insn_decode.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "decoder/ipt_handles.h"

namespace ptkit::decoder {
namespace {

// pt_ild's classification (pt_ild.c, pt_instruction_decode) from Zydis' decoding: the iclass,
// the branch displacement and the instructions the block decoder treats specially.
void Classify(const ZydisDecodedInstruction& z, DecodedInsn* insn) {
  insn->iclass = ptic_other;
  if (z.encoding != ZYDIS_INSTRUCTION_ENCODING_LEGACY) return;  // VEX, EVEX, XOP, 3DNow!
  int map;
  if (z.opcode_map == ZYDIS_OPCODE_MAP_DEFAULT) {
    map = 0;
  } else if (z.opcode_map == ZYDIS_OPCODE_MAP_0F) {
    map = 1;
  } else {
    return;
  }
  const uint8_t op = z.opcode;
  const uint8_t reg = z.raw.modrm.reg;
  auto direct = [&](pt_insn_class iclass) {
    insn->iclass = iclass;
    insn->is_direct = true;
    insn->displacement = static_cast<int32_t>(z.raw.imm[0].value.s);
  };
  if (map == 0) {
    if (op >= 0x70 && op <= 0x7f) return direct(ptic_cond_jump);
    switch (op) {
      case 0x9a:
      case 0xcd:
      case 0xcc:
      case 0xce:
      case 0xf1:
        insn->iclass = ptic_far_call;
        return;
      case 0xff:
        if (reg == 2) insn->iclass = ptic_call;
        if (reg == 3) insn->iclass = ptic_far_call;
        if (reg == 4) insn->iclass = ptic_jump;
        if (reg == 5) insn->iclass = ptic_far_jump;
        return;
      case 0xe8:
        return direct(ptic_call);
      case 0xe9:
      case 0xeb:
        return direct(ptic_jump);
      case 0xea:
        insn->iclass = ptic_far_jump;
        return;
      case 0xe0:
      case 0xe1:
      case 0xe2:
      case 0xe3:
        return direct(ptic_cond_jump);
      case 0xc3:
      case 0xc2:
        insn->iclass = ptic_return;
        return;
      case 0xcf:
      case 0xcb:
      case 0xca:
        insn->iclass = ptic_far_return;
        return;
      default:
        return;
    }
  }
  if (op >= 0x80 && op <= 0x8f) return direct(ptic_cond_jump);
  switch (op) {
    case 0x22:
      if (reg == 3 && !z.raw.rex.R) insn->changes_cr3 = true;
      return;
    case 0x05:
    case 0x34:
      insn->iclass = ptic_far_call;
      return;
    case 0x35:
    case 0x07:
      insn->iclass = ptic_far_return;
      return;
    case 0x01: {
      const uint8_t modrm =
          static_cast<uint8_t>(z.raw.modrm.mod << 6 | z.raw.modrm.reg << 3 | z.raw.modrm.rm);
      if (modrm == 0xc1) insn->iclass = ptic_far_call;
      if (modrm == 0xc2 || modrm == 0xc3) {
        insn->iclass = ptic_far_return;
        insn->vmlaunch = true;
      }
      if (modrm == 0xec) insn->iclass = ptic_far_return;
      return;
    }
    case 0xae:
      if (z.mnemonic == ZYDIS_MNEMONIC_PTWRITE) insn->iclass = ptic_ptwrite;
      return;
    default:
      return;
  }
}

// Where Zydis sizes an instruction otherwise than pt_ild does (measured on random bytes in the
// three modes: tests/unit/decoder/insn_decode_test.cc).
bool SizedOtherwise(const ZydisDecodedInstruction& z) {
  switch (z.opcode_map) {
    case ZYDIS_OPCODE_MAP_DEFAULT:
      return false;
    case ZYDIS_OPCODE_MAP_0F:  // UD1, VIA's PadLock, UD0
      return z.opcode == 0xb9 || z.opcode == 0xa7 || z.opcode == 0xff;
    default:
      return z.encoding == ZYDIS_INSTRUCTION_ENCODING_XOP;
  }
}

struct Code {
  uint64_t ip;
  const uint8_t* bytes;
  size_t size;
};

// The image's memory: the instruction's bytes at its IP, nothing elsewhere.
int ReadCode(uint8_t* buffer, size_t size, const pt_asid* /*asid*/, uint64_t ip, void* context) {
  const Code& code = *static_cast<const Code*>(context);
  if (ip < code.ip || ip - code.ip >= code.size) return -pte_nomap;
  const size_t n = std::min(size, code.size - static_cast<size_t>(ip - code.ip));
  std::memcpy(buffer, code.bytes + (ip - code.ip), n);
  return static_cast<int>(n);
}

// PSB, PSBEND, MODE.Exec (for a known mode), TIP.PGE to `ip` and a TNT-8 of one taken bit (a
// conditional jump's target): the bytes written, or a negative libipt status.
int EncodeTrace(uint64_t ip, pt_exec_mode mode, uint8_t* begin, uint8_t* end) {
  pt_config config;
  pt_config_init(&config);
  config.begin = begin;
  config.end = end;
  EncoderPtr encoder(pt_alloc_encoder(&config));
  if (!encoder) return -pte_nomem;
  std::array<pt_packet, 5> packets{};
  size_t n = 0;
  packets[n++].type = ppt_psb;
  packets[n++].type = ppt_psbend;
  if (mode != ptem_unknown) {
    packets[n].type = ppt_mode;
    packets[n].payload.mode.leaf = pt_mol_exec;
    packets[n++].payload.mode.bits.exec = pt_set_exec_mode(mode);
  }
  packets[n].type = ppt_tip_pge;
  packets[n].payload.ip.ipc = pt_ipc_full;
  packets[n++].payload.ip.ip = ip;
  packets[n].type = ppt_tnt_8;
  packets[n].payload.tnt.bit_size = 1;
  packets[n++].payload.tnt.payload = 1;
  for (size_t i = 0; i < n; ++i) {
    const int status = pt_enc_next(encoder.get(), &packets[i]);
    if (status < 0) return status;
  }
  uint64_t offset = 0;
  const int status = pt_enc_get_offset(encoder.get(), &offset);
  return status < 0 ? status : static_cast<int>(offset);
}

// The events a synchronization or an instruction left pending (enabled, exec mode).
int DrainEvents(pt_insn_decoder* decoder, int status) {
  while (status >= 0 && (status & pts_event_pending) != 0) {
    pt_event event;
    status = pt_insn_event(decoder, &event, sizeof(event));
  }
  return status;
}

}  // namespace

int IptDecodeInsn(uint64_t ip, pt_exec_mode mode, const uint8_t* bytes, size_t size,
                  DecodedInsn* out) {
  std::array<uint8_t, 64> trace{};
  const int length = EncodeTrace(ip, mode, trace.data(), trace.data() + trace.size());
  if (length < 0) return length;
  pt_config config;
  pt_config_init(&config);
  config.begin = trace.data();
  config.end = trace.data() + length;
  InsnDecoderPtr decoder(pt_insn_alloc_decoder(&config));
  ImagePtr image(pt_image_alloc(nullptr));
  if (!decoder || !image) return -pte_nomem;
  Code code{ip, bytes, std::min<size_t>(size, pt_max_insn_size)};
  int status = pt_image_set_callback(image.get(), ReadCode, &code);
  if (status >= 0) status = pt_insn_set_image(decoder.get(), image.get());
  if (status >= 0) status = DrainEvents(decoder.get(), pt_insn_sync_forward(decoder.get()));
  if (status < 0) return status;
  pt_insn insn{};
  status = pt_insn_next(decoder.get(), &insn, sizeof(insn));
  // libipt hands out a decoded instruction even where proceeding past it fails (an indirect
  // branch finds no TIP in this trace).
  if (insn.iclass == ptic_error || insn.size == 0) return status < 0 ? status : -pte_internal;
  *out = DecodedInsn{};
  out->size = insn.size;
  out->iclass = insn.iclass;
  const bool branch =
      insn.iclass == ptic_call || insn.iclass == ptic_jump || insn.iclass == ptic_cond_jump;
  if (!branch || status < 0) return 0;  // an indirect call or jump needs a TIP
  // A direct branch (or a conditional one, taken): libipt's next IP is its target, given with
  // the next instruction even where that does not decode (it is outside these bytes).
  pt_insn next{};
  if (DrainEvents(decoder.get(), status) < 0) return -pte_internal;
  (void)pt_insn_next(decoder.get(), &next, sizeof(next));
  if (next.mode == ptem_unknown && mode != ptem_unknown) return -pte_internal;
  out->is_direct = true;
  out->displacement = static_cast<int32_t>(next.ip - (ip + insn.size));
  return 0;
}

int DecodeInsn(const Disassembler& disasm, uint64_t ip, pt_exec_mode mode, const uint8_t* bytes,
               size_t size, DecodedInsn* out) {
  if (size == 0) return -pte_bad_insn;
  ZydisDecodedInstruction z;
  const int length = disasm.Length(mode, bytes, size, &z);
  if (length == 0 || SizedOtherwise(z)) {
    return IptDecodeInsn(ip, mode, bytes, size, out) < 0 ? -pte_bad_insn : 0;
  }
  *out = DecodedInsn{};
  out->size = static_cast<uint8_t>(length);
  Classify(z, out);
  return 0;
}

}  // namespace ptkit::decoder
