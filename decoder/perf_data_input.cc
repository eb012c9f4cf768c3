#include "decoder/perf_data_input.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "decoder/container_input.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/numbers.h"
#include "ptkit/perf_data_format.h"
#include "ptkit/perf_records.h"
#include "ptkit/recording_metadata.h"
#include "ptkit/sideband.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

using perf::kAuxtraceIntelBts;
using perf::kAuxtraceIntelPt;
using perf::kNoCpu;

// The private words of AUXTRACE_INFO, as tools/perf/util/intel-pt.h and intel-bts.h number
// them (the first five are the same in both). perf reads the optional later words only when
// the record is long enough.
constexpr size_t kPmuType = 0;
constexpr size_t kTimeShift = 1;
constexpr size_t kTimeMult = 2;
constexpr size_t kTimeZero = 3;
constexpr size_t kCapUserTimeZero = 4;
constexpr size_t kPtSnapshotMode = 8;
constexpr size_t kPtTscCtcN = 12;
constexpr size_t kPtTscCtcD = 13;
constexpr size_t kPtMaxNonturboRatio = 15;
constexpr size_t kBtsSnapshotMode = 5;

std::optional<uint64_t> Word(const perf::AuxtraceInfo& info, size_t i) {
  if (i >= info.priv.size()) return std::nullopt;
  return info.priv[i];
}

const perf::AuxtraceInfo* TraceInfo(const perf::PerfData& data) {
  for (const perf::AuxtraceInfo& info : data.auxtrace_info) {
    if (info.type == kAuxtraceIntelPt || info.type == kAuxtraceIntelBts) return &info;
  }
  return nullptr;
}

bool SnapshotMode(const perf::AuxtraceInfo* info) {
  if (info == nullptr) return false;
  return Word(*info, info->type == kAuxtraceIntelPt ? kPtSnapshotMode : kBtsSnapshotMode)
             .value_or(0) != 0;
}

// The trace's stream: its CPU's, or its thread's when perf recorded per thread.
StreamId AuxStream(const perf::Auxtrace& a) {
  if (a.cpu == kNoCpu) return {StreamKind::kThread, a.tid};
  return {StreamKind::kCpu, a.cpu};
}

// The sample id trailer of a non-SAMPLE record, read with its attr's layout.
struct Placed {
  perf::SampleIdLayout layout{0, false};
  std::optional<perf::SampleId> id;
  int32_t cpu = -1;  // from the trailer, else ID_INDEX; -1 when unknown
};

Placed Place(const perf::PerfData& data, const perf::RecordView& r,
             const std::map<uint64_t, uint64_t>& cpu_of_id) {
  Placed p;
  const perf::PerfAttr* attr = data.AttrOf(r);
  if (attr != nullptr) p.layout = attr->layout();
  if (r.type == PERF_RECORD_SAMPLE) {
    // No trailer: the CPU of the ring its id was read from.
    if (attr == nullptr) return p;
    auto id = perf::RecordSampleId(r, attr->attr.sample_type, attr->attr.sample_id_all);
    auto it = id ? cpu_of_id.find(*id) : cpu_of_id.end();
    if (it != cpu_of_id.end() && it->second != kNoCpu) p.cpu = static_cast<int32_t>(it->second);
    return p;
  }
  if (!p.layout.sample_id_all) return p;
  auto id = perf::ParseSampleId(r, p.layout);
  if (!id.ok()) return p;
  p.id = *id;
  if (id->has_cpu) {
    p.cpu = static_cast<int32_t>(id->cpu);
  } else if (id->has_id) {
    auto it = cpu_of_id.find(id->id);
    if (it != cpu_of_id.end() && it->second != kNoCpu) p.cpu = static_cast<int32_t>(it->second);
  }
  return p;
}

// A loss point perf recorded for a stream, at an AUX offset.
struct PendingLoss {
  uint64_t aux_offset = 0;
  std::string kind;
  uint64_t bytes = 0;
  bool sideband = false;
};

// The AUX records of a stream, for the time of an AUXTRACE piece.
struct AuxSpan {
  uint64_t begin = 0, end = 0, time = 0;
};

}  // namespace

