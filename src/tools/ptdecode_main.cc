// ptdecode: turns a trace.pt recording into control flow and summaries.
// Thin main: each sub-command is one row of kCommands (its flags: decoder/cli_options.h); the
// work happens in ptkit libraries.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "completion/completion.h"
#include "decoder/bts.h"
#include "decoder/cli_options.h"
#include "decoder/container_export.h"
#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/diff.h"
#include "decoder/output_format.h"
#include "decoder/packets.h"
#include "decoder/parallel_decode.h"
#include "decoder/perf_data_export.h"
#include "decoder/perf_data_input.h"
#include "decoder/progress.h"
#include "decoder/raw_input.h"
#include "decoder/samples.h"
#include "decoder/sinks.h"
#include "decoder/tsc_clock.h"
#include "fmt/format.h"
#include "ptkit/info.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/usable_cpus.h"

namespace {

namespace dec = ::ptkit::decoder;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitRegression = 3;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ptdecode: %s\n", std::string(status.message()).c_str());
  return kExitRuntime;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ptdecode: %s (see ptdecode --help)\n", message.c_str());
  return kExitUsage;
}

int UsageError(const absl::Status& status) { return UsageError(std::string(status.message())); }

// `info` of a trace.pt or, recognised by its magic, a perf.data.
absl::StatusOr<nlohmann::json> Info(const std::string& path, bool& perf_data) {
  auto perf = dec::IsPerfDataFile(path);
  perf_data = perf.ok() && *perf;
  return perf_data ? dec::PerfDataInfo(path) : ptkit::ContainerInfo(path);
}

std::string InfoText(const nlohmann::json& info, bool perf_data) {
  return perf_data ? dec::FormatPerfDataInfoText(info) : ptkit::FormatInfoText(info);
}

// Where the commands that are no Sink decode (packets, samples, info --decode, diff, export)
// show their progress: stderr when it is a terminal (as ProgressSink for the others).
dec::ProgressOutput ProgressStream() {
  return {.err = isatty(STDERR_FILENO) == 1 ? stderr : nullptr, .now_ms = dec::MonotonicMs};
}

// `code`, or 1 where what went to standard output could not be written (--help > /dev/full).
int Flushed(int code) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return Fail(dec::Output::WriteError(errno));
  return code;
}

int WriteOut(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout)) {
    return Fail(dec::Output::WriteError(errno));
  }
  return 0;
}

// perf's build-id cache where no --buildid-dir is given: $PERF_BUILDID_DIR, else ~/.debug.
std::string DefaultBuildIdDir() {
  return dec::DefaultBuildIdDir(std::getenv("PERF_BUILDID_DIR"), std::getenv("HOME"));
}

int RunInfo(const dec::InfoFlags& f) {
  bool perf_data = false;
  auto info = Info(f.path, perf_data);
  if (!info.ok()) return Fail(info.status());
  std::string summary;
  if (!f.decode && (!f.sysroot.empty() || !f.buildid_dir.empty())) {
    return UsageError(fmt::format("{} is for info --decode: where it finds the mapped files",
                                  f.sysroot.empty() ? "--buildid-dir" : "--sysroot"));
  }
  if (f.decode) {  // on request only: `info` stays one cheap pass otherwise
    dec::ContainerOptions options;
    options.sysroot = f.sysroot;
    // As every decode (sweep 39a F1).
    options.buildid_dir = f.buildid_dir.empty() ? DefaultBuildIdDir() : f.buildid_dir;
    options.progress = ProgressStream();
    auto d = dec::DecodeSummary(f.path, options);
    if (!d.ok()) return Fail(d.status());
    (*info)["decode"] = *d;
    auto count = [&](const char* key, const char* noun) {
      return dec::Counted((*d)[key].get<uint64_t>(), noun);
    };
    summary = fmt::format("decode: {}, {}, {} ({}), {} ({})\n", count("streams", "stream"),
                          count("instructions", "instruction"), count("errors", "error"),
                          count("gaps", "gap"), count("losses", "loss point"),
                          count("lost_bytes", "byte"));
    for (const auto& [code, n] : (*d)["errors_by_code"].items()) {
      summary += fmt::format("  error {}: {}\n", code, n.get<uint64_t>());
    }
    // What every decode warns of (sweep 29c F6: info --decode was silent where stats said the
    // trace cannot show 24 M instructions).
    for (const auto& w : (*d)["warnings"]) {
      summary += fmt::format("  warning: {}\n", w.get<std::string>());
    }
  }
  std::string text =
      f.json ? info->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
             : InfoText(*info, perf_data) + summary;
  return WriteOut(text);  // (flushed: a write error said, exit 1; sweep 39b F3)
}

