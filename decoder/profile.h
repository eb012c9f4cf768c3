// A per-function and per-image instruction profile: what `ptdecode stats` computes, and what
// `ptdecode diff` compares. Serialises to and from the `stats --json` document (schema
// ptkit-stats/1, man/ptdecode.1) both ways.
#ifndef PTKIT_DECODER_PROFILE_H_
#define PTKIT_DECODER_PROFILE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::decoder {

// The schema name of the JSON form.
inline constexpr std::string_view kProfileSchema = "ptkit-stats/1";

// One function of one image file, its counts added up over every process that ran it.
struct ProfileFunction {
  std::string function;    // demangled symbol name, "sub_ADDRESS" or "[image]" without one
  std::string image;       // the image file's path, "[unmapped]" outside every file
  uint64_t address = 0;    // the lowest run-time address it was seen at
  uint64_t self = 0;       // instructions executed in the function itself
  uint64_t inclusive = 0;  // instructions while it was on the call stack, each counted once
  uint64_t calls = 0;
  // With timing: the TSC ticks of its self time (each interval between two time updates split
  // over the functions that ran in it, by their instructions; while tracing is stopped at a
  // system call (its wait), the function's that ran last).
  uint64_t ticks = 0;
  // With source files: the source file of its first instruction (DWARF), "" when unknown.
  std::string source;
  // Of a function whose name has ordinals the compiler numbers (OrdinalBase: a lambda's
  // "{lambda(int)#2}"): its code's hash with the addresses in it left out (16 hex digits), by
  // which `diff` pairs it with the same code numbered otherwise in another build; "" otherwise
  // or where its code was not readable.
  std::string code;
  bool operator==(const ProfileFunction&) const = default;
};

// One image file: the sums of its functions' rows.
struct ProfileImage {
  std::string image;
  uint64_t instructions = 0;  // sum of self
  uint64_t calls = 0;
  uint64_t functions = 0;  // rows
  bool operator==(const ProfileImage&) const = default;
};

struct ProfileTotals {
  uint64_t trace_bytes = 0;
  uint64_t instructions = 0;
  uint64_t blocks = 0;
  uint64_t calls = 0;
  uint64_t returns = 0;
  uint64_t syncs = 0;
  uint64_t errors = 0;  // all decode errors, gaps included
  uint64_t gaps = 0;
  uint64_t streams = 0;
  uint64_t losses = 0;
  uint64_t lost_bytes = 0;
  uint64_t unknown_size_losses = 0;  // losses of unknown size (in `losses`, none in lost_bytes)
  // The recording's and the decode's warnings, the first of Profile::warnings: what the input
  // lacks (damaged bytes, a file cut short, threads not traced, a file not found, ...).
  uint64_t input_warnings = 0;
  bool operator==(const ProfileTotals&) const = default;
};

// The time of a profile made with timing (MakeProfileSink's `timing`), of a trace that had it.
struct ProfileTiming {
  double tsc_hz = 0;    // TSC ticks per second (the recording's clock); 0: unknown
  uint64_t ticks = 0;   // the ticks given to functions (the sum of their `ticks`)
  uint64_t cycles = 0;  // core cycles of the CYC packets during `ticks` (0: the trace has none)
  // The ticks of the whole trace's timed intervals, also outside what was counted (only_under).
  uint64_t all_ticks = 0;
  bool operator==(const ProfileTiming&) const = default;
};

struct Profile {
  std::string trace;  // the input's name, as given
  ProfileTotals totals;
  std::optional<ProfileTiming> timing;  // only when made with timing, of a timed trace
  bool source_files = false;            // made with source files (ProfileFunction::source)
  // Made counting only what ran while this function had a frame ("main": --exclude-startup);
  // "" counts everything.
  std::string only_under;
  std::vector<std::pair<std::string, uint64_t>> errors;  // libipt error name -> count
  std::vector<ProfileImage> images;                      // sorted by name
  std::vector<ProfileFunction> functions;  // sorted by self, inclusive (descending), name
  std::vector<std::string> warnings;
  bool operator==(const Profile&) const = default;
};

// The function a compiler's clone or part of it belongs to: NAME for GCC's NAME.constprop.N,
// NAME.isra.N, NAME.part.N, NAME.lto_priv.N, NAME.cold, NAME.localalias and their combinations,
// and for the demangled "NAME [clone .constprop.0]"; any other name as it is. `diff` matches
// functions by it (a rebuild that makes `work` a clone `work.constprop.0`, or numbers the
// `.lto_priv` clones of two static `helper`s the other way, changes no function). With
// `is_function`, a bare .cold or .localalias goes only where NAME is a function too (Go's
// function `cold` of package main is "main.cold", and no Go function is "main"; a review).
std::string_view CloneBase(std::string_view name,
                           const std::function<bool(std::string_view)>& is_function = {});

// `name` without the numbers of its ordinals ("#N}", as GCC's demangler writes a lambda's
// "{lambda(int)#2}" or an unnamed type's "{unnamed type#1}", Rust's "{closure#0}"): the compiler
// numbers those in the order of the source, so adding one renumbers the ones after it. The
// numbers, in order, go to `ordinals` when given. A name without one is returned as it is.
std::string OrdinalBase(std::string_view name, std::vector<uint64_t>* ordinals = nullptr);

// Sorts `functions` into the documented order (self, then inclusive descending, then name) and
// rebuilds `images` from them.
void SortProfile(Profile& profile);

// The `stats --json` document (2-space indented, a final newline), as stats prints it: with
// timing, "timing" {tsc_hz, ticks} and each function's "ticks"; with source files, each
// function's "source"; "only_under". The cycles and all_ticks of the timing are not part of it.
std::string ProfileToJson(const Profile& profile);

// Parses a `stats --json` document. Members the schema does not know are ignored (the schema
// may grow); those added later (timing, source_files, only_under, a function's ticks and
// source) may be missing, as in the documents of older versions. Errors: kInvalidArgument naming
// the member ("functions[3].self: expected an unsigned integer"), the JSON syntax error with its
// byte offset, or a schema other than ptkit-stats/1 (named).
absl::StatusOr<Profile> ProfileFromJson(std::string_view text);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PROFILE_H_
