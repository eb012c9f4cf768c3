#include "decoder/output_format.h"

#include <intel-pt.h>

#include <iterator>

namespace ptkit::decoder {

void AppendJsonString(Buffer& buf, std::string_view s) {
  buf.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      buf.push_back('\\');
      buf.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(buf), "\\u{:04x}", static_cast<unsigned>(c));
    } else {
      buf.push_back(c);
    }
  }
  buf.push_back('"');
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string FileLabel(const std::string& path) {
  const std::string base(Basename(path));
  return base.starts_with('[') ? base : "[" + base + "]";
}

void AppendSrcline(Buffer& buf, SourceLines* lines, const ProgramImage& image, uint64_t ip,
                   bool json, std::string_view key, std::string_view lead) {
  if (lines == nullptr) return;
  const std::string* text = lines->Lookup(image, ip);
  if (text == nullptr) return;
  if (json) {
    fmt::format_to(std::back_inserter(buf), ",\"{}\":", key);
    AppendJsonString(buf, *text);
  } else {
    buf.append(lead);
    buf.push_back('(');
    buf.append(*text);
    buf.push_back(')');
  }
}

std::unique_ptr<SourceLines> MakeSourceLines(const OutputOptions& options) {
  return options.srcline ? std::make_unique<SourceLines>(options.diagnostics) : nullptr;
}

const char* BranchKind(pt_insn_class iclass) {
  switch (iclass) {
    case ptic_call:
      return "call";
    case ptic_return:
      return "ret";
    case ptic_jump:
      return "jmp";
    case ptic_cond_jump:
      return "jcc";
    case ptic_far_call:
      return "far_call";
    case ptic_far_return:
      return "far_ret";
    case ptic_far_jump:
      return "far_jmp";
    default:
      return nullptr;
  }
}

const char* EventName(const pt_event& ev) {
  switch (ev.type) {
    case ptev_enabled:
      return ev.variant.enabled.resumed ? "resumed" : "enabled";
    case ptev_disabled:
    case ptev_async_disabled:
      return "disabled";
    case ptev_async_branch:
      return "interrupt";
    case ptev_paging:
    case ptev_async_paging:
      return "paging";
    case ptev_overflow:
      return "overflow";
    case ptev_exec_mode:
      return "exec-mode";
    case ptev_tsx:
      return ev.variant.tsx.aborted       ? "tsx-abort"
             : ev.variant.tsx.speculative ? "tsx-begin"
                                          : "tsx-commit";
    case ptev_stop:
      return "stop";
    case ptev_vmcs:
    case ptev_async_vmcs:
      return "vmcs";
    case ptev_exstop:
      return "exstop";
    case ptev_mwait:
      return "mwait";
    case ptev_pwre:
      return "pwre";
    case ptev_pwrx:
      return "pwrx";
    case ptev_ptwrite:
      return "ptwrite";
    case ptev_tick:
      return "tick";
    case ptev_cbr:
      return "cbr";
    case ptev_mnt:
      return "mnt";
  }
  return "event";
}

bool EventIp(const pt_event& ev, uint64_t* ip) {
  if (ev.ip_suppressed) return false;
  switch (ev.type) {
    case ptev_enabled:
      *ip = ev.variant.enabled.ip;
      return true;
    case ptev_disabled:
      *ip = ev.variant.disabled.ip;
      return true;
    case ptev_async_disabled:
      *ip = ev.variant.async_disabled.at;
      return true;
    case ptev_async_branch:
      *ip = ev.variant.async_branch.from;
      return true;
    case ptev_async_paging:
      *ip = ev.variant.async_paging.ip;
      return true;
    case ptev_overflow:
      *ip = ev.variant.overflow.ip;
      return true;
    case ptev_exec_mode:
      *ip = ev.variant.exec_mode.ip;
      return true;
    case ptev_tsx:
      *ip = ev.variant.tsx.ip;
      return true;
    case ptev_async_vmcs:
      *ip = ev.variant.async_vmcs.ip;
      return true;
    case ptev_exstop:
      *ip = ev.variant.exstop.ip;
      return true;
    case ptev_mwait:
      *ip = ev.variant.mwait.ip;
      return true;
    case ptev_ptwrite:
      *ip = ev.variant.ptwrite.ip;
      return true;
    case ptev_tick:
      *ip = ev.variant.tick.ip;
      return true;
    default:
      return false;
  }
}

