#include "decoder/cli_options.h"

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/parallel_decode.h"
#include "decoder/trace_config.h"
#include "fmt/format.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

// --cpu N (a stream filter) rather than FAMILY/MODEL[/STEPPING] (the recording CPU).
bool IsCpuFilter(const std::string& cpu) {
  return !cpu.empty() && cpu.find('/') == std::string::npos;
}

// The recording CPU (`cpu`: FAMILY/MODEL[/STEPPING] or "") and the timing flags given.
absl::StatusOr<TraceConfigOverride> TraceConfigFromFlags(const DecodeFlags& f,
                                                         const std::string& cpu) {
  TraceConfigOverride config;
  if (!cpu.empty()) {
    auto parsed = ParseCpu(cpu);
    if (!parsed.ok()) return parsed.status();
    config.cpu = *parsed;
  }
  if (f.mtc_freq) config.mtc_freq = static_cast<uint8_t>(*f.mtc_freq);
  if (f.nom_freq) config.nom_freq = static_cast<uint8_t>(*f.nom_freq);
  config.cpuid_0x15_eax = f.cpuid_eax;
  config.cpuid_0x15_ebx = f.cpuid_ebx;
  return config;
}

// --sysroot (--symfs) DIR and --buildid-dir DIR: where a decode finds the mapped files, as
// perf does; `when` ("(--decode) ") starts their help.
void AddFileSearchFlags(CLI::App& cmd, std::string& sysroot, std::string& buildid_dir,
                        const std::string& when = "") {
  cmd.add_option("--sysroot,--symfs", sysroot,
                 when + "Look for the recording's mapped files and their debug files under DIR")
      ->type_name("DIR");
  cmd.add_option("--buildid-dir", buildid_dir,
                 when +
                     "perf's build-id cache, where a mapped file not found is looked for by "
                     "build-id (default: $PERF_BUILDID_DIR, else ~/.debug)")
      ->type_name("DIR");
}

}  // namespace

void AddContainerFlags(CLI::App& cmd, DecodeFlags& f) {
  AddFileSearchFlags(cmd, f.sysroot, f.buildid_dir);
  cmd.add_option("--cpu", f.cpu,
                 "FAMILY/MODEL[/STEPPING]: the recording CPU (errata); N: only the stream of "
                 "CPU N (trace.pt)");
  cmd.add_option("--tid", f.tid,
                 "Only what thread TID ran (trace.pt): its thread streams, and the stretches "
                 "of CPU streams while it was scheduled")
      ->type_name("TID");
  cmd.add_option("--snapshot", f.snapshot, "Only snapshot K (0, 1, ...) of each stream (trace.pt)")
      ->type_name("K");
}

CLI::Validator NotNegative() {
  return CLI::Validator(
      [](const std::string& value) {
        // (After blanks too: CLI11 reads " -5" as -5; a review.)
        const size_t first = value.find_first_not_of(" \t");
        return first != std::string::npos && value[first] == '-'
                   ? "expected a number of 0 or more, not " + value
                   : std::string();
      },
      "", "NotNegative");
}

