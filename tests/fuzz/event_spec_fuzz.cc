// Fuzzes the recorder's text parsers: event strings (ParseEventString, then ResolveEvent
// against the intel_pt / intel_bts sysfs fixtures of tests/data/sysfs), sysfs format specs
// (ParseFormatSpec) and address filters (ParseAddressFilters, KernelFilterString). Errors must
// be statuses, never crashes, and never a read outside the fixtures: in a filter, "@" followed by
// one character names one of the ELF seeds of tests/fuzz/corpus/elf_image (any other "@" input
// is skipped), so the resolver reads real ELF files but nothing else on the machine.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "record/address_filter.h"
#include "record/event_spec.h"
#include "record/pmu_registry.h"

namespace {

namespace rec = ::ptkit::record;

const std::vector<rec::Pmu>& Pmus() {
  static const std::vector<rec::Pmu> pmus = [] {
    std::vector<rec::Pmu> out;
    rec::PmuRegistry registry(PTKIT_SOURCE_DIR "/tests/data/sysfs");
    for (const char* name : {"intel_pt", "intel_bts"}) {
      auto pmu = registry.Find(name);
      if (pmu.ok()) out.push_back(*std::move(pmu));
    }
    return out;
  }();
  return pmus;
}

// "@c" -> "@<the seed ELF c selects>"; false when the text names files otherwise.
bool PickFiles(std::string_view text, std::string& out) {
  static const char* const kFiles[] = {
      PTKIT_SOURCE_DIR "/tests/fuzz/corpus/elf_image/tiny.elf",
      PTKIT_SOURCE_DIR "/tests/fuzz/corpus/elf_image/lib.so",
  };
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] != '@') continue;
    if (i + 1 >= text.size()) return false;
    out += kFiles[static_cast<unsigned char>(text[++i]) % 2];
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)rec::ParseFormatSpec(text);
  if (auto spec = rec::ParseEventString(text); spec.ok()) {
    for (const rec::Pmu& pmu : Pmus()) {
      rec::EventSpec s = *spec;
      s.pmu = pmu.name;
      (void)rec::ResolveEvent(pmu, s);
    }
  }
  std::string filters;
  if (PickFiles(text, filters)) {
    if (auto f = rec::ParseAddressFilters(filters); f.ok()) (void)rec::KernelFilterString(*f);
  }
  return 0;
}
