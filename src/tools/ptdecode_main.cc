// ptdecode: turns a trace.pt recording into control flow and summaries.
// Thin main: flags are parsed here, the work happens in ptkit libraries.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "decoder/bts.h"
#include "decoder/container_export.h"
#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/diff.h"
#include "decoder/packets.h"
#include "decoder/perf_data_export.h"
#include "decoder/perf_data_input.h"
#include "decoder/progress.h"
#include "decoder/raw_input.h"
#include "decoder/sinks.h"
#include "decoder/tsc_clock.h"
#include "fmt/format.h"
#include "ptkit/info.h"

namespace {

namespace dec = ::ptkit::decoder;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ptdecode: %s\n", std::string(status.message()).c_str());
  return kExitRuntime;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ptdecode: %s (see ptdecode --help)\n", message.c_str());
  return kExitUsage;
}

// `info` of a trace.pt or, recognised by its magic, a perf.data.
absl::StatusOr<nlohmann::json> Info(const std::string& path, bool& perf_data) {
  auto perf = dec::IsPerfDataFile(path);
  perf_data = perf.ok() && *perf;
  return perf_data ? dec::PerfDataInfo(path) : ptkit::ContainerInfo(path);
}

std::string InfoText(const nlohmann::json& info, bool perf_data) {
  return perf_data ? dec::FormatPerfDataInfoText(info) : ptkit::FormatInfoText(info);
}

