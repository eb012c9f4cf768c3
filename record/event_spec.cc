#include "record/event_spec.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ptkit/numbers.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {
namespace {

bool ParseValue(std::string_view s, uint64_t* out) {
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    return !s.empty() && ParseUnsigned(s, out, 16);
  }
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s[0])) && ParseUnsigned(s, out);
}

uint64_t& Word(ResolvedEvent& e, ConfigWord w) {
  switch (w) {
    case ConfigWord::kConfig1:
      return e.config1;
    case ConfigWord::kConfig2:
      return e.config2;
    case ConfigWord::kConfig:
      break;
  }
  return e.config;
}
uint64_t WordValue(const ResolvedEvent& e, ConfigWord w) {
  return Word(const_cast<ResolvedEvent&>(e), w);
}

absl::Status SetTerm(const Pmu& pmu, ResolvedEvent& e, std::string_view name, uint64_t value) {
  auto it = pmu.formats.find(std::string(name));
  if (it == pmu.formats.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown term \"", std::string(name), "\" for ",
                                                   pmu.name, "; valid terms: ", pmu.FormatNames(),
                                                   ", config, config1, config2"));
  }
  uint64_t& word = Word(e, it->second.word);
  absl::StatusOr<uint64_t> v = it->second.Apply(word, value);
  if (!v.ok()) {
    return absl::OutOfRangeError(absl::StrCat(pmu.name, " term ", std::string(name), "=", value,
                                              ": ", v.status().message()));
  }
  word = *v;
  return absl::OkStatus();
}

// perf's intel_pt_pick_bit(): the set bit nearest `target`, preferring the one below.
int PickBit(uint64_t bits, int target) {
  int pick = -1;
  for (int pos = 0; bits != 0; bits >>= 1, ++pos) {
    if (bits & 1) {
      if (pos <= target || pick < 0) pick = pos;
      if (pos >= target) break;
    }
  }
  return pick;
}

std::string AllowedValues(uint64_t bits) {
  std::vector<int> vals;
  for (int i = 0; i < 64; ++i) {
    if ((bits >> i) & 1) vals.push_back(i);
  }
  return fmt::format("{}", fmt::join(vals, ", "));
}

// Mirrors tools/perf/arch/x86/util/intel-pt.c intel_pt_val_config_term(): a period/threshold
// value n is valid when bit n of the cap bitmap is set; 0 is always valid; when the feature
// cap (`supported`) reads 0, only 0 is valid.
absl::Status CheckPeriod(const Pmu& pmu, const ResolvedEvent& e, std::string_view term,
                         std::string_view bitmap_cap, std::string_view supported_cap) {
  auto it = pmu.formats.find(std::string(term));
  if (it == pmu.formats.end()) return absl::OkStatus();
  const uint64_t value = it->second.Extract(WordValue(e, it->second.word));
  uint64_t valid = pmu.CapOr(bitmap_cap, 0);
  if (pmu.CapOr(supported_cap, 1) == 0) valid = 0;
  valid |= 1;
  if (value < 64 && ((valid >> value) & 1)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid ", std::string(term), "=", value, " for ", pmu.name, "; valid values are: ",
      AllowedValues(valid), " (from ", pmu.dir, "/caps/", std::string(bitmap_cap), ")"));
}

struct FeatureCap {
  const char* term;
  const char* cap;
};
// Terms the kernel refuses unless the CPU has the feature (arch/x86/events/intel/pt.c,
// pt_event_valid()).
constexpr FeatureCap kFeatureCaps[] = {
    {"cyc", "psb_cyc"},
    {"mtc", "mtc"},
    {"ptw", "ptwrite"},
    {"fup_on_ptw", "ptwrite"},
    {"pwr_evt", "power_event_trace"},
    {"event", "event_trace"},
    {"notnt", "tnt_disable"},
};

// Whether a feature cap lets a default term be set: an absent cap reads as supported, as
// perf reads it; one that does not parse does not (no default rests on what cannot be read:
// only a term the user asks for needs the cap, and ResolveEvent() says what is wrong then).
bool DefaultAllowedBy(const Pmu& pmu, std::string_view cap) {
  absl::StatusOr<uint64_t> v = pmu.Cap(cap);
  return v.ok() ? *v != 0 : v.status().code() == absl::StatusCode::kNotFound;
}

}  // namespace