void AddDecoderFlags(CLI::App& cmd) {
  cmd.add_option_function<std::string>(
         "--decoder",
         [](const std::string& name) {
           SetBlockDecoderImpl(name == "libipt"        ? BlockDecoderImpl::kLibipt
                               : name == "fast-blocks" ? BlockDecoderImpl::kFastNoWalk
                                                       : BlockDecoderImpl::kFast);
         },
         "Decoder: fast (default; a cached graph of the code and its own packet loop, "
         "libipt's answer exactly, libipt for traces with TSX, PTWRITE or packet errors; "
         "stats, calls, folded, timeline and report walk whole blocks of the graph where the "
         "trace allows), fast-blocks (fast without that walk, for comparisons) or libipt "
         "(pt_blk_*, and pt_insn_* for insn and branches, always)")
      ->check(CLI::IsMember({"fast", "fast-blocks", "libipt"}));
  cmd.add_option_function<unsigned>(
         "-j,--jobs",
         [](unsigned jobs) {
           ParallelOptions options = GetParallelOptions();
           options.jobs = jobs;
           options.jobs_for_records = true;
           SetParallelOptions(options);
         },
         "Decode with N threads (default: the CPUs ptdecode may run on, at most 16, for stats, "
         "folded and calls; 1 for the rest). With the fast decoder only stats, folded and calls "
         "(their chunks summarised on each thread); other outputs decode on one thread, which "
         "outruns merging their records. Each stream is split at PSBs and merged in trace order, "
         "exactly as one "
         "thread would")
      ->type_name("N")
      ->check(CLI::Range(1u, 1024u));
  // Tests only: the chunk size of -j, so that small traces make many chunks, and what each
  // parallel decode did (ParallelStats on stderr).
  cmd.add_option_function<uint64_t>(
         "--chunk-size",
         [](uint64_t bytes) {
           ParallelOptions options = GetParallelOptions();
           options.chunk_bytes = bytes;
           options.summary_chunk_bytes = bytes;
           SetParallelOptions(options);
         },
         "")
      ->group("")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd.add_flag_callback(
         "--chunk-stats",
         [] {
           ParallelOptions options = GetParallelOptions();
           options.print_stats = true;
           SetParallelOptions(options);
         },
         "")
      ->group("");
}

void AddDecodeFlags(CLI::App& cmd, DecodeFlags& f, const DecodeFlagSet& set) {
  cmd.add_option("FILE", f.container,
                 "trace.pt or perf.data recording (or use --pt for a raw trace)");
  AddContainerFlags(cmd, f);
  cmd.add_option("--pt", f.pt, "Raw Intel PT trace file (ptxed/perf AUX bytes)");
  cmd.add_option("--bts", f.bts, "Raw intel_bts AUX data (24-byte branch records)");
  cmd.add_option("--elf", f.elfs,
                 "ELF image FILE[:BASE] (BASE: load address of the lowest "
                 "executable segment; repeat the option for more images)")
      ->allow_extra_args(false)
      ->take_all();
  cmd.add_option("--raw", f.raws, "Raw image FILE[:FROM[-TO]]:ADDRESS (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  cmd.add_option("--pages", f.pages,
                 "Page dump DIR (DIR/data.addr + DIR/data.dump) or ADDR_FILE,DUMP_FILE "
                 "(repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  if (set.decode) {
    cmd.add_option("--time", f.time,
                   "FROM,TO: only what ran while the trace's time (TSC) was in [FROM, TO)");
    cmd.add_option("--mtc-freq", f.mtc_freq, "IA32_RTIT_CTL.MTCFreq")->check(CLI::Range(0, 15));
    cmd.add_option("--nom-freq", f.nom_freq, "Nominal frequency (MSR_PLATFORM_INFO[15:8])")
        ->check(CLI::Range(0, 255));
    cmd.add_option("--cpuid-0x15.eax", f.cpuid_eax, "CPUID leaf 0x15 eax (CTC ratio denominator)");
    cmd.add_option("--cpuid-0x15.ebx", f.cpuid_ebx, "CPUID leaf 0x15 ebx (CTC ratio numerator)");
  }
  if (set.json) cmd.add_flag("--json", f.json, "Machine-readable output (see ptdecode(1))");
  if (set.decode) AddDecoderFlags(cmd);
  if (set.disasm) {
    cmd.add_flag("--disasm", f.disasm, "Disassemble each instruction (Zydis, Intel)");
  }
  if (set.srcline) {
    cmd.add_flag("--srcline", f.srcline, "Add file:line of each address (DWARF line tables)");
  }
  if (set.weight) {
    cmd.add_option("--weight", f.weight,
                   "insn: weigh stacks by instructions (default); time: by TSC ticks")
        ->check(CLI::IsMember({"insn", "time"}));
  }
  if (set.max_depth) {
    cmd.add_option("--max-depth", f.max_depth,
                   "Write at most N frames of a stack: deeper frames are one frame "
                   "\"[deeper frames]\", then the function on top (default 1024; 0: all)");
  }
  if (set.samples) {
    cmd.add_flag("--samples", f.samples,
                 "A sampled profile of the AUX samples (ptrecord --aux-sample), each sample's "
                 "stack rebuilt from its trace snippet, instead of decoding the trace");
  }
  if (set.only_under) {
    CLI::Option* under = cmd.add_option("--only-under", f.only_under,
                                        "Count only what runs while FUNCTION has a frame");
    under->type_name("FUNCTION");
    cmd.add_flag_callback(
           "--exclude-startup",
           [&f] {
             f.only_under = "main";
             f.exclude_startup = true;
           },
           "--only-under main: not the start-up before main nor exit (as diff counts; Go: "
           "main.main, then all its process runs)")
        ->excludes(under);
  }
}

