// What one single-stepped instruction means for Intel PT: the instruction's class (decoded once
// with Zydis and cached per address by the caller) and the swpt::Events a step from `ip` to
// `next_ip` produces. Pure functions; the ptrace side is in stepper.h.
#ifndef PTKIT_RECORD_EMULATE_STEP_EVENTS_H_
#define PTKIT_RECORD_EMULATE_STEP_EVENTS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "record/swpt/event.h"

namespace ptkit::emulate {

enum class InsnClass : uint8_t {
  kOther,       // no change of flow (next IP = ip + size)
  kCondBranch,  // Jcc, LOOPcc, JrCXZ
  kDirectJump,
  kDirectCall,
  kIndirectJump,
  kIndirectCall,
  kReturn,
  kSyscall,    // SYSCALL, SYSENTER, INT n: the kernel runs, user tracing pauses
  kFarBranch,  // far JMP/CALL/RET, IRET in user mode
};

struct InsnInfo {
  InsnClass cls = InsnClass::kOther;
  uint8_t size = 0;
  bool rep = false;     // REP/REPE/REPNE string instruction: single-steps once per iteration
  uint64_t target = 0;  // branch target of direct branches
  // The mode the instruction was decoded in (the code segment it ran in).
  swpt::ExecMode mode = swpt::ExecMode::k64Bit;
  // kSyscall: the kernel takes the call number from the i386 table (INT n, SYSENTER, and
  // SYSCALL outside 64-bit mode), not the x86-64 one.
  bool ia32_syscall = false;
};

// The execution mode of user code running in code segment `cs` on x86-64 Linux: __USER_CS
// (0x33) is 64-bit, __USER32_CS (0x23) 32-bit compatibility mode. Any other selector (an LDT
// segment set up with modify_ldt, 16-bit code) is kUnimplemented, naming it.
absl::StatusOr<swpt::ExecMode> ExecModeOfCs(uint64_t cs);

// Decodes the instruction at `ip` from `bytes` (up to 15 bytes; fewer at the end of a mapping)
// as code of `mode` (Zydis's long 64-bit or compatibility 32-bit machine mode: in 32-bit code
// 0x40-0x4f are INC/DEC, not REX prefixes). Fails with kInvalidArgument naming the address
// when the bytes are not an instruction.
absl::StatusOr<InsnInfo> DecodeInsn(std::span<const uint8_t> bytes, uint64_t ip,
                                    swpt::ExecMode mode = swpt::ExecMode::k64Bit);

// Appends the events of one completed step: the instruction at `ip` retired and execution
// continued at `next_ip`, in code of `next_mode`. A kSyscall becomes a disable with suppressed
// IP (user-only tracing stops at the kernel entry) and an enable at `next_ip` in `next_mode`
// (return to user: SYSRET, or wherever rt_sigreturn/execve resume). A step that lands
// elsewhere than the instruction allows for (only possible for kOther) is reported as an
// asynchronous exit and re-entry. A far branch into another mode than `info.mode` (a far
// JMP/CALL/RET between 64-bit and compatibility mode) is preceded by a mode change: MODE.Exec
// before its TIP, as the hardware emits it.
void AppendStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip, swpt::ExecMode next_mode,
                      std::vector<swpt::Event>& out);
// The same, execution going on in the instruction's own mode.
inline void AppendStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip,
                             std::vector<swpt::Event>& out) {
  AppendStepEvents(ip, info, next_ip, info.mode, out);
}

// As AppendStepEvents under an address filter (PT's IP filtering): `ip_traced` says whether
// tracing is on for the instruction at `ip`, `next_traced` whether `next_ip` lies in a filter
// region. As on the hardware, the filter is applied where the flow changes: a plain
// instruction keeps the state. Inside -> inside is AppendStepEvents; a branch out is TIP.PGD
// with its target (binding to the branch: a Jcc gets no TNT bit); a syscall whose return lands
// outside keeps its TIP.PGD and loses the TIP.PGE; a branch in is TIP.PGE at `next_ip` (in
// `next_mode`).
void AppendFilteredStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip,
                              swpt::ExecMode next_mode, bool ip_traced, bool next_traced,
                              std::vector<swpt::Event>& out);
inline void AppendFilteredStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip,
                                     bool ip_traced, bool next_traced,
                                     std::vector<swpt::Event>& out) {
  AppendFilteredStepEvents(ip, info, next_ip, info.mode, ip_traced, next_traced, out);
}

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_STEP_EVENTS_H_