using SinkFactory = std::function<std::unique_ptr<dec::Sink>(const dec::ProgramImage&, std::FILE*,
                                                             const dec::OutputOptions&)>;

// Wraps the sink for --time FROM,TO (`window` points to the filter, null without one); on bad
// syntax prints the usage error and returns null.
std::unique_ptr<dec::Sink> WithTimeFilter(const dec::DecodeFlags& f,
                                          std::unique_ptr<dec::Sink> sink,
                                          dec::TimeFilterSink*& window, int& exit_code) {
  window = nullptr;
  auto time = dec::TimeWindowFromFlags(f);
  if (!time.ok()) {
    exit_code = UsageError(time.status());
    return nullptr;
  }
  if (!time->has_value()) return sink;
  auto filter = std::make_unique<dec::TimeFilterSink>(std::move(sink), (*time)->from, (*time)->to);
  window = filter.get();
  return filter;
}

// After a decode into `sink`: an empty result says why (exit 1), else 0.
int CheckNotEmpty(const std::string& input, const dec::DecodeTotals& totals,
                  const dec::TimeFilterSink* window, const dec::Sink& sink) {
  if (window != nullptr && window->instructions() == 0 && totals.instructions != 0) {
    std::fprintf(stderr, "ptdecode: %s: %s\n", input.c_str(), window->DescribeEmpty().c_str());
    return kExitRuntime;
  }
  if (totals.instructions != 0) {
    const std::string empty = sink.EmptyResult();
    if (empty.empty()) return 0;
    std::fprintf(stderr, "ptdecode: %s: %s\n", input.c_str(), empty.c_str());
    return kExitRuntime;
  }
  std::string why = fmt::format(
      "{}: no instructions decoded ({}, {} of trace, {}, {})", input,
      dec::Counted(totals.streams, "stream"), dec::Counted(totals.trace_bytes, "byte"),
      dec::Counted(totals.errors, "decode error"), dec::Counted(totals.losses, "loss point"));
  if (window != nullptr) why += "; " + window->DescribeEmpty();
  if (totals.streams == 0 && totals.trace_bytes == 0 && !totals.warnings.empty()) {
    // A file cut before its first trace data (sweep 29b M1: "holds no trace" was said).
    why += fmt::format(": the input is incomplete ({} above): its trace may be in what is missing",
                       dec::Counted(totals.warnings.size(), "warning"));
  } else if (totals.streams == 0 && totals.trace_bytes == 0) {
    // E.g. `perf record -e dummy,task-clock`: a perf.data of sideband and samples only.
    why +=
        ": the recording holds no trace (record an intel_pt or intel_bts event: ptrecord, "
        "or perf record -e intel_pt//u)";
  }
  std::fprintf(stderr, "ptdecode: %s\n", why.c_str());
  return kExitRuntime;
}

absl::StatusOr<dec::ContainerOptions> ContainerOptions(const dec::DecodeFlags& f) {
  auto options = dec::ContainerOptionsFromFlags(f, DefaultBuildIdDir());
  if (options.ok()) options->progress = ProgressStream();
  return options;
}

// Container input: FILE is a trace.pt (or perf.data) recording; the sink writes to `output`.
// `quiet`: the input's warnings and an empty result's reason are not said (a part of a report
// whose whole decode says them), only the exit status tells.
int RunContainer(const dec::DecodeFlags& f, const SinkFactory& make_sink,
                 std::FILE* output = stdout, bool quiet = false) {
  auto options = ContainerOptions(f);
  if (!options.ok()) return UsageError(options.status());
  auto clock = dec::ReadRecordingClock(f.container);
  if (!clock.ok()) return Fail(clock.status());
  dec::OutputOptions out = dec::OutputOptionsFromFlags(f, f.container, *clock);
  // The sink needs an image for symbols before streams are known: sinks look symbols up in
  // the image of the stream they are given; an empty image serves the constructor.
  auto empty = dec::ProgramImage::Create();
  if (!empty.ok()) return Fail(empty.status());
  int exit_code = 0;
  dec::TimeFilterSink* window = nullptr;
  auto inner = WithTimeFilter(f, make_sink(**empty, output, out), window, exit_code);
  if (!inner) return exit_code;
  auto sink = std::make_unique<dec::ProgressSink>(std::move(inner), stderr,
                                                  isatty(STDERR_FILENO) == 1, 0, dec::MonotonicMs);
  auto totals = dec::DecodeContainer(f.container, *options, *sink);
  if (!totals.ok()) return Fail(totals.status());
  if (quiet) return totals->instructions == 0 ? kExitRuntime : 0;
  for (const std::string& w : totals->warnings) {
    std::fprintf(stderr, "ptdecode: warning: %s\n", w.c_str());
  }
  return CheckNotEmpty(f.container, *totals, window, *sink);
}

