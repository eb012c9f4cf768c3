#include "decoder/perf_data_export.h"

#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "absl/strings/escaping.h"
#include "decoder/container_input.h"
#include "decoder/metadata_config.h"
#include "decoder/progress.h"
#include "decoder/recording.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "ptkit/aux_sample.h"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/elf_file.h"
#include "ptkit/numbers.h"
#include "ptkit/perf_data.h"
#include "ptkit/perf_data_format.h"
#include "ptkit/perf_data_writer.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

namespace fs = std::filesystem;
using perf::kAuxtraceIntelBts;
using perf::kAuxtraceIntelPt;
using perf::kNoCpu;

// The PMU types an emulated recording gets (it ran on no PMU). perf only needs them to differ
// from the standard types and to match AUXTRACE_INFO; these are intel_pt's and intel_bts's on
// many machines.
constexpr uint32_t kEmulatedPtType = 8;
constexpr uint32_t kEmulatedBtsType = 9;
constexpr size_t kRoundRecords = 4096;  // sideband records between FINISHED_ROUND records

// --- The recording, as the export needs it ----------------------------------------------

struct SidebandRef {
  size_t begin = 0, size = 0;  // in Scan::sideband
  int32_t ring_cpu = -1;
  uint64_t time = 0;
  uint32_t type = 0;
  perf::SampleId id;
  perf::SampleIdLayout layout{0, false};  // of its trailer
};

struct Loss {
  StreamId stream;
  uint64_t aux_offset = 0, bytes = 0, time = 0;
};

// A piece of a stream's trace, as one AUXTRACE record.
struct AuxPiece {
  StreamId stream;
  const Piece* piece = nullptr;
};

// JIT code as a file of its own (kExportedJitDir), for perf.
struct JitFile {
  std::string path;
  std::vector<uint8_t> build_id;
  std::vector<uint8_t> bytes;
};

struct Scan {
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<uint8_t> sideband;  // the records, flattened
  std::vector<SidebandRef> records;
  std::vector<JitFile> jit;      // an MMAP2 in `records` maps each
  std::vector<AuxPiece> pieces;  // stream by stream, each in stream order
  std::vector<Loss> losses;      // kOther: in no sideband record
  std::set<StreamId> streams;
  std::vector<std::string> warnings;
};

// --- Mapping to perf -------------------------------------------------------------------------

