#include "decoder/pt_packet_loop.h"

#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

namespace ptkit::decoder {
namespace {

// Packet sizes and opcodes (libipt's pt_opcodes.h).
constexpr int kPsbSize = 16, kPsbendSize = 2, kTnt64Size = 8, kOvfSize = 2, kCbrSize = 4,
              kPipSize = 8, kVmcsSize = 7, kModeSize = 2, kTscSize = 8, kTmaSize = 7, kMtcSize = 2;
// pt_opcodes.h: the CTC bits MTC and TMA give, the TMA fast counter bits, the TSC's bits.
constexpr int kMtcBits = 8, kTmaCtcBits = 16;
constexpr uint32_t kMtcMask = (1u << kMtcBits) - 1, kTmaCtcMask = (1u << kTmaCtcBits) - 1;
constexpr uint16_t kTmaFcMask = (1u << 9) - 1;
constexpr int kTscBits = 56;
constexpr int kFcrShift = 8;  // pt_tcal_fcr_shr

uint64_t ReadValue(const uint8_t* pos, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) value |= static_cast<uint64_t>(pos[i]) << (i * 8);
  return value;
}

// The 6-byte payload of the long TNT packet at `packet` (its 8 bytes present): one load.
uint64_t Tnt64Payload(const uint8_t* packet) {
  uint64_t value;
  std::memcpy(&value, packet, sizeof(value));
  if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap64(value);
  return value >> 16;
}

// pt_pkt_read_psb.
int ReadPsb(const uint8_t* pos, const uint8_t* end) {
  if (end < pos + kPsbSize) return -pte_eos;
  for (int i = 2; i < kPsbSize; i += 2) {
    if (pos[i] != 0x02 || pos[i + 1] != 0x82) return -pte_bad_packet;
  }
  return kPsbSize;
}

// pt_pkt_read_tma: -pte_bad_packet when reserved bits are set.
int ReadTma(const uint8_t* pos, const uint8_t* end, uint16_t* ctc, uint16_t* fc) {
  if (end < pos + kTmaSize) return -pte_eos;
  *ctc = static_cast<uint16_t>(pos[2] | pos[3] << 8);
  *fc = static_cast<uint16_t>(pos[5] | pos[6] << 8);
  if ((*fc & ~kTmaFcMask) != 0 || pos[4] != 0) return -pte_bad_packet;
  return kTmaSize;
}

// pt_pkt_read_cyc: the packet's size.
int ReadCyc(const uint8_t* pos, const uint8_t* end, uint64_t* value) {
  const uint8_t* begin = pos;
  uint8_t cyc = *pos++;
  bool ext = (cyc & 0x04) != 0;
  *value = cyc >> 3;
  int shl = 5;
  while (ext) {
    if (end <= pos) return -pte_eos;
    uint64_t bits = *pos++;
    ext = (bits & 0x01) != 0;
    bits >>= 1;
    bits <<= shl;
    shl += 7;
    if (64 < shl) return -pte_bad_packet;
    *value |= bits;
  }
  return static_cast<int>(pos - begin);
}

// Whether libipt's check_erratum_skd007 takes the CYC of `size` bytes at `pos` for the start of
// an OVF.
bool Skd007(const uint8_t* pos, const uint8_t* end, int size, uint64_t value) {
  if (size != 2 || (static_cast<uint16_t>(value) & ~0x1f) != 0x20) return false;
  return pos + size < end && pos[size] == 0xf3;
}

// pt_pkt_ip_size by IP compression.
int IpSize(int ipc) {
  switch (ipc) {
    case pt_ipc_suppressed:
      return 0;
    case pt_ipc_update_16:
      return 2;
    case pt_ipc_update_32:
      return 4;
    case pt_ipc_update_48:
    case pt_ipc_sext_48:
      return 6;
    case pt_ipc_full:
      return 8;
    default:
      return -pte_bad_packet;
  }
}

// pt_pkt_read_tnt: the payload without its stop bit, and its size in bits.
int TntBits(uint64_t payload, uint64_t* bits) {
  if (payload <= 1) return -pte_bad_packet;
  const int size = 63 - __builtin_clzll(payload);
  *bits = payload & ~(uint64_t{1} << size);
  return size;
}

pt_exec_mode ExecMode(uint8_t bits) {
  const bool csl = bits & 0x01, csd = bits & 0x02;
  if (csl) return csd ? ptem_unknown : ptem_64bit;
  return csd ? ptem_32bit : ptem_16bit;
}

// The IP field of a paging, VMCS, exec mode or TSX event; null for other events.
uint64_t* BoundIp(pt_event* ev) {
  switch (ev->type) {
    case ptev_async_paging:
      return &ev->variant.async_paging.ip;
    case ptev_async_vmcs:
      return &ev->variant.async_vmcs.ip;
    case ptev_exec_mode:
      return &ev->variant.exec_mode.ip;
    case ptev_tsx:
      return &ev->variant.tsx.ip;
    default:
      return nullptr;
  }
}

uint8_t Inc(uint8_t i) { return static_cast<uint8_t>((i + 1) % 8); }

}  // namespace

bool PacketLoopModelsErrata(const pt_config& pt, bool ovf) {
  return !(ovf && (pt.errata.skd010 || pt.errata.apl11 || pt.errata.apl12));
}

bool PacketLoopModels(const pt_config& pt, const pt_packet& packet) {
  if (!PacketLoopModelsErrata(pt, packet.type == ppt_ovf)) return false;
  switch (packet.type) {
    case ppt_pad:
    case ppt_psb:
    case ppt_psbend:
    case ppt_fup:
    case ppt_tip:
    case ppt_tip_pge:
    case ppt_tip_pgd:
    case ppt_tnt_8:
    case ppt_tnt_64:
    case ppt_mode:
    case ppt_pip:
    case ppt_vmcs:
    case ppt_cbr:
    case ppt_tsc:
    case ppt_tma:
    case ppt_mtc:
    case ppt_cyc:
    case ppt_ovf:
      return true;
    default:
      return false;
  }
}

PacketLoop::PacketLoop(const pt_config& pt)
    : begin_(pt.begin),
      end_(pt.end),
      ahead_end_(end_ > begin_ ? end_ - 1 : begin_),
      time_config_{.mtc_freq = pt.mtc_freq,
                   .nom_freq = pt.nom_freq,
                   .cpuid_0x15_eax = pt.cpuid_0x15_eax,
                   .cpuid_0x15_ebx = pt.cpuid_0x15_ebx,
                   .skl168 = pt.errata.skl168 != 0},
      bdm70_(pt.errata.bdm70 != 0) {
  Reset();
}