namespace {

// Appends the event-specific payload as " key=value" pairs (text) or ,"key":value (json).
void AppendEventDetail(Buffer& buf, const pt_event& ev, bool json) {
  auto it = std::back_inserter(buf);
  auto hex = [&](const char* key, uint64_t v) {
    if (json)
      fmt::format_to(it, ",\"{}\":\"{:#x}\"", key, v);
    else
      fmt::format_to(it, " {}={:#x}", key, v);
  };
  auto dec = [&](const char* key, uint64_t v) {
    if (json)
      fmt::format_to(it, ",\"{}\":{}", key, v);
    else
      fmt::format_to(it, " {}={}", key, v);
  };
  switch (ev.type) {
    case ptev_async_disabled:
      hex("ip", ev.variant.async_disabled.ip);
      break;
    case ptev_async_branch:
      hex("to", ev.variant.async_branch.to);
      break;
    case ptev_paging:
      hex("cr3", ev.variant.paging.cr3);
      break;
    case ptev_async_paging:
      hex("cr3", ev.variant.async_paging.cr3);
      break;
    case ptev_exec_mode:
      dec("bits", ev.variant.exec_mode.mode == ptem_64bit   ? 64
                  : ev.variant.exec_mode.mode == ptem_32bit ? 32
                  : ev.variant.exec_mode.mode == ptem_16bit ? 16
                                                            : 0);
      break;
    case ptev_vmcs:
      hex("base", ev.variant.vmcs.base);
      break;
    case ptev_async_vmcs:
      hex("base", ev.variant.async_vmcs.base);
      break;
    case ptev_ptwrite:
      hex("payload", ev.variant.ptwrite.payload);
      break;
    case ptev_cbr:
      dec("ratio", ev.variant.cbr.ratio);
      break;
    case ptev_mnt:
      hex("payload", ev.variant.mnt.payload);
      break;
    default:
      break;
  }
  if (ev.has_tsc) dec("tsc", ev.tsc);
}

}  // namespace

void AppendEventLine(Buffer& buf, const pt_event& ev, bool json) {
  auto it = std::back_inserter(buf);
  uint64_t ip = 0;
  bool has_ip = EventIp(ev, &ip);
  if (json) {
    fmt::format_to(it, "{{\"event\":\"{}\"", EventName(ev));
    if (has_ip) fmt::format_to(it, ",\"ip\":\"{:#x}\"", ip);
    AppendEventDetail(buf, ev, true);
    buf.append(std::string_view("}\n"));
  } else {
    fmt::format_to(it, "[{}", EventName(ev));
    if (has_ip) fmt::format_to(it, " {:#x}", ip);
    AppendEventDetail(buf, ev, false);
    buf.append(std::string_view("]\n"));
  }
}