absl::StatusOr<bool> IsPerfDataFile(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, OpenFileSource(path));
  uint8_t magic[8] = {};
  PTKIT_ASSIGN_OR_RETURN(size_t got, src->ReadAt(0, magic));
  return got == sizeof(magic) && perf::IsPerfData(magic);
}

namespace {

// HEADER_GROUP_DESC's groups: name, leader (an index into the attrs, as in the file), events
// (the leader and the members after it), and the events' EVENT_DESC names; "missing" counts
// the group's events the file has no attr for.
nlohmann::json GroupsJson(const perf::PerfData& data) {
  nlohmann::json groups = nlohmann::json::array();
  for (const perf::GroupDescEntry& g : data.features.groups) {
    // The members are attrs leader_idx .. leader_idx + nr_members - 1; those past the attrs
    // are counted, not walked (nr_members is the file's, up to 2^32).
    nlohmann::json names = nlohmann::json::array();
    const uint64_t first = g.leader_idx;
    const uint64_t end = first + g.nr_members;
    const uint64_t named_end = std::max(first, std::min<uint64_t>(end, data.attrs.size()));
    for (uint64_t i = first; i < named_end; ++i) names.push_back(data.NameOf(i));
    const uint64_t missing = g.nr_members - (named_end - first);
    groups.push_back({{"name", g.name},
                      {"leader", g.leader_idx},
                      {"events", g.nr_members},
                      {"names", std::move(names)},
                      {"missing", missing}});
  }
  return groups;
}

}  // namespace

nlohmann::json PerfDataMetadata(const perf::PerfData& data) {
  nlohmann::json m = nlohmann::json::object();
  m["source"] = "perf.data";
  const perf::PerfFeatures& f = data.features;
  if (f.hostname) m["host"] = *f.hostname;
  if (f.osrelease) m["kernel_release"] = *f.osrelease;
  if (f.arch) m["machine"] = *f.arch;
  if (f.cmdline) m["command_line"] = *f.cmdline;
  if (f.cpuid) {
    // x86: "GenuineIntel,6,78,3" (vendor, family, model, stepping), as perf's get_cpuid.
    std::vector<std::string> parts = absl::StrSplit(*f.cpuid, ',');
    nlohmann::json cpu = nlohmann::json::object();
    cpu["vendor"] = parts[0];
    const char* names[] = {"family", "model", "stepping"};
    for (size_t i = 0; i < 3 && i + 1 < parts.size(); ++i) {
      uint32_t v = 0;
      if (ParseUnsigned(parts[i + 1], &v)) cpu[names[i]] = v;
    }
    if (f.cpudesc) cpu["model_name"] = *f.cpudesc;
    m["cpu"] = std::move(cpu);
  }
  const perf::AuxtraceInfo* info = TraceInfo(data);
  // The attrs as trace.pt has them, named as perf names them in EVENT_DESC: the trace PMU's
  // (AUXTRACE_INFO's type) and the tracking dummy event; export and info read them.
  RecordingMetadata typed;
  typed.attrs.emplace();
  for (const perf::PerfAttr& a : data.attrs) {
    std::string name;
    if (info != nullptr && Word(*info, kPmuType) == a.attr.type) {
      name = info->type == kAuxtraceIntelPt ? "intel_pt" : "intel_bts";
    } else if (a.attr.type == PERF_TYPE_SOFTWARE && a.attr.config == PERF_COUNT_SW_DUMMY) {
      name = "dummy";
    }
    typed.attrs->push_back(AttrMetadata::FromAttr(name, a.attr));
    if (name.empty()) typed.attrs->back().name.reset();
  }
  m["attrs"] = typed.ToJson()["attrs"];
  // What `ptdecode export` needs to write every event back as perf wrote it: the attr's
  // bytes, its sample ids and its EVENT_DESC name.
  for (size_t i = 0; i < data.attrs.size(); ++i) {
    nlohmann::json& a = m["attrs"][i];
    const perf::PerfAttr& attr = data.attrs[i];
    a["perf_attr"] = absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(attr.raw.data()), attr.raw.size()));
    a["ids"] = attr.ids;
    if (std::string name = data.NameOf(i); !name.empty()) a["perf_name"] = name;
  }
  // The event groups (HEADER_GROUP_DESC), for export to write them back.
  if (!data.features.groups.empty()) m["perf_groups"] = GroupsJson(data);
  std::optional<nlohmann::json> time;
  if (info != nullptr) {
    const bool pt = info->type == kAuxtraceIntelPt;
    // The words themselves, for `ptdecode export` to write them back as perf wrote them.
    m["auxtrace_info"] = {{"type", info->type}, {"words", info->priv}};
    nlohmann::json pmu = {{"name", pt ? "intel_pt" : "intel_bts"},
                          {"type", Word(*info, kPmuType).value_or(0)}};
    if (pt) {
      if (auto r = Word(*info, kPtMaxNonturboRatio)) pmu["max_nonturbo_ratio"] = *r;
      auto n = Word(*info, kPtTscCtcN), d = Word(*info, kPtTscCtcD);
      if (n && d && *n != 0 && *d != 0 && m.contains("cpu")) {
        m["cpu"]["cpuid_15h"] = {{"tsc_ratio_numerator", *n}, {"tsc_ratio_denominator", *d}};
      }
    }
    if (SnapshotMode(info)) {
      pmu["snapshot"] = true;
      m["mode"] = "snapshot";
    }
    m["pmu"] = std::move(pmu);
    auto mult = Word(*info, kTimeMult);
    if (mult && *mult != 0) {
      time = nlohmann::json{{"time_shift", Word(*info, kTimeShift).value_or(0)},
                            {"time_mult", *mult},
                            {"time_zero", Word(*info, kTimeZero).value_or(0)},
                            {"cap_user_time_zero", Word(*info, kCapUserTimeZero).value_or(0) != 0}};
    }
  }
  if (!time && data.time_conv && data.time_conv->time_mult != 0) {
    const perf::TimeConv& t = *data.time_conv;
    // The old 32-byte record has no capability bits: perf wrote it only with a usable zero.
    time = nlohmann::json{{"time_shift", t.time_shift},
                          {"time_mult", t.time_mult},
                          {"time_zero", t.time_zero},
                          {"cap_user_time_zero", t.extended ? t.cap_user_time_zero : true}};
  }
  if (time) m["time_conversion"] = std::move(*time);
  return m;
}

