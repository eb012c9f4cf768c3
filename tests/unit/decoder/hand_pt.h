// Test helper: the start of hand-made Intel PT for the programs built at 0x401000.
#ifndef PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_
#define PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_

#include <intel-pt.h>

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

// Over callstack_tail.elf: main calls stub (0x401008), which jumps on through %rax
// (TIP 0x40100a) to target; target calls leaf, leaf returns (TNT), target jumps (direct,
// inside the block) on to tail, tail returns to main (TNT), main jumps away (TIP.PGD).
inline std::vector<uint8_t> TailCallTrace() {
  std::vector<uint8_t> t = StartAtMain();
  t.insert(t.end(), {0x6d, 0x0a, 0x10, 0x40, 0x00, 0x00, 0x00, 0x0e, 0x01});
  return t;
}

// A block as the block decoder gives it (64-bit code), for sinks and models fed by hand.
inline pt_block HandBlock(uint64_t ip, uint64_t end_ip, uint16_t ninsn, pt_insn_class iclass) {
  pt_block b = {};
  b.ip = ip;
  b.end_ip = end_ip;
  b.ninsn = ninsn;
  b.iclass = iclass;
  b.mode = ptem_64bit;
  return b;
}

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_HAND_PT_H_
