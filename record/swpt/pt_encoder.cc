#include "record/swpt/pt_encoder.h"

#include <intel-pt.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"

namespace ptkit::swpt {
namespace {

absl::Status LibiptError(const char* what, int code) {
  return absl::InternalError(
      absl::StrCat(what, ": ", pt_errstr(pt_errcode(code)), " (", code, ")"));
}

uint64_t Sext48(uint64_t v) {
  return (v & (1ull << 47)) ? (v | 0xffff000000000000ull) : (v & 0x0000ffffffffffffull);
}

const char* KindName(EventKind kind) {
  switch (kind) {
    case EventKind::kCondBranch:
      return "conditional branch";
    case EventKind::kDirectJump:
      return "direct jump";
    case EventKind::kDirectCall:
      return "direct call";
    case EventKind::kIndirectJump:
      return "indirect jump";
    case EventKind::kIndirectCall:
      return "indirect call";
    case EventKind::kReturn:
      return "return";
    case EventKind::kFarBranch:
      return "far branch";
    case EventKind::kInterrupt:
      return "interrupt";
    case EventKind::kEnable:
      return "enable";
    case EventKind::kDisable:
      return "disable";
    case EventKind::kAsyncDisable:
      return "async disable";
    case EventKind::kModeChange:
      return "mode change";
    case EventKind::kTick:
      return "tick";
    case EventKind::kTime:
      return "time";
    case EventKind::kOverflow:
      return "overflow";
  }
  return "unknown";
}

pt_packet MakePacket(pt_packet_type type) {
  pt_packet p;
  std::memset(&p, 0, sizeof(p));
  p.type = type;
  return p;
}

}  // namespace

// SDM Vol. 3C, "IP Compression" (IPBytes): 001b/010b replace the low 16/32 bits of the last IP,
// 011b is a sign-extended 48-bit IP, 100b replaces the low 48 bits, 110b is the full IP. We pick
// the shortest payload that reproduces `ip`.
int ChooseIpCompression(uint64_t ip, uint64_t last_ip) {
  if ((ip >> 16) == (last_ip >> 16)) return pt_ipc_update_16;
  if ((ip >> 32) == (last_ip >> 32)) return pt_ipc_update_32;
  if (Sext48(ip) == ip) return pt_ipc_sext_48;
  if ((ip >> 48) == (last_ip >> 48)) return pt_ipc_update_48;
  return pt_ipc_full;
}

int FullIpCompression(uint64_t ip) { return Sext48(ip) == ip ? pt_ipc_sext_48 : pt_ipc_full; }

void PtEncoder::EncoderDeleter::operator()(pt_encoder* e) const { pt_free_encoder(e); }

PtEncoder::PtEncoder(const PtEncoderOptions& options) : options_(options) {}
PtEncoder::PtEncoder(PtEncoder&&) noexcept = default;
PtEncoder& PtEncoder::operator=(PtEncoder&&) noexcept = default;
PtEncoder::~PtEncoder() = default;

absl::StatusOr<PtEncoder> PtEncoder::Create(const PtEncoderOptions& options) {
  if (options.psb_period > 15) return absl::InvalidArgumentError("psb_period must be 0..15");
  if (options.max_tnt_bits < 1 || options.max_tnt_bits > 47) {
    return absl::InvalidArgumentError("max_tnt_bits must be 1..47");
  }
  if (options.mtc_freq > 15) return absl::InvalidArgumentError("mtc_freq must be 0..15");
  if (options.cyc_thresh > 15) return absl::InvalidArgumentError("cyc_thresh must be 0..15");
  if (options.mtc && (options.cpuid_0x15_eax == 0 || options.cpuid_0x15_ebx == 0 ||
                      options.cpuid_0x15_ebx / options.cpuid_0x15_eax >= 512)) {
    return absl::InvalidArgumentError(
        "mtc needs cpuid_0x15_eax/ebx non-zero with ebx/eax < 512 (TMA fast counter)");
  }
  PtEncoder encoder(options);
  PTKIT_RETURN_IF_ERROR(encoder.Init());
  return encoder;
}

absl::Status PtEncoder::Init() {
  // The PSB period is counted in bytes of trace output (SDM, IA32_RTIT_CTL.PSBFreq):
  // 2K << PSBFreq.
  psb_bytes_ = uint64_t{2048} << options_.psb_period;
  tsc_ = options_.tsc_start;
  scratch_ = std::make_unique<uint8_t[]>(kScratchSize);
  pt_config config;
  pt_config_init(&config);
  config.begin = scratch_.get();
  config.end = scratch_.get() + kScratchSize;
  config.mtc_freq = options_.mtc_freq;
  config.cpuid_0x15_eax = options_.cpuid_0x15_eax;
  config.cpuid_0x15_ebx = options_.cpuid_0x15_ebx;
  enc_.reset(pt_alloc_encoder(&config));
  if (!enc_) return absl::InternalError("pt_alloc_encoder failed");
  return absl::OkStatus();
}

void PtEncoder::MoveScratch() {
  if (scratch_used_ == 0) return;
  out_.insert(out_.end(), scratch_.get(), scratch_.get() + scratch_used_);
  scratch_used_ = 0;
  pt_enc_sync_set(enc_.get(), 0);
}

const std::vector<uint8_t>& PtEncoder::bytes() {
  MoveScratch();
  return out_;
}

std::vector<uint8_t> PtEncoder::TakeBytes() {
  MoveScratch();
  std::vector<uint8_t> result;
  result.swap(out_);
  taken_ += result.size();
  return result;
}

absl::Status PtEncoder::Emit(const pt_packet& packet) {
  if (scratch_used_ + kMaxPacket > kScratchSize) MoveScratch();
  int n = pt_enc_next(enc_.get(), &packet);
  if (n < 0) return LibiptError("pt_enc_next", n);
  scratch_used_ += static_cast<size_t>(n);
  return absl::OkStatus();
}

// SDM "Cycle-Accurate Mode": a CYC packet carries the core cycles since the previous CYC and
// is sent with the next CYC-eligible packet (TNT, TIP*, FUP, MODE) once the count reaches the
// threshold 2^(CycThresh-1).
absl::Status PtEncoder::EmitCyc() {
  if (!options_.cyc || cyc_pending_ == 0) return absl::OkStatus();
  uint64_t threshold = options_.cyc_thresh == 0 ? 1 : uint64_t{1} << (options_.cyc_thresh - 1);
  if (cyc_pending_ < threshold) return absl::OkStatus();
  pt_packet p = MakePacket(ppt_cyc);
  p.payload.cyc.value = cyc_pending_;
  cyc_pending_ = 0;
  return Emit(p);
}

// SDM "Taken/Not-taken (TNT) Packet": the oldest branch is the most significant payload bit
// below the stop bit. Short TNT holds up to 6 bits, long TNT up to 47.
absl::Status PtEncoder::AddTnt(bool taken) {
  tnt_bits_ = (tnt_bits_ << 1) | (taken ? 1 : 0);
  if (++tnt_count_ >= options_.max_tnt_bits) return FlushTnt();
  return absl::OkStatus();
}

absl::Status PtEncoder::FlushTnt() {
  if (tnt_count_ == 0) return absl::OkStatus();
  PTKIT_RETURN_IF_ERROR(EmitCyc());
  pt_packet p = MakePacket(tnt_count_ <= 6 ? ppt_tnt_8 : ppt_tnt_64);
  p.payload.tnt.bit_size = static_cast<uint8_t>(tnt_count_);
  p.payload.tnt.payload = tnt_bits_;
  tnt_bits_ = 0;
  tnt_count_ = 0;
  return Emit(p);
}

int PtEncoder::NextIpCompression(uint64_t ip) {
  if (!full_ip_) return ChooseIpCompression(ip, last_ip_);
  full_ip_ = false;
  return FullIpCompression(ip);
}

// TIP/TIP.PGE/TIP.PGD/FUP with IP compression against the last IP. A suppressed IP
// (IPBytes=000b) leaves the last IP unchanged (SDM "IP Compression").
absl::Status PtEncoder::EmitIp(int type, uint64_t ip, bool suppress) {
  PTKIT_RETURN_IF_ERROR(EmitCyc());
  pt_packet p = MakePacket(static_cast<pt_packet_type>(type));
  if (suppress) {
    p.payload.ip.ipc = pt_ipc_suppressed;
  } else {
    p.payload.ip.ipc = static_cast<pt_ip_compression>(NextIpCompression(ip));
    p.payload.ip.ip = ip;
    last_ip_ = ip;
  }
  return Emit(p);
}

absl::Status PtEncoder::EmitMode() {
  PTKIT_RETURN_IF_ERROR(EmitCyc());
  pt_packet p = MakePacket(ppt_mode);
  p.payload.mode.leaf = pt_mol_exec;
  pt_exec_mode mode = mode_ == ExecMode::k64Bit   ? ptem_64bit
                      : mode_ == ExecMode::k32Bit ? ptem_32bit
                                                  : ptem_16bit;
  p.payload.mode.bits.exec = pt_set_exec_mode(mode);
  mode_sent_ = true;
  return Emit(p);
}

uint64_t PtEncoder::CtcOf(uint64_t tsc) const {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(tsc) * options_.cpuid_0x15_eax /
                               options_.cpuid_0x15_ebx);
}

