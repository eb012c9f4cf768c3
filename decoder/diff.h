// `ptdecode diff BASE NEW`: per-function instruction and call counts of two builds compared,
// with limits for CI (exit 3 on a regression beyond them). Formats documented in
// man/ptdecode.1 (the JSON one is schema ptkit-diff/1).
#ifndef PTKIT_DECODER_DIFF_H_
#define PTKIT_DECODER_DIFF_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/container_input.h"
#include "decoder/profile.h"
#include "decoder/sinks.h"

namespace ptkit::decoder {

// What the limits check and the rows are sorted by.
enum class DiffMetric {
  kSelf,       // instructions in the function itself (the default)
  kInclusive,  // instructions while it was on the call stack
  kCalls,      // calls to it
  kTime,       // its self time in ns (TSC ticks split by instructions; needs timing)
  kIpc,        // instructions per core cycle (needs CYC packets); lower is worse
};

// The two-sided Mann-Whitney U test of samples `a` against `b` (distribution-free: no
// normality assumed; Google Benchmark's compare.py uses it too). `u` counts the pairs with
// a > b (ties count 1/2). Without ties and with at most 50 samples a side `p` is exact (the
// U distribution counted); otherwise the normal approximation with tie and continuity
// correction. Either side empty: p = 1.
struct MannWhitney {
  double u = 0;
  double p = 1;
  bool exact = false;
};
MannWhitney MannWhitneyU(std::span<const double> a, std::span<const double> b);

// What a row is.
enum class DiffGroup {
  kFunction,    // a function, by (image file name, function name)
  kImage,       // an image file, by its file name: the sum of its functions
  kSourceFile,  // a source file, by (image file name, source file name) (the DWARF file of
                // each function's first instruction; "[no line info]" for those without)
};

// A limit of the limits file (ParseDiffLimits), as gungraun's: soft in percent of the base,
// hard in the metric's own unit (instructions, calls, ns; kIpc: the least IPC allowed).
struct DiffLimit {
  std::optional<double> soft_pct;
  std::optional<double> hard;
};

// A per-function (or per-group) limit: `function` as the rows name it, `image` its image's
// file name ("" any).
struct FunctionLimit {
  std::string function;
  std::string image;
  DiffLimit limit;
};

struct DiffOptions {
  DiffMetric metric = DiffMetric::kSelf;
  DiffGroup group_by = DiffGroup::kFunction;
  // Regression when the total (instructions; calls for kCalls) grew by more than this percent.
  std::optional<double> fail_total_pct;
  // Regression when a function in both sides grew by more than this percent, unless its metric
  // (self instructions for kCalls) is below `min_instructions` on both sides.
  std::optional<double> fail_function_pct;
  uint64_t min_instructions = 0;
  // Functions (by name, as the rows show it) whose change is accepted: shown, never failing.
  std::vector<std::string> allow;
  // A regression when a run had decode errors or lost trace (its counts are incomplete).
  bool fail_on_loss = false;
  // kTime, kIpc: a change beyond a limit counts only when the runs of the two sides differ
  // with Mann-Whitney U p < alpha.
  double alpha = 0.05;
  // From a limits file: the total's hard limit, and per-function limits. A function's soft
  // limit replaces fail_function_pct for it and is checked whatever its size; its hard limit
  // fails when its new value is beyond it (also for a new function). --allow accepts both.
  std::optional<double> total_hard;
  std::vector<FunctionLimit> function_limits;
  std::string limits_file;  // its name, for the messages
  // fail_total_pct, fail_function_pct (and min_instructions) are the limits file's ("total",
  // "default"), not the command line's: the messages name them so.
  bool total_from_file = false, function_from_file = false;
  // What the runs counted, for the reports: only what ran under this function ("main":
  // --exclude-startup, diff's default), "" everything (ProfileSinkOptions::only_under).
  std::string only_under;
};

// Reads a limits file (JSON, schema ptkit-diff-limits/1, man/ptdecode.1) into `options`:
//   {"schema": "ptkit-diff-limits/1",
//    "default": {"soft_pct": X, "min_instructions": N},   -- --fail-function, --min-instructions
//    "total": {"soft_pct": X, "hard": X},                 -- --fail-total, and a hard limit
//    "functions": [{"function": "name", "image": "file", "soft_pct": X, "hard": X}, ...]}
// Every member is optional but the schema; options given on the command line (already in
// `options`, `given` says which: "fail_total", "fail_function", "min_instructions") win.
// Errors: kInvalidArgument naming the file and the member (a negative or mistyped number, an
// unknown member, another schema), JSON syntax errors with their byte offset.
absl::Status ParseDiffLimits(std::string_view text, const std::string& name,
                             const std::vector<std::string>& given, DiffOptions& options);
// ParseDiffLimits of the file at `path`. Errors: its, and the file's (open, read).
absl::Status ReadDiffLimits(const std::string& path, const std::vector<std::string>& given,
                            DiffOptions& options);

struct DiffCounts {
  uint64_t self = 0, inclusive = 0, calls = 0;
  double time_ns = 0;  // self time (profiles with timing)
  double cycles = 0;   // self cycles: its ticks times the run's CYC cycles per tick
};

// One function (or image, source file: DiffGroup), matched across the sides by (image file
// name, name).
struct DiffRow {
  std::string image;     // the image's file name (no directory)
  std::string function;  // its name; code without a symbol: "symbol+0xOFFSET" when a function
                         // of the same image below it ran, else its "sub_ADDRESS" name.
                         // kImage: the image's file name; kSourceFile: the source file's
  bool in_base = false, in_new = false;
  DiffCounts base, now;                  // each the median over the side's runs
  double base_value = 0, new_value = 0;  // the metric (kIpc: the median of the runs' IPC)
  double change = 0;                     // of the metric, new - base
  std::optional<double> change_pct;      // none when base is 0
  std::optional<MannWhitney> noise;      // kTime, kIpc: the test of the runs' values
  bool checked = false;                  // a limit applied to it (--fail-function, the limits file)
  bool allowed = false;                  // named by --allow
  std::optional<DiffLimit> limit;        // the limits file's for it
  bool regression = false;               // beyond a limit (and not allowed)
  std::vector<std::string> failures;     // the limits it is beyond, one line each
};

struct DiffSide {
  std::vector<std::string> inputs;  // the names of its runs
  double total = 0;            // median over the runs of the total (instructions, calls, ns or IPC)
  std::vector<double> totals;  // per run
  std::vector<std::string> incomplete;  // runs with decode errors or lost trace, said why
};

struct DiffResult {
  DiffMetric metric = DiffMetric::kSelf;
  DiffGroup group_by = DiffGroup::kFunction;
  DiffSide base, now;
  double total_change = 0;
  std::optional<double> total_change_pct;
  std::optional<MannWhitney> total_noise;  // kTime, kIpc
  bool total_regression = false;
  std::vector<std::string> total_failures;  // the total's limits exceeded, one line each
  std::vector<DiffRow> rows;                // sorted by |change| (descending), then image, name
  std::vector<std::string> reasons;         // one line per limit exceeded
  std::vector<std::string> warnings;        // e.g. a limit for a function neither side has
  bool regression() const { return !reasons.empty(); }
};

// "function", "image", "source-file".
const char* DiffGroupName(DiffGroup group);

// "self", "inclusive", "calls", "time", "ipc".
const char* DiffMetricName(DiffMetric metric);

// Compares the runs of each side (at least one each). With several runs per side each count is
// the median of the runs (the lower middle one for an even number; a function absent from a
// run counts 0 there). Errors: kInvalidArgument when no side is given, or when the sides have
// no function in common (different programs), or for kInclusive with a group other than
// kFunction (nested calls would count twice); kFailedPrecondition for kTime / kIpc when a run
// has no timing (or no TSC frequency; kIpc: no CYC packets), naming it.
absl::StatusOr<DiffResult> DiffProfiles(std::span<const Profile> base, std::span<const Profile> now,
                                        const DiffOptions& options);

// The aligned terminal table: a header (metric, inputs, total), the functions whose metric
// changed (new and removed ones marked; each number column as wide as its widest cell), then
// the verdict. With `color`, ANSI colours: rows that got worse red, better green, regressions
// and a failing verdict bold red.
std::string FormatDiffText(const DiffResult& diff, const DiffOptions& options, bool color = false);

// Whether --color=MODE ("auto", "always", "never") colours the output: auto on a terminal
// (`is_tty`), unless NO_COLOR is set (https://no-color.org) or TERM is "dumb".
bool DiffColor(std::string_view mode, bool is_tty, const char* no_color_env, const char* term_env);
// The same as GitHub-flavoured markdown (a pull-request comment, $GITHUB_STEP_SUMMARY).
std::string FormatDiffMarkdown(const DiffResult& diff, const DiffOptions& options);
// One JSON document, schema ptkit-diff/1 (every function, changed or not).
std::string FormatDiffJson(const DiffResult& diff, const DiffOptions& options);
// JUnit XML (GitLab, Jenkins): one test case per row a limit checked (classname the image, name
// the function), one for the total when a total limit is given, one per run --fail-on-loss
// checked; a failure names the limits exceeded. Without limits, one passing case saying so.
std::string FormatDiffJunit(const DiffResult& diff, const DiffOptions& options);

// The differential folded stacks of FlameGraph's difffolded.pl: "caller;callee BASE NEW" lines,
// sorted by stack, for flamegraph.pl (it colours what grew red). Each side's count of a stack
// is the median over its runs (trace.pt or perf.data; `folded`'s weights, instructions or, with
// `weight`, ticks). With extra.only_under, only stacks through that function, cut to start at
// it. Errors: those of DecodeContainer and the folded sink's, a stats --json input (no stacks).
absl::StatusOr<std::string> DiffFolded(const std::vector<std::string>& base,
                                       const std::vector<std::string>& now,
                                       const ContainerOptions& options,
                                       const ProfileSinkOptions& extra,
                                       FoldedWeight weight = FoldedWeight::kInstructions);

// One side's run: a `stats --json` document (first non-blank byte '{'), or a trace.pt or
// perf.data (OpenRecording) decoded as `stats` does with `options` and `extra` (with timing,
// also the cycles of the trace's CYC packets). A document must have been made as `extra` asks
// (its only_under the same; timing, source files when asked). Errors: unreadable file,
// ProfileFromJson's, kFailedPrecondition for a document that does not match `extra`, for
// nothing decoded or nothing under extra.only_under, those of OpenRecording and
// DecodeRecording.
absl::StatusOr<Profile> LoadProfile(const std::string& path, const ContainerOptions& options,
                                    const ProfileSinkOptions& extra = {});

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_DIFF_H_
