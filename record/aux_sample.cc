#include "record/aux_sample.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ptkit::record {

absl::Status CheckAuxSampleSize(uint64_t size, uint64_t aux_bytes) {
  if (size < 8 || size > perf::kMaxAuxSampleSize || size % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--aux-sample=", size, ": the AUX sample size must be a multiple of 8 from 8 to ",
        perf::kMaxAuxSampleSize,
        " bytes (60K: a perf sample record holds at most 64 KiB); the "
        "default is ",
        kDefaultAuxSampleSize));
  }
  if (aux_bytes != 0 && size > aux_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--aux-sample=", size, " is larger than the AUX area (", aux_bytes,
                     " bytes): a sample holds at most the whole area; use -m DATA,AUX_PAGES "
                     "with more AUX pages or a smaller size"));
  }
  return absl::OkStatus();
}

std::string AddAuxSampleTerms(EventSpec& spec) {
  if (spec.pmu != "intel_pt") return "";
  if (std::any_of(spec.terms.begin(), spec.terms.end(),
                  [](const EventTerm& t) { return t.name == "psb_period"; })) {
    return "";
  }
  spec.terms.push_back(EventTerm{"psb_period", kAuxSamplePsbPeriod});
  return absl::StrCat("--aux-sample: psb_period=", kAuxSamplePsbPeriod,
                      " (a PSB every 2 KiB of trace, so each sample holds one; set psb_period in "
                      "--event to choose another)");
}

perf_event_attr BuildAuxSampleAttr(const perf_event_attr& counter, uint64_t period, uint64_t size,
                                   bool inherit, bool callchain) {
  perf_event_attr attr = counter;
  attr.size = sizeof(attr);
  attr.read_format = 0;
  attr.sample_period = period;
  attr.freq = 0;
  attr.sample_type = kAuxSampleType | (callchain ? PERF_SAMPLE_CALLCHAIN : 0);
  attr.sample_id_all = 1;
  attr.aux_sample_size = static_cast<uint32_t>(size);
  attr.disabled = 0;
  attr.enable_on_exec = 0;
  attr.inherit = inherit ? 1 : 0;
  attr.exclude_hv = 1;
  attr.watermark = 0;
  attr.wakeup_events = 1;
  return attr;
}

perf_event_attr EmulatedAuxSampleAttr(uint64_t period, uint64_t size, bool inherit) {
  perf_event_attr instructions{};
  instructions.type = PERF_TYPE_HARDWARE;
  instructions.config = PERF_COUNT_HW_INSTRUCTIONS;
  instructions.exclude_kernel = 1;
  perf_event_attr attr = BuildAuxSampleAttr(instructions, period, size, inherit);
  attr.sample_type = kEmulatedAuxSampleType;
  return attr;
}

}  // namespace ptkit::record