// pt_qry_reset.
void PacketLoop::Reset() {
  enabled_ = false;
  consume_packet_ = false;
  event_ = nullptr;
  ip_ = LastIp{};
  tnt_bits_ = tnt_index_ = 0;
  time_ = last_time_ = TimeState{};
  tcal_ = TimeCal{};
  std::memset(&evq_, 0, sizeof(evq_));
}

pt_event* PacketLoop::Standalone() {
  std::memset(&evq_.standalone, 0, sizeof(evq_.standalone));
  return &evq_.standalone;
}

pt_event* PacketLoop::Enqueue(Binding b) {
  const uint8_t begin = evq_.begin[b], idx = evq_.end[b];
  const uint8_t end = Inc(idx), gap = Inc(end);
  if (begin == gap) return nullptr;
  evq_.end[b] = end;
  pt_event* ev = &evq_.queue[b][idx];
  std::memset(ev, 0, sizeof(*ev));
  return ev;
}

pt_event* PacketLoop::Dequeue(Binding b) {
  const uint8_t begin = evq_.begin[b];
  if (begin == evq_.end[b]) return nullptr;
  evq_.begin[b] = Inc(begin);
  return &evq_.queue[b][begin];
}

pt_event* PacketLoop::Find(Binding b, pt_event_type type) {
  for (uint8_t i = evq_.begin[b]; i != evq_.end[b]; i = Inc(i)) {
    if (evq_.queue[b][i].type == type) return &evq_.queue[b][i];
  }
  return nullptr;
}

namespace {

// pt_df_fetch's decision, by opcode (kNone: the extended opcode 0x02) and by extended opcode.
using KindTable = std::array<PacketLoop::Kind, 256>;
constexpr KindTable MakeOpcodeKinds() {
  KindTable t{};
  for (int opc = 0; opc < 256; ++opc) {
    PacketLoop::Kind k = PacketLoop::kOther;  // unknown
    if ((opc & 0x01) == 0x00) {
      k = PacketLoop::kTnt8;
    } else if ((opc & 0x03) == 0x03) {
      k = PacketLoop::kCyc;
    } else if ((opc & 0x1f) == 0x0d) {
      k = PacketLoop::kTip;
    } else if ((opc & 0x1f) == 0x1d) {
      k = PacketLoop::kFup;
    } else if ((opc & 0x1f) == 0x11) {
      k = PacketLoop::kPge;
    } else if ((opc & 0x1f) == 0x01) {
      k = PacketLoop::kPgd;
    }
    t[opc] = k;
  }
  t[0x00] = PacketLoop::kPad;
  t[0x02] = PacketLoop::kNone;
  t[0x99] = PacketLoop::kMode;
  t[0x19] = PacketLoop::kTsc;
  t[0x59] = PacketLoop::kMtc;
  return t;
}
constexpr KindTable MakeExtKinds() {
  KindTable t{};
  for (auto& k : t) k = PacketLoop::kOther;  // STOP, MNT, EXSTOP, MWAIT, PWRx, PTW, ...
  t[0x82] = PacketLoop::kPsb;
  t[0xf3] = PacketLoop::kOvf;
  t[0xa3] = PacketLoop::kTnt64;
  t[0x23] = PacketLoop::kPsbend;
  t[0x03] = PacketLoop::kCbr;
  t[0x43] = PacketLoop::kPip;
  t[0xc8] = PacketLoop::kVmcs;
  t[0x73] = PacketLoop::kTma;
  return t;
}
constexpr KindTable kOpcodeKinds = MakeOpcodeKinds();
constexpr KindTable kExtKinds = MakeExtKinds();

// The size of a packet that libipt's scans (pt_pkt_next) step over while they look for a FUP
// or a TIP.PGE: PAD, PSBEND, PIP, VMCS, MODE, CBR, TSC, TMA, MTC, CYC; or pt_pkt_next's error.
int SkippedSize(PacketLoop::Kind kind, const uint8_t* pos, const uint8_t* end) {
  int size = 0;
  switch (kind) {
    case PacketLoop::kPad:
      return 1;
    case PacketLoop::kPsbend:
      size = kPsbendSize;
      break;
    case PacketLoop::kPip:
      size = kPipSize;
      break;
    case PacketLoop::kVmcs:
      size = kVmcsSize;
      break;
    case PacketLoop::kMode: {
      if (end < pos + kModeSize) return -pte_eos;
      const uint8_t leaf = pos[1] & 0xe0;
      return leaf == pt_mol_exec || leaf == pt_mol_tsx ? kModeSize : -pte_bad_packet;
    }
    case PacketLoop::kCbr:
      size = kCbrSize;
      break;
    case PacketLoop::kTsc:
      size = kTscSize;
      break;
    case PacketLoop::kMtc:
      size = kMtcSize;
      break;
    case PacketLoop::kTma: {
      uint16_t ctc, fc;
      return ReadTma(pos, end, &ctc, &fc);
    }
    case PacketLoop::kCyc: {
      uint64_t value;
      return ReadCyc(pos, end, &value);
    }
    default:
      return -pte_internal;
  }
  return end < pos + size ? -pte_eos : size;
}

}  // namespace

// pt_df_fetch.
int PacketLoop::Fetch(Kind* kind, const uint8_t* pos) const {
  *kind = kNone;
  if (pos == nullptr || pos < begin_ || end_ < pos) return -pte_nosync;
  if (pos == end_) return -pte_eos;
  const uint8_t opc = *pos++;
  if (opc != 0x02) {
    *kind = kOpcodeKinds[opc];
    return 0;
  }
  if (pos == end_) return -pte_eos;
  const uint8_t ext = *pos++;
  if (ext == 0xc3 && pos == end_) return -pte_eos;  // ext2 (MNT) without its third byte
  *kind = kExtKinds[ext];
  return 0;
}

// pt_qry_will_event, from the decoder functions' flags.
bool PacketLoop::WillEvent() const {
  switch (next_) {
    case kNone:
      return false;
    case kPge:
    case kPgd:
    case kPip:
    case kOvf:
    case kMode:
    case kVmcs:
    case kCbr:
    case kOther:  // not modelled: stops the read-ahead, then fails (Decode)
      return true;
    case kPsbend:
      return Pending(kBindPsbend);
    case kTip:
      return Pending(kBindTip);
    case kFup:
      return Pending(kBindFup);
    default:
      return false;
  }
}

bool PacketLoop::WillEos() const {
  if (next_ != kNone) return false;
  Kind kind;
  return Fetch(&kind, pos_) == -pte_eos;
}

