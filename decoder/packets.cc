#include "decoder/packets.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <string>

#include "decoder/ipt_handles.h"
#include "decoder/output_format.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

void AppendIp(Buffer& buf, const pt_packet_ip& ip, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, ",\"ipc\":{}", static_cast<int>(ip.ipc));
    if (ip.ipc != pt_ipc_suppressed) fmt::format_to(it, ",\"ip\":\"{:#x}\"", ip.ip);
  } else if (ip.ipc == pt_ipc_suppressed) {
    buf.append(std::string_view(" <suppressed>"));
  } else {
    fmt::format_to(it, " {}: {:#x}", static_cast<int>(ip.ipc), ip.ip);
  }
}

const char* PacketName(pt_packet_type type) {
  switch (type) {
    case ppt_invalid:
      return "invalid";
    case ppt_unknown:
      return "unknown";
    case ppt_pad:
      return "pad";
    case ppt_psb:
      return "psb";
    case ppt_psbend:
      return "psbend";
    case ppt_fup:
      return "fup";
    case ppt_tip:
      return "tip";
    case ppt_tip_pge:
      return "tip.pge";
    case ppt_tip_pgd:
      return "tip.pgd";
    case ppt_tnt_8:
      return "tnt.8";
    case ppt_tnt_64:
      return "tnt.64";
    case ppt_mode:
      return "mode";
    case ppt_pip:
      return "pip";
    case ppt_vmcs:
      return "vmcs";
    case ppt_cbr:
      return "cbr";
    case ppt_tsc:
      return "tsc";
    case ppt_tma:
      return "tma";
    case ppt_mtc:
      return "mtc";
    case ppt_cyc:
      return "cyc";
    case ppt_stop:
      return "stop";
    case ppt_ovf:
      return "ovf";
    case ppt_mnt:
      return "mnt";
    case ppt_exstop:
      return "exstop";
    case ppt_mwait:
      return "mwait";
    case ppt_pwre:
      return "pwre";
    case ppt_pwrx:
      return "pwrx";
    case ppt_ptw:
      return "ptw";
  }
  return "?";
}

void AppendPacket(Buffer& buf, uint64_t offset, const pt_packet& p, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, FMT_COMPILE("{{\"offset\":{},\"size\":{},\"packet\":\"{}\""), offset, p.size,
                   PacketName(p.type));
  } else {
    fmt::format_to(it, FMT_COMPILE("{:016x}  {:<8}"), offset, PacketName(p.type));
  }
  auto field = [&](const char* key, uint64_t v, bool hex) {
    if (json) {
      if (hex)
        fmt::format_to(it, ",\"{}\":\"{:#x}\"", key, v);
      else
        fmt::format_to(it, ",\"{}\":{}", key, v);
    } else if (hex) {
      fmt::format_to(it, " {}={:#x}", key, v);
    } else {
      fmt::format_to(it, " {}={}", key, v);
    }
  };
  // A counter (TSC, CTC, CYC): hex in text as ptdump shows it, a number in JSON (as the
  // "tsc" of insn --json; nlohmann and most readers take 64-bit integers exactly).
  auto counter = [&](const char* key, uint64_t v) {
    if (json) {
      fmt::format_to(it, ",\"{}\":{}", key, v);
    } else {
      fmt::format_to(it, " {}={:#x}", key, v);
    }
  };
  switch (p.type) {
    case ppt_fup:
    case ppt_tip:
    case ppt_tip_pge:
    case ppt_tip_pgd:
      AppendIp(buf, p.payload.ip, json);
      break;
    case ppt_tnt_8:
    case ppt_tnt_64: {
      std::string bits;
      for (int i = p.payload.tnt.bit_size - 1; i >= 0; --i) {
        bits.push_back((p.payload.tnt.payload >> i) & 1 ? '!' : '.');
      }
      if (json)
        fmt::format_to(it, ",\"tnt\":\"{}\"", bits);
      else
        fmt::format_to(it, " {}", bits);
      break;
    }
    case ppt_mode:
      if (p.payload.mode.leaf == pt_mol_exec) {
        pt_exec_mode mode = pt_get_exec_mode(&p.payload.mode.bits.exec);
        field("exec",
              mode == ptem_64bit   ? 64
              : mode == ptem_32bit ? 32
              : mode == ptem_16bit ? 16
                                   : 0,
              false);
      } else {
        field("intx", p.payload.mode.bits.tsx.intx, false);
        field("abrt", p.payload.mode.bits.tsx.abrt, false);
      }
      break;
    case ppt_pip:
      field("cr3", p.payload.pip.cr3, true);
      if (p.payload.pip.nr) field("nr", 1, false);
      break;
    case ppt_vmcs:
      field("base", p.payload.vmcs.base, true);
      break;
    case ppt_cbr:
      field("ratio", p.payload.cbr.ratio, false);
      break;
    case ppt_tsc:
      counter("tsc", p.payload.tsc.tsc);
      break;
    case ppt_tma:
      counter("ctc", p.payload.tma.ctc);
      counter("fc", p.payload.tma.fc);
      break;
    case ppt_mtc:
      counter("ctc", p.payload.mtc.ctc);
      break;
    case ppt_cyc:
      counter("cyc", p.payload.cyc.value);
      break;
    case ppt_mnt:
      field("payload", p.payload.mnt.payload, true);
      break;
    case ppt_exstop:
      field("ip", p.payload.exstop.ip, false);
      break;
    case ppt_mwait:
      field("hints", p.payload.mwait.hints, true);
      field("ext", p.payload.mwait.ext, true);
      break;
    case ppt_pwre:
      field("state", p.payload.pwre.state, false);
      field("sub_state", p.payload.pwre.sub_state, false);
      break;
    case ppt_pwrx:
      field("last", p.payload.pwrx.last, false);
      field("deepest", p.payload.pwrx.deepest, false);
      break;
    case ppt_ptw:
      field("payload", p.payload.ptw.payload, true);
      field("ip", p.payload.ptw.ip, false);
      break;
    default:
      break;
  }
  buf.append(json ? std::string_view("}\n") : std::string_view("\n"));
}

}  // namespace

