// Stepper: runs a program under ptrace and single-steps every user-mode instruction of every
// thread and child process, reporting what Intel PT with `intel_pt//u` would see: the retired
// control flow of each thread as swpt::Events, plus the ground truth (every instruction
// address, `rep` string instructions once).
//
// The workload is ptrace-seized: a stopping signal it does not catch (SIGSTOP, SIGTSTP, ...;
// raise, kill -STOP, job control) stops it as it would stop untraced, every thread in its
// group-stop (PTRACE_LISTEN), until SIGCONT; meanwhile the stepper waits (blocked in waitpid).
//
// Single-stepping costs a ptrace round trip per instruction (about 15,000 steps/s in the VMs
// this was written on): keep workloads small. Decoded instructions are cached per address and
// code bytes are read with process_vm_readv.
#ifndef PTKIT_RECORD_EMULATE_STEPPER_H_
#define PTKIT_RECORD_EMULATE_STEPPER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "record/address_filter.h"
#include "record/swpt/event.h"

namespace ptkit::emulate {

// Receives the stepped execution, thread by thread, in the order it happened.
class StepSink {
 public:
  virtual ~StepSink() = default;
  // A thread starts being traced (the first event of its stream is an enable).
  virtual void OnThreadStart(uint32_t pid, uint32_t tid) = 0;
  // One control-flow event of thread `tid`.
  virtual void OnEvent(uint32_t tid, const swpt::Event& event) = 0;
  // The instruction at `ip` retired in thread `tid` (ground truth).
  virtual void OnInstruction(uint32_t tid, uint64_t ip) = 0;
  // The thread is gone; its stream is complete.
  virtual void OnThreadEnd(uint32_t tid) = 0;
  // The bytes of the instruction at `ip` that thread `tid` (its stream) of process `pid` is
  // about to run, once each time the stepper decodes it afresh (after an exec, and after each
  // system call that maps, unmaps or protects memory). `no_file`: from memory no program file
  // backs, which a decoder cannot read from a file (anonymous memory, a memfd, a deleted file,
  // shared memory or a device: JIT code).
  virtual void OnCode(uint32_t pid, uint32_t tid, uint64_t ip, std::span<const uint8_t> bytes,
                      bool no_file) {}
  // Process `pid` runs a new program (the command's, or an execve's): it is stopped before
  // its first instruction, its new mappings are in the kernel's sideband.
  virtual void OnExec(uint32_t pid) {}
};

struct StepperResult {
  int exit_status = 0;         // the workload's exit code, or 128 + signal
  uint64_t steps = 0;          // single-steps taken
  uint64_t fast_forwards = 0;  // --filter: times a thread left the regions to run at full speed
  uint64_t instructions = 0;   // instructions retired (rep iterations counted once)
  uint64_t threads = 0;
  bool step_limit_hit = false;
  bool stop_requested = false;  // StepperOptions::stop_requested ended the run
  int exit_signal = 0;          // the signal that killed the workload, 0 if it exited
  double seconds = 0;
};

struct StepperOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // Called with the workload's pid while it waits to call execve (already ptrace-seized):
  // open perf events on it here (enable_on_exec). An error aborts the run (the workload is killed).
  std::function<absl::Status(pid_t)> before_exec;
  // Called once the workload's execve succeeded, before its first instruction; an error stops
  // the run (the workload is killed).
  std::function<absl::Status()> after_exec;
  // Stop (kill every process of the workload) once this many instructions have retired over
  // all its threads and processes (a rep string instruction once; with filters, the stepped
  // ones outside the regions too); 0 = no limit. With several threads, each step under way
  // when the count is reached finishes (at most one more instruction per other thread).
  uint64_t max_steps = 0;
  // Asked every 1024 steps and whenever a wait is interrupted by a signal (EINTR): true ends
  // the run as max_steps does (the workload is killed, every stream is ended). May be empty.
  std::function<bool()> stop_requested;
  // IP filtering ('filter' regions only): only instructions inside the regions are traced and
  // reported, with TIP.PGD / TIP.PGE where execution leaves and enters them. A process with
  // one thread runs at full speed while it is outside the regions' bytes: off the regions'
  // pages, those pages lose PROT_EXEC (mprotect injected into the workload), so entering one
  // faults; on a region page outside the regions, every byte of the regions is INT3 (written
  // through /proc/TID/mem, the program's bytes are put back before it steps there), so
  // entering one traps. The fault or trap is the return to single-stepping. Processes with
  // several threads are single-stepped throughout.
  std::vector<record::AddressFilter> filters;
  // When set, the stepper stamps the streams with this clock (nanoseconds; give the sideband
  // the same clock): each control-flow event is preceded by a swpt::Event::Time whenever the
  // clock moved since the thread's last one. An event of a step carries the time the step was
  // resumed, an enable the time of the stop that reports it, so a stream's times bracket what
  // the kernel did meanwhile: the instructions before an execve are older than the exec's
  // sideband, the new program's first one younger.
  std::function<uint64_t()> clock;
  // When set, called about once a second while the workload runs, with the counts so far
  // (`seconds` is the time since the start).
  std::function<void(const StepperResult&)> progress;
  // When set, called when a thread is about to get a signal that kills its process (not
  // caught, not ignored, fatal by default: record/crash.h), before it is delivered, with the
  // process, the thread's stream, the signal and the instruction it stopped at.
  std::function<void(uint32_t pid, uint32_t tid, int sig, uint64_t ip)> on_fatal_signal;
  // When set, called once when the command's process exits while processes it started still
  // run (a daemon's), with their pids: they are stepped to their end.
  std::function<void(const std::vector<uint32_t>& pids)> command_exited;
};

// Runs the workload to its end. Errors: kNotFound (exit code 127 semantics) when argv[0]
// cannot be executed, kPermissionDenied / kInternal from ptrace, kInvalidArgument when code at
// an executed address cannot be read or decoded.
absl::StatusOr<StepperResult> RunStepped(const StepperOptions& options, StepSink& sink);

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_STEPPER_H_