int RunInfo(const std::string& path, bool json, bool decode) {
  bool perf_data = false;
  auto info = Info(path, perf_data);
  if (!info.ok()) return Fail(info.status());
  std::string summary;
  if (decode) {  // on request only: `info` stays one cheap pass otherwise
    auto d = dec::DecodeSummary(path, {});
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
  }
  std::string text =
      json ? info->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
           : InfoText(*info, perf_data) + summary;
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// Flags shared by every decoding sub-command (raw mode, ptxed conventions).
struct DecodeFlags {
  std::string container;  // positional trace.pt (not decoded yet)
  std::string pt;
  std::string bts;
  std::vector<std::string> elfs, raws, pages;
  std::string sysroot;
  std::string buildid_dir;
  std::string cpu;       // FAMILY/MODEL[/STEPPING] (errata) or, in container mode, N (filter)
  std::string time;      // FROM,TO in TSC units
  std::string tid;       // container mode: a thread id (parsed by MakeContainerOptions)
  std::string snapshot;  // container mode: a snapshot number
  unsigned mtc_freq = 0, nom_freq = 0;
  uint32_t cpuid_eax = 0, cpuid_ebx = 0;
  bool json = false;
  bool disasm = false;
  bool srcline = false;         // insn, branches, calls
  std::string weight = "insn";  // folded: insn or time
  size_t top_functions = 0;     // stats: rows shown (0: all); the default report sets it
  bool list_problems = false;   // stats: list every loss and error (the default report)
};

// The output flags every decoding sub-command shares; `clock` turns TSC into time.
dec::OutputOptions MakeOutputOptions(const DecodeFlags& f, const std::string& trace_name,
                                     const dec::TscClock& clock) {
  dec::OutputOptions out;
  out.json = f.json;
  out.disasm = f.disasm;
  out.trace_name = trace_name;
  out.clock = clock;
  out.srcline = f.srcline;
  out.weight = f.weight == "time" ? dec::FoldedWeight::kTime : dec::FoldedWeight::kInstructions;
  out.top_functions = f.top_functions;
  out.list_problems = f.list_problems;
  return out;
}

// The options that say where a trace.pt's files are and which of its streams to decode.
void AddContainerFlags(CLI::App* cmd, DecodeFlags& f) {
  cmd->add_option("--sysroot,--symfs", f.sysroot,
                  "Look for the recording's mapped files and their debug files under DIR");
  cmd->add_option("--buildid-dir", f.buildid_dir,
                  "perf's build-id cache, where a mapped file not found is looked for by "
                  "build-id (default: $PERF_BUILDID_DIR, else ~/.debug)")
      ->type_name("DIR");
  cmd->add_option("--cpu", f.cpu,
                  "FAMILY/MODEL[/STEPPING]: the recording CPU (errata); N: only the stream of "
                  "CPU N (trace.pt)");
  cmd->add_option("--tid", f.tid,
                  "Only what thread TID ran (trace.pt): its thread streams, and the stretches "
                  "of CPU streams while it was scheduled")
      ->type_name("TID");
  cmd->add_option("--snapshot", f.snapshot, "Only snapshot K (0, 1, ...) of each stream (trace.pt)")
      ->type_name("K");
}

void AddDecodeFlags(CLI::App* cmd, DecodeFlags& f, bool json) {
  cmd->add_option("FILE", f.container,
                  "trace.pt or perf.data recording (or use --pt for a raw trace)");
  AddContainerFlags(cmd, f);
  cmd->add_option("--pt", f.pt, "Raw Intel PT trace file (ptxed/perf AUX bytes)");
  cmd->add_option("--bts", f.bts, "Raw intel_bts AUX data (24-byte branch records)");
  cmd->add_option("--elf", f.elfs,
                  "ELF image FILE[:BASE] (BASE: load address of the lowest "
                  "executable segment; repeat the option for more images)")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--raw", f.raws, "Raw image FILE[:FROM[-TO]]:ADDRESS (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--pages", f.pages,
                  "Page dump DIR (DIR/data.addr + DIR/data.dump) or ADDR_FILE,DUMP_FILE "
                  "(repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--time", f.time,
                  "FROM,TO: only what ran while the trace's time (TSC) was in [FROM, TO)");
  cmd->add_option("--mtc-freq", f.mtc_freq, "IA32_RTIT_CTL.MTCFreq")->check(CLI::Range(0, 15));
  cmd->add_option("--nom-freq", f.nom_freq, "Nominal frequency (MSR_PLATFORM_INFO[15:8])")
      ->check(CLI::Range(0, 255));
  cmd->add_option("--cpuid-0x15.eax", f.cpuid_eax, "CPUID leaf 0x15 eax (CTC ratio denominator)");
  cmd->add_option("--cpuid-0x15.ebx", f.cpuid_ebx, "CPUID leaf 0x15 ebx (CTC ratio numerator)");
  if (json) cmd->add_flag("--json", f.json, "Machine-readable output (see ptdecode(1))");
  cmd->add_option_function<std::string>(
         "--decoder",
         [](const std::string& name) {
           dec::SetBlockDecoderImpl(name == "libipt" ? dec::BlockDecoderImpl::kLibipt
                                                     : dec::BlockDecoderImpl::kFast);
         },
         "Block decoder: fast (default; a cached graph of the code, libipt's answer exactly, "
         "libipt for traces with TSX, PTWRITE or packet errors) or libipt (pt_blk_* always)")
      ->check(CLI::IsMember({"fast", "libipt"}));
}

// Builds the raw-mode input spec; on a usage error prints it and returns false.
bool MakeSpec(const DecodeFlags& f, dec::RawInputSpec& spec, int& exit_code) {
  if (!f.pt.empty() && !f.bts.empty()) {
    exit_code = UsageError("give either --pt or --bts, not both");
    return false;
  }
  if (f.pt.empty() && f.bts.empty()) {
    exit_code = UsageError("no input: give a trace.pt FILE, --pt FILE or --bts FILE");
    return false;
  }
  if (!f.tid.empty() || !f.snapshot.empty() ||
      (!f.cpu.empty() && f.cpu.find('/') == std::string::npos)) {
    exit_code = UsageError(
        "--tid, --snapshot and --cpu N filter trace.pt streams; a raw trace has one (the "
        "recording CPU is --cpu FAMILY/MODEL)");
    return false;
  }
  spec.pt_path = f.pt.empty() ? f.bts : f.pt;
  spec.bts = !f.bts.empty();
  for (const std::string& s : f.elfs) {
    auto elf = dec::ParseElfSpec(s);
    if (!elf.ok()) return exit_code = UsageError(std::string(elf.status().message())), false;
    spec.elfs.push_back(*elf);
  }
  for (const std::string& s : f.raws) {
    auto raw = dec::ParseRawSpec(s);
    if (!raw.ok()) return exit_code = UsageError(std::string(raw.status().message())), false;
    spec.raws.push_back(*raw);
  }
  for (const std::string& s : f.pages) spec.page_dumps.push_back(dec::ParsePageDumpSpec(s));
  if (!f.cpu.empty()) {
    auto cpu = dec::ParseCpu(f.cpu);
    if (!cpu.ok()) return exit_code = UsageError(std::string(cpu.status().message())), false;
    spec.config.cpu = *cpu;
  }
  spec.config.mtc_freq = static_cast<uint8_t>(f.mtc_freq);
  spec.config.nom_freq = static_cast<uint8_t>(f.nom_freq);
  spec.config.cpuid_0x15_eax = f.cpuid_eax;
  spec.config.cpuid_0x15_ebx = f.cpuid_ebx;
  return true;
}

using SinkFactory = std::function<std::unique_ptr<dec::Sink>(const dec::ProgramImage&, std::FILE*,
                                                             const dec::OutputOptions&)>;

// Wraps the sink for --time FROM,TO (`window` points to the filter, null without one); on bad
// syntax prints the usage error and returns null.
std::unique_ptr<dec::Sink> WithTimeFilter(const DecodeFlags& f, std::unique_ptr<dec::Sink> sink,
                                          dec::TimeFilterSink*& window, int& exit_code) {
  window = nullptr;
  if (f.time.empty()) return sink;
  size_t comma = f.time.find(',');
  if (comma == std::string::npos) {
    exit_code = UsageError("bad --time '" + f.time + "': expected FROM,TO");
    return nullptr;
  }
  auto from = dec::ParseUint(f.time.substr(0, comma), ~0ull, "--time FROM");
  auto to = dec::ParseUint(f.time.substr(comma + 1), ~0ull, "--time TO");
  if (!from.ok() || !to.ok()) {
    exit_code = UsageError(std::string((from.ok() ? to : from).status().message()));
    return nullptr;
  }
  if (*from >= *to) {
    exit_code = UsageError(fmt::format(
        "bad --time '{}': FROM must be less than TO (the window is [FROM, TO))", f.time));
    return nullptr;
  }
  auto filter = std::make_unique<dec::TimeFilterSink>(std::move(sink), *from, *to);
  window = filter.get();
  return filter;
}

// After a decode: an empty result says why (exit 1), else 0.
int CheckNotEmpty(const std::string& input, const dec::DecodeTotals& totals,
                  const dec::TimeFilterSink* window) {
  if (window != nullptr && window->instructions() == 0 && totals.instructions != 0) {
    std::fprintf(stderr, "ptdecode: %s: %s\n", input.c_str(), window->DescribeEmpty().c_str());
    return kExitRuntime;
  }
  if (totals.instructions != 0) return 0;
  std::string why = fmt::format(
      "{}: no instructions decoded ({}, {} of trace, {}, {})", input,
      dec::Counted(totals.streams, "stream"), dec::Counted(totals.trace_bytes, "byte"),
      dec::Counted(totals.errors, "decode error"), dec::Counted(totals.losses, "loss point"));
  if (window != nullptr) why += "; " + window->DescribeEmpty();
  std::fprintf(stderr, "ptdecode: %s\n", why.c_str());
  return kExitRuntime;
}

// Container input: FILE is a trace.pt recording.
// The container options the flags ask for (filters, sysroot, decoder configuration); on a
// usage error prints it and returns false.
bool MakeContainerOptions(const DecodeFlags& f, dec::ContainerOptions& options, int& exit_code) {
  if (!f.elfs.empty() || !f.raws.empty() || !f.pages.empty()) {
    exit_code = UsageError("--elf, --raw and --pages apply to raw traces (--pt), not to trace.pt");
    return false;
  }
  options.sysroot = f.sysroot;
  options.buildid_dir = f.buildid_dir;
  if (options.buildid_dir.empty()) {
    // As perf: $PERF_BUILDID_DIR, else ~/.debug.
    if (const char* dir = std::getenv("PERF_BUILDID_DIR"); dir != nullptr && *dir != '\0') {
      options.buildid_dir = dir;
    } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
      options.buildid_dir = std::string(home) + "/.debug";
    }
  }
  DecodeFlags g = f;
  if (!f.cpu.empty() && f.cpu.find('/') == std::string::npos) {
    auto n = dec::ParseUint(f.cpu, 0xffffffff, "--cpu");
    if (!n.ok()) return exit_code = UsageError(std::string(n.status().message())), false;
    options.cpu = *n;
    g.cpu.clear();
  }
  if (!f.tid.empty()) {
    auto tid = dec::ParseUint(f.tid, 0xffffffff, "--tid");
    if (!tid.ok()) return exit_code = UsageError(std::string(tid.status().message())), false;
    options.tid = static_cast<uint32_t>(*tid);
  }
  if (!f.snapshot.empty()) {
    auto n = dec::ParseUint(f.snapshot, ~0ull, "--snapshot");
    if (!n.ok()) return exit_code = UsageError(std::string(n.status().message())), false;
    options.snapshot = *n;
  }
  if (!g.cpu.empty() || f.mtc_freq || f.nom_freq || f.cpuid_eax || f.cpuid_ebx) {
    dec::RawInputSpec spec;
    spec.pt_path = f.container;
    DecodeFlags copy = g;
    copy.tid.clear();  // filters, applied by DecodeContainer
    copy.snapshot.clear();
    copy.pt = f.container;
    copy.container.clear();
    if (!MakeSpec(copy, spec, exit_code)) return false;
    options.config = spec.config;
  }
  return true;
}