void AppendErrorLine(Buffer& buf, const DecodeError& e, bool json) {
  auto it = std::back_inserter(buf);
  if (json) {
    fmt::format_to(it, "{{\"error\":\"{}\",\"offset\":{},\"ip\":\"{:#x}\"", IptErrorName(e.code),
                   e.offset, e.ip);
    if (e.is_gap()) {
      fmt::format_to(it, ",\"gap\":{{\"begin\":\"{:#x}\",\"end\":\"{:#x}\"}}", e.gap.begin,
                     e.gap.end);
      if (e.missing_file != nullptr) {
        buf.append(std::string_view(",\"missing\":"));
        AppendJsonString(buf, *e.missing_file);
      }
    }
    buf.append(std::string_view("}\n"));
    return;
  }
  if (e.is_gap() && e.missing_file == nullptr && e.ip >= 0xffff800000000000ull) {
    // Kernel code the recording has not (sweep 29b M2: "no image is loaded").
    fmt::format_to(it,
                   "[gap at offset {:#x}: no code at {:#x}: kernel code, not in the recording "
                   "(ptrecord --kcore, perf record --kcore)]\n",
                   e.offset, e.ip);
  } else if (e.is_gap() && e.missing_file != nullptr) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}: {} could not be loaded]\n",
                   e.offset, e.ip, *e.missing_file);
  } else if (e.is_gap() && e.gap.begin == 0 && e.gap.end == ~0ull) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}; no image is loaded]\n", e.offset,
                   e.ip);
  } else if (e.is_gap()) {
    fmt::format_to(it, "[gap at offset {:#x}: no code at {:#x}; nothing mapped in {:#x}-{:#x}]\n",
                   e.offset, e.ip, e.gap.begin, e.gap.end);
  } else {
    fmt::format_to(it, "[error at offset {:#x}, ip {:#x}: {}{}]\n", e.offset, e.ip,
                   e.during_sync ? "sync: " : "", DecodeErrorText(e.code));
  }
}

void AppendStreamLine(Buffer& buf, const StreamInfo& s, bool json) {
  if (s.context_switch) {
    if (json) {
      buf.append(std::string_view("{\"switch\":"));
      AppendJsonString(buf, s.name);
      fmt::format_to(std::back_inserter(buf), ",\"pid\":{},\"tid\":{},\"comm\":", s.pid, s.tid);
      AppendJsonString(buf, s.comm);
      buf.append(std::string_view("}\n"));
    } else {
      // The thread too: a switch can be between two threads of one process.
      fmt::format_to(std::back_inserter(buf), "[switch {}: pid {} tid {}{}{}{}]\n", s.name, s.pid,
                     s.tid, s.comm.empty() ? "" : " (", s.comm, s.comm.empty() ? "" : ")");
    }
    return;
  }
  if (json) {
    buf.append(std::string_view("{\"stream\":"));
    AppendJsonString(buf, s.name);
    fmt::format_to(std::back_inserter(buf), ",\"pid\":{},\"comm\":", s.pid);
    AppendJsonString(buf, s.comm);
    fmt::format_to(std::back_inserter(buf), ",\"bytes\":{}}}\n", s.bytes);
  } else {
    fmt::format_to(std::back_inserter(buf), "[stream {}: pid {}{}{}{}, {} bytes]\n", s.name, s.pid,
                   s.comm.empty() ? "" : " (", s.comm, s.comm.empty() ? "" : ")", s.bytes);
  }
}

void AppendLossLine(Buffer& buf, const LossInfo& l, bool json) {
  if (json) {
    fmt::format_to(std::back_inserter(buf), "{{\"loss\":\"{}\",\"aux_offset\":{},\"bytes\":{}}}\n",
                   l.kind, l.aux_offset, l.bytes);
  } else if (l.bytes != 0) {
    fmt::format_to(std::back_inserter(buf), "[loss: {} at aux offset {:#x}, {} bytes]\n", l.kind,
                   l.aux_offset, l.bytes);
  } else {
    fmt::format_to(std::back_inserter(buf), "[loss: {} at aux offset {:#x}]\n", l.kind,
                   l.aux_offset);
  }
}

std::string UnknownSizeLosses(uint64_t k) {
  return k == 0 ? "" : fmt::format(" (+ {} of unknown size)", k);
}

std::string Counted(uint64_t n, std::string_view noun, std::string_view plural) {
  if (n == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", n, noun) : fmt::format("{} {}", n, plural);
}

}  // namespace ptkit::decoder
