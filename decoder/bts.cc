#include "decoder/bts.h"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <cstring>

#include "decoder/decode_bounds.h"
#include "decoder/disassembler.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

pt_insn_class ClassOf(const ZydisDecodedInstruction& insn) {
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:
      return ptic_cond_jump;
    case ZYDIS_CATEGORY_UNCOND_BR:
      return ptic_jump;
    case ZYDIS_CATEGORY_CALL:
      return ptic_call;
    case ZYDIS_CATEGORY_RET:
      return ptic_return;
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_INTERRUPT:
      return ptic_far_call;
    case ZYDIS_CATEGORY_SYSRET:
      return ptic_far_return;
    default:
      return ptic_other;
  }
}

class BtsWalker {
 public:
  BtsWalker(const ProgramImage& image, Sink& sink, DecodeTotals& totals, uint64_t offset_base)
      : image_(image),
        sink_(sink),
        totals_(totals),
        offset_base_(offset_base),
        blocks_(sink.kind() == DecoderKind::kBlock) {}

  void Record(uint64_t offset, uint64_t from, uint64_t to) {
    if (from == 0 && to == 0) return;  // no branch (perf's intel-bts decoder skips them too)
    if (from == 0) {
      // Tracing begins at `to` (perf: PERF_IP_FLAG_TRACE_BEGIN): nothing ran before it here.
      ip_ = to;
      have_ip_ = true;
      Event(ptev_enabled, to);
      return;
    }
    if (!have_ip_) {
      // The first branch: its own instruction is the first we know ran.
      ip_ = from;
    }
    // Walk ip_ .. from, one block.
    pt_block block = {};
    block.ip = ip_;
    // BTS records say no mode: the code's file's ELF class does (i386 code in an i386 file).
    const pt_exec_mode mode = image_.ElfModeAt(ip_);
    block.mode = mode;
    block.iclass = ptic_other;
    for (uint64_t n = 0;; ++n) {
      pt_insn insn = {};
      ZydisDecodedInstruction z;
      size_t got = image_.Read(ip_, insn.raw, sizeof(insn.raw));
      if (got == 0 || disassembler_.Length(mode, insn.raw, got, &z) == 0) {
        Flush(block);
        Error(got == 0 ? pte_nomap : pte_bad_insn, offset, ip_);
        break;
      }
      insn.ip = ip_;
      insn.size = z.length;
      insn.mode = mode;
      insn.iclass = ClassOf(z);
      Emit(block, insn);
      if (ip_ == from) {
        block.iclass = insn.iclass;
        Flush(block);
        break;
      }
      // A branch that must have been taken unconditionally (jmp, call, ret) but has no
      // record here means the records do not describe this code.
      if (insn.iclass == ptic_jump || insn.iclass == ptic_call || insn.iclass == ptic_return ||
          n + 1 >= max_walk_) {
        Flush(block);
        Error(n + 1 >= max_walk_ ? int{kErrorBtsWalk} : int{pte_nosync}, offset, ip_);
        break;
      }
      ip_ += z.length;
    }
    if (to == 0) {
      // Tracing ends after `from` (perf: PERF_IP_FLAG_TRACE_END), e.g. at a syscall into the
      // untraced kernel; the next record says where it begins again.
      have_ip_ = false;
      Event(ptev_disabled, 0);
      return;
    }
    ip_ = to;
    have_ip_ = true;
  }

  // A decode error: a positive pt_error_code or DecodeErrorCode.
  void Error(int code, uint64_t offset, uint64_t ip) {
    DecodeError e;
    e.code = code;
    e.offset = offset_base_ + offset;
    e.ip = ip;
    if (code == pte_nomap) {
      e.gap = image_.HoleAround(ip);
      e.missing_file = image_.MissingAt(ip);
      ++totals_.gaps;
    }
    ++totals_.errors;
    ++totals_.errors_by_code[code];
    sink_.OnError(e);
  }

 private:
  void Emit(pt_block& block, const pt_insn& insn) {
    ++totals_.instructions;
    if (!blocks_) {
      sink_.OnInsn(insn);
      return;
    }
    if (block.ninsn == UINT16_MAX) {
      Flush(block);
      block.ip = insn.ip;
    }
    if (block.ninsn == 0) block.ip = insn.ip;
    ++block.ninsn;
    block.end_ip = insn.ip;
    block.iclass = insn.iclass;
  }
  void Flush(pt_block& block) {
    if (blocks_ && block.ninsn != 0) {
      ++totals_.blocks;
      sink_.OnBlock(block);
    }
    block.ninsn = 0;
  }
  // Tracing enabled at `ip`, or disabled (where to: not known).
  void Event(pt_event_type type, uint64_t ip) {
    pt_event e = {};
    e.type = type;
    if (type == ptev_enabled) {
      e.variant.enabled.ip = ip;
    } else {
      e.ip_suppressed = 1;
    }
    ++totals_.events;
    sink_.OnEvent(e);
  }
  const ProgramImage& image_;
  Sink& sink_;
  DecodeTotals& totals_;
  uint64_t offset_base_;
  bool blocks_;
  const uint64_t max_walk_ = GetDecodeBounds().bts_walk;
  Disassembler disassembler_;
  uint64_t ip_ = 0;
  bool have_ip_ = false;
};

}  // namespace

absl::Status DecodeBtsInto(std::span<const uint8_t> records, const ProgramImage& image, Sink& sink,
                           DecodeTotals& totals, uint64_t offset_base, uint64_t ring_size) {
  totals.trace_bytes += records.size();
  BtsWalker walker(image, sink, totals, offset_base);
  // Bytes that are no record: zero padding, or part of a lost record.
  auto padding = [&](size_t from, size_t to) {
    if (std::any_of(records.begin() + from, records.begin() + to,
                    [](uint8_t b) { return b != 0; })) {
      walker.Error(kErrorBtsPartial, from, 0);
    }
  };
  size_t off = 0;
  while (off + kBtsRecordSize <= records.size()) {
    if (ring_size != 0) {
      // arch/x86/events/intel/bts.c: the records of every buffer chunk start at ring offsets
      // that are multiples of 24 (bts_buffer_setup_aux's displacement), and at the end of
      // the ring the head skips what is left of it, fewer than 24 bytes the hardware never
      // writes, to the first record at ring offset 0 (bts_buffer_reset). perf record drops
      // them as it copies (auxtrace_mmap__read's alignment); this piece holds them.
      const uint64_t left = ring_size - (offset_base + off) % ring_size;
      if (left < kBtsRecordSize) {
        const size_t end = static_cast<size_t>(std::min<uint64_t>(off + left, records.size()));
        padding(off, end);
        off = end;
        continue;
      }
    }
    uint64_t from, to;
    std::memcpy(&from, records.data() + off, 8);  // little-endian host (x86-64)
    std::memcpy(&to, records.data() + off + 8, 8);
    walker.Record(off, from, to);
    off += kBtsRecordSize;
  }
  // The kernel pads the end of each AUX buffer chunk with zeros to a whole record
  // (bts_buffer_pad_out); anything else is part of a lost record.
  padding(off, records.size());
  return absl::OkStatus();
}

absl::StatusOr<DecodeTotals> DecodeBts(std::span<const uint8_t> records, const ProgramImage& image,
                                       Sink& sink) {
  DecodeTotals totals;
  PTKIT_RETURN_IF_ERROR(DecodeBtsInto(records, image, sink, totals));
  PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
  return totals;
}

}  // namespace ptkit::decoder
