#include "record/drain_loop.h"

#include <poll.h>
#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ptkit/status.h"

namespace ptkit::record {
namespace {

// Handlers may only touch lock-free atomics (async-signal-safe).
std::atomic<uint64_t> g_stop{0};
std::atomic<uint64_t> g_child{0};
std::atomic<uint64_t> g_snapshot{0};
std::atomic<int> g_last_stop{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int>::is_always_lock_free);

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGUSR2, SIGHUP};

void OnSignal(int sig) {
  switch (sig) {
    case SIGCHLD:
      g_child.fetch_add(1, std::memory_order_relaxed);
      break;
    case SIGUSR2:
      g_snapshot.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      g_last_stop.store(sig, std::memory_order_relaxed);
      g_stop.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

// Whether `delivery` watches signal `sig`.
bool Watched(SignalWatcher::Delivery delivery, int sig) {
  return sig != SIGCHLD || delivery == SignalWatcher::Delivery::kInPpoll;
}

}  // namespace

void CountSnapshotRequestsFromNow() {
  struct sigaction old {};
  if (sigaction(SIGUSR2, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  // (Not interrupting the set-up's reads: an EINTR in reading `qemu-x86_64 --version` lost the
  // version and its signal numbering; a review.)
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

SignalWatcher::SignalWatcher(Delivery delivery) : delivery_(delivery) {
  sigset_t block;
  sigemptyset(&block);
  if (delivery == Delivery::kInPpoll) {
    for (int s : kSignals) sigaddset(&block, s);
  }
  // Block first, then install: no signal can run a handler outside ppoll().
  pthread_sigmask(SIG_BLOCK, &block, &old_mask_);
  wait_mask_ = old_mask_;
  for (int s : kSignals) sigdelset(&wait_mask_, s);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (!Watched(delivery, kSignals[i])) continue;
    // A stop signal ignored on entry stays ignored, by ptrecord and by the command it starts
    // (which inherits SIG_IGN through exec, not a handler), as shells do: `nohup ptrecord --
    // cmd` outlives a hangup, a background job ignores SIGINT (sweep 29c F2).
    if (kSignals[i] == SIGINT || kSignals[i] == SIGTERM || kSignals[i] == SIGHUP) {
      struct sigaction now;
      if (sigaction(kSignals[i], nullptr, &now) == 0 && now.sa_handler == SIG_IGN) {
        ignored_[i] = true;
        continue;
      }
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0;
    sigaction(kSignals[i], &sa, &old_actions_[i]);
  }
}

SignalWatcher::~SignalWatcher() {
  // Unblock while OnSignal is still installed: a signal that came after the last ppoll()
  // (e.g. SIGUSR2 during the final snapshot) is counted, not delivered with the default
  // action (which ends the process) once the old handlers are back.
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (Watched(delivery_, kSignals[i]) && !ignored_[i]) {
      sigaction(kSignals[i], &old_actions_[i], nullptr);
    }
  }
}

uint64_t SignalWatcher::stop_count() const { return g_stop.load(std::memory_order_relaxed); }
uint64_t SignalWatcher::child_count() const { return g_child.load(std::memory_order_relaxed); }
uint64_t SignalWatcher::snapshot_count() const {
  return g_snapshot.load(std::memory_order_relaxed);
}
int SignalWatcher::last_stop_signal() const { return g_last_stop.load(std::memory_order_relaxed); }

absl::StatusOr<LoopResult> RunDrainLoop(std::span<TraceSource* const> sources, Drainer& drainer,
                                        const SignalWatcher& signals, const LoopOptions& options) {
  LoopResult result;
  std::vector<pollfd> fds;
  // Only the sources that have a descriptor: poll counts every entry against the open-file limit
  // (sweep 31c F8: the qemu backend's 64 rings, polled by the timeout, made ppoll fail with EINVAL
  // under ulimit -n 48).
  std::vector<TraceSource*> polled;  // fds[i]'s source, for i < polled.size()
  for (TraceSource* s : sources) {
    if (s->poll_fd() < 0) continue;
    fds.push_back(pollfd{s->poll_fd(), POLLIN, 0});
    polled.push_back(s);
  }
  if (options.control != nullptr) fds.push_back(pollfd{options.control->fd(), POLLIN, 0});
  for (int fd : options.trigger_fds) fds.push_back(pollfd{fd, POLLIN, 0});
  const uint64_t stop0 = signals.stop_count();
  uint64_t snapshot_seen = signals.snapshot_count();
  const timespec timeout{options.poll_timeout_ms / 1000,
                         (options.poll_timeout_ms % 1000) * 1000000L};
  auto snapshot_all = [&]() -> absl::Status {
    for (TraceSource* s : sources) {
      if (s->ring().aux.empty()) continue;
      PTKIT_ASSIGN_OR_RETURN(
          uint64_t n, drainer.Snapshot(*s, options.snapshot_size == 0 ? s->ring().aux.size()
                                                                      : options.snapshot_size));
      (void)n;
    }
    ++result.snapshots;
    return absl::OkStatus();
  };

  while (true) {
    // The only place the watched signals are deliverable.
    const int rc = ppoll(fds.data(), fds.size(), &timeout, signals.wait_mask());
    if (rc < 0 && errno != EINTR) return ErrnoStatus(errno, "ppoll on perf event fds");
    ++result.passes;
    // SIGCHLD only hints; a non-blocking reap every pass also catches a workload that
    // exited between the fork and the first ppoll(). Asked before the rings and the triggers
    // are read: once the workload is gone, every hit of it is in the triggers' rings, and this
    // pass's read counts it (asked after, a hit between the read and the exit was lost).
    const bool exited = options.child_exited && options.child_exited();
    for (size_t i = 0; i < fds.size(); ++i) {
      if (i >= polled.size()) {  // the control FIFO and the triggers: read below
        fds[i].revents = 0;
        continue;
      }
      if (fds[i].revents & POLLIN) polled[i]->ClearWakeup();
      if (fds[i].revents & POLLHUP) fds[i].fd = -1;  // the event's task is gone
      fds[i].revents = 0;
    }
    for (TraceSource* s : sources) {
      PTKIT_ASSIGN_OR_RETURN(uint64_t n, drainer.DrainOnce(*s));
      (void)n;
    }
    const uint64_t snaps = signals.snapshot_count();
    if (snaps != snapshot_seen) {
      snapshot_seen = snaps;
      if (options.snapshot_mode) PTKIT_RETURN_IF_ERROR(snapshot_all());
    }
    if (options.triggered) {
      PTKIT_ASSIGN_OR_RETURN(uint64_t fired, options.triggered());
      result.trigger_fires += fired;
      if (fired != 0 && options.snapshot_mode) {
        PTKIT_RETURN_IF_ERROR(snapshot_all());
        ++result.trigger_snapshots;
      }
    }
    bool stop = false;
    if (options.control != nullptr) {
      for (absl::StatusOr<ControlCommand>& cmd : options.control->Read()) {
        ++result.control_commands;
        if (!cmd.ok()) {
          if (options.notice) options.notice(std::string(cmd.status().message()));
        } else if (*cmd == ControlCommand::kEnable || *cmd == ControlCommand::kDisable) {
          for (TraceSource* s : sources) {
            PTKIT_RETURN_IF_ERROR(*cmd == ControlCommand::kEnable ? s->Enable() : s->Disable());
          }
        } else if (*cmd == ControlCommand::kSnapshot) {
          if (options.snapshot_mode) {
            PTKIT_RETURN_IF_ERROR(snapshot_all());
          } else if (options.notice) {
            options.notice("control command 'snapshot' ignored: not recording with --snapshot");
          }
        } else if (*cmd == ControlCommand::kStop) {
          stop = true;
        }
        PTKIT_RETURN_IF_ERROR(options.control->Ack());
      }
    }
    if (stop) {
      result.stopped_by_control = true;
      break;
    }
    if (options.after_pass) options.after_pass();
    if (exited) {
      result.workload_exited = true;
      break;
    }
    if (signals.stop_count() != stop0) {
      result.stopped_by_signal = true;
      break;
    }
    if (options.should_stop && options.should_stop()) break;
  }

  // The end: stop the hardware (ends the AUX transaction), then take everything left.
  drainer.Finish();
  for (TraceSource* s : sources) {
    if (options.snapshot_mode) continue;  // Snapshot() disables and drains itself
    PTKIT_RETURN_IF_ERROR(s->Disable());
    PTKIT_ASSIGN_OR_RETURN(uint64_t n, drainer.DrainOnce(*s));
    (void)n;
  }
  if (options.snapshot_mode) {
    PTKIT_RETURN_IF_ERROR(snapshot_all());
    for (TraceSource* s : sources) {
      PTKIT_RETURN_IF_ERROR(s->Disable());
      PTKIT_ASSIGN_OR_RETURN(uint64_t n, drainer.DrainOnce(*s));
      (void)n;
    }
  }
  return result;
}

}  // namespace ptkit::record
