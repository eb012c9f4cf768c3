// The recorder's event loop: ppoll() on every source's wakeup fd with the watched signals
// blocked everywhere except inside ppoll() (so a signal can neither be lost between a check
// and the wait nor interrupt a copy), draining after each wakeup.
//
// SIGINT / SIGTERM stop the loop; SIGCHLD asks `child_exited` whether the workload is gone
// (then stop); SIGUSR2 takes one snapshot of every source in snapshot mode. A signal that
// arrives during a snapshot stays pending and is seen at the next ppoll(): it is not lost.
#ifndef PTKIT_RECORD_DRAIN_LOOP_H_
#define PTKIT_RECORD_DRAIN_LOOP_H_

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "record/control.h"
#include "record/drain.h"
#include "record/trace_source.h"

namespace ptkit::record {

// SIGUSR2 counted (as SignalWatcher counts it) from the start of main, where its disposition
// is the default: before the recorder watched it, a snapshot asked for early (a script's
// `ptrecord --snapshot ... & kill -USR2 $!`) ended ptrecord with no file and the command never
// ran (sweep 35b L2; the qemu backend watches it only after finding qemu, 30-50 ms). Such a
// request comes before anything is traced: the loops count the ones after they start. Like a
// handler, unlike SIG_IGN, it is the default again in the command after exec.
void CountSnapshotRequestsFromNow();

// Counts SIGINT/SIGTERM/SIGHUP, SIGCHLD and SIGUSR2 with async-signal-safe handlers (they only
// bump a counter); SIGINT, SIGTERM or SIGHUP ignored on entry (nohup, a shell's background
// job) stay ignored, and so inherited by a command started meanwhile. One instance at a time
// per process; restores the previous handlers and mask on destruction.
class SignalWatcher {
 public:
  enum class Delivery {
    // The drain loop: the signals are blocked in the calling thread (construct it before
    // starting other threads: they inherit the mask) and open only inside
    // ppoll(wait_mask()).
    kInPpoll,
    // The emulation's stepping loop: nothing is blocked and SIGCHLD is not watched (a ptrace
    // stop per instruction would each run a handler); the handlers interrupt a blocking call
    // (waitpid fails with EINTR, no SA_RESTART) in the thread that takes the signal.
    kInterrupting,
  };
  explicit SignalWatcher(Delivery delivery = Delivery::kInPpoll);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // The mask to pass to ppoll(): the caller's mask before construction, watched signals open.
  const sigset_t* wait_mask() const { return &wait_mask_; }
  uint64_t stop_count() const;
  uint64_t child_count() const;
  uint64_t snapshot_count() const;
  // The most recent SIGINT, SIGTERM or SIGHUP (0 before the first).
  int last_stop_signal() const;

 private:
  Delivery delivery_;
  sigset_t old_mask_;
  sigset_t wait_mask_;
  struct sigaction old_actions_[5];
  bool ignored_[5] = {};  // ignored on entry: left so (SIGINT, SIGTERM, SIGHUP)
};

struct LoopOptions {
  int poll_timeout_ms = 100;   // drain at least this often even without wakeups
  bool snapshot_mode = false;  // SIGUSR2 and the end of the run take snapshots
  uint64_t snapshot_size = 0;  // bytes per snapshot per source (0 = the whole AUX ring)
  // Called after every pass (SIGCHLD wakes the loop); true when the workload has exited
  // (reap it here with waitpid(WNOHANG)). May be empty (then only signals stop the loop).
  std::function<bool()> child_exited;
  // Called after every pass; true to stop (tests, --duration).
  std::function<bool()> should_stop;
  // Called after every pass (so at least every poll_timeout_ms): ptrecord's status line
  // (record/status_line.h). May be empty.
  std::function<void()> after_pass;
  // --control: commands read after every pass (the loop also wakes when one arrives), each
  // acknowledged: enable / disable start and stop every source's AUX event, snapshot takes
  // one round in snapshot mode, stop ends the loop, ping only acks. May be null.
  ControlChannel* control = nullptr;
  // Snapshot triggers (--trigger, record/trigger.h), in snapshot mode: the loop also waits on
  // `trigger_fds`, and after every pass asks `triggered` how many times the trigger fired since
  // it last asked; when it did, one snapshot round (hits between two passes share it). May be
  // empty.
  std::vector<int> trigger_fds;
  std::function<absl::StatusOr<uint64_t>()> triggered;
  // Told what the user should know about a command (unknown, or snapshot outside snapshot
  // mode). May be empty.
  std::function<void(const std::string&)> notice;
};

struct LoopResult {
  uint64_t passes = 0;
  uint64_t snapshots = 0;  // snapshot rounds (each covers every source)
  bool stopped_by_signal = false;
  bool stopped_by_control = false;  // a "stop" command
  bool workload_exited = false;
  uint64_t control_commands = 0;   // commands read (acknowledged)
  uint64_t trigger_fires = 0;      // what `triggered` counted
  uint64_t trigger_snapshots = 0;  // snapshot rounds they took (also counted in `snapshots`)
};

// Runs until a stop condition, then disables every source's AUX event, drains everything
// that is left and (snapshot mode) takes the final snapshot. Errors: the first drain or
// snapshot error (the loop stops there), ppoll failures other than EINTR.
absl::StatusOr<LoopResult> RunDrainLoop(std::span<TraceSource* const> sources, Drainer& drainer,
                                        const SignalWatcher& signals, const LoopOptions& options);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_DRAIN_LOOP_H_
