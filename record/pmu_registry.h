// PMU discovery from sysfs: the dynamic PMUs under /sys/bus/event_source/devices (or an
// injected root with the same layout), their `type`, `format/*` bit fields and `caps/*`.
#ifndef PTKIT_RECORD_PMU_REGISTRY_H_
#define PTKIT_RECORD_PMU_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ptkit::record {

inline constexpr std::string_view kDefaultSysfsRoot = "/sys/bus/event_source/devices";

// The three perf_event_attr words a PMU format field can live in.
enum class ConfigWord : int { kConfig = 0, kConfig1 = 1, kConfig2 = 2 };

// One `format/<name>` file: the bits of config/config1/config2 that hold a term's value.
// "config:10", "config:14-17", "config1:0-3", "config:0-7,32-35". The value's bits are
// spread over the listed bits in ascending order, lowest value bit first (as perf does).
struct FormatField {
  ConfigWord word = ConfigWord::kConfig;
  uint64_t mask = 0;  // never 0 for a parsed field

  int width() const;           // number of bits
  uint64_t max_value() const;  // largest value that fits
  // Puts `value` into the masked bits of `word_value`, clearing them first.
  // Fails (kOutOfRange) when `value` does not fit in width() bits.
  absl::StatusOr<uint64_t> Apply(uint64_t word_value, uint64_t value) const;
  // Extracts this field's value from `word_value` (the inverse of Apply).
  uint64_t Extract(uint64_t word_value) const;
};

// Parses a format spec. Fails (kInvalidArgument) on an unknown word, a bit above 63, a
// reversed range, or trailing text.
absl::StatusOr<FormatField> ParseFormatSpec(std::string_view spec);

// One PMU as sysfs describes it.
struct Pmu {
  std::string name;
  std::string dir;  // its sysfs directory
  uint32_t type = 0;
  std::map<std::string, FormatField> formats;
  std::map<std::string, std::string> caps;     // caps/<name> contents, whitespace trimmed
  std::optional<uint32_t> max_nonturbo_ratio;  // intel_pt only
  // tsc_art_ratio "num:den" (CPUID 0x15 EBX:EAX), intel_pt only.
  std::optional<uint32_t> tsc_art_numerator;
  std::optional<uint32_t> tsc_art_denominator;

  // caps files are written by the kernel with "%x" (intel_pt_cap_show): parsed as hex.
  // Fails (kNotFound) naming the cap when the file is absent, kInvalidArgument when unparsable.
  absl::StatusOr<uint64_t> Cap(std::string_view cap) const;
  // Cap() or `fallback` when the cap is absent or unparsable.
  uint64_t CapOr(std::string_view cap, uint64_t fallback) const;
  // Comma-separated format names, sorted ("branch, cyc, ...") for error messages.
  std::string FormatNames() const;
};

// Reads PMUs from a sysfs root. Stateless apart from the root path: every call reads files.
// True for a PMU name as the kernel registers them (a directory under event_source/devices:
// intel_pt, cpu_core, uncore_imc_0, ...): letters, digits, '_', '-' and '.', and not "." or
// "..". Anything else would make an event string name a path outside the sysfs root.
bool IsPmuName(std::string_view name);

class PmuRegistry {
 public:
  explicit PmuRegistry(std::string root = std::string(kDefaultSysfsRoot));

  const std::string& root() const { return root_; }

  // Reads <root>/<name>/{type,format/*,caps/*,max_nonturbo_ratio,tsc_art_ratio}.
  // Errors: kNotFound "no <name> PMU (<root>/<name> does not exist)" when the directory is
  // missing; kInvalidArgument naming the file when `type` or a format spec is malformed, or
  // when `name` is not a PMU name ("..", a path: nothing outside the root is read); the errno
  // of a failing read.
  absl::StatusOr<Pmu> Find(std::string_view name) const;
  // True when `name` is a PMU name and <root>/<name>/type exists.
  bool Exists(std::string_view name) const;
  // Names of every PMU directory under the root, sorted. Fails with the errno of opendir.
  absl::StatusOr<std::vector<std::string>> List() const;

 private:
  std::string root_;
};

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_PMU_REGISTRY_H_
