// The metadata of a recording (container record kind 1; schema and rules in
// man/ptkit-format.5, "METADATA"), typed.
//
// Every writer fills a RecordingMetadata and writes ToJson(); every reader parses each record
// with ParseMetadataRecord, combines them with MergeMetadata (the one merge rule) and reads the
// result with FromJson, which checks the type and range of every member it knows and keeps
// the members it does not know (in `extra`) so that ToJson(FromJson(x)) gives x back. Every
// known member is optional: absent stays absent.
#ifndef PTKIT_RECORDING_METADATA_H_
#define PTKIT_RECORDING_METADATA_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "ptkit/sideband.h"

namespace ptkit {

// The deepest nesting of objects and arrays a metadata record may have (the writers use 3).
inline constexpr int kMaxMetadataDepth = 64;

// Parses one metadata record's payload. Errors (kDataLoss): not JSON, not a JSON object, or
// nested deeper than kMaxMetadataDepth (such a record is not read at all, so nothing that
// handles JSON recursively ever sees it).
absl::StatusOr<nlohmann::json> ParseMetadataRecord(std::span<const uint8_t> payload);

// The merge rule of man/ptkit-format.5: records are merged in file order, a later record's
// top-level members replacing the earlier ones of the same name (an object member is replaced
// whole, not merged), members it does not have kept. `later` must be an object.
void MergeMetadata(nlohmann::json& merged, const nlohmann::json& later);

// CPUID leaf 0x15: TSC / core crystal clock ratio (EBX / EAX) and crystal Hz (ECX).
struct Cpuid15hMetadata {
  std::optional<uint32_t> tsc_ratio_numerator, tsc_ratio_denominator, crystal_hz;
  nlohmann::json extra = nlohmann::json::object();
};

// CPUID of the recording machine: vendor, display family/model/stepping, leaf 0x15.
struct CpuMetadata {
  std::optional<std::string> vendor;  // "GenuineIntel", "AuthenticAMD"
  std::optional<uint32_t> family, model, stepping;
  std::optional<Cpuid15hMetadata> cpuid_15h;
  nlohmann::json extra = nlohmann::json::object();
};

// One sysfs format field of the PMU (format/NAME): which config word (0 config, 1 config1,
// 2 config2) and the mask of its bits there.
struct PmuFormatMetadata {
  std::optional<uint32_t> word;
  std::optional<uint64_t> mask;
  nlohmann::json extra = nlohmann::json::object();
  // The field's value in the attr's config words, its bits packed lowest first (as perf
  // does); none when word or mask is missing or word is not 0..2.
  std::optional<uint64_t> Extract(const perf_event_attr& attr) const;
};

struct PmuMetadata {
  std::optional<std::string> name;                         // "intel_pt", "intel_bts"
  std::optional<uint32_t> type;                            // perf_event_attr.type of the PMU
  std::optional<std::map<std::string, std::string>> caps;  // caps/<name> contents
  std::optional<std::map<std::string, PmuFormatMetadata>> formats;  // format/<name>
  std::optional<std::string> event;  // the resolved trace event string
  std::optional<uint32_t> max_nonturbo_ratio;
  std::optional<uint64_t> nominal_frequency_hz;
  std::optional<std::vector<uint32_t>> tsc_art_ratio;  // {numerator, denominator}
  nlohmann::json extra = nlohmann::json::object();
};

// One perf_event_attr the recorder opened, with the name it gave the event.
struct AttrMetadata {
  std::optional<std::string> name;
  std::optional<uint32_t> type, size;
  std::optional<uint64_t> config, config1, config2, sample_type, read_format;
  std::optional<bool> sample_id_all, disabled, inherit, enable_on_exec, exclude_user,
      exclude_kernel, exclude_hv, mmap, mmap2, comm, comm_exec, task, context_switch;
  std::optional<uint32_t> aux_watermark;
  // Sampling: the period, or with `freq` the frequency (one union in the attr); the AUX bytes
  // each sample carries (PERF_SAMPLE_AUX); wakeups after `wakeup_events` records, or with
  // `watermark` after `wakeup_watermark` bytes (one union too); the clock of the times.
  std::optional<uint64_t> sample_period, sample_freq;
  std::optional<bool> freq, watermark, use_clockid, exclude_guest, build_id;
  std::optional<uint32_t> wakeup_events, wakeup_watermark, aux_sample_size, precise_ip;
  std::optional<int32_t> clockid;
  nlohmann::json extra = nlohmann::json::object();

