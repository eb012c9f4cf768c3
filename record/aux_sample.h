// AUX sampling (`ptrecord --aux-sample[=SIZE]`): a sampling event in the trace event's group
// with PERF_SAMPLE_AUX and attr.aux_sample_size, so every sample carries the newest SIZE bytes
// of the group leader's AUX area: the branch history that led to it (kernel/events/core.c
// perf_aux_sample_output(); perf record --aux-sample). As perf does, the AUX area is mapped
// read-only (overwrite: the trace itself is not stored, only the samples) and intel_pt gets a
// short PSB period so that every snippet holds a PSB to start decoding at.
#ifndef PTKIT_RECORD_AUX_SAMPLE_H_
#define PTKIT_RECORD_AUX_SAMPLE_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ptkit/aux_sample.h"
#include "record/event_spec.h"

namespace ptkit::record {

// sample_type of the sampling events ptrecord opens, and of the emulated samples (which have
// no CPU: the emulation's streams are per thread).
inline constexpr uint64_t kAuxSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP |
                                           PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                                           PERF_SAMPLE_AUX;
inline constexpr uint64_t kEmulatedAuxSampleType = kAuxSampleType & ~uint64_t{PERF_SAMPLE_CPU};
// perf's default aux_sample_size (tools/perf/util/auxtrace.c DEFAULT_AUX_SAMPLE_SIZE).
inline constexpr uint64_t kDefaultAuxSampleSize = 4096;
// The psb_period ptrecord sets for AUX sampling when the event string has none: 0, a PSB every
// 2 KiB of trace (as perf's intel_pt_config_sample_mode()), so a snippet of 4 KiB or more
// always holds a PSB+.
inline constexpr uint64_t kAuxSamplePsbPeriod = 0;

// Checks --aux-sample=SIZE against the limits: 8 to perf::kMaxAuxSampleSize (60 KiB: a sample
// record is at most 64 KiB) bytes, a multiple of 8, at most the AUX area (`aux_bytes`; 0 =
// not known yet). Errors: kInvalidArgument saying the limit.
absl::Status CheckAuxSampleSize(uint64_t size, uint64_t aux_bytes);

// Adds psb_period=kAuxSamplePsbPeriod to an intel_pt `spec` that does not set psb_period.
// Returns a note for the user saying what was set (empty when nothing was).
std::string AddAuxSampleTerms(EventSpec& spec);

// The sampling event's attr made from `counter` (a libpfm4 encoding, record/counters.h):
// sample_period `period`, sample_type kAuxSampleType, aux_sample_size `size`, sample_id_all,
// enabled with its group leader (disabled=0, no enable_on_exec: the leader has it), inherit as
// given, wakeup after every sample; with `callchain` the samples also carry the kernel's call
// chain (PERF_SAMPLE_CALLCHAIN, as perf record -g). Pure.
perf_event_attr BuildAuxSampleAttr(const perf_event_attr& counter, uint64_t period, uint64_t size,
                                   bool inherit, bool callchain = false);

// What the emulation's AUX samples stand for (the metadata's "aux-sample" attr of an emulated
// recording): instructions:u sampled every `period` instructions, BuildAuxSampleAttr's with
// sample_type kEmulatedAuxSampleType (no CPU). Pure.
perf_event_attr EmulatedAuxSampleAttr(uint64_t period, uint64_t size, bool inherit);

}  // namespace ptkit::record

#endif  // PTKIT_RECORD_AUX_SAMPLE_H_
