#include "ptkit/recording_metadata.h"

#include <limits>
#include <set>
#include <type_traits>

#include "fmt/format.h"
#include "ptkit/bit_field.h"

namespace ptkit {
namespace {

using nlohmann::json;

// Whether a member's value matters to decoding: a wrong one is an error (kDecoding), or only
// to people (kInfo): a wrong one is ignored with a warning.
enum class Use { kDecoding, kInfo };

// `got string "6"`, `got number -1`: the value, cut short.
std::string Got(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("got {} {}", v.type_name(), text);
}

// What FromJson found wrong so far.
struct Problems {
  absl::Status error;  // the first error
  std::vector<std::string>& warnings;
  void Report(const std::string& path, const std::string& why, Use use) {
    const std::string what = fmt::format("metadata: \"{}\" {}", path, why);
    if (use == Use::kInfo) {
      warnings.push_back(what + ": ignored");
    } else if (error.ok()) {
      error = absl::DataLossError(what);
    }
  }
};

class Reader;
template <typename T>
std::string Convert(const json& v, std::string& path, Use use, Problems& p, T& out, uint64_t max);

// Reads the members of one JSON object: each known member with operator(), then the others
// (and the ignored ones) into `extra` at the destructor.
class Reader {
 public:
  Reader(const json& object, std::string prefix, json& extra, Problems& problems)
      : object_(object), prefix_(std::move(prefix)), extra_(extra), problems_(problems) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader() {  // NOLINT(bugprone-exception-escape): extra_ is an object or null: no type_error
    for (const auto& [key, value] : object_.items()) {
      if (!known_.contains(key)) extra_[key] = value;
    }
  }

  template <typename T>
  void operator()(const char* key, std::optional<T>& out, Use use,
                  uint64_t max = std::numeric_limits<uint64_t>::max()) {
    auto it = object_.find(key);
    if (it == object_.end()) return;
    known_.insert(key);
    std::string path = prefix_ + key;
    T value{};
    const std::string why = Convert(*it, path, use, problems_, value, max);
    if (why.empty()) {
      out = std::move(value);
      return;
    }
    problems_.Report(path, why, use);
    extra_[key] = *it;  // kept as it was
  }

  // "emulated": a string, or the older true (the stepper's) and false (hardware).
  void Emulated(const char* key, std::optional<std::string>& out) {
    auto it = object_.find(key);
    if (it == object_.end()) return;
    known_.insert(key);
    if (it->is_boolean()) {
      if (it->get<bool>()) out = RecordingMetadata::kEmulatedStep;
    } else if (it->is_string()) {
      out = it->get<std::string>();
    } else {
      problems_.Report(prefix_ + key, "must be a string, " + Got(*it), Use::kDecoding);
      extra_[key] = *it;
    }
  }

 private:
  const json& object_;
  std::string prefix_;
  json& extra_;
  Problems& problems_;
  std::set<std::string> known_;
};

// Writes the members present; the extra ones with Finish.
class Writer {
 public:
  explicit Writer(json& out) : out_(out) {}
  template <typename T>
  void operator()(const char* key, const std::optional<T>& value, Use /*use*/,
                  uint64_t /*max*/ = 0) {
    if (value) out_[key] = ToValue(*value);
  }
  void Emulated(const char* key, const std::optional<std::string>& value) {
    if (value) out_[key] = *value;
  }
  void Finish(const json& extra) {
    for (const auto& [key, value] : extra.items()) out_[key] = value;
  }

  template <typename T>
  static json ToValue(const T& v);