// insn, branches, calls, stats, folded, timeline: a recording or a raw trace into `make_sink`.
int RunDecode(const dec::DecodeFlags& f, const SinkFactory& make_sink) {
  if (!f.container.empty()) {
    if (!f.pt.empty() || !f.bts.empty()) {
      return UsageError("give either a trace.pt FILE or --pt/--bts FILE, not both");
    }
    return RunContainer(f, make_sink);
  }
  auto spec = dec::RawInputSpecFromFlags(f);
  if (!spec.ok()) return UsageError(spec.status());
  auto input = dec::LoadRawInput(*spec);
  if (!input.ok()) return Fail(input.status());
  if (spec->elfs.empty() && spec->raws.empty() && spec->page_dumps.empty()) {
    // Nothing to follow the trace through (sweep 29b M4: "0 streams, 2272 bytes of trace").
    return UsageError(absl::InvalidArgumentError(
        "--pt/--bts: no code given: a raw trace decodes against the code it ran, given with "
        "--elf FILE[:BASE], --raw FILE[:FROM[-TO]]:ADDRESS or --pages DIR (ptdecode packets needs "
        "none)"));
  }
  // Times the trace has but the options do not let the decoder compute (sweep 29b S3).
  if (!spec->bts) {
    const std::string timing =
        dec::UnusedTimingWarning(spec->pt_path, input->trace.bytes(), input->config);
    if (!timing.empty()) std::fprintf(stderr, "ptdecode: warning: %s\n", timing.c_str());
  }
  dec::OutputOptions options =
      dec::OutputOptionsFromFlags(f, spec->pt_path, dec::TscClockFromConfig(input->config));
  int exit_code = 0;
  dec::TimeFilterSink* window = nullptr;
  auto inner = WithTimeFilter(f, make_sink(*input->image, stdout, options), window, exit_code);
  if (!inner) return exit_code;
  auto sink =
      std::make_unique<dec::ProgressSink>(std::move(inner), stderr, isatty(STDERR_FILENO) == 1,
                                          input->trace.bytes().size(), dec::MonotonicMs);
  // -j: each thread loads the images again (libipt's images are not thread-safe).
  auto load_image = [&]() -> absl::StatusOr<std::unique_ptr<dec::ProgramImage>> {
    auto again = dec::LoadRawInput(*spec);
    if (!again.ok()) return again.status();
    return std::move(again->image);
  };
  auto totals = spec->bts ? dec::DecodeBts(input->trace.bytes(), *input->image, *sink)
                          : dec::DecodeTraceWithJobs(input->trace.bytes(), input->config,
                                                     *input->image, load_image, *sink);
  if (!totals.ok()) return Fail(totals.status());
  return CheckNotEmpty(spec->pt_path, *totals, window, *sink);
}

int RunPackets(const dec::DecodeFlags& f) {
  if (!f.bts.empty()) return UsageError("packets decodes Intel PT (--pt), not BTS");
  dec::OutputOptions options;
  options.json = f.json;
  if (!f.container.empty()) {
    if (!f.pt.empty()) return UsageError("give either a trace.pt FILE or --pt FILE, not both");
    auto container = ContainerOptions(f);
    if (!container.ok()) return UsageError(container.status());
    dec::PacketsSummary summary;
    absl::Status status =
        dec::DumpContainerPackets(f.container, *container, stdout, options, &summary);
    if (!status.ok()) return Fail(status);
    // As every decoding sub-command: what the input lacks, and why nothing was shown.
    for (const std::string& w : summary.warnings) {
      std::fprintf(stderr, "ptdecode: warning: %s\n", w.c_str());
    }
    if (summary.trace_bytes == 0) {
      std::fprintf(stderr, "ptdecode: %s: no trace bytes%s\n", f.container.c_str(),
                   !summary.warnings.empty()
                       ? fmt::format(": the input is incomplete ({} above): its trace may be in "
                                     "what is missing",
                                     dec::Counted(summary.warnings.size(), "warning"))
                             .c_str()
                       : ": the recording holds no trace (record an intel_pt event: ptrecord, or "
                         "perf record -e intel_pt//u)");
      return kExitRuntime;
    }
    return 0;
  }
  auto spec = dec::RawInputSpecFromFlags(f);
  if (!spec.ok()) return UsageError(spec.status());
  auto input = dec::LoadRawInput(*spec);
  if (!input.ok()) return Fail(input.status());
  dec::ProgressLine progress(ProgressStream());
  dec::PacketContext context;
  const uint64_t total = input->trace.bytes().size();
  context.on_progress = [&](uint64_t offset) { progress.Update(offset, total); };
  absl::Status status =
      dec::DumpPackets(input->trace.bytes(), input->config, stdout, options, context);
  if (!status.ok()) return Fail(status);
  return 0;
}

