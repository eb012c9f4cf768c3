#include "record/swpt/pt_encoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <intel-pt.h>

#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "status_matchers.h"

namespace ptkit::swpt {
namespace {

using ::ptkit::testing::IsOk;
using ::ptkit::testing::StatusIs;
using ::testing::ElementsAre;

struct Packet {
  pt_packet_type type;
  uint64_t offset;
  pt_packet raw;
};

// Reads every packet back with libipt's packet decoder.
std::vector<Packet> ReadPackets(const std::vector<uint8_t>& pt) {
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  pt_packet_decoder* dec = pt_pkt_alloc_decoder(&config);
  std::vector<Packet> out;
  EXPECT_GE(pt_pkt_sync_set(dec, 0), 0);
  for (;;) {
    uint64_t offset = 0;
    pt_pkt_get_offset(dec, &offset);
    pt_packet p;
    int rc = pt_pkt_next(dec, &p, sizeof(p));
    if (rc == -pte_eos) break;
    EXPECT_GT(rc, 0) << "bad packet at " << offset << ": " << pt_errstr(pt_errcode(rc));
    if (rc <= 0) break;
    out.push_back({p.type, offset, p});
  }
  pt_pkt_free_decoder(dec);
  return out;
}

std::vector<pt_packet_type> Types(const std::vector<Packet>& packets) {
  std::vector<pt_packet_type> t;
  t.reserve(packets.size());
  for (const Packet& p : packets) t.push_back(p.type);
  return t;
}

// Encodes `events` and finishes; returns the bytes.
std::vector<uint8_t> Encode(const std::vector<Event>& events, PtEncoderOptions options = {}) {
  auto enc = PtEncoder::Create(options);
  EXPECT_TRUE(enc.ok()) << enc.status();
  for (const Event& e : events) EXPECT_THAT(enc->Add(e), IsOk());
  EXPECT_THAT(enc->Finish(), IsOk());
  return enc->TakeBytes();
}

// The packets after the initial PSB+ (PSB ... PSBEND).
std::vector<Packet> AfterFirstPsb(const std::vector<uint8_t>& pt) {
  std::vector<Packet> all = ReadPackets(pt);
  size_t i = 0;
  while (i < all.size() && all[i].type != ppt_psbend) ++i;
  return std::vector<Packet>(all.begin() + std::min(i + 1, all.size()), all.end());
}

constexpr uint64_t kIp = 0x401000;

// Independent implementation of the decoder's last-IP update (SDM "IP Compression").
uint64_t ApplyIp(uint64_t last, const pt_packet_ip& ip) {
  switch (ip.ipc) {
    case pt_ipc_update_16:
      return (last & ~0xffffull) | (ip.ip & 0xffff);
    case pt_ipc_update_32:
      return (last & ~0xffffffffull) | (ip.ip & 0xffffffff);
    case pt_ipc_update_48:
      return (last & ~0xffffffffffffull) | (ip.ip & 0xffffffffffff);
    case pt_ipc_sext_48:
      return (ip.ip & (1ull << 47)) ? (ip.ip | 0xffff000000000000ull) : (ip.ip & 0xffffffffffffull);
    case pt_ipc_full:
      return ip.ip;
    case pt_ipc_suppressed:
      return last;
  }
  return last;
}

TEST(SwptIpCompressionTest, PicksTheShortestEncoding) {
  EXPECT_EQ(ChooseIpCompression(0x401234, 0x401000), pt_ipc_update_16);
  EXPECT_EQ(ChooseIpCompression(0x419000, 0x401000), pt_ipc_update_32);
  EXPECT_EQ(ChooseIpCompression(0x401000, 0), pt_ipc_update_32);  // Against zero after PSB.
  EXPECT_EQ(ChooseIpCompression(0x1234, 0), pt_ipc_update_16);
  EXPECT_EQ(ChooseIpCompression(0x7fff12345678, 0x401000), pt_ipc_sext_48);
  EXPECT_EQ(ChooseIpCompression(0xffffffff81000000, 0x401000), pt_ipc_sext_48);
  EXPECT_EQ(ChooseIpCompression(0x1234567800000000, 0x1234000000005000), pt_ipc_update_48);
  EXPECT_EQ(ChooseIpCompression(0x1234000000005000, 0xffffffff81000000), pt_ipc_full);
}

TEST(SwptPtEncoderTest, RejectsBadOptions) {
  EXPECT_THAT(PtEncoder::Create({.psb_period = 16}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PtEncoder::Create({.max_tnt_bits = 48}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PtEncoder::Create({.max_tnt_bits = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PtEncoder::Create({.mtc = true, .cpuid_0x15_eax = 1, .cpuid_0x15_ebx = 600}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SwptPtEncoderTest, RejectsEventsThatDoNotFitTheTracingState) {
  PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc, PtEncoder::Create({}));
  EXPECT_THAT(enc.Add(Event::Cond(kIp, 2, true, kIp + 0x10)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Failures are sticky.
  EXPECT_THAT(enc.Add(Event::Enable(kIp)), StatusIs(absl::StatusCode::kFailedPrecondition));

  PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc2, PtEncoder::Create({}));
  EXPECT_THAT(enc2.Add(Event::Enable(kIp)), IsOk());
  EXPECT_THAT(enc2.Add(Event::Enable(kIp)), StatusIs(absl::StatusCode::kFailedPrecondition));

  PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc3, PtEncoder::Create({}));
  EXPECT_THAT(enc3.Add(Event::Enable(kIp)), IsOk());
  EXPECT_THAT(enc3.Finish(), IsOk());
  EXPECT_THAT(enc3.Add(Event::Cond(kIp, 2, true, kIp)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SwptPtEncoderTest, TraceStartsWithPsbThenModeAndPge) {
  auto pt = Encode({Event::Enable(kIp)});
  auto packets = ReadPackets(pt);
  EXPECT_THAT(Types(packets), ElementsAre(ppt_psb, ppt_psbend, ppt_mode, ppt_tip_pge));
  EXPECT_EQ(packets[2].raw.payload.mode.leaf, pt_mol_exec);
  EXPECT_EQ(pt_get_exec_mode(&packets[2].raw.payload.mode.bits.exec), ptem_64bit);
  EXPECT_EQ(packets[3].raw.payload.ip.ipc, pt_ipc_sext_48);  // The first IP after a PSB.
  EXPECT_EQ(packets[3].raw.payload.ip.ip, kIp);
}

TEST(SwptPtEncoderTest, PacksSixBranchesIntoTnt8OldestFirst) {
  // Taken pattern 1,0,1,1,0,0 then 1 pending at Finish.
  std::vector<Event> events = {Event::Enable(kIp)};
  const bool pattern[] = {true, false, true, true, false, false, true};
  for (bool t : pattern) events.push_back(Event::Cond(kIp, 2, t, kIp + 0x40));
  auto packets = AfterFirstPsb(Encode(events));
  ASSERT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_8, ppt_tnt_8));
  EXPECT_EQ(packets[2].raw.payload.tnt.bit_size, 6);
  EXPECT_EQ(packets[2].raw.payload.tnt.payload, 0b101100u);
  EXPECT_EQ(packets[3].raw.payload.tnt.bit_size, 1);
  EXPECT_EQ(packets[3].raw.payload.tnt.payload, 1u);
}

TEST(SwptPtEncoderTest, UsesTnt64UpTo47BitsAndTnt8ForShortFlushes) {
  std::vector<Event> events = {Event::Enable(kIp)};
  for (int i = 0; i < 47 + 10; ++i) events.push_back(Event::Cond(kIp, 2, i % 3 == 0, kIp + 8));
  events.push_back(Event::Simple(EventKind::kIndirectJump, kIp, kIp + 0x100));
  for (int i = 0; i < 3; ++i) events.push_back(Event::Cond(kIp, 2, true, kIp + 8));
  events.push_back(Event::Simple(EventKind::kIndirectJump, kIp, kIp + 0x200));
  auto packets = AfterFirstPsb(Encode(events, {.psb_period = 15, .max_tnt_bits = 47}));
  ASSERT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_64, ppt_tnt_64, ppt_tip,
                                          ppt_tnt_8, ppt_tip));
  EXPECT_EQ(packets[2].raw.payload.tnt.bit_size, 47);
  uint64_t expected = 0;
  for (int i = 0; i < 47; ++i) expected = (expected << 1) | (i % 3 == 0);
  EXPECT_EQ(packets[2].raw.payload.tnt.payload, expected);
  EXPECT_EQ(packets[3].raw.payload.tnt.bit_size, 10);  // Flushed by the TIP.
  EXPECT_EQ(packets[5].raw.payload.tnt.bit_size, 3);
}

TEST(SwptPtEncoderTest, FlushesPendingTntBeforeFupPgdModeAndPsb) {
  auto packets = AfterFirstPsb(Encode({
      Event::Enable(kIp),
      Event::Cond(kIp, 2, true, kIp + 8),
      Event::Simple(EventKind::kInterrupt, kIp + 8, 0x402000),
      Event::Cond(0x402000, 2, false, 0x402100),
      Event::ModeChange(ExecMode::k32Bit),
      Event::Simple(EventKind::kFarBranch, 0x402002, 0x403000),
      Event::Cond(0x403000, 2, false, 0x403100),
      Event::Disable(0x403002, 0, /*suppress_ip=*/true),
  }));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_8, ppt_fup, ppt_tip,
                                          ppt_tnt_8, ppt_mode, ppt_tip, ppt_tnt_8, ppt_tip_pgd));
  EXPECT_EQ(ApplyIp(kIp, packets[3].raw.payload.ip), kIp + 8);  // FUP: source of the interrupt.
  EXPECT_EQ(pt_get_exec_mode(&packets[6].raw.payload.mode.bits.exec), ptem_32bit);
  EXPECT_EQ(packets[9].raw.payload.ip.ipc, pt_ipc_suppressed);
}

TEST(SwptPtEncoderTest, CompressesIpsAgainstTheLastIp) {
  const uint64_t targets[] = {
      0x401234,           0x7fff12345678,     0x7fff12349999,     0xffffffff81000000,
      0x1234000000005000, 0x1234000000006000, 0x1234567800000000, 0x401000};
  std::vector<Event> events = {Event::Enable(kIp)};
  for (uint64_t t : targets) events.push_back(Event::Simple(EventKind::kIndirectJump, 0, t));
  // A suppressed TIP.PGD leaves the last IP alone: the TIP.PGE after it compresses to 16 bits.
  events.push_back(Event::Disable(0x401000, 0, /*suppress_ip=*/true));
  events.push_back(Event::Enable(0x401010));
  auto packets = AfterFirstPsb(Encode(events, {.psb_period = 15}));
  std::vector<int> ipcs;
  uint64_t last = 0;
  std::vector<uint64_t> ips;
  for (const Packet& p : packets) {
    if (p.type != ppt_tip && p.type != ppt_tip_pge && p.type != ppt_tip_pgd) continue;
    ipcs.push_back(p.raw.payload.ip.ipc);
    last = ApplyIp(last, p.raw.payload.ip);
    if (p.raw.payload.ip.ipc != pt_ipc_suppressed) ips.push_back(last);
  }
  EXPECT_THAT(ipcs, ElementsAre(pt_ipc_sext_48, pt_ipc_update_16, pt_ipc_sext_48, pt_ipc_update_16,
                                pt_ipc_sext_48, pt_ipc_full, pt_ipc_update_16, pt_ipc_update_48,
                                pt_ipc_sext_48, pt_ipc_suppressed, pt_ipc_update_16));
  std::vector<uint64_t> expected = {kIp};
  expected.insert(expected.end(), std::begin(targets), std::end(targets));
  expected.push_back(0x401010);
  EXPECT_EQ(ips, expected);
}

TEST(SwptPtEncoderTest, WritesPsbPlusEveryPeriodAndResetsLastIp) {
  for (uint8_t period : {0, 1, 2}) {
    SCOPED_TRACE(absl::StrCat("psb_period ", period));
    PtEncoderOptions options{.psb_period = period, .tsc = true, .mtc = true, .tsc_start = 5000};
    PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc, PtEncoder::Create(options));
    ASSERT_THAT(enc.Add(Event::Enable(kIp)), IsOk());
    std::mt19937_64 rng(period);
    std::vector<uint64_t> next_ips;
    for (int i = 0; i < 20000; ++i) {
      uint64_t target = 0x400000 + (rng() % 0x100000);
      ASSERT_THAT(enc.Add(Event::Simple(EventKind::kIndirectJump, 0, target)), IsOk());
      next_ips.push_back(target);
    }
    ASSERT_THAT(enc.Finish(), IsOk());
    std::vector<PsbMark> marks = enc.psbs();
    auto packets = ReadPackets(enc.TakeBytes());
    const uint64_t period_bytes = uint64_t{2048} << period;
    ASSERT_GT(marks.size(), 3u);
    size_t mark = 0;
    for (size_t i = 0; i < packets.size(); ++i) {
      if (packets[i].type != ppt_psb) continue;
      ASSERT_LT(mark, marks.size());
      EXPECT_EQ(packets[i].offset, marks[mark].offset);
      if (mark > 0) {
        uint64_t distance = marks[mark].offset - marks[mark - 1].offset;
        EXPECT_GE(distance, period_bytes);
        EXPECT_LT(distance, period_bytes + 64);  // At the next packet boundary.
        // PSB+: TSC, TMA, CBR, MODE.Exec, FUP (the whole IP), PSBEND.
        ASSERT_LT(i + 6, packets.size());
        std::vector<pt_packet_type> plus;
        for (size_t k = i; k <= i + 6; ++k) plus.push_back(packets[k].type);
        EXPECT_THAT(plus,
                    ElementsAre(ppt_psb, ppt_tsc, ppt_tma, ppt_cbr, ppt_mode, ppt_fup, ppt_psbend));
        EXPECT_EQ(packets[i + 1].raw.payload.tsc.tsc, 5000u);
        const pt_packet_ip& fup = packets[i + 5].raw.payload.ip;
        EXPECT_EQ(ApplyIp(0, fup), next_ips[marks[mark].events - 2]);
        EXPECT_EQ(fup.ipc, pt_ipc_sext_48);  // Whole, not against the previous TIP.
      }
      ++mark;
    }
    EXPECT_EQ(mark, marks.size());
  }
}

TEST(SwptPtEncoderTest, TheFirstIpAfterAPsbIsWholeInTheBytes) {
  // PSB, PSBEND, MODE.Exec 64-bit, TIP.PGE with IPBytes 011b (sign-extended 48 bits): the
  // last IP is reset by the PSB, so no 16- or 32-bit update.
  EXPECT_THAT(Encode({Event::Enable(kIp)}),
              ElementsAre(0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
                          0x02, 0x82, 0x02, 0x82, 0x02, 0x23, 0x99, 0x01, 0x71, 0x00, 0x10, 0x40,
                          0x00, 0x00, 0x00));
  // An IP that is not a sign-extended 48-bit one goes out in full (IPBytes 110b, 8 bytes).
  const std::vector<uint8_t> full = Encode({Event::Enable(0x1234000000401000)});
  ASSERT_EQ(full.size(), 18u + 2 + 9);
  EXPECT_THAT(std::vector<uint8_t>(full.begin() + 20, full.end()),
              ElementsAre(0xd1, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x34, 0x12));
}

// The bytes of an IP packet at `offset`: its IPBytes field (bits 7:5) and its payload as an
// address (little-endian, the IPBytes' size).
std::pair<int, uint64_t> IpBytesAt(const std::vector<uint8_t>& pt, uint64_t offset) {
  const int ipbytes = pt[offset] >> 5;
  const int size = ipbytes == 1 ? 2 : ipbytes == 2 ? 4 : ipbytes == 3 || ipbytes == 4 ? 6 : 8;
  uint64_t ip = 0;
  for (int i = 0; i < size && ipbytes != 0; ++i) ip |= uint64_t{pt[offset + 1 + i]} << (8 * i);
  return {ipbytes, ip};
}

TEST(SwptPtEncoderTest, PsbPlusFupAndTheIpAfterItAreWholeAfterAnIpInAnotherRegion) {
  // The vdso case: jumps between a program at 0x40xxxx and the vdso at 0x7fff...; a PSB+ FUP
  // with a 32-bit update would be wrong for a decoder that keeps the last IP from before the
  // PSB (perf 6.1 does), so the FUP and the next IP packet carry the whole IP (IPBytes 011b).
  PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc, PtEncoder::Create({.psb_period = 0}));
  ASSERT_THAT(enc.Add(Event::Enable(kIp)), IsOk());
  std::mt19937_64 rng(3);
  for (int i = 0; i < 4000; ++i) {
    const uint64_t target = ((i / 8) % 2 ? 0x7ffff7fc1000 : 0x401000) + (rng() % 0x1000);
    ASSERT_THAT(enc.Add(Event::Simple(EventKind::kIndirectJump, 0, target)), IsOk());
  }
  ASSERT_THAT(enc.Add(Event::Overflow(0x401234)), IsOk());
  ASSERT_THAT(enc.Add(Event::Simple(EventKind::kIndirectJump, 0x401240, 0x401300)), IsOk());
  ASSERT_THAT(enc.Finish(), IsOk());
  const std::vector<uint8_t> pt = enc.TakeBytes();
  const std::vector<Packet> packets = ReadPackets(pt);
  int psbs = 0, whole = 0, after_ovf = 0, compressed = 0;
  bool psb_plus = false, first_after = false, ovf = false;
  for (const Packet& p : packets) {
    if (p.type == ppt_psb) {
      psb_plus = true;
      ++psbs;
    } else if (p.type == ppt_psbend) {
      psb_plus = false;
      first_after = true;
    } else if (p.type == ppt_ovf) {
      ovf = true;
    }
    if (p.type != ppt_fup && p.type != ppt_tip && p.type != ppt_tip_pge) continue;
    const auto [ipbytes, ip] = IpBytesAt(pt, p.offset);
    if (psb_plus || first_after || ovf) {
      SCOPED_TRACE(absl::StrCat("packet at ", p.offset));
      EXPECT_EQ(ipbytes, 3);  // sext-48: the whole IP, no update of the last IP.
      EXPECT_EQ(ip, p.raw.payload.ip.ip);
      ++whole;
      if (ovf) ++after_ovf;
    } else if (ipbytes == 1 || ipbytes == 2) {
      ++compressed;  // Updates of the last IP again.
    }
    if (!psb_plus) first_after = ovf = false;
  }
  EXPECT_GT(psbs, 4);
  EXPECT_EQ(after_ovf, 1);
  EXPECT_GE(whole, 2 * (psbs - 1));  // The FUP and the TIP after every PSB+ with a FUP.
  EXPECT_GT(compressed, 3000);
}

TEST(SwptPtEncoderTest, CompressesReturnsToCallsSeenSinceThePsb) {
  constexpr uint64_t kCall = 0x401000, kFn = 0x402000, kRet = 0x402010;
  auto call = [](uint64_t at) { return Event::Simple(EventKind::kDirectCall, at, kFn, 5); };
  auto ret = [](uint64_t to) { return Event::Simple(EventKind::kReturn, kRet, to); };
  // Matching call/ret: one taken TNT bit, no TIP.
  auto packets = AfterFirstPsb(Encode({Event::Enable(kCall), call(kCall), ret(kCall + 5)}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_8));
  EXPECT_EQ(packets[2].raw.payload.tnt.payload, 1u);
  // noretcomp: a TIP.
  packets = AfterFirstPsb(
      Encode({Event::Enable(kCall), call(kCall), ret(kCall + 5)}, {.ret_compression = false}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip));
  // Target is not the top of the stack (a signal handler's RET to its restorer): a TIP, and
  // the stack is emptied, so the RET to the call's next IP after it is a TIP too (libipt's
  // decoder would pop that entry there, perf's had popped it at the first RET). A call after
  // it is compressed again.
  packets =
      AfterFirstPsb(Encode({Event::Enable(kCall), call(kCall), ret(0x409999), ret(kCall + 5)}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip, ppt_tip));
  packets =
      AfterFirstPsb(Encode({Event::Enable(kCall), call(kCall), call(kCall + 0x20), ret(0x409999),
                            call(kCall + 0x40), ret(kCall + 0x45), ret(kCall + 5)}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip, ppt_tnt_8, ppt_tip));
  // Zero-length call (call to the next instruction) is not pushed.
  packets = AfterFirstPsb(
      Encode({Event::Enable(kCall), Event::Simple(EventKind::kDirectCall, kCall, kCall + 5, 5),
              ret(kCall + 5)}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip));
  // Indirect calls are pushed too.
  packets = AfterFirstPsb(
      Encode({Event::Enable(kCall), Event::Simple(EventKind::kIndirectCall, kCall, kFn, 3),
              ret(kCall + 3)}));
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip, ppt_tnt_8));
  // A far branch (a heaven's gate's far returns into 32-bit code and back) empties the stack:
  // perf's decoder pops its own at a far RET, libipt's does not, so the near RET to a call
  // from before it is a TIP.
  packets = AfterFirstPsb(Encode(
      {Event::Enable(kCall), call(kCall), Event::ModeChange(ExecMode::k32Bit),
       Event::Simple(EventKind::kFarBranch, kFn + 4, 0x403000), Event::ModeChange(ExecMode::k64Bit),
       Event::Simple(EventKind::kFarBranch, 0x403010, kRet - 4), ret(kCall + 5)}));
  EXPECT_THAT(Types(packets),
              ElementsAre(ppt_mode, ppt_tip_pge, ppt_mode, ppt_tip, ppt_mode, ppt_tip, ppt_tip));
}

