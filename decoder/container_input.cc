#include "decoder/container_input.h"

#include <sys/mman.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "decoder/bts.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_records.h"
#include "ptkit/sideband.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

// One contiguous piece of a stream's AUX bytes, and what was lost just before it.
struct Piece {
  uint64_t aux_offset = 0;
  uint64_t time = 0;
  std::vector<uint8_t> bytes;
  std::vector<LossInfo> losses_before;
};

struct Stream {
  std::vector<Piece> pieces;
  uint64_t next_aux = 0;
  bool break_next = true;  // the next AUX record starts a new piece
  std::vector<LossInfo> pending_losses;
  uint64_t bytes = 0;
};

struct Captured {
  uint64_t address = 0;
  std::string path;
  std::vector<uint8_t> bytes;
};

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

std::string AuxFlagKind(uint64_t flags) {
  if (flags & kAuxTruncated) return "truncated";
  if (flags & kAuxCollision) return "collision";
  if (flags & kAuxPartial) return "partial";
  return "";
}

std::string LossKindText(LossKind kind) {
  switch (kind) {
    case LossKind::kAuxTruncated:
      return "truncated";
    case LossKind::kAuxCollision:
      return "collision";
    case LossKind::kAuxPartial:
      return "partial";
    case LossKind::kAuxOverwritten:
      return "overwritten";
    case LossKind::kLostSideband:
      return "lost-sideband";
    default:
      return "lost";
  }
}

perf::SampleIdLayout LayoutFromMetadata(const nlohmann::json& metadata) {
  perf::SampleIdLayout layout;
  if (metadata.contains("attrs") && metadata["attrs"].is_array()) {
    for (const auto& a : metadata["attrs"]) {
      if (a.value("sample_id_all", false)) {
        layout.sample_type = a.value("sample_type", uint64_t{0});
        layout.sample_id_all = true;
        return layout;
      }
    }
  }
  return layout;
}

// Per-CPU streams: when the trace's time says another process runs on the CPU, switch to
// its images and tell the sink.
class CpuSwitcher : public ImageSwitcher {
 public:
  using ImageFor = std::function<ProgramImage*(uint32_t pid)>;
  CpuSwitcher(std::string name, uint32_t cpu, uint32_t pid, const Sideband& timeline,
              const TscConversion& time, ImageFor image_for, Sink& sink)
      : name_(std::move(name)),
        cpu_(cpu),
        pid_(pid),
        timeline_(timeline),
        time_(time),
        image_for_(std::move(image_for)),
        sink_(sink) {}
  // The images in use now (null: the stream's first).
  const ProgramImage* current() const { return current_; }
  const ProgramImage* ImageAt(uint64_t tsc) override {
    const uint64_t t = time_.ToPerfTime(tsc);
    std::optional<TaskId> task = timeline_.TaskOnCpu(cpu_, t);
    if (!task || task->pid == pid_) return nullptr;  // idle or the same process
    ProgramImage* image = image_for_(task->pid);
    if (image == nullptr) return nullptr;
    pid_ = task->pid;
    current_ = image;
    StreamInfo info;
    info.name = name_;
    info.pid = pid_;
    info.tid = task->tid;
    info.comm = timeline_.CommAt(task->tid, t);
    info.image = image;
    info.context_switch = true;
    sink_.OnStream(info);
    return image;
  }

 private:
  std::string name_;
  uint32_t cpu_;
  uint32_t pid_;
  const Sideband& timeline_;
  TscConversion time_;
  ImageFor image_for_;
  Sink& sink_;
  const ProgramImage* current_ = nullptr;
};

std::optional<TscConversion> TimeConversionFromMetadata(const nlohmann::json& metadata) {
  if (!metadata.contains("time_conversion") || !metadata["time_conversion"].is_object()) {
    return std::nullopt;
  }
  const auto& tc = metadata["time_conversion"];
  if (!tc.value("cap_user_time_zero", false)) return std::nullopt;
  TscConversion c;
  c.time_zero = tc.value("time_zero", uint64_t{0});
  c.time_mult = tc.value("time_mult", 0u);
  c.time_shift = static_cast<uint16_t>(tc.value("time_shift", 0u));
  if (c.time_mult == 0) return std::nullopt;
  return c;
}

}  // namespace

