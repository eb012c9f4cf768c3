// ptdecode's command-line flags (man/ptdecode.1) and their translation into the decoder's
// options. Each sub-command's flags are registered on its CLI11 sub-command by an Add*Flags
// function and held as given in a *Flags struct; the *FromFlags functions turn them into what
// the decoder takes. Their errors are usage errors (the message says what is wrong; ptdecode
// exits 2), in the order ptdecode has always checked them.
#ifndef PTKIT_DECODER_CLI_OPTIONS_H_
#define PTKIT_DECODER_CLI_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/container_export.h"
#include "decoder/container_input.h"
#include "decoder/diff.h"
#include "decoder/perf_data_export.h"
#include "decoder/raw_input.h"
#include "decoder/samples.h"
#include "decoder/sinks.h"
#include "decoder/tsc_clock.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace ptkit::decoder {

// The flags of the decoding sub-commands (insn, branches, calls, stats, folded, timeline,
// packets, report), as given.
struct DecodeFlags {
  std::string container;  // positional FILE: a trace.pt or perf.data recording
  std::string pt;         // --pt: a raw Intel PT trace
  std::string bts;        // --bts: raw intel_bts AUX data
  std::vector<std::string> elfs, raws, pages;
  std::string sysroot;
  std::string buildid_dir;
  std::string cpu;       // FAMILY/MODEL[/STEPPING] (errata) or, for a recording, N (a filter)
  std::string time;      // FROM,TO in TSC units
  std::string tid;       // recording: a thread id
  std::string snapshot;  // recording: a snapshot number
  // Given or not (a recording's metadata says them otherwise).
  std::optional<unsigned> mtc_freq, nom_freq;
  std::optional<uint32_t> cpuid_eax, cpuid_ebx;
  bool json = false;
  bool disasm = false;           // insn
  bool srcline = false;          // insn, branches, calls
  std::string weight = "insn";   // folded: insn or time
  uint32_t max_depth = 1024;     // folded: frames written of a stack (0: all)
  size_t top_functions = 0;      // stats: rows shown (0: all); the default report sets it
  bool list_problems = false;    // stats: list every loss and error (the default report)
  std::string only_under;        // stats: --only-under FUNCTION; --exclude-startup: "main"
  bool exclude_startup = false;  // stats: --exclude-startup was given (for messages)
  bool samples = false;          // stats, folded: the sampled profile of the AUX samples
};

// Which of the optional flags a decoding sub-command has, besides those all of them have.
struct DecodeFlagSet {
  bool json = true;         // --json
  bool disasm = false;      // --disasm
  bool srcline = false;     // --srcline
  bool weight = false;      // --weight insn|time
  bool max_depth = false;   // --max-depth N (folded)
  bool only_under = false;  // --only-under FUNCTION, --exclude-startup (stats)
  bool samples = false;     // --samples (stats, folded)
  // --time, the timing flags (--mtc-freq, --nom-freq, --cpuid-0x15.*), --decoder and -j: all
  // but packets, which decodes no instruction (sweep 40b M2: it took them and did nothing).
  bool decode = true;
};

// Registers --sysroot/--symfs, --buildid-dir, --cpu, --tid and --snapshot: where a
// recording's files are and which of its streams to decode.
void AddContainerFlags(CLI::App& cmd, DecodeFlags& flags);
// Registers FILE, the container flags, the raw-trace flags (--pt, --bts, --elf, --raw,
// --pages), --time, the timing flags (--mtc-freq, ...), --decoder and those `set` asks for.
// --decoder takes effect when parsed (SetBlockDecoderImpl), as -j/--jobs and the hidden
// --chunk-size (SetParallelOptions).
void AddDecodeFlags(CLI::App& cmd, DecodeFlags& flags, const DecodeFlagSet& set);
// --decoder and -j (and the tests' --chunk-size, --chunk-stats): process-wide settings of
// every decode (AddDecodeFlags adds them; report, diff and info --decode decode too).
void AddDecoderFlags(CLI::App& cmd);

// A check for a number option that may not be negative: CLI11 2.1 reads "-5" into an unsigned
// as 2^64-5 (a --min-instructions of -5 turned diff's gate off: sweep 40b M1), and its own
// NonNegativeNumber says so with a 300-digit range.
CLI::Validator NotNegative();