 private:
  json& out_;
};

// The members of each object, once, for both directions (M is the struct or a const one).
template <typename S, typename M>
concept Is = std::is_same_v<std::remove_const_t<M>, S>;

template <typename V, typename M>
requires Is<Cpuid15hMetadata, M>
void Members(V& v, M& m) {
  v("tsc_ratio_numerator", m.tsc_ratio_numerator, Use::kDecoding);
  v("tsc_ratio_denominator", m.tsc_ratio_denominator, Use::kDecoding);
  v("crystal_hz", m.crystal_hz, Use::kDecoding);
}

template <typename V, typename M>
requires Is<CpuMetadata, M>
void Members(V& v, M& m) {
  v("vendor", m.vendor, Use::kDecoding);
  v("family", m.family, Use::kDecoding, 0xffff);    // pt_cpu.family
  v("model", m.model, Use::kDecoding, 0xff);        // pt_cpu.model
  v("stepping", m.stepping, Use::kDecoding, 0xff);  // pt_cpu.stepping
  v("cpuid_15h", m.cpuid_15h, Use::kDecoding);
}

template <typename V, typename M>
requires Is<PmuFormatMetadata, M>
void Members(V& v, M& m) {
  v("word", m.word, Use::kDecoding, 2);
  v("mask", m.mask, Use::kDecoding);
}

template <typename V, typename M>
requires Is<PmuMetadata, M>
void Members(V& v, M& m) {
  v("name", m.name, Use::kDecoding);
  v("type", m.type, Use::kDecoding);
  v("caps", m.caps, Use::kInfo);
  v("formats", m.formats, Use::kDecoding);
  v("event", m.event, Use::kInfo);
  v("max_nonturbo_ratio", m.max_nonturbo_ratio, Use::kDecoding, 0xff);  // pt_config.nom_freq
  v("nominal_frequency_hz", m.nominal_frequency_hz, Use::kDecoding);
  v("tsc_art_ratio", m.tsc_art_ratio, Use::kInfo);
}

template <typename V, typename M>
requires Is<AttrMetadata, M>
void Members(V& v, M& m) {
  v("name", m.name, Use::kInfo);
  v("type", m.type, Use::kDecoding);
  v("size", m.size, Use::kInfo);
  v("config", m.config, Use::kDecoding);
  v("config1", m.config1, Use::kDecoding);
  v("config2", m.config2, Use::kDecoding);
  v("sample_type", m.sample_type, Use::kDecoding);
  v("read_format", m.read_format, Use::kInfo);
  v("sample_id_all", m.sample_id_all, Use::kDecoding);
  v("disabled", m.disabled, Use::kInfo);
  v("inherit", m.inherit, Use::kInfo);
  v("enable_on_exec", m.enable_on_exec, Use::kInfo);
  v("exclude_user", m.exclude_user, Use::kInfo);
  v("exclude_kernel", m.exclude_kernel, Use::kInfo);
  v("exclude_hv", m.exclude_hv, Use::kInfo);
  v("mmap", m.mmap, Use::kInfo);
  v("mmap2", m.mmap2, Use::kInfo);
  v("comm", m.comm, Use::kInfo);
  v("comm_exec", m.comm_exec, Use::kInfo);
  v("task", m.task, Use::kInfo);
  v("context_switch", m.context_switch, Use::kInfo);
  v("aux_watermark", m.aux_watermark, Use::kInfo);
  v("freq", m.freq, Use::kInfo);
  v("sample_period", m.sample_period, Use::kInfo);
  v("sample_freq", m.sample_freq, Use::kInfo);
  v("aux_sample_size", m.aux_sample_size, Use::kInfo);
  v("precise_ip", m.precise_ip, Use::kInfo);
  v("exclude_guest", m.exclude_guest, Use::kInfo);
  v("watermark", m.watermark, Use::kInfo);
  v("wakeup_events", m.wakeup_events, Use::kInfo);
  v("wakeup_watermark", m.wakeup_watermark, Use::kInfo);
  v("use_clockid", m.use_clockid, Use::kInfo);
  v("clockid", m.clockid, Use::kInfo);
  v("build_id", m.build_id, Use::kInfo);
}

template <typename V, typename M>
requires Is<TimeConversionMetadata, M>
void Members(V& v, M& m) {
  v("cap_user_time", m.cap_user_time, Use::kDecoding);
  v("cap_user_time_zero", m.cap_user_time_zero, Use::kDecoding);
  // The conversion shifts a 64-bit product right by it (<linux/perf_event.h>).
  v("time_shift", m.time_shift, Use::kDecoding, 63);
  v("time_mult", m.time_mult, Use::kDecoding);
  v("time_zero", m.time_zero, Use::kDecoding);
}

template <typename V, typename M>
requires Is<EmulationMetadata, M>
void Members(V& v, M& m) {
  v("backend", m.backend, Use::kInfo);
  v("streams", m.streams, Use::kInfo);
  v("format", m.format, Use::kDecoding);
  v("ret_compression", m.ret_compression, Use::kInfo);
  v("psb_period", m.psb_period, Use::kInfo);
  v("tsc", m.tsc, Use::kInfo);
  v("mtc", m.mtc, Use::kInfo);
  v("mtc_period", m.mtc_period, Use::kInfo, 15);
  v("cyc", m.cyc, Use::kInfo);
  v("cyc_thresh", m.cyc_thresh, Use::kInfo, 15);
  v("filter", m.filter, Use::kInfo);
  v("note", m.note, Use::kInfo);
}

template <typename V, typename M>
requires Is<EndMetadata, M>
void Members(V& v, M& m) {
  v("instructions", m.instructions, Use::kInfo);
  v("threads", m.threads, Use::kInfo);
  v("workload_exit_status", m.workload_exit_status, Use::kInfo);
  v("workload_signal", m.workload_signal, Use::kInfo);
  v("stopped_by", m.stopped_by, Use::kInfo);
}

template <typename V, typename M>
requires Is<SynthesizerMetadata, M>
void Members(V& v, M& m) {
  v("elf", m.elf, Use::kInfo);
  v("load_base", m.load_base, Use::kInfo);
  v("entry", m.entry, Use::kInfo);
  v("seed", m.seed, Use::kInfo);
  v("max_insns", m.max_insns, Use::kInfo);
  v("insns", m.insns, Use::kInfo);
  v("stop", m.stop, Use::kInfo);
}

template <typename V, typename M>
requires Is<RecordingMetadata, M>
void Members(V& v, M& m) {
  v("tool", m.tool, Use::kInfo);
  v("tool_version", m.tool_version, Use::kInfo);
  v("host", m.host, Use::kInfo);
  v("kernel_release", m.kernel_release, Use::kInfo);
  v("machine", m.machine, Use::kInfo);
  v("command_line", m.command_line, Use::kInfo);
  v("workload", m.workload, Use::kInfo);
  v("mode", m.mode, Use::kInfo);
  v("page_size", m.page_size, Use::kInfo);
  v("data_pages", m.data_pages, Use::kInfo);
  v("aux_pages", m.aux_pages, Use::kInfo);
  v("cpus", m.cpus, Use::kInfo);
  v("cpu", m.cpu, Use::kDecoding);
  v("pmu", m.pmu, Use::kDecoding);
  v("attrs", m.attrs, Use::kDecoding);
  v("time_conversion", m.time_conversion, Use::kDecoding);
  v.Emulated("emulated", m.emulated);
  v("clock", m.clock, Use::kInfo);
  v("emulation", m.emulation, Use::kDecoding);
  v("end", m.end, Use::kInfo);
  v("synthesizer", m.synthesizer, Use::kInfo);
}

template <typename T>
concept Object = requires(T t) {
  t.extra;
};

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};
template <typename T>
struct IsMap : std::false_type {};
template <typename T>
struct IsMap<std::map<std::string, T>> : std::true_type {};

// Converts `v` (at `path`) into `out`; returns why it cannot ("must be a number, got string
// \"6\""), with `path` then naming the wrong element, or "". Members inside an object report
// their own problems.
template <typename T>
std::string Convert(const json& v, std::string& path, Use use, Problems& p, T& out, uint64_t max) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return "must be true or false, " + Got(v);
    out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return "must be a string, " + Got(v);
    out = v.get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number()) return "must be a number, " + Got(v);
    const uint64_t top = std::min<uint64_t>(max, std::numeric_limits<T>::max());
    const int64_t bottom = std::is_signed_v<T> ? std::numeric_limits<int64_t>::min() : 0;
    const std::string range = fmt::format("must be an integer from {} to {}, ", bottom, top);
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > top) return range + Got(v);
    } else if (v.is_number_integer()) {
      const int64_t n = v.get<int64_t>();
      if (n < bottom || (n > 0 && static_cast<uint64_t>(n) > top)) return range + Got(v);
    } else {
      return range + Got(v);  // a fraction or exponent
    }
    out = v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>())
                                 : static_cast<T>(v.get<int64_t>());
  } else if constexpr (IsVector<T>::value) {
    if (!v.is_array()) return "must be an array, " + Got(v);
    out.resize(v.size());
    const std::string base = path;
    for (size_t i = 0; i < v.size(); ++i) {
      // The array is used whole: one wrong element makes the member wrong.
      path = fmt::format("{}[{}]", base, i);
      std::string why = Convert(v[i], path, use, p, out[i], max);
      if (!why.empty()) return why;
    }
    path = base;
  } else if constexpr (IsMap<T>::value) {
    if (!v.is_object()) return "must be an object, " + Got(v);
    const std::string base = path;
    for (const auto& [key, value] : v.items()) {
      path = base;
      path += '.';
      path += key;
      std::string why = Convert(value, path, use, p, out[key], max);
      if (!why.empty()) return why;
    }
    path = base;
  } else {
    static_assert(Object<T>);
    if (!v.is_object()) return "must be an object, " + Got(v);
    Reader reader(v, path + ".", out.extra, p);
    Members(reader, out);
  }
  return "";
}