// Rows of `stats` in the default report.
constexpr size_t kReportFunctions = 20;

// Branches of the crashed thread the default report shows first.
constexpr size_t kCrashBranches = 16;

// A recording made with --snapshot-on-crash (its end metadata's "crash"): the signal, the
// thread that got it and where, and that thread's last kCrashBranches branches, which the
// crash snapshot (its last) ends with. Empty for other recordings.
std::string CrashText(const nlohmann::json& info, const dec::DecodeFlags& f) {
  const nlohmann::json* crash = nullptr;
  if (auto m = info.find("metadata"); m != info.end() && m->is_object()) {
    if (auto e = m->find("end"); e != m->end() && e->is_object()) {
      if (auto c = e->find("crash"); c != e->end() && c->is_object()) crash = &*c;
    }
  }
  if (crash == nullptr) return "";
  const uint64_t tid = crash->value("tid", uint64_t{0}), ip = crash->value("ip", uint64_t{0});
  std::string text =
      fmt::format("crash:       {} in thread {} (pid {}) at 0x{:x}\n",
                  crash->value("signal", std::string("?")), tid, crash->value("pid", 0), ip);
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* memory = open_memstream(&buffer, &size);
  if (memory == nullptr) return text;
  dec::DecodeFlags branches = f;
  branches.tid = std::to_string(tid);
  // (Quiet: the report's decode below says the warnings, of every thread.)
  const int decoded = RunContainer(branches, dec::MakeBranchesSink, memory, /*quiet=*/true);
  const bool closed = std::fclose(memory) == 0;  // else no branches: the buffer is not whole
  std::string out(closed && buffer != nullptr ? buffer : "", closed ? size : 0);
  std::free(buffer);
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    lines.push_back(std::string_view(out).substr(at, end - at));
    at = end + 1;
  }
  if (decoded != 0 || lines.empty()) {
    return text +
           fmt::format("             (no branches of thread {} decoded{})\n", tid,
                       decoded == 0 || decoded == kExitRuntime
                           ? ": its crash snapshot holds none; the warnings below say what is "
                             "missing"
                           : "");
  }
  const size_t first = lines.size() > kCrashBranches ? lines.size() - kCrashBranches : 0;
  text += fmt::format("last {} branches of thread {} (the crash snapshot, oldest first):\n",
                      lines.size() - first, tid);
  for (size_t i = first; i < lines.size(); ++i) text += fmt::format("  {}\n", lines[i]);
  return text + "\n";
}

// `ptdecode FILE` (or `ptdecode report FILE`): with --snapshot-on-crash the crash and its
// thread's last branches (CrashText), then the info summary, the top functions of stats and
// every loss and decode error.
int RunReport(const dec::DecodeFlags& f) {
  bool perf_data = false;
  auto info = Info(f.container, perf_data);
  if (!info.ok()) return Fail(info.status());
  std::string text = (perf_data ? "" : CrashText(*info, f)) + InfoText(*info, perf_data) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
    return Fail(dec::Output::WriteError(errno));
  }
  dec::DecodeFlags stats = f;
  stats.top_functions = kReportFunctions;
  stats.list_problems = true;
  return RunContainer(stats, dec::MakeStatsSink);
}

// `ptdecode diff`: loads each side's runs and compares them (decoder/diff.h).
int RunDiff(const dec::DiffFlags& f) {
  auto plan = dec::DiffPlanFromFlags(f, DefaultBuildIdDir());
  if (!plan.ok()) return UsageError(plan.status());
  plan->container.progress = ProgressStream();
  if (!plan->limits.empty()) {
    absl::Status limits = dec::ReadDiffLimits(plan->limits, plan->limits_given, plan->options);
    if (absl::IsInvalidArgument(limits)) return UsageError(limits);
    if (!limits.ok()) return Fail(limits);
  }
  if (plan->format == dec::DiffFormat::kFolded) {
    auto folded = dec::DiffFolded(plan->base, plan->now, plan->container, plan->profile,
                                  plan->options.metric == dec::DiffMetric::kTime
                                      ? dec::FoldedWeight::kTime
                                      : dec::FoldedWeight::kInstructions);
    if (!folded.ok()) return Fail(folded.status());
    return WriteOut(*folded);
  }
  std::vector<dec::Profile> base, now;
  for (auto [paths, runs] : {std::pair{&plan->base, &base}, std::pair{&plan->now, &now}}) {
    for (const std::string& path : *paths) {
      auto profile = dec::LoadProfile(path, plan->container, plan->profile);
      if (!profile.ok()) return Fail(profile.status());
      runs->push_back(std::move(*profile));
    }
  }
  auto diff = dec::DiffProfiles(base, now, plan->options);
  if (!diff.ok()) {
    // No function in common is a usage error; a run without the timing the metric needs, a
    // runtime one.
    if (diff.status().code() != absl::StatusCode::kInvalidArgument) return Fail(diff.status());
    std::fprintf(stderr, "ptdecode: %s\n", std::string(diff.status().message()).c_str());
    return kExitUsage;
  }
  const bool color = dec::DiffColor(f.color, ::isatty(STDOUT_FILENO) == 1, std::getenv("NO_COLOR"),
                                    std::getenv("TERM"));
  std::string text;
  switch (plan->format) {
    case dec::DiffFormat::kJson:
      text = dec::FormatDiffJson(*diff, plan->options);
      break;
    case dec::DiffFormat::kMarkdown:
      text = dec::FormatDiffMarkdown(*diff, plan->options);
      break;
    case dec::DiffFormat::kJunit:
      text = dec::FormatDiffJunit(*diff, plan->options);
      break;
    case dec::DiffFormat::kText:
    case dec::DiffFormat::kFolded:
      text = dec::FormatDiffText(*diff, plan->options, color);
      break;
  }
  if (int exit_code = WriteOut(text); exit_code != 0) return exit_code;
  return diff->regression() ? kExitRegression : 0;
}

