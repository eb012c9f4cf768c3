// Recording: everything decoding needs from one recording, whatever file it came from (a
// trace.pt through ReadRecording in container_input.h, a perf.data through
// ReadPerfDataRecording in perf_data_input.h): the metadata, the sideband timeline, the AUX
// streams with their pieces and loss points, and the code captured at record time. Readers
// build it with a RecordingBuilder; DecodeRecording and DumpRecordingPackets only read it.
//
// Per stream (one CPU or one thread), in stream order: the AUX bytes are joined while they are
// contiguous; a discontinuity (an AUX offset jump, a TRUNCATED / COLLISION / PARTIAL flag, a
// loss record) starts a new piece, reported to the sink as OnLoss at that point, and each
// piece is decoded on its own. The process of a stream is its thread's (per-thread streams)
// or the task ITRACE_START / context switches name at the stream's first AUX record (per-CPU).
// Its image: every executable MMAP2 mapping of that process, from the file system (under
// `sysroot`, else from the build-id cache) or from code captured in the recording (vdso,
// archived ranges), which wins. A file that cannot be loaded becomes a gap naming it.
//
// Per-CPU streams follow the scheduler when the trace has timing and the metadata a time
// conversion: the task running is looked up in the sideband (ITRACE_START, SWITCH_CPU_WIDE)
// at each new trace time, so a switch is seen at the first timing packet after it; every
// thread change is an OnStream with context_switch, and the images change with the process.
//
// Memory stays bounded however long the trace is: AUX bytes are not kept in memory but
// spooled into an AuxSpool, mapped piece by piece while it decodes.
#ifndef PTKIT_DECODER_RECORDING_H_
#define PTKIT_DECODER_RECORDING_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decoder/aux_spool.h"
#include "decoder/decode.h"
#include "decoder/progress.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"
#include "nlohmann/json.hpp"
#include "ptkit/aux_sample.h"
#include "ptkit/container_format.h"
#include "ptkit/perf_data.h"
#include "ptkit/perf_records.h"
#include "ptkit/recording_metadata.h"
#include "ptkit/scoped_fd.h"
#include "ptkit/sideband.h"