template <typename T>
json Writer::ToValue(const T& v) {
  if constexpr (IsVector<T>::value) {
    json a = json::array();
    for (const auto& e : v) a.push_back(ToValue(e));
    return a;
  } else if constexpr (IsMap<T>::value) {
    json o = json::object();
    for (const auto& [key, e] : v) o[key] = ToValue(e);
    return o;
  } else if constexpr (Object<T>) {
    json o = json::object();
    Writer w(o);
    Members(w, v);
    w.Finish(v.extra);
    return o;
  } else {
    return json(v);
  }
}

}  // namespace

absl::StatusOr<json> ParseMetadataRecord(std::span<const uint8_t> payload) {
  bool too_deep = false;
  // The callback sees every value with its depth (0 for the record's object) and drops what
  // is nested too deep, so the deep part never builds.
  json::parser_callback_t limit = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxMetadataDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json j = json::parse(payload.begin(), payload.end(), limit, /*allow_exceptions=*/false);
  if (too_deep) {
    return absl::DataLossError(
        fmt::format("metadata record nested deeper than {} levels: not read", kMaxMetadataDepth));
  }
  if (j.is_discarded()) return absl::DataLossError("metadata record is not valid JSON");
  if (!j.is_object()) return absl::DataLossError("metadata record is not a JSON object");
  return j;
}

