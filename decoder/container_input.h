// Container input: decodes the AUX streams of a trace.pt recording (ptkit-format(5)) with the
// images its sideband describes.
//
// Per stream (one CPU or one thread), in stream order: the AUX bytes are joined while they are
// contiguous; a discontinuity (an AUX offset jump, a TRUNCATED / COLLISION / PARTIAL flag, a
// loss record) starts a new piece, reported to the sink as OnLoss at that point, and each
// piece is decoded on its own. The process of a stream is its thread's (per-thread streams)
// or the task ITRACE_START / context switches name at the stream's first AUX record (per-CPU).
// Its image: every executable MMAP2 mapping of that process, from the file system (under
// `sysroot`) or from code captured in the container (vdso, archived ranges), which wins.
// A file that cannot be loaded becomes a gap naming it.
//
// Per-CPU streams follow the scheduler when the trace has timing and the metadata a time
// conversion: the task running is looked up in the sideband (ITRACE_START, SWITCH_CPU_WIDE)
// at each new trace time, so a switch is seen at the first timing packet after it; every
// thread change is an OnStream with context_switch, and the images change with the process.
//
// Memory stays bounded however long the trace is: AUX bytes are not kept in memory but
// spooled into an unlinked temporary file (AuxSpool) that is mapped read-only piece by piece
// while it decodes; pages behind the decoder are dropped from the process as it goes.
#ifndef PTKIT_DECODER_CONTAINER_INPUT_H_
#define PTKIT_DECODER_CONTAINER_INPUT_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decoder/decode.h"
#include "decoder/metadata_config.h"
#include "decoder/sinks.h"
#include "decoder/trace_config.h"
#include "nlohmann/json.hpp"

namespace ptkit::decoder {

struct ContainerOptions {
  std::string sysroot;  // prefix for the paths of mapped files
  // Filters: only streams of this CPU; only this snapshot (0, 1, ...) of each stream; only
  // what thread `tid` ran: its thread streams and, in per-CPU streams, the stretches while
  // it was the task on the CPU (from the sideband at each trace time; without timing in the
  // trace or a time conversion in the metadata: the CPU streams whose first task is it).
  std::optional<uint64_t> cpu;
  std::optional<uint32_t> tid;
  std::optional<uint64_t> snapshot;
  std::optional<TraceConfig> config;  // overrides what the metadata says
  // Where AUX bytes are spooled while decoding; "" for $TMPDIR, else /tmp.
  std::string spool_dir;
};

// A run of bytes appended to an AuxSpool: the extents of the file it occupies, in order.
struct SpoolRun {
  struct Extent {
    uint64_t file_offset = 0;  // page aligned
    uint64_t capacity = 0;     // a multiple of the page size
  };
  std::vector<Extent> extents;
  uint64_t size = 0;
};

// A read-only contiguous mapping of a SpoolRun. Move-only.
class SpoolView {
 public:
  SpoolView() = default;
  SpoolView(SpoolView&& other) noexcept;
  SpoolView& operator=(SpoolView&& other) noexcept;
  ~SpoolView();
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Drops the mapped pages before `offset` from this process's memory (they stay in the page
  // cache and fault back in if read again), once there are enough of them to be worth it.
  void ReleaseBefore(uint64_t offset);

 private:
  friend class AuxSpool;
  SpoolView(uint8_t* data, size_t size, size_t mapped)
      : data_(data), size_(size), mapped_(mapped) {}
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;    // bytes of address space reserved (size_ rounded up to a page)
  size_t released_ = 0;  // bytes at the start already dropped
};

// Where container input keeps AUX bytes: an unlinked temporary file (O_TMPFILE), so resident
// trace bytes are page cache the kernel can reclaim, not anonymous memory. libipt wants one
// contiguous buffer per decoder: runs grow in extents (1 MiB doubling to 64 MiB, never
// written beyond their fill, so the file is sparse) and Map() stitches a run's extents into
// one contiguous read-only mapping. One file descriptor however many streams. Move-only.
class AuxSpool {
 public:
  // Where to try: `dir`, or $TMPDIR when `dir` is empty; then /tmp.
  static std::vector<std::string> Dirs(const std::string& dir);
  // Creates the file in the first of `dirs` where it can be, with O_TMPFILE (or mkstemp +
  // unlink where the file system lacks it).
  // Errors: kFailedPrecondition naming each directory tried and why, and what to do.
  static absl::StatusOr<AuxSpool> Create(const std::vector<std::string>& dirs);
  AuxSpool(AuxSpool&& other) noexcept;
  AuxSpool& operator=(AuxSpool&& other) noexcept;
  ~AuxSpool();

  // Appends `bytes` to `run`. Errors: write failures (no space left, ...) naming the directory.
  absl::Status Append(SpoolRun& run, std::span<const uint8_t> bytes);
  // Maps `run` as one contiguous read-only span. Errors: mmap failures.
  absl::StatusOr<SpoolView> Map(const SpoolRun& run) const;
  const std::string& dir() const { return dir_; }
  // File size (address space of the sparse file, not the disk it uses).
  uint64_t size() const { return end_; }

 private:
  AuxSpool(int fd, std::string dir);
  int fd_ = -1;
  std::string dir_;
  uint64_t end_ = 0;
  uint64_t page_ = 4096;
};

// Decodes every stream of the container at `path` into `sink`, then calls sink.Finish.
// Errors: those of ContainerReader::Open (not a container, ...), I/O errors, sink.Finish's.
// Damage in the file is not an error: what can be read is decoded.
absl::StatusOr<DecodeTotals> DecodeContainer(const std::string& path,
                                             const ContainerOptions& options, Sink& sink);

// `ptdecode packets trace.pt`: the packets of every stream the options select (DumpPackets),
// each stream after a header line naming it, offsets in the stream's AUX offsets, and its
// loss points where they happened. With options.tid, a per-CPU stream shows its packets while
// that thread runs, as the last TSC packet's time says. Errors: those of DecodeContainer,
// kInvalidArgument for an intel_bts recording, output failures.
absl::Status DumpContainerPackets(const std::string& path, const ContainerOptions& options,
                                  std::FILE* out, const OutputOptions& output);

// `ptdecode info --decode`: decodes every stream (counting only) and summarises:
// {"streams", "instructions", "blocks", "syncs", "errors", "gaps", "losses", "lost_bytes",
//  "errors_by_code": {name: count}}. Errors: those of DecodeContainer.
absl::StatusOr<nlohmann::json> DecodeSummary(const std::string& path,
                                             const ContainerOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CONTAINER_INPUT_H_
