#include "record/control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {

absl::StatusOr<ControlSpec> ParseControlSpec(std::string_view text) {
  constexpr std::string_view kPrefix = "fifo:";
  if (!text.starts_with(kPrefix) || text.size() == kPrefix.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control ", std::string(text),
                     ": expected fifo:CTL[,ACK] (named pipes made with "
                     "mkfifo; perf's fd:N form is not supported)"));
  }
  std::string_view rest = text.substr(kPrefix.size());
  ControlSpec spec;
  const size_t comma = rest.find(',');
  spec.ctl = std::string(rest.substr(0, comma));
  if (comma != std::string_view::npos) spec.ack = std::string(rest.substr(comma + 1));
  if (spec.ctl.empty() || (comma != std::string_view::npos && spec.ack.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control ", std::string(text), ": expected fifo:CTL[,ACK]"));
  }
  return spec;
}

absl::StatusOr<ControlCommand> ParseControlCommand(std::string_view line) {
  const std::string_view cmd = Strip(line);
  if (cmd == "enable") return ControlCommand::kEnable;
  if (cmd == "disable") return ControlCommand::kDisable;
  if (cmd == "snapshot") return ControlCommand::kSnapshot;
  if (cmd == "stop") return ControlCommand::kStop;
  if (cmd == "ping") return ControlCommand::kPing;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown control command '", std::string(cmd),
                   "' (known: enable, disable, snapshot, stop, ping)"));
}

namespace {

absl::StatusOr<ScopedFd> OpenFifo(const std::string& path, const char* what) {
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "--control: open ", what, " FIFO ", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "--control: stat ", path);
  if (!S_ISFIFO(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control: ", path, " is not a FIFO (make it with mkfifo ", path, ")"));
  }
  return fd;
}

}  // namespace

absl::StatusOr<ControlChannel> ControlChannel::Open(const ControlSpec& spec) {
  PTKIT_ASSIGN_OR_RETURN(ScopedFd ctl, OpenFifo(spec.ctl, "control"));
  ScopedFd ack;
  if (!spec.ack.empty()) {
    PTKIT_ASSIGN_OR_RETURN(ack, OpenFifo(spec.ack, "ack"));
  }
  return ControlChannel(std::move(ctl), std::move(ack));
}

std::vector<absl::StatusOr<ControlCommand>> ControlChannel::Read() {
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(ctl_.get(), buf, sizeof(buf));
    if (n <= 0) break;  // EAGAIN: nothing more now
    pending_.append(buf, static_cast<size_t>(n));
  }
  std::vector<absl::StatusOr<ControlCommand>> out;
  size_t at = 0;
  for (size_t nl; (nl = pending_.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string_view line(pending_.data() + at, nl - at);
    if (Strip(line).empty()) continue;
    out.push_back(ParseControlCommand(line));
  }
  pending_.erase(0, at);
  return out;
}

absl::Status ControlChannel::Ack() {
  if (!ack_.valid()) return absl::OkStatus();
  static constexpr char kAck[] = "ack\n";
  if (::write(ack_.get(), kAck, sizeof(kAck) - 1) < 0 && errno != EAGAIN) {
    return ErrnoStatus(errno, "--control: write ack");
  }
  return absl::OkStatus();
}

}  // namespace ptkit::record