std::string Hex(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

perf_event_attr AttrFromJson(const nlohmann::json& a) {
  // The typed reading of a metadata attr (ptkit-format(5)): every member it has, those of the
  // sampling unions by their flags. A period of 0 (an AUX or counting event) is perf
  // record's 1.
  absl::StatusOr<RecordingMetadata> typed =
      RecordingMetadata::FromJson(nlohmann::json{{"attrs", nlohmann::json::array({a})}});
  perf_event_attr attr = typed.ok() && typed->attrs && !typed->attrs->empty()
                             ? typed->attrs->front().ToAttr()
                             : perf_event_attr{};
  attr.size = 0;  // the writer's
  if (attr.sample_period == 0) attr.sample_period = 1;
  return attr;
}

// The bits of format field `name` in the trace PMU's config (metadata "pmu" "formats"), or
// `fallback` (DESIGN.md's intel_pt layout) when the recording does not say.
uint64_t FormatBits(const nlohmann::json& metadata, const char* name, uint64_t fallback) {
  if (metadata.contains("pmu") && metadata["pmu"].is_object()) {
    const auto& formats = metadata["pmu"].value("formats", nlohmann::json::object());
    if (formats.contains(name) && formats[name].is_object() &&
        formats[name].value("word", 0) == 0) {
      return formats[name].value("mask", fallback);
    }
  }
  return fallback;
}

// The events of the export, in the order they are written: every attr of the recording.
struct Events {
  std::vector<perf::WriterEvent> all;
  size_t trace_at = 0, tracking_at = 0;  // the trace and the tracking (dummy) event
  // The AUX-sampling event (recordings with samples), in the trace event's group right after
  // it, and the sample id each of the recording's samples gets (by its stream and id).
  std::optional<size_t> sampler_at;
  std::map<std::pair<StreamId, uint64_t>, uint64_t> sample_ids;
  bool bts = false;
  bool emulated = false;
  bool add_identifier = false;  // the records get PERF_SAMPLE_IDENTIFIER appended
  // A perf.data's attrs and ids, as perf wrote them: the records keep theirs.
  bool recorded = false;
  bool has_trace = true;  // else (a perf.data's only) trace() is another event
  perf::WriterEvent& trace() { return all[trace_at]; }
  const perf::WriterEvent& trace() const { return all[trace_at]; }
  const perf::WriterEvent& tracking() const { return all[tracking_at]; }
};

// Records the trace event's ring holds (the others are the tracking event's).
bool FromTraceEvent(uint32_t type) {
  return type == PERF_RECORD_AUX || type == PERF_RECORD_ITRACE_START ||
         type == PERF_RECORD_AUX_OUTPUT_HW_ID;
}

// The attr a metadata attr describes: its bytes as perf wrote them ("perf_attr", a perf.data's:
// decoder/perf_data_input.h), else its members.
perf_event_attr AttrOfJson(const nlohmann::json& a) {
  perf_event_attr attr = AttrFromJson(a);
  const std::string hex = a.value("perf_attr", std::string());
  if (hex.size() >= 2 * PERF_ATTR_SIZE_VER0 && hex.size() % 2 == 0 &&
      hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
    const std::string bytes = absl::HexStringToBytes(hex);
    attr = {};
    std::memcpy(&attr, bytes.data(), std::min(bytes.size(), sizeof(attr)));
  }
  return attr;
}

// A perf.data's events, each with its attr, sample ids and name as perf wrote them; nullopt
// when an attr has no ids (ptrecord's: the export gives them some).
std::optional<std::vector<perf::WriterEvent>> RecordedEvents(const nlohmann::json& m) {
  std::vector<perf::WriterEvent> out;
  for (const auto& a : m.value("attrs", nlohmann::json::array())) {
    if (!a.is_object() || !a.contains("ids") || !a["ids"].is_array() || a["ids"].empty()) {
      return std::nullopt;
    }
    perf::WriterEvent e;
    e.attr = AttrOfJson(a);
    for (const auto& id : a["ids"]) {
      if (id.is_number_unsigned()) e.ids.push_back(id.get<uint64_t>());
    }
    e.name = a.value("perf_name", std::string());
    out.push_back(std::move(e));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// The time of a SAMPLE record of an event of `sample_type` (IDENTIFIER, IP, TID, TIME come
// first, in this order), 0 without one.
uint64_t SampleTime(const perf::RecordView& r, uint64_t sample_type) {
  if (!(sample_type & PERF_SAMPLE_TIME)) return 0;
  const size_t at =
      perf::kHeaderSize +
      8 * std::popcount(sample_type & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID));
  uint64_t t = 0;
  if (at + 8 <= r.bytes.size()) std::memcpy(&t, r.bytes.data() + at, 8);
  return t;
}

// The recording's records, flattened, each with its time and sample id: read with the layout
// of its event (`recorded`: found by its sample id, as perf finds it), else of its batch.
// The mappings of a process so far: start -> (end, time of its record).
using Maps = std::map<uint64_t, std::pair<uint64_t, uint64_t>>;

// perf 6.1 decodes code from mapped files only (JIT code through perf inject's files made
// from a jitdump). For a text poke of a user address (ptrecord --emulate=qemu's JIT code, as
// RecordingBuilder::AddTextPokes takes them): an MMAP2 with the poke's sample id, mapping its
// bytes from a file of their own, added to `jit` (its build-id: a hash of the bytes, the
// address and its number, 20 bytes as a SHA-1's). Its time is that of the mapping the code is
// in (`maps`, the JIT's anonymous memory), not the poke's: the poke is written when qemu
// translates the code, after the trace's last timestamp before it runs, and perf would decode
// that code before it saw the mapping. So every version of code at one address is mapped from
// the start, the last one on top, as ptdecode takes the last bytes for the whole run.
// Nothing for other records.
std::optional<std::vector<uint8_t>> JitMapping(const perf::RecordView& v,
                                               const perf::SampleIdLayout& layout, const Maps& maps,
                                               std::vector<JitFile>& jit, uint64_t* time) {
  if (!(layout.sample_type & PERF_SAMPLE_TID)) return std::nullopt;
  absl::StatusOr<perf::TextPoke> poke = perf::ParseTextPoke(v, layout);
  if (!poke.ok() || poke->new_bytes.empty() || poke->addr >= (uint64_t{1} << 47)) {
    return std::nullopt;
  }
  if (auto in = maps.upper_bound(poke->addr); in != maps.begin() &&
                                              poke->addr < std::prev(in)->second.first &&
                                              (layout.sample_type & PERF_SAMPLE_TIME)) {
    poke->sample_id.time = std::min(poke->sample_id.time, std::prev(in)->second.second);
  }
  *time = poke->sample_id.time;
  JitFile f;
  f.path = fmt::format("{}jitted-{}-{}.so", kExportedJitDir, poke->sample_id.pid, jit.size());
  f.bytes.assign(poke->new_bytes.begin(), poke->new_bytes.end());
  uint64_t hash = 0xcbf29ce484222325;  // FNV-1a
  for (uint8_t b : f.bytes) hash = (hash ^ b) * 0x100000001b3;
  const uint32_t n = static_cast<uint32_t>(jit.size());
  f.build_id.resize(20);
  std::memcpy(f.build_id.data(), &hash, 8);
  std::memcpy(f.build_id.data() + 8, &poke->addr, 8);
  std::memcpy(f.build_id.data() + 16, &n, 4);
  perf::Mmap2 m;
  m.pid = poke->sample_id.pid;
  m.tid = poke->sample_id.tid;
  m.addr = poke->addr;
  m.len = f.bytes.size();
  m.build_id = f.build_id;
  m.prot = PROT_READ | PROT_EXEC;
  m.flags = MAP_PRIVATE;
  m.filename = f.path;
  m.sample_id = poke->sample_id;
  jit.push_back(std::move(f));
  return perf::EncodeMmap2(m, layout);
}

absl::StatusOr<Scan> ScanRecording(const Recording& r,
                                   const std::optional<std::vector<perf::WriterEvent>>& recorded) {
  Scan s;
  s.metadata = r.metadata.ToJson();
  s.warnings = r.warnings;
  std::map<uint64_t, perf::SampleIdLayout> layout_of_id;
  std::map<uint32_t, Maps> maps;  // by pid (JitMapping)
  if (recorded) {
    for (const perf::WriterEvent& e : *recorded) {
      for (uint64_t id : e.ids) {
        layout_of_id.emplace(id,
                             perf::SampleIdLayout{e.attr.sample_type, e.attr.sample_id_all != 0});
      }
    }
  }
  for (const RawSideband& batch : r.sideband) {
    perf::RecordReader records(batch.records);
    for (;;) {
      absl::StatusOr<std::optional<perf::RecordView>> rec = records.Next();
      if (!rec.ok() || !*rec) break;  // the reader's warnings say what was malformed
      const perf::RecordView& v = **rec;
      SidebandRef ref;
      ref.begin = s.sideband.size();
      ref.size = v.bytes.size();
      ref.ring_cpu = batch.cpu;
      ref.type = v.type;
      perf::SampleIdLayout layout = batch.layout;
      if (recorded) {
        const perf_event_attr& first = recorded->front().attr;
        std::optional<uint64_t> id =
            perf::RecordSampleId(v, first.sample_type, first.sample_id_all);
        auto it = id ? layout_of_id.find(*id) : layout_of_id.end();
        if (it != layout_of_id.end()) layout = it->second;
        if (id) {
          ref.id.has_id = true;
          ref.id.id = *id;
        }
      }
      ref.layout = layout;
      if (v.type == PERF_RECORD_SAMPLE) {
        ref.time = SampleTime(v, layout.sample_type);
      } else if (auto id = perf::ParseSampleId(v, layout); id.ok()) {
        ref.id = *id;
        ref.time = id->time;
      }
      if (v.type == PERF_RECORD_MMAP2) {
        auto mm = perf::ParseMmap2(v, layout);
        // An earlier export's mapping of JIT code: made again below, from its text poke.
        if (mm.ok() && mm->filename.starts_with(kExportedJitDir)) continue;
        if (mm.ok()) maps[mm->pid][mm->addr] = {mm->addr + mm->len, ref.time};
      }
      s.sideband.insert(s.sideband.end(), v.bytes.begin(), v.bytes.end());
      s.records.push_back(ref);
      if (v.type == PERF_RECORD_TEXT_POKE) {
        auto pid = perf::ParseSampleId(v, layout);
        if (std::optional<std::vector<uint8_t>> mmap =
                JitMapping(v, layout, maps[pid.ok() ? pid->pid : 0], s.jit, &ref.time)) {
          ref.id.time = ref.time;
          ref.begin = s.sideband.size();
          ref.size = mmap->size();
          ref.type = PERF_RECORD_MMAP2;
          s.sideband.insert(s.sideband.end(), mmap->begin(), mmap->end());
          s.records.push_back(ref);
        }
      }
    }
  }
  // Losses no sideband record holds: kOther, ptkit's own kinds (kKilled: a stream's last bytes
  // gone with its process; kAuxOverwritten: a snapshot ring's older bytes; sweep 35b F2: the
  // export and its round trip said "0 loss points"), and a jump of the AUX offsets that no loss
  // record explains (an AUX record of the container damaged: sweep 29b S5, perf decoded across
  // the hole and reported "Trace doesn't match instruction", no loss).
  const std::string own[] = {LossKindName(LossKind::kOther), LossKindName(LossKind::kKilled),
                             LossKindName(LossKind::kAuxOverwritten)};
  auto unrecorded = [&](const std::vector<LossInfo>& losses, const LossInfo& l) {
    if (std::find(std::begin(own), std::end(own), l.kind) != std::end(own)) return true;
    return l.kind == kLossDiscontinuity &&
           std::all_of(losses.begin(), losses.end(),
                       [](const LossInfo& x) { return x.kind == kLossDiscontinuity; });
  };
  for (const auto& [key, stream] : r.streams) {
    if (stream.pieces.empty()) {
      for (const LossInfo& l : stream.losses_after) {
        if (unrecorded(stream.losses_after, l)) {
          s.losses.push_back({key.id, l.aux_offset, l.bytes, 0});
        }
      }
      continue;
    }
    s.streams.insert(key.id);
    // A loss before a piece happened by the time of the AUX record that began it.
    auto add_losses = [&, id = key.id](const std::vector<LossInfo>& losses, uint64_t time) {
      for (const LossInfo& l : losses) {
        if (unrecorded(losses, l)) s.losses.push_back({id, l.aux_offset, l.bytes, time});
      }
    };
    for (const Piece& p : stream.pieces) {
      add_losses(p.losses_before, p.time);
      s.pieces.push_back({key.id, &p});
    }
    add_losses(stream.losses_after, stream.pieces.back().time);
  }
  return s;
}

// An event whose samples carry AUX snippets, as perf tells them (intel_pt_sampling_mode()).
bool IsAuxSampler(const perf_event_attr& a) {
  return (a.sample_type & PERF_SAMPLE_AUX) && a.aux_sample_size != 0;
}

// perf's name of a hardware event (tools/perf/util/evsel.c evsel__hw_names), "" for others.
std::string HardwareEventName(const perf_event_attr& a) {
  static constexpr const char* kNames[] = {"cycles",
                                           "instructions",
                                           "cache-references",
                                           "cache-misses",
                                           "branches",
                                           "branch-misses",
                                           "bus-cycles",
                                           "stalled-cycles-frontend",
                                           "stalled-cycles-backend",
                                           "ref-cycles"};
  if (a.type != PERF_TYPE_HARDWARE || a.config >= std::size(kNames)) return "";
  return kNames[a.config];
}

// The sampling period of ptrecord --aux-sample: the metadata attr's, else the
// -c / --sample-period of the recorded command line, else ptrecord's default (ptrecord(1):
// 1000 instructions with --emulate, 1000000 events otherwise).
uint64_t AuxSamplePeriod(const nlohmann::json& m, const nlohmann::json* recorded_attr) {
  if (recorded_attr && recorded_attr->value("sample_period", uint64_t{0}) != 0) {
    return (*recorded_attr)["sample_period"].get<uint64_t>();
  }
  std::vector<std::string> args;
  for (const auto& a : m.value("command_line", nlohmann::json::array())) {
    if (a.is_string()) args.push_back(a.get<std::string>());
  }
  std::optional<std::string> value;
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    if ((a == "-c" || a == "--sample-period") && i + 1 < args.size()) {
      value = args[++i];
    } else if (a.rfind("--sample-period=", 0) == 0) {
      value = a.substr(16);
    } else if (a.size() > 2 && a.rfind("-c", 0) == 0) {
      value = a.substr(2);
    }
  }
  uint64_t period = 0;
  if (value && ParseUnsigned(*value, &period) && period != 0) return period;
  return m.contains("emulation") ? 1000 : 1000000;
}

// The event of the recording's AUX samples (ptrecord --aux-sample), as perf record
// --aux-sample opens it: the recorded sampling attr ("aux-sample"; for an emulated recording,
// which has none, instructions:u, what the emulation counts), with the samples' sample_type
// and aux_sample_size (the recorded one, else the largest snippet). Its ids: a sample's own,
// else one per stream (the emulation's samples have id 0, which perf cannot place).
absl::StatusOr<perf::WriterEvent> MakeSampler(const nlohmann::json& m,
                                              const nlohmann::json* recorded_attr,
                                              const perf_event_attr& tracking,
                                              std::span<const AuxSample> samples, uint64_t& top,
                                              Events& e) {
  perf::WriterEvent w;
  perf_event_attr& a = w.attr;
  if (recorded_attr) {
    a = AttrOfJson(*recorded_attr);  // with its aux_sample_size
  } else {
    // The emulation counts the instructions a thread retires in user space.
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.inherit = tracking.inherit;
  }
  a.sample_period = AuxSamplePeriod(m, recorded_attr);
  // Enabled with its group leader (the kernel takes the AUX sample from the leader's area).
  a.disabled = 0;
  a.enable_on_exec = 0;
  a.sample_type = samples.front().sample_type;
  if (!(a.sample_type & PERF_SAMPLE_IDENTIFIER)) {
    return absl::FailedPreconditionError(
        "the recording's AUX samples have no PERF_SAMPLE_IDENTIFIER: perf could not tell "
        "them from the other events' records");
  }
  if (a.aux_sample_size == 0) {
    for (const AuxSample& smp : samples) {
      a.aux_sample_size = std::max<uint32_t>(a.aux_sample_size, smp.snippet.size);
    }
  }
  const std::string name = HardwareEventName(a);
  w.name = name.empty() ? "aux-sample" : name;
  if (a.exclude_kernel) w.name += ":u";
  std::set<uint64_t> taken;
  for (const perf::WriterEvent& other : e.all) taken.insert(other.ids.begin(), other.ids.end());
  std::map<StreamId, uint64_t> of_stream;
  for (const AuxSample& smp : samples) {
    if (smp.sample_type != a.sample_type) {
      return absl::FailedPreconditionError(fmt::format(
          "the recording's AUX samples have two sample_types ({:#x}, {:#x}): one sampling "
          "event cannot describe both",
          a.sample_type, smp.sample_type));
    }
    auto [it, inserted] = e.sample_ids.try_emplace({smp.stream, smp.fields.id}, 0);
    if (!inserted) continue;
    if (smp.fields.id != 0 && taken.insert(smp.fields.id).second) {
      it->second = smp.fields.id;
    } else {
      auto [s, fresh] = of_stream.try_emplace(smp.stream, 0);
      if (fresh) s->second = ++top;
      it->second = s->second;
    }
  }
  std::set<uint64_t> ids;
  for (const auto& [key, id] : e.sample_ids) ids.insert(id);
  w.ids.assign(ids.begin(), ids.end());
  return w;
}

absl::StatusOr<Events> MakeEvents(const Scan& s,
                                  std::optional<std::vector<perf::WriterEvent>> recorded,
                                  std::span<const AuxSample> samples) {
  const nlohmann::json& m = s.metadata;
  PTKIT_ASSIGN_OR_RETURN(RecordingMetadata typed, RecordingMetadata::FromJson(m));
  Events e;
  e.bts = IsBtsRecording(typed);
  e.emulated = m.contains("emulation");
  // The trace event: the attr of the recorded PMU's type, else the one named after it.
  const bool have_pmu = m.contains("pmu") && m["pmu"].is_object() && m["pmu"].contains("type");
  const uint64_t pmu_type = have_pmu ? m["pmu"].value("type", uint64_t{0}) : 0;
  std::optional<size_t> trace, tracking, sampler;
  std::vector<size_t> others;  // the other attrs (counters, a perf.data's cycles, ...)
  const nlohmann::json attrs = m.value("attrs", nlohmann::json::array());
  for (size_t i = 0; i < attrs.size(); ++i) {
    const nlohmann::json& a = attrs[i];
    if (!a.is_object()) continue;
    const std::string name = a.value("name", std::string());
    const bool is_trace = have_pmu ? a.value("type", uint64_t{~0ull}) == pmu_type
                                   : name == "intel_pt" || name == "intel_bts";
    if (is_trace && !trace) {
      trace = i;
    } else if (name == "aux-sample" && !sampler) {
      sampler = i;  // ptrecord --aux-sample (record/session.cc names it so)
    } else if (!tracking && a.value("type", 99u) == PERF_TYPE_SOFTWARE &&
               a.value("config", uint64_t{99}) == PERF_COUNT_SW_DUMMY) {
      tracking = i;
    } else {
      others.push_back(i);
    }
  }
  if (recorded) {
    // A perf.data's events: all of them, as perf wrote them (one without a trace event, e.g.
    // what `perf inject --itrace` made of a trace, is copied as it is).
    e.recorded = true;
    e.has_trace = trace.has_value();
    e.all = std::move(*recorded);
    e.tracking_at = tracking.value_or(0);
    e.trace_at = trace.value_or(e.tracking_at);
    // perf names an event EVENT_DESC does not name itself; one named "" would stay so.
    if (std::any_of(e.all.begin(), e.all.end(),
                    [](const perf::WriterEvent& w) { return w.name.empty(); })) {
      for (perf::WriterEvent& w : e.all) w.name.clear();
    }
    return e;
  }
  if (!tracking) {
    return absl::FailedPreconditionError(
        "the recording's metadata has no tracking (dummy) event: nothing says how its sideband "
        "records are laid out");
  }
  if (!trace && !e.emulated) {
    return absl::FailedPreconditionError(
        "the recording has no intel_pt or intel_bts event (a sideband-only recording has no "
        "trace to export)");
  }
  if (sampler && samples.empty()) others.push_back(*sampler);  // an event like the others
  // As perf record -e '{intel_pt//u,EVENT}' --aux-sample orders them: the trace event, the
  // sampling event in its group, the tracking event, the others.
  e.all.reserve(3 + others.size());
  e.all.resize(samples.empty() ? 2 : 3);
  e.trace_at = 0;
  e.tracking_at = e.all.size() - 1;
  perf::WriterEvent& tr = e.all[e.trace_at];
  perf::WriterEvent& tk = e.all[e.tracking_at];
  const perf_event_attr tracking_attr = AttrOfJson(attrs[*tracking]);
  if (trace) {
    tr.attr = AttrOfJson(attrs[*trace]);
  } else {
    // An emulated recording ran on no PMU: the event `perf record -e intel_pt//u` would have
    // opened, with what the emulation encoded (TSC packets; return compression; PSB period).
    perf_event_attr& t = tr.attr;
    t = tracking_attr;
    t.type = e.bts ? kEmulatedBtsType : kEmulatedPtType;
    t.config = 0;
    t.mmap = t.mmap2 = t.comm = t.comm_exec = t.task = t.context_switch = 0;
    t.exclude_kernel = 1;
    if (!e.bts) {
      // (Before the timing terms were stored, emulated traces had TSC packets only.)
      const auto& em = m["emulation"];
      t.config = 1 | (1u << 13);                                     // pt, branch
      if (em.value("tsc", true)) t.config |= 1u << 10;               // tsc
      if (!em.value("ret_compression", true)) t.config |= 1u << 11;  // noretcomp
      if (em.value("mtc", false)) t.config |= 1u << 9;               // mtc
      t.config |= uint64_t{em.value("mtc_period", 3u) & 0xfu} << 14;
      if (em.value("cyc", false)) t.config |= 1u << 1;  // cyc
      t.config |= uint64_t{em.value("cyc_thresh", 0u) & 0xfu} << 19;
      t.config |= uint64_t{em.value("psb_period", 0u) & 0xfu} << 24;
    }
  }
  tr.name =
      fmt::format("{}//{}", e.bts ? "intel_bts" : "intel_pt", tr.attr.exclude_kernel ? "u" : "");
  const perf::SampleIdLayout layout = LayoutFromMetadata(typed);
  // perf adds events of its own (the samples it synthesizes from the trace), and then tells
  // records apart by their sample ids: records with a trailer but no id get
  // PERF_SAMPLE_IDENTIFIER (ExportPerfData appends it).
  const bool ids = (layout.sample_type & (PERF_SAMPLE_ID | PERF_SAMPLE_IDENTIFIER)) != 0;
  e.add_identifier = layout.sample_id_all && !ids;
  std::set<uint64_t> trace_ids, tracking_ids;
  if (layout.sample_id_all && ids) {
    for (const SidebandRef& r : s.records) {
      if (!r.id.has_id || r.id.id == 0) continue;
      (FromTraceEvent(r.type) ? trace_ids : tracking_ids).insert(r.id.id);
    }
    for (uint64_t id : trace_ids) tracking_ids.erase(id);
  }
  // perf takes the id of the trace event's first id for what it synthesizes: never none.
  uint64_t top = 0;
  for (uint64_t id : trace_ids) top = std::max(top, id);
  for (uint64_t id : tracking_ids) top = std::max(top, id);
  if (trace_ids.empty()) trace_ids.insert(++top);
  if (tracking_ids.empty()) tracking_ids.insert(++top);
  tr.ids.assign(trace_ids.begin(), trace_ids.end());
  tr.attr.sample_period = 1;
  tk.attr = tracking_attr;
  tk.attr.sample_period = 1;
  tk.ids.assign(tracking_ids.begin(), tracking_ids.end());
  tk.name = tracking_attr.exclude_kernel ? "dummy:u" : "dummy";
  // The recording's other events (ptrecord's counters: they wrote no records), each with an
  // id of its own.
  for (size_t i : others) {
    perf::WriterEvent w;
    w.attr = AttrOfJson(attrs[i]);
    w.ids = {++top};
    w.name = attrs[i].value("name", std::string());
    if (w.name.empty()) w.name = fmt::format("event{}", i);
    e.all.push_back(std::move(w));
  }
  if (!samples.empty()) {
    PTKIT_ASSIGN_OR_RETURN(e.all[1], MakeSampler(m, sampler ? &attrs[*sampler] : nullptr,
                                                 tracking_attr, samples, top, e));
    e.sampler_at = 1;
  }
  // One trailer layout for every event (perf requires it), as the records have it; samples
  // keep theirs (their records have no trailer, and the sample id comes first in all).
  for (size_t i = 0; i < e.all.size(); ++i) {
    perf::WriterEvent& w = e.all[i];
    w.attr.exclude_guest = 1;  // as perf record opens events on a host (perf names them so)
    w.attr.sample_id_all = layout.sample_id_all;
    if (e.sampler_at == i) continue;
    w.attr.sample_type = layout.sample_type | (e.add_identifier ? PERF_SAMPLE_IDENTIFIER : 0);
  }
  if (e.sampler_at && !((layout.sample_type | (e.add_identifier ? PERF_SAMPLE_IDENTIFIER : 0)) &
                        PERF_SAMPLE_IDENTIFIER)) {
    return absl::FailedPreconditionError(
        "the recording's sideband records have no sample id trailer: perf could not tell them "
        "from the AUX samples");
  }
  // perf prints the samples it synthesizes from the trace only with IP in the trace event's
  // sample_type (not part of the sample_id_all trailer, so the records' layout is unchanged).
  tr.attr.sample_type |= PERF_SAMPLE_IP;
  return e;
}

perf::AuxtraceInfo MakeAuxtraceInfo(const Scan& s, const Events& e, bool per_cpu) {
  const nlohmann::json& m = s.metadata;
  const auto tc = m.value("time_conversion", nlohmann::json::object());
  const uint64_t shift = tc.value("time_shift", uint64_t{0});
  const uint64_t mult = tc.value("time_mult", uint64_t{0});
  const uint64_t zero = tc.value("time_zero", uint64_t{0});
  const uint64_t cap_zero = tc.value("cap_user_time_zero", false) ? 1 : 0;
  const bool snapshot = m.value("mode", std::string()) == "snapshot";
  perf::AuxtraceInfo info;
  // A perf.data's own words (decoder/perf_data_input.h keeps them), as perf wrote them: they
  // say more than the metadata does (the sched_switch kind, words of later perf versions).
  const auto recorded = m.value("auxtrace_info", nlohmann::json::object());
  const uint32_t type = e.bts ? kAuxtraceIntelBts : kAuxtraceIntelPt;
  if (recorded.value("type", 0u) == type && recorded.contains("words") &&
      recorded["words"].is_array() && !recorded["words"].empty()) {
    bool ok = true;
    for (const auto& w : recorded["words"]) {
      ok &= w.is_number_unsigned();
      if (ok) info.priv.push_back(w.get<uint64_t>());
    }
    if (ok) {
      info.type = type;
      info.priv[0] = e.trace().attr.type;
      return info;
    }
    info.priv.clear();
  }
  if (e.bts) {
    info.type = kAuxtraceIntelBts;
    info.priv = {e.trace().attr.type, shift, mult, zero, cap_zero, snapshot ? 1u : 0u};
    return info;
  }
  info.type = kAuxtraceIntelPt;
  bool switches = false;
  for (const auto& a : m.value("attrs", nlohmann::json::array())) {
    switches |= a.is_object() && a.value("context_switch", false);
  }
  const auto cpu = m.value("cpu", nlohmann::json::object());
  const auto ratio = cpu.value("cpuid_15h", nlohmann::json::object());
  const auto pmu = m.value("pmu", nlohmann::json::object());
  std::string filter;
  if (m.contains("emulation") && m["emulation"].is_object()) {
    filter = m["emulation"].value("filter", std::string());
  }
  info.priv = {
      e.trace().attr.type,
      shift,
      mult,
      zero,
      cap_zero,
      FormatBits(m, "tsc", 1u << 10),
      FormatBits(m, "noretcomp", 1u << 11),
      // 2: the CPU's task from context_switch records (1: sched:sched_switch). Per-thread
      // streams must say 0, as perf record does: perf would take the task from the CPU (-1).
      per_cpu && switches ? 2u : 0u,
      snapshot ? 1u : 0u,
      per_cpu ? 1u : 0u,
      FormatBits(m, "mtc", 1u << 9),
      FormatBits(m, "mtc_period", 0xfu << 14),
      ratio.value("tsc_ratio_numerator", uint64_t{0}),
      ratio.value("tsc_ratio_denominator", uint64_t{0}),
      FormatBits(m, "cyc", 1u << 1),
      pmu.value("max_nonturbo_ratio", uint64_t{0}),
      filter.size(),
  };
  if (!filter.empty()) {
    // The string, NUL-terminated, in 8-byte words.
    std::vector<uint8_t> words((filter.size() + 1 + 7) / 8 * 8, 0);
    std::copy(filter.begin(), filter.end(), words.begin());
    for (size_t i = 0; i < words.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, words.data() + i, 8);
      info.priv.push_back(w);
    }
  }
  info.priv.push_back(0);  // cap_event_trace (perf >= 5.19 reads a word after the filter)
  return info;
}