namespace ptkit::decoder {

// The most captured code one recording may hold (what the spool may take for it, on the disk
// of $TMPDIR): code records beyond it are not used, with a warning (ptdecode(1)).
inline constexpr uint64_t kMaxCapturedCode = uint64_t{4} << 30;

struct RecordingOptions {
  std::string sysroot;  // prefix for the paths of mapped files
  // perf's build-id cache (~/.debug): a mapped file not found under `sysroot` is looked for
  // as DIR/.build-id/xx/yyyy.../elf by the build-id of its MMAP2 record or of the recording's
  // build-id list. "": not looked for.
  std::string buildid_dir;
  // Filters: only streams of this CPU; only this snapshot (0, 1, ...) of each stream; only
  // what thread `tid` ran: its thread streams and, in per-CPU streams, the stretches while
  // it was the task on the CPU (from the sideband at each trace time; without timing in the
  // trace or a time conversion in the metadata: the CPU streams whose first task is it).
  std::optional<uint64_t> cpu;
  std::optional<uint32_t> tid;
  std::optional<uint64_t> snapshot;
  TraceConfigOverride config;  // over what the metadata says
  // Where AUX bytes and captured code are spooled while decoding; "" for $TMPDIR, else /tmp.
  std::string spool_dir;
  // Captured code kept for decoding, in bytes (tests set less).
  uint64_t max_captured_code = kMaxCapturedCode;
  // Each snapshot as recorded (export). By default (and without `snapshot`) a snapshot that
  // begins with the end of the stream's snapshots before it is joined to them
  // (RecordingBuilder::AddSnapshot), so what they share is decoded once, as perf does.
  bool keep_snapshots = false;
  // Where the commands that make their own sinks or walk the recording themselves (diff, info
  // --decode, samples, packets, export) show their progress (decoder/progress.h); ptdecode sets
  // stderr when it is a terminal. Null: none.
  ProgressOutput progress;
};

// An AUX stream (snapshot -1) or one snapshot of a stream: each is decoded on its own.
struct StreamKey {
  StreamId id;
  int64_t snapshot = -1;
  auto operator<=>(const StreamKey&) const = default;  // NOLINT(modernize-use-nullptr)
};

// One contiguous piece of a stream's AUX bytes (in the spool), and what was lost before it.
struct Piece {
  uint64_t aux_offset = 0;
  uint64_t time = 0;  // perf time of the record that began it
  SpoolRun run;
  std::vector<LossInfo> losses_before;
};

struct RecordedStream {
  std::vector<Piece> pieces;
  std::vector<LossInfo> losses_after;  // after the last piece
  uint64_t bytes = 0;
};

// Code captured at record time (the vdso, archived file ranges), mapped at `address`; its
// run.size bytes are in the recording's spool, mapped into each image that uses them.
struct CapturedCode {
  uint64_t address = 0;
  std::string path;
  SpoolRun run;
  uint64_t pgoff = 0;             // file offset of the bytes (archived ranges)
  uint32_t flags = 0;             // container code flags (kCodeVdso)
  std::vector<uint8_t> build_id;  // empty when the record names none
};

// Sideband records as read, verbatim (perf_event_header-framed, trailers included), for
// `ptdecode export`: the ring they came from (a CPU; -1: a per-thread ring or unknown) and the
// layout of their sample_id trailers.
struct RawSideband {
  int32_t cpu = -1;
  perf::SampleIdLayout layout{0, false};
  std::vector<uint8_t> records;
};

// An AUX sample (ptrecord --aux-sample; container sample record): the sample's fields (its
// `aux` span left empty) and the trace snippet it carries, spooled.
struct AuxSample {
  StreamId stream;  // the ring it was drained from
  uint64_t sample_type = 0;
  perf::Sample fields;
  SpoolRun snippet;
};

struct Recording {
  std::string name;            // the file it was read from, for messages
  RecordingMetadata metadata;  // merged (ptkit-format(5)), validated
  TraceConfig config;          // what the metadata says (options.config goes over it)
  Sideband timeline;
  std::vector<RawSideband> sideband;  // the kernel records read, in file order (for export)
  std::map<StreamKey, RecordedStream> streams;  // those the reader's options may select
  std::set<StreamKey> present;  // every stream with trace bytes, selected by the options or not
  std::map<uint32_t, std::vector<CapturedCode>> captured;  // pid -> code captured
  // file path -> build-id, for mappings whose record carries none (perf.data's BUILD_ID).
  std::map<std::string, std::vector<uint8_t>> build_ids;
  // file path -> ContentHash of the file that ran, for files with no build-id (a trace.pt's
  // kCodeContentHash identity records).
  std::map<std::string, uint64_t> content_hashes;
  std::optional<AuxSpool> spool;  // created with the first AUX bytes
  std::optional<TscConversion> time;
  bool bts = false;  // intel_bts recordings hold 24-byte branch records, not PT packets
  std::vector<std::string> warnings;  // damage, repeated bytes, loss outside the trace, ...
  DecodeTotals unplaced;              // losses of streams without trace bytes
  std::vector<AuxSample> samples;     // in file order
  // ptrecord --kcore: the kernel tables' text by path ("/proc/kallsyms", "/proc/modules"); the
  // kernel text itself is captured code of pid 0 (flag kCodeKernel), mapped in every process.
  std::map<std::string, std::string> kernel_tables;
  // ptrecord --archive: each archived file whole (kCodeArchivedFile), by path and build-id:
  // its symbols and line tables where this machine does not have the file.
  std::map<std::pair<std::string, std::vector<uint8_t>>, SpoolRun> archived_files;
  // ptrecord --archive: the separate debug files of archived files (kCodeDebugFile), by the
  // path where they were recorded and their build-id (the file's they belong to).
  std::map<std::pair<std::string, std::vector<uint8_t>>, SpoolRun> archived_debug_files;
  uint64_t malformed_samples = 0;  // sample records whose PERF_RECORD_SAMPLE did not parse
  // A perf.data's features that an export writes back as they were (perf::KeptAsBytes: the
  // tracepoint formats, the machine's topology, CLOCK_DATA, ...), in file order; a trace.pt
  // made from a perf.data keeps them (container perf-feature records).
  std::vector<perf::KeptFeature> perf_features;
};

// The trace bytes of every stream of `r` (what a decode of all of it reads: its progress).
uint64_t TraceBytes(const Recording& r);

// The bytes of captured code `c` of `r`, mapped from the recording's spool.
absl::StatusOr<SpoolView> CapturedBytes(const Recording& r, const CapturedCode& c);

// The copy of mapping `m`'s file in perf's build-id cache `buildid_dir`, found by the build-id
// its record or the recording (build_ids) names, as perf lays the cache out
// (tools/perf/util/build-id.c): DIR/.build-id/xx/yyyy... links to the cached file's directory,
// which holds it as `elf` (`vdso` for the vDSO); older perf linked to the file itself. "" when
// it is not there (or `buildid_dir` is "").
std::string BuildIdCacheFile(const Recording& r, const Mapping& m, const std::string& buildid_dir);
// The build-id `r` gives the mapped file: its MMAP2 record's, else its identity record's
// (ptrecord --emulate=qemu writes MMAP2 records without one); empty when neither.
const std::vector<uint8_t>& RecordedBuildId(const Recording& r, const Mapping& m);

// Whether `options` can select the stream (readers do not even spool the bytes of others).
bool MaySelect(const RecordingOptions& options, const StreamKey& key);

// Builds a Recording's streams from AUX data, loss and snapshot records in file order.
class RecordingBuilder {
 public:
  RecordingBuilder(std::string name, const RecordingOptions& options);
  // The recording being built: readers fill metadata, config, timeline, captured, time, bts.
  Recording& recording() { return r_; }

