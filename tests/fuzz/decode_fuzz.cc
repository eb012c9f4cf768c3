// Fuzzes decoding end to end: a recording in memory (a trace.pt, or a perf.data recognised by
// its magic) -> ReadRecording / ReadPerfDataRecording -> DecodeRecording into every output sink
// (insn with disassembly, branches, calls, stats text and JSON, folded, timeline) and the packet
// dump. Nothing may crash, hang or read outside its buffers.
//
// A trace.pt input is resealed first: each frame's payload checksum and header check are
// recomputed (container_mutator.h's JoinContainer), so mutations reach the payload parsers,
// the sideband and the decoder instead of being rejected as damage (the container reader's
// own checks are container_reader_fuzz's). Mutations are record-level (container_mutator.h).
// Seeds (tests/fuzz/corpus/decode/) are small uncompressed emulated recordings with their code
// archived in the container, so they decode without the recording machine's files:
//   gcc -nostdlib -static -no-pie -o tiny tests/fuzz/decode_seed_tiny.S
//   ptrecord --emulate [--bts] --archive --no-compress -o {pt,bts}.pt -- ./tiny
// and the perf.data of the perf_data fuzzer's corpus (perf 6.1, file and pipe mode).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "container_mutator.h"
#include "decoder/container_input.h"
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
  auto empty = dec::ProgramImage::Create();
  if (!empty.ok()) return 0;
  using Factory = std::unique_ptr<dec::Sink> (*)(const dec::ProgramImage&, std::FILE*,
                                                 const dec::OutputOptions&);
  const Factory factories[] = {dec::MakeInsnSink,  dec::MakeBranchesSink, dec::MakeCallsSink,
                               dec::MakeStatsSink, dec::MakeFoldedSink,   dec::MakeTimelineSink};
  // Mapped files are not read from this machine (the seeds from perf.data map its libc and
  // ld.so, which every one of the 13 decodes loaded again): "/dev/null/PATH" never exists.
  // Captured code decodes; a missing file is a gap. The image loader has its own fuzzer.
  dec::RecordingOptions options;
  options.sysroot = "/dev/null";
  // The 13 decodes of this input share one image set (the captured code parsed once, one
  // libipt section cache), as a program that decodes a recording several times would; the
  // next input gets its own.
  dec::RecordingImages images(*recording, options);
  for (int json = 0; json < 2; ++json) {
    dec::OutputOptions out;
    out.json = json != 0;
    out.disasm = json == 0;
    out.diagnostics = ptkit::fuzz::DevNull();
    out.list_problems = true;
    for (Factory make : factories) {
      std::unique_ptr<dec::Sink> sink = make(**empty, ptkit::fuzz::DevNull(), out);
      (void)dec::DecodeRecording(*recording, options, *sink, &images);
    }
    (void)dec::DumpRecordingPackets(*recording, options, ptkit::fuzz::DevNull(), out);
  }
  return 0;
}