int RunContainer(const DecodeFlags& f, const SinkFactory& make_sink) {
  dec::ContainerOptions options;
  if (int exit_code = 0; !MakeContainerOptions(f, options, exit_code)) return exit_code;
  auto clock = dec::ReadRecordingClock(f.container);
  if (!clock.ok()) return Fail(clock.status());
  dec::OutputOptions out = MakeOutputOptions(f, f.container, *clock);
  // The sink needs an image for symbols before streams are known: sinks look symbols up in
  // the image of the stream they are given; an empty image serves the constructor.
  auto empty = dec::ProgramImage::Create();
  if (!empty.ok()) return Fail(empty.status());
  int exit_code = 0;
  dec::TimeFilterSink* window = nullptr;
  auto inner = WithTimeFilter(f, make_sink(**empty, stdout, out), window, exit_code);
  if (!inner) return exit_code;
  auto sink = std::make_unique<dec::ProgressSink>(std::move(inner), stderr,
                                                  isatty(STDERR_FILENO) == 1, 0, dec::MonotonicMs);
  auto totals = dec::DecodeContainer(f.container, options, *sink);
  if (!totals.ok()) return Fail(totals.status());
  for (const std::string& w : totals->warnings) {
    std::fprintf(stderr, "ptdecode: warning: %s\n", w.c_str());
  }
  return CheckNotEmpty(f.container, *totals, window);
}

