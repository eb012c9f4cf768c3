#include "ptkit/info.h"

#include <linux/perf_event.h>

#include <cstring>
#include <map>
#include <optional>
#include <span>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fmt/format.h"
#include "ptkit/aux_sample.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_data.h"
#include "ptkit/perf_records.h"
#include "ptkit/recording_metadata.h"
#include "ptkit/sideband.h"
#include "ptkit/status.h"

namespace ptkit {
namespace {

using nlohmann::json;

struct KindTotals {
  uint64_t count = 0, stored = 0, raw = 0, compressed = 0;
};
struct StreamTotals {
  uint64_t aux_records = 0, aux_bytes = 0, snapshots = 0, snapshot_bytes = 0;
  uint64_t truncated = 0, collisions = 0, partial = 0;
};
struct LossTotals {
  uint64_t events = 0, bytes = 0;
};

std::string Bytes(uint64_t n) {
  if (n < 10 * 1024) return fmt::format("{} B", n);
  if (n < 10 * 1024 * 1024) return fmt::format("{:.1f} KiB", n / 1024.0);
  if (n < uint64_t{10} * 1024 * 1024 * 1024) return fmt::format("{:.1f} MiB", n / 1048576.0);
  return fmt::format("{:.2f} GiB", n / 1073741824.0);
}

std::string HexBytes(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace

absl::StatusOr<json> ContainerInfo(const std::string& path) {
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader, ContainerReader::Open(path));
  std::map<uint16_t, KindTotals> kinds;
  std::map<StreamId, StreamTotals> streams;
  std::map<std::pair<std::string, std::string>, LossTotals> losses;
  std::map<int32_t, std::map<std::string, uint64_t>> sideband;  // cpu -> perf type -> count
  json metadata = json::object();
  json counters = json::array();
  json problems = json::array();  // malformed payloads inside valid records
  uint64_t code_bytes = 0, code_identities = 0;
  // ptrecord --archive: the files archived whole, and the debug files archived (kCodeDebugFile).
  uint64_t archived_files = 0, archived_bytes = 0;
  json debug_files = json::array();
  uint64_t samples = 0, sample_aux_bytes = 0;  // AUX samples (ptrecord --aux-sample)
  json perf_features = json::array();          // a perf.data's, kept for export

  RecordView rec;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(rec));
    if (!more) break;
    KindTotals& k = kinds[static_cast<uint16_t>(rec.type)];
    ++k.count;
    k.stored += rec.stored_bytes;
    k.raw += rec.payload.size();
    k.compressed += rec.compressed;
    auto problem = [&](const absl::Status& s) {
      problems.push_back({{"offset", rec.offset}, {"error", std::string(s.message())}});
    };
    switch (rec.type) {
      case RecordType::kMetadata: {
        absl::StatusOr<json> m = ParseMetadataRecord(rec.payload);
        if (m.ok()) {
          MergeMetadata(metadata, *m);
        } else {
          problem(m.status());
        }
        break;
      }
      case RecordType::kSideband: {
        auto sb = ParseSideband(rec.payload);
        if (!sb.ok()) {
          problem(sb.status());
          break;
        }
        auto& per_type = sideband[sb->cpu];
        for (perf::RecordReader reader(sb->records);;) {
          absl::StatusOr<std::optional<perf::RecordView>> r = reader.Next();
          if (!r.ok()) {
            problem(absl::DataLossError(
                absl::StrCat("sideband of cpu ", sb->cpu, ": ", r.status().message())));
            break;
          }
          if (!r->has_value()) break;
          ++per_type[absl::AsciiStrToUpper(perf::RecordTypeName((*r)->type))];
          if (absl::Status body = CheckRecordBody(**r, {0, false}); !body.ok()) {
            problem(absl::DataLossError(
                absl::StrCat("sideband of cpu ", sb->cpu, ": ", body.message())));
          }
        }
        break;
      }
      case RecordType::kAux: {
        auto a = ParseAux(rec.payload);
        if (!a.ok()) {
          problem(a.status());
          break;
        }
        StreamTotals& st = streams[a->stream];
        ++st.aux_records;
        st.aux_bytes += a->data.size();
        st.truncated += (a->flags & kAuxTruncated) != 0;
        st.collisions += (a->flags & kAuxCollision) != 0;
        st.partial += (a->flags & kAuxPartial) != 0;
        break;
      }
      case RecordType::kSnapshot: {
        auto sn = ParseSnapshot(rec.payload);
        if (!sn.ok()) {
          problem(sn.status());
          break;
        }
        StreamTotals& st = streams[sn->stream];
        ++st.snapshots;
        st.snapshot_bytes += sn->data.size();
        break;
      }
      case RecordType::kLoss: {
        auto l = ParseLoss(rec.payload);
        if (!l.ok()) {
          problem(l.status());
          break;
        }
        LossTotals& t = losses[{StreamName(l->stream), LossKindName(l->kind)}];
        t.events += l->count;
        t.bytes += l->bytes;
        break;
      }
      case RecordType::kCode: {
        auto c = ParseCode(rec.payload);
        if (!c.ok()) {
          problem(c.status());
          break;
        }
        code_bytes += c->bytes.size();
        code_identities += c->bytes.empty();
        if ((c->flags & kCodeArchivedFile) && (c->flags & kCodeDebugFile)) {
          debug_files.push_back({{"path", std::string(c->path)},
                                 {"build_id", HexBytes(c->build_id)},
                                 {"bytes", c->bytes.size()}});
        } else if (c->flags & kCodeArchivedFile) {
          ++archived_files;
          archived_bytes += c->bytes.size();
        }
        break;
      }
      case RecordType::kCounters: {
        auto cs = ParseCounters(rec.payload);
        if (!cs.ok()) {
          problem(cs.status());
          break;
        }
        for (const CounterValue& v : *cs) {
          counters.push_back({{"name", v.name},
                              {"cpu", v.cpu},
                              {"value", v.value},
                              {"time_enabled", v.time_enabled},
                              {"time_running", v.time_running}});
        }
        break;
      }
      case RecordType::kSample: {
        auto sa = ParseSample(rec.payload);
        absl::StatusOr<perf::Sample> parsed =
            sa.ok() ? perf::ParseSample(perf::RecordView{9, 0, sa->record}, sa->sample_type)
                    : absl::StatusOr<perf::Sample>(sa.status());
        if (!parsed.ok()) {
          problem(parsed.status());
          break;
        }
        ++samples;
        sample_aux_bytes += parsed->aux.size();
        break;
      }
      case RecordType::kPerfFeature: {
        auto f = ParsePerfFeature(rec.payload);
        if (!f.ok()) {
          problem(f.status());
          break;
        }
        perf_features.push_back(
            {{"name", perf::PerfFeatureName(f->id)}, {"bytes", f->bytes.size()}});
        break;
      }
      case RecordType::kFooter:
        break;
    }
  }

