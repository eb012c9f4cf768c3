// Retired control-flow events of one thread: the input of the software Intel PT encoder
// (PtEncoder) and of the BTS writer (BtsWriter).
//
// An event describes one instruction that changed the flow (or a change of the tracing state)
// together with where execution continues, so every consumer knows the next IP without decoding
// code itself.
#ifndef PTKIT_RECORD_SWPT_EVENT_H_
#define PTKIT_RECORD_SWPT_EVENT_H_

#include <cstdint>

namespace ptkit::swpt {

// The execution mode of the code segment (CS.L / CS.D), as MODE.Exec reports it.
enum class ExecMode : uint8_t { k16Bit, k32Bit, k64Bit };

enum class EventKind : uint8_t {
  kCondBranch,    // Jcc/LOOP/JrCXZ at `ip` (`size` bytes); `taken`; `target` = next IP.
  kDirectJump,    // Near direct JMP at `ip` to `target`. No PT packet.
  kDirectCall,    // Near direct CALL at `ip` (`size` bytes) to `target`. No PT packet.
  kIndirectJump,  // Near indirect JMP at `ip` to `target`.
  kIndirectCall,  // Near indirect CALL at `ip` (`size` bytes) to `target`.
  kReturn,        // Near RET at `ip` to `target`.
  kFarBranch,     // Synchronous far transfer (SYSCALL/SYSRET/far JMP/CALL/RET/IRET) at `ip` to
                  // `target`, tracing stays on. Precede with kModeChange when CS.L/CS.D change.
  kInterrupt,     // Asynchronous transfer (interrupt, exception, signal): `ip` is the address of
                  // the first instruction not retired, `target` the handler; tracing stays on.
  kEnable,        // Tracing starts at `target` in `mode` (filter region entered, return to user).
  kDisable,       // The branch at `ip` leaves the traced context for `target`; with
                  // `suppress_ip` the target is not reported (CPL change, e.g. SYSCALL with
                  // user-only tracing). The branch itself must not be reported separately.
                  // `size`: not 0 for a near CALL (of `size` bytes) that pushes an entry on
                  // the RET-compression stack (a CALL out of the filter regions).
  kAsyncDisable,  // Tracing stops asynchronously before the instruction at `ip` (interrupt into
                  // an untraced context, trace stop).
  kModeChange,    // CS.L/CS.D become `mode`; must be followed by kFarBranch, kInterrupt or kEnable.
  kTick,          // `target` core cycles elapsed (TSC advances by the same amount).
  kTime,          // The TSC reads `target` now (not less than before): a TSC packet (TSCEn),
                  // after the pending TNT bits; the timing counters advance to it. Before the
                  // first other event it only sets the time of the opening PSB+.
  kOverflow,      // Internal buffer overflow (test injection); execution resumes at `ip`.
};

struct Event {
  EventKind kind = EventKind::kCondBranch;
  bool taken = false;                // kCondBranch only.
  bool suppress_ip = false;          // kDisable only.
  ExecMode mode = ExecMode::k64Bit;  // kEnable, kModeChange.
  // Instruction length for kCondBranch and calls (next IP = ip + size); for kDisable, see there.
  uint8_t size = 0;
  uint64_t ip = 0;
  uint64_t target = 0;

  static Event Cond(uint64_t ip, uint8_t size, bool taken, uint64_t branch_target) {
    return {EventKind::kCondBranch,           taken, false, ExecMode::k64Bit, size, ip,
            taken ? branch_target : ip + size};
  }
  static Event Simple(EventKind kind, uint64_t ip, uint64_t target, uint8_t size = 0) {
    return {kind, false, false, ExecMode::k64Bit, size, ip, target};
  }
  static Event Enable(uint64_t target, ExecMode mode = ExecMode::k64Bit) {
    return {EventKind::kEnable, false, false, mode, 0, 0, target};
  }
  static Event Disable(uint64_t ip, uint64_t target, bool suppress_ip, uint8_t call_size = 0) {
    return {EventKind::kDisable, false, suppress_ip, ExecMode::k64Bit, call_size, ip, target};
  }
  // The TIP.PGD of `branch` (a near branch at which tracing stops: it leaves the filter
  // regions): its target reported, a CALL's entry still pushed (kDisable).
  static Event DisableAt(const Event& branch) {
    return Disable(branch.ip, branch.target, /*suppress_ip=*/false,
                   branch.PushesReturn() ? branch.size : 0);
  }
  static Event AsyncDisable(uint64_t ip) { return Simple(EventKind::kAsyncDisable, ip, 0); }
  static Event ModeChange(ExecMode mode) {
    return {EventKind::kModeChange, false, false, mode, 0, 0, 0};
  }
  static Event Tick(uint64_t cycles) { return Simple(EventKind::kTick, 0, cycles); }
  static Event Time(uint64_t tsc) { return Simple(EventKind::kTime, 0, tsc); }
  static Event Overflow(uint64_t resume_ip) { return Simple(EventKind::kOverflow, resume_ip, 0); }

  // Whether the branch pushes its next IP on the RET-compression stack: a near CALL, but a
  // direct CALL to the next instruction (PIC's way to read its IP; the SDM leaves it out).
  bool PushesReturn() const {
    return (kind == EventKind::kDirectCall && target != ip + size) ||
           kind == EventKind::kIndirectCall;
  }
};

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_EVENT_H_