  // AUX bytes of `stream` at `aux_offset` (AUX record flags: kAuxTruncated, ...). They join
  // the stream's last piece when they follow it; a jump is a discontinuity loss point, bytes
  // at offsets the stream had already are dropped (counted in a warning). Errors: the spool's.
  absl::Status AddAux(StreamId stream, uint64_t aux_offset, uint64_t time,
                      std::span<const uint8_t> data, uint32_t flags);
  // A loss point at `aux_offset` (`bytes` lost, 0 when unknown) before the stream's next bytes.
  void AddLoss(StreamId stream, const std::string& kind, uint64_t aux_offset, uint64_t bytes);
  // Lost sideband: the bytes on either side are not joined (a lost AUX record may have said
  // TRUNCATED); a loss point where the stream is now.
  void AddLostSideband(StreamId stream, const std::string& kind);
  // `records` perf records lost by the kernel (0: unknown), once per PERF_RECORD_LOST: Finish
  // warns of what they do to the decode (whether or not a stream has a loss point for it).
  void CountLostSideband(uint64_t records);
  // A snapshot: the newest `data` of an overwritten ring whose head was `aux_head`. Unless
  // options.snapshot or keep_snapshots, one that begins with the end of the stream's snapshot
  // before it (the ring read again before it wrapped past what was read) adds only its new
  // bytes to that one: the overlap is found by content (from a PSB of `data`, whose packets
  // the earlier bytes must hold byte for byte), as perf finds it.
  absl::Status AddSnapshot(StreamId stream, uint64_t sequence, uint64_t aux_head, uint64_t time,
                           std::span<const uint8_t> data);
  // Code captured in `pid` at `address` (a code record), spooled; beyond
  // options.max_captured_code in all, left out (counted in a warning). Errors: the spool's.
  absl::Status AddCode(uint32_t pid, uint64_t address, std::string path,
                       std::span<const uint8_t> bytes, uint64_t pgoff = 0, uint32_t flags = 0,
                       std::vector<uint8_t> build_id = {});
  // An archived file whole (a code record with kCodeArchivedFile), spooled; within the same
  // limit as AddCode. With `debug_file` (kCodeDebugFile), an archived debug file. Errors: the
  // spool's.
  absl::Status AddArchivedFile(std::string path, std::vector<uint8_t> build_id,
                               std::span<const uint8_t> bytes, bool debug_file = false);
  // The PERF_RECORD_TEXT_POKE records of user addresses among the perf records `records`
  // (sample_id trailers of `layout`, which must give the pid): code the guest ran from no file
  // (ptrecord --emulate=qemu: JIT code), added as AddCode adds (flag kCodeTextPoke). Kernel
  // text pokes and records that do not parse are passed over. Errors: the spool's.
  absl::Status AddTextPokes(std::span<const uint8_t> records, const perf::SampleIdLayout& layout);
  // A sample record: the PERF_RECORD_SAMPLE `record` of `sample_type` from `stream`'s ring,
  // its snippet spooled. One that does not parse is counted (malformed_samples) and warned
  // about. Errors: the spool's.
  absl::Status AddSample(StreamId stream, uint64_t sample_type, std::span<const uint8_t> record);
  // Adds the warnings about repeated bytes, code left out and losses outside any trace, and
  // returns the recording.
  Recording Finish();