// How often DumpPackets tells PacketContext::on_progress.
constexpr uint32_t kPacketsPerProgress = 1024;

absl::Status DumpPackets(std::span<const uint8_t> trace, const TraceConfig& config, std::FILE* file,
                         const OutputOptions& options, const PacketContext& context) {
  PTKIT_ASSIGN_OR_RETURN(pt_config pt, MakePtConfig(trace, config));
  Output out(file);
  const bool lazy_header = context.keep && context.stream_shown != nullptr;
  auto show_stream = [&] {
    if (context.stream == nullptr || (lazy_header && *context.stream_shown)) return;
    AppendStreamLine(out.buf(), *context.stream, options.json);
    if (lazy_header) *context.stream_shown = true;
  };
  if (!lazy_header) show_stream();
  for (const LossInfo& loss : context.losses) AppendLossLine(out.buf(), loss, options.json);
  if (trace.empty()) return out.Close();
  const uint64_t base = context.offset_base;
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
  if (!dec) return absl::ResourceExhaustedError("libipt: cannot allocate a packet decoder");
  uint64_t last_sync = 0;
  bool first = true;
  uint32_t until_progress = kPacketsPerProgress;
  for (;;) {
    int status = pt_pkt_sync_forward(dec.get());
    if (status < 0) {
      if (status == -pte_eos) break;
      return absl::InternalError(
          fmt::format("pt_pkt_sync_forward: {}", pt_errstr(pt_errcode(status))));
    }
    uint64_t sync = 0;
    pt_pkt_get_sync_offset(dec.get(), &sync);
    if (!first && sync <= last_sync) break;
    if (first && sync != 0) {
      if (options.json)
        fmt::format_to(out.it(), "{{\"skipped\":{},\"offset\":{}}}\n", sync, base);
      else
        fmt::format_to(out.it(), "[{} bytes before the first psb skipped]\n", sync);
    }
    first = false;
    last_sync = sync;
    for (;;) {
      uint64_t offset = 0;
      pt_pkt_get_offset(dec.get(), &offset);
      pt_packet packet;
      status = pt_pkt_next(dec.get(), &packet, sizeof(packet));
      if (status < 0) {
        if (status != -pte_eos) {
          if (options.json) {
            fmt::format_to(out.it(), "{{\"error\":\"{}\",\"offset\":{}}}\n", IptErrorName(-status),
                           base + offset);
          } else {
            fmt::format_to(out.it(), "[error at offset {:#x}: {}]\n", base + offset,
                           pt_errstr(pt_errcode(status)));
          }
        }
        break;
      }
      if (context.on_progress && --until_progress == 0) {
        until_progress = kPacketsPerProgress;
        context.on_progress(offset);
      }
      if (context.keep && !context.keep(packet)) continue;
      if (lazy_header) show_stream();
      AppendPacket(out.buf(), base + offset, packet, options.json);
      out.MaybeFlush();
    }
    if (status == -pte_eos) break;
  }
  return out.Close();
}

}  // namespace ptkit::decoder