void MergeMetadata(json& merged, const json& later) {
  if (!merged.is_object()) merged = json::object();
  merged.update(later);
}

std::optional<uint64_t> PmuFormatMetadata::Extract(const perf_event_attr& attr) const {
  if (!word || !mask || *word > 2) return std::nullopt;
  const uint64_t value = *word == 0 ? attr.config : *word == 1 ? attr.config1 : attr.config2;
  return ExtractBitField(value, *mask);
}

AttrMetadata AttrMetadata::FromAttr(std::string name, const perf_event_attr& a) {
  AttrMetadata m;
  m.name = std::move(name);
  m.type = a.type;
  m.size = a.size;
  m.config = a.config;
  m.config1 = a.config1;
  m.config2 = a.config2;
  m.sample_type = a.sample_type;
  m.read_format = a.read_format;
  m.sample_id_all = a.sample_id_all;
  m.disabled = a.disabled;
  m.inherit = a.inherit;
  m.enable_on_exec = a.enable_on_exec;
  m.exclude_user = a.exclude_user;
  m.exclude_kernel = a.exclude_kernel;
  m.exclude_hv = a.exclude_hv;
  m.mmap = a.mmap;
  m.mmap2 = a.mmap2;
  m.comm = a.comm;
  m.comm_exec = a.comm_exec;
  m.task = a.task;
  m.context_switch = a.context_switch;
  m.aux_watermark = a.aux_watermark;
  m.freq = a.freq;
  (a.freq ? m.sample_freq : m.sample_period) = a.sample_period;
  m.aux_sample_size = a.aux_sample_size;
  m.precise_ip = a.precise_ip;
  m.exclude_guest = a.exclude_guest;
  m.watermark = a.watermark;
  (a.watermark ? m.wakeup_watermark : m.wakeup_events) = a.wakeup_events;
  m.use_clockid = a.use_clockid;
  if (a.use_clockid) m.clockid = a.clockid;
  m.build_id = a.build_id;
  return m;
}