absl::StatusOr<EventSpec> ParseEventString(std::string_view text) {
  const std::string_view input = Strip(text);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad event \"", std::string(input), "\": ", std::string(why),
                     " (expected e.g. intel_pt//u or intel_pt/cyc,psb_period=2/)"));
  };
  EventSpec spec;
  const size_t slash = input.find('/');
  spec.pmu = std::string(input.substr(0, slash));
  if (spec.pmu.empty()) return bad("no PMU name");
  for (char c : spec.pmu) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return bad(absl::StrCat("invalid character '", std::string(1, c), "' in PMU name"));
    }
  }
  if (!IsPmuName(spec.pmu)) return bad(absl::StrCat("\"", spec.pmu, "\" is not a PMU name"));
  std::string_view modifiers;
  if (slash != std::string_view::npos) {
    const size_t close = input.find('/', slash + 1);
    if (close == std::string_view::npos) return bad("missing closing '/'");
    const std::string_view terms = input.substr(slash + 1, close - slash - 1);
    modifiers = input.substr(close + 1);
    std::set<std::string, std::less<>> seen;
    if (!terms.empty()) {
      for (std::string_view t : Split(terms, ',')) {
        t = Strip(t);
        if (t.empty()) return bad("empty term");
        EventTerm term;
        const size_t eq = t.find('=');
        term.name = std::string(Strip(t.substr(0, eq)));
        if (term.name.empty())
          return bad(absl::StrCat("term \"", std::string(t), "\" has no name"));
        if (eq != std::string_view::npos) {
          const std::string_view v = Strip(t.substr(eq + 1));
          if (!ParseValue(v, &term.value)) {
            return bad(absl::StrCat("bad value \"", std::string(v), "\" for term ", term.name));
          }
        }
        if (!seen.insert(term.name).second) {
          return bad(absl::StrCat("term ", term.name, " given twice"));
        }
        spec.terms.push_back(std::move(term));
      }
    }
  }
  if (!modifiers.empty()) {
    bool u = false, k = false;
    for (char c : modifiers) {
      if (c == 'u') {
        u = true;
      } else if (c == 'k') {
        k = true;
      } else {
        return bad(absl::StrCat("unknown modifier '", std::string(1, c),
                                "' (supported: u = user space, k = kernel)"));
      }
    }
    spec.user = u;
    spec.kernel = k;
  }
  return spec;
}

absl::StatusOr<ResolvedEvent> DefaultConfig(const Pmu& pmu) {
  ResolvedEvent e;
  e.pmu = pmu.name;
  e.type = pmu.type;
  if (pmu.name != "intel_pt") return e;
  auto set_if = [&](std::string_view term, uint64_t v) -> absl::Status {
    if (!pmu.formats.contains(std::string(term))) return absl::OkStatus();
    return SetTerm(pmu, e, term, v);
  };
  PTKIT_RETURN_IF_ERROR(set_if("tsc", 1));
  // Missing caps/mtc and caps/psb_cyc read as "supported", as perf does.
  uint64_t mtc_periods = 0;
  if (DefaultAllowedBy(pmu, "mtc")) {
    mtc_periods = pmu.CapOr("mtc_periods", 0);
    if (mtc_periods != 0) {
      PTKIT_RETURN_IF_ERROR(set_if("mtc", 1));
      PTKIT_RETURN_IF_ERROR(set_if("mtc_period", PickBit(mtc_periods, 3)));
    }
  }
  if (DefaultAllowedBy(pmu, "psb_cyc") && mtc_periods != 0) {
    const uint64_t psb_periods = pmu.CapOr("psb_periods", 0);
    if (psb_periods != 0) PTKIT_RETURN_IF_ERROR(set_if("psb_period", PickBit(psb_periods, 3)));
  }
  if (pmu.formats.contains("pt") && pmu.formats.contains("branch")) {
    PTKIT_RETURN_IF_ERROR(SetTerm(pmu, e, "pt", 1));
    PTKIT_RETURN_IF_ERROR(SetTerm(pmu, e, "branch", 1));
  }
  return e;
}

