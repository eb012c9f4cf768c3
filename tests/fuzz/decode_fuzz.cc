// Fuzzes decoding end to end: a recording in memory (a trace.pt, or a perf.data recognised by
// its magic) -> ReadRecording / ReadPerfDataRecording -> DecodeRecording into an output sink
// (insn with disassembly, branches, calls, stats, folded, timeline; text or JSON) or the packet
// dump. Nothing may crash, hang or read outside its buffers.
//
// Each execution decodes its input one way, chosen by the input's size (a mutation that keeps
// the size keeps the way): one of the 14 outputs, with the fast decoder or libipt's, on one
// thread or on two in chunks of 1 KiB (ptdecode -j 2 --chunk-size 1024: the split, stitch and
// summary paths; the seed pt_psbs.pt has 4 PSBs in 6.3 KB of trace). The decoding the outputs
// share (reading the recording, the images, the decoder) is most of an execution's work: one
// output each made 2.8x the executions of all 14 each, with more coverage, in equal time
// (tests/fuzz/README.md, session 27), and the choice reaches libipt's decoder and the parallel
// decode, which decoding with the defaults never did.
//
// A trace.pt input is resealed first: each frame's payload checksum and header check are
// recomputed (container_mutator.h's JoinContainer), so mutations reach the payload parsers,
// the sideband and the decoder instead of being rejected as damage (the container reader's
// own checks are container_reader_fuzz's). Mutations are record-level (container_mutator.h).
// Seeds (tests/fuzz/corpus/decode/) are small uncompressed emulated recordings with their code
// archived in the container, so they decode without the recording machine's files:
//   gcc -nostdlib -static -no-pie -o tiny tests/fuzz/decode_seed_tiny.S
//   ptrecord --emulate [--bts] --archive --no-compress -o {pt,bts}.pt -- ./tiny
// pt_psbs.pt is the same program with 12000 calls instead of 5 (4 PSBs, for the chunks), and
// the perf.data of the perf_data fuzzer's corpus (perf 6.1, file and pipe mode).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <vector>

#include "container_mutator.h"
#include "decoder/container_input.h"
#include "decoder/decode.h"
#include "decoder/parallel_decode.h"
#include "decoder/perf_data_input.h"
#include "decoder/recording.h"
#include "decoder/sinks.h"
#include "fuzz_code_input.h"
#include "ptkit/container_reader.h"
#include "ptkit/perf_data.h"

namespace dec = ::ptkit::decoder;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ptkit::fuzz::LowerDecodeBounds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using Factory = std::unique_ptr<dec::Sink> (*)(const dec::ProgramImage&, std::FILE*,
                                                 const dec::OutputOptions&);
  static constexpr Factory kFactories[] = {dec::MakeInsnSink,   dec::MakeBranchesSink,
                                           dec::MakeCallsSink,  dec::MakeStatsSink,
                                           dec::MakeFoldedSink, dec::MakeTimelineSink};
  constexpr size_t kOutputs = 2 * (std::size(kFactories) + 1);  // the sinks and packets, x json
  const size_t output = size % kOutputs;
  const size_t mode = size / kOutputs % 4;
  dec::SetBlockDecoderImpl(mode % 2 == 0 ? dec::BlockDecoderImpl::kFast
                                         : dec::BlockDecoderImpl::kLibipt);
  dec::ParallelOptions parallel;
  if (mode >= 2) {
    parallel.jobs = 2;
    parallel.chunk_bytes = 1024;
    parallel.summary_chunk_bytes = 1024;
  }
  dec::SetParallelOptions(parallel);

  std::vector<uint8_t> file(data, data + size);
  absl::StatusOr<dec::Recording> recording;
  if (ptkit::perf::IsPerfData(file)) {
    auto source = ptkit::MemorySource(file, "fuzz.data");
    recording = dec::ReadPerfDataRecording(*source, {});
  } else {
    if (auto records = ptkit::fuzz::SplitContainer(file)) {
      file = ptkit::fuzz::JoinContainer(*records);
    }
    auto reader = ptkit::ContainerReader::Open(ptkit::MemorySource(file, "fuzz.pt"));
    if (!reader.ok()) return 0;
    recording = dec::ReadRecording(*reader, {});
  }
  if (!recording.ok()) return 0;
  // Mapped files are not read from this machine (the seeds from perf.data map its libc and
  // ld.so): "/dev/null/PATH" never exists. Captured code decodes; a missing file is a gap. The
  // image loader has its own fuzzer.
  dec::RecordingOptions options;
  options.sysroot = "/dev/null";
  dec::OutputOptions out;
  out.json = output % 2 != 0;
  out.disasm = !out.json;
  out.diagnostics = ptkit::fuzz::DevNull();
  out.list_problems = true;
  if (output / 2 == std::size(kFactories)) {
    (void)dec::DumpRecordingPackets(*recording, options, ptkit::fuzz::DevNull(), out);
    return 0;
  }
  auto empty = dec::ProgramImage::Create();
  if (!empty.ok()) return 0;
  std::unique_ptr<dec::Sink> sink = kFactories[output / 2](**empty, ptkit::fuzz::DevNull(), out);
  (void)dec::DecodeRecording(*recording, options, *sink);
  return 0;
}