// The build-id of ELF bytes (a captured vdso); empty when they have none.
std::vector<uint8_t> BuildIdOfBytes(std::span<const uint8_t> bytes) {
  absl::StatusOr<ElfFile> elf = ElfFile::FromMemory("captured code", bytes);
  return elf.ok() ? elf->BuildId() : std::vector<uint8_t>{};
}

struct CacheEntry {
  std::string path;
  std::vector<uint8_t> build_id;
  bool vdso = false;
  std::vector<const CapturedCode*> ranges;
  std::span<const uint8_t> bytes;  // else: the whole file (JIT code)
  std::span<const uint8_t> debug;  // its archived separate debug file (empty: none)
};

// perf's build-id cache layout (tools/perf/util/build-id.c): DIR/NAME/BUILDID/{elf,vdso} and
// DIR/.build-id/NN/REST -> ../../NAME/BUILDID.
absl::Status WriteCacheEntry(const std::string& dir, const CacheEntry& c, const Recording& rec) {
  const std::string hex = Hex(c.build_id);
  const std::string name = c.path[0] == '/' ? c.path.substr(1) : c.path;
  std::error_code ec;
  const fs::path entry = fs::path(dir) / name / hex;
  fs::create_directories(entry, ec);
  if (ec) return absl::InternalError(fmt::format("mkdir {}: {}", entry.string(), ec.message()));
  const fs::path file = entry / (c.vdso ? "vdso" : "elf");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(c.bytes.data()),
              static_cast<std::streamsize>(c.bytes.size()));
    // Each range at its file offset; what no range holds stays a hole.
    for (const CapturedCode* r : c.ranges) {
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, CapturedBytes(rec, *r));
      out.seekp(static_cast<std::streamoff>(r->pgoff));
      out.write(reinterpret_cast<const char*>(view.bytes().data()),
                static_cast<std::streamsize>(view.bytes().size()));
    }
    if (!out) return absl::InternalError(fmt::format("write {}", file.string()));
  }
  if (!c.debug.empty()) {
    // perf's copy of the debug file beside it (DSO_BINARY_TYPE__BUILD_ID_CACHE_DEBUGINFO).
    const fs::path debug = entry / "debug";
    std::ofstream out(debug, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(c.debug.data()),
              static_cast<std::streamsize>(c.debug.size()));
    if (!out) return absl::InternalError(fmt::format("write {}", debug.string()));
  }
  const fs::path link_dir = fs::path(dir) / ".build-id" / hex.substr(0, 2);
  fs::create_directories(link_dir, ec);
  if (ec) return absl::InternalError(fmt::format("mkdir {}: {}", link_dir.string(), ec.message()));
  const fs::path link = link_dir / hex.substr(2);
  fs::remove(link, ec);
  fs::create_directory_symlink(fs::path("../..") / name / hex, link, ec);
  if (ec) return absl::InternalError(fmt::format("symlink {}: {}", link.string(), ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PerfDataExportSummary> ExportPerfData(const Recording& r, const std::string& output,
                                                     const PerfDataExportOptions& options) {
  const std::string& input = r.name;
  std::optional<std::vector<perf::WriterEvent>> recorded = RecordedEvents(r.metadata.ToJson());
  PTKIT_ASSIGN_OR_RETURN(Scan s, ScanRecording(r, recorded));
  if (s.metadata.empty()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: no metadata record: the recording cannot be described to perf", input));
  }
  const bool recorded_events = recorded.has_value();
  PTKIT_ASSIGN_OR_RETURN(Events ev,
                         MakeEvents(s, std::move(recorded),
                                    recorded_events ? std::span<const AuxSample>()
                                                    : std::span<const AuxSample>(r.samples)));
  PerfDataExportSummary summary;
  summary.warnings = s.warnings;
  const nlohmann::json& m = s.metadata;
  // The trailer layout of the records the export writes (a perf.data's: its trace event's).
  perf::SampleIdLayout layout =
      ev.recorded
          ? perf::SampleIdLayout{ev.trace().attr.sample_type, ev.trace().attr.sample_id_all != 0}
          : LayoutFromMetadata(r.metadata);
  if (ev.add_identifier) {
    // As the kernel lays out a record with PERF_SAMPLE_IDENTIFIER: the id last.
    std::vector<uint8_t> rewritten;
    rewritten.reserve(s.sideband.size() + 8 * s.records.size());
    for (SidebandRef& r : s.records) {
      const uint64_t id =
          FromTraceEvent(r.type) ? ev.trace().ids.front() : ev.tracking().ids.front();
      const size_t begin = rewritten.size();
      rewritten.insert(rewritten.end(), s.sideband.begin() + r.begin,
                       s.sideband.begin() + r.begin + r.size);
      if (r.size + 8 > 0xffff) {
        return absl::FailedPreconditionError(fmt::format(
            "{}: a {}-byte sideband record has no room for a sample id", input, r.size));
      }
      rewritten.resize(begin + r.size + 8);
      std::memcpy(rewritten.data() + begin + r.size, &id, 8);
      const uint16_t size = static_cast<uint16_t>(r.size + 8);
      std::memcpy(rewritten.data() + begin + offsetof(perf_event_header, size), &size, 2);
      r.begin = begin;
      r.size += 8;
      r.id.has_id = true;
      r.id.id = id;
      r.layout.sample_type |= PERF_SAMPLE_IDENTIFIER;
    }
    s.sideband = std::move(rewritten);
    layout.sample_type |= PERF_SAMPLE_IDENTIFIER;
  }

  // Streams in order, numbered: perf queues AUXTRACE data by idx.
  std::map<StreamId, uint32_t> idx;
  for (const StreamId& id : s.streams) idx.emplace(id, static_cast<uint32_t>(idx.size()));
  bool per_cpu = !m.value("cpus", nlohmann::json::array()).empty();
  for (const StreamId& id : s.streams) per_cpu |= id.kind == StreamKind::kCpu;

  // Losses the sideband lacks, as PERF_RECORD_AUX with TRUNCATED (perf reports them as lost
  // trace data).
  std::map<uint32_t, uint32_t> pid_of;
  for (const SidebandRef& r : s.records) {
    if (r.id.has_tid) pid_of.emplace(r.id.tid, r.id.pid);
  }
  for (const Loss& l : s.losses) {
    perf::SampleId id;
    id.has_tid = layout.sample_type & PERF_SAMPLE_TID;
    id.has_time = layout.sample_type & PERF_SAMPLE_TIME;
    id.has_id = layout.sample_type & (PERF_SAMPLE_ID | PERF_SAMPLE_IDENTIFIER);
    id.has_stream_id = layout.sample_type & PERF_SAMPLE_STREAM_ID;
    id.has_cpu = layout.sample_type & PERF_SAMPLE_CPU;
    const bool thread = l.stream.kind == StreamKind::kThread;
    id.tid = thread ? static_cast<uint32_t>(l.stream.id) : kNoCpu;
    id.pid = thread && pid_of.contains(id.tid) ? pid_of[id.tid] : id.tid;
    id.time = l.time;
    id.id = ev.trace().ids.front();
    id.cpu = thread ? kNoCpu : static_cast<uint32_t>(l.stream.id);
    std::vector<uint8_t> rec = perf::EncodeAux(perf::Aux{.aux_offset = l.aux_offset,
                                                         .aux_size = l.bytes,
                                                         .flags = PERF_AUX_FLAG_TRUNCATED,
                                                         .sample_id = id},
                                               layout);
    SidebandRef ref;
    ref.begin = s.sideband.size();
    ref.size = rec.size();
    ref.ring_cpu = thread ? -1 : static_cast<int32_t>(l.stream.id);
    ref.time = l.time;
    ref.type = PERF_RECORD_AUX;
    ref.id = id;
    ref.layout = layout;
    s.sideband.insert(s.sideband.end(), rec.begin(), rec.end());
    s.records.push_back(ref);
  }
  // The AUX samples, as the kernel writes them (the snippet after the fields), with their ids.
  if (ev.sampler_at) {
    for (const AuxSample& smp : r.samples) {
      PTKIT_ASSIGN_OR_RETURN(SpoolView snippet, r.spool->Map(smp.snippet));
      perf::Sample f = smp.fields;
      f.id = ev.sample_ids.at({smp.stream, smp.fields.id});
      f.aux = snippet.bytes();
      std::vector<uint8_t> rec = perf::EncodeSample(f, smp.sample_type);
      SidebandRef ref;
      ref.begin = s.sideband.size();
      ref.size = rec.size();
      ref.ring_cpu = smp.stream.kind == StreamKind::kCpu ? static_cast<int32_t>(smp.stream.id) : -1;
      ref.time = f.time;
      ref.type = PERF_RECORD_SAMPLE;
      ref.id.has_id = true;
      ref.id.id = f.id;
      s.sideband.insert(s.sideband.end(), rec.begin(), rec.end());
      s.records.push_back(ref);
    }
  }
  // Time order, as perf's ordered events deliver them (records without time keep theirs).
  if (layout.sample_id_all && (layout.sample_type & PERF_SAMPLE_TIME)) {
    std::stable_sort(s.records.begin(), s.records.end(),
                     [](const SidebandRef& a, const SidebandRef& b) { return a.time < b.time; });
  }

  // ID_INDEX: which ring (CPU, or thread) each sample id came from.
  std::vector<perf::IdIndexEntry> id_index;
  std::set<uint64_t> indexed;
  uint32_t max_cpu = 0;
  for (const SidebandRef& r : s.records) {
    if (r.ring_cpu >= 0) max_cpu = std::max<uint32_t>(max_cpu, r.ring_cpu);
    if (r.id.has_cpu && r.id.cpu != kNoCpu) max_cpu = std::max(max_cpu, r.id.cpu);
    // A sample's ring is its event's (a per-thread one's thread is in the sample, not here).
    if (r.type == PERF_RECORD_SAMPLE) continue;
    if (!r.id.has_id || !indexed.insert(r.id.id).second) continue;
    const StreamId stream = r.ring_cpu >= 0
                                ? StreamId{StreamKind::kCpu, static_cast<uint64_t>(r.ring_cpu)}
                                : StreamId{StreamKind::kThread, r.id.tid};
    auto it = idx.find(stream);
    id_index.push_back({r.id.id, it == idx.end() ? 0 : it->second,
                        r.ring_cpu >= 0 ? static_cast<uint64_t>(r.ring_cpu) : ~uint64_t{0},
                        r.ring_cpu >= 0 ? ~uint64_t{0} : r.id.tid});
  }
  for (const StreamId& id : s.streams) {
    if (id.kind == StreamKind::kCpu) max_cpu = std::max<uint32_t>(max_cpu, id.id);
  }
  for (const auto& c : m.value("cpus", nlohmann::json::array())) {
    if (c.is_number_unsigned()) max_cpu = std::max(max_cpu, c.get<uint32_t>());
  }
  // The AUX-sampling events' ids: perf queues each sample's snippet by its id's idx and takes
  // the snippet's CPU and thread from it (auxtrace_queues__add_sample()). A trace.pt's samples
  // name their stream; a perf.data's give theirs in their CPU (else TID) field.
  {
    std::map<uint64_t, StreamId> stream_of;
    for (const auto& [key, id] : ev.sample_ids) stream_of.emplace(id, key.first);
    std::map<uint64_t, const perf_event_attr*> sampler_of;
    for (const perf::WriterEvent& w : ev.all) {
      if (!IsAuxSampler(w.attr)) continue;
      for (uint64_t id : w.ids) sampler_of.emplace(id, &w.attr);
    }
    for (const SidebandRef& r : s.records) {
      if (r.type != PERF_RECORD_SAMPLE || !r.id.has_id || stream_of.contains(r.id.id)) continue;
      auto it = sampler_of.find(r.id.id);
      if (it == sampler_of.end()) continue;
      auto v = perf::ReadRecord(std::span<const uint8_t>(s.sideband).subspan(r.begin, r.size));
      auto smp = v.ok() ? perf::ParseSample(*v, it->second->sample_type) : v.status();
      if (!smp.ok()) continue;
      stream_of.emplace(r.id.id, (it->second->sample_type & PERF_SAMPLE_CPU)
                                     ? StreamId{StreamKind::kCpu, smp->cpu}
                                     : StreamId{StreamKind::kThread, smp->tid});
    }
    uint32_t next_idx = static_cast<uint32_t>(idx.size());
    for (const auto& [id, stream] : stream_of) {
      if (!indexed.insert(id).second) continue;
      auto it = idx.find(stream);
      if (it == idx.end()) it = idx.emplace(stream, next_idx++).first;
      const bool thread = stream.kind == StreamKind::kThread;
      id_index.push_back(
          {id, it->second, thread ? ~uint64_t{0} : stream.id, thread ? stream.id : ~uint64_t{0}});
    }
  }
  std::vector<perf::IdIndexEntry> known;  // perf refuses an id no attr has
  std::set<uint64_t> attr_ids;
  for (const perf::WriterEvent& w : ev.all) attr_ids.insert(w.ids.begin(), w.ids.end());
  for (const perf::IdIndexEntry& e : id_index) {
    if (attr_ids.contains(e.id)) known.push_back(e);
  }

  summary.events = ev.all.size();
  PTKIT_ASSIGN_OR_RETURN(perf::PerfDataWriter w, perf::PerfDataWriter::Create(output, ev.all));
  // In perf 6.1's order (builtin-record.c record__synthesize()): TIME_CONV, ID_INDEX, then
  // AUXTRACE_INFO, whose processing queues the AUX samples by the ids ID_INDEX placed.
  {
    const auto tc = m.value("time_conversion", nlohmann::json::object());
    perf::TimeConv conv;
    conv.time_shift = tc.value("time_shift", uint64_t{0});
    conv.time_mult = tc.value("time_mult", uint64_t{0});
    conv.time_zero = tc.value("time_zero", uint64_t{0});
    conv.cap_user_time_zero = tc.value("cap_user_time_zero", false);
    conv.extended = true;
    PTKIT_RETURN_IF_ERROR(w.AddRecord(perf::EncodeTimeConv(conv)));
  }
  for (const std::vector<uint8_t>& r : perf::EncodeIdIndex(known)) {
    PTKIT_RETURN_IF_ERROR(w.AddRecord(r));
  }
  if (ev.has_trace) {
    PTKIT_RETURN_IF_ERROR(w.AddRecord(perf::EncodeAuxtraceInfo(MakeAuxtraceInfo(s, ev, per_cpu))));
  }
  for (size_t i = 0; i < s.records.size(); ++i) {
    const SidebandRef& r = s.records[i];
    PTKIT_RETURN_IF_ERROR(
        w.AddRecord(std::span<const uint8_t>(s.sideband).subspan(r.begin, r.size)));
    if ((i + 1) % kRoundRecords == 0)
      PTKIT_RETURN_IF_ERROR(w.AddRecord(perf::EncodeFinishedRound()));
  }
  summary.sideband_records = s.records.size();
  PTKIT_RETURN_IF_ERROR(w.AddRecord(perf::EncodeFinishedRound()));

  // The reference of an AUXTRACE record is the perf time its data was read, which BTS (no
  // timestamps in the trace) decodes at. An emulated recording's PERF_RECORD_AUX times count
  // from 1 (the simulated PMU's clock): its threads' data is referenced to the thread's last
  // sideband record instead (its EXIT), when the thread's maps are all known.
  std::map<uint32_t, uint64_t> last_time;
  for (const SidebandRef& r : s.records) {
    if (r.id.has_tid && r.id.has_time) last_time[r.id.tid] = std::max(last_time[r.id.tid], r.time);
  }
  ProgressLine progress(options.progress);
  uint64_t total = 0;
  for (const AuxPiece& p : s.pieces) total += p.piece->run.size;
  for (const AuxPiece& p : s.pieces) {
    progress.Update(summary.trace_bytes, total);
    const bool thread = p.stream.kind == StreamKind::kThread;
    perf::Auxtrace a;
    a.size = p.piece->run.size;
    a.offset = p.piece->aux_offset;
    a.reference = p.piece->time;
    if (ev.emulated && thread && last_time.contains(static_cast<uint32_t>(p.stream.id))) {
      a.reference = last_time[static_cast<uint32_t>(p.stream.id)];
    }
    a.idx = idx.at(p.stream);
    a.tid = thread ? static_cast<uint32_t>(p.stream.id) : kNoCpu;
    a.cpu = thread ? kNoCpu : static_cast<uint32_t>(p.stream.id);
    PTKIT_ASSIGN_OR_RETURN(const uint64_t at, w.AddAuxtrace(a));
    PTKIT_ASSIGN_OR_RETURN(SpoolView bytes, r.spool->Map(p.piece->run));
    PTKIT_RETURN_IF_ERROR(w.WriteAt(at, bytes.bytes()));
    summary.trace_bytes += a.size;
  }
  summary.auxtrace_records = s.pieces.size();

  // Build-ids: MMAP2 records that carry one, code records, the captured vdso's note.
  std::map<std::string, std::vector<uint8_t>> build_ids;  // path -> build-id; the first wins
  for (const SidebandRef& r : s.records) {
    if (r.type != PERF_RECORD_MMAP2) continue;
    auto v = perf::ReadRecord(std::span<const uint8_t>(s.sideband).subspan(r.begin, r.size));
    if (!v.ok()) continue;
    auto mm = perf::ParseMmap2(*v, r.layout);
    if (!mm.ok() || !(mm->prot & PROT_EXEC) || mm->build_id.empty()) continue;
    build_ids.emplace(std::string(mm->filename),
                      std::vector<uint8_t>(mm->build_id.begin(), mm->build_id.end()));
  }
  // The files' own (perf.data's BUILD_ID, ptrecord's identity records).
  for (const auto& [path, id] : r.build_ids) build_ids.emplace(path, id);
  std::map<std::pair<std::string, std::string>, CacheEntry> cache;  // by path and build-id
  std::set<std::string> uncached;
  for (const JitFile& j : s.jit) {
    CacheEntry& e = cache[{j.path, Hex(j.build_id)}];
    e.path = j.path;
    e.build_id = j.build_id;
    e.bytes = j.bytes;
  }
  for (const auto& [pid, code] : r.captured) {
    for (const CapturedCode& c : code) {
      if (c.flags & kCodeTextPoke) continue;  // in s.jit
      const bool vdso = c.flags & kCodeVdso;
      std::vector<uint8_t> id = c.build_id;
      if (id.empty() && vdso) {
        PTKIT_ASSIGN_OR_RETURN(SpoolView bytes, CapturedBytes(r, c));
        id = BuildIdOfBytes(bytes.bytes());
      }
      if (!id.empty()) build_ids.emplace(c.path, id);
      if (c.run.size == 0) continue;
      if (id.empty()) {
        if (uncached.insert(c.path).second) {
          summary.warnings.push_back(fmt::format(
              "{}: captured code without a build-id: not in the build-id cache (perf reads the "
              "file at that path, if there is one)",
              c.path));
        }
        continue;
      }
      CacheEntry& e = cache[{c.path, Hex(id)}];
      e.path = c.path;
      e.build_id = id;
      e.vdso = vdso;
      // The same range of another process holds the same bytes.
      const bool have = std::any_of(e.ranges.begin(), e.ranges.end(), [&](const CapturedCode* r) {
        return r->pgoff == c.pgoff && r->run.size == c.run.size;
      });
      if (!have) e.ranges.push_back(&c);
    }
  }
  // An archived file whole (ptrecord --archive): the cache's copy is it, symbols and all.
  std::list<SpoolView> whole_files;  // mapped while the entries are written
  for (const auto& [key, run] : r.archived_files) {
    const auto& [path, id] = key;
    if (id.empty() || !r.spool) continue;
    PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(run));
    CacheEntry& e = cache[{path, Hex(id)}];
    e.path = path;
    e.build_id = id;
    e.bytes = whole_files.emplace_back(std::move(view)).bytes();
  }
  // Their archived debug files (a stripped file's symbols and lines), by build-id.
  for (const auto& [key, run] : r.archived_debug_files) {
    if (key.second.empty() || !r.spool) continue;
    for (auto& [cache_key, e] : cache) {
      if (e.build_id != key.second || !e.debug.empty()) continue;
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(run));
      e.debug = whole_files.emplace_back(std::move(view)).bytes();
    }
  }

  perf::PerfFeatures f;
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!m.contains(key) || !m[key].is_string()) return std::nullopt;
    return m[key].get<std::string>();
  };
  f.hostname = text("host");
  f.osrelease = text("kernel_release");
  f.arch = text("machine");
  f.version = fmt::format("{} {} (ptdecode export)", m.value("tool", std::string("ptkit")),
                          m.value("tool_version", std::string()));
  f.nr_cpus_available = f.nr_cpus_online = max_cpu + 1;
  if (m.contains("cpu") && m["cpu"].is_object() &&
      !m["cpu"].value("vendor", std::string()).empty()) {
    const auto& c = m["cpu"];
    f.cpuid = fmt::format("{},{},{},{}", c.value("vendor", std::string()), c.value("family", 0u),
                          c.value("model", 0u), c.value("stepping", 0u));
  }
  // CPUDESC, which perf writes on x86 always and `perf data convert --to-json` reads without a
  // check (a SIGSEGV on every export without it: sweep 39a F4): a perf.data's own (its
  // metadata's cpu.model_name), else what the CPU fields say.
  if (m.contains("cpu") && m["cpu"].is_object()) {
    const auto& c = m["cpu"];
    const std::string name = c.value("model_name", std::string());
    f.cpudesc = !name.empty()
                    ? name
                    : fmt::format("{} family {} model {} stepping {}",
                                  c.value("vendor", std::string("unknown")), c.value("family", 0u),
                                  c.value("model", 0u), c.value("stepping", 0u));
  } else {
    f.cpudesc = "unknown";
  }
  if (m.contains("command_line") && m["command_line"].is_array()) {
    std::vector<std::string> args;
    for (const auto& a : m["command_line"]) {
      if (a.is_string()) args.push_back(a.get<std::string>());
    }
    f.cmdline = std::move(args);
  }
  for (const auto& [path, id] : build_ids) {
    const uint16_t cpumode =
        path.rfind("[kernel", 0) == 0 ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER;
    f.build_ids.push_back({-1, cpumode, id, path});  // pid -1: perf's host machine
  }
  summary.build_ids = f.build_ids.size();
  if (ev.recorded && m.contains("perf_groups")) {
    // A perf.data's groups (HEADER_GROUP_DESC), as perf wrote them: its events are written in
    // its order. A group that names events the file has no attr for is left out.
    for (const auto& g : m["perf_groups"]) {
      if (!g.is_object()) continue;
      const uint64_t leader = g.value("leader", uint64_t{0}), events = g.value("events", 0ull);
      if (leader + events > ev.all.size() || events == 0) continue;
      f.groups.push_back({g.value("name", std::string()), static_cast<uint32_t>(leader),
                          static_cast<uint32_t>(events)});
    }
  } else if (ev.has_trace) {
    // The AUX-sampling events after the trace event are in its group (the kernel takes AUX
    // samples from the group leader's area only): {intel_pt//u,EVENT}, as perf record
    // --aux-sample writes it.
    uint32_t members = 1;
    while (ev.trace_at + members < ev.all.size() &&
           IsAuxSampler(ev.all[ev.trace_at + members].attr)) {
      ++members;
    }
    if (members > 1) {
      f.groups.push_back({"{anon_group}", static_cast<uint32_t>(ev.trace_at), members});
    }
  }
  f.kept = r.perf_features;  // a perf.data's tracepoint formats, topology, ...: as they were
  PTKIT_RETURN_IF_ERROR(w.Finish(f));

  if (!cache.empty()) {
    summary.debug_dir = options.debug_dir.empty() ? output + ".debug" : options.debug_dir;
    for (const auto& [key, entry] : cache) {
      PTKIT_RETURN_IF_ERROR(WriteCacheEntry(summary.debug_dir, entry, r));
      ++summary.cached_files;
    }
  }
  return summary;
}

absl::StatusOr<PerfDataExportSummary> ExportPerfData(const std::string& input,
                                                     const std::string& output,
                                                     const PerfDataExportOptions& options) {
  PTKIT_ASSIGN_OR_RETURN(Recording r,
                         OpenRecording(input, RecordingOptions{.keep_snapshots = true}));
  return ExportPerfData(r, output, options);
}

}  // namespace ptkit::decoder