absl::StatusOr<RawInputSpec> RawInputSpecFromFlags(const DecodeFlags& f) {
  if (!f.pt.empty() && !f.bts.empty()) {
    return absl::InvalidArgumentError("give either --pt or --bts, not both");
  }
  if (f.pt.empty() && f.bts.empty()) {
    return absl::InvalidArgumentError("no input: give a trace.pt FILE, --pt FILE or --bts FILE");
  }
  if (!f.tid.empty() || !f.snapshot.empty() || IsCpuFilter(f.cpu)) {
    return absl::InvalidArgumentError(
        "--tid, --snapshot and --cpu N filter trace.pt streams; a raw trace has one (the "
        "recording CPU is --cpu FAMILY/MODEL)");
  }
  RawInputSpec spec;
  spec.pt_path = f.pt.empty() ? f.bts : f.pt;
  spec.bts = !f.bts.empty();
  for (const std::string& s : f.elfs) {
    auto elf = ParseElfSpec(s);
    if (!elf.ok()) return elf.status();
    spec.elfs.push_back(*elf);
  }
  for (const std::string& s : f.raws) {
    auto raw = ParseRawSpec(s);
    if (!raw.ok()) return raw.status();
    spec.raws.push_back(*raw);
  }
  for (const std::string& s : f.pages) spec.page_dumps.push_back(ParsePageDumpSpec(s));
  auto config = TraceConfigFromFlags(f, f.cpu);
  if (!config.ok()) return config.status();
  spec.config = config->Over(TraceConfig{});  // a raw trace has no metadata
  return spec;
}

absl::StatusOr<SamplesOptions> SampledProfileFromFlags(const DecodeFlags& f, bool stats) {
  if (f.container.empty() || !f.pt.empty() || !f.bts.empty()) {
    return absl::InvalidArgumentError(
        "--samples profiles the AUX samples of a trace.pt FILE (ptrecord --aux-sample), not a "
        "raw trace");
  }
  for (const auto& [given, flag] :
       {std::pair{!f.time.empty(), "--time"}, std::pair{!f.snapshot.empty(), "--snapshot"},
        std::pair{f.weight != "insn", "--weight time"},
        std::pair{!f.only_under.empty(), "--only-under"}}) {
    if (given) {
      return absl::InvalidArgumentError(fmt::format(
          "{} selects or weighs decoded instructions; --samples counts samples (it takes "
          "--tid and --cpu N)",
          f.exclude_startup && flag == std::string_view("--only-under") ? "--exclude-startup"
                                                                        : flag));
    }
  }
  SamplesOptions options;
  options.json = f.json;
  options.stats = stats;
  options.folded = !stats;
  return options;
}

std::string DefaultBuildIdDir(const char* perf_buildid_dir, const char* home) {
  if (perf_buildid_dir != nullptr && *perf_buildid_dir != '\0') return perf_buildid_dir;
  if (home != nullptr && *home != '\0') return std::string(home) + "/.debug";
  return "";
}