  const ReadReport& report = reader.report();
  json out;
  out["file"] = path;
  out["file_size"] = report.file_size;
  out["format_version"] = kFormatVersion;
  out["footer_present"] = report.footer_present;
  out["records"] = report.records;
  // The typed reading shows what decoding will say about the metadata; a member it cannot
  // read is shown as it is.
  std::vector<std::string> metadata_warnings;
  if (absl::StatusOr<RecordingMetadata> typed = RecordingMetadata::FromJson(metadata); typed.ok()) {
    out["metadata"] = typed->ToJson();
    metadata_warnings = std::move(typed->warnings);
    // What the recorder warned of, as every decode says it (sweep 35a L1: only inside the
    // metadata dump, cut at 97 characters).
    for (const std::string& w : typed->RecorderWarnings()) {
      metadata_warnings.push_back("recorded with a warning: " + w);
    }
  } else {
    out["metadata"] = metadata;
    metadata_warnings.push_back(
        absl::StrCat(typed.status().message(), ": the decoding sub-commands stop on it"));
  }
  uint64_t stored_total = kFileHeaderSize, raw_total = 0;
  json jkinds = json::array();
  for (const auto& [type, k] : kinds) {
    jkinds.push_back({{"kind", RecordTypeName(type)},
                      {"count", k.count},
                      {"stored_bytes", k.stored},
                      {"raw_bytes", k.raw},
                      {"compressed_records", k.compressed}});
    stored_total += k.stored;
    raw_total += k.raw;
  }
  out["kinds"] = jkinds;
  json jstreams = json::array();
  for (const auto& [id, st] : streams) {
    jstreams.push_back({{"stream", StreamName(id)},
                        {"aux_records", st.aux_records},
                        {"aux_bytes", st.aux_bytes},
                        {"snapshots", st.snapshots},
                        {"snapshot_bytes", st.snapshot_bytes},
                        {"truncated", st.truncated},
                        {"collisions", st.collisions},
                        {"partial", st.partial}});
  }
  out["streams"] = jstreams;
  json jside = json::array();
  for (const auto& [cpu, per_type] : sideband) {
    json types = json::object();
    for (const auto& [name, n] : per_type) types[name] = n;
    jside.push_back({{"cpu", cpu}, {"records", types}});
  }
  out["sideband"] = jside;
  json jloss = json::array();
  LossTotals loss_total;
  for (const auto& [key, t] : losses) {
    jloss.push_back(
        {{"stream", key.first}, {"kind", key.second}, {"events", t.events}, {"bytes", t.bytes}});
    loss_total.events += t.events;
    loss_total.bytes += t.bytes;
  }
  out["loss"] = jloss;
  out["loss_totals"] = {{"events", loss_total.events}, {"bytes", loss_total.bytes}};
  out["code"] = {{"bytes", code_bytes}, {"identities", code_identities}};
  if (archived_files != 0 || !debug_files.empty()) {
    out["code"]["archived_files"] = {{"count", archived_files}, {"bytes", archived_bytes}};
    out["code"]["debug_files"] = debug_files;
  }
  if (samples > 0) out["samples"] = {{"count", samples}, {"aux_bytes", sample_aux_bytes}};
  if (!perf_features.empty()) out["perf_features"] = perf_features;
  out["counters"] = counters;
  out["totals"] = {{"stored_bytes", stored_total},
                   {"raw_bytes", raw_total},
                   {"compression_ratio",
                    stored_total == 0 ? 0.0 : static_cast<double>(raw_total) / stored_total}};
  json jdamage = json::array();
  for (const Damage& d : report.damage) {
    jdamage.push_back(
        {{"offset", d.offset}, {"bytes", d.bytes}, {"records", d.records}, {"reason", d.reason}});
  }
  out["damage"] = jdamage;
  out["lost_bytes"] = report.lost_bytes();
  out["lost_records"] = report.lost_records();
  out["malformed"] = problems;
  json unknown = json::object();
  for (const auto& [type, n] : report.unknown_types) unknown[std::to_string(type)] = n;
  out["unknown_kinds"] = unknown;
  out["warnings"] = report.warnings;
  for (const std::string& w : metadata_warnings) out["warnings"].push_back(w);
  return out;
}

