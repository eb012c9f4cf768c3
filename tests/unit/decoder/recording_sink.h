// A decoder Sink for tests: every decoded instruction address, split into runs at each decode
// error.
#ifndef PTKIT_TESTS_UNIT_DECODER_RECORDING_SINK_H_
#define PTKIT_TESTS_UNIT_DECODER_RECORDING_SINK_H_

#include <cstdint>
#include <vector>

#include "decoder/decode.h"

namespace ptkit::decoder::testing {

class RecordingSink : public Sink {
 public:
  DecoderKind kind() const override { return DecoderKind::kInsn; }
  void OnInsn(const pt_insn& insn) override { runs.back().push_back(insn.ip); }
  void OnError(const DecodeError& error) override {
    errors.push_back(error);
    runs.emplace_back();
  }
  std::vector<std::vector<uint64_t>> runs{1};
  std::vector<DecodeError> errors;
};

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_RECORDING_SINK_H_