 private:
  struct State {
    uint64_t next_aux = 0;
    bool break_next = true;  // the next AUX record starts a new piece
    uint64_t repeated_bytes = 0;
  };
  absl::Status Spool(SpoolRun& run, std::span<const uint8_t> bytes);
  RecordingOptions options_;
  uint64_t code_bytes_ = 0;                                 // captured code spooled
  uint64_t code_left_out_ = 0, code_left_out_bytes_ = 0;    // beyond max_captured_code
  uint64_t lost_sideband_ = 0, lost_sideband_records_ = 0;  // AddLostSideband's, in all
  // AddTextPokes: the bytes poked last at each (pid, address), in runs that do not overlap;
  // code poked again over code poked before with other bytes (the first such place, how many).
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> poked_;
  std::optional<std::pair<uint32_t, uint64_t>> repoked_;
  uint64_t repokes_ = 0;
  // The bytes at the start of `data` that are the last of `run` (0: none found).
  absl::StatusOr<uint64_t> SharedWithEnd(const SpoolRun& run, std::span<const uint8_t> data);
  Recording r_;
  std::map<StreamKey, State> state_;
  std::map<StreamId, StreamKey> joined_;  // each stream's snapshot the next ones may join
};

// The images of a recording's programs, one per process and program (exec epoch), each made
// when a decode first needs it: code captured in the recording wins over the files the MMAP2
// records name (under options.sysroot, else in options.buildid_dir). Decodes of one recording
// given the same RecordingImages share them: the captured code is parsed as ELF once, and
// libipt's section cache is filled once (with the block caches kept per section, so a later
// decode may end blocks where a first one would not, as libipt's own decoder does with a warm
// cache). Not thread-safe; must not outlive the recording.
class RecordingImages {
 public:
  RecordingImages(const Recording& r, const RecordingOptions& options);
  RecordingImages(const RecordingImages&) = delete;
  RecordingImages& operator=(const RecordingImages&) = delete;

  // The image of process `pid` in exec epoch `epoch` (SIZE_MAX: every mapping the process ever
  // had), made on first use. Errors: libipt's, the spool's.
  absl::StatusOr<ProgramImage*> For(uint32_t pid, size_t epoch);
  // The warnings of the images made so far (a mapped file whose build-id is not the recorded
  // one), in the order they were made.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // How many images were made so far.
  size_t size() const { return images_.size(); }
  // Images made from now on read each ELF file's symbols from the tables `other`'s images read
  // (and add theirs to them): -j's workers' images of a process, the merging thread's again.
  // Both must make their images on one thread.
  void ShareSymbolsWith(RecordingImages& other);
  // Drops what the fast decoder keeps of the code of process `pid`'s images (made again when
  // a decoder wants it): for a process whose streams were all decoded.
  void DropGraphs(uint32_t pid);
  // Whether these are the images `options` give for `r` (the same recording, sysroot and
  // build-id cache).
  bool Fit(const Recording& r, const RecordingOptions& options) const;