uint64_t PtEncoder::TscOfCtc(uint64_t ctc) const {
  // The first TSC whose CTC is `ctc` (rounded up).
  const unsigned __int128 scaled = static_cast<unsigned __int128>(ctc) * options_.cpuid_0x15_ebx;
  return static_cast<uint64_t>((scaled + options_.cpuid_0x15_eax - 1) / options_.cpuid_0x15_eax);
}

// SDM "Packet Stream Boundary+": pending TNT goes out first; PSB resets the last IP to zero and
// RET compression may only use CALLs seen after it. PSB+ then carries the status: TSC (TSCEn),
// TMA (MTCEn with TSCEn), CBR, MODE.Exec and FUP with the current IP (PacketEn), PSBEND. As on
// hardware, the FUP and the first IP packet after PSBEND carry the whole IP (full_ip_).
absl::Status PtEncoder::WritePsbPlus() {
  PTKIT_RETURN_IF_ERROR(FlushTnt());
  if (options_.clock != nullptr) {
    const uint64_t now = options_.clock();
    if (now > tsc_) PTKIT_RETURN_IF_ERROR(Tick(now - tsc_));
  }
  psbs_.push_back({offset(), events_});
  last_psb_offset_ = offset();
  PTKIT_RETURN_IF_ERROR(Emit(MakePacket(ppt_psb)));
  last_ip_ = 0;
  full_ip_ = true;
  stack_size_ = 0;
  mode_sent_ = false;
  if (options_.tsc) {
    pt_packet p = MakePacket(ppt_tsc);
    p.payload.tsc.tsc = tsc_;
    PTKIT_RETURN_IF_ERROR(Emit(p));
    if (options_.mtc) PTKIT_RETURN_IF_ERROR(EmitTma());
  }
  if (options_.tsc || options_.mtc || options_.cyc) {
    pt_packet p = MakePacket(ppt_cbr);
    p.payload.cbr.ratio = options_.cbr;
    PTKIT_RETURN_IF_ERROR(Emit(p));
  }
  if (tracing_) {
    pt_packet mode = MakePacket(ppt_mode);
    mode.payload.mode.leaf = pt_mol_exec;
    mode.payload.mode.bits.exec = pt_set_exec_mode(mode_ == ExecMode::k64Bit   ? ptem_64bit
                                                   : mode_ == ExecMode::k32Bit ? ptem_32bit
                                                                               : ptem_16bit);
    PTKIT_RETURN_IF_ERROR(Emit(mode));
    mode_sent_ = true;
    pt_packet fup = MakePacket(ppt_fup);
    fup.payload.ip.ipc = static_cast<pt_ip_compression>(FullIpCompression(next_ip_));
    fup.payload.ip.ip = next_ip_;
    last_ip_ = next_ip_;
    PTKIT_RETURN_IF_ERROR(Emit(fup));
  }
  full_ip_ = true;  // The first IP packet after PSBEND too.
  return Emit(MakePacket(ppt_psbend));
}

