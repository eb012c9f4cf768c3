// `ptdecode packets`: every packet of a trace with its offset, like ptdump.
#ifndef PTKIT_DECODER_PACKETS_H_
#define PTKIT_DECODER_PACKETS_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"

namespace ptkit::decoder {

// Container input: where the bytes given to DumpPackets belong and what precedes them.
struct PacketContext {
  const StreamInfo* stream = nullptr;  // when set, a stream header line comes first
  // With `keep`: the header waits for the first packet kept, and *stream_shown says whether
  // it came (so that a caller dumping a stream in pieces shows it once, or never).
  bool* stream_shown = nullptr;
  std::span<const LossInfo> losses;  // loss points just before the bytes, printed next
  uint64_t offset_base = 0;          // added to every offset shown
  // Sees every packet in order and says whether to print it (all are printed when empty).
  std::function<bool(const pt_packet&)> keep;
  // Told the offset in `trace` reached, every few thousand packets (may be empty): progress.
  std::function<void(uint64_t)> on_progress;
};

// `packets`: every packet with its offset, like ptdump; resynchronises after errors.
// Errors: a configuration libipt rejects, output failures.
absl::Status DumpPackets(std::span<const uint8_t> trace, const TraceConfig& config, std::FILE* out,
                         const OutputOptions& options, const PacketContext& context = {});

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PACKETS_H_
