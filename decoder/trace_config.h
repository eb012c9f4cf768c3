// How a raw trace was recorded: CPU (for errata), timing parameters. Mirrors ptxed's options.
#ifndef PTKIT_DECODER_TRACE_CONFIG_H_
#define PTKIT_DECODER_TRACE_CONFIG_H_

#include <intel-pt.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fmt/format.h"

namespace ptkit::decoder {

struct TraceConfig {
  // The recording CPU; errata come from it (pt_cpu_errata). Unset: no errata.
  std::optional<pt_cpu> cpu;
  uint8_t mtc_freq = 0;  // IA32_RTIT_CTL.MTCFreq
  uint8_t nom_freq = 0;  // MSR_PLATFORM_INFO[15:8]
  uint32_t cpuid_0x15_eax = 0;
  uint32_t cpuid_0x15_ebx = 0;
};

// What decode options say of the configuration, over what a recording's metadata says: each
// field given replaces the recording's, the others keep it (`--cpu 6/78` on a perf.data with MTC
// packets kept its MTC period and CTC ratio: the time changed).
struct TraceConfigOverride {
  std::optional<pt_cpu> cpu;
  std::optional<uint8_t> mtc_freq, nom_freq;
  std::optional<uint32_t> cpuid_0x15_eax, cpuid_0x15_ebx;

  TraceConfig Over(TraceConfig recorded) const;
};

// Parses "FAMILY/MODEL[/STEPPING]" (decimal or 0x-hex) into an Intel pt_cpu.
// Errors: kInvalidArgument naming the text.
absl::StatusOr<pt_cpu> ParseCpu(std::string_view text);

// Parses an unsigned integer (decimal, 0x-hex) no larger than `max`.
// Errors: kInvalidArgument naming `what` and the text.
absl::StatusOr<uint64_t> ParseUint(std::string_view text, uint64_t max, std::string_view what);

// Fills a libipt configuration for `trace` (which must outlive every decoder made from it).
// Errors: kInvalidArgument when libipt does not know the CPU's errata.
absl::StatusOr<pt_config> MakePtConfig(std::span<const uint8_t> trace, const TraceConfig& config);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_TRACE_CONFIG_H_