int RunDecode(const DecodeFlags& f, const SinkFactory& make_sink) {
  if (!f.container.empty()) {
    if (!f.pt.empty() || !f.bts.empty()) {
      return UsageError("give either a trace.pt FILE or --pt/--bts FILE, not both");
    }
    return RunContainer(f, make_sink);
  }
  dec::RawInputSpec spec;
  int exit_code = 0;
  if (!MakeSpec(f, spec, exit_code)) return exit_code;
  auto input = dec::LoadRawInput(spec);
  if (!input.ok()) return Fail(input.status());
  dec::OutputOptions options =
      MakeOutputOptions(f, spec.pt_path, dec::TscClockFromConfig(input->config));
  dec::TimeFilterSink* window = nullptr;
  auto inner = WithTimeFilter(f, make_sink(*input->image, stdout, options), window, exit_code);
  if (!inner) return exit_code;
  auto sink =
      std::make_unique<dec::ProgressSink>(std::move(inner), stderr, isatty(STDERR_FILENO) == 1,
                                          input->trace.bytes().size(), dec::MonotonicMs);
  auto totals = spec.bts
                    ? dec::DecodeBts(input->trace.bytes(), *input->image, *sink)
                    : dec::DecodeTrace(input->trace.bytes(), input->config, *input->image, *sink);
  if (!totals.ok()) return Fail(totals.status());
  return CheckNotEmpty(spec.pt_path, *totals, window);
}