TEST(SwptPtEncoderTest, CallBeforePsbGivesUncompressedReturn) {
  PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc, PtEncoder::Create({.psb_period = 0}));
  ASSERT_THAT(enc.Add(Event::Enable(0x401000)), IsOk());
  ASSERT_THAT(enc.Add(Event::Simple(EventKind::kDirectCall, 0x401000, 0x500000, 5)), IsOk());
  size_t psbs = enc.psbs().size();
  uint64_t t = 0;
  while (enc.psbs().size() == psbs) {  // Far-apart jumps until the next PSB.
    ASSERT_THAT(
        enc.Add(Event::Simple(EventKind::kIndirectJump, 0, (t++ % 2) ? 0x600000 : 0x7fff0000)),
        IsOk());
  }
  ASSERT_THAT(enc.Add(Event::Simple(EventKind::kReturn, 0x500010, 0x401005)), IsOk());
  ASSERT_THAT(enc.Finish(), IsOk());
  auto packets = ReadPackets(enc.TakeBytes());
  ASSERT_FALSE(packets.empty());
  EXPECT_EQ(packets.back().type, ppt_tip);
  EXPECT_EQ(ApplyIp(0x401005, packets.back().raw.payload.ip), 0x401005u);
}

TEST(SwptPtEncoderTest, ReturnStackHolds64Calls) {
  std::vector<Event> events = {Event::Enable(0x401000)};
  for (uint64_t i = 0; i < 65; ++i) {
    events.push_back(Event::Simple(EventKind::kDirectCall, 0x401000 + 16 * i, 0x500000, 5));
  }
  for (uint64_t i = 65; i-- > 0;) {
    events.push_back(Event::Simple(EventKind::kReturn, 0x500010, 0x401005 + 16 * i));
  }
  auto packets = AfterFirstPsb(Encode(events, {.psb_period = 15, .max_tnt_bits = 47}));
  // 64 compressed returns (two TNT-64: 47 + 17 bits), then the oldest call fell off: a TIP.
  ASSERT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_64, ppt_tnt_64, ppt_tip));
  EXPECT_EQ(packets[2].raw.payload.tnt.bit_size + packets[3].raw.payload.tnt.bit_size, 64);
  EXPECT_EQ(ApplyIp(0x401000, packets[4].raw.payload.ip), 0x401005u);
}

