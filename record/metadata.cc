#include "record/metadata.h"

#include <sys/utsname.h>

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ptkit::record {

CpuId ReadCpuId() {
  CpuId id;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return id;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  id.vendor = vendor;
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    // Intel SDM vol. 2A, CPUID leaf 1 EAX: the display family/model fold in the extended
    // fields for family 0xf (and 0x6 for the model).
    const uint32_t family = (a >> 8) & 0xf;
    const uint32_t model = (a >> 4) & 0xf;
    id.stepping = a & 0xf;
    id.family = family == 0xf ? family + ((a >> 20) & 0xff) : family;
    id.model = (family == 0x6 || family == 0xf) ? model + (((a >> 16) & 0xf) << 4) : model;
  }
  if (max_leaf >= 0x15) {
    __cpuid_count(0x15, 0, a, b, c, d);
    id.tsc_ratio_denominator = a;
    id.tsc_ratio_numerator = b;
    id.crystal_hz = c;
  }
#endif
  return id;
}

TimeConversion ReadTimeConversion(const perf_event_mmap_page* page) {
  TimeConversion t;
  uint32_t seq;
  // <linux/perf_event.h>: "do { seq = pc->lock; barrier(); ... barrier(); } while (pc->lock
  // != seq);"
  do {
    seq = __atomic_load_n(&page->lock, __ATOMIC_ACQUIRE);
    t.cap_user_time = page->cap_user_time;
    t.cap_user_time_zero = page->cap_user_time_zero;
    t.time_shift = page->time_shift;
    t.time_mult = page->time_mult;
    t.time_zero = page->time_zero;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
  } while (__atomic_load_n(&page->lock, __ATOMIC_RELAXED) != seq);
  return t;
}

nlohmann::json AttrToJson(const perf_event_attr& a) {
  return nlohmann::json{
      {"type", a.type},
      {"size", a.size},
      {"config", a.config},
      {"config1", a.config1},
      {"config2", a.config2},
      {"sample_type", a.sample_type},
      {"read_format", a.read_format},
      {"sample_id_all", static_cast<bool>(a.sample_id_all)},
      {"disabled", static_cast<bool>(a.disabled)},
      {"inherit", static_cast<bool>(a.inherit)},
      {"enable_on_exec", static_cast<bool>(a.enable_on_exec)},
      {"exclude_user", static_cast<bool>(a.exclude_user)},
      {"exclude_kernel", static_cast<bool>(a.exclude_kernel)},
      {"exclude_hv", static_cast<bool>(a.exclude_hv)},
      {"mmap", static_cast<bool>(a.mmap)},
      {"mmap2", static_cast<bool>(a.mmap2)},
      {"comm", static_cast<bool>(a.comm)},
      {"comm_exec", static_cast<bool>(a.comm_exec)},
      {"task", static_cast<bool>(a.task)},
      {"context_switch", static_cast<bool>(a.context_switch)},
      {"aux_watermark", a.aux_watermark},
  };
}

nlohmann::json BuildMetadata(const MetadataInput& in) {
  nlohmann::json j;
  j["tool"] = "ptrecord";
  j["tool_version"] = PTKIT_VERSION;
  utsname u{};
  if (uname(&u) == 0) {
    j["host"] = u.nodename;
    j["kernel_release"] = u.release;
    j["machine"] = u.machine;
  }
  j["command_line"] = in.command_line;
  j["workload"] = in.workload;
  j["mode"] = in.mode;
  j["page_size"] = in.page_size;
  j["data_pages"] = in.data_pages;
  j["aux_pages"] = in.aux_pages;
  j["cpus"] = in.cpus;
  j["cpu"] = {{"vendor", in.cpu.vendor},
              {"family", in.cpu.family},
              {"model", in.cpu.model},
              {"stepping", in.cpu.stepping},
              {"cpuid_15h",
               {{"tsc_ratio_numerator", in.cpu.tsc_ratio_numerator},
                {"tsc_ratio_denominator", in.cpu.tsc_ratio_denominator},
                {"crystal_hz", in.cpu.crystal_hz}}}};
  if (in.pmu) {
    nlohmann::json formats = nlohmann::json::object();
    for (const auto& [name, f] : in.pmu->formats) {
      formats[name] = {{"word", static_cast<int>(f.word)}, {"mask", f.mask}};
    }
    nlohmann::json pmu = {{"name", in.pmu->name},
                          {"type", in.pmu->type},
                          {"caps", in.pmu->caps},
                          {"formats", formats},
                          {"event", in.event}};
    if (in.pmu->max_nonturbo_ratio) {
      pmu["max_nonturbo_ratio"] = *in.pmu->max_nonturbo_ratio;
      // The nominal (non-turbo) frequency: the ratio times the 100 MHz bus clock.
      pmu["nominal_frequency_hz"] = uint64_t{*in.pmu->max_nonturbo_ratio} * 100000000;
    }
    if (in.pmu->tsc_art_numerator) {
      pmu["tsc_art_ratio"] = {*in.pmu->tsc_art_numerator, *in.pmu->tsc_art_denominator};
    }
    j["pmu"] = pmu;
  }
  nlohmann::json attrs = nlohmann::json::array();
  for (const auto& [name, attr] : in.attrs) {
    nlohmann::json a = AttrToJson(attr);
    a["name"] = name;
    attrs.push_back(a);
  }
  j["attrs"] = attrs;
  if (in.time) {
    j["time_conversion"] = {{"cap_user_time", in.time->cap_user_time},
                            {"cap_user_time_zero", in.time->cap_user_time_zero},
                            {"time_shift", in.time->time_shift},
                            {"time_mult", in.time->time_mult},
                            {"time_zero", in.time->time_zero}};
  }
  return j;
}

}  // namespace ptkit::record
