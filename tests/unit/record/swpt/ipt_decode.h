// Test helper: a bare libipt instruction-flow decoder loop (pt_insn_*) over an image built from
// the ELF PT_LOAD segments with pt_image_add_file, as libipt's ptxed does.
#ifndef PTKIT_TESTS_UNIT_RECORD_SWPT_IPT_DECODE_H_
#define PTKIT_TESTS_UNIT_RECORD_SWPT_IPT_DECODE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "record/swpt/code_image.h"

namespace ptkit::swpt::testing {

struct InsnDecode {
  std::vector<uint64_t> ips;  // Decoded instruction addresses, in order.
  int error = 0;              // First libipt error other than end of stream (0: none).
  uint64_t error_offset = 0;
  int enabled = 0, disabled = 0, async_disabled = 0, overflows = 0;
  std::string Describe() const;
};

// Decodes `pt` from the first PSB, or from the PSB at `sync_offset`, to the end. Errors are
// data (like the product decoder): decoding stops at the first error and reports it.
InsnDecode DecodeInsns(const std::vector<uint8_t>& pt, const CodeImage& image,
                       std::optional<uint64_t> sync_offset = std::nullopt);

// The same with libipt's block decoder (pt_blk_*), the product decoder's default. Block
// instructions are expanded to addresses with Zydis lengths over `image`.
InsnDecode DecodeBlocks(const std::vector<uint8_t>& pt, const CodeImage& image,
                        std::optional<uint64_t> sync_offset = std::nullopt);

}  // namespace ptkit::swpt::testing

#endif  // PTKIT_TESTS_UNIT_RECORD_SWPT_IPT_DECODE_H_