// TMA: CTC[15:0] at the TSC value and the TSC ticks since that CTC edge (FastCounter).
absl::Status PtEncoder::EmitTma() {
  const uint64_t ctc = CtcOf(tsc_);
  const uint64_t ctc_tsc = static_cast<uint64_t>(static_cast<unsigned __int128>(ctc) *
                                                 options_.cpuid_0x15_ebx / options_.cpuid_0x15_eax);
  pt_packet tma = MakePacket(ppt_tma);
  tma.payload.tma.ctc = static_cast<uint16_t>(ctc & 0xffff);
  tma.payload.tma.fc = static_cast<uint16_t>(std::min<uint64_t>(tsc_ - ctc_tsc, 0x1ff));
  return Emit(tma);
}

// SDM "Mini Time Counter (MTC) Packet": sent when CTC bit (MTCFreq) toggles, payload
// CTC[MTCFreq+7:MTCFreq]. Several elapsed periods give one MTC, but never 256 or more: its
// 8-bit payload could not tell them from fewer (the hardware sends one every period). Where a
// TSC packet follows (`tsc_follows`), a tick of more than 255 periods (a blocking call) gives
// no MTC: the TSC and a TMA after it give the time and the CTC (a review: a 3 s sleep wrote
// 14,728 MTCs in a row).
absl::Status PtEncoder::Tick(uint64_t cycles, bool tsc_follows) {
  uint64_t before = tsc_;
  tsc_ += cycles;
  if (options_.mtc) {
    const uint64_t old_period = CtcOf(before) >> options_.mtc_freq;
    const uint64_t new_period = CtcOf(tsc_) >> options_.mtc_freq;
    constexpr uint64_t kMaxPeriods = 255;
    if (tsc_follows && new_period - old_period > kMaxPeriods) {
      tma_due_ = true;
    } else if (new_period != old_period) {
      // The branches retired before the tick go out first, so the MTC times them before it
      // (sweep 40a F5: with one MTC for up to thousands of periods after them, a decoder's
      // time ran backwards 40 times in a single-stepped recording).
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      for (uint64_t period = std::min(new_period, old_period + kMaxPeriods);;
           period = std::min(new_period, period + kMaxPeriods)) {
        // SDM "Cycle-Accurate Mode": MTC is CYC-eligible, so a CYC with the cycles up to the
        // period's first tick goes before it (with CYCs only before the next TNT or TIP, a
        // CYC's cycles spanned MTCs: libipt's estimate between MTCs overshot the next one and
        // time ran backwards, 73 times in a single-stepped /bin/true).
        const uint64_t at = std::clamp(TscOfCtc(period << options_.mtc_freq), before, tsc_);
        cyc_pending_ += at - before;
        cycles -= at - before;
        before = at;
        PTKIT_RETURN_IF_ERROR(EmitCyc());
        pt_packet p = MakePacket(ppt_mtc);
        p.payload.mtc.ctc = static_cast<uint8_t>(period & 0xff);
        PTKIT_RETURN_IF_ERROR(Emit(p));
        if (period == new_period) break;
      }
    }
  }
  cyc_pending_ += cycles;
  return absl::OkStatus();
}