TEST(SwptPtEncoderTest, SyscallWithUserOnlyTracing) {
  auto packets = AfterFirstPsb(
      Encode({Event::Enable(kIp), Event::Disable(kIp + 4, 0, true), Event::Enable(kIp + 6),
              Event::ModeChange(ExecMode::k32Bit), Event::Disable(kIp + 8, 0, true),
              Event::Enable(kIp + 10, ExecMode::k32Bit)}));
  // MODE.Exec only before the first TIP.PGE after the PSB and when the mode changed.
  EXPECT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip_pgd, ppt_tip_pge,
                                          ppt_tip_pgd, ppt_mode, ppt_tip_pge));
  EXPECT_EQ(packets[2].raw.payload.ip.ipc, pt_ipc_suppressed);
  EXPECT_EQ(packets[3].raw.payload.ip.ipc, pt_ipc_update_16);
}

TEST(SwptPtEncoderTest, AnEnableInAnotherModeSendsModeExec) {
  // A return to user into 32-bit code (an exec of an i386 program) says its mode with the
  // TIP.PGE alone, without a ModeChange before it.
  auto packets = AfterFirstPsb(
      Encode({Event::Enable(kIp), Event::Disable(kIp + 4, 0, true),
              Event::Enable(kIp + 6, ExecMode::k32Bit), Event::Disable(kIp + 8, 0, true),
              Event::Enable(kIp + 10, ExecMode::k32Bit)}));
  ASSERT_THAT(Types(packets), ElementsAre(ppt_mode, ppt_tip_pge, ppt_tip_pgd, ppt_mode, ppt_tip_pge,
                                          ppt_tip_pgd, ppt_tip_pge));
  EXPECT_EQ(pt_get_exec_mode(&packets[3].raw.payload.mode.bits.exec), ptem_32bit);
}