int PacketLoop::StatusFlags() const {
  int flags = 0;
  if (tnt_index_ == 0) {
    if (WillEvent()) flags |= pts_event_pending;
    if (WillEos()) flags |= pts_eos;
  }
  return flags;
}

int PacketLoop::ProvokeFetchError() const {
  Kind kind;
  int status = Fetch(&kind, pos_);
  if (status < 0) return status;
  return -pte_internal;
}

int PacketLoop::ReadAhead() {
  for (;;) {
    int status = Fetch(&next_, pos_);
    if (status != 0) return status;
    if (next_ == kTip || next_ == kTnt8 || next_ == kTnt64) return 0;
    if (WillEvent()) return 0;
    status = Decode(next_);
    if (status != 0) {
      if (status == -pte_eos) {
        pos_ = end_;
        next_ = kNone;
      }
      return status;
    }
  }
}

int PacketLoop::Start(const uint8_t* pos, uint64_t* addr) {
  Reset();
  sync_ = pos;
  pos_ = pos;
  int status = Fetch(&next_, pos);
  if (status != 0) return status;
  if (next_ != kPsb) return -pte_nosync;
  status = DecodePsb();
  if (status < 0) return status;
  if (addr != nullptr && LastIpQuery(addr) == 0) addr = nullptr;
  status = ReadAhead();
  if (status < 0) return status;
  int flags = StatusFlags();
  if (LastIpQuery(addr) < 0 && addr != nullptr) flags |= pts_ip_suppressed;
  return flags;
}

namespace {

// pt_find_psb.
const uint8_t* FindPsb(const uint8_t* pos, const uint8_t* begin, const uint8_t* end) {
  if (pos >= end || *pos != 0x02) ++pos;  // libipt reads *end here
  for (; pos + 1 < end; pos += 2) {
    if (pos[0] != 0x02 || pos[1] != 0x82) break;
  }
  pos -= kPsbSize;
  if (pos < begin) return nullptr;
  if (pos[0] != 0x02 || pos[1] != 0x82) return nullptr;
  if (ReadPsb(pos, end) < 0) return nullptr;
  return pos;
}

// pt_sync_forward: the first PSB at or after `pos`, searched for 8-byte aligned in memory.
int SyncForwardFrom(const uint8_t** sync, const uint8_t* pos, const uint8_t* begin,
                    const uint8_t* end) {
  const uint8_t* start = pos;
  if (pos < begin || end < pos) return -pte_internal;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(pos);
  pos += (8 - addr % 8) % 8;
  for (;;) {
    const uint8_t* current = pos;
    pos += 8;
    if (end < pos) return -pte_eos;
    uint64_t value;
    std::memcpy(&value, current, sizeof(value));
    if (value != 0x8202820282028202ull && value != 0x0282028202820282ull) continue;
    current = FindPsb(pos, begin, end);
    if (current == nullptr || current < start) continue;
    *sync = current;
    return 0;
  }
}

}  // namespace

bool PacketLoop::ScanTrace(const pt_config& pt, Scan* scan, const ScanProgress& scanned) {
  const uint8_t* pos = nullptr;
  int status = SyncForwardFrom(&pos, pt.begin, pt.begin, pt.end);
  if (status == -pte_eos) return true;
  if (status < 0) return false;
  bool in_psb = false;
  const uint64_t length = static_cast<uint64_t>(pt.end - pt.begin);
  const uint8_t* report =
      scanned && length > kScanReportBytes ? pt.begin + kScanReportBytes : pt.end;
  for (;;) {
    // TNT-8 packets in a row (most of a trace's bytes): one byte each, an even one but PAD (0)
    // and the extended opcode (2), as kOpcodeKinds has them; no further than `report`.
    while (pos < report && (*pos & 1u) == 0 && *pos > 2) ++pos;
    if (pos >= report && pos != pt.end) {  // report == pt.end: no more to tell
      scanned(static_cast<uint64_t>(pos - pt.begin));
      const auto left = static_cast<uint64_t>(pt.end - pos);
      report = left > kScanReportBytes ? pos + kScanReportBytes : pt.end;
    }
    // Fetch, inline.
    if (pos == pt.end) return true;  // -pte_eos
    Kind kind = kOpcodeKinds[*pos];
    if (kind == kNone) {
      if (pos + 1 == pt.end) return true;
      kind = kExtKinds[pos[1]];
      if (pos[1] == 0xc3 && pos + 2 == pt.end) return true;
    }
    int size = 0;
    switch (kind) {
      case kPad:
        size = 1;
        break;
      case kPsb:
        size = ReadPsb(pos, pt.end);
        in_psb = true;
        break;
      case kPsbend:
        size = kPsbendSize;
        in_psb = false;
        break;
      case kOvf:
        size = kOvfSize;
        in_psb = false;
        scan->ovf = true;
        break;
      case kTnt8: {
        uint64_t bits;
        size = TntBits(*pos >> 1, &bits);
        if (size > 0) size = 1;
        break;
      }
      case kTnt64: {
        uint64_t bits;
        if (pt.end < pos + kTnt64Size) return true;  // -pte_eos
        size = TntBits(Tnt64Payload(pos), &bits);
        if (size > 0) size = kTnt64Size;
        break;
      }
      case kTip:
      case kPge:
      case kPgd:
      case kFup:
        if (kind == kTip && (*pos >> 5) == 0) scan->tip_suppressed = true;
        size = IpSize((*pos >> 5) & 0x7);
        if (size >= 0) size = pt.end < pos + 1 + size ? -pte_eos : size + 1;
        break;
      case kMode: {
        if (pt.end < pos + kModeSize) return true;
        const uint8_t leaf = pos[1] & 0xe0;
        if (leaf != pt_mol_exec && leaf != pt_mol_tsx) return false;
        if (leaf == pt_mol_tsx && (pos[1] & 0x03) != 0) scan->tsx = true;
        size = kModeSize;
        break;
      }
      case kPip:
      case kVmcs:
        size = kind == kPip ? kPipSize : kVmcsSize;
        if (pt.end < pos + size) size = -pte_eos;
        if (!in_psb) scan->paging_outside_psb = true;
        break;
      case kCbr:
        size = pt.end < pos + kCbrSize ? -pte_eos : kCbrSize;
        break;
      case kTsc:
        size = pt.end < pos + kTscSize ? -pte_eos : kTscSize;
        break;
      case kTma: {
        uint16_t ctc, fc;
        size = ReadTma(pos, pt.end, &ctc, &fc);  // a bad one: libipt decides (SKZ84)
        break;
      }
      case kMtc:
        size = pt.end < pos + kMtcSize ? -pte_eos : kMtcSize;
        break;
      case kCyc: {
        uint64_t value;
        size = ReadCyc(pos, pt.end, &value);
        if (size > 0 && pt.errata.skd007 && Skd007(pos, pt.end, size, value)) return false;
        break;
      }
      default:
        return false;  // not modelled
    }
    if (size == -pte_eos) return true;
    if (size < 0) return false;
    pos += size;
  }
}

