// ptrecord's live status line: while recording on a terminal, about once a second one line on
// stderr, rewritten in place ("\r...\033[K"): the time since the start, trace bytes per second,
// bytes stored in the container and the loss so far. Nothing at all when stderr is no
// terminal (scripts and CI logs get only the summary line).
#ifndef PTKIT_RECORD_STATUS_LINE_H_
#define PTKIT_RECORD_STATUS_LINE_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "record/drain.h"

namespace ptkit::record {

// std::chrono::steady_clock in milliseconds: StatusLine's clock.
uint64_t SteadyClockMs();

// Whether ptrecord draws its status line without --quiet: stderr is a terminal and, where it
// runs a `command`, stdout is not one. The command writes to the stdout it inherits, and the
// line rewritten each second overwrote its output there: an interactive program's prompt, the
// first line it printed after (sweep 34a L2). (-p, -t, -a: no command of ptrecord's writes
// there.)
bool StatusLineFits(bool command);

// The trace bytes of `t`: full-trace AUX bytes, snapshot bytes and the samples' AUX bytes.
uint64_t TraceBytes(const StreamStats& t);

// One status line's text (no "\r", no newline): "ptrecord: 12.3 s, 3.4 MB/s of trace, 41.0 MB
// stored, no loss" or "..., loss: 2 truncations, 1 collision, 5 lost records".
std::string FormatStatusLine(uint64_t elapsed_ms, const StreamStats& totals, uint64_t stored_bytes);

class StatusLine {
 public:
  // Draws on `out` when `terminal` (the caller's isatty(fileno(out))); `now_ms` is a monotonic
  // clock in milliseconds, read once here for the start.
  StatusLine(std::FILE* out, bool terminal, std::function<uint64_t()> now_ms,
             uint64_t interval_ms = 1000);
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;
  // Erases a line it drew (Clear()).
  ~StatusLine();

  // Called often (after each drain pass): rewrites the line once `interval_ms` passed since the
  // start or the last line.
  void Update(const StreamStats& totals, uint64_t stored_bytes);
  // Erases the line, if one is shown (before the summary is printed).
  void Clear();
  uint64_t lines() const { return lines_; }  // lines drawn

 private:
  std::FILE* out_;
  bool terminal_;
  std::function<uint64_t()> now_ms_;
  uint64_t interval_ms_;
  uint64_t start_ms_, last_ms_;
  uint64_t lines_ = 0;
  bool shown_ = false;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_STATUS_LINE_H_
