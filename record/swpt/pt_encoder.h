// Software Intel PT: turns retired control-flow events (event.h) of one thread into genuine
// Intel PT packets, written with libipt's packet encoder, following the Intel SDM Vol. 3C,
// "Intel Processor Trace" chapter (packet definitions, IP and RET compression, packet
// generation scenarios).
//
//   PTKIT_ASSIGN_OR_RETURN(auto enc, PtEncoder::Create({.psb_period = 0}));
//   PTKIT_RETURN_IF_ERROR(enc.Add(Event::Enable(entry)));
//   PTKIT_RETURN_IF_ERROR(enc.Add(Event::Cond(ip, 2, /*taken=*/true, target)));
//   ...
//   PTKIT_RETURN_IF_ERROR(enc.Finish());
//   std::vector<uint8_t> trace = enc.TakeBytes();
//
// Tracing starts disabled: the first event is normally kEnable. The trace starts with a PSB+.
#ifndef PTKIT_RECORD_SWPT_PT_ENCODER_H_
#define PTKIT_RECORD_SWPT_PT_ENCODER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "record/swpt/event.h"

struct pt_encoder;
struct pt_packet;

namespace ptkit::swpt {

// What IA32_RTIT_CTL / the perf config would say, plus the timing model.
struct PtEncoderOptions {
  bool ret_compression = true;  // perf `noretcomp=0`.
  uint8_t psb_period = 0;       // PSB+ after every 2^(psb_period+11) bytes; 0..15.
  uint8_t max_tnt_bits = 6;     // TNT bits per packet: 1..6 uses TNT-8, 7..47 allows TNT-64.
  bool tsc = false;             // TSC packets in PSB+.
  bool mtc = false;             // MTC packets on ticks; TMA in PSB+ (with tsc).
  uint8_t mtc_freq = 3;         // MTC every 2^mtc_freq crystal clock ticks; 0..15.
  bool cyc = false;             // CYC packets before CYC-eligible packets.
  uint8_t cyc_thresh = 0;       // CYC only once 2^(cyc_thresh-1) cycles elapsed; 0..15.
  uint8_t cbr = 32;             // Core:bus ratio reported in CBR packets.
  // CPUID.15H: TSC = CTC * ebx / eax. ebx / eax must be < 512 (TMA fast counter width).
  uint32_t cpuid_0x15_eax = 1;
  uint32_t cpuid_0x15_ebx = 100;
  uint64_t tsc_start = 0;  // TSC at the first event; ticks advance it.
  // When set, read at each PSB+: the TSC moves to it if it is later, and a kTime event before
  // the TSC is no error (the clock passed it). For a recorder that gives the time only at some
  // events (qemu's plugin: system calls): every PSB+ then carries the time it was written,
  // which decoders use to join overlapping pieces of trace (perf: AUX samples, snapshots).
  uint64_t (*clock)() = nullptr;
};

// Where a PSB was written: decoding can start at `offset`; it describes the state after the
// first `events` events.
struct PsbMark {
  uint64_t offset = 0;
  uint64_t events = 0;
};

// Chooses the IP compression (SDM "IP Compression") for `ip` against `last_ip`: the shortest
// of update-16/32 (upper bits shared with the last IP), sign-extended 48, update-48, full.
// Returns the pt_ip_compression value.
int ChooseIpCompression(uint64_t ip, uint64_t last_ip);

// The IP compression hardware uses when the last IP is unknown to the decoder (after a PSB or
// an OVF): the whole IP, as sign-extended 48 bits (IPBytes 011b, 6 bytes) when that gives it
// back, else in full (110b, 8 bytes). Never an update of the last IP. Returns the
// pt_ip_compression value.
int FullIpCompression(uint64_t ip);

class PtEncoder {
 public:
  // Fails with InvalidArgument for out-of-range options, Internal if libipt fails.
  static absl::StatusOr<PtEncoder> Create(const PtEncoderOptions& options);

  PtEncoder(PtEncoder&&) noexcept;
  PtEncoder& operator=(PtEncoder&&) noexcept;
  ~PtEncoder();

  // Encodes one event. Fails with FailedPrecondition when the event does not fit the tracing
  // state (a branch while tracing is off, kEnable while on) or after Finish(), InvalidArgument
  // for an unknown kind, Internal if libipt rejects a packet. After a failure the encoder
  // refuses further events. Inline for the events that need no packet yet (most of them:
  // emulators call this once per block).
  absl::Status Add(const Event& event) {
    if (AddWithoutPacket(event)) return absl::OkStatus();
    return AddSlow(event);
  }

  // Add() of a conditional branch, a direct jump or call, or a return that RET compression
  // makes a TNT bit, while tracing and when no packet is due (the TNT bit does not fill a
  // packet) and no PSB is due (a kTime may have written past the period). False, with
  // nothing done, for everything else: call Add() then.
  [[gnu::always_inline]] bool AddWithoutPacket(const Event& e) {
    if (!inline_ok_) return false;
    switch (e.kind) {
      case EventKind::kDirectJump:
        break;
      case EventKind::kDirectCall:
        if (e.target != e.ip + e.size) Push(e.ip + e.size);
        break;
      case EventKind::kReturn:
        if (!options_.ret_compression || stack_size_ == 0 || stack_[stack_top_] != e.target ||
            tnt_count_ + 1 >= options_.max_tnt_bits) {
          return false;
        }
        stack_top_ = (stack_top_ + kStackSize - 1) % kStackSize;
        --stack_size_;
        tnt_bits_ = (tnt_bits_ << 1) | 1;
        ++tnt_count_;
        break;
      case EventKind::kCondBranch:
        if (tnt_count_ + 1 >= options_.max_tnt_bits) return false;
        tnt_bits_ = (tnt_bits_ << 1) | (e.taken ? 1 : 0);
        ++tnt_count_;
        break;
      default:
        return false;
    }
    ++events_;
    next_ip_ = e.target;
    return true;
  }

