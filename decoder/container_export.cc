#include "decoder/container_export.h"

#include <sys/mman.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "decoder/progress.h"
#include "fmt/format.h"
#include "ptkit/container_format.h"
#include "ptkit/container_writer.h"
#include "ptkit/elf_file.h"
#include "ptkit/perf_records.h"
#include "ptkit/status.h"

namespace ptkit::decoder {
namespace {

constexpr size_t kChunk = size_t{1} << 20;  // AUX and sideband bytes per record, at most

// The container's loss kind of a loss point's name; none for an AUX offset jump (the reader
// finds it again). Names that are no container kind (a cut perf.data AUXTRACE) are kOther.
std::optional<LossKind> KindOf(const std::string& name) {
  if (name == kLossDiscontinuity) return std::nullopt;
  for (LossKind k : {LossKind::kLostSideband, LossKind::kAuxTruncated, LossKind::kAuxCollision,
                     LossKind::kAuxPartial, LossKind::kAuxOverwritten, LossKind::kKilled}) {
    if (LossKindName(k) == name) return k;
  }
  return LossKind::kOther;
}

// The bytes [pgoff, pgoff + len) of `file`, fewer at its end. Errors: kNotFound when it cannot
// be opened, kOutOfRange when the range is past its end, kDataLoss on a short read.
absl::StatusOr<std::vector<uint8_t>> ReadRange(const std::string& file, uint64_t pgoff,
                                               uint64_t len) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(fmt::format("{}: cannot be opened", file));
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (pgoff >= size) {
    return absl::OutOfRangeError(
        fmt::format("{}: offset {} is past its end ({} bytes)", file, pgoff, size));
  }
  std::vector<uint8_t> bytes(std::min(len, size - pgoff));
  in.seekg(static_cast<std::streamoff>(pgoff));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) return absl::DataLossError(fmt::format("{}: short read", file));
  return bytes;
}

class Writer {
 public:
  Writer(ContainerWriter& w, ContainerExportSummary& summary) : w_(w), summary_(summary) {}

  absl::Status Losses(const StreamId& stream, const std::vector<LossInfo>& losses, uint64_t time) {
    for (const LossInfo& l : losses) {
      const std::optional<LossKind> kind = KindOf(l.kind);
      if (!kind) continue;
      PTKIT_RETURN_IF_ERROR(w_.AppendLoss({.stream = stream,
                                           .kind = *kind,
                                           .count = 1,
                                           .bytes = l.bytes,
                                           .time = time,
                                           .aux_offset = l.aux_offset}));
      ++summary_.loss_records;
    }
    return absl::OkStatus();
  }

  // A batch of sideband records, cut at record boundaries into records of kChunk bytes or so.
  absl::Status Sideband(const RawSideband& batch) {
    std::span<const uint8_t> all(batch.records);
    perf::RecordReader reader(all);
    size_t begin = 0, end = 0;
    for (;;) {
      absl::StatusOr<std::optional<perf::RecordView>> rec = reader.Next();
      const bool more = rec.ok() && rec->has_value();
      if (more) {
        ++summary_.sideband_records;
        end = reader.offset();
      }
      if (end > begin && (!more || end - begin >= kChunk)) {
        PTKIT_RETURN_IF_ERROR(w_.AppendSideband({batch.cpu, all.subspan(begin, end - begin)}));
        begin = end;
      }
      if (!more) break;
    }
    // A malformed tail is kept as it was read: the reader finds the same damage.
    if (end < all.size()) {
      PTKIT_RETURN_IF_ERROR(w_.AppendSideband({batch.cpu, all.subspan(end)}));
    }
    return absl::OkStatus();
  }

 private:
  ContainerWriter& w_;
  ContainerExportSummary& summary_;
};

}  // namespace

