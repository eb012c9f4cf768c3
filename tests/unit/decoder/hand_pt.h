// Test helper: the start of hand-made Intel PT for the programs built at 0x401000.
#ifndef PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_
#define PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_

#include <cstdint>
#include <vector>

namespace ptkit::decoder::testing {

// PSB, MODE.Exec 64-bit, PSBEND, TIP.PGE 0x401000 (main).
inline std::vector<uint8_t> StartAtMain() {
  std::vector<uint8_t> t;
  for (int i = 0; i < 8; ++i) t.insert(t.end(), {0x02, 0x82});
  t.insert(t.end(), {0x99, 0x01, 0x02, 0x23, 0x71, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00});
  return t;
}

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_
