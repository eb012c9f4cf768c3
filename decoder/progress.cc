#include "decoder/progress.h"

#include <fmt/format.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace ptkit::decoder {
namespace {

constexpr uint64_t kIntervalMs = 250;
// Spaces enough to cover a status line, between two carriage returns.
constexpr char kClearLine[] = "\r                                        \r";

// The descriptor a status line is shown on, -1 when none: what a signal that ends ptdecode
// erases before it does (sweep 39b L2: ^C, a `| head` that closed the pipe, or a timeout left
// "ptdecode: 21.6 MiB decoded" before the shell's prompt).
std::atomic<int> g_line_fd{-1};

void ClearLineAndDie(int signal) {
  const int fd = g_line_fd.exchange(-1);
  if (fd >= 0) (void)!write(fd, kClearLine, sizeof(kClearLine) - 1);
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigaction(signal, &action, nullptr);
  (void)raise(signal);  // blocked in the handler: delivered, with the default action, on return
}

// Once: ClearLineAndDie for the signals that end ptdecode by default (those the program set
// otherwise, SIGPIPE ignored for one, stay as they are).
void ClearLineOnFatalSignals() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) {
      struct sigaction old {};
      if (sigaction(signal, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction action {};
      action.sa_handler = ClearLineAndDie;
      sigemptyset(&action.sa_mask);
      sigaction(signal, &action, nullptr);
    }
  });
}

std::string Size(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace

uint64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

ProgressLine::ProgressLine(std::FILE* err, bool enabled, std::function<uint64_t()> now_ms)
    : err_(err), enabled_(enabled), now_ms_(std::move(now_ms)) {
  if (enabled_) last_ms_ = now_ms_();
}

ProgressLine::ProgressLine(const ProgressOutput& to)
    : ProgressLine(to.err, to.err != nullptr, to.now_ms ? to.now_ms : MonotonicMs) {}

void ProgressLine::Update(uint64_t done, uint64_t total, const std::string& noun) {
  if (!enabled_) return;
  const uint64_t now = now_ms_();
  if (now - last_ms_ < kIntervalMs) return;
  last_ms_ = now;
  const auto count = [&noun](uint64_t n) {
    return noun.empty() ? Size(static_cast<double>(n)) : fmt::format("{} {}", n, noun);
  };
  if (total != 0) {
    std::fprintf(err_, "\rptdecode: %3.0f%% of %s ",
                 100.0 * static_cast<double>(std::min(done, total)) / static_cast<double>(total),
                 count(total).c_str());
  } else {
    std::fprintf(err_, "\rptdecode: %s%s ", count(done).c_str(), noun.empty() ? " decoded" : "");
  }
  (void)std::fflush(err_);  // a progress line that cannot be shown is not an error
  if (!shown_) {
    ClearLineOnFatalSignals();
    g_line_fd.store(fileno(err_));
  }
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  shown_ = false;
  g_line_fd.store(-1);
  std::fputs(kClearLine, err_);
  (void)std::fflush(err_);
}

ProgressSink::ProgressSink(std::unique_ptr<Sink> inner, std::FILE* err, bool enabled,
                           uint64_t total_bytes, std::function<uint64_t()> now_ms)
    : ForwardingSink(std::move(inner)),
      line_(err, enabled, std::move(now_ms)),
      enabled_(enabled),
      total_(total_bytes) {}

void ProgressSink::OnStream(const StreamInfo& stream) {
  if (!stream.context_switch) {
    done_before_ += stream_bytes_;
    stream_bytes_ = stream.bytes;
    offset_ = 0;
  }
  inner().OnStream(stream);
}

void ProgressSink::OnProgress(uint64_t offset) {
  inner().OnProgress(offset);
  if (!enabled_) return;
  offset_ = offset;
  line_.Update(done_before_ + std::min(offset_, stream_bytes_ ? stream_bytes_ : offset_), total_);
}

std::unique_ptr<Sink> WithProgress(std::unique_ptr<Sink> inner, const ProgressOutput& to,
                                   uint64_t total_bytes) {
  if (to.err == nullptr) return inner;
  return std::make_unique<ProgressSink>(std::move(inner), to.err, true, total_bytes,
                                        to.now_ms ? to.now_ms : MonotonicMs);
}

std::string TimeFilterSink::DescribeEmpty() const {
  std::string window =
      fmt::format("--time {},{}: no instruction ran in [{}, {})", from_, to_, from_, to_);
  if (first_ > last_) return window + ": the trace has no timing packets (no TSC, MTC or CYC)";
  return fmt::format("{}; the trace's time (TSC) runs from {} to {}", window, first_, last_);
}

absl::Status ProgressSink::Finish(const DecodeTotals& totals) {
  line_.Clear();
  return inner().Finish(totals);
}

}  // namespace ptkit::decoder