// pt_qry_sync_forward.
int PacketLoop::SyncForward(uint64_t* ip) {
  const uint8_t* pos = pos_;
  if (pos == nullptr) pos = begin_;
  if (pos == sync_) pos += kPsbSize;
  std::ptrdiff_t space = pos - begin_;
  if (kPsbSize <= space) space = kPsbSize - 1;
  pos -= space;
  const uint8_t* sync = nullptr;
  int status = SyncForwardFrom(&sync, pos, begin_, end_);
  if (status < 0) return status;
  return Start(sync, ip);
}

int PacketLoop::GetSyncOffset(uint64_t* offset) const {
  if (sync_ == nullptr) return -pte_nosync;
  *offset = static_cast<uint64_t>(sync_ - begin_);
  return 0;
}

// pt_qry_cache_tnt.
int PacketLoop::CacheTnt() {
  if (next_ == kTnt8) {
    // The common case, the loop's and ReadAhead's steps for it inline: a TNT-8 packet (no
    // event binds to one), then a TNT-8 or TIP packet, where the read-ahead stops.
    event_ = nullptr;
    int status = DecodeTnt(*pos_ >> 1, 1);
    if (status != 0) return status;
    last_time_ = time_;
    if (pos_ < end_ && *pos_ != 0x02) {
      const Kind kind = kOpcodeKinds[*pos_];
      if (kind == kTnt8 || kind == kTip) {
        next_ = kind;
        return 0;
      }
    }
    status = ReadAhead();
    if (status < 0 && status != -pte_eos) return status;
    return 0;
  }
  for (;;) {
    if (next_ == kNone) return ProvokeFetchError();
    if (WillEvent()) return -pte_bad_query;
    if (next_ == kTip) return -pte_bad_query;
    event_ = nullptr;
    const Kind kind = next_;
    int status = Decode(kind);
    if (status != 0) return status;
    if (event_ != nullptr) return -pte_event_ignored;
    if (kind == kTnt8 || kind == kTnt64) break;
    status = ReadAhead();
    if (status != 0) return status;
  }
  last_time_ = time_;
  int status = ReadAhead();
  if (status < 0 && status != -pte_eos) return status;
  return 0;
}

int PacketLoop::NextPacketTntSlow() const {
  uint64_t payload = 0;
  if (next_ == kTnt8) {
    payload = *pos_ >> 1;
  } else if (next_ == kTnt64 && end_ >= pos_ + kTnt64Size) {
    payload = Tnt64Payload(pos_);
  } else {
    return -1;
  }
  uint64_t bits = 0;
  const int size = TntBits(payload, &bits);
  if (size <= 0) return -1;
  return static_cast<int>((bits >> (size - 1)) & 1);
}

// pt_qry_indirect_branch.
int PacketLoop::IndirectBranch(uint64_t* addr) {
  int flags = 0;
  for (;;) {
    if (next_ == kNone) return ProvokeFetchError();
    if (WillEvent()) return -pte_bad_query;
    event_ = nullptr;
    const Kind kind = next_;
    if ((kind == kTnt8 || kind == kTnt64) && tnt_index_ != 0) return -pte_bad_query;
    int status = Decode(kind);
    if (status != 0) return status;
    if (event_ != nullptr) return -pte_event_ignored;
    if (kind == kTip) {
      uint64_t ip;
      if (LastIpQuery(&ip) < 0) {
        flags |= pts_ip_suppressed;
      } else {
        *addr = ip;
      }
      break;
    }
    status = ReadAhead();
    if (status != 0) return status;
  }
  last_time_ = time_;
  int status = ReadAhead();
  if (status < 0 && status != -pte_eos) return status;
  return flags | StatusFlags();
}

// pt_qry_event.
int PacketLoop::Event(pt_event* event) {
  if (tnt_index_ != 0) return -pte_bad_query;
  for (;;) {
    if (next_ == kNone) return ProvokeFetchError();
    if ((next_ == kTip || next_ == kTnt8 || next_ == kTnt64) && !WillEvent()) {
      return -pte_bad_query;
    }
    event_ = nullptr;
    int status = Decode(next_);
    if (status != 0) return status;
    if (event_ != nullptr) {
      std::memcpy(event, event_, sizeof(*event));
      break;
    }
    status = ReadAhead();
    if (status != 0) return status;
  }
  last_time_ = time_;
  int status = ReadAhead();
  if (status < 0 && status != -pte_eos) return status;
  return StatusFlags();
}

int PacketLoop::Decode(Kind kind) {
  switch (kind) {
    case kPad:
      pos_ += 1;
      return 0;
    case kPsb:
      return DecodePsb();
    case kPsbend:
      return DecodePsbend();
    case kTnt8:
      return DecodeTnt(*pos_ >> 1, 1);
    case kTnt64:
      if (end_ < pos_ + kTnt64Size) return -pte_eos;
      return DecodeTnt(Tnt64Payload(pos_), kTnt64Size);
    case kTip:
      return DecodeTip();
    case kPge:
      return DecodePge();
    case kPgd:
      return DecodePgd();
    case kFup:
      return DecodeFup();
    case kMode:
      return DecodeMode(/*header=*/false);
    case kCbr:
      return DecodeCbr(/*header=*/false);
    case kTsc:
      return DecodeTsc(/*header=*/false);
    case kTma:
      return DecodeTma();
    case kMtc:
      return DecodeMtc();
    case kCyc:
      return DecodeCyc();
    case kOvf:
      return DecodeOvf();
    case kPip:   // outside PSB+: FastPathCovers sends such traces to libipt
    case kVmcs:  // likewise
    case kOther:
    case kNone:
      return -pte_internal;
  }
  return -pte_internal;
}