// SDM "Time-Stamp Counter (TSC) Packet": the TSC's value when the packet is sent. The branches
// already retired go out first, so the packet orders them before the new time.
absl::Status PtEncoder::Time(uint64_t tsc) {
  if (options_.clock != nullptr) tsc = std::max(tsc, tsc_);  // a PSB+ read the clock since
  if (tsc < tsc_) {
    return absl::InvalidArgumentError(
        absl::StrCat("time ", tsc, " is before the current TSC ", tsc_));
  }
  PTKIT_RETURN_IF_ERROR(Tick(tsc - tsc_, options_.tsc));
  if (!options_.tsc) return absl::OkStatus();
  PTKIT_RETURN_IF_ERROR(FlushTnt());
  // TSC is CYC-eligible too: the cycles up to it go before it.
  PTKIT_RETURN_IF_ERROR(EmitCyc());
  pt_packet p = MakePacket(ppt_tsc);
  p.payload.tsc.tsc = tsc_;
  PTKIT_RETURN_IF_ERROR(Emit(p));
  if (!tma_due_) return absl::OkStatus();
  tma_due_ = false;
  return EmitTma();
}

// SDM "Overflow (OVF) Packet": packets were lost; the decoder resets its state. When tracing
// continues, a FUP gives the IP where it resumes, otherwise the next TIP.PGE does. Our encoder
// resets the last IP and the RET compression stack too, so nothing after OVF depends on state
// from before it; that next IP goes out whole (full_ip_).
absl::Status PtEncoder::Overflow(uint64_t resume_ip) {
  PTKIT_RETURN_IF_ERROR(FlushTnt());
  PTKIT_RETURN_IF_ERROR(Emit(MakePacket(ppt_ovf)));
  last_ip_ = 0;
  full_ip_ = true;
  stack_size_ = 0;
  if (tracing_) {
    next_ip_ = resume_ip;
    PTKIT_RETURN_IF_ERROR(EmitIp(ppt_fup, resume_ip, false));
  }
  return absl::OkStatus();
}