TraceConfig TraceConfigFromMetadata(const nlohmann::json& metadata) {
  TraceConfig config;
  if (!metadata.is_object()) return config;
  if (metadata.contains("cpu") && metadata["cpu"].is_object()) {
    const auto& cpu = metadata["cpu"];
    if (cpu.value("vendor", std::string()) == "GenuineIntel") {
      pt_cpu c = {};
      c.vendor = pcv_intel;
      c.family = static_cast<uint16_t>(cpu.value("family", 0u));
      c.model = static_cast<uint8_t>(cpu.value("model", 0u));
      c.stepping = static_cast<uint8_t>(cpu.value("stepping", 0u));
      pt_errata errata;
      if (pt_cpu_errata(&errata, &c) >= 0) config.cpu = c;
    }
    if (cpu.contains("cpuid_15h") && cpu["cpuid_15h"].is_object()) {
      config.cpuid_0x15_eax = cpu["cpuid_15h"].value("tsc_ratio_denominator", 0u);
      config.cpuid_0x15_ebx = cpu["cpuid_15h"].value("tsc_ratio_numerator", 0u);
    }
  }
  if (metadata.contains("pmu") && metadata["pmu"].is_object()) {
    const auto& pmu = metadata["pmu"];
    config.nom_freq = static_cast<uint8_t>(pmu.value("max_nonturbo_ratio", 0u));
    uint64_t type = pmu.value("type", uint64_t{0});
    if (metadata.contains("attrs") && metadata["attrs"].is_array()) {
      for (const auto& a : metadata["attrs"]) {
        if (a.value("type", uint64_t{~0ull}) == type) {
          config.mtc_freq = static_cast<uint8_t>((a.value("config", uint64_t{0}) >> 14) & 0xf);
          break;
        }
      }
    }
  }
  return config;
}

absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink) {
  PTKIT_ASSIGN_OR_RETURN(ContainerReader reader, ContainerReader::Open(path));
  nlohmann::json metadata = nlohmann::json::object();
  std::unique_ptr<SidebandBuilder> sideband;
  // AUX streams (snapshot -1) and each snapshot of a stream, decoded on their own.
  struct Key {
    StreamId id;
    int64_t snapshot = -1;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, Stream> streams;
  std::map<uint32_t, std::vector<Captured>> captured;  // pid -> code captured at record time

  RecordView rec;
  for (;;) {
    PTKIT_ASSIGN_OR_RETURN(bool more, reader.Next(rec));
    if (!more) break;
    switch (rec.type) {
      case RecordType::kMetadata: {
        auto j = nlohmann::json::parse(rec.payload.begin(), rec.payload.end(), nullptr, false);
        if (j.is_object()) metadata = std::move(j);
        break;
      }
      case RecordType::kSideband: {
        auto sb = ParseSideband(rec.payload);
        if (!sb.ok()) break;  // info reports malformed records; decoding goes on
        if (!sideband) sideband = std::make_unique<SidebandBuilder>(LayoutFromMetadata(metadata));
        sideband->Add(sb->cpu, sb->records);
        break;
      }
      case RecordType::kAux: {
        auto aux = ParseAux(rec.payload);
        if (!aux.ok()) break;
        Stream& s = streams[{aux->stream, -1}];
        if (!s.pieces.empty() && aux->aux_offset > s.next_aux) {
          s.pending_losses.push_back({"discontinuity", s.next_aux, aux->aux_offset - s.next_aux});
          s.break_next = true;
        } else if (!s.pieces.empty() && aux->aux_offset < s.next_aux) {
          s.break_next = true;  // overlap or restart: decode it as a new piece
        }
        if (s.break_next || !s.pending_losses.empty()) {
          s.pieces.push_back({aux->aux_offset, aux->time, {}, std::move(s.pending_losses)});
          s.pending_losses.clear();
          s.break_next = false;
        }
        Piece& p = s.pieces.back();
        p.bytes.insert(p.bytes.end(), aux->data.begin(), aux->data.end());
        s.bytes += aux->data.size();
        s.next_aux = aux->aux_offset + aux->data.size();
        std::string kind = AuxFlagKind(aux->flags);
        if (!kind.empty()) s.pending_losses.push_back({kind, s.next_aux, 0});
        break;
      }
      case RecordType::kLoss: {
        auto loss = ParseLoss(rec.payload);
        if (!loss.ok() || loss->kind == LossKind::kLostSideband) break;
        Stream& s = streams[{loss->stream, -1}];
        std::string kind = LossKindText(loss->kind);
        // The AUX record's flag already marked this point: add what the loss record knows.
        bool merged = false;
        for (LossInfo& l : s.pending_losses) {
          if (l.kind == kind && l.bytes == 0) {
            l.bytes = loss->bytes;
            merged = true;
            break;
          }
        }
        if (!merged) s.pending_losses.push_back({kind, loss->aux_offset, loss->bytes});
        break;
      }
      case RecordType::kSnapshot: {
        auto snap = ParseSnapshot(rec.payload);
        if (!snap.ok()) break;
        Stream& s = streams[{snap->stream, static_cast<int64_t>(snap->sequence)}];
        // A snapshot is the newest part of an overwritten ring: older trace is gone.
        s.pieces.push_back({snap->aux_head - snap->data.size(),
                            snap->time,
                            std::vector<uint8_t>(snap->data.begin(), snap->data.end()),
                            {}});
        s.bytes += snap->data.size();
        break;
      }
      case RecordType::kCode: {
        auto code = ParseCode(rec.payload);
        if (!code.ok() || code->bytes.empty()) break;
        captured[code->pid].push_back(
            {code->address, std::string(code->path),
             std::vector<uint8_t>(code->bytes.begin(), code->bytes.end())});
        break;
      }
      default:
        break;
    }
  }
  Sideband timeline = sideband ? sideband->Build() : Sideband();
  TraceConfig config = options.config ? *options.config : TraceConfigFromMetadata(metadata);
  // intel_bts recordings hold 24-byte branch records instead of PT packets.
  const bool bts = metadata.contains("pmu") && metadata["pmu"].is_object() &&
                   metadata["pmu"].value("name", std::string()) == "intel_bts";

  std::vector<std::string> warnings;
  std::set<std::string> warned;
  // Images per process, built when a stream first needs them.
  std::map<uint32_t, std::unique_ptr<ProgramImage>> images;
  auto image_for = [&](uint32_t pid) -> absl::StatusOr<ProgramImage*> {
    auto it = images.find(pid);
    if (it != images.end()) return it->second.get();
    PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ProgramImage> image, ProgramImage::Create());
    const std::vector<Captured>& code = captured[pid];
    for (const Captured& c : code) image->AddBytes(c.path, c.address, c.bytes);
    if (const std::vector<Mapping>* maps = timeline.AllMappings(pid)) {
      for (const Mapping& m : *maps) {
        if (!(m.prot & PROT_EXEC) || m.path.empty() || m.path[0] != '/') continue;
        bool covered = false;
        for (const Captured& c : code) {
          covered |= c.address < m.end && m.start < c.address + c.bytes.size();
        }
        if (covered) continue;
        const std::string file = options.sysroot + m.path;
        absl::Status st = image->AddFileMapping(file, m.start, m.end - m.start, m.pgoff);
        if (!st.ok()) {
          image->AddMissing(file, m.start, m.end);
        } else if (!m.build_id.empty() && warned.insert(file).second) {
          // The recording names the build it ran; a different file decodes wrongly.
          auto id = ReadBuildId(file);
          if (id.ok() && *id != m.build_id) {
            warnings.push_back(
                fmt::format("{}: build-id {} differs from the recorded {}; decoding may be wrong",
                            file, id->empty() ? std::string("(none)") : Hex(*id), Hex(m.build_id)));
          }
        }
      }
    }
    ProgramImage* raw = image.get();
    images.emplace(pid, std::move(image));
    return raw;
  };

  DecodeTotals totals;
  for (const auto& [key, stream] : streams) {
    const StreamId& id = key.id;
    if (stream.pieces.empty()) continue;
    if (options.snapshot && key.snapshot != static_cast<int64_t>(*options.snapshot)) continue;
    if (options.cpu && (id.kind != StreamKind::kCpu || id.id != *options.cpu)) continue;
    uint32_t pid = 0, tid = 0;
    if (id.kind == StreamKind::kThread) {
      tid = static_cast<uint32_t>(id.id);
      pid = timeline.PidOfTid(tid).value_or(tid);
    } else if (auto task =
                   timeline.TaskOnCpu(static_cast<uint32_t>(id.id), stream.pieces.front().time)) {
      pid = task->pid;
      tid = task->tid;
    } else if (std::vector<uint32_t> pids = timeline.Pids(); pids.size() == 1) {
      pid = pids.front();
    }
    StreamInfo info;
    if (options.tid && tid != *options.tid) continue;
    info.name = key.snapshot < 0 ? StreamName(id) : Cat(StreamName(id), " snapshot ", key.snapshot);
    info.pid = pid;
    info.tid = tid;
    info.comm = tid != 0 ? timeline.CommAt(tid, stream.pieces.front().time) : "";
    info.bytes = stream.bytes;
    PTKIT_ASSIGN_OR_RETURN(ProgramImage * image, image_for(pid));
    info.image = image;
    ++totals.streams;
    sink.OnStream(info);
    // A per-CPU stream follows the tasks scheduled on its CPU (needs TSC in the trace and
    // the recording's time conversion).
    std::unique_ptr<CpuSwitcher> switcher;
    if (id.kind == StreamKind::kCpu && !bts) {
      if (std::optional<TscConversion> time = TimeConversionFromMetadata(metadata)) {
        switcher = std::make_unique<CpuSwitcher>(
            info.name, static_cast<uint32_t>(id.id), pid, timeline, *time,
            [&](uint32_t p) -> ProgramImage* {
              auto image = image_for(p);
              return image.ok() ? *image : nullptr;
            },
            sink);
      }
    }
    for (const Piece& piece : stream.pieces) {
      for (const LossInfo& loss : piece.losses_before) {
        ++totals.losses;
        totals.lost_bytes += loss.bytes;
        sink.OnLoss(loss);
      }
      if (bts) {
        PTKIT_RETURN_IF_ERROR(DecodeBtsInto(piece.bytes, *image, sink, totals, piece.aux_offset));
      } else {
        const ProgramImage* now =
            switcher && switcher->current() != nullptr ? switcher->current() : image;
        PTKIT_RETURN_IF_ERROR(
            DecodeInto(piece.bytes, config, *now, sink, totals, piece.aux_offset, switcher.get()));
      }
    }
    for (const LossInfo& loss : stream.pending_losses) {  // at the end of the stream
      ++totals.losses;
      totals.lost_bytes += loss.bytes;
      sink.OnLoss(loss);
    }
  }
  totals.warnings = std::move(warnings);
  PTKIT_RETURN_IF_ERROR(sink.Finish(totals));
  return totals;
}

absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options) {
  class Counter : public Sink {};
  Counter sink;
  PTKIT_ASSIGN_OR_RETURN(DecodeTotals t, DecodeContainer(path, options, sink));
  nlohmann::json codes = nlohmann::json::object();
  for (const auto& [code, n] : t.errors_by_code) codes[IptErrorName(code)] = n;
  return nlohmann::json{{"streams", t.streams},   {"instructions", t.instructions},
                        {"blocks", t.blocks},     {"syncs", t.syncs},
                        {"errors", t.errors},     {"gaps", t.gaps},
                        {"losses", t.losses},     {"lost_bytes", t.lost_bytes},
                        {"errors_by_code", codes}};
}

}  // namespace ptkit::decoder
