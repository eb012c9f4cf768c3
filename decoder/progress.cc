#include "decoder/progress.h"

#include <fmt/format.h>
#include <time.h>

namespace ptkit::decoder {
namespace {

constexpr uint64_t kIntervalMs = 250;

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

ProgressSink::ProgressSink(std::unique_ptr<Sink> inner, std::FILE* err, bool enabled,
                           uint64_t total_bytes, std::function<uint64_t()> now_ms)
    : ForwardingSink(std::move(inner)),
      err_(err),
      enabled_(enabled),
      total_(total_bytes),
      now_ms_(std::move(now_ms)) {
  if (enabled_) last_ms_ = now_ms_();
}

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
  uint64_t now = now_ms_();
  if (now - last_ms_ < kIntervalMs) return;
  last_ms_ = now;
  uint64_t done = done_before_ + std::min(offset_, stream_bytes_ ? stream_bytes_ : offset_);
  if (total_ != 0) {
    std::fprintf(err_, "\rptdecode: %3.0f%% of %s ", 100.0 * static_cast<double>(done) / total_,
                 Size(static_cast<double>(total_)).c_str());
  } else {
    std::fprintf(err_, "\rptdecode: %s decoded ", Size(static_cast<double>(done)).c_str());
  }
  (void)std::fflush(err_);  // a progress line that cannot be shown is not an error
  shown_ = true;
}

std::string TimeFilterSink::DescribeEmpty() const {
  std::string window =
      fmt::format("--time {},{}: no instruction ran in [{}, {})", from_, to_, from_, to_);
  if (first_ > last_) return window + ": the trace has no timing packets (no TSC, MTC or CYC)";
  return fmt::format("{}; the trace's time (TSC) runs from {} to {}", window, first_, last_);
}

absl::Status ProgressSink::Finish(const DecodeTotals& totals) {
  if (shown_) {
    std::fprintf(err_, "\r%40s\r", "");
    (void)std::fflush(err_);
  }
  return inner().Finish(totals);
}

}  // namespace ptkit::decoder
