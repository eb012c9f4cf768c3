#include "record/counters.h"

#include <perfmon/pfmlib_perf_event.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "record/text_util.h"

namespace ptkit::record {
namespace {

absl::Status InitPfm() {
  static const int rc = pfm_initialize();
  if (rc != PFM_SUCCESS) {
    return absl::InternalError(absl::StrCat("libpfm4 pfm_initialize: ", pfm_strerror(rc)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CounterSpec> EncodeCounter(std::string_view name, bool user, bool kernel) {
  PTKIT_RETURN_IF_ERROR(InitPfm());
  CounterSpec spec;
  spec.name = std::string(name);
  std::memset(&spec.attr, 0, sizeof(spec.attr));
  pfm_perf_encode_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  arg.attr = &spec.attr;
  char* fstr = nullptr;
  arg.fstr = &fstr;
  arg.size = sizeof(arg);
  const int plm = (user ? PFM_PLM3 : 0) | (kernel ? PFM_PLM0 : 0);
  const int rc = pfm_get_os_event_encoding(spec.name.c_str(), plm, PFM_OS_PERF_EVENT_EXT, &arg);
  if (rc != PFM_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown counter event \"", std::string(name), "\" (libpfm4: ", pfm_strerror(rc),
        "; list names with `showevtinfo` from libpfm4's examples)"));
  }
  if (fstr != nullptr) {
    spec.fstr = fstr;
    free(fstr);
  }
  spec.attr.size = sizeof(spec.attr);
  spec.attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  spec.attr.disabled = 1;
  return spec;
}

absl::StatusOr<std::vector<CounterSpec>> EncodeCounters(std::string_view list, bool user,
                                                        bool kernel) {
  std::vector<CounterSpec> out;
  for (std::string_view n : Split(list, ',')) {
    n = Strip(n);
    if (n.empty()) continue;
    PTKIT_ASSIGN_OR_RETURN(CounterSpec s, EncodeCounter(n, user, kernel));
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<CounterSet> CounterSet::Open(const std::vector<CounterSpec>& specs, pid_t pid,
                                            int cpu, bool enable_on_exec) {
  CounterSet set;
  for (const CounterSpec& spec : specs) {
    perf_event_attr attr = spec.attr;
    attr.enable_on_exec = enable_on_exec ? 1 : 0;
    attr.inherit = pid >= 0 ? 1 : 0;
    absl::StatusOr<PerfEvent> e =
        PerfEvent::Open(attr, pid, cpu, absl::StrCat("counter ", spec.name));
    if (e.status().code() == absl::StatusCode::kUnimplemented) {
      set.warnings_.push_back(
          absl::StrCat("counter ", spec.name, " is not supported on this machine (",
                       e.status().message(), "); recording continues without it"));
      continue;
    }
    if (!e.ok()) return e.status();
    set.names_.push_back(spec.name);
    set.events_.push_back(*std::move(e));
  }
  return set;
}

absl::Status CounterSet::EnableAll() {
  for (PerfEvent& e : events_) PTKIT_RETURN_IF_ERROR(e.Enable());
  return absl::OkStatus();
}

absl::Status CounterSet::DisableAll() {
  for (PerfEvent& e : events_) PTKIT_RETURN_IF_ERROR(e.Disable());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CounterValue>> CounterSet::ReadAll() const {
  std::vector<CounterValue> out;
  for (size_t i = 0; i < events_.size(); ++i) {
    PTKIT_ASSIGN_OR_RETURN(CounterReading r, events_[i].Read());
    CounterValue v;
    v.name = names_[i];
    v.cpu = events_[i].cpu();
    v.value = r.value;
    v.time_enabled = r.time_enabled;
    v.time_running = r.time_running;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace ptkit::record