TEST(SwptPtEncoderTest, OverflowIsFollowedByFupAndResetsState) {
  auto pt =
      Encode({Event::Enable(kIp), Event::Cond(kIp, 2, true, kIp + 8), Event::Overflow(0x405000),
              Event::Simple(EventKind::kIndirectJump, 0x405010, 0x405100)},
             {.psb_period = 15});
  auto packets = AfterFirstPsb(pt);
  ASSERT_THAT(Types(packets),
              ElementsAre(ppt_mode, ppt_tip_pge, ppt_tnt_8, ppt_ovf, ppt_fup, ppt_tip));
  EXPECT_EQ(packets[4].raw.payload.ip.ipc, pt_ipc_sext_48);  // Last IP reset: the whole IP.
  EXPECT_EQ(ApplyIp(0, packets[4].raw.payload.ip), 0x405000u);

  // libipt's query decoder reports the overflow at the resume IP.
  pt_config config;
  pt_config_init(&config);
  config.begin = pt.data();
  config.end = pt.data() + pt.size();
  pt_query_decoder* q = pt_qry_alloc_decoder(&config);
  uint64_t ip = 0;
  int status = pt_qry_sync_forward(q, &ip);
  ASSERT_GE(status, 0);
  bool saw_overflow = false;
  int taken = 0;
  while (status >= 0) {
    if (status & pts_event_pending) {
      pt_event ev;
      status = pt_qry_event(q, &ev, sizeof(ev));
      if (ev.type == ptev_overflow) {
        saw_overflow = true;
        EXPECT_EQ(ev.variant.overflow.ip, 0x405000u);
      }
      continue;
    }
    if (!saw_overflow) {
      status = pt_qry_cond_branch(q, &taken);
      EXPECT_EQ(taken, 1);
    } else {
      status = pt_qry_indirect_branch(q, &ip);
      if (status >= 0) {
        EXPECT_EQ(ip, 0x405100u);
      }
      break;
    }
  }
  pt_qry_free_decoder(q);
  EXPECT_TRUE(saw_overflow);
}

