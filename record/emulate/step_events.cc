#include "record/emulate/step_events.h"

#include <Zydis/Zydis.h>

#include "absl/strings/str_format.h"

namespace ptkit::emulate {

absl::StatusOr<swpt::ExecMode> ExecModeOfCs(uint64_t cs) {
  // arch/x86/include/asm/segment.h: GDT_ENTRY_DEFAULT_USER_CS (6) and
  // GDT_ENTRY_DEFAULT_USER32_CS (4), RPL 3.
  if (cs == 0x33) return swpt::ExecMode::k64Bit;
  if (cs == 0x23) return swpt::ExecMode::k32Bit;
  return absl::UnimplementedError(absl::StrFormat(
      "code segment 0x%x is neither the 64-bit (0x33) nor the 32-bit (0x23) user segment of "
      "Linux; --emulate=step cannot tell its mode",
      cs));
}

absl::StatusOr<InsnInfo> DecodeInsn(std::span<const uint8_t> bytes, uint64_t ip,
                                    swpt::ExecMode mode) {
  const bool long64 = mode == swpt::ExecMode::k64Bit;
  ZydisDecoder decoder;
  if (long64) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  } else if (mode == swpt::ExecMode::k32Bit) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_COMPAT_32, ZYDIS_STACK_WIDTH_32);
  } else {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_COMPAT_16, ZYDIS_STACK_WIDTH_16);
  }
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, bytes.data(), bytes.size(), &insn, ops))) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot decode the instruction at 0x%x", ip));
  }
  InsnInfo info;
  info.mode = mode;
  info.size = insn.length;
  info.rep = (insn.attributes &
              (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) != 0;
  const bool iret = insn.mnemonic == ZYDIS_MNEMONIC_IRET || insn.mnemonic == ZYDIS_MNEMONIC_IRETD ||
                    insn.mnemonic == ZYDIS_MNEMONIC_IRETQ;
  const bool far = insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR || iret;
  const bool relative = insn.operand_count_visible > 0 &&
                        ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[0].imm.is_relative;
  auto direct_target = [&]() {
    ZyanU64 target = 0;
    ZydisCalcAbsoluteAddress(&insn, &ops[0], ip, &target);
    return static_cast<uint64_t>(target);
  };
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
      info.cls = InsnClass::kCondBranch;
      info.target = direct_target();
      break;
    case ZYDIS_CATEGORY_UNCOND_BR:
      if (far) {
        info.cls = InsnClass::kFarBranch;
      } else if (relative) {
        info.cls = InsnClass::kDirectJump;
        info.target = direct_target();
      } else {
        info.cls = InsnClass::kIndirectJump;
      }
      break;
    case ZYDIS_CATEGORY_CALL:
      if (far) {
        info.cls = InsnClass::kFarBranch;
      } else if (relative) {
        info.cls = InsnClass::kDirectCall;
        info.target = direct_target();
      } else {
        info.cls = InsnClass::kIndirectCall;
      }
      break;
    case ZYDIS_CATEGORY_RET:
      info.cls = far ? InsnClass::kFarBranch : InsnClass::kReturn;
      break;
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_INTERRUPT:
      info.cls = InsnClass::kSyscall;
      // arch/x86/entry: SYSCALL from 64-bit code is entry_SYSCALL_64; INT 0x80 (from any
      // mode), SYSENTER and a compat-mode SYSCALL enter the ia32 entry points.
      info.ia32_syscall = !(long64 && insn.mnemonic == ZYDIS_MNEMONIC_SYSCALL);
      break;
    default:
      if (iret) info.cls = InsnClass::kFarBranch;
      break;
  }
  return info;
}

void AppendStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip, swpt::ExecMode next_mode,
                      std::vector<swpt::Event>& out) {
  using swpt::Event;
  using swpt::EventKind;
  const uint64_t fall_through = ip + info.size;
  switch (info.cls) {
    case InsnClass::kCondBranch:
      out.push_back(Event::Cond(ip, info.size, next_ip != fall_through, info.target));
      return;
    case InsnClass::kDirectJump:
      out.push_back(Event::Simple(EventKind::kDirectJump, ip, next_ip));
      return;
    case InsnClass::kDirectCall:
      out.push_back(Event::Simple(EventKind::kDirectCall, ip, next_ip, info.size));
      return;
    case InsnClass::kIndirectJump:
      out.push_back(Event::Simple(EventKind::kIndirectJump, ip, next_ip));
      return;
    case InsnClass::kIndirectCall:
      out.push_back(Event::Simple(EventKind::kIndirectCall, ip, next_ip, info.size));
      return;
    case InsnClass::kReturn:
      out.push_back(Event::Simple(EventKind::kReturn, ip, next_ip));
      return;
    case InsnClass::kFarBranch:
      // SDM, packet generation: MODE.Exec precedes the far transfer's TIP when CS.L/CS.D
      // change.
      if (next_mode != info.mode) out.push_back(Event::ModeChange(next_mode));
      out.push_back(Event::Simple(EventKind::kFarBranch, ip, next_ip));
      return;
    case InsnClass::kSyscall:
      // intel_pt//u: the kernel entry is a CPL change out of the traced context (TIP.PGD with
      // suppressed IP); the return to user is TIP.PGE at the resume address.
      out.push_back(Event::Disable(ip, 0, /*suppress_ip=*/true));
      out.push_back(Event::Enable(next_ip, next_mode));
      return;
    case InsnClass::kOther:
      if (next_ip != fall_through) {
        // Only the kernel moves a thread elsewhere after a plain instruction.
        out.push_back(Event::AsyncDisable(fall_through));
        out.push_back(Event::Enable(next_ip, next_mode));
      }
      return;
  }
}

void AppendFilteredStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip,
                              swpt::ExecMode next_mode, bool ip_traced, bool next_traced,
                              std::vector<swpt::Event>& out) {
  using swpt::Event;
  using swpt::EventKind;
  // The filter is applied where the flow changes: code that runs linearly across a region's
  // edge keeps the state it had until the next branch.
  if (info.cls == InsnClass::kOther && next_ip == ip + info.size) next_traced = ip_traced;
  if (!ip_traced) {
    if (next_traced) out.push_back(Event::Enable(next_ip, next_mode));  // TIP.PGE at the target
    return;
  }
  const size_t first = out.size();
  AppendStepEvents(ip, info, next_ip, next_mode, out);
  if (next_traced) return;
  if (out.size() > first && out.back().kind == EventKind::kEnable) {
    // A syscall (its TIP.PGD stays) or an asynchronous exit (FUP + TIP.PGD) that resumes
    // outside the regions: tracing stays off.
    out.pop_back();
    return;
  }
  // A branch out of the regions (the one event left) is itself the TIP.PGD, with its target (a
  // Jcc has no TNT bit; a CALL still pushes: swpt::Event::DisableAt).
  const Event branch = out.back();
  out.resize(first);
  out.push_back(Event::DisableAt(branch));
}

}  // namespace ptkit::emulate