 private:
  // The copy of the mapped file in the build-id cache, by the build-id its record or the
  // recording names; "" when there is none.
  std::string FromBuildIdCache(const Mapping& m) const;
  // The function symbols of the recording's /proc/kallsyms (--kcore), parsed once.
  const std::vector<Symbol>& KernelSymbols();
  // The file on this machine (under the sysroot) that archived code `c` came from, by its
  // path and build-id; "" when there is none.
  std::string ArchivedFileHere(const CapturedCode& c);
  // The spooled bytes `run` of the archived file `path` in a temporary file, as a
  // /proc/self/fd path; "" when it cannot be written.
  std::string WriteOut(const SpoolRun& run, const std::string& path);
  // The archived debug file (written out) of the file that archived code `c` came from, read
  // at `file` (ArchivedFileHere's): the one with its build-id, else (a file without one) the
  // one of its .gnu_debuglink name whose CRC-32 is the link's; "" when the recording has none.
  std::string ArchivedDebugFile(const CapturedCode& c, const std::string& file);
  std::map<std::pair<std::string, std::vector<uint8_t>>, std::string> archived_debug_;
  // The archived bytes (--archive) of the file mapping `m` at its address, from any process's
  // archive of that file (by path, and build-id where both have one); false when it has none.
  absl::StatusOr<bool> AddArchived(ProgramImage& image, const Mapping& m);
  // Every process's archived ranges, each once, by path (made on first use).
  std::optional<std::map<std::string, std::vector<const CapturedCode*>>> archived_ranges_;
  // ArchivedFileHere's, by path and build-id.
  std::map<std::pair<std::string, std::vector<uint8_t>>, std::string> archived_here_;
  // Archived files written out for libelf (their symbols, DWARF): unlinked at once (nothing
  // left behind, also by a ptdecode killed), read as /proc/self/fd/N while these are open.
  std::vector<ScopedFd> written_out_;
  // The build-id of the file at `path` (empty: none), read once; errors: the file's.
  const absl::StatusOr<std::vector<uint8_t>>& BuildIdOf(const std::string& path);
  std::map<std::string, absl::StatusOr<std::vector<uint8_t>>> build_ids_;
  // Whether the file at `path` (a file with no build-id) is not the one recorded, by its
  // ContentHash against Recording::content_hashes; read once. False when nothing tells.
  bool ChangedSinceRecorded(const std::string& path, const std::string& recorded_path);
  std::map<std::string, bool> changed_;
  // The end of the advice for a file that is not the recorded one: ", or record with
  // --archive", or, for a recording that archived files (its recorder left this one out,
  // saying why: it changed while the command ran), no such advice (sweep 33b L3).
  std::string ArchiveAdvice() const;
  const Recording& r_;
  std::optional<std::vector<Symbol>> kernel_symbols_;
  std::string sysroot_;
  std::string buildid_dir_;
  std::shared_ptr<pt_image_section_cache> iscache_;  // shared by every image, as in ptxed
  std::shared_ptr<ProgramImage::LinkSymbolCache> link_symbols_;  // shared by every image
  std::map<std::pair<uint32_t, size_t>, std::unique_ptr<ProgramImage>> images_;
  std::vector<std::string> warnings_;
  std::set<std::string> warned_;
};

// Decodes every stream of `r` that `options` select into `sink` (options.sysroot and
// config apply; the reader applied the filters already, and they apply again
// here), then calls sink.Finish. With `images` (made for `r` and the same sysroot and
// buildid_dir), the images are taken from it and kept there for later decodes; the warnings
// are then those of every image it made so far. Errors: kNotFound when the filters select
// nothing (saying what the recording has), kInvalidArgument for `images` of another
// recording or other options, spool I/O errors, sink.Finish's.
absl::StatusOr<DecodeTotals> DecodeRecording(const Recording& r, const RecordingOptions& options,
                                             Sink& sink, RecordingImages* images = nullptr);

// Calls `fn` for every sample of `r` in file order, with the images of the sample's process at
// the sample's time (its program then, as DecodeRecording picks images) and the snippet's
// bytes. Returns the images' warnings (build-id mismatches). Errors: spool I/O errors, fn's.
using SampleFn = std::function<absl::Status(const AuxSample& sample, const ProgramImage& image,
                                            std::span<const uint8_t> snippet)>;
absl::StatusOr<std::vector<std::string>> ForEachSample(const Recording& r,
                                                       const RecordingOptions& options,
                                                       const SampleFn& fn);

// `ptdecode packets`: the packets of every stream the options select (DumpPackets), each
// stream after a header line naming it, offsets in the stream's AUX offsets, and its loss
// points where they happened. With options.tid, a per-CPU stream shows its packets while that
// thread runs, as the last TSC packet's time says. Errors: those of DecodeRecording,
// kInvalidArgument for an intel_bts recording, output failures. `trace_bytes`: set to the
// bytes of trace of the streams dumped.
absl::Status DumpRecordingPackets(const Recording& r, const RecordingOptions& options,
                                  std::FILE* out, const OutputOptions& output,
                                  uint64_t* trace_bytes = nullptr);

// `ptdecode info --decode`: decodes every stream (counting only) and summarises:
// {"streams", "instructions", "blocks", "syncs", "errors", "gaps", "losses", "lost_bytes",
//  "errors_by_code": {name: count}, "warnings": [what every decode warns of: the input's
//  damage, files not found, instructions the trace cannot show]}. Errors: those of
//  DecodeRecording.
absl::StatusOr<nlohmann::json> DecodeRecordingSummary(const Recording& r,
                                                      const RecordingOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_RECORDING_H_
