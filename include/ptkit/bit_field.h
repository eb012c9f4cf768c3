// The bits of a PMU format field (sysfs format/NAME, "config:14-17" or "config:0-7,32-35"):
// a value's bits spread over the set bits of a mask, lowest value bit first, as perf's
// pmu_format_value() puts them. Pure; shared by the recorder (record/pmu_registry) and the
// metadata reader (ptkit/recording_metadata).
#ifndef PTKIT_BIT_FIELD_H_
#define PTKIT_BIT_FIELD_H_

#include <cstdint>

namespace ptkit {

// The value of the field `mask` in `word`: bit i of the result is the i-th set bit of `mask`
// (counted from bit 0) in `word`.
inline uint64_t ExtractBitField(uint64_t word, uint64_t mask) {
  uint64_t out = 0;
  for (int i = 0; mask != 0; ++i) {
    const uint64_t bit = mask & -mask;
    if (word & bit) out |= uint64_t{1} << i;
    mask &= mask - 1;
  }
  return out;
}

}  // namespace ptkit

#endif  // PTKIT_BIT_FIELD_H_
