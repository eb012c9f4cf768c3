// The output forms of `ptdecode`: each is a Sink that streams while the trace decodes.
// Text formats and JSON schemas are documented in man/ptdecode.1.
#ifndef PTKIT_DECODER_SINKS_H_
#define PTKIT_DECODER_SINKS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "decoder/decode.h"
#include "decoder/image.h"
#include "decoder/trace_config.h"

namespace ptkit::decoder {

struct OutputOptions {
  bool json = false;       // JSON (stats: one document; others: one object per line)
  bool disasm = false;     // insn: Zydis disassembly (Intel syntax)
  std::string trace_name;  // stats: named in the report
};

// Counts instructions, blocks, events and errors, and nothing else; for tests and benches.
class CountSink : public Sink {
 public:
  explicit CountSink(DecoderKind kind = DecoderKind::kBlock) : kind_(kind) {}
  DecoderKind kind() const override { return kind_; }
  void OnBlock(const pt_block& block) override {
    instructions_ += block.ninsn;
    ++blocks_;
  }
  void OnInsn(const pt_insn& insn) override { ++instructions_; }
  void OnError(const DecodeError& error) override { ++errors_; }
  uint64_t instructions() const { return instructions_; }
  uint64_t blocks() const { return blocks_; }
  uint64_t errors() const { return errors_; }

 private:
  DecoderKind kind_;
  uint64_t instructions_ = 0;
  uint64_t blocks_ = 0;
  uint64_t errors_ = 0;
};

// `insn`: one line per instruction (address, symbol+offset, optional disassembly) with
// markers for enable/disable and other events, gaps and errors.
std::unique_ptr<Sink> MakeInsnSink(const ProgramImage& image, std::FILE* out,
                                   const OutputOptions& options);
// `branches`: one line per taken branch: from, to, kind.
std::unique_ptr<Sink> MakeBranchesSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options);
// `calls`: the call/return tree, indented, with each call's instruction count.
std::unique_ptr<Sink> MakeCallsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options);
// `stats`: per function and per image: instructions (self, inclusive), calls; totals; errors.
std::unique_ptr<Sink> MakeStatsSink(const ProgramImage& image, std::FILE* out,
                                    const OutputOptions& options);
// `folded`: "caller;callee count" lines weighted by instructions, for flamegraph.pl.
std::unique_ptr<Sink> MakeFoldedSink(const ProgramImage& image, std::FILE* out,
                                     const OutputOptions& options);
// `timeline`: Chrome trace-event JSON, one slice per call; ts counts instructions.
std::unique_ptr<Sink> MakeTimelineSink(const ProgramImage& image, std::FILE* out,
                                       const OutputOptions& options);

// `packets`: every packet with its offset, like ptdump; resynchronises after errors.
// Errors: a configuration libipt rejects, output failures.
absl::Status DumpPackets(std::span<const uint8_t> trace, const TraceConfig& config, std::FILE* out,
                         const OutputOptions& options);

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_SINKS_H_
