// `ptrecord --control fifo:CTL[,ACK]`: perf record's control channel (tools/perf/util/
// evlist.c, evlist__parse_control / evlist__ctlfd_process), so scripts drive ptrecord as they
// drive perf. Commands are lines written to the CTL FIFO: "enable", "disable", "snapshot",
// "stop" and "ping"; after each one ptrecord writes "ack\n" to the ACK FIFO when there is one.
// The drain loop (drain_loop.h) waits on the CTL FIFO with the perf events and acts on them.
#ifndef PTKIT_RECORD_CONTROL_H_
#define PTKIT_RECORD_CONTROL_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/scoped_fd.h"

namespace ptkit::record {

struct ControlSpec {
  std::string ctl;  // FIFO ptrecord reads commands from
  std::string ack;  // FIFO ptrecord acknowledges on; empty: none
};

// Parses "fifo:CTL[,ACK]". Errors (kInvalidArgument) say the expected form (perf's fd:N form
// is not taken: ptrecord is not started with inherited descriptors).
absl::StatusOr<ControlSpec> ParseControlSpec(std::string_view text);

enum class ControlCommand { kEnable, kDisable, kSnapshot, kStop, kPing };

// "enable" -> kEnable, ...; surrounding white space is ignored. Errors (kInvalidArgument)
// name the line and the known commands.
absl::StatusOr<ControlCommand> ParseControlCommand(std::string_view line);

// The opened FIFOs. Both are opened read-write and non-blocking (as perf opens CTL): opening
// never waits for the other side, a writer that closes CTL does not make it hang up, and an
// ACK nobody reads never blocks the recorder (the ack is dropped).
class ControlChannel {
 public:
  // Errors: kNotFound / the errno of open(2), naming the file; kInvalidArgument when a path is
  // not a FIFO (mkfifo(1) it first).
  static absl::StatusOr<ControlChannel> Open(const ControlSpec& spec);

  // Poll this for POLLIN.
  int fd() const { return ctl_.get(); }
  // Every whole command line available now, in order (a partial line waits for the rest).
  // A line that is no command is returned as its error, in place, so that it is acked and
  // reported without stopping the others.
  std::vector<absl::StatusOr<ControlCommand>> Read();
  // Writes "ack\n" to ACK, if any. Errors: write(2)'s, except a full pipe (EAGAIN: the ack is
  // dropped).
  absl::Status Ack();

 private:
  ControlChannel(ScopedFd ctl, ScopedFd ack) : ctl_(std::move(ctl)), ack_(std::move(ack)) {}
  ScopedFd ctl_;
  ScopedFd ack_;
  std::string pending_;  // bytes of a line not complete yet
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_CONTROL_H_
