// `ptdecode export --to trace.pt`: a Recording (decoder/recording.h: a perf.data, or a trace.pt)
// written as a ptkit container (ptkit-format(5)), so a `perf record` recording can be kept as
// one self-contained, compressed, crash-safe file that decodes as the original does.
//
// What is written, in this order:
// - one metadata record: the recording's merged metadata (RecordingMetadata::ToJson; a
//   perf.data's, as decoder/perf_data_input.h derives it, keeps "source": "perf.data");
// - the sideband records verbatim (trailers included), in batches as they were read, each with
//   its ring's CPU (-1: a per-thread ring);
// - per stream (CPU or thread), its pieces in stream order: before each piece a loss record
//   for every loss point the reader found there (AUX TRUNCATED / COLLISION / PARTIAL flags,
//   lost sideband, a cut AUXTRACE record, ...; an AUX offset jump needs none: readers find it
//   again), then its bytes as AUX records at their AUX offsets (1 MiB each at most);
//   snapshots as snapshot records (sequence, aux_head = where the piece ends);
// - captured code (vdso, archived ranges) as code records, with options.archive the code of
//   the mapped files and the vDSO too, and every build-id the recording names (perf.data's BUILD_ID
//   feature, trace.pt's identity records) as an identity record;
// - the footer (Close).
// Reading the result gives the same Recording: the same metadata, timeline, streams, pieces,
// loss points and code, so every sub-command prints the same.
#ifndef PTKIT_DECODER_CONTAINER_EXPORT_H_
#define PTKIT_DECODER_CONTAINER_EXPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/progress.h"
#include "decoder/recording.h"

namespace ptkit::decoder {

struct ContainerExportOptions {
  // Also archive code, as `ptrecord --archive` does: the bytes of every executable file mapping
  // of the program each process ran last (its mappings since its last exec) and of its vDSO,
  // as code records, so that the container decodes without the files. Each file is found as
  // perf finds code (tools/perf/util/dso.c, dso__data_fd): in the build-id cache `buildid_dir`
  // by its build-id (BuildIdCacheFile in decoder/recording.h; the vDSO as [vdso]/BUILDID/vdso),
  // else at the mapping's path under `sysroot`. Code the recording captured already wins. Each
  // file whole too, and its separate debug file (ElfFile::FindDebugFile under `sysroot` and in
  // `buildid_dir`) once.
  bool archive = false;
  std::string sysroot;
  std::string buildid_dir;  // "": no build-id cache
  ProgressOutput progress;  // progress of the trace bytes copied (decoder/progress.h)
};

struct ContainerExportSummary {
  uint64_t sideband_records = 0;
  uint64_t aux_records = 0;  // AUX and snapshot records
  uint64_t trace_bytes = 0;
  uint64_t loss_records = 0;
  uint64_t sample_records = 0;  // AUX samples
  uint64_t code_records = 0;    // captured or archived code, and identities
  uint64_t archived_bytes = 0;
  uint64_t file_bytes = 0;            // the container's size, compressed
  std::vector<std::string> warnings;  // files that could not be archived
};

// Writes `r` (read with every stream selected) to the container `output` (overwritten).
// Errors: kFailedPrecondition for a recording without metadata; spool errors; the writer's
// errors naming the file. A file that cannot be archived is a warning.
absl::StatusOr<ContainerExportSummary> ExportContainer(const Recording& r,
                                                       const std::string& output,
                                                       const ContainerExportOptions& options = {});

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CONTAINER_EXPORT_H_