int RunPackets(const DecodeFlags& f) {
  if (!f.bts.empty()) return UsageError("packets decodes Intel PT (--pt), not BTS");
  if (!f.container.empty()) {
    if (!f.pt.empty()) return UsageError("give either a trace.pt FILE or --pt FILE, not both");
    dec::ContainerOptions container;
    if (int exit_code = 0; !MakeContainerOptions(f, container, exit_code)) return exit_code;
    dec::OutputOptions options;
    options.json = f.json;
    absl::Status status = dec::DumpContainerPackets(f.container, container, stdout, options);
    if (!status.ok()) return Fail(status);
    return 0;
  }
  dec::RawInputSpec spec;
  int exit_code = 0;
  if (!MakeSpec(f, spec, exit_code)) return exit_code;
  auto input = dec::LoadRawInput(spec);
  if (!input.ok()) return Fail(input.status());
  dec::OutputOptions options;
  options.json = f.json;
  absl::Status status = dec::DumpPackets(input->trace.bytes(), input->config, stdout, options);
  if (!status.ok()) return Fail(status);
  return 0;
}

// Rows of `stats` in the default report.
constexpr size_t kReportFunctions = 20;

// `ptdecode FILE` (or `ptdecode report FILE`): the info summary, then the top functions of
// stats and every loss and decode error.
int RunReport(const DecodeFlags& f) {
  bool perf_data = false;
  auto info = Info(f.container, perf_data);
  if (!info.ok()) return Fail(info.status());
  std::string text = InfoText(*info, perf_data) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  DecodeFlags stats = f;
  stats.top_functions = kReportFunctions;
  stats.list_problems = true;
  return RunContainer(stats, dec::MakeStatsSink);
}

// `ptdecode diff`: the flags, then loads each side's runs and compares them (decoder/diff.h).
struct DiffFlags {
  std::vector<std::string> sides;  // positional BASE NEW
  std::vector<std::string> base, now;
  std::string sysroot;
  std::string metric = "self";
  std::string format = "text";
  std::string color = "auto";
  std::string group_by = "function";
  std::string limits;  // --limits FILE
  bool exclude_startup = false;
  std::string only_under;
  bool min_instructions_given = false;
  dec::DiffOptions options;
  double fail_total = -1, fail_function = -1;
};

constexpr int kExitRegression = 3;
int RunDiff(DiffFlags& f) {
  if (f.sides.size() == 2) {
    f.base.insert(f.base.begin(), f.sides[0]);
    f.now.insert(f.now.begin(), f.sides[1]);
  } else if (!f.sides.empty()) {
    return UsageError("diff takes BASE and NEW, or --base and --new options");
  }
  if (f.base.empty() || f.now.empty()) {
    return UsageError("diff needs a BASE and a NEW run (trace.pt or stats --json document)");
  }
  f.options.metric = f.metric == "inclusive" ? dec::DiffMetric::kInclusive
                     : f.metric == "calls"   ? dec::DiffMetric::kCalls
                     : f.metric == "time"    ? dec::DiffMetric::kTime
                     : f.metric == "ipc"     ? dec::DiffMetric::kIpc
                                             : dec::DiffMetric::kSelf;
  f.options.group_by = f.group_by == "image"         ? dec::DiffGroup::kImage
                       : f.group_by == "source-file" ? dec::DiffGroup::kSourceFile
                                                     : dec::DiffGroup::kFunction;
  dec::ProfileSinkOptions extra;
  extra.timing =
      f.options.metric == dec::DiffMetric::kTime || f.options.metric == dec::DiffMetric::kIpc;
  extra.source_files = f.options.group_by == dec::DiffGroup::kSourceFile;
  if (f.exclude_startup && !f.only_under.empty()) {
    return UsageError("--exclude-startup is --only-under main: give one of them");
  }
  extra.only_under = f.exclude_startup ? "main" : f.only_under;
  if (f.fail_total >= 0) f.options.fail_total_pct = f.fail_total;
  if (f.fail_function >= 0) f.options.fail_function_pct = f.fail_function;
  if (!f.limits.empty()) {
    std::vector<std::string> given;
    if (f.fail_total >= 0) given.push_back("fail_total");
    if (f.fail_function >= 0) given.push_back("fail_function");
    if (f.min_instructions_given) given.push_back("min_instructions");
    absl::Status limits = dec::ReadDiffLimits(f.limits, given, f.options);
    if (absl::IsInvalidArgument(limits)) return UsageError(std::string(limits.message()));
    if (!limits.ok()) return Fail(limits);
  }
  dec::ContainerOptions container;
  container.sysroot = f.sysroot;
  if (f.format == "folded") {
    auto folded = dec::DiffFolded(f.base, f.now, container, extra,
                                  f.options.metric == dec::DiffMetric::kTime
                                      ? dec::FoldedWeight::kTime
                                      : dec::FoldedWeight::kInstructions);
    if (!folded.ok()) return Fail(folded.status());
    if (std::fwrite(folded->data(), 1, folded->size(), stdout) != folded->size() ||
        std::fflush(stdout)) {
      return Fail(absl::DataLossError("write error on output"));
    }
    return 0;
  }
  std::vector<dec::Profile> base, now;
  for (auto [paths, runs] : {std::pair{&f.base, &base}, std::pair{&f.now, &now}}) {
    for (const std::string& path : *paths) {
      auto profile = dec::LoadProfile(path, container, extra);
      if (!profile.ok()) return Fail(profile.status());
      runs->push_back(std::move(*profile));
    }
  }
  auto diff = dec::DiffProfiles(base, now, f.options);
  if (!diff.ok()) {
    // No function in common is a usage error; a run without the timing the metric needs, a
    // runtime one.
    if (diff.status().code() != absl::StatusCode::kInvalidArgument) return Fail(diff.status());
    std::fprintf(stderr, "ptdecode: %s\n", std::string(diff.status().message()).c_str());
    return kExitUsage;
  }
  const bool color = dec::DiffColor(f.color, ::isatty(STDOUT_FILENO) == 1, std::getenv("NO_COLOR"),
                                    std::getenv("TERM"));
  std::string text = f.format == "json"       ? dec::FormatDiffJson(*diff, f.options)
                     : f.format == "markdown" ? dec::FormatDiffMarkdown(*diff, f.options)
                     : f.format == "junit"    ? dec::FormatDiffJunit(*diff, f.options)
                                              : dec::FormatDiffText(*diff, f.options, color);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout)) {
    return Fail(absl::DataLossError("write error on output"));
  }
  return diff->regression() ? kExitRegression : 0;
}