TEST(SwptPtEncoderTest, TimingPackets) {
  PtEncoderOptions options{.psb_period = 15,
                           .tsc = true,
                           .mtc = true,
                           .mtc_freq = 2,
                           .cyc = true,
                           .cpuid_0x15_eax = 1,
                           .cpuid_0x15_ebx = 10};
  std::vector<Event> events = {Event::Enable(kIp)};
  uint64_t cycles = 0;
  for (int i = 0; i < 100; ++i) {
    events.push_back(Event::Tick(7));
    cycles += 7;
    events.push_back(Event::Simple(EventKind::kIndirectJump, 0, kIp + i));
  }
  auto packets = ReadPackets(Encode(events, options));
  uint64_t cyc_sum = 0;
  int mtcs = 0;
  uint8_t last_ctc = 0;
  for (const Packet& p : packets) {
    if (p.type == ppt_cyc) cyc_sum += p.raw.payload.cyc.value;
    if (p.type == ppt_mtc) {
      // CTC = TSC / 10; one MTC per 4 CTC ticks, payload CTC[9:2].
      if (mtcs > 0) {
        EXPECT_EQ(static_cast<uint8_t>(last_ctc + 1), p.raw.payload.mtc.ctc);
      }
      last_ctc = p.raw.payload.mtc.ctc;
      ++mtcs;
    }
  }
  EXPECT_EQ(cyc_sum, cycles);  // Every tick was reported before the next TIP.
  EXPECT_EQ(mtcs, static_cast<int>(cycles / 10 / 4));
  EXPECT_EQ(last_ctc, (cycles / 10 / 4) & 0xff);
  EXPECT_EQ(packets[1].type, ppt_tsc);
  EXPECT_EQ(packets[2].type, ppt_tma);
}