// The decoder functions' `header` (inside PSB+).
int PacketLoop::Header(Kind kind) {
  switch (kind) {
    case kPad:
      pos_ += 1;
      return 0;
    case kFup:
      return HeaderFup();
    case kMode:
      return DecodeMode(/*header=*/true);
    case kPip:
      return HeaderPaging(/*vmcs=*/false);
    case kVmcs:
      return HeaderPaging(/*vmcs=*/true);
    case kCbr:
      return DecodeCbr(/*header=*/true);
    case kTsc:
      return DecodeTsc(/*header=*/true);
    case kTma:
      return DecodeTma();
    case kMtc:
      return DecodeMtc();
    case kCyc:
      return DecodeCyc();
    case kOther:
      return -pte_internal;  // not modelled (PacketLoopModels)
    default:
      return -pte_bad_context;
  }
}

// pt_last_ip_query.
int PacketLoop::LastIpQuery(uint64_t* ip) const {
  if (!ip_.have_ip) {
    if (ip != nullptr) *ip = 0;
    return -pte_noip;
  }
  if (ip_.suppressed) {
    if (ip != nullptr) *ip = 0;
    return -pte_ip_suppressed;
  }
  if (ip != nullptr) *ip = ip_.ip;
  return 0;
}

// pt_qry_decode_ip: reads the IP packet at pos_ into the last IP; returns its size.
int PacketLoop::DecodeIp() {
  const int ipc = (*pos_ >> 5) & 0x7;
  const int size = IpSize(ipc);
  if (size < 0) return size;
  if (end_ < pos_ + 1 + size) return -pte_eos;
  const uint64_t ip = size != 0 ? ReadValue(pos_ + 1, size) : 0;
  switch (ipc) {
    case pt_ipc_suppressed:
      ip_.suppressed = true;
      return 1;
    case pt_ipc_sext_48:
      ip_.ip = (ip & (uint64_t{1} << 47)) ? ip | ~0xffffffffffffull : ip & 0xffffffffffffull;
      break;
    case pt_ipc_update_16:
      ip_.ip = (ip_.ip & ~0xffffull) | (ip & 0xffffull);
      break;
    case pt_ipc_update_32:
      ip_.ip = (ip_.ip & ~0xffffffffull) | (ip & 0xffffffffull);
      break;
    case pt_ipc_update_48:
      ip_.ip = (ip_.ip & ~0xffffffffffffull) | (ip & 0xffffffffffffull);
      break;
    default:  // pt_ipc_full
      ip_.ip = ip;
      break;
  }
  ip_.have_ip = true;
  ip_.suppressed = false;
  return size + 1;
}

// pt_qry_event_ip.
int PacketLoop::EventIp(uint64_t* ip, pt_event* ev) const {
  int status = LastIpQuery(ip);
  if (status < 0) {
    if (status != -pte_noip && status != -pte_ip_suppressed) return status;
    ev->ip_suppressed = 1;
  }
  return 0;
}

// pt_qry_event_time.
void PacketLoop::EventTime(pt_event* ev) const {
  ev->tsc = time_.tsc;
  ev->lost_mtc = time_.lost_mtc;
  ev->lost_cyc = time_.lost_cyc;
  if (time_.have_tsc) ev->has_tsc = 1;
}

// pt_qry_decode_psb and pt_qry_read_psb_header.
int PacketLoop::DecodePsb() {
  const uint8_t* pos = pos_;
  int size = ReadPsb(pos, end_);
  if (size < 0) return size;
  if (time_config_.skl168) tcal_.check_skl168 = true;  // pt_tcal_update_psb
  pos_ += size;
  ip_ = LastIp{};
  int status;
  for (;;) {
    status = Fetch(&next_, pos_);
    if (status != 0) break;
    if (next_ == kPsbend || next_ == kOvf) return 0;  // pdff_psbend
    status = Header(next_);
    if (status != 0) break;
  }
  pos_ = pos;
  evq_.begin[kBindPsbend] = evq_.end[kBindPsbend] = 0;
  next_ = kPsb;
  return status;
}

// pt_qry_decode_tnt_8 / _64.
int PacketLoop::DecodeTnt(uint64_t payload, int size) {
  uint64_t bits;
  const int bit_size = TntBits(payload, &bits);
  if (bit_size < 0) return bit_size;
  if (tnt_index_ != 0) return -pte_bad_context;
  tnt_bits_ = bits;
  tnt_index_ = uint64_t{1} << (bit_size - 1);
  pos_ += size;
  tnt_end_ = pos_;
  return 0;
}

int PacketLoop::DecodeTip() {
  const int size = DecodeIp();
  if (size < 0) return size;
  if (pt_event* ev = Dequeue(kBindTip)) {
    int status = -pte_bad_context;
    if (ev->type == ptev_async_branch) {
      consume_packet_ = true;
      status = EventIp(&ev->variant.async_branch.to, ev);
    } else if (ev->type != ptev_tsx) {
      if (uint64_t* ip = BoundIp(ev)) status = EventIp(ip, ev);
    }
    if (status < 0) return status;
    event_ = ev;
    if (Pending(kBindTip)) return 0;
    if (!consume_packet_) return 0;
    consume_packet_ = false;
  }
  pos_ += size;
  return 0;
}

int PacketLoop::DecodePge() {
  const int size = DecodeIp();
  if (size < 0) return size;
  pt_event* ev;
  if (!consume_packet_) {
    ev = Standalone();
    ev->type = ptev_enabled;
    if (LastIpQuery(&ev->variant.enabled.ip) < 0) return -pte_bad_packet;
    EventTime(ev);
    tnt_bits_ = tnt_index_ = 0;
    consume_packet_ = true;
    enabled_ = true;
  } else {
    ev = Dequeue(kBindTip);
    if (ev != nullptr) {
      if (ev->type != ptev_exec_mode) return -pte_bad_context;
      int status = EventIp(&ev->variant.exec_mode.ip, ev);
      if (status < 0) return status;
    }
  }
  if (ev == nullptr) return -pte_internal;
  event_ = ev;
  if (Pending(kBindTip)) return 0;
  if (!consume_packet_) return -pte_internal;
  consume_packet_ = false;
  pos_ += size;
  return 0;
}

int PacketLoop::DecodePgd() {
  const int size = DecodeIp();
  if (size < 0) return size;
  pt_event* ev = Dequeue(kBindTip);
  int status = 0;
  if (ev != nullptr) {
    switch (ev->type) {
      case ptev_async_branch: {
        const uint64_t at = ev->variant.async_branch.from;
        ev->type = ptev_async_disabled;
        ev->variant.async_disabled.at = at;
        status = EventIp(&ev->variant.async_disabled.ip, ev);
        break;
      }
      case ptev_async_paging:
      case ptev_async_vmcs:
      case ptev_exec_mode:
        ev->ip_suppressed = 1;
        break;
      default:
        status = -pte_bad_context;
        break;
    }
  } else {
    ev = Standalone();
    ev->type = ptev_disabled;
    status = EventIp(&ev->variant.disabled.ip, ev);
    if (status >= 0) EventTime(ev);
  }
  if (status < 0) return status;
  event_ = ev;
  if (Pending(kBindTip)) return 0;
  enabled_ = false;
  pos_ += size;
  return 0;
}

