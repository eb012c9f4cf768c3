#include <fmt/compile.h>
#include <fmt/format.h>

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"

namespace ptkit::decoder {
namespace {

class TimelineSink : public FlowSink {
 public:
  TimelineSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image), out_(out), options_(options) {
    wants_time_ = true;
    model_.set_tell_counts(false);  // no OnCount
    out_.buf().append(std::string_view("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"));
    Metadata("thread_name", options.trace_name.empty() ? "trace" : options.trace_name);
  }
  void OnTime(uint64_t tsc) override {
    FlowSink::OnTime(tsc);
    last_tsc_ = tsc;
    ever_timed_ = true;
  }
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    fmt::format_to(out_.it(),
                   FMT_COMPILE(",\n{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{},\"tid\":{},\"ts\":"), pid_,
                   tid_);
    AppendTs();
    fmt::format_to(out_.it(),
                   FMT_COMPILE(",\"name\":\"{}\",\"args\":{{\"offset\":{},\"ip\":\"{:#x}\"}}}}"),
                   error.is_gap() ? "gap" : IptErrorName(error.code), error.offset, error.ip);
  }
  // Container input: one track per thread, in its process (the track of the trace's name, pid 1
  // tid 1, holds what comes before any stream and a raw trace). A thread or a process whose
  // name changes (an exec; a thread's prctl(PR_SET_NAME) as a per-CPU stream's switch tells it)
  // is named again: Perfetto and chrome://tracing show the last name, the one it ended with.
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);  // closes the open slices on the old track
    const bool known = stream.tid != 0;
    const uint32_t tid = known ? stream.tid : 1000000 + ++unnamed_;
    const uint32_t pid = known && stream.pid != 0 ? stream.pid : 1;
    tid_ = tid;
    pid_ = pid;
    if (!stream.comm.empty() && (tid == pid || !process_names_.contains(pid))) {
      std::string& name = process_names_[pid];
      if (name != stream.comm) {
        name = stream.comm;
        out_.buf().append(std::string_view(",\n"));
        Metadata("process_name", stream.comm);  // viewers show the pid beside it
      }
    }
    const std::string where = known ? fmt::format("tid {}", tid) : stream.name;
    const std::string& comm = stream.last_comm.empty() ? stream.comm : stream.last_comm;
    std::string name = comm.empty() ? where : fmt::format("{} ({})", comm, where);
    std::string& named = thread_names_[tid];
    if (named == name) return;
    named = name;
    out_.buf().append(std::string_view(",\n"));
    Metadata("thread_name", name);
  }

 protected:
  void OnEnter(const Frame& frame) override {
    fmt::format_to(out_.it(), FMT_COMPILE(",\n{{\"ph\":\"B\",\"pid\":{},\"tid\":{},\"ts\":"), pid_,
                   tid_);
    AppendTs();
    out_.buf().append(std::string_view(",\"name\":"));
    AppendJsonString(out_.buf(), functions_[frame.function].name);
    out_.buf().push_back('}');
    out_.MaybeFlush();
  }
  void OnExit(const Frame& frame, bool at_end) override { End(frame.function); }
  // A jump into another function: its slice ends and the new function's begins.
  void OnRename(uint32_t from, const Frame& frame) override {
    End(from);
    OnEnter(frame);
  }
  absl::Status Report(const DecodeTotals& totals) override {
    if (clock_ == Clock::kUndecided) clock_ = ever_timed_ ? Clock::kTsc : Clock::kInstructions;
    // Trace-event format: "otherData" holds free-form metadata about the trace.
    out_.buf().append(std::string_view("\n],\"otherData\":{"));
    if (const std::string warning = model_.DepthWarning(); !warning.empty()) {
      out_.buf().append(std::string_view("\"warning\":"));
      AppendJsonString(out_.buf(), warning);
      out_.buf().push_back(',');
    }
    out_.buf().append(std::string_view("\"ts_unit\":"));
    const TscClock& c = options_.clock;
    if (clock_ == Clock::kInstructions) {
      out_.buf().append(std::string_view("\"instructions\"}}\n"));
    } else if (c.perf) {
      out_.buf().append(std::string_view("\"us\",\"ts_clock\":\"perf_time\"}}\n"));
    } else if (c.tsc_hz > 0) {
      fmt::format_to(out_.it(),
                     "\"us\",\"ts_clock\":\"tsc\",\"tsc_hz\":{:.0f},\"tsc_hz_source\":", c.tsc_hz);
      AppendJsonString(out_.buf(), c.hz_source);
      out_.buf().append(std::string_view("}}\n"));
    } else {
      out_.buf().append(std::string_view("\"tsc_ticks\",\"ts_clock\":\"tsc\"}}\n"));
    }
    return out_.Close();
  }

 private:
  // Named as the "B" it closes: speedscope matches ends by name (Perfetto by nesting).
  void End(uint32_t function) {
    fmt::format_to(out_.it(), FMT_COMPILE(",\n{{\"ph\":\"E\",\"pid\":{},\"tid\":{},\"ts\":"), pid_,
                   tid_);
    AppendTs();
    out_.buf().append(std::string_view(",\"name\":"));
    AppendJsonString(out_.buf(), functions_[function].name);
    out_.buf().push_back('}');
    out_.MaybeFlush();
  }
  // A metadata event of the track: "thread_name" or "process_name".
  void Metadata(std::string_view what, const std::string& name) {
    fmt::format_to(out_.it(),
                   "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"{}\",\"args\":{{\"name\":",
                   pid_, tid_, what);
    AppendJsonString(out_.buf(), name);
    out_.buf().append(std::string_view("}}"));
  }

  // Which clock "ts" uses is settled at the first event written: the trace's time if the
  // decoder has reported one by then, else instructions, for the whole output.
  enum class Clock { kUndecided, kInstructions, kTsc };
  void AppendTs() {
    if (clock_ == Clock::kUndecided) clock_ = ever_timed_ ? Clock::kTsc : Clock::kInstructions;
    auto it = out_.it();
    const TscClock& c = options_.clock;
    if (clock_ == Clock::kInstructions) {
      fmt::format_to(it, FMT_COMPILE("{}"), count_);
    } else if (c.perf) {  // microseconds of perf time, to the nanosecond
      const uint64_t ns = c.perf->ToPerfTime(last_tsc_);
      fmt::format_to(it, FMT_COMPILE("{}.{:03}"), ns / 1000, ns % 1000);
    } else if (c.tsc_hz > 0) {
      fmt::format_to(it, FMT_COMPILE("{:.3f}"), static_cast<double>(last_tsc_) * 1e6 / c.tsc_hz);
    } else {
      fmt::format_to(it, FMT_COMPILE("{}"), last_tsc_);
    }
  }

  Output out_;
  OutputOptions options_;
  uint32_t pid_ = 1;
  uint32_t tid_ = 1;
  uint32_t unnamed_ = 0;
  absl::flat_hash_map<uint32_t, std::string> thread_names_;   // by tid: the last name given
  absl::flat_hash_map<uint32_t, std::string> process_names_;  // by pid: the comm last named
  Clock clock_ = Clock::kUndecided;
  bool ever_timed_ = false;
  uint64_t last_tsc_ = 0;  // the latest decoder time (kept across streams)
};

}  // namespace

std::unique_ptr<Sink> MakeTimelineSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options) {
  return std::make_unique<TimelineSink>(image, out, options);
}

}  // namespace ptkit::decoder