absl::StatusOr<ContainerExportSummary> ExportContainer(const Recording& r,
                                                       const std::string& output,
                                                       const ContainerExportOptions& options) {
  const nlohmann::json metadata = r.metadata.ToJson();
  if (metadata.empty()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: no metadata: nothing says how the recording was made", r.name));
  }
  WriterOptions writer;
  writer.overwrite = true;
  PTKIT_ASSIGN_OR_RETURN(std::unique_ptr<ContainerWriter> w,
                         ContainerWriter::Create(output, writer));
  ContainerExportSummary summary;
  Writer out(*w, summary);
  PTKIT_RETURN_IF_ERROR(w->AppendMetadata(r.metadata.ToRecord()));
  for (const RawSideband& batch : r.sideband) PTKIT_RETURN_IF_ERROR(out.Sideband(batch));

  ProgressLine progress(options.progress);
  const uint64_t total = TraceBytes(r);
  for (const auto& [key, stream] : r.streams) {
    for (const Piece& p : stream.pieces) {
      progress.Update(summary.trace_bytes, total);
      PTKIT_RETURN_IF_ERROR(out.Losses(key.id, p.losses_before, p.time));
      PTKIT_ASSIGN_OR_RETURN(SpoolView view, r.spool->Map(p.run));
      const std::span<const uint8_t> bytes = view.bytes();
      if (key.snapshot >= 0) {
        PTKIT_RETURN_IF_ERROR(w->AppendSnapshot({.stream = key.id,
                                                 .sequence = static_cast<uint64_t>(key.snapshot),
                                                 .aux_head = p.aux_offset + bytes.size(),
                                                 .time = p.time,
                                                 .data = bytes}));
        ++summary.aux_records;
      } else {
        for (size_t at = 0; at < bytes.size(); at += kChunk) {
          progress.Update(summary.trace_bytes + at, total);
          PTKIT_RETURN_IF_ERROR(
              w->AppendAux({.stream = key.id,
                            .aux_offset = p.aux_offset + at,
                            .time = p.time,
                            .data = bytes.subspan(at, std::min(kChunk, bytes.size() - at))}));
          ++summary.aux_records;
        }
      }
      summary.trace_bytes += bytes.size();
    }
    const uint64_t last = stream.pieces.empty() ? 0 : stream.pieces.back().time;
    PTKIT_RETURN_IF_ERROR(out.Losses(key.id, stream.losses_after, last));
  }

  // The AUX samples (ptrecord or perf record --aux-sample), as the kernel wrote them (sweep 32b
  // F4: a perf.data's were dropped).
  for (const AuxSample& smp : r.samples) {
    PTKIT_ASSIGN_OR_RETURN(SpoolView snippet, r.spool->Map(smp.snippet));
    perf::Sample fields = smp.fields;
    fields.aux = snippet.bytes();
    const std::vector<uint8_t> record = perf::EncodeSample(fields, smp.sample_type);
    PTKIT_RETURN_IF_ERROR(
        w->AppendSample({.stream = smp.stream, .sample_type = smp.sample_type, .record = record}));
    ++summary.sample_records;
  }

  for (const perf::KeptFeature& f : r.perf_features) {
    PTKIT_RETURN_IF_ERROR(w->AppendPerfFeature({.id = f.id, .bytes = f.bytes}));
  }
  // The archived files whole (their symbols and line tables), and their debug files, as the
  // source has them.
  for (const auto* files : {&r.archived_files, &r.archived_debug_files}) {
    for (const auto& [key, run] : *files) {
      if (!r.spool) break;
      PTKIT_ASSIGN_OR_RETURN(SpoolView bytes, r.spool->Map(run));
      const uint32_t debug = files == &r.archived_debug_files ? kCodeDebugFile : 0;
      PTKIT_RETURN_IF_ERROR(w->AppendCode({.flags = kCodeArchivedFile | debug,
                                           .path = key.first,
                                           .build_id = key.second,
                                           .bytes = bytes.bytes()}));
      ++summary.code_records;
    }
  }
  for (const auto& [pid, code] : r.captured) {
    for (const CapturedCode& c : code) {
      PTKIT_ASSIGN_OR_RETURN(SpoolView bytes, CapturedBytes(r, c));
      PTKIT_RETURN_IF_ERROR(w->AppendCode({.pid = pid,
                                           .flags = c.flags,
                                           .address = c.address,
                                           .pgoff = c.pgoff,
                                           .path = c.path,
                                           .build_id = c.build_id,
                                           .bytes = bytes.bytes()}));
      ++summary.code_records;
    }
  }
  if (options.archive) {
    std::set<std::string> archived_files, archived_debug;
    for (uint32_t pid : r.timeline.Pids()) {
      const std::vector<uint64_t>& execs = r.timeline.ExecTimes(pid);
      const uint64_t since = execs.empty() ? 0 : execs.back();
      auto captured = r.captured.find(pid);
      for (const Mapping* mapping : r.timeline.MappingsDuring(pid, since)) {
        const Mapping& m = *mapping;
        const bool vdso = m.path == "[vdso]";
        if (!(m.prot & PROT_EXEC) || m.path.empty() || (m.path[0] != '/' && !vdso)) continue;
        if (captured != r.captured.end() &&
            std::any_of(captured->second.begin(), captured->second.end(),
                        [&](const CapturedCode& c) {
                          return c.address < m.end && m.start < c.address + c.run.size;
                        })) {
          continue;
        }
        // As perf reads code: the build-id cache first, then the file under the sysroot.
        const std::string cached = BuildIdCacheFile(r, m, options.buildid_dir);
        absl::StatusOr<std::vector<uint8_t>> bytes = absl::NotFoundError(
            fmt::format("{}: not in the build-id cache {}", m.path,
                        options.buildid_dir.empty() ? std::string("(none)") : options.buildid_dir));
        if (!cached.empty()) bytes = ReadRange(cached, m.pgoff, m.end - m.start);
        if (!bytes.ok() && !vdso)
          bytes = ReadRange(options.sysroot + m.path, m.pgoff, m.end - m.start);
        if (!bytes.ok()) {
          summary.warnings.push_back(
              fmt::format("pid {}: {}: not archived", pid, std::string(bytes.status().message())));
          continue;
        }
        auto known = r.build_ids.find(m.path);
        const std::vector<uint8_t>& id =
            !m.build_id.empty() || known == r.build_ids.end() ? m.build_id : known->second;
        PTKIT_RETURN_IF_ERROR(w->AppendCode({.pid = pid,
                                             .flags = vdso ? kCodeVdso : 0u,
                                             .address = m.start,
                                             .pgoff = m.pgoff,
                                             .path = m.path,
                                             .build_id = id,
                                             .bytes = *bytes}));
        ++summary.code_records;
        summary.archived_bytes += bytes->size();
        // The file whole once (its symbols and line tables), from where its bytes came.
        if (!vdso && archived_files.insert(m.path).second) {
          const std::string from = !cached.empty() ? cached : options.sysroot + m.path;
          absl::Status st = AppendArchivedFile(*w, m.path, from, id);
          if (st.ok()) {
            ++summary.code_records;
            // Its separate debug file once, as ptrecord --archive stores it (a stripped file's
            // symbols and lines).
            absl::StatusOr<ElfFile> elf = ElfFile::Open(from);
            const std::string debug =
                elf.ok() ? elf->FindDebugFile(options.sysroot, nullptr, options.buildid_dir) : "";
            if (!debug.empty() && archived_debug.insert(debug).second) {
              const std::string recorded =
                  !options.sysroot.empty() && debug.starts_with(options.sysroot + "/")
                      ? debug.substr(options.sysroot.size())
                      : debug;
              absl::StatusOr<std::vector<uint8_t>> debug_id = ReadBuildId(debug);
              st = AppendArchivedFile(*w, recorded, debug,
                                      debug_id.ok() ? *debug_id : std::vector<uint8_t>{},
                                      /*debug_file=*/true);
              if (st.ok()) {
                ++summary.code_records;
              } else {
                summary.warnings.push_back(fmt::format("{}: debug file not archived: {}", m.path,
                                                       std::string(st.message())));
              }
            }
          } else {
            summary.warnings.push_back(
                fmt::format("{}: symbols not archived: {}", m.path, std::string(st.message())));
          }
        }
      }
    }
  }
  for (const auto& [path, id] : r.build_ids) {
    PTKIT_RETURN_IF_ERROR(w->AppendCode({.flags = kCodeIdentity, .path = path, .build_id = id}));
    ++summary.code_records;
  }
  for (const auto& [path, hash] : r.content_hashes) {
    PTKIT_RETURN_IF_ERROR(w->AppendCode({.flags = kCodeIdentity | kCodeContentHash,
                                         .path = path,
                                         .build_id = EncodeContentHash(hash)}));
    ++summary.code_records;
  }
  PTKIT_RETURN_IF_ERROR(w->Close());
  summary.file_bytes = w->stats().stored_bytes;
  return summary;
}

}  // namespace ptkit::decoder