absl::Status PtEncoder::Dispatch(const Event& e) {
  switch (e.kind) {
    case EventKind::kTick:
      return Tick(e.target);
    case EventKind::kTime:
      return Time(e.target);
    case EventKind::kModeChange:
      // MODE.Exec goes out with the next TIP/TIP.PGE that carries the far transfer.
      if (e.mode != mode_) {
        mode_ = e.mode;
        mode_sent_ = false;
      }
      return absl::OkStatus();
    case EventKind::kOverflow:
      return Overflow(e.ip);
    case EventKind::kEnable:
      if (tracing_) return absl::FailedPreconditionError("enable while tracing");
      // SDM packet generation table: MODE.Exec precedes TIP.PGE if the mode changed since the
      // last MODE.Exec or none was sent since the last PSB (a return to user into 32-bit code,
      // an exec from a 64-bit into an i386 program).
      if (e.mode != mode_) {
        mode_ = e.mode;
        mode_sent_ = false;
      }
      if (!mode_sent_) PTKIT_RETURN_IF_ERROR(EmitMode());
      tracing_ = true;
      next_ip_ = e.target;
      return EmitIp(ppt_tip_pge, e.target, false);
    default:
      break;
  }
  if (!tracing_) {
    return absl::FailedPreconditionError(
        absl::StrCat(KindName(e.kind), " at 0x", absl::Hex(e.ip), " while tracing is off"));
  }
  next_ip_ = e.target;
  switch (e.kind) {
    case EventKind::kCondBranch:
      return AddTnt(e.taken);
    case EventKind::kDirectJump:
      return absl::OkStatus();
    case EventKind::kDirectCall:
      if (e.PushesReturn()) Push(e.ip + e.size);
      return absl::OkStatus();
    case EventKind::kIndirectCall:
      Push(e.ip + e.size);
      [[fallthrough]];
    case EventKind::kIndirectJump:
      // Pending TNT must precede the TIP so the decoder sees the branches in order.
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      return EmitIp(ppt_tip, e.target, false);
    case EventKind::kReturn:
      // A RET whose target is the top of the stack (a CALL since the last PSB) is a taken TNT
      // bit; any other RET is a TIP and empties the stack. Decoders disagree on what such a
      // RET does to theirs: libipt's leaves it alone, perf's pops it (as at every RET; it also
      // empties it at each PSB, as this stack is). A RET compressed against an entry from
      // before the TIP would decode in one and not the other (a signal handler's RET to its
      // restorer, then the interrupted function's RET: perf 6.1 went astray on an emulated
      // dash); against entries pushed after it, both stacks agree.
      if (options_.ret_compression && stack_size_ > 0 && stack_[stack_top_] == e.target) {
        stack_top_ = (stack_top_ + kStackSize - 1) % kStackSize;
        --stack_size_;
        return AddTnt(true);
      }
      stack_size_ = 0;
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      return EmitIp(ppt_tip, e.target, false);
    case EventKind::kFarBranch:
      // The hardware's RET compression follows near CALL/RET only; perf's decoder pops its
      // stack at a far RET too (0xca/0xcb are RETs to it), libipt's does not: a near RET
      // compressed against a CALL from before a far branch decodes in one and not the other
      // (perf 6.1 on a heaven's gate: "Trace doesn't match instruction" at the RET after the
      // far return to 64-bit code). Later RETs are TIPs until a CALL after it, which every
      // decoder follows (as after an uncompressed RET, above).
      stack_size_ = 0;
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      if (!mode_sent_) PTKIT_RETURN_IF_ERROR(EmitMode());
      return EmitIp(ppt_tip, e.target, false);
    case EventKind::kInterrupt:
      // Asynchronous transfer: FUP with the source IP, [MODE.Exec], TIP with the target.
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      PTKIT_RETURN_IF_ERROR(EmitIp(ppt_fup, e.ip, false));
      if (!mode_sent_) PTKIT_RETURN_IF_ERROR(EmitMode());
      return EmitIp(ppt_tip, e.target, false);
    case EventKind::kDisable:
      // TIP.PGD binds to the branch; its IP is suppressed when it would reveal an address out
      // of context (SDM: TIP.PGD on SYSCALL when tracing user only). A near CALL out of the
      // filter regions: the SDM's decoder algorithm, perf's and libipt's block decoder push its
      // next IP, libipt's instruction decoder does not. An entry no RET matches stands for it,
      // so that no RET is compressed where the two would differ: not against the entries below
      // it (a RET to the caller's caller: those push it, sweep 27 S4), nor against it (code the
      // untraced callee jumps to returns there: this does not push it, sweep 27 T1). Those RETs
      // are TIPs, which every decoder follows.
      if (e.size != 0) Push(kNoReturn);
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      tracing_ = false;
      return EmitIp(ppt_tip_pgd, e.target, e.suppress_ip);
    case EventKind::kAsyncDisable:
      // Asynchronous disable: FUP with the IP of the next instruction, then TIP.PGD.
      PTKIT_RETURN_IF_ERROR(FlushTnt());
      PTKIT_RETURN_IF_ERROR(EmitIp(ppt_fup, e.ip, false));
      tracing_ = false;
      next_ip_ = e.ip;
      return EmitIp(ppt_tip_pgd, 0, true);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown event kind ", static_cast<int>(e.kind)));
  }
}

