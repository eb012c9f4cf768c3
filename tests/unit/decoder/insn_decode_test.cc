// DecodeInsn (Zydis, libipt where they differ) against libipt's own decoding of the same bytes,
// on random bytes in the three modes: every instruction libipt decodes is decoded the same
// (size, class, a direct branch's displacement), and none that libipt does not.
#include "decoder/insn_decode.h"

#include <array>
#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ptkit::decoder {
namespace {

// Random bytes after `head` (the prefixes and opcode bytes where Zydis and pt_ild part: the
// two-byte map, the VEX, EVEX and XOP escapes, UD0/UD1, VIA's 0F A7).
void ExpectSameAsLibipt(pt_exec_mode mode, const std::string& head, int count) {
  SCOPED_TRACE(absl::StrCat("mode ", mode, " head ", absl::BytesToHexString(head)));
  const Disassembler disasm;
  std::mt19937_64 rng(static_cast<uint64_t>(mode) * 1000 + head.size());
  int decoded = 0, differed = 0;
  for (int i = 0; i < count; ++i) {
    std::array<uint8_t, 15> bytes;
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    for (size_t k = 0; k < head.size(); ++k) bytes[k] = static_cast<uint8_t>(head[k]);
    const uint64_t ip = 0x7f0000001000 + (rng() & 0xffff);
    DecodedInsn libipt, ours;
    const int want = IptDecodeInsn(ip, mode, bytes.data(), bytes.size(), &libipt);
    const int got = DecodeInsn(disasm, ip, mode, bytes.data(), bytes.size(), &ours);
    const std::string hex = absl::BytesToHexString(
        std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (want < 0) {
      EXPECT_LT(got, 0) << hex;
      continue;
    }
    ++decoded;
    ASSERT_EQ(got, 0) << hex;
    const bool same = ours.size == libipt.size && ours.iclass == libipt.iclass &&
                      ours.is_direct == libipt.is_direct &&
                      (!ours.is_direct || ours.displacement == libipt.displacement);
    if (!same && ++differed <= 10) {
      ADD_FAILURE() << hex << ": size " << int{ours.size} << " class " << ours.iclass << " direct "
                    << ours.is_direct << " displacement " << ours.displacement << ", libipt's "
                    << int{libipt.size} << " " << libipt.iclass << " " << libipt.is_direct << " "
                    << libipt.displacement;
    }
  }
  EXPECT_EQ(differed, 0);
  EXPECT_GT(decoded, count / 10);  // libipt decodes most random bytes (VEX3 in 64-bit: 16 %)
}

TEST(InsnDecodeTest, DecodesAsLibiptOnRandomBytes) {
  for (pt_exec_mode mode : {ptem_64bit, ptem_32bit, ptem_16bit}) {
    ExpectSameAsLibipt(mode, "", 60000);
    for (const char* head : {"\x0f", "\x66\x0f", "\xf3\x0f", "\xf2\x0f", "\x0f\x38", "\x0f\x3a",
                             "\xc4", "\xc5", "\x62", "\x8f", "\x0f\xa7", "\x0f\xff", "\x0f\xb9",
                             "\xe8", "\xe9", "\xeb", "\x0f\x84", "\x66\xe8", "\xff"}) {
      ExpectSameAsLibipt(mode, head, 4000);
    }
  }
}

// A branch in bytes Zydis rejects (a LOCK prefix on a direct jump and call): libipt's class
// and target. The bytes a damaged trace reached in a libxdc trace (review 40 H1).
TEST(InsnDecodeTest, BranchesZydisRejectsAreLibipts) {
  const Disassembler disasm;
  struct Case {
    std::string bytes;
    pt_insn_class iclass;
    int32_t displacement;
  } cases[] = {{std::string("\xf0\xeb\x10", 3), ptic_jump, 0x10},
               {std::string("\xf0\xe8\x00\x01\x00\x00", 6), ptic_call, 0x100},
               {std::string("\xf0\x74\xfe", 3), ptic_cond_jump, -2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::BytesToHexString(c.bytes));
    ZydisDecodedInstruction z;
    const auto* bytes = reinterpret_cast<const uint8_t*>(c.bytes.data());
    ASSERT_EQ(disasm.Length(ptem_64bit, bytes, c.bytes.size(), &z), 0);  // Zydis rejects them
    DecodedInsn insn;
    ASSERT_EQ(DecodeInsn(disasm, 0x1000, ptem_64bit, bytes, c.bytes.size(), &insn), 0);
    EXPECT_EQ(insn.size, c.bytes.size());
    EXPECT_EQ(insn.iclass, c.iclass);
    EXPECT_TRUE(insn.is_direct);
    EXPECT_EQ(insn.displacement, c.displacement);
  }
}

}  // namespace
}  // namespace ptkit::decoder