  // Every member from `attr` (of each union the member its flag selects).
  static AttrMetadata FromAttr(std::string name, const perf_event_attr& attr);
  // The config words and flags present, as an attr (absent members 0).
  perf_event_attr ToAttr() const;
};

// The perf-time <-> TSC conversion fields of a perf_event_mmap_page.
struct TimeConversionMetadata {
  std::optional<bool> cap_user_time, cap_user_time_zero;
  std::optional<uint32_t> time_shift;  // below 64
  std::optional<uint32_t> time_mult;
  std::optional<uint64_t> time_zero;
  nlohmann::json extra = nlohmann::json::object();
};

// How a software trace was made (ptrecord --emulate).
struct EmulationMetadata {
  std::optional<std::string> backend, streams;
  std::optional<std::string> format;  // "pt" or "bts"
  std::optional<bool> ret_compression;
  std::optional<uint32_t> psb_period;
  // The timing packets written (the --event terms tsc, mtc, mtc_period, cyc, cyc_thresh);
  // absent in recordings before they were stored: TSC only.
  std::optional<bool> tsc, mtc, cyc;
  std::optional<uint32_t> mtc_period, cyc_thresh;
  std::optional<std::string> filter, note;
  nlohmann::json extra = nlohmann::json::object();
};

// How an emulated recording ended (its last metadata record).
struct EndMetadata {
  std::optional<uint64_t> instructions, threads;
  std::optional<int64_t> workload_exit_status;
  std::optional<std::string> workload_signal, stopped_by;
  nlohmann::json extra = nlohmann::json::object();
};

// The synthesizer's walk (swpt_synth).
struct SynthesizerMetadata {
  std::optional<std::string> elf, entry, stop;
  std::optional<uint64_t> load_base, seed, max_insns, insns;
  nlohmann::json extra = nlohmann::json::object();
};

struct RecordingMetadata {
  // What made the trace when it is not hardware: kEmulatedStep (ptrecord --emulate=step,
  // ptrace single-step), "qemu" (ptrecord --emulate=qemu, the QEMU plugin) or
  // kEmulatedSynthesized (the swpt synthesizer). Stored as "emulated": "step" / "qemu" /
  // "synthesized"; the older forms true (step) and false (hardware) are read too.
  static constexpr const char* kEmulatedStep = "step";
  static constexpr const char* kEmulatedSynthesized = "synthesized";

  std::optional<std::string> tool, tool_version, host, kernel_release, machine;
  std::optional<std::vector<std::string>> command_line, workload;
  std::optional<std::string> mode;  // "full-trace", "snapshot", "sideband-only"
  std::optional<uint64_t> page_size, data_pages, aux_pages;
  std::optional<std::vector<int64_t>> cpus;
  std::optional<CpuMetadata> cpu;
  std::optional<PmuMetadata> pmu;
  std::optional<std::vector<AttrMetadata>> attrs;
  std::optional<TimeConversionMetadata> time_conversion;
  std::optional<std::string> emulated;
  std::optional<std::string> clock;
  std::optional<EmulationMetadata> emulation;
  std::optional<EndMetadata> end;
  std::optional<SynthesizerMetadata> synthesizer;
  // Top-level members this version does not know, and known ones ignored for a wrong type
  // (see warnings), as they were.
  nlohmann::json extra = nlohmann::json::object();
  // Not written: what FromJson ignored, one line each (`metadata: "host" must be a string,
  // got number 5: ignored`).
  std::vector<std::string> warnings;

  // Reads a (merged) metadata object. A member decoding depends on (the cpu identity and
  // cpuid_15h, pmu name/type/formats/frequencies, every attrs element and its type, config
  // words, sample_type and sample_id_all, time_conversion, emulated, emulation.format) with the
  // wrong type or range is an error (kDataLoss) naming it: `metadata: "cpu.family" must be a
  // number, got string "6"`. Any other known member of the wrong type is ignored with a line
  // in `warnings` and kept as it was in `extra`. `json` must be an object.
  static absl::StatusOr<RecordingMetadata> FromJson(const nlohmann::json& json);
  // The JSON object: the members present, then the extra ones.
  nlohmann::json ToJson() const;
  // The payload of a metadata record: ToJson() as compact UTF-8 (bytes that are not UTF-8
  // replaced by U+FFFD).
  std::string ToRecord() const;

  // The TSC -> perf time conversion when the recording has a valid one (cap_user_time_zero
  // set and time_mult not 0).
  std::optional<TscConversion> PerfTimeConversion() const;
  // The attr of the trace PMU (the first whose type is pmu.type), if any.
  const AttrMetadata* TraceAttr() const;
  // What the recorder warned of (the end metadata's "warnings" strings): a thread not traced,
  // a stream cut short, an exec'd program run natively. Every decode and `info` say them.
  std::vector<std::string> RecorderWarnings() const;
};

}  // namespace ptkit

#endif  // PTKIT_RECORDING_METADATA_H_