absl::Status PtEncoder::AddSlow(const Event& event) {
  if (!error_.ok()) return error_;
  if (finished_) return absl::FailedPreconditionError("event after Finish()");
  absl::Status status;
  if (!started_ && event.kind == EventKind::kTime) {
    // The time at which TraceEn is set: the opening PSB+ carries it.
    tsc_ = event.target;
    ++events_;
    return absl::OkStatus();
  }
  if (!started_) {
    // Enabling TraceEn starts the trace with a PSB+.
    started_ = true;
    status = WritePsbPlus();
  }
  ++events_;
  if (status.ok()) status = Dispatch(event);
  if (status.ok() && event.kind != EventKind::kTick && event.kind != EventKind::kTime &&
      event.kind != EventKind::kModeChange && offset() - last_psb_offset_ >= psb_bytes_) {
    status = WritePsbPlus();
  }
  if (!status.ok()) error_ = status;
  inline_ok_ = tracing_ && error_.ok() && offset() - last_psb_offset_ < psb_bytes_;
  return status;
}

absl::Status PtEncoder::Flush() {
  if (!error_.ok()) return error_;
  if (finished_) return absl::FailedPreconditionError("the encoder has finished");
  absl::Status status = FlushTnt();
  if (!status.ok()) error_ = status;
  return status;
}

absl::Status PtEncoder::Finish() {
  if (!error_.ok()) return error_;
  absl::Status status = FlushTnt();
  finished_ = true;
  inline_ok_ = false;
  if (!status.ok()) error_ = status;
  return status;
}

}  // namespace ptkit::swpt
