#include "decoder/trace_config.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decoder/decode.h"
#include "decoder/ipt_handles.h"
#include "ptkit/numbers.h"

namespace ptkit::decoder {

const char* IptErrorName(int code) {
  switch (code < 0 ? -code : code) {
    case kErrorLoop:
      return "loop";
    case kErrorBtsWalk:
      return "bts_walk";
    case kErrorBtsPartial:
      return "bts_partial";
  }
  switch (pt_errcode(code < 0 ? code : -code)) {
    case pte_ok:
      return "ok";
    case pte_internal:
      return "internal";
    case pte_invalid:
      return "invalid";
    case pte_nosync:
      return "nosync";
    case pte_bad_opc:
      return "bad_opc";
    case pte_bad_packet:
      return "bad_packet";
    case pte_bad_context:
      return "bad_context";
    case pte_eos:
      return "eos";
    case pte_bad_query:
      return "bad_query";
    case pte_nomem:
      return "nomem";
    case pte_bad_config:
      return "bad_config";
    case pte_noip:
      return "noip";
    case pte_ip_suppressed:
      return "ip_suppressed";
    case pte_nomap:
      return "nomap";
    case pte_bad_insn:
      return "bad_insn";
    case pte_no_time:
      return "no_time";
    case pte_no_cbr:
      return "no_cbr";
    case pte_bad_image:
      return "bad_image";
    case pte_bad_lock:
      return "bad_lock";
    case pte_not_supported:
      return "not_supported";
    case pte_retstack_empty:
      return "retstack_empty";
    case pte_bad_retcomp:
      return "bad_retcomp";
    case pte_bad_status_update:
      return "bad_status_update";
    case pte_no_enable:
      return "no_enable";
    case pte_event_ignored:
      return "event_ignored";
    case pte_overflow:
      return "overflow";
    case pte_bad_file:
      return "bad_file";
    case pte_bad_cpu:
      return "bad_cpu";
  }
  return "unknown";
}

absl::StatusOr<uint64_t> ParseUint(std::string_view text, uint64_t max, std::string_view what) {
  return ptkit::ParseUint(text, max, what);
}

TraceConfig TraceConfigOverride::Over(TraceConfig recorded) const {
  if (cpu) recorded.cpu = cpu;
  if (mtc_freq) recorded.mtc_freq = *mtc_freq;
  if (nom_freq) recorded.nom_freq = *nom_freq;
  if (cpuid_0x15_eax) recorded.cpuid_0x15_eax = *cpuid_0x15_eax;
  if (cpuid_0x15_ebx) recorded.cpuid_0x15_ebx = *cpuid_0x15_ebx;
  return recorded;
}

absl::StatusOr<pt_cpu> ParseCpu(std::string_view text) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t slash = text.find('/', start);
    parts.push_back(text.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (parts.size() < 2 || parts.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --cpu '", std::string(text), "': expected FAMILY/MODEL[/STEPPING]"));
  }
  pt_cpu cpu = {};
  cpu.vendor = pcv_intel;
  auto family = ParseUint(parts[0], 0xffff, "cpu family");
  if (!family.ok()) return family.status();
  auto model = ParseUint(parts[1], 0xff, "cpu model");
  if (!model.ok()) return model.status();
  cpu.family = static_cast<uint16_t>(*family);
  cpu.model = static_cast<uint8_t>(*model);
  if (parts.size() == 3) {
    auto stepping = ParseUint(parts[2], 0xff, "cpu stepping");
    if (!stepping.ok()) return stepping.status();
    cpu.stepping = static_cast<uint8_t>(*stepping);
  }
  return cpu;
}

absl::StatusOr<pt_config> MakePtConfig(std::span<const uint8_t> trace, const TraceConfig& config) {
  pt_config pt;
  pt_config_init(&pt);
  // libipt never writes through begin/end; its API is just not const-correct.
  pt.begin = const_cast<uint8_t*>(trace.data());
  pt.end = pt.begin + trace.size();
  if (config.cpu) {
    pt.cpu = *config.cpu;
    int err = pt_cpu_errata(&pt.errata, &pt.cpu);
    if (err < 0) {
      return absl::InvalidArgumentError(absl::StrCat("no errata for cpu ", pt.cpu.family, "/",
                                                     pt.cpu.model, "/", pt.cpu.stepping, ": ",
                                                     pt_errstr(pt_errcode(err))));
    }
  }
  pt.mtc_freq = config.mtc_freq;
  pt.nom_freq = config.nom_freq;
  pt.cpuid_0x15_eax = config.cpuid_0x15_eax;
  pt.cpuid_0x15_ebx = config.cpuid_0x15_ebx;
  return pt;
}

}  // namespace ptkit::decoder
