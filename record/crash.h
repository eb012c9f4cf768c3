// `ptrecord --snapshot-on-crash`: a snapshot when the workload dies of a signal, taken while
// its threads still exist (before the signal is delivered), labelled with the signal, the
// thread that got it and where it was.
#ifndef PTKIT_RECORD_CRASH_H_
#define PTKIT_RECORD_CRASH_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ptkit::record {

// Whether `sig`'s default action ends the process (Term or Core in signal(7)): every signal
// but SIGCHLD, SIGCONT, SIGURG, SIGWINCH (ignored) and SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU
// (stop).
bool KillsByDefault(int sig);

// The signal mask `key` ("SigIgn:", "SigCgt:", ...) of a /proc/PID/status text, bit N-1 for
// signal N. Errors: kNotFound without that line, kInvalidArgument when its value is no hex.
absl::StatusOr<uint64_t> ParseStatusSignalMask(std::string_view status, std::string_view key);

// Whether process `pid` ignores `sig` (SigIgn in /proc/PID/status); false when unknown.
bool SignalIgnored(uint32_t pid, int sig);

// What --snapshot-on-crash stores (the "crash" member of the end metadata, ptkit-format(5)).
struct CrashInfo {
  uint32_t pid = 0, tid = 0;  // tid: the thread's stream id
  int signal = 0;
  uint64_t ip = 0;  // the instruction it stopped at
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_CRASH_H_