// A tick of many MTC periods (a single-stepped instruction, a blocking system call) gives an
// MTC at least every 255 periods: the 8-bit payload cannot tell 256 or more from fewer, and
// decoders took them for fewer (sweep 40a F5). The branches before the tick go out first, so
// the MTCs time them before it.
TEST(SwptPtEncoderTest, ALongTickGivesAnMtcEvery255PeriodsAfterThePendingBranches) {
  PtEncoderOptions options{.psb_period = 15,
                           .tsc = true,
                           .mtc = true,
                           .mtc_freq = 0,
                           .cpuid_0x15_eax = 1,
                           .cpuid_0x15_ebx = 1};  // one MTC period per TSC tick
  const auto packets =
      ReadPackets(Encode({Event::Enable(kIp), Event::Cond(kIp, 2, true, kIp + 8), Event::Tick(600),
                          Event::Simple(EventKind::kIndirectJump, 0, kIp + 16)},
                         options));
  std::vector<uint8_t> ctcs;
  size_t first_mtc = packets.size(), tnt = packets.size();
  for (size_t i = 0; i < packets.size(); ++i) {
    if (packets[i].type == ppt_mtc) {
      ctcs.push_back(packets[i].raw.payload.mtc.ctc);
      first_mtc = std::min(first_mtc, i);
    }
    if (packets[i].type == ppt_tnt_8) tnt = i;
  }
  EXPECT_THAT(ctcs, ElementsAre(255, static_cast<uint8_t>(510), static_cast<uint8_t>(600)));
  EXPECT_LT(tnt, first_mtc);  // the branch before the tick, before its MTCs

  // A time that a TSC packet gives (a blocking call's end): no chain of MTCs, but the TSC and
  // a TMA with the CTC (a review: a 3 s sleep wrote 14,728 MTCs); a short one keeps its MTC.
  const auto timed = ReadPackets(Encode(
      {Event::Enable(kIp), Event::Time(100000), Event::Simple(EventKind::kIndirectJump, 0, kIp),
       Event::Time(100100), Event::Simple(EventKind::kIndirectJump, 0, kIp + 4)},
      options));
  std::vector<pt_packet_type> after_pge;
  for (const Packet& p : timed) {
    if (!after_pge.empty() || p.type == ppt_tip_pge) after_pge.push_back(p.type);
  }
  EXPECT_THAT(after_pge,
              ElementsAre(ppt_tip_pge, ppt_tsc, ppt_tma, ppt_tip, ppt_mtc, ppt_tsc, ppt_tip));
}

TEST(SwptPtEncoderTest, TimeSetsThePsbTscThenWritesTscPacketsAfterPendingBranches) {
  const auto packets = ReadPackets(Encode(
      {
          Event::Time(1000),  // before TraceEn: the opening PSB+ carries it
          Event::Enable(kIp), Event::Cond(kIp, 2, true, kIp + 8), Event::Time(1500),
          Event::Cond(kIp + 8, 2, false, kIp + 10),
          Event::Disable(kIp + 10, 0, /*suppress_ip=*/true),
          Event::Time(2500),  // while tracing is off, as timing packets go on
      },
      {.psb_period = 15, .tsc = true}));
  EXPECT_THAT(Types(packets),
              ElementsAre(ppt_psb, ppt_tsc, ppt_cbr, ppt_psbend, ppt_mode, ppt_tip_pge, ppt_tnt_8,
                          ppt_tsc, ppt_tnt_8, ppt_tip_pgd, ppt_tsc));
  EXPECT_EQ(packets[1].raw.payload.tsc.tsc, 1000u);
  EXPECT_EQ(packets[6].raw.payload.tnt.bit_size, 1);  // the branch before the time
  EXPECT_EQ(packets[7].raw.payload.tsc.tsc, 1500u);
  EXPECT_EQ(packets[10].raw.payload.tsc.tsc, 2500u);

  // Without TSCEn there are no TSC packets; a time going backwards is refused.
  EXPECT_THAT(Types(ReadPackets(Encode({Event::Enable(kIp), Event::Time(5)}))),
              ElementsAre(ppt_psb, ppt_psbend, ppt_mode, ppt_tip_pge));
  auto enc = PtEncoder::Create({.tsc = true, .tsc_start = 100});
  ASSERT_THAT(enc, IsOk());
  ASSERT_THAT(enc->Add(Event::Enable(kIp)), IsOk());
  EXPECT_THAT(enc->Add(Event::Time(99)), StatusIs(absl::StatusCode::kInvalidArgument));
}