absl::StatusOr<Recording> ReadPerfDataRecording(ByteSource& source,
                                                const RecordingOptions& options) {
  PTKIT_ASSIGN_OR_RETURN(perf::PerfData data, perf::ReadPerfData(source));
  const std::string& path = source.name();
  RecordingBuilder builder(path, options);
  Recording& r = builder.recording();
  PTKIT_ASSIGN_OR_RETURN(r.metadata, ReadMergedMetadata(path, PerfDataMetadata(data)));
  for (const std::string& w : r.metadata.warnings)
    r.warnings.push_back(absl::StrCat(path, ": ", w));
  r.config = TraceConfigFromMetadata(r.metadata);
  const perf::AuxtraceInfo* info = TraceInfo(data);
  r.bts = info != nullptr && info->type == kAuxtraceIntelBts;
  r.time = r.metadata.PerfTimeConversion();
  r.perf_features = data.features.kept;
  for (const perf::BuildIdEntry& b : data.features.build_ids) {
    if (!b.filename.empty() && !b.build_id.empty()) r.build_ids[b.filename] = b.build_id;
  }

  std::map<uint64_t, uint64_t> cpu_of_id;
  for (const perf::IdIndexEntry& e : data.id_index) cpu_of_id[e.id] = e.cpu;
  const bool per_thread = !data.auxtrace.empty() && data.auxtrace.front().cpu == kNoCpu;

  // Sideband, and loss points by stream: a per-CPU stream is the CPU's, a per-thread one
  // the thread's the record names.
  SidebandBuilder sideband(perf::SampleIdLayout{0, false});
  std::map<StreamId, std::vector<PendingLoss>> losses;
  std::map<StreamId, std::vector<AuxSpan>> aux_spans;
  for (size_t i = 0; i < data.records.size(); ++i) {
    const perf::RecordView rec = data.View(i);
    if (rec.type < PERF_RECORD_MAX) {
      // Kept verbatim for export (samples too: every event's records), batched while the
      // ring (ID_INDEX's CPU, -1 for a per-thread one; else the trailer's) and the layout stay
      // the same.
      const Placed p = Place(data, rec, cpu_of_id);
      int32_t ring = p.cpu;
      if (p.id && p.id->has_id) {
        auto it = cpu_of_id.find(p.id->id);
        if (it != cpu_of_id.end())
          ring = it->second == kNoCpu ? -1 : static_cast<int32_t>(it->second);
      }
      if (r.sideband.empty() || r.sideband.back().cpu != ring ||
          r.sideband.back().layout.sample_type != p.layout.sample_type ||
          r.sideband.back().layout.sample_id_all != p.layout.sample_id_all) {
        r.sideband.push_back({ring, p.layout, {}});
      }
      std::vector<uint8_t>& batch = r.sideband.back().records;
      batch.insert(batch.end(), rec.bytes.begin(), rec.bytes.end());
    }
    switch (rec.type) {
      case PERF_RECORD_MMAP:
      case PERF_RECORD_MMAP2:
      case PERF_RECORD_COMM:
      case PERF_RECORD_FORK:
      case PERF_RECORD_EXIT:
      case PERF_RECORD_ITRACE_START:
      case PERF_RECORD_SWITCH:
      case PERF_RECORD_SWITCH_CPU_WIDE: {
        const Placed p = Place(data, rec, cpu_of_id);
        sideband.Add(p.cpu, rec.bytes, p.layout);
        break;
      }
      case PERF_RECORD_TEXT_POKE: {
        // The kernel's own text pokes are passed over; a user address's is JIT code an
        // export of an --emulate=qemu recording carries (RecordingBuilder::AddTextPokes).
        const Placed p = Place(data, rec, cpu_of_id);
        PTKIT_RETURN_IF_ERROR(builder.AddTextPokes(rec.bytes, p.layout));
        break;
      }
      case PERF_RECORD_AUX: {
        const Placed p = Place(data, rec, cpu_of_id);
        auto aux = perf::ParseAux(rec, p.layout);
        if (!aux.ok()) break;
        StreamId stream{StreamKind::kCpu, static_cast<uint64_t>(p.cpu < 0 ? 0 : p.cpu)};
        if (per_thread) stream = {StreamKind::kThread, p.id ? p.id->tid : 0};
        const uint64_t end = aux->aux_offset + aux->aux_size;
        aux_spans[stream].push_back({aux->aux_offset, end, p.id ? p.id->time : 0});
        if (aux->truncated()) {
          losses[stream].push_back({end, LossKindName(LossKind::kAuxTruncated), 0, false});
        }
        if (aux->collision()) {
          losses[stream].push_back({end, LossKindName(LossKind::kAuxCollision), 0, false});
        }
        if (aux->partial()) {
          losses[stream].push_back({end, LossKindName(LossKind::kAuxPartial), 0, false});
        }
        break;
      }
      case PERF_RECORD_SAMPLE: {
        // An AUX sample (perf record --aux-sample, ptrecord --aux-sample's export): its fields
        // and the trace snippet it carries, from the ring its id names (sweep 32b F4: none was
        // read; ptdecode samples said the recording had none).
        const perf::PerfAttr* attr = data.AttrOf(rec);
        if (attr == nullptr || !(attr->attr.sample_type & PERF_SAMPLE_AUX) ||
            attr->attr.aux_sample_size == 0) {
          break;
        }
        // The ring: its id's (ID_INDEX: a CPU, or a thread's), else the sample's CPU field,
        // else its thread's.
        const uint64_t type = attr->attr.sample_type;
        auto fields = perf::ParseSample(rec, type);
        auto id = perf::RecordSampleId(rec, type, attr->attr.sample_id_all);
        auto indexed = id ? cpu_of_id.find(*id) : cpu_of_id.end();
        StreamId stream{StreamKind::kThread, fields.ok() ? fields->tid : 0};
        if (indexed != cpu_of_id.end()) {
          if (indexed->second != kNoCpu) stream = {StreamKind::kCpu, indexed->second};
        } else if (fields.ok() && (type & PERF_SAMPLE_CPU)) {
          stream = {StreamKind::kCpu, fields->cpu};
        }
        PTKIT_RETURN_IF_ERROR(builder.AddSample(stream, attr->attr.sample_type, rec.bytes));
        break;
      }
      case PERF_RECORD_LOST: {
        const Placed p = Place(data, rec, cpu_of_id);
        sideband.Add(p.cpu, rec.bytes, p.layout);
        StreamId stream{StreamKind::kCpu, static_cast<uint64_t>(p.cpu < 0 ? 0 : p.cpu)};
        if (per_thread) stream = {StreamKind::kThread, p.id ? p.id->tid : 0};
        // Where the stream is when the record was written is not known: after the AUX data
        // perf had seen of it by then.
        const uint64_t at = aux_spans[stream].empty() ? 0 : aux_spans[stream].back().end;
        auto lost = perf::ParseLost(rec, p.layout);
        builder.CountLostSideband(lost.ok() ? lost->lost : 0);  // (snapshot mode places none)
        losses[stream].push_back({at, LossKindName(LossKind::kLostSideband), 0, true});
        break;
      }
      default:
        break;
    }
  }
  r.timeline = sideband.Build();

  // Trace: AUXTRACE records in file order (each stream's in AUX offset order), with the loss
  // points that come before each.
  const bool snapshots = SnapshotMode(info);
  std::map<StreamId, uint64_t> next_snapshot;
  std::map<StreamId, size_t> placed;  // losses already placed, per stream
  for (auto& [stream, l] : losses) {
    std::stable_sort(l.begin(), l.end(), [](const PendingLoss& a, const PendingLoss& b) {
      return a.aux_offset < b.aux_offset;
    });
  }
  auto place_losses = [&](const StreamId& stream, uint64_t upto) {
    std::vector<PendingLoss>& l = losses[stream];
    size_t& n = placed[stream];
    for (; n < l.size() && l[n].aux_offset <= upto; ++n) {
      if (l[n].sideband) {
        builder.AddLostSideband(stream, l[n].kind);
      } else {
        builder.AddLoss(stream, l[n].kind, l[n].aux_offset, l[n].bytes);
      }
    }
  };
  for (const perf::Auxtrace& a : data.auxtrace) {
    const StreamId stream = AuxStream(a);
    const StreamKey key{stream, snapshots ? static_cast<int64_t>(next_snapshot[stream]++) : -1};
    if (!MaySelect(options, key)) {
      if (a.available != 0) r.present.insert(key);
      continue;  // not even read
    }
    uint64_t time = 0;
    for (const AuxSpan& s : aux_spans[stream]) {
      if (s.begin <= a.offset && a.offset < s.end) {
        time = s.time;
        break;
      }
    }
    PTKIT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, perf::ReadAuxtraceData(source, a));
    if (snapshots) {
      PTKIT_RETURN_IF_ERROR(builder.AddSnapshot(stream, static_cast<uint64_t>(key.snapshot),
                                                a.offset + a.size, time, bytes));
      continue;
    }
    place_losses(stream, a.offset);
    PTKIT_RETURN_IF_ERROR(builder.AddAux(stream, a.offset, time, bytes, 0));
    if (a.available < a.size) {
      builder.AddLoss(stream, "perf.data-cut", a.offset + a.available, a.size - a.available);
    }
  }
  if (!snapshots) {
    for (const auto& [stream, l] : losses) place_losses(stream, ~uint64_t{0});
  }

  for (const Damage& d : data.damage) {
    r.warnings.push_back(fmt::format(
        "{}: {} damaged bytes at offset {} ({}): what they held is missing from this decode "
        "(ptdecode info {} shows the damage)",
        path, d.bytes, d.offset, d.reason, path));
  }
  for (const std::string& w : data.warnings) r.warnings.push_back(absl::StrCat(path, ": ", w));
  for (const std::string& p : r.timeline.problems()) {
    r.warnings.push_back(fmt::format("{}: malformed sideband record: {}: skipped", path, p));
  }
  return builder.Finish();
}

