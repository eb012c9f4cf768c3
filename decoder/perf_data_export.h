// `ptdecode export --to perf.data`: a Recording (decoder/recording.h: a trace.pt, or a perf.data
// read back) as a perf.data that perf 6.1 (`perf script`, `perf report`) decodes with its own
// Intel PT / BTS decoder.
//
// What is written (ptkit/perf_data_writer.h for the file layout):
// - attrs (with exclude_guest, as perf record opens them): the trace event (intel_pt or
//   intel_bts: the recorded attr; for an emulated recording, which has none, one built from
//   the emulation's settings: pt, branch, tsc, noretcomp, psb_period) and the tracking
//   (dummy) event, each with the sample ids its records carry (AUX / ITRACE_START records
//   name the trace event, the others the tracking event). Records whose trailer has no sample id
//   (TID|TIME only) get PERF_SAMPLE_IDENTIFIER appended, as the kernel would have written them:
//   perf adds events of its own and then tells records apart by id ("non matching sample_type"
//   otherwise).
// - PERF_RECORD_AUXTRACE_INFO: type 1 (intel_pt) with the private words numbered as in
//   tools/perf/util/intel-pt.h (PMU type, TSC conversion, tsc/noretcomp/mtc/cyc config bits,
//   sched-switch kind, snapshot mode, per-CPU mmaps, MTC frequency bits, TSC:CTC ratio, max
//   non-turbo ratio, address filter) or type 2 (intel_bts, tools/perf/util/intel-bts.h); a
//   perf.data input's own words (metadata "auxtrace_info") are written back as perf wrote them.
//   The recording's TSC conversion goes in unchanged: an emulated trace (TSC = sideband time =
//   CLOCK_MONOTONIC ns) has the identity conversion, which perf applies as it is.
// - TIME_CONV, ID_INDEX, then the sideband records verbatim (sample_id trailers included),
//   in time order (stable) with FINISHED_ROUND records between rounds.
// - One AUXTRACE record per piece of a stream (the Recording's pieces: contiguous AUX bytes)
//   or snapshot, stream by stream: per CPU (tid -1) or per thread (cpu -1), idx numbering the
//   streams. A loss the sideband does not already hold (kOther in ptkit-format(5)) becomes a
//   PERF_RECORD_AUX with TRUNCATED, at the time of the piece after it.
// - Features: BUILD_ID of every mapped file whose build-id is known (MMAP2 records, the
//   recording's build-ids, captured code and the captured vdso's note), HOSTNAME, OSRELEASE,
//   VERSION, ARCH, NRCPUS, CPUID, CMDLINE, EVENT_DESC and the HEADER_AUXTRACE index.
// Code captured in the recording (the vdso, `ptrecord --archive` file ranges) goes into a
// build-id cache directory laid out as perf's ~/.debug (NAME/BUILDID/elf or [vdso]/BUILDID/vdso
// and .build-id/NN/REST links to them), for `perf --buildid-dir DIR`.
//
// The trace bytes are copied from the Recording's spool piece by piece, so memory does not
// grow with the trace.
#ifndef PTKIT_DECODER_PERF_DATA_EXPORT_H_
#define PTKIT_DECODER_PERF_DATA_EXPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/progress.h"
#include "decoder/recording.h"

namespace ptkit::decoder {

struct PerfDataExportOptions {
  // The build-id cache directory for captured code; "" means OUTPUT.debug. Made only when the
  // recording holds code.
  std::string debug_dir;
  ProgressOutput progress;  // progress of the trace bytes written (decoder/progress.h)
};

struct PerfDataExportSummary {
  uint64_t events = 0;            // attrs written
  uint64_t sideband_records = 0;  // kernel records copied (plus synthesized AUX loss records)
  uint64_t auxtrace_records = 0;
  uint64_t trace_bytes = 0;
  uint64_t build_ids = 0;
  uint64_t cached_files = 0;  // files in the build-id cache
  std::string debug_dir;      // where they are; empty when none
  std::vector<std::string> warnings;
};

// Exports `r` (read with every stream selected) to the perf.data `output` (overwritten).
// Errors: kFailedPrecondition for a recording without metadata or without a trace event to
// export; spool and I/O errors naming the file. The recording's warnings (damage in its file,
// ...) are the summary's: what is whole is exported.
absl::StatusOr<PerfDataExportSummary> ExportPerfData(const Recording& r, const std::string& output,
                                                     const PerfDataExportOptions& options = {});

// OpenRecording(input) (a trace.pt or a perf.data), then ExportPerfData. Errors: theirs.
absl::StatusOr<PerfDataExportSummary> ExportPerfData(const std::string& input,
                                                     const std::string& output,
                                                     const PerfDataExportOptions& options = {});

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_PERF_DATA_EXPORT_H_
