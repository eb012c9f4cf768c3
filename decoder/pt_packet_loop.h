// ptkit's own Intel PT packet loop: the calls FastBlockDecoder makes of libipt's query decoder
// (pt_qry_sync_forward, _cond_branch, _indirect_branch, _event, _time, _get_offset,
// _get_sync_offset), answered exactly as libipt 2.0.5's pt_query_decoder.c answers them, from
// the trace bytes, without libipt's per-packet calls: TNT bits are taken from a cache word
// inline, TIP targets are read straight from the packet.
//
// It models the packets and state of traces without fine timing: PAD, PSB+ (FUP, MODE, PIP,
// VMCS, CBR, TSC, PAD), PSBEND, TNT-8, TNT-64, TIP, TIP.PGE, TIP.PGD, FUP, MODE, CBR, TSC and
// OVF, time from TSC packets only. What it does not model is found before decoding
// (FastPathCovers) and such a trace is decoded with libipt's query decoder: MTC, CYC and TMA
// (libipt's time calibration), STOP, MNT, EXSTOP, MWAIT, PWRE, PWRX, PTWRITE, unknown
// packets, and the errata libipt works around with packet scans (BDM70, SKD010, APL11, APL12).
// Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_PT_PACKET_LOOP_H_
#define PTKIT_DECODER_PT_PACKET_LOOP_H_

#include <intel-pt.h>

#include <cstdint>

namespace ptkit::decoder {

// Whether PacketLoop models `packet` (as libipt's packet decoder reads it) of a trace with
// configuration `pt`. PacketLoop answers as libipt's query decoder for a trace that libipt's
// packet decoder reads without error and whose packets it all models (FastPathCovers checks).
bool PacketLoopModels(const pt_config& pt, const pt_packet& packet);
// Whether no erratum applies that PacketLoop does not model, to a trace with an OVF or not.
bool PacketLoopModelsErrata(const pt_config& pt, bool ovf);

class PacketLoop {
 public:
  // What FastPathCovers needs to know of a trace, read by PacketLoop's own parser exactly as
  // pt_pkt_sync_forward and pt_pkt_next read it, when all its packets are ones PacketLoop
  // models. False when one is not, or does not read (libipt's packet decoder must look then).
  struct Scan {
    bool tsx = false;                 // a MODE.TSX with InTX or TXAbort
    bool paging_outside_psb = false;  // PIP or VMCS outside PSB+
    bool ovf = false;
  };
  static bool ScanTrace(const pt_config& pt, Scan* scan);

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
    kOvf,
    kOther,  // a packet not modelled (MTC, CYC, TMA, STOP, MNT, ..., unknown)
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
  // pt_time without MTC and CYC.
  struct TimeState {
    uint64_t tsc = 0;
    uint8_t cbr = 0;
    bool have_tsc = false;
    bool have_cbr = false;
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
  int DecodeMode(bool header);
  int HeaderPaging(bool vmcs);
  int DecodeCbr(bool header);
  int DecodeTsc();
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
  const uint8_t* pos_ = nullptr;
  const uint8_t* sync_ = nullptr;
  Kind next_ = kNone;
  bool enabled_ = false;
  bool consume_packet_ = false;
  pt_event* event_ = nullptr;
  LastIp ip_;
  uint64_t tnt_bits_ = 0;
  uint64_t tnt_index_ = 0;
  TimeState time_, last_time_;
  EventQueue evq_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PT_PACKET_LOOP_H_
