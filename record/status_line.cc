#include "record/status_line.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ptkit::record {
namespace {

// "41.0 MB" (powers of 1000, as the rates are said).
std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrFormat("%.1f GB", bytes / 1e9);
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  if (bytes >= 1e3) return absl::StrFormat("%.1f kB", bytes / 1e3);
  return absl::StrFormat("%.0f B", bytes);
}

std::string Counted(uint64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

uint64_t SteadyClockMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t TraceBytes(const StreamStats& t) {
  return t.aux_bytes + t.snapshot_bytes + t.sample_aux_bytes;
}

std::string FormatStatusLine(uint64_t elapsed_ms, const StreamStats& t, uint64_t stored_bytes) {
  const double seconds = static_cast<double>(elapsed_ms) / 1000.0;
  const double rate = seconds > 0 ? static_cast<double>(TraceBytes(t)) / seconds : 0.0;
  std::string loss;
  for (const auto& [n, noun] : {std::pair<uint64_t, const char*>{t.truncated, "truncation"},
                                {t.collisions, "collision"},
                                {t.lost_records, "lost record"}}) {
    if (n != 0) absl::StrAppend(&loss, loss.empty() ? "" : ", ", Counted(n, noun));
  }
  return absl::StrFormat("ptrecord: %.1f s, %s/s of trace, %s stored, %s", seconds, Bytes(rate),
                         Bytes(static_cast<double>(stored_bytes)),
                         loss.empty() ? std::string("no loss") : "loss: " + loss);
}

bool StatusLineFits(bool command) {
  return isatty(STDERR_FILENO) == 1 && (!command || isatty(STDOUT_FILENO) != 1);
}

StatusLine::StatusLine(std::FILE* out, bool terminal, std::function<uint64_t()> now_ms,
                       uint64_t interval_ms)
    : out_(out),
      terminal_(terminal && out != nullptr),
      now_ms_(std::move(now_ms)),
      interval_ms_(interval_ms),
      start_ms_(now_ms_()),
      last_ms_(start_ms_) {}

StatusLine::~StatusLine() { Clear(); }

void StatusLine::Update(const StreamStats& totals, uint64_t stored_bytes) {
  if (!terminal_) return;
  const uint64_t now = now_ms_();
  if (now - last_ms_ < interval_ms_) return;
  last_ms_ = now;
  const std::string text = FormatStatusLine(now - start_ms_, totals, stored_bytes);
  // A status line is best effort: a failed write loses nothing the recording needs.
  (void)std::fprintf(out_, "\r%s\033[K", text.c_str());
  (void)std::fflush(out_);
  shown_ = true;
  ++lines_;
}

void StatusLine::Clear() {
  if (!shown_) return;
  (void)std::fputs("\r\033[K", out_);
  (void)std::fflush(out_);
  shown_ = false;
}

}  // namespace ptkit::record
