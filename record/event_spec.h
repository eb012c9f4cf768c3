// Event strings as perf writes them ("intel_pt/tsc=1,cyc,psb_period=2/u", "intel_bts//k"),
// their resolution against a PMU's sysfs formats and caps, and pure perf_event_attr builders.
#ifndef PTKIT_RECORD_EVENT_SPEC_H_
#define PTKIT_RECORD_EVENT_SPEC_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "record/pmu_registry.h"

namespace ptkit::record {

struct EventTerm {
  std::string name;
  uint64_t value = 1;  // a bare term ("cyc") means 1
  friend bool operator==(const EventTerm&, const EventTerm&) = default;
};

// The syntax of one event string, not yet checked against a PMU.
struct EventSpec {
  std::string pmu;               // "intel_pt"
  std::vector<EventTerm> terms;  // in the order written
  bool user = true;              // trace user space   (modifier "u", or no modifier)
  bool kernel = true;            // trace kernel space (modifier "k", or no modifier)
};

// Parses "PMU", "PMU//", "PMU/TERM[=VALUE],.../", each optionally followed by modifiers "u",
// "k" or "uk". Values are decimal or 0x-hex. Fails (kInvalidArgument) naming the offending
// part: empty PMU name, missing closing '/', empty or duplicate term, bad value, unknown
// modifier.
absl::StatusOr<EventSpec> ParseEventString(std::string_view text);

// An event ready for perf_event_attr: the PMU's type and the three config words.
struct ResolvedEvent {
  std::string pmu;
  uint32_t type = 0;
  uint64_t config = 0;
  uint64_t config1 = 0;
  uint64_t config2 = 0;
  bool exclude_user = false;
  bool exclude_kernel = false;
};

// The config perf uses for a bare "intel_pt//" on this PMU (tools/perf/arch/x86/util/
// intel-pt.c, intel_pt_default_config): tsc; mtc with mtc_period nearest 3 when caps/mtc;
// psb_period nearest 3 when caps/psb_cyc; pt and branch when those formats exist. noretcomp
// stays 0. Other PMUs: all zero. Fails only when a format needed for the default is malformed.
absl::StatusOr<ResolvedEvent> DefaultConfig(const Pmu& pmu);

// Applies `spec.terms` over DefaultConfig(pmu) and checks them:
//  - a term must be a format of the PMU (or config/config1/config2 for a raw word), else
//    kInvalidArgument listing the valid terms;
//  - the value must fit the field, else kOutOfRange naming the width;
//  - for intel_pt, psb_period / mtc_period / cyc_thresh must be 0 or a bit set in caps
//    psb_periods / mtc_periods / cycle_thresholds, else kInvalidArgument naming the allowed
//    values; cyc, mtc, ptw, fup_on_ptw, pwr_evt, event, notnt need their capability
//    (psb_cyc, mtc, ptwrite, ptwrite, power_event_trace, event_trace, tnt_disable), else
//    kFailedPrecondition naming the cap file.
// `spec.pmu` must equal `pmu.name` (kInvalidArgument otherwise).
absl::StatusOr<ResolvedEvent> ResolveEvent(const Pmu& pmu, const EventSpec& spec);

// Options of the AUX (PT/BTS) event.
struct AuxAttrOptions {
  bool enable_on_exec = false;  // start when the workload execs (`-- cmd`)
  bool inherit = false;         // follow the workload's children and threads
  uint32_t aux_watermark = 0;   // bytes of new AUX data that wake the reader; 0 = kernel's half
};

// perf_event_attr for a PT/BTS event: type/config words from `event`, disabled=1,
// sample_id_all=1 with sample_type TID|TIME|CPU|IDENTIFIER (so AUX and ITRACE_START records
// carry who/when/where), exclude_hv=1 and the user/kernel exclusions. Pure.
perf_event_attr BuildAuxAttr(const ResolvedEvent& event, const AuxAttrOptions& options);

// The sideband tracking event: a software dummy event with mmap, mmap2, comm, comm_exec,
// task and context_switch, sample_id_all=1 with TID|TIME|CPU|IDENTIFIER. Pure.
struct TrackingAttrOptions {
  bool enable_on_exec = false;
  bool inherit = false;
  bool exclude_kernel = false;
  uint32_t wakeup_bytes = 0;   // 0 = wake on every record
  bool context_switch = true;  // SWITCH records
  bool build_id = false;       // MMAP2 records carry build-ids, not inodes (Linux 5.12+)
  int clockid = -1;            // the records' clock (attr.use_clockid); -1: perf's own
};
perf_event_attr BuildTrackingAttr(const TrackingAttrOptions& options);

// The sample_id_all trailer layout both builders use.
inline constexpr uint64_t kSampleIdType =
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;

// Renders `event` back as an event string with every non-zero format term, e.g.
// "intel_pt/branch=1,mtc=1,mtc_period=3,psb_period=3,pt=1,tsc=1/u". For messages and metadata.
std::string DescribeEvent(const Pmu& pmu, const ResolvedEvent& event);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_EVENT_SPEC_H_