std::string FormatInfoText(const json& info) {
  std::string s;
  auto line = [&s](std::string_view label, const std::string& value) {
    s += fmt::format("{:<12} {}\n", label, value);
  };
  line("file:",
       fmt::format("{} ({} bytes, format {})", info["file"].get<std::string>(),
                   info["file_size"].get<uint64_t>(), info["format_version"].get<uint32_t>()));
  line("footer:", info["footer_present"].get<bool>()
                      ? "present (closed cleanly)"
                      : "MISSING (not closed cleanly: recorder killed, disk full, or still "
                        "being written)");
  if (info["metadata"].empty()) {
    line("metadata:", "none");
  } else {
    s += "metadata:\n";
    for (const auto& [key, value] : info["metadata"].items()) {
      std::string v = value.is_string()
                          ? value.get<std::string>()
                          : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (v.size() > 100) v = v.substr(0, 97) + "...";
      s += fmt::format("  {:<22} {}\n", key, v);
    }
  }
  s += fmt::format("records:     {}\n  {:<10} {:>10} {:>12} {:>12} {:>7}\n",
                   info["records"].get<uint64_t>(), "kind", "count", "stored", "raw", "ratio");
  for (const json& k : info["kinds"]) {
    uint64_t stored = k["stored_bytes"], raw = k["raw_bytes"];
    s += fmt::format("  {:<10} {:>10} {:>12} {:>12} {:>6.2f}x\n", k["kind"].get<std::string>(),
                     k["count"].get<uint64_t>(), Bytes(stored), Bytes(raw),
                     stored ? static_cast<double>(raw) / stored : 0.0);
  }
  const json& t = info["totals"];
  line("total:",
       fmt::format("{} stored, {} raw, compression {:.2f}x",
                   Bytes(t["stored_bytes"].get<uint64_t>()), Bytes(t["raw_bytes"].get<uint64_t>()),
                   t["compression_ratio"].get<double>()));
  if (info["streams"].empty()) line("streams:", "none");
  for (const json& st : info["streams"]) {
    line("stream:",
         fmt::format("{}: aux {} records, {}; snapshots {}, {}; truncated {}, "
                     "collisions {}, partial {}",
                     st["stream"].get<std::string>(), st["aux_records"].get<uint64_t>(),
                     Bytes(st["aux_bytes"].get<uint64_t>()), st["snapshots"].get<uint64_t>(),
                     Bytes(st["snapshot_bytes"].get<uint64_t>()), st["truncated"].get<uint64_t>(),
                     st["collisions"].get<uint64_t>(), st["partial"].get<uint64_t>()));
  }
  for (const json& sb : info["sideband"]) {
    std::string types;
    for (const auto& [name, n] : sb["records"].items()) {
      types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, n.get<uint64_t>());
    }
    int cpu = sb["cpu"];
    line("sideband:", fmt::format("{}: {}", cpu < 0 ? "per-thread" : fmt::format("cpu {}", cpu),
                                  types.empty() ? "no records" : types));
  }
  if (info["code"]["bytes"].get<uint64_t>() || info["code"]["identities"].get<uint64_t>()) {
    line("code:", fmt::format("{} captured, {} file identities",
                              Bytes(info["code"]["bytes"].get<uint64_t>()),
                              info["code"]["identities"].get<uint64_t>()));
  }
  if (info["code"].contains("archived_files")) {
    const json& a = info["code"]["archived_files"];
    uint64_t debug_bytes = 0;
    for (const json& d : info["code"]["debug_files"]) debug_bytes += d["bytes"].get<uint64_t>();
    line("archived:", fmt::format("{} files whole ({}), {} debug files ({})",
                                  a["count"].get<uint64_t>(), Bytes(a["bytes"].get<uint64_t>()),
                                  info["code"]["debug_files"].size(), Bytes(debug_bytes)));
    for (const json& d : info["code"]["debug_files"]) {
      const std::string id = d["build_id"].get<std::string>();
      line("debug file:", fmt::format("{} ({}, build-id {})", d["path"].get<std::string>(),
                                      Bytes(d["bytes"].get<uint64_t>()), id.empty() ? "none" : id));
    }
  }
  if (info.contains("perf_features")) {
    std::vector<std::string> kept;
    for (const json& f : info["perf_features"]) {
      kept.push_back(
          fmt::format("{} ({})", f["name"].get<std::string>(), Bytes(f["bytes"].get<uint64_t>())));
    }
    line("perf features:", absl::StrJoin(kept, ", ") + " (a perf.data's, for export)");
  }
  if (info.contains("samples")) {
    line("samples:", fmt::format("{} AUX samples, {} of trace (ptdecode samples)",
                                 info["samples"]["count"].get<uint64_t>(),
                                 Bytes(info["samples"]["aux_bytes"].get<uint64_t>())));
  }
  for (const json& c : info["counters"]) {
    line(
        "counter:",
        fmt::format("{} = {}{}", c["name"].get<std::string>(), c["value"].get<uint64_t>(),
                    c["cpu"].get<int>() >= 0 ? fmt::format(" (cpu {})", c["cpu"].get<int>()) : ""));
  }
  if (info["loss"].empty()) {
    line("loss:", "none recorded");
  } else {
    // A loss record says 0 bytes where the size is unknown (a process killed before its
    // trace was flushed, a truncated AUX area): said so, not counted as none.
    uint64_t unknown = 0;
    for (const json& l : info["loss"]) {
      if (l["bytes"].get<uint64_t>() == 0) unknown += l["events"].get<uint64_t>();
    }
    line("loss:",
         fmt::format("{} events, {} in total{}", info["loss_totals"]["events"].get<uint64_t>(),
                     Bytes(info["loss_totals"]["bytes"].get<uint64_t>()),
                     unknown == 0 ? "" : fmt::format(" (+ {} of unknown size)", unknown)));
    for (const json& l : info["loss"]) {
      const uint64_t bytes = l["bytes"].get<uint64_t>();
      s += fmt::format("  {}: {} x{}, {}\n", l["stream"].get<std::string>(),
                       l["kind"].get<std::string>(), l["events"].get<uint64_t>(),
                       bytes == 0 ? "size unknown" : Bytes(bytes));
    }
  }
  if (info["damage"].empty()) {
    line("damage:", "none");
  } else {
    line("damage:", fmt::format("{} bytes and {} records lost", info["lost_bytes"].get<uint64_t>(),
                                info["lost_records"].get<uint64_t>()));
    for (const json& d : info["damage"]) {
      s += fmt::format("  offset {}: {} bytes, {} records: {}\n", d["offset"].get<uint64_t>(),
                       d["bytes"].get<uint64_t>(), d["records"].get<uint64_t>(),
                       d["reason"].get<std::string>());
    }
  }
  for (const json& m : info["malformed"]) {
    line("malformed:", fmt::format("record at offset {}: {}", m["offset"].get<uint64_t>(),
                                   m["error"].get<std::string>()));
  }
  for (const auto& [type, n] : info["unknown_kinds"].items()) {
    line("skipped:", fmt::format("{} records of unknown kind {}", n.get<uint64_t>(), type));
  }
  for (const json& w : info["warnings"]) line("warning:", w.get<std::string>());
  return s;
}

}  // namespace ptkit