perf_event_attr AttrMetadata::ToAttr() const {
  perf_event_attr a{};
  a.type = type.value_or(0);
  a.size = size.value_or(0);
  a.config = config.value_or(0);
  a.config1 = config1.value_or(0);
  a.config2 = config2.value_or(0);
  a.sample_type = sample_type.value_or(0);
  a.read_format = read_format.value_or(0);
  a.sample_id_all = sample_id_all.value_or(false);
  a.disabled = disabled.value_or(false);
  a.inherit = inherit.value_or(false);
  a.enable_on_exec = enable_on_exec.value_or(false);
  a.exclude_user = exclude_user.value_or(false);
  a.exclude_kernel = exclude_kernel.value_or(false);
  a.exclude_hv = exclude_hv.value_or(false);
  a.mmap = mmap.value_or(false);
  a.mmap2 = mmap2.value_or(false);
  a.comm = comm.value_or(false);
  a.comm_exec = comm_exec.value_or(false);
  a.task = task.value_or(false);
  a.context_switch = context_switch.value_or(false);
  a.aux_watermark = aux_watermark.value_or(0);
  a.freq = freq.value_or(false);
  a.sample_period = a.freq ? sample_freq.value_or(0) : sample_period.value_or(0);
  a.aux_sample_size = aux_sample_size.value_or(0);
  a.precise_ip = precise_ip.value_or(0) & 3;
  a.exclude_guest = exclude_guest.value_or(false);
  a.watermark = watermark.value_or(false);
  a.wakeup_events = a.watermark ? wakeup_watermark.value_or(0) : wakeup_events.value_or(0);
  a.use_clockid = use_clockid.value_or(false);
  a.clockid = clockid.value_or(0);
  a.build_id = build_id.value_or(false);
  return a;
}

absl::StatusOr<RecordingMetadata> RecordingMetadata::FromJson(const json& j) {
  RecordingMetadata m;
  if (!j.is_object()) return absl::DataLossError("metadata: not a JSON object, " + Got(j));
  Problems problems{absl::OkStatus(), m.warnings};
  {
    Reader reader(j, "", m.extra, problems);
    Members(reader, m);
  }
  if (!problems.error.ok()) return problems.error;
  return m;
}

json RecordingMetadata::ToJson() const {
  json out = json::object();
  Writer w(out);
  Members(w, *this);
  w.Finish(extra);
  return out;
}

std::string RecordingMetadata::ToRecord() const {
  return ToJson().dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<TscConversion> RecordingMetadata::PerfTimeConversion() const {
  if (!time_conversion || !time_conversion->cap_user_time_zero.value_or(false)) {
    return std::nullopt;
  }
  TscConversion c;
  c.time_zero = time_conversion->time_zero.value_or(0);
  c.time_mult = time_conversion->time_mult.value_or(0);
  c.time_shift = static_cast<uint16_t>(time_conversion->time_shift.value_or(0));  // < 64
  if (c.time_mult == 0) return std::nullopt;
  return c;
}

const AttrMetadata* RecordingMetadata::TraceAttr() const {
  if (!pmu || !pmu->type || !attrs) return nullptr;
  for (const AttrMetadata& a : *attrs) {
    if (a.type == pmu->type) return &a;
  }
  return nullptr;
}

std::vector<std::string> RecordingMetadata::RecorderWarnings() const {
  std::vector<std::string> out;
  if (!end) return out;
  if (auto said = end->extra.find("warnings"); said != end->extra.end() && said->is_array()) {
    for (const nlohmann::json& w : *said) {
      if (w.is_string()) out.push_back(w.get<std::string>());
    }
  }
  return out;
}

}  // namespace ptkit