bool IsRegularFile(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// `export --to trace.pt`: the recording (a perf.data, or a trace.pt) as one container.
int RunExportContainer(const dec::ExportFlags& f) {
  auto r = dec::OpenRecording(f.input, dec::RecordingOptions{.keep_snapshots = true});
  if (!r.ok()) return Fail(r.status());
  for (const std::string& w : r->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  dec::ContainerExportOptions options = f.container;  // --archive looks in perf's cache too
  options.progress = ProgressStream();
  if (options.buildid_dir.empty()) options.buildid_dir = DefaultBuildIdDir();
  auto done = dec::ExportContainer(*r, f.output, options);
  if (!done.ok()) return Fail(done.status());
  for (const std::string& w : done->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  std::fprintf(stderr, "ptdecode: wrote %s: %s, %s (%s), %s, %s%s (%s archived); %s\n",
               f.output.c_str(), dec::Counted(done->sideband_records, "sideband record").c_str(),
               dec::Counted(done->aux_records, "AUX record").c_str(),
               dec::Counted(done->trace_bytes, "trace byte").c_str(),
               dec::Counted(done->loss_records, "loss record").c_str(),
               done->sample_records == 0
                   ? ""
                   : (dec::Counted(done->sample_records, "AUX sample") + ", ").c_str(),
               dec::Counted(done->code_records, "code record").c_str(),
               dec::Counted(done->archived_bytes, "byte").c_str(),
               dec::Counted(done->file_bytes, "byte").c_str());
  return 0;
}

int RunExport(const dec::ExportFlags& f) {
  // "-" is no standard output here: a perf.data is written in file mode (its header and
  // feature sections after the data), a trace.pt with its code alongside; it made a file named
  // "-" and a "-.debug" directory (sweeps 39a L3, 39b L1).
  if (f.output == "-") {
    return UsageError(
        "-o -: an export is written to a file (a perf.data in file mode, with its build-id "
        "cache FILE.debug beside it), not to standard output; name the file");
  }
  // An option of the other format is an error, not ignored (sweep 40b M2).
  const bool to_trace_pt = dec::ExportFormatFromFlags(f) == dec::ExportFormat::kContainer;
  for (const auto& [given, option, of] :
       {std::tuple{f.container.archive, "--archive", "--to trace.pt"},
        std::tuple{!f.container.sysroot.empty(), "--sysroot", "--to trace.pt --archive"},
        std::tuple{!f.container.buildid_dir.empty(), "--buildid-dir", "--to trace.pt --archive"},
        std::tuple{!f.perf_data.debug_dir.empty(), "--debug-dir", "--to perf.data"}}) {
    if (given && to_trace_pt != std::string_view(of).starts_with("--to trace.pt")) {
      return UsageError(
          fmt::format("{} is an option of export {}, not of --to {}", option, of, f.to));
    }
  }
  // -o naming the input would overwrite the recording with its export (sweep 37a L6).
  struct stat in, out;
  if (::stat(f.input.c_str(), &in) == 0 && ::stat(f.output.c_str(), &out) == 0 &&
      in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    return UsageError(
        fmt::format("-o {} is the input {}: the export would overwrite the "
                    "recording; name another file",
                    f.output, f.input));
  }
  if (dec::ExportFormatFromFlags(f) == dec::ExportFormat::kContainer) {
    return RunExportContainer(f);
  }
  dec::PerfDataExportOptions options = f.perf_data;
  options.progress = ProgressStream();
  auto done = dec::ExportPerfData(f.input, f.output, options);
  if (!done.ok()) return Fail(done.status());
  for (const std::string& w : done->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  std::fprintf(stderr, "ptdecode: wrote %s: %s, %s, %s (%s), %s\n", f.output.c_str(),
               dec::Counted(done->events, "event").c_str(),
               dec::Counted(done->sideband_records, "sideband record").c_str(),
               dec::Counted(done->auxtrace_records, "AUXTRACE record").c_str(),
               dec::Counted(done->trace_bytes, "trace byte").c_str(),
               dec::Counted(done->build_ids, "build-id").c_str());
  if (!done->debug_dir.empty()) {
    std::fprintf(stderr,
                 "ptdecode: captured code of %s in the build-id cache %s: perf --buildid-dir %s "
                 "script -i %s\n",
                 dec::Counted(done->cached_files, "file").c_str(), done->debug_dir.c_str(),
                 done->debug_dir.c_str(), f.output.c_str());
  }
  return 0;
}

// `samples`: the AUX samples of a trace.pt with the branch history of each (decoder/samples.h).
int RunSamples(const dec::DecodeFlags& f, dec::SamplesOptions so) {
  auto options = ContainerOptions(f);
  if (!options.ok()) return UsageError(options.status());
  auto r = dec::OpenRecording(f.container, *options);
  if (!r.ok()) return Fail(r.status());
  so.json = f.json;
  auto done = dec::PrintSamples(*r, *options, so, stdout);
  return done.ok() ? 0 : Fail(done.status());
}

// `stats --samples` (`stats`), `folded --samples`: the sampled profile of the AUX samples.
int RunSampledProfile(const dec::DecodeFlags& f, bool stats) {
  auto so = dec::SampledProfileFromFlags(f, stats);
  if (!so.ok()) return UsageError(so.status());
  return RunSamples(f, *so);
}

// Every sub-command's flags; each row of kCommands gets its own and fills the part it uses.
struct Flags {
  dec::DecodeFlags decode;
  dec::InfoFlags info;
  dec::ExportFlags export_;
  dec::DiffFlags diff;
  dec::SamplesOptions samples;
};

// A sub-command, as ninja's tool table: its name and --help line, the function registering
// its flags, and the one running it (returning the exit status).
// For `args` (ptdecode SUB-COMMAND ...) that SUB-COMMAND did not take: the first option in them
// that SUB-COMMAND does not have and others do, named with those ("" when there is none).
std::string OptionOfOthers(CLI::App& app, const std::vector<char*>& args) {
  const CLI::App* sub = nullptr;
  for (const CLI::App* c : app.get_subcommands({})) {
    if (c->get_name() == args[1]) sub = c;
  }
  if (sub == nullptr) return "";
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") break;
    // A long option (--name or --name=value) or a short one (-j, -j2).
    const bool is_short = arg.size() >= 2 && arg[0] == '-' && std::isalpha(arg[1]) != 0;
    if (!arg.starts_with("--") && !is_short) continue;
    const std::string option(is_short ? arg.substr(0, 2) : arg.substr(0, arg.find('=')));
    if (sub->get_option_no_throw(option) != nullptr) continue;
    std::string others;
    for (const CLI::App* other : app.get_subcommands({})) {
      if (other != sub && other->get_option_no_throw(option) != nullptr) {
        others += (others.empty() ? "" : ", ") + other->get_name();
      }
    }
    if (!others.empty()) {
      return fmt::format("{} has no {} option (sub-commands that have it: {})", args[1], option,
                         others);
    }
  }
  return "";
}

struct Command {
  const char* name;
  const char* help;
  void (*flags)(CLI::App& cmd, Flags& f);
  int (*run)(const Flags& f);
};

// The flags of a decoding sub-command: those all have, and the optional ones named.
template <bool kJson, bool kDisasm, bool kSrcline, bool kWeight>
void DecodeFlagsOf(CLI::App& cmd, Flags& f) {
  dec::AddDecodeFlags(cmd, f.decode,
                      {.json = kJson, .disasm = kDisasm, .srcline = kSrcline, .weight = kWeight});
}

// In --help order. Add a sub-command by adding a row.
const Command kCommands[] = {
    {"info",
     "Show metadata, record counts and bytes, streams, loss and damage of a trace.pt or "
     "perf.data",
     [](CLI::App& cmd, Flags& f) {
       dec::AddInfoFlags(cmd, f.info);
       dec::AddDecoderFlags(cmd);
     },
     [](const Flags& f) { return RunInfo(f.info); }},
    {"insn",
     "One line per instruction: time, address, symbol+offset, --disasm; events, gaps, errors",
     DecodeFlagsOf<true, true, true, false>,
     [](const Flags& f) { return RunDecode(f.decode, dec::MakeInsnSink); }},
    {"branches", "One line per taken branch: from, to, kind",
     DecodeFlagsOf<true, false, true, false>,
     [](const Flags& f) { return RunDecode(f.decode, dec::MakeBranchesSink); }},
    {"calls", "Call/return tree with each call's instruction count (and TSC ticks)",
     DecodeFlagsOf<true, false, true, false>,
     [](const Flags& f) { return RunDecode(f.decode, dec::MakeCallsSink); }},
    {"stats", "Per function and per image: instructions (self, inclusive), calls; totals",
     [](CLI::App& cmd, Flags& f) {
       dec::AddDecodeFlags(cmd, f.decode, {.json = true, .only_under = true, .samples = true});
     },
     [](const Flags& f) {
       return f.decode.samples ? RunSampledProfile(f.decode, true)
                               : RunDecode(f.decode, dec::MakeStatsSink);
     }},
    {"folded",
     "Folded stacks weighted by instructions or time (flamegraph.pl, inferno, speedscope)",
     [](CLI::App& cmd, Flags& f) {
       dec::AddDecodeFlags(cmd, f.decode,
                           {.json = false, .weight = true, .max_depth = true, .samples = true});
     },
     [](const Flags& f) {
       return f.decode.samples ? RunSampledProfile(f.decode, false)
                               : RunDecode(f.decode, dec::MakeFoldedSink);
     }},
    {"timeline",
     "Chrome trace-event JSON (Perfetto UI, speedscope), a track per thread in its process, one "
     "slice per stack frame",
     DecodeFlagsOf<false, false, false, false>,
     [](const Flags& f) { return RunDecode(f.decode, dec::MakeTimelineSink); }},
    {"packets",
     "Packet dump with offsets, like ptdump; trace.pt: each stream with its AUX offsets and loss",
     [](CLI::App& cmd, Flags& f) { dec::AddDecodeFlags(cmd, f.decode, {.decode = false}); },
     [](const Flags& f) { return RunPackets(f.decode); }},
    {"report",
     "The default (`ptdecode FILE`): info summary, top 20 functions of stats, every loss and "
     "error",
     [](CLI::App& cmd, Flags& f) {
       cmd.add_option("FILE", f.decode.container, "trace.pt or perf.data recording")->required();
       dec::AddContainerFlags(cmd, f.decode);
       dec::AddDecoderFlags(cmd);
     },
     [](const Flags& f) { return RunReport(f.decode); }},
    {"export",
     "Write the recording as a perf.data that perf script / perf report decode (--to "
     "perf.data), or as one trace.pt container (--to trace.pt: a perf.data kept as one "
     "compressed, crash-safe ptkit file)",
     [](CLI::App& cmd, Flags& f) { dec::AddExportFlags(cmd, f.export_); },
     [](const Flags& f) { return RunExport(f.export_); }},
    {"samples",
     "AUX samples (ptrecord --aux-sample): time, cpu, tid, sampled IP and symbol, and the last "
     "taken branches its trace snippet holds",
     [](CLI::App& cmd, Flags& f) {
       cmd.add_option("FILE", f.decode.container, "trace.pt or perf.data recording")->required();
       dec::AddContainerFlags(cmd, f.decode);
       cmd.add_flag("--json", f.decode.json, "Print JSON (schema in ptdecode(1))");
       cmd.add_option("--branches", f.samples.branches,
                      "The last N taken branches of each sample (default 16; 0: all)")
           ->type_name("N")
           ->check(dec::NotNegative());
       cmd.add_flag("--instructions", f.samples.instructions,
                    "Also list every instruction decoded from each snippet");
       cmd.add_flag("--folded", f.samples.folded,
                    "A sampled profile instead: one 'f1;f2;f3 N' line per stack rebuilt from the "
                    "snippets (flamegraph.pl)");
     },
     [](const Flags& f) {
       // --snapshot is a container flag of the decoding sub-commands; every sample is shown
       // (sweep 40b M2: it was taken and did nothing).
       if (!f.decode.snapshot.empty()) {
         return UsageError(
             "--snapshot selects one snapshot's trace; samples shows every AUX sample (select "
             "them with --tid or --cpu N)");
       }
       return RunSamples(f.decode, f.samples);
     }},
    {"diff",
     "Compare per-function instruction counts of two builds (trace.pt, perf.data or stats "
     "--json); exit 3 on a regression beyond --fail-total/--fail-function",
     [](CLI::App& cmd, Flags& f) {
       dec::AddDiffFlags(cmd, f.diff);
       dec::AddDecoderFlags(cmd);
     },
     [](const Flags& f) { return RunDiff(f.diff); }},
};

// ptdecode's default -j: the CPUs this process may run on, at most 16 (each thread holds its
// images and decoder: some 10 MB).
unsigned DefaultJobs() {
  constexpr int kMaxDefaultJobs = 16;
  return static_cast<unsigned>(std::clamp(ptkit::UsableCpus(), 1, kMaxDefaultJobs));
}

}  // namespace

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): a bug; terminate says it
  ptkit::HoldClosedStdioOpen();
  CLI::App app{
      "ptdecode: decode Intel PT recordings (trace.pt, perf.data) into control flow.\n"
      "`ptdecode FILE` (no sub-command) is `ptdecode report FILE`. Exit status: 0 success, 1 "
      "runtime error or empty result (one line says why), 2 usage error, 3 (diff) regression.",
      "ptdecode"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ptdecode " PTKIT_VERSION);
  ptkit::completion::AddCompletionFlag(app);
  // Without -j: the outputs that summarise chunks (stats, folded, calls) decode on the CPUs this
  // process may run on (DefaultJobs); the others on one thread.
  {
    ptkit::decoder::ParallelOptions parallel = ptkit::decoder::GetParallelOptions();
    parallel.jobs = DefaultJobs();
    parallel.jobs_for_records = false;
    ptkit::decoder::SetParallelOptions(parallel);
  }
  // A reader that went away (`ptdecode insn t.pt | head`) ends ptdecode as it ends other
  // tools, also where SIGPIPE was ignored by whoever started it (a CI runner, a service): with
  // it ignored, the writes failed and the whole trace was still decoded before the error came
  // (sweep 31b F2).
  (void)std::signal(SIGPIPE, SIG_DFL);
  int exit_code = 0;
  std::vector<Flags> flags(std::size(kCommands));
  for (size_t i = 0; i < std::size(kCommands); ++i) {
    CLI::App* cmd = app.add_subcommand(kCommands[i].name, kCommands[i].help);
    kCommands[i].flags(*cmd, flags[i]);
    cmd->callback([&, i] { exit_code = kCommands[i].run(flags[i]); });
  }

  // `ptdecode FILE ...` is `ptdecode report FILE ...`, as `perf script` needs no sub-command;
  // any other first word that is no sub-command is named as such.
  std::vector<char*> args(argv, argv + argc);
  if (argc == 1) {
    return UsageError(
        "give a trace.pt FILE for the default report, or a sub-command and its input");
  }
  std::string names;
  for (const Command& c : kCommands) names += (names.empty() ? "" : ", ") + std::string(c.name);
  const std::string_view first = argv[1];
  if (first.starts_with('-')) {
    // ptdecode's own options; any other is a sub-command's, given before the sub-command
    // (`ptdecode --pt t.raw --elf prog`): CLI11 would say only "A subcommand is required".
    const std::string_view option = first.substr(0, first.find('='));
    if (option != "-h" && option != "--help" && option != "--version" && option != "--completion") {
      return UsageError(fmt::format(
          "{} is an option of a sub-command: give the sub-command first (ptdecode SUB-COMMAND "
          "{} ...); sub-commands: {}",
          option, option, names));
    }
  } else {
    bool known = false;
    for (const Command& c : kCommands) known |= c.name == first;
    struct stat st {};
    if (!known && IsRegularFile(argv[1])) {
      static char kReport[] = "report";
      args.insert(args.begin() + 1, kReport);
    } else if (!known && ::stat(argv[1], &st) == 0 && !S_ISDIR(st.st_mode)) {
      // A pipe or a device (`cat t.pt | ptdecode /dev/stdin`): it was "unknown sub-command"
      // (sweep 39b L3).
      return UsageError(fmt::format(
          "{}: not a regular file (a pipe or a device): ptdecode reads a trace.pt or perf.data "
          "file; save the stream to a file first",
          argv[1]));
    } else if (!known) {
      return UsageError(fmt::format(
          "unknown sub-command '{}' (not a file either); sub-commands: {}; or give a trace.pt "
          "FILE for the default report",
          argv[1], names));
    }
  }

  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return Flushed(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return Flushed(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return Flushed(app.exit(e));
  } catch (const CLI::Success& e) {  // --completion
    return 0;
  } catch (const CLI::RuntimeError& e) {  // --completion could not write
    std::fprintf(stderr, "ptdecode: %s\n", e.what());
    return e.get_exit_code();
  } catch (const CLI::ExtrasError& e) {
    // An option of other sub-commands: named as such (sweep 29b U1: `folded --only-under F t.pt`
    // said only that "t.pt --only-under" were not expected).
    const std::string elsewhere = OptionOfOthers(app, args);
    std::fprintf(stderr, "ptdecode: %s (see ptdecode %s --help)\n",
                 elsewhere.empty() ? e.what() : elsewhere.c_str(), args[1]);
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ptdecode: %s (see ptdecode --help)\n", e.what());
    return kExitUsage;
  }
  return exit_code;
}
