// PERF_RECORD_SAMPLE records of an AUX-sampling event (attr.aux_sample_size, PERF_SAMPLE_AUX):
// each carries the newest bytes of its group leader's AUX area (the trace that led to the
// sample). Pure functions over bytes, shared by the recorder (the simulated PMU writes these)
// and the decoder.
//
// Body layout, fields in this order when their sample_type bit is set (<linux/perf_event.h>,
// "PERF_RECORD_SAMPLE"; kernel/events/core.c perf_output_sample()): u64 id (IDENTIFIER),
// u64 ip (IP), u32 pid, tid (TID), u64 time (TIME), u64 addr (ADDR), u64 id (ID), u64
// stream_id (STREAM_ID), u32 cpu, res (CPU), u64 period (PERIOD), u64 nr + nr u64 ips
// (CALLCHAIN), u64 size + size bytes (AUX; the kernel pads the bytes with zeros to 8 and
// counts the padding in size: perf_prepare_sample_aux()).
#ifndef PTKIT_AUX_SAMPLE_H_
#define PTKIT_AUX_SAMPLE_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ptkit/perf_records.h"

namespace ptkit::perf {

// The sample_type bits ParseSample and EncodeSample know. A sampling event that ptrecord opens
// never has others.
inline constexpr uint64_t kAuxSampleKnownBits =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
    PERF_SAMPLE_ADDR | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU |
    PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_AUX;

// The largest aux_sample_size ptrecord asks for: a sample record's size is a u16 (64 KiB in
// all, perf_prepare_sample() caps the AUX part to what is left of it) and perf refuses more
// than this (tools/perf/util/auxtrace.c, MAX_AUX_SAMPLE_SIZE).
inline constexpr uint64_t kMaxAuxSampleSize = 60 * 1024;

struct Sample {
  uint64_t id = 0;  // IDENTIFIER or ID
  uint64_t ip = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t time = 0;
  uint64_t addr = 0;
  uint64_t stream_id = 0;
  uint32_t cpu = 0;
  uint64_t period = 0;
  std::vector<uint64_t> callchain;
  std::span<const uint8_t> aux;  // the AUX bytes, padding included, oldest first
};

// Parses a PERF_RECORD_SAMPLE written with `sample_type`. Errors: kInvalidArgument for another
// record type, kUnimplemented for sample_type bits outside kAuxSampleKnownBits (naming them),
// kDataLoss when a field runs past the record (naming it).
absl::StatusOr<Sample> ParseSample(const RecordView& r, uint64_t sample_type);

// The record as the kernel writes it for `sample_type` (bits outside kAuxSampleKnownBits are
// ignored): `s.aux` is padded with zeros to 8 bytes and `size` counts the padding. The caller
// keeps the record within 64 KiB (kMaxAuxSampleSize).
std::vector<uint8_t> EncodeSample(const Sample& s, uint64_t sample_type);

}  // namespace ptkit::perf

#endif  // PTKIT_AUX_SAMPLE_H_
