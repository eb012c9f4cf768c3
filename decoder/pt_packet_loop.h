// ptkit's own Intel PT packet loop: the calls FastBlockDecoder makes of libipt's query decoder
// (pt_qry_sync_forward, _cond_branch, _indirect_branch, _event, _time, _get_offset,
// _get_sync_offset), answered exactly as libipt 2.0.5's pt_query_decoder.c answers them, from
// the trace bytes, without libipt's per-packet calls: TNT bits are taken from a cache word
// inline, TIP targets are read straight from the packet.
//
// It models PAD, PSB+ (FUP, MODE, PIP, VMCS, CBR, TSC, TMA, MTC, CYC, PAD), PSBEND, TNT-8,
// TNT-64, TIP, TIP.PGE, TIP.PGD, FUP, MODE, CBR, TSC, TMA, MTC, CYC and OVF, and time as
// libipt's pt_time.c estimates it (TSC, TMA, MTC and CYC with its calibration, erratum SKL168).
// What it does not model is found before decoding (FastPathCovers) and such a trace is decoded
// with libipt's query decoder: STOP, MNT, EXSTOP, MWAIT, PWRE, PWRX, PTWRITE, unknown packets,
// the errata libipt works around with packet scans after an OVF (SKD010, APL11, APL12), and a
// TMA or CYC that erratum SKZ84 or SKD007 would make libipt read otherwise. Erratum BDM70 (a
// stale FUP in PSB+) is modelled.
// Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_PT_PACKET_LOOP_H_
#define PTKIT_DECODER_PT_PACKET_LOOP_H_

#include <intel-pt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>

namespace ptkit::decoder {

// Whether PacketLoop models `packet` (as libipt's packet decoder reads it) of a trace with
// configuration `pt`. PacketLoop answers as libipt's query decoder for a trace that libipt's
// packet decoder reads without error and whose packets it all models (FastPathCovers checks).
bool PacketLoopModels(const pt_config& pt, const pt_packet& packet);
// Whether no erratum applies that PacketLoop does not model, to a trace with an OVF or not.
bool PacketLoopModelsErrata(const pt_config& pt, bool ovf);

// Told how far a pass over a trace ahead of decoding has read (FastPathCovers, ChunkStarts),
// every kScanReportBytes, so that the pages behind can be dropped (Sink::OnScanned).
using ScanProgress = std::function<void(uint64_t offset)>;
inline constexpr uint64_t kScanReportBytes = uint64_t{4} << 20;

namespace packet_loop_internal {

// PacketLoop::PeekTntAhead's and SkipTntAhead's view of a byte: a TNT-8 packet's answers (1-6,
// below its stop bit; 0: the byte is no TNT-8 packet: odd, PAD (0) or the extended opcode (2)), and
// whether a packet that starts with it may follow one they read (a TNT-8 or TIP packet: a
// TIP's low five bits are 01101).
struct AheadByte {
  uint8_t answers;
  uint8_t bits;
  bool follows;
};
constexpr std::array<AheadByte, 256> MakeAheadBytes() {
  std::array<AheadByte, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    const unsigned payload = b >> 1;
    const bool tnt8 = (b & 1u) == 0 && b >= 4;
    const int size = tnt8 ? 31 - __builtin_clz(payload) : 0;
    t[b].answers = static_cast<uint8_t>(size);
    t[b].bits = static_cast<uint8_t>(tnt8 ? payload & ((1u << size) - 1) : 0);
    t[b].follows = tnt8 || (b & 0x1fu) == 0x0du;
  }
  return t;
}
inline constexpr std::array<AheadByte, 256> kAheadBytes = MakeAheadBytes();

}  // namespace packet_loop_internal

class PacketLoop {
 public:
  // What FastPathCovers needs to know of a trace, read by PacketLoop's own parser exactly as
  // pt_pkt_sync_forward and pt_pkt_next read it, when all its packets are ones PacketLoop
  // models. False when one is not, or does not read (libipt's packet decoder must look then).
  struct Scan {
    bool tsx = false;                 // a MODE.TSX with InTX or TXAbort
    bool paging_outside_psb = false;  // PIP or VMCS outside PSB+
    bool ovf = false;
    bool tip_suppressed = false;  // a TIP with a suppressed IP
  };
  // `scanned` (if set) is told the offset read up to, every kScanReportBytes.
  static bool ScanTrace(const pt_config& pt, Scan* scan, const ScanProgress& scanned = {});

  // `pt` (its trace) must outlive the loop.
  explicit PacketLoop(const pt_config& pt);