// With a clock (qemu's plugin, which gives the time at system calls only), each PSB+ carries the
// clock's time when it is later than the last, and a time the clock has passed is no error:
// every PSB+ of a stretch without system calls had the same TSC (sweep 28d).
uint64_t g_clock = 0;
uint64_t TestClock() { return g_clock; }

TEST(SwptPtEncoderTest, WithAClockEachPsbCarriesItsTime) {
  g_clock = 2000;
  auto enc =
      PtEncoder::Create({.psb_period = 0, .tsc = true, .tsc_start = 100, .clock = TestClock});
  ASSERT_THAT(enc, IsOk());
  ASSERT_THAT(enc->Add(Event::Enable(kIp)), IsOk());  // the opening PSB+: 2000
  uint64_t ip = kIp;
  for (int i = 0; i < 6000; ++i, ip += 8) {  // indirect jumps: a PSB+ every 2 KiB
    if (i == 3000) g_clock = 7000;
    ASSERT_THAT(enc->Add(Event::Simple(EventKind::kIndirectJump, ip, ip + 8)), IsOk());
  }
  EXPECT_THAT(enc->Add(Event::Time(5000)), IsOk());  // the clock passed it: 7000 stays
  ASSERT_THAT(enc->Finish(), IsOk());
  std::vector<uint64_t> psb_tscs, tscs;
  const std::vector<Packet> packets = ReadPackets(enc->TakeBytes());
  for (size_t i = 0; i + 1 < packets.size(); ++i) {
    if (packets[i + 1].type != ppt_tsc) continue;
    (packets[i].type == ppt_psb ? psb_tscs : tscs).push_back(packets[i + 1].raw.payload.tsc.tsc);
  }
  ASSERT_GT(psb_tscs.size(), 4u);
  EXPECT_EQ(psb_tscs.front(), 2000u);
  EXPECT_EQ(psb_tscs.back(), 7000u);
  EXPECT_TRUE(std::is_sorted(psb_tscs.begin(), psb_tscs.end()));
  EXPECT_THAT(tscs, ElementsAre(7000u));
}

// --- Random event streams decoded with libipt's query decoder from every PSB. ---

struct Flow {
  std::vector<Event> events;
};

// A plausible random control flow: the IPs are arbitrary (no code is needed for the query
// decoder), returns mostly go back to their calls, with interrupts, syscalls, mode changes,
// ticks and overflows mixed in.
Flow RandomFlow(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  const uint64_t regions[] = {0x400000, 0x555555554000, 0x7fffd0000000, 0xffffffff81000000,
                              0x1234000000000000};
  auto addr = [&] { return regions[rng() % 5] + (rng() % 0x200000); };
  Flow f;
  std::vector<uint64_t> calls;
  bool tracing = false;
  uint64_t ip = addr();
  while (f.events.size() < n) {
    if (!tracing) {
      ip = addr();
      f.events.push_back(Event::Enable(ip));
      tracing = true;
      continue;
    }
    uint64_t r = rng() % 100;
    if (r < 45) {
      bool taken = rng() % 2;
      f.events.push_back(Event::Cond(ip, 2, taken, ip + 0x40));
      ip = f.events.back().target;
    } else if (r < 55) {
      uint64_t size = (rng() % 4 == 0) ? 3 : 5;
      uint64_t t = addr();
      bool indirect = rng() % 2;
      if (!indirect && rng() % 10 == 0) t = ip + size;  // Zero-length call.
      f.events.push_back(Event::Simple(indirect ? EventKind::kIndirectCall : EventKind::kDirectCall,
                                       ip, t, static_cast<uint8_t>(size)));
      if (t != ip + size || indirect) calls.push_back(ip + size);
      ip = t;
    } else if (r < 68) {
      uint64_t t = addr();
      if (!calls.empty() && rng() % 8 != 0) {
        t = calls.back();
        calls.pop_back();
      }
      f.events.push_back(Event::Simple(EventKind::kReturn, ip, t));
      ip = t;
    } else if (r < 75) {
      uint64_t t = addr();
      f.events.push_back(Event::Simple(EventKind::kIndirectJump, ip, t));
      ip = t;
    } else if (r < 80) {
      uint64_t t = addr();
      f.events.push_back(Event::Simple(EventKind::kDirectJump, ip, t));
      ip = t;
    } else if (r < 83) {
      uint64_t t = addr();
      f.events.push_back(Event::Simple(EventKind::kInterrupt, ip, t));
      ip = t;
    } else if (r < 85) {
      f.events.push_back(Event::ModeChange(rng() % 2 ? ExecMode::k64Bit : ExecMode::k32Bit));
      uint64_t t = addr();
      f.events.push_back(Event::Simple(EventKind::kFarBranch, ip, t));
      ip = t;
    } else if (r < 88) {
      f.events.push_back(Event::Disable(ip, addr(), rng() % 2));
      tracing = false;
    } else if (r < 90) {
      f.events.push_back(Event::AsyncDisable(ip));
      tracing = false;
    } else if (r < 99) {
      f.events.push_back(Event::Tick(rng() % 50));
    } else {
      ip = addr();
      f.events.push_back(Event::Overflow(ip));
      calls.clear();
    }
  }
  return f;
}