// The raw-trace input (--pt or --bts with --elf, --raw, --pages, --cpu FAMILY/MODEL and the
// timing flags). Errors: both or neither of --pt and --bts; a recording's filters (--tid,
// --snapshot, --cpu N); a bad --elf, --raw or --cpu.
absl::StatusOr<RawInputSpec> RawInputSpecFromFlags(const DecodeFlags& flags);

// Where perf keeps its build-id cache: $PERF_BUILDID_DIR, else $HOME/.debug, else "" (the
// two variables' values, null when unset).
std::string DefaultBuildIdDir(const char* perf_buildid_dir, const char* home);

// `stats --samples` (`stats`) or `folded --samples`: the sampled profile PrintSamples makes
// of a recording's AUX samples. Errors: a raw trace (--pt, --bts), and the flags that select
// or weigh decoded instructions (--time, --snapshot, --weight time, --only-under,
// --exclude-startup), which samples do not have.
absl::StatusOr<SamplesOptions> SampledProfileFromFlags(const DecodeFlags& flags, bool stats);

// The options of decoding a recording: --sysroot, --buildid-dir (`default_buildid_dir`
// without it), the filters --cpu N, --tid, --snapshot, and the configuration --cpu
// FAMILY/MODEL and the timing flags override. Errors: the raw-image flags (--elf, --raw,
// --pages); a filter that is no number in range.
absl::StatusOr<ContainerOptions> ContainerOptionsFromFlags(const DecodeFlags& flags,
                                                           const std::string& default_buildid_dir);

// --time FROM,TO: the window [from, to) of TSC values.
struct TimeWindow {
  uint64_t from = 0;
  uint64_t to = 0;
};
// The --time window; nullopt without --time. Errors: no comma, a bound that is no number,
// FROM not less than TO.
absl::StatusOr<std::optional<TimeWindow>> TimeWindowFromFlags(const DecodeFlags& flags);

// The output options the flags ask for; `clock` turns TSC into time, `trace_name` names the
// input in the output.
OutputOptions OutputOptionsFromFlags(const DecodeFlags& flags, const std::string& trace_name,
                                     const TscClock& clock);

// `info`.
struct InfoFlags {
  std::string path;
  bool json = false;
  bool decode = false;
  std::string sysroot, buildid_dir;  // where --decode finds the mapped files, as the decodes
};
void AddInfoFlags(CLI::App& cmd, InfoFlags& flags);

// `export`.
struct ExportFlags {
  std::string input, output;
  std::string to;  // perf.data or trace.pt
  PerfDataExportOptions perf_data;
  ContainerExportOptions container;
};
void AddExportFlags(CLI::App& cmd, ExportFlags& flags);
enum class ExportFormat { kPerfData, kContainer };
// What --to names.
ExportFormat ExportFormatFromFlags(const ExportFlags& flags);

// `diff`, as given.
struct DiffFlags {
  std::vector<std::string> sides;  // positional BASE NEW
  std::vector<std::string> base, now;
  std::string sysroot;
  std::string buildid_dir;  // --buildid-dir ("": the default DiffPlanFromFlags is given)
  std::string metric = "self";
  std::string format = "text";
  std::string color = "auto";
  std::string group_by = "function";
  std::string limits;            // --limits FILE
  bool exclude_startup = false;  // given (it is the default)
  bool include_startup = false;
  std::string only_under;
  bool min_instructions_given = false;
  DiffOptions options;
  double fail_total = -1, fail_function = -1;
};
void AddDiffFlags(CLI::App& cmd, DiffFlags& flags);

enum class DiffFormat { kText, kMarkdown, kJson, kJunit, kFolded };

// What `diff` does, from its flags.
struct DiffPlan {
  std::vector<std::string> base, now;  // the runs of each side
  DiffOptions options;                 // the limits file not read yet
  ProfileSinkOptions profile;          // what each run's profile needs
  ContainerOptions container;
  DiffFormat format = DiffFormat::kText;
  std::string limits;                     // --limits FILE ("" none): for ReadDiffLimits
  std::vector<std::string> limits_given;  // the limits the flags gave (they win over the file)
};
// Only what runs under main counts unless --include-startup or --only-under says otherwise.
// The recordings' files are looked for in `default_buildid_dir` (DefaultBuildIdDir) unless
// --buildid-dir names another, as by the other sub-commands. Errors: sides other than BASE NEW
// or --base/--new; a side without a run; --exclude-startup with --only-under or
// --include-startup.
absl::StatusOr<DiffPlan> DiffPlanFromFlags(const DiffFlags& flags,
                                           const std::string& default_buildid_dir);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CLI_OPTIONS_H_