  int SyncForward(uint64_t* ip);
  int CondBranch(int* taken) {
    if (tnt_index_ == 0) {
      const int status = CacheTnt();
      if (status < 0) return status;
    }
    *taken = (tnt_bits_ & tnt_index_) != 0;
    tnt_index_ >>= 1;
    if (tnt_index_ != 0) return 0;  // pt_qry_status_flags: nothing before the cache is empty
    return StatusFlags();
  }
  // The conditional-branch answers cached from the last TNT packet and not yet given (0-47).
  int TntLeft() const { return tnt_index_ == 0 ? 0 : 64 - __builtin_clzll(tnt_index_); }
  // The `n` of them after the next `skip` (1 <= n, skip + n <= TntLeft()), the first in bit
  // n - 1 (1: taken).
  uint64_t PeekTnt(int n, int skip = 0) const {
    return (tnt_bits_ >> (TntLeft() - skip - n)) & ((uint64_t{1} << n) - 1);
  }
  // Gives the next `n` (n < TntLeft()) at once, as `n` CondBranch calls would (each returns 0
  // while answers are left); or all of them (n == TntLeft()) where NextPacketTnt() says the
  // next packet is a TNT packet (then the last call returns 0 too: no event, no end is next).
  void SkipTnt(int n) { tnt_index_ >>= n; }
  // The first answer (1: taken) of the packet after the cached answers, the one CondBranch
  // reads when they are all given, where that is a TNT packet (with or without timing packets
  // before it, which do not change what CondBranch tells); -1 where it is none.
  int NextPacketTnt() const {
    if (next_ != kTnt8) return NextPacketTntSlow();
    // A TNT-8 packet's answers are the bits below its highest set bit, after the header bit.
    const unsigned payload = *pos_ >> 1u;
    if (payload <= 1) return -1;
    return static_cast<int>((payload >> (30 - __builtin_clz(payload))) & 1u);
  }
  // Up to `n` answers (the first in bit count - 1) of the TNT-8 packets that follow the cached
  // answers byte for byte (no packet between them, so no time between them either), each
  // followed by a TNT-8 or TIP packet (caching one reads nothing more, as CacheTnt's common
  // case: it cannot fail); the count. None while no answer is cached. Only packets that end at
  // the offset SetAheadLimit gives or before.
  int PeekTntAhead(int n, uint64_t* answers) const {
    uint64_t got = 0;
    int count = 0;
    if (tnt_index_ != 0 && next_ == kTnt8 && pos_ == tnt_end_) {
      // Whole packets, then the answers past the n-th dropped.
      for (const uint8_t* p = pos_; count < n && p < ahead_end_; ++p) {
        const packet_loop_internal::AheadByte& byte = packet_loop_internal::kAheadBytes[p[0]];
        if (byte.answers == 0 || !packet_loop_internal::kAheadBytes[p[1]].follows) break;
        got = got << byte.answers | byte.bits;
        count += byte.answers;
      }
      if (count > n) {
        got >>= count - n;
        count = n;
      }
    }
    *answers = got;
    return count;
  }
  // PeekTntAhead reads only packets that end at trace offset `offset` or before (a TNT-8 packet
  // at p ends at p + 1; each must be followed by a byte: p + 1 < end_ too).
  void SetAheadLimit(uint64_t offset) {
    const auto size = static_cast<uint64_t>(end_ - begin_);
    ahead_end_ = size == 0 ? begin_ : begin_ + std::min(offset, size - 1);
  }
  // Gives `n` answers (TntLeft() < n <= TntLeft() + PeekTntAhead's count) as `n` CondBranch
  // calls would (each returns 0 but possibly the last), caching the packets PeekTntAhead read
  // as they would. Returns how many of them the last packet it cached gave.
  int SkipTntAhead(int n) {
    n -= TntLeft();
    const uint8_t* p = pos_;
    for (;;) {
      const packet_loop_internal::AheadByte& byte = packet_loop_internal::kAheadBytes[*p];
      if (n <= byte.answers) {
        // CacheTnt's common case (DecodeTnt, then the next packet's kind), then SkipTnt(n).
        // What else it sets is as it was: nothing was read since the cached packet (pos_ at
        // tnt_end_, PeekTntAhead), so no event is pending and the time is that packet's.
        tnt_bits_ = byte.bits;
        tnt_index_ = (uint64_t{1} << (byte.answers - 1)) >> n;
        pos_ = tnt_end_ = p + 1;
        next_ = packet_loop_internal::kAheadBytes[*pos_].answers != 0 ? kTnt8 : kTip;
        return n;
      }
      n -= byte.answers;
      ++p;
    }
  }
  int IndirectBranch(uint64_t* ip);
  int Event(pt_event* event);
  int Time(uint64_t* tsc) const {
    *tsc = last_time_.tsc;
    return last_time_.have_tsc ? 0 : -pte_no_time;
  }
  int GetOffset(uint64_t* offset) const {
    if (pos_ == nullptr) return -pte_nosync;
    *offset = static_cast<uint64_t>(pos_ - begin_);
    return 0;
  }
  int GetSyncOffset(uint64_t* offset) const;

  // pt_decoder_function, by what it decodes; kNone: no packet fetched (an error, or the end).
  enum Kind : uint8_t {
    kNone,
    kPad,
    kPsb,
    kPsbend,
    kTnt8,
    kTnt64,
    kTip,
    kPge,
    kPgd,
    kFup,
    kMode,
    kPip,
    kVmcs,
    kCbr,
    kTsc,
    kTma,
    kMtc,
    kCyc,
    kOvf,
    kOther,  // a packet not modelled (STOP, MNT, PTW, power events, unknown)
  };