  // Writes the pending TNT bits. The trace is complete afterwards; Add() then fails.
  absl::Status Finish();
  // Writes the pending TNT bits now and goes on (as the hardware flushes its packets when
  // tracing is stopped to take an AUX sample: pt_event_snapshot_aux()). Errors: as Add().
  absl::Status Flush();

  // Bytes written so far and not yet taken (pending TNT bits are not included).
  const std::vector<uint8_t>& bytes();
  // Hands out the bytes written so far; later bytes continue the same stream.
  std::vector<uint8_t> TakeBytes();

  // Total bytes written since creation (including bytes already taken).
  uint64_t offset() const { return taken_ + out_.size() + scratch_used_; }
  // Every PSB written, in order.
  const std::vector<PsbMark>& psbs() const { return psbs_; }
  // Events accepted so far.
  uint64_t events() const { return events_; }
  bool tracing() const { return tracing_; }
  ExecMode mode() const { return mode_; }  // of the code traced last
  const PtEncoderOptions& options() const { return options_; }

 private:
  struct EncoderDeleter {
    void operator()(pt_encoder* e) const;
  };
  static constexpr size_t kScratchSize = 4096;
  static constexpr size_t kMaxPacket = 32;
  static constexpr int kStackSize = 64;
  // A stack entry no RET's target is (a CALL out of the filter regions pushes it: kDisable).
  static constexpr uint64_t kNoReturn = ~uint64_t{0};

  explicit PtEncoder(const PtEncoderOptions& options);
  absl::Status Init();

  absl::Status AddSlow(const Event& event);

  absl::Status Emit(const pt_packet& packet);
  void MoveScratch();
  absl::Status AddTnt(bool taken);
  absl::Status FlushTnt();
  absl::Status EmitIp(int type, uint64_t ip, bool suppress);
  // The compression of the next IP packet's `ip`; ends the full IPs after a PSB or OVF.
  int NextIpCompression(uint64_t ip);
  absl::Status EmitCyc();
  absl::Status EmitMode();
  absl::Status WritePsbPlus();
  absl::Status Tick(uint64_t cycles, bool tsc_follows = false);
  absl::Status EmitTma();
  absl::Status Time(uint64_t tsc);
  absl::Status Overflow(uint64_t resume_ip);
  absl::Status Dispatch(const Event& e);
  // SDM "Indirect Transfer Compression for Returns": CALLs push their next IP on a 64-entry
  // stack (the oldest entry falls off; zero-length CALLs are not pushed).
  void Push(uint64_t return_ip) {
    if (!options_.ret_compression) return;
    stack_top_ = (stack_top_ + 1) % kStackSize;
    stack_[stack_top_] = return_ip;
    if (stack_size_ < kStackSize) ++stack_size_;
  }
  uint64_t CtcOf(uint64_t tsc) const;
  uint64_t TscOfCtc(uint64_t ctc) const;

  PtEncoderOptions options_;
  uint64_t psb_bytes_ = 0;
  std::unique_ptr<uint8_t[]> scratch_;
  std::unique_ptr<pt_encoder, EncoderDeleter> enc_;
  size_t scratch_used_ = 0;
  std::vector<uint8_t> out_;
  uint64_t taken_ = 0;

  bool started_ = false;
  bool finished_ = false;
  absl::Status error_;
  bool tracing_ = false;
  ExecMode mode_ = ExecMode::k64Bit;
  bool mode_sent_ = false;  // MODE.Exec written since the last PSB.
  uint64_t next_ip_ = 0;    // Where execution continues after the last event.
  uint64_t last_ip_ = 0;    // SDM "last IP" for compression.
  // Set by a PSB or OVF: IPs go out whole (FullIpCompression) up to and including the first
  // IP packet after the PSB+ (or the OVF). perf 6.1's decoder keeps the last IP from before a
  // PSB in some states, so an update against the reset last IP would misdecode there.
  bool full_ip_ = false;
  uint64_t tnt_bits_ = 0;
  int tnt_count_ = 0;
  std::array<uint64_t, kStackSize> stack_{};  // Ring of CALL next-IPs since the last PSB.
  int stack_top_ = 0;
  int stack_size_ = 0;
  uint64_t last_psb_offset_ = 0;
  std::vector<PsbMark> psbs_;
  uint64_t events_ = 0;
  uint64_t tsc_ = 0;
  uint64_t cyc_pending_ = 0;
  bool tma_due_ = false;  // a tick skipped its MTCs: a TMA goes after the TSC that follows
  // Tracing, not finished, no error, no PSB due: AddWithoutPacket may take its events. Set
  // after every AddSlow() (nothing else changes those).
  bool inline_ok_ = false;
};

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_PT_ENCODER_H_