absl::StatusOr<nlohmann::json> PerfDataInfo(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenFileSource(path));
  PTKIT_ASSIGN_OR_RETURN(perf::PerfData data, perf::ReadPerfData(*source));
  nlohmann::json j;
  j["format"] = "perf.data";
  j["file"] = path;
  j["file_size"] = data.file_size;
  j["pipe"] = data.pipe;
  nlohmann::json events = nlohmann::json::array();
  for (const perf::PerfAttr& a : data.attrs) {
    events.push_back({{"type", a.attr.type},
                      {"config", static_cast<uint64_t>(a.attr.config)},
                      {"sample_type", static_cast<uint64_t>(a.attr.sample_type)},
                      {"ids", a.ids.size()},
                      {"name", data.NameOf(events.size())}});
  }
  j["events"] = std::move(events);
  j["groups"] = GroupsJson(data);
  nlohmann::json records = nlohmann::json::object();
  for (const auto& [type, n] : data.CountByType()) records[perf::PerfStatsName(type)] = n;
  j["records"] = std::move(records);
  // AUXTRACE bytes per stream, as `perf report -D` lists the records (cpu, or tid for -1).
  std::map<StreamId, std::pair<uint64_t, uint64_t>> per_stream;  // records, bytes
  for (const perf::Auxtrace& a : data.auxtrace) {
    auto& [n, bytes] = per_stream[AuxStream(a)];
    ++n;
    bytes += a.size;
  }
  nlohmann::json aux = nlohmann::json::array();
  for (const auto& [stream, nb] : per_stream) {
    aux.push_back({{"stream", StreamName(stream)}, {"records", nb.first}, {"bytes", nb.second}});
  }
  j["auxtrace"] = std::move(aux);
  if (const perf::AuxtraceInfo* info = TraceInfo(data)) {
    j["auxtrace_info"] = {{"type", info->type},
                          {"pmu", info->type == kAuxtraceIntelPt ? "intel_pt" : "intel_bts"},
                          {"words", info->priv.size()},
                          {"snapshot_mode", SnapshotMode(info)}};
  }
  // The loss perf recorded: AUX flags and lost sideband records.
  uint64_t truncated = 0, collision = 0, partial = 0, lost_records = 0, lost_events = 0;
  for (size_t i = 0; i < data.records.size(); ++i) {
    const perf::RecordView rec = data.View(i);
    if (rec.type != PERF_RECORD_AUX && rec.type != PERF_RECORD_LOST) continue;
    const perf::PerfAttr* attr = data.AttrOf(rec);
    const perf::SampleIdLayout layout = attr ? attr->layout() : perf::SampleIdLayout{0, false};
    if (rec.type == PERF_RECORD_AUX) {
      auto a = perf::ParseAux(rec, layout);
      if (!a.ok()) continue;
      truncated += a->truncated();
      collision += a->collision();
      partial += a->partial();
    } else if (auto l = perf::ParseLost(rec, layout); l.ok()) {
      ++lost_records;
      lost_events += l->lost;
    }
  }
  j["loss"] = {{"aux_truncated", truncated},
               {"aux_collision", collision},
               {"aux_partial", partial},
               {"lost_records", lost_records},
               {"lost_events", lost_events}};
  const perf::PerfFeatures& f = data.features;
  nlohmann::json feats = nlohmann::json::object();
  if (f.hostname) feats["hostname"] = *f.hostname;
  if (f.osrelease) feats["osrelease"] = *f.osrelease;
  if (f.version) feats["perf_version"] = *f.version;
  if (f.arch) feats["arch"] = *f.arch;
  if (f.cpudesc) feats["cpudesc"] = *f.cpudesc;
  if (f.cpuid) feats["cpuid"] = *f.cpuid;
  if (f.nr_cpus_online) feats["nr_cpus_online"] = *f.nr_cpus_online;
  if (f.nr_cpus_available) feats["nr_cpus_available"] = *f.nr_cpus_available;
  if (f.cmdline) feats["cmdline"] = *f.cmdline;
  feats["build_ids"] = f.build_ids.size();
  // Every feature the file has (pipe mode's TRACING_DATA record gives TRACING_DATA), by perf's
  // name, in id order.
  std::set<uint32_t> ids(f.present.begin(), f.present.end());
  for (const perf::KeptFeature& k : f.kept) ids.insert(k.id);
  nlohmann::json names = nlohmann::json::array();
  for (uint32_t id : ids) names.push_back(perf::PerfFeatureName(id));
  feats["present"] = std::move(names);
  j["features"] = std::move(feats);
  j["metadata"] = PerfDataMetadata(data);
  nlohmann::json damage = nlohmann::json::array();
  for (const Damage& d : data.damage) {
    damage.push_back({{"offset", d.offset}, {"bytes", d.bytes}, {"reason", d.reason}});
  }
  j["damage"] = std::move(damage);
  j["warnings"] = data.warnings;
  return j;
}