 private:
  enum Binding { kBindPsbend, kBindTip, kBindFup, kBindings };
  static constexpr int kQueueSize = 8;  // libipt's evq_max
  struct EventQueue {
    pt_event standalone;
    pt_event queue[kBindings][kQueueSize];
    uint8_t begin[kBindings];
    uint8_t end[kBindings];
  };
  struct LastIp {
    uint64_t ip = 0;
    bool have_ip = false;
    bool suppressed = false;
  };
  // libipt's pt_time: the time estimated from TSC, TMA, MTC and CYC.
  struct TimeState {
    uint64_t tsc = 0;
    uint64_t base = 0;  // from TSC and MTC
    uint64_t fc = 0;    // the fast counter since base
    uint32_t ctc = 0;
    uint32_t ctc_cyc = 0;  // ctc when fc was cleared
    uint32_t lost_mtc = 0;
    uint32_t lost_cyc = 0;
    uint8_t cbr = 0;
    bool have_tsc = false;
    bool have_cbr = false;
    bool have_tma = false;
    bool have_mtc = false;
  };
  // libipt's pt_time_cal: the fast counter to cycles ratio (fcr) that CYC needs.
  struct TimeCal {
    uint64_t fcr = 0;
    uint64_t min_fcr = UINT64_MAX, max_fcr = 0;
    uint64_t tsc = 0;
    uint64_t cyc_tsc = 0;
    uint64_t cyc_mtc = 0;
    uint32_t ctc = 0;
    uint32_t lost_mtc = 0;
    bool have_mtc = false;
    bool check_skl168 = false;
    bool HaveFcr() const { return min_fcr <= max_fcr; }
    void SetFcr(uint64_t value);
  };
  // What the time estimates read of pt_config.
  struct TimeConfig {
    uint8_t mtc_freq = 0;
    uint8_t nom_freq = 0;
    uint32_t cpuid_0x15_eax = 0;
    uint32_t cpuid_0x15_ebx = 0;
    bool skl168 = false;
  };

  void Reset();
  int Fetch(Kind* kind, const uint8_t* pos) const;
  bool WillEvent() const;
  bool WillEos() const;
  int StatusFlags() const;
  int ProvokeFetchError() const;
  int ReadAhead();
  int Start(const uint8_t* pos, uint64_t* ip);
  int CacheTnt();
  int NextPacketTntSlow() const;  // NextPacketTnt where the next packet is not TNT-8
  int Decode(Kind kind);
  int Header(Kind kind);
  int LastIpQuery(uint64_t* ip) const;
  int DecodeIp();
  int EventIp(uint64_t* ip, pt_event* ev) const;
  void EventTime(pt_event* ev) const;
  int DecodePsb();
  int DecodeTnt(uint64_t payload, int size);
  int DecodeTip();
  int DecodePge();
  int DecodePgd();
  int DecodeFup();
  int HeaderFup();
  int CheckBdm70(const uint8_t* pos) const;
  int DecodeMode(bool header);
  int HeaderPaging(bool vmcs);
  int DecodeCbr(bool header);
  int DecodeTsc(bool header);
  int DecodeTma();
  int DecodeMtc();
  int DecodeCyc();
  // pt_time_* and pt_tcal_* (pt_time.c); `ctc` is the MTC payload.
  int CtcDelta(uint32_t* delta, uint32_t ctc, uint32_t last_ctc) const;
  int CtcFc(uint64_t* fc, uint64_t ctc) const;
  int TimeUpdateTma(uint16_t ctc, uint16_t fc);
  int TimeUpdateMtc(uint8_t ctc);
  int TimeAdjustCyc(uint64_t* cyc, uint64_t fcr) const;
  int TimeUpdateCyc(uint64_t cyc, uint64_t fcr);
  int TcalHeaderTsc(uint64_t tsc);
  int TcalHeaderCbr(uint8_t ratio);
  int TcalUpdateMtc(uint8_t ctc);
  int DecodePsbend();
  int DecodeOvf();
  int FindOvfFup() const;
  int ProcessPendingPsbEvents();

  pt_event* Standalone();
  pt_event* Enqueue(Binding b);
  pt_event* Dequeue(Binding b);
  bool Pending(Binding b) const { return evq_.begin[b] != evq_.end[b]; }
  pt_event* Find(Binding b, pt_event_type type);

  const uint8_t* begin_;
  const uint8_t* end_;
  const uint8_t* ahead_end_;  // SetAheadLimit
  const uint8_t* pos_ = nullptr;
  const uint8_t* sync_ = nullptr;
  Kind next_ = kNone;
  bool enabled_ = false;
  bool consume_packet_ = false;
  pt_event* event_ = nullptr;
  LastIp ip_;
  uint64_t tnt_bits_ = 0;
  uint64_t tnt_index_ = 0;
  const uint8_t* tnt_end_ = nullptr;  // where the last TNT packet cached ends
  TimeState time_, last_time_;
  TimeCal tcal_;
  TimeConfig time_config_;
  bool bdm70_;
  EventQueue evq_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PT_PACKET_LOOP_H_
