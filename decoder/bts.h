// Branch Trace Store (intel_bts) decoding: the AUX data is a sequence of 24-byte records
// {u64 from, u64 to, u64 flags}, one per taken branch. Between two records the code ran
// straight through, so the instruction flow is rebuilt by walking the image from one
// record's `to` to the next record's `from` (Zydis for lengths and classes).
//
// The flow starts at the first record's `from` instruction and ends at the last record's
// `from`: what ran before the first branch and after the last is unknown. As in perf's
// intel-bts decoder, a `to` of 0 ends the trace after `from` (tracing disabled: a syscall
// into the untraced kernel) and a `from` of 0 begins it at `to` (tracing enabled); they are
// given to the sink as ptev_disabled (IP suppressed) and ptev_enabled events. A record whose
// `from` cannot be reached from the previous `to` (code missing: a gap; the walk meets a
// taken branch BTS did not record, or runs kMaxBtsWalk instructions) is reported as a decode
// error and the walk restarts at its `to`.
#ifndef PTKIT_DECODER_BTS_H_
#define PTKIT_DECODER_BTS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decoder/decode.h"
#include "decoder/image.h"

namespace ptkit::decoder {

inline constexpr size_t kBtsRecordSize = 24;

// Decodes `records` into `sink` (blocks or instructions, as the sink asks), adding to
// `totals`. Error offsets are `offset_base` + the record's offset. Trailing bytes that are not
// a whole record are a kErrorBtsPartial error unless all zero (the kernel's padding).
// `ring_size`: the AUX area's size when `offset_base` is an AUX offset of the kernel's
// intel_bts (full-trace mode), else 0. The kernel skips the last bytes of the ring that do not
// hold a whole record (fewer than 24) and goes on at its start, so records that follow a wrap
// inside `records` are found where they are, not 24-byte steps from its first byte. Errors:
// none today (decode problems are data); kept for I/O-backed sources.
absl::Status DecodeBtsInto(std::span<const uint8_t> records, const ProgramImage& image, Sink& sink,
                           DecodeTotals& totals, uint64_t offset_base = 0, uint64_t ring_size = 0);

// As DecodeBtsInto, then sink.Finish. Errors: sink.Finish's.
absl::StatusOr<DecodeTotals> DecodeBts(std::span<const uint8_t> records, const ProgramImage& image,
                                       Sink& sink);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_BTS_H_
