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
    t.cap_user_time = static_cast<bool>(page->cap_user_time);
    t.cap_user_time_zero = static_cast<bool>(page->cap_user_time_zero);
    t.time_shift = uint32_t{page->time_shift};
    t.time_mult = uint32_t{page->time_mult};
    t.time_zero = uint64_t{page->time_zero};
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
  } while (__atomic_load_n(&page->lock, __ATOMIC_RELAXED) != seq);
  return t;
}

RecordingMetadata BuildRecordingMetadata(const MetadataInput& in) {
  RecordingMetadata m;
  m.tool = "ptrecord";
  m.tool_version = PTKIT_VERSION;
  utsname u{};
  if (uname(&u) == 0) {
    m.host = u.nodename;
    m.kernel_release = u.release;
    m.machine = u.machine;
  }
  m.command_line = in.command_line;
  m.workload = in.workload;
  m.mode = in.mode;
  m.page_size = in.page_size;
  m.data_pages = in.data_pages;
  m.aux_pages = in.aux_pages;
  m.cpus = std::vector<int64_t>(in.cpus.begin(), in.cpus.end());
  m.cpu = CpuMetadata{
      .vendor = in.cpu.vendor,
      .family = in.cpu.family,
      .model = in.cpu.model,
      .stepping = in.cpu.stepping,
      .cpuid_15h = Cpuid15hMetadata{.tsc_ratio_numerator = in.cpu.tsc_ratio_numerator,
                                    .tsc_ratio_denominator = in.cpu.tsc_ratio_denominator,
                                    .crystal_hz = in.cpu.crystal_hz}};
  if (in.pmu) {
    PmuMetadata pmu;
    pmu.name = in.pmu->name;
    pmu.type = in.pmu->type;
    pmu.caps = in.pmu->caps;
    pmu.formats.emplace();
    for (const auto& [name, f] : in.pmu->formats) {
      (*pmu.formats)[name] = {.word = static_cast<uint32_t>(f.word), .mask = f.mask};
    }
    pmu.event = in.event;
    if (in.pmu->max_nonturbo_ratio) {
      pmu.max_nonturbo_ratio = *in.pmu->max_nonturbo_ratio;
      // The nominal (non-turbo) frequency: the ratio times the 100 MHz bus clock.
      pmu.nominal_frequency_hz = uint64_t{*in.pmu->max_nonturbo_ratio} * 100000000;
    }
    if (in.pmu->tsc_art_numerator) {
      pmu.tsc_art_ratio = {*in.pmu->tsc_art_numerator, *in.pmu->tsc_art_denominator};
    }
    m.pmu = std::move(pmu);
  }
  m.attrs.emplace();
  for (const auto& [name, attr] : in.attrs) m.attrs->push_back(AttrMetadata::FromAttr(name, attr));
  if (in.time) m.time_conversion = *in.time;
  return m;
}

nlohmann::json BuildMetadata(const MetadataInput& in) {
  return BuildRecordingMetadata(in).ToJson();
}

}  // namespace ptkit::record