void AddDiffCommand(CLI::App& app, DiffFlags& f, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "Compare per-function instruction counts of two builds (trace.pt or stats --json); exit 3 "
      "on a regression beyond --fail-total/--fail-function");
  cmd->add_option("BASE NEW", f.sides, "The base run and the new run")->expected(0, 2);
  cmd->add_option("--base", f.base, "A run of the base build (repeatable: medians of the runs)");
  cmd->add_option("--new", f.now, "A run of the new build (repeatable)");
  cmd->add_option("--metric", f.metric,
                  "self (default): instructions in the function; inclusive: with its callees; "
                  "calls; time: self time in ns (TSC); ipc: instructions per cycle (CYC)")
      ->check(CLI::IsMember({"self", "inclusive", "calls", "time", "ipc"}));
  cmd->add_option("--group-by", f.group_by,
                  "Rows: function (default), image (its functions summed) or source-file (by "
                  "the DWARF file of each function; trace.pt input)")
      ->check(CLI::IsMember({"function", "image", "source-file"}));
  cmd->add_option("--alpha", f.options.alpha,
                  "time, ipc: a change counts only when Mann-Whitney U p < ALPHA (0.05)")
      ->type_name("ALPHA")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--fail-total", f.fail_total,
                  "Exit 3 when the total grew by more than PCT percent")
      ->type_name("PCT")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fail-function", f.fail_function,
                  "Exit 3 when a function grew by more than PCT percent")
      ->type_name("PCT")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-instructions", f.options.min_instructions,
                  "--fail-function checks only functions with at least N instructions")
      ->type_name("N")
      ->each([&f](const std::string&) { f.min_instructions_given = true; });
  cmd->add_flag("--exclude-startup", f.exclude_startup,
                "Count only what runs under main(): not the start-up before it (dynamic loader, "
                "libc init, which depend on the program's path and environment) nor exit");
  cmd->add_option("--only-under", f.only_under,
                  "Count only what runs while FUNCTION has a frame (e.g. the benchmark's)")
      ->type_name("FUNCTION");
  cmd->add_option("--limits", f.limits,
                  "JSON limits file (schema ptkit-diff-limits/1): per-function soft (%) and hard "
                  "(absolute) limits, defaults; the flags above win over its defaults")
      ->type_name("FILE");
  cmd->add_option("--allow", f.options.allow, "Accept the change of FUNCTION (repeatable)")
      ->type_name("FUNCTION")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_flag("--fail-on-loss", f.options.fail_on_loss,
                "Exit 3 when a run had decode errors or lost trace (incomplete counts)");
  cmd->add_option("--format", f.format,
                  "text (default), markdown, json (schema ptkit-diff/1), junit (JUnit XML, a "
                  "test case per function checked) or folded (difffolded.pl's 'stack BASE NEW' "
                  "lines for flamegraph.pl; no limits)")
      ->check(CLI::IsMember({"text", "markdown", "json", "junit", "folded"}));
  cmd->add_option("--color", f.color,
                  "Colour the text table: auto (on a terminal, unless NO_COLOR is set; the "
                  "default), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->add_option("--sysroot", f.sysroot,
                  "Look for the recordings' mapped files and their debug files under DIR");
  cmd->callback([&] { exit_code = RunDiff(f); });
}