// Replays `events[from...]` against libipt's query decoder synchronized at `offset`, the way a
// flow decoder that knows the code would, and returns the first mismatch ("" if none).
std::string Replay(const std::vector<uint8_t>& pt, const std::vector<Event>& events,
                   uint64_t offset, size_t from) {
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  std::unique_ptr<pt_query_decoder, void (*)(pt_query_decoder*)> q(pt_qry_alloc_decoder(&config),
                                                                   pt_qry_free_decoder);
  uint64_t ip = 0;
  int status = pt_qry_sync_set(q.get(), &ip, offset);
  if (status < 0 && status != -pte_ip_suppressed && status != -pte_noip) {
    return absl::StrCat("sync failed: ", pt_errstr(pt_errcode(status)));
  }
  if (status < 0) status = 0;
  std::deque<pt_event> pending;
  std::vector<uint64_t> stack;
  auto drain = [&] {
    while (status >= 0 && (status & pts_event_pending)) {
      pt_event ev;
      status = pt_qry_event(q.get(), &ev, sizeof(ev));
      if (status >= 0 && !ev.status_update && ev.type != ptev_exec_mode && ev.type != ptev_tick &&
          ev.type != ptev_cbr) {
        pending.push_back(ev);
      }
    }
  };
  auto next_event = [&](pt_event_type type) -> std::optional<pt_event> {
    drain();
    if (pending.empty() || pending.front().type != type) return std::nullopt;
    pt_event ev = pending.front();
    pending.pop_front();
    return ev;
  };
  for (size_t i = from; i < events.size(); ++i) {
    const Event& e = events[i];
    std::string where = absl::StrCat("event ", i, " kind ", static_cast<int>(e.kind), ": ");
    if (status < 0) return where + "decoder error " + pt_errstr(pt_errcode(status));
    switch (e.kind) {
      case EventKind::kCondBranch: {
        drain();
        int taken = 0;
        status = pt_qry_cond_branch(q.get(), &taken);
        if (status < 0 || taken != e.taken) return where + "wrong TNT";
        break;
      }
      case EventKind::kDirectJump:
        break;
      case EventKind::kDirectCall:
        if (e.target != e.ip + e.size) stack.push_back(e.ip + e.size);
        break;
      case EventKind::kIndirectCall:
      case EventKind::kIndirectJump:
      case EventKind::kFarBranch:
        if (e.kind == EventKind::kIndirectCall) stack.push_back(e.ip + e.size);
        drain();
        status = pt_qry_indirect_branch(q.get(), &ip);
        if (status < 0 || ip != e.target) return where + "wrong TIP";
        break;
      case EventKind::kReturn: {
        drain();
        int taken = 0;
        status = pt_qry_cond_branch(q.get(), &taken);
        if (status >= 0) {
          if (!taken || stack.empty() || stack.back() != e.target) {
            return where + "compressed return to the wrong place";
          }
          stack.pop_back();
        } else if (status == -pte_bad_query) {
          status = pt_qry_indirect_branch(q.get(), &ip);
          if (status < 0 || ip != e.target) return where + "wrong return TIP";
        } else {
          return where + "return: " + pt_errstr(pt_errcode(status));
        }
        break;
      }
      case EventKind::kInterrupt: {
        auto ev = next_event(ptev_async_branch);
        if (!ev || ev->variant.async_branch.from != e.ip || ev->variant.async_branch.to != e.target)
          return where + "no async branch";
        break;
      }
      case EventKind::kEnable: {
        auto ev = next_event(ptev_enabled);
        if (!ev || ev->variant.enabled.ip != e.target) return where + "no enable";
        break;
      }
      case EventKind::kDisable: {
        auto ev = next_event(ptev_disabled);
        if (!ev || ev->ip_suppressed != e.suppress_ip ||
            (!e.suppress_ip && ev->variant.disabled.ip != e.target)) {
          return where + "no disable";
        }
        break;
      }
      case EventKind::kAsyncDisable: {
        auto ev = next_event(ptev_async_disabled);
        if (!ev || ev->variant.async_disabled.at != e.ip) return where + "no async disable";
        break;
      }
      case EventKind::kOverflow: {
        auto ev = next_event(ptev_overflow);
        if (!ev || ev->variant.overflow.ip != e.ip) return where + "no overflow";
        stack.clear();
        break;
      }
      case EventKind::kModeChange:
      case EventKind::kTick:
      case EventKind::kTime:
        break;
    }
  }
  drain();
  if (!pending.empty()) return absl::StrCat("unexpected event ", pending.front().type);
  return "";
}

TEST(SwptPtEncoderTest, RandomFlowsReplayFromEveryPsb) {
  int replays = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    PtEncoderOptions options;
    options.psb_period = static_cast<uint8_t>(seed % 3);
    options.ret_compression = seed % 2 == 0;
    options.max_tnt_bits = seed % 4 == 0 ? 47 : 6;
    options.tsc = options.mtc = options.cyc = seed % 3 == 0;
    Flow flow = RandomFlow(seed, 30000);
    PTKIT_ASSERT_OK_AND_ASSIGN(PtEncoder enc, PtEncoder::Create(options));
    for (const Event& e : flow.events) ASSERT_THAT(enc.Add(e), IsOk());
    ASSERT_THAT(enc.Finish(), IsOk());
    std::vector<PsbMark> marks = enc.psbs();
    std::vector<uint8_t> pt = enc.TakeBytes();
    ASSERT_GT(marks.size(), 2u);
    for (const PsbMark& m : marks) {
      std::string mismatch = Replay(pt, flow.events, m.offset, m.events);
      ASSERT_EQ(mismatch, "") << "seed " << seed << " psb at " << m.offset;
      ++replays;
    }
  }
  EXPECT_GT(replays, 100);
}

}  // namespace
}  // namespace ptkit::swpt