int PacketLoop::DecodeFup() {
  const int size = DecodeIp();
  if (size < 0) return size;
  if (pt_event* ev = Dequeue(kBindFup)) {
    int status;
    switch (ev->type) {
      case ptev_overflow:
        consume_packet_ = true;
        status = LastIpQuery(&ev->variant.overflow.ip);
        break;
      case ptev_tsx:
        if (!ev->variant.tsx.aborted) consume_packet_ = true;
        status = EventIp(&ev->variant.tsx.ip, ev);
        break;
      default:  // exstop, mwait, ptwrite: not modelled
        status = -pte_internal;
        break;
    }
    if (status < 0) return status;
    event_ = ev;
    if (Pending(kBindFup)) return 0;
    if (!consume_packet_) return 0;
    consume_packet_ = false;
  } else {
    uint64_t ip;
    int status = LastIpQuery(&ip);
    if (status < 0) return status;
    ev = Enqueue(kBindTip);
    if (ev == nullptr) return -pte_nomem;
    ev->type = ptev_async_branch;
    ev->variant.async_branch.from = ip;
    EventTime(ev);
  }
  pos_ += size;
  return 0;
}

// pt_qry_header_fup.
int PacketLoop::HeaderFup() {
  const int ipc = (*pos_ >> 5) & 0x7;
  const int size = IpSize(ipc);
  if (size < 0) return size;
  if (end_ < pos_ + 1 + size) return -pte_eos;
  if (bdm70_ && !enabled_) {
    // BDM70: a FUP in PSB+ right before a TIP.PGE (timing and status packets between them)
    // is stale: libipt skips it.
    const int status = CheckBdm70(pos_ + 1 + size);
    if (status < 0) return status;
    if (status > 0) {
      pos_ += 1 + size;
      return 0;
    }
  }
  const int status = DecodeIp();
  if (status < 0) return status;
  if (ipc != pt_ipc_suppressed) enabled_ = true;
  pos_ += status;
  return 0;
}

// check_erratum_bdm70: 1 when a TIP.PGE follows `pos` with only PAD, TSC, CBR, PSBEND, PIP,
// MODE, VMCS, TMA, MTC or CYC before it; 0 at any other packet or the end; a packet's error.
int PacketLoop::CheckBdm70(const uint8_t* pos) const {
  for (;;) {
    Kind kind;
    int status = Fetch(&kind, pos);
    if (status < 0) return status == -pte_eos ? 0 : status;
    switch (kind) {
      case kPge:
        return 1;
      case kPad:
      case kTsc:
      case kCbr:
      case kPsbend:
      case kPip:
      case kMode:
      case kVmcs:
      case kTma:
      case kMtc:
      case kCyc:
        status = SkippedSize(kind, pos, end_);
        if (status < 0) return status == -pte_eos ? 0 : status;
        pos += status;
        continue;
      default:
        return 0;
    }
  }
}

int PacketLoop::DecodeMode(bool header) {
  if (end_ < pos_ + kModeSize) return -pte_eos;
  const uint8_t payload = pos_[1];
  const uint8_t leaf = payload & 0xe0, bits = payload & 0x1f;
  if (leaf != pt_mol_exec && leaf != pt_mol_tsx) return -pte_bad_packet;
  pt_event* ev;
  if (header) {
    ev = Enqueue(kBindPsbend);
    if (ev == nullptr) return -pte_nomem;
  } else if (leaf == pt_mol_exec) {
    ev = Enqueue(kBindTip);
    if (ev == nullptr) return -pte_nomem;
  } else if (!enabled_) {
    ev = Standalone();
    ev->variant.tsx.ip = 0;
    ev->ip_suppressed = 1;
    event_ = ev;
  } else {
    ev = Enqueue(kBindFup);
    if (ev == nullptr) return -pte_nomem;
  }
  if (leaf == pt_mol_exec) {
    ev->type = ptev_exec_mode;
    ev->variant.exec_mode.mode = ExecMode(bits);
  } else {
    ev->type = ptev_tsx;
    ev->variant.tsx.speculative = (bits & 0x01) != 0;
    ev->variant.tsx.aborted = (bits & 0x02) != 0;
  }
  if (!header) EventTime(ev);
  pos_ += kModeSize;
  return 0;
}

// pt_qry_header_pip and pt_qry_header_vmcs.
int PacketLoop::HeaderPaging(bool vmcs) {
  const int size = vmcs ? kVmcsSize : kPipSize;
  if (end_ < pos_ + size) return -pte_eos;
  const uint64_t payload = ReadValue(pos_ + 2, size - 2);
  pt_event* ev = Enqueue(kBindPsbend);
  if (ev == nullptr) return -pte_nomem;
  if (vmcs) {
    ev->type = ptev_async_vmcs;
    ev->variant.async_vmcs.base = payload << 12;
  } else {
    ev->type = ptev_async_paging;
    ev->variant.async_paging.cr3 = (payload >> 1) << 5;
    ev->variant.async_paging.non_root = payload & 1;
  }
  pos_ += size;
  return 0;
}

// pt_qry_decode_cbr / pt_qry_header_cbr: a CBR outside PSB+ is a frequency change, which
// resets the calibration.
int PacketLoop::DecodeCbr(bool header) {
  if (end_ < pos_ + kCbrSize) return -pte_eos;
  const uint8_t ratio = pos_[2];
  if (!header) tcal_ = TimeCal{};  // pt_tcal_update_cbr
  int status = TcalHeaderCbr(ratio);
  if (status < 0 && status != -pte_bad_config) return status;
  if (ratio == 0) return -pte_bad_packet;  // pt_time_update_cbr
  time_.have_cbr = true;
  time_.cbr = ratio;
  pt_event* ev;
  if (header) {
    ev = Enqueue(kBindPsbend);
    if (ev == nullptr) return -pte_nomem;
  } else {
    ev = Standalone();
    event_ = ev;
  }
  ev->type = ptev_cbr;
  ev->variant.cbr.ratio = ratio;
  if (!header) EventTime(ev);
  pos_ += kCbrSize;
  return 0;
}

