// Writes control-flow events (event.h) as Branch Trace Store records, the format `intel_bts`
// puts in the perf AUX area: 24 bytes {u64 from, u64 to, u64 flags} per taken branch.
#ifndef PTKIT_RECORD_SWPT_BTS_WRITER_H_
#define PTKIT_RECORD_SWPT_BTS_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "record/swpt/event.h"

namespace ptkit::swpt {

struct BtsRecord {
  uint64_t from;
  uint64_t to;
  uint64_t flags;  // Bit 4: predicted. Always 0 here (prediction is not modelled).
};
static_assert(sizeof(BtsRecord) == 24, "intel_bts writes 24-byte records");

class BtsWriter {
 public:
  // Appends the record for `event`, if it has one:
  //  - taken kCondBranch, jumps, calls, kReturn, kFarBranch: {ip, target};
  //  - kInterrupt: {ip (first instruction not retired), target};
  //  - kDisable: {ip, target} (target 0 when suppressed);
  //  - kEnable: {0, target} (the source is outside the traced context).
  // Not-taken branches, kAsyncDisable, kModeChange, kTick, kTime and kOverflow write
  // nothing.
  void Add(const Event& event);

  // Records written so far, as bytes (little-endian, as the kernel writes them).
  const std::vector<uint8_t>& bytes() const { return out_; }
  std::vector<uint8_t> TakeBytes();
  uint64_t records() const { return records_; }

  // Parses BTS bytes back into records; a trailing partial record is ignored.
  static std::vector<BtsRecord> Parse(const uint8_t* data, size_t size);

 private:
  void Put(uint64_t from, uint64_t to);
  std::vector<uint8_t> out_;
  uint64_t records_ = 0;
};

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_BTS_WRITER_H_