absl::StatusOr<ResolvedEvent> ResolveEvent(const Pmu& pmu, const EventSpec& spec) {
  if (spec.pmu != pmu.name) {
    return absl::InvalidArgumentError(
        absl::StrCat("event for PMU ", spec.pmu, " resolved against PMU ", pmu.name));
  }
  PTKIT_ASSIGN_OR_RETURN(ResolvedEvent e, DefaultConfig(pmu));
  for (const EventTerm& t : spec.terms) {
    if (t.name == "config") {
      e.config = t.value;
    } else if (t.name == "config1") {
      e.config1 = t.value;
    } else if (t.name == "config2") {
      e.config2 = t.value;
    } else {
      PTKIT_RETURN_IF_ERROR(SetTerm(pmu, e, t.name, t.value));
    }
  }
  e.exclude_user = !spec.user;
  e.exclude_kernel = !spec.kernel;
  if (!spec.user && !spec.kernel) {
    return absl::InvalidArgumentError("event excludes both user and kernel space");
  }
  if (pmu.name == "intel_pt") {
    PTKIT_RETURN_IF_ERROR(CheckPeriod(pmu, e, "psb_period", "psb_periods", "psb_cyc"));
    PTKIT_RETURN_IF_ERROR(CheckPeriod(pmu, e, "mtc_period", "mtc_periods", "mtc"));
    PTKIT_RETURN_IF_ERROR(CheckPeriod(pmu, e, "cyc_thresh", "cycle_thresholds", "psb_cyc"));
    // Only the terms the user asked for: the defaults follow the caps already.
    for (const FeatureCap& fc : kFeatureCaps) {
      auto it = pmu.formats.find(fc.term);
      if (it == pmu.formats.end()) continue;
      if (it->second.Extract(WordValue(e, it->second.word)) == 0) continue;
      if (std::none_of(spec.terms.begin(), spec.terms.end(),
                       [&](const EventTerm& t) { return t.name == fc.term; })) {
        continue;
      }
      absl::StatusOr<uint64_t> cap = pmu.Cap(fc.cap);
      if (!cap.ok() && cap.status().code() != absl::StatusCode::kNotFound) {
        return absl::FailedPreconditionError(absl::StrCat(
            pmu.name, " term ", fc.term, " needs a readable capability: ", cap.status().message()));
      }
      if (!cap.ok() || *cap == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(pmu.name, " on this CPU does not support ", fc.term, " (", pmu.dir,
                         "/caps/", fc.cap, " is 0 or missing)"));
      }
    }
  }
  return e;
}

perf_event_attr BuildAuxAttr(const ResolvedEvent& event, const AuxAttrOptions& options) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = event.type;
  attr.config = event.config;
  attr.config1 = event.config1;
  attr.config2 = event.config2;
  attr.sample_type = kSampleIdType;
  attr.sample_id_all = 1;
  attr.disabled = 1;
  attr.enable_on_exec = options.enable_on_exec ? 1 : 0;
  attr.inherit = options.inherit ? 1 : 0;
  attr.exclude_user = event.exclude_user ? 1 : 0;
  attr.exclude_kernel = event.exclude_kernel ? 1 : 0;
  attr.exclude_hv = 1;
  attr.aux_watermark = options.aux_watermark;
  return attr;
}

perf_event_attr BuildTrackingAttr(const TrackingAttrOptions& options) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.sample_type = kSampleIdType;
  attr.sample_id_all = 1;
  attr.disabled = 1;
  attr.enable_on_exec = options.enable_on_exec ? 1 : 0;
  attr.inherit = options.inherit ? 1 : 0;
  attr.exclude_kernel = options.exclude_kernel ? 1 : 0;
  attr.exclude_hv = 1;
  attr.mmap = 1;
  attr.mmap2 = 1;
  attr.comm = 1;
  attr.comm_exec = 1;
  attr.task = 1;
  attr.context_switch = options.context_switch ? 1 : 0;
  attr.build_id = options.build_id ? 1 : 0;
  if (options.clockid >= 0) {
    attr.use_clockid = 1;
    attr.clockid = options.clockid;
  }
  if (options.wakeup_bytes != 0) {
    attr.watermark = 1;
    attr.wakeup_watermark = options.wakeup_bytes;
  } else {
    attr.wakeup_events = 1;
  }
  return attr;
}

std::string DescribeEvent(const Pmu& pmu, const ResolvedEvent& event) {
  std::vector<std::string> terms;
  for (const auto& [name, field] : pmu.formats) {
    const uint64_t v = field.Extract(WordValue(event, field.word));
    if (v != 0) terms.push_back(absl::StrCat(name, "=", v));
  }
  std::string mods;
  if (!event.exclude_user && event.exclude_kernel) mods = "u";
  if (event.exclude_user && !event.exclude_kernel) mods = "k";
  return absl::StrCat(pmu.name, "/", fmt::format("{}", fmt::join(terms, ",")), "/", mods);
}

}  // namespace ptkit::record