std::string FormatPerfDataInfoText(const nlohmann::json& info) {
  std::string t;
  t += fmt::format("file: {} (perf.data, {} mode), {} bytes\n", info.value("file", ""),
                   info.value("pipe", false) ? "pipe" : "file", info.value("file_size", 0ull));
  const nlohmann::json& feats = info["features"];
  for (const char* key : {"hostname", "osrelease", "perf_version", "cpudesc", "cpuid"}) {
    if (feats.contains(key)) t += fmt::format("{}: {}\n", key, feats[key].get<std::string>());
  }
  if (feats.contains("cmdline")) {
    std::string cmd;
    for (const auto& w : feats["cmdline"]) cmd += (cmd.empty() ? "" : " ") + w.get<std::string>();
    t += fmt::format("cmdline: {}\n", cmd);
  }
  if (feats.contains("present") && !feats["present"].empty()) {
    std::string names;
    for (const auto& n : feats["present"]) {
      names += (names.empty() ? "" : " ") + n.get<std::string>();
    }
    t += fmt::format("features: {}\n", names);
  }
  t += fmt::format("events: {}\n", info["events"].size());
  for (const auto& e : info["events"]) {
    const std::string name = e.value("name", std::string());
    t += fmt::format("  {}type {} config {:#x} sample_type {:#x} ({} ids)\n",
                     name.empty() ? "" : name + ": ", e["type"].get<uint64_t>(),
                     e["config"].get<uint64_t>(), e["sample_type"].get<uint64_t>(),
                     e["ids"].get<uint64_t>());
  }
  for (const auto& g : info.value("groups", nlohmann::json::array())) {
    std::string names;
    for (const auto& n : g["names"]) {
      names += fmt::format("{}{}", names.empty() ? "" : ",", n.get<std::string>());
    }
    t += fmt::format(
        "group {}: {{{}}}, leader event {}, {}{}\n", g["name"].get<std::string>(), names,
        g["leader"].get<uint64_t>(), Counted(g["events"].get<uint64_t>(), "event"),
        g["missing"].get<uint64_t>() != 0
            ? fmt::format(" ({} of them not in the file's attrs)", g["missing"].get<uint64_t>())
            : "");
  }
  if (info.contains("auxtrace_info")) {
    const auto& a = info["auxtrace_info"];
    t += fmt::format("auxtrace: {} (type {}), {} private words{}\n", a["pmu"].get<std::string>(),
                     a["type"].get<uint64_t>(), a["words"].get<uint64_t>(),
                     a["snapshot_mode"].get<bool>() ? ", snapshot mode" : "");
  }
  for (const auto& a : info["auxtrace"]) {
    t += fmt::format("  {}: {} bytes in {}\n", a["stream"].get<std::string>(),
                     a["bytes"].get<uint64_t>(), Counted(a["records"].get<uint64_t>(), "record"));
  }
  std::string recs;
  for (const auto& [name, n] : info["records"].items()) {
    recs += fmt::format("{}{} {}", recs.empty() ? "" : ", ", name, n.get<uint64_t>());
  }
  t += fmt::format("records: {}\n", recs);
  const auto& l = info["loss"];
  t += fmt::format(
      "loss: {} AUX truncated, {} AUX collision, {} AUX partial, {} LOST records ({} events)\n",
      l["aux_truncated"].get<uint64_t>(), l["aux_collision"].get<uint64_t>(),
      l["aux_partial"].get<uint64_t>(), l["lost_records"].get<uint64_t>(),
      l["lost_events"].get<uint64_t>());
  for (const auto& d : info["damage"]) {
    t += fmt::format("damage: {} bytes at offset {}: {}\n", d["bytes"].get<uint64_t>(),
                     d["offset"].get<uint64_t>(), d["reason"].get<std::string>());
  }
  for (const auto& w : info["warnings"]) t += fmt::format("warning: {}\n", w.get<std::string>());
  return t;
}

}  // namespace ptkit::decoder