bool IsRegularFile(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// `export --to trace.pt`: the recording (a perf.data, or a trace.pt) as one container.
int RunExportContainer(const std::string& input, const std::string& output,
                       const dec::ContainerExportOptions& options) {
  auto r = dec::OpenRecording(input, dec::RecordingOptions{});
  if (!r.ok()) return Fail(r.status());
  for (const std::string& w : r->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  auto done = dec::ExportContainer(*r, output, options);
  if (!done.ok()) return Fail(done.status());
  for (const std::string& w : done->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  std::fprintf(stderr, "ptdecode: wrote %s: %s, %s (%s), %s, %s (%s archived); %s\n",
               output.c_str(), dec::Counted(done->sideband_records, "sideband record").c_str(),
               dec::Counted(done->aux_records, "AUX record").c_str(),
               dec::Counted(done->trace_bytes, "trace byte").c_str(),
               dec::Counted(done->loss_records, "loss record").c_str(),
               dec::Counted(done->code_records, "code record").c_str(),
               dec::Counted(done->archived_bytes, "byte").c_str(),
               dec::Counted(done->file_bytes, "byte").c_str());
  return 0;
}

int RunExport(const std::string& to, const std::string& input, const std::string& output,
              const dec::PerfDataExportOptions& options,
              const dec::ContainerExportOptions& container_options) {
  if (to == "trace.pt") return RunExportContainer(input, output, container_options);
  auto done = dec::ExportPerfData(input, output, options);
  if (!done.ok()) return Fail(done.status());
  for (const std::string& w : done->warnings) std::fprintf(stderr, "ptdecode: %s\n", w.c_str());
  std::fprintf(stderr, "ptdecode: wrote %s: %s, %s, %s (%s), %s\n", output.c_str(),
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
                 done->debug_dir.c_str(), output.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ptdecode: decode Intel PT recordings (trace.pt, perf.data) into control flow.\n"
      "`ptdecode FILE` (no sub-command) is `ptdecode report FILE`. Exit status: 0 success, 1 "
      "runtime error or empty result (one line says why), 2 usage error, 3 (diff) regression.",
      "ptdecode"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ptdecode " PTKIT_VERSION);
  int exit_code = 0;

  std::string info_path;
  bool info_json = false;
  CLI::App* info = app.add_subcommand(
      "info", "Show metadata, record counts and bytes, streams, loss and damage of a trace.pt");
  info->add_option("FILE", info_path, "trace.pt or perf.data file")->required();
  bool info_decode = false;
  info->add_flag("--json", info_json, "Print JSON (schema in ptdecode(1))");
  info->add_flag("--decode", info_decode,
                 "Also decode every stream and summarise instructions, errors and loss");
  info->callback([&] { exit_code = RunInfo(info_path, info_json, info_decode); });

  struct Command {
    const char* name;
    const char* help;
    SinkFactory factory;
  };
  const std::vector<Command> commands = {
      {"insn",
       "One line per instruction: time, address, symbol+offset, --disasm; events, gaps, errors",
       dec::MakeInsnSink},
      {"branches", "One line per taken branch: from, to, kind", dec::MakeBranchesSink},
      {"calls", "Call/return tree with each call's instruction count (and TSC ticks)",
       dec::MakeCallsSink},
      {"stats", "Per function and per image: instructions (self, inclusive), calls; totals",
       dec::MakeStatsSink},
      {"folded",
       "Folded stacks weighted by instructions or time (flamegraph.pl, inferno, speedscope)",
       dec::MakeFoldedSink},
      {"timeline", "Chrome trace-event JSON (Perfetto UI, speedscope), one slice per stack frame",
       dec::MakeTimelineSink},
  };
  std::vector<DecodeFlags> flags(commands.size() + 1);
  for (size_t i = 0; i < commands.size(); ++i) {
    const Command& c = commands[i];
    CLI::App* cmd = app.add_subcommand(c.name, c.help);
    bool json_flag = std::string(c.name) != "folded" && std::string(c.name) != "timeline";
    AddDecodeFlags(cmd, flags[i], json_flag);
    if (std::string(c.name) == "insn") {
      cmd->add_flag("--disasm", flags[i].disasm, "Disassemble each instruction (Zydis, Intel)");
    }
    if (std::string(c.name) == "insn" || std::string(c.name) == "branches" ||
        std::string(c.name) == "calls") {
      cmd->add_flag("--srcline", flags[i].srcline,
                    "Add file:line of each address (DWARF line tables)");
    }
    if (std::string(c.name) == "folded") {
      cmd->add_option("--weight", flags[i].weight,
                      "insn: weigh stacks by instructions (default); time: by TSC ticks")
          ->check(CLI::IsMember({"insn", "time"}));
    }
    cmd->callback([&, i] { exit_code = RunDecode(flags[i], commands[i].factory); });
  }
  CLI::App* packets = app.add_subcommand(
      "packets",
      "Packet dump with offsets, like ptdump; trace.pt: each stream with its AUX offsets and loss");
  AddDecodeFlags(packets, flags.back(), true);
  packets->callback([&] { exit_code = RunPackets(flags.back()); });

  DecodeFlags report_flags;
  CLI::App* report = app.add_subcommand(
      "report",
      "The default (`ptdecode FILE`): info summary, top 20 functions of stats, every loss and "
      "error");
  report->add_option("FILE", report_flags.container, "trace.pt or perf.data recording")->required();
  AddContainerFlags(report, report_flags);
  report->callback([&] { exit_code = RunReport(report_flags); });

  std::string export_input, export_output, export_to;
  dec::PerfDataExportOptions export_options;
  CLI::App* exp = app.add_subcommand(
      "export",
      "Write the recording as a perf.data that perf script / perf report decode (--to "
      "perf.data), or as one trace.pt container (--to trace.pt: a perf.data kept as one "
      "compressed, crash-safe ptkit file)");
  exp->add_option("--to", export_to, "Output format: perf.data or trace.pt")
      ->required()
      ->check(CLI::IsMember({"perf.data", "trace.pt"}));
  exp->add_option("FILE", export_input, "trace.pt or perf.data recording")->required();
  exp->add_option("-o,--output", export_output, "The file to write (overwritten)")->required();
  exp->add_option("--debug-dir", export_options.debug_dir,
                  "(perf.data) Build-id cache for captured code (vdso, --archive); default "
                  "OUTPUT.debug");
  dec::ContainerExportOptions container_options;
  exp->add_flag("--archive", container_options.archive,
                "(trace.pt) Also copy in the code of every mapped file (of each process's last "
                "program), so the trace.pt decodes without the files");
  exp->add_option("--sysroot,--symfs", container_options.sysroot,
                  "(trace.pt --archive) Read the mapped files under DIR");
  exp->callback([&] {
    exit_code =
        RunExport(export_to, export_input, export_output, export_options, container_options);
  });
  DiffFlags diff_flags;
  AddDiffCommand(app, diff_flags, exit_code);

  // `ptdecode FILE ...` is `ptdecode report FILE ...`, as `perf script` needs no sub-command;
  // any other first word that is no sub-command is named as such.
  std::vector<char*> args(argv, argv + argc);
  if (argc == 1) {
    return UsageError(
        "give a trace.pt FILE for the default report, or a sub-command and its input");
  }
  if (argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub :
         std::as_const(app).get_subcommands([](const CLI::App*) { return true; })) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known && IsRegularFile(argv[1])) {
      static char kReport[] = "report";
      args.insert(args.begin() + 1, kReport);
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
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ptdecode: %s (see ptdecode --help)\n", e.what());
    return kExitUsage;
  }
  return exit_code;
}