// pt_qry_decode_tsc / pt_qry_header_tsc: only a TSC in PSB+ calibrates.
int PacketLoop::DecodeTsc(bool header) {
  if (end_ < pos_ + kTscSize) return -pte_eos;
  const uint64_t tsc = ReadValue(pos_ + 1, 7);
  if (header) {
    int status = TcalHeaderTsc(tsc);
    if (status < 0 && status != -pte_bad_config) return status;
  } else {  // pt_tcal_update_tsc
    tcal_.tsc = tsc;
    tcal_.cyc_tsc = 0;
  }
  // pt_time_update_tsc: the full time; earlier losses are recovered.
  time_.have_tsc = true;
  time_.have_tma = false;
  time_.have_mtc = false;
  time_.tsc = time_.base = tsc;
  time_.ctc = 0;
  time_.fc = 0;
  time_.lost_mtc = 0;
  time_.lost_cyc = 0;
  pos_ += kTscSize;
  return 0;
}

// pt_qry_decode_tma (also its header function); pt_tcal_update_tma does nothing.
int PacketLoop::DecodeTma() {
  uint16_t ctc, fc;
  const int size = ReadTma(pos_, end_, &ctc, &fc);
  if (size < 0) return size;  // SKZ84's bad TMA: FastPathCovers sends it to libipt
  int status = TimeUpdateTma(ctc, fc);
  if (status < 0 && status != -pte_bad_config) return status;
  pos_ += size;
  return 0;
}

// pt_qry_decode_mtc (also its header function).
int PacketLoop::DecodeMtc() {
  if (end_ < pos_ + kMtcSize) return -pte_eos;
  const uint8_t ctc = pos_[1];
  int status = TcalUpdateMtc(ctc);
  if (status < 0 && status != -pte_bad_config) return status;
  status = TimeUpdateMtc(ctc);
  if (status < 0 && status != -pte_bad_config) return status;
  pos_ += kMtcSize;
  return 0;
}

// pt_qry_decode_cyc (also its header function) without erratum SKD007's case (FastPathCovers).
int PacketLoop::DecodeCyc() {
  uint64_t cyc;
  const int size = ReadCyc(pos_, end_, &cyc);
  if (size < 0) return size;
  // pt_tcal_update_cyc
  tcal_.cyc_mtc += cyc;
  tcal_.cyc_tsc += cyc;
  // Without calibration yet the ratio is 0: pt_time_update_cyc counts a lost CYC.
  const uint64_t fcr = tcal_.HaveFcr() ? tcal_.fcr : 0;
  int status = TimeUpdateCyc(cyc, fcr);
  if (status < 0 && status != -pte_bad_config) return status;
  pos_ += size;
  return 0;
}

// pt_time_ctc_delta: one wrap-around corrected.
int PacketLoop::CtcDelta(uint32_t* delta, uint32_t ctc, uint32_t last_ctc) const {
  if (ctc < last_ctc) {
    ctc += 1u << (time_config_.mtc_freq + kMtcBits);
    if (ctc < last_ctc) return -pte_bad_packet;
  }
  *delta = ctc - last_ctc;
  return 0;
}

// pt_time_ctc_fc: CTC in fast counter units.
int PacketLoop::CtcFc(uint64_t* fc, uint64_t ctc) const {
  const uint32_t eax = time_config_.cpuid_0x15_eax, ebx = time_config_.cpuid_0x15_ebx;
  if (eax == 0 || ebx == 0) return -pte_bad_config;
  *fc = (ctc * ebx) / eax;
  return 0;
}

// pt_time_update_tma.
int PacketLoop::TimeUpdateTma(uint16_t ctc, uint16_t fc) {
  if (!time_.have_tsc) return -pte_bad_context;
  if (time_.have_tma) return -pte_bad_context;
  if (time_.have_mtc) return -pte_internal;
  const uint32_t mtc_hi = time_config_.mtc_freq + kMtcBits;
  const uint32_t ctc_mask = (1u << mtc_hi) - 1u;
  time_.have_tma = true;
  time_.base -= fc;
  time_.fc += fc;
  if (mtc_hi <= kTmaCtcBits) time_.have_mtc = true;
  time_.ctc = time_.ctc_cyc = ctc & ctc_mask;
  return 0;
}

// pt_time_update_mtc.
int PacketLoop::TimeUpdateMtc(uint8_t payload) {
  const bool have_tsc = time_.have_tsc, have_tma = time_.have_tma, have_mtc = time_.have_mtc;
  if (have_tsc && !have_tma) return 0;  // MTCs between TSC and TMA are ignored
  uint64_t base = time_.base;
  uint32_t last_ctc = time_.ctc;
  const uint8_t mtc_freq = time_config_.mtc_freq;
  const uint32_t ctc = static_cast<uint32_t>(payload) << mtc_freq;
  if (time_.fc != 0 || time_.lost_cyc != 0 || !have_mtc) time_.ctc_cyc = ctc;
  time_.have_mtc = true;
  time_.fc = 0;
  time_.ctc = ctc;
  time_.lost_cyc = 0;
  if (!have_mtc) {
    if (!have_tma) return 0;
    if (last_ctc & ~kTmaCtcMask) return -pte_internal;
    const uint32_t ctc_lo = ctc & kTmaCtcMask;
    uint32_t ctc_hi = ctc & ~kTmaCtcMask;
    if (ctc_lo < last_ctc) {
      ctc_hi -= 1u << kTmaCtcBits;
      ctc_hi &= kMtcMask << mtc_freq;
    }
    last_ctc |= ctc_hi;
  }
  uint32_t ctc_delta;
  int status = CtcDelta(&ctc_delta, ctc, last_ctc);
  if (status < 0) {
    time_.lost_mtc += 1;
    return status;
  }
  uint64_t tsc;
  status = CtcFc(&tsc, ctc_delta);
  if (status < 0) return status;
  base += tsc;
  time_.tsc = time_.base = base;
  return 0;
}

// pt_time_adjust_cyc: a CYC that spans MTC periods keeps only the current period's part.
int PacketLoop::TimeAdjustCyc(uint64_t* cyc, uint64_t fcr) const {
  const uint32_t last_ctc = time_.ctc_cyc, ctc = time_.ctc;
  if (ctc == last_ctc) return 0;
  uint32_t ctc_delta;
  int status = CtcDelta(&ctc_delta, ctc, last_ctc);
  if (status < 0) return status;
  uint64_t fc;
  status = CtcFc(&fc, ctc_delta);
  if (status < 0) return status;
  const uint64_t old_cyc = (fc << kFcrShift) / fcr;
  uint64_t total_cyc = *cyc;
  if (total_cyc < old_cyc) total_cyc = old_cyc;
  *cyc = total_cyc - old_cyc;
  return 0;
}

