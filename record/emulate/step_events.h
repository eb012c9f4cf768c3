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
};

// Decodes the 64-bit instruction at `ip` from `bytes` (up to 15 bytes; fewer at the end of a
// mapping). Fails with kInvalidArgument naming the address when the bytes are not an
// instruction.
absl::StatusOr<InsnInfo> DecodeInsn(std::span<const uint8_t> bytes, uint64_t ip);

// Appends the events of one completed step: the instruction at `ip` retired and execution
// continued at `next_ip`. A kSyscall becomes a disable with suppressed IP (user-only tracing
// stops at the kernel entry) and an enable at `next_ip` (return to user: SYSRET, or wherever
// rt_sigreturn/execve resume). A step that lands elsewhere than the instruction allows for
// (only possible for kOther) is reported as an asynchronous exit and re-entry.
void AppendStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip,
                      std::vector<swpt::Event>& out);

// As AppendStepEvents under an address filter (PT's IP filtering): `ip_traced` says whether
// tracing is on for the instruction at `ip`, `next_traced` whether `next_ip` lies in a filter
// region. As on the hardware, the filter is applied where the flow changes: a plain
// instruction keeps the state. Inside -> inside is AppendStepEvents; a branch out is TIP.PGD
// with its target (binding to the branch: a Jcc gets no TNT bit); a syscall whose return lands
// outside keeps its TIP.PGD and loses the TIP.PGE; a branch in is TIP.PGE at `next_ip`.
void AppendFilteredStepEvents(uint64_t ip, const InsnInfo& info, uint64_t next_ip, bool ip_traced,
                              bool next_traced, std::vector<swpt::Event>& out);

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_STEP_EVENTS_H_
