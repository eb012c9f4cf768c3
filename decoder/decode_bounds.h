// The decoders' work bounds (decode.h's kMaxInsnsWithoutProgress for kErrorLoop, kMaxBtsWalk
// for kErrorBtsWalk), lowered process-wide by the fuzz targets: fuzzed code that loops through
// a direct branch runs to the bound in every decode, a million instructions at the default, and
// that was most of a fuzzer's time. The code paths are the same at any bound; ptdecode and the
// tests keep the defaults (the error texts name them).
#ifndef PTKIT_DECODER_DECODE_BOUNDS_H_
#define PTKIT_DECODER_DECODE_BOUNDS_H_

#include <cstdint>

#include "decoder/decode.h"

namespace ptkit::decoder {

struct DecodeBounds {
  uint64_t insns_without_progress = kMaxInsnsWithoutProgress;  // kErrorLoop past this
  uint64_t bts_walk = kMaxBtsWalk;                             // kErrorBtsWalk at this
};

// Sets the bounds of every later decode (not of one running); both must be at least 1.
void SetDecodeBounds(const DecodeBounds& bounds);
DecodeBounds GetDecodeBounds();

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_DECODE_BOUNDS_H_