// pt_time_update_cyc.
int PacketLoop::TimeUpdateCyc(uint64_t cyc, uint64_t fcr) {
  if (fcr == 0) {
    time_.lost_cyc += 1;
    return 0;
  }
  uint64_t fc = time_.fc;
  if (fc == 0) {
    int status = TimeAdjustCyc(&cyc, fcr);
    if (status < 0) return status;
  }
  fc += (cyc * fcr) >> kFcrShift;
  time_.fc = fc;
  time_.tsc = time_.base + fc;
  return 0;
}

// pt_tcal_set_fcr.
void PacketLoop::TimeCal::SetFcr(uint64_t value) {
  fcr = value;
  if (value < min_fcr) min_fcr = value;
  if (value > max_fcr) max_fcr = value;
}

// pt_tcal_header_tsc: calibrates from the cycles between two TSCs in PSB+, unless MTCs do.
int PacketLoop::TcalHeaderTsc(uint64_t tsc) {
  const uint64_t last_tsc = tcal_.tsc, cyc = tcal_.cyc_tsc;
  tcal_.tsc = tsc;
  tcal_.cyc_tsc = 0;
  if (last_tsc == 0 || cyc == 0) return 0;
  if (tcal_.have_mtc) return 0;
  if (tsc < last_tsc) {
    tsc += uint64_t{1} << kTscBits;
    if (tsc < last_tsc) return -pte_bad_packet;
  }
  const uint64_t tsc_delta = tsc - last_tsc;
  if (tsc_delta & ~(~0ull >> kFcrShift)) return -pte_internal;
  tcal_.SetFcr((tsc_delta << kFcrShift) / cyc);
  return 0;
}

// pt_tcal_header_cbr: with the nominal frequency, the ratio calibrates.
int PacketLoop::TcalHeaderCbr(uint8_t ratio) {
  const uint64_t p1 = time_config_.nom_freq;
  if (p1 == 0) return 0;
  if (ratio == 0) return -pte_bad_packet;
  tcal_.SetFcr((p1 << kFcrShift) / ratio);
  return 0;
}

// pt_tcal_update_mtc, with erratum SKL168 (CYC dropped right before a PSB).
int PacketLoop::TcalUpdateMtc(uint8_t payload) {
  const uint32_t last_ctc = tcal_.ctc;
  const bool have_mtc = tcal_.have_mtc, check_skl168 = tcal_.check_skl168;
  const uint64_t cyc = tcal_.cyc_mtc;
  tcal_.check_skl168 = false;
  const uint8_t mtc_freq = time_config_.mtc_freq;
  const uint32_t ctc = static_cast<uint32_t>(payload) << mtc_freq;
  if (!have_mtc) {
    tcal_.cyc_mtc = 0;
    tcal_.ctc = ctc;
    tcal_.have_mtc = true;
    return 0;
  }
  if (cyc == 0) return 0;
  tcal_.have_mtc = true;
  tcal_.cyc_mtc = 0;
  tcal_.ctc = ctc;
  tcal_.lost_mtc += 1;
  uint32_t ctc_delta;
  int status = CtcDelta(&ctc_delta, ctc, last_ctc);
  if (status < 0) return status;
  uint64_t fc;
  status = CtcFc(&fc, ctc_delta);
  if (status < 0) return status;
  if (fc & ~(~0ull >> kFcrShift)) return -pte_internal;
  const uint64_t fcr = (fc << kFcrShift) / cyc;
  if (check_skl168) {
    if ((1u << mtc_freq) < ctc_delta) return 0;
    if (mtc_freq < 10 && tcal_.HaveFcr()) {
      const uint64_t dfc = (tcal_.fcr * (cyc + 0xf00)) >> kFcrShift;
      if (dfc < fc) return 0;
    }
  }
  tcal_.SetFcr(fcr);
  tcal_.lost_mtc = 0;
  return 0;
}

int PacketLoop::DecodePsbend() {
  int status = ProcessPendingPsbEvents();
  if (status != 0) return status < 0 ? status : 0;
  pos_ += kPsbendSize;
  return 0;
}

int PacketLoop::ProcessPendingPsbEvents() {
  pt_event* ev = Dequeue(kBindPsbend);
  if (ev == nullptr) return 0;
  ev->status_update = 1;
  EventTime(ev);
  int status = -pte_internal;
  if (uint64_t* ip = BoundIp(ev)) {
    status = EventIp(ip, ev);
  } else if (ev->type == ptev_cbr) {
    status = 0;
  }
  if (status < 0) return status;
  event_ = ev;
  return 1;
}

// pt_qry_decode_ovf without errata SKD010, APL11 and APL12 (PacketLoopModels).
int PacketLoop::DecodeOvf() {
  int status = ProcessPendingPsbEvents();
  if (status != 0) return status < 0 ? status : 0;
  const TimeState time = time_;
  Reset();
  time_ = time;
  pos_ += kOvfSize;
  const int offset = FindOvfFup();
  pt_event* ev;
  if (offset <= 0) {
    if (offset < 0 && offset != -pte_eos) return offset;
    ev = Standalone();
    ev->type = ptev_overflow;
    ev->ip_suppressed = 1;
    enabled_ = false;
    event_ = ev;
  } else {
    ev = Enqueue(kBindFup);
    if (ev == nullptr) return -pte_internal;
    ev->type = ptev_overflow;
    enabled_ = true;
  }
  EventTime(ev);
  return 0;
}

// pt_pkt_find_ovf_fup from pos_: 1 when a FUP comes before a packet that says tracing is
// disabled (0), -pte_bad_context at a packet that needs tracing enabled, pt_pkt_next's error.
int PacketLoop::FindOvfFup() const {
  const uint8_t* pos = pos_;
  for (;;) {
    Kind kind;
    int status = Fetch(&kind, pos);
    if (status < 0) return status;
    switch (kind) {
      case kFup:
        return 1;
      case kPad:
      case kCbr:
      case kTsc:
      case kMtc:
      case kTma:
      case kCyc:
        status = SkippedSize(kind, pos, end_);
        if (status < 0) return status;
        pos += status;
        continue;
      case kPsb:
      case kPge:
      case kMode:
      case kPip:
      case kVmcs:
      case kOvf:
        return 0;
      case kPsbend:
      case kTip:
      case kPgd:
      case kTnt8:
      case kTnt64:
        return -pte_bad_context;
      default:  // not modelled (PacketLoopModels)
        return -pte_internal;
    }
  }
}

}  // namespace ptkit::decoder