namespace {

// A directory option given (not "") that names no directory: a usage error naming it (sweep
// 29b U3: --sysroot /does/not/exist was taken, and every file was then "not found").
absl::Status CheckDirectory(std::string_view option, const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("{} {}: {}", option, dir,
                  std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory"));
}

}  // namespace

absl::StatusOr<ContainerOptions> ContainerOptionsFromFlags(const DecodeFlags& f,
                                                           const std::string& default_buildid_dir) {
  if (!f.elfs.empty() || !f.raws.empty() || !f.pages.empty()) {
    return absl::InvalidArgumentError(
        "--elf, --raw and --pages apply to raw traces (--pt), not to trace.pt");
  }
  ContainerOptions options;
  PTKIT_RETURN_IF_ERROR(CheckDirectory("--sysroot", f.sysroot));
  options.sysroot = f.sysroot;
  options.buildid_dir = f.buildid_dir.empty() ? default_buildid_dir : f.buildid_dir;
  std::string cpu = f.cpu;  // FAMILY/MODEL: the configuration's
  if (IsCpuFilter(f.cpu)) {
    auto n = ParseUint(f.cpu, 0xffffffff, "--cpu");
    if (!n.ok()) return n.status();
    options.cpu = *n;
    cpu.clear();
  }
  if (!f.tid.empty()) {
    auto tid = ParseUint(f.tid, 0xffffffff, "--tid");
    if (!tid.ok()) return tid.status();
    options.tid = static_cast<uint32_t>(*tid);
  }
  if (!f.snapshot.empty()) {
    auto n = ParseUint(f.snapshot, ~0ull, "--snapshot");
    if (!n.ok()) return n.status();
    options.snapshot = *n;
  }
  auto config = TraceConfigFromFlags(f, cpu);
  if (!config.ok()) return config.status();
  options.config = *config;
  return options;
}

absl::StatusOr<std::optional<TimeWindow>> TimeWindowFromFlags(const DecodeFlags& f) {
  if (f.time.empty()) return std::nullopt;
  size_t comma = f.time.find(',');
  if (comma == std::string::npos) {
    return absl::InvalidArgumentError("bad --time '" + f.time + "': expected FROM,TO");
  }
  auto from = ParseUint(f.time.substr(0, comma), ~0ull, "--time FROM");
  if (!from.ok()) return from.status();
  auto to = ParseUint(f.time.substr(comma + 1), ~0ull, "--time TO");
  if (!to.ok()) return to.status();
  if (*from >= *to) {
    return absl::InvalidArgumentError(fmt::format(
        "bad --time '{}': FROM must be less than TO (the window is [FROM, TO))", f.time));
  }
  return TimeWindow{*from, *to};
}

OutputOptions OutputOptionsFromFlags(const DecodeFlags& f, const std::string& trace_name,
                                     const TscClock& clock) {
  OutputOptions out;
  out.json = f.json;
  out.disasm = f.disasm;
  out.trace_name = trace_name;
  out.clock = clock;
  out.srcline = f.srcline;
  out.weight = f.weight == "time" ? FoldedWeight::kTime : FoldedWeight::kInstructions;
  out.max_depth = f.max_depth;
  out.top_functions = f.top_functions;
  out.list_problems = f.list_problems;
  out.only_under = f.only_under;
  return out;
}

void AddInfoFlags(CLI::App& cmd, InfoFlags& f) {
  cmd.add_option("FILE", f.path, "trace.pt or perf.data file")->required();
  cmd.add_flag("--json", f.json, "Print JSON (schema in ptdecode(1))");
  cmd.add_flag("--decode", f.decode,
               "Also decode every stream and summarise instructions, errors and loss");
  // As the decoding sub-commands find the mapped files (sweep 40b L5: info --decode could not).
  AddFileSearchFlags(cmd, f.sysroot, f.buildid_dir, "(--decode) ");
}

void AddExportFlags(CLI::App& cmd, ExportFlags& f) {
  cmd.add_option("--to", f.to, "Output format: perf.data or trace.pt")
      ->required()
      ->check(CLI::IsMember({"perf.data", "trace.pt"}));
  cmd.add_option("FILE", f.input, "trace.pt or perf.data recording")->required();
  cmd.add_option("-o,--output", f.output, "The file to write (overwritten)")->required();
  cmd.add_option("--debug-dir", f.perf_data.debug_dir,
                 "(perf.data) Build-id cache for captured code (vdso, --archive); default "
                 "OUTPUT.debug");
  cmd.add_flag("--archive", f.container.archive,
               "(trace.pt) Also copy in the code of every mapped file (of each process's last "
               "program), so the trace.pt decodes without the files");
  cmd.add_option("--sysroot,--symfs", f.container.sysroot,
                 "(trace.pt --archive) Read the mapped files under DIR");
  cmd.add_option("--buildid-dir", f.container.buildid_dir,
                 "(trace.pt --archive) perf's build-id cache, searched first as perf does "
                 "(default $PERF_BUILDID_DIR, else ~/.debug)");
}

ExportFormat ExportFormatFromFlags(const ExportFlags& f) {
  return f.to == "trace.pt" ? ExportFormat::kContainer : ExportFormat::kPerfData;
}

void AddDiffFlags(CLI::App& cmd, DiffFlags& f) {
  cmd.add_option("BASE NEW", f.sides, "The base run and the new run")->expected(0, 2);
  cmd.add_option("--base", f.base, "A run of the base build (repeatable: medians of the runs)");
  cmd.add_option("--new", f.now, "A run of the new build (repeatable)");
  cmd.add_option("--metric", f.metric,
                 "self (default): instructions in the function; inclusive: with its callees; "
                 "calls; time: self time in ns (TSC); ipc: instructions per cycle (CYC)")
      ->check(CLI::IsMember({"self", "inclusive", "calls", "time", "ipc"}));
  cmd.add_option("--group-by", f.group_by,
                 "Rows: function (default), image (its functions summed) or source-file (by "
                 "the DWARF file of each function)")
      ->check(CLI::IsMember({"function", "image", "source-file"}));
  cmd.add_option("--alpha", f.options.alpha,
                 "time, ipc: a change counts only when Mann-Whitney U p < ALPHA (0.05)")
      ->type_name("ALPHA")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--fail-total", f.fail_total,
                 "Exit 3 when the total grew by more than PCT percent")
      ->type_name("PCT")
      ->check(NotNegative());
  cmd.add_option("--fail-function", f.fail_function,
                 "Exit 3 when a function grew by more than PCT percent")
      ->type_name("PCT")
      ->check(NotNegative());
  cmd.add_option("--min-instructions", f.options.min_instructions,
                 "--fail-function checks only functions with at least N instructions")
      ->type_name("N")
      ->check(NotNegative())
      ->each([&f](const std::string&) { f.min_instructions_given = true; });
  cmd.add_flag("--exclude-startup", f.exclude_startup,
               "Count only what runs under main() (the default): not the start-up before it "
               "(dynamic loader, libc init, which depend on the program's path and "
               "environment) nor exit");
  cmd.add_flag("--include-startup", f.include_startup,
               "Count every instruction of the run, start-up and exit too");
  cmd.add_option("--only-under", f.only_under,
                 "Count only what runs while FUNCTION has a frame (e.g. the benchmark's), "
                 "instead of main")
      ->type_name("FUNCTION");
  cmd.add_option("--limits", f.limits,
                 "JSON limits file (schema ptkit-diff-limits/1): per-function soft (%) and hard "
                 "(absolute) limits, defaults; the flags above win over its defaults")
      ->type_name("FILE");
  // One FUNCTION per --allow, each kept (sweep 32b L2: the help said FUNCTION ...).
  cmd.add_option("--allow", f.options.allow, "Accept the change of FUNCTION (repeatable)")
      ->type_name("FUNCTION")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  cmd.add_flag("--fail-on-loss", f.options.fail_on_loss,
               "Exit 3 when a run had decode errors or lost trace (incomplete counts)");
  cmd.add_option("--format", f.format,
                 "text (default), markdown, json (schema ptkit-diff/1), junit (JUnit XML, a "
                 "test case per function checked) or folded (difffolded.pl's 'stack BASE NEW' "
                 "lines for flamegraph.pl; no limits)")
      ->check(CLI::IsMember({"text", "markdown", "json", "junit", "folded"}));
  cmd.add_option("--color", f.color,
                 "Colour the text table: auto (on a terminal, unless NO_COLOR is set; the "
                 "default), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  AddFileSearchFlags(cmd, f.sysroot, f.buildid_dir);
}

absl::StatusOr<DiffPlan> DiffPlanFromFlags(const DiffFlags& f,
                                           const std::string& default_buildid_dir) {
  DiffPlan plan;
  plan.base = f.base;
  plan.now = f.now;
  if (f.sides.size() == 2) {
    plan.base.insert(plan.base.begin(), f.sides[0]);
    plan.now.insert(plan.now.begin(), f.sides[1]);
  } else if (!f.sides.empty()) {
    return absl::InvalidArgumentError("diff takes BASE and NEW, or --base and --new options");
  }
  if (plan.base.empty() || plan.now.empty()) {
    // `--base a.pt b.pt` takes both for base runs (sweep 40b L16: not said).
    const std::string which = plan.base.empty() ? "--base" : "--new";
    return absl::InvalidArgumentError(absl::StrCat(
        "diff needs a BASE and a NEW run (trace.pt, perf.data or stats --json document)",
        f.base.size() + f.now.size() > 1 && f.sides.empty()
            ? absl::StrCat("; every file after ", which == "--new" ? "--base" : "--new",
                           " is a run of that side: give the other side with ", which, " FILE")
            : ""));
  }
  plan.options = f.options;
  plan.options.metric = f.metric == "inclusive" ? DiffMetric::kInclusive
                        : f.metric == "calls"   ? DiffMetric::kCalls
                        : f.metric == "time"    ? DiffMetric::kTime
                        : f.metric == "ipc"     ? DiffMetric::kIpc
                                                : DiffMetric::kSelf;
  plan.options.group_by = f.group_by == "image"         ? DiffGroup::kImage
                          : f.group_by == "source-file" ? DiffGroup::kSourceFile
                                                        : DiffGroup::kFunction;
  plan.profile.timing =
      plan.options.metric == DiffMetric::kTime || plan.options.metric == DiffMetric::kIpc;
  plan.profile.source_files = plan.options.group_by == DiffGroup::kSourceFile;
  if (f.exclude_startup && !f.only_under.empty()) {
    return absl::InvalidArgumentError("--exclude-startup is --only-under main: give one of them");
  }
  if (f.exclude_startup && f.include_startup) {
    return absl::InvalidArgumentError(
        "--exclude-startup and --include-startup: give one of them (excluding is the default)");
  }
  // --only-under F replaces the default, --only-under main.
  plan.profile.only_under = !f.only_under.empty() ? f.only_under : f.include_startup ? "" : "main";
  plan.options.only_under = plan.profile.only_under;
  if (f.fail_total >= 0) plan.options.fail_total_pct = f.fail_total;
  if (f.fail_function >= 0) plan.options.fail_function_pct = f.fail_function;
  plan.limits = f.limits;
  if (f.fail_total >= 0) plan.limits_given.push_back("fail_total");
  if (f.fail_function >= 0) plan.limits_given.push_back("fail_function");
  if (f.min_instructions_given) plan.limits_given.push_back("min_instructions");
  PTKIT_RETURN_IF_ERROR(CheckDirectory("--sysroot", f.sysroot));
  plan.container.sysroot = f.sysroot;
  // (It was never looked in: a base recorded before a rebuild in place was decoded with the
  // new program, 1 instruction under main, a false regression; sweep 39a F1.)
  plan.container.buildid_dir = f.buildid_dir.empty() ? default_buildid_dir : f.buildid_dir;
  plan.format = f.format == "json"       ? DiffFormat::kJson
                : f.format == "markdown" ? DiffFormat::kMarkdown
                : f.format == "junit"    ? DiffFormat::kJunit
                : f.format == "folded"   ? DiffFormat::kFolded
                                         : DiffFormat::kText;
  return plan;
}

}  // namespace ptkit::decoder
